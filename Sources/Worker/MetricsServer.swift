import CFileSystem
import Foundation
import JobModel
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where `--metrics` listens: an IPv4 address and a port.
public struct MetricsAddress: Sendable, Equatable, CustomStringConvertible {
    public let host: String
    public let port: UInt16

    /// Reads `HOST:PORT` (HOST an IPv4 address or `localhost`, PORT 1–65535).
    public init(parsing text: String) throws(WorkerError) {
        guard let colon = text.lastIndex(of: ":") else {
            throw WorkerError(.invalidMetricsAddress, "--metrics expects HOST:PORT such as 127.0.0.1:9464, not '\(text)'")
        }
        let hostText = String(text[..<colon])
        let portText = String(text[text.index(after: colon)...])
        // The grammar of every number a user types (DecimalText), with no spaces inside an address.
        let port: Int
        switch DecimalText.isDigits(portText) ? DecimalText.read(portText) : .invalid {
        case .value(let value) where (1...65_535).contains(value):
            port = Int(value)
        case .value, .tooLarge:
            throw WorkerError(.invalidMetricsAddress, "--metrics port \(portText) is out of range: expected a whole number from 1 to 65535")
        case .leadingZero:
            throw WorkerError(.invalidMetricsAddress, "--metrics port \(portText): \(DecimalText.leadingZeroRule)")
        case .invalid:
            throw WorkerError(.invalidMetricsAddress, "--metrics expects a port from 1 to 65535 after the colon, not '\(portText)'")
        }
        let host = hostText == "localhost" ? "127.0.0.1" : hostText
        guard Self.ipv4Octets(host) != nil else {
            throw WorkerError(.invalidMetricsAddress, "--metrics expects an IPv4 address or localhost before the port, not '\(hostText)'")
        }
        self.host = host
        self.port = UInt16(port)
    }

    public var description: String { "\(host):\(port)" }

    /// Whether the host is in 127.0.0.0/8: only this machine can connect.
    public var isLoopback: Bool { Self.ipv4Octets(host)?.first == 127 }

    /// The four octets of a dotted-quad address, or nil. A leading zero (`127.0.0.01`) is refused, as
    /// the socket layer's `inet_pton` refuses it (and older tools read it as octal).
    static func ipv4Octets(_ text: String) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        let octets = parts.compactMap { part -> UInt8? in
            guard !part.isEmpty, part.count <= 3, part.allSatisfy({ $0.isASCII && $0.isNumber }),
                  part.count == 1 || part.first != "0" else { return nil }
            return UInt8(part)
        }
        return octets.count == 4 ? octets : nil
    }
}

/// A tiny HTTP/1.1 server for Prometheus scrapes: `GET /metrics` answers 200 with the exposition
/// text, `GET /healthz` and `/readyz` the worker's probes (200 or 503 with a line saying why), any
/// other request 404 (405 for another method on those paths), on one thread that waits on every
/// connection at once (`poll`). A request must arrive whole within `requestTimeoutMs` and
/// `maxRequestBytes`, or the connection is answered 408/431 and closed. At most `maxConnections` are
/// open: a new one beyond them closes the oldest that has not sent its request (what a connection sent
/// before it was taken is read as it is taken), so clients that
/// connect and say nothing (however many, however often) never keep a scrape waiting — one connection
/// at a time, each of them held the thread for the time limit, and a scrape queued behind them.
/// Once its answer is sent a connection is shut for writing and what the client still sends is read and
/// dropped until it closes (or the time limit passes), as web servers close: a close with unread bytes
/// (a request body, pipelined requests, a head past 8 KiB) sent the client a reset instead, which can
/// take the answer with it.
/// Every socket call of the project is in this file.
public final class MetricsServer: Sendable {
    /// The largest request head read; a scrape's is a few hundred bytes.
    public static let maxRequestBytes = 8_192
    public static let requestTimeoutMs = 2_000
    /// Connections open at once (reading a request or writing an answer).
    public static let maxConnections = 32

    public let address: MetricsAddress
    private let listener: Int32
    /// False once the serving thread (or a failed `start`) closed the listener: `stop` then leaves the
    /// number alone, as it may already name another of the worker's sockets (its database connection).
    private let listenerOpen = Mutex(true)
    private let body: @Sendable () -> String
    private let probe: @Sendable (HealthProbe) -> (ok: Bool, text: String)

    /// The probes served beside the metrics: `/healthz` (the worker is alive) and `/readyz` (it takes work).
    public enum HealthProbe: Sendable {
        case live, ready
    }

