import Foundation
import JobLifecycle
import Synchronization
import JobModel
import StorePort

// MARK: - Append

extension PostgresStore {
    /// Appends a batch of events in ONE transaction (group commit). The checks and their order are the
    /// SQLite adapter's: the lifecycle decides (expected version, lease token, state), the lease row
    /// fences too. A refused event does not sink the others.
    ///
    /// First without savepoints, through a `PostgresBatchWriter` (one write statement for the batch): a
    /// refusal comes before its event writes anything, so the others go on without it. Should an event
    /// fail after it wrote (which no lifecycle rule does today), or the server refuse the batch's write
    /// for a reason of one of its rows (`serverRefused`: a constraint, a value, a trigger of the
    /// operator's that raised), the transaction is rolled back and the batch runs again with a savepoint
    /// per event, which undoes exactly that event: the server's refusal is that event's failure, and the
    /// others are written. Any other failure of the server (a deadlock, a lost connection, a full disk)
    /// fails the batch as a whole, as before.
    public func append(_ events: [PendingEvent], now: Int64) throws(StoreError) -> [Result<JobEvent, StoreError>] {
        guard !events.isEmpty else { return [] }
        let abandoned = FastPathAbandoned()
        do throws(StoreError) {
            return try writeTransaction { (connection) throws(StoreError) -> [Result<JobEvent, StoreError>] in
                try connection.appendBatchWithoutSavepoints(events, now: now, abandoned: abandoned)
            }
        } catch {
            guard abandoned.isSet || error.isServerRefusal else { throw error }
        }
        return try writeTransaction { (connection) throws(StoreError) -> [Result<JobEvent, StoreError>] in
            try connection.appendBatch(events, now: now)
        }
    }

    /// Appends `events` exactly as `append(_:now:)` does, then claims exactly as `claim` does, in ONE
    /// transaction. The claim runs in its own savepoint: a claim refused for a reason of its own (the
    /// server's refusal of its rows included) is returned as its failure and the appends still commit.
    public func append(_ events: [PendingEvent], now: Int64,
                       thenClaim request: ClaimRequest) throws(StoreError) -> AppendAndClaimOutcome {
        let abandoned = FastPathAbandoned()
        do throws(StoreError) {
            return try writeTransaction { (connection) throws(StoreError) -> AppendAndClaimOutcome in
                let appended = try connection.appendBatchWithoutSavepoints(events, now: now, abandoned: abandoned)
                return try connection.claimAfterAppends(appended, request, abandoned: abandoned)
            }
        } catch {
            // The refused write may be the appends' or the claim's (they go in one statement, with the
            // COMMIT): with a savepoint each, the one it belongs to fails alone.
            guard abandoned.isSet || error.isServerRefusal else { throw error }
        }
        return try writeTransaction { (connection) throws(StoreError) -> AppendAndClaimOutcome in
            try connection.claimAfterAppends(try connection.appendBatch(events, now: now), request, abandoned: nil)
        }
    }
}

/// The result of a statement held back on a connection (`PostgresConnection.enqueue`), there once
/// the round trip that carried it has been read.
final class HeldResult {
    var result: PostgresResult?
}

extension StoreError {
    /// Whether the server refused rows a statement wrote (`serverRefused`): the transaction is aborted,
    /// and the write it belongs to is refused again if it is written again.
    var isServerRefusal: Bool {
        if case .serverRefused = self { return true }
        return false
    }
}

/// Set when a batch appended without savepoints had an event fail after it wrote, or the server refused
/// one of the batch's writes: the caller rolls the transaction back and runs the batch again with a
/// savepoint per event.
final class FastPathAbandoned: Sendable {
    private let flag = Mutex(false)
    var isSet: Bool { flag.withLock { $0 } }
    func set() { flag.withLock { $0 = true } }
}

// MARK: - Submit

