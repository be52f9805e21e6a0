import Checksums
import Foundation
import JobModel
@testable import Storage
import Synchronization
import Testing
import TestSupport

// MARK: - Helpers

/// A fresh directory with a buckets directory and a backend pointing at it.
private struct Sandbox {
    let directory: TemporaryDirectory
    var buckets: String { directory.file("buckets") }

    init() throws {
        directory = try TemporaryDirectory("jobctl-local")
        try FileManager.default.createDirectory(atPath: directory.file("buckets"), withIntermediateDirectories: true)
    }

    func backend(refusing: Set<String> = [], checkpoint: Int64 = LocalBackend.defaultCheckpointInterval,
                 buckets: String? = nil) -> LocalBackend {
        LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets ?? self.buckets,
                                                         executableUploadPolicy: refusing),
                     checkpointInterval: checkpoint)
    }

    func write(_ name: String, _ data: Data) throws -> String {
        let path = directory.file(name)
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Every file name in `directory` (hidden ones included).
    func entries(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }
}

/// Records what a transfer reports and optionally stops it at the first checkpoint.
private final class Recorder: Sendable {
    private let events = Mutex<[TransferEvent]>([])
    let control: TransferControl
    let stopAtCheckpoint: StopReason?
    /// Run at the first checkpoint, on the transfer's thread (to change something under it there).
    private let atFirstCheckpoint: Mutex<(@Sendable () -> Void)?>

    init(stopAtCheckpoint: StopReason? = nil, jobID: String? = nil, leaseToken: Int64? = nil,
         atFirstCheckpoint: (@Sendable () -> Void)? = nil) {
        self.stopAtCheckpoint = stopAtCheckpoint
        self.atFirstCheckpoint = Mutex(atFirstCheckpoint)
        control = TransferControl(jobID: jobID, leaseToken: leaseToken)
    }

    var report: @Sendable (TransferEvent) -> Void {
        { [self] event in
            events.withLock { $0.append(event) }
            guard case .checkpoint = event else { return }
            atFirstCheckpoint.withLock { action in defer { action = nil }; return action }?()
            if let reason = stopAtCheckpoint { control.stop(reason) }
        }
    }

    var all: [TransferEvent] { events.withLock { $0 } }

    var checkpoints: [ResumePoint] {
        all.compactMap { if case .checkpoint(let point, _) = $0 { point } else { nil } }
    }

    var progress: [Int64] {
        all.compactMap { if case .progress(let done, _) = $0 { done } else { nil } }
    }
}

private func randomData(_ count: Int) throws -> Data {
    let handle = try #require(FileHandle(forReadingAtPath: "/dev/urandom"))
    defer { try? handle.close() }
    return handle.readData(ofLength: count)
}

/// MD5 and CRC32C computed apart from the backend, base64 as GCS reports them.
private func checksums(_ data: Data) -> (md5: String, crc32c: String) {
    let crc = CRC32C.checksum(data)
    let bigEndian = Data([UInt8(crc >> 24), UInt8((crc >> 16) & 0xFF), UInt8((crc >> 8) & 0xFF), UInt8(crc & 0xFF)])
    return (Data(Digest.md5(data)).base64EncodedString(), bigEndian.base64EncodedString())
}

private func run(_ backend: LocalBackend, _ spec: JobSpec, from resume: ResumePoint? = nil,
                 recorder: Recorder = Recorder()) async throws(StorageError) -> TransferOutcome {
    try await backend.perform(spec, resumingFrom: resume, control: recorder.control, report: recorder.report)
}

private func finished(_ outcome: TransferOutcome) throws -> JobResult {
    guard case .finished(let result) = outcome else {
        Issue.record("expected a finished transfer, got \(outcome)")
        throw StorageError(.unknown, "not finished")
    }
    return result
}

private func expectError(_ code: StorageErrorCode, _ body: () async throws(StorageError) -> TransferOutcome) async -> StorageError? {
    do {
        let outcome = try await body()
        Issue.record("expected \(code.name), got \(outcome)")
        return nil
    } catch {
        #expect(error.code == code, "\(error)")
        return error
    }
}

// MARK: - The five kinds

@Suite(.onTestThreads) struct LocalBackendTests {
    @Test func uploadFileStoresBytesChecksumsAndMetadataSidecar() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(3 * 1024 * 1024 + 17)
        let source = try sandbox.write("in/photo.JPG", bytes)
        let metadata = UploadMetadata(cacheControl: "public, max-age=60", contentLanguage: "en",
                                      customMetadata: ["owner": "night-shift"])
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://media/2026/photo.JPG", metadata: metadata)
        let recorder = Recorder()

        let result = try finished(try await run(sandbox.backend(), spec, recorder: recorder))

        let expected = checksums(bytes)
        #expect(result.size == Int64(bytes.count))
        #expect(result.md5 == nil)
        #expect(result.crc32c == expected.crc32c)
        let object = try #require(result.object)
        #expect(object.bucket == "media" && object.name == "2026/photo.JPG")
        #expect(object.contentType == "image/jpeg")
        #expect(object.cacheControl == "public, max-age=60" && object.contentLanguage == "en")
        #expect(object.customMetadata == ["owner": "night-shift"])
        #expect(object.md5Hash == nil && object.crc32c == expected.crc32c)
        #expect(object.generation != nil && object.metageneration == "1" && object.timeCreated != nil)
        #expect(recorder.progress.last == Int64(bytes.count))

        // An independent tool agrees on the MD5 of the stored file.
        let stored = sandbox.buckets + "/media/2026/photo.JPG"
        let md5sum = try runProcess("/usr/bin/md5sum", [stored])
        let hex = Digest.md5(bytes).map { String(format: "%02x", $0) }.joined()
        #expect(md5sum.stdout.hasPrefix(hex))
        #expect(try Data(contentsOf: URL(fileURLWithPath: stored)) == bytes)

