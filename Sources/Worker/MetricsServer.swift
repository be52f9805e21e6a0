import Foundation
import JobModel

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
        guard !portText.isEmpty, portText.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            throw WorkerError(.invalidMetricsAddress, "--metrics expects a port from 1 to 65535 after the colon, not '\(portText)'")
        }
        guard let port = Int(portText), (1...65_535).contains(port) else {
            throw WorkerError(.invalidMetricsAddress, "--metrics port \(portText) is out of range: expected a whole number from 1 to 65535")
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

    /// The four octets of a dotted-quad address, or nil.
    static func ipv4Octets(_ text: String) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        let octets = parts.compactMap { part -> UInt8? in
            guard !part.isEmpty, part.count <= 3, part.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return UInt8(part)
        }
        return octets.count == 4 ? octets : nil
    }
}

/// A tiny HTTP/1.1 server for Prometheus scrapes: `GET /metrics` answers 200 with the exposition
/// text, any other request 404 (405 for another method on /metrics), one connection at a time on one
/// thread. A request must arrive whole within `requestTimeoutMs` and `maxRequestBytes`, or the
/// connection is answered 408/431 and closed, so a slow or hostile client holds the thread for at most
/// that long. Every socket call of the project is in this file.
public final class MetricsServer: Sendable {
    /// The largest request head read; a scrape's is a few hundred bytes.
    public static let maxRequestBytes = 8_192
    public static let requestTimeoutMs = 2_000

    public let address: MetricsAddress
    private let listener: Int32
    private let body: @Sendable () -> String

    /// Binds and listens on `address` now (so a busy port fails before the worker starts), answering
    /// scrapes with `body()` once `start` runs.
    public init(address: MetricsAddress, body: @escaping @Sendable () -> String) throws(WorkerError) {
        self.address = address
        self.body = body
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
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
        guard bound == 0, listen(fd, 16) == 0 else {
            let error = Self.failure("listen on", address)
            close(fd)
            throw error
        }
        listener = fd
    }

    /// Serves on a thread of its own until `stop`.
    public func start() {
        let thread = Thread { [self] in
            ThreadName.setCurrent("jobctl-metrics")
            serve()
        }
        thread.start()
    }

    /// Stops accepting: the accept thread returns and the socket is closed.
    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
    }

    // MARK: - Serving

    private func serve() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                break
            }
            answer(connection)
            close(connection)
        }
        close(listener)
    }

    private func answer(_ connection: Int32) {
        var timeout = timeval(tv_sec: Self.requestTimeoutMs / 1000, tv_usec: (Self.requestTimeoutMs % 1000) * 1000)
        _ = setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(Self.requestTimeoutMs) * 1_000_000
        var request: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1_024)
        while Self.headEnd(request) == nil {
            if request.count >= Self.maxRequestBytes {
                return respond(connection, status: "431 Request Header Fields Too Large", body: "request too large\n")
            }
            if DispatchTime.now().uptimeNanoseconds >= deadline {
                return respond(connection, status: "408 Request Timeout", body: "request not received in time\n")
            }
            let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                return respond(connection, status: "408 Request Timeout", body: "request not received in time\n")
            }
            if count <= 0 { return }
            request += chunk[0..<count]
        }
        let line = String(decoding: request.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = line.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            return respond(connection, status: "400 Bad Request", body: "not an HTTP/1.x request\n")
        }
        let path = parts[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        guard path == "/metrics" else {
            return respond(connection, status: "404 Not Found", body: "not found: metrics are at /metrics\n")
        }
        switch parts[0] {
        case "GET":
            respond(connection, status: "200 OK", contentType: "text/plain; version=0.0.4; charset=utf-8", body: body())
        case "HEAD":
            respond(connection, status: "200 OK", contentType: "text/plain; version=0.0.4; charset=utf-8", body: body(), headOnly: true)
        default:
            respond(connection, status: "405 Method Not Allowed", body: "only GET and HEAD\n", extra: "Allow: GET, HEAD\r\n")
        }
    }

    private func respond(_ connection: Int32, status: String, contentType: String = "text/plain; charset=utf-8", body: String,
                         extra: String = "", headOnly: Bool = false) {
        let payload = Array(body.utf8)
        let head = "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(payload.count)\r\n\(extra)Connection: close\r\n\r\n"
        var bytes = Array(head.utf8)
        if !headOnly { bytes += payload }
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent < 0 && errno == EINTR { continue }
            if sent <= 0 { return }
            offset += sent
        }
    }

    /// Where the request head ends (after CR LF CR LF, or LF LF), or nil while it has not.
    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 2 else { return nil }
        for index in 1..<bytes.count where bytes[index] == 10 {
            if bytes[index - 1] == 10 { return index + 1 }
            if index >= 3, bytes[index - 1] == 13, bytes[index - 2] == 10, bytes[index - 3] == 13 { return index + 1 }
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