extension PostgresStore {
    /// Submits jobs in one transaction, with the SQLite adapter's idempotency rules: a known key with
    /// the same spec maps to its job, with a different spec refuses the whole batch (`keyConflict`).
    ///
    /// Two processes submitting the same new key at once take turns: each first takes a transaction
    /// advisory lock for each of its keys' buckets (a hash of the key, one of `submitLockBuckets`, in
    /// bucket order), so the second looks the key up only after the first has committed, and finds its
    /// job. Buckets, not one lock per key: every lock is an entry in the server's shared lock table,
    /// which holds `max_locks_per_transaction` (64 by default) per connection, and a submit of 20,000
    /// keyed jobs ran out of it ("out of shared memory"); two submits of different keys in one bucket
    /// only take turns.
    ///
    /// A submit that added many jobs (`analyzeAfterSubmitting`) to a table that had few updates the
    /// planner's statistics of `jobs` at once (`refreshPlannerStatistics`).
    public func submit(_ specs: [JobSpec], actor: String, now: Int64) throws(StoreError) -> [SubmitOutcome] {
        guard !specs.isEmpty else { return [] }
        let outcomes = try submitInOneTransaction(specs, actor: actor, now: now)
        let created = outcomes.count { $0.created }
        if created >= Self.analyzeAfterSubmitting { refreshPlannerStatistics(added: created) }
        return outcomes
    }

    /// A submit of at least this many new jobs may refresh the planner's statistics of `jobs`.
    static let analyzeAfterSubmitting = 1_000

    /// Runs `ANALYZE jobs` when `added` jobs are a tenth or more of what the planner believes the table
    /// holds (or it has never been analysed), instead of waiting for autovacuum (a minute or more).
    ///
    /// Why: on a table the planner has no statistics for (the first big submit) it takes the queued
    /// jobs for a dozen rows and plans the claim as a scan and sort of every queued job — 16 ms per
    /// claim with 10,000 queued, against 0.08 ms through the queued-jobs index once analysed (see
    /// BENCHMARKS.md, PostgreSQL). ANALYZE reads a sample of at most 30,000 rows. A role that may not
    /// analyse the table (not its owner) gets a warning from the server, which is dropped; a failure
    /// here leaves the submit, already committed, as it is — autovacuum analyses the table later.
    func refreshPlannerStatistics(added: Int) {
        _ = try? withConnection { (connection) throws(StoreError) in
            let believed = try connection.row("SELECT reltuples::bigint FROM pg_class WHERE oid = 'jobs'::regclass") {
                (row) throws(StoreError) in try row.integer(0)
            } ?? -1
            guard believed < 0 || Int64(added) * 10 >= believed else { return }
            try connection.store("ANALYZE jobs")
        }
    }

    private func submitInOneTransaction(_ specs: [JobSpec], actor: String, now: Int64) throws(StoreError) -> [SubmitOutcome] {
        // Every key by its bytes, as the log and its key index compare them: a Set of `String` kept one of
        // a key's NFC and NFD spellings (`==` calls them equal), and the other's bucket went unlocked.
        // Locked in the form the column stores (`postgresKeyText`), which a NUL cannot stop.
        let keys = Set(specs.compactMap { $0.key.map { UTF8Key(JobRecord.postgresKeyText($0)) } }).map(\.string)
        return try writeTransaction { (connection) throws(StoreError) -> [SubmitOutcome] in
            // A transaction id before the first seq is taken, as every other writer has one from its
            // row locks: `tailEvents` relies on a running holder of a seq being in every later snapshot.
            try connection.store("SELECT pg_current_xact_id()")
            if !keys.isEmpty {
                try connection.store(Self.submitTurnsSQL, [postgresTextArray(keys)])
            }
            let plan = try Self.plan(specs, now: now, on: connection, locking: true)
            let writer = PostgresBatchWriter(connection)
            writer.expectEvents(specs.count)
            let outcomes = try plan.persist(on: writer, actor: actor, now: now)
            try writer.flush()
            return outcomes
        }
    }
}

extension PostgresStore {
    /// What `submit` would do with `specs` now, read in one read transaction; nothing is written.
    public func planSubmit(_ specs: [JobSpec], now: Int64) throws(StoreError) -> SubmitPlan {
        try readTransaction { (connection) throws(StoreError) -> SubmitPlan in try Self.plan(specs, now: now, on: connection) }
    }

