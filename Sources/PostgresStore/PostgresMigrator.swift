import Checksums
import Foundation

/// Applies the migrations embedded from `migrations/postgres/NNN_name.sql`, each in its own
/// transaction, recording each in `schema_migrations` with the SHA-256 of its SQL text.
///
/// The same rules as the SQLite migrator: a database whose ledger names a version this binary does not
/// know is refused before anything is written, and left unchanged.
enum PostgresMigrator {
    /// One embedded migration.
    struct Migration: Sendable {
        let version: Int
        let name: String
        let sql: String

        /// SHA-256 (hex) of the SQL text, recorded in the ledger: computed when a migration is applied,
        /// not for every open (the first digest initialises OpenSSL, ~1 ms of every command's start).
        var checksum: String { Digest.sha256Hex(Data(sql.utf8)) }
    }

    /// Every migration this binary carries, in version order.
    static let all: [Migration] = EmbeddedMigrations.postgres
        .map { entry in
            // The plugin wrote this base64 itself from UTF-8 text; it cannot fail to decode.
            let bytes = Data(base64Encoded: entry.sqlBase64) ?? Data()
            return Migration(version: entry.version, name: entry.name, sql: String(decoding: bytes, as: UTF8.self))
        }
        .sorted { $0.version < $1.version }

    /// The newest schema version this binary knows.
    static var latestVersion: Int { all.last?.version ?? 0 }

    /// Migrations that change the meaning of the fold (`JobRecord.apply`) rather than, or as well as,
    /// the tables: the projection is rebuilt from the log by the current fold in the transaction of the
    /// last such migration a run applies (`PostgresStore.replay(_:rewrite:)`), once however many are
    /// pending: each rebuild reads the whole log, and the last one makes what any earlier one would.
    /// The log is the only truth; this keeps the cache equal to what the current fold makes of it.
    static let rebuildsProjection: Set<Int> = [18, 19, 20]

    /// Held by a migrating connection from before its first migration's transaction begins until after
    /// its last one ends, so two processes migrating one database at once take turns instead of racing
    /// to create the same tables. The value is "jobctl" in ASCII; any constant works as long as it never
    /// changes.
    ///
    /// A session lock, not a transaction lock: a transaction that began before it waited for the lock
    /// would look tables up through catalog caches from before the other migrator's commit, miss the
    /// ledger that migrator just created, and run the migration a second time.
    ///
    /// See https://www.postgresql.org/docs/current/functions-admin.html#FUNCTIONS-ADVISORY-LOCKS
    static let advisoryLockKey: Int64 = 0x6A6F_6263_746C

