import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// An `if_exists: fail` transfer whose attempt finished the destination's file — linked it into place —
/// and died before reporting, while the log holds an earlier checkpoint of that same file: the next
/// attempt starts from the checkpoint and finds the destination taken by the very inode the checkpoint
/// names. It takes that file as the job's own (compared by CRC32C) instead of failing the job for good on
/// its own work, and removes the second name a death between the link and the unlink left; a file
/// with the same bytes that is not that inode is refused, as always.
///
/// The dead attempt is played by a run that finishes and whose outcome is dropped: the files it leaves
/// are those of a worker killed after the link, and the resume point the next attempt gets is the log's.
@Suite("if_exists: fail after an attempt that linked its file and died", .onTestThreads)
struct DiedAfterLinkTests {
    private let payload = patternData(3_000_000, seed: 61)
    private let jobID = "01DIEDAFTERLINK"

    /// Attempt 1 paused part-way: the checkpoint the log holds.
    private func checkpoint(_ backend: any StorageBackend, _ spec: JobSpec) async throws -> ResumePoint {
        let control = TransferControl(jobID: jobID)
        let recorder = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 1_000_000 { control.stop(.pause) }
        }
        let outcome = try await run(backend, spec, control: control, recorder: recorder).get()
        guard case .stopped(.pause, let point?) = outcome else { throw TestServerError("expected a paused transfer, got \(outcome)") }
        return point
    }

    /// Attempt 1 checkpoints part-way; attempt 2 finishes from that checkpoint — links the file into place
    /// at `destination` — and its worker dies before the report and before removing the earlier name,
    /// which is left as a second link to the destination. Returns the checkpoint (what the log holds)
    /// and the file it names.
    private func diedAfterLink(_ backend: any StorageBackend, _ spec: JobSpec,
                               at destination: String) async throws -> (point: ResumePoint, file: (path: String, identity: FileIdentity)) {
        let point = try await checkpoint(backend, spec)
        let file = try #require(OverwriteRule.fileWritten(by: point), "\(point)")
        _ = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(PartialFile.destinationFile(destination) == file.identity, "the destination is the checkpoint's file")
        #expect(link(destination, file.path) == 0)
        return (point, file)
    }

    /// A `LocalBackend` on a fresh folder of buckets that checkpoints every 256 KiB.
    private func checkpointingLocalBackend() throws -> (directory: TemporaryDirectory, buckets: String, backend: LocalBackend) {
        let (directory, buckets, _) = try localBuckets("jobctl-died-after-link")
        return (directory, buckets, LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets), checkpointInterval: 256 * 1024))
    }

    /// The three cases for a download of `object` (holding `payload`) into `directory`.
    private func checkDownload(_ backend: any StorageBackend, object: String, in directory: TemporaryDirectory) async throws {
        let destination = directory.file("got.bin")
        let spec = JobSpec(kind: .downloadFile, source: object, destination: destination, ifExists: .fail)
        let (point, written) = try await diedAfterLink(backend, spec, at: destination)
        guard case .download(_, _, _, let temp?, let file?, _, _) = point, temp == written.path, file == written.identity else {
            throw TestServerError("expected a download checkpoint, got \(point)")
        }

        // Attempt 3 starts from the log's checkpoint.
        let refusedOtherwise = try failure(await run(backend, JobSpec(kind: .downloadFile, source: object, destination: destination, ifExists: .fail)))
        #expect(refusedOtherwise.code == .invalidArgument, "without the checkpoint the destination is someone's: \(refusedOtherwise)")
        let taken = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(taken.skipped == nil && taken.verified == [.crc32c] && taken.size == Int64(payload.count), "\(taken)")
        #expect(taken.crc32c == hashes(payload).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        #expect(!FileManager.default.fileExists(atPath: temp), "the second name is gone")
        #expect(PartialFile.destinationFile(destination) == file)

        // A death after the unlink: the destination alone. Taken the same way.
        let again = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(again.skipped == nil && again.crc32c == hashes(payload).crc32c)

        // The destination changed in place after the death: not the job's bytes, refused and kept, and
        // the temporary name (back as a second link) goes with the refusal.
        #expect(link(destination, temp) == 0)
        let changed = FileHandle(forUpdatingAtPath: destination)
        changed?.write(Data("x".utf8))
        try changed?.close()
        let changedBytes = try Data(contentsOf: URL(fileURLWithPath: destination))
        let refusedChanged = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(refusedChanged.code == .invalidArgument && refusedChanged.message.contains("if_exists: fail"), "\(refusedChanged)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == changedBytes)
        #expect(!FileManager.default.fileExists(atPath: temp), "the second name went with the refusal")

        // The same bytes in another file (someone's copy, not the checkpoint's inode — made while that
        // inode still exists, so its number cannot be reused): refused and kept.
        let copy = directory.file("copy.bin")
        try payload.write(to: URL(fileURLWithPath: copy))
        #expect(rename(copy, destination) == 0)
        #expect(PartialFile.destinationFile(destination) != file)
        let refusedCopy = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(refusedCopy.code == .invalidArgument && refusedCopy.message.contains("if_exists: fail"), "\(refusedCopy)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
    }

    @Test("download-file from file:// (the sidecar's CRC32C)")
    func localDownload() async throws {
        let (directory, _, backend) = try checkpointingLocalBackend()
        defer { directory.remove() }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/d.bin", data: payload)))
        try await checkDownload(backend, object: "file://b/d.bin", in: directory)
    }

    @Test("download-file from GCS (the object's CRC32C)")
    func gcsDownload() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/d.bin", data: payload)))
        let directory = try TemporaryDirectory("jobctl-died-after-link")
        defer { directory.remove() }
        try await checkDownload(backend, object: "gs://\(server.bucket)/d.bin", in: directory)
    }

    @Test("download-file over HTTP (nginx serves no hash: the object is read back to compare)")
    func httpDownload() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/d.bin"))
        let directory = try TemporaryDirectory("jobctl-died-after-link")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        try await checkDownload(backend, object: "\(server.baseURL)/d.bin", in: directory)
    }

    @Test("upload-file into file:// (the session file linked into place is the object)")
    func localUpload() async throws {
        let (directory, buckets, backend) = try checkpointingLocalBackend()
        defer { directory.remove() }
        let source = directory.file("source.bin")
        try payload.write(to: URL(fileURLWithPath: source))
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://b/up.bin", ifExists: .fail)
        let object = buckets + "/b/up.bin"
        let (point, written) = try await diedAfterLink(backend, spec, at: object)

        #expect(try failure(await run(backend, spec)).code == .invalidArgument, "without the checkpoint the object is someone's")
        let taken = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(taken.skipped == nil && taken.verified == [.crc32c] && taken.crc32c == hashes(payload).crc32c, "\(taken)")
        #expect(!FileManager.default.fileExists(atPath: written.path), "the session's second name is gone")
        #expect(try Data(contentsOf: URL(fileURLWithPath: object)) == payload)

        // Another source's bytes: refused, the object kept.
        try patternData(3_000_000, seed: 62).write(to: URL(fileURLWithPath: source))
        let refused = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(refused.code == .invalidArgument && refused.message.contains("if_exists: fail"), "\(refused)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: object)) == payload)
    }

    /// As `localUpload`, with each attempt's own session name (its lease token in it): attempt 2 took the
    /// checkpoint's session over (renamed it to its name), linked it into place and died before the
    /// unlink, so the log's checkpoint names a name that is gone and the second link is attempt 2's name.
    /// Attempt 3 finds that name by the file's identity, removes it, and takes the object as the job's.
    @Test("upload-file into file:// with per-attempt session names: the second name a death after the link left is found and removed")
    func localUploadWithLeaseTokens() async throws {
        let (directory, buckets, backend) = try checkpointingLocalBackend()
        defer { directory.remove() }
        let source = directory.file("source.bin")
        try payload.write(to: URL(fileURLWithPath: source))
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://b/up.bin", ifExists: .fail)
        let object = buckets + "/b/up.bin"
        let first = TransferControl(jobID: jobID, leaseToken: 1)
        let recorder = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 1_000_000 { first.stop(.pause) }
        }
        let paused = try await run(backend, spec, control: first, recorder: recorder).get()
        guard case .stopped(.pause, let point?) = paused else { throw TestServerError("expected a paused transfer, got \(paused)") }
        let written = try #require(OverwriteRule.fileWritten(by: point), "\(point)")
        #expect(written.path == buckets + "/b/.up.bin.\(jobID).1.jobctl-upload")
        _ = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID, leaseToken: 2)))
        let secondName = buckets + "/b/.up.bin.\(jobID).2.jobctl-upload"
        #expect(PartialFile.destinationFile(object) == written.identity, "the object is the checkpoint's file")
        #expect(!FileManager.default.fileExists(atPath: written.path))
        #expect(link(object, secondName) == 0)

        let taken = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID, leaseToken: 3)))
        #expect(taken.skipped == nil && taken.verified == [.crc32c] && taken.crc32c == hashes(payload).crc32c, "\(taken)")
        #expect(!FileManager.default.fileExists(atPath: secondName), "the session's second name is gone")
        #expect(try Data(contentsOf: URL(fileURLWithPath: object)) == payload)
        #expect(try FileManager.default.contentsOfDirectory(atPath: buckets + "/b").sorted() == [".up.bin.jobctl-meta.json", "up.bin"])
    }

    /// The state a death between the link and the unlink leaves, and then the destination moved away
    /// by its owner: the checkpoint's temporary name still names the moved file. An attempt resuming from
    /// the checkpoint must not write into it (truncating it to the checkpoint's offset would change the
    /// moved file): it drops that name and downloads afresh; stopped part-way, the moved file is whole.
    @Test("a checkpoint's file with a second name is never written to (download and file:// upload)")
    func neverWritesALinkedFile() async throws {
        let (directory, buckets, backend) = try checkpointingLocalBackend()
        defer { directory.remove() }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/d.bin", data: payload)))

        // Download.
        let destination = directory.file("got.bin")
        let kept = directory.file("kept.bin")
        let spec = JobSpec(kind: .downloadFile, source: "file://b/d.bin", destination: destination, ifExists: .fail)
        let (point, _) = try await diedAfterLink(backend, spec, at: destination)
        #expect(rename(destination, kept) == 0)
        try await stopPartWay(backend, spec, from: point)
        #expect(try Data(contentsOf: URL(fileURLWithPath: kept)) == payload, "the moved file was written through its second name")
        let fresh = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(fresh.crc32c == hashes(payload).crc32c)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        #expect(PartialFile.destinationFile(destination) != PartialFile.destinationFile(kept))
        #expect(try Data(contentsOf: URL(fileURLWithPath: kept)) == payload)

        // file:// upload: the object replaced by another writer after the link; its old file kept elsewhere.
        let source = directory.file("source.bin")
        try payload.write(to: URL(fileURLWithPath: source))
        let upload = JobSpec(kind: .uploadFile, source: source, destination: "file://b/up.bin")
        let object = buckets + "/b/up.bin"
        let keptObject = directory.file("kept-object.bin")
        let (session, _) = try await diedAfterLink(backend, upload, at: object)
        #expect(rename(object, keptObject) == 0)
        try await stopPartWay(backend, upload, from: session)
        #expect(try Data(contentsOf: URL(fileURLWithPath: keptObject)) == payload, "the kept object was written through its second name")
        _ = try finished(await run(backend, upload, resume: session, control: TransferControl(jobID: jobID)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: object)) == payload)
        #expect(try Data(contentsOf: URL(fileURLWithPath: keptObject)) == payload)
    }

    /// Runs `spec` from `point` and pauses it once it moved past 1.5 MB.
    private func stopPartWay(_ backend: any StorageBackend, _ spec: JobSpec, from point: ResumePoint) async throws {
        let control = TransferControl(jobID: jobID)
        let recorder = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 1_500_000 { control.stop(.pause) }
        }
        let outcome = try await run(backend, spec, resume: point, control: control, recorder: recorder).get()
        guard case .stopped(.pause, _) = outcome else { throw TestServerError("expected a pause part-way, got \(outcome)") }
    }

    @Test("a sliced download's checkpoint names its file too; other points name none")
    func pointsNamingAFile() {
        let file = FileIdentity(device: 3, inode: 9)
        let sliced = ResumePoint.slicedDownload(slices: [], generation: "1", tempPath: "/d/.x.jobctl-partial", file: file)
        #expect(OverwriteRule.fileWritten(by: sliced)?.identity == file)
        #expect(OverwriteRule.fileWritten(by: .download(bytesWritten: 5, generation: nil, etag: nil, tempPath: "/d/t", file: nil)) == nil)
        #expect(OverwriteRule.fileWritten(by: .upload(sessionURI: "https://h/session?id=1", confirmedOffset: 0, total: nil)) == nil)
        #expect(OverwriteRule.fileWritten(by: .unanswered) == nil)
        // An overwrite rule never looks.
        let rule = OverwriteRule(JobSpec(kind: .downloadFile, source: "gs://b/x", destination: "/d/x"), resumingFrom: sliced, existing: file)
        #expect(!rule.acceptsIdentical)
    }
}

/// A `gs://` upload under `if_exists: fail` whose attempt finished its resumable session and died before
/// reporting: the next attempt starts from the session the log holds.
@Suite("if_exists: fail after an upload session finished unreported (GCS)", .onTestThreads)
struct FinishedSessionTests {
    @Test("the finished session answers the next attempt's status query with its object, taken as the job's upload")
    func finishedSession() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let payload = patternData(1_500_000, seed: 63)
        let spec = JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/s.bin", data: payload, ifExists: .fail)
        let control = TransferControl()
        let recorder = EventRecorder { event in
            if case .checkpoint(.upload, _) = event { control.stop(.pause) }
        }
        let outcome = try await run(backend, spec, control: control, recorder: recorder).get()
        guard case .stopped(.pause, let point?) = outcome, case .upload = point else {
            Issue.record("expected a paused session, got \(outcome)")
            return
        }
        _ = try finished(await run(backend, spec, resume: point))
        let taken = try finished(await run(backend, spec, resume: point))
        #expect(taken.skipped == nil && taken.crc32c == hashes(payload).crc32c, "\(taken)")
    }
}
