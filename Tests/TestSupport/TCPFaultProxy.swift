import Foundation
import Synchronization

/// A TCP proxy on 127.0.0.1 that forwards bytes both ways to an upstream port and, on a rule, breaks one
/// connection at the moment its client sends given bytes: for PostgreSQL's protocol, whose statements
/// travel as their text (a `COMMIT`, a statement's SQL the first time a session prepares it), so a rule
/// can pick "the answer to this worker's claim's COMMIT". Where `StallingTCPProxy` only goes silent, this
/// one also resets a connection before the server sees the statement, resets it once the server has
/// answered (the server acted, the client never hears of it), cuts the answer after some bytes, or
/// trickles it (and may then go silent part way through it). `goSilent()` silences the whole path at once:
/// every open connection, and every new one (taken, never answered). `partition()` holds the whole path
/// until `heal()`, as a network partition that heals does: nothing is lost, everything sent meanwhile
/// arrives after.
///
/// Connections are numbered from 1 in accept order (a worker opens its store's connection first, then
/// its lease renewals' at its first heartbeat). `stop()` closes every socket; call it in a `defer`.
public final class TCPFaultProxy: Sendable {
    /// What a rule does to its connection.
    public enum Action: Sendable, Equatable {
        /// Forwards nothing more either way from the triggering bytes on (they never reach the server);
        /// the sockets stay open.
        case stall
        /// Resets the client's connection (RST) without forwarding the triggering bytes, and closes the
        /// server's: the server never sees them.
        case resetBeforeForwarding
        /// Forwards the triggering bytes, then holds the server's answer until its `ReadyForQuery` (the
        /// end of the statement's or pipeline's answer) and resets the client's connection instead of
        /// passing it on: the server acted, the client never hears of it.
        case resetAfterAnswer
        /// Forwards the triggering bytes and `bytes` of the answer, then resets the client's connection:
        /// an answer cut mid-message.
        case cutAnswer(bytes: Int)
        /// Forwards the triggering bytes, then everything the server sends `bytes` at a time with
        /// `intervalMs` between writes; with `silentAfter`, only that many bytes, and then nothing more
        /// either way with the sockets left open (a server or path gone quiet part way through an answer).
        case trickleAnswer(bytes: Int, intervalMs: Int, silentAfter: Int? = nil)
    }

    /// One fault: fires on the `nth` connection-matching time a client sends `marker` after it sent every
    /// one of `after` (in order, on the same connection), at most once.
    public struct Rule: Sendable {
        public var marker: String
        public var after: [String]
        /// Only this connection (from 1, in accept order); nil: any.
        public var connection: Int?
        public var nth: Int
        public var action: Action

        public init(marker: String, after: [String] = [], connection: Int? = nil, nth: Int = 1, action: Action) {
            self.marker = marker
            self.after = after
            self.connection = connection
            self.nth = max(1, nth)
            self.action = action
        }
    }

    /// The port it listens on.
    public let port: Int
    private let upstreamPort: Int
    private let listener: Int32
    private let state = Mutex<State>(State())

    private struct State {
        var rules: [Rule] = []
        var seen: [Int] = []
        var fired: [Int: String] = [:]
        /// The connections not yet closed.
        var links: [Link] = []
        var accepted = 0
        var refusing = false
        /// While true, new connections are accepted and held without a word (see `goSilent`).
        var swallowing = false
        /// The connections accepted while swallowing: never forwarded, closed by `stop`.
        var swallowed: [Int32] = []
        var stopped = false
        /// While true, nothing is passed on either way, and new connections wait (see `partition`).
        var partitioned = false
    }

    /// When a `trickleAnswer(…, silentAfter:)` rule's connection went silent (nil: none has yet).
    public var wentSilentAt: Date? { silencedAt.withLock { $0 } }
    private let silencedAt = Mutex<Date?>(nil)

    /// The rules that fired, by index, with the connection they fired on.
    public var firedRules: [Int: String] { state.withLock { $0.fired } }

    /// How many connections were accepted so far.
    public var acceptedConnections: Int { state.withLock { $0.accepted } }

