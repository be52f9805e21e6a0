import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A file a transfer replaces passes its mode, and its owner and group where the worker may set them, to
/// the file that takes its place — as `cp` and `curl -o`, which write into it, keep them. The rename put a
/// file of the worker's umask and user there instead: a 0600 file of `nobody` overwritten by a worker
/// running as root came out 0644 root's, readable by everyone.
@Suite("a replaced file's mode and owner carry over", .onTestThreads)
struct ReplacedFileAccessTests {
    private let payload = patternData(200_000, seed: 19)
    /// `nobody`, when the tests run as root (who may give a file to anyone); else the tests' own user.
    private let owner: UInt32 = geteuid() == 0 ? 65534 : geteuid()
    private let group: UInt32 = geteuid() == 0 ? 65534 : getegid()

    /// Mode bits, owner and group of `path` (not following a link).
    private func access(_ path: String) throws -> (mode: mode_t, owner: UInt32, group: UInt32) {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw TestServerError("cannot stat \(path): errno \(errno)") }
        return (info.st_mode & 0o7777, info.st_uid, info.st_gid)
    }

    /// Makes `path` a file of mode 0600 owned by `owner`:`group`.
    private func privateFile(_ path: String) throws {
        #expect(FileManager.default.createFile(atPath: path, contents: Data("private".utf8)))
        #expect(chown(path, owner, group) == 0 && chmod(path, 0o600) == 0)
    }

    @Test func downloadKeepsTheReplacedFilesAccess() async throws {
        let (directory, _, backend) = try localBuckets("jobctl-replaced-access")
        defer { directory.remove() }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/object.bin", data: payload)))
        let destination = directory.file("got.bin")
        try privateFile(destination)
        _ = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "file://b/object.bin", destination: destination)))
        #expect(FileManager.default.contents(atPath: destination) == payload)
        let after = try access(destination)
        #expect(after.mode == 0o600 && after.owner == owner && after.group == group, "\(after)")

        // A new destination is made as always (the worker's umask, less other users' write bit).
        let fresh = directory.file("fresh.bin")
        _ = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "file://b/object.bin", destination: fresh)))
        let made = try access(fresh)
        #expect(made.mode == SafeDirectory.fileMode & ~(try currentUmask()), "\(made)")
    }

    @Test func httpDownloadKeepsTheReplacedFilesAccess() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory("jobctl-replaced-access-http")
        defer { directory.remove() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/object.bin"))
        let destination = directory.file("got.bin")
        try privateFile(destination)
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        _ = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/object.bin", destination: destination)))
        #expect(FileManager.default.contents(atPath: destination) == payload)
        let after = try access(destination)
        #expect(after.mode == 0o600 && after.owner == owner && after.group == group, "\(after)")
    }

    /// A `file://` object replaced by an upload: the new object takes the old object's access, the new
    /// sidecar the old sidecar's — each its own (the sidecar took the object's: an object of 0666 left its
    /// metadata writable by anyone, one of 0751 made its JSON executable). A metadata update keeps the
    /// sidecar's access too (it was rewritten as the worker's own 0644, private metadata readable by all).
    @Test func uploadKeepsTheReplacedObjectsAndSidecarsAccess() async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-replaced-access-upload")
        defer { directory.remove() }
        let object = buckets + "/b/object.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/object.bin", data: Data("old".utf8))))
        let sidecar = try #require(try FileManager.default.contentsOfDirectory(atPath: buckets + "/b").first { $0.hasSuffix("jobctl-meta.json") })
        let sidecarPath = buckets + "/b/" + sidecar
        #expect(chown(object, owner, group) == 0 && chmod(object, 0o751) == 0)
        #expect(chown(sidecarPath, owner, group) == 0 && chmod(sidecarPath, 0o640) == 0)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/object.bin", data: payload)))
        #expect(FileManager.default.contents(atPath: object) == payload)
        let objectAfter = try access(object), sidecarAfter = try access(sidecarPath)
        #expect(objectAfter.mode == 0o751 && objectAfter.owner == owner && objectAfter.group == group, "\(objectAfter)")
        #expect(sidecarAfter.mode == 0o640 && sidecarAfter.owner == owner && sidecarAfter.group == group, "\(sidecarAfter)")

        // Never writable by others, whatever the replaced file allowed (the group keeps its bits).
        #expect(chmod(object, 0o666) == 0 && chmod(sidecarPath, 0o666) == 0)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/object.bin", data: payload)))
        let (openObject, openSidecar) = (try access(object), try access(sidecarPath))
        #expect(openObject.mode == 0o664 && openSidecar.mode == 0o664, "\(openObject) \(openSidecar)")

        #expect(chmod(sidecarPath, 0o600) == 0)
        _ = try finished(await run(backend, JobSpec(kind: .updateMetadata, destination: "file://b/object.bin",
                                                    metadata: UploadMetadata(customMetadata: ["secret": "s3cr3t"]))))
        let updated = try access(sidecarPath)
        #expect(updated.mode == 0o600 && updated.owner == owner && updated.group == group, "\(updated)")
    }

    /// The process's umask, read without setting it (other tests create files meanwhile).
    private func currentUmask() throws -> mode_t {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("Umask:") })
        return try #require(mode_t(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8))
    }
}
