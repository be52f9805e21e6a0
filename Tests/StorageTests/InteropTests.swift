import Foundation
import JobModel
import Storage
import TestSupport
import Testing

/// The official Python client (google-cloud-storage) and this backend read each other's objects.
@Suite("Interop with the official client", .onTestThreads)
struct InteropTests {
    private static var script: String { "\(PackagePaths.root)/Tests/StorageTests/Fixtures/interop.py" }
    private static var python: String { "\(PackagePaths.venv)/bin/python" }

    private func peer(_ server: EmulatorServer, _ arguments: [String]) throws -> [String: Any] {
        try Self.peer(server, arguments)
    }

    private static func peer(_ server: EmulatorServer, _ arguments: [String]) throws -> [String: Any] {
        guard FileManager.default.isExecutableFile(atPath: Self.python) else {
            throw TestServerError("the test venv has no python at \(Self.python); create it with google-cloud-storage installed")
        }
        let output = try runProcess(Self.python, [Self.script] + arguments,
                                    environment: ["STORAGE_EMULATOR_HOST": server.baseURL])
        guard output.status == 0,
              let json = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any] else {
            throw TestServerError("interop.py \(arguments.first ?? "") failed (\(output.status)): \(output.stderr.suffix(2000))")
        }
        return json
    }

    @Test("the official client reads back what we uploaded: bytes, md5, crc32c, content type, metadata, token")
    func officialClientReadsOurs() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let payload = patternData(700_000, seed: 77)   // three chunks of 256 KiB
        let source = directory.file("ours.csv")
        try payload.write(to: URL(fileURLWithPath: source))
        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "gs://\(server.bucket)/x/ours.csv",
                                                               metadata: UploadMetadata(cacheControl: "no-cache", customMetadata: ["team": "ops"]))))
        let fetched = try finished(await run(backend, JobSpec(kind: .fetchURL, source: "gs://\(server.bucket)/x/ours.csv")))
        let token = try #require(fetched.object?.downloadTokens)

        let readBack = directory.file("read-back.csv")
        let theirs = try peer(server, ["read", server.bucket, "x/ours.csv", readBack])
        #expect(try Data(contentsOf: URL(fileURLWithPath: readBack)) == payload)
        #expect(theirs["md5Hash"] as? String == hashes(payload).md5)
        #expect(theirs["md5Hash"] as? String == uploaded.object?.md5Hash)
        #expect(theirs["crc32c"] as? String == uploaded.crc32c)
        #expect(theirs["contentType"] as? String == "text/csv")
        #expect(theirs["cacheControl"] as? String == "no-cache", "\(theirs)")
        let metadata = try #require(theirs["metadata"] as? [String: String])
        #expect(metadata["team"] == "ops")
        #expect(metadata["firebaseStorageDownloadTokens"] == token)
    }

    @Test("we download and verify what the official client uploaded")
    func weReadTheirs() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let payload = patternData(1_000_003, seed: 99)
        let source = directory.file("theirs.bin")
        try payload.write(to: URL(fileURLWithPath: source))
        let theirs = try peer(server, ["write", server.bucket, "py/theirs.bin", source, "application/x-peer", "origin=python"])
        #expect(theirs["md5Hash"] as? String == hashes(payload).md5)

        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let destination = directory.file("mine.bin")
        let result = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/py/theirs.bin",
                                                             destination: destination)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        #expect(result.object?.md5Hash == theirs["md5Hash"] as? String)
        #expect(result.crc32c == theirs["crc32c"] as? String)
        #expect(result.object?.contentType == "application/x-peer")
        #expect(result.object?.customMetadata == ["origin": "python"])
    }

    /// The custom map the official client reads, without the keys the emulator keeps as null (GCS deletes them).
    private static func customMetadata(_ described: [String: Any]) -> [String: String] {
        (described["metadata"] as? [String: Any] ?? [:]).compactMapValues { $0 as? String }
    }

    /// GCS answers 412 to a PATCH whose `ifMetagenerationMatch` is not the object's metageneration; the
    /// emulator ignores preconditions, so the proxy checks it with the official client's view.
    private static func metagenerationPrecondition(_ server: EmulatorServer, _ name: String) -> FaultRule {
        FaultRule(RequestMatch(method: "PATCH", predicate: { request in
            guard request.target.contains("/o/\(name)"),
                  let asked = URLComponents(string: request.target)?.queryItems?.first(where: { $0.name == "ifMetagenerationMatch" })?.value,
                  let current = (try? peer(server, ["describe", server.bucket, name]))?["metageneration"] as? String else { return false }
            return asked != current
        }), .respond(.response(412, reason: "Precondition Failed")), times: 10)
    }

    /// The official client removes one key and sets another right after our read of the object (the proxy
    /// runs it once the first metadata GET is answered): before our PATCH.
    private static func theirChange(_ server: EmulatorServer, _ name: String, _ changes: [String]) -> FaultRule {
        FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("/o/\(name)") && !$0.target.contains("alt=media") }),
                  .rewriteResponse { _, _ in _ = try? peer(server, ["patch", server.bucket, name] + changes) })
    }

    @Test("update-metadata and fetch-url never undo a change the official client made between our read and our PATCH")
    func concurrentMetadataChange() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let direct = GCSBackend(configuration: emulatorConfiguration(server))
        for name in ["u.txt", "f.txt"] {
            _ = try finished(await run(direct, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/\(name)", data: Data("x".utf8),
                                                       metadata: UploadMetadata(customMetadata: ["keep": "1", "theirs": "old"]))))
        }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            Self.theirChange(server, "u.txt", ["-theirs", "added=yes"]), Self.metagenerationPrecondition(server, "u.txt"),
            Self.theirChange(server, "f.txt", ["-theirs", "added=yes"]), Self.metagenerationPrecondition(server, "f.txt"),
        ])
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))

        var update = JobSpec(kind: .updateMetadata, destination: "gs://\(server.bucket)/u.txt", metadata: UploadMetadata(customMetadata: ["mine": "2"]))
        update.removeCustomMetadata = ["keep"]
        let updated = try finished(await run(backend, update))
        #expect(updated.object?.customMetadata == ["added": "yes", "mine": "2"], "\(updated)")
        #expect(Self.customMetadata(try peer(server, ["describe", server.bucket, "u.txt"])) == ["added": "yes", "mine": "2"])

        let fetched = try finished(await run(backend, JobSpec(kind: .fetchURL, source: "gs://\(server.bucket)/f.txt")))
        let token = try #require(fetched.object?.downloadTokens)
        #expect(Self.customMetadata(try peer(server, ["describe", server.bucket, "f.txt"]))
                    == ["keep": "1", "added": "yes", "firebaseStorageDownloadTokens": token])
        let patches = proxy.exchanges.filter { $0.request.method == "PATCH" }
        #expect(patches.count == 4 && patches.map { $0.response?.status } == [412, 200, 412, 200],
                "\(patches.map { "\($0.request.target) \($0.response?.status ?? 0)" })")
    }
}
