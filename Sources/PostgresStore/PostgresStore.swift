import Foundation
@_exported import JobLifecycle
import JobModel
@_exported import StorePort
import Synchronization

/// The PostgreSQL adapter of the `JobStore` port: the same append-only event log and `jobs`
/// projection as the SQLite adapter, in one PostgreSQL database shared by workers on many machines.
///
/// Every write is one READ COMMITTED transaction that locks the rows it decides on (`SELECT … FOR
/// UPDATE`, claims with `SKIP LOCKED`), so the lifecycle always decides on the job's current row; the
/// unique `(job_id, version)` of `events` backs the expected-version check. A transaction the server
/// aborts for a deadlock or a serialization failure is run again, whole. Within a process every use
/// of the store's connection runs on the store's executor (`StoreExecutor`), which also group-commits
/// the worker's appends; a worker's lease renewals alone run on a second connection, opened at the
/// first renewal (`LeaseRenewalLane`).
///
/// `@unchecked Sendable` is sound because the only mutable state, the connection, is reached solely
/// through `withConnection`, which runs on the executor thread (the lane's connection, on its own).
public final class PostgresStore: JobStore, @unchecked Sendable {
    /// How `init(url:mode:)` opens the database (the same modes as the SQLite adapter's).
    public enum OpenMode: Sendable, Equatable, CaseIterable {
        /// Reads only: the session is `default_transaction_read_only`, never migrates.
        case readOnly
        /// Reads and writes a database that already holds jobctl's schema, applying pending migrations.
        case readWrite
        /// As `readWrite`, but an empty database gets the schema.
        case create
    }

    /// The database URL with its password redacted.
    public let location: String
    /// How the store was opened.
    public let mode: OpenMode
    /// Whether the store was opened read-only.
    public var isReadOnly: Bool { mode == .readOnly }
    /// The migrations this open applied (empty when the schema was already current).
    public let appliedMigrations: [Int]

    /// The newest schema version this binary knows (the highest `migrations/postgres/NNN_*.sql`).
    public static var knownSchemaVersion: Int { PostgresMigrator.latestVersion }

    /// How many times a transaction the server aborted for a deadlock or serialization failure runs.
    static let attemptsPerTransaction = 5

    private let connection: PostgresConnection
    private let executor: StoreExecutor
    /// Where `renewLeases` runs: a connection and a thread of its own, so that a heartbeat never waits
    /// behind a commit of the executor's.
    let leaseLane: LeaseRenewalLane
    /// Ends the store's work, on both its connections, at a stopping worker's deadline (see `setStopDeadline`).
    private let stopDeadline: StopDeadline
    /// Shortens the store's connection's answer waits (see `capAnswerWaits`) and ends them at `stopDeadline`.
    private let answerWaitCap: AnswerWaitCap
    /// The longest one call of the executor waits by the store's own limits (nil: no answer limit, so
    /// none); see `isWaitingWithinBounds(forAtLeastMs:)`.
    private let callWaitBoundNs: UInt64?
    /// `tailEvents`' gaps: the first seq of each gap it has seen below a later event, and the `xmax`
    /// of the snapshot it first saw it in (`Int64.min` once it is known to be for good).
    let tailGaps = Mutex<[Int64: Int64]>([:])
    /// `dataVersion`'s last snapshot and number.
    let snapshotsSeen = Mutex<SnapshotsSeen>(SnapshotsSeen())

    /// What makes a session read-only; run again on every new connection of a read-only store.
    private static let readOnlySession = "SET default_transaction_read_only = on"

