@testable import EventStore
import Foundation
import JobLifecycle
import JobModel
@testable import Storage
import Testing
import TestSupport

/// A worker frozen past its lease while it writes a file a later attempt of its job continues (a
/// `file://` upload's session, a download's partial file), woken after that attempt took the file over,
/// writes on through its open descriptor. The scene: the job's first attempt is SIGKILLed at its commit
/// (its file whole, its checkpoint in the log); the second takes the file over and is frozen 20 s (strace
/// holds one of its system calls) before it cuts the file back to the checkpoint; the third runs to the
/// end meanwhile. Then the second wakes and cuts; strace holds it before it writes more, unless it stops
/// first (it heard its lease is gone).
@Suite("a frozen attempt's file is not taken over", .onTestThreads, .serialized) struct FrozenWriterTests {
    /// `ftruncate`'s and `pread64`'s system call numbers, as `/proc/PID/task/TID/syscall` shows them; and
    /// those of the renames and reads (`read`, `pread64`).
    #if arch(arm64)
    static let ftruncateNumber = 46
    static let preadNumber = 67
    static let renameNumbers: Set<String> = ["38", "276"]
    static let readNumbers: Set<String> = ["63", "67"]
    #else
    static let ftruncateNumber = 77
    static let preadNumber = 17
    static let renameNumbers: Set<String> = ["82", "264", "316"]
    static let readNumbers: Set<String> = ["0", "17"]
    #endif

    /// How long strace holds the second attempt before it cuts the file.
    static let freeze: TimeInterval = 20

    /// The checkpoint every attempt resumes from: `file://` transfers checkpoint every 64 MiB.
    static let checkpoint: Int64 = 64 << 20

    private static func entries(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    private static func identity(_ path: String) -> FileIdentity? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Whether a thread of the jobctl `worker`'s strace started is held in `ftruncate(_, length)`.
    private static func heldCutting(_ worker: JobctlProcess, to length: Int64) -> Bool {
        let pid = worker.process.processIdentifier
        guard worker.process.isRunning,
              let children = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else { return false }
        for tracee in children.split(separator: " ").compactMap({ Int32($0) }).filter(runsJobctl(pid:)) {
            for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(tracee)/task")) ?? [] {
                let fields = ((try? String(contentsOfFile: "/proc/\(tracee)/task/\(task)/syscall", encoding: .utf8)) ?? "")
                    .split(separator: " ")
                if fields.count > 2, fields[0] == Substring(String(ftruncateNumber)),
                   fields[2] == Substring("0x" + String(length, radix: 16)) { return true }
            }
        }
        return false
    }

