import Foundation
import JobModel
import Testing
@testable import EventStore
import TestSupport

/// `jobs(filter:)` with a limit and a condition looks at the newest jobs first (a window read backwards
/// through `jobs_created`) and runs the whole condition only when the window holds fewer matches than the
/// limit. Either way the answer is the newest `limit` matches: these compare it with the unlimited
/// listing's first rows, on both engines (PostgreSQL plans by its statistics and has no window).
@Suite("Listing the newest matches first", .onTestThreads)
struct ListWindowTests {
    static func spec(_ k: Int, priority: Int = 0) -> JobSpec {
        JobSpec(kind: .downloadMemory, source: "http://127.0.0.1:9/o-\(k)", maxSize: 64, priority: priority)
    }

    /// 10 old jobs, then more than a window of newer ones, then 3 newest with a higher priority. The 3
    /// newest are claimed first (priority), then the 10 oldest: 13 running, 3 in the window and 10 far
    /// outside it; the rest queued.
    static func populate(_ fixture: StoreFixture) throws -> Int {
        let middle = EventStore.newestWindow(limit: 5) + 500
        _ = try fixture.store.submit((0..<10).map { spec($0) }, actor: "cli:test", now: 1_000)
        _ = try fixture.store.submit((10..<(10 + middle)).map { spec($0) }, actor: "cli:test", now: 2_000)
        _ = try fixture.store.submit((0..<3).map { spec(90_000 + $0, priority: 5) }, actor: "cli:test", now: 3_000)
        let newest = try fixture.store.claim(owner: "w", queues: nil, limit: 3, leaseMs: 60_000, now: 4_000)
        let oldest = try fixture.store.claim(owner: "w", queues: nil, limit: 10, leaseMs: 60_000, now: 4_000)
        #expect(newest.allSatisfy { $0.record.priority == 5 } && newest.count == 3)
        #expect(oldest.allSatisfy { $0.record.createdAtMs == 1_000 } && oldest.count == 10)
        return 13 + middle
    }

    @Test("the window is at least 1,000 jobs, twenty per row asked for, at most 20,000, whatever the limit")
    func windowSize() {
        #expect(EventStore.newestWindow(limit: 1) == 1_000)
        #expect(EventStore.newestWindow(limit: 100) == 2_000)
        #expect(EventStore.newestWindow(limit: 1_000_000_000) == 20_000)
        #expect(EventStore.newestWindow(limit: .max) == 20_000)
    }

    @Test("the newest matches, whether the window holds them all, some or none", arguments: Engine.allCases)
    func newestMatchesFirst(engine: Engine) throws {
        let fixture = try StoreFixture("list-window", engine: engine)
        defer { fixture.remove() }
        let total = try Self.populate(fixture)
        let cases: [(JobFilter, String)] = [
            (JobFilter(states: [.queued], limit: 5), "the window holds them all"),
            (JobFilter(states: [.queued], limit: 1), "one"),
            (JobFilter(states: [.running], limit: 3), "exactly the window's three"),
            (JobFilter(states: [.running], limit: 5), "three in the window, two far older"),
            (JobFilter(states: [.running], limit: 50), "more than there are"),
            (JobFilter(states: [.succeeded], limit: 5), "none at all"),
            (JobFilter(states: [.running, .queued], kinds: [.downloadMemory], limit: 7), "several conditions"),
            (JobFilter(states: [.queued], limit: 0), "a limit of zero"),
        ]
        for (filter, what) in cases {
            var unlimited = filter
            unlimited.limit = nil
            let all = try fixture.store.jobs(filter: unlimited)
            let listed = try fixture.store.jobs(filter: filter)
            #expect(listed.map(\.id) == Array(all.prefix(filter.limit ?? 0)).map(\.id), "\(what)")
        }
        let running = try fixture.store.jobs(filter: JobFilter(states: [.running], limit: 5))
        #expect(running.map(\.createdAtMs) == [3_000, 3_000, 3_000, 1_000, 1_000])
        #expect(try fixture.store.jobs(filter: JobFilter(limit: 4)).count == 4)
        #expect(try fixture.store.countJobs(filter: JobFilter()) == total)
    }
}
