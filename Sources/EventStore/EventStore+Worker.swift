import Foundation
import JobLifecycle
import JobModel
import StorePort

extension EventStore {
    /// Claims up to `limit` runnable jobs for `owner` in one IMMEDIATE transaction.
    ///
    /// Runnable: queued with `run_after ≤ now`, in `queues` (nil: any queue; empty: none), ordered by
    /// priority (highest first), run_after, then submission order. Each gets a `claimed` event with a
    /// fresh token from a global counter (tokens only grow) and a lease expiring at `now + leaseMs`, kept
    /// in its row (schema 10) by the same update that makes it `running`.
    /// A queued job that still holds a pause or cancel request (only a database written by an older
    /// jobctl has one) is `paused` or `cancelled` here instead of being claimed.
    public func claim(owner: String, queues: [String]?, limit: Int, leaseMs: Int64, now: Int64) throws(StoreError) -> [ClaimedJob] {
        let request = ClaimRequest(owner: owner, queues: queues, limit: limit, leaseMs: leaseMs, now: now)
        guard !request.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> [ClaimedJob] in
            try connection.claim(request)
        }
    }

    /// Appends `events` exactly as `append(_:now:)` does, then claims exactly as `claim` does, in ONE
    /// transaction: a worker's group commit and its next claim share one sync instead of two.
    ///
    /// The claim runs after the appends (so it sees the slots they freed) in its own savepoint: a claim
    /// refused for a reason of its own (a corrupt row) is returned as its failure and the appends still
    /// commit. Throws only when the transaction as a whole fails (busy, I/O); then nothing is written.
    public func append(_ events: [PendingEvent], now: Int64,
                       thenClaim request: ClaimRequest) throws(StoreError) -> AppendAndClaimOutcome {
        try writeTransaction { (connection) throws(StoreError) -> AppendAndClaimOutcome in
            let appended = try connection.appendBatch(events, now: now)
            guard !request.isEmpty else { return AppendAndClaimOutcome(appended: appended, claimed: .success([])) }
            do throws(StoreError) {
                let claimed = try connection.savepoint { () throws(StoreError) in try connection.claim(request) }
                return AppendAndClaimOutcome(appended: appended, claimed: .success(claimed))
            } catch {
                try connection.throwIfTransactionLost(error)
                // The claim's savepoint rolled back: records it noted were never written. The appends'
                // are forgotten too (the cache cannot tell them apart); their next append reads the row.
                connection.committedRecords.discardNoted()
                return AppendAndClaimOutcome(appended: appended, claimed: .failure(error))
            }
        }
    }

    /// Extends to `now + leaseMs` every lease in `leases` (job id → token) that `owner` still holds
    /// (job running under that token). Returns the ids whose lease was lost: the worker must stop them.
    /// Heartbeats append no events. One transaction for the whole set. The update changes only the row's
    /// `lease_expires_at_ms` (schema 10), which no index holds: no index entry is written.
    public func heartbeat(owner: String, leases: [String: Int64], leaseMs: Int64, now: Int64) throws(StoreError) -> Set<String> {
        guard !leases.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> Set<String> in
            var lost: Set<String> = []
            for (jobID, token) in leases {
                try connection.run("""
                    UPDATE jobs SET lease_expires_at_ms = ?
                    WHERE id = ? AND state = 'running' AND lease_token = ? AND lease_owner = ?
                    """, [.integer(now + leaseMs), .text(jobID), .integer(token), .text(owner)])
                if connection.changes == 0 { lost.insert(jobID) }
            }
            return lost
        }
    }

    /// Rescues running jobs whose lease expired (or vanished) by `now`: each gets `lease_expired` and goes
    /// back to the queue at its resume point, or, when its attempts are used up, `failed` with
    /// `retryLimitExceeded`. A cancel pending on the job wins over both: `lease_expired`, then `cancelled`;
    /// a pending pause is honoured after `lease_expired` (`paused`), or at once on the last attempt (see
    /// `JobLifecycle`'s expiry). Returns each rescued job as the rescue left it. One
    /// transaction. The expiries are in the job rows (schema 10): the running jobs are found through
    /// `jobs_claim`, with no other table read.
    public func rescueExpired(now: Int64, actor: String) throws(StoreError) -> [RescuedJob] {
        try writeTransaction { (connection) throws(StoreError) -> [RescuedJob] in
            let expired = try connection.query("""
                SELECT id, lease_owner, lease_expires_at_ms FROM jobs
                WHERE state = 'running' AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= ?)
                  AND \(WorkableRows.condition())
                ORDER BY seq
                """, [.integer(now)]) { row in (row.text(0), row.optionalText(1), row.optionalInt64(2)) }
            var rescued: [RescuedJob] = []
            for (id, owner, expiresAt) in expired {
                guard let job = try connection.loadJob(id) else { continue }
                let holder = owner ?? job.leaseOwner ?? "an unknown worker"
                let after = try connection.perform(.expireLease(holder: holder, expiredAtMs: expiresAt), jobID: id, on: job,
                                                   actor: actor, expectedVersion: job.version, now: now)
                rescued.append(RescuedJob(record: after.record ?? job, holder: holder))
            }
            return rescued
        }
    }

    /// `PRAGMA data_version` of this connection: it changes when another connection commits, so an
    /// idle worker or a watcher polls it cheaply instead of scanning. Commits made through this same
    /// store do not change it (the caller knows about those already).
    ///
    /// See https://www.sqlite.org/pragma.html#pragma_data_version
    public func dataVersion() throws(StoreError) -> Int64 {
        // Asked every poll interval by every worker, idle or not: the one place an idle worker would
        // learn that its database file was deleted or replaced (no write syncs), and waited for ever.
        try walSync?.checkDatabaseFile()
        return try withConnection { (connection) throws(StoreError) -> Int64 in
            try connection.first("PRAGMA data_version") { row in row.int64(0) } ?? 0
        }
    }

    /// See `JobStore.refuseNewerSchema`: the ledger's newest version against the newest this jobctl knows.
    public func refuseNewerSchema() throws(StoreError) {
        let found = try withConnection { (connection) throws(StoreError) -> Int in
            try connection.first("SELECT max(version) FROM schema_migrations") { row in row.int(0) } ?? 0
        }
        if found > Migrator.latestVersion { throw StoreError.newerSchema(found: found, known: Migrator.latestVersion) }
    }

    /// The earliest `run_after` among queued jobs in `queues` (nil: any queue): when the next retry is due.
    public func nextRunAfter(queues: [String]?) throws(StoreError) -> Int64? {
        if let queues, queues.isEmpty { return nil }
        // Only the jobs that wait for nothing (schema 19): across every queue the claim-order index holds
        // exactly those (the planner's own pick, `jobs_claim (state)`, walked every queued job, the blocked
        // ones of a long chain too, on every call); with a queue filter `jobs_claim (state, queue,
        // waits_for_jobs)` seeks to them.
        let index = queues == nil ? " INDEXED BY jobs_queued_claim_order" : ""
        var sql = "SELECT min(run_after_ms) FROM jobs\(index) WHERE state = 'queued' AND waits_for_jobs = 0"
            + " AND \(WorkableRows.condition())"
        if let queues { sql += " AND queue IN (\(queues.map { _ in "?" }.joined(separator: ", ")))" }
        let values = (queues ?? []).map(SQLiteValue.text)
        return try withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.first(sql, values) { row in row.optionalInt64(0) } ?? nil
        }
    }
}

