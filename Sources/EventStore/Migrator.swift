import Checksums
import Foundation
import JobLifecycle
import StorePort

/// Applies the migrations embedded from `migrations/sqlite/NNN_name.sql`, recording each in `schema_migrations`.
///
/// A database whose ledger names a version this binary does not know is refused before anything is written.
enum Migrator {
    struct Migration {
        let version: Int
        let name: String
        let sql: String

        /// SHA-256 (hex) of the SQL text, recorded in the ledger: computed when a migration is applied,
        /// not for every open (the first digest initialises OpenSSL, ~1 ms of every command's start).
        var checksum: String { Digest.sha256Hex(Data(sql.utf8)) }
    }

    /// Every migration this binary carries, in version order.
    static let all: [Migration] = EmbeddedMigrations.sqlite
        .map { entry in
            // The plugin wrote this base64 itself from UTF-8 text; it cannot fail to decode.
            let bytes = Data(base64Encoded: entry.sqlBase64) ?? Data()
            return Migration(version: entry.version, name: entry.name, sql: String(decoding: bytes, as: UTF8.self))
        }
        .sorted { $0.version < $1.version }

    /// The newest schema version this binary knows.
    static var latestVersion: Int { all.last?.version ?? 0 }

    /// Migrations that change the meaning of the fold (`JobRecord.apply`) rather than, or as well as,
    /// the tables: after their SQL, in the same transaction, the projection is rebuilt from the log and
    /// requests left pending on jobs that no longer run are settled (`EventStore.rebuildProjection`).
    /// The log is the only truth; this keeps the cache equal to what the current fold makes of it.
    static let rebuildsProjection: Set<Int> = [2, 16, 17, 18]

    private static let createLedgerSQL = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version       INTEGER PRIMARY KEY,
            name          TEXT    NOT NULL,
            applied_at_ms INTEGER NOT NULL,
            checksum      TEXT    NOT NULL
        )
        """

    /// The columns of jobctl's ledger (`createLedgerSQL`).
    static let ledgerColumns: Set<String> = ["version", "name", "applied_at_ms", "checksum"]

    /// The columns of the file's `schema_migrations` table when it is not jobctl's ledger — another
    /// program's of the same name: golang-migrate's (`version`, `dirty`), dbmate's or Rails' (one text
    /// `version`) —, nil when it is jobctl's or there is none. Read before the ledger's versions, which
    /// such a table holds too, in numbers of its own. Reads only.
    ///
    /// See https://www.sqlite.org/pragma.html#pragma_table_info
    static func foreignLedgerColumns(_ connection: SQLiteConnection) throws(StoreError) -> [String]? {
        let columns = try connection.query("SELECT name FROM pragma_table_info('schema_migrations')") { row in row.text(0) }
        guard !columns.isEmpty, !ledgerColumns.isSubset(of: Set(columns.map { $0.lowercased() })) else { return nil }
        return columns
    }

    /// The versions recorded in the ledger; empty when there is no ledger yet. Reads only.
    static func appliedVersions(_ connection: SQLiteConnection) throws(StoreError) -> Set<Int> {
        let hasLedger = try connection.first(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'") { row in
            row.int(0) > 0
        } ?? false
        guard hasLedger else { return [] }
        return Set(try connection.query("SELECT version FROM schema_migrations") { row in row.int(0) })
    }

    /// Throws `newerSchema` when the ledger holds a version above `latestVersion`.
    static func refuseNewer(_ applied: Set<Int>) throws(StoreError) {
        if let found = applied.max(), found > latestVersion {
            throw StoreError.newerSchema(found: found, known: latestVersion)
        }
    }

    /// Throws `damagedLedger` when the ledger lacks a version this binary carries below the highest it
    /// records: migrations are applied in order, so that one was applied and its row lost. Applied again,
    /// an old migration that rebuilds a table dropped the columns later ones added (a deleted row 9 made
    /// the next `pause` drop five of `jobs`' columns, and every later command fail). Every open checks,
    /// read-only ones too.
    static func refuseGaps(_ applied: Set<Int>) throws(StoreError) {
        guard let highest = applied.max() else { return }
        let missing = all.map(\.version).filter { $0 < highest && !applied.contains($0) }
        if !missing.isEmpty { throw StoreError.damagedLedger(missing: missing, highest: highest) }
    }

    /// Applies pending migrations, each in its own IMMEDIATE transaction; returns the versions applied.
    ///
    /// When a pending migration rebuilds the projection (`rebuildsProjection`), every pending migration
    /// is applied in one transaction and the projection is rebuilt once, at its end: the fold writes the
    /// newest schema's columns, which later migrations add, and a crash half-way must not leave a ledger
    /// past the rebuild without it.
    ///
    /// Safe against another process migrating the same file at once: the ledger is re-read inside
    /// each write transaction.
    static func migrate(_ connection: SQLiteConnection, now: Int64) throws(StoreError) -> [Int] {
        let before = try appliedVersions(connection)
        try refuseNewer(before)
        try refuseGaps(before)
        let pending = all.filter { !before.contains($0.version) }
        guard !pending.isEmpty else { return [] }
        let rebuilding = pending.contains { rebuildsProjection.contains($0.version) }
        // A DROP INDEX, DROP TABLE or DROP COLUMN of a large object inside the transaction spills its
        // statement journal to a temporary file; that failed as "database or disk is full" while the
        // spill size was 4 MiB (see `SQLiteConnection.statementJournalSpillBytes`).
        let groups = rebuilding ? [all] : all.map { [$0] }
        var applied: [Int] = []
        for group in groups {
            var current: Migration?
            do throws(StoreError) {
                try connection.run("BEGIN IMMEDIATE")
            } catch {
                // Behind, and SQLite's write lock held for the whole busy timeout: another process is migrating.
                if case .busy(let sql, nil) = error { throw StoreError.busy(sql: sql, holder: .migration(from: before.max() ?? 0, to: latestVersion)) }
                throw error
            }
            do throws(StoreError) {
                try connection.execute(createLedgerSQL)
                let ledger = try appliedVersions(connection)
                try refuseNewer(ledger)
                try refuseGaps(ledger)
                var rebuild: Int?
                for migration in group where !ledger.contains(migration.version) {
                    current = migration
                    try connection.execute(migration.sql)
                    // Named after the first: the settling it may do is the first fold change's (migration 2's).
                    if rebuildsProjection.contains(migration.version) { rebuild = rebuild ?? migration.version }
                    try connection.run(
                        "INSERT INTO schema_migrations (version, name, applied_at_ms, checksum) VALUES (?, ?, ?, ?)",
                        [.int(migration.version), .text(migration.name), .integer(now), .text(migration.checksum)])
                    applied.append(migration.version)
                }
                if let rebuild {
                    try EventStore.rebuildProjection(connection, now: now, actor: "jobctl:migration-\(rebuild)")
                }
                try connection.run("COMMIT")
            } catch {
                if connection.isInTransaction { try? connection.run("ROLLBACK") }
                if case .sqlite(let code, let message, _) = error, let migration = current {
                    throw StoreError.sqlite(code: code, message: "migration \(migration.version)_\(migration.name) failed: \(message)",
                                            sql: nil)
                }
                throw error
            }
        }
        return applied
    }
}
