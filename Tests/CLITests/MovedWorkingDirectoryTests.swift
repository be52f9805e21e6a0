import Foundation
import Testing
import TestSupport

/// A worker given relative paths (`--db ../data/jobctl.db`, `JOBCTL_BUCKETS=../buckets`) whose current
/// directory is moved while it runs: the paths mean what they meant when it started. The database check
/// looked the relative path up again at every commit, so the worker stopped as if its database had been
/// moved away (it had not), and a relative bucket folder followed the moved directory.
@Suite("a worker's current directory moved while it runs", .onTestThreads)
struct MovedWorkingDirectoryTests {
    @Test("relative --db and JOBCTL_BUCKETS keep naming the files they named at start after the current directory moves")
    func relativePathsSurviveAMovedCurrentDirectory() throws {
        let workspace = try CLIWorkspace("moved-cwd")
        defer { workspace.directory.remove() }
        let run = workspace.directory.file("run")
        let elsewhere = workspace.directory.file("elsewhere")
        try FileManager.default.createDirectory(atPath: run, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let relativeDatabase = "../" + URL(fileURLWithPath: workspace.database).lastPathComponent

        let log = workspace.directory.file("worker.log")
        #expect(FileManager.default.createFile(atPath: log, contents: nil))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        defer { try? handle.close() }
        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        worker.arguments = ["--db", relativeDatabase, "worker"]
        worker.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "JOBCTL_BUCKETS": "../buckets"]
        worker.currentDirectoryURL = URL(fileURLWithPath: run)
        worker.standardOutput = FileHandle.nullDevice
        worker.standardError = handle
        try worker.run()
        defer {
            worker.signalTree(SIGKILL)
            worker.waitForExit()
        }
        func text() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        try #require(eventuallyTrue(seconds: 30) { text().contains("worker_started") }, "\(text())")

        // The folder it runs in moves; the database and the buckets stay where they were.
        try FileManager.default.moveItem(atPath: run, toPath: elsewhere + "/run")
        let ids = try workspace.submit("jobs:\n  - {kind: upload-data, data: moved, destination: \"file://b/x.txt\"}")
        let done = eventuallyTrue(seconds: 30) { text().contains(" succeeded ") || !worker.isRunning }
        #expect(done && worker.isRunning, "the worker stopped: \(text())")
        #expect(!text().contains("was deleted or moved away"), "\(text())")
        #expect((try? String(contentsOfFile: workspace.directory.file("buckets/b/x.txt"), encoding: .utf8)) == "moved",
                "\(text())")
        #expect(!FileManager.default.fileExists(atPath: elsewhere + "/buckets"), "a bucket folder followed the moved directory")
        let shown = try workspace.json(["show", ids[0], "--json"]) as? [String: Any]
        #expect(shown?["state"] as? String == "succeeded", "\(shown ?? [:])")
        signalIfRunning(worker, SIGTERM)
        worker.waitForExit()
        #expect(worker.terminationStatus == 0, "\(text())")
    }
}