    /// Connects to `url` (`postgres://user@host:port/db?sslmode=…`; the password from the URL,
    /// `PGPASSWORD` or `~/.pgpass`), checks the schema ledger and, unless read-only, migrates.
    ///
    /// Every mode refuses a database migrated by a newer jobctl (`newerSchema`) before touching it;
    /// `readWrite` and `readOnly` refuse a database without jobctl's ledger (`noDatabase`), and
    /// `readOnly` one that still needs migrations (`olderSchema`).
    ///
    /// With `answerTimeoutMs`, a call (after the open's migrations) that goes that long without a byte of the server's answer gives the
    /// session up as lost (`io`, "the server sent no answer for N s", or "no more of its answer"), and the next call opens a new one:
    /// a worker on a connection that went quiet (a stalled proxy, a vanished host) reports and recovers instead of hanging for ever,
    /// while a large answer that keeps arriving through a slow link is read however long it takes. A worker's group commits and
    /// claims, and its lease renewals, are bounded as whole calls instead (`groupCommit`, `LeaseRenewalLane.run`). Without it, as
    /// libpq does, calls wait as long as the server takes.
    ///
    /// A connection attempt waits at most that long too, and never more than 10 s (libpq's least is 2 s);
    /// a `connect_timeout` in the URL says otherwise.
    /// What opening `url` would refuse before anything is sent (see `PostgresConnection.checkTarget`), as
    /// the error the open throws: `jobctl config` reports the worker's database with it, contacting no server.
    public static func checkURL(_ url: String) throws(StoreError) {
        do throws(PostgresError) { try PostgresConnection.checkTarget(url) } catch { throw StoreError(error) }
    }

    public init(url: String, mode: OpenMode, answerTimeoutMs: Int64? = nil) throws(StoreError) {
        self.location = redactedDatabaseURL(url)
        self.mode = mode
        let stopDeadline = StopDeadline()
        self.stopDeadline = stopDeadline
        self.answerWaitCap = AnswerWaitCap(deadline: stopDeadline)
        let connection: PostgresConnection
        // A session the server ends while it is being set up (an administrator's `pg_terminate_backend`, a
        // restart) is opened once more: nothing of the open was left half done (each migration is a
        // transaction of its own), and a command — a `watch` — failed for a loss it rides out a moment later.
        // A server that cannot be reached is not asked twice.
        var session: (PostgresConnection, [Int])?
        for attempt in 1...2 where session == nil {
            session = try Self.openSession(url: url, mode: mode, answerTimeoutMs: answerTimeoutMs, lastTry: attempt == 2)
        }
        guard let session else { throw StoreError.io("the database session could not be opened; this is a bug in jobctl: please report it") }
        (connection, appliedMigrations) = session
        // Only from now on: the open's own migrations (an index built over a long log) take what they take.
        do throws(ThreadStartFailure) {
            try connection.setAnswerTimeout(milliseconds: answerTimeoutMs, cap: answerWaitCap)
        } catch {
            throw StoreError.io(error.description)
        }
        connection.stopDeadline = stopDeadline
        self.connection = connection
        callWaitBoundNs = answerTimeoutMs.map { Self.callWaitBoundNs(answerTimeoutMs: $0, connectTimeoutSeconds: connection.connectTimeoutSeconds) }
        self.leaseLane = LeaseRenewalLane(url: url, schema: connection.logSchema, stopDeadline: stopDeadline)
        // The executor's group commit calls back into the store; the store owns the executor, so the
        // reference back is weak (set once, below, before any call can reach the executor).
        let owner = Mutex<WeakPostgresStore>(WeakPostgresStore())
        self.executor = try StoreExecutor(name: "jobctl-pg-store") { (events, request) throws(StoreError) -> AppendAndClaimOutcome in
            guard let store = owner.withLock({ $0.store }) else {
                throw StoreError.io("the store was closed while appends were queued")
            }
            return try store.groupCommit(events, thenClaim: request)
        }
        owner.withLock { $0.store = self }
        // A migration may have added tables: the worker roles granted before get their share of them.
        if !appliedMigrations.isEmpty { try regrantWorkerRoles() }
    }

    deinit {
        executor.stop()
    }

    // MARK: - The executor

