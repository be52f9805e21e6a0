import Foundation
import JobLifecycle
import JobModel

/// What `jobctl stats` shows: the queue as it is now, and what finished recently.
public struct StoreStats: Sendable, Equatable {
    /// How many jobs one queue holds in one state.
    public struct QueueStateCount: Sendable, Equatable {
        public var queue: String
        public var state: JobState
        public var count: Int

        public init(queue: String, state: JobState, count: Int) {
            self.queue = queue
            self.state = state
            self.count = count
        }
    }

    /// The queued job submitted first.
    public struct OldestQueued: Sendable, Equatable {
        public var jobID: String
        public var queue: String
        /// When it was submitted: its age is measured from here.
        public var createdAtMs: Int64
        /// When it may run (a retry's delay puts this in the future).
        public var runAfterMs: Int64

        public init(jobID: String, queue: String, createdAtMs: Int64, runAfterMs: Int64) {
            self.jobID = jobID
            self.queue = queue
            self.createdAtMs = createdAtMs
            self.runAfterMs = runAfterMs
        }
    }

    /// A running job and the lease its worker holds.
    public struct RunningLease: Sendable, Equatable {
        public var jobID: String
        public var queue: String
        /// As stored: a job a newer jobctl submitted may be of a kind this one does not know.
        public var kind: String
        /// The worker holding the lease (`worker:<host>:<pid>`).
        public var owner: String
        public var token: Int64?
        /// When the lease runs out unless heartbeated; nil when the store keeps no live lease row.
        public var expiresAtMs: Int64?

        public init(jobID: String, queue: String, kind: String, owner: String, token: Int64?, expiresAtMs: Int64?) {
            self.jobID = jobID
            self.queue = queue
            self.kind = kind
            self.owner = owner
            self.token = token
            self.expiresAtMs = expiresAtMs
        }
    }

    /// Outcomes written within the last `lengthMs` before `StoreStats.nowMs`.
    public struct Window: Sendable, Equatable {
        public var lengthMs: Int64
        /// `succeeded` events, and the bytes they transferred: each one's result size (`JobResult.size`,
        /// the bytes moved), what the stores sum in `OutcomeGroup.bytes`. A job that moves no bytes
        /// (get-metadata, update-metadata, fetch-url, delete) counts none, whatever size the object it
        /// names has, and so does a transfer skipped because its destination was there (`skipped`).
        public var succeeded = 0
        public var bytes: Int64 = 0
        /// `failed` events (final failures) by error code.
        public var failedByCode: [StorageErrorCode: Int] = [:]
        /// `attempt_failed` events (retries scheduled) by error code.
        public var retriedByCode: [StorageErrorCode: Int] = [:]

        public init(lengthMs: Int64) { self.lengthMs = lengthMs }

        /// Final failures in the window.
        public var failed: Int { failedByCode.values.reduce(0, +) }
        /// Retries scheduled in the window.
        public var retried: Int { retriedByCode.values.reduce(0, +) }

    }

    /// The time the figures were read at.
    public var nowMs: Int64
    /// The queue asked for (nil: every queue).
    public var queue: String?
    /// Jobs by queue and state, queues in name order, states in lifecycle order; empty pairs left out.
    public var counts: [QueueStateCount]
    public var oldestQueued: OldestQueued?
    /// Running jobs ordered by owner, then job id.
    public var running: [RunningLease]
    /// The last minute and the last hour.
    public var lastMinute: Window
    public var lastHour: Window
    /// The size of the whole log on disk — events, projection, blobs and their indexes, every queue —
    /// in bytes (SQLite: the database file's pages; PostgreSQL: the schema's tables with their indexes
    /// and TOAST); nil when the adapter does not say.
    public var databaseBytes: Int64?
    /// Jobs in a final state (succeeded, failed, cancelled) in every queue: what `databaseBytes` is
    /// divided by for the size per finished job.
    public var finishedJobs: Int?

    /// The database's size per finished job, in bytes (nil without a size or a finished job).
    public var bytesPerFinishedJob: Int64? {
        guard let databaseBytes, let finishedJobs, finishedJobs > 0 else { return nil }
        return databaseBytes / Int64(finishedJobs)
    }

    public init(nowMs: Int64, queue: String?, counts: [QueueStateCount], oldestQueued: OldestQueued?, running: [RunningLease],
                lastMinute: Window, lastHour: Window) {
        self.nowMs = nowMs
        self.queue = queue
        self.counts = counts
        self.oldestQueued = oldestQueued
        self.running = running
        self.lastMinute = lastMinute
        self.lastHour = lastHour
    }

    /// The figures of both windows from the outcome events written in the last hour (any order).
    /// Outcome events of one type (and, for failures, one error code) in the last hour, counted by the
    /// store: how many, how many in the last minute, and the bytes `succeeded` ones transferred (as
    /// `Window.bytes` counts them).
    public struct OutcomeGroup: Sendable, Equatable {
        public var type: String
        /// The error's code (`failed`, `attempt_failed`); nil for `succeeded`.
        public var code: Int64?
        public var count: Int
        public var countInLastMinute: Int
        public var bytes: Int64
        public var bytesInLastMinute: Int64

        public init(type: String, code: Int64?, count: Int, countInLastMinute: Int, bytes: Int64, bytesInLastMinute: Int64) {
            self.type = type
            self.code = code
            self.count = count
            self.countInLastMinute = countInLastMinute
            self.bytes = bytes
            self.bytesInLastMinute = bytesInLastMinute
        }
    }

    /// The last minute and the last hour from outcome groups counted by the store (the events are not
    /// read one by one: an hour of a busy log is hundreds of thousands). A failure's code that no
    /// `StorageErrorCode` has is a damaged log, as it is when an event is decoded.
    public static func windows(from groups: [OutcomeGroup]) throws(StoreError) -> (lastMinute: Window, lastHour: Window) {
        var minute = Window(lengthMs: 60_000)
        var hour = Window(lengthMs: 3_600_000)
        for group in groups {
            switch group.type {
            case EventType.succeeded.rawValue:
                hour.succeeded += group.count
                hour.bytes = hour.bytes.saturatingAdding(group.bytes)
                minute.succeeded += group.countInLastMinute
                minute.bytes = minute.bytes.saturatingAdding(group.bytesInLastMinute)
            case EventType.failed.rawValue, EventType.attemptFailed.rawValue:
                guard let raw = group.code, let code = StorageErrorCode(rawValue: Int(truncatingIfNeeded: raw)) else {
                    throw StoreError.corrupt("a '\(group.type)' event holds no known error code (\(group.code.map(String.init) ?? "none"))")
                }
                let failed = group.type == EventType.failed.rawValue
                if failed { hour.failedByCode[code, default: 0] += group.count } else { hour.retriedByCode[code, default: 0] += group.count }
                if group.countInLastMinute > 0 {
                    if failed {
                        minute.failedByCode[code, default: 0] += group.countInLastMinute
                    } else {
                        minute.retriedByCode[code, default: 0] += group.countInLastMinute
                    }
                }
            default:
                throw StoreError.corrupt("an outcome group of type '\(group.type)'")
            }
        }
        return (minute, hour)
    }
}
