import Foundation
import JobModel
@testable import Storage
import Synchronization
import TestSupport
import Testing

/// A FIFO where the worker expects a file it only reads — an upload's source, a destination compared
/// before a download (`skip-identical`) — used to hold the attempt in `open` until some writer came:
/// the job sat `started`, a cancel could not reach it, and the next worker hung on it again. Now such a
/// file is refused at once (a source) or not taken for the object's bytes (a destination: the download
/// is refused at once, the FIFO left in place — replacing it, as before, took a reader's pipe away from
/// it, and a device such as /dev/null from the whole machine). Each case has a writer that opens the FIFO after 5 s, so that the old behaviour ends
/// (late) instead of hanging the suite, and the time taken is what tells the two apart.
@Suite("FIFOs and links where a file is read", .onTestThreads)
struct SpecialFileTests {
    /// Opens `path` for writing after `seconds` (unblocking a reader that waits in `open`), then closes it.
    private static func unblock(_ path: String, after seconds: UInt32) {
        Thread {
            sleep(seconds)
            let descriptor = open(path, O_WRONLY | O_NONBLOCK)
            if descriptor >= 0 { close(descriptor) }
        }.start()
    }

    @Test("an upload whose source is a FIFO fails at once, on file:// and over HTTP", arguments: [false, true])
    func fifoSourceRefused(http: Bool) async throws {
        let (directory, _, local) = try localBuckets("jobctl-fifo-source")
        defer { directory.remove() }
        let server = http ? try NginxServer.start() : nil
        defer { server?.stop() }
        let fifo = directory.file("source.fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        Self.unblock(fifo, after: 5)
        let backend: any StorageBackend = http ? HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)) : local
        let destination = http ? "\(server!.baseURL)/f.bin" : "file://b/f.bin"
        let (result, elapsed) = await timedOffTestThreads {
            await run(backend, JobSpec(kind: .uploadFile, source: fifo, destination: destination))
        }
        let error = try failure(result)
        #expect(elapsed < .seconds(3), "the open did not wait for a writer")
        #expect(error.code == .pathError && error.message.contains("a FIFO"), "\(error)")
        #expect(!error.retryable)
    }

    /// `/proc/self/status` says it is 0 bytes and holds about 1.5 KB: the upload read its size, sent
    /// nothing and stored an empty object. A file of procfs or sysfs is refused before a byte is sent.
    @Test("an upload whose source is on procfs fails at once, on file:// and over HTTP", arguments: [false, true])
    func procfsSourceRefused(http: Bool) async throws {
        let (directory, _, local) = try localBuckets("jobctl-procfs-source")
        defer { directory.remove() }
        let server = http ? try NginxServer.start() : nil
        defer { server?.stop() }
        let backend: any StorageBackend = http ? HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)) : local
        let destination = http ? "\(server!.baseURL)/status.txt" : "file://b/status.txt"
        let error = try failure(await run(backend, JobSpec(kind: .uploadFile, source: "/proc/self/status", destination: destination)))
        #expect(error.code == .pathError && error.message.contains("'/proc/self/status' is on procfs"), "\(error)")
        #expect(error.message.contains("copy it to a regular file first"), "\(error)")
        #expect(!error.retryable)
        if !http {
            #expect(!FileManager.default.fileExists(atPath: directory.file("b/status.txt")), "an object was stored")
        }
    }

    /// The backend for `name` ("file", "http", "gs") and a destination for an object named `object`; the
    /// servers to stop after.
    private static func backend(_ name: String, local: LocalBackend, object: String) throws
        -> (backend: any StorageBackend, destination: String, stop: () -> Void) {
        switch name {
        case "http":
            let server = try NginxServer.start()
            return (HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)), "\(server.baseURL)/\(object)",
                    { server.stop() })
        case "gs":
            let server = try EmulatorServer.start()
            return (GCSBackend(configuration: emulatorConfiguration(server)), "gs://\(server.bucket)/\(object)", { server.stop() })
        default:
            return (local, "file://b/\(object)", {})
        }
    }

    /// A cgroup file (`cgroup.max.depth`: 0 bytes by its size, `max` by its content) uploaded as an empty
    /// object and the job succeeded, on file://, http and gs://: it is refused as a procfs file is.
    @Test("an upload whose source is on cgroup or cgroup2 fails at once, on every backend",
          .enabled(if: CgroupFiles.zeroSizedWithContent != nil, "no cgroup file whose size says 0 while it holds bytes on this machine"),
          arguments: ["file", "http", "gs"])
    func cgroupSourceRefused(_ name: String) async throws {
        let file = try #require(CgroupFiles.zeroSizedWithContent)
        let (directory, _, local) = try localBuckets("jobctl-cgroup-source")
        defer { directory.remove() }
        let (backend, destination, stop) = try Self.backend(name, local: local, object: "depth.txt")
        defer { stop() }
        let error = try failure(await run(backend, JobSpec(kind: .uploadFile, source: file, destination: destination)))
        #expect(error.code == .pathError && error.message.contains("'\(file)' is on cgroup"), "\(error)")
        #expect(error.message.contains("copy it to a regular file first"), "\(error)")
        #expect(!error.retryable)
        if name == "file" {
            #expect(!FileManager.default.fileExists(atPath: directory.file("b/depth.txt")), "an object was stored")
        }
    }

    /// A socket put where a source was after submit: `open` fails with ENXIO, which was "internalError …
    /// No such device or address" over HTTP and gs:// and "unknown (-13000) opening '…' failed" on
    /// file://. Every backend now says it is a socket, as it says a FIFO is one (`pathError`, not retried).
    @Test("an upload whose source became a socket says so, on every backend", arguments: ["file", "http", "gs"])
    func socketSourceRefused(_ name: String) async throws {
        let (directory, _, local) = try localBuckets("jobctl-socket-source")
        defer { directory.remove() }
        let path = directory.file("source.bin")
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() where index < raw.count - 1 { raw[index] = byte }
        }
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        #expect(listener >= 0)
        defer { close(listener) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0, "a socket could not be made at \(path)")
        let (backend, destination, stop) = try Self.backend(name, local: local, object: "source.bin")
        defer { stop() }
        let error = try failure(await run(backend, JobSpec(kind: .uploadFile, source: path, destination: destination)))
        #expect(error.code == .pathError && error.message.contains("'\(path)' is a socket, not a regular file"), "\(error)")
        #expect(!error.retryable)
    }

    @Test("download-file with skip-identical onto a FIFO is refused and onto a link replaces it, neither waited on nor followed")
    func specialDestinations() async throws {
        let (directory, _, backend) = try localBuckets("jobctl-fifo-destination")
        defer { directory.remove() }
        let payload = patternData(50_000, seed: 17)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/d.bin", data: payload)))

        let fifo = directory.file("fifo.bin")
        #expect(mkfifo(fifo, 0o600) == 0)
        Self.unblock(fifo, after: 5)
        let (result, elapsed) = await timedOffTestThreads {
            await run(backend, JobSpec(kind: .downloadFile, source: "file://b/d.bin", destination: fifo, ifExists: .skipIdentical))
        }
        let error = try failure(result)
        #expect(elapsed < .seconds(3), "the comparison did not wait for a writer")
        #expect(error.code == .invalidArgument && error.message.contains("is a device, socket or pipe"), "\(error)")
        #expect(!error.retryable)
        var info = stat()
        #expect(lstat(fifo, &info) == 0 && info.st_mode & S_IFMT == S_IFIFO, "the FIFO was replaced")

        // A link to a file with the object's very bytes is not the destination holding them: replaced,
        // and the file it pointed at is left alone.
        let elsewhere = directory.file("elsewhere.bin")
        try payload.write(to: URL(fileURLWithPath: elsewhere))
        let linked = directory.file("linked.bin")
        #expect(symlink(elsewhere, linked) == 0)
        let replaced = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "file://b/d.bin", destination: linked,
                                                               ifExists: .skipIdentical)))
        #expect(replaced.skipped == nil, "\(replaced)")
        let status = try FileManager.default.attributesOfItem(atPath: linked)
        #expect(status[.type] as? FileAttributeType == .typeRegular, "the link was replaced by the download")
        #expect(try Data(contentsOf: URL(fileURLWithPath: elsewhere)) == payload)
    }
}

