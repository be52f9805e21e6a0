import Foundation
import JobModel

/// How much a worker log says.
public enum WorkerLogLevel: Int, Sendable, Comparable, CaseIterable {
    /// Progress of running transfers (`-v`).
    case debug
    /// One line per job transition (the default).
    case info
    /// Something an operator should look at: a store error, a slow commit, a lost lease (`-q` keeps these).
    case warning
    /// Something failed that the worker could not work around.
    case error

    /// The name printed in text lines and JSON: `debug`, `info`, `warning`, `error`.
    public var name: String {
        switch self {
        case .debug: "debug"
        case .info: "info"
        case .warning: "warning"
        case .error: "error"
        }
    }

    public static func < (lhs: WorkerLogLevel, rhs: WorkerLogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// What a log line reports: one job transition the worker made, or a warning about the worker itself.
public enum WorkerLogEvent: String, Sendable, CaseIterable {
    /// The worker started (its owner, concurrency, lease).
    case workerStarted = "worker_started"
    /// The worker stopped (its summary).
    case workerStopped = "worker_stopped"
    /// The worker could not start or go on (a bad setting, no database): the error it exits with.
    case workerFailed = "worker_failed"
    /// SIGTERM/SIGINT/SIGHUP arrived: the first starts a graceful shutdown, a second exits at once.
    case signalReceived = "signal_received"
    /// A job was claimed under a lease.
    case claimed
    /// A claimed job's transfer began from the start.
    case started
    /// A claimed job's transfer continued from its resume point.
    case resumed
    /// A transfer logged `resumed` found fewer of the earlier bytes usable than it was logged resuming
    /// from (a partial file replaced, truncated or gone, the object changed, an upload session lost): it
    /// goes on from `from_bytes` — 0 for a dropped download —, as the event log's checkpoint says.
    case restarted
    /// Bytes moved (verbose only).
    case progress
    /// The job stopped at its resume point on request.
    case paused
    /// The attempt failed with a retryable error; the job runs again after a delay.
    case retryScheduled = "retry_scheduled"
    /// The job succeeded.
    case succeeded
    /// The job failed for good.
    case failed
    /// The job was cancelled.
    case cancelled
    /// The worker's lease on the job expired or was taken; it stops working on it.
    case leaseLost = "lease_lost"
    /// Another worker's lease on the job expired (it died or stalled) and this worker's rescue took the
    /// job back: into the queue, or ended (failed on its last attempt; cancelled or paused on request).
    case rescued
    /// The worker gave the job back (graceful shutdown) at its resume point.
    case released
    /// The worker could write nothing more for the job; its lease will expire and it is rescued.
    case abandoned
    /// A store call failed; the worker retries it.
    case storeError = "store_error"
    /// A commit took longer than the slow-commit threshold.
    case slowCommit = "slow_commit"
    /// A write whose answer was lost (the store failed after its commit) had committed after all: the
    /// retry was refused because the event was already in the log, and the worker carries on as written.
    case writeLanded = "write_landed"
    /// At start: opening the log upgraded its schema (older jobctls can no longer open it).
    case logUpgraded = "log_upgraded"
    /// The worker's clock differs from the database's (or the newest event lies in the future).
    case clockSkew = "clock_skew"
    /// At start: `gs://` jobs are queued and no Google credentials (nor an emulator) were found.
    case noCredentials = "no_credentials"
    /// Jobs whose history holds an event of a type this jobctl does not know (a newer jobctl wrote it)
    /// are waiting: this worker leaves them alone. Said when such jobs first appear.
    case newerEvents = "newer_events"
    /// A drain ended with queued jobs of its queues waiting for a job that does not finish in it (paused,
    /// or in a queue the worker does not take).
    case drainLeftWaiting = "drain_left_waiting"
    /// At start: the open-files limit, even raised to its hard ceiling, is below what the concurrency
    /// may need.
    case openFilesLimit = "open_files_limit"
    /// At start: `SSLKEYLOGFILE` is set, so libcurl writes every TLS session's secrets to that file.
    case tlsKeyLog = "tls_key_log"
    /// Lines were dropped because standard error was not being read, or lost to a write that failed (a
    /// full disk) (`LogLineWriter`); written where they were dropped, once writing works again.
    case logLinesDropped = "log_lines_dropped"
    /// The orphan sweep removed a file a final job left (a partial download, an upload session).
    case orphanRemoved = "orphan_removed"
    /// The orphan sweep could not run (it runs again later).
    case orphanSweepFailed = "orphan_sweep_failed"
}

/// A value in a log line's fields.
public enum WorkerLogValue: Sendable, Equatable {
    case text(String)
    case integer(Int64)
    case number(Double)

    /// The value as JSON accepts it.
    var jsonObject: Any {
        switch self {
        case .text(let text): text
        case .integer(let value): value
        case .number(let value): value
        }
    }
}

/// One log line before it is formatted: the worker's pool builds these, `WorkerLogFormatter` prints them.
public struct WorkerLogEntry: Sendable, Equatable {
    /// When it happened, wall-clock milliseconds.
    public var atMs: Int64
    public var level: WorkerLogLevel
    public var event: WorkerLogEvent
    /// The job it is about, if any.
    public var jobID: String?
    /// The job's kind, if any.
    public var kind: JobKind?
    /// Named details in the order they print (`attempt`, `bytes`, `error`, `delay_ms`, …). Text values
    /// that may hold URLs are redacted when formatted.
    public var fields: [(String, WorkerLogValue)]

    public init(atMs: Int64, level: WorkerLogLevel, event: WorkerLogEvent, jobID: String? = nil, kind: JobKind? = nil,
                fields: [(String, WorkerLogValue)] = []) {
        self.atMs = atMs
        self.level = level
        self.event = event
        self.jobID = jobID
        self.kind = kind
        self.fields = fields
    }

    public static func == (lhs: WorkerLogEntry, rhs: WorkerLogEntry) -> Bool {
        lhs.atMs == rhs.atMs && lhs.level == rhs.level && lhs.event == rhs.event && lhs.jobID == rhs.jobID
            && lhs.kind == rhs.kind && lhs.fields.map(\.0) == rhs.fields.map(\.0) && lhs.fields.map(\.1) == rhs.fields.map(\.1)
    }
}
