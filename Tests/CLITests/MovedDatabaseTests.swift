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
        // Moved away, or replaced by the new database when that is made before the worker's next look.
        #expect(["was deleted or moved away", "was replaced by another file"].contains { log.contains("the database file '\(workspace.database)' \($0)") },
                "\(log)")
        #expect(!log.contains(" succeeded "), "an outcome logged as written went to a file no one reads:\n\(log)")
    }

    @Test("a database emptied under a running download (`: > db`): the worker stops, not only the job")
    func truncatedUnderARun() throws {
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        try writePatternFile(nginx.root + "/slow.bin", size: 4 << 20)
        let workspace = try CLIWorkspace("truncated-db-run")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("""
            jobs:
              - {kind: download-file, source: "\(nginx.baseURL)/slow.bin", destination: slow.bin, max_rate: 1M}
            """)
        let worker = try LoggedWorker(workspace, [])
        defer { worker.kill() }
        try #require(eventuallyTrue(seconds: 20) { worker.log().contains(" started ") }, "\(worker.log())")
        try #require(truncate(workspace.database, 0) == 0)
        // The job's next write (a checkpoint, its outcome) finds the file damaged; the loop's own questions
        // may still be answered from cached pages, and the worker idled on for ever, its job abandoned.
        let stopped = eventuallyTrue(seconds: 15) { !worker.process.isRunning }
        worker.kill()
        let log = worker.log()
        #expect(stopped, "the worker went on with a damaged database:\n\(log)")
        #expect(worker.process.terminationStatus == 1, "\(log)")
        #expect(log.contains("store_error") && log.contains("action=stopping"), "\(log)")
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

/// One database file under two hard-linked names: SQLite keeps the -wal and -shm (where WAL mode takes
/// its locks) beside the name it opened, so two workers using the two names shared no lock and no log.
@Suite("A hard-linked database is refused", .onTestThreads)
struct HardLinkedDatabaseTests {
    @Test("two workers on two hard links of one database: refused, not every job run twice")
    func twoNames() throws {
        let workspace = try CLIWorkspace("hard-linked-db")
        defer { workspace.directory.remove() }
        let jobs = (0..<100).map { "  - {kind: upload-data, data: \"x\($0)\", destination: \"file://linked/x\($0).txt\"}" }
        _ = try workspace.submit("jobs:\n" + jobs.joined(separator: "\n"))
        let second = workspace.database + "-second-name"
        try FileManager.default.linkItem(atPath: workspace.database, toPath: second)
        let first = try LoggedWorker(workspace, ["--drain", "--concurrency", "2"])
        defer { first.kill() }
        let other = try runProcess(PackagePaths.jobctlBinary, ["--db", second, "worker", "--drain", "--concurrency", "2"],
                                   environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets")],
                                   currentDirectory: workspace.directory.path)
        first.process.waitForExit()
        // Both are refused: the file has two names whichever one a process opens it by.
        #expect(first.process.terminationStatus == 1, "\(first.log())")
        #expect(other.status == 1, "\(other.stderr)")
        #expect(other.stderr.contains("'\(second)' has 2 hard links") && !other.stderr.contains("I/O error"), "\(other.stderr)")
        let claims = other.stderr.split(separator: "\n").filter { $0.contains(" claimed ") }.count
        #expect(claims == 0, "the worker on the second name ran \(claims) jobs the first one ran too")
        // Reading by either name is refused the same way: each would make its own -wal and -shm.
        let list = try workspace.jobctl(["list"])
        #expect(list.status == 1 && list.stderr.contains("has 2 hard links"), "\(list.stderr)")
    }
}
