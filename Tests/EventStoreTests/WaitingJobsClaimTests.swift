import CSQLite
import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore
import PostgresStore

/// Jobs that still wait for another job (`after:`) are kept out of what a claim reads: a claim, an idle
/// poll's `nextRunAfter` and a drain check walked every blocked queued job ahead of the first runnable
/// one, so draining a chain of N jobs read ~N²/2 rows (10,000 jobs: not done after two minutes).
@Suite(.onTestThreads) struct WaitingJobsClaimTests {
    private func spec(key: String, after: [String]? = nil) -> JobSpec {
        var spec = uploadSpec(key: key)
        spec.after = after
        return spec
    }

    private func claim(_ fixture: StoreFixture, now: Int64) throws -> [ClaimedJob] {
        try fixture.store.claim(owner: workerName, queues: nil, limit: 10, leaseMs: 30_000, now: now)
    }

    private func finish(_ fixture: StoreFixture, _ claim: ClaimedJob, succeeded: Bool, now: Int64) throws {
        let data = succeeded ? EventData(result: JobResult(size: 1))
            : EventData(error: StorageError(.objectNotFound, "gone", httpStatus: 404))
        try fixture.append(PendingEvent(jobID: claim.record.id, type: succeeded ? .succeeded : .failed, actor: workerName,
                                        leaseToken: claim.token, data: data), now: now)
    }

    /// The claim's statement, run on its own connection as the claim runs it (parameters: now, the
    /// queues, the limit): the rows it returns and the virtual machine steps SQLite took for them.
    private func claimStatementSteps(path: String, queues: [String]?, limit: Int) throws -> (rows: Int, steps: Int32) {
        var database: OpaquePointer?
        guard sqlite3_open_v2(path, &database, SQLITE_OPEN_READONLY, nil) == SQLITE_OK, let database else {
            throw StoreError.io("cannot open \(path)")
        }
        defer { sqlite3_close_v2(database) }
        var statement: OpaquePointer?
        let sql = SQLiteConnection.claimSQL(queues: queues)
        guard sqlite3_prepare_v2(database, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw StoreError.io("cannot prepare \(sql): \(String(cString: sqlite3_errmsg(database)))")
        }
        defer { sqlite3_finalize(statement) }
        var index: Int32 = 1
        sqlite3_bind_int64(statement, index, 1_000_000)
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        for queue in queues ?? [] {
            index += 1
            sqlite3_bind_text(statement, index, queue, -1, transient)
        }
        sqlite3_bind_int64(statement, index + 1, Int64(limit))
        var rows = 0
        while sqlite3_step(statement) == SQLITE_ROW { rows += 1 }
        return (rows, sqlite3_stmt_status(statement, SQLITE_STMTSTATUS_VM_STEP, 0))
    }

    /// A chain of 2,000 jobs: only its head is runnable. Asked for 16 jobs, the claim returns the head
    /// and stops, whether it names the queue or not. Before, it walked and looked up the waits of all
    /// 1,999 blocked jobs (~50 steps each) on every claim.
    @Test(arguments: [nil, ["default"]] as [[String]?])
    func aClaimDoesNotWalkTheJobsThatWaitForAnother(queues: [String]?) throws {
        let fixture = try StoreFixture("waiting-claim-steps")
        defer { fixture.remove() }
        let length = 2_000
        let specs = (0..<length).map { i in spec(key: "k\(i)", after: i == 0 ? nil : ["k\(i - 1)"]) }
        _ = try fixture.store.submit(specs, actor: "cli:test", now: 1_000)
        let (rows, steps) = try claimStatementSteps(path: fixture.path, queues: queues, limit: 16)
        #expect(rows == 1)
        // A handful of steps for the one row and the index's end; one per blocked job would be 2,000.
        #expect(steps < 500, "the claim took \(steps) steps")
    }