    /// The plan of `specs` against the log as `connection` reads it; `locking` (a submit's write
    /// transaction) keeps each job an `after:` names in the log from being archived until it commits
    /// (see `dependencyID(_:locking:)`).
    static func plan(_ specs: [JobSpec], now: Int64, on connection: PostgresConnection,
                     locking: Bool = false) throws(StoreError) -> SubmitPlan {
        try SubmitPlan(specs, now: now, storedByKey: { (key) throws(StoreError) in
            try connection.row("SELECT id, \(JobRecord.postgresSpecSQL) FROM jobs WHERE idempotency_key = $1",
                               [.text(JobRecord.postgresKeyText(key))]) {
                (row) throws(StoreError) in
                let id = try row.string(0)
                guard let text = try row.optionalString(1) else { throw StoreError.notItsSubmission(jobID: id) }
                let stored = try JobRecord.decodeSpec(stored: text, jobID: id)
                return (id, try StoreJSON.encode(stored))
            }
        }, logJob: { (name) throws(StoreError) in try connection.dependencyID(name, locking: locking) })
    }

    /// The seed of the hash that puts an idempotency key in its bucket.
    static let submitLockSeed: Int64 = 0x6A6F_6263_746B
    /// The second integer of a submit's advisory locks is this tag ('joc' and a zero byte) with the
    /// bucket in its low byte; the first is the log's schema (`AdvisoryLockSpace`).
    static let submitLockTag: Int32 = 0x6A6F_6300
    /// How many buckets the keys hash into (a power of two, at most 256): at most this many locks a submit.
    static let submitLockBuckets = 256

    /// Takes the turns of the keys in `$1` (`text[]`), in bucket order, with `function`
    /// (`pg_advisory_xact_lock`; tests hold one with `pg_advisory_lock` and let it go with
    /// `pg_advisory_unlock`).
    static func submitTurnsSQL(_ function: String) -> String {
        AdvisoryLockSpace.turnsSQL(function, tag: submitLockTag, buckets: submitLockBuckets,
                                   bucketOf: "pg_catalog.hashtextextended(key, \(submitLockSeed)::bigint)", from: "pg_catalog.unnest($1::text[]) AS key")
    }
    static let submitTurnsSQL = submitTurnsSQL("pg_catalog.pg_advisory_xact_lock")
}

/// The advisory locks jobctl takes in a transaction (a submit's key turns, the blobs' turns) are the
/// two-integer kind, and the first integer is the log's own: its schema's object id. Advisory locks
/// belong to the database, not to a schema — with one constant there, two jobctl logs in two schemas
/// of one database (one URL's `search_path` each) took turns with each other: a submit in one waited
/// out a transaction of the other that held its bucket (a stalled session holds it until the server
/// ends it), and gave up after its answer limit ("the server sent no answer for 30 s"). The migrator's
/// lock (a single bigint) stays one for the database: migrations of two schemas at once take turns,
/// briefly.
enum AdvisoryLockSpace {
    /// The log's schema (where `jobs` resolves on the connection's search path), as an int4: its object
    /// id with the top bit cleared (object ids above 2^31 are rare; two schemas 2^31 apart share a space).
    static let sql = "(SELECT (relnamespace::bigint & 2147483647)::int FROM pg_catalog.pg_class WHERE oid = 'jobs'::regclass)"

    /// `function(space, tag | bucket)` for each distinct bucket (`bucketOf` & (buckets - 1), over the rows
    /// `from` gives), in bucket order: two transactions taking overlapping sets never wait in a cycle.
    static func turnsSQL(_ function: String, tag: Int32, buckets: Int, bucketOf: String, from: String) -> String {
        """
        SELECT \(function)(turns.space, turns.bucket)
        FROM (SELECT \(sql) AS space, buckets.bucket
              FROM (SELECT DISTINCT (\(tag)::bigint | (\(bucketOf) & \(buckets - 1)))::int AS bucket FROM \(from)) AS buckets
              ORDER BY buckets.bucket) AS turns
        """
    }
}

// MARK: - Control

extension PostgresStore {
    /// The id of the job `text` names, as `after:` names jobs: its idempotency key, else its id or a
    /// unique id prefix (at least 6 characters, any case).
    public func resolveID(_ text: String) throws(StoreError) -> String {
        try withConnection { (connection) throws(StoreError) -> String in try connection.namedJobID(text) }
    }

