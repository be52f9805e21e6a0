import Dispatch
import Foundation
import JobModel
import StorePort
import Synchronization

/// What `GET /metrics` answers: the worker's own metrics plus job counts by queue and state read from
/// the store (`queueStateCounts`, not the whole `stats`, whose outcome windows read the last hour's
/// events: on a busy log 0.3–0.7 s a scrape on the store's executor, a drain of 200,000 jobs scraped
/// every 2 s took 17.2 s instead of 12.2), cached for `cacheMs` so that frequent scrapes cannot hammer
/// the database.
///
/// A scrape waits for the store at most `storeWaitMs`. A store that does not answer (another process
/// holding SQLite's write lock while this worker's executor waits to commit, a PostgreSQL server that
/// stopped answering) used to hold every scrape until it did, so the monitoring lost the worker exactly
/// when it had something to show; now the scrape answers with the counts last read, and
/// `jobctl_store_up 0` and `jobctl_jobs_read_time_seconds` say how old they are. One read is asked
/// for at a time: scrapes during a stall do not queue more work behind it.
public final class MetricsExporter: Sendable {
    /// One read of the counts, started by a scrape; `done` is signalled once it has ended.
    private final class Read: Sendable {
        let startedAtMs: Int64
        let done = DispatchSemaphore(value: 0)
        init(startedAtMs: Int64) { self.startedAtMs = startedAtMs }
    }

    private struct State: Sendable {
        /// The counts of the last read that answered, and when it began (wall clock, ms).
        var counts: [StoreStats.QueueStateCount]?
        var countsReadAtMs: Int64?
        /// When the last read that ended began, and whether it answered.
        var checkedAtMs: Int64?
        var lastAnswered = false
        var reading: Read?
    }

    public let metrics: WorkerMetrics
    private let store: any JobStore
    private let cacheMs: Int64
    private let storeWaitMs: Int64
    private let state = Mutex(State())

    public init(metrics: WorkerMetrics, store: any JobStore, cacheMs: Int64 = 1_500, storeWaitMs: Int64 = 1_000) {
        self.metrics = metrics
        self.store = store
        self.cacheMs = cacheMs
        self.storeWaitMs = max(0, storeWaitMs)
    }

    /// The exposition text. Called from the metrics server's thread (never a thread of Swift's
    /// cooperative pool), so waiting there for the store's executor blocks no task.
    public func render() -> String {
        metrics.exposition(groupCommits: store.groupCommitStats, store: storeReading())
    }

    /// Whether the store answered a read of the job counts in time (the last 1.5 s's read, or one made now
    /// and waited for at most `storeWaitMs`): `jobctl_store_up`, and `/readyz`'s store condition.
    public func storeUp() -> Bool { storeReading().up }

    private func storeReading() -> StoreReading {
        let now = Clock.nowMs()
        let pending: Read? = state.withLock { state in
            if let checked = state.checkedAtMs, now >= checked, now - checked < cacheMs { return nil }
            if let read = state.reading { return read }
            let read = Read(startedAtMs: now)
            state.reading = read
            startReading(read)
            return read
        }
        var answered = pending == nil
        if let pending {
            // Up to `storeWaitMs` from the read's start: during a long stall, later scrapes do not wait
            // again. The semaphore is a latch: whoever passes signals it again for the next waiter.
            let waitMs = max(0, pending.startedAtMs + storeWaitMs - now)
            if pending.done.wait(timeout: .now() + .milliseconds(Int(waitMs))) == .success {
                pending.done.signal()
                answered = true
            }
        }
        return state.withLock { state in
            StoreReading(counts: state.counts, readAtMs: state.countsReadAtMs, up: answered && state.lastAnswered)
        }
    }

    /// Reads the counts on a task of its own; the result lands in `state` whenever the store answers.
    private func startReading(_ read: Read) {
        let store = self.store
        Task(priority: WorkPriority.task) {
            let counts = try? await store.run { store in try store.queueStateCounts() }
            self.state.withLock { state in
                if let counts {
                    state.counts = counts
                    state.countsReadAtMs = read.startedAtMs
                }
                state.lastAnswered = counts != nil
                state.checkedAtMs = read.startedAtMs
                state.reading = nil
            }
            read.done.signal()
        }
    }
}

/// The job counts a scrape shows: the last ones the store answered (nil: none yet), when that read
/// began, and whether the store answered this scrape in time (from the cache counts).
public struct StoreReading: Sendable {
    public var counts: [StoreStats.QueueStateCount]?
    public var readAtMs: Int64?
    public var up: Bool

    public init(counts: [StoreStats.QueueStateCount]?, readAtMs: Int64?, up: Bool) {
        self.counts = counts
        self.readAtMs = readAtMs
        self.up = up
    }
}
