import Foundation
import JobLifecycle
import JobModel
import StorePort
import Synchronization

// MARK: - JSON

extension StoreJSON {
    /// An optional value as its JSON text, or NULL.
    static func encodeOptional<T: Encodable>(_ value: T?) throws(StoreError) -> SQLiteValue {
        guard let value else { return .null }
        return .text(try encode(value))
    }
}

// MARK: - Decoded specs

/// Specs already decoded, by their JSON text.
///
/// A job's spec never changes after `submitted`, yet every append reads the job's row, and decoding a
/// spec (which parses its storage references again) cost more than the rest of the append together.
/// The same bytes decode to the same spec, so a hit is exactly what decoding would return. A hit is
/// checked byte for byte: a `String` key also matches canonically equivalent text (`é` precomposed or
/// not), which names a different file. Bounded in entries and in bytes (an `upload-data` spec carries
/// its data inline): the working set is the jobs a worker runs at once, so the cache is simply emptied
/// when it fills, and a spec too large to be worth keeping is decoded every time, as before.
///
/// Not `Sendable`: it belongs to one `SQLiteConnection`, which `EventStore`'s lock serialises.
final class DecodedSpecCache {
    private var specs: [String: (text: String, spec: JobSpec)] = [:]
    private var bytes = 0
    private let capacity: Int
    private let byteBudget: Int
    private let largestText: Int

    /// - Parameters:
    ///   - capacity: at most this many specs.
    ///   - byteBudget: at most this many bytes of JSON text (the decoded specs hold about as much).
    ///   - largestText: longer texts are never cached.
    init(capacity: Int = 1_024, byteBudget: Int = 4 << 20, largestText: Int = 64 << 10) {
        self.capacity = capacity
        self.byteBudget = byteBudget
        self.largestText = largestText
    }

    /// A cache that keeps nothing: for a walk over many jobs (`forEachJob`), which reads each spec once,
    /// where hashing every text and filling and emptying the cache was a tenth of `audit`'s CPU.
    static func uncached() -> DecodedSpecCache { DecodedSpecCache(capacity: 0) }

    /// The spec `text` encodes, decoded at most once while it stays cached.
    func spec(_ text: String, jobID: String) throws(StoreError) -> JobSpec {
        try spec(text, jobID: jobID, inPayload: false)
    }

    /// The spec in `text`, the payload of a job's `submitted` event, decoded at most once while it
    /// stays cached.
    func spec(submittedPayload text: String, jobID: String) throws(StoreError) -> JobSpec {
        try spec(text, jobID: jobID, inPayload: true)
    }

    private static func decode(_ text: String, jobID: String, inPayload: Bool) throws(StoreError) -> JobSpec {
        guard inPayload else { return try StoreJSON.decode(JobSpec.self, text, what: "job \(jobID) spec") }
        guard let spec = try StoreJSON.decode(EventData.self, text, what: "job \(jobID) submitted event").spec else {
            throw StoreError.corrupt("job \(jobID) has no spec in its submitted event: run `jobctl replay --verify`")
        }
        return spec
    }

    private func spec(_ text: String, jobID: String, inPayload: Bool) throws(StoreError) -> JobSpec {
        guard capacity > 0 else { return try Self.decode(text, jobID: jobID, inPayload: inPayload) }
        if let hit = specs[text], hit.text.hasSameUTF8(as: text) { return hit.spec }
        let spec = try Self.decode(text, jobID: jobID, inPayload: inPayload)
        let size = text.utf8.count
        guard size <= largestText else { return spec }
        if specs.count >= capacity || bytes + size > byteBudget {
            specs.removeAll(keepingCapacity: true)
            bytes = 0
        }
        if let replaced = specs.updateValue((text, spec), forKey: text) {
            bytes -= replaced.text.utf8.count
        }
        bytes += size
        return spec
    }

    /// How many specs and JSON bytes are cached (tests).
    var usage: (count: Int, bytes: Int) { (specs.count, bytes) }
}

// MARK: - The jobs row

extension JobRecord {
    /// The `jobs` columns, in the order of `rowValues()` and `init(row:specs:)`.
    ///
    /// The spec and the result are not among them (migration 008): the log holds each once, in the
    /// job's `submitted` event and in its `succeeded` event, and `selectColumns` reads them from there.
    static let columns = [
        "id", "seq", "kind", "state", "queue", "priority", "run_after_ms", "attempts", "max_attempts",
        "lease_owner", "lease_token", "bytes_done", "bytes_total", "resume_point", "error",
        "idempotency_key", "pause_requested", "cancel_requested", "version", "created_at_ms", "updated_at_ms",
        "started_at_ms", "finished_at_ms", "batch",
    ]

