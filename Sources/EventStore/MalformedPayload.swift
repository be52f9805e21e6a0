import Foundation
import StorePort

/// An event whose payload is not JSON, told as damage to the log rather than as SQLite's words.
///
/// The reads that take fields out of payloads inside SQLite (`stats`' outcome counts, the leftover
/// sweep's destinations) fail whole on one such event, with SQLite's "malformed JSON" and the statement:
/// `stats` and `orphans` printed "SQLite error 1: malformed JSON in `SELECT type, code, …`", naming no
/// job and saying nothing of what to do, and a worker logged each sweep's `orphan_sweep_failed` so.
enum MalformedPayload {
    /// Whether `error` is SQLite's refusal of a payload that is not JSON (SQLITE_ERROR, as any
    /// statement's mistake is: told apart by its message alone).
    static func isMalformedJSON(_ error: StoreError) -> Bool {
        guard case .sqlite(_, let message, _) = error else { return false }
        return message.contains("malformed JSON")
    }

    /// `error`, or — for a payload that is not JSON — `StoreError.corrupt` naming the event and its job
    /// that `locate` finds (a query selecting an event's seq and job id among the payloads the failed
    /// statement read, `json_valid(…) = 0`: run only after a failure, so its cost does not matter), which
    /// says to run `jobctl replay --verify`.
    static func described(_ error: StoreError, on connection: SQLiteConnection, locate: String,
                          _ values: [SQLiteValue]) -> StoreError {
        guard isMalformedJSON(error) else { return error }
        let found = try? connection.first(locate, values) { row in (seq: row.int64(0), jobID: row.text(1)) }
        guard let event = found ?? nil else {
            return .corrupt("an event's payload is not JSON (SQLite: malformed JSON)")
        }
        return .corrupt("event \(event.seq) (job \(event.jobID)) has a payload that is not JSON: the log is damaged")
    }
}
