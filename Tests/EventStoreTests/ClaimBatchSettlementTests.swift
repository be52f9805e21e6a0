import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// A claim decides on the rows its batch read at the start. A request an older jobctl left on a queued
/// job is honoured at the claim (`SettlementTests`), and a cancel so honoured cancels what waits for
/// the job through `after:`, inside the same batch: no job of the batch may then be decided on the row
/// read before that cancel.
@Suite("A claim batch that honours a request", .onTestThreads)
struct ClaimBatchSettlementTests {
    @Test("a cancel honoured at the claim cancels the jobs waiting for it, which the same batch does not claim", arguments: Engine.allCases)
    func cancelHonouredInBatch(engine: Engine) throws {
        let fixture = try StoreFixture("claim-batch-settle", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        // First in claim order: a job holding a cancel request (as an older jobctl left it; made by hand).
        var first = uploadSpec()
        first.priority = 3
        let pending = try fixture.submit(first)
        // Next in claim order: a job waiting for it, and one waiting for that one.
        var waiting = uploadSpec()
        waiting.priority = 2
        waiting.after = [pending]
        let dependant = try fixture.submit(waiting)
        waiting.after = [dependant]
        let second = try fixture.submit(waiting)
        var plain = uploadSpec()
        plain.priority = 1
        let free = try fixture.submit(plain)
        try fixture.sql("UPDATE jobs SET cancel_requested = TRUE WHERE id = ?", [.text(pending)])

        let claimed = try store.claim(owner: workerName, queues: nil, limit: 4, leaseMs: 30_000, now: 2_000)
        #expect(claimed.map(\.record.id) == [free])
        #expect(try store.job(pending)?.state == .cancelled)
        for id in [dependant, second] {
            let record = try #require(try store.job(id))
            #expect(record.state == .cancelled && record.attempts == 0 && record.leaseToken == nil)
            // Submitted, then cancelled because of its dependency: never claimed.
            let events = try store.events(jobID: id)
            #expect(events.map(\.type) == [.submitted, .cancelled])
            #expect(JobRecord.folding(events) == record)
        }
        #expect(try store.replay(verify: true).isConsistent)
        // Nothing is left to claim.
        #expect(try store.claim(owner: workerName, queues: nil, limit: 4, leaseMs: 30_000, now: 3_000).isEmpty)
    }

    @Test("a pause honoured at the claim leaves the jobs waiting for it waiting, unclaimed", arguments: Engine.allCases)
    func pauseHonouredInBatch(engine: Engine) throws {
        let fixture = try StoreFixture("claim-batch-pause", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        var first = uploadSpec()
        first.priority = 3
        let pending = try fixture.submit(first)
        var waiting = uploadSpec()
        waiting.priority = 2
        waiting.after = [pending]
        let dependant = try fixture.submit(waiting)
        let free = try fixture.submit()
        try fixture.sql("UPDATE jobs SET pause_requested = TRUE WHERE id = ?", [.text(pending)])

        let claimed = try store.claim(owner: workerName, queues: nil, limit: 3, leaseMs: 30_000, now: 2_000)
        #expect(claimed.map(\.record.id) == [free])
        #expect(try store.job(pending)?.state == .paused)
        let record = try #require(try store.job(dependant))
        #expect(record.state == .queued && record.version == 1)
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies WHERE job = ?", [.text(dependant)]) == "1")
        #expect(try store.replay(verify: true).isConsistent)
    }
}