    /// Locks the job's row, asks the lifecycle, appends its answer (nothing for a repeat).
    public func control(_ command: JobCommand, id: String, actor: String, now: Int64,
                        ifStateIn states: Set<JobState>?) throws(StoreError) -> (result: ControlResult?, state: JobState) {
        try writeTransaction { (connection) throws(StoreError) -> (result: ControlResult?, state: JobState) in
            let resolved = try connection.resolveID(id)
            let answer = try connection.controlAnswer(command, id: id, job: try connection.lockJob(resolved), actor: actor, now: now,
                                                      ifStateIn: states)
            return (answer.result, answer.state)
        }
    }

    /// `control` of each job in one transaction, each row locked as its turn comes and each job in a
    /// savepoint (see `JobStore.controlEach`).
    public func controlEach(_ command: JobCommand, ids: [String], actor: String, now: Int64,
                            ifStateIn states: Set<JobState>?) throws(StoreError) -> [Result<ControlAnswer, StoreError>] {
        guard !ids.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> [Result<ControlAnswer, StoreError>] in
            // A bulk retry of a cancelled chain asks each link for its cascade's root: found once, kept.
            let known = CascadeRoots()
            return ids.map { (id) -> Result<ControlAnswer, StoreError> in
                do throws(StoreError) {
                    return .success(try connection.savepoint { () throws(StoreError) -> ControlAnswer in
                        try connection.controlAnswer(command, id: id, job: try connection.lockJob(id), actor: actor, now: now,
                                                     ifStateIn: states, known: known)
                    })
                } catch {
                    return .failure(error)
                }
            }
        }
    }

    /// What `control` would append to the job now, read in one read transaction; nothing is locked or written.
    public func planControl(_ command: JobCommand, id: String, now: Int64,
                            openedBefore: Set<String>) throws(StoreError) -> (events: [DecidedEvent], record: JobRecord) {
        try readTransaction { (connection) throws(StoreError) -> (events: [DecidedEvent], record: JobRecord) in
            let resolved = try connection.resolveID(id)
            guard let job = try connection.loadJob(resolved) else { throw StoreError.notFound(id) }
            return (try connection.planControl(command, on: job, now: now, openedBefore: openedBefore), job)
        }
    }

    /// Locks the job's row, retries it and opens again the jobs its end cancelled (each locked as it is
    /// read), in one transaction (a dry run: one read transaction, nothing locked or written).
    public func retryWithDependants(id: String, actor: String, now: Int64, ifStateIn states: Set<JobState>?, dryRun: Bool,
                                    openedBefore: Set<String>) throws(StoreError) -> (result: DependantsRetryResult?, state: JobState) {
        let body = { (connection: PostgresConnection) throws(StoreError) -> (result: DependantsRetryResult?, state: JobState) in
            let resolved = try connection.resolveID(id)
            guard let job = try dryRun ? connection.loadJob(resolved) : connection.lockJob(resolved) else {
                throw StoreError.notFound(id)
            }
            if let states, !states.contains(job.state) { return (nil, job.state) }
            let result = dryRun ? try connection.planRetryWithDependants(job, now: now, openedBefore: openedBefore)
                                : try connection.retryWithDependants(job, actor: actor, now: now)
            return (result, result.job.record.state)
        }
        return dryRun ? try readTransaction(body) : try writeTransaction(body)
    }
}

// MARK: - Inside a transaction

extension PostgresConnection: DependantsReader {
    /// The full id for an id or unique prefix (the rules are `JobIDQuery`'s).
    func resolveID(_ text: String) throws(StoreError) -> String {
        switch try JobIDQuery(text) {
        case .exact(let id):
            let found = try row("SELECT id FROM jobs WHERE id = $1", [.text(id)]) { (row) throws(StoreError) in try row.string(0) }
            return try JobIDQuery.resolve(text, matches: found.map { [$0] } ?? [], batchSize: { () throws(StoreError) in
                let count = try row("SELECT count(*) FROM jobs WHERE batch = $1", [.text(id)]) { (row) throws(StoreError) in
                    try row.integer(0)
                }
                return Int(count ?? 0)
            })
        case .prefix(let prefix):
            // The prefix holds only id characters, so LIKE needs no escaping.
            let matches = try rows("SELECT id FROM jobs WHERE id LIKE $1 ORDER BY id LIMIT $2",
                                   [.text(prefix + "%"), .integer(Int64(JobIDQuery.matchLimit))]) {
                (row) throws(StoreError) in try row.string(0)
            }
            return try JobIDQuery.resolve(text, matches: matches)
        }
    }

