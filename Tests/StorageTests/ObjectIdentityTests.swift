import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// What a GCS metadata answer says is believed only about the object asked for, and a download token
/// only once the server holds it.
@Suite("GCS answers about the object asked for", .onTestThreads)
struct ObjectIdentityTests {
    /// The emulator's object resources (metadata reads and PATCH answers, not media) rewritten to name
    /// another bucket and object.
    private static let anotherObject = FaultRule(
        RequestMatch(predicate: { $0.target.contains("/storage/v1/b/") && $0.target.contains("/o/") && !$0.target.contains("alt=media") }),
        .rewriteResponse { _, response in
            guard var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any], json["name"] != nil else { return }
            json["bucket"] = "evil-bucket"
            json["name"] = "../../etc/other.txt"
            response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? response.body
        }, times: .max)

    /// Every job that reads an object's metadata — downloads (one stream and sliced), get-metadata,
    /// fetch-url, update-metadata, a delete on condition of a generation, an upload's look first — was
    /// given another object's resource: the downloads and get-metadata succeeded and recorded
    /// `evil-bucket/../../etc/other.txt` as their object. Each now fails retryable, having used none of it.
    @Test("a metadata answer naming another bucket and object is refused by every job that reads one")
    func metadataOfAnotherObject() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let direct = GCSBackend(configuration: emulatorConfiguration(server))
        let object = "gs://\(server.bucket)/small.txt"
        let stored = try finished(await run(direct, JobSpec(kind: .uploadData, destination: object, data: patternData(3_000, seed: 71))))
        let generation = try #require(stored.object?.generation.flatMap { Int64($0) })
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [Self.anotherObject])
        defer { proxy.stop() }
        var sliced = emulatorConfiguration(server, through: proxy)
        sliced.slicedThreshold = 1_000
        let directory = try TemporaryDirectory("jobctl-another-object")
        defer { directory.remove() }
        let destination = directory.file("small.txt")
        var updating = JobSpec(kind: .updateMetadata, destination: object, metadata: UploadMetadata(cacheControl: "no-cache"))
        updating.ifGeneration = generation
        var deleting = JobSpec(kind: .delete, destination: object)
        deleting.ifGeneration = generation
        let jobs: [(String, GCSBackend, JobSpec)] = [
            ("download-file", GCSBackend(configuration: emulatorConfiguration(server, through: proxy)),
             JobSpec(kind: .downloadFile, source: object, destination: destination)),
            ("sliced download-file", GCSBackend(configuration: sliced), JobSpec(kind: .downloadFile, source: object, destination: destination)),
            ("download-memory", GCSBackend(configuration: emulatorConfiguration(server, through: proxy)),
             JobSpec(kind: .downloadMemory, source: object, maxSize: 1 << 20)),
            ("get-metadata", GCSBackend(configuration: emulatorConfiguration(server, through: proxy)), JobSpec(kind: .getMetadata, source: object)),
            ("fetch-url", GCSBackend(configuration: emulatorConfiguration(server, through: proxy)), JobSpec(kind: .fetchURL, source: object)),
            ("update-metadata", GCSBackend(configuration: emulatorConfiguration(server, through: proxy)), updating),
            ("delete", GCSBackend(configuration: emulatorConfiguration(server, through: proxy)), deleting),
            ("upload-data skip-identical", GCSBackend(configuration: emulatorConfiguration(server, through: proxy)),
             JobSpec(kind: .uploadData, destination: object, data: Data("other".utf8), ifExists: .skipIdentical)),
        ]
        for (label, backend, spec) in jobs {
            let error = try failure(await run(backend, spec))
            #expect(error.retryable && error.message.contains("describes another object ('evil-bucket/../../etc/other.txt')"),
                    "\(label): \(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: destination))
        let sent = proxy.exchanges.map(\.request)
        #expect(!sent.contains { $0.target.contains("alt=media") || $0.method == "PATCH" || $0.method == "DELETE" || $0.method == "POST" },
                "\(sent.map { "\($0.method) \($0.target)" })")
        let after = try finished(await run(direct, JobSpec(kind: .getMetadata, source: object)))
        #expect(after.object?.generation == stored.object?.generation && after.object?.cacheControl == nil)
    }

    /// The download token's PATCH answered 200 by a server that did not apply it (here the proxy sends
    /// it an empty PATCH): fetch-url succeeded with a URL whose token the object never held. Now the
    /// object is read once more, and without the token the job fails retryable, returning no URL.
    @Test("fetch-url fails retryable when the server does not hold the token it answered 200 for")
    func tokenNotStored() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let direct = GCSBackend(configuration: emulatorConfiguration(server))
        let object = "gs://\(server.bucket)/t.txt"
        _ = try finished(await run(direct, JobSpec(kind: .uploadData, destination: object, data: Data("t".utf8))))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PATCH"), .rewriteRequest { request in request.body = Data("{}".utf8) }, times: .max),
        ])
        defer { proxy.stop() }
        let error = try failure(await run(GCSBackend(configuration: emulatorConfiguration(server, through: proxy)),
                                          JobSpec(kind: .fetchURL, source: object)))
        #expect(error.retryable && error.message.contains("does not hold the token"), "\(error)")
        #expect(proxy.exchanges.map(\.request.method) == ["GET", "PATCH", "GET"])
        let stored = try finished(await run(direct, JobSpec(kind: .getMetadata, source: object)))
        #expect(stored.object?.downloadTokens == nil)
    }

    /// The PATCH applied, but its answer left the custom metadata out: the object read once more holds
    /// the token, and that is the URL's.
    @Test("fetch-url reads the object once more when the PATCH's answer does not show the token")
    func tokenStoredAnswerSilent() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let direct = GCSBackend(configuration: emulatorConfiguration(server))
        let object = "gs://\(server.bucket)/s.txt"
        _ = try finished(await run(direct, JobSpec(kind: .uploadData, destination: object, data: Data("s".utf8))))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PATCH"), .rewriteResponse { _, response in
                guard var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
                json["metadata"] = nil
                response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? response.body
            }, times: .max),
        ])
        defer { proxy.stop() }
        let fetched = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server, through: proxy)),
                                             JobSpec(kind: .fetchURL, source: object)))
        let stored = try #require(try finished(await run(direct, JobSpec(kind: .getMetadata, source: object))).object?.downloadTokens)
        #expect(fetched.url?.hasSuffix("&token=\(stored)") == true && fetched.object?.downloadTokens == stored, "\(fetched)")
        #expect(proxy.exchanges.map(\.request.method) == ["GET", "PATCH", "GET"])
    }
}
