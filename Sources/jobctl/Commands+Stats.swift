import Foundation
import JobLifecycle
import JobModel
import StorePort

extension Commands {
    static let stats = CommandSpec(
        name: "stats",
        abstract: "Queue depth, running jobs by worker, and throughput and failures over the last minute and hour.",
        options: [Options.queue.help("Only this queue."), Options.json.help("Print one JSON object.")],
        discussion: """
        Jobs by queue and state; the oldest queued job and its age (since it was submitted); running jobs
        grouped by the worker holding their lease, with when each lease expires unless heartbeated; and,
        for the last minute and the last hour, jobs succeeded with their bytes and rate, final failures and
        scheduled retries by error code. Reads the database read-only.
        """
    ) { arguments, context in
        let queue = try arguments.value(Options.queue)
        let store = try context.openStore(readOnly: true)
        let stats = try store.stats(queue: queue, now: Clock.nowMs())
        // Counted as their rows stand, though a newer jobctl's event may mean more (a hold) to a newer jobctl.
        let passedOver = PassedOver()
        for type in try store.jobsWithNewerEvents(inStates: [.queued, .running, .paused]).values { passedOver.note(eventType: type) }
        if let note = passedOver.sentence("counted as stored, and left alone by this jobctl's workers") { emitError(note) }
        if arguments[Options.json] {
            emit(try jsonText(StatsView(stats)))
        } else {
            emit(statsText(stats, context: context))
        }
        return ExitCode.ok
    }

