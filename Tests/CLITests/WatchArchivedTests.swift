import Foundation
import Testing
import TestSupport

/// `watch` on a job that is archived before the watcher sees it end (a job leaves the log only so).
@Suite("watch of an archived job", .onTestThreads) struct WatchArchivedTests {
    @Test("watch ID and watch --batch whose jobs were archived before they saw the end say so and exit 1",
          arguments: StoreEngine.allCases)
    func watchedJobArchived(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("watch-archived", engine: engine)
        defer { workspace.directory.remove() }
        // A prefix's jobs share a batch id.
        try workspace.write("buckets/b/x", "1")
        try workspace.write("buckets/b/y", "2")
        try workspace.write("m.yaml", "- {kind: download-file, source: \"file://b/\", destination: \"out/\"}\n")
        let submitted = try #require(try workspace.json(["submit", "m.yaml", "--json"]) as? [[String: Any]])
        let ids = submitted.compactMap { $0["id"] as? String }
        let batch = try #require(submitted.first?["batch"] as? String)
        try #require(ids.count == 2)

        func start(_ arguments: [String]) throws -> (Process, Pipe) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
            process.arguments = ["--db", workspace.database, "watch"] + arguments
            process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin"]
            process.currentDirectoryURL = URL(fileURLWithPath: workspace.directory.path)
            let errors = Pipe()
            process.standardOutput = FileHandle.nullDevice
            process.standardError = errors
            try process.run()
            return (process, errors)
        }
        let watchers = [try start([ids[0]]), try start(["--batch", batch])]
        defer { for (process, _) in watchers where process.isRunning { kill(process.processIdentifier, SIGCONT); process.terminate() } }
        // Both are polling (they found their jobs queued); frozen, they miss everything that follows.
        usleep(1_000_000)
        for (process, _) in watchers {
            try #require(process.isRunning)
            kill(process.processIdentifier, SIGSTOP)
        }
        let cancel = try workspace.jobctl(["cancel"] + ids)
        #expect(cancel.status == 0, "\(cancel.stderr)")
        let archive = try workspace.jobctl(["archive", "--before", "0s", "--to", "old.jsonl.gz"])
        #expect(archive.status == 0, "\(archive.stderr)")
        for (process, _) in watchers { kill(process.processIdentifier, SIGCONT) }

        for ((process, errors), what) in zip(watchers, ["job \(ids[0]) is", "2 jobs of batch \(batch) are"]) {
            let deadline = Date().addingTimeInterval(10)
            while process.isRunning && Date() < deadline { usleep(20_000) }
            #expect(!process.isRunning, "watch (\(what)) still polls for a job that is gone")
            if process.isRunning { process.terminate() }
            process.waitForExit()
            let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(process.terminationStatus == 1, "\(what): \(stderr)")
            #expect(stderr.contains("\(what) no longer in the log") && stderr.contains("jobctl audit --from old.jsonl.gz"), "\(stderr)")
        }
    }
}
