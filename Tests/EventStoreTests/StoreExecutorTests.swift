import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore
#if canImport(Glibc)
import Glibc
#endif

/// The store's one executor: every use of the connection on one thread, group commit, and a close that
/// is done when the store is released.
@Suite("The store's executor")
struct StoreExecutorTests {
    @Test("every use of the connection runs on one thread, whichever thread asks")
    func oneThread() async throws {
        let fixture = try StoreFixture("store-executor-thread")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let here = pthread_self()
        let first = try store.withConnection { _ in pthread_self() }
        let others = try await withThrowingTaskGroup(of: pthread_t.self) { group in
            for _ in 0..<4 {
                group.addTask { try store.withConnection { _ in pthread_self() } }
            }
            return try await group.reduce(into: [pthread_t]()) { $0.append($1) }
        }
        #expect(pthread_equal(first, here) == 0)
        #expect(others.allSatisfy { pthread_equal($0, first) != 0 })
    }

    @Test("a store method used inside run() runs on the executor at once instead of waiting for itself")
    func runReenters() async throws {
        let fixture = try StoreFixture("store-executor-reenter")
        defer { fixture.remove() }
        let id = try fixture.submit()
        let state = try await fixture.store.run { store in try store.job(id)?.state }
        #expect(state == .queued)
        let claimed = try await fixture.store.run { store in
            try store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 1_000, now: 2_000).map(\.record.id)
        }
        #expect(claimed == [id])
    }

    @Test("appends queued while the executor is busy are written in one group commit")
    func groupCommit() async throws {
        let fixture = try StoreFixture("store-executor-group")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let claims = try (0..<12).map { _ in try fixture.running() }
        // Hold the executor until every append is queued behind the call.
        let (entered, release) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let held = Task {
            try await store.run { _ in
                entered.signal()
                release.wait()
            }
        }
        // Wait (off the cooperative pool) until the executor is inside the call.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                entered.wait()
                continuation.resume()
            }
        }
        let before = store.groupCommitStats
        let appends = Task {
            try await withThrowingTaskGroup(of: Result<JobEvent, StoreError>.self) { group in
                for claim in claims {
                    group.addTask {
                        await store.appendGrouped(PendingEvent(jobID: claim.record.id, actor: workerName,
                                                               leaseToken: claim.token,
                                                               payload: .progress(TransferProgress(bytesDone: 1))))
                    }
                }
                return try await group.reduce(into: [Result<JobEvent, StoreError>]()) { $0.append($1) }
            }
        }
        while store.queuedCalls < claims.count { await Task.yield() }
        release.signal()
        try await held.value
        let outcomes = try await appends.value
        #expect(outcomes.count == claims.count && outcomes.allSatisfy { (try? $0.get()) != nil })
        let after = store.groupCommitStats
        #expect(after.commits - before.commits == 1 && after.events - before.events == claims.count, "\(before) → \(after)")
        // The one commit of 12 events is counted at or below 16 events, not at or below 8.
        #expect(after.commits(holdingAtMost: 16) - before.commits(holdingAtMost: 16) == 1)
        #expect(after.commits(holdingAtMost: 8) == before.commits(holdingAtMost: 8))
    }

    @Test("releasing the store ends its executor and closes the database before release returns")
    func closesOnRelease() throws {
        let directory = try TemporaryDirectory("store-executor-close")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        do {
            let store = try EventStore(path: path)
            _ = try store.submit([uploadSpec()], actor: "cli:test", now: 1_000)
            #expect(FileManager.default.fileExists(atPath: path + "-wal"))
        }
        // The last connection closed, checkpointed its WAL into the main file and removed the -wal file.
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
    }
}
