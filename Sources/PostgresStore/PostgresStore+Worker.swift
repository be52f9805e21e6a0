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
    /// (which only grows) and a lease expiring at `now + leaseMs`, kept in its row (schema 11).
    public func claim(owner: String, queues: [String]?, limit: Int, leaseMs: Int64, now: Int64) throws(StoreError) -> [ClaimedJob] {
        let request = ClaimRequest(owner: owner, queues: queues, limit: limit, leaseMs: leaseMs, now: now)
        guard !request.isEmpty else { return [] }
        // Bounded as a whole call, as the executor's claims are (see `groupCommit`): claimed jobs whose
        // answer trickles in later than that may have had their leases run out before the worker knows them.
        return try wholeCallWriteTransaction { (connection) throws(StoreError) -> [ClaimedJob] in
            try connection.claim(request)
        }
    }

    /// The job's newest event when it is `pending` as written, or nil — once no transaction holds the
    /// job's row any more.
    ///
    /// A worker asks this when a write's answer was lost. The session that carried it may have been
    /// given up while the server still ran the write (the answer timeout, a commit of a large
    /// download-memory result that outlasted the lease): the server goes on to its COMMIT all the same,
    /// holding the row's lock until then. Read before that commit, the log would not have the event yet
    /// and the job would be reported abandoned; so the row is locked first (`FOR KEY SHARE`, which only a
    /// writer's `FOR UPDATE` holds up), which waits for that transaction to end either way.
    public func landedEvent(_ pending: PendingEvent) throws(StoreError) -> JobEvent? {
        try writeTransaction { (connection) throws(StoreError) in
            _ = try connection.row("SELECT 1 FROM jobs WHERE id = $1 FOR KEY SHARE", [.text(pending.jobID)]) {
                (row) throws(StoreError) in try row.integer(0)
            }
        }
        return try landedEventInHistory(pending)
    }

    /// Extends to `now + leaseMs` every lease in `leases` (job id → token) that `owner` still holds
    /// (job running under that token). Returns the ids whose lease was lost. Appends no events. The
    /// job rows are updated in id order, as a group commit locks them, so the two cannot deadlock; the
    /// update changes only `lease_expires_at_ms`, which no index holds (a HOT update).
    public func heartbeat(owner: String, leases: [String: Int64], leaseMs: Int64, now: Int64) throws(StoreError) -> Set<String> {
        guard !leases.isEmpty else { return [] }
        // Bounded as a whole call, as the lease renewals' lane is (`LeaseRenewalLane.run`): a renewal
        // answered after the leases ran out renewed nothing.
        return try wholeCallWriteTransaction { (connection) throws(StoreError) -> Set<String> in
            var lost: Set<String> = []
            for (jobID, token) in leases.sorted(by: { $0.key < $1.key }) {
                let changed = try connection.store("""
                    UPDATE jobs SET lease_expires_at_ms = $1
                    WHERE id = $2 AND state = 'running' AND lease_token = $3 AND lease_owner = $4
                    """, [.integer(now + leaseMs), .text(jobID), .integer(token), .text(owner)])
                if changed == 0 { lost.insert(jobID) }
            }
            return lost
        }
    }

    /// The worker's heartbeat: `heartbeat`'s extension, on a connection of its own (`leaseLane`), so it
    /// never waits behind a commit of the store's executor. A lease is reported renewed only once the
    /// transaction that extended it has committed.
    ///
    /// First the leases whose rows no other transaction holds are extended at once, in one statement
    /// that skips locked rows (`FOR UPDATE SKIP LOCKED`), and committed: a row held by a slow commit
    /// delays nobody else's renewal. A row held by another transaction is most often held by this
    /// worker's own commit of an event of that job; its lease is waited for next, in a transaction of
    /// its own, for at most `leaseWaitMs` (`lock_timeout`): the waiting renewal is queued for the row
    /// ahead of any rescue (a rescue skips locked rows), so it extends the lease the moment that commit
    /// ends. One it could not lock in that time is in neither set of the answer. Rows are locked in id
    /// order, as a group commit locks them, so the two cannot deadlock. Only `lease_expires_at_ms`
    /// changes, which no index holds (a HOT update).
    ///
    /// See https://www.postgresql.org/docs/current/sql-select.html#SQL-FOR-UPDATE-SHARE and
    /// https://www.postgresql.org/docs/current/runtime-config-client.html#GUC-LOCK-TIMEOUT
    public func renewLeases(owner: String, leases: [String: Int64], leaseMs: Int64, now: Int64) async throws -> LeaseRenewal {
        guard !leases.isEmpty else { return LeaseRenewal(renewed: [], lost: []) }
        try refuseWriteIfReadOnly()
        let ids = leases.keys.sorted()
        let parameters: [PostgresValue] = [
            postgresTextArray(ids),
            .array(PostgresArray(elementType: PostgresType.int8, elements: ids.map { .optional(leases[$0]) })),
            .text(owner), .integer(now + leaseMs),
        ]
        let answerMs = Self.leaseAnswerTimeoutMs(leaseMs: leaseMs)
        let begin = Self.writeBeginStatements(idleTimeoutMs: answerMs)
        let waitBegin = begin + ["SELECT pg_catalog.set_config('lock_timeout'::text, '\(Self.leaseWaitMs(leaseMs: leaseMs))ms'::text, true)"]
        do {
            return try await renewLeasesOnLane(ids: ids, leases: leases, parameters: parameters, owner: owner, leaseMs: leaseMs,
                                               now: now, answerMs: answerMs, begin: begin, waitBegin: waitBegin)
        } catch is LeaseRenewalLane.Unopened {
            // The lane's connection cannot be opened while the store's may live (the server refuses a
            // second session: `max_connections`, a pooler's limit, a firewall; or the network dropped only
            // that one): the leases are renewed on the store's connection, behind whatever it is writing,
            // rather than left to run out with nothing said. A server that refuses that one too fails here.
            let lost = try await run { store in try store.heartbeat(owner: owner, leases: leases, leaseMs: leaseMs, now: now) }
            return LeaseRenewal(renewed: Set(ids).subtracting(lost), lost: lost)
        }
    }

    /// `renewLeases` on the lane's connection.
    private func renewLeasesOnLane(ids: [String], leases: [String: Int64], parameters: [PostgresValue], owner: String, leaseMs: Int64,
                                   now: Int64, answerMs: Int64, begin: [String], waitBegin: [String]) async throws -> LeaseRenewal {
        try await leaseLane.run(answerTimeoutMs: answerMs) { (connection) throws(StoreError) -> LeaseRenewal in
            var renewal = try Self.transaction(begin, on: connection, readOnly: false) { (connection) throws(StoreError) in
                try connection.renewUnheldLeases(parameters)
            }
            let held = ids.filter { !renewal.renewed.contains($0) && !renewal.lost.contains($0) }
            guard !held.isEmpty else { return renewal }
            let heldParameters: [PostgresValue] = [
                postgresTextArray(held),
                .array(PostgresArray(elementType: PostgresType.int8, elements: held.map { .optional(leases[$0]) })),
                .text(owner), .integer(now + leaseMs),
            ]
            let waited = try Self.transaction(waitBegin, on: connection, readOnly: false) { (connection) throws(StoreError) in
                try connection.renewHeldLeases(heldParameters)
            }
            if let waited {
                renewal.renewed.formUnion(waited)
                renewal.lost.formUnion(Set(held).subtracting(waited))
            }
            return renewal
        }
    }

    /// How long a lease renewal's statement waits for the server's answer before its connection is given
    /// up and opened again, and how long its transaction may stay idle on the server: a third of the lease
    /// (a heartbeat's period), and at least the lock wait (`leaseWaitMs`) and half a second more.
    ///
    /// The store's own limit (the lease, at least 10 s) was used before: a renewal that went unanswered
    /// (a connection a proxy or a NAT stopped forwarding) was given up only once the leases it renewed had
    /// run out, and other workers rescued the jobs of a worker whose transfers were running well (with
    /// `max_attempts: 1` they failed). Given up after a third of the lease, a renewal on a new connection
    /// still comes a third of a lease before they expire; a renewal stalled while its transaction held
    /// the rows (at its COMMIT) frees them as soon, the server ending the idle transaction.
    static func leaseAnswerTimeoutMs(leaseMs: Int64) -> Int64 {
        max(leaseWaitMs(leaseMs: leaseMs) + 500, leaseMs / 3)
    }

    /// How long `renewLeases` waits for the rows another transaction holds: a sixth of the lease (half a
    /// worker's heartbeat period, so the next renewal of the other leases is late by at most that), at
    /// least 50 ms, at most 5 s.
    static func leaseWaitMs(leaseMs: Int64) -> Int64 {
        min(5_000, max(50, leaseMs / 6))
    }

    /// Rescues running jobs whose lease expired (or vanished) by `now`, exactly as the SQLite adapter
    /// does (the lifecycle's `expireLease`). Jobs another transaction holds are skipped (`SKIP
    /// LOCKED`); the lease is in the job row, so the lock reads it as it stands: a heartbeat that
    /// committed meanwhile wins (its row no longer matches and is not returned).
    public func rescueExpired(now: Int64, actor: String) throws(StoreError) -> [RescuedJob] {
        try writeTransaction { (connection) throws(StoreError) -> [RescuedJob] in
            let candidates = try connection.rows("""
                SELECT id FROM jobs
                WHERE state = 'running' AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= $1)
                  AND \(WorkableRows.condition())
                ORDER BY seq
                FOR UPDATE SKIP LOCKED
                """, [.integer(now)]) { (row) throws(StoreError) in try row.string(0) }
            var rescued: [RescuedJob] = []
            for id in candidates {
                guard let job = try connection.loadJob(id), job.state == .running else { continue }
                let lease = try connection.leaseRow(id)
                if let expiresAtMs = lease?.expiresAtMs, expiresAtMs > now { continue }
                let holder = lease?.owner ?? job.leaseOwner ?? "an unknown worker"
                let after = try connection.perform(.expireLease(holder: holder, expiredAtMs: lease?.expiresAtMs), jobID: id, on: job,
                                                   actor: actor, expectedVersion: job.version, now: now)
                rescued.append(RescuedJob(record: after.record ?? job, holder: holder))
            }
            return rescued
        }
    }

    /// A number that changes when another connection's write transaction has ended since the last
    /// call — as SQLite's `PRAGMA data_version`, this store's own commits do not change it. No table is
    /// read: the server's current snapshot (`pg_current_snapshot()`: the oldest running transaction,
    /// the next transaction id, the ones in progress) says which transactions ended since the previous
    /// snapshot, and the connection knows the ids of its own write transactions (`ownTransactionIDs`,
    /// noted by `PostgresBatchWriter.flush`: the worker's group commits and claims). Any other ended
    /// transaction — another process's, another database's, or one of this store's writes that no
    /// writer noted (a heartbeat, a rescue, a control) — changes the number; an extra change costs only
    /// a spare poll.
    ///
    /// Why: on a busy worker every group commit changed the old snapshot hash, so the worker read each
    /// of its running jobs again (`pollControls`) after each of its own commits — a fifth of all its
    /// statements on one process.
    /// Why not `max(seq)`: identity values are taken at insert and committed in any order, so a commit
    /// of a smaller seq after a larger one would not change it and an idle worker would miss the job.
    /// Why not LISTEN/NOTIFY: it serialises every committing transaction on a global lock; idle workers
    /// poll this instead.
    ///
    /// See https://www.postgresql.org/docs/current/functions-info.html#FUNCTIONS-PG-SNAPSHOT
    public func dataVersion() throws(StoreError) -> Int64 {
        try withConnection { [self] (connection) throws(StoreError) -> Int64 in
            let text = try connection.row("SELECT pg_current_snapshot()::text") { (row) throws(StoreError) in
                try row.string(0)
            } ?? ""
            let own = connection.ownTransactionIDs
            connection.ownTransactionIDs.removeAll()
            return snapshotsSeen.withLock { $0.next(PostgresSnapshot(text), text: text, own: own) }
        }
    }

    /// See `JobStore.refuseNewerSchema`: the ledger's newest version against the newest this jobctl knows.
    public func refuseNewerSchema() throws(StoreError) {
        let found = try withConnection { (connection) throws(StoreError) -> Int in
            Int(try connection.row("SELECT coalesce(max(version), 0) FROM schema_migrations") { (row) throws(StoreError) in
                try row.integer(0)
            } ?? 0)
        }
        let known = PostgresMigrator.latestVersion
        if found > known { throw StoreError.newerSchema(found: found, known: known) }
    }

    /// The earliest `run_after` among queued jobs in `queues` (nil: any queue): when the next retry is due.
    ///
    /// Read through the queued jobs' index (`jobs_queued_claim_order`: priority, run_after, seq) one
    /// priority at a time: the first priority, then each next lower one (`levels`, each an index probe),
    /// and in each the first job without a pending dependency. A plain `min(run_after_ms) … WHERE state =
    /// 'queued'` was planned from the statistics taken after the submit — every job queued — as a scan
    /// of the whole table, which a drain grows with the row versions of its updates: 3–7 ms a call,
    /// 20–30 calls in a four-process drain of 10,000 jobs, 3–5 % of the server's CPU. This form takes an
    /// index probe per priority level whatever the statistics say (0.4–0.5 ms on the same tables). Jobs
    /// still waiting for another job are not in that index (schema 21): a chain's blocked jobs are not walked.
    public func nextRunAfter(queues: [String]?) throws(StoreError) -> Int64? {
        if let queues, queues.isEmpty { return nil }
        let query = queues == nil ? Self.nextRunAfterSQL : Self.nextRunAfterInQueuesSQL
        let parameters: [PostgresValue] = queues.map { [postgresTextArray($0)] } ?? []
        return try withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.row(query, parameters) { (row) throws(StoreError) in try row.optionalInteger(0) } ?? nil
        }
    }

    /// The text of `nextRunAfter` for every queue, and for the queues in `$1`; made once.
    static let nextRunAfterSQL = nextRunAfterText(filteringQueues: false)
    static let nextRunAfterInQueuesSQL = nextRunAfterText(filteringQueues: true)

    /// The text of `nextRunAfter`, with `queue = ANY($1)` in each look when `filteringQueues`.
    private static func nextRunAfterText(filteringQueues: Bool) -> String {
        let queue = filteringQueues ? " AND j.queue = ANY($1::text[])" : ""
        return """
            WITH RECURSIVE levels(priority) AS (
                (SELECT j.priority FROM jobs j WHERE j.state = 'queued' AND NOT j.waits_for_jobs\(queue)
                 ORDER BY j.priority DESC LIMIT 1)
                UNION ALL
                SELECT (SELECT j.priority FROM jobs j WHERE j.state = 'queued' AND NOT j.waits_for_jobs\(queue)
                          AND j.priority < levels.priority
                        ORDER BY j.priority DESC LIMIT 1)
                FROM levels WHERE levels.priority IS NOT NULL
            )
            SELECT min((SELECT j.run_after_ms FROM jobs j
                        WHERE j.state = 'queued' AND NOT j.waits_for_jobs\(queue) AND j.priority = levels.priority
                          AND \(WorkableRows.condition(alias: "j"))
                        ORDER BY j.priority DESC, j.run_after_ms, j.seq LIMIT 1))
            FROM levels WHERE levels.priority IS NOT NULL
            """
    }
}

