import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
@testable import EventStore
import TestSupport

/// Schema 9: the conditions a worker's writes evaluate (the outcome index's, the CHECK on `jobs.state`)
/// build no temporary b-tree per statement, and still accept exactly what they accepted.
@Suite("Schema 9: conditions without IN lists", .onTestThreads)
struct ConditionsWithoutInListsTests {
    /// The program SQLite runs for `sql`, one opcode a row.
    private func opcodes(_ store: EventStore, _ sql: String) throws -> [String] {
        try store.withConnection { (connection) throws(StoreError) -> [String] in
            try connection.query("EXPLAIN " + sql) { row in row.text(1) }
        }
    }

    @Test("appending an event and changing a job's state open no ephemeral table")
    func writesBuildNoTemporaryTree() throws {
        let fixture = try StoreFixture("schema9-plans")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let insert = "INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, ?, ?, ?, ?, ?, ?)"
        #expect(try opcodes(store, insert).contains("Insert"))
        #expect(try !opcodes(store, insert).contains("OpenEphemeral"))

        // The UPDATE a claim writes (state, lease, attempts, …), built as the store builds it.
        let claim = try fixture.running(memorySpec())
        var queued = claim.record
        queued.state = .queued
        queued.version -= 1
        let update = try claim.record.update(from: queued)
        #expect(update.sql.contains("state = ?"), "\(update.sql)")
        #expect(try !opcodes(store, update.sql).contains("OpenEphemeral"), "\(update.sql)")
    }

    @Test("the CHECK on jobs.state still refuses a state outside the six", arguments: ["bogus", "", "Queued", "queued "])
    func checkStillRefuses(_ state: String) throws {
        let fixture = try StoreFixture("schema9-check")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let id = try fixture.submit(memorySpec())
        let refused = Result { () throws(StoreError) -> Void in
            try store.withConnection { (connection) throws(StoreError) -> Void in
                try connection.run("UPDATE jobs SET state = ? WHERE id = ?", [.text(state), .text(id)])
            }
        }
        #expect((try? refused.get()) == nil, "state '\(state)' was accepted")
        for allowed in ["running", "paused", "succeeded", "failed", "cancelled", "queued"] {
            try store.withConnection { (connection) throws(StoreError) -> Void in
                try connection.run("UPDATE jobs SET state = ? WHERE id = ?", [.text(allowed), .text(id)])
            }
            // Read from the row: a job made `succeeded` by hand has no `succeeded` event, which reading
            // it as a job refuses (a damaged log).
            #expect(try store.withConnection { (connection) throws(StoreError) -> String? in
                try connection.first("SELECT state FROM jobs WHERE id = ?", [.text(id)]) { row in row.text(0) }
            } == allowed)
        }
    }

    @Test("the rebuilt jobs table keeps its columns in order and its indexes")
    func tableShapeKept() throws {
        let fixture = try StoreFixture("schema9-shape")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let columns = try store.withConnection { (connection) throws(StoreError) -> [String] in
            try connection.query("SELECT name FROM pragma_table_info('jobs') ORDER BY cid") { row in row.text(0) }
        }
        // Schema 10 adds the lease expiry after them (no event sets it, so it is not one of the fold's);
        // schema 19 the flag of a job waiting for another (kept by the waits' triggers).
        #expect(columns == JobRecord.columns + ["lease_expires_at_ms", "finished_seq", "waits_for_jobs"])
        let indexes = try store.withConnection { (connection) throws(StoreError) -> [String] in
            try connection.query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs' ORDER BY name") { row in
                row.text(0)
            }
        }
        // Schema 11 adds `jobs_resume_points`; schema 14 indexes the finished jobs by kind and seq, not time.
        #expect(indexes == ["jobs_batch", "jobs_claim", "jobs_created", "jobs_finished", "jobs_finished_seq_by_kind",
                            "jobs_queued_claim_order", "jobs_resume_points", "sqlite_autoindex_jobs_1", "sqlite_autoindex_jobs_2"])
    }
}
