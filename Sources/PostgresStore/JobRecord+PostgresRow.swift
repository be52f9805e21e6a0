import Foundation
import JobLifecycle
import JobModel
import StorePort
import Synchronization

// MARK: - The jobs row

extension JobRecord {
    /// The `jobs` columns, in the order of `postgresValues()` and `init(postgresRow:)`: the same columns
    /// as the SQLite projection, so `replay --verify` compares the same things on both engines.
    ///
    /// The spec and the result are not among them (migration 008): the log holds each once, in the
    /// job's `submitted` event and in its `succeeded` event, and `postgresSelectColumns` reads them there.
    static let postgresColumns = [
        "id", "seq", "kind", "state", "queue", "priority", "run_after_ms", "attempts", "max_attempts",
        "lease_owner", "lease_token", "bytes_done", "bytes_total", "resume_point", "error",
        "idempotency_key", "pause_requested", "cancel_requested", "version", "created_at_ms", "updated_at_ms",
        "started_at_ms", "finished_at_ms", "batch",
    ]

    /// The stored columns alone, for `replay --verify`, which compares them with the fold.
    static let postgresStoredColumns = postgresColumns.joined(separator: ", ")

    /// The spec's JSON text, from the job's `submitted` event: `jobs.seq` is that event's seq (its key).
    static let postgresSpecSQL = postgresSpecSQL(of: "jobs")

    /// The spec's JSON text, from the `submitted` event at `table`'s seq: NULL unless that event is the
    /// job's own `submitted` (a row whose seq names another job's event ran that job's transfer).
    ///
    /// A `submitted` event whose JSON holds the escape `\u0000` (a NUL in an idempotency key, which an
    /// SQLite log from before 2026-12-04 can hold and `migrate --to` copies) is selected whole: the
    /// server's JSON functions refuse to take such a text apart ("unsupported Unicode escape sequence"),
    /// so `decodeSpec(stored:jobID:)` takes the spec out of it here. The spec alone never holds the
    /// escape otherwise, so the text says which of the two it is.
    static func postgresSpecSQL(of table: String) -> String {
        "(SELECT CASE WHEN strpos(events.data, \(nulEscapeSQL)) = 0 THEN (events.data::json -> 'spec')::text ELSE events.data END "
            + "FROM events WHERE events.seq = \(table).seq AND events.job_id = \(table).id AND events.type = 'submitted')"
    }

    /// JSON's escape of a NUL, `\u0000`, as an SQL literal (standard strings: the backslash is itself).
    static let nulEscapeSQL = "E'\\\\u0000'"

    /// `column`, an event's JSON text, as the server's JSON functions take it apart: with each `\u0000`
    /// read as `\u0001`. They refuse a text holding that escape outright ("unsupported Unicode escape
    /// sequence"), which a server's error message, an object's metadata or an old log's idempotency key
    /// can put in the log; one such event made every query that parsed it fail (`stats` for an hour,
    /// `archive`, the orphan sweep). For what the server reads there — codes, sizes, blob hashes,
    /// destinations — the two are alike (a NUL is in no hash, size or path); the same six characters
    /// for six, so the text stays valid JSON.
    static func parsableJSONSQL(_ column: String) -> String {
        "(CASE WHEN strpos(\(column), \(nulEscapeSQL)) = 0 THEN \(column) ELSE replace(\(column), \(nulEscapeSQL), E'\\\\u0001') END)"
    }

    /// The spec in `stored`, a text `postgresSpecSQL` selected: the spec's JSON, or a whole `submitted`
    /// event's when its JSON holds `\u0000`.
    static func decodeSpec(stored: String, jobID: String) throws(StoreError) -> JobSpec {
        guard stored.contains("\\u0000") else {
            return try StoreJSON.decode(JobSpec.self, stored, what: "job \(jobID) spec")
        }
        struct Submitted: Decodable { let spec: JobSpec }
        return try StoreJSON.decode(Submitted.self, stored, what: "job \(jobID) submitted event").spec
    }