    /// The positions of `version` and `finished_at_ms` in `columns`.
    static let versionColumn = columns.firstIndex(of: "version")!
    static let finishedAtColumn = columns.firstIndex(of: "finished_at_ms")!

    /// Sets every row's `finished_seq` (schema 14) from the log: the seq of the event at the job's version
    /// when the job is final. As migration 014 first set it; `jobctl replay` after rewriting the rows.
    static let finishedSeqFromLogSQL = "UPDATE jobs SET finished_seq = \(finishedSeqInTheLog)"

    /// The rows whose `finished_seq` is not what `finishedSeqFromLogSQL` would make it: id, stored, expected.
    static let finishedSeqDifferencesSQL = """
        SELECT id, finished_seq, expected FROM (SELECT id, finished_seq, \(finishedSeqInTheLog) AS expected FROM jobs)
        WHERE finished_seq IS NOT expected ORDER BY id
        """

    /// A `jobs` row's `finished_seq` as the log gives it.
    private static let finishedSeqInTheLog = "CASE WHEN finished_at_ms IS NULL THEN NULL "
        + "ELSE (SELECT events.seq FROM events WHERE events.job_id = jobs.id AND events.version = jobs.version) END"

    /// The stored columns alone, for `replay --verify`, which compares them with the fold.
    static let storedColumns = columns.joined(separator: ", ")

    /// The payload of the job's `submitted` event, which holds the spec: `jobs.seq` is that event's seq
    /// (its primary key). The payload's text itself, not `json_extract(…, '$.spec')`: SQLite would parse
    /// it and print the spec again only for jobctl to parse that, where the store's own reader takes the
    /// spec from the payload in one pass.
    ///
    /// NULL unless the event at that seq is this job's own `submitted`: a row whose seq was changed
    /// (by hand, or damage) to another job's event made a worker claim the job and run that job's
    /// transfer, logged as this one's. The conditions read the event row the seq already found.
    static let specSQL = "(SELECT events.data FROM events WHERE events.seq = jobs.seq "
        + "AND events.job_id = jobs.id AND events.type = 'submitted')"

    /// The payload of the job's last event when the job succeeded, which holds the result: `succeeded`
    /// is final (no event follows it) and the only event that sets a result, so it is the event at the
    /// job's version. When that event is not a `succeeded` (a damaged or hand-edited log), `!` and its
    /// type instead (`!` alone: no event there), which `StoredResult` turns into an error: read as
    /// a payload, the job showed no result and `result` contradicted itself.
    static let resultSQL = "CASE WHEN jobs.state = 'succeeded' THEN coalesce((SELECT CASE WHEN events.type = 'succeeded' "
        + "THEN events.data ELSE '\(StoredResult.notSucceededMark)' || events.type END FROM events "
        + "WHERE events.job_id = jobs.id AND events.version = jobs.version), '\(StoredResult.notSucceededMark)') END"

    /// The stored columns, then the spec and the result read from the log: what `init(row:specs:)` reads.
    /// Selected `FROM jobs` (the table not renamed).
    static let selectColumns = columns.map { "jobs.\($0)" }.joined(separator: ", ") + ", \(specSQL), \(resultSQL)"

    /// `selectColumns` with a NULL where the result would be: no job's `succeeded` payload is read
    /// (`JobFilter.readsResults`), and the records have no result.
    static let selectColumnsWithoutResult = columns.map { "jobs.\($0)" }.joined(separator: ", ") + ", \(specSQL), NULL"

    static let insertSQL = "INSERT INTO jobs (\(storedColumns)) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))"

    /// The columns an event can change. The others (id, seq, kind, queue, priority, max_attempts,
    /// idempotency_key, created_at_ms, batch) are fixed by `submitted`: `apply(_:)` never touches them.
    static let changingColumns = [
        "state", "run_after_ms", "attempts", "lease_owner", "lease_token", "bytes_done", "bytes_total",
        "resume_point", "error", "pause_requested", "cancel_requested", "version", "updated_at_ms",
        "started_at_ms", "finished_at_ms",
    ]

    /// The record as the values of `columns`: exactly what the projection stores.
    func rowValues() throws(StoreError) -> [SQLiteValue] {
        [
            .text(id), .integer(seq), .text(kind.rawValue), .text(state.rawValue), .text(queue), .int(priority),
            .integer(runAfterMs), .int(attempts), .int(maxAttempts), .optional(leaseOwner), .optional(leaseToken),
            .integer(bytesDone), .optional(bytesTotal), try StoreJSON.encodeOptional(resumePoint),
            try StoreJSON.encodeOptional(error), .optional(key), .bool(pauseRequested), .bool(cancelRequested), .int(version), .integer(createdAtMs),
            .integer(updatedAtMs), .optional(startedAtMs), .optional(finishedAtMs), .optional(batch),
        ]
    }

