import Foundation
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// The metrics server outlives an `accept` that fails for want of a descriptor: such a failure used to
/// end its loop and close the listener, so every later scrape of that worker was refused.
@Suite("metrics accept failures") struct MetricsAcceptTests {
    @Test func failuresAreSortedByWhatTheyMean() {
        #expect(MetricsServer.acceptFailure(EMFILE) == .pause)
        #expect(MetricsServer.acceptFailure(ENFILE) == .pause)
        #expect(MetricsServer.acceptFailure(ENOBUFS) == .pause)
        #expect(MetricsServer.acceptFailure(ENOMEM) == .pause)
        #expect(MetricsServer.acceptFailure(ECONNABORTED) == .retry)
        #expect(MetricsServer.acceptFailure(EPROTO) == .retry)
        #expect(MetricsServer.acceptFailure(EINTR) == .retry)
        #expect(MetricsServer.acceptFailure(EAGAIN) == .drained)
        #expect(MetricsServer.acceptFailure(EINVAL) == .stop)
        #expect(MetricsServer.acceptFailure(EBADF) == .stop)
    }

    /// In a process of its own (its descriptor limit is lowered): clients connect until the process has
    /// no descriptor left, so the server's `accept` fails with EMFILE; once they close, a scrape is
    /// answered 200. Exits 0 when it is, 1 when the scrape failed, 2 when EMFILE was never reached, 3
    /// when the test could not set up.
    @Test func runningOutOfDescriptorsDoesNotStopTheServer() async {
        await #expect(processExitsWith: .success) {
            var limit = rlimit()
            guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { exit(3) }
            let port = freeLoopbackPort()
            guard let address = try? MetricsAddress(parsing: "127.0.0.1:\(port)"),
                  let server = try? MetricsServer(address: address, body: { "up 1\n" }) else { exit(3) }
            guard (try? server.start()) != nil else { exit(3) }
            // A new descriptor takes the lowest free number below the limit, and this process may have
            // inherited descriptors with high numbers (a test runner's): the limit is set just past the
            // eighth free number, not at the count of open ones plus eight.
            var free = 0
            var number: Int32 = 0
            while free < 8 {
                if fcntl(number, F_GETFD) == -1 && errno == EBADF { free += 1 }
                number += 1
                if rlim_t(number) >= limit.rlim_cur { exit(3) }
            }
            var lowered = limit
            lowered.rlim_cur = rlim_t(number)
            guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lowered) == 0 else { exit(3) }
            var clients: [Int32] = []
            var exhausted = false
            for _ in 0..<64 {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                if fd < 0 { exhausted = errno == EMFILE; break }
                clients.append(fd)
                _ = connectToLoopback(fd, port: port)
            }
            // The server tries to take the connections queued beyond what it accepted, and cannot.
            usleep(300_000)
            for fd in clients { close(fd) }
            guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { exit(3) }
            guard exhausted else { exit(2) }
            usleep(100_000)
            let answer = scrapeStatusLine(port: port)
            print("after EMFILE: '\(answer)'")
            server.stop()
            exit(answer.hasPrefix("HTTP/1.1 200") ? 0 : 1)
        }
    }
}

/// A scrape is answered however many other clients connect with it: the server took every connection
/// waiting in its listen queue at once and, past 32, closed the oldest it had not yet read from — a
/// scrape whose request had arrived but was still unread was reset (a worker scraped every 0.2 s lost
/// one scrape in fifty while 200 clients sent requests and did not read the answers; half of 400 scrapes
/// sent at once were reset).
@Suite("metrics connections") struct MetricsConnectionTests {
    @Test func aScrapeTakenWithManySilentConnectionsIsAnswered() throws {
        let port = freeLoopbackPort()
        // The first answer takes half a second: meanwhile the scrape and the silent clients wait in the
        // listen queue, and the server takes them all in one go.
        let calls = Mutex(0)
        let server = try MetricsServer(address: MetricsAddress(parsing: "127.0.0.1:\(port)")) {
            if calls.withLock({ count in count += 1; return count }) == 1 { usleep(500_000) }
            return "up 1\n"
        }
        try server.start()
        defer { server.stop() }
        let slow = try #require(sendScrape(port: port))
        defer { close(slow) }
        usleep(150_000)  // the server is in the first answer
        let scrape = try #require(sendScrape(port: port))
        defer { close(scrape) }
        var silent: [Int32] = []
        defer { silent.forEach { close($0) } }
        for _ in 0..<(MetricsServer.maxConnections + 8) {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            try #require(fd >= 0 && connectToLoopback(fd, port: port))
            silent.append(fd)
        }
        let answer = readAnswer(scrape)
        #expect(answer.hasPrefix("HTTP/1.1 200 OK"), "the scrape got '\(answer.prefix(80))'")
        #expect(answer.hasSuffix("\r\n\r\nup 1\n"), "the scrape got '\(answer.suffix(80))'")
    }
}

