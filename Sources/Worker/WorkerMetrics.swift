import Foundation
import JobLifecycle
import JobModel
import StorePort
import Synchronization
import Tasks

/// The worker's Prometheus metrics: counters and histograms kept in the process, updated beside the
/// `WorkerLog` call for the same transition, and rendered in the text exposition format 0.0.4.
///
/// Counters start at zero when the worker starts (Prometheus' `rate()` handles restarts). Job counts by
/// queue and state are not counted here but read from the store when scraped (see `MetricsExporter`).
public final class WorkerMetrics: Sendable {
    /// How a run the pool started ended: the `outcome` label.
    public enum Outcome: String, Sendable, CaseIterable {
        case succeeded, failed
        case retryScheduled = "retry_scheduled"
        case paused, cancelled, released, abandoned
    }

    /// Upper bounds (seconds) of the transfer duration histogram's buckets.
    public static let durationBuckets: [Double] = [0.1, 0.5, 1, 5, 15, 60, 300, 1_800, 7_200]
    /// Upper bounds (seconds) of the store commit latency histogram's buckets.
    public static let commitBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]
    /// Upper bounds (events) of the events-per-commit histogram's buckets: powers of two, as the store
    /// counts commits by power-of-two size class (`GroupCommitStats`).
    public static let eventsPerCommitBuckets: [Int] = [1, 2, 4, 8, 16, 32, 64, 128]

    private struct Counters: Sendable {
        var transfers: [OutcomeKey: Int] = [:]
        var bytes: [OutcomeKey: Int64] = [:]
        var durations: [JobKind: Histogram] = [:]
        var retries: [RetryKey: Int] = [:]
        var leaseLosses: [JobKind: Int] = [:]
        var rescues = 0
        var commitLatency = Histogram(bounds: WorkerMetrics.commitBuckets)
    }

    private struct OutcomeKey: Hashable, Sendable {
        let kind: JobKind
        let outcome: Outcome
    }

    private struct RetryKey: Hashable, Sendable {
        let kind: JobKind
        let error: String
    }

    private let counters = Mutex(Counters())
    /// Whether the store takes the worker's writes, as they found it (`jobctl_store_writable`, `/readyz`).
    public let storeWrites: StoreWrites

    public init(storeWrites: StoreWrites = StoreWrites()) {
        self.storeWrites = storeWrites
    }

    // MARK: - Updates (beside the log calls)

    /// A run ended: counts it by kind and outcome, with its bytes and its duration.
    func finished(kind: JobKind, outcome: TaskRunOutcome, startedAtMs: Int64, now: Int64) {
        let seconds = Double(max(0, now - startedAtMs)) / 1000
        let (label, bytes): (Outcome, Int64) = switch outcome {
        case .succeeded(let result): (.succeeded, kind.movesNoBytes ? 0 : result.size ?? result.object?.knownSize ?? 0)
        case .failed: (.failed, 0)
        case .retryScheduled: (.retryScheduled, 0)
        case .paused(let point): (.paused, point?.bytesDone ?? 0)
        case .cancelled: (.cancelled, 0)
        case .released(let point): (.released, point?.bytesDone ?? 0)
        case .abandoned: (.abandoned, 0)
        }
        let key = OutcomeKey(kind: kind, outcome: label)
        counters.withLock { counters in
            counters.transfers[key, default: 0] += 1
            counters.bytes[key, default: 0] += bytes
            // An abandoned run never transferred (its task could not be built): no duration to observe.
            if label != .abandoned {
                counters.durations[kind, default: Histogram(bounds: Self.durationBuckets)].observe(seconds)
            }
            if case .retryScheduled(_, let error) = outcome {
                counters.retries[RetryKey(kind: kind, error: error.code.name), default: 0] += 1
            }
        }
    }

    /// The worker learnt (once per run) that it no longer holds a job's lease.
    func leaseLost(kind: JobKind) {
        counters.withLock { $0.leaseLosses[kind, default: 0] += 1 }
    }

    /// This worker's rescue pass requeued `count` jobs whose leases (another worker's) had expired.
    func rescued(_ count: Int) {
        guard count > 0 else { return }
        counters.withLock { $0.rescues += count }
    }

    /// An event of a task took `elapsedMs` to be committed (group commit included).
    func commitTook(_ elapsedMs: Int64) {
        counters.withLock { $0.commitLatency.observe(Double(max(0, elapsedMs)) / 1000) }
    }

    // MARK: - Exposition

    /// The counters and histograms in the text exposition format, followed by `groupCommits` (the
    /// store's commit and event totals, and its events per commit) and `store` (job counts by queue and
    /// state as last read, nil when none were; when; and whether the store answered in time).
    public func exposition(groupCommits: GroupCommitStats, store: StoreReading) -> String {
        let counters = counters.withLock { $0 }
        var text = MetricsText()

        text.family("jobctl_store_up", type: "gauge",
                    help: "1 when the store answered this scrape's job counts in time (or they were read in the last 1.5 s), 0 when it failed or did not answer within a second.")
        text.sample("jobctl_store_up", [], store.up ? 1 : 0)
        text.family("jobctl_store_writable", type: "gauge",
                    help: "1 while the store takes this worker's writes, 0 while they have kept failing (none succeeding) for \(StoreWrites.refusingAfterMs / 1_000) s or more: a full disk, a read-only database.")
        text.sample("jobctl_store_writable", [], storeWrites.refusal() == nil ? 1 : 0)
        text.family("jobctl_store_write_failures_total", type: "counter",
                    help: "Writes of this worker (claims, job events, lease renewals, rescues) the store failed, retries included, by reason.")
        let failures = storeWrites.failureCounts
        for reason in StoreWriteFailure.allCases {
            text.sample("jobctl_store_write_failures_total", [("reason", reason.rawValue)], Double(failures[reason] ?? 0))
        }
        text.family("jobctl_jobs_read_time_seconds", type: "gauge",
                    help: "When the jobctl_jobs counts shown were read from the store, in seconds since the epoch (no sample before a first read answered).")
        if let readAtMs = store.readAtMs { text.sample("jobctl_jobs_read_time_seconds", [], Double(readAtMs) / 1000) }
        text.family("jobctl_jobs", type: "gauge", help: "Jobs in the event log by queue and state, as last read from the store (cached 1.5 s; see jobctl_jobs_read_time_seconds).")
        if let jobs = store.counts {
            // The store leaves out empty pairs; every state of a queue it names is shown, zeros included.
            var byQueue: [String: [JobState: Int]] = [:]
            for entry in jobs { byQueue[entry.queue, default: [:]][entry.state, default: 0] += entry.count }
            for queue in byQueue.keys.sorted() {
                for state in JobState.allCases {
                    text.sample("jobctl_jobs", [("queue", queue), ("state", state.rawValue)], Double(byQueue[queue]?[state] ?? 0))
                }
            }
        }

        text.family("jobctl_transfers_total", type: "counter", help: "Transfer runs this worker finished, by job kind and outcome.")
        for kind in JobKind.allCases {
            for outcome in Outcome.allCases {
                text.sample("jobctl_transfers_total", [("kind", kind.rawValue), ("outcome", outcome.rawValue)],
                            Double(counters.transfers[OutcomeKey(kind: kind, outcome: outcome)] ?? 0))
            }
        }
        text.family("jobctl_transfer_bytes_total", type: "counter",
                    help: "Bytes of finished runs by job kind and outcome: the object's size on success, the resume point when paused or released.")
        for kind in JobKind.allCases {
            for outcome in Outcome.allCases {
                text.sample("jobctl_transfer_bytes_total", [("kind", kind.rawValue), ("outcome", outcome.rawValue)],
                            Double(counters.bytes[OutcomeKey(kind: kind, outcome: outcome)] ?? 0))
            }
        }

        text.family("jobctl_transfer_duration_seconds", type: "histogram", help: "How long finished runs took from claim to outcome, by job kind.")
        for kind in JobKind.allCases {
            let histogram = counters.durations[kind] ?? Histogram(bounds: Self.durationBuckets)
            text.histogram("jobctl_transfer_duration_seconds", [("kind", kind.rawValue)], histogram)
        }

        text.family("jobctl_retries_total", type: "counter", help: "Retries scheduled after a failed attempt, by job kind and error code.")
        for key in counters.retries.keys.sorted(by: { ($0.kind.rawValue, $0.error) < ($1.kind.rawValue, $1.error) }) {
            text.sample("jobctl_retries_total", [("kind", key.kind.rawValue), ("error", key.error)], Double(counters.retries[key] ?? 0))
        }

        text.family("jobctl_lease_losses_total", type: "counter", help: "Runs stopped because this worker lost the job's lease, by job kind.")
        for kind in JobKind.allCases {
            text.sample("jobctl_lease_losses_total", [("kind", kind.rawValue)], Double(counters.leaseLosses[kind] ?? 0))
        }
        text.family("jobctl_lease_rescues_total", type: "counter", help: "Jobs with an expired lease that this worker put back in the queue.")
        text.sample("jobctl_lease_rescues_total", [], Double(counters.rescues))

        text.family("jobctl_store_commit_seconds", type: "histogram", help: "Time from handing a task's event to the store to its durable commit (group commit included).")
        text.histogram("jobctl_store_commit_seconds", [], counters.commitLatency)
        text.family("jobctl_store_group_commits_total", type: "counter", help: "Group commits the store made for this worker.")
        text.sample("jobctl_store_group_commits_total", [], Double(groupCommits.commits))
        text.family("jobctl_store_events_written_total", type: "counter",
                    help: "Events those group commits held; divided by jobctl_store_group_commits_total, the events per commit.")
        text.sample("jobctl_store_events_written_total", [], Double(groupCommits.events))
        text.family("jobctl_store_events_per_commit", type: "histogram",
                    help: "Events each group commit of the store held: its count is jobctl_store_group_commits_total, its sum jobctl_store_events_written_total.")
        text.histogram("jobctl_store_events_per_commit", [], Histogram(eventsPerCommit: groupCommits))
        return text.output
    }
}

