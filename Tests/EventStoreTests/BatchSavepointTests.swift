import Foundation
import JobModel
import StorePort
import Testing
@testable import EventStore
import TestSupport

/// SQLite's group commit runs its appends under one savepoint for the batch, not one per event: a
/// refusal comes before its event writes anything, so the others go on without it. An event that
/// fails after it wrote sends the batch back to that savepoint and through the old path, a savepoint
/// per event, which undoes that event alone.
@Suite("SQLite group commit: one savepoint a batch", .onTestThreads)
struct BatchSavepointTests {
    /// Each outcome as text, the jobs' ids replaced by their place in `ids`.
    private func described(_ outcomes: [Result<JobEvent, StoreError>], _ ids: [String]) -> [String] {
        outcomes.map { outcome in
            var text: String
            switch outcome {
            case .success(let event): text = "\(event.type.rawValue) v\(event.version)"
            case .failure(let error): text = "\(error)"
            }
            for (index, id) in ids.enumerated() { text = text.replacingOccurrences(of: id, with: "job\(index)") }
            return text
        }
    }

    private func sqlite(_ fixture: StoreFixture) throws -> EventStore {
        try #require(fixture.sqlite)
    }

    /// Three running jobs and a batch with refusals of every kind that comes before a write.
    private func refusalsBatch(_ label: String) throws -> (StoreFixture, [String], [PendingEvent]) {
        let fixture = try StoreFixture(label)
        let jobs = try (0..<3).map { _ in try fixture.running(now: 1_000) }
        let events = [
            reportedStarted(jobs[0]),
            // A stale version, a token never handed out, an outcome without `started` then a `started` after it.
            PendingEvent(jobID: jobs[0].record.id, actor: workerName, leaseToken: jobs[0].token, expectedVersion: 2,
                         payload: .progress(TransferProgress(bytesDone: 1, bytesTotal: 2))),
            reportedStarted(jobs[1], token: jobs[1].token + 100),
            reportedSucceeded(jobs[2]),
            reportedStarted(jobs[2]),
            reportedStarted(jobs[1]),
            reportedSucceeded(jobs[0]),
        ]
        return (fixture, jobs.map(\.record.id), events)
    }

