import EventStore
import Foundation
import JobModel
import Storage
import StorePort
import Testing
import TestSupport
@testable import Worker

/// A worker's sweeps skip the jobs it knows left nothing: those whose first run, claimed straight after
/// submission, it ended `succeeded` (their partial file or upload session was made by that run and
/// renamed into place). The read of leftovers passes them over; every other final job is read as before.
@Suite("sweeps skip what the worker's own first runs finished", .onTestThreads) struct SweepSkipTests {
    /// A position just before anything became final, in `engine`'s terms (SQLite: the newest seq;
    /// PostgreSQL: a finish time).
    static func positionNow(_ store: any JobStore, _ engine: WorkerEngine, at now: Int64) throws -> Int64 {
        switch engine {
        case .sqlite: try store.lastSeq()
        case .postgres: now
        }
    }

    @Test(arguments: WorkerEngine.allCases)
    func aReadPassesOverTheJobsNamedAndOnlyThem(engine: WorkerEngine) throws {
        let (directory, store, ids, _) = try SweepWatermarkTests.downloadsWithPartials("sweep-skip-read", engine, count: 3)
        defer { directory.remove() }
        let start = Clock.nowMs()
        let position = try Self.positionNow(store, engine, at: start)
        for id in ids { _ = try store.requestCancel(id: id, actor: "cli:test", now: start + 1_000) }
        func read(skipping: Set<String>) throws -> (ids: Set<String>, position: Int64) {
            let (candidates, next) = try store.inner.leftoversSince(position: position, now: start + 2_000, skipping: skipping)
            return (Set(candidates.finished.map(\.id)), next)
        }
        let all = try read(skipping: [])
        #expect(all.ids == Set(ids))
        #expect(try read(skipping: [ids[0]]) == (Set(ids[1...]), all.position))
        #expect(try read(skipping: Set(ids)) == ([], all.position))
        // Ids that are no job's, or that need quoting, change nothing else.
        #expect(try read(skipping: ["NO-SUCH-JOB", "a\"quote\\and\u{1}control", ids[1]]).ids == [ids[0], ids[2]])
        // Without skipping, the same as the form that skips nothing.
        #expect(Set(try store.inner.leftoversSince(position: position, now: start + 2_000).candidates.finished.map(\.id)) == all.ids)
    }

