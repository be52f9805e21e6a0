import Checksums
import Foundation
import JobModel

/// An event to append: what happened to which job, who says so, and under which guarantees.
public struct PendingEvent: Sendable, Equatable {
    /// The job the event belongs to.
    public var jobID: String
    /// What happened.
    public var type: EventType
    /// Who appends it (`worker:<host>:<pid>`, `cli:<user>`).
    public var actor: String
    /// The lease token the appending worker holds: the append is refused (`staleLease`) unless the job
    /// is running under exactly this token. Nil for appends that are not a worker's (CLI control).
    public var leaseToken: Int64?
    /// The version the caller saw: the append is refused (`versionConflict`) unless it is still current.
    public var expectedVersion: Int?
    /// The payload.
    public var data: EventData

    /// Creates a pending event.
    public init(jobID: String, type: EventType, actor: String, leaseToken: Int64? = nil,
                expectedVersion: Int? = nil, data: EventData = EventData()) {
        self.jobID = jobID
        self.type = type
        self.actor = actor
        self.leaseToken = leaseToken
        self.expectedVersion = expectedVersion
        self.data = data
    }
}

extension EventStore {
    /// Appends a batch of events in ONE `BEGIN IMMEDIATE` transaction (group commit), each in its own
    /// savepoint so a refused event does not sink the others.
    ///
    /// Per event: the expected version must be current (`versionConflict`); a lease token must still
    /// hold the running job (`staleLease`, fencing); the event must be possible in the job's state
    /// (`invalidTransition`). The projection row changes in the same transaction. `result.data` of a
    /// `succeeded` event moves into `blobs` and is replaced by `result.blob`. `submitted` and `claimed`
    /// are written only by `submit` and `claim`.
    ///
    /// Throws only when the transaction as a whole fails (busy, I/O); the per-event outcomes are in
    /// the result, in the order given. When it returns, the accepted events are synced to disk.
    public func append(_ events: [PendingEvent], now: Int64) throws(StoreError) -> [Result<JobEvent, StoreError>] {
        guard !events.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> [Result<JobEvent, StoreError>] in
            try connection.appendBatch(events, now: now)
        }
    }

    /// Appends one event in its own transaction and returns it as stored; throws its refusal
    /// (`versionConflict`, `staleLease`, `invalidTransition`, `notFound`) or the transaction's failure.
    @discardableResult
    public func append(_ event: PendingEvent, now: Int64) throws(StoreError) -> JobEvent {
        guard let outcome = try append([event], now: now).first else {
            // append([one]) returns exactly one outcome per event given.
            throw StoreError.invalidControl("append returned no outcome for job \(event.jobID)")
        }
        return try outcome.get()
    }
}

// MARK: - Appending inside a transaction

extension SQLiteConnection {
    /// The body of `EventStore.append(_:now:)`: each event in its own savepoint, refusals reported per
    /// event. Throws only what sinks the whole transaction (busy, I/O, or SQLite rolled it back).
    func appendBatch(_ events: [PendingEvent], now: Int64) throws(StoreError) -> [Result<JobEvent, StoreError>] {
        var outcomes: [Result<JobEvent, StoreError>] = []
        outcomes.reserveCapacity(events.count)
        // The rows this transaction has written, as written: a job's next event in the same batch
        // starts from its record instead of reading and decoding the row again. Nothing else writes
        // while this transaction holds the lock, and a refused event changes nothing, so a record
        // here is the row's current state; lease rows are still read for every fenced event.
        var written: [String: JobRecord] = [:]
        for pending in events {
            do throws(StoreError) {
                guard pending.type != .submitted && pending.type != .claimed else {
                    throw StoreError.invalidControl(
                        "'\(pending.type.rawValue)' events are written by submit() and claim(), not append()")
                }
                // Byte for byte: a `String` key also matches canonically equivalent text, another id.
                let known = written[pending.jobID].flatMap { $0.id.utf8.elementsEqual(pending.jobID.utf8) ? $0 : nil }
                let (event, record) = try savepoint { () throws(StoreError) in
                    if let known {
                        return try appendEvent(pending, to: known, now: now)
                    }
                    return try appendEvent(pending, now: now)
                }
                written[pending.jobID] = record
                outcomes.append(.success(event))
            } catch {
                try throwIfTransactionLost(error)
                outcomes.append(.failure(error))
            }
        }
        return outcomes
    }

    /// Rethrows `error` when it sinks the whole transaction: a failure of the file itself (busy, I/O),
    /// or one after which SQLite rolled the transaction back. Other errors are one step's refusal.
    func throwIfTransactionLost(_ error: StoreError) throws(StoreError) {
        switch error {
        case .io, .busy, .readOnly:
            throw error
        default:
            guard isInTransaction else { throw error }
        }
    }

