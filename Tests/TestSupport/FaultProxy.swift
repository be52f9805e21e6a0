import Foundation
#if canImport(Glibc)
import Glibc
#endif

// A fault-injecting HTTP/1.1 proxy for tests: no real server resets connections, stalls or lies on demand.
//
// Shape: one accept thread, one thread per client connection. Every request read from a client is
// forwarded on a fresh upstream connection (`Connection: close`), the whole response is read, and it
// is sent back to the client as HTTP/1.1 with a `Content-Length`, so the client's connection stays
// alive even when the upstream closes after each response (the GCS emulator speaks HTTP/1.0). That
// is what lets a test cut a request on a *reused* keep-alive connection, whatever the upstream.
//
// Rules say which requests to touch ("the 2nd PUT whose path holds upload_id, on a reused
// connection") and what to do to them (reset mid-body, forward then reset, rewrite the response,
// stall, trickle…). Everything is buffered in memory: meant for test payloads of a few MiB.
// Loopback only: it listens on 127.0.0.1 and forwards to 127.0.0.1.

// MARK: - Messages

/// One header line of a proxied message.
public struct ProxyHeader: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// An HTTP/1.1 request or response as the proxy handles it: start line, headers in order, body.
public struct ProxyMessage: Sendable, Equatable {
    /// `PUT /path HTTP/1.1` or `HTTP/1.1 308 Resume Incomplete`.
    public var startLine: String
    public var headers: [ProxyHeader]
    public var body: Data

    public init(startLine: String, headers: [ProxyHeader] = [], body: Data = Data()) {
        self.startLine = startLine
        self.headers = headers
        self.body = body
    }

    /// A response with the given status, headers and body.
    public static func response(_ status: Int, reason: String = "Fault", headers: [ProxyHeader] = [],
                                body: Data = Data()) -> ProxyMessage {
        ProxyMessage(startLine: "HTTP/1.1 \(status) \(reason)", headers: headers, body: body)
    }

    /// A request's method (the first word of the start line).
    public var method: String { startLine.split(separator: " ").first.map(String.init) ?? "" }

    /// A request's target (path and query).
    public var target: String {
        let parts = startLine.split(separator: " ")
        return parts.count > 1 ? String(parts[1]) : ""
    }

    /// A response's status code (0 when the start line has none).
    public var status: Int {
        let parts = startLine.split(separator: " ")
        return parts.count > 1 ? Int(parts[1]) ?? 0 : 0
    }

    /// The first value of a header (names compare case-insensitively).
    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// Replaces every header of that name with one line (or removes them when `value` is nil).
    public mutating func setHeader(_ name: String, _ value: String?) {
        headers.removeAll { $0.name.caseInsensitiveCompare(name) == .orderedSame }
        if let value { headers.append(ProxyHeader(name, value)) }
    }
}

// MARK: - Rules

/// Which requests a rule applies to. Every field left nil matches anything.
public struct RequestMatch: Sendable {
    public var method: String?
    /// A substring of the request target (path and query).
    public var pathContains: String?
    /// A header whose value holds a substring, e.g. `("Content-Range", "bytes 0-")`.
    public var headerContains: ProxyHeader?
    /// Only requests that are not the first on their client connection (a reused keep-alive connection).
    public var reusedConnection: Bool
    /// The first matching request the rule acts on: 1 is the first, 2 lets one through first.
    public var nth: Int
    /// Anything else, judged on the request line and headers (the body has not been read yet).
    public var predicate: (@Sendable (ProxyMessage) -> Bool)?

    public init(method: String? = nil, pathContains: String? = nil, headerContains: ProxyHeader? = nil,
                reusedConnection: Bool = false, nth: Int = 1, predicate: (@Sendable (ProxyMessage) -> Bool)? = nil) {
        self.method = method
        self.pathContains = pathContains
        self.headerContains = headerContains
        self.reusedConnection = reusedConnection
        self.nth = max(1, nth)
        self.predicate = predicate
    }

    /// Every request.
    public static let any = RequestMatch()