    /// The text form: a queue × state table, then one paragraph per section.
    private static func statsText(_ stats: StoreStats, context: Context) -> String {
        let states = JobState.allCases
        var lines: [String] = []
        let queues = StatsView.queueNames(stats)
        if queues.isEmpty {
            lines.append(stats.queue.map { "no jobs in queue \(TerminalText.printable($0))" } ?? "no jobs")
        } else {
            let rows = queues.map { queue -> [String] in
                let counts = states.map { state in stats.counts.first { $0.queue == queue && $0.state == state }?.count ?? 0 }
                return [queue] + counts.map(String.init) + [String(counts.reduce(0, +))]
            }
            let columns = [TableColumn("QUEUE", fit: .elide(minimum: 8), elide: { Elide.end($0, to: $1) })]
                + states.map { TableColumn($0.rawValue.uppercased()) } + [TableColumn("TOTAL")]
            lines.append(renderTable(columns, rows, width: context.width).text)
        }
        lines.append("")
        if let oldest = stats.oldestQueued {
            // The id, queue and worker names below are the rows' own text: a worker's name is whatever its
            // `--name` said, and a log written by hand or a newer jobctl may hold anything. Shown as `list`
            // and `show` show them (`TerminalText.printable`), or an ESC in one retitled or recoloured the
            // reader's terminal; `--json` keeps them exact.
            var line = "oldest queued: \(TerminalText.printable(oldest.jobID)) (\(TerminalText.printable(oldest.queue))), submitted \(TimeText.age(oldest.createdAtMs, now: stats.nowMs)) ago"
            if oldest.runAfterMs > stats.nowMs {
                line += ", runs in \(TimeText.duration(seconds: TimeText.between(stats.nowMs, oldest.runAfterMs) / 1000 + 1))"
            }
            lines.append(line)
        } else {
            lines.append("oldest queued: none")
        }
        if stats.running.isEmpty {
            lines.append("running: none")
        } else {
            lines.append("running:")
            for worker in StatsView.workers(stats) {
                lines.append("  \(TerminalText.printable(worker.owner)): \(plural(worker.leases.count, "job"))")
                for lease in worker.leases {
                    let expiry = lease.expiresAtMs.map { expires in
                        expires >= stats.nowMs
                            ? "lease expires in \(TimeText.duration(seconds: TimeText.between(stats.nowMs, expires) / 1000))"
                            : "lease expired \(TimeText.duration(seconds: TimeText.between(expires, stats.nowMs) / 1000)) ago"
                    } ?? "no live lease"
                    lines.append("    \(TerminalText.printable(lease.jobID))  \(TerminalText.storedName(lease.kind))  "
                                 + "\(TerminalText.printable(lease.queue))  \(expiry)")
                }
            }
        }
        for (name, window) in [("last minute", stats.lastMinute), ("last hour", stats.lastHour)] {
            let rate = ByteSize.format(StatsView.perSecond(window.bytes, overMs: window.lengthMs))
            var line = "\(name): \(window.succeeded) succeeded (\(ByteSize.format(window.bytes)), \(rate)/s), \(window.failed) failed"
            if !window.failedByCode.isEmpty { line += " (\(codes(window.failedByCode)))" }
            line += ", \(plural(window.retried, "retry", "retries"))"
            if !window.retriedByCode.isEmpty { line += " (\(codes(window.retriedByCode)))" }
            lines.append(line)
        }
        if let bytes = stats.databaseBytes {
            var line = "database: \(ByteSize.format(bytes))"
            if let perJob = stats.bytesPerFinishedJob, let finished = stats.finishedJobs {
                line += ", \(ByteSize.format(perJob)) per finished job (\(plural(finished, "finished job")))"
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }

    private static func codes(_ counts: [StorageErrorCode: Int]) -> String {
        counts.sorted { $0.key.name < $1.key.name }.map { "\($0.key.name) \($0.value)" }.joined(separator: ", ")
    }
}

/// `stats --json`: snake_case, times as RFC 3339 beside epoch milliseconds, every state of every queue.
struct StatsView: Encodable {
    struct Oldest: Encodable {
        let id, queue, created_at: String
        let created_at_ms, run_after_ms, age_ms: Int64
        let run_after: String
    }
    struct Lease: Encodable {
        let id, queue, kind: String
        let lease_token: Int64?
        let lease_expires_at: String?
        let lease_expires_at_ms: Int64?
    }
    struct Worker: Encodable {
        let worker: String
        let jobs: [Lease]
    }
    struct Window: Encodable {
        let seconds: Int64
        let succeeded: Int
        let bytes: Int64
        let bytes_per_second: Int64
        let failed: Int
        let retried: Int
        let failures_by_code: [String: Int]
        let retries_by_code: [String: Int]
    }

    let at: String
    let at_ms: Int64
    let queue: String?
    let jobs: [String: [String: Int]]
    let totals: [String: Int]
    let oldest_queued: Oldest?
    let running: [Worker]
    let last_minute: Window
    let last_hour: Window
    /// The whole log's size on disk, and per finished job (every queue).
    let database_bytes: Int64?
    let finished_jobs: Int?
    let bytes_per_finished_job: Int64?

    init(_ stats: StoreStats) {
        at = RFC3339.string(stats.nowMs)
        at_ms = stats.nowMs
        queue = stats.queue
        var jobs: [String: [String: Int]] = [:]
        var totals = Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0.rawValue, 0) })
        totals["total"] = 0
        for queue in Self.queueNames(stats) {
            var row = Dictionary(uniqueKeysWithValues: JobState.allCases.map { ($0.rawValue, 0) })
            row["total"] = 0
            jobs[queue] = row
        }
        for count in stats.counts {
            jobs[count.queue, default: [:]][count.state.rawValue, default: 0] += count.count
            jobs[count.queue, default: [:]]["total", default: 0] += count.count
            totals[count.state.rawValue, default: 0] += count.count
            totals["total", default: 0] += count.count
        }
        self.jobs = jobs
        self.totals = totals
        oldest_queued = stats.oldestQueued.map { oldest in
            Oldest(id: oldest.jobID, queue: oldest.queue, created_at: RFC3339.string(oldest.createdAtMs),
                   created_at_ms: oldest.createdAtMs, run_after_ms: oldest.runAfterMs,
                   age_ms: max(0, TimeText.between(oldest.createdAtMs, stats.nowMs)), run_after: RFC3339.string(oldest.runAfterMs))
        }
        running = Self.workers(stats).map { worker in
            Worker(worker: worker.owner, jobs: worker.leases.map { lease in
                Lease(id: lease.jobID, queue: lease.queue, kind: lease.kind, lease_token: lease.token,
                      lease_expires_at: lease.expiresAtMs.map(RFC3339.string), lease_expires_at_ms: lease.expiresAtMs)
            })
        }
        last_minute = Self.window(stats.lastMinute)
        last_hour = Self.window(stats.lastHour)
        database_bytes = stats.databaseBytes
        finished_jobs = stats.finishedJobs
        bytes_per_finished_job = stats.bytesPerFinishedJob
    }

    /// `bytes` a second over `ms` milliseconds, rounded down, for any byte count: `bytes * 1000` trapped
    /// (exit 132) for an hour whose outcomes' sizes, written by hand, passed 9.2 PB.
    static func perSecond(_ bytes: Int64, overMs ms: Int64) -> Int64 {
        guard ms > 0 else { return 0 }
        let (whole, part) = bytes.quotientAndRemainder(dividingBy: ms)
        return whole.saturatingMultiplied(by: 1000).saturatingAdding(part * 1000 / ms)
    }

    private static func window(_ window: StoreStats.Window) -> Window {
        Window(seconds: window.lengthMs / 1000, succeeded: window.succeeded, bytes: window.bytes,
               bytes_per_second: perSecond(window.bytes, overMs: window.lengthMs), failed: window.failed, retried: window.retried,
               failures_by_code: Dictionary(uniqueKeysWithValues: window.failedByCode.map { ($0.key.name, $0.value) }),
               retries_by_code: Dictionary(uniqueKeysWithValues: window.retriedByCode.map { ($0.key.name, $0.value) }))
    }

    /// The queues that hold jobs, in name order (the asked-for queue alone when it has none).
    static func queueNames(_ stats: StoreStats) -> [String] {
        Array(Set(stats.counts.map(\.queue))).sorted()
    }

    /// Running leases grouped by owner, owners in name order.
    static func workers(_ stats: StoreStats) -> [(owner: String, leases: [StoreStats.RunningLease])] {
        Dictionary(grouping: stats.running, by: \.owner).sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }
}