    /// The result's JSON text, from the job's last event when the job succeeded: `succeeded` is final (no
    /// event follows it) and the only event that sets a result, so it is the event at the job's version.
    /// An event whose JSON holds `\u0000` (an object's metadata can) is selected whole, as for the spec,
    /// and `decodeResult(stored:jobID:version:)` takes the result out of it.
    ///
    /// When the event there is not a `succeeded` (a damaged or hand-edited log), `StoredResult`'s mark
    /// and its type instead (the mark alone: no event), which `decodeResult` turns into an error; a
    /// `succeeded` event without a result gives JSON `null`, which it refuses too.
    static func postgresResultSQL(of table: String) -> String {
        let mark = StoredResult.notSucceededMark
        return "CASE WHEN \(table).state = 'succeeded' THEN coalesce((SELECT CASE WHEN events.type <> 'succeeded' "
            + "THEN '\(mark)' || events.type WHEN strpos(events.data, \(nulEscapeSQL)) = 0 "
            + "THEN coalesce((events.data::json -> 'result')::text, 'null') ELSE events.data END "
            + "FROM events WHERE events.job_id = \(table).id AND events.version = \(table).version), '\(mark)') END"
    }

    /// The result in `stored`, a text `postgresResultSQL` selected at the job's `version` (nil when it
    /// selected none).
    static func decodeResult(stored selected: String?, jobID: String, version: Int) throws(StoreError) -> JobResult? {
        guard let stored = try StoredResult.payload(selected, jobID: jobID, version: version) else { return nil }
        let result: JobResult?
        if stored == "null" {
            result = nil
        } else if stored.contains("\\u0000") {
            struct Succeeded: Decodable { let result: JobResult? }
            result = try StoreJSON.decode(Succeeded.self, stored, what: "job \(jobID) succeeded event").result
        } else {
            result = try StoreJSON.decode(JobResult.self, stored, what: "job \(jobID) result")
        }
        guard let result else { throw StoredResult.noResult(jobID: jobID, version: version) }
        return result
    }

    /// The stored columns, then the spec and the result read from the log: what `init(postgresRow:)`
    /// reads. Selected `FROM jobs` (the table not renamed).
    static let postgresSelectColumns = postgresSelectColumns(of: "jobs")

    /// `postgresSelectColumns` with a NULL where the result would be: no job's `succeeded` payload is
    /// read (`JobFilter.readsResults`), and the records have no result.
    static let postgresSelectColumnsWithoutResult = postgresColumns.map { "jobs.\($0)" }.joined(separator: ", ")
        + ", \(postgresSpecSQL(of: "jobs")), NULL::text"

    /// How many values `postgresSelectColumns` selects: the stored columns, the spec and the result.
    static let postgresSelectedCount = postgresColumns.count + 2

    /// `postgresSelectColumns` from `table`: `jobs`, or rows of it selected under another name.
    static func postgresSelectColumns(of table: String) -> String {
        postgresColumns.map { "\(table).\($0)" }.joined(separator: ", ")
            + ", \(postgresSpecSQL(of: table)), \(postgresResultSQL(of: table))"
    }

    /// What a group commit's row locks read (`FROM jobs`): the stored columns, a NULL where the spec
    /// would be, and the result — the columns of `postgresSelectColumns`, without reading each job's
    /// `submitted` event and parsing its JSON on the server at every group commit. The lifecycle
    /// decides appends on the stored columns (it reads the spec only to submit); the record's spec
    /// comes from `PostgresSpecCache` — the worker decoded it when it claimed the job — or, for a job
    /// this process has not read, from one more query (`init(postgresRow:spec:)`).
    static let postgresLockColumns = postgresColumns.map { "jobs.\($0)" }.joined(separator: ", ")
        + ", NULL::text, \(postgresResultSQL(of: "jobs"))"

    static let postgresInsertSQL = "INSERT INTO jobs (\(postgresStoredColumns)) VALUES ("
        + (1...postgresColumns.count).map { "$\($0)" }.joined(separator: ", ") + ")"

    /// The columns an event can change (the others are fixed by `submitted`), in `postgresValues()` order.
    static let postgresChangingColumns = [
        "state", "run_after_ms", "attempts", "lease_owner", "lease_token", "bytes_done", "bytes_total",
        "resume_point", "error", "pause_requested", "cancel_requested", "version", "updated_at_ms",
        "started_at_ms", "finished_at_ms",
    ]

    /// The UPDATE of every changing column; its parameters are those values, then the id.
    static let postgresUpdateSQL = "UPDATE jobs SET "
        + postgresChangingColumns.enumerated().map { "\($1) = $\($0 + 1)" }.joined(separator: ", ")
        + " WHERE id = $\(postgresChangingColumns.count + 1)"

