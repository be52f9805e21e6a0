import Checksums
import Foundation
import Testing
import TestSupport
@testable import PostgresStore

@Suite("PostgreSQL migrations", .onTestThreads)
struct PostgresMigratorTests {
    @Test("a fresh database gets every migration, recorded in the ledger with the SHA-256 of its file")
    func freshDatabase() throws {
        let fixture = try PostgresFixture("migrate", wholeDatabase: true)
        let connection = try fixture.connect()
        let applied = try PostgresMigrator.migrate(connection, now: 1_234)
        #expect(applied == PostgresMigrator.all.map(\.version))
        #expect(applied.first == 1)

        let ledger = try connection.query("SELECT version, name, applied_at_ms, checksum FROM schema_migrations ORDER BY version") {
            (row) throws(PostgresError) in "\(try row.int(0)) \(try row.text(1)) \(try row.int64(2)) \(try row.text(3))"
        }
        // The checksum is of the file as it is in the repository, not of anything derived from it.
        let file = "\(PackagePaths.root)/migrations/postgres/001_initial.sql"
        let onDisk = try #require(FileManager.default.contents(atPath: file))
        #expect(ledger.first == "1 initial 1234 \(Digest.sha256Hex(onDisk))")
        #expect(ledger.count == PostgresMigrator.all.count)

        let tables = try connection.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1") {
            (row) throws(PostgresError) in try row.text(0)
        }
        #expect(tables == ["archive_authorisations", "blobs", "events", "expired_blobs", "job_dependencies", "jobs", "leases",
                           "schema_migrations", "sweep_watermarks"])
        let sequences = try connection.query("SELECT sequencename FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1") {
            (row) throws(PostgresError) in try row.text(0)
        }
        #expect(sequences.contains("lease_tokens"))
    }

    @Test("running it again applies nothing and changes nothing")
    func idempotent() throws {
        let fixture = try PostgresFixture("idempotent", wholeDatabase: true)
        let connection = try fixture.migrated()
        let ledgerBefore = try ledger(connection)
        #expect(try PostgresMigrator.migrate(connection, now: 9_999).isEmpty)
        #expect(try PostgresMigrator.migrate(try fixture.connect(), now: 9_999).isEmpty)
        #expect(try ledger(connection) == ledgerBefore)
    }

    @Test("a database from a newer jobctl is refused and left unchanged")
    func newerRefused() throws {
        let fixture = try PostgresFixture("newer", wholeDatabase: true)
        let connection = try fixture.migrated()
        try connection.run("INSERT INTO schema_migrations (version, name, applied_at_ms, checksum) VALUES (999, 'future', 0, 'x')")
        let before = try schemaSnapshot(fixture)

        let error = postgresError { _ = try PostgresMigrator.migrate(connection, now: 5) }
        #expect(error == .newerSchema(found: 999, known: PostgresMigrator.latestVersion))
        #expect(error?.description.contains("upgrade jobctl") == true)
        #expect(try schemaSnapshot(fixture) == before)
    }

    @Test("a database whose ledger is all there is from a newer jobctl gets no tables")
    func newerLedgerOnly() throws {
        let fixture = try PostgresFixture("newerempty", wholeDatabase: true)
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at_ms bigint NOT NULL, checksum text NOT NULL)")
        try connection.run("INSERT INTO schema_migrations VALUES (999, 'future', 0, 'x')")
        let before = try schemaSnapshot(fixture)
        #expect(postgresError { _ = try PostgresMigrator.migrate(connection, now: 5) }
                == .newerSchema(found: 999, known: PostgresMigrator.latestVersion))
        #expect(try schemaSnapshot(fixture) == before)
        #expect(try connection.first("SELECT to_regclass('events') IS NULL") { (row) throws(PostgresError) in try row.bool(0) } == true)
    }

    @Test("a failing migration is rolled back whole and stops the run; the ones before it stay")
    func failingMigration() throws {
        let fixture = try PostgresFixture("failing", wholeDatabase: true)
        let connection = try fixture.connect()
        let series = [
            PostgresMigrator.Migration(version: 1, name: "first", sql: "CREATE TABLE first (v int)"),
            PostgresMigrator.Migration(version: 2, name: "broken",
                                       sql: "CREATE TABLE second (v int); INSERT INTO second VALUES (1); SELECT 1 / 0"),
            PostgresMigrator.Migration(version: 3, name: "third", sql: "CREATE TABLE third (v int)"),
        ]
        let error = try #require(postgresError { _ = try PostgresMigrator.migrate(connection, now: 1, migrations: series) })
        guard case .migrationFailed(let version, let name, _) = error else {
            Issue.record("expected migrationFailed, got \(error)")
            return
        }
        #expect(version == 2 && name == "broken")
        #expect(error.sqlstate == "22012")
        #expect(error.description.contains("migration 2_broken failed and was rolled back"))
        #expect(try ledger(connection) == ["1 first 1 \(series[0].checksum)"])
        let tables = try connection.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1") {
            (row) throws(PostgresError) in try row.text(0)
        }
        #expect(tables == ["first", "schema_migrations"])
        #expect(!connection.isInTransaction)
        // The advisory lock was let go (this database is the test's own: nobody else takes it here).
        let other = try fixture.connect()
        let key = PostgresValue.integer(PostgresMigrator.advisoryLockKey)
        // (#require: were it still held, the migration below would wait for it forever.)
        try #require(try other.first("SELECT pg_try_advisory_lock($1)", [key]) { (row) throws(PostgresError) in try row.bool(0) } == true)
        try other.execute("SELECT pg_advisory_unlock($1)", [key])
        // Fixed, the run goes on where it stopped.
        let fixed = series.map { $0.version == 2 ? PostgresMigrator.Migration(version: 2, name: "fixed", sql: "CREATE TABLE second (v int)") : $0 }
        #expect(try PostgresMigrator.migrate(other, now: 2, migrations: fixed) == [2, 3])
    }

    @Test("two processes migrating one database at once apply each migration once")
    func concurrentMigrators() throws {
        let fixture = try PostgresFixture("concurrent", wholeDatabase: true)
        let url = fixture.url
        let results = ResultsBox()
        DispatchQueue.concurrentPerform(iterations: 3) { _ in
            results.append(Result { () throws(PostgresError) -> [Int] in
                try PostgresMigrator.migrate(try PostgresConnection(url), now: 7)
            })
        }
        let applied = try results.all.map { try $0.get() }
        #expect(applied.count == 3)
        #expect(applied.flatMap { $0 }.sorted() == PostgresMigrator.all.map(\.version))
        #expect(try ledger(try fixture.connect()).count == PostgresMigrator.all.count)
    }

    private func ledger(_ connection: PostgresConnection) throws -> [String] {
        try connection.query("SELECT version, name, applied_at_ms, checksum FROM schema_migrations ORDER BY version") {
            (row) throws(PostgresError) in "\(try row.int(0)) \(try row.text(1)) \(try row.int64(2)) \(try row.text(3))"
        }
    }

    /// Every relation, column, trigger and ledger row of the database, as psql prints them.
    private func schemaSnapshot(_ fixture: PostgresFixture) throws -> String {
        let database = String(fixture.url.split(separator: "/").last?.split(separator: "?").first ?? "")
        return try fixture.server.psql(database: database, """
            SELECT string_agg(line, E'\\n' ORDER BY line) FROM (
                SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type AS line
                    FROM information_schema.columns WHERE table_schema = 'public'
                UNION ALL SELECT 'relation ' || relname || ' ' || relkind::text FROM pg_class
                    WHERE relnamespace = 'public'::regnamespace
                UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE NOT tgisinternal
                UNION ALL SELECT 'ledger ' || version || ' ' || name || ' ' || checksum FROM schema_migrations
            ) AS everything
            """)
    }
}

/// Results gathered from several threads.
private final class ResultsBox: @unchecked Sendable {
    // @unchecked: `items` is only touched under `lock`.
    private let lock = NSLock()
    private var items: [Result<[Int], PostgresError>] = []
    func append(_ item: Result<[Int], PostgresError>) { lock.withLock { items.append(item) } }
    var all: [Result<[Int], PostgresError>] { lock.withLock { items } }
}