    func matches(_ head: ProxyMessage, indexOnConnection: Int) -> Bool {
        if let method, head.method != method { return false }
        if let pathContains, !head.target.contains(pathContains) { return false }
        if let headerContains, head.header(headerContains.name)?.contains(headerContains.value) != true { return false }
        if reusedConnection && indexOnConnection < 2 { return false }
        if let predicate, !predicate(head) { return false }
        return true
    }
}

/// What to do to a matching request. Several rules may act on one request: rewrites apply in rule
/// order; the first reset, stall or synthesized answer of each phase wins.
public enum Fault: Sendable {
    // Request phase: while the request body arrives.

    /// Reads `afterBytes` of the request body, then resets the client connection (`SO_LINGER` 0):
    /// nothing reaches the upstream. At or past the body's length it resets after the whole body.
    case resetInRequestBody(afterBytes: Int)
    /// Stops reading the request body after `afterBytes` for `seconds` (or until the client leaves).
    case stallInRequestBody(afterBytes: Int, seconds: Double)
    /// Reads the request body `bytes` at a time with `interval` seconds between reads, into a receive
    /// buffer made small (a server or middlebox reading slowly). The client still writes its socket's send
    /// buffer full at once, and then sees its body move only as that buffer drains.
    case trickleRequestBody(bytes: Int, interval: Double)
    /// Changes the request before it is forwarded (e.g. flips a body byte).
    case rewriteRequest(@Sendable (inout ProxyMessage) -> Void)

    // Instead of the upstream.

    /// Answers with this response without forwarding the request.
    case respond(ProxyMessage)
    /// Answers with this response as soon as the request's head is read — none of its body — then
    /// closes the connection (a server that decides from the headers alone).
    case respondBeforeBody(ProxyMessage)
    /// Answers with exactly these bytes, head and body as written (no header added, removed or reframed:
    /// a `Content-Length` no real server sends), then keeps the connection open until the client leaves
    /// (at most `seconds`): a server that waits for the client to read what it framed.
    case respondAsWritten(Data, seconds: Double)

    // Response phase: after the upstream answered (it has acted on the request).

    /// Changes the upstream's response (`request` is what was forwarded) before it is sent.
    case rewriteResponse(@Sendable (_ request: ProxyMessage, _ response: inout ProxyMessage) -> Void)
    /// Resets the client connection before any byte of the response: the server acted, the client
    /// never hears of it.
    case resetBeforeResponse
    /// Sends `afterBytes` of the response (head included), then resets the connection.
    case resetInResponse(afterBytes: Int)
    /// Sends `afterBytes` of the response (head included), then closes cleanly: a truncated response.
    case closeInResponse(afterBytes: Int)
    /// Sends `afterBytes` of the response, then nothing for `seconds` (or until the client leaves), then the rest.
    case stallInResponse(afterBytes: Int, seconds: Double)
    /// Sends the response `bytes` at a time with `interval` seconds between writes.
    case trickleResponse(bytes: Int, interval: Double)
    /// Sends the response with neither a `Content-Length` nor chunked framing, then closes the
    /// connection: the close marks the body's end (as over HTTP/1.0). With `closeInResponse` the client
    /// cannot tell the cut from the end.
    case unframedResponse
    /// Sends the response with a `Content-Length` of its body's length plus `by` (a server that
    /// miscounts). Claiming more than the body, the connection is closed after the body (the client
    /// waits for bytes that never come); claiming less, it is kept, so the bytes past the length are
    /// what the next request on it reads first.
    case wrongContentLength(by: Int)