/// A prefix download's folders below the one the user named come from object names: a link planted
/// there (`restore/sub -> /elsewhere`) was followed, and the object written outside. Those folders are
/// now opened without following links, on every backend; the folder the user named still may be a link.
@Suite("a prefix download's folders are not followed through links", .onTestThreads)
struct PrefixFolderLinkTests {
    private let payload = patternData(40_000, seed: 23)

    /// The job a prefix expansion makes for the object `sub/a.txt` under `restore/`.
    private static func spec(source: String, restore: String) -> JobSpec {
        var spec = JobSpec(kind: .downloadFile, source: source, destination: restore + "/sub/a.txt")
        spec.batch = JobBatch(id: "01PREFIXLINK", source: "file://b/", path: "sub/a.txt")
        return spec
    }

    private func check(_ backend: any StorageBackend, source: String, in directory: TemporaryDirectory) async throws {
        // The user's folder is itself a link: followed, as named.
        let real = directory.file("real-restore")
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
        let restore = directory.file("restore")
        #expect(symlink(real, restore) == 0)
        let elsewhere = directory.file("elsewhere")
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        #expect(symlink(elsewhere, real + "/sub") == 0)

        let refused = try failure(await run(backend, Self.spec(source: source, restore: restore)))
        #expect(refused.code == .pathError && refused.message.contains("symbolic link"), "\(refused)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere).isEmpty, "nothing written through the link")

        // The link gone, the folder is made and the object lands under the user's (linked) folder.
        #expect(unlink(real + "/sub") == 0)
        let result = try finished(await run(backend, Self.spec(source: source, restore: restore)))
        #expect(result.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: real + "/sub/a.txt")) == payload)
    }

