import Foundation
import StorePort

/// An event whose payload is not JSON, told as damage to the log rather than as the server's words.
///
/// `events.data` is text (kept byte for byte), cast to `json` by the reads that take fields out of
/// payloads on the server (`stats`' outcome counts, the leftover sweep's destinations). One payload that
/// is not JSON failed them whole with "the database server refused the write (SQLSTATE 22P02: invalid
/// input syntax for type json)": no write, no job named, no word of what to do. The failed statement
/// ends its transaction, so the event cannot be looked for there, and PostgreSQL 15 has no SQL test of
/// JSON text; `jobctl replay --verify`, which the error points at, names it.
enum MalformedPayload {
    /// `error`, or — for the server's refusal of a text as JSON — `StoreError.corrupt` saying so, with
    /// `reading` (what the statement read).
    static func described(_ error: StoreError, reading: String) -> StoreError {
        let sqlstate: String, message: String
        switch error {
        case .serverRefused(let state, let text), .server(let state, let text):
            (sqlstate, message) = (state, text)
        default:
            return error
        }
        guard sqlstate == "22P02", message.contains("json") else { return error }
        return .corrupt("the payload of an event among \(reading) is not JSON, so the log is damaged (PostgreSQL: \(message))")
    }
}
