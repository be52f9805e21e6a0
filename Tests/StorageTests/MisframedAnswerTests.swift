import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A server whose `Content-Length` is smaller than the body it sends. The answer is what the length frames
/// (as libcurl and RFC 9112 §6.3 take it); where anything else tells the object — a served hash, a GCS
/// object's size — the difference fails the job typed, never a success. The rest of the body stayed on
/// the kept-alive connection, and the next request sent on it (another job's) read it as the start of
/// its own answer: "the server's answer is not HTTP". Now such a connection is not kept. And a 200 whose
/// `Content-Range` names a larger file than its body was a whole download to memory (to a file it was
/// already a short one).
@Suite("answers whose length says otherwise than their body", .onTestThreads)
struct MisframedAnswerTests {
    /// Over 256 KiB (libcurl's receive buffer): the rest arrives after libcurl's last read of the body,
    /// and waits on the connection (a shorter answer's rest comes in libcurl's first read, which drops it).
    private let payload = patternData(300_000, seed: 41)
    private let other = patternData(20_000, seed: 42)

    /// nginx serving `payload` at /p.bin and `other` at /o.bin, behind a proxy that announces 1,000 bytes
    /// fewer than the first `times` answers to `match` hold.
    private func served(_ match: RequestMatch, times: Int = 1,
                        _ rewrite: (@Sendable (ProxyMessage, inout ProxyMessage) -> Void)? = nil) throws -> (NginxServer, FaultProxy) {
        let server = try NginxServer.start()
        do {
            try payload.write(to: URL(fileURLWithPath: server.root + "/p.bin"))
            try other.write(to: URL(fileURLWithPath: server.root + "/o.bin"))
            var rules = [FaultRule(match, .misstatedLength(by: -1_000), times: times)]
            if let rewrite { rules.append(FaultRule(match, .rewriteResponse(rewrite), times: times)) }
            return (server, try FaultProxy(upstreamPort: server.port, rules: rules))
        } catch {
            server.stop()
            throw error
        }
    }

    @Test("HTTP: the length frames the answer, and the rest is not read as the next request's answer")
    func restIsNotTheNextAnswer() async throws {
        let (server, proxy) = try served(RequestMatch(method: "GET", pathContains: "/p.bin"))
        defer {
            proxy.stop()
            server.stop()
        }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let framed = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/p.bin", maxSize: 1 << 20)))
        #expect(framed.data == payload.prefix(payload.count - 1_000), "what Content-Length framed, as curl keeps it")
        let next = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/o.bin", maxSize: 1 << 20)))
        #expect(next.data == other)
        #expect(proxy.firedCounts == [1])
        let connections = proxy.exchanges.map(\.connection)
        #expect(connections.count == 2 && connections[0] != connections[1], "the connection was not kept: \(connections)")
    }

    /// libcurl tries the connection shut down for its waiting bytes, fails to send at once and sends
    /// the request on a new one: that try must not count as a copy of a DELETE that may have arrived,
    /// or a 404 would be taken for the delete done ("deleted" for a file that never existed).
    @Test("HTTP: a DELETE after a dropped connection still reports a missing file as missing")
    func deleteAfterDroppedConnection() async throws {
        let (server, proxy) = try served(RequestMatch(method: "GET", pathContains: "/p.bin"))
        defer {
            proxy.stop()
            server.stop()
        }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        _ = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/p.bin", maxSize: 1 << 20)))
        let missing = try failure(await run(backend, JobSpec(kind: .delete, destination: "\(proxy.baseURL)/missing.bin")))
        #expect(missing.code == .objectNotFound, "\(missing)")
        #expect(proxy.exchanges.filter { $0.request.method == "DELETE" }.count == 1)
    }

    @Test("HTTP: a served hash of the whole body fails the copy for good, to a file or to memory")
    func servedHashTellsIt() async throws {
        let whole = hashes(payload).crc32c
        let (server, proxy) = try served(RequestMatch(method: "GET", pathContains: "/p.bin"), times: 2) { _, response in
            response.setHeader("x-goog-hash", "crc32c=\(whole)")
        }
        defer {
            proxy.stop()
            server.stop()
        }
        let directory = try TemporaryDirectory("jobctl-misframed")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let toFile = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/p.bin", destination: directory.file("p.bin"))))
        #expect(toFile.code == .nonMatchingChecksum && !toFile.retryable, "\(toFile)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("p.bin")))
        let toMemory = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/p.bin", maxSize: 1 << 20)))
        #expect(toMemory.code == .nonMatchingChecksum, "\(toMemory)")
        #expect(proxy.firedCounts == [2, 2])
        let next = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/o.bin", maxSize: 1 << 20)))
        #expect(next.data == other)
    }

    @Test("GCS: fewer bytes than the object's size fail retryable, the next request is unharmed, and a retry gets them all")
    func objectSizeTellsIt() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let bucket = server.bucket
        _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                   JobSpec(kind: .uploadData, destination: "gs://\(bucket)/g.bin", data: payload)))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .misstatedLength(by: -1_000), times: 2),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-misframed")
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let fileSpec = JobSpec(kind: .downloadFile, source: "gs://\(bucket)/g.bin", destination: directory.file("g.bin"))
        let toFile = try failure(await run(backend, fileSpec))
        #expect(toFile.retryable && toFile.code != .nonMatchingChecksum && toFile.message.contains("of 300000"), "\(toFile)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("g.bin")))
        // The memory download's metadata request goes next; on the kept connection it read the rest.
        let memorySpec = JobSpec(kind: .downloadMemory, source: "gs://\(bucket)/g.bin", maxSize: 1 << 20)
        let toMemory = try failure(await run(backend, memorySpec))
        #expect(toMemory.retryable && toMemory.message.contains("299000 bytes of an object of 300000"), "\(toMemory)")
        #expect(proxy.firedCounts == [2])
        #expect(try finished(await run(backend, memorySpec)).data == payload)
        _ = try finished(await run(backend, fileSpec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("g.bin"))) == payload)
    }

    @Test("HTTP: a 200 whose Content-Range names a larger file is a short download to memory too, retryable")
    func contentRangeTotalTellsIt() async throws {
        let total = payload.count + 1_000
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/p.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .rewriteResponse { _, response in
                response.setHeader("Content-Range", "bytes 0-\(response.body.count - 1)/\(total)")
            }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let spec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/p.bin", maxSize: 1 << 20)
        let short = try failure(await run(backend, spec))
        #expect(short.retryable && short.message.contains("300000 bytes of a file of 301000"), "\(short)")
        #expect(proxy.firedCounts == [1])
        #expect(try finished(await run(backend, spec)).data == payload)
    }
}