    /// The id of the job whose idempotency key is `key`, or nil.
    func keyedJobID(_ key: String) throws(StoreError) -> String? {
        try row("SELECT id FROM jobs WHERE idempotency_key = $1", [.text(JobRecord.postgresKeyText(key))]) {
            (row) throws(StoreError) in try row.string(0)
        }
    }

    /// The job `name` names: the job with that idempotency key, else the job with that id or unique id
    /// prefix (the rule, with its exceptions, is `JobIDQuery.named`'s); `notFound`, `ambiguous`,
    /// `keyAndIDPrefix` or `invalidControl` (too short) when there is none or it is not one job.
    func namedJobID(_ name: String) throws(StoreError) -> String {
        try JobIDQuery.named(name, keyed: keyedJobID(name)) { (text) throws(StoreError) in try resolveID(text) }
    }

    /// The job an `after:` name means (`namedJobID`); nil when there is none.
    ///
    /// `locking` (in a submit's transaction) takes the job's row `FOR KEY SHARE` until the transaction
    /// ends, so an archive cannot remove it between this look and the wait the submit records: an
    /// archive that locked it first (`FOR UPDATE`) is waited for, and a job it removed is no longer
    /// found; one that comes after waits for the submit and then sees the new wait (and keeps the job).
    /// The weakest row lock: workers' and controls' updates of the job are not held up.
    func dependencyID(_ name: String, locking: Bool = false) throws(StoreError) -> String? {
        let found: String
        do throws(StoreError) {
            found = try namedJobID(name)
        } catch {
            switch error {
            case .notFound, .invalidControl: return nil  // not an id, or too short to be a prefix
            default: throw error
            }
        }
        guard locking else { return found }
        return try row("SELECT id FROM jobs WHERE id = $1 FOR KEY SHARE", [.text(found)]) { (row) throws(StoreError) in try row.string(0) }
    }

    /// The job's projection row, locked until the transaction ends (`FOR UPDATE`), or nil.
    func lockJob(_ id: String) throws(StoreError) -> JobRecord? {
        try row("SELECT \(JobRecord.postgresSelectColumns) FROM jobs WHERE id = $1 FOR UPDATE", [.text(id)]) {
            (row) throws(StoreError) in try JobRecord(postgresRow: row, specs: self.specs)
        }
    }

    /// The job's projection row as of this statement, without a lock, or nil.
    func loadJob(_ id: String) throws(StoreError) -> JobRecord? {
        try row("SELECT \(JobRecord.postgresSelectColumns) FROM jobs WHERE id = $1", [.text(id)]) {
            (row) throws(StoreError) in try JobRecord(postgresRow: row, specs: self.specs)
        }
    }

    /// The lease of a running job as its row holds it: owner, token and expiry (schema 11); nil when
    /// the job is not running or holds no lease.
    func leaseRow(_ jobID: String) throws(StoreError) -> (owner: String, token: Int64, expiresAtMs: Int64?)? {
        try row("""
            SELECT lease_owner, lease_token, lease_expires_at_ms FROM jobs
            WHERE id = $1 AND state = 'running' AND lease_owner IS NOT NULL AND lease_token IS NOT NULL
            """, [.text(jobID)]) { (row) throws(StoreError) in
            (try row.string(0), try row.integer(1), try row.optionalInteger(2))
        }
    }

