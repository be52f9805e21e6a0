import Foundation
import JobModel
import Testing
@testable import EventStore
import TestSupport

/// The worker's start-up look for queued `gs://` jobs (`nextQueuedJobs(limit:specMentioning:)`): the same
/// candidates, in claim order, on both stores; on SQLite a spec that cannot match is never decoded, and
/// the look reads only its window of the queue.
@Suite("Queued jobs by spec text", .onTestThreads)
struct QueuedSpecScanTests {
    /// Submits `plain` jobs that name no `gs://` object, then (later) a `gs://` job, one written `GS://`,
    /// a `file://` job whose path holds `gs:`, and a `gs://` job that is claimed (no longer queued).
    /// Returns the ids of the three queued jobs whose spec mentions `gs:`, in claim order (all of the
    /// same priority, so in submission order, after the plain ones).
    static func populate(_ fixture: StoreFixture, plain: Int) throws -> [String] {
        let specs = (0..<plain).map { index in
            JobSpec(kind: .downloadMemory, source: "http://127.0.0.1:9/object-\(index)", maxSize: 1024)
        }
        _ = try fixture.store.submit(specs, actor: "cli:test", now: 1_000)
        let claimed = try fixture.running(JobSpec(kind: .downloadMemory, source: "gs://bucket/claimed.txt", maxSize: 1024), now: 500)
        #expect(claimed.record.state == .running)
        let lower = try fixture.submit(JobSpec(kind: .downloadMemory, source: "gs://bucket/a.txt", maxSize: 1024), now: 2_000)
        let upper = try fixture.submit(JobSpec(kind: .downloadMemory, source: "GS://bucket/b.txt", maxSize: 1024), now: 3_000)
        let file = try fixture.submit(JobSpec(kind: .downloadMemory, source: "file://m/gs:notes.txt", maxSize: 1024), now: 4_000)
        return [lower, upper, file]
    }

    @Test("every queued job whose spec mentions the text is returned, on both stores", arguments: Engine.allCases)
    func candidatesOnBothStores(engine: Engine) throws {
        let fixture = try StoreFixture("queued-spec-scan", engine: engine)
        defer { fixture.remove() }
        let expected = try Self.populate(fixture, plain: 20)
        let found = try fixture.store.nextQueuedJobs(limit: 1_000, specMentioning: "gs:").map(\.id)
        // A store may return more, never fewer, in claim order; both match the text before decoding.
        #expect(found == expected)
        // Only the `limit` next queued jobs are looked at: the 20 plain ones come first.
        #expect(try fixture.store.nextQueuedJobs(limit: 22, specMentioning: "gs:").map(\.id) == Array(expected.prefix(2)))
        #expect(try fixture.store.nextQueuedJobs(limit: 20, specMentioning: "gs:").isEmpty)
        #expect(try fixture.store.nextQueuedJobs(limit: 0, specMentioning: "gs:").isEmpty)
        // A job of higher priority is taken first, so it is looked at first, though submitted last; one
        // whose run-after is later than the others' comes after them.
        let urgent = try fixture.submit(JobSpec(kind: .downloadMemory, source: "gs://bucket/urgent.txt", maxSize: 1024, priority: 5),
                                        now: 5_000)
        let later = try fixture.submit(JobSpec(kind: .downloadMemory, source: "gs://bucket/later.txt", maxSize: 1024,
                                               runAfterMs: 9_000), now: 500)
        #expect(try fixture.store.nextQueuedJobs(limit: 1_000, specMentioning: "gs:").map(\.id) == [urgent] + expected + [later])
        #expect(try fixture.store.nextQueuedJobs(limit: 1, specMentioning: "gs:").map(\.id) == [urgent])
    }

    @Test("LIKE's wildcards in the text are matched as written, on both stores", arguments: Engine.allCases)
    func wildcardsAreLiteral(engine: Engine) throws {
        let fixture = try StoreFixture("queued-spec-scan-literal", engine: engine)
        defer { fixture.remove() }
        let sources = ["http://127.0.0.1:9/a_b", "http://127.0.0.1:9/axb", "http://127.0.0.1:9/50%25off", "http://127.0.0.1:9/50x25off"]
        let ids = try fixture.store.submit(sources.map { JobSpec(kind: .downloadMemory, source: $0, maxSize: 64) },
                                           actor: "cli:test", now: 1_000).map(\.id)
        #expect(try fixture.store.nextQueuedJobs(limit: 100, specMentioning: "A_B").map(\.id) == [ids[0]])
        #expect(try fixture.store.nextQueuedJobs(limit: 100, specMentioning: "0%2").map(\.id) == [ids[2]])
        #expect(try fixture.store.nextQueuedJobs(limit: 100, specMentioning: "%").map(\.id) == [ids[2]])
        #expect(try fixture.store.nextQueuedJobs(limit: 100, specMentioning: "_").map(\.id).contains(ids[0]))
        #expect(try fixture.store.nextQueuedJobs(limit: 100, specMentioning: "a\\b").isEmpty)
    }

    @Test("on SQLite a queue of 10,000 jobs naming no gs:// object decodes none of their specs")
    func plainSpecsAreNotDecoded() throws {
        let fixture = try StoreFixture("queued-spec-scan-10k")
        defer { fixture.remove() }
        let expected = try Self.populate(fixture, plain: 10_000)
        // A fresh store: its spec cache holds exactly the specs it decoded.
        let fresh = try EventStore(path: fixture.path)
        let found = try fresh.nextQueuedJobs(limit: 10_003, specMentioning: "GS:")
        #expect(found.map(\.id) == expected)
        #expect(found.map(\.spec.source) == ["gs://bucket/a.txt", "GS://bucket/b.txt", "file://m/gs:notes.txt"])
        let decoded = try fresh.withConnection { (connection) throws(StoreError) in connection.decodedSpecs.usage.count }
        #expect(decoded == 3)
        // The window is the next queued jobs: one short of all of them leaves out the last submitted.
        let window = try fresh.nextQueuedJobs(limit: 10_002, specMentioning: "gs:")
        #expect(window.map(\.id) == Array(expected.prefix(2)))
        #expect(try fresh.nextQueuedJobs(limit: 10_003, specMentioning: "nowhere-in-any-spec").isEmpty)
    }

    @Test("on SQLite the look reads the claim-order index for its window, never every queued job")
    func theWindowComesFromTheClaimOrderIndex() throws {
        let fixture = try StoreFixture("queued-spec-scan-plan")
        defer { fixture.remove() }
        _ = try Self.populate(fixture, plain: 50)
        let store = try #require(fixture.sqlite)
        let plan = try store.withConnection { (connection) throws(StoreError) -> [String] in
            try connection.query("EXPLAIN QUERY PLAN " + EventStore.nextQueuedJobsSQL, [SQLiteValue.int(1_000), .text("%gs:%")]) { row in
                row.text(3)
            }
        }
        // The window walks the partial index in its order; before, the newest queued jobs were found by
        // reading every queued row through `jobs_claim` and sorting them in a temporary B-tree.
        #expect(plan.contains("SCAN jobs USING INDEX jobs_queued_claim_order"), "\(plan)")
        #expect(!plan.contains { $0.contains("jobs_claim") }, "\(plan)")
        #expect(plan.filter { $0.contains("TEMP B-TREE") }.count == 1, "only the few matches are sorted: \(plan)")
    }
}