    /// Runs `body` with the connection on the executor thread, blocking the caller until it has run.
    /// A connection the server dropped (restart, terminated backend) is opened again first, with the
    /// session settings of the store's mode.
    func withConnection<T>(_ body: @escaping (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        let connection = connection
        let readOnly = isReadOnly
        return try executor.sync { () throws(StoreError) -> T in
            if !connection.isConnected {
                try Self.reopen(connection, readOnly: readOnly)
            }
            return try body(connection)
        }
    }

    /// Appends one event in the executor's next group commit.
    public func appendGrouped(_ event: PendingEvent) async -> Result<JobEvent, StoreError> {
        await executor.append(event)
    }

    /// Appends events side by side, in order, in the executor's next group commit.
    public func appendGrouped(_ events: [PendingEvent]) async -> [Result<JobEvent, StoreError>] {
        await executor.append(events)
    }

    /// Claims in the same transaction as the appends queued before it.
    public func claimGrouped(_ request: ClaimRequest) async throws(StoreError) -> [ClaimedJob] {
        try await executor.claim(request).get()
    }

    /// Runs `body` on the executor thread, where the store's synchronous methods run without a hop.
    public func run<T: Sendable>(_ body: @escaping @Sendable (any JobStore) throws -> T) async throws -> T {
        try await executor.run { [self] in try body(self) }
    }

    /// How many group commits the executor made and how many events they held.
    public var groupCommitStats: GroupCommitStats { executor.groupCommitStats }

    /// One group commit: the appends, then the claim when there is one, in one transaction.
    ///
    /// Each of its calls is bounded as a whole by the answer timeout (`timingAnswersWhole`), not by the
    /// silence in its answer: these are a worker's writes (its runners' events, its claims), whose limit
    /// is its lease. Every runner's writes wait behind the one under way, while the lease renewals' own
    /// connection keeps their leases alive: a commit whose answer trickled on past the lease would hold
    /// them all, and the jobs with them, on a worker that cannot write them. Given up, it is tried on a
    /// new session (or its loss found out, `landedEvent`). Its answers are small (a claim's: the jobs
    /// of the worker's free slots), never the large results a silence limit is for.
    private func groupCommit(_ events: [PendingEvent], thenClaim request: ClaimRequest?) throws(StoreError) -> AppendAndClaimOutcome {
        let now = Clock.nowMs()
        return try connection.timingAnswersWhole { () throws(StoreError) -> AppendAndClaimOutcome in
            if let request { return try append(events, now: now, thenClaim: request) }
            return AppendAndClaimOutcome(appended: try append(events, now: now), claimed: .success([]))
        }
    }

    /// `writeTransaction`, each of its calls bounded as a whole by the answer timeout (see `groupCommit`
    /// and `PostgresConnection.timingAnswersWhole`): for a worker's claims and lease writes.
    func wholeCallWriteTransaction<T>(_ body: @escaping (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try refuseWriteIfReadOnly()
        return try withConnection { (connection) throws(StoreError) -> T in
            try connection.timingAnswersWhole { () throws(StoreError) -> T in
                try Self.transaction(Self.writeBegin, on: connection, readOnly: false, body)
            }
        }
    }

    // MARK: - Transactions

    /// Runs `body` in one READ COMMITTED write transaction and commits; rolls back when it throws. A
    /// transaction the server aborted for a deadlock or serialization failure (`busy`) runs again.
    func writeTransaction<T>(_ body: @escaping (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try refuseWriteIfReadOnly()
        return try transaction(Self.writeBegin, body)
    }

    /// Throws `readOnly` when the store was opened read-only (before a write).
    func refuseWriteIfReadOnly() throws(StoreError) {
        guard !isReadOnly else {
            throw StoreError.readOnly("the store at '\(location)' was opened read-only and this operation writes; open it read-write")
        }
    }

    /// How a write transaction begins: READ COMMITTED, and its statements run on their prepared
    /// statements' generic plans. Both are held back (`PostgresConnection.enqueue`) and go to the
    /// server in the same pipeline as the transaction's first statement: no round trip of their own.
    ///
    /// Left to itself (`plan_cache_mode = auto`) the server plans a prepared statement again for
    /// every execution whose generic plan it estimates dearer than a custom one — and with arrays of
    /// ids (`= ANY($1)`, `unnest($1)`) and `generate_series(1, $2)` it always does: in a drain the
    /// lease read was planned on every call, the row locks, claims and writes on 11–49 % of calls,
    /// ~10 % of the server's CPU (BENCHMARKS.md, PostgreSQL, "The ceiling"). Every statement a write
    /// transaction sends is written so that its generic plan is the right one: ids through primary
    /// keys, the claim's state and limit in its text (tests check the plans in this mode). `SET
    /// LOCAL` ends with the transaction, so reads outside one keep the server's choice.
    ///
    /// A write transaction left idle for `idleWriteTimeoutSeconds` is ended by the server, which drops
    /// its session and with it the row locks it holds. jobctl's write transactions never wait on
    /// anything but the server, so only a frozen client leaves one idle that long (a process stopped or
    /// descheduled, a paused machine): without the limit the jobs whose rows it locked could never be
    /// rescued, since the rescue skips locked rows (`SKIP LOCKED`), and a drain would wait for ever.
    /// The frozen worker, when it wakes, finds its connection gone and its leases taken (fencing).
    /// Both settings are made by one statement (`set_config(…, true)` is `SET LOCAL`).
    static let writeBegin = writeBeginStatements(idleTimeoutMs: Int64(idleWriteTimeoutSeconds) * 1_000)

    /// `writeBegin` with another limit on the time the transaction may stay idle (the lease renewals'
    /// lane sets its own, shorter one).
    static func writeBeginStatements(idleTimeoutMs: Int64) -> [String] {
        ["BEGIN ISOLATION LEVEL READ COMMITTED",
         "SELECT pg_catalog.set_config('plan_cache_mode'::text, 'force_generic_plan'::text, true), "
             + "pg_catalog.set_config('idle_in_transaction_session_timeout'::text, '\(idleTimeoutMs)ms'::text, true)"]
    }

    /// See `writeBegin`.
    static let idleWriteTimeoutSeconds = 10

    /// Runs `body` in one REPEATABLE READ transaction, so every query in it sees the same snapshot.
    ///
    /// Its idle limit is its own, as a write transaction's is (`readBegin`): a role or database whose
    /// `idle_in_transaction_session_timeout` is shorter than the time jobctl takes between two of its
    /// statements (20 ms) ended every `replay --verify` and `audit`. A COMMIT that went unanswered
    /// committed nothing, so it is a lost connection, not an unconfirmed commit ("check what it wrote").
    func readTransaction<T>(_ body: @escaping (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        do throws(StoreError) {
            return try transaction(Self.readBegin, body)
        } catch .commitUnconfirmed(let message) {
            throw .unreachable(message)
        }
    }

    /// How a read transaction begins: a snapshot, and the server's idle limit for it set to a minute,
    /// whatever the role's (a reader holds no row lock: a frozen one holds back vacuum's cleanup, no job).
    static let readBegin = ["BEGIN ISOLATION LEVEL REPEATABLE READ",
                            "SELECT pg_catalog.set_config('idle_in_transaction_session_timeout'::text, '60000ms'::text, true)"]

    /// Runs `body` between `begin` and COMMIT. `begin` is held back and travels in one pipeline with
    /// the first statement `body` sends; what `body` holds back last (the group commit's final write)
    /// travels with the COMMIT. So a group commit costs the round trips of its reads and no more.
    ///
    /// A connection the server dropped while idle is found dead by that first pipeline: nothing of the
    /// transaction can have run (it never began), so the connection is opened again and the
    /// transaction run on it (once) — unless that pipeline carried the COMMIT too (`body` sent
    /// nothing), when the outcome is unknown and the loss is reported.
    func transaction<T>(_ begin: [String], _ body: @escaping (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        let readOnly = isReadOnly
        return try withConnection { (connection) throws(StoreError) -> T in
            try Self.transaction(begin, on: connection, readOnly: readOnly, body)
        }
    }

    /// `transaction(_:_:)` on `connection`, which the caller's thread owns (the store's executor, or
    /// the lease renewals' lane).
    static func transaction<T>(_ begin: [String], on connection: PostgresConnection, readOnly: Bool,
                               _ body: (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        var attempt = 1
        var reopened = false
        while true {
            let tripsBefore = connection.roundTrips
            var committing = false
            do throws(StoreError) {
                for statement in begin { connection.enqueue(statement) }
                let result = try body(connection)
                committing = true
                let commit: PostgresResult
                do throws(PostgresError) { commit = try connection.execute("COMMIT") } catch { throw StoreError(error) }
                guard commit.commandStatus == "COMMIT" else { throw StoreError(PostgresError.rolledBack(sql: nil)) }
                return result
            } catch {
                connection.discardQueued()
                if !connection.isConnected, !reopened, !committing, !connection.lastCallGivenUp, connection.roundTrips == tripsBefore + 1 {
                    // The first round trip, the one carrying BEGIN, found the connection dead.
                    reopened = true
                    try Self.reopen(connection, readOnly: readOnly)
                    continue
                }
                if connection.isConnected && connection.isInTransaction { _ = try? connection.execute("ROLLBACK") }
                guard case .busy = error, attempt < Self.attemptsPerTransaction else { throw error }
                attempt += 1
            }
        }
    }

    /// `init`'s connection and the migrations it applied; nil (unless `lastTry`) when the server ended the
    /// session after it connected, which `init` then opens once more.
    private static func openSession(url: String, mode: OpenMode, answerTimeoutMs: Int64?,
                                    lastTry: Bool) throws(StoreError) -> (PostgresConnection, [Int])? {
        var opened: PostgresConnection?
        do {
            let connection = try PostgresConnection(url, connectTimeoutSeconds: connectTimeoutSeconds(answerTimeoutMs: answerTimeoutMs))
            opened = connection
            // The session's set-up statements wait for the server no longer than any later call: a server
            // that took the connection and then went silent held a command (or a starting worker) here for
            // ever, whatever JOBCTL_DB_ANSWER_TIMEOUT said. Only migrations still to apply are exempt (below).
            try connection.setAnswerTimeout(milliseconds: answerTimeoutMs)
            let schema = try PostgresMigrator.keepToLogSchema(connection)
            let applied = try PostgresMigrator.appliedVersions(connection)
            try PostgresMigrator.refuseNewer(applied)
            if let schema, schema.holdsLedger, !schema.holdsJobs, !applied.isEmpty {
                throw StoreError.invalidControl(strayLedgerMessage(schema))
            }
            try PostgresMigrator.refuseGaps(applied)
            if applied.isEmpty && mode != .create {
                throw StoreError.noDatabase(path: redactedDatabaseURL(url))
            }
            if mode == .readOnly {
                let found = applied.max() ?? 0
                if found < PostgresMigrator.latestVersion {
                    throw StoreError.olderSchema(found: found, known: PostgresMigrator.latestVersion)
                }
                try connection.executeScript(readOnlySession)
                return (connection, [])
            }
            // A migration (an index built over a long log, the wait for another process's migrations)
            // takes what it takes; `init` sets the limit again after it.
            if PostgresMigrator.all.contains(where: { !applied.contains($0.version) }) { try connection.setAnswerTimeout(milliseconds: nil) }
            return (connection, try PostgresMigrator.migrate(connection, now: Clock.nowMs()))
        } catch {
            // Not a server that went silent (the answer limit gave the session up): it is not asked twice.
            if !lastTry, let opened, !opened.isConnected, !opened.lastCallGivenUp { return nil }
            switch error {
            case let error as StoreError: throw error
            case let error as PostgresError: throw StoreError(error)
            default: throw StoreError.io("\(error)")
            }
        }
    }

    /// Why a ledger without the log's tables is refused, not migrated into a second log: an earlier jobctl
    /// wrote it into a schema its search path named before the log's (a schema named after the role).
    static func strayLedgerMessage(_ schema: PostgresMigrator.LogSchema) -> String {
        let log = schema.jobsFoundIn.map { "; the search path finds a log in schema \"\($0)\"" } ?? ""
        return "schema \"\(schema.name)\", the first on this session's search path with jobctl's ledger (schema_migrations), "
            + "holds none of the log's tables\(log): an earlier jobctl wrote that ledger there, in a schema the search path "
            + "names first (one named after the role), while the log was elsewhere. Nothing was changed: drop that "
            + "schema_migrations table (and any other table jobctl left beside it), or name the log's schema in the URL "
            + "(options=-c search_path=SCHEMA)"
    }

    /// Opens a connection the server dropped again, with the session settings of the store's mode.
    private static func reopen(_ connection: PostgresConnection, readOnly: Bool) throws(StoreError) {
        do throws(PostgresError) {
            try connection.reconnect()
            if readOnly { try connection.executeScript(readOnlySession) }
        } catch {
            throw StoreError(error)
        }
    }

    /// Creates (if needed) and migrates the database at `url`; returns the versions applied now.
    public static func migrate(url: String) throws(StoreError) -> [Int] {
        try PostgresStore(url: url, mode: .create).appliedMigrations
    }
}

extension PostgresStore {
    /// See `JobStore.capAnswerWaits`: the store's own connection (the lease renewals' waits are a third
    /// of a lease already).
    public func capAnswerWaits(atMostMs: Int64?) {
        answerWaitCap.milliseconds = atMostMs
    }

    /// See `JobStore.isWaitingWithinBounds(forAtLeastMs:)`: the executor's call or group commit, or the lease
    /// renewal under way on the lane's connection (a worker's loop may wait for one), each within the
    /// longest it waits by the answer limit and the connect timeout.
    public func isWaitingWithinBounds(forAtLeastMs minimumMs: Int64) -> Bool {
        if let callWaitBoundNs, executor.isOnWork(forAtLeastMs: minimumMs, lessThanNs: callWaitBoundNs) { return true }
        return leaseLane.isWaitingWithinBounds(forAtLeastMs: minimumMs)
    }

    /// The longest one call waits by these limits: a connection opened again (the connect timeout), the
    /// statement that keeps the new session to the log's schema, then the transaction's first answer not
    /// coming (each up to the answer limit: the connection is given up then, and the rest fails at once),
    /// and a few seconds for the work itself.
    static func callWaitBoundNs(answerTimeoutMs: Int64, connectTimeoutSeconds: Int) -> UInt64 {
        UInt64(max(0, connectTimeoutSeconds)) * 1_000_000_000 + UInt64(max(0, answerTimeoutMs)) * 2_000_000 + 5_000_000_000
    }

    /// See `JobStore.setStopDeadline`: both connections, the store's own and the lease renewals'.
    public func setStopDeadline(monotonicMs: Int64?) {
        stopDeadline.deadlineNs = monotonicMs.map { UInt64(max(0, $0)) * 1_000_000 }
    }

    /// How long a connection attempt waits for the server: the answer timeout, when one is set, but at
    /// most 10 s (libpq's default wait here before), at least libpq's 2 s. `JOBCTL_DB_ANSWER_TIMEOUT=2s`
    /// waited 10 s for a server that took the connection and said nothing.
    static func connectTimeoutSeconds(answerTimeoutMs: Int64?) -> Int {
        guard let answerTimeoutMs else { return 10 }
        return Int(min(10, max(2, (answerTimeoutMs + 999) / 1_000)))
    }
}

/// The store the executor's group commit writes through, held weakly (the store owns the executor).
private struct WeakPostgresStore {
    weak var store: PostgresStore?
}

// MARK: - Errors

extension StoreError {
    /// The store's error for a PostgreSQL failure: deadlocks and serialization failures are `busy` (the
    /// transaction runs again), a write in a read-only session `readOnly`, a newer schema `newerSchema`,
    /// a refusal of the rows a statement wrote (a constraint, a value, a trigger that raised:
    /// `PostgresError.rowRefusal`) `serverRefused`, any other error the server sent `server` with its
    /// SQLSTATE, anything else `io` with the message (never a password: `PostgresError` holds none).
    init(_ error: PostgresError) {
        if let refusal = error.rowRefusal {
            self = .serverRefused(sqlstate: refusal.sqlstate, message: refusal.message)
            return
        }
        switch error {
        case _ where error.isSerializationFailure:
            self = .busy(sql: nil)
        case .newerSchema(let found, let known):
            self = .newerSchema(found: found, known: known)
        case .damagedLedger(let missing, let highest):
            self = .damagedLedger(missing: missing, highest: highest)
        case .server(let sqlstate, _, _, _, _) where sqlstate == "25006":
            self = .readOnly("\(error)")
        case .conversion(let message):
            self = .corrupt(message)
        case .messageTooLarge:
            self = .tooLarge("\(error)")
        case .connectionLost(let message, let sql?) where PostgresError.isCommit(sql):
            // What to do about it is the writer's to say (a command's user checks; a worker looks itself).
            self = .commitUnconfirmed(PostgresError.loss(message, sql: sql))
        case .connectionFailed, .connectionLost:
            self = .unreachable("\(error)")
        case .server(let sqlstate, _, _, _, _):
            self = .server(sqlstate: sqlstate, message: "\(error)")
        default:
            self = .io("\(error)")
        }
    }
}

// MARK: - Statements in the store's terms

extension PostgresConnection {
    /// Runs a statement; PostgreSQL errors become `StoreError`s.
    @discardableResult
    func store(_ sql: String, _ parameters: [PostgresValue] = []) throws(StoreError) -> Int {
        do throws(PostgresError) { return try run(sql, parameters) } catch { throw StoreError(error) }
    }

    /// Runs a query and maps every row; PostgreSQL errors become `StoreError`s.
    func rows<T>(_ sql: String, _ parameters: [PostgresValue] = [],
                 _ transform: (PostgresRow) throws(StoreError) -> T) throws(StoreError) -> [T] {
        let result: PostgresResult
        do { result = try execute(sql, parameters) } catch { throw StoreError(error) }
        return try result.rows.map { (row) throws(StoreError) -> T in try transform(row) }
    }

    /// The first row mapped, or nil.
    func row<T>(_ sql: String, _ parameters: [PostgresValue] = [],
                _ transform: (PostgresRow) throws(StoreError) -> T) throws(StoreError) -> T? {
        try rows(sql, parameters, transform).first
    }

    /// Runs `body` inside a SAVEPOINT: on error only its own changes are undone and the surrounding
    /// transaction goes on (PostgreSQL otherwise aborts the whole transaction at the first failed
    /// statement). See https://www.postgresql.org/docs/current/sql-savepoint.html
    func savepoint<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        try store("SAVEPOINT one_event")
        do throws(StoreError) {
            let result = try body()
            try store("RELEASE SAVEPOINT one_event")
            return result
        } catch {
            try store("ROLLBACK TO SAVEPOINT one_event")
            try store("RELEASE SAVEPOINT one_event")
            throw error
        }
    }

    /// Rethrows `error` when it sinks the whole transaction (connection, deadlock, read-only); other
    /// errors are one step's refusal — the server's refusal of a step's rows (`serverRefused`) too, which
    /// aborts the transaction unless the step ran in a savepoint: without one the caller must not go on.
    func throwIfTransactionLost(_ error: StoreError) throws(StoreError) {
        switch error {
        case .io, .server, .unreachable, .commitUnconfirmed, .busy, .readOnly, .damaged, .replaced, .syncFailed: throw error
        default: if !isConnected { throw error }
        }
    }
}

extension PostgresRow {
    /// The column as an integer; a conversion failure is `corrupt`.
    func integer(_ column: Int) throws(StoreError) -> Int64 {
        do throws(PostgresError) { return try int64(column) } catch { throw StoreError(error) }
    }

    /// The column as an optional integer.
    func optionalInteger(_ column: Int) throws(StoreError) -> Int64? {
        do throws(PostgresError) { return try optionalInt64(column) } catch { throw StoreError(error) }
    }

    /// The column as text.
    func string(_ column: Int) throws(StoreError) -> String {
        do throws(PostgresError) { return try text(column) } catch { throw StoreError(error) }
    }

    /// The column as optional text.
    func optionalString(_ column: Int) throws(StoreError) -> String? {
        do throws(PostgresError) { return try optionalText(column) } catch { throw StoreError(error) }
    }

    /// The column as a boolean.
    func flag(_ column: Int) throws(StoreError) -> Bool {
        do throws(PostgresError) { return try bool(column) } catch { throw StoreError(error) }
    }

    /// The column as a typed value.
    func typedValue(_ column: Int) throws(StoreError) -> PostgresValue {
        do throws(PostgresError) { return try value(column) } catch { throw StoreError(error) }
    }
}

/// `texts` as one `text[]` parameter (`$n::text[]` in the statement), sent in binary.
///
/// Why binary: a text literal (`{"a","b"}`) had to be quoted and escaped here and parsed by the
/// server's `array_in` at every execution — the group commit's row locks send one each time. In
/// binary the elements travel as their bytes, nothing is quoted or parsed, and the server checks
/// their encoding as it checks any text parameter.
func postgresTextArray(_ texts: [String]) -> PostgresValue {
    .array(PostgresArray(elementType: PostgresType.text, elements: texts.map(PostgresValue.text)))
}
