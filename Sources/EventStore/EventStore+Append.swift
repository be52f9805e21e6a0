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

extension SQLiteConnection: DependantsReader {
    /// The body of `EventStore.append(_:now:)`: refusals reported per event, each event's rows undone
    /// when it is refused. Throws only what sinks the whole transaction (busy, I/O, or SQLite rolled it
    /// back).
    ///
    /// First under one savepoint for the whole batch: a refusal comes before its event writes anything
    /// (the lifecycle decides, the lease is checked, then the rows are written), so the others go on
    /// without it, and a batch costs two savepoint statements instead of two per event. Should an event
    /// fail after it wrote (a dependant's cascade refused, a constraint the lifecycle did not foresee),
    /// the batch is rolled back to that savepoint and runs again with a savepoint per event, which
    /// undoes exactly that event.
    func appendBatch(_ events: [PendingEvent], now: Int64) throws(StoreError) -> [Result<JobEvent, StoreError>] {
        let notedBefore = committedRecords.notedRecords
        let dependenciesBefore = dependencyRowsAbsent
        try run("SAVEPOINT batch")
        // A throw here lost the transaction (the caller rolls it back); refusals are caught per event.
        if let outcomes = try appendEach(events, now: now, savepointPerEvent: false) {
            try run("RELEASE batch")
            return outcomes
        }
        try run("ROLLBACK TO batch")
        try run("RELEASE batch")
        committedRecords.restoreNoted(notedBefore)
        dependencyRowsAbsent = dependenciesBefore
        batchesRunAgainWithSavepoints += 1
        // With a savepoint per event nothing is abandoned: an event that fails after it wrote is undone alone.
        return try appendEach(events, now: now, savepointPerEvent: true) ?? []
    }

    /// Appends `events` in order, reporting each one's outcome. With `savepointPerEvent` each event runs
    /// in its own savepoint, so a refused event's rows are undone whenever it failed; without, an event
    /// refused before it changed a row is its failure and the batch goes on, and one refused after it
    /// changed rows — or a row write held for a job's next event that fails when it goes out — abandons
    /// the batch: nil, and the caller undoes the rows of the whole batch.
    func appendEach(_ events: [PendingEvent], now: Int64,
                    savepointPerEvent: Bool) throws(StoreError) -> [Result<JobEvent, StoreError>]? {
        var outcomes: [Result<JobEvent, StoreError>] = []
        outcomes.reserveCapacity(events.count)
        // The rows this batch has written, as written (`batchRecords`): a job's next event in the same
        // batch starts from its record instead of reading and decoding the row again. Nothing else
        // writes while this transaction holds the lock, every row write of the batch — an event's own,
        // and a dependant its end cancelled — lands there, and a refused event's are taken back, so a
        // record there is the row's current state, its lease token included (schema 10: the lease is
        // in the row).
        batchRecords = [:]
        defer { batchRecords = nil }
        // When the next event is the same job's (a worker's `started` queued with the attempt's next
        // event), this one's projection write is held back and the next writes the row once, from the
        // row as stored to the record after both. A held write goes out as soon as the job's run of
        // events ends, refused or not, before any other job's event: every read of the table in between
        // (another job's row, its dependants) sees the row as it stands.
        defer { holdingProjection = nil; heldProjection = nil }
        for (index, pending) in events.enumerated() {
            let nextIsSameJob = index + 1 < events.count && events[index + 1].jobID.hasSameUTF8(as: pending.jobID)
            // Held only under the batch's one savepoint: a held write goes out after its event's step has
            // ended (after the next event's, refused or not), where a failure could not be that event's
            // alone. With a savepoint per event each event writes its own row inside its savepoint.
            holdingProjection = nextIsSameJob && !savepointPerEvent ? pending.jobID : nil
            // A refused event's rows are undone; the write it held goes with them.
            let heldBefore = heldProjection
            batchRecordsUndo.removeAll(keepingCapacity: true)
            let changesBefore = totalChanges
            do throws(StoreError) {
                // Byte for byte: a `String` key also matches canonically equivalent text, another id.
                let known = batchRecords?[pending.jobID].flatMap { $0.id.hasSameUTF8(as: pending.jobID) ? $0 : nil }
                let append = { () throws(StoreError) -> (JobEvent, JobRecord) in
                    if let known {
                        return try self.appendEvent(pending, toRow: known, now: now)
                    }
                    return try self.appendEvent(pending, now: now)
                }
                let (event, record) = savepointPerEvent ? try savepoint(append) : try append()
                committedRecords.note(record)
                outcomes.append(.success(event))
            } catch {
                try throwIfTransactionLost(error)
                if !savepointPerEvent && totalChanges != changesBefore { return nil }
                heldProjection = heldBefore
                for undo in batchRecordsUndo.reversed() { batchRecords?[undo.id] = undo.record }
                outcomes.append(.failure(error))
            }
            if !nextIsSameJob {
                do throws(StoreError) {
                    try writeHeldProjection()
                } catch {
                    // The held write is an earlier event's, already counted a success: the batch is
                    // abandoned and runs again with a savepoint per event, where that event fails alone.
                    try throwIfTransactionLost(error)
                    return nil
                }
            }
        }
        return outcomes
    }

