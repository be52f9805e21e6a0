import Foundation
import JobModel
import Storage
import TestSupport
import Testing

/// JOBCTL_REFUSE_EXECUTABLES applies to every scheme's uploads, against real servers: the GCS emulator,
/// nginx WebDAV PUT and local directories.
@Suite("Executable upload policy for every scheme", .onTestThreads)
struct UploadPolicyTests {
    private func configuration(refusing entries: String, endpoint: String = "https://storage.googleapis.com",
                               buckets: String = "buckets") throws -> StorageConfiguration {
        var configuration = try StorageConfiguration.fromEnvironment(
            ["JOBCTL_REFUSE_EXECUTABLES": entries, "STORAGE_EMULATOR_HOST": endpoint], localBucketsDirectory: buckets)
        configuration.stallTimeout = 30
        configuration.connectTimeout = 5
        return configuration
    }

    @Test("'*' refuses gs:// uploads of executables before anything reaches the server; other names pass")
    func gcsUploadsAreCovered() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory("policy-gcs")
        defer { directory.remove() }
        let tool = directory.file("tool.exe")
        try Data("MZ".utf8).write(to: URL(fileURLWithPath: tool))

        for entries in ["*", "gs://\(server.bucket)", server.bucket, "gs://*"] {
            let backend = GCSBackend(configuration: try configuration(refusing: entries, endpoint: server.baseURL))
            let error = try failure(await run(backend, JobSpec(kind: .uploadFile, source: tool,
                                                               destination: "gs://\(server.bucket)/bin/tool.exe")))
            #expect(error.code == .unauthorized, "\(entries): \(error)")
            #expect(error.message.contains("bucket 'gs://\(server.bucket)' refuses executable uploads (.exe)"), "\(error)")
            #expect(error.message.contains("JOBCTL_REFUSE_EXECUTABLES lists '\(entries)'"), "\(error)")
            // The source's name counts whatever the object is called; upload-data by the object's name.
            #expect(try failure(await run(backend, JobSpec(kind: .uploadFile, source: tool,
                                                           destination: "gs://\(server.bucket)/renamed.bin"))).code == .unauthorized)
            #expect(try failure(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/app.APK",
                                                           data: Data("x".utf8)))).code == .unauthorized)
        }
        let allowed = GCSBackend(configuration: try configuration(refusing: "*", endpoint: server.baseURL))
        #expect(await run(allowed, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/bin/tool.exe"))
                    .failureCode == .objectNotFound, "nothing was uploaded")
        _ = try finished(await run(allowed, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/notes.txt", data: Data("n".utf8))))

        // Entries for other buckets or other schemes leave this bucket alone.
        for entries in ["other-bucket", "gs://other-bucket", "file://\(server.bucket)", "http://*"] {
            let backend = GCSBackend(configuration: try configuration(refusing: entries, endpoint: server.baseURL))
            _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/ok-\(entries.count).exe",
                                                        data: Data("ok".utf8))))
        }
    }

    @Test("'*' refuses HTTP PUT uploads of executables; nothing reaches nginx")
    func httpUploadsAreCovered() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let host = "127.0.0.1:\(server.port)"
        for entries in ["*", "http://\(host)", host, "http://*"] {
            let backend = HTTPBackend(configuration: try configuration(refusing: entries))
            let error = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/drop/setup.exe",
                                                               data: Data("MZ".utf8))))
            #expect(error.code == .unauthorized, "\(entries): \(error)")
            #expect(error.message.contains("server 'http://\(host)' refuses executable uploads (.exe)"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: server.root + "/drop/setup.exe"))
        let settled = try server.settledAccessLog()
        #expect(!settled.contains("PUT"), "\(settled)")

        for entries in ["https://\(host)", "gs://*", "other.example:80"] {
            let backend = HTTPBackend(configuration: try configuration(refusing: entries))
            _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/drop/ok.exe", data: Data("ok".utf8))))
        }
        #expect(FileManager.default.fileExists(atPath: server.root + "/drop/ok.exe"))
    }

    @Test("file:// buckets and file:/// folders: the refusal names the bucket or the folder's path")
    func localUploadsAreCovered() async throws {
        let directory = try TemporaryDirectory("policy-local")
        defer { directory.remove() }
        let buckets = directory.file("buckets")
        let folder = directory.file("in/sub")

        let star = LocalBackend(configuration: try configuration(refusing: "*", buckets: buckets))
        let named = try failure(await run(star, JobSpec(kind: .uploadData, destination: "file://drop/a.bat", data: Data())))
        #expect(named.message.contains("local bucket 'file://drop' refuses executable uploads (.bat)"), "\(named)")
        let absolute = try failure(await run(star, JobSpec(kind: .uploadData, destination: "file://\(folder)/a.dll", data: Data())))
        #expect(absolute.code == .unauthorized)
        #expect(absolute.message.contains("local folder '\(folder)' refuses executable uploads (.dll)"), "\(absolute)")
        #expect(!absolute.message.contains("file:///'"), "\(absolute)")
        #expect(!FileManager.default.fileExists(atPath: folder))

        // A folder entry covers that folder and below, by path components.
        let scoped = LocalBackend(configuration: try configuration(refusing: directory.file("in"), buckets: buckets))
        #expect(try failure(await run(scoped, JobSpec(kind: .uploadData, destination: "file://\(folder)/b.ipa", data: Data()))).code
                    == .unauthorized)
        _ = try finished(await run(scoped, JobSpec(kind: .uploadData, destination: "file://\(directory.file("inbox"))/b.ipa", data: Data())))
        _ = try finished(await run(scoped, JobSpec(kind: .uploadData, destination: "file://drop/b.ipa", data: Data())))
        let uri = LocalBackend(configuration: try configuration(refusing: "file://\(directory.file("in"))/", buckets: buckets))
        #expect(try failure(await run(uri, JobSpec(kind: .uploadData, destination: "file://\(folder)/c.exe", data: Data()))).code
                    == .unauthorized)
    }

    @Test("policy entries match per scheme", arguments: [
        ("*", "gs://b/x.exe", true), ("*", "file:///srv/x.exe", true), ("*", "http://h:8080/x.exe", true),
        ("b", "gs://b/x.exe", true), ("b", "file://b/x.exe", true), ("b", "http://b/x.exe", true), ("b", "gs://c/x.exe", false),
        ("gs://b", "gs://b/x.exe", true), ("gs://b", "file://b/x.exe", false), ("gs://b/", "gs://b/x.exe", true),
        ("file://b", "file://b/x.exe", true), ("file://b", "gs://b/x.exe", false), ("file://*", "file:///x.exe", true),
        ("file:///", "file:///srv/x.exe", true), ("file:///", "file://b/x.exe", false),
        ("/srv", "file:///srv/in/x.exe", true), ("/srv", "file:///srvx/x.exe", false), ("/srv/in", "file:///srv/x.exe", false),
        ("https://H:8443", "https://h:8443/x.exe", true), ("https://h:8443", "http://h:8443/x.exe", false),
        ("http://*", "https://h/x.exe", false), ("gs://*", "gs://any/x.exe", true),
        // A mark after a `/` is a part of its own (Character-wise, `in/\u{301}x.exe` was one part: not below `/srv/in`);
        // a folder canonically equal but not the same bytes is another folder.
        ("/srv/in", "file:///srv/in/%CC%81x.exe", true), ("/srv/caf\u{E9}", "file:///srv/cafe%CC%81/x.exe", false),
        ("/srv/caf\u{E9}", "file:///srv/caf%C3%A9/x.exe", true),
        // One server written another way (libcurl connects to the same address): an IPv4 address in
        // decimal, hex, octal or short form, or a port with leading zeros, got past the entry.
        ("http://127.0.0.1:18080", "http://2130706433:18080/x.exe", true), ("http://127.0.0.1:18080", "http://0x7f000001:18080/x.exe", true),
        ("http://127.0.0.1:18080", "http://0177.0.0.1:18080/x.exe", true), ("http://127.0.0.1:18080", "http://127.1:18080/x.exe", true),
        ("http://127.0.0.1:18080", "http://127.0.0.1:018080/x.exe", true), ("127.0.0.1:18080", "http://127.1:18080/x.exe", true),
        ("http://0x7f000001:18080", "http://127.0.0.1:18080/x.exe", true), ("http://127.0.0.1:18080", "http://127.0.0.2:18080/x.exe", false),
    ])
    func entryMatching(entry: String, destination: String, refused: Bool) throws {
        let policy = UploadPolicy(refusingExecutablesIn: [entry])
        let reference = try StorageReference(parsing: destination)
        #expect((policy.refusingEntry(for: reference) != nil) == refused)
        #expect((try? policy.check(reference: reference, sourceName: nil)) == nil ? refused : !refused)
    }
}

extension Result where Success == TransferOutcome, Failure == StorageError {
    /// The error code, or nil when the transfer did not fail.
    var failureCode: StorageErrorCode? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}
