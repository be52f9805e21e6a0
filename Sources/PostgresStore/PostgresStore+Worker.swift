import Foundation
import JobLifecycle
import JobModel
import StorePort

extension PostgresStore {
    /// Claims up to `limit` runnable jobs for `owner` in one transaction.
    ///
    /// Runnable: queued with `run_after ≤ now`, in `queues` (nil: any queue; empty: none), ordered by
    /// priority (highest first), run_after, then submission order. The rows are taken with `FOR UPDATE
    /// SKIP LOCKED`, so workers on other machines claiming at the same moment take other jobs instead
    /// of waiting. Each job gets a `claimed` event with a fresh token from the `lease_tokens` sequence
    /// (which only grows) and a lease row expiring at `now + leaseMs`.
    public func claim(owner: String, queues: [String]?, limit: Int, leaseMs: Int64, now: Int64) throws(StoreError) -> [ClaimedJob] {
        let request = ClaimRequest(owner: owner, queues: queues, limit: limit, leaseMs: leaseMs, now: now)
        guard !request.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> [ClaimedJob] in
            try connection.claim(request)
        }
    }

    /// Extends to `now + leaseMs` every lease in `leases` (job id → token) that `owner` still holds
    /// (job running under that token). Returns the ids whose lease was lost. Appends no events. The
    /// lease rows are updated in id order, so two transactions cannot deadlock on them.
    public func heartbeat(owner: String, leases: [String: Int64], leaseMs: Int64, now: Int64) throws(StoreError) -> Set<String> {
        guard !leases.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> Set<String> in
            var lost: Set<String> = []
            for (jobID, token) in leases.sorted(by: { $0.key < $1.key }) {
                let changed = try connection.store("""
                    UPDATE leases SET expires_at_ms = $1
                    WHERE job_id = $2 AND token = $3 AND owner = $4
                      AND EXISTS (SELECT 1 FROM jobs WHERE id = $2 AND state = 'running' AND lease_token = $3)
                    """, [.integer(now + leaseMs), .text(jobID), .integer(token), .text(owner)])
                if changed == 0 { lost.insert(jobID) }
            }
            return lost
        }
    }

    /// Rescues running jobs whose lease expired (or vanished) by `now`, exactly as the SQLite adapter
    /// does (the lifecycle's `expireLease`). Jobs another transaction holds are skipped (`SKIP
    /// LOCKED`); each lease is re-read under its row lock, so a heartbeat that committed meanwhile wins.
    public func rescueExpired(now: Int64, actor: String) throws(StoreError) -> [String] {
        try writeTransaction { (connection) throws(StoreError) -> [String] in
            let candidates = try connection.rows("""
                SELECT j.id FROM jobs j LEFT JOIN leases l ON l.job_id = j.id
                WHERE j.state = 'running' AND (l.job_id IS NULL OR l.expires_at_ms <= $1)
                ORDER BY j.seq
                FOR UPDATE OF j SKIP LOCKED
                """, [.integer(now)]) { (row) throws(StoreError) in try row.string(0) }
            var rescued: [String] = []
            for id in candidates {
                guard let job = try connection.loadJob(id), job.state == .running else { continue }
                let lease = try connection.leaseRow(id, lock: true)
                if let lease, lease.expiresAtMs > now { continue }
                let holder = lease?.owner ?? job.leaseOwner ?? "an unknown worker"
                _ = try connection.perform(.expireLease(holder: holder, expiredAtMs: lease?.expiresAtMs), jobID: id, on: job,
                                           actor: actor, expectedVersion: job.version, now: now)
                rescued.append(id)
            }
            return rescued
        }
    }

    /// A number that changes whenever any transaction that wrote has committed (or begun) since the
    /// last call: a hash of the server's current snapshot (`pg_current_snapshot()`: the oldest running
    /// transaction, the next transaction id, the ones in progress). No table is read.
    ///
    /// Why not `max(seq)`: identity values are taken at insert and committed in any order, so a commit
    /// of a smaller seq after a larger one would not change it and an idle worker would miss the job.
    /// Why not LISTEN/NOTIFY: it serialises every committing transaction on a global lock; idle workers
    /// poll this instead (it also changes for other databases' writes, which costs only a spare claim).
    ///
    /// See https://www.postgresql.org/docs/current/functions-info.html#FUNCTIONS-PG-SNAPSHOT
    public func dataVersion() throws(StoreError) -> Int64 {
        try withConnection { (connection) throws(StoreError) -> Int64 in
            let snapshot = try connection.row("SELECT pg_current_snapshot()::text") { (row) throws(StoreError) in
                try row.string(0)
            } ?? ""
            // FNV-1a: stable across processes (Swift's `hashValue` is seeded per process).
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in snapshot.utf8 {
                hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
            }
            return Int64(bitPattern: hash)
        }
    }

    /// The earliest `run_after` among queued jobs in `queues` (nil: any queue): when the next retry is due.
    public func nextRunAfter(queues: [String]?) throws(StoreError) -> Int64? {
        if let queues, queues.isEmpty { return nil }
        var sql = "SELECT min(run_after_ms) FROM jobs WHERE state = 'queued'"
            + " AND NOT EXISTS (SELECT 1 FROM job_dependencies d WHERE d.job = jobs.id)"
        var values: [PostgresValue] = []
        if let queues {
            sql += " AND queue = ANY($1::text[])"
            values.append(postgresTextArray(queues))
        }
        let query = sql
        let parameters = values
        return try withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.row(query, parameters) { (row) throws(StoreError) in try row.optionalInteger(0) } ?? nil
        }
    }
}

