import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

@Suite("Opening and migrating")
struct MigrationTests {
    @Test("a fresh file is migrated, private, and in WAL mode")
    func freshFile() throws {
        let directory = try TemporaryDirectory("store-migrate")
        defer { directory.remove() }
        let path = directory.file("jobs.db")

        let applied = try EventStore.migrate(path: path)
        #expect(applied == EmbeddedMigrations.all.map(\.version).sorted())
        #expect(applied.first == 1)

        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        let mode = try #require(attributes[.posixPermissions] as? NSNumber).intValue
        #expect(mode & 0o777 == 0o600)

        let store = try EventStore(path: path)
        #expect(store.appliedMigrations.isEmpty)
        let ledger = try store.withConnection { (connection) throws(StoreError) in
            try connection.query("SELECT version, name, checksum FROM schema_migrations ORDER BY version") { row in
                (row.int(0), row.text(1), row.text(2))
            }
        }
        #expect(ledger.map(\.0) == applied)
        #expect(ledger.first?.1 == "initial")
        #expect(ledger.allSatisfy { $0.2.count == 64 })
        let journal = try store.withConnection { (connection) throws(StoreError) in
            try connection.first("PRAGMA journal_mode") { row in row.text(0) }
        }
        #expect(journal == "wal")
        let pragmas = try store.withConnection { (connection) throws(StoreError) in
            try connection.first("SELECT * FROM pragma_synchronous, pragma_foreign_keys") { row in [row.int(0), row.int(1)] }
        }
        #expect(pragmas == [2, 1])  // synchronous=FULL, foreign_keys=ON
        // The WAL file SQLite created next to it is private too.
        let walMode = try #require(try FileManager.default.attributesOfItem(atPath: path + "-wal")[.posixPermissions] as? NSNumber)
        #expect(walMode.intValue & 0o777 == 0o600)
    }

    @Test("re-opening an existing store applies nothing and keeps its jobs")
    func reopen() throws {
        let fixture = try StoreFixture("store-reopen")
        defer { fixture.remove() }
        let id = try fixture.submit()
        #expect(try EventStore.migrate(path: fixture.path).isEmpty)
        let again = try EventStore(path: fixture.path)
        #expect(try again.job(id)?.state == .queued)
        let rows = try again.withConnection { (connection) throws(StoreError) in
            try connection.first("SELECT count(*) FROM schema_migrations") { row in row.int(0) }
        }
        #expect(rows == Migrator.all.count)
    }

    @Test("a database from a newer jobctl is refused and left byte for byte unchanged")
    func newerSchemaRefused() throws {
        let directory = try TemporaryDirectory("store-newer")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        do {
            let store = try EventStore(path: path)
            try store.withConnection { (connection) throws(StoreError) in
                try connection.run(
                    "INSERT INTO schema_migrations (version, name, applied_at_ms, checksum) VALUES (999, 'future', 0, 'x')")
            }
        }
        // The last connection closed, so everything was checkpointed into the main file.
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let expected = StoreError.newerSchema(found: 999, known: EventStore.knownSchemaVersion)

        #expect(throws: expected) { _ = try EventStore(path: path) }
        #expect(throws: expected) { _ = try EventStore.migrate(path: path) }
        #expect(throws: expected) { _ = try EventStore(path: path, readOnly: true) }
        let after = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(before == after)
        #expect("\(expected)".contains("upgrade jobctl"))
    }

    @Test("read-only opens work while a writer holds a transaction, and refuse writes")
    func readOnlyWhileWriting() throws {
        let fixture = try StoreFixture("store-readonly")
        defer { fixture.remove() }
        let id = try fixture.submit()
        try fixture.sql("BEGIN IMMEDIATE")
        try fixture.sql("INSERT INTO leases (job_id, owner, token, expires_at_ms) VALUES ('x', 'y', 1, 1)")
        let reader = try EventStore(path: fixture.path, readOnly: true)
        #expect(try reader.job(id)?.state == .queued)
        #expect(try reader.counts() == [.queued: 1])
        try fixture.sql("ROLLBACK")
        #expect(throws: StoreError.self) { _ = try reader.submit([uploadSpec()], actor: "cli:test", now: 1) }
    }

    @Test("a read-only open of a missing file fails clearly and creates nothing")
    func readOnlyMissing() throws {
        let directory = try TemporaryDirectory("store-missing")
        defer { directory.remove() }
        let path = directory.file("none.db")
        #expect(throws: StoreError.self) { _ = try EventStore(path: path, readOnly: true) }
        #expect(!FileManager.default.fileExists(atPath: path))
    }
}
