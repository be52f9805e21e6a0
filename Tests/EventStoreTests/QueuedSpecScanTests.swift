import Foundation
import JobModel
import Testing
@testable import EventStore

/// The worker's start-up look for queued `gs://` jobs (`queuedJobs(limit:specMentioning:)`): the same
/// candidates on both stores, and on SQLite a spec that cannot match is never decoded.
@Suite("Queued jobs by spec text")
struct QueuedSpecScanTests {
    /// Submits `plain` jobs that name no `gs://` object, then (later) a `gs://` job, one written `GS://`,
    /// a `file://` job whose path holds `gs:`, and a `gs://` job that is claimed (no longer queued).
    /// Returns the ids of the three queued jobs whose spec mentions `gs:`, newest first.
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
        return [file, upper, lower]
    }

    @Test("every queued job whose spec mentions the text is returned, on both stores", arguments: Engine.allCases)
    func candidatesOnBothStores(engine: Engine) throws {
        let fixture = try StoreFixture("queued-spec-scan", engine: engine)
        defer { fixture.remove() }
        let expected = try Self.populate(fixture, plain: 20)
        let found = try fixture.store.queuedJobs(limit: 1_000, specMentioning: "gs:").map(\.id)
        // A store may return more, never fewer, and newest first; both match the text before decoding.
        #expect(found == expected)
        // Only the `limit` newest queued jobs are looked at.
        #expect(try fixture.store.queuedJobs(limit: 2, specMentioning: "gs:").map(\.id) == Array(expected.prefix(2)))
        #expect(try fixture.store.queuedJobs(limit: 0, specMentioning: "gs:").isEmpty)
    }

    @Test("LIKE's wildcards in the text are matched as written, on both stores", arguments: Engine.allCases)
    func wildcardsAreLiteral(engine: Engine) throws {
        let fixture = try StoreFixture("queued-spec-scan-literal", engine: engine)
        defer { fixture.remove() }
        let sources = ["http://127.0.0.1:9/a_b", "http://127.0.0.1:9/axb", "http://127.0.0.1:9/50%25off", "http://127.0.0.1:9/50x25off"]
        let ids = try fixture.store.submit(sources.map { JobSpec(kind: .downloadMemory, source: $0, maxSize: 64) },
                                           actor: "cli:test", now: 1_000).map(\.id)
        #expect(try fixture.store.queuedJobs(limit: 100, specMentioning: "A_B").map(\.id) == [ids[0]])
        #expect(try fixture.store.queuedJobs(limit: 100, specMentioning: "0%2").map(\.id) == [ids[2]])
        #expect(try fixture.store.queuedJobs(limit: 100, specMentioning: "%").map(\.id) == [ids[2]])
        #expect(try fixture.store.queuedJobs(limit: 100, specMentioning: "_").map(\.id).contains(ids[0]))
        #expect(try fixture.store.queuedJobs(limit: 100, specMentioning: "a\\b").isEmpty)
    }

    @Test("on SQLite a queue of 10,000 jobs naming no gs:// object decodes none of their specs")
    func plainSpecsAreNotDecoded() throws {
        let fixture = try StoreFixture("queued-spec-scan-10k")
        defer { fixture.remove() }
        let expected = try Self.populate(fixture, plain: 10_000)
        // A fresh store: its spec cache holds exactly the specs it decoded.
        let fresh = try EventStore(path: fixture.path)
        let found = try fresh.queuedJobs(limit: 10_003, specMentioning: "GS:")
        #expect(found.map(\.id) == expected)
        #expect(found.map(\.spec.source) == ["file://m/gs:notes.txt", "GS://bucket/b.txt", "gs://bucket/a.txt"])
        let decoded = try fresh.withConnection { (connection) throws(StoreError) in connection.decodedSpecs.usage.count }
        #expect(decoded == 3)
        // The window is the newest queued jobs: one short of all of them leaves out the oldest.
        let window = try fresh.queuedJobs(limit: 3, specMentioning: "gs:")
        #expect(window.map(\.id) == expected)
        #expect(try fresh.queuedJobs(limit: 10_003, specMentioning: "nowhere-in-any-spec").isEmpty)
    }
}
