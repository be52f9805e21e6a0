import Foundation
import JobModel
import Testing
@testable import EventStore
import TestSupport

/// The requests a running job can hold when its worker's outcome arrives.
enum PendingRequests: String, CaseIterable, Sendable {
    case none
    case pause
    case cancel
    /// `pause`, then `cancel` (the case: pause, then cancel 50 ms later).
    case pauseThenCancel
    /// `cancel`, then `pause` (refused: the job is being cancelled).
    case cancelThenPause
    /// `pause`, then `resume`: the pause is withdrawn.
    case pauseThenResume
    /// `pause`, `resume` (withdrawn), then `cancel`.
    case resumeThenCancel
}

/// How a running attempt ends: the worker's own events, or a rescue after its lease expired.
enum AttemptOutcome: String, CaseIterable, Sendable {
    case paused, released, attemptFailed, leaseExpired, leaseExpiredLastAttempt, succeeded, failed, cancelled
}

/// Pending request × worker outcome: what the store makes of the pair, in the order the issue's
/// reproduction has them (the requests are acknowledged first, the outcome arrives later).
@Suite("Requests pending when an attempt ends", .onTestThreads)
struct SettlementTests {
    /// The job's final state and the events appended from the outcome on.
    static func expected(_ requests: PendingRequests, _ outcome: AttemptOutcome) -> (JobState, [EventType]) {
        let cancel = [.cancel, .pauseThenCancel, .cancelThenPause, .resumeThenCancel].contains(requests)
        let pause = requests == .pause
        switch outcome {
        // A final outcome wins over a request that came too late.
        case .succeeded: return (.succeeded, [.succeeded])
        case .failed: return (.failed, [.failed])
        case .cancelled: return (.cancelled, [.cancelled])
        case .paused, .released, .attemptFailed, .leaseExpired:
            let type: EventType = switch outcome {
            case .paused: .paused
            case .released: .released
            case .attemptFailed: .attemptFailed
            default: .leaseExpired
            }
            if cancel { return (.cancelled, [type, .cancelled]) }
            if pause { return (.paused, outcome == .paused ? [.paused] : [type, .paused]) }
            // A `paused` nobody asked for any more: the pause was withdrawn, so the job runs again.
            if outcome == .paused { return (.queued, [.paused, .resumeRequested]) }
            return (.queued, [type])
        case .leaseExpiredLastAttempt:
            // A crash on the last attempt fails the job — unless it was being cancelled, or paused: the
            // pause, acknowledged, is honoured at once (its `paused` gives the dead run's charge back).
            if cancel { return (.cancelled, [.leaseExpired, .cancelled]) }
            return pause ? (.paused, [.paused]) : (.failed, [.failed])
        }
    }

