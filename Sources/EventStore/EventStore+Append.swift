import Checksums
import Foundation
import JobLifecycle
import JobModel
import StorePort

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

    /// Appends one reported event (the lifecycle's `.report`), updating the projection and the lease
    /// table. The caller holds a write transaction.
    func appendEvent(_ pending: PendingEvent, now: Int64) throws(StoreError) -> (JobEvent, JobRecord) {
        try appendEvent(pending, to: try loadJob(pending.jobID), now: now)
    }

    /// Appends one reported event to a job whose projection row the caller read (or wrote) in this
    /// same write transaction: `current` must be that row as it stands now (nil: no row).
    ///
    /// The lifecycle decides; when the event leaves a control request pending on a job that is no
    /// longer running, the events that honour it follow in the same decision. The returned record is
    /// the job after all of them, the returned event the one asked for.
    func appendEvent(_ pending: PendingEvent, to current: JobRecord?, now: Int64) throws(StoreError) -> (JobEvent, JobRecord) {
        let (events, record) = try perform(.report(pending.payload), jobID: pending.jobID, on: current,
                                           actor: pending.actor, expectedVersion: pending.expectedVersion,
                                           leaseToken: pending.leaseToken, now: now)
        guard let first = events.first, let record else {
            // A report is never a repeat: the lifecycle decides at least the reported event.
            throw StoreError.invalidControl("the lifecycle decided nothing for a '\(pending.type.rawValue)' of job \(pending.jobID)")
        }
        return (first, record)
    }

    /// Asks the lifecycle what `command` does to job `jobID` (whose current row is `current`, nil: no
    /// row) and persists its answer: the events, the projection row, the lease row. Refusals become
    /// `StoreError`s. The caller holds a write transaction, and `current` is the row as it stands now.
    ///
    /// Returns the events appended (empty for a repeat) and the job after them.
    func perform(_ command: JobCommand, jobID: String, on current: JobRecord?, actor: String,
                 expectedVersion: Int? = nil, leaseToken: Int64? = nil,
                 now: Int64) throws(StoreError) -> (events: [JobEvent], record: JobRecord?) {
        precondition(current.map { $0.id.utf8.elementsEqual(jobID.utf8) } ?? true,
                     "perform: the record is not job \(jobID)'s")
        var lifecycle = JobLifecycle(record: current)
        let decided: [DecidedEvent]
        switch lifecycle.decide(command, now: now, expectedVersion: expectedVersion, leaseToken: leaseToken) {
        case .success(let events): decided = events
        case .failure(let refusal): throw StoreError(refusal, jobID: jobID)
        }
        // Fencing against the lease table too: the row is the store's own record of who holds the job.
        if let leaseToken, case .report = command, try leaseRow(jobID)?.token != leaseToken {
            throw StoreError.staleLease(jobID: jobID, token: leaseToken)
        }
        var events: [JobEvent] = []
        events.reserveCapacity(decided.count)
        for decision in decided {
            var payload = decision.payload
            // Download-to-memory bytes go to the content-addressed blobs; the event references them.
            if case .succeeded(let progress, var result) = payload, let bytes = result.data {
                result.blob = try storeBlob(bytes)
                result.data = nil
                payload = .succeeded(progress, result: result)
            }
            let version = (lifecycle.record?.version ?? 0) + 1
            try run("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [.text(jobID), .int(version), .text(payload.type.rawValue), .integer(now), .text(actor),
                     .optional(decision.leaseToken), .text(try StoreJSON.encode(payload.wire))])
            let event = JobEvent(seq: lastInsertRowID, jobID: jobID, version: version, atMs: now, actor: actor,
                                 leaseToken: decision.leaseToken, payload: payload)
            lifecycle.apply(event)
            events.append(event)
        }
        guard let record = lifecycle.record, !events.isEmpty else { return (events, lifecycle.record) }
        if let current {
            let update = try record.update(from: current)
            try run(update.sql, update.values)
        } else {
            try run(JobRecord.insertSQL, try record.rowValues())
        }
        if record.state != .running {
            try run("DELETE FROM leases WHERE job_id = ?", [.text(record.id)])
        }
        return (events, record)
    }

    /// Stores bytes once under their SHA-256 (hex) and returns the hash.
    func storeBlob(_ bytes: Data) throws(StoreError) -> String {
        let hash = Digest.sha256Hex(bytes)
        try run("INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?, ?, ?)",
                [.text(hash), .int(bytes.count), .blob(bytes)])
        return hash
    }
}
