import Foundation
import Testing
import TestSupport

/// A worker whose database's write-ahead log fails to sync stops with the reason, instead of retrying
/// and reporting later commits written: after a failed `fdatasync` a later one proves nothing.
@Suite("A worker on a disk that failed a sync", .onTestThreads)
struct FailedSyncWorkerTests {
    @Test func theWorkerStops() throws {
        let workspace = try CLIWorkspace("failed-sync-worker")
        defer { workspace.directory.remove() }
        // Claimed once the log's WAL no longer syncs.
        _ = try workspace.submit("jobs:\n  - {kind: upload-data, data: x, destination: \"file://sync/x.txt\", delay: 6s}")
        let worker = try LoggedWorker(workspace, [])
        defer { worker.kill() }
        try #require(eventuallyTrue(seconds: 20) { worker.log().contains("worker_started") }, "\(worker.log())")
        // The WAL's path names /dev/null (whose fdatasync fails) while the worker's SQLite keeps the real
        // file open: the worker's next commit is its claim, whose sync then fails.
        let wal = workspace.database + "-wal"
        let aside = workspace.directory.file("wal-aside")
        try #require(rename(wal, aside) == 0 && symlink("/dev/null", wal) == 0)
        let stopped = eventuallyTrue(seconds: 30) { !worker.process.isRunning }
        worker.kill()
        _ = unlink(wal)
        _ = rename(aside, wal)
        let log = worker.log()
        #expect(stopped, "the worker went on after a failed sync:\n\(log)")
        #expect(worker.process.terminationStatus == 1, "\(log)")
        #expect(log.contains("the disk did not confirm the event log's writes"), "\(log)")
        #expect(!log.contains(" succeeded "), "\(log)")
    }
}
