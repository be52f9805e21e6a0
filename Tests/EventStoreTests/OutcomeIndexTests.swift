import Foundation
import JobModel
import Testing
@testable import EventStore
@testable import PostgresStore
import TestSupport

/// Migration 6's indexes keep `jobctl stats` and the orphan sweep (every worker's start) as fast on a
/// log of millions of events as on a small one: they search, never scan `events` or `jobs`.
@Suite("The indexes of a big log", .onTestThreads)
struct OutcomeIndexTests {
    @Test("stats finds the last hour's outcomes through events_outcomes_at, with or without a queue", arguments: Engine.allCases)
    func statsSearchesTheOutcomeIndex(engine: Engine) throws {
        let fixture = try StoreFixture("store-outcome-index", engine: engine)
        defer { fixture.remove() }
        _ = try fixture.submit()
        for byQueue in [false, true] {
            let plan: String
            switch engine {
            case .sqlite:
                let store = try #require(fixture.sqlite)
                let values: [SQLiteValue] = [.integer(0), .integer(1)] + (byQueue ? [.text("default")] : [])
                plan = try store.withConnection { (connection) throws(StoreError) -> String in
                    try connection.query("EXPLAIN QUERY PLAN " + EventStore.recentOutcomesSQL(byQueue: byQueue), values) { row in
                        row.text(3)
                    }.joined(separator: "\n")
                }
                #expect(!plan.contains("SCAN"), "\(plan)")
            case .postgres:
                let store = try #require(fixture.store as? PostgresStore)
                let values: [PostgresValue] = (byQueue ? [.text("default")] : []) + [.integer(0), .integer(1), .integer(0)]
                let sql = "EXPLAIN " + PostgresStore.recentOutcomesSQL(firstTimeParameter: byQueue ? 2 : 1, byQueue: byQueue)
                plan = try store.withConnection { (connection) throws(StoreError) -> String in
                    // A table of one row is read whole whatever the indexes; without that way out, the
                    // planner shows which index it would search.
                    try connection.store("SET enable_seqscan = off")
                    defer { _ = try? connection.store("RESET enable_seqscan") }
                    return try connection.rows(sql, values) { (row) throws(StoreError) in try row.string(0) }.joined(separator: "\n")
                }
            }
            #expect(plan.contains("events_outcomes_at"), "\(plan)")
        }
    }

    @Test("the orphan sweep finds finished download-file and file:// upload jobs by kind and time, unfinished ones among those with a resume point", arguments: Engine.allCases)
    func sweepSearchesByKind(engine: Engine) throws {
        let fixture = try StoreFixture("store-sweep-index", engine: engine)
        defer { fixture.remove() }
        _ = try fixture.submit()
        var plans: [String] = []
        switch engine {
        case .sqlite:
            let store = try #require(fixture.sqlite)
            for (sql, values) in [(EventStore.finishedLeftoverSQL, [SQLiteValue.integer(Int64.min), .integer(0)]),
                                  (EventStore.unfinishedResumePointsSQL, [])] {
                plans.append(try store.withConnection { (connection) throws(StoreError) -> String in
                    try connection.query("EXPLAIN QUERY PLAN " + sql, values) { row in row.text(3) }.joined(separator: "\n")
                })
            }
            #expect(plans.allSatisfy { !$0.contains("SCAN jobs") }, "\(plans)")
            #expect(plans[1].contains("jobs_resume_points"), "\(plans[1])")
            #expect(plans[0].contains("jobs_finished_seq_by_kind"), "\(plans[0])")
        case .postgres:
            let store = try #require(fixture.store as? PostgresStore)
            for (sql, values) in [(PostgresStore.finishedLeftoverSQL, [PostgresValue.integer(0)]), (PostgresStore.unfinishedResumePointsSQL, [])] {
                plans.append(try store.withConnection { (connection) throws(StoreError) -> String in
                    try connection.store("SET enable_seqscan = off")
                    defer { _ = try? connection.store("RESET enable_seqscan") }
                    return try connection.rows("EXPLAIN " + sql, values) { (row) throws(StoreError) in try row.string(0) }.joined(separator: "\n")
                })
            }
            #expect(plans[1].contains("jobs_resume_points"), "\(plans[1])")
            #expect(plans[0].contains("jobs_finished_by_kind"), "\(plans[0])")
        }
        // The queries still run and select what they did (LeftoverTests check which files they find).
        #expect(try fixture.store.leftoverCandidates(finishedSince: nil).finished.isEmpty)
    }

