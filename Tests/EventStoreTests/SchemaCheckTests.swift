import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// A log's schema compared with what its migrations make: `replay --verify` said "projection matches"
/// and `migrate` "schema is up to date" with an index, a table or a column dropped by hand, and a
/// trigger added on `events` went unseen.
@Suite("schema check", .onTestThreads) struct SchemaCheckTests {
    /// A new log, and one made at schema 7 and migrated the rest of the way by a later open (as a log
    /// upgraded release by release is), are as their migrations make them: nothing is reported.
    @Test func newAndUpgradedLogsHaveNoProblems() throws {
        let directory = try TemporaryDirectory("schema-check-clean")
        defer { directory.remove() }
        let fresh = try EventStore(path: directory.file("new.db"))
        #expect(try fresh.schemaProblems() == [])
        let old = directory.file("old.db")
        let connection = try SQLiteConnection(path: old, readOnly: false, create: true)
        try connection.execute("PRAGMA journal_mode = WAL")
        try connection.execute("""
            CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL, checksum TEXT NOT NULL)
            """)
        for migration in Migrator.all where migration.version <= 7 {
            try connection.execute(migration.sql)
            try connection.run("INSERT INTO schema_migrations (version, name, applied_at_ms, checksum) VALUES (?, ?, 1, ?)",
                               [.int(migration.version), .text(migration.name), .text(migration.checksum)])
        }
        let upgraded = try EventStore(path: old)
        #expect(upgraded.appliedMigrations.first == 8)
        #expect(try upgraded.schemaProblems() == [])
        #expect(try upgraded.replay(verify: true).isConsistent)
    }

    @Test(arguments: [
        ("DROP INDEX jobs_created", "lacks the index 'jobs_created'"),
        ("DROP TABLE job_dependencies", "lacks the table 'job_dependencies'"),
        ("ALTER TABLE jobs RENAME COLUMN updated_at_ms TO changed_at_ms", "table 'jobs' lacks the column 'updated_at_ms'"),
        ("CREATE TRIGGER quietly AFTER INSERT ON events BEGIN DELETE FROM jobs WHERE id = NEW.job_id; END",
         "a trigger jobctl does not make, 'quietly'"),
        ("DROP TRIGGER events_refuse_delete; CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events BEGIN SELECT 1; END",
         "trigger 'events_refuse_delete' is not the one its migrations made"),
    ])
    func damageIsReported(damage: String, said: String) throws {
        let directory = try TemporaryDirectory("schema-check-damage")
        defer { directory.remove() }
        let path = directory.file("jobctl.db")
        _ = try EventStore(path: path)
        let connection = try SQLiteConnection(path: path, readOnly: false, create: false)
        try connection.execute(damage)
        let store = try EventStore(path: path)
        let problems = try store.schemaProblems()
        #expect(problems.count == 1 && problems.first?.contains(said) == true, "\(problems)")
        let report = try store.replay(verify: true)
        #expect(!report.isConsistent && report.problems.contains { $0.contains(said) }, "\(report.problems)")
    }
}
