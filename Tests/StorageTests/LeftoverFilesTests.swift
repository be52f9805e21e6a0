import Foundation
#if canImport(Glibc)
import Glibc
#endif
import JobModel
import Storage
import TestSupport
import Testing

/// Which hidden files count as a final job's leftovers: only those the log ties to the job.
@Suite("Leftover files of final jobs", .onTestThreads)
struct LeftoverFilesTests {
    private func create(_ path: String, _ text: String = "partial") throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    private func identity(_ path: String) -> FileIdentity? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    private var now: Int64 { Clock.nowMs() + 1_000 }

    @Test("a download's partial named with its job id is found; files merely named like ours are not")
    func partialDownloads() throws {
        let directory = try TemporaryDirectory("leftovers")
        defer { directory.remove() }
        let destination = directory.file("out/report.pdf")
        let job = JobID.generate()
        let ours = PartialFile.tempPath(for: destination, jobID: job)
        let someoneElses = PartialFile.tempPath(for: destination, jobID: JobID.generate())
        let legacy = PartialFile.tempPath(for: destination)
        let otherName = PartialFile.tempPath(for: directory.file("out/other.pdf"), jobID: job)
        for path in [ours, someoneElses, legacy, otherName] { try create(path) }
        let finder = LeftoverFiles(localBucketsDirectory: nil)
        let files = JobLocalFiles(jobID: job, kind: .downloadFile, destination: destination, resumePoint: nil, finishedAtMs: now)

        let found = finder.find(files)
        #expect(found.map(\.path) == [ours])
        #expect(found.first?.kind == .partialDownload && found.first?.size == 7 && found.first?.jobID == job)

        // Never a path an unfinished job names, nor a file changed after the job finished (a retry's).
        #expect(finder.find(files, sparing: [ours]).isEmpty)
        var earlier = files
        earlier.finishedAtMs = Clock.nowMs() - 60_000
        #expect(finder.find(earlier).isEmpty)
        // Other kinds of job leave no files.
        #expect(finder.find(JobLocalFiles(jobID: job, kind: .downloadMemory, destination: nil, resumePoint: nil, finishedAtMs: now)).isEmpty)

        // The old shared name counts only when the log recorded that very file.
        let legacyIdentity = try #require(identity(legacy))
        var recorded = files
        recorded.resumePoint = .download(bytesWritten: 3, generation: nil, etag: nil, tempPath: legacy, file: legacyIdentity)
        #expect(Set(finder.find(recorded).map(\.path)) == [ours, legacy])
        recorded.resumePoint = .download(bytesWritten: 3, generation: nil, etag: nil, tempPath: legacy, file: nil)
        #expect(finder.find(recorded).map(\.path) == [ours])
        recorded.resumePoint = .download(bytesWritten: 3, generation: nil, etag: nil, tempPath: legacy,
                                         file: FileIdentity(device: legacyIdentity.device, inode: legacyIdentity.inode &+ 1))
        #expect(finder.find(recorded).map(\.path) == [ours])

        // Removal happens only while the file is still the one found.
        let leftover = try #require(found.first)
        try create(ours + ".new", "someone else's")   // made first, so it cannot reuse the freed inode number
        #expect(rename(ours + ".new", ours) == 0)
        #expect(!LeftoverFiles.remove(leftover))
        #expect(FileManager.default.fileExists(atPath: ours))
        let again = try #require(finder.find(files).first)
        #expect(LeftoverFiles.remove(again))
        #expect(!FileManager.default.fileExists(atPath: ours))
        for path in [someoneElses, legacy, otherName] { #expect(FileManager.default.fileExists(atPath: path)) }
    }

    @Test("the look before opening the folder finds what the folder holds: a folder reached through a link, the recorded old name alone, nothing")
    func quickLookBeforeOpening() throws {
        let directory = try TemporaryDirectory("leftovers")
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.file("real"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: directory.file("via"), withDestinationPath: directory.file("real"))
        let finder = LeftoverFiles(localBucketsDirectory: nil)
        let job = JobID.generate()

        // The destination's folder is a link: followed, as the download followed it.
        let linked = directory.file("via/a.bin")
        let ours = PartialFile.tempPath(for: linked, jobID: job)
        try create(ours)
        let files = JobLocalFiles(jobID: job, kind: .downloadFile, destination: linked, resumePoint: nil, finishedAtMs: now)
        #expect(finder.find(files).map(\.path) == [ours])

        // Only the old shared name is there, and the log recorded that very file: found, though ours is absent.
        let destination = directory.file("real/b.bin")
        let legacy = PartialFile.tempPath(for: destination)
        try create(legacy)
        let legacyIdentity = try #require(identity(legacy))
        let recorded = JobLocalFiles(jobID: job, kind: .downloadFile, destination: destination,
                                     resumePoint: .download(bytesWritten: 3, generation: nil, etag: nil, tempPath: legacy, file: legacyIdentity),
                                     finishedAtMs: now)
        #expect(finder.find(recorded).map(\.path) == [legacy])

        // Nothing left, or no folder at all: nothing found.
        let clean = JobLocalFiles(jobID: job, kind: .downloadFile, destination: directory.file("real/c.bin"), resumePoint: nil, finishedAtMs: now)
        #expect(finder.find(clean).isEmpty)
        let noFolder = JobLocalFiles(jobID: job, kind: .downloadFile, destination: directory.file("gone/d.bin"), resumePoint: nil, finishedAtMs: now)
        #expect(finder.find(noFolder).isEmpty)
        // A link at our own name is still never a leftover (the look does not follow it either).
        let target = directory.file("real/target.bin")
        try create(target)
        let linkedName = PartialFile.tempPath(for: directory.file("real/e.bin"), jobID: job)
        try FileManager.default.createSymbolicLink(atPath: linkedName, withDestinationPath: target)
        #expect(finder.find(JobLocalFiles(jobID: job, kind: .downloadFile, destination: directory.file("real/e.bin"), resumePoint: nil,
                                          finishedAtMs: now)).isEmpty)
    }

    @Test("links and hard-linked files at the job's own name are never leftovers")
    func linksAreNotLeftovers() throws {
        let directory = try TemporaryDirectory("leftovers-links")
        defer { directory.remove() }
        let destination = directory.file("out/a.bin")
        let job = JobID.generate()
        let ours = PartialFile.tempPath(for: destination, jobID: job)
        try create(directory.file("victim.txt"), "victim")
        try FileManager.default.createDirectory(atPath: directory.file("out"), withIntermediateDirectories: true)
        let finder = LeftoverFiles(localBucketsDirectory: nil)
        let files = JobLocalFiles(jobID: job, kind: .downloadFile, destination: destination, resumePoint: nil, finishedAtMs: now)

        try FileManager.default.createSymbolicLink(atPath: ours, withDestinationPath: directory.file("victim.txt"))
        #expect(finder.find(files).isEmpty)
        try FileManager.default.removeItem(atPath: ours)
        try FileManager.default.linkItem(atPath: directory.file("victim.txt"), toPath: ours)
        #expect(finder.find(files).isEmpty)
        #expect(try String(contentsOfFile: directory.file("victim.txt"), encoding: .utf8) == "victim")
    }

    @Test("a file:// upload's session is found in named buckets and file:/// folders, by job id or recorded identity")
    func uploadSessions() throws {
        let directory = try TemporaryDirectory("leftovers-sessions")
        defer { directory.remove() }
        let buckets = directory.file("buckets")
        let job = JobID.generate()
        let named = "\(buckets)/docs/dir/.u.txt.\(job).jobctl-upload"
        let absolute = directory.file("abs/.v.txt.\(job).jobctl-upload")
        let randomSession = "\(buckets)/docs/dir/.u.txt.0123456789ab.jobctl-upload"
        for path in [named, absolute, randomSession] { try create(path) }
        let finder = LeftoverFiles(localBucketsDirectory: buckets)

        var files = JobLocalFiles(jobID: job, kind: .uploadData, destination: "file://docs/dir/u.txt", resumePoint: nil, finishedAtMs: now)
        #expect(finder.find(files).map(\.path) == [named])
        #expect(finder.find(files).first?.kind == .uploadSession)
        // Without knowing where named buckets live, they are not looked in.
        #expect(LeftoverFiles(localBucketsDirectory: nil).find(files).isEmpty)
        // A session from before job ids were in the name counts when its identity was recorded.
        let sessionIdentity = try #require(identity(randomSession))
        files.resumePoint = .upload(sessionURI: "file-session:\(sessionIdentity):\(randomSession)", confirmedOffset: 1, total: 9)
        #expect(Set(finder.find(files).map(\.path)) == [named, randomSession])
        files.resumePoint = .upload(sessionURI: "file-session:\(randomSession)", confirmedOffset: 1, total: 9)
        #expect(finder.find(files).map(\.path) == [named])
        #expect(LeftoverFiles.pathsInUse([files.resumePoint!]) == [randomSession])

        let plain = JobLocalFiles(jobID: job, kind: .uploadFile, destination: "file://\(directory.file("abs"))/v.txt",
                                  resumePoint: nil, finishedAtMs: now)
        #expect(finder.find(plain).map(\.path) == [absolute])
        // A GCS upload leaves nothing on local disk.
        #expect(finder.find(JobLocalFiles(jobID: job, kind: .uploadData, destination: "gs://b/u.txt", resumePoint: nil,
                                          finishedAtMs: now)).isEmpty)

        // The look before opening the folder: only the recorded session left, it is still found; then
        // nothing is left, and nothing is found.
        try FileManager.default.removeItem(atPath: named)
        files.resumePoint = .upload(sessionURI: "file-session:\(sessionIdentity):\(randomSession)", confirmedOffset: 1, total: 9)
        #expect(finder.find(files).map(\.path) == [randomSession])
        try FileManager.default.removeItem(atPath: randomSession)
        #expect(finder.find(files).isEmpty)
    }
    /// A sidecar temporary (`.NAME.jobctl-meta.json.<job id>.<lease token>.jobctl-meta.tmp`) is the job's
    /// only for a token of one of its claims, beside its object (fetch-url: its source), as a regular file
    /// with one link not modified after the job finished, and never through a link inside a named bucket.
    @Test("sidecar temporaries: only the job's tokens beside its object, never through a link in a named bucket")
    func sidecarTemporaries() throws {
        let directory = try TemporaryDirectory("leftovers-sidecars")
        defer { directory.remove() }
        let buckets = directory.file("buckets")
        let job = JobID.generate()
        func temporary(_ folder: String, _ object: String, _ token: String) -> String {
            "\(folder)/.\(object).jobctl-meta.json.\(token).jobctl-meta.tmp"
        }
        let docs = "\(buckets)/docs/dir"
        let ours = [temporary(docs, "u.txt", "\(job).3"), temporary(docs, "u.txt", "\(job).7")]
        let notOurs = [
            temporary(docs, "u.txt", "\(job).5"),                    // a token the job never held
            temporary(docs, "u.txt", job),                          // no token
            temporary(docs, "u.txt", "\(JobID.generate()).3"),      // another job's, with one of our tokens
            temporary(docs, "v.txt", "\(job).3"),                    // beside another object
        ]
        for path in ours + notOurs { try create(path, "{}") }
        // Through a link inside the named bucket (`docs/linked` → a folder outside it): never looked in.
        let outside = directory.file("outside")
        try create(temporary(outside, "w.txt", "\(job).3"), "{}")
        try FileManager.default.createSymbolicLink(atPath: "\(buckets)/docs/linked", withDestinationPath: outside)
        // A link and a file with a second name at our names: not ours to remove.
        let elsewhere = directory.file("elsewhere.json")
        try create(elsewhere, "{}")
        try FileManager.default.createSymbolicLink(atPath: temporary(docs, "x.txt", "\(job).3"), withDestinationPath: elsewhere)
        try FileManager.default.linkItem(atPath: elsewhere, toPath: temporary(docs, "y.txt", "\(job).3"))
        let finder = LeftoverFiles(localBucketsDirectory: buckets)
        func found(_ kind: JobKind, _ reference: String, finishedAtMs: Int64? = nil) -> [String] {
            let files = JobLocalFiles(jobID: job, kind: kind, destination: reference, resumePoint: nil,
                                      finishedAtMs: finishedAtMs ?? now, leaseTokens: [3, 7])
            return finder.find(files).filter { $0.kind == .sidecarTemporary }.map(\.path).sorted()
        }
        for kind in [JobKind.uploadData, .uploadFile, .updateMetadata, .fetchURL] {
            #expect(found(kind, "file://docs/dir/u.txt") == ours.sorted(), "\(kind)")
            #expect(found(kind, "file://docs/linked/w.txt").isEmpty, "\(kind)")
            #expect(found(kind, "file://docs/dir/x.txt").isEmpty, "\(kind)")
            #expect(found(kind, "file://docs/dir/y.txt").isEmpty, "\(kind)")
            // Modified after the job finished: a later attempt's (the job retried since).
            #expect(found(kind, "file://docs/dir/u.txt", finishedAtMs: Clock.nowMs() - 60_000).isEmpty, "\(kind)")
            #expect(found(kind, "gs://docs/dir/u.txt").isEmpty, "\(kind)")
        }
        // No claim known: nothing is the job's.
        #expect(finder.find(JobLocalFiles(jobID: job, kind: .updateMetadata, destination: "file://docs/dir/u.txt",
                                          resumePoint: nil, finishedAtMs: now)).isEmpty)
        // The default bucket (an absolute path): its folder as the path names it.
        let absolute = directory.file("abs")
        try create(temporary(absolute, "a.txt", "\(job).7"), "{}")
        #expect(found(.fetchURL, "file://\(absolute)/a.txt") == [temporary(absolute, "a.txt", "\(job).7")])
    }
}