// MARK: - Histogram

/// A cumulative histogram: counts per upper bound, plus the total count and sum.
struct Histogram: Sendable {
    let bounds: [Double]
    /// Non-cumulative counts, one per bound.
    private(set) var counts: [Int]
    private(set) var count = 0
    private(set) var sum = 0.0

    init(bounds: [Double]) {
        self.bounds = bounds
        counts = Array(repeating: 0, count: bounds.count)
    }

    /// The store's events-per-commit distribution, read from its power-of-two size classes.
    init(eventsPerCommit stats: GroupCommitStats) {
        self.init(bounds: WorkerMetrics.eventsPerCommitBuckets.map(Double.init))
        var below = 0
        for (index, bound) in WorkerMetrics.eventsPerCommitBuckets.enumerated() {
            let atOrBelow = stats.commits(holdingAtMost: bound)
            counts[index] = atOrBelow - below
            below = atOrBelow
        }
        count = stats.commits
        sum = Double(stats.events)
    }

    mutating func observe(_ value: Double) {
        count += 1
        sum += value
        if let index = bounds.firstIndex(where: { value <= $0 }) { counts[index] += 1 }
    }

    /// (upper bound, observations at or below it), in bound order: never decreasing.
    var cumulative: [(Double, Int)] {
        var total = 0
        return zip(bounds, counts).map { bound, count in
            total += count
            return (bound, total)
        }
    }
}

