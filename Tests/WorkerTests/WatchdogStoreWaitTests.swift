@testable import Worker
import EventStore
import Foundation
import JobLifecycle
import JobModel
import PostgresStore
import Testing
import TestSupport

/// A worker under a `Type=notify` unit with `WatchdogSec=` whose store holds its loop longer than the
/// watchdog's interval, within the limits jobctl sets (a PostgreSQL server silent for less than the
/// answer limit, an SQLite write lock another process holds for less than the busy timeout). Fed only
/// from the loop's turns, it stopped pinging for as long, and systemd killed (SIGABRT) a worker that
/// would have recovered, its transfers' progress lost. The store's wait feeds the watchdog now: the
/// test's socket, read as systemd reads it, gets `WATCHDOG=1` inside every interval throughout.
@Suite("the watchdog is fed while the store holds the worker's loop within its limits", .onTestThreads)
struct WatchdogStoreWaitTests {
    /// `WATCHDOG_USEC`: an interval of 4 s, a ping due every 2 s.
    static let intervalSeconds = 4.0
    /// How long the store is held: twice the interval.
    static let holdSeconds: UInt32 = 8

    /// The whole path to the server stops carrying bytes for twice the watchdog's interval, then heals (a
    /// partition); the lease (30 s, so the answer limit) is longer than the interval.
    @Test func aPostgresServerSilentLongerThanTheInterval() throws {
        let scene = try SlowDownload(directory: "pg-watchdog", schema: "pgwatchdog", mebibytes: 14)
        defer { scene.stop() }
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port)
        defer { proxy.stop() }
        let store = try PostgresStore(url: scene.database, mode: .readOnly)
        try Self.runThroughAHold(database: try PostgresNetworkFaultTests.proxied(scene.database, proxy), directory: scene.directory,
                                 job: scene.job, store: store, hold: { proxy.partition() }, release: { proxy.heal() })
    }

    /// Another process holds the SQLite database's write lock (`BEGIN IMMEDIATE`) for twice the watchdog's
    /// interval, less than the busy timeout (30 s).
    @Test func anSQLiteWriteLockHeldLongerThanTheInterval() throws {
        let nginx = try startWorkerNginx(slowRate: "1m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("sqlite-watchdog")
        defer { directory.remove() }
        let database = directory.file("jobs.db")
        let migrated = try jobctl(["migrate"], database: database)
        try #require(migrated.status == 0, "\(migrated.stderr)")
        try writePatternFile("\(nginx.root)/slow/big.bin", size: 14 << 20)
        let job = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", "
                                              + "destination: \"\(directory.file("big.bin"))\", max_attempts: 1}\n",
                                          database: database, directory: directory).first)
        let store = try EventStore(path: database, mode: .readOnly)
        var lock: SQLiteWriteLock?
        try Self.runThroughAHold(database: database, directory: directory, job: job, store: store,
                                 hold: { lock = try SQLiteWriteLock(database: database) }, release: { lock?.release() })
    }

    /// Runs a worker (lease 30 s, watchdog 4 s) on `job`, a download of about 14 s, holds its store with
    /// `hold` once the download is under way and lets it go with `release` `holdSeconds` later; expects a
    /// ping inside every interval from then until the job succeeded, the worker still running, and the
    /// job run once.
    static func runThroughAHold(database: String, directory: TemporaryDirectory, job: String, store: any JobStore,
                                hold: () throws -> Void, release: () -> Void) throws {
        let listener = try NotifySocket()
        let pings = WatchdogPings(listener)
        defer { pings.stop() }
        let worker = try JobctlProcess.worker(database: database, ["--lease", "30", "--concurrency", "1"],
                                              environment: ["NOTIFY_SOCKET": listener.name,
                                                            "WATCHDOG_USEC": "\(Int(intervalSeconds * 1_000_000))"],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        try #require(try eventually(seconds: 20) { try store.events(jobID: job).contains { $0.type == .progress } }, "\(worker.log)")
        let watched = Date()
        try hold()
        let held = Date()
        sleep(holdSeconds)
        release()
        let released = Date()
        let succeeded = try eventually(seconds: 30) { try store.job(job)?.state == .succeeded }
        let ended = Date()
        let gap = pings.longestGap(from: watched, to: ended)
        let during = pings.received.filter { $0 > held && $0 < released }.count
        let heldFor = String(format: "%.1f", released.timeIntervalSince(held))
        #expect(gap < intervalSeconds, "\(String(format: "%.1f", gap)) s without WATCHDOG=1 (\(during) pings while held for \(heldFor) s): \(worker.log)")
        #expect(worker.process.isRunning, "\(worker.log)")
        #expect(succeeded, "\(worker.log)")
        let record = try #require(try store.job(job))
        #expect(record.state == .succeeded && record.attempts == 1, "\(record.state) \(worker.log)")
        let types = try store.events(jobID: job).map(\.type)
        #expect(types.filter { $0 == .claimed }.count == 1 && types.filter { $0 == .succeeded }.count == 1
                    && !types.contains(.leaseExpired), "\(types)")
        #expect(!worker.log.contains("lease_lost"), "\(worker.log)")
        worker.signal(SIGTERM)
        #expect(worker.wait(seconds: 20) == 0, "\(worker.log)\(worker.threads)")
    }
}
