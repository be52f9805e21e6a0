import Foundation
#if canImport(Glibc)
import Glibc
#endif
import JobModel
import Storage
import TestSupport
import Testing

// Files the worker creates are never reached through a link or a file a third party put in their place:
// partial downloads, `file://` objects, their sidecars and upload sessions. Every test plants the link
// (or the foreign file) on real files, runs the real backend, and checks the planted target is untouched.

private let precious = Data("precious bytes that must never change\n".utf8)

/// A scratch directory with a victim file outside the folders the transfers write to.
private struct Scene {
    let directory: TemporaryDirectory
    var victim: String { directory.file("victim/secret.txt") }
    var buckets: String { directory.file("buckets") }

    init(_ label: String) throws {
        directory = try TemporaryDirectory(label)
        for folder in ["victim", "buckets/b", "out"] {
            try FileManager.default.createDirectory(atPath: directory.file(folder), withIntermediateDirectories: true)
        }
        try precious.write(to: URL(fileURLWithPath: directory.file("victim/secret.txt")))
    }

    func local(checkpoint: Int64 = LocalBackend.defaultCheckpointInterval) -> LocalBackend {
        LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets), checkpointInterval: checkpoint)
    }

    func link(_ path: String, to target: String) throws {
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
    }

    func contents(_ path: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path)) }

    /// Whether the file at `path` holds exactly `bytes`. A Bool, so a failure does not make the test
    /// library diff megabytes.
    func holds(_ path: String, _ bytes: Data) -> Bool {
        (try? contents(path)) == bytes
    }

    func isSymbolicLink(_ path: String) -> Bool {
        (try? FileManager.default.attributesOfItem(atPath: path)[.type] as? FileAttributeType) == .typeSymbolicLink
    }

    func isRegularFile(_ path: String) -> Bool {
        (try? FileManager.default.attributesOfItem(atPath: path)[.type] as? FileAttributeType) == .typeRegular
    }
}

/// Stops a transfer at its first checkpoint and keeps the resume point.
private func pauseAtFirstCheckpoint(_ control: TransferControl) -> EventRecorder {
    EventRecorder { event in
        if case .checkpoint = event { control.stop(.pause) }
    }
}

private func pausedPoint(_ result: Result<TransferOutcome, StorageError>) throws -> ResumePoint {
    guard case .success(.stopped(.pause, let point?)) = result else {
        Issue.record("expected a pause with a resume point, got \(result)")
        throw TestServerError("not paused")
    }
    return point
}

@Suite("Files the worker creates never follow links", .onTestThreads)
struct SafeFilesTests {
    // MARK: - Partial downloads

