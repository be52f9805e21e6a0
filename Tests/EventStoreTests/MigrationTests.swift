import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

@Suite("Opening and migrating", .onTestThreads)
struct MigrationTests {
    @Test("a fresh file is migrated, private, and in WAL mode")
    func freshFile() throws {
        let directory = try TemporaryDirectory("store-migrate")
        defer { directory.remove() }
        let path = directory.file("jobs.db")

        let applied = try EventStore.migrate(path: path)
        #expect(applied == EmbeddedMigrations.sqlite.map(\.version).sorted())
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
        #expect(pragmas == [1, 1])  // synchronous=NORMAL (the store syncs the WAL after COMMIT: WALSync), foreign_keys=ON
        // The WAL file SQLite created next to it is private too.
        let walMode = try #require(try FileManager.default.attributesOfItem(atPath: path + "-wal")[.posixPermissions] as? NSNumber)
        #expect(walMode.intValue & 0o777 == 0o600)
    }

    @Test("the SQLite series keeps the versions, names and checksums existing ledgers recorded")
    func sqliteLedgerStaysValid() {
        // Ledgers written before the per-engine folders hold exactly these rows; a migration whose text
        // changed (a moved file re-encoded, a comment edited) would no longer match what they say was applied.
        let series = Migrator.all.map { "\($0.version) \($0.name) \($0.checksum)" }
        #expect(series == [
            "1 initial 1664c448769cde128c216660e3ebd6231554af44a3b187fa0a0a87163e83c4ba",
            "2 attempts_and_settled_requests 274bd4f9e8475299f22200d400caff0c29152a3bee890727b51e43dc276b7a54",
            "3 batch 2c523ae8ebfa242da232f2a96572b034fb093749b25e4211181ef8eff60f6aa7",
            "4 archive fb7d049128e995194dd93d5997d7bb2bb2d908d934980314e9d4474eb96f73cd",
            "5 dependencies b88399f56b4a4be24815343d0130f357abbc02dcbad0bd58e76a98b68dffe5cd",
            "6 big_log_indexes 2604f8c303824bceb826d7ca795a502c56a49b29ccfcb16febb03be587ae5db2",
            "7 queued_claim_order 6d1e295a083c13e1ff462f61ae5908d1619e42028f3a1b7e1360c476a59f91e7",
            "8 spec_and_result_once c0a4d975c1085017ef676ff784cff47a1ce7cb62ec3cd3ab75c649a1f7f95ca9",
            "9 conditions_without_in_lists 21223ad6c6a75804c02e29113ede56e09b7986c269df3608b0000bdb38f3f4d7",
            "10 lease_in_the_job_row 6cd983efb70ec6d5128fdb1deaa008a1c4b6dcf63dd1c62ce6bdbbd7a6359cc4",
            "11 resume_points_index cef5dda8d67033749b97732288e421aca24b5fa6f918c2bd21ee7e4f41ecf162",
            "12 sweep_watermark 802e74f3ef6a818471984c846c17aa08f2dfd6d158b8ae0a1c61a2e7541a760b",
            "13 sweep_watermark_per_host 3b6e700680ea7bf3b6b3d7d3edc4a569ab3a3a24680b040cdbdab2d92f835ca2",
            "14 finished_seq 825ecc6ff49c0a0f0d48fb8b5b1df72121ae966ee3ae4fb3683eb175d452e76b",
            "15 events_of_newer_types da401e792d936587a59a66b2e4d6675f08846c2d29d4ad86b4779a34869a9c0c",
            "16 retry_keeps_the_schedule 44d51398ed503b8398a2664a20978dbc56340837c0c6eccdae391d62f50b6070",
            "17 resume_keeps_the_retry_time 8160e5e20ab0ff9001c55ea0207438a341c6c305774032563ea956337e0637c6",
            "18 success_clears_the_error ec0e82b6f7de28a542798a07b060fbd7b78ca1d3351d935fac81b0c376611154",
            "19 waiting_jobs_out_of_the_claim db349e632afd6b3ae7c19d3613aed5f39e1513682cf6bd20293291f13939445b",
        ])
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

    /// While one process migrated a large log (71 s for 450,000 jobs), every other writer failed after its
    /// busy timeout with the generic "busy … raise the busy timeout", and `list` said "run `jobctl migrate`".
    /// Both say now that a migration is in progress: another process (here a Python one, the ledger one
    /// version behind) holds SQLite's write lock on a schema behind. Once it has let go, a reader says
    /// "migrate" again.
    @Test("while another process migrates, writers and readers say a migration is in progress")
    func migrationInProgressIsSaid() throws {
        let directory = try TemporaryDirectory("store-migrating")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        do { _ = try EventStore(path: path) }
        let known = EventStore.knownSchemaVersion
        let held = directory.file("held")
        let migrating = Process()
        migrating.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        migrating.arguments = ["-c", """
            import sqlite3, sys, time
            c = sqlite3.connect(sys.argv[1], isolation_level=None)
            c.execute("DELETE FROM schema_migrations WHERE version = ?", (int(sys.argv[3]),))
            c.execute("BEGIN IMMEDIATE")
            open(sys.argv[2], "w").close()
            time.sleep(120)
            """, path, held, String(known)]
        try migrating.run()
        defer {
            signalIfRunning(migrating, SIGKILL)
            migrating.waitForExit()
        }
        let deadline = Date().addingTimeInterval(30)
        while !FileManager.default.fileExists(atPath: held) && migrating.isRunning && Date() < deadline { usleep(10_000) }
        try #require(FileManager.default.fileExists(atPath: held), "the other process never took the lock")

        func saysMigrating(_ error: any Error) -> Bool {
            guard case StoreError.busy = error else { return false }
            return "\(error)".contains("a migration of this database is in progress") && "\(error)".contains("version \(known - 1) of \(known)")
        }
        #expect { _ = try EventStore(path: path, mode: .readWrite, busyTimeoutMs: 300) } throws: { saysMigrating($0) }
        #expect { _ = try EventStore(path: path, mode: .readOnly, busyTimeoutMs: 300) } throws: { saysMigrating($0) }
        signalIfRunning(migrating, SIGKILL)
        migrating.waitForExit()
        #expect(throws: StoreError.olderSchema(found: known - 1, known: known)) {
            _ = try EventStore(path: path, mode: .readOnly, busyTimeoutMs: 300)
        }
    }

    @Test("read-only opens work while a writer holds a transaction, and refuse writes")
    func readOnlyWhileWriting() throws {
        let fixture = try StoreFixture("store-readonly")
        defer { fixture.remove() }
        let id = try fixture.submit()
        try fixture.sql("BEGIN IMMEDIATE")
        try fixture.sql("INSERT INTO expired_blobs (sha256, size, expired_at_ms) VALUES ('x', 1, 1)")
        let reader = try EventStore(path: fixture.path, readOnly: true)
        #expect(try reader.job(id)?.state == .queued)
        #expect(try reader.counts() == [.queued: 1])
        try fixture.sql("ROLLBACK")
        #expect(throws: StoreError.self) { _ = try reader.submit([uploadSpec()], actor: "cli:test", now: 1) }
    }

    @Test("migration 2 rebuilds a schema-1 projection with the new fold and settles requests left pending")
    func migrationTwoRebuildsTheProjection() throws {
        let directory = try TemporaryDirectory("store-migrate-2")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        var ids: [String] = []
        var secondToken: Int64 = 0
        do {
            let store = try EventStore(path: path)
            // Job 0: claimed, paused on request, resumed and claimed again (schema 1 counted 2 attempts).
            // Job 1: paused by its worker while a cancel was pending (schema 1 left it paused).
            // Job 2: rescued with a pause pending (schema 1 left it queued until the next claim).
            ids = try store.submit([uploadSpec(priority: 5), uploadSpec(), uploadSpec()], actor: "cli:test", now: 1_000).map(\.id)
            let first = try #require(try store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 1_000, now: 1_100).first)
            _ = try store.requestPause(id: ids[0], actor: "cli:test", now: 1_200)
            try store.append(PendingEvent(jobID: ids[0], type: .paused, actor: workerName, leaseToken: first.token), now: 1_300)
            _ = try store.requestResume(id: ids[0], actor: "cli:test", now: 1_400)
            let second = try #require(try store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 1_000, now: 1_500).first)
            secondToken = second.token
            // Jobs 1 and 2 as the old rules wrote them, straight into the log.
            try store.withConnection { (connection) throws(StoreError) in
                func raw(_ id: String, _ version: Int, _ type: EventType, lease: Int64? = nil) throws(StoreError) {
                    let data = type == .claimed ? EventData(leaseOwner: "old", leaseExpiresAtMs: 3_000, attempt: 1) : EventData()
                    try connection.run("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                       [.text(id), .int(version), .text(type.rawValue), .integer(Int64(2_000 + version)),
                                        .text("old"), .optional(lease), .text(try StoreJSON.encode(data))])
                }
                for (index, last) in [(1, EventType.paused), (2, .leaseExpired)] {
                    try raw(ids[index], 2, .claimed, lease: 70 + Int64(index))
                    try raw(ids[index], 3, .pauseRequested)
                    if index == 1 { try raw(ids[index], 4, .cancelRequested) }
                    try raw(ids[index], index == 1 ? 5 : 4, last, lease: last == .paused ? 71 : nil)
                }
            }
            _ = try store.replay(verify: false)
            // What schema 1's fold had stored: every claim counted.
            try store.withConnection { (connection) throws(StoreError) in
                try connection.run("UPDATE jobs SET attempts = 2 WHERE id = ?", [.text(ids[0])])
                try connection.run("UPDATE jobs SET attempts = 1 WHERE id IN (?, ?)", [.text(ids[1]), .text(ids[2])])
                try connection.run("DELETE FROM schema_migrations WHERE version >= 2")
                // Nor the flag of jobs waiting for another, its triggers and its indexes (schema 19).
                try connection.execute(OlderSQLiteSchema.beforeWaitFlag)
                // Schema 1 had no batch column: migrations 2 and 3 are then applied in one transaction,
                // the projection rebuilt once at its end with the newest columns.
                try connection.run("DROP INDEX jobs_batch")
                try connection.run("ALTER TABLE jobs DROP COLUMN batch")
                // Nor had it dropped the spec and result (schema 8): back as the empty columns it had.
                try connection.run("ALTER TABLE jobs ADD COLUMN result TEXT")
                try connection.run("ALTER TABLE jobs ADD COLUMN spec TEXT")
                // Nor kept the lease expiry in the row (schema 10): job 0's lease back in its `leases` table.
                try connection.run("ALTER TABLE jobs DROP COLUMN lease_expires_at_ms")
                try connection.execute("""
                    CREATE TABLE leases (job_id TEXT PRIMARY KEY, owner TEXT NOT NULL, token INTEGER NOT NULL,
                                         expires_at_ms INTEGER NOT NULL);
                    CREATE INDEX leases_expiry ON leases (expires_at_ms);
                    """)
                try connection.run("INSERT INTO leases (job_id, owner, token, expires_at_ms) VALUES (?, ?, ?, 9000)",
                                   [.text(ids[0]), .text(workerName), .integer(second.token)])
            }
        }
        #expect(throws: StoreError.olderSchema(found: 1, known: EventStore.knownSchemaVersion)) {
            _ = try EventStore(path: path, mode: .readOnly)
        }
        #expect("\(StoreError.olderSchema(found: 1, known: 2))".contains("jobctl migrate"))

        let store = try EventStore(path: path, mode: .readWrite)
        #expect(store.appliedMigrations == Migrator.all.map(\.version).filter { $0 >= 2 })
        #expect(try store.job(ids[0])?.attempts == 1)
        // Job 0 still runs under its lease: migration 10 moved the expiry into its row, and the rebuild
        // of the projection at the end of the same transaction kept it.
        let lease = try store.withConnection { (connection) throws(StoreError) in
            try connection.first("SELECT lease_token, lease_expires_at_ms FROM jobs WHERE id = ?", [.text(ids[0])]) { row in
                (row.optionalInt64(0), row.optionalInt64(1))
            }
        }
        #expect(lease?.0 == secondToken && lease?.1 == 9_000)
        let cancelled = try #require(try store.job(ids[1]))
        #expect(cancelled.state == .cancelled && cancelled.error?.code == .cancelled && !cancelled.cancelRequested)
        let paused = try #require(try store.job(ids[2]))
        #expect(paused.state == .paused && !paused.pauseRequested && paused.attempts == 1)
        for (id, tail) in [(ids[1], EventType.cancelled), (ids[2], .paused)] {
            let last = try #require(try store.events(jobID: id).last)
            #expect(last.type == tail && last.actor == "jobctl:migration-2")
        }
        let report = try store.replay(verify: true)
        #expect(report.isConsistent, "\(report.differences) \(report.problems)")
    }

    @Test("only a creating open makes a database: the others refuse a missing, empty or foreign file",
          arguments: [EventStore.OpenMode.readOnly, .readWrite])
    func onlyCreateCreates(mode: EventStore.OpenMode) throws {
        let directory = try TemporaryDirectory("store-no-create")
        defer { directory.remove() }
        let missing = directory.file("typo.db")
        #expect(throws: StoreError.noDatabase(path: missing)) { _ = try EventStore(path: missing, mode: mode) }
        #expect(!FileManager.default.fileExists(atPath: missing))
        #expect("\(StoreError.noDatabase(path: missing))"
            == "no database at \(missing): run `jobctl submit` or `jobctl migrate` to create one")
        // An empty file (touched, or left by a crash before the first migration) is no database either.
        let empty = directory.file("empty.db")
        #expect(FileManager.default.createFile(atPath: empty, contents: nil), "could not create a file the test needs")
        #expect(throws: StoreError.noDatabase(path: empty)) { _ = try EventStore(path: empty, mode: mode) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: empty)).isEmpty)
        // Another program's SQLite file is not turned into a queue.
        let foreign = directory.file("foreign.db")
        do {
            let other = try SQLiteConnection(path: foreign, readOnly: false, create: true)
            try other.execute("CREATE TABLE notes (body TEXT)")
        }
        #expect {
            _ = try EventStore(path: foreign, mode: mode)
        } throws: { error in
            "\(error)".contains("not jobctl's")
        }
        let tables = try SQLiteConnection(path: foreign, readOnly: true, create: false)
            .query("SELECT name FROM sqlite_master WHERE type = 'table'") { row in row.text(0) }
        #expect(tables == ["notes"])
        // The creating open makes it, and then the others open it.
        _ = try EventStore(path: missing, mode: .create)
        #expect(try EventStore(path: missing, mode: mode).appliedMigrations.isEmpty)
    }

    @Test("a write through a read-only store is refused as read-only")
    func writeThroughReadOnlyStore() throws {
        let fixture = try StoreFixture("store-readonly-write")
        defer { fixture.remove() }
        try fixture.submit()
        let reader = try EventStore(path: fixture.path, mode: .readOnly)
        #expect {
            _ = try reader.submit([uploadSpec()], actor: "cli:test", now: 1)
        } throws: { error in
            guard case StoreError.readOnly(let message) = error else { return false }
            return message.contains("read-only")
        }
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
