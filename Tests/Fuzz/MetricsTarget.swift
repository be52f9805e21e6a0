import Foundation
@testable import Worker
#if canImport(Glibc)
import Glibc
#endif

// MARK: - metrics: requests to `worker --metrics HOST:PORT`

/// The worker's metrics and probe server (`MetricsServer`, `worker --metrics`), which reads requests
/// from whoever connects: the input is sent as a request over a connection to it on 127.0.0.1, the
/// sending side then shut, and the answer read to the end. A crash here ends the worker. The input's
/// first line also goes to `MetricsAddress(parsing:)` and `MetricsServer.path(of:)`.
let metricsTarget = FuzzTarget(
    name: "metrics",
    summary: "MetricsServer answering the input as a request on 127.0.0.1; MetricsAddress(parsing:), path(of:)",
    setUp: { MetricsClient.shared.start() },
    run: { input in
        let firstLine = String(input.text.prefix { $0 != "\n" && $0 != "\r" })
        _ = try? MetricsAddress(parsing: firstLine)
        _ = MetricsServer.path(of: Substring(firstLine))
        MetricsClient.shared.exchange(input.bytes)
    })

final class MetricsClient: @unchecked Sendable {
    static let shared = MetricsClient()
    private var port: UInt16 = 0
    private var server: MetricsServer?

    func start() {
        // A free port: bound by a socket of our own, then handed to the server.
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = bind(probe, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(probe, $0, &length) } }
        port = UInt16(bigEndian: address.sin_port)
        close(probe)
        do {
            let server = try MetricsServer(address: MetricsAddress(parsing: "127.0.0.1:\(port)"),
                                           body: { "# HELP jobctl_jobs Jobs.\n# TYPE jobctl_jobs gauge\njobctl_jobs 1\n" },
                                           probe: { kind in kind == .live ? (true, "ok\n") : (false, "draining\n") })
            try server.start()
            self.server = server
        } catch {
            fatalError("cannot start the metrics server: \(error)")
        }
    }

    /// Sends `request` on a new connection, shuts the sending side, reads the answer until the server closes.
    func exchange(_ request: [UInt8]) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 4, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        let connectError = connected == 0 ? 0 : errno
        // libFuzzer's timer signal can interrupt a blocking connect: the connection then goes on in the
        // background (connecting again would say EALREADY), so wait until the socket is writable and
        // take the connection's own outcome.
        if connectError == EINTR || connectError == EINPROGRESS || connectError == EALREADY {
            var waiting = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            var ready: Int32
            repeat { ready = poll(&waiting, 1, 4_000) } while ready < 0 && errno == EINTR
            var outcome: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            guard ready == 1, getsockopt(fd, SOL_SOCKET, SO_ERROR, &outcome, &size) == 0, outcome == 0 else {
                fatalError("cannot connect to the metrics server: poll \(ready), error \(outcome)")
            }
        } else if connectError != 0 {
            fatalError("cannot connect to the metrics server: errno \(connectError)")
        }
        var offset = 0
        while offset < request.count {
            let sent = request.withUnsafeBytes { send(fd, $0.baseAddress! + offset, request.count - offset, Int32(MSG_NOSIGNAL)) }
            if sent < 0 && errno == EINTR { continue }
            if sent <= 0 { break }
            offset += sent
        }
        shutdown(fd, Int32(SHUT_WR))
        var buffer = [UInt8](repeating: 0, count: 16_384)
        var answer: [UInt8] = []
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            answer += buffer[..<count]
        }
        Harness.note(String(decoding: answer.prefix(200), as: UTF8.self))
    }
}