// MARK: - Text format

/// Writes the Prometheus text exposition format 0.0.4: `# HELP` and `# TYPE` once per family, then
/// its samples, label values escaped.
struct MetricsText {
    private(set) var output = ""

    mutating func family(_ name: String, type: String, help: String) {
        output += "# HELP \(name) \(help.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n"))\n"
        output += "# TYPE \(name) \(type)\n"
    }

    mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Double) {
        output += line(name, labels, value)
    }

    mutating func histogram(_ name: String, _ labels: [(String, String)], _ histogram: Histogram) {
        for (bound, count) in histogram.cumulative {
            output += line(name + "_bucket", labels + [("le", Self.number(bound))], Double(count))
        }
        output += line(name + "_bucket", labels + [("le", "+Inf")], Double(histogram.count))
        output += line(name + "_sum", labels, histogram.sum)
        output += line(name + "_count", labels, Double(histogram.count))
    }

    private func line(_ name: String, _ labels: [(String, String)], _ value: Double) -> String {
        guard !labels.isEmpty else { return "\(name) \(Self.number(value))\n" }
        let rendered = labels.map { key, value in
            let escaped = value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                .replacingOccurrences(of: "\n", with: "\\n")
            return "\(key)=\"\(escaped)\""
        }.joined(separator: ",")
        return "\(name){\(rendered)} \(Self.number(value))\n"
    }

    static func number(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}