    @Test("a sweep that reads from a position reads only the jobs of the kinds that leave files final after it, and no event but their submission")
    func sweepFromAPositionReadsOnlyTheJobsFinalAfterIt() throws {
        let fixture = try StoreFixture("store-sweep-position")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let first = try fixture.submit()
        _ = try store.requestCancel(id: first, actor: "cli:test", now: 1_000)
        let plan = try store.withConnection { (connection) throws(StoreError) -> String in
            try connection.query("EXPLAIN QUERY PLAN " + EventStore.changedLeftoverSQL, [SQLiteValue.integer(0)]) { row in row.text(3) }
                .joined(separator: "\n")
        }
        // A walk of every final job (through jobs_claim), of the events after the position (by seq) or of
        // every event of each candidate (through the (job_id, version) index) would cost a draining
        // worker's last sweep a read of every event the drain wrote, whatever its kind. Only a candidate
        // that writes a `file://` sidecar reads its own events, for its claims' tokens (a download's are
        // not read: `CASE`; a skipped job's neither: the condition on its row comes first).
        #expect(plan.contains("SEARCH jobs USING INDEX jobs_finished_seq_by_kind (kind=? AND finished_seq>?)"), "\(plan)")
        #expect(plan.contains("SEARCH submitted USING INTEGER PRIMARY KEY (rowid=?)"), "\(plan)")
        let eventsByJob = plan.split(separator: "\n").filter { $0.contains("sqlite_autoindex_events_1") }
        #expect(eventsByJob == ["SEARCH claims USING INDEX sqlite_autoindex_events_1 (job_id=?)"], "\(plan)")
        #expect(plan.contains("CORRELATED SCALAR SUBQUERY"), "\(plan)")
        #expect(!plan.contains("sqlite_autoindex_jobs_1"), "\(plan)")
        #expect(!plan.contains("SCAN"), "\(plan)")
        #expect(!plan.contains("TEMP B-TREE"), "\(plan)")
        // Skipping the jobs a worker finished itself reads the same ranges, and the skipped ids once.
        let skipping = try store.withConnection { (connection) throws(StoreError) -> String in
            try connection.query("EXPLAIN QUERY PLAN " + EventStore.changedLeftoverSkippingSQL,
                                 [SQLiteValue.integer(0), .text(try StoreJSON.encode(["A", "B"]))]) { row in row.text(3) }
                .joined(separator: "\n")
        }
        #expect(skipping.contains("SEARCH jobs USING INDEX jobs_finished_seq_by_kind (kind=? AND finished_seq>?)"), "\(skipping)")
        #expect(skipping.contains("LIST SUBQUERY") && skipping.contains("SCAN json_each"), "\(skipping)")
        #expect(!skipping.contains("SCAN jobs") && !skipping.contains("SCAN events"), "\(skipping)")
        // Each final download once, however many of its events come after the position, and none that
        // was final before it — even one whose finish time is older than everything read so far.
        let download = JobSpec(kind: .downloadFile, source: "gs://bucket/object.bin", destination: "/tmp/out/object.bin")
        let downloaded = try fixture.submit(download)
        _ = try store.requestCancel(id: downloaded, actor: "cli:test", now: 2_000)
        let (all, newest) = try store.leftoversSince(position: nil, now: 0)
        #expect(all.finished.map(\.id) == [downloaded])
        let late = try fixture.submit(download)
        _ = try store.requestPause(id: late, actor: "cli:test", now: 3_000)
        _ = try store.requestCancel(id: late, actor: "cli:test", now: 500)
        // Cancelled, retried, cancelled again: two final events after the position, one job.
        _ = try store.retry(id: late, actor: "cli:test", now: 600)
        _ = try store.requestCancel(id: late, actor: "cli:test", now: 700)
        #expect(try store.events(jobID: late).filter { $0.type == .cancelled }.count == 2)
        let (after, reached) = try store.leftoversSince(position: newest, now: 0)
        #expect(after.finished.map(\.id) == [late], "\(after.finished.map(\.id))")
        #expect(reached > newest)
        #expect(try store.leftoversSince(position: reached, now: 0).candidates.finished.isEmpty)
    }

    @Test("a draining worker's check for running jobs reads only them, through the index on the state")
    func runningJobsAreCountedThroughTheStateIndex() throws {
        let fixture = try StoreFixture("store-running-count")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        _ = try fixture.running()
        for _ in 0..<3 { _ = try fixture.submit() }
        let (sql, values) = try #require(EventStore.selection("SELECT count(*) FROM jobs", JobFilter(states: [.running])))
        let plan = try store.withConnection { (connection) throws(StoreError) -> String in
            try connection.query("EXPLAIN QUERY PLAN " + sql, values) { row in row.text(3) }.joined(separator: "\n")
        }
        // `counts()` (every state's count) walks the whole index: on a log of a million finished jobs,
        // at every turn of a worker waiting for the others to finish their last jobs.
        #expect(plan.contains("SEARCH jobs USING COVERING INDEX jobs_claim (state=?)"), "\(plan)")
        #expect(try store.countJobs(filter: JobFilter(states: [.running])) == 1)
    }
}
