import Foundation
import JobModel
import StorePort
import Synchronization

/// Why a write of the worker failed in the store: the `reason` label of
/// `jobctl_store_write_failures_total`, and what `/readyz` names. A few fixed kinds (never the store's
/// message, which can hold a path, a statement or a row), so that the label stays small and says no secret.
public enum StoreWriteFailure: String, Sendable, CaseIterable {
    /// The disk holding the database is full: SQLite's `SQLITE_FULL` or `ENOSPC`, PostgreSQL's 53100.
    case diskFull = "disk_full"
    /// The database file reached the process's file size limit (`EFBIG`, `ulimit -f`).
    case fileSizeLimit = "file_size_limit"
    /// The database takes no writes: an SQLite file or file system made read-only, a PostgreSQL server
    /// in read-only mode (`default_transaction_read_only`, a standby after a failover: SQLSTATE 25006).
    case readOnly = "read_only"
    /// The database role lacks a privilege the write needs (PostgreSQL's 42501).
    case permission
    /// Another process held the write lock past the busy timeout, or PostgreSQL ended the transaction
    /// for a conflict.
    case busy
    /// The database server could not be reached, or the connection was lost during the write.
    case unreachable
    /// The database server failed the statement for another reason of its own (`server` in the text
    /// names its SQLSTATE).
    case server
    /// Another I/O error reading or writing the database file.
    case io
    /// The database is damaged, was replaced, or its disk failed a sync: the worker stops.
    case damaged

    /// The kind of `error`, or nil when it is not the store failing to write but the store refusing one
    /// write for a reason of its own (a stale lease, a conflict, a value refused): such a refusal proves
    /// the store takes writes.
    public init?(_ error: StoreError) {
        switch error {
        case .io(let message):
            if message.contains("disk is full") || message.contains(String(cString: strerror(ENOSPC))) {
                self = .diskFull
            } else if message.contains("file size limit") || message.contains(String(cString: strerror(EFBIG))) {
                self = .fileSizeLimit
            } else {
                self = .io
            }
        case .readOnly: self = .readOnly
        case .busy: self = .busy
        case .unreachable, .commitUnconfirmed: self = .unreachable
        case .server(let sqlstate, _):
            switch sqlstate {
            case "53100": self = .diskFull
            case "25006": self = .readOnly
            case "42501": self = .permission
            default: self = .server
            }
        case .damaged, .replaced, .syncFailed: self = .damaged
        default: return nil
        }
    }

    /// A few words for `/readyz`.
    var meaning: String {
        switch self {
        case .diskFull: "the database's disk is full"
        case .fileSizeLimit: "the database reached the worker's file size limit"
        case .readOnly: "the database is read-only"
        case .permission: "the database role lacks a privilege"
        case .busy: "another process holds the database's write lock"
        case .unreachable: "the database server does not answer"
        case .server: "the database server refuses them"
        case .io: "an I/O error"
        case .damaged: "the database is damaged or was replaced"
        }
    }
}

/// Whether the store takes the worker's writes, as the worker's own writes found it: `/readyz`'s write
/// condition and `jobctl_store_writable`, with `jobctl_store_write_failures_total`.
///
/// Why: a store that answers reads but refuses every write (a full disk, a database file or server made
/// read-only, a privilege revoked) left the worker ready and `jobctl_store_up` at 1 while it could
/// claim, start or finish no job: an orchestrator kept counting on it, an alert on the store never
/// fired. The signal comes from the writes the worker makes anyway — claims, its jobs' events (outcomes
/// included), lease renewals, rescues — where their failures are caught; no write is made to probe.
///
/// A write that failed is tried again (a job's event with backoff from 50 ms to 1 s while its lease
/// holds; a claim, a rescue, a renewal at the loop's next turn), so one failure is a blip, and the
/// store is reported refusing writes only once the failures with none succeeding in between span
/// `refusingAfterMs`: past the write retries' first second of backoff, and the moment a PostgreSQL
/// session takes to come back on a new connection; a full disk or a read-only database lasts longer.
/// Any write that goes through ends it. A worker that holds no job and finds nothing to claim writes
/// nothing: its claim's write transaction committing empty ends it then (on PostgreSQL a read-only
/// server refuses that transaction too; on SQLite it writes nothing to the disk, so it counts only when
/// the worker has nothing of its own to write — see `claimFoundNothing`).
public final class StoreWrites: Sendable {
    /// Failures with no success in between spanning this long mean the store refuses writes.
    public static let refusingAfterMs: Int64 = 3_000

