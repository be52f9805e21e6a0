import Foundation
import JobModel
import Synchronization
import Testing
import TestSupport
@testable import EventStore
@testable import StorePort
#if canImport(Glibc)
import Glibc
#endif

/// The store's one executor: every use of the connection on one thread, group commit, and a close that
/// is done when the store is released.
@Suite("The store's executor", .onTestThreads)
struct StoreExecutorTests {
    @Test("every use of the connection runs on one thread, whichever thread asks")
    func oneThread() async throws {
        let fixture = try StoreFixture("store-executor-thread")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let here = pthread_self()
        let first = try store.withConnection { _ in pthread_self() }
        let others = try await withThrowingTaskGroup(of: pthread_t.self) { group in
            for _ in 0..<4 {
                group.addTask { try store.withConnection { _ in pthread_self() } }
            }
            return try await group.reduce(into: [pthread_t]()) { $0.append($1) }
        }
        #expect(pthread_equal(first, here) == 0)
        #expect(others.allSatisfy { pthread_equal($0, first) != 0 })
    }

    @Test("a store method used inside run() runs on the executor at once instead of waiting for itself")
    func runReenters() async throws {
        let fixture = try StoreFixture("store-executor-reenter")
        defer { fixture.remove() }
        let id = try fixture.submit()
        let state = try await fixture.store.run { store in try store.job(id)?.state }
        #expect(state == .queued)
        let claimed = try await fixture.store.run { store in
            try store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 1_000, now: 2_000).map(\.record.id)
        }
        #expect(claimed == [id])
    }

    @Test("appends queued while the executor is busy are written in one group commit")
    func groupCommit() async throws {
        let fixture = try StoreFixture("store-executor-group")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let claims = try (0..<12).map { _ in try fixture.running() }
        // Hold the executor until every append is queued behind the call.
        let (entered, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let held = Task {
            try await store.run { _ in
                entered.signal()
                release.wait()
            }
        }
        // Wait (off the cooperative pool) until the executor is inside the call.
        await offPool { entered.wait() }
        let before = store.groupCommitStats
        let appends = Task {
            try await withThrowingTaskGroup(of: Result<JobEvent, StoreError>.self) { group in
                for claim in claims {
                    group.addTask {
                        await store.appendGrouped(PendingEvent(jobID: claim.record.id, actor: workerName,
                                                               leaseToken: claim.token,
                                                               payload: .progress(TransferProgress(bytesDone: 1))))
                    }
                }
                return try await group.reduce(into: [Result<JobEvent, StoreError>]()) { $0.append($1) }
            }
        }
        while store.queuedCalls < claims.count { await Task.yield() }
        release.signal()
        try await held.value
        let outcomes = try await appends.value
        #expect(outcomes.count == claims.count && outcomes.allSatisfy { (try? $0.get()) != nil })
        let after = store.groupCommitStats
        #expect(after.commits - before.commits == 1 && after.events - before.events == claims.count, "\(before) → \(after)")
        // The one commit of 12 events is counted at or below 16 events, not at or below 8.
        #expect(after.commits(holdingAtMost: 16) - before.commits(holdingAtMost: 16) == 1)
        #expect(after.commits(holdingAtMost: 8) == before.commits(holdingAtMost: 8))
    }

    @Test("appends queued while another process holds the write lock join the group commit that waits for it")
    func gathersWhileLockBusy() async throws {
        let fixture = try StoreFixture("store-executor-busy")
        defer { fixture.remove() }
        let claims = try (0..<8).map { _ in try fixture.running() }
        // A busy timeout far beyond the test's own bound: the appends below are queued by tasks on the
        // test process's cooperative pool, which other tests' synchronous waits can stall for a while.
        let store = try EventStore(path: fixture.path, mode: .readWrite, busyTimeoutMs: 900_000)
        // Another connection holds the write lock, as another worker process's transaction would.
        let holder = try SQLiteConnection(path: fixture.path, readOnly: false, create: false)
        try holder.setBusyTimeout(milliseconds: 5_000)
        try holder.run("BEGIN IMMEDIATE")
        let before = store.groupCommitStats
        func append(_ claim: ClaimedJob) -> Task<Result<JobEvent, StoreError>, Never> {
            Task {
                await store.appendGrouped(PendingEvent(jobID: claim.record.id, actor: workerName, leaseToken: claim.token,
                                                       payload: .progress(TransferProgress(bytesDone: 1))))
            }
        }
        let deadline = ContinuousClock.now + .seconds(600)
        let first = append(claims[0])
        // The executor took the first append and retries against the held lock...
        while store.groupCommitStats.busyRetries == before.busyRetries && ContinuousClock.now < deadline { await Task.yield() }
        let rest = claims.dropFirst().map(append)
        // ...and each retry adds the appends queued meanwhile: after its busy answer, or once it holds
        // the writer lock between jobctl processes again (the holder here is no jobctl store, so that
        // lock is free and the gathering is counted under either name, depending on when each arrives).
        func gathered(_ stats: GroupCommitStats) -> Int { stats.eventsGatheredWhileBusy + stats.eventsGatheredWhileLocking }
        while gathered(store.groupCommitStats) - gathered(before) < rest.count && ContinuousClock.now < deadline {
            await Task.yield()
        }
        let waiting = store.groupCommitStats
        try holder.run("COMMIT")
        var outcomes: [Result<JobEvent, StoreError>] = []
        for task in [first] + rest { outcomes.append(await task.value) }

        #expect(gathered(waiting) - gathered(before) == rest.count, "\(waiting)")
        #expect(waiting.commits == before.commits, "nothing is written while the lock is held elsewhere")
        #expect(outcomes.allSatisfy { (try? $0.get())?.version == 3 }, "\(outcomes)")
        let after = store.groupCommitStats
        #expect(after.commits - before.commits == 1 && after.events - before.events == claims.count, "\(before) → \(after)")
        for claim in claims {
            #expect(try store.events(jobID: claim.record.id).map(\.type) == [.submitted, .claimed, .progress])
        }
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("a group commit that never gets the write lock fails busy once the busy timeout has passed, writing nothing")
    func busyRetriesEnd() async throws {
        let fixture = try StoreFixture("store-executor-busy-timeout")
        defer { fixture.remove() }
        let claim = try fixture.running()
        let store = try EventStore(path: fixture.path, mode: .readWrite, busyTimeoutMs: 200)
        let holder = try SQLiteConnection(path: fixture.path, readOnly: false, create: false)
        try holder.setBusyTimeout(milliseconds: 5_000)
        try holder.run("BEGIN IMMEDIATE")
        let outcome = await store.appendGrouped(PendingEvent(jobID: claim.record.id, actor: workerName, leaseToken: claim.token,
                                                             payload: .progress(TransferProgress(bytesDone: 1))))
        try holder.run("ROLLBACK")
        guard case .failure(.busy) = outcome else {
            Issue.record("expected busy, got \(outcome)")
            return
        }
        #expect(store.groupCommitStats.busyRetries >= 1)
        #expect(store.groupCommitStats.commits == 0)
        #expect(try store.events(jobID: claim.record.id).map(\.type) == [.submitted, .claimed])
    }

    @Test("releasing the store ends its executor and closes the database before release returns")
    func closesOnRelease() throws {
        let directory = try TemporaryDirectory("store-executor-close")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        do {
            let store = try EventStore(path: path)
            _ = try store.submit([uploadSpec()], actor: "cli:test", now: 1_000)
            #expect(FileManager.default.fileExists(atPath: path + "-wal"))
        }
        // The last connection closed, checkpointed its WAL into the main file and removed the -wal file.
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
    }

    @Test("the executor's thread and its sync thread carry their names in the system")
    func threadsAreNamed() throws {
        let directory = try TemporaryDirectory("store-executor-names")
        defer { directory.remove() }
        let store = try EventStore(path: directory.file("jobs.db"))
        _ = try store.submit([uploadSpec()], actor: "cli:test", now: 1_000)
        let names = (try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")).compactMap { task in
            (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .newlines)
        }
        #expect(names.contains("jobctl-store"), "\(names)")
        #expect(names.contains("jobctl-store-s"), "\(names)")
        #expect(StoreExecutor.syncThreadName(of: "jobctl-pg-store") == "jobctl-pg-sto-s")
        // A name whose 13th byte is inside a character loses that character, not half of it.
        #expect(StoreExecutor.syncThreadName(of: "jobctl-store\u{E9}") == "jobctl-store-s")
        withExtendedLifetime(store) {}
    }

    /// Counts its deinitialisations.
    final class Tracked: Sendable {
        static let released = Atomic<Int>(0)
        let number = 7
        deinit { Self.released.add(1, ordering: .sequentiallyConsistent) }
    }

    /// Runs a call that captures a `Tracked`; when it returns, only the store's executor could still hold it.
    static func callCapturingTracked(_ store: any JobStore) async throws -> Int {
        let tracked = Tracked()
        return try await store.run { _ in tracked.number }
    }

    @Test("a call lets go of what it captured before its caller goes on, while later calls of its batch still run")
    func callLetsGoBeforeItsCallerResumes() async throws {
        let fixture = try StoreFixture("store-executor-release")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        // The executor is held while the two calls below are queued, so it takes them as one batch.
        let holder = Thread { _ = try? store.withConnection { _ in usleep(300_000) } }
        holder.start()
        usleep(50_000)
        let before = Tracked.released.load(ordering: .sequentiallyConsistent)
        let first = Task { try await Self.callCapturingTracked(store) }
        usleep(30_000)
        let slow = Task { try await store.run { _ in _ = usleep(400_000) } }
        #expect(try await first.value == 7)
        // The batch still runs the slow call: a call's body kept until then (with the store it captured,
        // `EventStore.run` passes itself) let a worker's process exit before its database was closed.
        #expect(Tracked.released.load(ordering: .sequentiallyConsistent) == before + 1)
        try await slow.value
    }
}

