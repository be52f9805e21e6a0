import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import PostgresStore

/// The claim reads queued jobs in claim order from an index instead of sorting the whole queue (a
/// drain's claims cost ~6 ms each with 10,000 queued jobs before: see BENCHMARKS.md, PostgreSQL).
@Suite("PostgreSQL claim plan", .onTestThreads)
struct ClaimPlanTests {
    @Test("a claim across every queue, or a few, reads the queued-jobs index in order and sorts nothing",
          arguments: [nil, ["default", "other"]] as [[String]?])
    func claimReadsTheQueuedIndexInOrder(queues: [String]?) throws {
        let fixture = try PostgresFixture("claimplan")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let specs = (0..<2_000).map { k in
            JobSpec(kind: .uploadData, destination: "file://plan/\(k).txt", data: Data("x".utf8), priority: k % 3)
        }
        _ = try store.submit(specs, actor: "test", now: 1_000)
        let connection = try fixture.connect()
        try connection.execute("ANALYZE jobs")
        // As the claim asks: only the rows a worker may take (`WorkableRows`: no newer jobctl's event among them).
        var sql = "SELECT id FROM jobs WHERE state = 'queued' AND NOT waits_for_jobs AND run_after_ms <= $1"
            + " AND \(WorkableRows.condition())"
        var values: [PostgresValue] = [.integer(10_000)]
        if let queues {
            sql += " AND queue = ANY($2::text[])"
            values.append(postgresTextArray(queues))
        }
        // The limit is a parameter, as the claim sends it.
        sql += " ORDER BY priority DESC, run_after_ms, seq LIMIT $\(values.count + 1) FOR UPDATE SKIP LOCKED"
        values.append(.integer(16))
        // Write transactions run on generic plans (`PostgresStore.writeBegin`): both must read the index.
        for mode in ["auto", "force_generic_plan"] {
            try connection.run("SET plan_cache_mode = \(mode)")
            let plan = try connection.plan("EXPLAIN /* \(mode) */ " + sql, values)
            #expect(plan.contains("Index Scan using jobs_queued_claim_order on jobs"), "\(mode): \(plan)")
            #expect(!plan.contains("Sort"), "\(mode): \(plan)")
            // The look for a newer jobctl's events reads the index of them, empty here (schema 17).
            #expect(plan.contains("using events_of_newer_types on events"), "\(mode): \(plan)")
        }
        // And it claims in that order.
        let claimed = try store.claim(owner: "w", queues: queues, limit: 16, leaseMs: 30_000, now: 10_000)
        #expect(claimed.count == 16)
        #expect(claimed.allSatisfy { $0.record.priority == 2 }, "\(claimed.map(\.record.priority))")
    }

    /// Without statistics the planner takes the queued jobs for a dozen rows and sorts them all on
    /// every claim (16 ms per claim with 10,000 queued); a big submit analyses the table itself.
    @Test("after a submit of many jobs into a new database the claim reads the queued-jobs index in order, without an ANALYZE of its own")
    func bigSubmitLeavesStatisticsForTheClaim() throws {
        let fixture = try PostgresFixture("claimstats")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let connection = try fixture.connect()
        let reltuples = "SELECT reltuples::bigint FROM pg_class WHERE oid = 'jobs'::regclass"
        #expect(try connection.first(reltuples) { (row) throws(PostgresError) in try row.int64(0) } == -1)
        // Below the threshold: no ANALYZE.
        _ = try store.submit((0..<10).map { k in JobSpec(kind: .uploadData, destination: "file://plan/s\(k).txt", data: Data("x".utf8)) },
                             actor: "test", now: 1_000)
        #expect(try connection.first(reltuples) { (row) throws(PostgresError) in try row.int64(0) } == -1)

        let count = PostgresStore.analyzeAfterSubmitting
        _ = try store.submit((0..<count).map { k in JobSpec(kind: .uploadData, destination: "file://plan/\(k).txt", data: Data("x".utf8)) },
                             actor: "test", now: 1_000)
        #expect(try connection.first(reltuples) { (row) throws(PostgresError) in try row.int64(0) } == Int64(count + 10))
        let sql = "SELECT id FROM jobs WHERE state = 'queued' AND NOT waits_for_jobs AND run_after_ms <= $1"
            + " ORDER BY priority DESC, run_after_ms, seq LIMIT $2 FOR UPDATE SKIP LOCKED"
        let plan = try connection.plan("EXPLAIN " + sql, [.integer(10_000), .integer(16)])
        #expect(plan.contains("Index Scan using jobs_queued_claim_order on jobs"), "\(plan)")
        #expect(!plan.contains("Sort"), "\(plan)")
    }

    @Test("claims of every size share one prepared statement: a new size is not parsed and planned again")
    func oneClaimStatementForEverySize() throws {
        let fixture = try PostgresFixture("claimsizes")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit((0..<40).map { k in JobSpec(kind: .uploadData, destination: "file://plan/z\(k).txt", data: Data("x".utf8)) },
                             actor: "test", now: 1_000)
        #expect(try store.claim(owner: "w", queues: nil, limit: 1, leaseMs: 30_000, now: 2_000).count == 1)
        let prepared = try store.withConnection { $0.preparedStatementCount }
        var taken = 1
        for size in [2, 3, 5, 7, 11] {
            taken += try store.claim(owner: "w", queues: nil, limit: size, leaseMs: 30_000, now: 2_000).count
        }
        #expect(taken == 1 + 2 + 3 + 5 + 7 + 11)
        #expect(try store.withConnection { $0.preparedStatementCount } == prepared)
    }
}