    /// Listens on a free port of 127.0.0.1 and forwards to `127.0.0.1:upstreamPort`.
    public init(upstreamPort: Int, rules: [Rule] = []) throws {
        self.upstreamPort = upstreamPort
        (listener, port) = try LoopbackTCP.listen("the TCP fault proxy")
        state.withLock { state in
            state.rules = rules
            state.seen = Array(repeating: 0, count: rules.count)
        }
        Thread.detachNewThread { [self] in
            defer { acceptDone.signal() }
            acceptLoop()
        }
    }

    /// Signalled when the accept loop has returned (it no longer touches the listener).
    private let acceptDone = DispatchSemaphore(value: 0)

    /// Adds a rule for bytes sent from now on.
    public func add(_ rule: Rule) {
        state.withLock { state in
            state.rules.append(rule)
            state.seen.append(0)
        }
    }

    /// While true, every new connection is reset as soon as it is accepted (a server that refuses).
    public func refuseNewConnections(_ refusing: Bool) {
        state.withLock { $0.refusing = refusing }
    }

    /// The whole path goes silent, as behind a firewall that drops every packet or a host gone without a
    /// reset: every open connection forwards nothing more either way (its sockets stay open), and every
    /// new one is accepted and then never answered nor passed on (a client's connect succeeds, its
    /// start-up message waits for ever). Until `stop()`.
    public func goSilent() {
        let links = state.withLock { state -> [Link] in
            state.swallowing = true
            return state.links
        }
        for link in links { link.mode.withLock { $0 = .silent } }
    }

    /// The whole path stops carrying bytes until `heal()`, as a network partition does: whatever either
    /// side sends is held (what a pump has read, and behind it the sockets' buffers), and a new connection
    /// is accepted and reaches the server only once healed. Unlike `goSilent`, nothing is dropped: TCP
    /// delivers what was sent across a partition once it heals.
    public func partition() {
        state.withLock { $0.partitioned = true }
    }

    /// Ends `partition()`: what was held is passed on, and waiting connections reach the server.
    public func heal() {
        state.withLock { $0.partitioned = false }
    }

    /// Returns once the path is not partitioned (or the proxy stopped: then false).
    private func throughPartition() -> Bool {
        while true {
            let (partitioned, stopped) = state.withLock { ($0.partitioned, $0.stopped) }
            if stopped { return false }
            if !partitioned { return true }
            usleep(5_000)
        }
    }

    /// Closes the listener and every connection.
    ///
    /// A descriptor is closed only once no thread of the proxy can use it any more: the sockets are shut
    /// down first (which wakes every pump), and closed after both pumps of their connection returned.
    /// Closed at once, a descriptor number was reused by the test process's next socket — another
    /// test's libpq connection — while a pump trickling an answer still wrote to it: that connection's
    /// start-up read "received x" (a stopped proxy's `repeat('x', …)` answer) and both tests failed.
    /// A second call does nothing: the listener's number may name another socket by then.
    public func stop() {
        let taken = state.withLock { state -> ([Link], [Int32])? in
            guard !state.stopped else { return nil }
            state.stopped = true
            defer {
                state.links = []
                state.swallowed = []
            }
            return (state.links, state.swallowed)
        }
        guard let (links, swallowed) = taken else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        if acceptDone.wait(timeout: .now() + 30) == .success { close(listener) }
        for socket in swallowed { Self.reset(socket) }
        for link in links {
            shutdown(link.client, Int32(SHUT_RDWR))
            shutdown(link.upstream, Int32(SHUT_RDWR))
        }
        for link in links {
            // A pump still running after that long keeps its descriptors: better leaked than reused.
            guard link.requestsDone.wait(timeout: .now() + 30) == .success,
                  link.answersDone.wait(timeout: .now() + 30) == .success else { continue }
            close(link.client)
            close(link.upstream)
        }
    }

    // MARK: - Connections

    /// One proxied connection: what a fired rule asked for, shared by its two pumps.
    private final class Link: Sendable {
        let client: Int32
        let upstream: Int32
        let number: Int
        let mode = Mutex<Mode>(.forwarding)
        /// Signalled when the server-to-client pump has returned (it no longer touches either socket).
        let answersDone = DispatchSemaphore(value: 0)
        /// Signalled when the client-to-server pump has returned.
        let requestsDone = DispatchSemaphore(value: 0)

