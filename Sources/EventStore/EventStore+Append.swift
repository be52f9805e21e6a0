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

extension SQLiteConnection: DecisionWriter {
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
                let known = written[pending.jobID].flatMap { $0.id.hasSameUTF8(as: pending.jobID) ? $0 : nil }
                let (event, record) = try savepoint { () throws(StoreError) in
                    if let known {
                        return try appendEvent(pending, to: known, now: now)
                    }
                    return try appendEvent(pending, now: now)
                }
                written[pending.jobID] = record
                committedRecords.note(record)
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
    ///
    /// A job whose row this connection committed last (a worker's `started` after its claim, its
    /// outcome after `started`) starts from that record when one probe finds the row at the same
    /// version; the probe reads the lease token too, for the fencing check. Otherwise the whole row is
    /// read and decoded, as before.
    func appendEvent(_ pending: PendingEvent, now: Int64) throws(StoreError) -> (JobEvent, JobRecord) {
        if let cached = committedRecords.candidate(pending.jobID),
           let probe = try first(Self.versionAndLeaseSQL, [.text(pending.jobID)], { row in (row.int(0), row.optionalInt64(1)) }),
           probe.0 == cached.version {
            committedRecords.rememberLease(of: pending.jobID, token: probe.1)
            defer { committedRecords.forgetLease() }
            return try appendEvent(pending, to: cached, now: now)
        }
        return try appendEvent(pending, to: try loadJob(pending.jobID), now: now)
    }

    /// The job row's version and its lease row's token (NULL: no lease row), by job id.
    static let versionAndLeaseSQL =
        "SELECT jobs.version, (SELECT leases.token FROM leases WHERE leases.job_id = jobs.id) FROM jobs WHERE jobs.id = ?"

    /// Stores bytes once under their SHA-256 (hex) and returns the hash.
    public func storeBlob(_ bytes: Data) throws(StoreError) -> String {
        let hash = Digest.sha256Hex(bytes)
        try run("INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?, ?, ?)",
                [.text(hash), .int(bytes.count), .blob(bytes)])
        return hash
    }

    // MARK: DecisionWriter (perform and appendEvent come from StorePort)

    /// The token of the job's lease row, or nil.
    public func leaseToken(ofJob jobID: String) throws(StoreError) -> Int64? {
        // Read by this append's probe a moment ago, in the same transaction: still the row's token.
        if let probed = committedRecords.takeLeaseToken(of: jobID) { return probed }
        return try leaseRow(jobID)?.token
    }

    /// Appends one event row and returns its `seq`.
    public func insertEvent(jobID: String, version: Int, type: EventType, atMs: Int64, actor: String, leaseToken: Int64?,
                            data: String) throws(StoreError) -> Int64 {
        try run("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [.text(jobID), .int(version), .text(type.rawValue), .integer(atMs), .text(actor), .optional(leaseToken), .text(data)])
        return lastInsertRowID
    }

    /// Updates only the columns that changed since `current`, or inserts the row.
    public func writeProjection(_ record: JobRecord, replacing current: JobRecord?) throws(StoreError) {
        if let current {
            let update = try record.update(from: current)
            try run(update.sql, update.values)
        } else {
            try run(JobRecord.insertSQL, try record.rowValues())
        }
    }

    /// Removes the job's lease row.
    public func dropLease(jobID: String) throws(StoreError) {
        try run("DELETE FROM leases WHERE job_id = ?", [.text(jobID)])
    }

    // MARK: Dependencies

    /// The job's projection row, or nil.
    public func dependencyRecord(_ jobID: String) throws(StoreError) -> JobRecord? { try loadJob(jobID) }

    /// Inserts a row of `job_dependencies`.
    public func insertDependency(jobID: String, dependsOn: String) throws(StoreError) {
        try run("INSERT OR IGNORE INTO job_dependencies (job, depends_on) VALUES (?, ?)", [.text(jobID), .text(dependsOn)])
        dependencyRowsAbsent = false
    }

    /// Deletes the rows that wait on `jobID`. Every job that succeeds comes here, and most logs have no
    /// dependencies at all: when the table is empty (looked at once per transaction, which holds the
    /// write lock, so no other writer adds a row meanwhile) there is nothing to delete.
    public func removeDependencies(on jobID: String) throws(StoreError) {
        if dependencyRowsAbsent == nil {
            dependencyRowsAbsent = try first("SELECT 1 FROM job_dependencies LIMIT 1", [], { _ in true }) == nil
        }
        if dependencyRowsAbsent == true { return }
        try run("DELETE FROM job_dependencies WHERE depends_on = ?", [.text(jobID)])
    }

    /// The queued or paused jobs with a row waiting on `jobID`, in submission order.
    public func waitingDependants(of jobID: String) throws(StoreError) -> [JobRecord] {
        try query("""
            SELECT \(JobRecord.selectColumns) FROM jobs
            WHERE id IN (SELECT job FROM job_dependencies WHERE depends_on = ?) AND state IN ('queued', 'paused')
            ORDER BY seq
            """, [.text(jobID)]) { (row) throws(StoreError) in try JobRecord(row: row, specs: decodedSpecs) }
    }
}
