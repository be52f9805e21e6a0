import Foundation
import JobModel
import StorePort
import Testing
@testable import EventStore
import TestSupport

/// A worker writes an attempt's `started` with the attempt's next event (`appendGrouped([…])`): a job's
/// consecutive events in one commit are decided one after the other and its projection row is written
/// once, and a `started` keeps the time it happened.
@Suite("Consecutive events of one job in one commit", .onTestThreads)
struct ConsecutiveEventsTests {
    /// Counts the UPDATEs of `jobs` rows from now on, with a trigger (SQL of the fixture's engine).
    private func countRowUpdates(_ fixture: StoreFixture) throws {
        try fixture.sql("CREATE TABLE row_updates (n INTEGER NOT NULL)")
        try fixture.sql("INSERT INTO row_updates (n) VALUES (0)")
        switch fixture.engine {
        case .sqlite:
            try fixture.sql("CREATE TRIGGER count_row_updates AFTER UPDATE ON jobs BEGIN UPDATE row_updates SET n = n + 1; END")
        case .postgres:
            try fixture.sql("""
                CREATE FUNCTION count_row_update() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN UPDATE row_updates SET n = n + 1; RETURN NULL; END $$
                """)
            try fixture.sql("CREATE TRIGGER count_row_updates AFTER UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION count_row_update()")
        }
    }