    @Test("a link planted at the partial path of a download that 404s is refused, its target untouched")
    func linkAtThePartialPathOfAFailingDownload() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let scene = try Scene("safe-404")
        defer { scene.directory.remove() }
        let destination = scene.directory.file("out/report.pdf")
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))

        // Without a job (the old, shared name) and with one (the job's own name): neither is followed.
        for jobID in [nil, JobID.generate()] {
            let temp = PartialFile.tempPath(for: destination, jobID: jobID)
            try scene.link(temp, to: scene.victim)
            let error = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/missing.pdf",
                                                               destination: destination),
                                              control: TransferControl(jobID: jobID)))
            #expect(error.code == .pathError, "\(error)")
            #expect(error.message.contains("a symbolic link was found at '\(temp)' and was not followed"), "\(error)")
            #expect(scene.holds(scene.victim, precious))
            #expect(scene.isSymbolicLink(temp), "the planted link is reported, not silently removed")
            #expect(!FileManager.default.fileExists(atPath: destination))
            try FileManager.default.removeItem(atPath: temp)
        }
    }

    @Test("a download that succeeds next to a link at the old partial name and a link at the destination writes through neither")
    func successfulDownloadNextToPlantedLinks() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let scene = try Scene("safe-ok")
        defer { scene.directory.remove() }
        let payload = patternData(300_000, seed: 11)
        try payload.write(to: URL(fileURLWithPath: server.root + "/data.bin"))
        let destination = scene.directory.file("out/data.bin")
        let otherVictim = scene.directory.file("victim/other.txt")
        try precious.write(to: URL(fileURLWithPath: otherVictim))
        let legacyTemp = PartialFile.tempPath(for: destination)
        try scene.link(legacyTemp, to: scene.victim)
        try scene.link(destination, to: otherVictim)
        let jobID = JobID.generate()

        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let result = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/data.bin",
                                                             destination: destination),
                                            control: TransferControl(jobID: jobID)))

        #expect(result.path == destination)
        #expect(scene.isRegularFile(destination), "the destination must be a regular file, not a link")
        #expect(scene.holds(destination, payload))
        #expect(scene.holds(scene.victim, precious))
        #expect(scene.holds(otherVictim, precious))
        #expect(scene.isSymbolicLink(legacyTemp), "a link the job did not make is not its to remove")
        #expect(!FileManager.default.fileExists(atPath: PartialFile.tempPath(for: destination, jobID: jobID)))
    }

    @Test("a partial replaced by another file between pause and resume is never appended to: the download restarts from 0")
    func swappedPartialRestartsFromZero() async throws {
        let scene = try Scene("safe-swap")
        defer { scene.directory.remove() }
        let payload = patternData(3 * 1024 * 1024 + 17, seed: 5)
        _ = try finished(await run(scene.local(), JobSpec(kind: .uploadData, destination: "file://b/video.bin", data: payload)))
        let destination = scene.directory.file("out/video.bin")
        let spec = JobSpec(kind: .downloadFile, source: "file://b/video.bin", destination: destination)
        let jobID = JobID.generate()
        let control = TransferControl(jobID: jobID)
        let point = try pausedPoint(await run(scene.local(checkpoint: 1024 * 1024), spec, control: control,
                                              recorder: pauseAtFirstCheckpoint(control)))
        guard case .download(let written, _, _, let temp?, let identity?, _, _) = point else {
            Issue.record("the resume point records no temporary file or identity: \(point)")
            return
        }
        #expect(temp == PartialFile.tempPath(for: destination, jobID: jobID))
        #expect(written == 1024 * 1024)

        // Someone replaces the partial with a file of their own, as long as the recorded prefix (made
        // before the partial goes, so it cannot get the partial's freed inode number).
        let foreign = Data(repeating: 0x41, count: Int(written) + 10)
        try foreign.write(to: URL(fileURLWithPath: temp + ".planted"))
        #expect(rename(temp + ".planted", temp) == 0)
        let held = try #require(FileHandle(forReadingAtPath: temp))   // keeps the foreign inode readable
        defer { try? held.close() }
        var info = stat()
        #expect(lstat(temp, &info) == 0 && UInt64(info.st_ino) != identity.inode)

        let recorder = EventRecorder()
        let result = try finished(await run(scene.local(checkpoint: 1024 * 1024), spec, resume: point,
                                            control: TransferControl(jobID: jobID), recorder: recorder))
        #expect(recorder.progress.first == 0, "resumed into a foreign file: \(recorder.progress.prefix(3))")
        #expect(scene.holds(destination, payload))
        #expect(result.md5 == nil && result.crc32c == hashes(payload).crc32c)
        try held.seek(toOffset: 0)
        let untouched = held.readDataToEndOfFile() == foreign
        #expect(untouched, "the foreign file was written to")
    }

    @Test("a hard link to another file planted at the partial path fails the resume typed and leaves that file alone")
    func hardLinkedPartialIsRefused() async throws {
        let scene = try Scene("safe-hardlink")
        defer { scene.directory.remove() }
        let payload = patternData(3 * 1024 * 1024, seed: 6)
        _ = try finished(await run(scene.local(), JobSpec(kind: .uploadData, destination: "file://b/v.bin", data: payload)))
        let destination = scene.directory.file("out/v.bin")
        let spec = JobSpec(kind: .downloadFile, source: "file://b/v.bin", destination: destination)
        let jobID = JobID.generate()
        let control = TransferControl(jobID: jobID)
        let point = try pausedPoint(await run(scene.local(checkpoint: 1024 * 1024), spec, control: control,
                                              recorder: pauseAtFirstCheckpoint(control)))
        guard case .download(_, _, _, let temp?, _, _, _) = point else { Issue.record("\(point)"); return }

        // A victim at least as long as the recorded prefix, hard-linked in place of the partial.
        let victimBytes = Data(repeating: 0x5A, count: 2 * 1024 * 1024)
        try victimBytes.write(to: URL(fileURLWithPath: scene.victim))
        try FileManager.default.removeItem(atPath: temp)
        try FileManager.default.linkItem(atPath: scene.victim, toPath: temp)

        let error = try failure(await run(scene.local(checkpoint: 1024 * 1024), spec, resume: point, control: TransferControl(jobID: jobID)))
        #expect(error.code == .pathError, "\(error)")
        #expect(error.message.contains("an unexpected file (a file with 2 hard links) was found at '\(temp)'"), "\(error)")
        #expect(scene.holds(scene.victim, victimBytes))
        #expect(!FileManager.default.fileExists(atPath: destination))
    }

    @Test("a partial recorded before identities were (old name, no inode) is still resumed")
    func legacyResumePointStillResumes() async throws {
        let scene = try Scene("safe-legacy")
        defer { scene.directory.remove() }
        let payload = patternData(3 * 1024 * 1024 + 5, seed: 8)
        _ = try finished(await run(scene.local(), JobSpec(kind: .uploadData, destination: "file://b/o.bin", data: payload)))
        let destination = scene.directory.file("out/o.bin")
        let spec = JobSpec(kind: .downloadFile, source: "file://b/o.bin", destination: destination)
        let control = TransferControl()   // no job: the old name
        let point = try pausedPoint(await run(scene.local(checkpoint: 1024 * 1024), spec, control: control,
                                              recorder: pauseAtFirstCheckpoint(control)))
        guard case .download(let written, let generation, _, let temp?, _, _, _) = point else { Issue.record("\(point)"); return }
        #expect(temp == PartialFile.tempPath(for: destination))
        // As an event logged by an older jobctl decodes: no identity.
        let old = ResumePoint.download(bytesWritten: written, generation: generation, etag: nil, tempPath: temp)
        let recorder = EventRecorder()
        _ = try finished(await run(scene.local(), spec, resume: old, control: TransferControl(jobID: JobID.generate()), recorder: recorder))
        #expect(recorder.progress.first == written)
        #expect(scene.holds(destination, payload))
        #expect(!FileManager.default.fileExists(atPath: temp))
    }

    // MARK: - file:// objects, sidecars, sessions

    @Test("a link planted at a file:// object's path is replaced by the upload, never written through")
    func linkAtTheObjectPath() async throws {
        let scene = try Scene("safe-object")
        defer { scene.directory.remove() }
        let backend = scene.local()
        let other = Data("the other object\n".utf8)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/other.txt", data: other)))
        try scene.link(scene.buckets + "/b/planted.txt", to: scene.buckets + "/b/other.txt")
        try scene.link(scene.buckets + "/b/outside.txt", to: scene.victim)

        for name in ["planted.txt", "outside.txt"] {
            let bytes = Data("new \(name)\n".utf8)
            _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/\(name)", data: bytes)))
            #expect(scene.isRegularFile(scene.buckets + "/b/\(name)"))
            #expect(try scene.contents(scene.buckets + "/b/\(name)") == bytes)
        }
        #expect(try scene.contents(scene.buckets + "/b/other.txt") == other)
        #expect(scene.holds(scene.victim, precious))

        // Reading an object through a link is refused too.
        try scene.link(scene.buckets + "/b/alias.txt", to: scene.buckets + "/b/other.txt")
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "file://b/alias.txt")))
        #expect(error.code == .pathError && error.message.contains("symbolic link"), "\(error)")
    }

    @Test("a link planted at a sidecar's path is never read through and is replaced by the next upload")
    func linkAtTheSidecarPath() async throws {
        let scene = try Scene("safe-sidecar")
        defer { scene.directory.remove() }
        let backend = scene.local()
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/s.txt", data: Data("s".utf8))))
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/t.txt", data: Data("t".utf8))))
        let sidecar = scene.buckets + "/b/.s.txt.jobctl-meta.json"
        let otherSidecar = scene.buckets + "/b/.t.txt.jobctl-meta.json"
        let otherMetadata = try scene.contents(otherSidecar)
        try FileManager.default.removeItem(atPath: sidecar)
        try scene.link(sidecar, to: otherSidecar)

        for kind in [JobKind.downloadMemory, .fetchURL] {
            let error = try failure(await run(backend, JobSpec(kind: kind, source: "file://b/s.txt")))
            #expect(error.code == .pathError, "\(kind): \(error)")
            #expect(error.message.contains("a symbolic link was found at '\(sidecar)'"), "\(error)")
        }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/s.txt", data: Data("s2".utf8))))
        #expect(scene.isRegularFile(sidecar))
        #expect(try scene.contents(otherSidecar) == otherMetadata)
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "file://b/s.txt")))
        #expect(memory.data == Data("s2".utf8))
    }

    @Test("a link planted at a paused file:// upload's session path is never written to on resume")
    func linkAtTheUploadSessionPath() async throws {
        let scene = try Scene("safe-session")
        defer { scene.directory.remove() }
        let payload = patternData(3 * 1024 * 1024 + 3, seed: 9)
        let source = scene.directory.file("src.bin")
        try payload.write(to: URL(fileURLWithPath: source))
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "file://b/up.bin")
        // The victim is longer than the confirmed offset, so a resume through the link would truncate it.
        let victimBytes = Data(repeating: 0x33, count: 2 * 1024 * 1024)
        try victimBytes.write(to: URL(fileURLWithPath: scene.victim))

        for jobID in [JobID.generate(), nil] {
            let control = TransferControl(jobID: jobID)
            let point = try pausedPoint(await run(scene.local(checkpoint: 1024 * 1024), spec, control: control,
                                                  recorder: pauseAtFirstCheckpoint(control)))
            guard case .upload(let uri, let offset, _, _) = point else { Issue.record("\(point)"); return }
            #expect(offset == 1024 * 1024)
            let path = String(uri.split(separator: ":", maxSplits: 3)[3])
            #expect(uri.hasPrefix("file-session:") && FileManager.default.fileExists(atPath: path), "\(uri)")
            if let jobID { #expect(path == scene.buckets + "/b/.up.bin.\(jobID).jobctl-upload") }
            try FileManager.default.removeItem(atPath: path)
            try scene.link(path, to: scene.victim)

            let resumed = await run(scene.local(checkpoint: 1024 * 1024), spec, resume: point, control: TransferControl(jobID: jobID))
            if jobID != nil {
                // The job's own session name holds the link: refused, typed.
                let error = try failure(resumed)
                #expect(error.code == .pathError && error.message.contains("symbolic link"), "\(error)")
            } else {
                // A session of its own under a new name: the upload completes from 0.
                _ = try finished(resumed)
                #expect(scene.holds(scene.buckets + "/b/up.bin", payload))
            }
            #expect(scene.holds(scene.victim, victimBytes))
            try FileManager.default.removeItem(atPath: path)
        }
    }

    @Test("a symbolic link to a folder inside a file:// bucket is refused for uploads, downloads and fetch-url")
    func linkedFolderInsideABucketIsRefused() async throws {
        let scene = try Scene("safe-folder")
        defer { scene.directory.remove() }
        let backend = scene.local()
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/real/sub/x.txt", data: Data("x".utf8))))
        try scene.link(scene.buckets + "/b/real/linked", to: scene.buckets + "/b/real/sub")
        try scene.link(scene.buckets + "/b/escape", to: scene.directory.file("victim"))
        let destination = scene.directory.file("out/x.txt")
        let specs = [
            JobSpec(kind: .uploadData, destination: "file://b/real/linked/y.txt", data: Data("y".utf8)),
            JobSpec(kind: .uploadData, destination: "file://b/escape/deeper/y.txt", data: Data("y".utf8)),
            JobSpec(kind: .downloadMemory, source: "file://b/real/linked/x.txt"),
            JobSpec(kind: .downloadFile, source: "file://b/real/linked/x.txt", destination: destination),
            JobSpec(kind: .fetchURL, source: "file://b/escape/secret.txt"),
        ]
        for spec in specs {
            let error = try failure(await run(backend, spec))
            #expect(error.code == .pathError, "\(spec): \(error)")
            #expect(error.message.contains("symbolic link was found at '\(scene.buckets)/b/"), "\(error)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: scene.buckets + "/b/real/sub").sorted()
                    == [".x.txt.jobctl-meta.json", "x.txt"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: scene.directory.file("victim")) == ["secret.txt"])
        #expect(!FileManager.default.fileExists(atPath: destination))
    }
}
