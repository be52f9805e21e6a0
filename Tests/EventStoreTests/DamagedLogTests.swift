import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore
@testable import PostgresStore

/// A log edited by hand or damaged is hostile input: a read of it gives a typed error that names the job
/// and `jobctl replay --verify`, never another job's data, and a write never "repairs" it wrongly.
@Suite("A damaged log", .onTestThreads)
struct DamagedLogTests {
    /// Lets the test change and delete events, which the log's triggers refuse.
    private static func allowEventEdits(_ fixture: StoreFixture) throws {
        switch fixture.engine {
        case .sqlite: try fixture.sql("DROP TRIGGER events_refuse_update")
        case .postgres: try fixture.sql("ALTER TABLE events DISABLE TRIGGER USER")
        }
    }

    /// Expects `body` to throw `corrupt` naming `jobID` and `replay --verify`; returns the message.
    @discardableResult
    private static func expectDamaged(_ jobID: String, _ what: String, _ body: () throws -> Void) -> String {
        do {
            try body()
            Issue.record("\(what): no error")
            return ""
        } catch {
            let message = "\(error)"
            #expect({ if case .corrupt? = error as? StoreError { true } else { false } }(), "\(what): \(error)")
            #expect(message.contains(jobID) && message.contains("jobctl replay --verify"), "\(what): \(message)")
            return message
        }
    }