    @Test("file://")
    func local() async throws {
        let (directory, _, backend) = try localBuckets("jobctl-prefix-link")
        defer { directory.remove() }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/sub/a.txt", data: payload)))
        try await check(backend, source: "file://b/sub/a.txt", in: directory)
    }

    @Test("HTTP")
    func http() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try FileManager.default.createDirectory(atPath: server.root + "/sub", withIntermediateDirectories: true)
        try payload.write(to: URL(fileURLWithPath: server.root + "/sub/a.txt"))
        let directory = try TemporaryDirectory("jobctl-prefix-link")
        defer { directory.remove() }
        try await check(HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)),
                        source: "\(server.baseURL)/sub/a.txt", in: directory)
    }

    @Test("GCS")
    func gcs() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/sub/a.txt", data: payload)))
        let directory = try TemporaryDirectory("jobctl-prefix-link")
        defer { directory.remove() }
        try await check(backend, source: "gs://\(server.bucket)/sub/a.txt", in: directory)
    }
}

/// A `file:///` path's folders below the folder a batch job was expanded from come from file or object
/// names: a link planted there after the submit (`dst/sub -> /elsewhere` under a folder upload to
/// `file:///…/dst/`) was followed, and the upload's `sub/…` files and their sidecars were written where
/// it led; a prefix download from `file:///…/src/` read through `src/sub -> /elsewhere` the same way.
/// Such folders are walked without following links now, as every folder inside a named bucket is; the
/// folder the user named still may be a link.
@Suite("a batch's folders in a file:/// path are not followed through links", .onTestThreads)
struct FileURLBatchFolderLinkTests {
    private let payload = patternData(30_000, seed: 29)

    @Test func aFolderUploadDoesNotWriteThroughALinkBelowItsDestination() async throws {
        let (directory, _, backend) = try localBuckets("jobctl-batch-link")
        defer { directory.remove() }
        let source = directory.file("s.txt")
        try payload.write(to: URL(fileURLWithPath: source))
        // The user's folder is itself a link: followed, as named.
        let real = directory.file("real-dst")
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
        let named = directory.file("dst")
        #expect(symlink(real, named) == 0)
        let elsewhere = directory.file("elsewhere")
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        #expect(symlink(elsewhere, real + "/sub") == 0)
        var spec = JobSpec(kind: .uploadFile, source: source, destination: "file://\(named)/sub/s.txt")
        spec.batch = JobBatch(id: "01BATCHLINK", source: directory.path + "/", path: "sub/s.txt")

        let refused = try failure(await run(backend, spec))
        #expect(refused.code == .pathError && refused.message.contains("symbolic link"), "\(refused)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere).isEmpty, "nothing written through the link")

        // The link gone, the folder is made and the object lands under the user's (linked) folder.
        #expect(unlink(real + "/sub") == 0)
        _ = try finished(await run(backend, spec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: real + "/sub/s.txt")) == payload)
        // A job written one by one names its whole path: its folders may be links, as before.
        #expect(unlink(real + "/sub/s.txt") == 0 && unlink(real + "/sub/.s.txt.jobctl-meta.json") == 0 && rmdir(real + "/sub") == 0)
        #expect(symlink(elsewhere, real + "/sub") == 0)
        spec.batch = nil
        _ = try finished(await run(backend, spec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: elsewhere + "/s.txt")) == payload)
    }

    @Test func aPrefixDownloadDoesNotReadThroughALinkBelowItsSource() async throws {
        let (directory, _, backend) = try localBuckets("jobctl-batch-link")
        defer { directory.remove() }
        let elsewhere = directory.file("elsewhere")
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        try Data("not the object".utf8).write(to: URL(fileURLWithPath: elsewhere + "/a.txt"))
        let src = directory.file("src")
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        #expect(symlink(elsewhere, src + "/sub") == 0)
        var spec = JobSpec(kind: .downloadFile, source: "file://\(src)/sub/a.txt", destination: directory.file("restore/sub/a.txt"))
        spec.batch = JobBatch(id: "01BATCHLINK", source: "file://\(src)/", path: "sub/a.txt")

        let refused = try failure(await run(backend, spec))
        #expect(refused.code == .pathError && refused.message.contains("symbolic link"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("restore/sub/a.txt")))

        #expect(unlink(src + "/sub") == 0)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://\(src)/sub/a.txt", data: payload)))
        _ = try finished(await run(backend, spec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("restore/sub/a.txt"))) == payload)
    }
}

