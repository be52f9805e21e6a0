import EventStore
import Foundation
import JobModel
import PostgresStore
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// A write that committed but whose answer was lost is not mistaken for a refusal.
@Suite("a write whose answer was lost", .onTestThreads) struct LostAnswerTests {
    /// The store commits the job's `started` (or `succeeded`) and then reports an I/O failure. The
    /// worker retries the write, which is refused (the event is already there); it finds its own event
    /// as the job's newest — for `succeeded`, the download's bytes in the event itself (64 bytes) or in
    /// the blob it references (300) — logs `write_landed` and carries on: the job succeeds in one
    /// attempt, nothing abandoned or rescued.
    @Test(arguments: WorkerEngine.allCases, [(EventType.started, 64), (.succeeded, 64), (.succeeded, 300)])
    func refusedRetryOfALandedWriteIsNotAbandoned(engine: WorkerEngine, lost: (EventType, Int)) async throws {
        let (lost, size) = lost
        let directory = try TemporaryDirectory("lost-answer")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let payload = Data(String(repeating: "sixty-four bytes of a tiny object, read into memory by the worker", count: 5).utf8.prefix(size))
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        try payload.write(to: URL(fileURLWithPath: directory.file("buckets/b/tiny.bin")))
        let ids = try submit("- {kind: download-memory, source: \"file://b/tiny.bin\"}\n", database: database, directory: directory)
        let id = try #require(ids.first)

        let real: any JobStore = switch engine {
        case .sqlite: try EventStore(path: database, mode: .readWrite)
        case .postgres: try PostgresStore(url: database, mode: .readWrite)
        }
        let store = LostAnswerStore(real, loseAnswerTo: lost)
        let lines = Mutex<[String]>([])
        let poolBox = Mutex<WorkerPool?>(nil)
        // The job's outcome line (succeeded, or abandoned without the check) ends the run: the pool
        // shuts down instead of waiting, as a drain would, for an abandoned job's lease to expire.
        let log = WorkerLog(minimumLevel: .info, formatter: WorkerLogFormatter(format: .json), write: { line in
            lines.withLock { $0.append(line) }
            if line.contains("\"event\":\"succeeded\"") || line.contains("\"event\":\"abandoned\"") {
                // Not from inside the log's write (its lock is held): on another thread.
                if let pool = poolBox.withLock({ $0 }) { startThread { pool.beginShutdown() } }
            }
        })
        // A lease far longer than the test: a test process whose cooperative pool other tests block can
        // stall for minutes, and a lease lost that way would abandon the job for another reason.
        let pool = WorkerPool(store: store, backend: SmallJobTests.localRouter(directory),
                              configuration: WorkerConfiguration(concurrency: 1, leaseMs: 3_600_000, drain: true), log: log)
        poolBox.withLock { $0 = pool }
        let summary = try await pool.run()
        let text = lines.withLock { $0.joined() }

        #expect(store.lost.withLock { $0 } == 1, "the fault did not fire")
        #expect(summary.abandoned == 0 && summary.succeeded == 1 && summary.claimed == 1, "\(summary)\n\(text)")
        let landed = text.split(separator: "\n").filter { $0.contains("\"event\":\"write_landed\"") }
        #expect(landed.count == 1 && landed.allSatisfy { $0.contains("\"event\":\"\(lost.rawValue)\"") }, "\(text)")
        #expect(!text.contains("\"event\":\"abandoned\"") && !text.contains("\"event\":\"lease_lost\""), "\(text)")
        let events = try real.events(jobID: id)
        // A `progress` may come between (a slow test process passes a progress tick); nothing twice.
        #expect(events.map(\.type).filter { $0 != .progress } == [.submitted, .claimed, .started, .succeeded], "\(events.map(\.type))")
        let result = try #require(events.last?.payload.result)
        if size > PreparedPayload.inlineResultLimit {
            let blob = try #require(result.blob)
            #expect(try real.blob(sha256: blob) == payload && result.data == nil)
        } else {
            #expect(result.data == payload && result.blob == nil)
        }
        #expect(try real.replay(verify: true).isConsistent)
    }
}

/// A commit that outlasts the lease: its answer is lost (the store failed, `io`) only once the lease the
/// worker knows of has run out — as when a download's result of hundreds of MiB takes PostgreSQL longer
/// to commit than the lease, and the session is given up meanwhile. The worker cannot retry the write
/// (its lease is gone), but the job's outcome is in the log: it must say `succeeded`, not `abandoned`.
@Suite("a write answered after the lease ran out", .onTestThreads) struct LateAnswerTests {
    @Test(arguments: WorkerEngine.allCases)
    func aCommitThatOutlastedTheLeaseIsNotAbandoned(engine: WorkerEngine) async throws {
        let directory = try TemporaryDirectory("late-answer")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let payload = Data((0..<300).map { UInt8(truncatingIfNeeded: $0 * 7) })
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        try payload.write(to: URL(fileURLWithPath: directory.file("buckets/b/result.bin")))
        let ids = try submit("- {kind: download-memory, source: \"file://b/result.bin\"}\n", database: database, directory: directory)
        let id = try #require(ids.first)

        let real: any JobStore = switch engine {
        case .sqlite: try EventStore(path: database, mode: .readWrite)
        case .postgres: try PostgresStore(url: database, mode: .readWrite)
        }
        let leaseMs: Int64 = 3_000
        // Past the lease as the worker last renewed it: its heartbeats stop renewing a job once the
        // store has it finished.
        let store = LostAnswerStore(real, loseAnswerTo: .succeeded, answerDelayMs: leaseMs + 1_500)
        let lines = Mutex<[String]>([])
        let poolBox = Mutex<WorkerPool?>(nil)
        let log = WorkerLog(minimumLevel: .info, formatter: WorkerLogFormatter(format: .json), write: { line in
            lines.withLock { $0.append(line) }
            if line.contains("\"event\":\"succeeded\"") || line.contains("\"event\":\"abandoned\"") {
                if let pool = poolBox.withLock({ $0 }) { startThread { pool.beginShutdown() } }
            }
        })
        let pool = WorkerPool(store: store, backend: SmallJobTests.localRouter(directory),
                              configuration: WorkerConfiguration(concurrency: 1, leaseMs: leaseMs, drain: true), log: log)
        poolBox.withLock { $0 = pool }
        let summary = try await pool.run()
        let text = lines.withLock { $0.joined() }

        #expect(store.lost.withLock { $0 } == 1, "the fault did not fire")
        let events = try real.events(jobID: id)
        #expect(events.last?.type == .succeeded, "\(events.map(\.type))")
        #expect(summary.abandoned == 0 && summary.succeeded == 1, "\(summary)\n\(text)")
        #expect(!text.contains("\"event\":\"abandoned\""), "\(text)")
        #expect(text.contains("\"event\":\"write_landed\""), "\(text)")
    }
}