extension PostgresConnection {
    /// The leases in `$1` (ids, sorted) and `$2` (their tokens) that `$3` holds, locked in id order.
    private static func heldLeases(skippingLocked: Bool) -> String {
        """
        WITH leases AS (SELECT * FROM unnest($1::text[], $2::int8[]) AS l(id, token)),
        held AS (
            SELECT jobs.id FROM jobs JOIN leases ON jobs.id = leases.id AND jobs.lease_token = leases.token
            WHERE jobs.id = ANY($1::text[]) AND jobs.state = 'running' AND jobs.lease_owner = $3
            ORDER BY jobs.id FOR UPDATE OF jobs\(skippingLocked ? " SKIP LOCKED" : "")
        )
        """
    }

    /// `renewLeases`' first statement: extends to `$4` the leases of `heldLeases` whose rows no other
    /// transaction holds; says of each lease whether it was extended, and whether it was still held
    /// as the statement's snapshot saw it (the rows it skipped: neither extended nor lost).
    private static let renewUnheldSQL = heldLeases(skippingLocked: true) + """
        , renewed AS (UPDATE jobs SET lease_expires_at_ms = $4 FROM held WHERE jobs.id = held.id RETURNING jobs.id)
        SELECT leases.id, EXISTS (SELECT 1 FROM renewed WHERE renewed.id = leases.id),
               EXISTS (SELECT 1 FROM jobs WHERE jobs.id = leases.id AND jobs.state = 'running'
                       AND jobs.lease_token = leases.token AND jobs.lease_owner = $3)
        FROM leases
        """

