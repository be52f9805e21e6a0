import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// An object resource from a server that leaves out its size (or gives one that is not a byte count) is
/// not an object resource: a download planned from it would fetch nothing, and with the hashes missing
/// too, commit an empty file as the object. Refused instead, naming the server's answer.
@Suite("GCS object resources without a size", .onTestThreads)
struct ObjectResourceTests {
    @Test("a download whose metadata has no size (nor hashes) is refused, nothing written", arguments: [nil, "-5", "12abc", "1e3"])
    func noSize(size: String?) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let payload = patternData(100_000, seed: 81)
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            // The metadata GET (not the media one): size replaced or removed, hashes removed.
            FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("/o/") && !$0.target.contains("alt=media") }),
                      .rewriteResponse { _, response in
                          guard var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
                          json["size"] = size
                          json["crc32c"] = nil
                          json["md5Hash"] = nil
                          response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? Data()
                          response.setHeader("Content-Length", String(response.body.count))
                      }, times: 100),
        ])
        defer { proxy.stop() }
        let direct = GCSBackend(configuration: emulatorConfiguration(server))
        _ = try finished(await run(direct, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/n.bin", data: payload)))
        let configuration = emulatorConfiguration(server, through: proxy)
        let backend = GCSBackend(configuration: configuration)
        let directory = try TemporaryDirectory("jobctl-no-size")
        defer { directory.remove() }
        let destination = directory.file("n.bin")
        let refused = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/n.bin", destination: destination)))
        #expect(refused.message.contains("size"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: destination))
        let memory = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/n.bin", maxSize: 1 << 20)))
        #expect(memory.message.contains("size"), "\(memory)")
    }
}
