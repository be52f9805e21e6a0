import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

/// The leftover sweep's read of finished file-creating jobs on PostgreSQL, with the statistics a fresh
/// log has: analysed while every job was queued, then every job finished (as at a drain's end, before
/// autovacuum analyses the table again).
@Suite("PostgreSQL leftover sweep plan", .onTestThreads)
struct PostgresLeftoverPlanTests {
    @Test("finished jobs of other kinds are not read, whatever the statistics say")
    func otherKindsAreNotRead() throws {
        let fixture = try PostgresFixture("leftover-plan")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit((0..<2_000).map { k in JobSpec(kind: .downloadMemory, source: "http://127.0.0.1:9/o-\(k)", maxSize: 64) },
                             actor: "cli:test", now: 1_000)
        let download = try store.submit([JobSpec(kind: .downloadFile, source: "http://127.0.0.1:9/file", destination: "/tmp/leftover-plan-file")],
                                        actor: "cli:test", now: 1_001)[0].id
        let connection = try fixture.connect()
        try connection.run("ANALYZE")
        // Every job finished after the statistics were taken (the projection written directly: only the
        // plan and the rows read are under test here).
        #expect(try connection.run("UPDATE jobs SET state = 'succeeded', finished_at_ms = 5000 + seq") == 2_001)
        let plan = try connection.plan("EXPLAIN (ANALYZE, COSTS OFF) " + PostgresStore.finishedLeftoverSQL, [.integer(0)])
        #expect(plan.contains("jobs_finished_by_kind"), "\(plan)")
        #expect(!plan.contains("using jobs_finished on"), "\(plan)")
        #expect(!plan.contains("Seq Scan on jobs"), "\(plan)")
        #expect(!plan.contains("Rows Removed by Filter: 2000"), "\(plan)")
        // And the sweep's answer: the one download, nothing of the 2,000 others.
        let candidates = try store.leftoverCandidates(finishedSince: 0)
        #expect(candidates.finished.map(\.id) == [download])
        #expect(candidates.finished.first?.destination == "/tmp/leftover-plan-file")
    }

    /// The jobs a worker skips (its own first runs that succeeded) are dropped before their `submitted`
    /// event is read and its spec parsed: of 300 finished downloads with 299 skipped, the events are
    /// looked up once.
    @Test("skipped jobs are dropped before their submitted event is read")
    func skippedJobsAreDroppedBeforeTheirSubmittedEventIsRead() throws {
        let fixture = try PostgresFixture("leftover-skip-plan")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let ids = try store.submit((0..<300).map { k in
            JobSpec(kind: .downloadFile, source: "http://127.0.0.1:9/o-\(k)", destination: "/tmp/leftover-skip-\(k)")
        }, actor: "cli:test", now: 1_000).map(\.id)
        let connection = try fixture.connect()
        #expect(try connection.run("UPDATE jobs SET state = 'succeeded', finished_at_ms = 5000 + seq") == 300)
        let skipped = PostgresValue.array(PostgresArray(elementType: PostgresType.text, elements: ids.dropLast().map(PostgresValue.text)))
        let plan = try connection.plan("EXPLAIN (ANALYZE, COSTS OFF) " + PostgresStore.finishedLeftoverSkippingSQL, [.integer(0), skipped])
        let eventLookups = plan.split(separator: "\n").filter { $0.contains("on events (") }
        // One event row read, once (not 300 in a loop, nor a scan of every event joined by hash).
        #expect(eventLookups.count == 1 && eventLookups.allSatisfy { $0.contains("rows=1 loops=1)") }, "\(plan)")
        // A download's claims (whose tokens name only sidecar temporaries) are never read.
        let claimLookups = plan.split(separator: "\n").filter { $0.contains("on events claims") }
        #expect(!claimLookups.isEmpty && claimLookups.allSatisfy { $0.contains("never executed") }, "\(plan)")
        let (read, _) = try store.leftoversSince(position: 0, now: 10_000, skipping: Set(ids.dropLast()))
        #expect(read.finished.map(\.id) == [ids.last], "\(read.finished.map(\.id))")
    }
}