    /// Writes the projection row `writeProjection` held back, if any.
    private func writeHeldProjection() throws(StoreError) {
        holdingProjection = nil
        guard let held = heldProjection else { return }
        heldProjection = nil
        try writeProjection(held.record, replacing: held.stored)
    }

    /// Rethrows `error` when it sinks the whole transaction: a failure of the file itself (busy, I/O),
    /// or one after which SQLite rolled the transaction back. Other errors are one step's refusal.
    func throwIfTransactionLost(_ error: StoreError) throws(StoreError) {
        switch error {
        case .io, .server, .unreachable, .commitUnconfirmed, .busy, .readOnly, .damaged, .replaced, .syncFailed:
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

    /// The lease of a running job as its row holds it (schema 10): owner, token and expiry; nil when the
    /// job is not running or holds no lease. The expiry is nil only for a job left running without one
    /// (a lease row lost before schema 10), which the rescue treats as expired.
    func leaseRow(_ jobID: String) throws(StoreError) -> (owner: String, token: Int64, expiresAtMs: Int64?)? {
        try first("SELECT lease_owner, lease_token, lease_expires_at_ms FROM jobs "
                    + "WHERE id = ? AND state = 'running' AND lease_owner IS NOT NULL AND lease_token IS NOT NULL",
                  [.text(jobID)]) { row in
            (row.text(0), row.int64(1), row.optionalInt64(2))
        }
    }

    /// Appends one reported event (the lifecycle's `.report`), updating the projection row (and with it
    /// the lease, which the row holds). The caller holds a write transaction.
    ///
    /// A job whose row this connection committed last (a worker's `started` after its claim, its
    /// outcome after `started`) starts from that record when one probe finds the row at the same
    /// version. Otherwise the whole row is read and decoded, as before. Either way the fencing check
    /// takes the lease token from that record: the lease is part of the row.
    func appendEvent(_ pending: PendingEvent, now: Int64) throws(StoreError) -> (JobEvent, JobRecord) {
        if let cached = committedRecords.candidate(pending.jobID),
           let version = try first(Self.versionSQL, [.text(pending.jobID)], { row in row.int(0) }),
           version == cached.version {
            return try appendEvent(pending, toRow: cached, now: now)
        }
        return try appendEvent(pending, toRow: try loadJob(pending.jobID), now: now)
    }

    /// Appends one reported event to `current`, the job's row as it stands in this transaction (nil: no
    /// row). The fencing check of `perform` (`leaseToken(ofJob:)`) takes the lease token from it: the
    /// row's lease is exactly what a query would read, so the row is not read again.
    func appendEvent(_ pending: PendingEvent, toRow current: JobRecord?, now: Int64) throws(StoreError) -> (JobEvent, JobRecord) {
        committedRecords.rememberLease(of: pending.jobID, token: current?.state == .running ? current?.leaseToken : nil)
        defer { committedRecords.forgetLease() }
        return try appendEvent(pending, to: current, now: now)
    }

    /// The job row's version, by job id: the probe that tells whether a cached record is the row.
    static let versionSQL = "SELECT version FROM jobs WHERE id = ?"

    /// Stores bytes once under their SHA-256 (hex), `sha256`.
    public func storeBlob(_ bytes: Data, sha256: String) throws(StoreError) {
        try run("INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?, ?, ?)",
                [.text(sha256), .int(bytes.count), .blob(bytes)])
    }

    // MARK: DecisionWriter (perform and appendEvent come from StorePort)

    /// The token of the job's lease (its row's, while it runs), or nil.
    public func leaseToken(ofJob jobID: String) throws(StoreError) -> Int64? {
        // The row this append starts from, in the same transaction: its token is the row's.
        if let known = committedRecords.takeLeaseToken(of: jobID) { return known }
        return try leaseRow(jobID)?.token
    }

    /// Appends one event row and returns its `seq`.
    public func insertEvent(jobID: String, version: Int, type: EventType, atMs: Int64, actor: String, leaseToken: Int64?,
                            data: String) throws(StoreError) -> Int64 {
        try run("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [.text(jobID), .int(version), .text(type.rawValue), .integer(atMs), .text(actor), .optional(leaseToken), .text(data)])
        let seq = lastInsertRowID
        lastInsertedEvent = (jobID, version, seq)
        return seq
    }

    /// The `finished_seq` of `record`'s row (schema 14): the seq of its event at its version when it is
    /// final, else nil. That event is the one `insertEvent` wrote last, unless the same transaction wrote
    /// another job's since (the projection write of a job's run of events goes out before any other
    /// job's event; this is for whatever else may come between): then it is looked up.
    func finishedSeq(of record: JobRecord) throws(StoreError) -> Int64? {
        guard record.finishedAtMs != nil else { return nil }
        if let last = lastInsertedEvent, last.version == record.version, last.jobID.hasSameUTF8(as: record.id) {
            return last.seq
        }
        guard let seq = try first(Self.eventAtVersionSQL, [.text(record.id), .int(record.version)], { row in row.int64(0) }) else {
            throw StoreError.io("job \(record.id) has no event at its version \(record.version); this is a bug in jobctl: please report it")
        }
        return seq
    }

    /// The seq of a job's event at a version.
    static let eventAtVersionSQL = "SELECT seq FROM events WHERE job_id = ? AND version = ?"

    /// Updates only the columns that changed since `current`, or inserts the row.
    ///
    /// The lease expiry (schema 10) goes with the same update: set when the job becomes `running` (only
    /// a claim does that, and it names the expiry in `claimingLease` first), cleared when it stops
    /// running. A new row has none.
    ///
    /// While `holdingProjection` names the job, the write is held back (`appendBatch` writes it); a write
    /// held for it already keeps the row as stored, so the next write goes from there.
    public func writeProjection(_ record: JobRecord, replacing current: JobRecord?) throws(StoreError) {
        if batchRecords != nil {
            batchRecordsUndo.append((record.id, batchRecords?.updateValue(record, forKey: record.id)))
        }
        var current = current
        if let held = heldProjection, held.record.id.hasSameUTF8(as: record.id) {
            heldProjection = nil
            current = held.stored
        }
        if let holding = holdingProjection, holding.hasSameUTF8(as: record.id) {
            heldProjection = (current, record)
            return
        }
        if let current {
            var expiry = JobRecord.ColumnChange.unchanged
            if record.state == .running && current.state != .running {
                guard let claiming = claimingLease, claiming.jobID.hasSameUTF8(as: record.id) else {
                    throw StoreError.io("job \(record.id) became running without a claim's lease expiry; "
                        + "this is a bug in jobctl: please report it")
                }
                expiry = .set(claiming.expiresAtMs)
            } else if record.state != .running && current.state == .running {
                expiry = .cleared
            }
            var finished = JobRecord.ColumnChange.unchanged
            if let seq = try finishedSeq(of: record) {
                finished = .set(seq)
            } else if current.finishedAtMs != nil {
                finished = .cleared
            }
            let update = try record.update(from: current, leaseExpiry: expiry, finishedSeq: finished)
            try run(update.sql, update.values)
        } else {
            try run(JobRecord.insertSQL, try record.rowValues())
            if let seq = try finishedSeq(of: record) {
                try run("UPDATE jobs SET finished_seq = ? WHERE id = ?", [.integer(seq), .text(record.id)])
            }
        }
    }

    /// Nothing to do since schema 10: the lease is part of the job row, and `writeProjection` clears its
    /// expiry in the very update that ends the run (a job that was not running has none), so there is
    /// no lease row to remove and no second write of the job row.
    public func dropLease(jobID: String) throws(StoreError) {}

    // MARK: Dependencies

    /// The job's projection row, or nil.
    public func dependencyRecord(_ jobID: String) throws(StoreError) -> JobRecord? { try loadJob(jobID) }

    /// The job's projection row, not locked, or nil.
    public func unlockedRecord(_ jobID: String) throws(StoreError) -> JobRecord? { try loadJob(jobID) }

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
        try query(EventStore.waitingDependantsSQL, [.text(jobID)]) { (row) throws(StoreError) in
            try JobRecord(row: row, specs: decodedSpecs)
        }
    }

    /// The cancelled jobs with a row waiting on `jobID`, in submission order. SQLite locks the whole
    /// log for a write transaction: `locking` asks nothing more.
    public func cancelledDependants(of jobID: String, locking: Bool) throws(StoreError) -> [JobRecord] {
        try query(EventStore.cancelledDependantsSQL, [.text(jobID)]) { (row) throws(StoreError) in
            try JobRecord(row: row, specs: decodedSpecs)
        }
    }

    /// The jobs `jobID` still waits for and their states (nil: not in the log).
    public func remainingDependencies(of jobID: String, locking: Bool) throws(StoreError) -> [(id: String, state: JobState?)] {
        try query("""
            SELECT d.depends_on, j.state FROM job_dependencies d LEFT JOIN jobs j ON j.id = d.depends_on
            WHERE d.job = ? ORDER BY d.depends_on
            """, [.text(jobID)]) { (row) throws(StoreError) in
            (row.text(0), row.optionalText(1).flatMap(JobState.init(rawValue:)))
        }
    }

    /// The payload of the job's event at `version`, or nil.
    public func payload(ofJob jobID: String, version: Int) throws(StoreError) -> EventPayload? {
        try first("SELECT \(JobEvent.selectColumns) FROM events WHERE job_id = ? AND version = ?",
                  [.text(jobID), .int(version)]) { (row) throws(StoreError) in try JobEvent(row: row).payload }
    }
}

extension EventStore {
    /// The jobs waiting on `?`, read through the `depends_on` index and then each by id. `+state` keeps
    /// the planner off `jobs_claim`: with it, SQLite walked every queued job and looked each up in the
    /// waits, for every job that ended failed or cancelled (each link of a cancelled chain, every failed
    /// job of a long queue), whether anything waited for it or not.
    static let waitingDependantsSQL = dependantsSQL(state: "IN ('queued', 'paused')")

    /// The cancelled jobs waiting on `?` (`retry --with-dependants`), read as `waitingDependantsSQL` reads.
    static let cancelledDependantsSQL = dependantsSQL(state: "= 'cancelled'")

    /// The jobs waiting on `?` whose state passes `state` (a condition on `+state`), in submission order.
    private static func dependantsSQL(state: String) -> String {
        """
        SELECT \(JobRecord.selectColumns) FROM jobs
        WHERE id IN (SELECT job FROM job_dependencies WHERE depends_on = ?) AND +state \(state)
        ORDER BY seq
        """
    }
}
