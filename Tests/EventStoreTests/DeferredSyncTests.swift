import Foundation
import JobModel
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import EventStore

/// A group commit's sync runs after its COMMIT, on a thread of its own: the executor goes on with the
/// next transaction meanwhile, one sync covers every commit made while the previous one ran, and no
/// waiter hears of its event before the sync that covers it has returned.
@Suite("Syncing after COMMIT", .onTestThreads)
struct DeferredSyncTests {
    /// A durability barrier the test holds shut, counting its runs.
    private final class Gate: Sendable {
        private let opened = DispatchSemaphore(value: 0)
        private let runs = Mutex(0)
        private let failure: StoreError?

        init(failing failure: StoreError? = nil) { self.failure = failure }

        /// The barrier: its first run waits until `open()`.
        func barrier() throws(StoreError) {
            let run = runs.withLock { runs in
                runs += 1
                return runs
            }
            if run == 1 {
                opened.wait()
                opened.signal()
            }
            if let failure { throw failure }
        }

        func open() { opened.signal() }
        var count: Int { runs.withLock { $0 } }
    }

    /// What the executor's flush was handed, in order.
    private final class Flushed: Sendable {
        private let batches = Mutex<[[String]]>([])
        func record(_ events: [PendingEvent]) { batches.withLock { $0.append(events.map(\.jobID)) } }
        var count: Int { batches.withLock { $0.count } }
    }

    /// The jobs whose waiters have resumed, in order.
    private final class Resumed: Sendable {
        private let ids = Mutex<[String]>([])
        func record(_ id: String) { ids.withLock { $0.append(id) } }
        var all: [String] { ids.withLock { $0 } }
    }

    private func executor(_ gate: Gate, _ flushed: Flushed) throws -> StoreExecutor {
        try StoreExecutor(name: "deferred-sync-test", durabilityBarrier: { () throws(StoreError) in try gate.barrier() }) { events, _ in
            flushed.record(events)
            return writtenAsIs(events)
        }
    }

    @Test("a waiter resumes only after the sync; commits made during a sync share the next one")
    func waitersResumeAfterTheSync() async throws {
        let gate = Gate()
        let flushed = Flushed()
        let executor = try executor(gate, flushed)
        defer { executor.stop() }
        let resumed = Resumed()
        let first = Task {
            let result = await executor.append(progressReport("a"))
            resumed.record("a")
            return result
        }
        // The first commit is made and its sync has begun (and is held shut).
        await pollUntil { flushed.count == 1 && gate.count == 1 }
        // Two more commits while that sync runs: the executor is not waiting for it.
        var others: [Task<Result<JobEvent, StoreError>, Never>] = []
        for (index, id) in ["b", "c"].enumerated() {
            others.append(Task {
                let result = await executor.append(progressReport(id))
                resumed.record(id)
                return result
            })
            await pollUntil { flushed.count == index + 2 }
        }
        #expect(flushed.count == 3)
        try await Task.sleep(for: .milliseconds(50))
        #expect(resumed.all.isEmpty, "nothing is reported written before its sync returns")
        gate.open()
        #expect(try await first.value.get().jobID == "a")
        for other in others { _ = try await other.value.get() }
        #expect(Set(resumed.all) == ["a", "b", "c"])
        let stats = executor.groupCommitStats
        #expect(stats.commits == 3)
        #expect(stats.deferredSyncs == 2, "the two commits made during the first sync share the second: \(stats)")
        #expect(gate.count == 2)
    }

    @Test("a sync that fails reaches every waiter of the commits it was for")
    func failedSyncReachesTheWaiters() async throws {
        let gate = Gate(failing: .io("the disk is gone"))
        let flushed = Flushed()
        let executor = try executor(gate, flushed)
        defer { executor.stop() }
        gate.open()
        let results = await executor.append([progressReport("a"), progressReport("b")])
        #expect(results.count == 2)
        for result in results {
            guard case .failure(.io(let message)) = result else {
                Issue.record("expected the sync's failure, got \(result)")
                continue
            }
            #expect(message == "the disk is gone")
        }
    }

    @Test("stopping the executor resumes the waiters of commits still waiting for their sync")
    func stopDrainsTheSyncs() async throws {
        let gate = Gate()
        let flushed = Flushed()
        let executor = try executor(gate, flushed)
        let waiter = Task { await executor.append(progressReport("a")) }
        await pollUntil { gate.count == 1 }
        startThread { usleep(100_000); gate.open() }
        // Off the cooperative pool: stop waits for the syncer, which waits for the gate.
        await offPool { executor.stop() }
        #expect(try await waiter.value.get().jobID == "a")
    }

    @Test("the SQLite store syncs its WAL itself: after each write of the CLI, and once for commits made during a sync")
    func sqliteSyncsItsWAL() async throws {
        let fixture = try StoreFixture("deferred-sync-sqlite")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let synchronous = try store.withConnection { (connection) throws(StoreError) in try connection.first("PRAGMA synchronous") { row in row.int(0) } }
        #expect(synchronous == 1, "NORMAL: the store syncs after COMMIT")
        let before = try store.withConnection { _ in store.walSyncs }
        let claims = try (0..<20).map { _ in try fixture.running() }
        #expect(try store.withConnection { _ in store.walSyncs } == before + 40, "a submit and a claim: one sync each")
        // A write transaction that changes nothing appends nothing to the WAL: nothing to sync.
        #expect(try store.rescueExpired(now: 0, actor: "worker:test").isEmpty)
        #expect(try store.claim(owner: "worker:test", queues: nil, limit: 4, leaseMs: 30_000, now: Clock.nowMs()).isEmpty)
        #expect(try store.withConnection { _ in store.walSyncs } == before + 40, "nothing rescued or claimed: no sync")
        let results = await withTaskGroup(of: Result<JobEvent, StoreError>.self) { group in
            for claim in claims {
                group.addTask {
                    await store.appendGrouped(PendingEvent(jobID: claim.record.id, actor: workerName, leaseToken: claim.token,
                                                           payload: .started(TransferProgress(bytesDone: 0))))
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.allSatisfy { (try? $0.get()) != nil }, "\(results)")
        let stats = store.groupCommitStats
        let syncs = try #require(stats.deferredSyncs)
        #expect(syncs >= 1 && syncs <= stats.commits, "\(stats)")
        #expect(try claims.allSatisfy { try store.job($0.record.id)?.startedAtMs != nil })
        let report = try store.replay(verify: true)
        #expect(report.isConsistent)
    }

    @Test("a WAL that cannot be synced fails the write that needed it, with the reason")
    func unsyncableWAL() throws {
        let fixture = try StoreFixture("deferred-sync-gone")
        defer { fixture.remove() }
        try fixture.submit()
        // SQLite keeps writing through its own descriptor; the file the store syncs is gone.
        #expect(unlink(fixture.path + "-wal") == 0)
        #expect {
            try fixture.submit()
        } throws: { error in
            guard case StoreError.io(let message) = error else { return false }
            return message.contains("write-ahead log") && message.contains("may not be on disk")
        }
    }
}