extension SQLiteConnection {
    /// The body of `EventStore.claim`; the caller holds a write transaction.
    func claim(_ request: ClaimRequest) throws(StoreError) -> [ClaimedJob] {
        let (owner, queues, limit, leaseMs, now) = (request.owner, request.queues, request.limit, request.leaseMs, request.now)
        let sql = Self.claimSQL(queues: queues)
        let queueValues = (queues ?? []).map(SQLiteValue.text)
        let actor = owner
        var claimed: [ClaimedJob] = []
        // Every queued job's spec is new to this connection (each job is claimed once), so caching it
        // would only hash and store texts never asked for again; the claimed record carries the spec.
        let specs = DecodedSpecCache.uncached()
        // The expiry the lifecycle gives each claim (its `claimed` event says `now + leaseMs`), for
        // `writeProjection` to write in the update that makes the job running.
        defer { claimingLease = nil }
        while claimed.count < limit {
            let jobs = try query(sql, [.integer(now)] + queueValues + [.int(limit - claimed.count)]) {
                (row) throws(StoreError) in try JobRecord(row: row, specs: specs)
            }
            if jobs.isEmpty { break }
            // One counter update for the batch: a token a job does not use (it honoured a pause instead)
            // is skipped, and tokens still only grow.
            var token = try reserveLeaseTokens(jobs.count).lowerBound - 1
            for job in jobs {
                // The lifecycle claims the job — or, for a queued job that still holds a pause or cancel
                // request (only a database written by an older jobctl has one), honours it instead.
                token += 1
                claimingLease = (job.id, now + leaseMs)
                let (events, record) = try perform(.claim(owner: owner, token: token, leaseMs: leaseMs), jobID: job.id,
                                                   on: job, actor: actor, expectedVersion: job.version, now: now)
                guard let record, case .claimed? = events.first?.payload else { continue }
                committedRecords.note(record)
                claimed.append(ClaimedJob(record: record, token: token))
            }
        }
        return claimed
    }

    /// The claim's query: whole queued, runnable rows in claim order (parameters: now, the queues, the limit).
    ///
    /// Whole rows, so each claim reads its job once (the rows are current: the transaction holds the lock).
    /// Across every queue, the partial index of queued jobs (migration 7) gives claim order: the claim
    /// reads its first rows and stops, instead of reading and sorting the whole queue inside the write
    /// transaction. With a queue filter the planner's own choice, `jobs_claim (state, queue,
    /// waits_for_jobs, …)`, is the narrower one. Jobs still waiting for another job are in neither
    /// index's range (schema 19).
    static func claimSQL(queues: [String]?) -> String {
        let index = queues == nil ? " INDEXED BY jobs_queued_claim_order" : ""
        // A job waiting for a dependency (a row in job_dependencies) has `waits_for_jobs` set (schema 19):
        // neither index the claim reads walks it, so a long chain's blocked jobs cost a claim nothing.
        var sql = "SELECT \(JobRecord.selectColumns) FROM jobs\(index) WHERE state = 'queued' AND waits_for_jobs = 0"
            + " AND run_after_ms <= ? AND \(WorkableRows.condition())"
        if let queues { sql += " AND queue IN (\(queues.map { _ in "?" }.joined(separator: ", ")))" }
        sql += " ORDER BY priority DESC, run_after_ms, seq LIMIT ?"
        return sql
    }

    /// The next `count` fencing tokens (at least one), taken from the counter row in one update; the
    /// counter only grows.
    func reserveLeaseTokens(_ count: Int) throws(StoreError) -> ClosedRange<Int64> {
        let count = Int64(max(1, count))
        try run("UPDATE lease_counter SET last_token = last_token + ? WHERE id = 1", [.integer(count)])
        guard let last = try first("SELECT last_token FROM lease_counter WHERE id = 1", [], { row in row.int64(0) }) else {
            throw StoreError.corrupt("the lease_counter row is missing")
        }
        return (last - count + 1)...last
    }
}