    var label: String {
        switch self {
        case .resetInRequestBody(let bytes): "reset in request body after \(bytes)"
        case .stallInRequestBody(let bytes, let seconds): "stall request body after \(bytes) for \(seconds)s"
        case .trickleRequestBody(let bytes, let interval): "trickle request body \(bytes) every \(interval)s"
        case .rewriteRequest: "rewrite request"
        case .respond(let message): "respond \(message.status)"
        case .respondBeforeBody(let message): "respond \(message.status) before the body"
        case .respondAsWritten(let bytes, _): "respond \(bytes.count) bytes as written"
        case .rewriteResponse: "rewrite response"
        case .resetBeforeResponse: "reset before response"
        case .resetInResponse(let bytes): "reset in response after \(bytes)"
        case .closeInResponse(let bytes): "close in response after \(bytes)"
        case .stallInResponse(let bytes, let seconds): "stall response after \(bytes) for \(seconds)s"
        case .trickleResponse(let bytes, let interval): "trickle \(bytes) every \(interval)s"
        case .unframedResponse: "response without a length"
        case .wrongContentLength(let delta): "Content-Length off by \(delta)"
        }
    }
}

/// A fault applied to the requests `match` selects, `times` times (then the rule is spent).
public struct FaultRule: Sendable {
    public var match: RequestMatch
    public var fault: Fault
    public var times: Int

    public init(_ match: RequestMatch, _ fault: Fault, times: Int = 1) {
        self.match = match
        self.fault = fault
        self.times = times
    }
}

/// One request as the proxy saw and answered it.
public struct ProxyExchange: Sendable {
    /// The client connection, numbered from 1 in accept order.
    public var connection: Int
    /// 1 for the first request on its connection; 2 or more on a reused connection.
    public var indexOnConnection: Int
    /// The request as received (the body as far as it was read; capped at 1 MiB).
    public var request: ProxyMessage
    /// Body bytes read from the client.
    public var requestBodyBytes: Int
    /// Whether the request reached the upstream.
    public var forwarded: Bool
    /// The response as the proxy meant to send it (nil when it reset before having one).
    public var response: ProxyMessage?
    /// The faults applied, described.
    public var faults: [String]
    /// Seconds from the request's head to the end of its handling (answered, cut or abandoned).
    public var duration: TimeInterval
}

// MARK: - The proxy

/// Picks faults for one request besides the rules' (applied after theirs): given the request's head,
/// its client connection's number (from 1, in accept order) and its index on that connection (from 1).
/// A test drawing faults at random seeds its generator from the connection number, so a schedule can
/// be replayed.
public typealias FaultChooser = @Sendable (_ head: ProxyMessage, _ connection: Int, _ indexOnConnection: Int) -> [Fault]

/// A loopback HTTP proxy in front of `127.0.0.1:upstreamPort` that injects faults by rule.
///
/// ```swift
/// let proxy = try FaultProxy(upstreamPort: server.port, rules: [
///     FaultRule(RequestMatch(method: "PUT", reusedConnection: true), .resetInRequestBody(afterBytes: 100_000)),
/// ])
/// defer { proxy.stop() }
/// // talk to proxy.baseURL instead of server.baseURL; inspect proxy.exchanges afterwards
/// ```
public final class FaultProxy: @unchecked Sendable {
    // @unchecked: mutable state (`rules`, `fired`, `log`, descriptors) is guarded by `lock`.

    /// The port the proxy listens on (127.0.0.1).
    public let port: Int
    /// The upstream it forwards to (127.0.0.1).
    public let upstreamPort: Int
    /// `http://127.0.0.1:PORT`
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    private let listener: Int32
    private let lock = NSLock()
    private var rules: [FaultRule]
    private let chooser: FaultChooser?
    /// Whether the log keeps request and response bodies (up to 1 MiB each); a long soak keeps heads only.
    private let recordsBodies: Bool
    private var seen: [Int] = []
    private var fired: [Int] = []
    private var log: [ProxyExchange] = []
    /// Exchanges whose request head was read and that are not recorded yet.
    private var inProgress = 0
    private var clients: Set<Int32> = []
    private var connectionCount = 0
    private var stopped = false
    private let running = DispatchGroup()
    /// Signalled when the accept loop has returned (it no longer touches the listener).
    private let acceptDone = DispatchSemaphore(value: 0)

