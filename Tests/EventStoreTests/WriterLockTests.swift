import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

/// The writer lock between processes (`WriterLock`): real processes, real files. The test binary re-runs
/// itself with a filter that selects `childHolder`, enabled only in those children: it takes the lock of
/// the database the environment names, says so with a file, and holds it until it is killed.
@Suite("Writer lock between processes", .serialized, .onTestThreads)
struct WriterLockTests {
    static let databaseVariable = "JOBCTL_WRITER_LOCK_CHILD_DB"
    static let environment = ProcessInfo.processInfo.environment

    /// A child process holding the lock of the database at `path`, started and holding when this returns.
    final class Holder {
        let process = Process()
        let marker: String

        init(databasePath path: String) throws {
            marker = path + ".held"
            process.executableURL = URL(fileURLWithPath: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            process.arguments = ["--testing-library", "swift-testing", "--filter", "WriterLockTests/childHolder"]
            var environment = ProcessInfo.processInfo.environment
            environment[WriterLockTests.databaseVariable] = path
            process.environment = environment
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let deadline = Date().addingTimeInterval(60)
            while !FileManager.default.fileExists(atPath: marker) && process.isRunning && Date() < deadline {
                usleep(5_000)
            }
            try #require(FileManager.default.fileExists(atPath: marker), "the child never took the lock")
        }

        func signal(_ number: Int32) { signalIfRunning(process, number) }

        func killAndWait() {
            signal(SIGCONT)
            signal(SIGKILL)
            process.waitForExit()
        }
    }

    /// Runs only in a child spawned by `Holder`.
    @Test(.enabled(if: environment[databaseVariable] != nil, "runs only as a spawned child process"))
    func childHolder() throws {
        let path = try #require(Self.environment[Self.databaseVariable])
        let lock = try #require(try WriterLock.openOrCreate(forDatabase: path))
        #expect(lock.lock(waitingAtMostNs: 10_000_000_000) == .acquired)
        _ = FileManager.default.createFile(atPath: path + ".held", contents: nil)
        // Held until the parent kills this process (never unlocked here).
        sleep(120)
    }

    @Test("a database opened through a symbolic link takes the lock beside the file itself, where SQLite keeps its -wal")
    func symbolicLinkSharesTheLock() throws {
        let fixture = try StoreFixture("writer-lock-link")
        defer { fixture.remove() }
        let link = fixture.directory.file("link.db")
        #expect(symlink(fixture.path, link) == 0)
        let throughLink = try EventStore(path: link, mode: .readWrite)
        _ = try throughLink.submit([uploadSpec()], actor: "cli:test", now: 1_000)
        #expect(throughLink.writerLockPath != nil && throughLink.writerLockPath == fixture.sqlite?.writerLockPath)
        #expect(!FileManager.default.fileExists(atPath: link + "-writer-lock"))
        #expect(FileManager.default.fileExists(atPath: fixture.path + "-wal") && !FileManager.default.fileExists(atPath: link + "-wal"))
    }

    @Test("a writable open creates the lock file privately, without following links; a read-only open never creates it")
    func createdByWritersOnly() throws {
        let fixture = try StoreFixture("writer-lock-create")
        defer { fixture.remove() }
        let lockPath = WriterLock.path(forDatabase: fixture.path)
        #expect(fixture.sqlite?.writerLockPath == lockPath)
        var info = stat()
        #expect(lstat(lockPath, &info) == 0)
        #expect(info.st_mode & S_IFMT == S_IFREG)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(info.st_size == 4_096)
        // No temporary file is left behind.
        let names = try FileManager.default.contentsOfDirectory(atPath: fixture.directory.path)
        #expect(names.filter { $0.hasSuffix(".tmp") } == [])

        #expect(unlink(lockPath) == 0)
        let reader = try EventStore(path: fixture.path, mode: .readOnly)
        #expect(try reader.jobs().isEmpty)
        #expect(reader.writerLockPath == nil)
        #expect(!FileManager.default.fileExists(atPath: lockPath))
        // A writer that opens later makes it again.
        let writer = try EventStore(path: fixture.path, mode: .readWrite)
        #expect(writer.writerLockPath == lockPath)
        #expect(FileManager.default.fileExists(atPath: lockPath))
    }

    @Test("a write does not leave the store alive on the executor: dropping it closes and checkpoints the database at once")
    func writeKeepsNoReferenceOnTheExecutor() throws {
        let directory = try TemporaryDirectory("writer-lock-release")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        weak var released: EventStore?
        do {
            let store = try EventStore(path: path)
            released = store
            for round in 0..<20 {
                _ = try store.submit([uploadSpec(key: "k\(round)")], actor: "cli:test", now: Int64(1_000 + round))
            }
        }
        // The last reference went here, so the store closed here: SQLite's last close checkpoints the WAL
        // into the file and removes it. A closure on the executor keeping the store would close it later,
        // on that thread, where a process's exit can cut it short.
        #expect(released == nil)
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
    }

