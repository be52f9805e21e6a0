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

    /// A size past 5 TiB, the largest object GCS holds, is no object's: a download to a file (sliced, above
    /// the threshold) set its partial file to that size and failed `internalError`, "raise the file
    /// system's largest file size", one to memory told the user to raise max_size. Refused for every kind
    /// as the server's fault, before a file is made or a media byte asked for.
    @Test("a size no object can have (past 5 TiB) is the server's fault, before anything is written",
          arguments: ["9223372036854775807", "5497558138881"])
    func sizePastTheLargestObject(size: String) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("/o/") && !$0.target.contains("alt=media") }),
                      .rewriteResponse { _, response in
                          guard var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
                          json["size"] = size
                          response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? Data()
                          response.setHeader("Content-Length", String(response.body.count))
                      }, times: 100),
        ])
        defer { proxy.stop() }
        _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                   JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/h.bin", data: patternData(120, seed: 83))))
        let directory = try TemporaryDirectory("jobctl-huge-size")
        defer { directory.remove() }
        var sliced = emulatorConfiguration(server, through: proxy)
        sliced.slicedThreshold = 1 << 20
        var whole = sliced
        whole.slicedThreshold = nil
        let source = "gs://\(server.bucket)/h.bin"
        for (kind, configuration, spec) in [
            ("sliced download-file", sliced, JobSpec(kind: .downloadFile, source: source, destination: directory.file("s.bin"))),
            ("download-file", whole, JobSpec(kind: .downloadFile, source: source, destination: directory.file("w.bin"))),
            ("download-memory", whole, JobSpec(kind: .downloadMemory, source: source, maxSize: 1 << 20)),
            ("get-metadata", whole, JobSpec(kind: .getMetadata, source: source)),
        ] {
            let error = try failure(await run(GCSBackend(configuration: configuration), spec))
            #expect(error.code == .unknown && !error.retryable, "\(kind): \(error)")
            #expect(error.message.contains("gives a size of \(size) bytes, more than any Cloud Storage object can hold (5 TiB)"),
                    "\(kind): \(error)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty, "a file was made")
        #expect(!proxy.exchanges.contains { $0.request.target.contains("alt=media") }, "media was asked for")
    }
}

/// A server's generation goes back into query strings (`generation=`, `ifGenerationMatch=`) and its
/// download token into the URL `fetch-url` returns: neither may carry a query of its own.
@Suite("GCS values that return in URLs", .onTestThreads)
struct ObjectResourceURLTests {
    /// The emulator's metadata answers rewritten by `change`, for objects `upload` put there directly.
    private static func proxied(_ server: EmulatorServer, change: @escaping @Sendable (inout [String: Any]) -> Void) throws -> FaultProxy {
        try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("/o/") && !$0.target.contains("alt=media") }),
                      .rewriteResponse { _, response in
                          guard var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
                          change(&json)
                          response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? Data()
                          response.setHeader("Content-Length", String(response.body.count))
                      }, times: 100),
        ])
    }

    @Test("a generation that is not a whole number is refused before any URL carries it",
          arguments: ["1&alt=json", "12 3", "1#x", "-1", "1.5", "", "99999999999999999999"])
    func generationNotANumber(generation: String) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let payload = patternData(50_000, seed: 82)
        let proxy = try Self.proxied(server) { json in json["generation"] = generation }
        defer { proxy.stop() }
        _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                   JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/g.bin", data: payload)))
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let directory = try TemporaryDirectory("jobctl-generation")
        defer { directory.remove() }
        let destination = directory.file("g.bin")
        let refused = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/g.bin", destination: destination)))
        #expect(refused.message.contains("generation"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: destination))
        let media = proxy.exchanges.filter { $0.request.target.contains("alt=media") }
        #expect(media.isEmpty, "\(media.map(\.request.target))")
    }

    @Test("fetch-url percent-encodes a download token that is not a plain token")
    func tokenIsEncoded() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let direct = GCSBackend(configuration: emulatorConfiguration(server))
        _ = try finished(await run(direct, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/t.txt", data: Data("t".utf8),
                                                   metadata: UploadMetadata(customMetadata: [GCSObjectJSON.downloadTokensKey: "a&alt=json#b c,second"]))))
        let fetched = try finished(await run(direct, JobSpec(kind: .fetchURL, source: "gs://\(server.bucket)/t.txt")))
        let url = try #require(fetched.url)
        #expect(url.hasSuffix("?alt=media&token=a%26alt%3Djson%23b%20c"), "\(url)")
        let components = try #require(URLComponents(string: url))
        #expect(components.queryItems?.map(\.name) == ["alt", "token"])
        #expect(components.queryItems?.last?.value == "a&alt=json#b c")
    }
}
