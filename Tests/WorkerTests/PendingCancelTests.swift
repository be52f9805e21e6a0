import EventStore
import Foundation
import JobModel
import Storage
import StorePort
import Testing
import TestSupport
@testable import Worker

/// A cancel the worker had not read yet when its attempt ended some other way: the store appends
/// `cancelled` after the attempt's own end, and the worker removes what the attempt kept to resume from.
@Suite("a cancel pending at the attempt's end", .onTestThreads) struct PendingCancelTests {
    /// How the attempt ends before the worker reads the cancel.
    enum Ending: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// The worker shuts down (`released`).
        case shutdown
        /// The server goes away mid-body, a retryable failure (`attempt_failed`).
        case serverGone

        var testDescription: String { rawValue }
    }

    /// A slow download is cancelled from another connection; before the pool reads the request (its
    /// poll interval is a minute here, so it never does) the attempt ends released or retry-scheduled.
    /// The log then ends `cancelled`, and the partial file the attempt kept must go with it: the job
    /// never resumes from it. Before, it stayed until some worker's next sweep.
    @Test(arguments: WorkerEngine.allCases, Ending.allCases)
    func thePartialFileOfAJobCancelledAtItsAttemptsEndIsRemoved(engine: WorkerEngine, ending: Ending) async throws {
        let nginx = try startWorkerNginx(slowRate: "1m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("pending-cancel")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        try writePatternFile("\(nginx.root)/slow/big.bin", size: 64 << 20)
        let out = directory.file("out")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let id = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", destination: \"\(out)/big.bin\"}\n",
                                         database: database, directory: directory).first)
        let partial = "\(out)/.big.bin.\(id).jobctl-partial"
        let store = try SmallJobTests.store(engine, database)
        // No control poll (nor heartbeat) within the test: the pool learns of the cancel only from the
        // store's answer to the attempt's end.
        let pool = WorkerPool(store: store, backend: SmallJobTests.localRouter(directory),
                              configuration: WorkerConfiguration(concurrency: 1, leaseMs: 600_000, pollIntervalMs: 60_000))
        let run = Task { try await pool.run() }
        let writing = try await eventually(seconds: 60) {
            ((try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0) > 0
        }
        try #require(writing, "the download never began writing \(partial)")
        // `started` goes to the log with the attempt's next event (a progress tick): a cancel requested
        // before it is in the store's answer to that append, and the attempt stops cancelled at once —
        // a history without the attempt's own end (seen on PostgreSQL in a CI run: submitted, claimed,
        // cancel_requested, started, cancelled). The request comes once `started` is there.
        let started = try await eventually(seconds: 60) { try store.events(jobID: id).contains { $0.type == .started } }
        try #require(started, "the attempt's started event never reached the log")

        _ = try SmallJobTests.store(engine, database).requestCancel(id: id, actor: "cli:test", now: Clock.nowMs())
        switch ending {
        case .shutdown:
            pool.beginShutdown()
            _ = try await run.value
        case .serverGone:
            nginx.stop()
            _ = try await eventually(seconds: 60) { try store.job(id)?.state == .cancelled }
            // The runner removes the file after its outcome is written: give it the time.
            _ = try await eventually(seconds: 10) { !FileManager.default.fileExists(atPath: partial) }
            pool.beginShutdown()
            _ = try await run.value
        }
        let history = try store.events(jobID: id).map(\.type)
        let attemptEnd: EventType = ending == .shutdown ? .released : .attemptFailed
        // The request was never read: the attempt ended its own way, and the store honoured the cancel.
        #expect(history.contains(.cancelRequested) && Array(history.suffix(2)) == [attemptEnd, .cancelled], "\(history)")
        #expect(try store.job(id)?.state == .cancelled)
        let left = try FileManager.default.contentsOfDirectory(atPath: out)
        #expect(left.isEmpty, "the cancelled job left \(left)")
        #expect(try store.replay(verify: true).isConsistent)
    }
}
