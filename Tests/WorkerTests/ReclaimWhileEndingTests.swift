import EventStore
import Foundation
import JobModel
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// A transfer that moves nothing and ends only when asked to stop; and a removal of a finished job's
/// files that waits, once, until the test lets it go — the moment between an attempt's outcome being
/// written and its run returning to the pool, held open. `StorageBackend` is our own protocol; the real
/// backends run in the other suites.
private final class HeldEndingBackend: StorageBackend {
    private let state = Mutex((transfers: 0, holdNextRemoval: false, removalHeld: false, released: false, ended: false))
    var transfers: Int { state.withLock { $0.transfers } }
    var removalHeld: Bool { state.withLock { $0.removalHeld } }

    /// The next look for a finished job's files waits until `releaseRemoval()`.
    func holdNextRemoval() { state.withLock { $0.holdNextRemoval = true } }
    func releaseRemoval() { state.withLock { $0.released = true } }
    /// Ends every transfer still waiting, as a shutdown would (a run the pool lost would wait for ever).
    func endTransfers() { state.withLock { $0.ended = true } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        state.withLock { $0.transfers += 1 }
        let deadline = ContinuousClock.now + .seconds(900)
        while control.stopReason == nil, !state.withLock({ $0.ended }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
        if control.stopReason == nil && state.withLock({ $0.ended }) { return .stopped(.shutdown, nil) }
        guard let reason = control.stopReason else { throw StorageError(.internalError, "no stop request within 900 s") }
        return .stopped(reason, nil)
    }

    func leftovers(of job: JobLocalFiles, sparing inUse: Set<String>) -> [LeftoverFile] {
        let hold = state.withLock { state -> Bool in
            guard state.holdNextRemoval else { return false }
            state.holdNextRemoval = false
            state.removalHeld = true
            return true
        }
        guard hold else { return [] }
        let deadline = Date().addingTimeInterval(600)
        while !state.withLock({ $0.released }) && Date() < deadline { usleep(2_000) }
        return []
    }
}

/// A job a worker claims again while its previous attempt there is still ending.
@Suite("claimed again while the last attempt ends", .onTestThreads) struct ReclaimWhileEndingTests {
    /// A job is cancelled and, while its attempt's run is still removing its files, retried and claimed
    /// again by the same worker. When the old run then returns, the worker must still hold the new
    /// attempt: heartbeat it and honour its controls. Before, the old run's end removed the new
    /// attempt from the worker's books — a pause of it was never read (and its lease never renewed).
    @Test(arguments: WorkerEngine.allCases)
    func theNewAttemptStillHearsItsControls(engine: WorkerEngine) async throws {
        let directory = try TemporaryDirectory("reclaim-ending")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let id = try #require(try submit("- {kind: upload-data, data: \"x\", destination: \"file://b/x.txt\"}\n",
                                         database: database, directory: directory).first)
        let store = try SmallJobTests.store(engine, database)
        let control = try SmallJobTests.store(engine, database)
        let backend = HeldEndingBackend()
        let pool = WorkerPool(store: store, backend: backend,
                              configuration: WorkerConfiguration(concurrency: 2, leaseMs: 60_000, claimAhead: 0))
        let run = Task { try await pool.run() }
        defer { backend.releaseRemoval() }

        try #require(try await eventually(seconds: 120) { backend.transfers == 1 }, "the first attempt did not start")
        backend.holdNextRemoval()
        _ = try control.requestCancel(id: id, actor: "cli:test", now: Clock.nowMs())
        let ending = try await eventually(seconds: 120) { backend.removalHeld }
        let cancelled = try store.events(jobID: id).map(\.type)
        try #require(ending, "the cancelled attempt did not reach the removal of its files: \(cancelled)")
        #expect(try store.job(id)?.state == .cancelled)

        _ = try control.retry(id: id, actor: "cli:test", now: Clock.nowMs())
        let again = try await eventually(seconds: 120) { backend.transfers == 2 }
        let retried = try store.events(jobID: id).map(\.type)
        try #require(again, "the retried job was not claimed again: \(retried)")
        // The old run returns to the pool now, its new attempt running.
        backend.releaseRemoval()
        try await Task.sleep(for: .milliseconds(300))

        _ = try control.requestPause(id: id, actor: "cli:test", now: Clock.nowMs())
        let paused = try await eventually(seconds: 30) { try store.job(id)?.state == .paused }
        let history = try store.events(jobID: id).map(\.type)
        backend.endTransfers()
        pool.beginShutdown()
        _ = try await run.value
        #expect(paused, "the pause of the new attempt was never honoured: \(history)")
        #expect(history.suffix(5) == [.retried, .claimed, .started, .pauseRequested, .paused], "\(history)")
        #expect(try store.replay(verify: true).isConsistent)
    }
}
