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

/// The leftover sweep starts where the last complete sweep on its host left off: a worker's first sweep
/// reads the jobs that became final since its host's sweep watermark (a position of the store's own: an
/// event seq on SQLite, a finish time less the overlap on PostgreSQL), not every final job the log holds,
/// and a sweep that completes raises that watermark to where it stopped. Another host's sweeps, which
/// look at another disk, do not move it.
@Suite("sweep watermark", .onTestThreads) struct SweepWatermarkTests {
    /// A log of `engine` in a temporary directory (the caller removes it) holding `count` queued
    /// download-file jobs, each with its partial file already beside its destination (`out/f<i>.bin`), as a
    /// run stopped part-way leaves it; the store is the real one inside a `LostAnswerStore`, which records
    /// the sweeps' reads.
    static func downloadsWithPartials(_ label: String, _ engine: WorkerEngine, count: Int) throws
        -> (directory: TemporaryDirectory, store: LostAnswerStore, ids: [String], partials: [String]) {
        let directory = try TemporaryDirectory(label)
        do {
            let database = try engine.database(in: directory)
            let out = directory.file("out")
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            let ids = try submit((0..<count).map { "- {kind: download-file, source: \"file://b/o\($0).bin\", destination: \"\(out)/f\($0).bin\"}\n" }
                                     .joined(), database: database, directory: directory)
            try #require(ids.count == count)
            let partials = ids.indices.map { "\(out)/\(PartialFile.tempName(for: "f\($0).bin", jobID: ids[$0]))" }
            for path in partials { try Data("partial".utf8).write(to: URL(fileURLWithPath: path)) }
            return (directory, LostAnswerStore(try SmallJobTests.store(engine, database), loseAnswerTo: .progress), ids, partials)
        } catch {
            directory.remove()
            throw error
        }
    }

    /// A worker log that keeps its lines, and a way to read them.
    static func keptLog() -> (log: WorkerLog, lines: @Sendable () -> [String]) {
        let kept = KeptLines()
        return (WorkerLog(minimumLevel: .info, write: { line in kept.lines.withLock { $0.append(line) } }),
                { kept.lines.withLock { $0 } })
    }

    private final class KeptLines: Sendable {
        let lines = Mutex<[String]>([])
    }

    @Test("a worker's watermark is its machine's, named as the kernel names it, as its lease owner names it")
    func theHostIsTheMachinesName() throws {
        let kernel = try String(contentsOfFile: "/proc/sys/kernel/hostname", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!kernel.isEmpty)
        #expect(WorkerConfiguration().host == kernel)
        #expect(WorkerConfiguration().owner == "worker:\(kernel):\(getpid())")
        #expect(WorkerConfiguration(host: "host-b").host == "host-b")
    }

    @Test(arguments: WorkerEngine.allCases)
    func theWatermarkStartsUnsetOnlyRisesAndOutlivesTheStore(engine: WorkerEngine) throws {
        let directory = try TemporaryDirectory("sweep-watermark-store")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        do {
            let store: any JobStore = switch engine {
            case .sqlite: try EventStore(path: database, mode: .create)
            case .postgres: try PostgresStore(url: database, mode: .create)
            }
            #expect(try store.sweepWatermark(host: "host-a") == nil)
            try store.raiseSweepWatermark(host: "host-a", to: 5_000)
            #expect(try store.sweepWatermark(host: "host-a") == 5_000)
            try store.raiseSweepWatermark(host: "host-a", to: 4_999)
            #expect(try store.sweepWatermark(host: "host-a") == 5_000, "a lower value leaves it as it is")
            try store.raiseSweepWatermark(host: "host-a", to: 7_000)
            #expect(try store.sweepWatermark(host: "host-a") == 7_000)
            #expect(try store.sweepWatermark(host: "host-b") == nil, "one watermark for each host")
            try store.raiseSweepWatermark(host: "host-b", to: 9_000)
            #expect(try store.sweepWatermark(host: "host-a") == 7_000)
        }
        let reader = try engine.reader(database)
        #expect(try reader.sweepWatermark(host: "host-a") == 7_000, "kept in the database, read by a read-only open")
        #expect(try reader.sweepWatermark(host: "host-b") == 9_000)
    }

