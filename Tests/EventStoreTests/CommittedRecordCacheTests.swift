import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
@testable import EventStore
import TestSupport

/// A worker's appends start from the row as its connection last committed it, and only while the row
/// is still at that version: what another connection writes in between is read, refused or kept
/// exactly as without the cache, and the log still folds to the projection.
@Suite("Appends after a committed row", .onTestThreads)
struct CommittedRecordCacheTests {
    static let owner = "worker:test"

    private func started(_ claim: ClaimedJob) -> PendingEvent {
        PendingEvent(jobID: claim.record.id, actor: Self.owner, leaseToken: claim.token,
                     payload: .started(TransferProgress(attempt: 1, bytesDone: 0)))
    }

    private func succeeded(_ claim: ClaimedJob) -> PendingEvent {
        PendingEvent(jobID: claim.record.id, actor: Self.owner, leaseToken: claim.token,
                     payload: .succeeded(TransferProgress(attempt: 1, bytesDone: 5, bytesTotal: 5),
                                         result: JobResult(size: 5, data: Data("hello".utf8))))
    }

    @Test("claim, started and succeeded in three commits write the rows the fold gives, reading each row once")
    func aWorkersAppendsUseTheCommittedRow() throws {
        let fixture = try StoreFixture("cache-appends")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let ids = try store.submit((0..<3).map { _ in memorySpec() }, actor: "cli:test", now: 1_000).map(\.id)
        let claims = try store.claim(owner: Self.owner, queues: nil, limit: 3, leaseMs: 30_000, now: 2_000)
        #expect(claims.map(\.record.id) == ids)
        #expect(try store.withConnection { $0.committedRecords.usage } == (committed: 3, noted: 0))
        let first = try store.append(claims.map(started), now: 3_000)
        #expect(first.allSatisfy { (try? $0.get()) != nil })
        let second = try store.append(claims.map(succeeded), now: 4_000)
        #expect(second.allSatisfy { (try? $0.get())?.type == .succeeded })
        // Ended jobs leave the cache.
        #expect(try store.withConnection { $0.committedRecords.usage } == (committed: 0, noted: 0))
        for id in ids {
            #expect(try store.events(jobID: id).map(\.type) == [.submitted, .claimed, .started, .succeeded])
            #expect(try store.job(id)?.state == .succeeded)
        }
        let report = try store.replay(verify: true)
        #expect(report.differences.isEmpty && report.problems.isEmpty, "\(report)")
    }

    @Test("a job rescued by another connection refuses the worker's next append (fencing), cache or not")
    func aRescueByAnotherConnectionIsSeen() throws {
        let fixture = try StoreFixture("cache-rescue")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let id = try fixture.submit(memorySpec(), now: 1_000)
        let claim = try #require(try store.claim(owner: Self.owner, queues: nil, limit: 1, leaseMs: 1_000, now: 2_000).first)
        #expect(try store.withConnection { $0.committedRecords.candidate(id) }?.version == claim.record.version)

        let other = try EventStore(path: fixture.path)
        #expect(try other.rescueExpired(now: 10_000, actor: "worker:other").map(\.id) == [id])
        #expect(try other.job(id)?.state == .queued)

        let outcome = try store.append([started(claim)], now: 10_001)
        guard case .failure(.staleLease) = outcome[0] else {
            Issue.record("the append after the rescue was not refused as stale: \(outcome[0])")
            return
        }
        #expect(try store.job(id)?.state == .queued)
        #expect(try store.events(jobID: id).map(\.type) == [.submitted, .claimed, .leaseExpired])
        let report = try store.replay(verify: true)
        #expect(report.differences.isEmpty && report.problems.isEmpty, "\(report)")
    }

    @Test("a pause requested through another connection is kept in the row the worker's next append writes")
    func aChangeByAnotherConnectionIsKept() throws {
        let fixture = try StoreFixture("cache-pause")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let id = try fixture.submit(memorySpec(), now: 1_000)
        let claim = try #require(try store.claim(owner: Self.owner, queues: nil, limit: 1, leaseMs: 30_000, now: 2_000).first)

        let other = try EventStore(path: fixture.path)
        _ = try other.control(.pause, id: id, actor: "cli:test", now: 2_500)
        #expect(try other.job(id)?.pauseRequested == true)

        let outcome = try store.append([started(claim)], now: 3_000)
        #expect((try? outcome[0].get())?.version == claim.record.version + 2)
        let row = try #require(try store.job(id))
        #expect(row.pauseRequested && row.state == .running && row.version == claim.record.version + 2)
        let report = try store.replay(verify: true)
        #expect(report.differences.isEmpty && report.problems.isEmpty, "\(report)")
    }

    @Test("records enter the cache only when their transaction commits")
    func onlyCommittedRecordsAreKept() throws {
        let fixture = try StoreFixture("cache-rollback")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let id = try fixture.submit(memorySpec(), now: 1_000)
        // A claim whose transaction fails after the claim wrote (and noted) the row: nothing is kept,
        // and the row is as before the claim.
        struct Abort: Error {}
        let failed = Result { () throws(StoreError) -> Void in
            _ = try store.writeTransaction { (connection) throws(StoreError) -> Void in
                let claimed = try connection.claim(ClaimRequest(owner: Self.owner, queues: nil, limit: 1, leaseMs: 30_000, now: 2_000))
                #expect(claimed.count == 1)
                #expect(connection.committedRecords.usage.noted == 1)
                throw StoreError.invalidControl("abort the transaction")
            }
        }
        #expect((try? failed.get()) == nil)
        #expect(try store.withConnection { $0.committedRecords.usage } == (committed: 0, noted: 0))
        #expect(try store.job(id)?.state == .queued)

        let claim = try #require(try store.claim(owner: Self.owner, queues: nil, limit: 1, leaseMs: 30_000, now: 3_000).first)
        #expect(try store.withConnection { $0.committedRecords.candidate(id) } == claim.record)
    }

    @Test("the cache drops ended jobs, empties itself when full, and matches ids byte for byte")
    func cacheBounds() throws {
        let cache = CommittedRecordCache(capacity: 2)
        let fixture = try StoreFixture("cache-bounds")
        defer { fixture.remove() }
        let claims = try (0..<3).map { _ in try fixture.running(memorySpec()) }
        cache.note(claims[0].record)
        cache.note(claims[1].record)
        cache.commitNoted()
        #expect(cache.usage == (committed: 2, noted: 0))
        cache.note(claims[2].record)
        cache.commitNoted()
        #expect(cache.usage == (committed: 1, noted: 0))
        #expect(cache.candidate(claims[2].record.id) == claims[2].record)
        var ended = claims[2].record
        ended.state = .succeeded
        cache.note(ended)
        cache.discardNoted()
        #expect(cache.candidate(claims[2].record.id) == claims[2].record)
        cache.note(ended)
        cache.commitNoted()
        #expect(cache.candidate(claims[2].record.id) == nil)

        var odd = claims[0].record
        odd.id = "e\u{301}"
        cache.note(odd)
        cache.commitNoted()
        #expect(cache.candidate("e\u{301}") != nil)
        #expect(cache.candidate("\u{E9}") == nil)  // equal as Swift strings, another id
    }
}
