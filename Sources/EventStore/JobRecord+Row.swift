import Foundation
import JobModel

// MARK: - JSON

/// The one JSON dialect of the store: sorted keys so equal values give equal bytes (replay compares them).
///
/// One encoder and one decoder serve every call: they are configured once and never changed, and
/// Foundation's coders are safe to share between threads (each call keeps its own state), so an append
/// does not pay for building and configuring a coder per value.
enum StoreJSON {
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    private static let decoder = JSONDecoder()

    static func encode<T: Encodable>(_ value: T) throws(StoreError) -> String {
        do {
            return String(decoding: try encoder.encode(value), as: UTF8.self)
        } catch {
            throw StoreError.corrupt("cannot encode \(T.self) as JSON: \(error)")
        }
    }

    static func decode<T: Decodable>(_ type: T.Type, _ text: String, what: String) throws(StoreError) -> T {
        do {
            return try decoder.decode(type, from: Data(text.utf8))
        } catch {
            throw StoreError.corrupt("\(what) is not valid \(T.self) JSON: \(error)")
        }
    }

    static func encodeOptional<T: Encodable>(_ value: T?) throws(StoreError) -> SQLiteValue {
        guard let value else { return .null }
        return .text(try encode(value))
    }

    static func decodeOptional<T: Decodable>(_ type: T.Type, _ text: String?, what: String) throws(StoreError) -> T? {
        guard let text else { return nil }
        return try decode(type, text, what: what)
    }
}

// MARK: - Decoded specs

/// Specs already decoded, by their JSON text.
///
/// A job's spec never changes after `submitted`, yet every append reads the job's row, and decoding a
/// spec (which parses its storage references again) cost more than the rest of the append together.
/// Equal text decodes to an equal spec, so a hit is exactly what decoding would return. Bounded: the
/// working set is the jobs a worker runs at once, so the cache is simply emptied when it fills.
///
/// Not `Sendable`: it belongs to one `SQLiteConnection`, which `EventStore`'s lock serialises.
final class DecodedSpecCache {
    private var specs: [String: JobSpec] = [:]
    private let capacity: Int

    init(capacity: Int = 1_024) {
        self.capacity = capacity
    }

    /// The spec `text` encodes, decoded at most once while it stays cached.
    func spec(_ text: String, jobID: String) throws(StoreError) -> JobSpec {
        if let spec = specs[text] { return spec }
        let spec = try StoreJSON.decode(JobSpec.self, text, what: "job \(jobID) spec")
        if specs.count >= capacity { specs.removeAll(keepingCapacity: true) }
        specs[text] = spec
        return spec
    }
}

// MARK: - The jobs row

extension JobRecord {
    /// The `jobs` columns, in the order of `rowValues()` and `init(row:specs:)`.
    static let columns = [
        "id", "seq", "kind", "state", "queue", "priority", "run_after_ms", "attempts", "max_attempts",
        "lease_owner", "lease_token", "bytes_done", "bytes_total", "resume_point", "error", "result", "spec",
        "idempotency_key", "pause_requested", "cancel_requested", "version", "created_at_ms", "updated_at_ms",
        "started_at_ms", "finished_at_ms",
    ]

    static let selectColumns = columns.joined(separator: ", ")

    static let insertSQL = "INSERT INTO jobs (\(selectColumns)) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))"

    /// The columns an event can change, in the order of `changingValues()`. The others (id, seq, kind,
    /// queue, priority, max_attempts, spec, idempotency_key, created_at_ms) are fixed by `submitted`:
    /// `apply(_:)` never touches them, so an append need not encode and write them again.
    static let changingColumns = [
        "state", "run_after_ms", "attempts", "lease_owner", "lease_token", "bytes_done", "bytes_total",
        "resume_point", "error", "result", "pause_requested", "cancel_requested", "version", "updated_at_ms",
        "started_at_ms", "finished_at_ms",
    ]

    /// UPDATE of `changingColumns`; the id is the last parameter.
    static let updateSQL = "UPDATE jobs SET "
        + changingColumns.map { "\($0) = ?" }.joined(separator: ", ") + " WHERE id = ?"

