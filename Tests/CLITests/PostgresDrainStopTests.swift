import Foundation
import Testing
import TestSupport

/// A drain that stops because its PostgreSQL server went away says so, not that a disk is full.
@Suite("a drain stopped by an unreachable PostgreSQL server", .onTestThreads)
struct PostgresDrainStopTests {
    @Test("the drain's message names the unreachable server as the cause and suggests no disk space")
    func drainStopNamesTheServer() throws {
        let server = try PostgresServer.makePrivate()
        defer { server.shutDown() }
        let database = try server.makeDatabase("drainstop")
        let directory = try TemporaryDirectory("pg-drain-stop")
        defer { directory.remove() }
        // A job due in an hour holds the drain (queued anywhere holds it) with nothing running.
        let manifest = directory.file("jobs.yaml")
        try "- {kind: upload-data, data: later, destination: \"file://later/a.txt\", delay: 1h}\n"
            .write(toFile: manifest, atomically: true, encoding: .utf8)
        let environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": directory.path,
                           "JOBCTL_BUCKETS": directory.file("buckets")]
        let submitted = try runProcess(PackagePaths.jobctlBinary, ["--db", database, "submit", manifest],
                                       environment: environment, currentDirectory: directory.path)
        try #require(submitted.status == 0, "\(submitted.stderr)")

        let logPath = directory.file("worker.log")
        try #require(FileManager.default.createFile(atPath: logPath, contents: nil))
        let log = try #require(FileHandle(forWritingAtPath: logPath))
        defer { try? log.close() }
        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        worker.arguments = ["--db", database, "worker", "--drain", "--lease", "1s", "--concurrency", "1"]
        worker.environment = environment
        worker.currentDirectoryURL = URL(fileURLWithPath: directory.path)
        worker.standardOutput = FileHandle.nullDevice
        worker.standardError = log
        try worker.run()
        defer { if worker.isRunning { worker.signalTree(SIGKILL); worker.waitForExit() } }
        // The worker is up and waiting for the delayed job when the server goes.
        let started = Date()
        while Date().timeIntervalSince(started) < 30,
              !((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").contains("worker_started") {
            usleep(50_000)
        }
        usleep(300_000)
        #expect(worker.isRunning, "\((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")")
        try server.stop()

        let stopped = Date()
        _ = worker.ended(within: 60 - Date().timeIntervalSince(stopped))
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        #expect(!worker.isRunning, "still running 60 s after the server stopped: \(text.suffix(2000))")
        if worker.isRunning { return }
        #expect(worker.terminationStatus == 1, "\(text.suffix(2000))")
        let final = text.split(separator: "\n").last { $0.contains("Error: the drain stopped") }.map(String.init) ?? ""
        #expect(final.contains("the drain stopped"), "\(text.suffix(2000))")
        #expect(final.contains("check that the database server is running and reachable"), "\(final)")
        #expect(!final.contains("free space"), "\(final)")
        #expect(!text.contains(server.password))
    }
}
