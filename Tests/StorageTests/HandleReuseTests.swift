import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// The curl engine gives every exchange a new easy handle (the multi handle keeps the connections).
/// Observed through the fault proxy in front of nginx: every request carries its own method, headers
/// and body and nothing of the one before; a reused connection reset mid-series is sent again; an
/// answer whose first header line is folded onto nothing is refused, not a crash.
@Suite("Curl engine: a new easy handle an exchange", .onTestThreads)
struct HandleReuseTests {
    private let configuration = StorageConfiguration(stallTimeout: 30, connectTimeout: 5)

    @Test("sequential exchanges each get a new easy handle over one kept connection, and each request carries only its own method, headers and body")
    func oneHandleNothingCarriedOver() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let engine = try CurlEngine(threadName: "reuse-test-curl")
        let backend = HTTPBackend(configuration: configuration, engine: engine)
        for round in 0..<6 {
            let payload = patternData(1_000 + round * 4_000, seed: UInt64(round + 1))
            _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/r\(round).bin", data: payload)))
            let fetched = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/r\(round).bin",
                                                                  maxSize: 1 << 20)))
            #expect(fetched.data == payload, "round \(round)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: server.root + "/r\(round).bin")) == payload, "round \(round)")
        }
        // A handle an exchange, and the connection kept between them.
        #expect(engine.handlesCreated.load(ordering: .relaxed) == 12)
        let exchanges = proxy.exchanges
        #expect(exchanges.count == 12)
        #expect(Set(exchanges.map(\.connection)).count == 1, "\(exchanges.map(\.connection))")
        for exchange in exchanges {
            let request = exchange.request
            switch request.method {
            case "PUT":
                let round = Int(request.target.dropFirst(2).prefix { $0.isNumber }) ?? -1
                #expect(request.body == patternData(1_000 + round * 4_000, seed: UInt64(round + 1)), "\(request.startLine)")
                #expect(request.header("Content-Length") == String(request.body.count))
            case "GET":
                // Nothing of the PUT before it: no body, no body headers, no upload method.
                #expect(request.body.isEmpty, "\(request.startLine)")
                #expect(request.header("Content-Length") == nil, "\(request.startLine)")
                #expect(request.header("Content-Type") == nil, "\(request.startLine)")
                #expect(request.header("Transfer-Encoding") == nil, "\(request.startLine)")
            default:
                Issue.record("unexpected request \(request.startLine)")
            }
        }
    }

    /// libcurl 7.88 keeps the receive buffer of a transfer that failed before it had a connection — a
    /// redirect to a scheme it refuses, a host name that does not resolve — through `curl_easy_reset`, and
    /// then refuses `CURLOPT_BUFFERSIZE` on that handle. Reused, such a handle failed every later exchange
    /// at set-up with `internalError` (never retried): one bad URL failed the worker's next jobs.
    @Test("a redirect to file:// does not fail the next exchanges")
    func failedHandleNotKept() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let payload = patternData(64 * 1024, seed: 8)
        try payload.write(to: URL(fileURLWithPath: server.root + "/p.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(pathContains: "/away"),
                      .respond(.response(302, reason: "Found", headers: [ProxyHeader("Location", "file:///etc/hostname")])), times: 5),
        ])
        defer { proxy.stop() }
        let engine = try CurlEngine(threadName: "reuse-test-curl")
        let backend = HTTPBackend(configuration: configuration, engine: engine)
        let good = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/p.bin", maxSize: 1 << 20)
        #expect(try finished(await run(backend, good)).data == payload)
        for kind in [JobKind.downloadMemory, .downloadFile] {
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let away = JobSpec(kind: kind, source: "\(proxy.baseURL)/away", destination: kind == .downloadFile ? directory.file("a") : nil,
                               maxSize: kind == .downloadMemory ? 1 << 20 : nil)
            let refused = try failure(await run(backend, away))
            #expect(refused.code != .internalError, "\(refused)")
            // The next exchanges run as if nothing had happened, on a new handle.
            #expect(try finished(await run(backend, good)).data == payload)
            #expect(try finished(await run(backend, good)).data == payload)
        }
        #expect(engine.handlesCreated.load(ordering: .relaxed) == 7)
    }

    /// libcurl 7.88 keeps a pointer to the last header a handle stored past `curl_easy_reset` and the
    /// freeing of those headers at the next request; an answer whose first header line begins with a
    /// space or a tab is appended to that freed header: a double free (glibc aborted the worker) or a
    /// write into freed memory, on any server's word, once the handle had served one exchange.
    @Test("an answer whose first header line is folded onto nothing fails its exchange, after others and before others",
          arguments: [" X-Folded: y", "\tX-Folded: y"])
    func firstHeaderFoldedOntoNothing(line: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let payload = patternData(4_096, seed: 9)
        try payload.write(to: URL(fileURLWithPath: server.root + "/p.bin"))
        let folded = Data("HTTP/1.1 200 OK\r\n\(line)\r\nContent-Length: 5\r\nX-Next: z\r\n\r\nhello".utf8)
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(pathContains: "/folded"), .respondAsWritten(folded, seconds: 0), times: .max),
        ])
        defer { proxy.stop() }
        let engine = try CurlEngine(threadName: "fold-test-curl")
        let backend = HTTPBackend(configuration: configuration, engine: engine)
        let good = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/p.bin", maxSize: 1 << 20)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let bad = [
            JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/folded", maxSize: 1 << 20),
            JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/folded", destination: directory.file("f.bin")),
            JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/folded.bin", data: payload),
        ]
        for spec in bad {
            #expect(try finished(await run(backend, good)).data == payload)
            let refused = try failure(await run(backend, spec))
            #expect(refused.message.contains("not valid HTTP"), "\(refused)")
            #expect(refused.retryable, "\(refused)")
            #expect(refused.cause?.contains("curl error 43") == true, "\(refused)")
        }
        #expect(try finished(await run(backend, good)).data == payload)
        #expect(!FileManager.default.fileExists(atPath: directory.file("f.bin")))
        #expect(proxy.exchanges.filter { $0.request.target.hasPrefix("/folded") }.count == 3)
    }

    @Test("a file upload reset on a reused connection in the middle of a series is sent again, whole, and the series goes on")
    func resetMidSeriesIsResent() async throws {
        let files = try TemporaryDirectory()
        defer { files.remove() }
        let payloads = (0..<8).map { patternData(16 * 1024, seed: UInt64(100 + $0)) }
        for (index, payload) in payloads.enumerated() {
            try payload.write(to: URL(fileURLWithPath: files.file("f\(index).bin")))
        }
        // libcurl alone decides whether a request reuses an idle connection: tried again until the fault hit one.
        for round in 1...3 {
            let server = try NginxServer.start()
            defer { server.stop() }
            let proxy = try FaultProxy(upstreamPort: server.port, rules: [
                FaultRule(RequestMatch(method: "PUT", pathContains: "/f3.bin", reusedConnection: true), .resetInRequestBody(afterBytes: 4_096)),
            ])
            defer { proxy.stop() }
            let engine = try CurlEngine(threadName: "reuse-test-curl")
            let backend = HTTPBackend(configuration: configuration, engine: engine)
            for index in payloads.indices {
                let uploaded = try finished(await run(backend, JobSpec(kind: .uploadFile, source: files.file("f\(index).bin"),
                                                                       destination: "\(proxy.baseURL)/f\(index).bin")))
                #expect(uploaded.size == Int64(payloads[index].count), "f\(index)")
            }
            for (index, payload) in payloads.enumerated() {
                #expect(try Data(contentsOf: URL(fileURLWithPath: server.root + "/f\(index).bin")) == payload, "f\(index)")
            }
            guard proxy.firedCounts == [1] || round == 3 else { continue }
            #expect(proxy.firedCounts == [1])
            let puts = proxy.exchanges.filter { $0.request.target == "/f3.bin" }
            #expect(puts.count == 2)
            #expect(puts.first?.requestBodyBytes ?? 0 < payloads[3].count)
            #expect(puts.last?.request.body == payloads[3])
            return
        }
    }

    @Test("the upload buffer fits a small known body, is 1 MiB otherwise, never under libcurl's 16 KiB", arguments: [
        (Int64?.none, 1_048_576), (0, 16_384), (100, 16_384), (16_384, 16_384), (16_385, 16_385), (600_000, 600_000),
        (1_048_576, 1_048_576), (5_000_000_000, 1_048_576),
    ] as [(Int64?, Int)])
    func uploadBufferSize(bodyLength: Int64?, expected: Int) {
        #expect(CurlEngine.uploadBufferSize(for: bodyLength) == expected)
    }
}