    @Test("every pending request × outcome", arguments: PendingRequests.allCases, AttemptOutcome.allCases)
    func table(requests: PendingRequests, outcome: AttemptOutcome) throws {
        let fixture = try StoreFixture("store-settle")
        defer { fixture.remove() }
        let store = fixture.store
        let maxAttempts = outcome == .leaseExpiredLastAttempt ? 1 : 3
        let claim = try fixture.running(uploadSpec(maxAttempts: maxAttempts), now: 1_000, leaseMs: 1_000)
        let id = claim.record.id
        switch requests {
        case .none:
            break
        case .pause:
            _ = try store.requestPause(id: id, actor: "cli:test", now: 1_100)
        case .cancel:
            _ = try store.requestCancel(id: id, actor: "cli:test", now: 1_100)
        case .pauseThenCancel:
            _ = try store.requestPause(id: id, actor: "cli:test", now: 1_100)
            _ = try store.requestCancel(id: id, actor: "cli:test", now: 1_150)
        case .cancelThenPause:
            _ = try store.requestCancel(id: id, actor: "cli:test", now: 1_100)
            #expect(throws: StoreError.self) { _ = try store.requestPause(id: id, actor: "cli:test", now: 1_150) }
        case .pauseThenResume:
            _ = try store.requestPause(id: id, actor: "cli:test", now: 1_100)
            _ = try store.requestResume(id: id, actor: "cli:test", now: 1_150)
        case .resumeThenCancel:
            _ = try store.requestPause(id: id, actor: "cli:test", now: 1_100)
            _ = try store.requestResume(id: id, actor: "cli:test", now: 1_150)
            _ = try store.requestCancel(id: id, actor: "cli:test", now: 1_180)
        }
        let before = try #require(try store.job(id))

        func worker(_ type: EventType, _ data: EventData = EventData()) throws {
            try fixture.append(PendingEvent(jobID: id, type: type, actor: workerName, leaseToken: claim.token, data: data),
                               now: 2_000)
        }
        let point = ResumePoint.upload(sessionURI: "http://127.0.0.1:1/s", confirmedOffset: 256, total: 1024)
        switch outcome {
        case .paused: try worker(.paused, EventData(resumePoint: point))
        case .released: try worker(.released, EventData(resumePoint: point))
        case .attemptFailed:
            try worker(.attemptFailed, EventData(error: StorageError(.unknown, "HTTP 503", httpStatus: 503, retryable: true),
                                                 retryAtMs: 9_000))
        case .leaseExpired, .leaseExpiredLastAttempt: #expect(try store.rescueExpired(now: 5_000, actor: "w2").map(\.id) == [id])
        case .succeeded: try worker(.succeeded, EventData(result: JobResult(size: 1024)))
        case .failed: try worker(.failed, EventData(error: StorageError(.unauthorized, "403", httpStatus: 403)))
        case .cancelled: try worker(.cancelled, EventData(error: StorageError(.cancelled, "cancelled")))
        }

        let (state, tail) = Self.expected(requests, outcome)
        let record = try #require(try store.job(id))
        let events = try store.events(jobID: id)
        #expect(record.state == state)
        #expect(Array(events.map(\.type).dropFirst(before.version)) == tail)
        // Whatever happened, no request is left pending on a job that is not running, and no lease.
        #expect(!record.pauseRequested && !record.cancelRequested)
        #expect(record.leaseOwner == nil && record.leaseToken == nil)
        #expect(try store.heartbeat(owner: workerName, leases: [id: claim.token], leaseMs: 1_000, now: 6_000) == [id])
        if state == .cancelled { #expect(record.error?.code == .cancelled) }
        // Both events of a settled pair share one transaction: the same time, consecutive versions.
        if tail.count == 2, let last = events.last { #expect(last.atMs == events[events.count - 2].atMs) }
        // Nothing waits for a claim to be honoured: a claim now finds only a job that should run again.
        let claimed = try store.claim(owner: "w3", queues: nil, limit: 1, leaseMs: 1_000, now: 10_000)
        #expect(claimed.map(\.record.id) == (state == .queued ? [id] : []))
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("a cancel on a job the worker already paused ends it at once; a pause after a cancel is refused", arguments: Engine.allCases)
    func requestsAfterTheOutcome(engine: Engine) throws {
        let fixture = try StoreFixture("store-settle-after", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let claim = try fixture.running()
        let id = claim.record.id
        _ = try store.requestPause(id: id, actor: "cli:test", now: 1_100)
        try fixture.append(PendingEvent(jobID: id, type: .paused, actor: workerName, leaseToken: claim.token), now: 1_200)
        let cancelled = try store.requestCancel(id: id, actor: "cli:test", now: 1_300)
        #expect(cancelled.record.state == .cancelled && !cancelled.isRepeat)
        #expect(try store.events(jobID: id).map(\.type).suffix(3) == [.pauseRequested, .paused, .cancelled])
        #expect(throws: StoreError.self) { _ = try store.requestPause(id: id, actor: "cli:test", now: 1_400) }
        #expect(try store.requestCancel(id: id, actor: "cli:test", now: 1_500).isRepeat)
    }

    @Test("a request a database from an older jobctl left on a queued job is honoured at the claim")
    func pendingAtClaimTime() throws {
        let fixture = try StoreFixture("store-settle-claim")
        defer { fixture.remove() }
        let store = fixture.store
        let pausing = try fixture.submit()
        let cancelling = try fixture.submit()
        let both = try fixture.submit()
        // Rows like these were written by the old rules (a request kept across a rescue, or one the
        // migration to schema 2 has not settled yet); made by hand here.
        try fixture.sql("UPDATE jobs SET pause_requested = 1 WHERE id IN (?, ?)", [.text(pausing), .text(both)])
        try fixture.sql("UPDATE jobs SET cancel_requested = 1 WHERE id IN (?, ?)", [.text(cancelling), .text(both)])
        #expect(try store.claim(owner: workerName, queues: nil, limit: 5, leaseMs: 1_000, now: 2_000).isEmpty)
        #expect(try store.job(pausing)?.state == .paused)
        #expect(try store.job(cancelling)?.state == .cancelled)
        #expect(try store.job(both)?.state == .cancelled)
        for id in [pausing, cancelling, both] {
            let record = try #require(try store.job(id))
            #expect(!record.pauseRequested && !record.cancelRequested)
        }
    }
}
