import Foundation
import Testing
import TestSupport

/// A database file deleted, moved away or replaced while a worker has it open: SQLite goes on writing
/// into the file it opened, which no other process reads, and a new database made at the path takes
/// over and removes the `-wal` the worker's commits were in. The worker must stop and say so, not go
/// on logging outcomes that are lost.
@Suite("A worker whose database file is moved or deleted stops", .onTestThreads)
struct MovedDatabaseTests {
    @Test("a database moved away under a running download, a new one submitted at its path: the worker stops, no outcome claimed")
    func movedUnderARun() throws {
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        try writePatternFile(nginx.root + "/slow.bin", size: 3 << 20)
        let workspace = try CLIWorkspace("moved-db-run")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("""
            jobs:
              - {kind: download-file, source: "\(nginx.baseURL)/slow.bin", destination: slow.bin, max_rate: 1M}
            """)
        let worker = try LoggedWorker(workspace, ["--drain"])
        defer { worker.kill() }
        try #require(eventuallyTrue(seconds: 20) { worker.log().contains(" started ") }, "\(worker.log())")
        try FileManager.default.moveItem(atPath: workspace.database, toPath: workspace.database + ".old")
        // Another operator's submit makes a new database at the path (and, closing, removes the -wal there).
        _ = try workspace.submit("jobs:\n  - {kind: upload-data, data: x, destination: \"file://moved/x.txt\"}")

        let stopped = eventuallyTrue(seconds: 15) { !worker.process.isRunning }
        worker.kill()
        let log = worker.log()
        #expect(stopped, "the worker went on with a database no one reads:\n\(log)")
        #expect(worker.process.terminationStatus == 1, "\(log)")
        #expect(log.contains("the database file '\(workspace.database)' was deleted or moved away while this process had it open"), "\(log)")
        #expect(!log.contains(" succeeded "), "an outcome logged as written went to a file no one reads:\n\(log)")
    }

    @Test("an idle worker whose database is deleted, or replaced by another file, stops instead of waiting on it for ever")
    func idleWorker() throws {
        for replace in [false, true] {
            let workspace = try CLIWorkspace("moved-db-idle")
            defer { workspace.directory.remove() }
            _ = try workspace.submit("jobs:\n  - {kind: upload-data, data: x, destination: \"file://idle/x.txt\"}")
            let worker = try LoggedWorker(workspace, [])
            defer { worker.kill() }
            try #require(eventuallyTrue(seconds: 20) { worker.log().contains(" succeeded ") }, "\(worker.log())")
            let database = workspace.database
            if replace {
                // A copy put in its place (a backup restored with cp and mv): another inode at the path.
                try FileManager.default.copyItem(atPath: database, toPath: database + ".copy")
                _ = rename(database + ".copy", database)
            } else {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) }
            }
            let stopped = eventuallyTrue(seconds: 10) { !worker.process.isRunning }
            worker.kill()
            let log = worker.log()
            #expect(stopped, "replace: \(replace): the worker kept waiting on a file no one writes:\n\(log)")
            #expect(worker.process.terminationStatus == 1, "\(log)")
            let what = replace ? "was replaced by another file" : "was deleted or moved away"
            #expect(log.contains("the database file '\(database)' \(what)"), "\(log)")
        }
    }
}