    @Test("a symbolic link or a foreign file planted at the lock's path is refused, and what it names is untouched")
    func plantedFilesRefused() throws {
        let fixture = try StoreFixture("writer-lock-symlink")
        defer { fixture.remove() }
        let lockPath = WriterLock.path(forDatabase: fixture.path)
        #expect(unlink(lockPath) == 0)
        let target = fixture.directory.file("target")
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: target))
        #expect(symlink(target, lockPath) == 0)
        #expect {
            _ = try EventStore(path: fixture.path, mode: .readWrite)
        } throws: { error in
            guard case StoreError.io(let message) = error else { return false }
            return message.contains("symbolic link") && message.contains(lockPath)
        }
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "keep me")
        // A dangling link is refused too, and nothing is created where it points.
        #expect(unlink(lockPath) == 0)
        let nowhere = fixture.directory.file("nowhere")
        #expect(symlink(nowhere, lockPath) == 0)
        #expect(throws: StoreError.self) { _ = try EventStore(path: fixture.path, mode: .readWrite) }
        #expect(!FileManager.default.fileExists(atPath: nowhere))
        // A regular file that is not a lock is refused, not overwritten.
        #expect(unlink(lockPath) == 0)
        let foreign = Data(repeating: 7, count: 4_096)
        try foreign.write(to: URL(fileURLWithPath: lockPath))
        #expect {
            _ = try EventStore(path: fixture.path, mode: .readWrite)
        } throws: { error in
            guard case StoreError.io(let message) = error else { return false }
            return message.contains("not a jobctl writer lock")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: lockPath)) == foreign)
    }

    @Test("the lock excludes another process; a stopped holder makes a write wait the busy timeout, then fail as busy")
    func excludesAndTimesOut() throws {
        let fixture = try StoreFixture("writer-lock-busy")
        defer { fixture.remove() }
        let holder = try Holder(databasePath: fixture.path)
        defer { holder.killAndWait() }
        let lock = try #require(try WriterLock.openOrCreate(forDatabase: fixture.path))
        #expect(lock.lock(waitingAtMostNs: 100_000_000) == .timedOut)
        #expect(!lock.isHeld)

        holder.signal(SIGSTOP)
        // Longer than a writer waits before it looks at the owner: a live one's lock is never taken for stale.
        let store = try EventStore(path: fixture.path, mode: .readWrite, busyTimeoutMs: 2_500)
        let started = Date()
        let lockPath = WriterLock.path(forDatabase: fixture.path)
        // The error names the lock file (not SQLite's lock) and how to tell a stale one.
        #expect {
            _ = try store.submit([uploadSpec()], actor: "cli:test", now: 1_000)
        } throws: { error in
            guard case StoreError.busy = error else { return false }
            let message = "\(error)"
            return message.contains("'\(lockPath)'") && message.contains("fuser") && message.contains("stale")
        }
        let waited = Date().timeIntervalSince(started)
        #expect(waited >= 2.4 && waited < 15, "waited \(waited) s")
        #expect(store.writerLockRecoveries == 0)
        // Nothing was written, and reads do not take the lock.
        #expect(try store.jobs().isEmpty)
    }

    /// A lock file copied while a writer held it (a backup of a live folder, restored) names an owner no
    /// thread has: no kernel marks it dead, and every writer on the restored database waited the whole busy
    /// timeout and failed "busy", with no other process there. The owner is looked at now, found gone, and
    /// the lock recovered as from a holder that died.
    @Test("a lock file copied while held, its owner gone, is recovered by the next writer")
    func staleCopyIsRecovered() throws {
        let live = try StoreFixture("writer-lock-live")
        defer { live.remove() }
        let restored = try StoreFixture("writer-lock-restored")
        defer { restored.remove() }
        let holder = try Holder(databasePath: live.path)
        let copy = try Data(contentsOf: URL(fileURLWithPath: WriterLock.path(forDatabase: live.path)))
        holder.killAndWait()
        let owner = copy.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: WriterLock.mutexOffset, as: Int32.self) }
        // glibc's owner word: the holder's thread id, no FUTEX_OWNER_DIED (0x40000000) yet.
        try #require(owner & 0x3FFF_FFFF != 0 && owner & 0x4000_0000 == 0, "copied while held: \(owner)")
        // Put in place as a restore would: a new file (the fixture's own store keeps the one it opened).
        try copy.write(to: URL(fileURLWithPath: WriterLock.path(forDatabase: restored.path)), options: .atomic)

        let store = try EventStore(path: restored.path, mode: .readWrite, busyTimeoutMs: 20_000)
        let started = Date()
        let id = try store.submit([uploadSpec()], actor: "cli:test", now: 1_000)[0].id
        let waited = Date().timeIntervalSince(started)
        #expect(waited < 10, "waited \(waited) s")
        #expect(store.writerLockRecoveries == 1)
        #expect(try store.job(id)?.state == .queued)
        // An ordinary lock again.
        _ = try store.submit([uploadSpec()], actor: "cli:test", now: 2_000)
        #expect(store.writerLockRecoveries == 1)
    }

    @Test("a writer removes temporary lock files abandoned by dead processes, and nothing else")
    func removesAbandonedTemporaries() throws {
        let fixture = try StoreFixture("writer-lock-tmp")
        defer { fixture.remove() }
        let lock = WriterLock.path(forDatabase: fixture.path)
        // Above any pid_max: no such process.
        let dead: Int32 = 4_194_305
        let old = Date().addingTimeInterval(-Double(WriterLock.abandonedAfterSeconds) - 60)
        func plant(_ name: String, modified: Date) throws -> String {
            let path = fixture.directory.file(name)
            try Data("partial".utf8).write(to: URL(fileURLWithPath: path))
            try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: path)
            return path
        }
        let abandoned = try plant("jobs.db-writer-lock.\(dead).7.tmp", modified: old)
        let fresh = try plant("jobs.db-writer-lock.\(dead).8.tmp", modified: Date())
        let liveProcess = try plant("jobs.db-writer-lock.\(getppid()).9.tmp", modified: old)
        let otherName = try plant("jobs.db-writer-lock.\(dead).x.tmp", modified: old)
        let otherSuffix = try plant("jobs.db-writer-lock.\(dead).10.tmp.bak", modified: old)
        let linkPath = fixture.directory.file("jobs.db-writer-lock.\(dead).11.tmp")
        try FileManager.default.createSymbolicLink(atPath: linkPath, withDestinationPath: otherName)
        // The lock exists (the fixture's store made it): opening it again sweeps.
        #expect(FileManager.default.fileExists(atPath: lock))
        let store = try EventStore(path: fixture.path, mode: .readWrite)
        _ = try store.submit([uploadSpec()], actor: "cli:test", now: 1_000)
        #expect(!FileManager.default.fileExists(atPath: abandoned), "an old file of a dead process is removed")
        for kept in [fresh, liveProcess, otherName, otherSuffix] {
            #expect(FileManager.default.fileExists(atPath: kept), "\(kept) is kept")
        }
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: linkPath)) == otherName, "a symbolic link is kept")
        // A reader never sweeps.
        let another = try plant("jobs.db-writer-lock.\(dead).12.tmp", modified: old)
        _ = try EventStore(path: fixture.path, mode: .readOnly).jobs()
        #expect(FileManager.default.fileExists(atPath: another))
    }

    @Test("a holder killed with SIGKILL frees the lock: the next writer recovers it and writes")
    func survivesKilledHolder() throws {
        let fixture = try StoreFixture("writer-lock-kill")
        defer { fixture.remove() }
        let holder = try Holder(databasePath: fixture.path)
        holder.killAndWait()
        let store = try EventStore(path: fixture.path, mode: .readWrite, busyTimeoutMs: 5_000)
        let id = try store.submit([uploadSpec()], actor: "cli:test", now: 1_000)[0].id
        #expect(store.writerLockRecoveries == 1)
        #expect(try store.job(id)?.state == .queued)
        // And it is an ordinary lock again: taken and released by the next writes.
        let lock = try #require(try WriterLock.openOrCreate(forDatabase: fixture.path))
        #expect(lock.lock(waitingAtMostNs: 1_000_000_000) == .acquired)
        lock.unlock()
        _ = try store.submit([uploadSpec()], actor: "cli:test", now: 2_000)
        #expect(store.writerLockRecoveries == 1)
        #expect(try store.jobs().count == 2)
    }

    @Test("a wait without a limit (UInt64.max) on a lock another process holds ends when the holder dies")
    func unboundedWaitEndsWithTheHolder() throws {
        let fixture = try StoreFixture("writer-lock-unbounded")
        defer { fixture.remove() }
        let holder = try Holder(databasePath: fixture.path)
        let lock = try #require(try WriterLock.openOrCreate(forDatabase: fixture.path))
        // Killed a moment after the wait begins: the deadline, far in the future, must not overflow.
        let process = holder.process
        let killer = Thread { usleep(300_000); signalIfRunning(process, SIGKILL) }
        killer.start()
        let started = Date()
        #expect(lock.lock(waitingAtMostNs: .max) == .acquired)
        #expect(Date().timeIntervalSince(started) >= 0.25, "it waited for the holder")
        #expect(lock.recoveredFromDeadOwner == 1)
        lock.unlock()
        holder.process.waitForExit()
    }

    @Test("a group commit that waited for the lock writes everything queued meanwhile in one transaction")
    func groupCommitGathersWhileWaiting() async throws {
        let fixture = try StoreFixture("writer-lock-gather")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let ids = try store.submit((0..<10).map { uploadSpec(key: "k\($0)") }, actor: "cli:test", now: 1_000).map(\.id)
        let before = store.groupCommitStats
        let holder = try Holder(databasePath: fixture.path)
        let results = try await withThrowingTaskGroup(of: Result<JobEvent, StoreError>.self) { group in
            // The first append alone: the executor takes it and waits for the lock.
            group.addTask { try await store.appendGrouped(PendingEvent(jobID: ids[0], type: .paused, actor: "cli:test")) }
            let deadline = Date().addingTimeInterval(30)
            try await Task.sleep(nanoseconds: 50_000_000)
            while store.queuedCalls > 0 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            // The others queue up behind it while it waits.
            for id in ids.dropFirst() {
                group.addTask { try await store.appendGrouped(PendingEvent(jobID: id, type: .paused, actor: "cli:test")) }
            }
            while store.queuedCalls < ids.count - 1 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            #expect(store.queuedCalls == ids.count - 1)
            holder.killAndWait()
            var results: [Result<JobEvent, StoreError>] = []
            for try await result in group { results.append(result) }
            return results
        }
        #expect(results.allSatisfy { (try? $0.get())?.type == .paused })
        let after = store.groupCommitStats
        #expect(after.commits - before.commits == 1)
        #expect(after.events - before.events == ids.count)
        #expect(after.eventsGatheredWhileLocking - before.eventsGatheredWhileLocking == ids.count - 1)
        #expect(store.writerLockRecoveries == 1)
        #expect(try store.jobs().allSatisfy { $0.state == .paused })
    }

    @Test("a claim queued while a group commit waited for the lock joins that commit, after all its appends")
    func groupCommitGathersAClaim() async throws {
        let fixture = try StoreFixture("writer-lock-gather-claim")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let paused = try store.submit((0..<6).map { uploadSpec(key: "p\($0)", priority: 5) }, actor: "cli:test", now: 1_000).map(\.id)
        let others = try store.submit((0..<3).map { uploadSpec(key: "o\($0)") }, actor: "cli:test", now: 1_000).map(\.id)
        let before = store.groupCommitStats
        let holder = try Holder(databasePath: fixture.path)
        let request = ClaimRequest(owner: "worker:test", queues: nil, limit: 3, leaseMs: 60_000, now: 2_000)
        let (claimed, appended) = try await withThrowingTaskGroup(of: Void.self) { group in
            let claimedBox = LockedList<[ClaimedJob]>()
            let appendedBox = LockedList<Result<JobEvent, StoreError>>()
            let pause: @Sendable (String) async throws -> Void = { id in
                appendedBox.append(await store.appendGrouped(try PendingEvent(jobID: id, type: .paused, actor: "cli:test")))
            }
            // The first append alone: the executor takes it and waits for the lock.
            group.addTask { try await pause(paused[0]) }
            let deadline = Date().addingTimeInterval(30)
            try await Task.sleep(nanoseconds: 50_000_000)
            while store.queuedCalls > 0 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            // Then appends, a claim, and appends after it, all queued while it waits.
            for id in paused[1..<3] { group.addTask { try await pause(id) } }
            while store.queuedCalls < 2 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            group.addTask { claimedBox.append(try await store.claimGrouped(request)) }
            while store.queuedCalls < 3 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            for id in paused[3...] { group.addTask { try await pause(id) } }
            while store.queuedCalls < 6 && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            #expect(store.queuedCalls == 6)
            holder.killAndWait()
            try await group.waitForAll()
            return (claimedBox.items.first ?? [], appendedBox.items)
        }
        #expect(appended.count == paused.count && appended.allSatisfy { (try? $0.get())?.type == .paused })
        // The claim ran after every append of the commit: the paused jobs, though first in claim order
        // (higher priority), were no longer queued, so it took the three others.
        #expect(Set(claimed.map(\.record.id)) == Set(others))
        let after = store.groupCommitStats
        #expect(after.commits - before.commits == 1)
        #expect(after.events - before.events == paused.count)
        #expect(after.claimsGatheredWhileLocking - before.claimsGatheredWhileLocking == 1)
        // One transaction: the claimed events follow every paused event in the log.
        let pausedSeqs = try paused.flatMap { try store.events(jobID: $0).filter { $0.type == .paused }.compactMap(\.seq) }
        let claimedSeqs = try others.flatMap { try store.events(jobID: $0).filter { $0.type == .claimed }.compactMap(\.seq) }
        #expect(pausedSeqs.count == 6 && claimedSeqs.count == 3)
        #expect((pausedSeqs.max() ?? .max) < (claimedSeqs.min() ?? 0))
    }
}
