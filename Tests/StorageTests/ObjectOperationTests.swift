import Foundation
import JobModel
import Storage
import TestSupport
import Testing

/// get-metadata, update-metadata and delete against the GCS emulator (read back by the official client),
/// `file://` buckets and nginx (HEAD and WebDAV DELETE).
@Suite("Object operations", .onTestThreads)
struct ObjectOperationTests {
    private static var script: String { "\(PackagePaths.root)/Tests/StorageTests/Fixtures/interop.py" }
    private static var python: String { "\(PackagePaths.venv)/bin/python" }

    /// What the official client sees of `name`.
    private func officialView(_ server: EmulatorServer, _ name: String) throws -> [String: Any] {
        let output = try runProcess(Self.python, [Self.script, "describe", server.bucket, name],
                                    environment: ["STORAGE_EMULATOR_HOST": server.baseURL])
        guard output.status == 0, let json = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any] else {
            throw TestServerError("interop.py describe failed (\(output.status)): \(output.stderr.suffix(2000))")
        }
        return json
    }

    @Test("GCS: get-metadata, update-metadata (a null deletes a key; the official client reads it back), delete")
    func gcsObjectOperations() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let object = "gs://\(server.bucket)/docs/a.txt"
        let payload = Data("object operations\n".utf8)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: object, data: payload,
                                                    metadata: UploadMetadata(customMetadata: ["keep": "1", "gone": "2"]))))

        let read = try finished(await run(backend, JobSpec(kind: .getMetadata, source: object)))
        #expect(read.object?.size == Int64(payload.count))
        #expect(read.object?.contentType == "text/plain")
        #expect(read.object?.customMetadata == ["keep": "1", "gone": "2"])
        #expect(read.object?.md5Hash == hashes(payload).md5 && read.object?.crc32c == hashes(payload).crc32c)
        #expect(read.object?.generation != nil && read.object?.updated != nil)

        var update = JobSpec(kind: .updateMetadata, destination: object,
                             metadata: UploadMetadata(contentType: "text/markdown", cacheControl: "no-store",
                                                      contentDisposition: "attachment", contentLanguage: "en",
                                                      customMetadata: ["added": "3"]))
        update.removeCustomMetadata = ["gone"]
        let updated = try finished(await run(backend, update))
        #expect(updated.object?.contentType == "text/markdown")
        #expect(updated.object?.customMetadata == ["keep": "1", "added": "3"])
        let theirs = try officialView(server, "docs/a.txt")
        #expect(theirs["contentType"] as? String == "text/markdown", "\(theirs)")
        #expect(theirs["cacheControl"] as? String == "no-store")
        #expect(theirs["contentDisposition"] as? String == "attachment")
        #expect(theirs["contentLanguage"] as? String == "en")
        // GCS deletes a key PATCHed to null; gcp-storage-emulator replaces the map and keeps the null, which
        // the official client reads as None: either way the key holds no value any more.
        let custom = try #require(theirs["metadata"] as? [String: Any], "\(theirs)")
        #expect(custom["keep"] as? String == "1" && custom["added"] as? String == "3", "\(custom)")
        #expect(custom["gone"] == nil || custom["gone"] is NSNull, "\(custom)")
        #expect(Set(custom.keys).isSubset(of: ["keep", "added", "gone"]), "\(custom)")
        let reread = try finished(await run(backend, JobSpec(kind: .getMetadata, source: object)))
        #expect(reread.object?.customMetadata == ["keep": "1", "added": "3"])
        #expect(reread.object?.cacheControl == "no-store" && reread.object?.contentLanguage == "en")

        let deleted = try finished(await run(backend, JobSpec(kind: .delete, destination: object)))
        #expect(deleted.deleted == object)
        #expect(try officialView(server, "docs/a.txt")["error"] as? String == "not found")
        let again = try failure(await run(backend, JobSpec(kind: .delete, destination: object)))
        #expect(again.code == .objectNotFound && !again.retryable, "\(again)")
        let missing = try failure(await run(backend, JobSpec(kind: .getMetadata, source: object)))
        #expect(missing.code == .objectNotFound)
        let missingUpdate = try failure(await run(backend, JobSpec(kind: .updateMetadata, destination: object,
                                                                   metadata: UploadMetadata(cacheControl: "x"))))
        #expect(missingUpdate.code == .objectNotFound)
    }

    @Test("file://: get-metadata, update-metadata rewrites the sidecar, delete removes object and sidecar, never through a link")
    func localObjectOperations() async throws {
        let directory = try TemporaryDirectory("jobctl-objops")
        defer { directory.remove() }
        let buckets = directory.file("buckets")
        try FileManager.default.createDirectory(atPath: buckets + "/b/docs", withIntermediateDirectories: true)
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets))
        let payload = Data("local object\n".utf8)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/docs/a.txt", data: payload,
                                                    metadata: UploadMetadata(customMetadata: ["keep": "1", "gone": "2"]))))
        let read = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "file://b/docs/a.txt")))
        #expect(read.object?.size == Int64(payload.count) && read.object?.crc32c == hashes(payload).crc32c)
        #expect(read.object?.customMetadata == ["keep": "1", "gone": "2"])

        var update = JobSpec(kind: .updateMetadata, destination: "file://b/docs/a.txt",
                             metadata: UploadMetadata(contentType: "text/markdown", customMetadata: ["added": "3"]))
        update.removeCustomMetadata = ["gone"]
        let updated = try finished(await run(backend, update))
        #expect(updated.object?.metageneration == "2")
        let reread = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "file://b/docs/a.txt")))
        #expect(reread.object?.contentType == "text/markdown")
        #expect(reread.object?.customMetadata == ["keep": "1", "added": "3"])
        #expect(reread.object?.crc32c == hashes(payload).crc32c)
        // The sidecar was replaced by a rename: no temporary file is left beside it.
        let names = try FileManager.default.contentsOfDirectory(atPath: buckets + "/b/docs").sorted()
        #expect(names == [".a.txt.jobctl-meta.json", "a.txt"], "\(names)")

        // A link at the object's name is refused, and neither it nor its target is removed.
        let outside = directory.file("outside.txt")
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: outside))
        try FileManager.default.createSymbolicLink(atPath: buckets + "/b/docs/link.txt", withDestinationPath: outside)
        let linked = try failure(await run(backend, JobSpec(kind: .delete, destination: "file://b/docs/link.txt")))
        #expect(linked.code == .pathError, "\(linked)")
        #expect(FileManager.default.fileExists(atPath: outside))
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: buckets + "/b/docs/link.txt")) == outside)

        let deleted = try finished(await run(backend, JobSpec(kind: .delete, destination: "file://b/docs/a.txt")))
        #expect(deleted.deleted == "file://b/docs/a.txt")
        let left = try FileManager.default.contentsOfDirectory(atPath: buckets + "/b/docs").sorted()
        #expect(left == ["link.txt"], "\(left)")
        let again = try failure(await run(backend, JobSpec(kind: .delete, destination: "file://b/docs/a.txt")))
        #expect(again.code == .objectNotFound && !again.retryable)
        let missing = try failure(await run(backend, JobSpec(kind: .updateMetadata, destination: "file://b/docs/a.txt",
                                                             metadata: UploadMetadata(cacheControl: "x"))))
        #expect(missing.code == .objectNotFound)
    }

    @Test("HTTP: get-metadata is a HEAD, delete a WebDAV DELETE (nginx); update-metadata is refused")
    func httpObjectOperations() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try FileManager.default.createDirectory(atPath: server.root + "/d", withIntermediateDirectories: true)
        let payload = Data("served by nginx\n".utf8)
        try payload.write(to: URL(fileURLWithPath: server.root + "/d/page.txt"))
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let url = "\(server.baseURL)/d/page.txt"

        let read = try finished(await run(backend, JobSpec(kind: .getMetadata, source: url)))
        #expect(read.object?.size == Int64(payload.count))
        #expect(read.object?.contentType == "text/plain")
        #expect(read.object?.generation?.isEmpty == false && read.object?.updated?.isEmpty == false)

        let refused = try failure(await run(backend, JobSpec(kind: .updateMetadata, destination: url,
                                                             metadata: UploadMetadata(cacheControl: "x"))))
        #expect(refused.code == .invalidArgument)

        let deleted = try finished(await run(backend, JobSpec(kind: .delete, destination: url)))
        #expect(deleted.deleted == url)
        #expect(!FileManager.default.fileExists(atPath: server.root + "/d/page.txt"))
        let again = try failure(await run(backend, JobSpec(kind: .delete, destination: url)))
        #expect(again.code == .objectNotFound && again.httpStatus == 404)
        let missing = try failure(await run(backend, JobSpec(kind: .getMetadata, source: url)))
        #expect(missing.code == .objectNotFound)
    }
}