    /// The UPDATE that turns the stored row of `old` into this record: it sets only the columns whose
    /// stored values differ (each as `rowValues()` gives it), so an append encodes and writes what its
    /// event changed, and an index whose columns did not change (a `progress` event leaves `state`
    /// alone) is not touched. The id is the last parameter.
    ///
    /// Text is compared by its bytes, not with `==`: Swift calls canonically equivalent strings equal,
    /// yet the projection must hold the exact bytes the fold would write.
    ///
    /// `leaseExpiry` adds `lease_expires_at_ms` (not a fold's column: see `ColumnChange`) to the same
    /// statement, so a claim and the end of a run each write the row once.
    ///
    /// `finishedSeq` adds `finished_seq` (schema 14; not a fold's column either: the fold knows no seqs) to
    /// the statement: set by every write of a final job's row, cleared when a retry makes it unfinished.
    func update(from old: JobRecord, leaseExpiry: ColumnChange = .unchanged,
                finishedSeq: ColumnChange = .unchanged) throws(StoreError) -> (sql: String, values: [SQLiteValue]) {
        // The columns set, as bits in `changingColumns` order: the statement's text depends on nothing
        // else, so it is built once per set of columns (a worker's appends use a handful of them).
        var columns: UInt32 = 0
        var values: [SQLiteValue] = []
        values.reserveCapacity(8)
        func set(_ column: ChangingColumn, _ value: SQLiteValue) {
            columns |= 1 << column.rawValue
            values.append(value)
        }
        func setJSON<T: Encodable & Equatable>(_ column: ChangingColumn, _ new: T?, _ old: T?) throws(StoreError) {
            if new == nil && old == nil { return }
            let encoded = try new.map { (value) throws(StoreError) in try StoreJSON.encode(value) }
            // Equal values can still differ in bytes (see above); only then are both encoded.
            if new == old, let old, let encoded, Self.sameBytes(try StoreJSON.encode(old), encoded) { return }
            set(column, .optional(encoded))
        }
        if state != old.state { set(.state, .text(state.rawValue)) }
        if runAfterMs != old.runAfterMs { set(.runAfterMs, .integer(runAfterMs)) }
        if attempts != old.attempts { set(.attempts, .int(attempts)) }
        if !Self.sameBytes(leaseOwner, old.leaseOwner) { set(.leaseOwner, .optional(leaseOwner)) }
        if leaseToken != old.leaseToken { set(.leaseToken, .optional(leaseToken)) }
        if bytesDone != old.bytesDone { set(.bytesDone, .integer(bytesDone)) }
        if bytesTotal != old.bytesTotal { set(.bytesTotal, .optional(bytesTotal)) }
        try setJSON(.resumePoint, resumePoint, old.resumePoint)
        try setJSON(.error, error, old.error)
        if pauseRequested != old.pauseRequested { set(.pauseRequested, .bool(pauseRequested)) }
        if cancelRequested != old.cancelRequested { set(.cancelRequested, .bool(cancelRequested)) }
        // Every event bumps the version, so the SET list is never empty.
        set(.version, .int(version))
        if updatedAtMs != old.updatedAtMs { set(.updatedAtMs, .integer(updatedAtMs)) }
        if startedAtMs != old.startedAtMs { set(.startedAtMs, .optional(startedAtMs)) }
        if finishedAtMs != old.finishedAtMs { set(.finishedAtMs, .optional(finishedAtMs)) }
        func setOutsideTheFold(_ change: ColumnChange, _ bit: UInt32) {
            switch change {
            case .unchanged:
                break
            case .set(let value):
                columns |= bit
                values.append(.integer(value))
            case .cleared:
                columns |= bit
                values.append(.null)
            }
        }
        setOutsideTheFold(leaseExpiry, Self.leaseExpiryBit)
        setOutsideTheFold(finishedSeq, Self.finishedSeqBit)
        values.append(.text(id))
        return (Self.updateSQL(setting: columns), values)
    }

    /// What an update does to one of the two integer columns the fold does not make:
    /// `lease_expires_at_ms` (schema 10: the claim sets it, the end of a run clears it, every other event
    /// leaves it as the heartbeats made it) and `finished_seq` (schema 14: every write of a final job's row
    /// sets it, a retry clears it).
    enum ColumnChange: Equatable {
        case unchanged
        case set(Int64)
        case cleared
    }

    /// The bit of `lease_expires_at_ms` in a column set, after every `ChangingColumn`'s.
    static let leaseExpiryBit: UInt32 = 1 << 31

    /// The bit of `finished_seq` in a column set, written after `lease_expires_at_ms`.
    static let finishedSeqBit: UInt32 = 1 << 30