    /// The record as the values of `postgresColumns`: exactly what the projection stores.
    func postgresValues() throws(StoreError) -> [PostgresValue] {
        [
            .text(id), .integer(seq), .text(kind.rawValue), .text(state.rawValue), .text(queue), .int(priority),
            .integer(runAfterMs), .int(attempts), .int(maxAttempts), .optional(leaseOwner), .optional(leaseToken),
            .integer(bytesDone), .optional(bytesTotal), try Self.json(resumePoint), try Self.json(error),
            .optional(key.map(Self.postgresKeyText)), .bool(pauseRequested),
            .bool(cancelRequested), .int(version), .integer(createdAtMs), .integer(updatedAtMs),
            .optional(startedAtMs), .optional(finishedAtMs), .optional(batch),
        ]
    }

    /// The values of `postgresUpdateSQL`: the changing columns (`postgresChangingColumns`' order), then
    /// the id — the same values `postgresValues()` gives those columns.
    ///
    /// Built directly: each group commit calls this for every job it changes, and picking the values
    /// out of `postgresValues()` by column name (all 24 values built, 15 name searches) was ~4 % of a
    /// PostgreSQL worker's instructions (callgrind, 1,000-job drain). A test compares the two.
    func postgresUpdateValues() throws(StoreError) -> [PostgresValue] {
        [
            .text(state.rawValue), .integer(runAfterMs), .int(attempts), .optional(leaseOwner), .optional(leaseToken),
            .integer(bytesDone), .optional(bytesTotal), try Self.json(resumePoint), try Self.json(error),
            .bool(pauseRequested), .bool(cancelRequested), .int(version), .integer(updatedAtMs),
            .optional(startedAtMs), .optional(finishedAtMs), .text(id),
        ]
    }

    // MARK: - The idempotency key's column

    /// The escape of `postgresKeyText(_:)`: U+0001, a control character, which no key submitted since
    /// 2026-12-04 holds (submit refuses them), so a key in use is stored exactly as it reads.
    static let keyEscape: Unicode.Scalar = "\u{1}"

    /// What `jobs.idempotency_key` holds for `key`: the key, with each U+0001 written twice and each NUL
    /// written as U+0001 `0`. PostgreSQL's text refuses a NUL outright, and an SQLite log from before
    /// 2026-12-04 can hold a key with one; escaping U+0001 too keeps the column one-to-one with keys, so
    /// the unique index still refuses only equal keys. `key(postgresKeyText:)` reads it back. The log
    /// itself is untouched: its JSON holds the key as `\u0000`.
    static func postgresKeyText(_ key: String) -> String {
        guard key.unicodeScalars.contains(where: { $0.value <= 1 }) else { return key }
        var text = String.UnicodeScalarView()
        for scalar in key.unicodeScalars {
            switch scalar.value {
            case 0: text.append(keyEscape); text.append("0")
            case 1: text.append(keyEscape); text.append(keyEscape)
            default: text.append(scalar)
            }
        }
        return String(text)
    }

    /// The key `postgresKeyText(_:)` stored as `text`.
    static func key(postgresKeyText text: String) -> String {
        guard text.unicodeScalars.contains(keyEscape) else { return text }
        var key = String.UnicodeScalarView()
        var escaped = false
        for scalar in text.unicodeScalars {
            if escaped {
                key.append(scalar == "0" ? "\u{0}" : scalar)
                escaped = false
            } else if scalar == keyEscape {
                escaped = true
            } else {
                key.append(scalar)
            }
        }
        return String(key)
    }

    private static func json<T: Encodable>(_ value: T?) throws(StoreError) -> PostgresValue {
        guard let value else { return .null }
        return .text(try StoreJSON.encode(value))
    }

    /// `init(postgresRow:specs:)`, or nil for a job of a kind this jobctl does not know, which
    /// `passingOver` counts.
    init?(listedPostgresRow row: PostgresRow, specs: PostgresSpecCache, passingOver: PassedOver) throws(StoreError) {
        let kind = try row.string(2)
        guard JobKind(rawValue: kind) != nil else {
            passingOver.note(kind: kind)
            return nil
        }
        try self.init(postgresRow: row, specs: specs)
    }

    /// Reads a row selected with `postgresSelectColumns`, its spec decoded through `specs` (the
    /// connection's: see `PostgresSpecCache`).
    init(postgresRow row: PostgresRow, specs: PostgresSpecCache) throws(StoreError) {
        let id = try row.string(0)
        try self.init(postgresRow: row, spec: try specs.spec(ofJob: id, stored: try Self.storedSpec(row, 24, jobID: id)))
    }

