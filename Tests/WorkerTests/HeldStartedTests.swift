@testable import EventStore
import Foundation
import JobModel
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// A transfer that reports nothing and ends only when asked to stop: the attempt's next event is then
/// the one its stop causes, so only the pool's ask (`startedHoldMs`) can write the held `started`
/// before it. `StorageBackend` is our own protocol; the real backends run in the other suites.
private final class WaitingBackend: StorageBackend {
    private let started = Mutex(0)
    var transfersStarted: Int { started.withLock { $0 } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        started.withLock { $0 += 1 }
        // Longer than the test's own waits (two of up to 300 s): a safety net against a transfer that
        // never ends, not a limit on how long a starved test may take to ask for the stop.
        let deadline = ContinuousClock.now + .seconds(900)
        while control.stopReason == nil, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
        guard let reason = control.stopReason else { throw StorageError(.internalError, "no stop request within 900 s") }
        return .stopped(reason, nil)
    }
}

/// `started` written with the attempt's next event (`WorkerConfiguration.startedHoldMs`).
@Suite("started held for the next event", .onTestThreads) struct HeldStartedTests {
    /// Counts the UPDATEs of `jobs` rows in an SQLite database from now on.
    private static func countRowUpdates(_ database: String) throws {
        let store = try EventStore(path: database, mode: .readWrite)
        try store.withConnection { (connection) throws(StoreError) in
            try connection.run("CREATE TABLE row_updates (n INTEGER NOT NULL)")
            try connection.run("INSERT INTO row_updates (n) VALUES (0)")
            try connection.run("CREATE TRIGGER count_row_updates AFTER UPDATE ON jobs BEGIN UPDATE row_updates SET n = n + 1; END")
        }
    }

    /// `replay --verify` finds the projection as the log makes it; the counting trigger is the test's own,
    /// which it names as one jobctl does not make.
    static func consistentBesideTheCountingTrigger(_ store: any JobStore) throws -> Bool {
        let report = try store.replay(verify: true)
        return report.differences.isEmpty && report.problems.allSatisfy { $0.contains("'count_row_updates'") }
    }

    private static func rowUpdates(_ store: EventStore) throws -> Int {
        try store.withConnection { (connection) throws(StoreError) -> Int in
            try connection.first("SELECT n FROM row_updates", []) { $0.int(0) } ?? -1
        }
    }

    /// Tiny jobs: with `started` held, each job's row is written twice (the claim, then `started` and
    /// the outcome together) instead of three times, its history is the same four events, and `started`
    /// keeps a time between its claim's and its outcome's.
    @Test(arguments: [Int64(600_000), nil])
    func tinyJobsWriteTheirRowOnceForStartedAndOutcome(holdMs: Int64?) async throws {
        let directory = try TemporaryDirectory("held-started")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let jobs = try SmallJobTests.tinyJobs(24, database: database, directory: directory)
        try Self.countRowUpdates(database)
        let store = try EventStore(path: database, mode: .readWrite)
        let pool = WorkerPool(store: store, backend: SmallJobTests.localRouter(directory),
                              configuration: WorkerConfiguration(concurrency: 4, leaseMs: 3_600_000, drain: true, startedHoldMs: holdMs))
        let summary = try await pool.run()
        #expect(summary.succeeded == jobs.count, "\(summary)")
        #expect(try Self.rowUpdates(store) == jobs.count * (holdMs == nil ? 3 : 2))
        for job in jobs {
            let events = try store.events(jobID: job.id)
            #expect(events.map(\.type) == [.submitted, .claimed, .started, .succeeded], "\(job.id)")
            guard events.count == 4 else { continue }
            #expect(events[1].atMs <= events[2].atMs && events[2].atMs <= events[3].atMs)
            #expect(try store.job(job.id)?.startedAtMs == events[2].atMs)
        }
        #expect(try Self.consistentBesideTheCountingTrigger(store))
    }

    /// A transfer that outlasts the hold gets its `started` written while it runs, alone; the stop
    /// that ends it writes only its own event.
    @Test(arguments: WorkerEngine.allCases)
    func aLongTransfersStartedIsWrittenWhileItRuns(engine: WorkerEngine) async throws {
        let directory = try TemporaryDirectory("held-started-long")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let id = try #require(try submit("- {kind: upload-data, data: \"x\", destination: \"file://b/x.txt\"}\n",
                                         database: database, directory: directory).first)
        let store = try SmallJobTests.store(engine, database)
        let backend = WaitingBackend()
        let pool = WorkerPool(store: store, backend: backend,
                              configuration: WorkerConfiguration(concurrency: 1, leaseMs: 60_000, startedHoldMs: 100))
        let run = Task { try await pool.run() }
        // Long waits on purpose: the test is about order, not time. Before the tests ran on threads of
        // their own (`OnTestThreads`), the other suites' synchronous tests held the two cooperative
        // threads for most of a full run, and each step of an in-process pool waited behind them (60 s
        // was seen to run out there, never in the pool's own suite).
        let written = try await eventually(seconds: 300) { try store.events(jobID: id).map(\.type) == [.submitted, .claimed, .started] }
        let history = try store.events(jobID: id).map(\.type)
        #expect(written, "\(history)")
        // The transfer was launched before its `started` was written; under load its body may begin a
        // moment after the event lands (the runner launched it, then wrote the event the pool asked for).
        let running = try await eventually(seconds: 300) { backend.transfersStarted == 1 }
        #expect(running && backend.transfersStarted == 1, "the transfer runs while its started is written")
        // From another connection, as `jobctl pause` would: a store does not notice its own writes.
        _ = try SmallJobTests.store(engine, database).requestPause(id: id, actor: "cli:test", now: Clock.nowMs())
        // Any end of the run ends the wait: only `paused` passes below.
        _ = try await eventually(seconds: 300) { try store.job(id).map { $0.state != .running } ?? true }
        let paused = try store.job(id)?.state == .paused
        pool.beginShutdown()
        _ = try await run.value
        #expect(paused)
        #expect(try store.events(jobID: id).map(\.type) == [.submitted, .claimed, .started, .pauseRequested, .paused])
        #expect(try Self.consistentBesideTheCountingTrigger(store))
    }
}
