@testable import EventStore
import Foundation
import JobModel
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// Real `file://` transfers, of which the first waits at its start until the test opens a gate: the
/// test can then hold the database's write lock before that transfer returns. `StorageBackend` is our
/// own protocol; the real backend does the work.
private final class GatedBackend: StorageBackend {
    private let inner: StorageRouter
    private let started = Mutex(0)
    private let gateOpen = Mutex(false)

    init(_ inner: StorageRouter) { self.inner = inner }

    var transfersStarted: Int { started.withLock { $0 } }

    func openGate() { gateOpen.withLock { $0 = true } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let number = started.withLock { count in
            count += 1
            return count
        }
        if number == 1 {
            // A safety net far beyond the test's own waits, not a limit on a starved test.
            let deadline = ContinuousClock.now + .seconds(600)
            while !gateOpen.withLock({ $0 }), ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(2))
            }
        }
        return try await inner.perform(spec, resumingFrom: resumePoint, control: control, report: report)
    }
}

/// A slot is given to the next job as soon as a transfer returns, not once its outcome is written; and
/// the claim-ahead buffer follows how fast jobs finish.
@Suite("slot turnover", .onTestThreads) struct SlotTurnoverTests {
    /// One slot, one job claimed ahead. The first job's outcome cannot be written (another client
    /// holds the write lock), yet the job claimed ahead starts its transfer as soon as the first
    /// transfer has returned. Without the early hand-over the second transfer waits for the first
    /// job's commit, which waits for the lock, and this test fails.
    @Test func theNextHeldJobStartsWhileAnOutcomeWaitsForItsCommit() async throws {
        let directory = try TemporaryDirectory("slot-turnover")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let ids = try submit("""
            - {kind: upload-data, data: "first", destination: "file://b/first.txt"}
            - {kind: upload-data, data: "second", destination: "file://b/second.txt"}

            """, database: database, directory: directory)
        try #require(ids.count == 2)
        // The pool's commits wait for the lock as long as the test may wait (the default gives up after
        // 30 s, and a run whose outcome cannot be written ends by itself once its lease is gone).
        let store = try EventStore(path: database, mode: .readWrite, busyTimeoutMs: 600_000)
        // The test reads through a connection of its own: the pool's store is busy (its commit waits for
        // the lock) while the test looks.
        let reader = try EventStore(path: database, mode: .readOnly)
        let backend = GatedBackend(SmallJobTests.localRouter(directory))
        let pool = WorkerPool(store: store, backend: backend,
                              configuration: WorkerConfiguration(concurrency: 1, leaseMs: 600_000, drain: true,
                                                                 claimAhead: 1, startedHoldMs: 600_000))
        let run = Task { try await pool.run() }
        // Long waits on purpose (a loaded full run): the test is about order, not time.
        let firstRunning = try await eventually(seconds: 300) { backend.transfersStarted == 1 }
        try #require(firstRunning, "the first transfer never started")
        // One claim took both jobs: the second waits in the buffer for the one slot.
        #expect(try reader.events(jobID: ids[1]).map(\.type) == [.submitted, .claimed])

        let lock = try SQLiteWriteLock(database: database)
        var released = false
        // Released below before the pool is awaited; here only when a check throws first.
        defer { if !released { lock.release() } }
        backend.openGate()
        let secondStarted = try await eventually(seconds: 300) { backend.transfersStarted == 2 }
        // Read while the lock is still held: the first job's outcome is not in the log yet.
        let firstHistory = try reader.events(jobID: ids[0]).map(\.type)
        lock.release()
        released = true
        #expect(secondStarted, "the held job did not start while the first job's outcome waited for the lock")
        #expect(firstHistory == [.submitted, .claimed])

        let summary = try await run.value
        #expect(summary.succeeded == 2, "\(summary)")
        for id in ids {
            // The first transfer was held at the gate for as long as the test took to take the lock (seconds
            // in a loaded full run), so it may have outlasted its first progress interval and written a
            // `progress` event, as any transfer that long does; every other event is exactly as listed.
            let history = try store.events(jobID: id).map(\.type)
            #expect(history.filter { $0 != .progress } == [.submitted, .claimed, .started, .succeeded], "\(id): \(history)")
        }
        #expect(try String(contentsOfFile: directory.file("buckets/b/second.txt"), encoding: .utf8) == "second")
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// The buffer is the configured one while jobs finish slowly and what finished lately when more did,
    /// grown to at most sixteen times the configured one or the ceiling (256), whichever is smaller; a
    /// configured buffer above the ceiling stays as it is; none when none is configured.
    @Test func theClaimAheadBufferFollowsRecentFinishes() {
        #expect(WorkerPool.claimAheadSize(configured: 16, recentFinishes: 0) == 16)
        #expect(WorkerPool.claimAheadSize(configured: 16, recentFinishes: 15) == 16)
        #expect(WorkerPool.claimAheadSize(configured: 16, recentFinishes: 40) == 40)
        #expect(WorkerPool.claimAheadSize(configured: 16, recentFinishes: 200) == 200)
        #expect(WorkerPool.claimAheadSize(configured: 16, recentFinishes: 5_000) == 256)
        #expect(WorkerPool.claimAheadSize(configured: 4, recentFinishes: 5_000) == 64)
        #expect(WorkerPool.claimAheadSize(configured: 1, recentFinishes: 5_000) == 16)
        #expect(WorkerPool.claimAheadSize(configured: 64, recentFinishes: 5_000) == 256)
        #expect(WorkerPool.claimAheadSize(configured: 300, recentFinishes: 5_000) == 300)
        #expect(WorkerPool.claimAheadSize(configured: 0, recentFinishes: 5_000) == 0)
    }

    /// Finishes count in windows of `claimAheadHorizonMs`: the current window's count, or the previous
    /// one's while it is larger and the current window is young; nothing after two quiet windows.
    @Test func finishesAreCountedOverTheLastTwoWindows() {
        let window = WorkerPool.claimAheadHorizonMs
        var counter = WorkerPool.FinishCounter()
        let start: Int64 = 1_000_000
        #expect(counter.recent(now: start) == 0)
        for k in 0..<30 { counter.note(now: start + Int64(k)) }
        #expect(counter.recent(now: start + 50) == 30)
        // The next window begins with 5: the previous window's 30 still counts while it is the larger.
        for k in 0..<5 { counter.note(now: start + window + Int64(k)) }
        #expect(counter.recent(now: start + window + 10) == 30)
        // The window that had 5 has ended: only its own count remains.
        #expect(counter.recent(now: start + 2 * window + 10) == 5)
        // Two quiet windows: nothing finished lately.
        #expect(counter.recent(now: start + 3 * window + 10) == 0)
        // A burst after a long pause starts afresh.
        for k in 0..<7 { counter.note(now: start + 10 * window + Int64(k)) }
        #expect(counter.recent(now: start + 10 * window + 20) == 7)
    }
}