/// A `file://` object without a sidecar (put in the bucket by hand) has no recorded hash, so nothing
/// checked a download's bytes: written in place at its start and its end while it was read, it ended
/// `succeeded` with a file (or bytes in memory) matching neither version. The read's end now finds the
/// file changed (size, times, identity) and fails retryably, keeping nothing; the retry reads the new one.
@Suite("a file:// object written to while it is read", .onTestThreads)
struct ObjectChangedWhileReadTests {
    @Test(arguments: [JobKind.downloadFile, .downloadMemory])
    func anObjectWithoutHashesWrittenToWhileReadFailsRetryably(_ kind: JobKind) async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-changed-while-read")
        defer { directory.remove() }
        let object = buckets + "/b/plain.bin"
        let original = patternData(3 << 20, seed: 31)
        try original.write(to: URL(fileURLWithPath: object))
        let destination = directory.file("out/plain.bin")
        let spec = kind == .downloadFile
            ? JobSpec(kind: .downloadFile, source: "file://b/plain.bin", destination: destination)
            : JobSpec(kind: .downloadMemory, source: "file://b/plain.bin", maxSize: 4 << 20)
        let written = Atomic<Bool>(false)
        let recorder = EventRecorder { event in
            // After the first MiB: one byte already read and one not yet read are changed in place.
            guard case .progress(let done, _) = event, done >= 1 << 20, !written.exchange(true, ordering: .relaxed) else { return }
            let handle = FileHandle(forUpdatingAtPath: object)!
            for offset: UInt64 in [10, (3 << 20) - 100] {
                try? handle.seek(toOffset: offset)
                handle.write(Data([0xEE]))
            }
            try? handle.close()
        }
        let error = try failure(await run(backend, spec, recorder: recorder))
        let wrote = written.load(ordering: .relaxed)
        #expect(wrote)
        #expect(error.code == .pathError && error.retryable && error.message.contains("changed while it was read"), "\(error)")
        #expect(!FileManager.default.fileExists(atPath: destination))
        let now = try Data(contentsOf: URL(fileURLWithPath: object))
        #expect(now != original)
        let result = try finished(await run(backend, spec))
        if kind == .downloadFile {
            #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == now)
        } else {
            #expect(result.data == now)
        }
    }

    /// A chmod while the object is read moves only its change time, which a write whose modification
    /// time was put back moves too: the attempt fails as above, and says which time moved — it said the
    /// file "was written to" though no byte had changed.
    @Test func aChmodWhileReadIsNamedForWhatItIs() async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-changed-while-read")
        defer { directory.remove() }
        let object = buckets + "/b/plain.bin"
        try patternData(3 << 20, seed: 32).write(to: URL(fileURLWithPath: object))
        let changed = Atomic<Bool>(false)
        let recorder = EventRecorder { event in
            guard case .progress(let done, _) = event, done >= 1 << 20, !changed.exchange(true, ordering: .relaxed) else { return }
            _ = chmod(object, 0o600)
        }
        let spec = JobSpec(kind: .downloadFile, source: "file://b/plain.bin", destination: directory.file("out/plain.bin"))
        let error = try failure(await run(backend, spec, recorder: recorder))
        #expect(error.retryable && error.message.contains("its change time moved") && !error.message.contains("written to"), "\(error)")
    }
}