/// A database damaged under a running worker: retrying cannot help, so the pool stops and says so
/// instead of retrying for ever (a drain that never ends, a service that never reports it).
@Suite("a damaged database under a worker", .onTestThreads) struct DamagedStoreTests {
    @Test func thePoolStopsWithTheErrorInsteadOfRetrying() async throws {
        let directory = try TemporaryDirectory("damaged-store")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        _ = try submit("- {kind: upload-data, data: \"x\", destination: \"file://b/x.txt\"}\n", database: database, directory: directory)
        // The first executor calls (start-up, the first turn) work; from the fifth on, the file is damaged.
        let store = LostAnswerStore(try EventStore(path: database, mode: .readWrite), loseAnswerTo: .submitted, damagedFromRun: 5)
        // Should the pool retry instead, it is shut down after 300 s (its retries are 250 ms to 5 s
        // apart; in a full parallel run the other suites' synchronous tests hold the cooperative threads
        // for minutes): run() then returns without the error and the test fails, never hangs.
        let lines = await Self.runExpectingDamage(store, directory: directory, drain: false, shutDownAfter: .seconds(300))
        let stopping = lines.filter { $0.contains("\"event\":\"store_error\"") }
        #expect(stopping.count == 1 && stopping[0].contains("\"action\":\"stopping\"") && stopping[0].contains("\"level\":\"error\""),
                "\(stopping)")
    }

    /// The orphan sweep met the damage where no claim or commit did (a page of old events only it reads):
    /// it logged `orphan_sweep_failed` with the error's own "stop every worker", and the worker went on
    /// writing into the file (12,986 events more) and exited 0. A sweep's damaged store now stops the
    /// worker as a claim's does: at its start, before any claim; or at a drain's last sweep, the drain
    /// failing with it.
    @Test("a sweep that finds the database damaged stops the worker, at its start or at a drain's end",
          arguments: [1, 2])
    func theSweepsDamageStopsTheWorker(damagedFromSweep: Int) async throws {
        let directory = try TemporaryDirectory("damaged-sweep")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let ids = try submit("- {kind: upload-data, data: \"x\", destination: \"file://b/x.txt\"}\n", database: database, directory: directory)
        let store = LostAnswerStore(try EventStore(path: database, mode: .readWrite), loseAnswerTo: .submitted)
        store.damagedLeftoverReadsFrom.withLock { $0 = damagedFromSweep }
        let lines = await Self.runExpectingDamage(store, directory: directory, drain: true, shutDownAfter: .seconds(120))
        let text = lines.joined(separator: "\n")
        #expect(text.contains("\"event\":\"orphan_sweep_failed\""), "\(text)")
        let stopping = lines.filter { $0.contains("\"event\":\"store_error\"") }
        #expect(stopping.count == 1 && stopping[0].contains("\"action\":\"stopping\""), "\(stopping)")
        // Stopped at its start, the worker claimed nothing; at the drain's end, its job had run.
        let state = try #require(try store.inner.job(ids[0])).state
        #expect(state == (damagedFromSweep == 1 ? .queued : .succeeded), "\(state)")
    }

    /// Runs a one-slot pool on `store` until it fails, expecting the damaged database's error (a pool that
    /// retries instead is shut down after `shutDownAfter`: the expectation then fails, never hangs), and
    /// returns the JSON lines it logged.
    static func runExpectingDamage(_ store: LostAnswerStore, directory: TemporaryDirectory, drain: Bool,
                                   shutDownAfter limit: Duration) async -> [String] {
        let lines = Mutex<[String]>([])
        let log = WorkerLog(minimumLevel: .info, formatter: WorkerLogFormatter(format: .json), write: { line in
            lines.withLock { $0.append(line) }
        })
        let pool = WorkerPool(store: store, backend: SmallJobTests.localRouter(directory),
                              configuration: WorkerConfiguration(concurrency: 1, drain: drain), log: log)
        let watchdog = Task {
            try? await Task.sleep(for: limit)
            pool.beginShutdown()
        }
        defer { watchdog.cancel() }
        await #expect {
            _ = try await pool.run()
        } throws: { error in
            guard case StoreError.damaged = error else { return false }
            return true
        }
        return lines.withLock { $0 }
    }
}