    private static let createLedgerSQL = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version       integer PRIMARY KEY,
            name          text    NOT NULL,
            applied_at_ms bigint  NOT NULL,
            checksum      text    NOT NULL
        )
        """

    /// Where a session found jobctl's log (`keepToLogSchema`).
    struct LogSchema: Sendable, Equatable {
        /// The schema the session keeps to.
        let name: String
        /// Whether it holds a ledger (`schema_migrations`).
        let holdsLedger: Bool
        /// Whether it holds a `jobs` table.
        let holdsJobs: Bool
        /// The schema of the `jobs` table the URL's search path finds first, when there is one.
        let jobsFoundIn: String?
    }

    /// The schema of the ledger (`schema_migrations`) as the URL's search path finds it, else that of
    /// `jobs`, else the schema new tables would go to (`current_schema()`); no row when the search path
    /// names no schema that exists; with a row, the session's search_path is set to that schema alone
    /// (`PostgresConnection.keepToSchema`, in the same round trip). Every call is to pg_catalog's own functions.
    static let findLogSchemaSQL = """
        SELECT n.nspname::text, ledger.oid IS NOT NULL,
               EXISTS (SELECT 1 FROM pg_catalog.pg_class t WHERE t.relnamespace = n.oid AND t.relname = 'jobs'::name AND t.relkind IN ('r', 'p')),
               (SELECT s.nspname::text FROM pg_catalog.pg_class j JOIN pg_catalog.pg_namespace s ON s.oid = j.relnamespace
                WHERE j.oid = pg_catalog.to_regclass('jobs'::text)),
               pg_catalog.set_config('search_path'::text, pg_catalog.quote_ident(n.nspname::text), false)
        FROM (SELECT pg_catalog.to_regclass('schema_migrations'::text) AS oid) AS ledger
        JOIN pg_catalog.pg_namespace n ON n.oid = coalesce(
            (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid = ledger.oid),
            (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass('jobs'::text)),
            (SELECT s.oid FROM pg_catalog.pg_namespace s WHERE s.nspname = pg_catalog.current_schema()))
        """

    /// Finds the schema of jobctl's log on the URL's search path and makes it the session's only one
    /// (`PostgresConnection.keepToSchema`), so that the ledger jobctl reads, the tables a migration
    /// creates or changes, the grants, the size `stats` reports and every later statement are of that
    /// one schema. Returns nil, changing nothing, when the search path names no schema that exists.
    ///
    /// Why: the search path finds tables in the first schema that holds them, but new tables go to the
    /// first schema that exists — with PostgreSQL's default path ("$user", public) a schema named after
    /// the role, created after the log was made in `public`, got a second ledger at the next migration,
    /// and the open after that a second, empty log that workers never looked at.
    @discardableResult
    static func keepToLogSchema(_ connection: PostgresConnection) throws(PostgresError) -> LogSchema? {
        let found = try connection.first(findLogSchemaSQL) { (row) throws(PostgresError) in
            LogSchema(name: try row.text(0), holdsLedger: try row.bool(1), holdsJobs: try row.bool(2), jobsFoundIn: try row.optionalText(3))
        }
        if let found { connection.keptToSchema(found.name) }
        return found
    }

    /// The versions recorded in the ledger; empty when there is no ledger yet. Reads only.
    static func appliedVersions(_ connection: PostgresConnection) throws(PostgresError) -> Set<Int> {
        let hasLedger = try connection.first("SELECT pg_catalog.to_regclass('schema_migrations'::text) IS NOT NULL") { (row) throws(PostgresError) in
            try row.bool(0)
        } ?? false
        guard hasLedger else { return [] }
        return Set(try connection.query("SELECT version FROM schema_migrations") { (row) throws(PostgresError) in
            try row.int(0)
        })
    }

    /// Throws `newerSchema` when the ledger holds a version above `known`.
    static func refuseNewer(_ applied: Set<Int>, known: Int = latestVersion) throws(PostgresError) {
        if let found = applied.max(), found > known {
            throw PostgresError.newerSchema(found: found, known: known)
        }
    }

    /// Throws `damagedLedger` when the ledger lacks a version of `migrations` below the highest it
    /// records: migrations are applied in order, so that one was applied and its row lost, and applied
    /// again an old migration undoes later ones (as on SQLite: see `Migrator.refuseGaps`). Every open
    /// checks, read-only ones too. A version this binary does not carry (PostgreSQL has no 9) is no gap.
    static func refuseGaps(_ applied: Set<Int>, migrations: [Migration] = all) throws(PostgresError) {
        guard let highest = applied.max() else { return }
        let missing = migrations.map(\.version).filter { $0 < highest && !applied.contains($0) }
        if !missing.isEmpty { throw PostgresError.damagedLedger(missing: missing, highest: highest) }
    }

    /// Applies pending migrations, each in its own transaction; returns the versions applied.
    ///
    /// A migration that fails is rolled back whole (PostgreSQL's DDL is transactional) and stops the
    /// run: the ones before it stay applied, nothing of it or after it is. Safe against another process
    /// migrating the same database at once: the migrations run under the advisory lock
    /// (`advisoryLockKey`), and each transaction re-reads the ledger.
    ///
    /// `migrations` is every migration this binary carries; tests pass their own series.
    static func migrate(_ connection: PostgresConnection, now: Int64,
                        migrations: [Migration] = all) throws(PostgresError) -> [Int] {
        let known = migrations.last?.version ?? 0
        // The ledger read and the tables created are of the same schema (a store's open has done this already).
        if connection.logSchema == nil { try keepToLogSchema(connection) }
        let before = try appliedVersions(connection)
        try refuseNewer(before, known: known)
        try refuseGaps(before, migrations: migrations)
        guard migrations.contains(where: { !before.contains($0.version) }) else { return [] }
        try connection.execute("SELECT pg_catalog.pg_advisory_lock($1::bigint)", [.integer(advisoryLockKey)])
        // Released at once, or by the server when the connection ends.
        defer { _ = try? connection.execute("SELECT pg_catalog.pg_advisory_unlock($1::bigint)", [.integer(advisoryLockKey)]) }
        var applied: [Int] = []
        // A crash after an earlier one commits leaves this one pending, and the next run rebuilds then.
        let lastRebuild = migrations.last { !before.contains($0.version) && rebuildsProjection.contains($0.version) }?.version
        for migration in migrations {
            do throws(PostgresError) {
                let didApply = try connection.transaction { () throws(PostgresError) -> Bool in
                    let current = try appliedVersions(connection)
                    try refuseNewer(current, known: known)
                    try refuseGaps(current, migrations: migrations)
                    guard !current.contains(migration.version) else { return false }
                    try connection.executeScript(createLedgerSQL)
                    try connection.executeScript(migration.sql)
                    if migration.version == lastRebuild { try rebuildProjection(connection) }
                    try connection.run(
                        "INSERT INTO schema_migrations (version, name, applied_at_ms, checksum) VALUES ($1, $2, $3, $4)",
                        [.int(migration.version), .text(migration.name), .integer(now), .text(migration.checksum)])
                    return true
                }
                if didApply { applied.append(migration.version) }
            } catch {
                switch error {
                case .server, .rolledBack, .unexpectedResult, .conversion, .misuse:
                    throw PostgresError.migrationFailed(version: migration.version, name: migration.name, cause: error)
                default:
                    throw error
                }
            }
        }
        return applied
    }

    /// Rewrites the `jobs` projection from the log with the current fold, inside the migration's
    /// transaction (`rebuildsProjection`); the table is locked as `jobctl replay` locks it.
    static func rebuildProjection(_ connection: PostgresConnection) throws(PostgresError) {
        do throws(StoreError) {
            try connection.store("LOCK TABLE jobs IN EXCLUSIVE MODE")
            _ = try PostgresStore.replay(connection, rewrite: true)
        } catch {
            throw PostgresError.misuse("the projection could not be rebuilt from the log: \(error)")
        }
    }
}
