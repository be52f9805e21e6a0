import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// libcurl hands a chunked body's trailer fields (RFC 9112 §7.1.2) to the header callback after the
/// body, and they were merged into the answer's headers: a trailer `Content-Range` naming a bigger file
/// made a whole answer fail as cut short ("the server sent 5 bytes of a file of 99999"), and a wrong
/// `x-goog-hash` in the trailer failed the job as a checksum mismatch over HTTP/1.1 while over HTTP/2
/// the same trailer was never seen. RFC 9110 §6.5.1: trailer fields are not the header's; none is read.
@Suite("chunked answers' trailer fields", .onTestThreads)
struct TrailerFieldTests {
    static func chunked(_ body: String, trailer: String) -> Data {
        let size = String(body.utf8.count, radix: 16)
        return Data("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Range, x-goog-hash\r\nConnection: close\r\n\r\n".utf8)
            + Data((body.isEmpty ? "" : "\(size)\r\n\(body)\r\n").utf8) + Data("0\r\n\(trailer)\r\n".utf8)
    }

    @Test("trailer fields neither cut, fail nor reframe the answer", arguments: [
        ("hello", "Content-Range: bytes 0-4/99999\r\n"),
        ("hello", "x-goog-hash: md5=AAAAAAAAAAAAAAAAAAAAAA==\r\nx-goog-hash: crc32c=AAAAAA==\r\n"),
        ("hello", "Content-Length: 99999\r\n"),
        ("", "Content-Range: bytes 0-4/99999\r\nx-goog-hash: crc32c=AAAAAA==\r\n"),
    ])
    func trailersAreNotHeaders(body: String, trailer: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try Data(body.utf8).write(to: URL(fileURLWithPath: server.root + "/t.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .respondAsWritten(Self.chunked(body, trailer: trailer), seconds: 0), times: .max),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-trailers")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/t.bin", maxSize: 1 << 20)))
        #expect(memory.data == Data(body.utf8))
        _ = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/t.bin", destination: directory.file("t.bin"))))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("t.bin"))) == Data(body.utf8))
        #expect(proxy.exchanges.contains { $0.request.method == "GET" })
    }
}
