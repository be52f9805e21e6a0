import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A minimal HTTP/1.1 server on 127.0.0.1 for slow-server faults no real server produces on demand:
/// every request is answered `200` with a large `Content-Length` whose body then arrives slowly, stops,
/// or is never sent.
///
/// One thread accepts; one thread serves each connection. `stop()` closes everything; the threads notice
/// within 50 ms.
public final class TrickleServer: Sendable {
    /// What the server does after reading a request's header.
    public enum Behaviour: Sendable {
        /// Sends the response header, then one body byte every `interval` seconds, forever.
        case trickle(interval: Double)
        /// Sends the response header and `bytes` body bytes, then nothing more (the connection stays open).
        case stallAfter(bytes: Int)
        /// Reads nothing more and answers nothing (a request body is never read, so an upload fills the
        /// socket buffers and stops).
        case silent
        /// Sends a JSON answer that never ends, as fast as the client reads it: `{"items": [` and then
        /// spaces, with no length (the body would end with the connection), until the client hangs up.
        case endless
    }

    /// The declared body length of every response (never reached).
    public static let declaredLength = 10_000_000

    public let port: Int
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    private let listener: Int32
    private let behaviour: Behaviour
    private let state = Mutex<(stopped: Bool, clients: [Int32], requests: [String])>((false, [], []))
    private let sentBodyBytes = Atomic<Int>(0)

    /// The body bytes written to clients so far (`endless`).
    public var bodyBytesSent: Int { sentBodyBytes.load(ordering: .relaxed) }

    /// Starts listening on a free loopback port.
    public init(_ behaviour: Behaviour) throws {
        self.behaviour = behaviour
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestServerError("socket() failed: \(errno)") }
        var reuse: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        guard let bound = bindToLoopback(fd), listen(fd, 16) == 0 else {
            close(fd)
            throw TestServerError("cannot listen on 127.0.0.1: errno \(errno)")
        }
        listener = fd
        port = bound
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// The request lines received so far (`GET /path HTTP/1.1`).
    public var requests: [String] { state.withLock { $0.requests } }

    /// Closes the listener and every connection.
    ///
    /// Everything is shut down under the lock: a connection's thread takes its descriptor out of the
    /// list under the lock before closing it, and the accept loop closes the listener only after it saw
    /// `stopped` under the lock, so each number shut down here still names this server's socket. Shut
    /// down after the lock was let go, a number closed in between could name another test's socket.
    public func stop() {
        state.withLock { state in
            guard !state.stopped else { return }
            state.stopped = true
            for client in state.clients { shutdown(client, Int32(SHUT_RDWR)) }
            shutdown(listener, Int32(SHUT_RDWR))
        }
    }

    deinit { stop() }

    private var stopped: Bool { state.withLock { $0.stopped } }

    /// Waits up to `milliseconds` for `fd` to be readable; true when it is (or has hung up).
    private func readable(_ fd: Int32, milliseconds: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, milliseconds) > 0
    }

    private func acceptLoop() {
        defer { close(listener) }
        while !stopped {
            guard readable(listener, milliseconds: 50) else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            let accepted = state.withLock { state -> Bool in
                guard !state.stopped else { return false }
                state.clients.append(client)
                return true
            }
            guard accepted else {
                close(client)
                return
            }
            let thread = Thread { [self] in serve(client) }
            thread.start()
        }
    }

    private func serve(_ client: Int32) {
        defer {
            state.withLock { $0.clients.removeAll { $0 == client } }
            close(client)
        }
        // Read the request header (the body, if any, is never read).
        var header = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !header.containsHeaderEnd {
            guard !stopped else { return }
            guard readable(client, milliseconds: 50) else { continue }
            let count = recv(client, &buffer, buffer.count, 0)
            guard count > 0 else { return }
            header += buffer[0..<count]
        }
        let requestLine = String(decoding: header.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        state.withLock { $0.requests.append(requestLine) }

        if case .silent = behaviour {
            waitUntilClosed(client)
            return
        }
        if case .endless = behaviour {
            guard write(client, Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"items\": [".utf8))
            else { return }
            let spaces = [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024)
            while !stopped, write(client, spaces) { sentBodyBytes.add(spaces.count, ordering: .relaxed) }
            return
        }
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            + "Content-Length: \(Self.declaredLength)\r\nConnection: close\r\n\r\n"
        guard write(client, Array(head.utf8)) else { return }
        switch behaviour {
        case .trickle(let interval):
            let pause = Int32(max(1, interval * 1000))
            while !stopped {
                guard write(client, [UInt8(ascii: "x")]) else { return }
                // Paces the trickle; ends when the client hangs up.
                if peerHungUp(client, waitingUpTo: pause) { return }
            }
        case .stallAfter(let bytes):
            guard bytes == 0 || write(client, [UInt8](repeating: UInt8(ascii: "s"), count: bytes)) else { return }
            waitUntilClosed(client)
        case .silent, .endless:
            break
        }
    }

    /// Blocks until the client closes the connection or the server stops.
    private func waitUntilClosed(_ client: Int32) {
        while !stopped {
            if peerHungUp(client, waitingUpTo: 50) { return }
        }
    }

    /// Waits up to `milliseconds` for the peer to close its side; never reads, so a request body stays
    /// unread in the socket.
    private func peerHungUp(_ client: Int32, waitingUpTo milliseconds: Int32) -> Bool {
        // POLLRDHUP (0x2000, Linux): the peer shut down its writing side or closed the connection.
        let hangUp = Int16(0x2000) | Int16(POLLHUP) | Int16(POLLERR)
        var entry = pollfd(fd: client, events: Int16(0x2000), revents: 0)
        return poll(&entry, 1, milliseconds) > 0 && entry.revents & hangUp != 0
    }

    private func write(_ client: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }
}

private extension [UInt8] {
    var containsHeaderEnd: Bool {
        guard count >= 4 else { return false }
        for index in 0...(count - 4) where self[index] == 13 && self[index + 1] == 10 && self[index + 2] == 13 && self[index + 3] == 10 {
            return true
        }
        return false
    }
}
