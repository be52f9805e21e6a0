import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

/// A worker's start-up look for queued `gs://` jobs on PostgreSQL: the server matches the stored text,
/// so only the jobs that can name a GCS object come back (each worker process asks this once at start,
/// and reading every queued job's spec was a fifth of a four-process drain's server time).
@Suite("PostgreSQL queued jobs by spec text", .onTestThreads)
struct PostgresQueuedSpecScanTests {
    @Test("only the queued jobs whose submitted text mentions the text come back, in claim order, ASCII case ignored")
    func matchedOnTheServer() throws {
        let fixture = try PostgresFixture("queued-spec-scan")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let plain = (0..<300).map { k in JobSpec(kind: .downloadMemory, source: "http://127.0.0.1:9/object-\(k)", maxSize: 1024) }
        _ = try store.submit(plain, actor: "cli:test", now: 1_000)
        // A gs:// job that is claimed is no longer queued.
        let claimed = try store.submit([JobSpec(kind: .downloadMemory, source: "gs://bucket/claimed.txt", maxSize: 1024)],
                                       actor: "cli:test", now: 500)[0].id
        #expect(try store.claim(owner: "w", queues: nil, limit: 1, leaseMs: 60_000, now: 600).map(\.record.id) == [claimed])
        var expected: [String] = []
        for (k, source) in ["gs://bucket/a.txt", "GS://bucket/b.txt", "file://m/gs:notes.txt", "file://m/Gs:caps.txt"].enumerated() {
            expected.append(try store.submit([JobSpec(kind: .downloadMemory, source: source, maxSize: 1024)],
                                             actor: "cli:test", now: 2_000 + Int64(k))[0].id)
        }
        let found = try store.nextQueuedJobs(limit: 10_000, specMentioning: "GS:")
        #expect(found.map(\.id) == expected)
        #expect(found.map(\.spec.source) == ["gs://bucket/a.txt", "GS://bucket/b.txt", "file://m/gs:notes.txt", "file://m/Gs:caps.txt"])
        #expect(found.allSatisfy { $0.state == .queued })
        // Only the `limit` next queued jobs are looked at: the 300 plain ones come first.
        #expect(try store.nextQueuedJobs(limit: 302, specMentioning: "gs:").map(\.id) == Array(expected.prefix(2)))
        #expect(try store.nextQueuedJobs(limit: 300, specMentioning: "gs:").isEmpty)
        #expect(try store.nextQueuedJobs(limit: 0, specMentioning: "gs:").isEmpty)
        #expect(try store.nextQueuedJobs(limit: 10_000, specMentioning: "nowhere-in-any-spec").isEmpty)
        // A job of higher priority is taken first, so it is looked at first, though submitted last.
        let urgent = try store.submit([JobSpec(kind: .downloadMemory, source: "gs://bucket/urgent.txt", maxSize: 1024, priority: 5)],
                                      actor: "cli:test", now: 3_000)[0].id
        #expect(try store.nextQueuedJobs(limit: 1, specMentioning: "gs:").map(\.id) == [urgent])
        // A text with LIKE's and regular expressions' special characters is matched as it is.
        #expect(try store.nextQueuedJobs(limit: 10_000, specMentioning: "%").isEmpty)
        #expect(try store.nextQueuedJobs(limit: 10_000, specMentioning: "object-29").map(\.spec.source)
                == ["http://127.0.0.1:9/object-29", "http://127.0.0.1:9/object-290", "http://127.0.0.1:9/object-291",
                    "http://127.0.0.1:9/object-292", "http://127.0.0.1:9/object-293", "http://127.0.0.1:9/object-294",
                    "http://127.0.0.1:9/object-295", "http://127.0.0.1:9/object-296", "http://127.0.0.1:9/object-297",
                    "http://127.0.0.1:9/object-298", "http://127.0.0.1:9/object-299"])
    }

    /// A fresh schema holding `count` queued jobs naming no `gs://` object (`o-0`, `o-1`, …).
    static func plainJobs(_ label: String, count: Int) throws -> (PostgresFixture, PostgresStore) {
        let fixture = try PostgresFixture(label)
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit((0..<count).map { k in JobSpec(kind: .downloadMemory, source: "http://127.0.0.1:9/o-\(k)", maxSize: 64) },
                             actor: "cli:test", now: 1_000)
        return (fixture, store)
    }

    /// The plan of the look at the next `window` queued jobs, over `count` plain jobs once analysed.
    static func lookPlan(_ label: String, count: Int, window: Int64) throws -> String {
        let (fixture, _) = try plainJobs(label, count: count)
        let connection = try fixture.connect()
        try connection.run("ANALYZE")
        return try connection.plan("EXPLAIN " + PostgresStore.nextQueuedJobsSQL, [.integer(window), .text("gs:")])
    }

    @Test("the window comes from the claim-order index, not from every queued row")
    func theWindowComesFromTheClaimOrderIndex() throws {
        let plan = try Self.lookPlan("queued-spec-plan", count: 2_000, window: 10)
        #expect(plan.contains("jobs_queued_claim_order"), "\(plan)")
    }

    @Test("each candidate's submitted event is read by its key: the look does not scan the log")
    func theEventsAreReadByKey() throws {
        // More events than candidates, and the window a worker looks at (`MissingCredentials.scanLimit`):
        // a plan that matched the text of every event scanned them all.
        let plan = try Self.lookPlan("queued-spec-events", count: 3_000, window: 1_000)
        #expect(plan.contains("events_pkey"), "\(plan)")
        #expect(!plan.contains("Seq Scan on events"), "\(plan)")
        #expect(!plan.contains("Seq Scan on jobs"), "\(plan)")
    }

    @Test("the statement runs without JIT compilation, which cost more than the statement itself")
    func withoutJIT() throws {
        let (fixture, store) = try Self.plainJobs("queued-spec-jit", count: 50)
        let connection = try fixture.connect()
        let jitAvailable = try connection.first("SELECT pg_jit_available()", []) { (row) throws(PostgresError) in try row.bool(0) }
        guard jitAvailable == true else {
            return  // a server without JIT has nothing to turn off
        }
        func plan(_ begin: [String]) throws -> String {
            for statement in begin { try connection.run(statement) }
            // Every statement above this cost is compiled: so this one is, unless JIT is off.
            try connection.run("SET LOCAL jit_above_cost = 0")
            let lines = try connection.query("EXPLAIN (ANALYZE) " + PostgresStore.nextQueuedJobsSQL,
                                             [.integer(10_000), .text("gs:")]) { (row) throws(PostgresError) in try row.text(0) }
            try connection.run("ROLLBACK")
            return lines.joined(separator: "\n")
        }
        #expect(try plan(["BEGIN"]).contains("JIT:"))
        let without = try plan(PostgresStore.withoutJIT)
        #expect(!without.contains("JIT:"), "\(without)")
        #expect(try store.nextQueuedJobs(limit: 10_000, specMentioning: "o-4").count == 11)
    }
}