    /// The body of `PostgresStore.append(_:now:)`. The rows of every job in the batch are locked first,
    /// in id order, so two processes' batches cannot deadlock on each other; each event then runs in
    /// its own savepoint, its writes sent at once: a write the server refuses (`serverRefused`) is that
    /// event's failure, its savepoint rolled back, and the transaction goes on.
    func appendBatch(_ events: [PendingEvent], now: Int64) throws(StoreError) -> [Result<JobEvent, StoreError>] {
        let ids = Array(Set(events.map(\.jobID))).sorted()
        var current: [String: JobRecord] = [:]
        for record in try rows("SELECT \(JobRecord.postgresSelectColumns) FROM jobs WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE",
                               [postgresTextArray(ids)], { (row) throws(StoreError) in try JobRecord(postgresRow: row, specs: self.specs) }) {
            current[record.id] = record
        }
        var outcomes: [Result<JobEvent, StoreError>] = []
        outcomes.reserveCapacity(events.count)
        // The rows the batch writes (`batchRecords`): an event's own, and the dependants its end cancels.
        batchRecords = [:]
        defer { batchRecords = nil }
        for pending in events {
            batchRecordsUndo.removeAll(keepingCapacity: true)
            do throws(StoreError) {
                // Byte for byte: a `String` key also matches canonically equivalent text, another id.
                let known = (batchRecords?[UTF8Key(pending.jobID)] ?? current[pending.jobID])
                    .flatMap { $0.id.hasSameUTF8(as: pending.jobID) ? $0 : nil }
                let (event, _) = try savepoint { () throws(StoreError) in
                    try appendEvent(pending, to: known, now: now)
                }
                outcomes.append(.success(event))
            } catch {
                try throwIfTransactionLost(error)
                // The savepoint took the event's rows back.
                for undo in batchRecordsUndo.reversed() { batchRecords?[undo.key] = undo.record }
                outcomes.append(.failure(error))
            }
        }
        return outcomes
    }

    /// `PostgresStore.append(_:now:)` without a savepoint per event: the rows are locked as in
    /// `appendBatch` (their leases with them), every event written through one `PostgresBatchWriter`.
    /// An event refused before it wrote is its failure and the batch goes on; one that failed after it
    /// wrote sets `abandoned` and throws (the caller rolls back and runs `appendBatch`), and so does a
    /// refusal of the server (`serverRefused`), which aborted the transaction: the refused write went
    /// out with this event's read, or it was an earlier event's. A refusal that comes with the COMMIT
    /// is the caller's to see.
    func appendBatchWithoutSavepoints(_ events: [PendingEvent], now: Int64,
                                      abandoned: FastPathAbandoned) throws(StoreError) -> [Result<JobEvent, StoreError>] {
        guard !events.isEmpty else { return [] }
        let ids = Array(Set(events.map(\.jobID))).sorted()
        // The row locks are held back and go in one pipeline with the seqs' reservation (and the BEGIN
        // before them): one round trip for all three. The server runs them in order, so the seqs are
        // taken after the locks.
        // Without the specs (`JobRecord.postgresLockColumns`): the lifecycle does not read them here.
        let locked = HeldResult()
        enqueue("SELECT \(JobRecord.postgresLockColumns) FROM jobs WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE",
                [postgresTextArray(ids)]) { (result) throws(PostgresError) in locked.result = result }
        let writer = PostgresBatchWriter(self)
        // The seqs of the events, taken after the row locks (see `PostgresBatchWriter`).
        try writer.reserveSeqs(events.count)
        guard let lockedRows = locked.result?.rows else {
            throw StoreError.io("the row locks of a group commit returned no result; this is a bug in jobctl: please report it")
        }
        var current: [String: JobRecord] = [:]
        var unknown: [(id: String, row: PostgresRow)] = []
        for row in lockedRows {
            let id = try row.string(0)
            guard let spec = self.specs.cached(ofJob: id) else {
                unknown.append((id, row))
                continue
            }
            current[id] = try JobRecord(postgresRow: row, spec: spec)
        }
        if !unknown.isEmpty {
            // Jobs this process has not read (an append from outside a worker): their specs from the log.
            var specs: [String: JobSpec] = [:]
            for (id, stored) in try rows("SELECT id, \(JobRecord.postgresSpecSQL) FROM jobs WHERE id = ANY($1::text[])",
                                         [postgresTextArray(unknown.map(\.id))], { (row) throws(StoreError) in
                                             (try row.string(0), try row.optionalString(1))
                                         }) {
                guard let stored else { throw StoreError.notItsSubmission(jobID: id) }
                specs[id] = try self.specs.spec(ofJob: id, stored: stored)
            }
            for (id, row) in unknown {
                guard let spec = specs[id] else { throw StoreError.corrupt("job \(id) lost its spec while its row was locked") }
                current[id] = try JobRecord(postgresRow: row, spec: spec)
            }
        }
        // The leases as the locked rows hold them: no other transaction changes them until this one
        // ends (a claim, a rescue and a heartbeat all change the job row).
        writer.knowLeases(current.values)
        var outcomes: [Result<JobEvent, StoreError>] = []
        outcomes.reserveCapacity(events.count)
        for pending in events {
            let writesBefore = writer.writes
            do throws(StoreError) {
                // The job's row as it stands: as the batch wrote it (its own event, or the end of a job it
                // waited for), else as locked. Byte for byte: a `String` key also matches canonically
                // equivalent text, another id.
                let known = (writer.written(pending.jobID) ?? current[pending.jobID])
                    .flatMap { $0.id.hasSameUTF8(as: pending.jobID) ? $0 : nil }
                let (event, _) = try writer.appendEvent(pending, to: known, now: now)
                outcomes.append(.success(event))
            } catch {
                try throwIfTransactionLost(error)
                if writer.writes != writesBefore || error.isServerRefusal {
                    abandoned.set()
                    throw error
                }
                outcomes.append(.failure(error))
            }
        }
        try writer.flush()
        return outcomes
    }

