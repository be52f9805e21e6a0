import Foundation
import JobModel
import Storage
import TestSupport
import Testing

/// Success answers whose body jobctl never reads — a plain-HTTP upload's PUT, a DELETE — were kept in
/// memory like a JSON answer, up to 16 MiB: a server answering an upload `201` with a 20 MiB page (a
/// status document, the upload echoed back) failed the job ("the server's answer was larger than
/// 16 MiB") after the file had landed, and every retry did the same. Such a body is read and dropped now;
/// a JSON answer keeps its limit (`AnswerSizeTests`).
@Suite("success answers nothing reads", .onTestThreads)
struct DiscardedAnswerTests {
    static let answerSize = 20 * 1024 * 1024

    /// The server's answer replaced by `status` with a 20 MiB body (a proxy between it and jobctl).
    static func largeAnswer(_ status: String) -> Fault {
        .rewriteResponse { _, response in
            response.startLine = "HTTP/1.1 \(status)"
            response.body = Data(repeating: UInt8(ascii: "a"), count: answerSize)
            response.setHeader("Content-Type", "text/plain")
            response.setHeader("Content-Length", String(answerSize))
        }
    }

    @Test("HTTP: an upload answered 201 with a 20 MiB body succeeds")
    func httpUpload() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PUT", pathContains: "/landed.bin"), Self.largeAnswer("201 Created")),
        ])
        defer { proxy.stop() }
        let payload = patternData(300_000, seed: 41)
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let result = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/landed.bin", data: payload)))
        #expect(result.size == Int64(payload.count) && result.crc32c == hashes(payload).crc32c, "\(result)")
        #expect(proxy.firedCounts == [1])
        #expect(proxy.exchanges.first { $0.request.method == "PUT" }?.response?.header("Content-Length") == String(Self.answerSize),
                "the 20 MiB answer was sent")
        #expect(FileManager.default.contents(atPath: server.root + "/landed.bin") == payload)
    }

    @Test("HTTP: a delete answered 200 with a 20 MiB body succeeds")
    func httpDelete() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try Data("doomed".utf8).write(to: URL(fileURLWithPath: server.root + "/doomed.txt"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "DELETE", pathContains: "/doomed.txt"), Self.largeAnswer("200 OK")),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let url = "\(proxy.baseURL)/doomed.txt"
        let result = try finished(await run(backend, JobSpec(kind: .delete, destination: url)))
        #expect(result.deleted == url)
        #expect(proxy.firedCounts == [1])
        #expect(!FileManager.default.fileExists(atPath: server.root + "/doomed.txt"))
    }

    /// A success body with no length to go by (connection-framed here, the connection then held open:
    /// an endless or trickling answer) was read to its end: an upload that had landed waited for it, and
    /// a bad upload's clean-up DELETE — under no job's limit — held its job past the job's timeout, a
    /// cancel and a shutdown. The exchange now ends where such an answer's headers end.
    @Test("HTTP: an upload answered 200 with an endless body succeeds at once; a bad upload's clean-up DELETE so answered ends")
    func endlessBodies() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let endless = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nstill going"
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PUT", pathContains: "/landed.bin"), .respondAsWritten(Data(endless.utf8), seconds: 40)),
            // A stored hash that is not the bytes': the upload is deleted again, and that DELETE's answer never ends.
            FaultRule(RequestMatch(method: "PUT", pathContains: "/bad.bin"), .respondAsWritten(Data(
                "HTTP/1.1 200 OK\r\nx-goog-hash: crc32c=AAAAAA==\r\nContent-Length: 0\r\n\r\n".utf8), seconds: 40)),
            FaultRule(RequestMatch(method: "DELETE", pathContains: "/bad.bin"), .respondAsWritten(Data(endless.utf8), seconds: 40)),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let payload = patternData(50_000, seed: 43)
        let started = ContinuousClock.now
        let result = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/landed.bin", data: payload)))
        #expect(result.size == Int64(payload.count))
        let bad = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/bad.bin", data: payload)))
        #expect(bad.code == .nonMatchingChecksum, "\(bad)")
        #expect(proxy.firedCounts == [1, 1, 1])
        let elapsed = started.duration(to: .now)
        #expect(elapsed < .seconds(15), "the two jobs took \(elapsed): the answers' bodies were waited for")
    }

    /// A Cloud Storage delete's answer is read for its status alone (Cloud Storage sends no body): one
    /// with a body is not failed for its size either.
    @Test("GCS: a delete answered 200 with a 20 MiB body succeeds")
    func gcsDelete() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let reference = "gs://\(server.bucket)/doomed.bin"
        _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                   JobSpec(kind: .uploadData, destination: reference, data: Data("doomed".utf8))))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "DELETE", pathContains: "doomed.bin"), Self.largeAnswer("200 OK")),
        ])
        defer { proxy.stop() }
        let result = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server, through: proxy)),
                                            JobSpec(kind: .delete, destination: reference)))
        #expect(result.deleted != nil)
        #expect(proxy.firedCounts == [1])
        let gone = try failure(await run(GCSBackend(configuration: emulatorConfiguration(server)), JobSpec(kind: .getMetadata, source: reference)))
        #expect(gone.code == .objectNotFound, "\(gone)")
    }
}