        // Sidecar round trip: the JSON beside the object decodes to exactly the reported metadata, and
        // only the object and its sidecar are left (no temp files).
        let sidecar = try Data(contentsOf: URL(fileURLWithPath: sandbox.buckets + "/media/2026/.photo.JPG.jobctl-meta.json"))
        #expect(try JSONDecoder().decode(StorageObject.self, from: sidecar) == object)
        #expect(sandbox.entries(sandbox.buckets + "/media/2026") == [".photo.JPG.jobctl-meta.json", "photo.JPG"])
    }

    @Test func uploadDataWithExplicitContentTypeThenDownloadMemoryReturnsItAndTheMetadata() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let backend = sandbox.backend()
        let bytes = Data("hello, local bucket\n".utf8)
        let upload = JobSpec(kind: .uploadData, destination: "file://docs/notes/readme.txt", data: bytes,
                             metadata: UploadMetadata(contentType: "text/x-custom", customMetadata: ["k": "v"]))
        let uploaded = try finished(try await run(backend, upload))
        #expect(uploaded.object?.contentType == "text/x-custom")

        let download = JobSpec(kind: .downloadMemory, source: "file://docs/notes/readme.txt", maxSize: 1024)
        let result = try finished(try await run(sandbox.backend(), download))
        #expect(result.data == bytes)
        #expect(result.size == Int64(bytes.count))
        #expect(result.md5 == nil && result.crc32c == checksums(bytes).crc32c)
        #expect(result.object == uploaded.object)
    }

    @Test func uploadDataInfersContentTypeFromTheDestinationName() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let spec = JobSpec(kind: .uploadData, destination: "file://site/index.HTML", data: Data("<p>".utf8))
        #expect(try finished(try await run(sandbox.backend(), spec)).object?.contentType == "text/html")
    }

    @Test func downloadFileCreatesParentsAndMatchesChecksums() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(2 * 1024 * 1024 + 5)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/x.bin", data: bytes)))
        let destination = sandbox.directory.file("out/nested/copy.bin")

        let result = try finished(try await run(sandbox.backend(),
                                                JobSpec(kind: .downloadFile, source: "file://b/x.bin", destination: destination)))

        #expect(result.path == destination)
        #expect(result.size == Int64(bytes.count))
        #expect(result.md5 == nil && result.crc32c == checksums(bytes).crc32c)
        #expect(result.object?.name == "x.bin")
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
        #expect(sandbox.entries(sandbox.directory.file("out/nested")) == ["copy.bin"])
    }

    @Test func downloadFileOfAnAbsolutePathWithoutSidecar() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = Data("plain file, no sidecar".utf8)
        let source = try sandbox.write("plain.txt", bytes)
        let result = try finished(try await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://" + source,
                                                                           destination: sandbox.directory.file("copy.txt"))))
        #expect(result.md5 == nil && result.crc32c == checksums(bytes).crc32c)
        #expect(result.object?.bucket == "" && result.object?.contentType == "text/plain")
        #expect(try Data(contentsOf: URL(fileURLWithPath: sandbox.directory.file("copy.txt"))) == bytes)
    }

    @Test func downloadMemoryAboveMaxSizeIsRefusedBeforeReading() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = Data(repeating: 7, count: 4096)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/big", data: bytes)))
        let recorder = Recorder()
        let error = await expectError(.downloadSizeExceeded) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .downloadMemory, source: "file://b/big", maxSize: 4095), recorder: recorder)
        }
        #expect(error?.total == 4096 && error?.maximum == 4095)
        #expect(error?.message == "object 'file://b/big' is 4096 bytes, more than max_size 4095 bytes; raise max_size or use download-file")
        #expect(recorder.progress.isEmpty)
    }

    /// An object one read returns whole (up to the read buffer's size) reports no progress: the outcome
    /// carries the counts, so the runner is not woken for a report it could not write. A larger object
    /// still reports before its first read and after each read.
    @Test(arguments: [1, 64, LocalFiles.bufferSize])
    func downloadMemoryReadInOneGoReportsNoProgress(size: Int) async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(size)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/small", data: bytes)))
        let recorder = Recorder()
        let result = try finished(try await run(sandbox.backend(), JobSpec(kind: .downloadMemory, source: "file://b/small",
                                                                           maxSize: Int64(size)), recorder: recorder))
        #expect(result.data == bytes && result.size == Int64(size))
        #expect(result.crc32c == checksums(bytes).crc32c)
        #expect(recorder.all.isEmpty, "reported \(recorder.all)")
    }

    @Test func downloadMemoryOfSeveralReadsReportsEachRead() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(LocalFiles.bufferSize * 2 + 5)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/large", data: bytes)))
        let recorder = Recorder()
        let result = try finished(try await run(sandbox.backend(), JobSpec(kind: .downloadMemory, source: "file://b/large",
                                                                           maxSize: 8 << 20), recorder: recorder))
        #expect(result.data == bytes)
        let buffer = Int64(LocalFiles.bufferSize)
        #expect(recorder.progress == [0, buffer, 2 * buffer, Int64(bytes.count)])
    }

    @Test func fetchURLCreatesATokenOnceAndReusesIt() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        _ = try finished(try await run(sandbox.backend(),
                                       JobSpec(kind: .uploadData, destination: "file://pub/a b.txt", data: Data("x".utf8))))
        let spec = JobSpec(kind: .fetchURL, source: "file://pub/a b.txt")

        let first = try finished(try await run(sandbox.backend(), spec))
        let second = try finished(try await run(sandbox.backend(), spec))

        let url = try #require(first.url)
        let token = try #require(first.object?.downloadTokens)
        #expect(UUID(uuidString: token) != nil)
        #expect(url.hasPrefix("file://") && url.hasSuffix("/pub/a%20b.txt?token=" + token))
        #expect(second.url == url)
        #expect(second.object?.downloadTokens == token)
        #expect(first.object?.metageneration == "2" && second.object?.metageneration == "2")
        // The token is persisted in the sidecar.
        let sidecar = try Data(contentsOf: URL(fileURLWithPath: sandbox.buckets + "/pub/.a b.txt.jobctl-meta.json"))
        #expect(try JSONDecoder().decode(StorageObject.self, from: sidecar).downloadTokens == token)
    }

    @Test func concurrentFetchURLsAgreeOnOneToken() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        _ = try finished(try await run(sandbox.backend(),
                                       JobSpec(kind: .uploadData, destination: "file://pub/race.txt", data: Data("x".utf8))))
        let backend = sandbox.backend()
        let urls = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<8 {
                group.addTask { try finished(try await run(backend, JobSpec(kind: .fetchURL, source: "file://pub/race.txt"))).url }
            }
            return try await group.reduce(into: Set<String?>()) { $0.insert($1) }
        }
        #expect(urls.count == 1)
        #expect(urls.first??.contains("?token=") == true)
    }

    // MARK: - Content types and policy

    @Test(arguments: [
        ("a.jpg", "image/jpeg"), ("A.JPEG", "image/jpeg"), ("x/y.png", "image/png"), ("g.GIF", "image/gif"),
        ("w.webp", "image/webp"), ("s.svg", "image/svg+xml"), ("t.tiff", "image/tiff"), ("t.tif", "image/tiff"),
        ("r.txt", "text/plain"), ("i.htm", "text/html"), ("s.css", "text/css"), ("m.mjs", "text/javascript"),
        ("d.json", "application/json"), ("c.csv", "text/csv"), ("p.pdf", "application/pdf"), ("z.zip", "application/zip"),
        ("a.tar.gz", "application/gzip"), ("m.mp3", "audio/mpeg"), ("v.mp4", "video/mp4"), ("v.MKV", "video/x-matroska"),
        ("f.woff2", "font/woff2"), ("w.wasm", "application/wasm"), ("c.yml", "application/yaml"),
        ("d.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        ("noext", "application/octet-stream"), (".bashrc", "application/octet-stream"),
        ("x.unknownext", "application/octet-stream"), ("dir.d/file", "application/octet-stream"),
    ])
    func contentTypeInference(path: String, type: String) {
        #expect(ContentTypes.infer(path: path) == type)
    }

    @Test func executablePolicyRefusesListedBucketsOnly() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let backend = sandbox.backend(refusing: ["locked"])
        let source = try sandbox.write("setup.EXE", Data("MZ".utf8))

        let error = await expectError(.unauthorized) { () throws(StorageError) in
            try await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://locked/setup.EXE"))
        }
        #expect(error?.message.contains("local bucket 'file://locked' refuses executable uploads (.exe)") == true)
        #expect(error?.message.contains("JOBCTL_REFUSE_EXECUTABLES") == true)
        // The source name counts too, whatever the destination is called.
        _ = await expectError(.unauthorized) { () throws(StorageError) in
            try await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://locked/renamed.bin"))
        }
        _ = await expectError(.unauthorized) { () throws(StorageError) in
            try await run(backend, JobSpec(kind: .uploadData, destination: "file://locked/lib.Dll", data: Data("x".utf8)))
        }
        #expect(!FileManager.default.fileExists(atPath: sandbox.buckets + "/locked/setup.EXE"))

        // Elsewhere it is allowed; with `*` it is refused everywhere.
        _ = try finished(try await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://open/setup.EXE")))
        _ = await expectError(.unauthorized) { () throws(StorageError) in
            try await run(sandbox.backend(refusing: ["*"]), JobSpec(kind: .uploadData, destination: "file://open/app.apk", data: Data()))
        }
        _ = try finished(try await run(sandbox.backend(refusing: ["*"]),
                                       JobSpec(kind: .uploadData, destination: "file://open/notes.txt", data: Data())))
    }

    @Test func uploadPolicyChecksByValue() throws {
        let policy = UploadPolicy(refusingExecutablesIn: ["b"])
        #expect(throws: StorageError.self) { try policy.check(reference: try StorageReference(parsing: "gs://b/x.ipa"), sourceName: nil) }
        #expect(throws: StorageError.self) { try policy.check(reference: try StorageReference(parsing: "gs://b/x"), sourceName: "run.BAT") }
        try policy.check(reference: try StorageReference(parsing: "gs://c/x.ipa"), sourceName: nil)
        try policy.check(reference: try StorageReference(parsing: "gs://b/exe.txt"), sourceName: "exe")
    }

    // MARK: - Paths

    @Test func symlinkLeavingTheBucketIsRefused() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let outside = sandbox.directory.file("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        _ = try sandbox.write("outside/secret.txt", Data("secret".utf8))
        try FileManager.default.createDirectory(atPath: sandbox.buckets + "/b", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: sandbox.buckets + "/b/escape", withDestinationPath: outside)
        let backend = sandbox.backend()

        _ = await expectError(.pathError) { () throws(StorageError) in
            try await run(backend, JobSpec(kind: .downloadMemory, source: "file://b/escape/secret.txt"))
        }
        _ = await expectError(.pathError) { () throws(StorageError) in
            try await run(backend, JobSpec(kind: .uploadData, destination: "file://b/escape/planted.txt", data: Data("x".utf8)))
        }
        _ = await expectError(.pathError) { () throws(StorageError) in
            try await run(backend, JobSpec(kind: .fetchURL, source: "file://b/escape/secret.txt"))
        }
        #expect(sandbox.entries(outside) == ["secret.txt"])

        // A link that stays inside the bucket is refused too: no folder inside a bucket is reached through
        // a link, so no link can be swapped to lead out of it between a check and a use.
        try FileManager.default.createDirectory(atPath: sandbox.buckets + "/b/real", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: sandbox.buckets + "/b/alias", withDestinationPath: sandbox.buckets + "/b/real")
        let inside = await expectError(.pathError) { () throws(StorageError) in
            try await run(backend, JobSpec(kind: .uploadData, destination: "file://b/alias/ok.txt", data: Data("ok".utf8)))
        }
        #expect(inside?.message.contains("a symbolic link was found at '\(sandbox.buckets)/b/alias' and was not followed") == true)
        #expect(sandbox.entries(sandbox.buckets + "/b/real").isEmpty)
    }

    @Test func missingSourceIsAPathErrorNamingIt() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let missing = sandbox.directory.file("nope.bin")
        let error = await expectError(.pathError) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .uploadFile, source: missing, destination: "file://b/x"))
        }
        #expect(error?.message.contains(missing) == true)
        #expect(error?.retryable == false)
        _ = await expectError(.invalidArgument) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .uploadFile, source: sandbox.directory.path, destination: "file://b/x"))
        }
    }

    /// A missing object is named by its reference, as gs:// and http(s) name theirs: the message named the
    /// bucket folder's path on the worker's machine (`object '/…/buckets/b/absent.txt' does not exist`).
    @Test func missingObjectAndMissingBucket() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        try FileManager.default.createDirectory(atPath: sandbox.buckets + "/b", withIntermediateDirectories: true)
        let named = "object 'file://b/absent.txt' does not exist; check the path"
        for kind in [JobKind.downloadMemory, .fetchURL, .getMetadata] {
            let missing = await expectError(.objectNotFound) { () throws(StorageError) in
                try await run(sandbox.backend(), JobSpec(kind: kind, source: "file://b/absent.txt"))
            }
            #expect(missing?.message == named, "\(kind): \(missing?.message ?? "")")
            _ = await expectError(.bucketNotFound) { () throws(StorageError) in
                try await run(sandbox.backend(), JobSpec(kind: kind, source: "file://nobucket/absent.txt"))
            }
        }
        let update = await expectError(.objectNotFound) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .updateMetadata, destination: "file://b/absent.txt",
                                                     metadata: UploadMetadata(cacheControl: "x")))
        }
        #expect(update?.message == named, "\(update?.message ?? "")")
        let destination = sandbox.directory.file("dl.txt")
        let download = await expectError(.objectNotFound) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://b/absent.txt", destination: destination))
        }
        #expect(download?.message == named, "\(download?.message ?? "")")
        #expect(!FileManager.default.fileExists(atPath: destination))
        #expect(!FileManager.default.fileExists(atPath: sandbox.buckets + "/nobucket"))
    }

    /// An upload-file into a bucket is copied by the kernel (`copy_file_range`), not through memory; the
    /// hashes still describe the stored bytes, MD5 included when the job asks for it.
    @Test func uploadFileIsCopiedByTheKernelAndStillHashed() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(3 * 1024 * 1024 + 4321)
        let source = try sandbox.write("k.bin", bytes)
        let backend = sandbox.backend(checkpoint: 1024 * 1024)
        let recorder = Recorder()
        let result = try finished(try await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://b/k.bin",
                                                                  checksums: [.md5]), recorder: recorder))
        #expect(backend.statistics.kernelCopiedBytes == Int64(bytes.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: sandbox.buckets + "/b/k.bin")) == bytes)
        #expect(result.crc32c == checksums(bytes).crc32c && result.md5 == checksums(bytes).md5)
        #expect(recorder.checkpoints.count == 3, "a checkpoint per MiB before the end: \(recorder.checkpoints)")
        let read = try finished(try await run(backend, JobSpec(kind: .downloadMemory, source: "file://b/k.bin", maxSize: 8 << 20,
                                                               checksums: [.md5])))
        #expect(read.data == bytes && read.verified == [.md5, .crc32c])
    }

    // MARK: - Pause, resume, cancel

    /// The session's prefix is compared with the source's (see the two tests after this one), not sent again.
    @Test func pausedUploadResumesOnANewBackendWithoutRereadingThePrefix() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(9 * 1024 * 1024 + 123)
        let total = Int64(bytes.count)
        let source = try sandbox.write("big.bin", bytes)
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://b/dir/big.bin")
        let first = sandbox.backend(checkpoint: 2 * 1024 * 1024)
        let pausing = Recorder(stopAtCheckpoint: .pause)

        let stopped = try await run(first, spec, recorder: pausing)

        guard case .stopped(.pause, let point?) = stopped, case .upload(let session, let offset, let recordedTotal, _) = point else {
            Issue.record("expected a pause with an upload resume point, got \(stopped)")
            return
        }
        #expect(pausing.checkpoints.first == point)
        #expect(offset == 2 * 1024 * 1024 && recordedTotal == total)
        #expect(session.hasPrefix("file-session:"))
        #expect(!FileManager.default.fileExists(atPath: sandbox.buckets + "/b/dir/big.bin"))
        #expect(first.statistics.sourceBytesRead < total / 2)

        let second = sandbox.backend(checkpoint: 2 * 1024 * 1024)
        let resuming = Recorder()
        let result = try finished(try await run(second, spec, from: point, recorder: resuming))

        #expect(try Data(contentsOf: URL(fileURLWithPath: sandbox.buckets + "/b/dir/big.bin")) == bytes)
        #expect(result.md5 == nil && result.crc32c == checksums(bytes).crc32c)
        #expect(second.statistics.sourceBytesRead == total - offset)
        #expect(second.statistics.kernelCopiedBytes == total - offset, "the rest was copied by the kernel")
        #expect(resuming.progress.first == offset)
        #expect(sandbox.entries(sandbox.buckets + "/b/dir") == [".big.bin.jobctl-meta.json", "big.bin"])
    }

    /// Each attempt writes its session under a name of its own (`.NAME.<job id>.<lease token>.jobctl-upload`),
    /// and one that resumes takes the earlier file over by renaming it to that name: the same inode, no
    /// second link, the earlier name gone (a worker woken after its lease was lost then finds its name
    /// gone at its commit, and never renames the retry's file onto the object). A session an older jobctl
    /// named for the job alone (`.NAME.<job id>.jobctl-upload`) is taken over the same way, and the
    /// attempt after that resumes from the new name, reading only the rest of the source.
    @Test func anOlderJobctlsSessionIsTakenOverUnderTheAttemptsOwnName() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(5 * 1024 * 1024 + 7)
        let total = Int64(bytes.count)
        let source = try sandbox.write("o.bin", bytes)
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://b/o.bin")
        let folder = sandbox.buckets + "/b"
        // No lease token: the name older jobctls gave every attempt of the job.
        let stopped = try await run(sandbox.backend(checkpoint: 1024 * 1024), spec,
                                    recorder: Recorder(stopAtCheckpoint: .pause, jobID: "01OLDJOB"))
        guard case .stopped(.pause, let point?) = stopped, case .upload(let uri, let offset, _, _) = point,
              let old = LocalUploadSession(uri: uri) else { Issue.record("\(stopped)"); return }
        #expect(old.path == folder + "/.o.bin.01OLDJOB.jobctl-upload")

        let resumed = try await run(sandbox.backend(checkpoint: 1024 * 1024), spec, from: point,
                                    recorder: Recorder(stopAtCheckpoint: .pause, jobID: "01OLDJOB", leaseToken: 7))
        guard case .stopped(.pause, let next?) = resumed, case .upload(let nextURI, let nextOffset, _, _) = next,
              let adopted = LocalUploadSession(uri: nextURI) else { Issue.record("\(resumed)"); return }
        #expect(adopted.path == folder + "/.o.bin.01OLDJOB.7.jobctl-upload")
        #expect(adopted.identity == old.identity, "taken over, not copied")
        #expect(nextOffset == offset + 1024 * 1024)
        #expect(sandbox.entries(folder) == [".o.bin.01OLDJOB.7.jobctl-upload"])

        let last = sandbox.backend(checkpoint: 1024 * 1024)
        let result = try finished(try await run(last, spec, from: next, recorder: Recorder(jobID: "01OLDJOB", leaseToken: 8)))
        #expect(last.statistics.sourceBytesRead == total - nextOffset, "the session was continued, not restarted")
        #expect(result.crc32c == checksums(bytes).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: folder + "/o.bin")) == bytes)
        #expect(sandbox.entries(folder) == [".o.bin.jobctl-meta.json", "o.bin"])
    }

    /// Buckets reached through a symbolic link are named by their real path in resume points, also a
    /// bucket the upload creates, so a resumed attempt finds its session and continues it.
    @Test func bucketsBehindALinkAreNamedByTheirRealPath() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let linked = sandbox.directory.file("linked")
        try FileManager.default.createSymbolicLink(atPath: linked, withDestinationPath: sandbox.buckets)
        let real = try #require(URL(fileURLWithPath: sandbox.buckets).resolvingSymlinksInPath().path as String?)
        let bytes = try randomData(3 * 1024 * 1024 + 5)
        let source = try sandbox.write("l.bin", bytes)
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://fresh/dir/l.bin")
        let pausing = Recorder(stopAtCheckpoint: .pause)
        let stopped = try await run(sandbox.backend(checkpoint: 1024 * 1024, buckets: linked), spec, recorder: pausing)
        guard case .stopped(.pause, let point?) = stopped, case .upload(let session, let offset, _, _) = point else {
            Issue.record("expected a pause with an upload resume point, got \(stopped)")
            return
        }
        let path = try #require(LocalUploadSession(uri: session)?.path)
        #expect(path.hasPrefix(real + "/fresh/dir/"), "\(path)")
        #expect(!path.contains("/linked/"))
        let second = sandbox.backend(checkpoint: 1024 * 1024, buckets: linked)
        let result = try finished(try await run(second, spec, from: point))
        #expect(second.statistics.sourceBytesRead == Int64(bytes.count) - offset, "the session was continued, not restarted")
        #expect(result.crc32c == checksums(bytes).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: real + "/fresh/dir/l.bin")) == bytes)
    }

    /// A resume point naming another job's session (a log edited by hand, a resume point copied): that
    /// file was cut to the offset and renamed onto the object — its bytes, and their CRC32C recorded as
    /// the object's. Only a session carrying the job's own id is resumed; the other is left alone.
    @Test func anotherJobsSessionIsNeverResumedInto() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(3 * 1024 * 1024)
        let source = try sandbox.write("s.bin", bytes)
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://b/s.bin")
        let stopped = try await run(sandbox.backend(checkpoint: 1024 * 1024), spec,
                                    recorder: Recorder(stopAtCheckpoint: .pause, jobID: "01OTHERJOB"))
        guard case .stopped(.pause, let point?) = stopped, case .upload(let uri, _, _, _) = point,
              let sessionPath = LocalUploadSession(uri: uri)?.path else { Issue.record("\(stopped)"); return }
        // Make the other job's session hold other bytes, as a different upload's would.
        let otherBytes = try randomData(1024 * 1024)
        let handle = try #require(FileHandle(forUpdatingAtPath: sessionPath))
        try handle.write(contentsOf: otherBytes)
        try handle.close()
        let before = try Data(contentsOf: URL(fileURLWithPath: sessionPath))

        let result = try finished(try await run(sandbox.backend(), spec, from: point, recorder: Recorder(jobID: "01THISJOB")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: sandbox.buckets + "/b/s.bin")) == bytes)
        #expect(result.crc32c == checksums(bytes).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: sessionPath)) == before, "the other job's session was left alone")
    }

    /// The source rewritten in place between a pause and the resume (same size, other bytes): the object
    /// was the session's old prefix and the new rest, its CRC32C its own. The prefix is compared first.
    @Test func aSourceChangedInPlaceStartsTheSessionOver() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let source = try sandbox.write("c.bin", try randomData(3 * 1024 * 1024))
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://b/c.bin")
        let stopped = try await run(sandbox.backend(checkpoint: 1024 * 1024), spec,
                                    recorder: Recorder(stopAtCheckpoint: .pause, jobID: "01CHANGED"))
        guard case .stopped(.pause, let point?) = stopped else { Issue.record("\(stopped)"); return }
        let rewritten = try randomData(3 * 1024 * 1024)
        _ = try sandbox.write("c.bin", rewritten)
        let result = try finished(try await run(sandbox.backend(), spec, from: point, recorder: Recorder(jobID: "01CHANGED")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: sandbox.buckets + "/b/c.bin")) == rewritten)
        #expect(result.crc32c == checksums(rewritten).crc32c)
        #expect(sandbox.entries(sandbox.buckets + "/b") == [".c.bin.jobctl-meta.json", "c.bin"])
    }

    @Test func uploadResumePointForAChangedSourceStartsOver() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let source = try sandbox.write("f.bin", try randomData(3 * 1024 * 1024))
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://b/f.bin")
        let stopped = try await run(sandbox.backend(checkpoint: 1024 * 1024), spec, recorder: Recorder(stopAtCheckpoint: .shutdown))
        guard case .stopped(.shutdown, let point?) = stopped else { Issue.record("\(stopped)"); return }

        let replaced = try randomData(1024 * 1024 + 1)
        _ = try sandbox.write("f.bin", replaced)
        let backend = sandbox.backend()
        let result = try finished(try await run(backend, spec, from: point))
        #expect(result.md5 == nil && result.crc32c == checksums(replaced).crc32c)
        #expect(backend.statistics.sourceBytesRead == Int64(replaced.count))
        #expect(sandbox.entries(sandbox.buckets + "/b") == [".f.bin.jobctl-meta.json", "f.bin"])
    }

    /// A paused download resumed after its object changed starts at byte 0; its first report is a
    /// checkpoint of no bytes, so an attempt failing before its next checkpoint leaves no stale point.
    @Test func pausedDownloadOfAChangedObjectClearsItsResumePoint() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/c.bin", data: try randomData(5 << 20))))
        let spec = JobSpec(kind: .downloadFile, source: "file://b/c.bin", destination: sandbox.directory.file("dl/c.bin"))
        let stopped = try await run(sandbox.backend(checkpoint: 1 << 20), spec, recorder: Recorder(stopAtCheckpoint: .pause))
        guard case .stopped(.pause, let point?) = stopped, point.bytesDone > 0 else { Issue.record("\(stopped)"); return }
        let replaced = try randomData(5 << 20)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/c.bin", data: replaced)))
        let resuming = Recorder()
        _ = try finished(try await run(sandbox.backend(checkpoint: 64 << 20), spec, from: point, recorder: resuming))
        #expect(resuming.checkpoints.first?.holdsNoDownloadedBytes == true, "\(resuming.checkpoints)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: sandbox.directory.file("dl/c.bin"))) == replaced)
    }

    /// A download that removed its partial file after a checkpoint (the object shrinking under it, one of
    /// its bytes changed, the temporary name taken over before the commit, a cancel) reported nothing
    /// more: the log's point went on claiming the checkpoint's bytes (`show`, `history`, the next
    /// attempt's `resumed from_bytes` and rate). A checkpoint of no bytes follows the removal now.
    @Test(arguments: ["shrank", "checksum", "refused commit", "cancel"])
    func aDownloadThatRemovesItsPartialFileSaysSo(cause: String) async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/r.bin", data: try randomData(3 << 20))))
        let stored = sandbox.buckets + "/b/r.bin"
        let destination = sandbox.directory.file("dl/r.bin")
        let tempPath = PartialFile.tempPath(for: destination, jobID: "01LOCALDROP")
        let change: @Sendable () -> Void = switch cause {
        case "shrank": { _ = truncate(stored, 1_572_864) }
        case "checksum": {
            let handle = FileHandle(forUpdatingAtPath: stored)
            try? handle?.seek(toOffset: 2_621_440)
            handle?.write(Data([0x00, 0xFF, 0x00, 0xFF]))
            try? handle?.close()
        }
        case "refused commit": {
            _ = FileManager.default.createFile(atPath: tempPath + ".other", contents: Data("someone else's".utf8))
            _ = rename(tempPath + ".other", tempPath)
        }
        default: {}
        }
        let recorder = Recorder(stopAtCheckpoint: cause == "cancel" ? .cancel : nil, jobID: "01LOCALDROP", leaseToken: 1,
                                atFirstCheckpoint: change)
        let spec = JobSpec(kind: .downloadFile, source: "file://b/r.bin", destination: destination)
        do {
            let outcome = try await run(sandbox.backend(checkpoint: 1 << 20), spec, recorder: recorder)
            #expect(cause == "cancel" && outcome == .stopped(.cancel, nil), "\(outcome)")
        } catch {
            #expect(cause != "cancel" && error.code == (cause == "checksum" ? .nonMatchingChecksum : cause == "shrank" ? .objectNotFound : .pathError),
                    "\(error)")
        }
        #expect(recorder.checkpoints.first.map { $0.bytesDone > 0 } == true, "no checkpoint came first: \(recorder.checkpoints)")
        #expect(recorder.checkpoints.last?.holdsNoDownloadedBytes == true, "\(recorder.checkpoints)")
        #expect(!sandbox.entries(sandbox.directory.file("dl")).contains { $0.hasSuffix(".jobctl-partial") } || cause == "refused commit")
    }

    @Test func pausedDownloadResumesFromItsPartialFile() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(7 * 1024 * 1024 + 9)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/v.mkv", data: bytes)))
        let destination = sandbox.directory.file("dl/v.mkv")
        let spec = JobSpec(kind: .downloadFile, source: "file://b/v.mkv", destination: destination)

        let stopped = try await run(sandbox.backend(checkpoint: 3 * 1024 * 1024), spec, recorder: Recorder(stopAtCheckpoint: .pause))

        guard case .stopped(.pause, let point?) = stopped,
              case .download(let written, let generation, _, let tempPath?, _, _, _) = point else {
            Issue.record("expected a paused download with a resume point, got \(stopped)")
            return
        }
        #expect(written == 3 * 1024 * 1024 && generation != nil)
        #expect(tempPath == PartialFile.tempPath(for: destination))
        #expect(!FileManager.default.fileExists(atPath: destination))
        let partialSize = try FileManager.default.attributesOfItem(atPath: tempPath)[.size] as? Int
        #expect(partialSize == Int(written))

        let resuming = Recorder()
        let result = try finished(try await run(sandbox.backend(checkpoint: 3 * 1024 * 1024), spec, from: point, recorder: resuming))
        #expect(resuming.progress.first == written)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
        #expect(result.md5 == nil && result.crc32c == checksums(bytes).crc32c)
        #expect(!FileManager.default.fileExists(atPath: tempPath))
    }

    /// The partial file of a paused `file://` download changed in place before the resume (same size,
    /// same inode): the pause recorded the prefix's CRC32C, so the resumed attempt starts over and the file
    /// is the object. Without that record (the periodic checkpoint a crashed worker left) the object's
    /// CRC32C catches it at the end — it failed the job for good, saying "the object or its metadata is
    /// corrupt" of a whole object; now retryable, and the retry from byte 0 gets it.
    @Test(arguments: [true, false])
    func aPartialFileChangedOnDiskIsNotTheObjectsFault(paused: Bool) async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(5 * 1024 * 1024 + 3)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/p.bin", data: bytes)))
        let destination = sandbox.directory.file("dl/p.bin")
        let spec = JobSpec(kind: .downloadFile, source: "file://b/p.bin", destination: destination)
        let stopped = try await run(sandbox.backend(checkpoint: 2 * 1024 * 1024), spec, recorder: Recorder(stopAtCheckpoint: .pause))
        guard case .stopped(.pause, let point?) = stopped, case .download(_, _, _, let tempPath?, _, _, _) = point else {
            Issue.record("expected a paused download with a resume point, got \(stopped)")
            return
        }
        #expect(point.prefixCRC32C != nil, "\(point)")
        try invertBytes(at: 4096, count: 3, inFileAt: tempPath)
        let resuming = Recorder()
        if paused {
            _ = try finished(try await run(sandbox.backend(), spec, from: point, recorder: resuming))
            #expect(resuming.progress.first == 0, "\(resuming.progress.prefix(3))")
        } else {
            let error = await expectError(.nonMatchingChecksum) { () throws(StorageError) in
                try await run(sandbox.backend(), spec, from: point.withoutPrefixCRC32C, recorder: resuming)
            }
            #expect(error?.retryable == true, "\(String(describing: error))")
            #expect(!FileManager.default.fileExists(atPath: tempPath))
            _ = try finished(try await run(sandbox.backend(), spec, from: resuming.checkpoints.last))
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
    }

    @Test func downloadResumeAfterTheObjectChangedStartsOver() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        _ = try finished(try await run(sandbox.backend(),
                                       JobSpec(kind: .uploadData, destination: "file://b/o", data: try randomData(3 * 1024 * 1024))))
        let destination = sandbox.directory.file("o")
        let spec = JobSpec(kind: .downloadFile, source: "file://b/o", destination: destination)
        let stopped = try await run(sandbox.backend(checkpoint: 1024 * 1024), spec, recorder: Recorder(stopAtCheckpoint: .pause))
        guard case .stopped(_, let point?) = stopped else { Issue.record("\(stopped)"); return }

        let replacement = try randomData(2 * 1024 * 1024)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/o", data: replacement)))
        let resuming = Recorder()
        let result = try finished(try await run(sandbox.backend(), spec, from: point, recorder: resuming))
        #expect(resuming.progress.first == 0)
        #expect(result.md5 == nil && result.crc32c == checksums(replacement).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == replacement)
    }

    @Test func cancelRemovesTemporaryFiles() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(3 * 1024 * 1024)
        let source = try sandbox.write("src/c.bin", bytes)
        let backend = sandbox.backend(checkpoint: 1024 * 1024)

        let upload = try await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://b/c.bin"),
                                   recorder: Recorder(stopAtCheckpoint: .cancel))
        #expect(upload == .stopped(.cancel, nil))
        #expect(sandbox.entries(sandbox.buckets + "/b").isEmpty)

        _ = try finished(try await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "file://b/c.bin")))
        let destination = sandbox.directory.file("dl/c.bin")
        let download = try await run(backend, JobSpec(kind: .downloadFile, source: "file://b/c.bin", destination: destination),
                                     recorder: Recorder(stopAtCheckpoint: .cancel))
        #expect(download == .stopped(.cancel, nil))
        #expect(sandbox.entries(sandbox.directory.file("dl")).isEmpty)
    }

    // MARK: - Integrity and failures

    @Test func corruptObjectFailsTheChecksumAndLeavesNoFile() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = try randomData(1024 * 1024 + 3)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/k.bin", data: bytes)))
        // Flip one byte of the stored object; the sidecar still describes the original.
        let stored = sandbox.buckets + "/b/k.bin"
        var corrupted = bytes
        corrupted[1000] ^= 0xFF
        try corrupted.write(to: URL(fileURLWithPath: stored))

        let destination = sandbox.directory.file("dl/k.bin")
        _ = await expectError(.nonMatchingChecksum) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://b/k.bin", destination: destination))
        }
        #expect(sandbox.entries(sandbox.directory.file("dl")).isEmpty)
        _ = await expectError(.nonMatchingChecksum) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .downloadMemory, source: "file://b/k.bin", maxSize: 1 << 21))
        }
    }

    /// Names of 213–255 bytes are legal, but the hidden files beside them (a download's partial file, an
    /// object's sidecar and upload session) did not fit in a file name: every such transfer failed as
    /// "not a usable path". Their hidden names are fitted now.
    @Test func namesUpToTheLongestAFileMayHaveTransfer() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let objectName = String(repeating: "o", count: 250)
        let localName = String(repeating: "l", count: 240)
        let bytes = try randomData(300_000)
        let source = sandbox.directory.file(localName)
        try bytes.write(to: URL(fileURLWithPath: source))
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadFile, source: source, destination: "file://b/\(objectName)")))
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/d\(objectName.dropFirst())",
                                                                  data: bytes)))
        let destination = sandbox.directory.file("dl/\(localName)")
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://b/\(objectName)", destination: destination)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == bytes)
        let metadata = try finished(try await run(sandbox.backend(), JobSpec(kind: .getMetadata, source: "file://b/\(objectName)")))
        #expect(metadata.object?.size == Int64(bytes.count) && metadata.object?.crc32c != nil)
        // Only the objects, their sidecars (fitted) and the download are left: no temporary file.
        let stored = sandbox.entries(sandbox.buckets + "/b")
        #expect(stored.count == 4, "\(stored)")
        #expect(stored.allSatisfy { $0.utf8.count <= 255 })
        #expect(sandbox.entries(sandbox.directory.file("dl")) == [localName])
    }

    /// A sidecar that lies about the size (written by another tool, or planted) never stands for the
    /// object: every operation that reads it reports the file's own size.
    @Test(arguments: [Int64(5), -3, 0, 1 << 40])
    func aSidecarsSizeNeverStandsForTheFile(claimed: Int64) async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let bytes = Data("hello world".utf8)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/s.txt", data: bytes)))
        let sidecar = URL(fileURLWithPath: sandbox.buckets + "/b/.s.txt.jobctl-meta.json")
        var json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: sidecar)) as? [String: Any])
        json["size"] = claimed
        try JSONSerialization.data(withJSONObject: json).write(to: sidecar)
        for kind in [JobKind.fetchURL, .getMetadata] {
            let result = try finished(try await run(sandbox.backend(), JobSpec(kind: kind, source: "file://b/s.txt")))
            #expect(result.object?.size == Int64(bytes.count), "\(kind): \(String(describing: result.object))")
        }
        let memory = try finished(try await run(sandbox.backend(), JobSpec(kind: .downloadMemory, source: "file://b/s.txt", maxSize: 100)))
        #expect(memory.data == bytes)
        #expect(memory.object?.size == Int64(bytes.count))
        let updated = try finished(try await run(sandbox.backend(), JobSpec(kind: .updateMetadata, destination: "file://b/s.txt",
                                                                            metadata: UploadMetadata(cacheControl: "no-store"))))
        #expect(updated.object?.size == Int64(bytes.count))
    }

    /// The object and its sidecar are two renames; a folder at the sidecar's name made the second fail
    /// after the first had replaced the object: the job failed, the object held the new bytes beside the
    /// old metadata. A folder at either name is now refused before anything is renamed, and so is a
    /// pipe (a device or socket alike), which a rename would have replaced.
    @Test("a folder or a pipe at an object's or its sidecar's name fails the upload with nothing changed",
          arguments: [false, true], [Blocker.folder, .pipe])
    func blockerAtTheNameChangesNothing(atSidecar: Bool, blocker: Blocker) async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let first = Data("version one".utf8)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/obj.txt", data: first)))
        let bucket = sandbox.buckets + "/b"
        let blocked = atSidecar ? bucket + "/.obj.txt.jobctl-meta.json" : bucket + "/obj.txt"
        try FileManager.default.removeItem(atPath: blocked)
        try blocker.make(at: blocked)
        let error = await expectError(.invalidArgument) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/obj.txt", data: Data("version two".utf8)))
        }
        #expect(error?.message.contains("is \(blocker.words)") == true, "\(String(describing: error))")
        #expect(error?.retryable == false)
        if atSidecar {
            #expect(try Data(contentsOf: URL(fileURLWithPath: bucket + "/obj.txt")) == first, "the object was not replaced")
        }
        #expect(blocker.isThere(at: blocked), "the \(blocker) at \(blocked) was replaced")
        #expect(sandbox.entries(bucket).allSatisfy { !$0.contains("jobctl-upload") && !$0.contains(".jobctl-meta.tmp") },
                "\(sandbox.entries(bucket))")
    }

    /// What a test plants where jobctl would write.
    enum Blocker: CustomStringConvertible {
        case folder, pipe
        var description: String { self == .folder ? "folder" : "pipe" }
        /// `kindDescription`'s words for it.
        var words: String { self == .folder ? "a directory" : "a device, socket or pipe" }
        func make(at path: String) throws {
            switch self {
            case .folder: try FileManager.default.createDirectory(atPath: path + "/inside", withIntermediateDirectories: true)
            case .pipe: guard mkfifo(path, 0o644) == 0 else { throw CocoaError(.fileWriteUnknown) }
            }
        }
        func isThere(at path: String) -> Bool {
            var info = stat()
            guard lstat(path, &info) == 0 else { return false }
            return info.st_mode & S_IFMT == (self == .folder ? S_IFDIR : S_IFIFO)
        }
    }

    /// The worker's own event log is never written over or deleted by its jobs: a download whose
    /// destination was the database renamed a file over it (every job's history gone), and a `file://`
    /// object of its name in a bucket folder holding it did the same; a delete removed it. Known by
    /// identity, so a hard link to the file is refused as well.
    @Test("a download, an upload or a delete onto a protected file (the event log's) is refused and leaves it whole")
    func protectedFilesAreNeverWrittenOver() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/x.txt", data: Data("x".utf8))))
        let log = Data("the event log".utf8)
        let database = try sandbox.write("jobctl.db", log)
        let inBucket = sandbox.buckets + "/b/jobctl.db"
        #expect(link(database, inBucket) == 0)
        ProtectedFiles.protect([database], as: "this worker's event log")
        // Before the sandbox goes: its inode may be another test's file next.
        defer { ProtectedFiles.unprotect([database]) }
        let attempts: [(String, JobSpec)] = [
            ("download", JobSpec(kind: .downloadFile, source: "file://b/x.txt", destination: database)),
            ("upload", JobSpec(kind: .uploadData, destination: "file://b/jobctl.db", data: Data("over".utf8))),
            ("delete", JobSpec(kind: .delete, destination: "file://b/jobctl.db")),
        ]
        for (what, spec) in attempts {
            let error = await expectError(.invalidArgument) { () throws(StorageError) in
                try await run(sandbox.backend(), spec)
            }
            #expect(error?.message.contains("this worker's event log") == true, "\(what): \(String(describing: error))")
            #expect(error?.retryable == false, "\(what)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: database)) == log, "\(what) changed the log")
            #expect(try Data(contentsOf: URL(fileURLWithPath: inBucket)) == log, "\(what) changed the log's other name")
        }
        #expect(sandbox.entries(sandbox.directory.path).allSatisfy { !$0.contains("jobctl-partial") }, "\(sandbox.entries(sandbox.directory.path))")
    }

    /// A download's destination that is a device, socket or pipe is refused, not replaced: `/dev/null`
    /// as a destination (a user trying a download out) became a regular file for every program on a
    /// machine where the worker runs as root. The pipe is what any user can make; a character device
    /// as well where this process may make one (as root).
    @Test("a download onto a pipe or a device is refused and leaves it in place")
    func downloadOntoADeviceIsRefused() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/x.txt", data: Data("x".utf8))))
        let pipe = sandbox.directory.file("pipe")
        #expect(mkfifo(pipe, 0o644) == 0)
        var targets = [(pipe, S_IFIFO)]
        let device = sandbox.directory.file("null")
        // 1:3, the null device
        if mknod(device, S_IFCHR | 0o666, dev_t(1 << 8 | 3)) == 0 { targets.append((device, S_IFCHR)) }
        for (path, kind) in targets {
            let recorder = Recorder()
            let error = await expectError(.invalidArgument) { () throws(StorageError) in
                try await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://b/x.txt", destination: path),
                              recorder: recorder)
            }
            #expect(error?.message.contains("is a device, socket or pipe") == true, "\(String(describing: error))")
            #expect(error?.retryable == false)
            // Refused before the transfer began: not one progress report (the commit refused it after).
            #expect(!recorder.all.contains { if case .progress = $0 { true } else { false } }, "\(recorder.all)")
            var info = stat()
            #expect(lstat(path, &info) == 0 && info.st_mode & S_IFMT == kind, "\(path) was replaced")
        }
        #expect(sandbox.entries(sandbox.directory.path).allSatisfy { !$0.contains("jobctl") }, "\(sandbox.entries(sandbox.directory.path))")
    }

    /// The object and its sidecar are two renames. A worker killed between them left the new object
    /// beside the old sidecar, whose CRC32C failed every download of the new (whole, correct) bytes as
    /// corrupt until the job was retried. The sidecar names the file it describes: another file at the
    /// object's name is served as a file without one, and the next write of its metadata describes it.
    @Test("an object renamed into place without its sidecar is served as a file without one")
    func objectWithoutItsSidecar() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let first = try randomData(100_000)
        let second = try randomData(70_000)
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/o.bin", data: first)))
        // The state a worker killed between the renames leaves: the new object in place (its session file
        // renamed onto the name, so a new inode), the old object's sidecar beside it.
        let bucket = sandbox.buckets + "/b"
        let session = bucket + "/.o.bin.session"
        try second.write(to: URL(fileURLWithPath: session))
        #expect(rename(session, bucket + "/o.bin") == 0)

        let destination = sandbox.directory.file("dl/o.bin")
        let download = try finished(try await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://b/o.bin", destination: destination)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == second)
        #expect(download.verified == [], "no checksum of this file is recorded")
        let memory = try finished(try await run(sandbox.backend(), JobSpec(kind: .downloadMemory, source: "file://b/o.bin", maxSize: 1 << 20)))
        #expect(memory.data == second)
        let metadata = try #require(try finished(try await run(sandbox.backend(), JobSpec(kind: .getMetadata, source: "file://b/o.bin"))).object)
        #expect(metadata.crc32c == nil && metadata.md5Hash == nil && metadata.size == Int64(second.count), "\(metadata)")

        // Metadata written now (here a download token) describes the file in place: its checksums are
        // still unknown, and an edit in place is no longer taken for another file.
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .fetchURL, source: "file://b/o.bin")))
        let tokened = try #require(try finished(try await run(sandbox.backend(), JobSpec(kind: .getMetadata, source: "file://b/o.bin"))).object)
        #expect(tokened.downloadTokens != nil && tokened.crc32c == nil, "\(tokened)")

        // The job's retry (or any upload) writes both again: its checksum is recorded and verified.
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/o.bin", data: second)))
        let again = try finished(try await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://b/o.bin",
                                                                          destination: sandbox.directory.file("dl/again.bin"))))
        #expect(again.verified == [.crc32c])
        #expect(sandbox.entries(bucket).filter { !$0.hasPrefix(".o.bin.jobctl-meta.json") && $0 != "o.bin" } == [], "\(sandbox.entries(bucket))")
    }

    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func fullDiskIsATypedErrorAndLeavesNoFinalFile() async throws {
        let sandbox = try Sandbox()
        defer { sandbox.directory.remove() }
        let filesystem = try SmallFilesystem(at: sandbox.directory.file("small"), size: "1m")
        defer { filesystem.unmount() }
        let small = filesystem.path
        let bytes = try randomData(2 * 1024 * 1024)

        // Upload into a bucket on the full filesystem.
        let source = try sandbox.write("two.bin", bytes)
        let error = await expectError(.internalError) { () throws(StorageError) in
            try await run(sandbox.backend(buckets: small), JobSpec(kind: .uploadFile, source: source, destination: "file://b/two.bin"))
        }
        #expect(error?.message.hasPrefix("disk full") == true)
        #expect(error?.retryable == false)
        #expect(sandbox.entries(small + "/b").isEmpty)

        // Download onto the full filesystem.
        _ = try finished(try await run(sandbox.backend(), JobSpec(kind: .uploadData, destination: "file://b/two.bin", data: bytes)))
        let destination = small + "/dl/two.bin"
        let downloadError = await expectError(.internalError) { () throws(StorageError) in
            try await run(sandbox.backend(), JobSpec(kind: .downloadFile, source: "file://b/two.bin", destination: destination))
        }
        #expect(downloadError?.message.hasPrefix("disk full") == true)
        #expect(sandbox.entries(small + "/dl").isEmpty)
    }
}

@Suite("Local metadata timestamps", .onTestThreads)
struct LocalTimestampTests {
    @Test("the hand-made RFC 3339 timestamp is exactly ISO8601DateFormatter's, rounding included")
    func matchesFoundation() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        var seconds: [Double] = [0, 1.9996, 0.0004, 951_782_400.5004, 1_764_423_511.123_456, 4_102_444_799.999_9]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 { seconds.append(Double(Int64.random(in: 0..<4_000_000_000_000_000, using: &generator)) / 1_000_000) }
        for value in seconds {
            let date = Date(timeIntervalSince1970: value)
            #expect(LocalFiles.timestamp(date) == formatter.string(from: date), "at \(value)")
        }
    }
}
