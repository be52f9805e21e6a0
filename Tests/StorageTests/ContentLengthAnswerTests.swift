import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// An answer's `Content-Length` that frames no body: past 2^63, negative, not digits, or two that differ.
/// The fault proxy sends the head as written and keeps the connection open, as a server waiting for the
/// client would: libcurl took an overflowing length for none and read until the close, and of two lengths
/// framed by the last, so such answers ended as "no data for N s" after the stall limit; `5x`, `+5` and
/// `0x5` it read as 5, 5 and 0 bytes; a negative or empty one it refused as "the connection failed
/// mid-transfer". Each is refused at once, saying so, retryable, as two Content-Length headers that
/// disagree always were.
@Suite("Content-Length that frames no body", .onTestThreads)
struct ContentLengthAnswerTests {
    /// The `Content-Length` header lines sent, and what the error calls them.
    @Test(arguments: [
        (["99999999999999999999999"], "not a length"),
        (["9223372036854775808"], "not a length"),
        // libcurl refuses these itself without quoting them: said neutrally (`abc` read "negative or empty").
        (["abc"], "a Content-Length that is not a length: a length is digits only"),
        (["-5"], "a Content-Length that is not a length: a length is digits only"),
        // Refused here, quoted: cut and with its control characters escaped (hostile input).
        (["12\u{1B}[31m"], "a Content-Length that is not a length (12\\u{1B}[31m)"),
        (["5x"], "not a length"),
        (["+5"], "not a length"),
        (["0x5"], "not a length"),
        ([""], "a Content-Length that is not a length: a length is digits only"),
        (["5, "], "not a length"),
        (["5", "6"], "conflicting Content-Length"),
        (["5, 6"], "conflicting Content-Length"),
    ])
    func refusedAtOnce(_ lengths: [String], _ said: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let head = "HTTP/1.1 200 OK\r\n" + lengths.map { "Content-Length: \($0)\r\n" }.joined() + "\r\n"
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .respondAsWritten(Data((head + "hello").utf8), seconds: 30), times: 1),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 8, connectTimeout: 5))
        let spec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/x.bin", maxSize: 1 << 20)
        let started = ContinuousClock.now
        let refused = try failure(await run(backend, spec))
        let elapsed = started.duration(to: .now)
        #expect(refused.message.contains(said), "\(refused)")
        #expect(!refused.message.contains("negative or empty"), "\(refused)")
        #expect(refused.code == .unknown && refused.retryable, "\(refused)")
        // At once: the stall limit (8 s) is what a wait for the close ran into.
        #expect(elapsed < .seconds(4), "\(elapsed)")
        #expect(proxy.firedCounts == [1])
    }

    /// A download to a file is refused the same way and leaves no file; the same length written twice
    /// (`5, 5`, which RFC 9112 allows) is that length, and leading zeros are digits.
    @Test func aFileIsNotWrittenAndTheSameLengthTwiceIsOne() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(pathContains: "/over"), .respondAsWritten(
                Data("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\nhello".utf8), seconds: 30)),
            FaultRule(RequestMatch(pathContains: "/twice"), .respondAsWritten(
                Data("HTTP/1.1 200 OK\r\nContent-Length: 5, 005\r\nContent-Length: 5\r\n\r\nhello".utf8), seconds: 30)),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-length-lies")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 8, connectTimeout: 5))
        let destination = directory.file("over.bin")
        let refused = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/over", destination: destination)))
        #expect(refused.message.contains("a Content-Length that is not a length (99999999999999999999999)"), "\(refused)")
        #expect(refused.retryable)
        #expect(!FileManager.default.fileExists(atPath: destination))

        let twice = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/twice", maxSize: 1 << 20)))
        #expect(twice.data == Data("hello".utf8))
        #expect(twice.size == 5)
    }
}
