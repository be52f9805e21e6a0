import Foundation
import JobModel
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// A draining worker with nothing of its own to run waits for the runs of other workers on the same log,
/// and ends soon after the last of them — not a poll interval later.
@Suite("drain waits", .onTestThreads) struct DrainWaitTests {
    /// 1 ms on the first wait, doubling while the log stays unchanged, 2 ms after a change during the first
    /// 50 poll intervals of the wait and doubling after them, never above the poll interval (nor below a
    /// millisecond).
    @Test func theWaitStartsShortDoublesWhileNothingChangesAndIsShortAgainAfterAChange() {
        var waits: [Int64] = []
        var wait: Int64?
        for _ in 0..<7 {
            wait = WorkerPool.drainWait(after: wait, changed: false, waitedMs: 0, pollIntervalMs: 20)
            waits.append(wait!)
        }
        #expect(waits == [1, 2, 4, 8, 16, 20, 20])
        #expect(WorkerPool.drainWait(after: 20, changed: true, waitedMs: 500, pollIntervalMs: 20) == 2)
        #expect(WorkerPool.drainWait(after: 4, changed: true, waitedMs: 999, pollIntervalMs: 20) == 2)
        // A drain that has waited 50 poll intervals looks no more often than the poll interval says, however
        // busy the log: it may wait for ever beside workers that never run out of jobs.
        #expect(WorkerPool.drainWait(after: 20, changed: true, waitedMs: 1_000, pollIntervalMs: 20) == 20)
        #expect(WorkerPool.drainWait(after: 4, changed: true, waitedMs: 1_000, pollIntervalMs: 20) == 8)
        #expect(WorkerPool.drainWait(after: nil, changed: true, waitedMs: 0, pollIntervalMs: 20) == 1)
        // However long the poll interval (the bound is computed without overflowing).
        #expect(WorkerPool.drainWait(after: 4, changed: true, waitedMs: .max, pollIntervalMs: .max) == 2)
        #expect(WorkerPool.drainWait(after: .max / 2, changed: false, waitedMs: 0, pollIntervalMs: .max) == .max)
        #expect(WorkerPool.drainWait(after: .max, changed: false, waitedMs: 0, pollIntervalMs: .max) == .max)
        #expect(WorkerPool.drainWait(after: .max / 4, changed: false, waitedMs: 0, pollIntervalMs: .max) == .max / 4 * 2)
        // A poll interval below the short waits caps them.
        #expect(WorkerPool.drainWait(after: nil, changed: false, waitedMs: 0, pollIntervalMs: 1) == 1)
        #expect(WorkerPool.drainWait(after: 1, changed: true, waitedMs: 0, pollIntervalMs: 1) == 1)
        #expect(WorkerPool.drainWait(after: 1, changed: false, waitedMs: 0, pollIntervalMs: 1) == 1)
    }

    /// Worker B has claimed all 30 jobs of the queue; their transfers are let go one every 20 ms. Worker A
    /// then drains the same queue with a 300 s poll interval: nothing is left to claim, but B's runs hold
    /// A's drain (one of them may fail and come back), so A must not end before B's last outcome; and B's
    /// commits keep A looking every few milliseconds, so A ends within moments of it. Looking only once
    /// per poll interval, A looked at its start and next five minutes later, long after B had finished. (The
    /// bounds are wide: in the full, parallel test run a task can wait seconds for a thread.)
    @Test(arguments: WorkerEngine.allCases)
    func aDrainWaitingForAnotherWorkersRunsEndsSoonAfterTheLast(engine: WorkerEngine) async throws {
        let (directory, database, jobs) = try SmallJobTests.tinyJobLog("drain-wait", engine, count: 30)
        defer { directory.remove() }
        let backend = StaggeredBackend(SmallJobTests.localRouter(directory))
        let storeB = try SmallJobTests.store(engine, database)
        let storeA = try SmallJobTests.store(engine, database)
        let poolB = WorkerPool(store: storeB, backend: backend,
                               configuration: WorkerConfiguration(owner: "worker-b", concurrency: jobs.count, leaseMs: 3_600_000, claimAhead: 0))
        let poolA = WorkerPool(store: storeA, backend: backend,
                               configuration: WorkerConfiguration(owner: "worker-a", concurrency: 2, leaseMs: 3_600_000, drain: true,
                                                                  pollIntervalMs: 300_000))
        let runB = Task { try await poolB.run() }
        defer { poolB.beginShutdown() }
        let allRunning = try await eventually(seconds: 600) { backend.transfersStarted == jobs.count }
        try #require(allRunning, "worker B did not start every transfer: \(backend.transfersStarted)")

        let runA = Task { () async throws -> (WorkerSummary, Int64) in
            let summary = try await poolA.run()
            return (summary, Clock.nowMs())
        }
        for _ in jobs {
            try await Task.sleep(for: .milliseconds(20))
            backend.releaseOne()
        }
        let (summaryA, endedAt) = try await runA.value

        #expect(summaryA.claimed == 0, "\(summaryA)")
        let outcomes = try jobs.map { job in try #require(try storeA.events(jobID: job.id).last) }
        #expect(outcomes.allSatisfy { $0.type == .succeeded }, "A ended while B still had runs")
        let lastAt = try #require(outcomes.map(\.atMs).max())
        #expect(endedAt >= lastAt, "A ended at \(endedAt), before B's last outcome at \(lastAt)")
        // Half the poll interval: a drain that looked once per poll interval ends about five minutes later.
        #expect(endedAt - lastAt < 150_000, "A ended \(endedAt - lastAt) ms after B's last outcome")

        poolB.beginShutdown()
        let summaryB = try await runB.value
        #expect(summaryB.succeeded == jobs.count, "\(summaryB)")
    }
}

/// Real transfers that each wait until the test lets them go, in the order they started.
private final class StaggeredBackend: StorageBackend {
    private let inner: StorageRouter
    private let started = Mutex(0)
    private let released = Mutex(0)

    init(_ inner: StorageRouter) { self.inner = inner }

    var transfersStarted: Int { started.withLock { $0 } }

    func releaseOne() { released.withLock { $0 += 1 } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let number = started.withLock { count in
            count += 1
            return count
        }
        // A safety net far beyond the test's own waits, not a limit on a starved test.
        let deadline = ContinuousClock.now + .seconds(600)
        while released.withLock({ $0 }) < number, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
        return try await inner.perform(spec, resumingFrom: resumePoint, control: control, report: report)
    }
}