    /// Reads a row selected with `postgresLockColumns` (or `postgresSelectColumns`), the job's `spec` known.
    init(postgresRow row: PostgresRow, spec: JobSpec) throws(StoreError) {
        let id = try row.string(0)
        guard let kind = JobKind(rawValue: try row.string(2)) else {
            throw StoreError.unknownKind(jobID: id, kind: try row.string(2))
        }
        guard let state = JobState(rawValue: try row.string(3)) else {
            throw StoreError.corrupt("job \(id) has unknown state '\(try row.string(3))'")
        }
        self.init(
            id: id, seq: try row.integer(1), kind: kind, state: state, queue: try row.string(4),
            priority: Int(try row.integer(5)), runAfterMs: try row.integer(6), attempts: Int(try row.integer(7)),
            maxAttempts: Int(try row.integer(8)), leaseOwner: try row.optionalString(9),
            leaseToken: try row.optionalInteger(10), bytesDone: try row.integer(11), bytesTotal: try row.optionalInteger(12),
            resumePoint: try StoreJSON.decodeOptional(ResumePoint.self, try row.optionalString(13), what: "job \(id) resume_point"),
            error: try StoreJSON.decodeOptional(StorageError.self, try row.optionalString(14), what: "job \(id) error"),
            result: try Self.decodeResult(stored: try row.optionalString(25), jobID: id, version: Int(try row.integer(18))),
            spec: spec,
            key: try row.optionalString(15).map(Self.key(postgresKeyText:)), pauseRequested: try row.flag(16), cancelRequested: try row.flag(17),
            version: Int(try row.integer(18)), createdAtMs: try row.integer(19), updatedAtMs: try row.integer(20),
            startedAtMs: try row.optionalInteger(21), finishedAtMs: try row.optionalInteger(22))
    }

    /// The spec's JSON text at `column`, which the job's `submitted` event must hold.
    private static func storedSpec(_ row: PostgresRow, _ column: Int, jobID: String) throws(StoreError) -> String {
        guard let text = try row.optionalString(column) else { throw StoreError.notItsSubmission(jobID: jobID) }
        return text
    }
}

// MARK: - The events row

extension JobEvent {
    static let postgresSelectColumns = "seq, job_id, version, type, at_ms, actor, lease, data"

    /// Reads a row selected with `postgresSelectColumns`.
    init(postgresRow row: PostgresRow) throws(StoreError) {
        let seq = try row.integer(0)
        guard let type = EventType(rawValue: try row.string(3)) else {
            throw StoreError.unknownEventType(jobID: try row.string(1), type: try row.string(3))
        }
        let wire = try StoreJSON.decode(EventData.self, try row.string(7), what: "event \(seq) data")
        let payload: EventPayload
        do {
            payload = try EventPayload(type: type, wire: wire)
        } catch {
            throw StoreError.corrupt("event \(seq): \(error)")
        }
        self.init(seq: seq, jobID: try row.string(1), version: Int(try row.integer(2)), atMs: try row.integer(4),
                  actor: try row.string(5), leaseToken: try row.optionalInteger(6), payload: payload)
    }
}

// MARK: - Specs already decoded

/// The specs of the jobs a connection read last, by job id with the stored text they were decoded
/// from. A job's spec never changes after `submitted`, but a worker reads the same job's row several
/// times (its claim, each group commit that locks it, each control poll), and decoding the JSON was
/// the costliest part of reading a row. A hit needs the same id and byte-for-byte the same text, so
/// it returns exactly what decoding would.
///
/// Each connection has its own (`PostgresConnection.specs`): one shared by the whole process was
/// emptied by whichever store filled it, so a group commit of jobs its worker had just claimed could
/// find their specs gone and read them again (one more statement and round trip) because another
/// store in the process had read 4,096 jobs.
final class PostgresSpecCache: Sendable {
    /// At most this many specs are kept; when full, the cache starts over (a worker holds a few dozen).
    static let capacity = 4_096

    private let entries = Mutex<[String: (stored: String, spec: JobSpec)]>([:])

    /// The spec `stored` decodes to.
    func spec(ofJob id: String, stored: String) throws(StoreError) -> JobSpec {
        if let hit = entries.withLock({ $0[id] }), hit.stored.hasSameUTF8(as: stored) {
            return hit.spec
        }
        let spec = try JobRecord.decodeSpec(stored: stored, jobID: id)
        entries.withLock { entries in
            if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            entries[id] = (stored, spec)
        }
        return spec
    }

    /// The spec last decoded for job `id`, if it is kept. A job's spec is its `submitted` event's, which
    /// never changes, and ids are ULIDs (80 random bits), so the id alone names it.
    func cached(ofJob id: String) -> JobSpec? {
        entries.withLock { $0[id]?.spec }
    }

    /// How many specs are kept (for tests).
    var count: Int { entries.withLock { $0.count } }
}