    /// Starts listening on an ephemeral loopback port.
    /// - Parameters:
    ///   - chooser: faults for each request besides the rules' (see `FaultChooser`).
    ///   - recordsBodies: false to keep only heads and byte counts in `exchanges` (many large transfers).
    public init(upstreamPort: Int, rules: [FaultRule] = [], chooser: FaultChooser? = nil, recordsBodies: Bool = true) throws {
        self.upstreamPort = upstreamPort
        self.rules = rules
        self.chooser = chooser
        self.recordsBodies = recordsBodies
        seen = Array(repeating: 0, count: rules.count)
        fired = Array(repeating: 0, count: rules.count)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestServerError("fault proxy: socket() failed: errno \(errno)") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = loopbackAddress(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw TestServerError("fault proxy: cannot listen on 127.0.0.1: errno \(errno)")
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        running.enter()
        let thread = Thread { [self] in
            acceptLoop()
            acceptDone.signal()
            running.leave()
        }
        thread.start()
    }

    deinit { stop() }

    /// Adds a rule (applies to requests that arrive from now on).
    public func add(_ rule: FaultRule) {
        lock.withLock {
            rules.append(rule)
            seen.append(0)
            fired.append(0)
        }
    }

    /// Every request so far, in the order they arrived.
    /// The exchanges so far. An exchange is recorded once its answer has been sent, which is just
    /// after the client may already have it: reading waits (up to 5 s) for exchanges in progress to be
    /// recorded, so a test that looks right after its last response sees that response's exchange.
    public var exchanges: [ProxyExchange] {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if let settled: [ProxyExchange] = lock.withLock({ inProgress == 0 ? log : nil }) { return settled }
            usleep(1_000)
        }
        return lock.withLock { log }
    }

    /// How many times each rule acted, in rule order.
    public var firedCounts: [Int] { lock.withLock { fired } }

    /// Stops accepting, cuts every client connection and waits (up to 5 s) for the threads to end.
    ///
    /// The sockets are shut down while the lock is held: a connection's thread takes its descriptor out
    /// of `clients` under the lock before closing it, so every number in the set still names this
    /// proxy's socket. Shut down after the lock was let go, a number closed in between could already
    /// name another test's socket — another proxy's listener, which then refused its client.
    public func stop() {
        let first: Bool = lock.withLock {
            if stopped { return false }
            stopped = true
            shutdown(listener, Int32(SHUT_RDWR))
            for fd in clients { shutdown(fd, Int32(SHUT_RDWR)) }
            return true
        }
        guard first else { return }
        _ = running.wait(timeout: .now() + 5)
        // The accept loop may still be between two calls (a thread not yet scheduled): the listener is
        // closed only once it has returned, or left open for ever rather than closed under it.
        if acceptDone.wait(timeout: .now() + 30) == .success { close(listener) }
    }