    /// The claim of `append(_:now:thenClaim:)`, after the appends: a claim refused for a reason of its
    /// own is its failure and the appends still commit.
    ///
    /// With `abandoned` (the batch without savepoints), the claim runs without a savepoint too: a claim
    /// that failed before it wrote leaves nothing to undo; one that failed after it wrote sets
    /// `abandoned` and throws, and the caller runs everything again with savepoints (`abandoned` nil:
    /// the claim in a savepoint of its own). So does a refusal of the server (`serverRefused`): the
    /// transaction is aborted, and the refused write may be the appends' (sent with the claim's query).
    func claimAfterAppends(_ appended: [Result<JobEvent, StoreError>], _ request: ClaimRequest,
                           abandoned: FastPathAbandoned?) throws(StoreError) -> AppendAndClaimOutcome {
        guard !request.isEmpty else { return AppendAndClaimOutcome(appended: appended, claimed: .success([])) }
        if let abandoned {
            let writer = PostgresBatchWriter(self)
            do throws(StoreError) {
                return AppendAndClaimOutcome(appended: appended, claimed: .success(try claim(request, writer: writer)))
            } catch {
                try throwIfTransactionLost(error)
                if writer.writes > 0 || error.isServerRefusal {
                    abandoned.set()
                    throw error
                }
                return AppendAndClaimOutcome(appended: appended, claimed: .failure(error))
            }
        }
        do throws(StoreError) {
            let claimed = try savepoint { () throws(StoreError) in try claim(request) }
            return AppendAndClaimOutcome(appended: appended, claimed: .success(claimed))
        } catch {
            try throwIfTransactionLost(error)
            return AppendAndClaimOutcome(appended: appended, claimed: .failure(error))
        }
    }

    /// Stores bytes once under their SHA-256 (hex), `sha256`.
    public func storeBlob(_ bytes: Data, sha256: String) throws(StoreError) {
        try takeBlobTurns([sha256], exclusive: false)
        try store("INSERT INTO blobs (sha256, size, data) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING",
                  [.text(sha256), .int(bytes.count), .bytea(bytes)])
    }

    // MARK: DecisionWriter (perform and appendEvent come from StorePort)

    /// The token of the job's lease (its row's, while it runs), or nil.
    public func leaseToken(ofJob jobID: String) throws(StoreError) -> Int64? { try leaseRow(jobID)?.token }

    /// Appends one event row and returns its `seq`.
    public func insertEvent(jobID: String, version: Int, type: EventType, atMs: Int64, actor: String, leaseToken: Int64?,
                            data: String) throws(StoreError) -> Int64 {
        let seq = try row("""
            INSERT INTO events (job_id, version, type, at_ms, actor, lease, data)
            VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq
            """, [.text(jobID), .int(version), .text(type.rawValue), .integer(atMs), .text(actor),
                  .optional(leaseToken), .text(data)]) { (row) throws(StoreError) in try row.integer(0) }
        guard let seq else { throw StoreError.invalidControl("INSERT … RETURNING seq returned no row for job \(jobID)") }
        return seq
    }

    /// Writes the whole row: an update when the job has one (the caller holds its lock), else an insert.
    public func writeProjection(_ record: JobRecord, replacing current: JobRecord?) throws(StoreError) {
        if batchRecords != nil {
            let key = UTF8Key(record.id)
            batchRecordsUndo.append((key, batchRecords?.updateValue(record, forKey: key)))
        }
        if current != nil {
            try store(JobRecord.postgresUpdateSQL, try record.postgresUpdateValues())
        } else {
            try store(JobRecord.postgresInsertSQL, try record.postgresValues())
        }
    }

