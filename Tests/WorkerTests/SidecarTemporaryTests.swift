@testable import EventStore
import Foundation
import JobLifecycle
import JobModel
@testable import Storage
import Testing
import TestSupport

/// A worker SIGKILLed while it writes a `file://` object's metadata sidecar: between creating the
/// temporary (`.NAME.jobctl-meta.json.<job id>.<lease token>.jobctl-meta.tmp`) and renaming it into place. The worker
/// runs under strace, which holds each of its renames for a minute before the kernel sees it, so the kill
/// lands in that window every time; then the temporary must not outlive the job, on either store.
@Suite("a sidecar write killed mid-way", .onTestThreads, .serialized) struct SidecarTemporaryTests {
    /// `renameat2`'s system call number, as `/proc/PID/task/TID/syscall` shows it (Glibc's module has no
    /// `SYS_renameat2`).
    #if arch(arm64)
    static let renameat2Number = 276
    #else
    static let renameat2Number = 316
    #endif

    /// The jobs that write a sidecar, and the object each finds in place (nil: the job makes it).
    enum Writer: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case uploadFile = "upload-file", uploadData = "upload-data", updateMetadata = "update-metadata", fetchURL = "fetch-url"

        var testDescription: String { rawValue }

        func manifestLine(source: String) -> String {
            switch self {
            case .uploadFile: "- {kind: upload-file, source: \"\(source)\", destination: \"file://media/obj.bin\"}\n"
            case .uploadData: "- {kind: upload-data, data: \"fresh bytes\", destination: \"file://media/obj.bin\"}\n"
            case .updateMetadata: "- {kind: update-metadata, destination: \"file://media/obj.bin\", metadata: {content_type: text/plain}}\n"
            case .fetchURL: "- {kind: fetch-url, source: \"file://media/obj.bin\"}\n"
            }
        }
    }

    private static func entries(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    /// The worker is killed with the job's sidecar temporary on disk; the job is cancelled while no
    /// worker runs it, and the next worker (which finds it final, its lease expired) sweeps the temporary.
    @Test("killed between creating the sidecar temporary and renaming it, then cancelled: the next worker sweeps it",
          arguments: Writer.allCases, WorkerEngine.allCases)
    func cancelledJobsTemporaryIsSwept(writer: Writer, engine: WorkerEngine) throws {
        let scene = try KilledSidecarWrite(writer, engine: engine, label: "sidecar-cancel")
        defer { scene.directory.remove() }
        let temporary = try scene.killMidWrite()

        #expect(try jobctl(["cancel", scene.id], database: scene.database).status == 0)
        let second = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "1"], environment: scene.environment,
                                              logDirectory: scene.directory.path)
        #expect(second.wait(seconds: 30) == 0, "\(second.log)")
        #expect(try engine.reader(scene.database).job(scene.id)?.state == .cancelled)
        #expect(!FileManager.default.fileExists(atPath: temporary), "left behind: \(Self.entries(scene.bucket))")
        #expect(Self.entries(scene.bucket).allSatisfy { !$0.hasSuffix(".jobctl-meta.tmp") && !$0.hasSuffix(".jobctl-upload") },
                "left behind: \(Self.entries(scene.bucket))")
        // Removed by the sweep, which says so, naming the job and the kind of file.
        #expect(second.log.contains("\(scene.id) file=sidecar-temporary path=\(temporary)"), "\(second.log)")
    }

    /// The job's next attempt writes the sidecar under a name of its own (its lease token); the killed
    /// attempt's temporary, named with its token, is the job's leftover once it succeeded, and the
    /// draining worker's last sweep removes it.
    @Test("killed between creating the sidecar temporary and renaming it, then retried: nothing is left",
          arguments: Writer.allCases)
    func retriedJobReplacesItsTemporary(writer: Writer) throws {
        let scene = try KilledSidecarWrite(writer, engine: .sqlite, label: "sidecar-retry")
        defer { scene.directory.remove() }
        _ = try scene.killMidWrite()

        let second = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "1"], environment: scene.environment,
                                              logDirectory: scene.directory.path)
        #expect(second.wait(seconds: 30) == 0, "\(second.log)")
        #expect(try scene.engine.reader(scene.database).job(scene.id)?.state == .succeeded, "\(second.log)")
        #expect(Self.entries(scene.bucket) == [".obj.bin.jobctl-meta.json", "obj.bin"], "left behind: \(Self.entries(scene.bucket))")
    }

    /// A sidecar temporary whose write fails is removed only while its name still holds the file the
    /// attempt made. Its sync is held 4 s by strace and then fails with EAGAIN (a temporary failure: the
    /// job is retried, not final, so no sweep of a final job's files follows); meanwhile another file is
    /// renamed onto the temporary's name. The failed attempt removed whatever was at the name by name,
    /// that other file too; now it is left alone.
    @Test("a failed sidecar write removes its own temporary only, not a file renamed onto the name while its sync hung")
    func failedWriteRemovesOnlyItsOwnTemporary() throws {
        let scene = try KilledSidecarWrite(.updateMetadata, engine: .sqlite, label: "sidecar-failed-sync")
        defer { scene.directory.remove() }
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is not installed (Debian package strace; make test-deps installs it)")
        // The worker's first fsync is the sidecar temporary's (SQLite and the WAL sync use fdatasync).
        let worker = try JobctlProcess(database: scene.database, arguments: ["worker", "--concurrency", "1"],
                                       environment: scene.environment, logDirectory: scene.directory.path,
                                       tracer: [strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf", "-e", "trace=fsync",
                                                "-e", "inject=fsync:error=EAGAIN:delay_enter=4s:when=1"])
        defer {
            _ = worker.killTracee(SIGKILL)
            worker.signal(SIGKILL)
            _ = worker.wait(seconds: 10)
        }
        var temporary = ""
        try #require(eventually(seconds: 60) {
            temporary = Self.entries(scene.bucket).first { $0.hasSuffix(".jobctl-meta.tmp") }.map { scene.bucket + "/" + $0 } ?? ""
            var info = stat()
            return !temporary.isEmpty && lstat(temporary, &info) == 0 && info.st_size > 0
        }, "the worker never wrote its sidecar temporary: \(worker.log)")
        let held = Date()
        let theirs = scene.directory.file("theirs.json")
        try Data("not this attempt's".utf8).write(to: URL(fileURLWithPath: theirs))
        try #require(rename(theirs, temporary) == 0)
        try #require(Date().timeIntervalSince(held) < 3, "the file was renamed after the held sync ended; nothing to test")
        try #require(eventually(seconds: 30) { worker.log.contains("temporary failure while syncing") }, "\(worker.log)")
        #expect(worker.log.contains(temporary), "the failure was another file's: \(worker.log)")
        #expect((try? String(contentsOfFile: temporary, encoding: .utf8)) == "not this attempt's",
                "removed: \(Self.entries(scene.bucket)) \(worker.log)")
    }

    /// Two live attempts of one upload: the first, in a worker frozen past its lease just before it renames
    /// its sidecar temporary into place (strace holds that rename 6 s: its object is in place), and the
    /// retry another worker runs after the rescue (its object's rename held 10 s, its sidecar temporary
    /// written). The first wakes while the retry waits. With one name for every attempt of the job
    /// (`.NAME.jobctl-meta.json.<job id>.jobctl-meta.tmp`), the retry replaced the first attempt's temporary,
    /// the woken first attempt renamed the retry's into place, and the retry's own rename then found the
    /// name gone: the job ended failed ("… does not exist (renaming into place)", not retryable). With each
    /// attempt's own name (its lease token in it) each renames its own file, and the retry succeeds with
    /// its sidecar in place. (update-metadata and fetch-url hold the object's lock across their sidecar
    /// write, so their attempts take turns there.)
    @Test("two live attempts of an upload (one frozen past its lease, then woken) never rename each other's sidecar temporary",
          arguments: [Writer.uploadData, .uploadFile])
    func liveAttemptsKeepTheirOwnTemporaries(writer: Writer) throws {
        let scene = try KilledSidecarWrite(writer, engine: .sqlite, label: "sidecar-live")
        defer { scene.directory.remove() }
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is not installed (Debian package strace; make test-deps installs it)")
        // Holds the worker's `rename`th rename (the object's is the first, the sidecar's the second) `seconds`.
        func tracer(holdingRename rename: Int, for seconds: Int) -> [String] {
            [strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf", "-e", "trace=rename,renameat,renameat2",
             "-e", "inject=rename,renameat,renameat2:delay_enter=\(seconds)s:when=\(rename)"]
        }
        // Each written temporary, by name: its inode and change time (an inode freed is soon given again).
        func temporaries() -> [String: String] {
            var found: [String: String] = [:]
            for name in Self.entries(scene.bucket) where name.hasSuffix(".jobctl-meta.tmp") {
                var info = stat()
                if lstat(scene.bucket + "/" + name, &info) == 0, info.st_size > 0 {
                    found[name] = "\(info.st_ino) \(info.st_ctim.tv_sec).\(info.st_ctim.tv_nsec)"
                }
            }
            return found
        }
        // One slot and no claim ahead: the frozen attempt's worker takes nothing else meanwhile.
        let first = try JobctlProcess(database: scene.database, arguments: ["worker", "--concurrency", "1", "--claim-ahead", "0"],
                                      environment: scene.environment, logDirectory: scene.directory.path,
                                      tracer: tracer(holdingRename: 2, for: 6))
        defer {
            _ = first.killTracee(SIGKILL)
            first.signal(SIGKILL)
            _ = first.wait(seconds: 10)
        }
        var firstTemporary: [String: String] = [:]
        try #require(eventually(seconds: 30) { firstTemporary = temporaries(); return !firstTemporary.isEmpty },
                     "the first attempt never wrote its sidecar temporary: \(first.log)")
        let held = Date()
        // Its lease is lost (as when it stays frozen past it): the next worker rescues the job and retries it.
        let store = try EventStore(path: scene.database, mode: .readWrite)
        try store.withConnection { (connection) throws(StoreError) in
            try connection.run("UPDATE jobs SET lease_owner = 'worker:gone', lease_expires_at_ms = 0 WHERE id = ?", [.text(scene.id)])
        }
        let second = try JobctlProcess(database: scene.database, arguments: ["worker", "--drain", "--lease", "30"],
                                       environment: scene.environment, logDirectory: scene.directory.path,
                                       tracer: tracer(holdingRename: 1, for: 10))
        defer {
            _ = second.killTracee(SIGKILL)
            second.signal(SIGKILL)
        }
        // The retry's temporary is written while the first attempt's rename is still held.
        let retryWrote = eventually(seconds: 30) {
            temporaries().contains { name, file in firstTemporary[name] != file }
        }
        try #require(retryWrote, "the retry never wrote its sidecar temporary: \(second.log)")
        try #require(Date().timeIntervalSince(held) < 5, "the retry wrote its temporary after the first attempt's rename went out; nothing to test")

        #expect(second.wait(seconds: 90) == 0, "\(second.log)")
        let job = try scene.engine.reader(scene.database).job(scene.id)
        #expect(job?.state == .succeeded, "\(job?.error?.message ?? "") \(second.log)")
        #expect(job?.attempts == 2)
        // The sidecar in place is the retry's, whole, describing the object file in place (the retry's).
        let sidecar = (try? Data(contentsOf: URL(fileURLWithPath: scene.bucket + "/.obj.bin.jobctl-meta.json"))) ?? Data()
        let fields = try? JSONSerialization.jsonObject(with: sidecar) as? [String: Any]
        var object = stat()
        #expect(lstat(scene.bucket + "/obj.bin", &object) == 0)
        #expect(fields?["objectFile"] as? String == "\(object.st_dev):\(object.st_ino)",
                "sidecar in place: \(String(decoding: sidecar, as: UTF8.self).debugDescription)")
        #expect(fields?["crc32c"] as? String == job?.result?.crc32c, "\(fields ?? [:])")
        #expect(Self.entries(scene.bucket) == [".obj.bin.jobctl-meta.json", "obj.bin"], "left behind: \(Self.entries(scene.bucket))")
    }

    /// Two live attempts of one upload, at their object commits: the first, in a worker frozen past its
    /// lease just before it renames its session file onto the object (strace holds its first rename 6 s:
    /// its session written, its sidecar temporary too), and the retry another worker runs after the
    /// rescue, held 10 s at its own commit. With one session name for every attempt of the job
    /// (`.NAME.<job id>.jobctl-upload`) the retry restarted the session under it, the first woke and
    /// renamed the retry's file onto the object, and the retry's rename found the name gone: the job
    /// needed a third attempt (before that, it ended failed). With each attempt's own name (its lease
    /// token in it) each renames its own file, and the retry succeeds: the object holds the source's
    /// bytes, its sidecar describes it (a download verifies its CRC32C) and nothing hidden is left.
    @Test("two live attempts of an upload (one frozen past its lease at its commit, then woken): the job still ends with the source's object and its sidecar",
          arguments: [Writer.uploadData, .uploadFile])
    func liveAttemptsAtTheirCommitsEndWithTheSourcesObject(writer: Writer) throws {
        let scene = try KilledSidecarWrite(writer, engine: .sqlite, label: "session-live")
        defer { scene.directory.remove() }
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is not installed (Debian package strace; make test-deps installs it)")
        // Holds the worker's first rename (its upload's commit) `seconds`.
        func tracer(holdingCommitFor seconds: Int) -> [String] {
            let calls = "rename,renameat,renameat2"
            return [strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf", "-e", "trace=\(calls)",
                    "-e", "inject=\(calls):delay_enter=\(seconds)s:when=1"]
        }
        // Each written sidecar temporary, by name: its inode and change time.
        func temporaries() -> [String: String] {
            var found: [String: String] = [:]
            for name in Self.entries(scene.bucket) where name.hasSuffix(".jobctl-meta.tmp") {
                var info = stat()
                if lstat(scene.bucket + "/" + name, &info) == 0, info.st_size > 0 {
                    found[name] = "\(info.st_ino) \(info.st_ctim.tv_sec).\(info.st_ctim.tv_nsec)"
                }
            }
            return found
        }
        let first = try JobctlProcess(database: scene.database, arguments: ["worker", "--concurrency", "1", "--claim-ahead", "0"],
                                      environment: scene.environment, logDirectory: scene.directory.path,
                                      tracer: tracer(holdingCommitFor: 6))
        defer {
            _ = first.killTracee(SIGKILL)
            first.signal(SIGKILL)
            _ = first.wait(seconds: 10)
        }
        // The sidecar temporary is written after the session is whole, just before the commit.
        var firstTemporary: [String: String] = [:]
        try #require(eventually(seconds: 30) { firstTemporary = temporaries(); return !firstTemporary.isEmpty },
                     "the first attempt never reached its commit: \(first.log)")
        let held = Date()
        let store = try EventStore(path: scene.database, mode: .readWrite)
        try store.withConnection { (connection) throws(StoreError) in
            try connection.run("UPDATE jobs SET lease_owner = 'worker:gone', lease_expires_at_ms = 0 WHERE id = ?", [.text(scene.id)])
        }
        let second = try JobctlProcess(database: scene.database, arguments: ["worker", "--drain", "--lease", "30"],
                                       environment: scene.environment, logDirectory: scene.directory.path,
                                       tracer: tracer(holdingCommitFor: 10))
        defer {
            _ = second.killTracee(SIGKILL)
            second.signal(SIGKILL)
        }
        // The retry wrote its session (under the shared name) and its sidecar temporary while the first
        // attempt's commit is still held.
        let retryWrote = eventually(seconds: 30) {
            temporaries().contains { name, file in firstTemporary[name] != file }
        }
        try #require(retryWrote, "the retry never reached its commit: \(second.log)")
        try #require(Date().timeIntervalSince(held) < 5, "the retry reached its commit after the first attempt's went out; nothing to test")

        #expect(second.wait(seconds: 90) == 0, "\(second.log)")
        let job = try scene.engine.reader(scene.database).job(scene.id)
        #expect(job?.state == .succeeded, "\(job?.error?.message ?? "") \(second.log)")
        // The retry's own session and sidecar went into place: no attempt after it.
        #expect(job?.attempts == 2, "\(second.log)")
        let expected = writer == .uploadData ? Data("fresh bytes".utf8)
            : try Data(contentsOf: URL(fileURLWithPath: scene.directory.file("source.bin")))
        let stored = try? Data(contentsOf: URL(fileURLWithPath: scene.bucket + "/obj.bin"))
        #expect(stored == expected, "object of \(stored?.count ?? -1) bytes, the source's \(expected.count)")
        // What the draining worker's last sweep left: the object and its sidecar only.
        #expect(Self.entries(scene.bucket) == [".obj.bin.jobctl-meta.json", "obj.bin"], "left behind: \(Self.entries(scene.bucket))")

        // The sidecar describes the object: a download finds its checksums and verifies them.
        let download = try #require(try submit("- {kind: download-memory, source: \"file://media/obj.bin\"}\n",
                                               database: scene.database, directory: scene.directory).first)
        let reader = try JobctlProcess.worker(database: scene.database, ["--drain"], environment: scene.environment,
                                              logDirectory: scene.directory.path)
        #expect(reader.wait(seconds: 30) == 0, "\(reader.log)")
        let read = try scene.engine.reader(scene.database).job(download)
        #expect(read?.state == .succeeded, "\(read?.error?.message ?? "")")
        #expect(read?.result?.size == Int64(expected.count))
        #expect(read?.result?.verified?.contains(.crc32c) == true, "verified: \(String(describing: read?.result?.verified))")
        #expect(read?.result?.crc32c == job?.result?.crc32c)
    }

    /// The bytes of the object and the files beside it, and a download of it that verifies its sidecar's
    /// CRC32C (the one the upload's result records).
    static func expectSourcesObject(_ scene: KilledSidecarWrite, job: JobRecord?) throws {
        let expected = try Data(contentsOf: URL(fileURLWithPath: scene.directory.file("source.bin")))
        let stored = try? Data(contentsOf: URL(fileURLWithPath: scene.bucket + "/obj.bin"))
        #expect(stored == expected, "object of \(stored?.count ?? -1) bytes, the source's \(expected.count)")
        #expect(Self.entries(scene.bucket) == [".obj.bin.jobctl-meta.json", "obj.bin"], "left behind: \(Self.entries(scene.bucket))")
        let download = try #require(try submit("- {kind: download-memory, source: \"file://media/obj.bin\", max_size: 100MiB}\n",
                                               database: scene.database, directory: scene.directory).first)
        let reader = try JobctlProcess.worker(database: scene.database, ["--drain"], environment: scene.environment,
                                              logDirectory: scene.directory.path)
        #expect(reader.wait(seconds: 30) == 0, "\(reader.log)")
        let read = try scene.engine.reader(scene.database).job(download)
        #expect(read?.state == .succeeded, "\(read?.error?.message ?? "")")
        #expect(read?.result?.size == Int64(expected.count))
        #expect(read?.result?.verified?.contains(.crc32c) == true, "verified: \(String(describing: read?.result?.verified))")
        #expect(read?.result?.crc32c == job?.result?.crc32c)
    }

    /// The size of a source whose upload records a resume point (`file://` checkpoints every 64 MiB) and
    /// goes on past it.
    static let resumableSourceSize: Int64 = (64 << 20) + (3 << 20)

    /// Runs the scene's upload in a worker whose renames strace holds (its commit: its session whole and
    /// its checkpoint in the log), SIGKILLs it there and lets its lease run out; returns the session
    /// its resume point records.
    static func killAtCommitAfterCheckpoint(_ scene: KilledSidecarWrite) throws -> LocalUploadSession {
        let path = try scene.killMidWrite(lease: 1, afterCheckpoint: true)
        let job = try scene.engine.reader(scene.database).job(scene.id)
        let (session, offset) = try #require(recordedSession(job), "no session to resume: \(String(describing: job?.resumePoint))")
        #expect(offset == 64 << 20)
        #expect(FileManager.default.fileExists(atPath: session.path), "\(Self.entries(scene.bucket))")
        #expect(FileManager.default.fileExists(atPath: path))
        try scene.expireLease()
        return session
    }

    /// The device and inode of the object file: a session taken over and committed is the very file the
    /// first attempt's resume point recorded.
    private static func objectFile(_ scene: KilledSidecarWrite) -> FileIdentity? {
        var info = stat()
        guard lstat(scene.bucket + "/obj.bin", &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// The upload session `job`'s resume point records, and its offset.
    static func recordedSession(_ job: JobRecord?) -> (LocalUploadSession, Int64)? {
        guard case .upload(let uri, let offset, _, _)? = job?.resumePoint, let session = LocalUploadSession(uri: uri) else { return nil }
        return (session, offset)
    }

    /// Two live attempts of one upload: the first checkpointed (its session in the log) and is frozen
    /// past its lease just before it renames that session onto the object (strace holds its commit 8 s);
    /// the retry another worker runs after the rescue is held 14 s at its own commit. With one name for
    /// every attempt the retry resumed the file under the shared name, the first woke and renamed it onto
    /// the object (its sidecar beside it), and the retry's rename found the name gone: the job needed a
    /// third attempt. The frozen attempt still holds its session's writer lock, so the retry does not
    /// take the session over (it would write into a file the other still may): it removes the session's
    /// name and uploads into a session of its own. The woken first attempt's rename fails (its name is
    /// gone: ENOENT), and the retry's file and sidecar go into place at the second attempt.
    @Test("a retry leaves the session of an attempt frozen at its commit: the woken attempt's rename fails, the retry's object stands")
    func retryLeavesAFrozenAttemptsSession() throws {
        let scene = try KilledSidecarWrite(.uploadFile, engine: .sqlite, label: "session-adopt", sourceSize: Self.resumableSourceSize)
        defer { scene.directory.remove() }
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is not installed (Debian package strace; make test-deps installs it)")
        let firstTrace = scene.directory.file("first.strace")
        // The first attempt's commit is its first rename; the retry's is its first `renameat` (it takes the
        // session over with `renameat2`, which is not held).
        let first = try JobctlProcess(database: scene.database, arguments: ["worker", "--concurrency", "1", "--claim-ahead", "0"],
                                      environment: scene.environment, logDirectory: scene.directory.path,
                                      tracer: [strace, "-f", "-qq", "-s", "300", "-o", firstTrace, "--seccomp-bpf",
                                               "-e", "trace=rename,renameat,renameat2",
                                               "-e", "inject=rename,renameat,renameat2:delay_enter=8s:when=1"])
        defer {
            _ = first.killTracee(SIGKILL)
            first.signal(SIGKILL)
            _ = first.wait(seconds: 10)
        }
        try #require(eventually(seconds: 60) { Self.entries(scene.bucket).contains { $0.hasSuffix(".jobctl-meta.tmp") } },
                     "the first attempt never reached its commit: \(first.log)")
        let held = Date()
        var running: JobRecord?
        let recorded = eventually(seconds: 5) {
            running = try? scene.engine.reader(scene.database).job(scene.id)
            return Self.recordedSession(running) != nil
        }
        try #require(recorded, "the first attempt recorded no session to resume: \(String(describing: running?.resumePoint))")
        let (session, _) = try #require(Self.recordedSession(running))
        let firstToken = try #require(running?.leaseToken)
        #expect(LocalFiles.lastComponent(session.path) == ".obj.bin.\(scene.id).\(firstToken).jobctl-upload")
        try scene.expireLease()
        let second = try JobctlProcess(database: scene.database, arguments: ["worker", "--drain", "--lease", "30"],
                                       environment: scene.environment, logDirectory: scene.directory.path,
                                       tracer: [strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf", "-e", "trace=rename,renameat",
                                                "-e", "inject=rename,renameat:delay_enter=14s:when=1"])
        defer {
            _ = second.killTracee(SIGKILL)
            second.signal(SIGKILL)
        }
        // The retry reached its commit (its sidecar temporary written) while the first attempt's is held.
        let retryWrote = eventually(seconds: 30) {
            Self.entries(scene.bucket).filter { $0.hasSuffix(".jobctl-meta.tmp") }.count == 2
        }
        try #require(retryWrote, "the retry never reached its commit: \(second.log)")
        try #require(Date().timeIntervalSince(held) < 7, "the retry reached its commit after the first attempt's went out; nothing to test")

        #expect(second.wait(seconds: 90) == 0, "\(second.log)")
        let job = try scene.engine.reader(scene.database).job(scene.id)
        #expect(job?.state == .succeeded, "\(job?.error?.message ?? "") \(second.log)")
        #expect(job?.attempts == 2, "\(second.log)")
        // The woken first attempt's commit found its session's name gone.
        let failedRename = eventually(seconds: 10) {
            let trace = (try? String(contentsOfFile: firstTrace, encoding: .utf8)) ?? ""
            return trace.split(separator: "\n").contains {
                $0.contains("\"\(LocalFiles.lastComponent(session.path))\"") && $0.contains("\"obj.bin\")") && $0.contains("= -1 ENOENT")
            }
        }
        #expect(failedRename, "the first attempt's renames: \((try? String(contentsOfFile: firstTrace, encoding: .utf8)) ?? "")")
        // The retry uploaded into a session of its own: the object is not the file the first attempt held.
        #expect(Self.objectFile(scene) != session.identity)
        try Self.expectSourcesObject(scene, job: job)
    }

    /// Where a worker is SIGKILLed while it takes an earlier attempt's upload session over.
    enum AdoptionStep: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Held at the rename's entry: the session still has the name the log recorded.
        case beforeRename = "before the rename"
        /// Held at the rename's exit: the session has the attempt's own name, which the log never recorded.
        case afterRename = "after the rename"

        var testDescription: String { rawValue }
    }

    /// An upload's attempt killed at its commit (its session checkpointed), then the retry killed while it
    /// takes that session over (strace holds its `renameat2` before or after the kernel runs it): the job
    /// is never left failed for good, and the third attempt resumes and finishes it. Killed after the
    /// rename, the session is no longer at the name the log recorded: the next attempt finds it by its
    /// identity among the job's session names.
    @Test("a worker killed before or after it takes an upload session over leaves a job the next attempt finishes",
          arguments: AdoptionStep.allCases)
    func killedWhileAdoptingTheSession(step: AdoptionStep) throws {
        let scene = try KilledSidecarWrite(.uploadFile, engine: .sqlite, label: "session-adopt-kill", sourceSize: Self.resumableSourceSize)
        defer { scene.directory.remove() }
        let recorded = try Self.killAtCommitAfterCheckpoint(scene)
        let recordedName = LocalFiles.lastComponent(recorded.path)
        let strace = "/usr/bin/strace"
        let when = step == .beforeRename ? "delay_enter" : "delay_exit"
        let second = try JobctlProcess(database: scene.database, arguments: ["worker", "--lease", "1"],
                                       environment: scene.environment, logDirectory: scene.directory.path,
                                       tracer: [strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf", "-e", "trace=renameat2",
                                                "-e", "inject=renameat2:\(when)=60s:when=1"])
        defer {
            _ = second.killTracee(SIGKILL)
            second.signal(SIGKILL)
        }
        var ownName = ""
        let reached = eventually(seconds: 30) {
            guard let job = try? scene.engine.reader(scene.database).job(scene.id), job.attempts >= 1, job.state == .running,
                  let token = job.leaseToken else { return false }
            ownName = ".obj.bin.\(scene.id).\(token).jobctl-upload"
            guard !recordedName.hasSuffix(".\(token).jobctl-upload") else { return false }
            switch step {
            case .beforeRename: return second.traceeIsIn(syscall: Self.renameat2Number)   // held at its entry
            case .afterRename: return Self.entries(scene.bucket).contains(ownName)
            }
        }
        let killed = second.killTracee(SIGKILL)
        second.signal(SIGKILL)
        _ = second.wait(seconds: 10)
        try #require(reached, "the retry never took the session over: \(Self.entries(scene.bucket)) \(second.log)")
        try #require(killed, "the worker under strace was not found to kill")
        switch step {
        case .beforeRename:
            #expect(Self.entries(scene.bucket).contains(recordedName) && !Self.entries(scene.bucket).contains(ownName),
                    "\(Self.entries(scene.bucket))")
        case .afterRename:
            #expect(!Self.entries(scene.bucket).contains(recordedName) && Self.entries(scene.bucket).contains(ownName),
                    "\(Self.entries(scene.bucket))")
        }
        #expect(try scene.engine.reader(scene.database).job(scene.id)?.state == .running)
        try scene.expireLease()

        let third = try JobctlProcess.worker(database: scene.database, ["--drain", "--lease", "30"], environment: scene.environment,
                                             logDirectory: scene.directory.path)
        #expect(third.wait(seconds: 60) == 0, "\(third.log)")
        let job = try scene.engine.reader(scene.database).job(scene.id)
        #expect(job?.state == .succeeded, "\(job?.error?.message ?? "") \(third.log)")
        #expect(job?.attempts == 3, "\(third.log)")
        // The third attempt went on from the session (found by its identity after the rename), not afresh.
        #expect(Self.objectFile(scene) == recorded.identity)
        try Self.expectSourcesObject(scene, job: job)
    }
}

