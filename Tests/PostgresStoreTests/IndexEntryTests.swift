import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import PostgresStore

/// Schema 10: fewer index entries written per job (`migrations/postgres/010_fewer_index_entries_per_job.sql`).
@Suite("PostgreSQL index entries per job", .onTestThreads)
struct IndexEntryTests {
    /// A heartbeat changes only the job row's `lease_expires_at_ms` (schema 11; before it, the lease
    /// row's `expires_at_ms`, unindexed since schema 10), which no index holds: the update can be HOT
    /// and write no index entry. With the expiry indexed, no heartbeat is.
    @Test("heartbeats can be HOT updates of the job rows; with the expiry indexed none is",
          arguments: [true, false])
    func heartbeatIsHeapOnly(unindexed: Bool) throws {
        let fixture = try PostgresFixture("hot")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        if !unindexed {
            _ = try store.withConnection { (connection) throws(StoreError) in
                try connection.store("CREATE INDEX jobs_lease_expiry ON jobs (lease_expires_at_ms)")
            }
        }
        let count = 20
        _ = try store.submit((0..<count).map { k in
            JobSpec(kind: .uploadData, destination: "file://hot/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w", queues: nil, limit: count, leaseMs: 60_000, now: 2_000)
        try #require(claimed.count == count)
        let leases = Dictionary(uniqueKeysWithValues: claimed.map { ($0.record.id, $0.token) })
        func updates() throws -> (Int64, Int64) {
            try store.withConnection { (connection) throws(StoreError) -> (Int64, Int64) in
                // This connection made the updates; its statistics reach the views once it flushes them.
                try connection.store("SELECT pg_stat_force_next_flush()")
                let counts = try connection.rows("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass") {
                    (row) throws(StoreError) in (try row.integer(0), try row.integer(1))
                }
                return counts.first ?? (0, 0)
            }
        }
        let before = try updates()
        let rounds = 5
        for round in 1...rounds {
            #expect(try store.heartbeat(owner: "w", leases: leases, leaseMs: 60_000, now: 2_000 + Int64(round) * 1_000).isEmpty)
        }
        let after = try updates()
        let expiries = try store.withConnection { (connection) throws(StoreError) -> [Int64] in
            try connection.rows("SELECT DISTINCT lease_expires_at_ms FROM jobs") { (row) throws(StoreError) in try row.integer(0) }
        }
        #expect(expiries == [2_000 + Int64(rounds) * 1_000 + 60_000])

        let (updated, heapOnly) = (after.0 - before.0, after.1 - before.1)
        #expect(updated == Int64(rounds * count), "\(updated) updates")
        if unindexed {
            // Where the page has room for the new version (pruning frees dead ones): job rows are
            // wide and their pages full after the claims, so about 40 % here; an indexed column
            // would allow none.
            #expect(heapOnly > 0, "\(heapOnly) of \(updated) updates were HOT")
        } else {
            #expect(heapOnly == 0, "\(heapOnly) of \(updated) updates were HOT")
        }
    }

    /// The idempotency key is unique among the jobs that have one, and is looked up through its index;
    /// jobs without a key (most) have no entry in it. Since schema 16 a hash index behind an exclusion
    /// constraint, which holds a key of any length (a B-tree entry at most 2,704 bytes).
    @Test("idempotency keys: a partial unique index, still refusing duplicates and used by the lookup")
    func idempotencyKeyIndex() throws {
        let fixture = try PostgresFixture("idemindex")
        let connection = try fixture.migrated()
        let definition = try connection.query(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'jobs' AND indexdef LIKE '%(idempotency_key)%'") {
            (row) throws(PostgresError) in try row.text(0)
        }
        #expect(definition.count == 1, "\(definition)")
        #expect(definition.first?.contains("INDEX jobs_idempotency_key_set ON") == true
                && definition.first?.contains("USING hash (idempotency_key)") == true, "\(definition)")
        #expect(try connection.query("""
            SELECT pg_get_constraintdef(oid) FROM pg_constraint
            WHERE conname = 'jobs_idempotency_key_set' AND conrelid = to_regclass('jobs') AND contype = 'x'
            """) { (row) throws(PostgresError) in try row.text(0) }
            == ["EXCLUDE USING hash (idempotency_key WITH =) WHERE ((idempotency_key IS NOT NULL))"])
        #expect(definition.first?.hasSuffix("WHERE (idempotency_key IS NOT NULL)") == true, "\(definition)")
        #expect(try connection.query("SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'leases'") {
            (row) throws(PostgresError) in try row.int64(0)
        } == [1], "leases keeps only its primary key")

        try connection.insertQueuedJob(id: "job-a", seq: 1)
        try connection.insertQueuedJob(id: "job-b", seq: 2)
        try connection.insertQueuedJob(id: "job-c", seq: 3)
        try connection.run("UPDATE jobs SET idempotency_key = 'nightly' WHERE id = 'job-a'")
        #expect(postgresError { try connection.run("UPDATE jobs SET idempotency_key = 'nightly' WHERE id = 'job-b'") }?.sqlstate == "23P01")
        try connection.run("UPDATE jobs SET idempotency_key = 'weekly' WHERE id = 'job-b'")

        for mode in ["auto", "force_generic_plan"] {
            try connection.run("SET plan_cache_mode = \(mode)")
            let plan = try connection.plan("EXPLAIN /* \(mode) */ SELECT id FROM jobs WHERE idempotency_key = $1", [.text("nightly")])
            #expect(plan.contains("jobs_idempotency_key_set") || plan.contains("Seq Scan on jobs"), "\(mode): \(plan)")
            try connection.run("SET enable_seqscan = off")
            let indexed = try connection.plan("EXPLAIN /* \(mode) noseq */ SELECT id FROM jobs WHERE idempotency_key = $1", [.text("nightly")])
            #expect(indexed.contains("jobs_idempotency_key_set"), "\(mode): \(indexed)")
            try connection.run("RESET enable_seqscan")
        }
        #expect(try connection.query("SELECT id FROM jobs WHERE idempotency_key = $1", [.text("nightly")]) {
            (row) throws(PostgresError) in try row.text(0)
        } == ["job-a"])
    }
}