/// Requests RFC 9112 says a server must (absolute form, §3.2.2) or should (an empty line before the
/// request line, §2.2) accept: they were answered 404 and 400.
@Suite("metrics request forms") struct MetricsRequestFormTests {
    @Test(arguments: [
        ("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 200 OK"),
        ("GET http://127.0.0.1:PORT/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 200 OK"),
        ("GET HTTP://example.invalid/metrics?x=1 HTTP/1.1\r\nHost: example.invalid\r\n\r\n", "HTTP/1.1 200 OK"),
        ("\r\nGET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 200 OK"),
        ("\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK"),
        ("\nGET /metrics HTTP/1.1\n\n", "HTTP/1.1 200 OK"),
        // Only the path counts: the host's text is not a path, and another path is still not found.
        ("GET http://127.0.0.1:PORT/other HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        ("GET http://metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        ("GET //metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        ("\r\nGARBAGE\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ])
    func requestFormIsAnswered(request: String, status: String) throws {
        let port = freeLoopbackPort()
        let server = try MetricsServer(address: MetricsAddress(parsing: "127.0.0.1:\(port)")) { "up 1\n" }
        try server.start()
        defer { server.stop() }
        let fd = try #require(sendRequest(request.replacingOccurrences(of: "PORT", with: "\(port)"), port: port))
        defer { close(fd) }
        let answer = readAnswer(fd)
        #expect(answer.hasPrefix(status + "\r\n"), "\(request.debugDescription) got '\(answer.prefix(80))'")
        if status.hasSuffix("200 OK") { #expect(answer.hasSuffix("\r\n\r\nup 1\n"), "\(answer)") }
    }
}

/// A connection to 127.0.0.1:`port` that has sent `GET /metrics`, or nil.
private func sendScrape(port: Int) -> Int32? {
    sendRequest("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", port: port)
}

/// A connection to 127.0.0.1:`port` that has sent `text`, or nil.
private func sendRequest(_ text: String, port: Int) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let request = Array(text.utf8)
    guard connectToLoopback(fd, port: port), send(fd, request, request.count, Int32(MSG_NOSIGNAL)) == request.count else {
        close(fd)
        return nil
    }
    return fd
}

/// Everything the server sends on `fd` until it closes (5 s at most), and how the reading ended when
/// not by a close.
private func readAnswer(_ fd: Int32) -> String {
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4_096)
    while true {
        let count = recv(fd, &buffer, buffer.count, 0)
        if count < 0 { return String(decoding: received, as: UTF8.self) + "<recv failed: \(String(cString: strerror(errno)))>" }
        if count == 0 { break }
        received += buffer[0..<count]
    }
    return String(decoding: received, as: UTF8.self)
}

/// Connects `fd` to 127.0.0.1:`port`; whether it did.
private func connectToLoopback(_ fd: Int32, port: Int) -> Bool {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    } == 0
}

/// `GET /metrics` on a new connection: the answer's first line, or what went wrong (5 s at most).
private func scrapeStatusLine(port: Int) -> String {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return "socket: errno \(errno)" }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    guard connectToLoopback(fd, port: port) else { return "connect: errno \(errno)" }
    let request = Array("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
    guard send(fd, request, request.count, Int32(MSG_NOSIGNAL)) == request.count else { return "send: errno \(errno)" }
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4_096)
    while true {
        let count = recv(fd, &buffer, buffer.count, 0)
        if count <= 0 { break }
        received += buffer[0..<count]
    }
    let text = String(decoding: received, as: UTF8.self)
    return text.isEmpty ? "no answer: errno \(errno)" : String(text.prefix { $0 != "\r" && $0 != "\n" })
}
