import Foundation
import Synchronization

/// A TCP proxy on 127.0.0.1 that forwards bytes both ways to an upstream port until the client sends
/// bytes holding `marker`; from then on that connection goes silent: those bytes and everything after
/// them are held, in both directions, and its sockets stay open (a proxy or load balancer that accepted
/// and then stopped forwarding). Other connections go on being forwarded. For protocols a real local
/// server speaks but cannot be made to stall on demand (PostgreSQL's: a statement's text is sent as
/// is, so its SQL is a marker).
///
/// `stop()` closes every socket; call it in a `defer`.
public final class StallingTCPProxy: Sendable {
    /// The port it listens on.
    public let port: Int
    private let upstreamPort: Int
    private let marker: [UInt8]
    private let listener: Int32
    private let state = Mutex<State>(State())

    private struct State {
        var sockets: [Int32] = []
        var stalled = 0
        var stopped = false
    }

    /// How many connections went silent so far.
    public var stalledConnections: Int { state.withLock { $0.stalled } }

    /// Listens on a free port of 127.0.0.1 and forwards to `127.0.0.1:upstreamPort`.
    public init(upstreamPort: Int, stallWhenClientSends marker: String) throws {
        self.upstreamPort = upstreamPort
        self.marker = Array(marker.utf8)
        (listener, port) = try LoopbackTCP.listen("the stalling proxy")
        threads.enter()
        Thread.detachNewThread { [self] in
            defer { threads.leave() }
            acceptLoop()
        }
    }

    /// The accept loop and every pump: `stop` closes descriptors only once all have returned, since a
    /// number closed while a thread still used it may already name another test's socket (see
    /// `TCPFaultProxy.stop`).
    private let threads = DispatchGroup()

    /// Closes the listener and every connection (held bytes are dropped).
    /// A second call does nothing: the listener's number may name another socket by then.
    public func stop() {
        let sockets = state.withLock { state -> [Int32]? in
            guard !state.stopped else { return nil }
            state.stopped = true
            defer { state.sockets = [] }
            return state.sockets
        }
        guard let sockets else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        for socket in sockets { shutdown(socket, Int32(SHUT_RDWR)) }
        // A thread still running after that long keeps its descriptors: better leaked than reused.
        guard threads.wait(timeout: .now() + 30) == .success else { return }
        close(listener)
        for socket in sockets { close(socket) }
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            let (upstream, connected) = LoopbackTCP.connect(port: upstreamPort)
            let kept = state.withLock { state -> Bool in
                guard !state.stopped else { return false }
                // Closed just below when not connected: never listed, so `stop` does not close them again.
                if connected { state.sockets += [client, upstream] }
                return true
            }
            guard kept, connected else {
                close(client)
                close(upstream)
                if !kept { return }
                continue
            }
            let silent = Silence()
            threads.enter()
            threads.enter()
            Thread.detachNewThread { [self] in
                defer { threads.leave() }
                pump(from: client, to: upstream, silent: silent, watch: true)
            }
            Thread.detachNewThread { [self] in
                defer { threads.leave() }
                pump(from: upstream, to: client, silent: silent, watch: false)
            }
        }
    }

    /// Copies `from` to `to` until either closes. On the client's side (`watch`), bytes holding the
    /// marker make the connection silent; a silent connection forwards nothing more either way (its
    /// pumps stop reading, so the sockets stay open and unread).
    private func pump(from: Int32, to: Int32, silent: Silence, watch: Bool) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var tail: [UInt8] = []
        while true {
            let count = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                shutdown(to, Int32(SHUT_WR))
                return
            }
            if watch {
                // The marker may straddle two reads: the end of the last one is searched with this one.
                let window = tail + buffer[0..<count]
                if LoopbackTCP.contains(window, marker) {
                    silent.flag.withLock { $0 = true }
                    state.withLock { $0.stalled += 1 }
                }
                tail = Array(window.suffix(max(marker.count - 1, 0)))
            }
            if silent.flag.withLock({ $0 }) { return }
            var sent = 0
            while sent < count {
                let written = buffer.withUnsafeBytes { write(to, $0.baseAddress! + sent, count - sent) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                sent += written
            }
        }
    }

    /// Whether one connection has gone silent, shared by its two pumps.
    private final class Silence: Sendable {
        let flag = Mutex(false)
    }
}