    /// Noted jobs are skipped by the next sweep only: a noted job's partial stays (the sweep did not read
    /// the job), another's is removed; a kind that makes no local file is not noted; `jobctl orphans`,
    /// which reads every final job, still lists the one left; the sweep after that skips nothing.
    @Test(arguments: WorkerEngine.allCases)
    func theNextSweepSkipsWhatWasNotedAndOnlyIt(engine: WorkerEngine) async throws {
        let (directory, store, ids, partials) = try SweepWatermarkTests.downloadsWithPartials("sweep-skip-note", engine, count: 2)
        defer { directory.remove() }
        let backend = SmallJobTests.localRouter(directory)
        let sweeper = OrphanSweeper(store: store, backend: backend, host: "host-a", intervalMs: 300_000,
                                    log: WorkerLog(minimumLevel: .info, write: { _ in }))
        let start = Clock.nowMs()
        await sweeper.sweepIfDue(now: start)   // the first sweep: from nothing, it sets the position
        for path in partials {   // as old as the job's end, so a read of the job would take the file for its own
            try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: Double(start - 10_000) / 1000)],
                                                  ofItemAtPath: path)
        }
        for id in ids { _ = try store.requestCancel(id: id, actor: "cli:test", now: Clock.nowMs()) }
        sweeper.noteLeftNothing(ids[0], kind: .downloadFile)
        sweeper.noteLeftNothing("SOME-DOWNLOAD-MEMORY-JOB", kind: .downloadMemory)

        await sweeper.sweepIfDue(now: Clock.nowMs(), force: true)
        #expect(store.leftoverSkips.withLock { $0.last } == [ids[0]])
        #expect(FileManager.default.fileExists(atPath: partials[0]), "skipped: not read")
        #expect(!FileManager.default.fileExists(atPath: partials[1]), "read and removed")
        #expect(try Orphans.find(in: store, backend: backend).map(\.file.path) == [partials[0]])
        await sweeper.sweepIfDue(now: Clock.nowMs(), force: true)
        #expect(store.leftoverSkips.withLock { $0.last } == [])
    }

    /// The wall clock stepped back an hour after a sweep: the next was measured from the last one's time,
    /// now in the future, so no sweep ran for an hour and the interval. As the pool's loop, a time before
    /// the last sweep is due at once, and the interval counts from it.
    @Test func aClockSteppedBackDoesNotHoldTheSweepsBack() async throws {
        let (directory, store, _, _) = try SweepWatermarkTests.downloadsWithPartials("sweep-clock-back", .sqlite, count: 1)
        defer { directory.remove() }
        let sweeper = OrphanSweeper(store: store, backend: SmallJobTests.localRouter(directory), host: "host-a",
                                    intervalMs: 300_000, log: WorkerLog(minimumLevel: .info, write: { _ in }))
        let start = Clock.nowMs()
        await sweeper.sweepIfDue(now: start)
        await sweeper.sweepIfDue(now: start + 300_000)
        let sweeps = store.leftoverSkips.withLock { $0.count }
        #expect(sweeps >= 1)
        let stepped = start + 300_000 - 3_600_000
        await sweeper.sweepIfDue(now: stepped)
        #expect(store.leftoverSkips.withLock { $0.count } == sweeps + 1, "no sweep after the clock stepped back an hour")
        await sweeper.sweepIfDue(now: stepped + 1_000)
        #expect(store.leftoverSkips.withLock { $0.count } == sweeps + 1, "the interval counts from the sweep after the step")
        await sweeper.sweepIfDue(now: stepped + 300_000)
        #expect(store.leftoverSkips.withLock { $0.count } == sweeps + 2)
    }

    /// A draining pool notes exactly the jobs whose first run it ended `succeeded`: its last sweep skips
    /// them, not a job that was paused and resumed before (a later run, which may find what an earlier
    /// one left), nor one that failed.
    @Test(arguments: WorkerEngine.allCases)
    func aDrainsLastSweepSkipsItsOwnFirstRunsThatSucceeded(engine: WorkerEngine) async throws {
        let directory = try TemporaryDirectory("sweep-skip-drain")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory.file("out"), withIntermediateDirectories: true)
        var manifest = ""
        for index in 0..<4 {
            try Data("object \(index)".utf8).write(to: URL(fileURLWithPath: directory.file("buckets/b/o\(index).bin")))
            manifest += "- {kind: download-file, source: \"file://b/o\(index).bin\", destination: \"\(directory.file("out/f\(index).bin"))\"}\n"
        }
        manifest += "- {kind: download-file, source: \"file://b/missing.bin\", destination: \"\(directory.file("out/missing.bin"))\", max_attempts: 1}\n"
        let ids = try submit(manifest, database: database, directory: directory)
        try #require(ids.count == 5)
        let store = LostAnswerStore(try SmallJobTests.store(engine, database), loseAnswerTo: .archived)
        _ = try store.requestPause(id: ids[3], actor: "cli:test", now: Clock.nowMs())
        _ = try store.requestResume(id: ids[3], actor: "cli:test", now: Clock.nowMs())

        let pool = WorkerPool(store: store, backend: SmallJobTests.localRouter(directory),
                              configuration: WorkerConfiguration(concurrency: 4, leaseMs: 3_600_000, drain: true))
        let summary = try await pool.run()
        #expect(summary.succeeded == 4 && summary.failed == 1, "\(summary)")
        for index in 0..<4 {
            #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("out/f\(index).bin"))) == Data("object \(index)".utf8))
        }
        let skips = store.leftoverSkips.withLock { $0 }
        #expect(skips.count >= 2, "a sweep at the start and one before the exit: \(skips)")
        #expect(skips.last == Set(ids[0..<3]), "\(skips)")
        #expect(skips.dropLast().allSatisfy { $0.isEmpty }, "\(skips)")
        #expect(try store.replay(verify: true).isConsistent)
    }
}