    /// Three download-file jobs, each with its partial file beside its destination, cancelled while no
    /// worker ran them. The first is cancelled and swept by worker A, whose sweep raises the watermark; a
    /// file then appears at its partial's name (with an older time: the sweep would take it for one). The
    /// others are cancelled after. Worker B's first sweep reads from the watermark: it removes the two
    /// later partials and does not look at the first job again, whose file `jobctl orphans`, which reads
    /// every final job, still lists. Times are given to the sweeps (and the later cancels), so that on
    /// PostgreSQL, where positions are finish times less a minute, the same order holds.
    @Test(arguments: WorkerEngine.allCases)
    func aWorkersFirstSweepReadsOnlyWhatBecameFinalSinceTheWatermark(engine: WorkerEngine) async throws {
        let (directory, store, ids, partials) = try Self.downloadsWithPartials("sweep-watermark", engine, count: 3)
        defer { directory.remove() }
        let (log, lines) = Self.keptLog()
        let backend = SmallJobTests.localRouter(directory)
        let start = Clock.nowMs()
        _ = try store.requestCancel(id: ids[0], actor: "cli:test", now: start)

        await OrphanSweeper(store: store, backend: backend, host: "host-a", intervalMs: 300_000, log: log).sweepIfDue(now: start + 120_000)
        #expect(store.leftoverReads.withLock { $0 } == [nil], "no sweep had completed: every final job")
        #expect(!FileManager.default.fileExists(atPath: partials[0]), "\(lines())")
        let watermark = try #require(try store.sweepWatermark(host: "host-a"))
        try Data("again".utf8).write(to: URL(fileURLWithPath: partials[0]))
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: Double(start - 10_000) / 1000)],
                                              ofItemAtPath: partials[0])
        for id in ids[1...] { _ = try store.requestCancel(id: id, actor: "cli:test", now: start + 130_000) }

        await OrphanSweeper(store: store, backend: backend, host: "host-a", intervalMs: 300_000, log: log).sweepIfDue(now: start + 200_000)
        #expect(store.leftoverReads.withLock { $0 } == [nil, watermark], "worker B read from the watermark")
        #expect(FileManager.default.fileExists(atPath: partials[0]), "final before the watermark: not looked at again")
        #expect(!FileManager.default.fileExists(atPath: partials[1]) && !FileManager.default.fileExists(atPath: partials[2]),
                "\(lines())")
        #expect(lines().filter { $0.contains(" orphan_removed ") }.count == 3, "\(lines())")
        #expect(try #require(try store.sweepWatermark(host: "host-a")) > watermark, "raised to where worker B's sweep stopped")
        #expect(try Orphans.find(in: store, backend: backend).map(\.file.path) == [partials[0]])
    }

    /// A sweep whose read fails raises nothing, and the next reads again from where the failed one began:
    /// after a first sweep that fails, the next reads from the watermark (here: every final job); after a
    /// periodic sweep that fails, the next reads from where the last complete one stopped.
    @Test(arguments: WorkerEngine.allCases)
    func aFailedSweepRaisesNothingAndTheNextReadsAgainFromWhereItBegan(engine: WorkerEngine) async throws {
        let (directory, store, ids, partials) = try Self.downloadsWithPartials("sweep-watermark-failed", engine, count: 1)
        defer { directory.remove() }
        _ = try store.requestCancel(id: ids[0], actor: "cli:test", now: Clock.nowMs())
        let (log, lines) = Self.keptLog()
        let sweeper = OrphanSweeper(store: store, backend: SmallJobTests.localRouter(directory), host: "host-a", intervalMs: 300_000, log: log)
        let start = Clock.nowMs()

        store.failingLeftoverReads.withLock { $0 = 1 }
        await sweeper.sweepIfDue(now: start)
        #expect(lines().contains { $0.contains(" orphan_sweep_failed ") }, "\(lines())")
        #expect(try store.sweepWatermark(host: "host-a") == nil)
        #expect(FileManager.default.fileExists(atPath: partials[0]))

        await sweeper.sweepIfDue(now: start + 1_000, force: true)
        #expect(!FileManager.default.fileExists(atPath: partials[0]), "\(lines())")
        let stopped = try #require(try store.sweepWatermark(host: "host-a"))

        store.failingLeftoverReads.withLock { $0 = 1 }
        await sweeper.sweepIfDue(now: start + 400_000)
        #expect(try store.sweepWatermark(host: "host-a") == stopped)
        let raises = store.watermarkRaises.withLock { $0 }
        await sweeper.sweepIfDue(now: start + 800_000)
        #expect(try #require(try store.sweepWatermark(host: "host-a")) >= stopped)
        // Nothing happened since: on SQLite (a seq) the position stays and nothing is written; on
        // PostgreSQL the position is a time and moves on with the clock.
        #expect(store.watermarkRaises.withLock { $0 } == raises + (engine == .sqlite ? 0 : 1))
        let reads = store.leftoverReads.withLock { $0 }
        #expect(reads == [nil, nil, stopped, stopped], "\(reads)")
    }
    /// A sweep on another machine does not look at this one's disk, so it does not move this host's
    /// watermark. The job is cancelled while its partial lies only on host A's disk (here: the file is
    /// put back after host B's sweep, which found nothing); host B's sweep raises B's watermark past the
    /// job, and host A's first sweep, reading from A's own (none yet: every final job), still removes it.
    @Test(arguments: WorkerEngine.allCases)
    func aSweepOnAnotherHostLeavesThisHostsLeftoversToItsOwnFirstSweep(engine: WorkerEngine) async throws {
        let (directory, store, ids, partials) = try Self.downloadsWithPartials("sweep-watermark-hosts", engine, count: 1)
        defer { directory.remove() }
        let (log, lines) = Self.keptLog()
        let backend = SmallJobTests.localRouter(directory)
        let start = Clock.nowMs()
        _ = try store.requestCancel(id: ids[0], actor: "cli:test", now: start)
        let onHostA = try Data(contentsOf: URL(fileURLWithPath: partials[0]))
        try FileManager.default.removeItem(atPath: partials[0])

        await OrphanSweeper(store: store, backend: backend, host: "host-b", intervalMs: 300_000, log: log).sweepIfDue(now: start + 120_000)
        #expect(try store.sweepWatermark(host: "host-b") != nil, "host B's sweep completed")
        #expect(try store.sweepWatermark(host: "host-a") == nil)
        try onHostA.write(to: URL(fileURLWithPath: partials[0]))
        // As it was: written before the job was cancelled (a file newer than the job's end is not its).
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: Double(start - 10_000) / 1000)],
                                              ofItemAtPath: partials[0])

        await OrphanSweeper(store: store, backend: backend, host: "host-a", intervalMs: 300_000, log: log).sweepIfDue(now: start + 200_000)
        #expect(store.leftoverReads.withLock { $0 } == [nil, nil], "each host's first sweep read every final job")
        #expect(!FileManager.default.fileExists(atPath: partials[0]), "\(lines())")
        #expect(lines().filter { $0.contains(" orphan_removed ") }.count == 1, "\(lines())")
    }

    /// Of two workers on one host, the one that sweeps later reads from where the other's sweep stopped
    /// when that is further than its own last sweep: draining one log together, the last to finish does
    /// not read again what the others' last sweeps read. Its own last position still counts when the
    /// watermark is behind it.
    @Test(arguments: WorkerEngine.allCases)
    func aSweepReadsFromThisHostsWatermarkWhenAnotherWorkerSweptFurther(engine: WorkerEngine) async throws {
        let (directory, store, ids, partials) = try Self.downloadsWithPartials("sweep-watermark-shared", engine, count: 2)
        defer { directory.remove() }
        let log = WorkerLog(minimumLevel: .info, write: { _ in })
        let backend = SmallJobTests.localRouter(directory)
        let first = OrphanSweeper(store: store, backend: backend, host: "host-a", intervalMs: 300_000, log: log)
        let second = OrphanSweeper(store: store, backend: backend, host: "host-a", intervalMs: 300_000, log: log)
        let start = Clock.nowMs()
        _ = try store.requestCancel(id: ids[0], actor: "cli:test", now: start)
        await first.sweepIfDue(now: start + 120_000)
        let afterFirst = try #require(try store.sweepWatermark(host: "host-a"))
        await second.sweepIfDue(now: start + 120_000)
        #expect(try store.sweepWatermark(host: "host-a") == afterFirst)

        _ = try store.requestCancel(id: ids[1], actor: "cli:test", now: start + 130_000)
        await second.sweepIfDue(now: start + 200_000, force: true)
        let afterSecond = try #require(try store.sweepWatermark(host: "host-a"))
        #expect(afterSecond > afterFirst)
        #expect(!FileManager.default.fileExists(atPath: partials[1]))
        await first.sweepIfDue(now: start + 200_000, force: true)
        let reads = store.leftoverReads.withLock { $0 }
        #expect(reads == [nil, afterFirst, afterFirst, afterSecond], "\(reads)")
    }
}
