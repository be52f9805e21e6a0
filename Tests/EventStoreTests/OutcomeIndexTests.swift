import Foundation
import JobModel
import Testing
@testable import EventStore
@testable import PostgresStore

/// Migration 6's indexes keep `jobctl stats` and the orphan sweep (every worker's start) as fast on a
/// log of millions of events as on a small one: they search, never scan `events` or `jobs`.
@Suite("The indexes of a big log")
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
            for (sql, values) in [(EventStore.finishedLeftoverSQL, [SQLiteValue.integer(0)]), (EventStore.unfinishedResumePointsSQL, [])] {
                plans.append(try store.withConnection { (connection) throws(StoreError) -> String in
                    try connection.query("EXPLAIN QUERY PLAN " + sql, values) { row in row.text(3) }.joined(separator: "\n")
                })
            }
            #expect(plans.allSatisfy { !$0.contains("SCAN jobs") }, "\(plans)")
            #expect(plans[1].contains("jobs_resume_points"), "\(plans[1])")
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
        }
        #expect(plans[0].contains("jobs_finished_by_kind"), "\(plans[0])")
        // The queries still run and select what they did (LeftoverTests check which files they find).
        #expect(try fixture.store.leftoverCandidates(finishedSince: nil).finished.isEmpty)
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