    /// A queued job whose row's seq was set to another job's `submitted` event: the claim read that
    /// event's spec, and the worker ran the other job's transfer, logged as this job's.
    @Test("a row whose seq names another job's submitted event is refused, not read with that job's spec", arguments: Engine.allCases)
    func seqOfAnotherJob(engine: Engine) throws {
        let fixture = try StoreFixture("damaged-seq", engine: engine)
        defer { fixture.remove() }
        let done = try fixture.running(memorySpec())
        try fixture.append(PendingEvent(jobID: done.record.id, actor: workerName, leaseToken: done.token,
                                        payload: .succeeded(.none, result: JobResult(size: 1))))
        let queued = try fixture.submit(uploadSpec(), now: 3_000)
        try fixture.sql("UPDATE jobs SET seq = ? WHERE id = ?", [.integer(done.record.seq), .text(queued)])

        let claim = Self.expectDamaged(queued, "claim") {
            let claimed = try fixture.store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 30_000, now: 4_000)
            print("claimed:", claimed.map { "\($0.record.id) \($0.record.spec.kind.rawValue) \($0.record.spec.source ?? "-")" })
        }
        print("claim of a job whose seq names another job's event:", claim)
        Self.expectDamaged(queued, "show") { _ = try fixture.store.job(queued) }
        // The job the seq names reads as it is.
        #expect(try fixture.store.job(done.record.id)?.spec == memorySpec())
        #expect(try fixture.scalar("SELECT state FROM jobs WHERE id = ?", [.text(queued)]) == "queued")
    }

    /// A succeeded job whose event at its version is not its `succeeded` (versions swapped by hand), or
    /// whose `succeeded` lost its result: read with no result, `result` said "job … is succeeded; only
    /// succeeded jobs have a result" and `audit`/`show` printed no checksum, exit 0.
    @Test("a succeeded job whose last event is not a succeeded with a result is refused as damaged", arguments: Engine.allCases)
    func succeededWithoutItsResult(engine: Engine) throws {
        let fixture = try StoreFixture("damaged-result", engine: engine)
        defer { fixture.remove() }
        var ids: [String] = []
        for _ in 0..<2 {
            let claim = try fixture.running(memorySpec())
            try fixture.append(PendingEvent(jobID: claim.record.id, actor: workerName, leaseToken: claim.token,
                                            payload: .started(.none)))
            try fixture.append(PendingEvent(jobID: claim.record.id, actor: workerName, leaseToken: claim.token,
                                            payload: .succeeded(.none, result: JobResult(size: 3, crc32c: "AAAAAA=="))))
            ids.append(claim.record.id)
        }
        try Self.allowEventEdits(fixture)
        // Job 0: its `started` (version 3) and `succeeded` (version 4) swap versions.
        for (from, to) in [(4, 1_000), (3, 4), (1_000, 3)] {
            try fixture.sql("UPDATE events SET version = ? WHERE job_id = ? AND version = ?", [.int(to), .text(ids[0]), .int(from)])
        }
        // Job 1: its `succeeded` event holds no result.
        switch engine {
        case .sqlite: try fixture.sql("UPDATE events SET data = json_remove(data, '$.result') WHERE job_id = ? AND type = 'succeeded'", [.text(ids[1])])
        case .postgres: try fixture.sql("UPDATE events SET data = (data::jsonb - 'result')::text WHERE job_id = ? AND type = 'succeeded'", [.text(ids[1])])
        }

        let swapped = Self.expectDamaged(ids[0], "show of the swapped job") { _ = try fixture.store.job(ids[0]) }
        #expect(swapped.contains("'started'"), "\(swapped)")
        let lost = Self.expectDamaged(ids[1], "show of the job without a result") { _ = try fixture.store.job(ids[1]) }
        print("swapped versions:", swapped, "\nno result:", lost)
        // A listing of both (newest first) stops at the first it reads.
        Self.expectDamaged(ids[1], "list with results") { _ = try fixture.store.jobs(filter: JobFilter(), passingOver: PassedOver()) }
        // A listing that reads no result (`JobFilter.readsResults`) still reads them.
        #expect(try fixture.store.jobs(filter: JobFilter(readsResults: false), passingOver: PassedOver()).count == 2)
    }

    /// A ledger row deleted below the newest: the next writer applied that migration again (on SQLite,
    /// 009 rebuilt `jobs` without the columns later migrations added) and said the log was upgraded.
    @Test("a ledger missing a version below its newest is refused on every open, and nothing is applied")
    func ledgerGapSQLite() throws {
        let directory = try TemporaryDirectory("damaged-ledger")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        do { _ = try EventStore(path: path).submit([uploadSpec()], actor: "cli:test", now: 1_000) }
        do {
            let connection = try SQLiteConnection(path: path, readOnly: false, create: false)
            try connection.run("DELETE FROM schema_migrations WHERE version = 9")
        }
        let latest = Migrator.latestVersion
        for mode in [EventStore.OpenMode.readWrite, .readOnly] {
            do {
                let store = try EventStore(path: path, mode: mode)
                Issue.record("\(mode): opened, applying \(store.appliedMigrations)")
            } catch {
                print("\(mode) open of a ledger without 9:", error)
                #expect("\(error)".contains("lacks version 9, below version \(latest)") && "\(error)".contains("nothing was migrated"),
                        "\(error)")
            }
        }
        let connection = try SQLiteConnection(path: path, readOnly: true, create: false)
        let columns = try connection.query("SELECT name FROM pragma_table_info('jobs')") { row in row.text(0) }
        #expect(columns.contains("finished_seq") && columns.contains("lease_expires_at_ms"), "\(columns)")
        #expect(try connection.first("SELECT count(*) FROM schema_migrations") { row in row.int(0) } == latest - 1)
    }

    @Test("PostgreSQL: a ledger missing a version below its newest is refused on every open, and nothing is applied")
    func ledgerGapPostgres() throws {
        let url = try PostgresServer.shared().makeSchema("damaged-ledger")
        do { _ = try PostgresStore(url: url, mode: .create).submit([uploadSpec()], actor: "cli:test", now: 1_000) }
        do {
            let store = try PostgresStore(url: url, mode: .readWrite)
            _ = try store.withConnection { (connection) throws(StoreError) in
                try connection.store("DELETE FROM schema_migrations WHERE version = 14")
            }
        }
        let latest = PostgresMigrator.latestVersion
        for mode in [PostgresStore.OpenMode.readWrite, .readOnly] {
            do {
                let store = try PostgresStore(url: url, mode: mode)
                Issue.record("\(mode): opened, applying \(store.appliedMigrations)")
            } catch {
                print("\(mode) open of a ledger without 14:", error)
                #expect("\(error)".contains("lacks version 14, below version \(latest)") && "\(error)".contains("nothing was migrated"),
                        "\(error)")
            }
        }
    }
}