        enum Mode: Equatable {
            case forwarding
            case silent
            case swallowingAnswer
            case cutting(left: Int)
            /// `left`: how many more bytes go through before the connection goes silent (nil: all).
            case trickling(bytes: Int, intervalMs: Int, left: Int?)
            case reset
        }

        init(client: Int32, upstream: Int32, number: Int) {
            self.client = client
            self.upstream = upstream
            self.number = number
        }
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            let (number, refusing, swallowing, stopped) = state.withLock { state -> (Int, Bool, Bool, Bool) in
                if !state.refusing && !state.stopped { state.accepted += 1 }
                if state.swallowing && !state.refusing && !state.stopped { state.swallowed.append(client) }
                return (state.accepted, state.refusing, state.swallowing, state.stopped)
            }
            if stopped {
                close(client)
                return
            }
            if refusing {
                Self.reset(client)
                continue
            }
            if swallowing { continue }
            if state.withLock({ $0.partitioned }) {
                // Taken; it reaches the server once the partition heals (reset should the proxy stop first).
                Thread.detachNewThread { [self] in
                    if throughPartition() { forward(client, number: number) } else { Self.reset(client) }
                }
                continue
            }
            forward(client, number: number)
        }
    }

    /// Connects `client` to the server and starts its two pumps.
    private func forward(_ client: Int32, number: Int) {
        let (upstream, connected) = LoopbackTCP.connect(port: upstreamPort)
        guard connected else {
            close(upstream)
            Self.reset(client)
            return
        }
        let link = Link(client: client, upstream: upstream, number: number)
        state.withLock { $0.links.append(link) }
        Thread.detachNewThread { [self] in
            defer { link.requestsDone.signal() }
            clientToServer(link)
        }
        Thread.detachNewThread { [self] in serverToClient(link) }
    }

    /// Forwards what the client sends, watching it for the rules' markers.
    private func clientToServer(_ link: Link) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var tail: [UInt8] = []
        var progress: [Int: Int] = [:]  // rule index → how many of its `after` markers were seen
        while true {
            let count = buffer.withUnsafeMutableBytes { read(link.client, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if link.mode.withLock({ $0 }) == .reset || count <= 0 {
                finish(link, reset: link.mode.withLock { $0 } == .reset)
                return
            }
            // A marker may straddle two reads: the end of the last one is searched with this one.
            let chunk = Array(buffer[0..<count])
            let action = state.withLock { state -> Action? in
                for (index, rule) in state.rules.enumerated() where state.fired[index] == nil {
                    if let connection = rule.connection, connection != link.number { continue }
                    var done = progress[index] ?? 0
                    while done < rule.after.count && LoopbackTCP.contains(Self.straddling(tail, chunk, rule.after[done]), Array(rule.after[done].utf8)) {
                        done += 1
                    }
                    progress[index] = done
                    guard done == rule.after.count,
                          LoopbackTCP.contains(Self.straddling(tail, chunk, rule.marker), Array(rule.marker.utf8)) else { continue }
                    state.seen[index] += 1
                    guard state.seen[index] >= rule.nth else { continue }
                    state.fired[index] = "connection \(link.number)"
                    return rule.action
                }
                return nil
            }
            tail = Array((tail + chunk).suffix(256))
            switch action {
            case .stall?:
                link.mode.withLock { $0 = .silent }
            case .resetBeforeForwarding?:
                link.mode.withLock { $0 = .reset }
                finish(link, reset: true)
                return
            case .resetAfterAnswer?:
                link.mode.withLock { $0 = .swallowingAnswer }
            case .cutAnswer(let bytes)?:
                link.mode.withLock { $0 = .cutting(left: bytes) }
            case .trickleAnswer(let bytes, let intervalMs, let silentAfter)?:
                link.mode.withLock { $0 = .trickling(bytes: max(1, bytes), intervalMs: intervalMs, left: silentAfter) }
            case nil:
                break
            }
            if link.mode.withLock({ $0 }) == .silent {
                // Hold everything from here on; wait for the proxy to stop or the client to leave.
                while true {
                    let more = buffer.withUnsafeMutableBytes { read(link.client, $0.baseAddress, $0.count) }
                    if more < 0 && errno == EINTR { continue }
                    if more <= 0 { return }
                }
            }
            guard throughPartition(), Self.writeAll(link.upstream, chunk) else {
                finish(link, reset: link.mode.withLock { $0 } == .reset)
                return
            }
        }
    }

    /// Forwards what the server sends, as the connection's mode says.
    private func serverToClient(_ link: Link) {
        defer { link.answersDone.signal() }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var held: [UInt8] = []
        while true {
            let count = buffer.withUnsafeMutableBytes { read(link.upstream, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            let mode = link.mode.withLock { $0 }
            if mode == .reset { return }
            guard count > 0 else {
                if mode != .silent { shutdown(link.client, Int32(SHUT_WR)) }
                return
            }
            let chunk = Array(buffer[0..<count])
            switch mode {
            case .forwarding:
                guard throughPartition(), Self.writeAll(link.client, chunk) else { return }
            case .silent:
                continue
            case .swallowingAnswer:
                held += chunk
                // ReadyForQuery: 'Z', length 5, a status byte.
                if LoopbackTCP.contains(held, [0x5A, 0, 0, 0, 5]) {
                    resetFromServerSide(link)
                    return
                }
            case .cutting(let left):
                _ = Self.writeAll(link.client, Array(chunk.prefix(left)))
                if chunk.count >= left {
                    resetFromServerSide(link)
                    return
                }
                link.mode.withLock { $0 = .cutting(left: left - chunk.count) }
            case .trickling(let bytes, let intervalMs, var left):
                var offset = 0
                while offset < chunk.count && left != 0 {
                    usleep(UInt32(intervalMs) * 1_000)
                    let end = min(chunk.count, offset + min(bytes, left ?? bytes))
                    guard Self.writeAll(link.client, Array(chunk[offset..<end])) else { return }
                    left = left.map { $0 - (end - offset) }
                    offset = end
                }
                let silent = left == 0
                if silent { silencedAt.withLock { $0 = Date() } }
                link.mode.withLock { $0 = silent ? .silent : .trickling(bytes: bytes, intervalMs: intervalMs, left: left) }
            case .reset:
                return
            }
        }
    }

    /// The server-side pump decided to reset: the client-side pump, woken, closes the client's socket.
    private func resetFromServerSide(_ link: Link) {
        link.mode.withLock { $0 = .reset }
        Self.setAbortiveClose(link.client)
        shutdown(link.upstream, Int32(SHUT_RDWR))
        // Wakes the client-side pump's read without sending anything; it then closes (RST).
        shutdown(link.client, Int32(SHUT_RD))
    }

    /// Ends a connection from the client-side pump once the server-side one has returned: with a
    /// reset, the client's socket is closed with RST.
    private func finish(_ link: Link, reset: Bool) {
        if reset {
            Self.setAbortiveClose(link.client)
            shutdown(link.upstream, Int32(SHUT_RDWR))
            link.answersDone.wait()
            link.answersDone.signal()   // for `stop`, which may wait on it too
            // Whoever takes the link out of the list closes its descriptors: here, or `stop` (once
            // this pump has returned).
            guard forget(link) else { return }
            close(link.client)
            close(link.upstream)
        } else {
            shutdown(link.upstream, Int32(SHUT_WR))
        }
    }

    /// Takes `link` out of the list; false when `stop` took it first.
    private func forget(_ link: Link) -> Bool {
        state.withLock { state in
            guard let index = state.links.firstIndex(where: { $0 === link }) else { return false }
            state.links.remove(at: index)
            return true
        }
    }

    // MARK: - Sockets

    private static func reset(_ socket: Int32) {
        setAbortiveClose(socket)
        close(socket)
    }

    private static func setAbortiveClose(_ socket: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        setsockopt(socket, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    }

    private static func writeAll(_ socket: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let written = bytes.withUnsafeBytes { send(socket, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return false }
            sent += written
        }
        return true
    }

    /// The bytes a marker is looked for in: the new ones, after as many of the last read's as could
    /// begin it (fewer than the marker's length, so a marker wholly in the last read is not seen twice).
    private static func straddling(_ tail: [UInt8], _ chunk: [UInt8], _ marker: String) -> [UInt8] {
        Array(tail.suffix(max(0, marker.utf8.count - 1))) + chunk
    }
}
