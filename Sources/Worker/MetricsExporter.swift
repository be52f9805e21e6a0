import Foundation
import JobModel
import StorePort
import Synchronization

/// What `GET /metrics` answers: the worker's own metrics plus job counts by queue and state read from
/// the store (`queueStateCounts`, not the whole `stats`, whose outcome windows read the last hour's
/// events: on a busy log 0.3–0.7 s a scrape on the store's executor, a drain of 200,000 jobs scraped
/// every 2 s took 17.2 s instead of 12.2), cached for `cacheMs` so that frequent scrapes cannot hammer
/// the database.
public final class MetricsExporter: Sendable {
    private struct Cache: Sendable {
        var jobs: [StoreStats.QueueStateCount]?
        var readAtMs: Int64?
    }

    public let metrics: WorkerMetrics
    private let store: any JobStore
    private let cacheMs: Int64
    private let cache = Mutex(Cache())

    public init(metrics: WorkerMetrics, store: any JobStore, cacheMs: Int64 = 1_500) {
        self.metrics = metrics
        self.store = store
        self.cacheMs = cacheMs
    }

    /// The exposition text. Called from the metrics server's thread (never a thread of Swift's
    /// cooperative pool), so waiting there for the store's executor blocks no task.
    public func render() -> String {
        let now = Clock.nowMs()
        let cached = cache.withLock { cache -> [StoreStats.QueueStateCount]?? in
            guard let readAt = cache.readAtMs, now >= readAt, now - readAt < cacheMs else { return .none }
            return .some(cache.jobs)
        }
        let jobs: [StoreStats.QueueStateCount]?
        if let cached {
            jobs = cached
        } else {
            jobs = readJobCounts(now: now)
            cache.withLock { $0 = Cache(jobs: jobs, readAtMs: now) }
        }
        return metrics.exposition(groupCommits: store.groupCommitStats, jobs: jobs)
    }

    /// Job counts by queue and state; nil when the store cannot tell (then `jobctl_jobs` has no samples).
    private func readJobCounts(now: Int64) -> [StoreStats.QueueStateCount]? {
        let store = self.store
        let box = Mutex<[StoreStats.QueueStateCount]??>(nil)
        let done = DispatchSemaphore(value: 0)
        Task(priority: WorkPriority.task) {
            let counts = try? await store.run { store in try store.queueStateCounts() }
            box.withLock { $0 = .some(counts) }
            done.signal()
        }
        done.wait()
        return box.withLock { $0 } ?? nil
    }
}
