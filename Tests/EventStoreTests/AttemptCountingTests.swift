import Foundation
import JobModel
import Testing
@testable import EventStore
import TestSupport

/// Which runs count against `max_attempts`, as the claim numbers them and the rescue decides.
@Suite("Counting attempts", .onTestThreads)
struct AttemptCountingTests {
    /// Claims the job (the only one queued) and returns the claim.
    static func claim(_ fixture: StoreFixture, now: Int64) throws -> ClaimedJob {
        let claims = try fixture.store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 1_000, now: now)
        return try #require(claims.first)
    }

    /// Pause → paused → resume, then a graceful release: none of these runs count.
    static func pauseTwiceAndRelease(_ fixture: StoreFixture, _ id: String, from first: ClaimedJob) throws -> ClaimedJob {
        let store = fixture.store
        var claim = first
        var now: Int64 = 2_000
        for _ in 0..<2 {
            _ = try store.requestPause(id: id, actor: "cli:test", now: now)
            try fixture.append(PendingEvent(jobID: id, type: .paused, actor: workerName, leaseToken: claim.token), now: now + 10)
            _ = try store.requestResume(id: id, actor: "cli:test", now: now + 20)
            claim = try Self.claim(fixture, now: now + 30)
            #expect(claim.record.attempts == 1)
            now += 1_000
        }
        try fixture.append(PendingEvent(jobID: id, type: .released, actor: workerName, leaseToken: claim.token,
                                        data: EventData(reason: "SIGTERM")), now: now)
        claim = try Self.claim(fixture, now: now + 10)
        #expect(claim.record.attempts == 1)
        return claim
    }

    @Test("max_attempts 1: two pause/resume cycles and a release still leave the one attempt", arguments: Engine.allCases)
    func pausesAndReleasesAreFree(engine: Engine) throws {
        let fixture = try StoreFixture("store-attempts-free", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit(uploadSpec(maxAttempts: 1))
        let first = try Self.claim(fixture, now: 1_000)
        #expect(first.record.attempts == 1)
        let last = try Self.pauseTwiceAndRelease(fixture, id, from: first)
        try fixture.append(PendingEvent(jobID: id, type: .succeeded, actor: workerName, leaseToken: last.token,
                                        data: EventData(result: JobResult(size: 1))), now: 9_000)
        let record = try #require(try fixture.store.job(id))
        #expect(record.state == .succeeded && record.attempts == 1 && record.maxAttempts == 1)
        // Every claim of the job numbered its attempt 1.
        let numbers = try fixture.store.events(jobID: id).filter { $0.type == .claimed }.map(\.data.attempt)
        #expect(numbers == [1, 1, 1, 1])
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    @Test("max_attempts 2: after pauses and a release, a crash is the first charged attempt, not the last", arguments: Engine.allCases)
    func aCrashAfterFreeRunsStillLeavesOne(engine: Engine) throws {
        let fixture = try StoreFixture("store-attempts-crash", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit(uploadSpec(maxAttempts: 2))
        let last = try Self.pauseTwiceAndRelease(fixture, id, from: try Self.claim(fixture, now: 1_000))
        // The worker dies: its lease expires. One attempt charged, one left: back to the queue.
        #expect(try fixture.store.rescueExpired(now: last.record.updatedAtMs + 5_000, actor: "w2").map(\.id) == [id])
        #expect(try fixture.store.job(id)?.state == .queued)
        let retry = try Self.claim(fixture, now: 20_000)
        #expect(retry.record.attempts == 2)
        // The second crash uses the last attempt.
        #expect(try fixture.store.rescueExpired(now: 30_000, actor: "w2").map(\.id) == [id])
        let record = try #require(try fixture.store.job(id))
        #expect(record.state == .failed && record.error?.code == .retryLimitExceeded)
        #expect(record.error?.message.contains("attempt 2 of 2") == true, "\(String(describing: record.error))")
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }

    /// The failure of the last attempt is final. A client's `attempt_failed` for it (our worker writes
    /// `failed` there) was taken: the job went back to the queue, was claimed as attempt 3 of 2, and only
    /// a crash of that run (its rescue) failed it. Now it is refused, nothing is recorded, the job stays
    /// running under the reporter's lease, and nothing can claim it; left so, its rescue fails it.
    @Test("max_attempts 2: an attempt_failed of the last attempt is refused; no third attempt", arguments: Engine.allCases)
    func theLastAttemptCannotFailRetryable(engine: Engine) throws {
        let fixture = try StoreFixture("store-attempts-last", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit(uploadSpec(maxAttempts: 2))
        let busy = StorageError(.unknown, "HTTP 503: the server is busy", httpStatus: 503, retryable: true)
        // The first attempt's failure leaves one: back to the queue, runnable at 2,000.
        let first = try Self.claim(fixture, now: 1_000)
        try fixture.append(PendingEvent(jobID: id, type: .attemptFailed, actor: workerName, leaseToken: first.token,
                                        data: EventData(attempt: 1, error: busy, retryAtMs: 2_000)), now: 1_500)
        let last = try Self.claim(fixture, now: 2_000)
        #expect(last.record.attempts == 2)
        let refusal = #expect(throws: StoreError.self) {
            try fixture.append(PendingEvent(jobID: id, type: .attemptFailed, actor: workerName, leaseToken: last.token,
                                            data: EventData(attempt: 2, error: busy, retryAtMs: 3_000)), now: 2_500)
        }
        #expect(refusal.map { "\($0)" }?.contains("attempt 2 of 2 was its last (max_attempts), so its failure is final: "
                                                    + "report it as 'failed'") == true, "\(String(describing: refusal))")
        let running = try #require(try fixture.store.job(id))
        #expect(running.state == .running && running.attempts == 2 && running.version == last.record.version)
        #expect(try fixture.store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 1_000, now: 3_500).isEmpty,
                "no third attempt")
        // Its reporter gives up: the lease runs out, and the rescue of a last attempt fails the job.
        #expect(try fixture.store.rescueExpired(now: 10_000, actor: "w2").map(\.id) == [id])
        let record = try #require(try fixture.store.job(id))
        #expect(record.state == .failed && record.error?.code == .retryLimitExceeded && record.attempts == 2,
                "\(record.state) \(String(describing: record.error)) attempt \(record.attempts)")
        #expect(try fixture.store.events(jobID: id).filter { $0.type == .claimed }.count == 2)
        #expect(try fixture.store.replay(verify: true).isConsistent)
    }
}
