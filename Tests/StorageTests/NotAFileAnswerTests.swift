import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// Successful answers to a download's GET that carry no file. A file, even an empty one, comes as a 200
/// (203 from a proxy's copy) or, to a range asked for, a 206; `204 No Content` (an endpoint with nothing to
/// send, or an export not ready), `202 Accepted` and the other 2xx were taken as the file — an empty one
/// when they had no body — and the job succeeded with nothing of the file.
@Suite("HTTP download answers that are no file", .onTestThreads)
struct NotAFileAnswerTests {
    private let payload = patternData(100_000, seed: 57)

    @Test("a 2xx that is no file (204, 205, 201, 202) fails the download typed, to a file and to memory; nothing is kept",
          arguments: [204, 205, 201, 202])
    func noFileAnswerRefused(status: Int) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/n.bin"))
        // 201 and 202 carry a body (a status document), which must not become the file either.
        let body = status == 201 || status == 202 ? Data("{\"state\":\"pending\"}".utf8) : Data()
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .respond(.response(status, body: body)), times: 2),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-no-file")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let fileSpec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/n.bin?token=SECRET", destination: directory.file("n.bin"))
        let memorySpec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/n.bin?token=SECRET", maxSize: 1 << 20)
        for spec in [fileSpec, memorySpec] {
            let error = try failure(await run(backend, spec))
            #expect(error.httpStatus == status && error.message.contains("\(status)") && error.message.contains("no file"), "\(error)")
            // Accepted: the file is on its way, a retry may get it. The others say the same at every attempt.
            #expect(error.retryable == (status == 202), "\(error)")
            #expect(error.url == "\(proxy.baseURL)/n.bin?token=REDACTED", "\(error)")
        }
        #expect(proxy.firedCounts == [2])
        #expect(!FileManager.default.fileExists(atPath: directory.file("n.bin")))
        // A retryable failure keeps its partial file for the next attempt: with nothing of the answer in it.
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(status == 202 ? left.allSatisfy { (try? Data(contentsOf: URL(fileURLWithPath: directory.file($0))))?.isEmpty == true }
                              : left.isEmpty, "\(left)")
        // The file itself, once the server serves it, downloads.
        #expect(try finished(await run(backend, memorySpec)).data == payload)
        _ = try finished(await run(backend, fileSpec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("n.bin"))) == payload)
    }

    /// A 206 to a GET that asked no range is part of the file at best. Its `Content-Range` total, when it
    /// names one, told a short body; `bytes 0-999/*` told nothing, and the first 1,000 bytes were the file.
    @Test("a 206 to a download that asked no range is refused, also when its Content-Range names no total")
    func partAnswerToAWholeRequestRefused() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/p.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .respond(.response(206, headers: [ProxyHeader("Content-Range", "bytes 0-999/*")],
                                                                      body: payload.prefix(1_000))), times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-no-file")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let spec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/p.bin", destination: directory.file("p.bin"))
        let refused = try failure(await run(backend, spec))
        #expect(refused.retryable && refused.httpStatus == 206 && refused.message.contains("bytes 0-999/*"), "\(refused)")
        #expect(proxy.firedCounts == [1])
        #expect(!FileManager.default.fileExists(atPath: directory.file("p.bin")))
        _ = try finished(await run(backend, spec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("p.bin"))) == payload)
    }

    /// get-metadata over HTTP reads a HEAD, answered as the GET would be: a 204 (nginx's `return 204`)
    /// or another 2xx that is no file was an object of size -1 — a success naming a file that is not
    /// there. It fails as a download's GET answered so does (202 retryable: the result may come).
    @Test("get-metadata answered 204, 205 or 202 by a HEAD fails typed instead of naming an object of size -1",
          arguments: [204, 205, 202])
    func metadataOfNoFileRefused(status: Int) async throws {
        let server = try NginxServer.start(extraServerConfig: "location = /nothing { return \(status); }")
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/n.bin"))
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .getMetadata, source: "\(server.baseURL)/nothing?token=SECRET")))
        #expect(error.httpStatus == status && error.message.contains("\(status)") && error.message.contains("no file"), "\(error)")
        #expect(error.message.contains("metadata") && !error.message.contains("nothing was kept"), "\(error)")
        #expect(error.retryable == (status == 202), "\(error)")
        #expect(error.url == "\(server.baseURL)/nothing?token=REDACTED", "\(error)")
        let lines = server.accessLogLines(atLeast: 1) { $0.contains("\"HEAD /nothing?token=SECRET HTTP/1.1\" \(status) ") }
        #expect(lines.count == 1, "nginx answered the HEAD itself: \(server.accessLog)")
        // A file is still read as one.
        let file = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "\(server.baseURL)/n.bin")))
        #expect(file.object?.size == Int64(payload.count))
    }

    /// An upload under `if_exists: skip` or `fail` looks with a HEAD first. One answered 204 (or another
    /// 2xx that is no file) was a file of size -1 there: `skip` skipped the upload — the job succeeded,
    /// nothing uploaded — and `fail` refused it as existing. It says neither: the job fails typed, and
    /// no PUT is sent on its word.
    @Test("an upload under skip or fail whose look before (HEAD) is answered 204 or 202 fails typed, sending no PUT",
          arguments: [(IfExists.skip, 204), (IfExists.fail, 204), (IfExists.skip, 202)])
    func lookBeforeUploadAnsweredNoFile(mode: IfExists, status: Int) async throws {
        let server = try NginxServer.start(extraServerConfig: "location = /nothing { return \(status); }")
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let spec = JobSpec(kind: .uploadData, destination: "\(server.baseURL)/nothing", data: Data("bytes".utf8), ifExists: mode)
        let error = try failure(await run(backend, spec))
        #expect(error.httpStatus == status && error.message.contains("before uploading") && error.message.contains("no file"), "\(error)")
        #expect(error.retryable == (status == 202), "\(error)")
        let lines = server.accessLogLines(atLeast: 1) { $0.contains("\"HEAD /nothing HTTP/1.1\" \(status) ") }
        #expect(lines.count == 1, "\(server.accessLog)")
        #expect(!server.accessLog.contains("\"PUT /nothing"), "\(server.accessLog)")
    }
}
