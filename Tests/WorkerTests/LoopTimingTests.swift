import Testing
@testable import Worker
import TestSupport

/// When the pool's periodic work (heartbeats, rescue, control reads, the log-changed question) is due.
@Suite("the pool loop's timing", .onTestThreads)
struct LoopTimingTests {
    @Test("due once the interval has passed, not before, and at once after the clock stepped back")
    func isDue() {
        #expect(!WorkerPool.isDue(since: 1_000, every: 100, now: 1_000))
        #expect(!WorkerPool.isDue(since: 1_000, every: 100, now: 1_099))
        #expect(WorkerPool.isDue(since: 1_000, every: 100, now: 1_100))
        #expect(WorkerPool.isDue(since: 1_000, every: 100, now: 50_000))
        // A clock set back an hour: heartbeats must not wait an hour for it to catch up.
        #expect(WorkerPool.isDue(since: 3_600_000, every: 10_000, now: 1_000))
        #expect(WorkerPool.isDue(since: 1_000, every: 100, now: 999))
    }
}