    private func rowUpdates(_ fixture: StoreFixture) throws -> Int {
        Int(try #require(try fixture.scalar("SELECT n FROM row_updates"))) ?? -1
    }

    private func progress(_ job: ClaimedJob, _ done: Int64) -> PendingEvent {
        PendingEvent(jobID: job.record.id, actor: workerName, leaseToken: job.token,
                     payload: .progress(TransferProgress(bytesDone: done, bytesTotal: 2)))
    }

    private func expectConsistent(_ fixture: StoreFixture, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let report = try fixture.store.replay(verify: true)
        // The counting trigger is the test's own, which the verify names as one jobctl does not make.
        let problems = report.problems.filter { !$0.contains("'count_row_updates'") }
        #expect(report.differences.isEmpty && problems.isEmpty, "\(report.differences) \(problems)", sourceLocation: sourceLocation)
    }

    @Test("started then the outcome: both appended, the row written once", arguments: Engine.allCases)
    func startedWithTheOutcome(engine: Engine) throws {
        let fixture = try StoreFixture("consecutive-outcome", engine: engine)
        defer { fixture.remove() }
        let job = try fixture.running(now: 1_000)
        try countRowUpdates(fixture)
        let outcomes = try fixture.store.append([reportedStarted(job, at: 1_500), reportedSucceeded(job)], now: 2_000)
        let events = try outcomes.map { try $0.get() }
        #expect(events.map(\.type) == [.started, .succeeded])
        #expect(events.map(\.version) == [job.record.version + 1, job.record.version + 2])
        #expect(events.map(\.atMs) == [1_500, 2_000], "started keeps the time it happened")
        #expect(try rowUpdates(fixture) == 1)
        let row = try #require(try fixture.store.job(job.record.id))
        #expect(row.state == .succeeded && row.startedAtMs == 1_500 && row.finishedAtMs == 2_000 && row.version == events[1].version)
        try expectConsistent(fixture)
    }

    @Test("three events of one job, then another job's: one row write each", arguments: Engine.allCases)
    func threeInARow(engine: Engine) throws {
        let fixture = try StoreFixture("consecutive-three", engine: engine)
        defer { fixture.remove() }
        let first = try fixture.running(now: 1_000)
        let second = try fixture.running(now: 1_000)
        try countRowUpdates(fixture)
        let outcomes = try fixture.store.append([reportedStarted(first, at: 1_200), progress(first, 1), reportedSucceeded(first),
                                                 reportedStarted(second, at: 1_300)], now: 2_000)
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil }, "\(outcomes)")
        #expect(try rowUpdates(fixture) == 2)
        #expect(try fixture.store.job(first.record.id)?.state == .succeeded)
        #expect(try fixture.store.job(second.record.id)?.startedAtMs == 1_300)
        try expectConsistent(fixture)
    }

    @Test("the second refused: the first is appended and its row written", arguments: Engine.allCases)
    func secondRefused(engine: Engine) throws {
        let fixture = try StoreFixture("consecutive-second-refused", engine: engine)
        defer { fixture.remove() }
        let job = try fixture.running(now: 1_000)
        let outcomes = try fixture.store.append([reportedStarted(job, at: 1_500), reportedSucceeded(job, token: job.token + 1)], now: 2_000)
        #expect(try outcomes[0].get().type == .started)
        #expect(throws: StoreError.staleLease(jobID: job.record.id, token: job.token + 1)) { try outcomes[1].get() }
        let row = try #require(try fixture.store.job(job.record.id))
        #expect(row.state == .running && row.startedAtMs == 1_500 && row.version == job.record.version + 1)
        #expect(try fixture.store.events(jobID: job.record.id).map(\.type) == [.submitted, .claimed, .started])
        try expectConsistent(fixture)
    }

    @Test("the first refused: the second is decided on the row as it stands", arguments: Engine.allCases)
    func firstRefused(engine: Engine) throws {
        let fixture = try StoreFixture("consecutive-first-refused", engine: engine)
        defer { fixture.remove() }
        let job = try fixture.running(now: 1_000)
        let outcomes = try fixture.store.append([reportedStarted(job, token: job.token + 1, at: 1_500), reportedSucceeded(job)], now: 2_000)
        #expect(throws: StoreError.staleLease(jobID: job.record.id, token: job.token + 1)) { try outcomes[0].get() }
        #expect(try outcomes[1].get().version == job.record.version + 1)
        let row = try #require(try fixture.store.job(job.record.id))
        #expect(row.state == .succeeded && row.startedAtMs == nil)
        try expectConsistent(fixture)
    }

    @Test("interleaved jobs' events are each written as before", arguments: Engine.allCases)
    func interleaved(engine: Engine) throws {
        let fixture = try StoreFixture("consecutive-interleaved", engine: engine)
        defer { fixture.remove() }
        let first = try fixture.running(now: 1_000)
        let second = try fixture.running(now: 1_000)
        let outcomes = try fixture.store.append([reportedStarted(first, at: 1_100), reportedStarted(second, at: 1_200),
                                                 reportedSucceeded(first), reportedSucceeded(second)], now: 2_000)
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil }, "\(outcomes)")
        #expect(try fixture.store.job(first.record.id)?.state == .succeeded)
        #expect(try fixture.store.job(second.record.id)?.state == .succeeded)
        try expectConsistent(fixture)
    }

    @Test("a started's time is kept between the job's previous event and the append's", arguments: Engine.allCases)
    func occurredTimeIsClamped(engine: Engine) throws {
        let fixture = try StoreFixture("consecutive-clamped", engine: engine)
        defer { fixture.remove() }
        let early = try fixture.running(now: 1_000)
        let late = try fixture.running(now: 1_000)
        let outcomes = try fixture.store.append([reportedStarted(early, at: 400), reportedStarted(late, at: 9_000)], now: 2_000)
        #expect(try outcomes.map { try $0.get().atMs } == [1_000, 2_000])
        try expectConsistent(fixture)
    }

    @Test("through the executor: many workers' pairs at once, each job's order kept, one row write a pair",
          arguments: Engine.allCases)
    func throughTheExecutor(engine: Engine) async throws {
        let fixture = try StoreFixture("consecutive-executor", engine: engine)
        defer { fixture.remove() }
        let ids = try fixture.store.submit((0..<40).map { _ in uploadSpec() }, actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try fixture.store.claim(owner: workerName, queues: nil, limit: ids.count, leaseMs: 30_000, now: 1_000)
        try #require(claimed.count == ids.count)
        try countRowUpdates(fixture)
        let store = fixture.store
        let results = await withTaskGroup(of: [Result<JobEvent, StoreError>].self) { group in
            for job in claimed {
                let pair = [reportedStarted(job, at: 1_000), reportedSucceeded(job)]
                group.addTask { await store.appendGrouped(pair) }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == claimed.count)
        for pair in results {
            let events = pair.compactMap { try? $0.get() }
            #expect(events.map(\.type) == [.started, .succeeded], "\(pair)")
            #expect(events.count == 2 && (events[0].seq ?? 0) < (events[1].seq ?? 0) && events[0].jobID == events[1].jobID)
        }
        #expect(try rowUpdates(fixture) == claimed.count)
        try expectConsistent(fixture)
    }
}
