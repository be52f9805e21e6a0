import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
@testable import EventStore
import TestSupport

/// Schema 15: the events of types this jobctl does not know (a newer jobctl's) are found through a
/// partial index that no event of a known type enters, so the claim's look for them costs a probe of
/// an empty index. A planner uses a partial index only for a query that names its condition, so the
/// queries and the migration must say the same thing.
@Suite("Schema 15: the index of a newer jobctl's events", .onTestThreads)
struct NewerEventsIndexTests {
    /// SQLite's plan for `sql`, one step a line.
    private func plan(_ store: EventStore, _ sql: String, _ values: [SQLiteValue]) throws -> String {
        try store.withConnection { (connection) throws(StoreError) -> String in
            try connection.query("EXPLAIN QUERY PLAN " + sql, values) { row in row.text(3) }.joined(separator: "\n")
        }
    }

    @Test("the claim and the worker's look for such jobs read the partial index, which a claim's events never enter")
    func claimAndCountReadTheIndex() throws {
        let fixture = try StoreFixture("schema15-plans")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        _ = try fixture.running(memorySpec())
        _ = try fixture.submit(memorySpec())

        for queues in [nil, ["default", "other"]] as [[String]?] {
            let values: [SQLiteValue] = [.integer(10_000)] + (queues ?? []).map(SQLiteValue.text) + [.int(16)]
            let claimPlan = try plan(store, SQLiteConnection.claimSQL(queues: queues), values)
            #expect(claimPlan.contains("SEARCH ev USING INDEX events_of_newer_types (job_id=?)"), "\(claimPlan)")
        }
        for states in [nil, [.queued, .running, .paused]] as [Set<JobState>?] {
            let countPlan = try plan(store, NewerEvents.jobsSQL(inStates: states), [])
            #expect(countPlan.contains("SCAN ev USING INDEX events_of_newer_types"), "\(countPlan)")
            #expect(!countPlan.contains("SCAN j"), "\(countPlan)")
        }
        let entries = try store.withConnection { (connection) throws(StoreError) -> Int in
            try connection.first("SELECT count(*) FROM events INDEXED BY events_of_newer_types WHERE \(NewerEvents.condition(alias: "events"))") {
                row in row.int(0)
            } ?? -1
        }
        #expect(entries == 0)
        #expect(try store.jobsWithNewerEvents(inStates: nil).isEmpty)
    }
}
