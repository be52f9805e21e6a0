import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

@Suite(.onTestThreads) struct PartialFileTests {
    private func write(_ partial: PartialFile, _ text: String) throws {
        try partial.write(Data(text.utf8))
    }

    /// A temporary name that no longer holds this file at commit (a worker that lost the job's lease
    /// renamed or replaced it) renames nothing into place and is a retryable error: the next attempt
    /// starts over on a file of its own.
    @Test func aTemporaryFileReplacedBeforeCommitIsARetryableErrorAndNothingIsRenamed() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("out.bin")
        let partial = try PartialFile(destination: destination, jobID: "01JOB", resumeFrom: nil)
        try write(partial, "ours")
        try FileManager.default.removeItem(atPath: partial.tempPath)
        try Data("theirs".utf8).write(to: URL(fileURLWithPath: partial.tempPath))
        do {
            _ = try partial.commit()
            Issue.record("commit renamed a file that is not ours")
        } catch {
            #expect(error.code == .pathError && error.retryable, "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: destination))
        #expect(try String(contentsOfFile: partial.tempPath, encoding: .utf8) == "theirs", "their file is left alone")
    }

    /// A job a log holds from before `submit` refused such destinations (or a prefix's folder made from an
    /// object name): the worker refuses to write a name jobctl keeps for its own files, and nothing is made.
    @Test(arguments: [(".a.txt.jobctl-meta.json", nil), ("x.jobctl-upload/a.txt", "x.jobctl-upload/a.txt")] as [(String, String?)])
    func aDestinationNamedLikeJobctlsOwnFilesIsRefused(_ relative: String, within: String?) throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        do {
            _ = try PartialFile(destination: directory.file(relative), jobID: "01JOB", resumeFrom: nil, within: within)
            Issue.record("a reserved name was opened for writing")
        } catch {
            #expect(error.code == .invalidArgument && error.message.contains("is reserved for jobctl's temporary and metadata files"), "\(error)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    @Test func commitRenamesTheTemporaryFileOverTheDestination() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("a/b/out.txt")
        try FileManager.default.createDirectory(atPath: directory.file("a/b"), withIntermediateDirectories: true)
        try Data("old".utf8).write(to: URL(fileURLWithPath: destination))

        let partial = try PartialFile(destination: destination, jobID: nil, resumeFrom: nil)
        #expect(partial.tempPath == directory.file("a/b/.out.txt.jobctl-partial"))
        try write(partial, "new ")
        try write(partial, "bytes")
        #expect(partial.bytesWritten == 9)
        // Until commit the destination keeps its previous content.
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "old")
        #expect(try partial.commit() == destination)
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "new bytes")
        #expect(!FileManager.default.fileExists(atPath: partial.tempPath))
    }

    @Test func resumeTruncatesToTheRecordedLengthAndReadsThePrefixBack() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("missing/parent/f.bin")
        // The first attempt ends (its file closed) before the second continues its file: one whose
        // writer still has it open is not continued (`aPartialFileItsWriterStillHoldsIsNotResumed`).
        let tempPath: String
        do {
            let first = try PartialFile(destination: destination, jobID: nil, resumeFrom: nil)
            try write(first, "0123456789")
            try first.sync()
            tempPath = first.tempPath
        }

        // Bytes beyond the recorded point (written after the last checkpoint) are dropped.
        let point = ResumePoint.download(bytesWritten: 6, generation: "1", etag: nil, tempPath: tempPath)
        let second = try PartialFile(destination: destination, jobID: nil, resumeFrom: point)
        #expect(second.bytesWritten == 6 && second.resumed)
        var prefix = Data()
        try second.readBack { prefix.append(contentsOf: $0) }
        #expect(String(decoding: prefix, as: UTF8.self) == "012345")
        try write(second, "AB")
        _ = try second.commit()
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "012345AB")
    }

    @Test(arguments: [
        ResumePoint.download(bytesWritten: 100, generation: nil, etag: nil, tempPath: nil),
        ResumePoint.download(bytesWritten: 3, generation: nil, etag: nil, tempPath: "/elsewhere/.f.jobctl-partial"),
        ResumePoint.upload(sessionURI: "x", confirmedOffset: 3, total: nil),
    ])
    func unusableResumePointsStartAtZero(point: ResumePoint) throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("f")
        let first = try PartialFile(destination: destination, jobID: nil, resumeFrom: nil)
        try write(first, "hello")
        try first.sync()
        let second = try PartialFile(destination: destination, jobID: nil, resumeFrom: point)
        #expect(second.bytesWritten == 0 && !second.resumed)
        #expect(try FileManager.default.attributesOfItem(atPath: second.tempPath)[.size] as? Int == 0)
    }

    /// A partial file whose writer still has it open (an attempt frozen past its lease) is not resumed:
    /// its writer may still write or cut it back. The later attempt starts a new file at the name; the
    /// writer's late bytes go to its own file, and its commit renames nothing. (The holder here is in this
    /// process, so it is waited for `LocalFile.writerLockWaitHere` first.) Once the writer's descriptor is
    /// closed (as a killed worker's are), the next attempt resumes it.
    @Test func aPartialFileItsWriterStillHoldsIsNotResumed() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("out.bin")
        let holder = try PartialFile(destination: destination, jobID: "01JOB", resumeFrom: nil)
        try write(holder, "0123456789")
        try holder.sync()
        let retry = try PartialFile(destination: destination, jobID: "01JOB", resumeFrom: holder.resumePoint(generation: "1", etag: nil))
        #expect(!retry.resumed && retry.bytesWritten == 0)
        #expect(retry.identity != holder.identity)
        try write(holder, "late")
        try write(retry, "ours")
        #expect(try String(contentsOfFile: retry.tempPath, encoding: .utf8) == "ours")
        do {
            _ = try holder.commit()
            Issue.record("the frozen writer's commit renamed a file into place")
        } catch {
            #expect(error.code == .pathError && error.retryable, "\(error)")
        }
        #expect(try retry.commit() == destination)
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "ours")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["out.bin"])

        // Its writer gone (its descriptor closed), the next attempt continues the file.
        var gone: PartialFile? = try PartialFile(destination: destination, jobID: "01JOB", resumeFrom: nil)
        try write(gone!, "0123456789")
        try gone!.sync()
        let point = gone!.resumePoint(generation: "1", etag: nil)
        let written = gone!.identity
        gone = nil
        let next = try PartialFile(destination: destination, jobID: "01JOB", resumeFrom: point)
        #expect(next.resumed && next.bytesWritten == 10 && next.identity == written)
    }

    /// A retry that finds the job's file held by another attempt (frozen past its lease) removes that
    /// file's name and writes under a name of its own, its lease token in it. The frozen attempt, woken
    /// between its commit's check that its name still leads to its file and its rename, renames the job's
    /// name: nothing is there, so the retry's unfinished file never reaches the destination. The retry's
    /// resume point records its own name; a later attempt continues that file and renames it into place.
    /// (The holder here is in this process, so it is waited for `LocalFile.writerLockWaitHere` first.)
    @Test func aRetryThatFindsTheFileHeldWritesUnderItsOwnNameAndALaterAttemptContinuesIt() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("out.bin")
        let shared = PartialFile.tempPath(for: destination, jobID: "01JOB")
        let frozen = try PartialFile(destination: destination, jobID: "01JOB", leaseToken: 1, resumeFrom: nil)
        #expect(frozen.tempPath == shared)
        try write(frozen, "0123456789")
        try frozen.sync()
        let own = directory.file(".out.bin.01JOB.2.jobctl-partial")
        var retry: PartialFile? = try PartialFile(destination: destination, jobID: "01JOB", leaseToken: 2,
                                                  resumeFrom: frozen.resumePoint(generation: "1", etag: nil))
        #expect(!retry!.resumed && retry!.bytesWritten == 0)
        #expect(retry!.tempPath == own)
        try write(retry!, "abc")
        try retry!.sync()
        // The frozen attempt, past its commit's check, wakes and renames the job's name.
        let renamed = rename(shared, destination)
        #expect(renamed == -1 && errno == ENOENT, "the frozen attempt's rename found a file at \(shared)")
        let landed = try? String(contentsOfFile: destination, encoding: .utf8)
        #expect(landed == nil, "the destination holds the retry's unfinished file: \(landed ?? "")")
        do {
            _ = try frozen.commit()
            Issue.record("the frozen attempt's commit renamed a file into place")
        } catch {
            #expect(error.code == .pathError && error.retryable, "\(error)")
        }

        // The retry stops (paused); its resume point names its own file, which the next attempt continues.
        let point = retry!.resumePoint(generation: "1", etag: nil)
        guard case .download(3, _, _, let recorded?, let file?, _, _) = point else {
            Issue.record("resume point \(point)")
            return
        }
        #expect(recorded == own && file == retry!.identity)
        retry!.close()
        retry = nil
        let next = try PartialFile(destination: destination, jobID: "01JOB", leaseToken: 3, resumeFrom: point)
        #expect(next.resumed && next.bytesWritten == 3 && next.tempPath == own)
        try write(next, "def")
        #expect(try next.commit() == destination)
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "abcdef")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["out.bin"])
    }

    /// An attempt without a resume point that finds the job's file held also writes under its own name
    /// (a frozen attempt that never checkpointed may be in its commit); one whose resume point names an
    /// attempt's own file it does not continue (the object changed) removes that file and writes under
    /// its own name again (and removes what an earlier attempt left at the job's name). A resume point
    /// without a recorded name (an older log's) means the job's name.
    @Test func attemptsOwnNamesWithoutAResumePointAndForAStaleOneAndOlderResumePoints() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("out.bin")
        let shared = PartialFile.tempPath(for: destination, jobID: "01JOB")
        let held = try PartialFile(destination: destination, jobID: "01JOB", leaseToken: 1, resumeFrom: nil)
        try write(held, "held")
        let retry = try PartialFile(destination: destination, jobID: "01JOB", leaseToken: 2, resumeFrom: nil)
        #expect(retry.tempPath == directory.file(".out.bin.01JOB.2.jobctl-partial"))
        #expect(!FileManager.default.fileExists(atPath: shared), "the held file keeps its name")
        try write(retry, "x")
        try retry.sync()
        let point = retry.resumePoint(generation: "1", etag: nil)
        retry.close()
        held.discard()
        try Data("left".utf8).write(to: URL(fileURLWithPath: shared))   // an earlier attempt's, continued by no one

        let changed = try PartialFile(destination: destination, jobID: "01JOB", leaseToken: 3, resumeFrom: nil, recorded: point)
        #expect(changed.tempPath == directory.file(".out.bin.01JOB.3.jobctl-partial"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [".out.bin.01JOB.3.jobctl-partial"])
        changed.discard()

        do {
            let first = try PartialFile(destination: destination, jobID: "01JOB", leaseToken: 4, resumeFrom: nil)
            #expect(first.tempPath == shared)
            try write(first, "0123")
            try first.sync()
            first.close()
        }
        let older = ResumePoint.download(bytesWritten: 4, generation: "1", etag: nil, tempPath: nil)
        let next = try PartialFile(destination: destination, jobID: "01JOB", leaseToken: 5, resumeFrom: older)
        #expect(next.resumed && next.bytesWritten == 4 && next.tempPath == shared)
        next.discard()
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    /// An attempt that ended lets its file's writer lock go as it closes the file, even while another
    /// process holds a copy of the file's descriptor: a child that any thread of this process starts
    /// (a token command; in the tests, nginx and the fault proxy) holds a copy of every descriptor from
    /// its fork until its exec, and a close lets the lock go only with the last copy. The child here keeps
    /// its copy (as fd 3 of a `sleep`), as one slow to reach its exec does under load; the next attempt in
    /// this process must still continue the file, not start over.
    @Test func aStoppedAttemptsFileIsResumedThoughAChildHoldsACopyOfItsDescriptor() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let destination = directory.file("out.bin")
        var first: PartialFile? = try PartialFile(destination: destination, jobID: "01JOB", resumeFrom: nil)
        try write(first!, "0123456789")
        try first!.sync()
        let point = first!.resumePoint(generation: "1", etag: nil)
        let written = first!.identity
        let copy = try first!.duplicateDescriptor()
        let child = try Self.spawnHolding(copy, ["/bin/sleep", "60"])
        close(copy)
        defer {
            kill(child, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(child, &status, 0)
        }
        let heldByChild = try String(contentsOfFile: "/proc/\(child)/fdinfo/3", encoding: .utf8)
        #expect(heldByChild.contains("OFDLCK"), "the child's copy shares the attempt's locked description: \(heldByChild)")

        first!.close()   // the attempt ended (paused)
        first = nil
        let next = try PartialFile(destination: destination, jobID: "01JOB", resumeFrom: point)
        #expect(next.resumed && next.bytesWritten == 10 && next.identity == written)
        var prefix = Data()
        try next.readBack { prefix.append(contentsOf: $0) }
        #expect(String(decoding: prefix, as: UTF8.self) == "0123456789")
        try write(next, "AB")
        #expect(try next.commit() == destination)
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "0123456789AB")
    }

    /// Starts `arguments` with `descriptor` as its fd 3 (and /dev/null for 0 to 2); returns its pid.
    private static func spawnHolding(_ descriptor: Int32, _ arguments: [String]) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, descriptor, 3)
        let cStrings = arguments.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        var argv = cStrings + [nil]
        var pid: pid_t = 0
        let error = posix_spawn(&pid, arguments[0], &actions, nil, &argv, environ)
        guard error == 0 else { throw StorageError(.internalError, "posix_spawn failed: errno \(error)") }
        return pid
    }

    @Test func discardRemovesTheTemporaryFile() throws {
        let directory = try TemporaryDirectory("jobctl-partial")
        defer { directory.remove() }
        let partial = try PartialFile(destination: directory.file("g"), jobID: nil, resumeFrom: nil)
        try write(partial, "x")
        partial.discard()
        partial.discard()
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }
}
