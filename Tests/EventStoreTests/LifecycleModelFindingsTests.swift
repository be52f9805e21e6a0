import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// What the randomized lifecycle model test (`LifecycleModelTests`) found, each pinned by a test of its own.
@Suite("Lifecycle model findings", .onTestThreads)
struct LifecycleModelFindingTests {
    /// A group commit in which one job's end cancels a dependant that an earlier event of the same
    /// commit changed: the dependant's next event in the commit is decided on the job as it is now
    /// (cancelled), not as the earlier event left it.
    @Test(arguments: Engine.allCases)
    func aLaterEventOfADependantCancelledInTheSameCommitIsDecidedOnItsCancel(engine: Engine) throws {
        let fixture = try StoreFixture("batch-cascade", engine: engine)
        defer { fixture.remove() }
        var dependantSpec = uploadSpec(key: "b")
        dependantSpec.after = ["a"]
        let ids = try fixture.store.submit([uploadSpec(key: "a"), dependantSpec], actor: "cli:test", now: 1_000).map(\.id)
        let claim = try #require(try fixture.store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 30_000, now: 2_000).first)
        #expect(claim.record.id == ids[0])
        let outcomes = try fixture.store.append([
            PendingEvent(jobID: ids[1], actor: "tool:test", payload: .paused(.none, reason: "by a tool")),
            PendingEvent(jobID: ids[0], actor: workerName, leaseToken: claim.token,
                         payload: .failed(.none, error: StorageError(.objectNotFound, "gone", httpStatus: 404), reason: nil)),
            PendingEvent(jobID: ids[1], actor: "tool:test", payload: .resumeRequested(reason: "by a tool")),
        ], now: 3_000)
        #expect(outcomes.map { (try? $0.get())?.type } == [.paused, .failed, nil])
        #expect(throws: StoreError.invalidTransition(jobID: ids[1], state: .cancelled, event: .resumeRequested)) {
            try outcomes[2].get()
        }
        #expect(try fixture.store.job(ids[1])?.state == .cancelled)
        #expect(try fixture.store.events(jobID: ids[1]).map(\.type) == [.submitted, .paused, .cancelled])
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }
}

