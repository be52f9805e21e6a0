import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

/// The claim reads queued jobs in claim order from an index instead of sorting the whole queue (a
/// drain's claims cost ~6 ms each with 10,000 queued jobs before: see BENCHMARKS.md, PostgreSQL).
@Suite("PostgreSQL claim plan")
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
        var sql = "SELECT id FROM jobs WHERE state = 'queued' AND run_after_ms <= $1"
        var values: [PostgresValue] = [.integer(10_000)]
        if let queues {
            sql += " AND queue = ANY($2::text[])"
            values.append(postgresTextArray(queues))
        }
        sql += " ORDER BY priority DESC, run_after_ms, seq LIMIT 16 FOR UPDATE SKIP LOCKED"
        let plan = try connection.query("EXPLAIN " + sql, values) { (row) throws(PostgresError) in try row.text(0) }
            .joined(separator: "\n")
        #expect(plan.contains("Index Scan using jobs_queued_claim_order on jobs"), "\(plan)")
        #expect(!plan.contains("Sort"), "\(plan)")
        // And it claims in that order.
        let claimed = try store.claim(owner: "w", queues: queues, limit: 16, leaseMs: 30_000, now: 10_000)
        #expect(claimed.count == 16)
        #expect(claimed.allSatisfy { $0.record.priority == 2 }, "\(claimed.map(\.record.priority))")
    }
}