    /// The flag a claim reads follows the waits through every change of them: a submit with `after:`,
    /// a dependency's success (its dependants run), a failure's cancel cascade, `retry --with-dependants`
    /// (the reopened jobs wait again), and `replay`, which rebuilds the waits; `replay --verify` agrees
    /// with the table at every step.
    @Test(arguments: Engine.allCases)
    func theWaitFlagFollowsTheWaits(engine: Engine) throws {
        let fixture = try StoreFixture("waiting-flag", engine: engine)
        defer { fixture.remove() }
        // Jobs whose flag disagrees with their rows in job_dependencies (the same text on both engines).
        let disagreeing = "SELECT count(*) FROM jobs WHERE waits_for_jobs <> (EXISTS (SELECT 1 FROM job_dependencies d WHERE d.job = jobs.id))"
        let flagged = "SELECT count(*) FROM jobs WHERE waits_for_jobs = (1 = 1)"
        func check(_ step: String) throws {
            #expect(try fixture.scalar(disagreeing) == "0", "\(step)")
            #expect(try fixture.store.replay(verify: true).isConsistent, "\(step)")
        }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["b"]),
                                            spec(key: "x", after: ["a"]), spec(key: "y")],
                                           actor: "cli:test", now: 1_000).map(\.id)
        let (a, b, c, x, y) = (ids[0], ids[1], ids[2], ids[3], ids[4])
        #expect(try fixture.scalar(flagged) == "3")
        try check("submitted")
        let first = try claim(fixture, now: 2_000)
        #expect(Set(first.map(\.record.id)) == [a, y])
        try finish(fixture, try #require(first.first { $0.record.id == a }), succeeded: true, now: 3_000)
        #expect(try fixture.scalar(flagged) == "1")
        try check("a succeeded")
        let second = try claim(fixture, now: 4_000)
        #expect(Set(second.map(\.record.id)) == [b, x])
        // b fails: c is cancelled by the cascade and still waits for b.
        try finish(fixture, try #require(second.first { $0.record.id == b }), succeeded: false, now: 5_000)
        #expect(try fixture.store.job(c)?.state == .cancelled)
        #expect(try fixture.scalar(flagged) == "1")
        try check("b failed")
        // Reopened with its dependants, c waits for b again and is not claimed before b succeeded.
        _ = try fixture.store.retryWithDependants(id: b, actor: "cli:test", now: 6_000, ifStateIn: nil, dryRun: false)
        #expect(try fixture.store.job(c)?.state == .queued)
        let third = try claim(fixture, now: 7_000)
        #expect(third.map(\.record.id) == [b])
        try check("b retried with its dependants")
        // Replay rebuilds the table, and the flag with it.
        _ = try fixture.store.replay(verify: false)
        #expect(try fixture.scalar(flagged) == "1")
        try check("replayed")
        try finish(fixture, try #require(third.first), succeeded: true, now: 8_000)
        #expect(try claim(fixture, now: 9_000).map(\.record.id) == [c])
        #expect(try fixture.scalar(flagged) == "0")
        try check("b succeeded")
    }

    /// A flag that disagrees with the waits is a difference `replay --verify` reports (the claim trusts
    /// the flag alone), and `replay` mends it.
    @Test(arguments: Engine.allCases)
    func replayVerifyReportsAWrongWaitFlag(engine: Engine) throws {
        let fixture = try StoreFixture("waiting-verify", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"])], actor: "cli:test", now: 1_000).map(\.id)
        try fixture.sql("UPDATE jobs SET waits_for_jobs = NOT waits_for_jobs WHERE id = ?", [.text(ids[1])])
        // Taken by itself, b would now run before a succeeded.
        let report = try fixture.store.replay(verify: true)
        #expect(report.differences.map(\.jobID) == [ids[1]], "\(report.differences)")
        #expect(report.differences.map(\.column) == ["waits_for_jobs"])
        _ = try fixture.store.replay(verify: false)
        #expect(try fixture.store.replay(verify: true).isConsistent)
        #expect(try claim(fixture, now: 2_000).map(\.record.id) == [ids[0]])
    }

    /// A log written before the flag (its jobs already waiting) gets it from the migration: a job that
    /// waits is not claimed, and `replay --verify` holds.
    @Test(arguments: Engine.allCases)
    func theMigrationFlagsTheJobsThatAlreadyWait(engine: Engine) throws {
        let fixture = try StoreFixture("waiting-migration", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit([spec(key: "a"), spec(key: "b", after: ["a"]), spec(key: "c", after: ["b"])],
                                           actor: "cli:test", now: 1_000).map(\.id)
        // Undo the migration, as a log of schema 18 (SQLite) or 20 (PostgreSQL) has it.
        let version: Int
        switch engine {
        case .sqlite:
            version = 19
            for statement in ["DROP TRIGGER job_dependencies_wait_added", "DROP TRIGGER job_dependencies_wait_removed",
                              "DROP INDEX jobs_queued_claim_order", "DROP INDEX jobs_claim",
                              "ALTER TABLE jobs DROP COLUMN waits_for_jobs",
                              "CREATE INDEX jobs_claim ON jobs (state, queue, priority DESC, run_after_ms, seq)",
                              "CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after_ms, seq) WHERE state = 'queued'"] {
                try fixture.sql(statement)
            }
        case .postgres:
            version = 21
            for statement in ["DROP TRIGGER job_dependencies_wait_added ON job_dependencies",
                              "DROP TRIGGER job_dependencies_wait_removed ON job_dependencies",
                              "ALTER TABLE jobs DROP COLUMN waits_for_jobs",
                              "CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after_ms, seq) WHERE state = 'queued'"] {
                try fixture.sql(statement)
            }
        }
        try fixture.sql("DELETE FROM schema_migrations WHERE version = ?", [.int(version)])
        #expect(try fixture.scalar("SELECT count(*) FROM schema_migrations WHERE version = ?", [.int(version)]) == "0")
        let reopened: any JobStore
        switch engine {
        case .sqlite:
            reopened = try EventStore(path: fixture.path)
        case .postgres:
            reopened = try PostgresStore(url: try #require(fixture.postgresURL), mode: .create)
        }
        #expect(try fixture.scalar("SELECT count(*) FROM jobs WHERE waits_for_jobs = (1 = 1)") == "2")
        #expect(try reopened.replay(verify: true).isConsistent)
        #expect(try reopened.claim(owner: workerName, queues: nil, limit: 10, leaseMs: 30_000, now: 2_000).map(\.record.id) == [ids[0]])
    }
}