    /// The job's projection row, or nil.
    func loadJob(_ id: String) throws(StoreError) -> JobRecord? {
        try first("SELECT \(JobRecord.selectColumns) FROM jobs WHERE id = ?", [.text(id)]) { (row) throws(StoreError) in
            try JobRecord(row: row, specs: decodedSpecs)
        }
    }

    /// The live lease row of a job: its token and expiry.
    func leaseRow(_ jobID: String) throws(StoreError) -> (owner: String, token: Int64, expiresAtMs: Int64)? {
        try first("SELECT owner, token, expires_at_ms FROM leases WHERE job_id = ?", [.text(jobID)]) { row in
            (row.text(0), row.int64(1), row.int64(2))
        }
    }

    /// Checks and appends one event, updating the projection and the lease table. The caller holds
    /// a write transaction.
    func appendEvent(_ pending: PendingEvent, now: Int64) throws(StoreError) -> (JobEvent, JobRecord) {
        try appendEvent(pending, to: try loadJob(pending.jobID), now: now)
    }

    /// Checks and appends one event to a job whose projection row the caller read (or wrote) in this
    /// same write transaction: `current` must be that row as it stands now (nil: no row), so the
    /// version, fencing and transition checks see the latest state.
    ///
    /// When the event leaves a control request pending on a job that is no longer running, the event
    /// that honours it (`JobRecord.settlement(after:from:)`) follows at once, by the same actor; the
    /// returned record is the job after both, the returned event the one asked for.
    func appendEvent(_ pending: PendingEvent, to current: JobRecord?, now: Int64) throws(StoreError) -> (JobEvent, JobRecord) {
        precondition(current.map { $0.id.utf8.elementsEqual(pending.jobID.utf8) } ?? true,
                     "appendEvent: the record is not job \(pending.jobID)'s")
        if pending.type == .submitted {
            if let current {
                throw StoreError.invalidTransition(jobID: pending.jobID, state: current.state, event: .submitted)
            }
            if let expected = pending.expectedVersion, expected != 0 {
                throw StoreError.versionConflict(expected: expected, actual: 0)
            }
        } else {
            guard let current else { throw StoreError.notFound(pending.jobID) }
            if let expected = pending.expectedVersion, expected != current.version {
                throw StoreError.versionConflict(expected: expected, actual: current.version)
            }
            // Fencing. `claimed` carries the new token, so it is checked by claim() instead.
            if pending.type != .claimed, let token = pending.leaseToken {
                let lease = try leaseRow(pending.jobID)
                guard current.state == .running, current.leaseToken == token, lease?.token == token else {
                    throw StoreError.staleLease(jobID: pending.jobID, token: token)
                }
            }
            guard current.allows(pending.type) else {
                throw StoreError.invalidTransition(jobID: pending.jobID, state: current.state, event: pending.type)
            }
        }

        var data = pending.data
        if pending.type == .succeeded, var result = data.result, let bytes = result.data {
            result.blob = try storeBlob(bytes)
            result.data = nil
            data.result = result
        }

        let version = (current?.version ?? 0) + 1
        try run("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [.text(pending.jobID), .int(version), .text(pending.type.rawValue), .integer(now),
                 .text(pending.actor), .optional(pending.leaseToken), .text(try StoreJSON.encode(data))])
        let event = JobEvent(seq: lastInsertRowID, jobID: pending.jobID, version: version, type: pending.type,
                             atMs: now, actor: pending.actor, leaseToken: pending.leaseToken, data: data)

        let record: JobRecord
        if let current {
            var updated = current
            updated.apply(event)
            record = updated
            let update = try record.update(from: current)
            try run(update.sql, update.values)
        } else {
            guard let created = JobRecord(submitted: event) else {
                throw StoreError.invalidControl("a 'submitted' event needs the job's spec")
            }
            record = created
            try run(JobRecord.insertSQL, try record.rowValues())
        }
        if record.state != .running {
            try run("DELETE FROM leases WHERE job_id = ?", [.text(record.id)])
        }
        // A request acknowledged while the job ran is honoured in this same transaction.
        if let current, let settlement = record.settlement(after: event, from: current) {
            let settled = try appendEvent(PendingEvent(jobID: record.id, type: settlement.type, actor: pending.actor,
                                                       data: settlement.data), to: record, now: now).1
            return (event, settled)
        }
        return (event, record)
    }

    /// Stores bytes once under their SHA-256 (hex) and returns the hash.
    func storeBlob(_ bytes: Data) throws(StoreError) -> String {
        let hash = Digest.sha256Hex(bytes)
        try run("INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?, ?, ?)",
                [.text(hash), .int(bytes.count), .blob(bytes)])
        return hash
    }
}