    /// Clears the lease expiry of a job that stopped running (its row's owner and token are the
    /// projection's, already written).
    public func dropLease(jobID: String) throws(StoreError) {
        try store("UPDATE jobs SET lease_expires_at_ms = NULL WHERE id = $1 AND lease_expires_at_ms IS NOT NULL", [.text(jobID)])
    }

    // MARK: Dependencies

    /// The job's projection row, locked, or nil.
    public func dependencyRecord(_ jobID: String) throws(StoreError) -> JobRecord? { try lockJob(jobID) }

    /// The job's projection row, not locked, or nil.
    public func unlockedRecord(_ jobID: String) throws(StoreError) -> JobRecord? { try loadJob(jobID) }

    /// Inserts a row of `job_dependencies`.
    public func insertDependency(jobID: String, dependsOn: String) throws(StoreError) {
        try store("INSERT INTO job_dependencies (job, depends_on) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                  [.text(jobID), .text(dependsOn)])
    }

    /// Deletes the rows that wait on `jobID`.
    public func removeDependencies(on jobID: String) throws(StoreError) {
        try store("DELETE FROM job_dependencies WHERE depends_on = $1", [.text(jobID)])
    }

    /// The queued or paused jobs with a row waiting on `jobID`, in submission order, locked.
    public func waitingDependants(of jobID: String) throws(StoreError) -> [JobRecord] {
        try dependants(of: jobID, state: "IN ('queued', 'paused')", locking: true)
    }

    /// The cancelled jobs with a row waiting on `jobID`, in submission order; with `locking`, locked
    /// (`FOR UPDATE`) until the transaction ends.
    public func cancelledDependants(of jobID: String, locking: Bool) throws(StoreError) -> [JobRecord] {
        try dependants(of: jobID, state: "= 'cancelled'", locking: locking)
    }

    /// The jobs with a row waiting on `jobID` whose state passes `state` (a condition on `state`), in
    /// submission order; with `locking`, locked (`FOR UPDATE`) until the transaction ends.
    private func dependants(of jobID: String, state: String, locking: Bool) throws(StoreError) -> [JobRecord] {
        try rows("""
            SELECT \(JobRecord.postgresSelectColumns) FROM jobs
            WHERE id IN (SELECT job FROM job_dependencies WHERE depends_on = $1) AND state \(state)
            ORDER BY seq
            """ + (locking ? " FOR UPDATE" : ""), [.text(jobID)]) { (row) throws(StoreError) in try JobRecord(postgresRow: row, specs: self.specs) }
    }

    /// The jobs `jobID` still waits for and their states (nil: not in the log). With `locking`, their
    /// rows are held `FOR SHARE` until the transaction ends: a control that would end one of them (a
    /// cancel, whose cascade cancels what waits for it) waits for this transaction, and then finds the
    /// dependant it opened waiting; one that ended it first is waited for here, and its end is read.
    public func remainingDependencies(of jobID: String, locking: Bool) throws(StoreError) -> [(id: String, state: JobState?)] {
        let waits = try rows("SELECT depends_on FROM job_dependencies WHERE job = $1 ORDER BY depends_on", [.text(jobID)]) {
            (row) throws(StoreError) in try row.string(0)
        }
        guard !waits.isEmpty else { return [] }
        var states: [String: JobState] = [:]
        let lock = locking ? " ORDER BY id FOR SHARE" : ""
        for (id, state) in try rows("SELECT id, state FROM jobs WHERE id = ANY($1)" + lock, [.array(PostgresArray(elementType: PostgresType.text, elements: waits.map(PostgresValue.text)))], {
            (row) throws(StoreError) in (try row.string(0), try row.string(1))
        }) {
            states[id] = JobState(rawValue: state)
        }
        return waits.map { id in (id, states[id]) }
    }

    /// The payload of the job's event at `version`, or nil.
    public func payload(ofJob jobID: String, version: Int) throws(StoreError) -> EventPayload? {
        try row("SELECT \(JobEvent.postgresSelectColumns) FROM events WHERE job_id = $1 AND version = $2",
                [.text(jobID), .int(version)]) { (row) throws(StoreError) in try JobEvent(postgresRow: row).payload }
    }
}