extension PostgresConnection {
    /// The body of `PostgresStore.claim`; the caller holds a write transaction. `writer` (a new one when
    /// nil) writes the claims; every write is sent when this returns.
    func claim(_ request: ClaimRequest, writer given: PostgresBatchWriter? = nil) throws(StoreError) -> [ClaimedJob] {
        let (owner, queues, limit, leaseMs, now) = (request.owner, request.queues, request.limit, request.leaseMs, request.now)
        var sql = "SELECT \(JobRecord.postgresSelectColumns) FROM jobs WHERE state = 'queued' AND run_after_ms <= $1"
            // A job waiting for a dependency has a row in job_dependencies (its primary key starts with the job).
            + " AND NOT EXISTS (SELECT 1 FROM job_dependencies d WHERE d.job = jobs.id)"
        var values: [PostgresValue] = [.integer(now)]
        if let queues {
            sql += " AND queue = ANY($2::text[])"
            values.append(postgresTextArray(queues))
        }
        sql += " ORDER BY priority DESC, run_after_ms, seq"
        let writer = given ?? PostgresBatchWriter(self)
        var claimed: [ClaimedJob] = []
        while claimed.count < limit {
            // The jobs and a fresh fencing token for each, in one statement. The limit is written into
            // the text (it is a number) so that the prepared statement's generic plan still reads the
            // queued-jobs index in order and stops after a few rows.
            let picked = try rows("""
                SELECT \(JobRecord.postgresSelectColumns), nextval('lease_tokens') FROM (\(sql) LIMIT \(limit - claimed.count)
                FOR UPDATE SKIP LOCKED) AS picked ORDER BY priority DESC, run_after_ms, seq
                """, values) { (row) throws(StoreError) in
                (try JobRecord(postgresRow: row), try row.integer(JobRecord.postgresColumns.count))
            }
            if picked.isEmpty { break }
            for (job, token) in picked {
                // The lifecycle claims the job — or, for a queued job that still holds a pause or cancel
                // request, honours it instead.
                let (events, record) = try writer.perform(.claim(owner: owner, token: token, leaseMs: leaseMs), jobID: job.id,
                                                          on: job, actor: owner, expectedVersion: job.version, now: now)
                guard let record, case .claimed(_, let expiresAt, _)? = events.first?.payload else { continue }
                try writer.writeLease(jobID: job.id, owner: owner, token: token, expiresAtMs: expiresAt)
                claimed.append(ClaimedJob(record: record, token: token))
            }
            // The next round's query must see these jobs claimed (this transaction's own row locks do
            // not make SKIP LOCKED skip them).
            try writer.flush()
        }
        return claimed
    }
}
