import Foundation
import Testing
import TestSupport

/// A worker stops within its grace even while another process holds the database's write lock.
@Suite("A worker stops while another process holds the write lock", .onTestThreads)
struct LockedStopTests {
    /// The worker's loop was waiting to write (its rescue pass: SQLite waits up to its busy timeout,
    /// 30 s, and the store retried group commits as long): it logged `signal_received` at once but
    /// exited only when the other process let go — 23 s after SIGINT with nothing to release, 40 s
    /// after SIGTERM with four transfers to release while another client held the lock for 40 s, past
    /// systemd's 30 s stop timeout. With nothing to write it now exits at once; with runs to release,
    /// when the grace (8 s) is over.
    @Test("an idle worker stopped while another process holds the write lock exits at once")
    func idleWorkerStopsAtOnce() throws {
        let workspace = try CLIWorkspace("locked-stop")
        defer { workspace.directory.remove() }
        // The database exists; its one job is for another queue, so the worker holds nothing.
        _ = try workspace.submit("- {kind: upload-data, data: \"x\", destination: \"file://locked/x.txt\", queue: elsewhere}")
        let lock = try SQLiteWriteLock(database: workspace.database)
        defer { lock.release() }

        let worker = try LoggedWorker(workspace, ["--queue", "default"])
        defer { worker.kill() }
        try #require(eventuallyTrue(seconds: 20) { worker.log().contains(" worker_started ") }, "\(worker.log())")
        Thread.sleep(forTimeInterval: 0.5)  // its first rescue pass waits for the lock
        let signalled = Date()
        kill(worker.process.processIdentifier, SIGTERM)
        let stopped = eventuallyTrue(seconds: 5) { !worker.process.isRunning }
        #expect(stopped, "still running \(String(format: "%.1f", Date().timeIntervalSince(signalled))) s after SIGTERM: \(worker.log())")
        lock.release()  // lets a worker that waited for the lock go
        worker.process.waitForExit()
        #expect(worker.process.terminationReason == .exit && worker.process.terminationStatus == 0, "\(worker.log())")
        #expect(worker.log().contains("signal_received signal=15"), "\(worker.log())")
    }

    /// Runs whose `released` could not be written before the grace ran out (another process held the
    /// write lock) were left to their leases, as intended, but `worker_stopped` said `abandoned=0` and no
    /// line named them, while the jobs stayed `running`. Each is now logged `abandoned` and counted.
    @Test("a worker that cannot release its runs before the grace ends logs and counts them as abandoned")
    func unreleasedRunsAreCounted() throws {
        let workspace = try CLIWorkspace("locked-stop-running")
        defer { workspace.directory.remove() }
        let server = try TrickleServer(.trickle(interval: 0.05))
        defer { server.stop() }
        let ids = try workspace.submit("""
            - {kind: download-file, source: "\(server.baseURL)/a.bin", destination: out/a.bin}
            - {kind: download-file, source: "\(server.baseURL)/b.bin", destination: out/b.bin}
            """)
        try #require(ids.count == 2)
        let worker = try LoggedWorker(workspace, ["--concurrency", "2"])
        defer { worker.kill() }
        try #require(eventuallyTrue(seconds: 20) { ids.allSatisfy { worker.log().contains(" started \($0)") } }, "\(worker.log())")

        let lock = try SQLiteWriteLock(database: workspace.database)
        defer { lock.release() }

        kill(worker.process.processIdentifier, SIGTERM)
        // The grace (8 s) and a second's wait for the lock.
        #expect(eventuallyTrue(seconds: 20) { !worker.process.isRunning }, "\(worker.log())")
        worker.process.waitForExit()
        let log = worker.log()
        #expect(worker.process.terminationReason == .exit && worker.process.terminationStatus == 0, "\(log)")
        for id in ids {
            #expect(log.contains(" abandoned \(id) "), "no abandoned line for \(id):\n\(log)")
            #expect(!log.contains(" released \(id) "), "\(log)")
        }
        let stopped = try #require(log.split(separator: "\n").first { $0.contains(" worker_stopped ") }, "\(log)")
        #expect(stopped.contains(" abandoned=2 "), "\(stopped)")
        // It is the last line: nothing of the runs left behind is logged after it.
        #expect(log.split(separator: "\n").last.map(String.init) == String(stopped), "\(log)")

        lock.release()
        for id in ids {
            let shown = try workspace.jobctl(["show", id])
            #expect(shown.stdout.contains("running"), "\(shown.stdout)\(shown.stderr)")
        }
    }
}
