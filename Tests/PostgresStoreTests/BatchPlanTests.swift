import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

@Suite("PostgreSQL group-commit plans")
struct BatchPlanTests {
    /// The planner cannot see how many rows `unnest` of a parameter gives; left to itself it joins a
    /// batch of 200 rows to a big `jobs` table by hashing the whole table. The update of the projection
    /// must look each job up by its primary key, whatever the table's size, in the plan the prepared
    /// statement uses (custom or generic).
    @Test("the group commit's projection update reads jobs through the primary key, never the whole table")
    func projectionUpdateUsesThePrimaryKey() throws {
        let fixture = try PostgresFixture("batchplan")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        // Rows as wide as a real job's (schema 8 keeps the spec in the log only, so the row of a bare
        // test spec is narrow): a long queue name keeps the table as many pages as a big queue's.
        let queue = String(repeating: "q", count: 400)
        _ = try store.submit((0..<20_000).map { k in
            JobSpec(kind: .uploadData, destination: "file://p/\(k).txt", data: Data("x".utf8), queue: queue)
        }, actor: "cli:test", now: 1_000)
        let update = try PostgresBatchWriter.projectionUpdate(try store.jobs(filter: JobFilter(limit: 200)))
        let connection = try fixture.connect()
        for mode in ["auto", "force_generic_plan"] {
            try connection.run("SET plan_cache_mode = \(mode)")
            // A text of its own per mode, so each is prepared (and planned) under that mode.
            let plan = try connection.query("EXPLAIN /* \(mode) */ " + update.sql, update.parameters) { (row) throws(PostgresError) in
                try row.text(0)
            }.joined(separator: "\n")
            #expect(plan.contains("jobs_pkey"), "\(mode): \(plan.prefix(400))")
            #expect(!plan.contains("Seq Scan on jobs"), "\(mode): \(plan.prefix(400))")
        }
    }
}
