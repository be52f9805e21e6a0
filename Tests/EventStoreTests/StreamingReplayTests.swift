import Foundation
import JobModel
import Testing
@testable import EventStore
import TestSupport

/// `replay --verify` reads the log job by job (events in job id, version order) and forgets each job
/// once compared; `replay` without `--verify` still folds the whole log in log order before it
/// rewrites. Both must report the same thing about the same log.
@Suite("Verifying the log job by job", .onTestThreads)
struct StreamingReplayTests {
    static let otherColumns = "seq, kind, state, queue, priority, run_after_ms, attempts, max_attempts, lease_owner, lease_token, "
        + "bytes_done, bytes_total, resume_point, error, pause_requested, cancel_requested, version, "
        + "created_at_ms, updated_at_ms, started_at_ms, finished_at_ms, batch"

    @Test("verify job by job reports what the whole-log fold reports: every difference, sorted by job id", arguments: Engine.allCases)
    func sameReportAsTheWholeFold(engine: Engine) throws {
        let fixture = try StoreFixture("store-replay-stream", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let ids = try ReplayTests.populate(fixture)
        #expect(try store.replay(verify: true).isConsistent)

        // Several faults behind the store's back: two columns of one row, one of another, a row
        // removed, and a row whose job has no event at all (ids sort before and after the real ones).
        let resumed = try #require(ids["resumed"]), failed = try #require(ids["failed"]), queued = try #require(ids["queued"])
        try fixture.sql("UPDATE jobs SET bytes_done = 999999, attempts = 42 WHERE id = ?", [.text(resumed)])
        try fixture.sql("UPDATE jobs SET state = 'succeeded' WHERE id = ?", [.text(failed)])
        try fixture.sql("DELETE FROM jobs WHERE id = ?", [.text(queued)])
        for ghost in ["00000000000000000000GHOST0", "ZZZZZZZZZZZZZZZZZZZZGHOST9"] {
            try fixture.sql("INSERT INTO jobs (id, \(Self.otherColumns)) SELECT ?, \(Self.otherColumns) FROM jobs WHERE id = ?",
                            [.text(ghost), .text(resumed)])
        }

        let streamed = try store.replay(verify: true)
        let whole = try store.replay(verify: false)  // folds the whole log, compares, then rewrites
        #expect(whole.rewritten && !streamed.rewritten)
        #expect(streamed.differences == whole.differences)
        #expect(streamed.problems == whole.problems)
        #expect(streamed.eventsRead == whole.eventsRead && streamed.jobsRebuilt == whole.jobsRebuilt)
        #expect(streamed.differences.map(\.jobID) == streamed.differences.map(\.jobID).sorted())
        #expect(streamed.differences.count == 6, "\(streamed.differences)")
        #expect(streamed.differences.contains(ReplayDifference(jobID: "00000000000000000000GHOST0", column: "(row)",
                                                               stored: "present", rebuilt: nil)))
        #expect(streamed.differences.contains(ReplayDifference(jobID: queued, column: "(row)", stored: nil, rebuilt: "present")))
        // The rewrite repaired what it could (the ghosts' rows are gone, the rest rebuilt).
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// Two events of one job with their versions swapped (a log edited behind the store's back, its
    /// update trigger dropped): read in version order they folded into a consistent job, and `history`
    /// showed `started` before `claimed`. A job's versions must follow the log's order.
    @Test("versions that run against the log's order are a problem of the log")
    func versionsOutOfLogOrder() throws {
        let fixture = try StoreFixture("store-replay-order", engine: .sqlite)
        defer { fixture.remove() }
        let store = fixture.store
        let ids = try ReplayTests.populate(fixture)
        let id = try #require(ids["resumed"])
        #expect(try store.replay(verify: true).isConsistent)
        try fixture.sql("DROP TRIGGER events_refuse_update")
        try fixture.sql("UPDATE events SET version = 1000 WHERE job_id = ? AND version = 2", [.text(id)])
        try fixture.sql("UPDATE events SET version = 2 WHERE job_id = ? AND version = 3", [.text(id)])
        try fixture.sql("UPDATE events SET version = 3 WHERE job_id = ? AND version = 1000", [.text(id)])
        let report = try store.replay(verify: true)
        #expect(!report.isConsistent)
        #expect(report.problems.contains { $0.contains(id) && $0.contains("comes before its previous version") }, "\(report.problems)")
    }

    @Test("a job waiting for one that has not succeeded is checked against its stored wait, in any id order", arguments: Engine.allCases)
    func dependencyWaits(engine: Engine) throws {
        let fixture = try StoreFixture("store-replay-stream-deps", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let first = try fixture.submit()
        var waiting = uploadSpec()
        waiting.after = [first]
        let second = try fixture.submit(waiting)
        #expect(try store.replay(verify: true).isConsistent)
        try fixture.sql("DELETE FROM job_dependencies WHERE job = ?", [.text(second)])
        let streamed = try store.replay(verify: true)
        #expect(streamed.differences == [ReplayDifference(jobID: second, column: "after", stored: "no wait", rebuilt: "waits for \(first)")])
        #expect(try store.replay(verify: false).differences == streamed.differences)
        #expect(try store.replay(verify: true).isConsistent)
    }
}