    /// Whether a thread of the jobctl `worker`'s strace started is in one of the system calls `numbers`.
    private static func held(_ worker: JobctlProcess, in numbers: Set<String>) -> Bool {
        let pid = worker.process.processIdentifier
        guard worker.process.isRunning,
              let children = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else { return false }
        for tracee in children.split(separator: " ").compactMap({ Int32($0) }).filter(runsJobctl(pid:)) {
            for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(tracee)/task")) ?? [] {
                let fields = ((try? String(contentsOfFile: "/proc/\(tracee)/task/\(task)/syscall", encoding: .utf8)) ?? "")
                    .split(separator: " ")
                if let number = fields.first, numbers.contains(String(number)) { return true }
            }
        }
        return false
    }

    /// A worker run under strace with `options` (what it holds, and how long). One job at a time and none
    /// claimed ahead: held, it cannot rescue its own job again (the third attempt is another worker's).
    private static func traced(_ options: [String], database: String, environment: [String: String],
                               directory: TemporaryDirectory) throws -> JobctlProcess {
        try JobctlProcess(database: database, arguments: ["worker", "--lease", "1", "--concurrency", "1", "--claim-ahead", "0"],
                          environment: environment,
                          logDirectory: directory.path,
                          tracer: ["/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf"] + options)
    }

    /// Ends the running attempt's lease now (its worker stays away past it): the next worker rescues the job.
    private static func expireLease(_ database: String, job: String) throws {
        let store = try EventStore(path: database, mode: .readWrite)
        try store.withConnection { (connection) throws(StoreError) in
            try connection.run("UPDATE jobs SET lease_owner = 'worker:gone', lease_expires_at_ms = 0 WHERE id = ?", [.text(job)])
        }
    }

    /// Without the writer lock, the third attempt took the session over from the frozen second (found by
    /// its identity under the second's name), finished and renamed it onto the object; the woken second's
    /// cut then cut the object back to 64 MiB (of 67), beside a sidecar recording 67: "object of 67108864
    /// bytes, the source's 70254592". Now the second attempt holds the session's lock from before it renamed the
    /// session to its own name: the third leaves that file (removing its name) and uploads into a session
    /// of its own, and the cut lands in a file no name leads to. The second attempt adopted the first's
    /// session all the same: SIGKILLed, the first let its lock go.
    @Test("a retry does not take over an upload session a frozen attempt still holds: the object is the source's, whole")
    func frozenUploadSessionIsNotTakenOver() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"),
                     "strace is not installed (Debian package strace; make test-deps installs it)")
        let scene = try KilledSidecarWrite(.uploadFile, engine: .sqlite, label: "frozen-session",
                                           sourceSize: SidecarTemporaryTests.resumableSourceSize)
        defer { scene.directory.remove() }
        let recorded = try SidecarTemporaryTests.killAtCommitAfterCheckpoint(scene)

        // Held at its first read of the source (`-P`: no other file's), which compares the session it took
        // over with the source before the cut; then at its first copy from the source (after the cut).
        let source = scene.directory.file("source.bin")
        let second = try Self.traced(["-P", source, "-e", "trace=pread64,copy_file_range",
                                      "-e", "inject=pread64:delay_enter=\(Int(Self.freeze))s:when=1",
                                      "-e", "inject=copy_file_range:delay_enter=60s:when=1"],
                                     database: scene.database, environment: scene.environment, directory: scene.directory)
        defer {
            _ = second.killTracee(SIGKILL)
            second.signal(SIGKILL)
            _ = second.wait(seconds: 10)
        }
        var secondName = ""
        let frozen = eventually(seconds: 60) {
            guard let job = try? scene.engine.reader(scene.database).job(scene.id), job.state == .running, job.attempts == 2,
                  let token = job.leaseToken else { return false }
            secondName = ".obj.bin.\(scene.id).\(token).jobctl-upload"
            return second.traceeIsIn(syscall: Self.preadNumber)
        }
        let heldAt = Date()
        try #require(frozen, "the second attempt never reached its cut: \(Self.entries(scene.bucket)) \(second.log)")
        // It took the first attempt's session over (its lock went with the SIGKILLed worker): renamed to its own name.
        #expect(Self.identity(scene.bucket + "/" + secondName) == recorded.identity, "\(Self.entries(scene.bucket))")
        try Self.expireLease(scene.database, job: scene.id)

        let third = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "30"], environment: scene.environment,
                                             logDirectory: scene.directory.path)
        #expect(third.wait(seconds: 60) == 0, "\(third.log)")
        let job = try scene.engine.reader(scene.database).job(scene.id)
        #expect(job?.state == .succeeded, "\(job?.error?.message ?? "") \(third.log)")
        #expect(job?.attempts == 3)
        try #require(Date().timeIntervalSince(heldAt) < Self.freeze - 2,
                     "the third attempt ended after the second woke; nothing to test")
        // Woken, the second attempt compares its prefix and cuts the file; then it stops (it heard its
        // lease is gone) or is held at its next copy.
        Thread.sleep(until: heldAt.addingTimeInterval(Self.freeze + 3))
        try #require(second.process.isRunning, "the second attempt's worker exited: \(second.log)")
        #expect(Self.identity(scene.bucket + "/obj.bin") != recorded.identity, "the object is the session the frozen attempt holds")
        _ = second.killTracee(SIGKILL)
        second.signal(SIGKILL)
        _ = second.wait(seconds: 10)
        try SidecarTemporaryTests.expectSourcesObject(scene, job: job)
    }

    /// The same scene for a download to a file (the partial file every attempt of the job names
    /// `.NAME.<job id>.jobctl-partial`). Without the writer lock the third attempt resumed the partial
    /// file the frozen second one had open and renamed it into place; the held cut then cut the
    /// destination back to 64 MiB: "destination of 67108864 bytes, the object's 70254592". Now the third
    /// attempt finds the file locked and starts a new one at the name (the frozen attempt's file then has
    /// none), and the destination is the object, whole.
    @Test("a retry does not resume a partial download a frozen attempt still holds: the destination is the object, whole")
    func frozenPartialDownloadIsNotResumed() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"),
                     "strace is not installed (Debian package strace; make test-deps installs it)")
        let scene = try FrozenDownload(label: "frozen-partial")
        defer { scene.directory.remove() }
        let recorded = try scene.killAtCommitAfterCheckpoint()
        #expect(Self.identity(scene.partial) == recorded)

        // Held at the cut of the partial file (`-P`: no other file's), before and after the kernel runs it.
        let second = try Self.traced(["-P", scene.partial, "-e", "trace=ftruncate",
                                      "-e", "inject=ftruncate:delay_enter=\(Int(Self.freeze))s:delay_exit=60s:when=1"],
                                     database: scene.database, environment: scene.environment, directory: scene.directory)
        defer {
            _ = second.killTracee(SIGKILL)
            second.signal(SIGKILL)
            _ = second.wait(seconds: 10)
        }
        let frozen = eventually(seconds: 60) {
            guard let job = try? EventStore(path: scene.database, readOnly: true).job(scene.id), job.state == .running,
                  job.attempts == 2 else { return false }
            return Self.heldCutting(second, to: Self.checkpoint)
        }
        let heldAt = Date()
        try #require(frozen, "the second attempt never reached its cut: \(Self.entries(scene.folder)) \(second.log)")
        // It resumed the first attempt's file (its lock went with the SIGKILLed worker).
        #expect(Self.identity(scene.partial) == recorded)
        try Self.expireLease(scene.database, job: scene.id)

        let third = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "30"], environment: scene.environment,
                                             logDirectory: scene.directory.path)
        #expect(third.wait(seconds: 60) == 0, "\(third.log)")
        let job = try EventStore(path: scene.database, readOnly: true).job(scene.id)
        #expect(job?.state == .succeeded, "\(job?.error?.message ?? "") \(third.log)")
        #expect(job?.attempts == 3)
        #expect(job?.result?.verified?.contains(.crc32c) == true, "verified: \(String(describing: job?.result?.verified))")
        try #require(Date().timeIntervalSince(heldAt) < Self.freeze - 2,
                     "the third attempt ended after the held cut went out; nothing to test")
        // The held cut goes out now; strace then holds the second attempt at the call's exit.
        Thread.sleep(until: heldAt.addingTimeInterval(Self.freeze + 3))
        try #require(second.process.isRunning, "the second attempt's worker exited: \(second.log)")
        let expected = try Data(contentsOf: URL(fileURLWithPath: scene.source))
        let stored = try? Data(contentsOf: URL(fileURLWithPath: scene.destination))
        #expect(stored == expected, "destination of \(stored?.count ?? -1) bytes, the object's \(expected.count)")
        #expect(Self.identity(scene.destination) != recorded, "the destination is the file the frozen attempt holds")
        #expect(Self.entries(scene.folder) == ["out.bin"], "left behind: \(Self.entries(scene.folder))")
    }

    /// A download's first attempt frozen in its commit, after its check that the job's partial name
    /// still leads to its file and before its rename (strace holds the rename 20 s), its lease lost; the
    /// rescuer finds the file's lock held and starts a file of its own, and is held after 2 MiB (its third
    /// read of the object). When every attempt's file had the job's one name, the woken first attempt
    /// renamed the rescuer's unfinished file onto the destination: "destination of 2097152 bytes, the
    /// object's 70254592". Now the rescuer's file has a name of its own (its lease token in it) and the
    /// first attempt's rename finds the job's name gone. The rescuer is then SIGKILLed before any
    /// checkpoint recorded its name; a third attempt downloads the object, and the sweep of the draining
    /// worker that ran it removes the killed rescuer's file (its name proven by the job's claims).
    @Test("a worker frozen between its commit's check and its rename, woken while a rescuer writes, never renames the rescuer's unfinished file")
    func frozenCommitDoesNotRenameTheRescuersFile() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"),
                     "strace is not installed (Debian package strace; make test-deps installs it)")
        let scene = try FrozenDownload(label: "frozen-commit")
        defer { scene.directory.remove() }
        let first = try Self.traced(["-e", "trace=rename,renameat,renameat2",
                                     "-e", "inject=rename,renameat,renameat2:delay_enter=\(Int(Self.freeze))s"],
                                    database: scene.database, environment: scene.environment, directory: scene.directory)
        defer {
            _ = first.killTracee(SIGKILL)
            first.signal(SIGKILL)
            _ = first.wait(seconds: 10)
        }
        // Held at its commit's rename: every byte written, its checkpoint in the log.
        let committing = eventually(seconds: 60) {
            guard case .download(let written, _, _, _, _, _, _)? = try? EventStore(path: scene.database, readOnly: true).job(scene.id)?.resumePoint,
                  written == Self.checkpoint else { return false }
            let size = (try? FileManager.default.attributesOfItem(atPath: scene.partial)[.size] as? Int64) ?? nil
            return size == SidecarTemporaryTests.resumableSourceSize && Self.held(first, in: Self.renameNumbers)
        }
        let heldAt = Date()
        try #require(committing, "the first attempt never reached its commit: \(Self.entries(scene.folder)) \(first.log)")
        let frozenFile = try #require(Self.identity(scene.partial))
        try Self.expireLease(scene.database, job: scene.id)

        let object = scene.directory.file("buckets/media/obj.bin")
        let rescuer = try Self.traced(["-P", object, "-e", "trace=read,pread64",
                                       "-e", "inject=read,pread64:delay_enter=60s:when=3"],
                                      database: scene.database, environment: scene.environment, directory: scene.directory)
        defer {
            _ = rescuer.killTracee(SIGKILL)
            rescuer.signal(SIGKILL)
            _ = rescuer.wait(seconds: 10)
        }
        // Held at its third read of the object, two of 1 MiB written. (A thread in `pread64` alone does not
        // say so: SQLite reads the database with it; a loaded CI run once looked while the file was empty.)
        var rescuersFile: String?
        var written: Int64 = -1
        let rescuing = eventually(seconds: 30) {
            guard let job = try? EventStore(path: scene.database, readOnly: true).job(scene.id), job.attempts == 2,
                  Self.held(rescuer, in: Self.readNumbers) else { return false }
            rescuersFile = Self.entries(scene.folder).map { scene.folder + "/" + $0 }.first { path in
                path.hasSuffix(".jobctl-partial") && Self.identity(path) != frozenFile
            }
            written = rescuersFile.flatMap { (try? FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int64) ?? nil } ?? -1
            return written == 2 << 20
        }
        try #require(rescuing, "the rescuer never held 2 MiB in its file (\(written) bytes): \(Self.entries(scene.folder)) \(rescuer.log)")
        try #require(Date().timeIntervalSince(heldAt) < Self.freeze - 2, "the rescuer started after the held rename went out; nothing to test")
        let unfinished = try #require(rescuersFile)

        // The held rename goes out; the first attempt's commit is over.
        Thread.sleep(until: heldAt.addingTimeInterval(Self.freeze + 3))
        try #require(rescuer.process.isRunning && Self.held(rescuer, in: Self.readNumbers), "the rescuer is no longer held: \(rescuer.log)")
        let expected = try Data(contentsOf: URL(fileURLWithPath: scene.source))
        let stored = try? Data(contentsOf: URL(fileURLWithPath: scene.destination))
        #expect(stored == nil || stored == expected, "destination of \(stored?.count ?? -1) bytes, the object's \(expected.count)")
        #expect(FileManager.default.fileExists(atPath: unfinished), "the rescuer's file lost its name: \(Self.entries(scene.folder))")
        _ = first.killTracee(SIGKILL)
        first.signal(SIGKILL)
        _ = first.wait(seconds: 10)

        // The rescuer dies before any checkpoint recorded its file's name; a third attempt finishes.
        _ = rescuer.killTracee(SIGKILL)
        rescuer.signal(SIGKILL)
        _ = rescuer.wait(seconds: 10)
        try Self.expireLease(scene.database, job: scene.id)
        let third = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "30"], environment: scene.environment,
                                             logDirectory: scene.directory.path)
        #expect(third.wait(seconds: 60) == 0, "\(third.log)")
        let job = try EventStore(path: scene.database, readOnly: true).job(scene.id)
        #expect(job?.state == .succeeded, "\(job?.error?.message ?? "") \(third.log)")
        #expect(job?.attempts == 3)
        #expect(try Data(contentsOf: URL(fileURLWithPath: scene.destination)) == expected)
        #expect(Self.entries(scene.folder) == ["out.bin"], "left behind: \(Self.entries(scene.folder))")
    }

    /// A download's first attempt SIGKILLed after its checkpoint: the next attempt resumes its partial
    /// file (the lock went with the worker), and the destination is that file, whole.
    @Test("a partial download a SIGKILLed attempt held is resumed by the next attempt")
    func killedAttemptsPartialDownloadIsResumed() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"),
                     "strace is not installed (Debian package strace; make test-deps installs it)")
        let scene = try FrozenDownload(label: "killed-partial")
        defer { scene.directory.remove() }
        let recorded = try scene.killAtCommitAfterCheckpoint()
        try Self.expireLease(scene.database, job: scene.id)
        let second = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "30"], environment: scene.environment,
                                              logDirectory: scene.directory.path)
        #expect(second.wait(seconds: 60) == 0, "\(second.log)")
        let job = try EventStore(path: scene.database, readOnly: true).job(scene.id)
        #expect(job?.state == .succeeded, "\(job?.error?.message ?? "") \(second.log)")
        #expect(job?.attempts == 2)
        #expect(Self.identity(scene.destination) == recorded, "the second attempt started afresh instead of resuming")
        let expected = try Data(contentsOf: URL(fileURLWithPath: scene.source))
        #expect(try Data(contentsOf: URL(fileURLWithPath: scene.destination)) == expected)
        #expect(Self.entries(scene.folder) == ["out.bin"], "left behind: \(Self.entries(scene.folder))")
    }
}