    @Test("refusals before a write: the batch goes on under its one savepoint, as a savepoint per event would")
    func refusalsAgreeWithSavepointPerEvent() throws {
        func run(_ label: String, savepointPerEvent: Bool) throws -> (outcomes: [String], log: [[EventType]], runAgain: Int) {
            let (fixture, ids, events) = try refusalsBatch(label)
            defer { fixture.remove() }
            let store = try sqlite(fixture)
            let outcomes = try store.writeTransaction { (connection) throws(StoreError) -> [Result<JobEvent, StoreError>] in
                savepointPerEvent ? try connection.appendEach(events, now: 2_000, savepointPerEvent: true) ?? []
                                  : try connection.appendBatch(events, now: 2_000)
            }
            let report = try store.replay(verify: true)
            #expect(report.isConsistent, "\(report.differences) \(report.problems)")
            let runAgain = try store.withConnection { connection in connection.batchesRunAgainWithSavepoints }
            return (described(outcomes, ids), try ids.map { id in try store.events(jobID: id).map(\.type) }, runAgain)
        }
        let batch = try run("batch-savepoint", savepointPerEvent: false)
        let perEvent = try run("event-savepoints", savepointPerEvent: true)
        #expect(batch.outcomes == perEvent.outcomes)
        #expect(batch.log == perEvent.log)
        #expect(batch.log == [[.submitted, .claimed, .started, .succeeded], [.submitted, .claimed, .started],
                              [.submitted, .claimed, .succeeded]])
        #expect(batch.outcomes.filter { $0.hasPrefix("started") || $0.hasPrefix("succeeded") }.count == 4, "\(batch.outcomes)")
        #expect(batch.runAgain == 0, "no event failed after it wrote: the batch ran once")
    }

    @Test("an event refused after it wrote is undone alone: the batch runs again with a savepoint per event")
    func failureAfterAWriteIsUndoneAlone() throws {
        let fixture = try StoreFixture("batch-after-write")
        defer { fixture.remove() }
        let store = try sqlite(fixture)
        let jobs = try (0..<3).map { _ in try fixture.running(now: 1_000) }
        let ids = jobs.map(\.record.id)
        // The second job's outcome fails at its row update, after its event row was inserted.
        try fixture.sql("""
            CREATE TRIGGER refuse_second_outcome BEFORE UPDATE ON jobs
            WHEN NEW.id = '\(ids[1])' AND NEW.state = 'succeeded'
            BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
            """)
        let outcomes = try store.append([reportedStarted(jobs[0]), reportedSucceeded(jobs[0]),
                                         reportedStarted(jobs[1]), reportedSucceeded(jobs[1]),
                                         reportedStarted(jobs[2]), reportedSucceeded(jobs[2])], now: 2_000)
        let texts = described(outcomes, ids)
        #expect(texts.count == 6)
        #expect(Array(texts[0...2]) == ["started v3", "succeeded v4", "started v3"], "\(texts)")
        #expect(texts[3].contains("refused by the test"), "\(texts)")
        #expect(Array(texts[4...5]) == ["started v3", "succeeded v4"], "\(texts)")
        #expect(try store.withConnection { connection in connection.batchesRunAgainWithSavepoints } == 1)
        // The refused outcome left no event row; its `started` (whose row write it held) is in the row.
        #expect(try ids.map { id in try store.events(jobID: id).map(\.type) }
                == [[.submitted, .claimed, .started, .succeeded], [.submitted, .claimed, .started],
                    [.submitted, .claimed, .started, .succeeded]])
        let second = try #require(try store.job(ids[1]))
        #expect(second.state == .running && second.version == 3 && second.startedAtMs == 2_000)
        let report = try store.replay(verify: true)
        // The refusing trigger is the test's own, which the verify names as one jobctl does not make.
        let problems = report.problems.filter { !$0.contains("'refuse_second_outcome'") }
        #expect(report.differences.isEmpty && problems.isEmpty, "\(report.differences) \(problems)")
    }

    @Test("a job's later event in the batch starts from its row as an earlier refused event left it, not as that event wrote it")
    func laterEventAfterARefusalAfterAWrite() throws {
        let fixture = try StoreFixture("batch-undo")
        defer { fixture.remove() }
        let store = try sqlite(fixture)
        let jobs = try (0..<3).map { _ in try fixture.running(now: 1_000) }
        let ids = jobs.map(\.record.id)
        // The second job has started in an earlier commit, so its outcome is its first event in the batch.
        let started = try store.append([reportedStarted(jobs[1])], now: 1_500)
        try #require(described(started, ids) == ["started v3"])
        try fixture.sql("""
            CREATE TRIGGER refuse_second_outcome BEFORE UPDATE ON jobs
            WHEN NEW.id = '\(ids[1])' AND NEW.state = 'succeeded'
            BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
            """)
        // The second job's outcome fails at its row update, after it noted the row it wrote in the batch's
        // own record of its rows; its progress, after another job's events, must be decided on the row as
        // the refusal left it (running at version 3), not on that note (succeeded: a progress refused).
        let progress = PendingEvent(jobID: ids[1], actor: workerName, leaseToken: jobs[1].token,
                                    payload: .progress(TransferProgress(bytesDone: 1, bytesTotal: 1)))
        let outcomes = try store.append([reportedStarted(jobs[0]), reportedSucceeded(jobs[0]), reportedSucceeded(jobs[1]),
                                         reportedStarted(jobs[2]), reportedSucceeded(jobs[2]), progress], now: 2_000)
        let texts = described(outcomes, ids)
        #expect(texts.count == 6)
        #expect(Array(texts[0...1]) == ["started v3", "succeeded v4"], "\(texts)")
        #expect(texts.count > 2 && texts[2].contains("refused by the test"), "\(texts)")
        #expect(Array(texts.dropFirst(3)) == ["started v3", "succeeded v4", "progress v4"], "\(texts)")
        #expect(try store.withConnection { connection in connection.batchesRunAgainWithSavepoints } == 1)
        #expect(try ids.map { id in try store.events(jobID: id).map(\.type) }
                == [[.submitted, .claimed, .started, .succeeded], [.submitted, .claimed, .started, .progress],
                    [.submitted, .claimed, .started, .succeeded]])
        let second = try #require(try store.job(ids[1]))
        #expect(second.state == .running && second.version == 4 && second.bytesDone == 1)
        let report = try store.replay(verify: true)
        // The refusing trigger is the test's own, which the verify names as one jobctl does not make.
        let problems = report.problems.filter { !$0.contains("'refuse_second_outcome'") }
        #expect(report.differences.isEmpty && problems.isEmpty, "\(report.differences) \(problems)")
    }

    @Test("a row write held for a job's next event that fails when it goes out refuses that job's event alone, not the whole commit")
    func heldWriteThatFailsIsItsEventsFailure() throws {
        let fixture = try StoreFixture("batch-held-write")
        defer { fixture.remove() }
        let store = try sqlite(fixture)
        let jobs = try (0..<3).map { _ in try fixture.running(now: 1_000) }
        let ids = jobs.map(\.record.id)
        try fixture.sql("""
            CREATE TRIGGER refuse_second_outcome BEFORE UPDATE ON jobs
            WHEN NEW.id = '\(ids[1])' AND NEW.state = 'succeeded'
            BEGIN SELECT RAISE(ABORT, 'refused by the test'); END
            """)
        // The second job's outcome is followed by its own stale progress (refused before it writes), so the
        // outcome's row write is held for it and goes out only after that refusal — where it fails.
        let stale = PendingEvent(jobID: ids[1], actor: workerName, leaseToken: jobs[1].token, expectedVersion: 2,
                                 payload: .progress(TransferProgress(bytesDone: 1, bytesTotal: 1)))
        let outcomes = try store.append([reportedStarted(jobs[0]), reportedSucceeded(jobs[0]),
                                         reportedStarted(jobs[1]), reportedSucceeded(jobs[1]), stale,
                                         reportedStarted(jobs[2]), reportedSucceeded(jobs[2])], now: 2_000)
        let texts = described(outcomes, ids)
        #expect(texts.count == 7)
        #expect(Array(texts.prefix(3)) == ["started v3", "succeeded v4", "started v3"], "\(texts)")
        #expect(texts.count > 3 && texts[3].contains("refused by the test"), "\(texts)")
        #expect(texts.count > 4 && !texts[4].hasPrefix("progress"), "\(texts)")
        #expect(Array(texts.dropFirst(5)) == ["started v3", "succeeded v4"], "\(texts)")
        #expect(try ids.map { id in try store.events(jobID: id).map(\.type) }
                == [[.submitted, .claimed, .started, .succeeded], [.submitted, .claimed, .started],
                    [.submitted, .claimed, .started, .succeeded]])
        let second = try #require(try store.job(ids[1]))
        #expect(second.state == .running && second.version == 3)
        let report = try store.replay(verify: true)
        // The refusing trigger is the test's own, which the verify names as one jobctl does not make.
        let problems = report.problems.filter { !$0.contains("'refuse_second_outcome'") }
        #expect(report.differences.isEmpty && problems.isEmpty, "\(report.differences) \(problems)")
    }
    /// The same commit through the held path (one savepoint for the batch, a job's `started` written with
    /// its next event) and with a savepoint per event (nothing held), for a batch that has no failure
    /// after a write: a dependency cascade inside a held run, a dependant's own event after its cancel, a
    /// refused outcome after its `started`, a retry scheduled, and a claim in the same commit of a job a
    /// success in the batch freed. Everything the commit writes — outcomes, event rows, job rows with their
    /// `finished_seq`, the claim — must be the same.
    @Test("no failure after a write: the held path writes exactly what a savepoint per event writes, claims included")
    func heldPathAgreesWithSavepointPerEvent() throws {
        func spec(_ key: String, after: String? = nil) -> JobSpec {
            var spec = uploadSpec(key: key)
            spec.after = after.map { [$0] }
            return spec
        }
        struct Written: Equatable {
            var outcomes: [String]
            var claimed: [String]
            var events: [[String]]
            var rows: [[String]]
        }
        func run(_ label: String, savepointPerEvent: Bool) throws -> Written {
            let fixture = try StoreFixture(label)
            defer { fixture.remove() }
            let store = try sqlite(fixture)
            let ids = try store.submit([spec("a"), spec("b", after: "a"), spec("c", after: "b"), spec("x"), spec("y", after: "x"),
                                        spec("d"), spec("e")], actor: "cli:test", now: 1_000).map(\.id)
            let claims = try store.claim(owner: workerName, queues: nil, limit: 10, leaseMs: 30_000, now: 1_000)
            try #require(claims.map(\.record.id) == [ids[0], ids[3], ids[5], ids[6]])
            let (a, x, d, e) = (claims[0], claims[1], claims[2], claims[3])
            let events = [
                reportedStarted(a),
                PendingEvent(jobID: a.record.id, actor: workerName, leaseToken: a.token,
                             payload: .failed(.none, error: StorageError(.objectNotFound, "gone", httpStatus: 404), reason: nil)),
                PendingEvent(jobID: ids[1], actor: "tool:test", payload: .resumeRequested(reason: "by a tool")),
                reportedStarted(x), reportedSucceeded(x),
                reportedStarted(d),
                PendingEvent(jobID: d.record.id, actor: workerName, leaseToken: d.token, expectedVersion: 2,
                             payload: .succeeded(TransferProgress(bytesDone: 1, bytesTotal: 1), result: JobResult(size: 1))),
                reportedStarted(e),
                PendingEvent(jobID: e.record.id, actor: workerName, leaseToken: e.token,
                             payload: .progress(TransferProgress(bytesDone: 1, bytesTotal: 2))),
                PendingEvent(jobID: e.record.id, actor: workerName, leaseToken: e.token,
                             payload: .attemptFailed(TransferProgress(bytesDone: 1, bytesTotal: 2),
                                                     error: StorageError(.unknown, "busy", httpStatus: 503, retryable: true),
                                                     retryAtMs: 5_000)),
            ]
            let request = ClaimRequest(owner: workerName, queues: nil, limit: 10, leaseMs: 30_000, now: 2_000)
            let outcome: AppendAndClaimOutcome
            if savepointPerEvent {
                outcome = try store.writeTransaction { (connection) throws(StoreError) -> AppendAndClaimOutcome in
                    let appended = try connection.appendEach(events, now: 2_000, savepointPerEvent: true) ?? []
                    let claimed = try connection.savepoint { () throws(StoreError) in try connection.claim(request) }
                    return AppendAndClaimOutcome(appended: appended, claimed: .success(claimed))
                }
            } else {
                outcome = try store.append(events, now: 2_000, thenClaim: request)
                #expect(try store.withConnection { connection in connection.batchesRunAgainWithSavepoints } == 0)
            }
            let report = try store.replay(verify: true)
            #expect(report.isConsistent, "\(report.differences) \(report.problems)")
            func named(_ text: String) -> String {
                var text = text
                for (index, id) in ids.enumerated() { text = text.replacingOccurrences(of: id, with: "job\(index)") }
                return text
            }
            let eventRows = try store.withConnection { (connection) throws(StoreError) in
                try connection.query("SELECT seq, job_id, version, type, at_ms, actor, lease, data FROM events ORDER BY seq") { row in
                    (0..<8).map { row.value($0).description }
                }
            }
            return Written(outcomes: described(outcome.appended, ids),
                           claimed: try outcome.claimed.get().map { named($0.record.id) + " token \($0.token)" },
                           events: eventRows.map { $0.map(named) },
                           rows: try fixture.allRows().map { $0.map(named) })
        }
        let held = try run("batch-held", savepointPerEvent: false)
        let perEvent = try run("batch-per-event", savepointPerEvent: true)
        // The batch did what it was built to: the cascade, the refusals, the retry and the freed job's claim.
        #expect(held.outcomes.count == 10 && held.outcomes[2].contains("cancelled") && held.outcomes[6].contains("version"),
                "\(held.outcomes)")
        #expect(held.claimed.count == 1 && held.claimed.first?.hasPrefix("job4 ") == true, "\(held.claimed)")
        #expect(held.outcomes == perEvent.outcomes)
        #expect(held.claimed == perEvent.claimed)
        #expect(held.events == perEvent.events)
        #expect(held.rows == perEvent.rows)
    }
}
