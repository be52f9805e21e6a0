import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// Migrations that drop a large object (a column of every job, an index, a table) succeed on a large
/// database: such a DROP inside a transaction spills its statement journal to a temporary file, which
/// failed with SQLITE_FULL while this process set a spill size SQLite 3.40 cannot write (4 MiB; see
/// `SQLiteConnection.statementJournalSpillBytes`).
@Suite("Migrating a large database", .onTestThreads)
struct LargeMigrationTests {
    /// A database at schema 7 (before 008 dropped the projection's spec and result) holding `jobs`
    /// queued jobs with a spec of a few hundred bytes each, written directly, each with its `submitted`
    /// event: migrations 16 and 17 rebuild the projection from the log, at the end of the one
    /// transaction that then applies every pending migration.
    private func schema7Database(_ path: String, jobs: Int) throws {
        let connection = try SQLiteConnection(path: path, readOnly: false, create: true)
        try connection.execute("PRAGMA journal_mode = WAL")
        try connection.execute("""
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL, checksum TEXT NOT NULL)
            """)
        try connection.run("BEGIN IMMEDIATE")
        for migration in Migrator.all where migration.version <= 7 {
            try connection.execute(migration.sql)
            try connection.run("INSERT INTO schema_migrations (version, name, applied_at_ms, checksum) VALUES (?, ?, ?, ?)",
                               [.int(migration.version), .text(migration.name), .integer(1), .text(migration.checksum)])
        }
        try connection.run("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
            INSERT INTO jobs (id, seq, kind, state, queue, priority, run_after_ms, attempts, max_attempts, bytes_done,
                              spec, result, pause_requested, cancel_requested, version, created_at_ms, updated_at_ms)
            SELECT printf('job-%08d', i), i, 'download-memory', 'queued', 'default', 0, 0, 0, 5, 0,
                   '{"kind":"download-memory","source":"file:///objects/' || printf('%0200d', i) || '"}', NULL,
                   0, 0, 1, i, i
            FROM n
            """, [.int(jobs)])
        let submitted = try StoreJSON.encode(EventData(spec: JobSpec(kind: .downloadMemory, source: "file:///objects/NUMBER")))
        try connection.run("""
            INSERT INTO events (seq, job_id, version, type, at_ms, actor, data)
            SELECT seq, id, 1, 'submitted', created_at_ms, 'cli:test',
                   replace(?, 'NUMBER', substr(spec, length('{"kind":"download-memory","source":"file:///objects/') + 1, 200))
            FROM jobs
            """, [.text(submitted)])
        try connection.run("COMMIT")
    }

    @Test("schema 7 with 200,000 jobs migrates: dropping the spec and result columns does not fail as 'disk full'")
    func largeSchema7Migrates() throws {
        let directory = try TemporaryDirectory("large-migration")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        try schema7Database(path, jobs: 200_000)
        let store = try EventStore(path: path)
        #expect(store.appliedMigrations.contains(8), "\(store.appliedMigrations)")
        // …and every later one, migration 9's rebuild of `jobs` included.
        #expect(store.appliedMigrations.last == Migrator.latestVersion, "\(store.appliedMigrations)")
        let (count, columns) = try store.withConnection { (connection) throws(StoreError) -> (Int, [String]) in
            (try connection.first("SELECT count(*) FROM jobs") { row in row.int(0) } ?? 0,
             try connection.query("SELECT name FROM pragma_table_info('jobs') ORDER BY cid") { row in row.text(0) })
        }
        #expect(count == 200_000)
        #expect(!columns.contains("spec") && !columns.contains("result"), "\(columns)")
        // The connection spills its statement journals to a file, as every other one does.
        let tempStore = try store.withConnection { (connection) throws(StoreError) -> Int in
            try connection.first("PRAGMA temp_store") { row in row.int(0) } ?? -1
        }
        #expect(tempStore == 0)
    }
}