    /// `renewLeases`' second statement: waits for the rows of `heldLeases`, then extends to `$4` the
    /// leases still held once it has them (the lock's wait re-reads each row as the holder left it).
    private static let renewHeldSQL = heldLeases(skippingLocked: false) + """
        UPDATE jobs SET lease_expires_at_ms = $4 FROM held WHERE jobs.id = held.id RETURNING jobs.id
        """

    /// Runs `renewUnheldSQL`; the caller holds a write transaction.
    func renewUnheldLeases(_ parameters: [PostgresValue]) throws(StoreError) -> LeaseRenewal {
        var renewal = LeaseRenewal(renewed: [], lost: [])
        let rows = try rows(Self.renewUnheldSQL, parameters) { (row) throws(StoreError) in
            (try row.string(0), try row.flag(1), try row.flag(2))
        }
        for (id, renewed, held) in rows {
            if renewed { renewal.renewed.insert(id) } else if !held { renewal.lost.insert(id) }
        }
        return renewal
    }

    /// Runs `renewHeldSQL` in a savepoint; the caller holds a write transaction with a `lock_timeout`.
    /// The ids whose lease it extended, or nil when a row's lock was not granted in time.
    func renewHeldLeases(_ parameters: [PostgresValue]) throws(StoreError) -> Set<String>? {
        try store("SAVEPOINT lease_wait")
        let result: PostgresResult
        do throws(PostgresError) {
            result = try execute(Self.renewHeldSQL, parameters)
        } catch {
            // 55P03 lock_not_available: `lock_timeout` passed. Anything else sinks the transaction.
            guard case .server(let sqlstate, _, _, _, _) = error, sqlstate == "55P03" else { throw StoreError(error) }
            try store("ROLLBACK TO SAVEPOINT lease_wait")
            return nil
        }
        return Set(try result.rows.map { (row) throws(StoreError) in try row.string(0) })
    }