    /// The store refuses writes: since when (monotonic ms, the streak's first failure), the kind of the
    /// last failure (with its SQLSTATE for a server's error) and how many there were.
    public struct Refusal: Sendable, Equatable {
        public var reason: StoreWriteFailure
        public var sqlstate: String?
        public var sinceMs: Int64
        public var failures: Int

        /// The line `/readyz` answers (without "not ready: ").
        public func text(nowMs: Int64) -> String {
            let code = sqlstate.map { ", SQLSTATE \($0)" } ?? ""
            return "store refuses writes: \(reason.rawValue) (\(reason.meaning)\(code)); \(failures) failed in a row, "
                + "none succeeded for \(max(0, nowMs - sinceMs) / 1_000) s"
        }
    }

    private struct State {
        /// The current streak of failures: its first (monotonic ms), its last, how many.
        var firstFailureMs: Int64?
        var lastFailureMs: Int64 = 0
        var streak = 0
        var last: StoreWriteFailure?
        var lastSQLState: String?
        /// Every failure counted, by kind.
        var failures: [StoreWriteFailure: Int] = [:]
    }

    private let state = Mutex(State())
    private let refusingAfterMs: Int64

    public init(refusingAfterMs: Int64 = StoreWrites.refusingAfterMs) {
        self.refusingAfterMs = refusingAfterMs
    }

    /// A write failed with `error`: counted when it is the store failing to write (see `StoreWriteFailure`).
    public func failed(_ error: any Error, nowMs: Int64 = Clock.monotonicMs()) {
        guard let error = error as? StoreError, let kind = StoreWriteFailure(error) else { return }
        let sqlstate: String? = if case .server(let code, _) = error { code } else { nil }
        state.withLock { state in
            if state.firstFailureMs == nil { state.firstFailureMs = nowMs }
            state.lastFailureMs = nowMs
            state.streak += 1
            state.last = kind
            state.lastSQLState = sqlstate
            state.failures[kind, default: 0] += 1
        }
    }

    /// A write went through: the store takes writes.
    public func succeeded() {
        state.withLock { state in
            state.firstFailureMs = nil
            state.streak = 0
        }
    }

    /// A claim's write transaction committed having found no job to claim, while the worker holds
    /// `held` jobs. It wrote nothing (SQLite commits such a transaction on a full disk), so it says the
    /// store takes writes only when the worker has no write of its own pending: then it is the one the
    /// worker makes, and without it a worker left with nothing to do would stay not ready for ever.
    /// While jobs are held, their events and lease renewals say it (an empty claim between their
    /// failures made the probe flap).
    public func claimFoundNothing(held: Int) {
        if held == 0 { succeeded() }
    }

    /// Whether the store refuses writes now (nil: it takes them, as far as the worker's writes tell).
    public func refusal() -> Refusal? {
        state.withLock { state in
            guard let first = state.firstFailureMs, let last = state.last, state.streak >= 2,
                  state.lastFailureMs - first >= refusingAfterMs else { return nil }
            return Refusal(reason: last, sqlstate: state.lastSQLState, sinceMs: first, failures: state.streak)
        }
    }

    /// Every failure counted so far, by kind.
    public var failureCounts: [StoreWriteFailure: Int] { state.withLock { $0.failures } }
}