    // MARK: Accepting

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            let number: Int? = lock.withLock {
                if stopped { return nil }
                connectionCount += 1
                clients.insert(fd)
                return connectionCount
            }
            guard let number else {
                close(fd)
                return
            }
            var yes: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
            running.enter()
            let thread = Thread { [self] in
                serve(fd, connection: number)
                running.leave()
            }
            thread.start()
        }
    }

    // MARK: One client connection

    /// How a connection's turn ended.
    private enum Ending {
        case keepAlive
        /// Close normally (FIN).
        case close
        /// Close with RST.
        case reset
    }

    private func serve(_ fd: Int32, connection: Int) {
        let reader = SocketReader(fd)
        var index = 0
        var ending = Ending.keepAlive
        while ending == .keepAlive {
            guard let head = reader.readHead() else {
                ending = .close
                break
            }
            index += 1
            ending = handle(head, reader: reader, fd: fd, connection: connection, index: index)
        }
        lock.withLock { _ = clients.remove(fd) }
        if ending == .reset { abortiveClose(fd) } else { close(fd) }
    }

    /// Picks the faults for a request and counts them against their rules.
    private func faults(for head: ProxyMessage, connection: Int, index: Int) -> [Fault] {
        let ruled: [Fault] = lock.withLock {
            var chosen: [Fault] = []
            for position in rules.indices where rules[position].match.matches(head, indexOnConnection: index) {
                seen[position] += 1
                guard seen[position] >= rules[position].match.nth, fired[position] < rules[position].times else { continue }
                fired[position] += 1
                chosen.append(rules[position].fault)
            }
            return chosen
        }
        return ruled + (chooser?(head, connection, index) ?? [])
    }

    private func record(_ exchange: ProxyExchange) {
        var entry = exchange
        if !recordsBodies {
            entry.request.body = Data()
            entry.response?.body = Data()
        }
        if entry.request.body.count > 1 << 20 { entry.request.body = entry.request.body.prefix(1 << 20) }
        if let body = entry.response?.body, body.count > 1 << 20 { entry.response?.body = body.prefix(1 << 20) }
        lock.withLock {
            log.append(entry)
            inProgress -= 1
        }
    }

    private func handle(_ headText: String, reader: SocketReader, fd: Int32, connection: Int, index: Int) -> Ending {
        guard var request = parseHead(headText) else {
            _ = sendAll(fd, serialize(.response(400, reason: "Bad Request"), method: "GET"))
            return .close
        }
        let faults = faults(for: request, connection: connection, index: index)
        lock.withLock { inProgress += 1 }
        let started = Date()
        var exchange = ProxyExchange(connection: connection, indexOnConnection: index, request: request, requestBodyBytes: 0,
                                     forwarded: false, response: nil, faults: faults.map(\.label), duration: 0)
        defer {
            exchange.duration = Date().timeIntervalSince(started)
            record(exchange)
        }

        for fault in faults {
            guard case .respondBeforeBody(let early) = fault else { continue }
            exchange.response = early
            // `Connection: close` said (serialize drops hop-by-hop headers): the answer is final.
            var framed = serialize(early, method: request.method)
            framed.insert(contentsOf: Data("Connection: close\r\n".utf8), at: framed.range(of: Data("\r\n".utf8))!.upperBound)
            _ = sendAll(fd, framed)
            // Time for the client to read the answer before the close (which resets: its body is unread).
            Thread.sleep(forTimeInterval: 0.2)
            return .close
        }

        // Request body, with a reset or a stall part-way.
        let chunked = request.header("Transfer-Encoding")?.lowercased().contains("chunked") == true
        if chunked {
            guard let body = reader.readChunkedBody() else { return .close }
            request.body = body
        } else {
            let length = Int(request.header("Content-Length") ?? "0") ?? 0
            var cut: Int?
            var stall: (at: Int, seconds: Double)?
            var trickle: (bytes: Int, interval: Double)?
            for fault in faults {
                switch fault {
                case .resetInRequestBody(let bytes) where cut == nil: cut = min(bytes, length)
                case .stallInRequestBody(let bytes, let seconds) where stall == nil: stall = (min(bytes, length), seconds)
                case .trickleRequestBody(let bytes, let interval) where trickle == nil: trickle = (max(1, bytes), interval)
                default: break
                }
            }
            if let trickle {
                var small: Int32 = Int32(max(2048, trickle.bytes))
                setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
                while request.body.count < (cut ?? length) {
                    guard let piece = reader.readSome(atMost: min(trickle.bytes, (cut ?? length) - request.body.count)) else {
                        exchange.request.body = request.body
                        exchange.requestBodyBytes = request.body.count
                        return .close
                    }
                    request.body.append(piece)
                    if request.body.count < (cut ?? length) { usleep(useconds_t(trickle.interval * 1_000_000)) }
                }
            }
            if let stall, stall.at < (cut ?? length) {
                guard let first = reader.read(exactly: stall.at) else { return .close }
                request.body = first
                waitForClientToLeave(fd, seconds: stall.seconds, readingPaused: true)
            }
            let rest = reader.read(exactly: (cut ?? length) - request.body.count)
            request.body.append(rest ?? Data())
            exchange.request.body = request.body
            exchange.requestBodyBytes = request.body.count
            if rest == nil { return .close }
            if cut != nil { return .reset }
        }
        exchange.request.body = request.body
        exchange.requestBodyBytes = request.body.count

        for fault in faults {
            if case .rewriteRequest(let rewrite) = fault { rewrite(&request) }
        }
        for fault in faults {
            guard case .respondAsWritten(let bytes, let seconds) = fault else { continue }
            guard sendAll(fd, bytes) else { return .close }
            waitForClientToLeave(fd, seconds: seconds, readingPaused: false)
            return .close
        }

        // The response: synthesized, or the upstream's.
        var response: ProxyMessage
        if let answer = faults.lazy.compactMap({ fault -> ProxyMessage? in
            if case .respond(let message) = fault { return message }
            return nil
        }).first {
            response = answer
        } else {
            response = forward(request) ?? .response(502, reason: "Bad Gateway", body: Data("fault proxy: upstream failed".utf8))
            exchange.forwarded = true
        }
        for fault in faults {
            if case .rewriteResponse(let rewrite) = fault { rewrite(request, &response) }
        }
        exchange.response = response

        // Delivery, with a cut, a stall or a trickle.
        let unframed = faults.contains { if case .unframedResponse = $0 { true } else { false } }
        let misstated = faults.lazy.compactMap { fault -> Int? in
            if case .wrongContentLength(let delta) = fault { return delta }
            return nil
        }.first
        var bytes = serialize(response, method: request.method, unframed: unframed, lengthOffBy: misstated)
        var cutAt: (Int, Ending)?
        var stallAt: (Int, Double)?
        var trickle: (Int, Double)?
        for fault in faults {
            switch fault {
            case .resetBeforeResponse where cutAt == nil: cutAt = (0, .reset)
            case .resetInResponse(let count) where cutAt == nil: cutAt = (min(count, bytes.count), .reset)
            case .closeInResponse(let count) where cutAt == nil: cutAt = (min(count, bytes.count), .close)
            case .stallInResponse(let count, let seconds) where stallAt == nil: stallAt = (min(count, bytes.count), seconds)
            case .trickleResponse(let count, let interval) where trickle == nil: trickle = (max(1, count), interval)
            default: break
            }
        }
        if let (count, _) = cutAt { bytes = bytes.prefix(count) }
        var sent = 0
        if let (at, seconds) = stallAt, at < bytes.count {
            guard deliver(fd, bytes[0..<at], trickle: trickle) else { return .close }
            waitForClientToLeave(fd, seconds: seconds, readingPaused: false)
            sent = at
        }
        guard deliver(fd, bytes[sent...], trickle: trickle) else { return .close }
        if let (_, ending) = cutAt { return ending }
        if unframed { return .close }
        if let misstated, misstated > 0 { return .close }
        if request.header("Connection")?.lowercased() == "close" { return .close }
        return .keepAlive
    }

    private func deliver(_ fd: Int32, _ bytes: Data.SubSequence, trickle: (Int, Double)?) -> Bool {
        guard let (size, interval) = trickle else { return sendAll(fd, Data(bytes)) }
        var position = bytes.startIndex
        while position < bytes.endIndex {
            let end = min(position + size, bytes.endIndex)
            guard sendAll(fd, Data(bytes[position..<end])) else { return false }
            position = end
            if position < bytes.endIndex { usleep(useconds_t(interval * 1_000_000)) }
        }
        return true
    }

    /// Waits up to `seconds`, returning early when the client closes or resets the connection, or the
    /// proxy stops. (`POLLRDHUP` is Linux's "peer closed its side", which unread body bytes do not hide.)
    private func waitForClientToLeave(_ fd: Int32, seconds: Double, readingPaused: Bool) {
        let pollReadHangUp: Int16 = 0x2000   // POLLRDHUP, not exported to Swift by Glibc
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if lock.withLock({ stopped }) { return }
            var item = pollfd(fd: fd, events: readingPaused ? pollReadHangUp : Int16(POLLIN) | pollReadHangUp, revents: 0)
            let slice = Int32(min(100, max(1, deadline.timeIntervalSinceNow * 1000)))
            let ready = poll(&item, 1, slice)
            if ready > 0 && (item.revents & (pollReadHangUp | Int16(POLLHUP) | Int16(POLLERR) | Int16(POLLIN))) != 0 { return }
        }
    }

    // MARK: Upstream

    /// Sends the request on a fresh upstream connection and reads the whole response; nil when the
    /// upstream cannot be reached or answers garbage.
    private func forward(_ request: ProxyMessage) -> ProxyMessage? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var address = loopbackAddress(port: upstreamPort)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return nil }
        var outgoing = request
        outgoing.setHeader("Connection", "close")
        outgoing.setHeader("Transfer-Encoding", nil)
        if !outgoing.body.isEmpty || request.header("Content-Length") != nil {
            outgoing.setHeader("Content-Length", "\(outgoing.body.count)")
        }
        guard sendAll(fd, encodeHead(outgoing) + outgoing.body) else { return nil }
        let reader = SocketReader(fd)
        var head: ProxyMessage
        repeat {
            guard let text = reader.readHead(), let parsed = parseHead(text) else { return nil }
            head = parsed
        } while (100..<200).contains(head.status)
        let noBody = request.method == "HEAD" || head.status == 204 || head.status == 304
        if noBody {
            return head
        }
        if head.header("Transfer-Encoding")?.lowercased().contains("chunked") == true {
            guard let body = reader.readChunkedBody() else { return nil }
            head.body = body
            head.setHeader("Transfer-Encoding", nil)
        } else if let length = head.header("Content-Length").flatMap({ Int($0) }) {
            guard let body = reader.read(exactly: length) else { return nil }
            head.body = body
        } else {
            head.body = reader.readToEnd()
        }
        return head
    }

    // MARK: Encoding

    private func parseHead(_ text: String) -> ProxyMessage? {
        var lines = text.components(separatedBy: "\r\n")
        guard !lines.isEmpty, !lines[0].isEmpty else { return nil }
        let start = lines.removeFirst()
        var headers: [ProxyHeader] = []
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { return nil }
            headers.append(ProxyHeader(String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        return ProxyMessage(startLine: start, headers: headers)
    }

    private func encodeHead(_ message: ProxyMessage) -> Data {
        var text = message.startLine + "\r\n"
        for header in message.headers { text += "\(header.name): \(header.value)\r\n" }
        return Data((text + "\r\n").utf8)
    }

    /// The response as the client gets it: HTTP/1.1, framed by Content-Length, no hop-by-hop headers —
    /// unless a rule wrote `Transfer-Encoding: chunked` on it (the upstream's is gone once its body is read):
    /// then the body goes as one chunk, and a Content-Length the rule wrote too is sent as written (a
    /// server contradicting itself). `unframed`: no Content-Length at all, the body ends at the close.
    /// `lengthOffBy`: the `Content-Length` sent is the body's length plus this (a miscounting server).
    private func serialize(_ response: ProxyMessage, method: String, unframed: Bool = false, lengthOffBy: Int? = nil) -> Data {
        var message = response
        if message.startLine.hasPrefix("HTTP/1.0") { message.startLine = "HTTP/1.1" + message.startLine.dropFirst(8) }
        let chunked = message.header("Transfer-Encoding")?.lowercased() == "chunked"
        for name in ["Connection", "Keep-Alive"] + (chunked ? [] : ["Transfer-Encoding"]) { message.setHeader(name, nil) }
        let bodiless = method == "HEAD" || message.status == 204 || message.status == 304
        // Several Content-Length headers are a fault a rule wrote on purpose (a server contradicting itself).
        let lengths = message.headers.filter { $0.name.caseInsensitiveCompare("Content-Length") == .orderedSame }.count
        if unframed { message.setHeader("Content-Length", nil) }
        if !bodiless && lengths <= 1 && !chunked && !unframed { message.setHeader("Content-Length", "\(message.body.count)") }
        if let lengthOffBy, !bodiless, !chunked, !unframed {
            message.setHeader("Content-Length", "\(max(0, message.body.count + lengthOffBy))")
        }
        guard !bodiless else { return encodeHead(message) }
        guard chunked else { return encodeHead(message) + message.body }
        let chunk = message.body.isEmpty ? Data() : Data("\(String(message.body.count, radix: 16))\r\n".utf8) + message.body + Data("\r\n".utf8)
        return encodeHead(message) + chunk + Data("0\r\n\r\n".utf8)
    }
}

// MARK: - Sockets

private func loopbackAddress(port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
}

/// Closes with RST instead of FIN (`SO_LINGER` on with a zero timeout).
private func abortiveClose(_ fd: Int32) {
    var option = linger(l_onoff: 1, l_linger: 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    close(fd)
}

/// Writes everything (MSG_NOSIGNAL: a reset peer must not raise SIGPIPE in the test process).
private func sendAll(_ fd: Int32, _ data: Data) -> Bool {
    data.withUnsafeBytes { raw -> Bool in
        guard var base = raw.baseAddress else { return true }
        var remaining = raw.count
        while remaining > 0 {
            let count = send(fd, base, remaining, Int32(MSG_NOSIGNAL))
            if count < 0 {
                if errno == EINTR { continue }
                return false
            }
            base += count
            remaining -= count
        }
        return true
    }
}

/// Buffered reads from a socket: heads up to the blank line, exact byte counts, chunked bodies.
private final class SocketReader {
    private let fd: Int32
    private var buffer = Data()
    private var ended = false

    init(_ fd: Int32) { self.fd = fd }

    /// Reads more bytes into the buffer; false at EOF or on an error.
    private func fill() -> Bool {
        guard !ended else { return false }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count > 0 {
                buffer.append(contentsOf: chunk[0..<count])
                return true
            }
            if count < 0 && errno == EINTR { continue }
            ended = true
            return false
        }
    }

    private func take(_ count: Int) -> Data {
        let taken = Data(buffer.prefix(count))
        buffer = Data(buffer.dropFirst(count))
        return taken
    }

    /// The head (start line and headers) without the blank line; nil at EOF.
    func readHead() -> String? {
        let separator = Data("\r\n\r\n".utf8)
        while true {
            if let range = buffer.range(of: separator) {
                let head = take(range.lowerBound - buffer.startIndex)
                _ = take(separator.count)
                return String(decoding: head, as: UTF8.self)
            }
            guard buffer.count < 1 << 20, fill() else { return nil }
        }
    }

    /// One CRLF-terminated line without the CRLF.
    private func readLine() -> String? {
        let separator = Data("\r\n".utf8)
        while true {
            if let range = buffer.range(of: separator) {
                let line = take(range.lowerBound - buffer.startIndex)
                _ = take(separator.count)
                return String(decoding: line, as: UTF8.self)
            }
            guard fill() else { return nil }
        }
    }

    /// Up to `count` bytes (at least one): what is buffered, else one `recv` of at most `count`; nil at EOF.
    func readSome(atMost count: Int) -> Data? {
        guard count > 0 else { return Data() }
        if !buffer.isEmpty { return take(min(count, buffer.count)) }
        guard !ended else { return nil }
        var chunk = [UInt8](repeating: 0, count: count)
        while true {
            let received = recv(fd, &chunk, count, 0)
            if received > 0 { return Data(chunk[0..<received]) }
            if received < 0 && errno == EINTR { continue }
            ended = true
            return nil
        }
    }

    func read(exactly count: Int) -> Data? {
        guard count > 0 else { return Data() }
        while buffer.count < count {
            guard fill() else { return nil }
        }
        return take(count)
    }

    func readToEnd() -> Data {
        while fill() {}
        return take(buffer.count)
    }

    func readChunkedBody() -> Data? {
        var body = Data()
        while true {
            guard let line = readLine(),
                  let size = Int(line.split(separator: ";").first.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? "", radix: 16)
            else { return nil }
            if size == 0 {
                while let trailer = readLine(), !trailer.isEmpty {}
                return body
            }
            guard let chunk = read(exactly: size), readLine() != nil else { return nil }
            body.append(chunk)
        }
    }
}