    /// The body of `PostgresStore.claim`; the caller holds a write transaction. `writer` (a new one when
    /// nil) writes the claims; every write is sent when this returns.
    func claim(_ request: ClaimRequest, writer given: PostgresBatchWriter? = nil) throws(StoreError) -> [ClaimedJob] {
        let (owner, queues, limit, leaseMs, now) = (request.owner, request.queues, request.limit, request.leaseMs, request.now)
        // A job waiting for a dependency (a row in job_dependencies) has `waits_for_jobs` set (schema 21):
        // it is not in the claim-order index, so a long chain's blocked jobs cost a claim nothing.
        var sql = "SELECT \(JobRecord.postgresStoredColumns) FROM jobs WHERE state = 'queued' AND NOT waits_for_jobs"
            + " AND run_after_ms <= $1 AND \(WorkableRows.condition())"
        var values: [PostgresValue] = [.integer(now)]
        if let queues {
            sql += " AND queue = ANY($2::text[])"
            values.append(postgresTextArray(queues))
        }
        sql += " ORDER BY priority DESC, run_after_ms, seq"
        let writer = given ?? PostgresBatchWriter(self)
        var claimed: [ClaimedJob] = []
        while claimed.count < limit {
            // Seqs the writer reserved before these jobs' rows are locked must not be theirs.
            writer.discardReservedSeqs()
            // The jobs and a fresh fencing token for each, in one statement. The limit is a parameter:
            // one prepared statement (and one plan) a session, whatever the number asked for — written
            // into the text, each claim of a new size was parsed and planned again (a worker's claims
            // come in every size up to its slots and buffer: 98 plans for 105 claims in a four-process
            // drain, ~5 % of the server's CPU). The generic plan reads the queued-jobs index in order
            // and stops at the limit, as the custom one did (`ClaimPlanTests`, 100,000 queued by hand).
            // And the seq of each job's `claimed` event, taken after its row is locked (see
            // `PostgresBatchWriter`). The spec is read from the log only for the jobs picked.
            let picked = try rows("""
                SELECT \(JobRecord.postgresSelectColumns(of: "picked")), pg_catalog.nextval('lease_tokens'::regclass), pg_catalog.nextval(\(PostgresBatchWriter.eventSeqSequence))
                FROM (\(sql) LIMIT $\(values.count + 1)
                FOR UPDATE SKIP LOCKED) AS picked ORDER BY priority DESC, run_after_ms, seq
                """, values + [.int(limit - claimed.count)]) { (row) throws(StoreError) in
                (try JobRecord(postgresRow: row, specs: self.specs), try row.integer(JobRecord.postgresSelectedCount),
                 try row.integer(JobRecord.postgresSelectedCount + 1))
            }
            if picked.isEmpty { break }
            writer.addReservedSeqs(picked.map(\.2))
            for (job, token, _) in picked {
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

/// A snapshot as `pg_current_snapshot()::text` gives it: `xmin:xmax:xip,…`.
///
/// See https://www.postgresql.org/docs/current/functions-info.html#FUNCTIONS-PG-SNAPSHOT-PARTS
struct PostgresSnapshot: Equatable {
    /// Every transaction id below it has ended, except those in `inProgress`.
    let xmax: Int64
    /// The transactions running when the snapshot was taken.
    let inProgress: Set<Int64>

    /// Parses the text form; nil when it is not one.
    init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, Int64(parts[0]) != nil, let xmax = Int64(parts[1]) else { return nil }
        var running: Set<Int64> = []
        for item in parts[2].split(separator: ",") {
            guard let xid = Int64(item) else { return nil }
            running.insert(xid)
        }
        self.xmax = xmax
        self.inProgress = running
    }

    init(xmax: Int64, inProgress: Set<Int64>) {
        self.xmax = xmax
        self.inProgress = inProgress
    }

    /// Whether a transaction other than `own` ended between `earlier` and this snapshot: one running
    /// in `earlier`, or one that began at or after `earlier`'s `xmax`, that is no longer running now.
    /// Stops at the first such transaction, so it looks at no more ids than `own` and the running ones
    /// hold, plus one.
    func othersEnded(since earlier: PostgresSnapshot, own: Set<Int64>) -> Bool {
        if xmax < earlier.xmax { return true }  // another server, or a restored one
        for xid in earlier.inProgress where xid < xmax && !inProgress.contains(xid) && !own.contains(xid) {
            return true
        }
        var xid = earlier.xmax
        while xid < xmax {
            if !inProgress.contains(xid) && !own.contains(xid) { return true }
            xid += 1
        }
        return false
    }
}

/// What `dataVersion` remembers between calls: the last snapshot and the number it gave.
struct SnapshotsSeen {
    private var last: PostgresSnapshot?
    private var version: Int64?

    /// The number for `snapshot`: the previous one unless another connection's transaction ended since
    /// the last snapshot (then the next). The first number is a hash of the snapshot's text, so two
    /// stores rarely start at the same number. A snapshot that cannot be parsed always changes it.
    mutating func next(_ snapshot: PostgresSnapshot?, text: String, own: Set<Int64>) -> Int64 {
        defer { last = snapshot }
        if let version, let snapshot, let last {
            let next = snapshot.othersEnded(since: last, own: own) ? version &+ 1 : version
            self.version = next
            return next
        }
        if let version {
            self.version = version &+ 1
            return version &+ 1
        }
        // FNV-1a: stable across processes (Swift's `hashValue` is seeded per process).
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        version = Int64(bitPattern: hash)
        return Int64(bitPattern: hash)
    }
}