    /// Binds and listens on `address` now (so a busy port fails before the worker starts), answering
    /// scrapes with `body()` once `start` runs, and `/healthz` and `/readyz` with `probe` (200 with its
    /// text when it says ok, else 503).
    public init(address: MetricsAddress, body: @escaping @Sendable () -> String,
                probe: @escaping @Sendable (HealthProbe) -> (ok: Bool, text: String) = { _ in (true, "ok\n") }) throws(WorkerError) {
        self.address = address
        self.body = body
        self.probe = probe
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw Self.failure("create a socket for", address) }
        var yes: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = address.port.bigEndian
        guard inet_pton(AF_INET, address.host, &sin.sin_addr) == 1 else {
            close(fd)
            throw WorkerError(.invalidMetricsAddress, "--metrics \(address) is not an IPv4 address")
        }
        let bound = withUnsafePointer(to: &sin) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            let error = Self.failure("listen on", address)
            close(fd)
            throw error
        }
        listener = fd
    }

    /// Serves on a thread of its own until `stop`.
    public func start() throws(ThreadStartFailure) {
        do throws(ThreadStartFailure) {
            try StartedThread.start(name: "jobctl-metrics") { [self] in serve() }
        } catch {
            closeListener()
            throw error
        }
    }

    /// Stops accepting: the serving thread closes every connection and the socket, and returns.
    public func stop() {
        listenerOpen.withLock { open in
            if open { shutdown(listener, Int32(SHUT_RDWR)) }
        }
    }

    private func closeListener() {
        listenerOpen.withLock { open in
            open = false
            close(listener)
        }
    }

    // MARK: - Serving

    /// One open connection: the request read so far, then the answer left to send.
    private struct Connection {
        let fd: Int32
        /// When the request must be in (then 408) or, once answered, the answer sent (then closed).
        var deadlineNs: UInt64
        var request: [UInt8] = []
        /// The answer; nil while the request is being read.
        var answer: [UInt8]?
        /// How much of the answer was sent.
        var sent = 0
        /// The answer is sent and the connection shut for writing: what arrives is read and dropped
        /// until the client closes.
        var draining = false
        /// To be closed.
        var done = false

        init(fd: Int32, now: UInt64) {
            self.fd = fd
            deadlineNs = now + MetricsServer.timeLimitNs
        }

        /// Sets the answer, to be sent within the time limit from `now`.
        mutating func answer(_ bytes: [UInt8], now: UInt64) {
            answer = bytes
            deadlineNs = now + MetricsServer.timeLimitNs
        }
    }

    private static let timeLimitNs = UInt64(requestTimeoutMs) * 1_000_000

    private func serve() {
        var connections: [Connection] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        // After an accept that failed for want of a descriptor or memory, new connections wait in the
        // listen queue until then (see `acceptPauseNs`).
        var acceptPausedUntilNs: UInt64 = 0
        var acceptPauseNs: UInt64 = 0
        serving: while true {
            let now = DispatchTime.now().uptimeNanoseconds
            var index = 0
            while index < connections.count {
                // A request not in within the time limit is answered 408; an answer not taken within it
                // is given up, and so is a client that does not close within it once answered.
                if now >= connections[index].deadlineNs {
                    if connections[index].answer == nil {
                        connections[index].answer(Self.response(status: "408 Request Timeout", body: "request not received in time\n"), now: now)
                    } else {
                        connections[index].done = true
                    }
                }
                Self.sendAnswer(&connections[index], now: now)
                if connections[index].done {
                    close(connections[index].fd)
                    connections.remove(at: index)
                } else {
                    index += 1
                }
            }
            let accepting = now >= acceptPausedUntilNs
            var polled = [pollfd(fd: listener, events: accepting ? Int16(POLLIN) : 0, revents: 0)]
            for connection in connections {
                let reading = connection.answer == nil || connection.draining
                polled.append(pollfd(fd: connection.fd, events: Int16(reading ? POLLIN : POLLOUT), revents: 0))
            }
            let nextDeadline = (connections.map(\.deadlineNs) + (accepting ? [] : [acceptPausedUntilNs])).min()
            let waitMs = nextDeadline.map { Int32(clamping: ($0 - min($0, now)) / 1_000_000 + 1) } ?? -1
            let ready = poll(&polled, nfds_t(polled.count), waitMs)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            let polledAt = DispatchTime.now().uptimeNanoseconds
            // Answers go out and requests are read before new connections are taken.
            for (offset, entry) in polled.enumerated().dropFirst() where entry.revents != 0 {
                // Writable: sent at the top of the loop.
                receive(&connections[offset - 1], chunk: &chunk, now: polledAt)
            }
            if polled[0].revents & Int16(POLLIN) != 0 || polled[0].revents & Int16(POLLHUP | POLLERR) != 0
                || (!accepting && polledAt >= acceptPausedUntilNs) {
                accepting: while true {
                    let fd = jobctl_accept_nonblocking(listener)
                    if fd < 0 {
                        switch Self.acceptFailure(errno) {
                        case .retry: continue accepting
                        case .drained: break accepting
                        case .pause:
                            acceptPauseNs = min(max(acceptPauseNs * 2, Self.firstAcceptPauseNs), Self.longestAcceptPauseNs)
                            acceptPausedUntilNs = polledAt + acceptPauseNs
                            break accepting
                        case .stop: break serving  // shut down (`stop`) or broken
                        }
                    }
                    acceptPauseNs = 0
                    // A client sends its request as soon as it has connected, so a scrape that waited in the
                    // listen queue has its request in already: read now, it is answered, and never taken for
                    // a client that said nothing when the connections taken with it make room below. Read
                    // only at the next turn, it was closed unanswered whenever 32 others were taken after it.
                    var connection = Connection(fd: fd, now: polledAt)
                    receive(&connection, chunk: &chunk, now: polledAt)
                    Self.sendAnswer(&connection, now: polledAt)
                    if connection.done {
                        close(fd)
                        continue accepting
                    }
                    if connections.count >= Self.maxConnections {
                        // The oldest connection already answered makes room, else the oldest still without
                        // a whole request, else the oldest.
                        let victim = connections.firstIndex { $0.draining || $0.done }
                            ?? connections.firstIndex { $0.answer == nil } ?? 0
                        close(connections[victim].fd)
                        connections.remove(at: victim)
                    }
                    connections.append(connection)
                }
            }
        }
        for connection in connections { close(connection.fd) }
        closeListener()
    }

    /// What a failed `accept` means for the loop.
    enum AcceptFailure: Equatable { case retry, drained, pause, stop }

    /// `retry` at once: interrupted, or a connection that failed before it was taken (Linux passes its
    /// pending network error to `accept`, which its manual says to treat like EAGAIN). `drained`: none
    /// left. `pause`: no descriptor or memory for one now (EMFILE, ENFILE, ENOBUFS, ENOMEM) — the
    /// connections wait in the listen queue while the server takes none for a moment, doubling from 5 ms
    /// to 1 s; the listen queue is not drained, so waiting on it would only spin. Such a failure stopped
    /// the server for the rest of the worker's life (the listener closed: scrapes refused). `stop`: the
    /// listener was shut (`stop`) or is broken.
    static func acceptFailure(_ error: Int32) -> AcceptFailure {
        switch error {
        case EINTR, ECONNABORTED, EPROTO, ENETDOWN, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP, ENETUNREACH, EPERM:
            return .retry
        case EAGAIN, EWOULDBLOCK: return .drained
        case EMFILE, ENFILE, ENOBUFS, ENOMEM: return .pause
        default: return .stop
        }
    }

    static let firstAcceptPauseNs: UInt64 = 5_000_000
    static let longestAcceptPauseNs: UInt64 = 1_000_000_000

    /// Reads what the client sent on `connection`, without waiting: its request (answered once whole),
    /// or what it sends after the answer (dropped). A close or a failure marks it done.
    private func receive(_ connection: inout Connection, chunk: inout [UInt8], now: UInt64) {
        if connection.done || (connection.answer != nil && !connection.draining) { return }
        let fd = connection.fd
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if count < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) { return }
        if count <= 0 {
            connection.done = true  // closed or failed: nothing (more) to answer
            return
        }
        if connection.draining { return }  // after the answer: dropped
        connection.request += chunk[0..<count]
        if let answer = answer(to: connection.request) { connection.answer(answer, now: now) }
    }

    /// Sends what is left of the connection's answer, if it has one; once all is sent, shuts the
    /// connection for writing and reads on until the client closes (within the time limit).
    private static func sendAnswer(_ connection: inout Connection, now: UInt64) {
        guard !connection.done && !connection.draining else { return }
        switch flush(&connection) {
        case .pending: break
        case .gone: connection.done = true
        case .sent:
            shutdown(connection.fd, Int32(SHUT_WR))
            connection.draining = true
            connection.deadlineNs = now + timeLimitNs
        }
    }

    private enum Flushed { case pending, sent, gone }

    /// Sends what is left of the connection's answer without waiting: whether it is all sent, still
    /// pending (also while the request is being read), or the peer is gone.
    private static func flush(_ connection: inout Connection) -> Flushed {
        guard let answer = connection.answer else { return .pending }
        while connection.sent < answer.count {
            let sent = answer[connection.sent...].withUnsafeBytes {
                send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
            }
            if sent < 0 && errno == EINTR { continue }
            if sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return .pending }
            if sent <= 0 { return .gone }
            connection.sent += sent
        }
        return .sent
    }

    /// The answer to a request head, or nil while it has not arrived whole (and is not too large).
    private func answer(to request: [UInt8]) -> [UInt8]? {
        // Empty lines before the request line are ignored (RFC 9112 §2.2: a client may send a CR LF after
        // a POST's body); they were taken for the request line, and the request answered 400.
        let start = request.firstIndex { $0 != 13 && $0 != 10 }
        guard let start, let end = Self.headEnd(request[start...]), end <= Self.maxRequestBytes else {
            return request.count >= Self.maxRequestBytes
                ? Self.response(status: "431 Request Header Fields Too Large", body: "request too large\n") : nil
        }
        let line = String(decoding: request[start...].prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = line.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            return Self.response(status: "400 Bad Request", body: "not an HTTP/1.x request\n")
        }
        let path = Self.path(of: parts[1])
        if path == "/healthz" || path == "/readyz" {
            guard parts[0] == "GET" || parts[0] == "HEAD" else {
                return Self.response(status: "405 Method Not Allowed", body: "only GET and HEAD\n", extra: "Allow: GET, HEAD\r\n")
            }
            let answer = probe(path == "/healthz" ? .live : .ready)
            return Self.response(status: answer.ok ? "200 OK" : "503 Service Unavailable", body: answer.text,
                                 extra: "Cache-Control: no-store\r\n", headOnly: parts[0] == "HEAD")
        }
        guard path == "/metrics" else {
            return Self.response(status: "404 Not Found", body: "not found: metrics are at /metrics, probes at /healthz and /readyz\n")
        }
        switch parts[0] {
        case "GET":
            return Self.response(status: "200 OK", contentType: "text/plain; version=0.0.4; charset=utf-8", body: body())
        case "HEAD":
            return Self.response(status: "200 OK", contentType: "text/plain; version=0.0.4; charset=utf-8", body: body(), headOnly: true)
        default:
            return Self.response(status: "405 Method Not Allowed", body: "only GET and HEAD\n", extra: "Allow: GET, HEAD\r\n")
        }
    }

    /// An answer's bytes: the status line, the headers (the connection closes after it) and the body.
    private static func response(status: String, contentType: String = "text/plain; charset=utf-8", body: String,
                                 extra: String = "", headOnly: Bool = false) -> [UInt8] {
        let payload = Array(body.utf8)
        let head = "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(payload.count)\r\n\(extra)Connection: close\r\n\r\n"
        var bytes = Array(head.utf8)
        if !headOnly { bytes += payload }
        return bytes
    }

    /// The path a request target names, without its query: the target itself in origin form
    /// (`/metrics?x`), the part after the authority in absolute form (`http://host:port/metrics`, which
    /// RFC 9112 §3.2.2 says a server must accept; it was answered 404). The host in it is never looked
    /// at: the server answers whatever name it was reached by.
    static func path(of target: Substring) -> Substring {
        var rest = target
        if let colon = rest.firstIndex(of: ":"), rest[..<colon].lowercased() == "http" || rest[..<colon].lowercased() == "https",
           rest[rest.index(after: colon)...].hasPrefix("//") {
            let authority = rest[rest.index(colon, offsetBy: 3)...]
            // An empty path in absolute form is "/" (RFC 9110 §4.2.3).
            rest = authority.firstIndex { $0 == "/" || $0 == "?" }.map { authority[$0...] } ?? "/"
            if rest.hasPrefix("?") { rest = "/" }
        }
        return rest.prefix { $0 != "?" }
    }

    /// Where the request head ends (after CR LF CR LF, or LF LF), as an index of `bytes`, or nil while it has not.
    private static func headEnd(_ bytes: ArraySlice<UInt8>) -> Int? {
        guard bytes.count >= 2 else { return nil }
        for index in (bytes.startIndex + 1)..<bytes.endIndex where bytes[index] == 10 {
            if bytes[index - 1] == 10 { return index + 1 }
            if index - bytes.startIndex >= 3, bytes[index - 1] == 13, bytes[index - 2] == 10, bytes[index - 3] == 13 { return index + 1 }
        }
        return nil
    }

    private static func failure(_ action: String, _ address: MetricsAddress) -> WorkerError {
        let code = errno
        let reason = String(cString: strerror(code))
        let advice = code == EADDRINUSE ? "another process listens there; pick another port"
            : code == EADDRNOTAVAIL ? "the address is not one of this machine's"
            : code == EACCES ? "ports below 1024 need privileges; pick a higher one"
            : "check the address"
        return WorkerError(.metricsListenFailed, "cannot \(action) \(address) for --metrics: \(reason); \(advice)", errno: code)
    }
}