/// One download-file job of a 67 MiB `file://` object (uploaded first, so its sidecar records its CRC32C).
struct FrozenDownload {
    let directory: TemporaryDirectory
    let database: String
    let environment: [String: String]
    let source: String
    let folder: String
    let destination: String
    let id: String

    /// The partial file every attempt of the job names.
    var partial: String { folder + "/.out.bin.\(id).jobctl-partial" }

    init(label: String) throws {
        directory = try TemporaryDirectory(label)
        database = directory.file("jobctl.db")
        environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        try FileManager.default.createDirectory(atPath: directory.file("buckets/media"), withIntermediateDirectories: true)
        source = directory.file("source.bin")
        try writePatternFile(source, size: SidecarTemporaryTests.resumableSourceSize)
        folder = directory.file("out")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        destination = folder + "/out.bin"
        let upload = try #require(try submit("- {kind: upload-file, source: \"\(source)\", destination: \"file://media/obj.bin\"}\n",
                                             database: database, directory: directory).first)
        let uploader = try JobctlProcess.worker(database: database, ["--drain"], environment: environment, logDirectory: directory.path)
        #expect(uploader.wait(seconds: 60) == 0, "\(uploader.log)")
        try #require(try EventStore(path: database, readOnly: true).job(upload)?.state == .succeeded, "\(uploader.log)")
        id = try #require(try submit("- {kind: download-file, source: \"file://media/obj.bin\", destination: \"\(destination)\"}\n",
                                     database: database, directory: directory).first)
    }

    /// Runs the download in a worker whose renames strace holds (its commit: its partial file whole, its
    /// checkpoint at 64 MiB in the log) and SIGKILLs it there; returns the partial file's identity as the
    /// checkpoint recorded it.
    func killAtCommitAfterCheckpoint() throws -> FileIdentity {
        let worker = try JobctlProcess(database: database, arguments: ["worker", "--lease", "1"], environment: environment,
                                       logDirectory: directory.path,
                                       tracer: ["/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf",
                                                "-e", "trace=rename,renameat,renameat2",
                                                "-e", "inject=rename,renameat,renameat2:delay_enter=60s"])
        var identity: FileIdentity?
        let checkpointed = eventually(seconds: 60) {
            guard case .download(let written, _, _, _, let file?, _, _)? = try? EventStore(path: database, readOnly: true).job(id)?.resumePoint,
                  written == FrozenWriterTests.checkpoint else { return false }
            identity = file
            // Every byte written: the commit's rename is next (held).
            let size = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int64) ?? nil
            return size == SidecarTemporaryTests.resumableSourceSize
        }
        let killed = worker.killTracee(SIGKILL)
        worker.signal(SIGKILL)
        _ = worker.wait(seconds: 10)
        try #require(checkpointed, "the download never reached its commit after a checkpoint: \(worker.log)")
        try #require(killed, "the worker under strace was not found to kill")
        try #require(try EventStore(path: database, readOnly: true).job(id)?.state == .running,
                     "the job ended before the worker was killed; nothing to test")
        return try #require(identity)
    }
}