    /// The columns `update(from:)` may set, in the order it sets them (the bit of each in a column set).
    enum ChangingColumn: UInt32, CaseIterable {
        case state, runAfterMs, attempts, leaseOwner, leaseToken, bytesDone, bytesTotal, resumePoint, error,
             pauseRequested, cancelRequested, version, updatedAtMs, startedAtMs, finishedAtMs

        /// The column's name: `changingColumns` at the same position.
        var name: String { JobRecord.changingColumns[Int(rawValue)] }
    }

    /// `UPDATE jobs SET a = ?, b = ? … WHERE id = ?` for the columns whose bits are in `columns`, in
    /// `ChangingColumn` order, then `lease_expires_at_ms` when `leaseExpiryBit` is set and `finished_seq`
    /// when `finishedSeqBit` is.
    static func updateSQL(setting columns: UInt32) -> String {
        if let known = updateStatements.withLock({ $0[columns] }) { return known }
        var names = ChangingColumn.allCases.filter { columns & (1 << $0.rawValue) != 0 }.map(\.name)
        if columns & leaseExpiryBit != 0 { names.append("lease_expires_at_ms") }
        if columns & finishedSeqBit != 0 { names.append("finished_seq") }
        let sql = "UPDATE jobs SET " + names.map { "\($0) = ?" }.joined(separator: ", ") + " WHERE id = ?"
        updateStatements.withLock { $0[columns] = sql }
        return sql
    }

    /// `updateSQL`'s texts, built once per column set for the process.
    private static let updateStatements = Mutex<[UInt32: String]>([:])

    private static func sameBytes(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case (let a?, let b?): a.hasSameUTF8(as: b)
        default: false
        }
    }

    /// `init(row:specs:)`, or nil for a job of a kind this jobctl does not know, which `passingOver` counts.
    init?(listedRow row: SQLiteRow, specs: DecodedSpecCache, passingOver: PassedOver) throws(StoreError) {
        guard JobKind(rawValue: row.text(2)) != nil else {
            passingOver.note(kind: row.text(2))
            return nil
        }
        try self.init(row: row, specs: specs)
    }

    /// Reads a row selected with `selectColumns`, decoding its spec through `specs`.
    init(row: SQLiteRow, specs: DecodedSpecCache) throws(StoreError) {
        let id = row.text(0)
        guard let kind = JobKind(rawValue: row.text(2)) else {
            throw StoreError.unknownKind(jobID: id, kind: row.text(2))
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
            result: try Self.result(row, 25, jobID: id, version: row.int(18)),
            spec: try Self.spec(row, 24, specs: specs, jobID: id),
            key: row.optionalText(15), pauseRequested: row.bool(16), cancelRequested: row.bool(17),
            version: row.int(18), createdAtMs: row.int64(19), updatedAtMs: row.int64(20),
            startedAtMs: row.optionalInt64(21), finishedAtMs: row.optionalInt64(22))
    }

    /// The spec at `column`, which the job's `submitted` event must hold.
    private static func spec(_ row: SQLiteRow, _ column: Int, specs: DecodedSpecCache, jobID: String) throws(StoreError) -> JobSpec {
        guard let text = row.optionalText(column) else { throw StoreError.notItsSubmission(jobID: jobID) }
        return try specs.spec(submittedPayload: text, jobID: jobID)
    }

    /// The result in the payload at `column` (the `succeeded` event's), if the job succeeded.
    private static func result(_ row: SQLiteRow, _ column: Int, jobID: String, version: Int) throws(StoreError) -> JobResult? {
        guard let text = try StoredResult.payload(row.optionalText(column), jobID: jobID, version: version) else { return nil }
        guard let result = try StoreJSON.decode(EventData.self, text, what: "job \(jobID) succeeded event").result else {
            throw StoredResult.noResult(jobID: jobID, version: version)
        }
        return result
    }
}

// MARK: - The events row

extension JobEvent {
    static let selectColumns = "seq, job_id, version, type, at_ms, actor, lease, data"

    /// Reads a row selected with `selectColumns`.
    init(row: SQLiteRow) throws(StoreError) {
        let seq = row.int64(0)
        guard let type = EventType(rawValue: row.text(3)) else {
            throw StoreError.unknownEventType(jobID: row.text(1), type: row.text(3))
        }
        let wire = try StoreJSON.decode(EventData.self, row.text(7), what: "event \(seq) data")
        let payload: EventPayload
        do {
            payload = try EventPayload(type: type, wire: wire)
        } catch {
            throw StoreError.corrupt("event \(seq): \(error)")
        }
        self.init(seq: seq, jobID: row.text(1), version: row.int(2), atMs: row.int64(4), actor: row.text(5),
                  leaseToken: row.optionalInt64(6), payload: payload)
    }
}