    /// The record as the values of `columns`: exactly what the projection stores.
    func rowValues() throws(StoreError) -> [SQLiteValue] {
        [
            .text(id), .integer(seq), .text(kind.rawValue), .text(state.rawValue), .text(queue), .int(priority),
            .integer(runAfterMs), .int(attempts), .int(maxAttempts), .optional(leaseOwner), .optional(leaseToken),
            .integer(bytesDone), .optional(bytesTotal), try StoreJSON.encodeOptional(resumePoint),
            try StoreJSON.encodeOptional(error), try StoreJSON.encodeOptional(result), .text(try StoreJSON.encode(spec)),
            .optional(key), .bool(pauseRequested), .bool(cancelRequested), .int(version), .integer(createdAtMs),
            .integer(updatedAtMs), .optional(startedAtMs), .optional(finishedAtMs),
        ]
    }

    /// The values of `changingColumns`, exactly as `rowValues()` gives them.
    func changingValues() throws(StoreError) -> [SQLiteValue] {
        [
            .text(state.rawValue), .integer(runAfterMs), .int(attempts), .optional(leaseOwner), .optional(leaseToken),
            .integer(bytesDone), .optional(bytesTotal), try StoreJSON.encodeOptional(resumePoint),
            try StoreJSON.encodeOptional(error), try StoreJSON.encodeOptional(result), .bool(pauseRequested),
            .bool(cancelRequested), .int(version), .integer(updatedAtMs), .optional(startedAtMs), .optional(finishedAtMs),
        ]
    }

    /// Reads a row selected with `selectColumns`, decoding its spec through `specs`.
    init(row: SQLiteRow, specs: DecodedSpecCache) throws(StoreError) {
        let id = row.text(0)
        guard let kind = JobKind(rawValue: row.text(2)) else {
            throw StoreError.corrupt("job \(id) has unknown kind '\(row.text(2))'")
        }
        guard let state = JobState(rawValue: row.text(3)) else {
            throw StoreError.corrupt("job \(id) has unknown state '\(row.text(3))'")
        }
        self.init(
            id: id, seq: row.int64(1), kind: kind, state: state, queue: row.text(4), priority: row.int(5),
            runAfterMs: row.int64(6), attempts: row.int(7), maxAttempts: row.int(8),
            leaseOwner: row.optionalText(9), leaseToken: row.optionalInt64(10), bytesDone: row.int64(11),
            bytesTotal: row.optionalInt64(12),
            resumePoint: try StoreJSON.decodeOptional(ResumePoint.self, row.optionalText(13), what: "job \(id) resume_point"),
            error: try StoreJSON.decodeOptional(StorageError.self, row.optionalText(14), what: "job \(id) error"),
            result: try StoreJSON.decodeOptional(JobResult.self, row.optionalText(15), what: "job \(id) result"),
            spec: try specs.spec(row.text(16), jobID: id),
            key: row.optionalText(17), pauseRequested: row.bool(18), cancelRequested: row.bool(19),
            version: row.int(20), createdAtMs: row.int64(21), updatedAtMs: row.int64(22),
            startedAtMs: row.optionalInt64(23), finishedAtMs: row.optionalInt64(24))
    }
}

// MARK: - The events row

extension JobEvent {
    static let selectColumns = "seq, job_id, version, type, at_ms, actor, lease, data"

    /// Reads a row selected with `selectColumns`.
    init(row: SQLiteRow) throws(StoreError) {
        let seq = row.int64(0)
        guard let type = EventType(rawValue: row.text(3)) else {
            throw StoreError.corrupt("event \(seq) has unknown type '\(row.text(3))'")
        }
        self.init(seq: seq, jobID: row.text(1), version: row.int(2), type: type, atMs: row.int64(4),
                  actor: row.text(5), leaseToken: row.optionalInt64(6),
                  data: try StoreJSON.decode(EventData.self, row.text(7), what: "event \(seq) data"))
    }
}