/// One job that writes a sidecar, run by a worker that is killed while the sidecar's rename is held.
struct KilledSidecarWrite {
    let directory: TemporaryDirectory
    let database: String
    let environment: [String: String]
    let bucket: String
    let id: String
    let engine: WorkerEngine

    init(_ writer: SidecarTemporaryTests.Writer, engine: WorkerEngine, label: String, sourceSize: Int64 = 100_000) throws {
        directory = try TemporaryDirectory(label)
        self.engine = engine
        database = try engine.database(in: directory)
        environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        bucket = directory.file("buckets/media")
        try FileManager.default.createDirectory(atPath: bucket, withIntermediateDirectories: true)
        // update-metadata and fetch-url find an object without a sidecar (served from its `stat`).
        if writer == .updateMetadata || writer == .fetchURL {
            try Data("old bytes".utf8).write(to: URL(fileURLWithPath: bucket + "/obj.bin"))
        }
        let source = directory.file("source.bin")
        try writePatternFile(source, size: sourceSize)
        id = try #require(try submit(writer.manifestLine(source: source), database: database, directory: directory).first)
    }

    /// Runs the job in a worker whose renames strace holds, SIGKILLs the worker once the job's sidecar
    /// temporary is on disk, and returns the temporary's path.
    /// `afterCheckpoint`: not before the job's resume point (a checkpointed session) is in the log.
    func killMidWrite(lease: Int = 1, afterCheckpoint: Bool = false) throws -> String {
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is not installed (Debian package strace; make test-deps installs it)")
        let worker = try JobctlProcess(database: database, arguments: ["worker", "--lease", String(lease)], environment: environment,
                                       logDirectory: directory.path,
                                       tracer: [strace, "-f", "-qq", "-o", "/dev/null", "--seccomp-bpf",
                                                "-e", "trace=rename,renameat,renameat2",
                                                "-e", "inject=rename,renameat,renameat2:delay_enter=60s"])
        var found: [String] = []
        let written = eventually(seconds: 60) {
            found = (try? FileManager.default.contentsOfDirectory(atPath: bucket))?.filter { $0.hasSuffix(".jobctl-meta.tmp") } ?? []
            return !found.isEmpty
                && (!afterCheckpoint || SidecarTemporaryTests.recordedSession(try? engine.reader(database).job(id)) != nil)
        }
        let killed = worker.killTracee(SIGKILL)
        worker.signal(SIGKILL)
        _ = worker.wait(seconds: 10)
        try #require(written, "the worker never created a sidecar temporary: \(worker.log)")
        try #require(killed, "the worker under strace was not found to kill")
        let running = try engine.reader(database).job(id)
        try #require(running?.state == .running, "the job ended before the worker was killed; nothing to test")
        // The job's id and the attempt's lease token are in the name: nothing else ties a temporary to its
        // job, and no other attempt of it writes there.
        let token = try #require(running?.leaseToken)
        #expect(found == [".obj.bin.jobctl-meta.json.\(id).\(token).jobctl-meta.tmp"], "\(found)")
        return bucket + "/" + found[0]
    }

    /// Ends the running attempt's lease now (as when its worker stays away past it): the next worker
    /// rescues the job.
    func expireLease() throws {
        let store = try EventStore(path: database, mode: .readWrite)
        try store.withConnection { (connection) throws(StoreError) in
            try connection.run("UPDATE jobs SET lease_owner = 'worker:gone', lease_expires_at_ms = 0 WHERE id = ?", [.text(id)])
        }
    }
}
