import Foundation
import Testing
import TestSupport

/// Workers whose wall clock steps (NTP correcting a drifted clock, a VM resumed, an operator's `date -s`)
/// while they run. Leases, retry times and event times are wall-clock times, but a step must not make a
/// worker lose, repeat or fail the jobs it holds. The worker runs under libfaketime (Debian's
/// `faketime`), which reads the clock's offset from a file the test rewrites; the monotonic clock stays
/// real, as it does when the real wall clock steps.
@Suite("a wall clock that steps under a running worker", .onTestThreads)
struct ClockStepTests {
    /// libfaketime's multi-threaded library (`/usr/lib/<triplet>/faketime/libfaketimeMT.so.1`).
    static func fakeTimeLibrary() -> String? {
        let lib = "/usr/lib"
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: lib)) ?? []
        return entries.map { "\(lib)/\($0)/faketime/libfaketimeMT.so.1" }.first { FileManager.default.fileExists(atPath: $0) }
    }

    /// The environment that runs a process under libfaketime, its offset read from `offsetFile` at every
    /// clock reading (`+0`, `+2h`, `-1h`).
    static func fakeTimeEnvironment(offsetFile: String) throws -> [String: String] {
        let library = try #require(fakeTimeLibrary(), "libfaketime is not installed (Debian package faketime; make test installs it)")
        return ["LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": offsetFile, "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1"]
    }

    /// `jobctl --db DB worker ARGS` under libfaketime, its standard error in `log`. Started through
    /// `env`: a jobctl spawned directly with libfaketime preloaded saw no arguments at all.
    static func startWorker(_ workspace: CLIWorkspace, _ arguments: [String], offsetFile: String, log: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [PackagePaths.jobctlBinary, "--db", workspace.database, "worker"] + arguments
        process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": workspace.directory.path,
                               "JOBCTL_BUCKETS": workspace.directory.file("buckets")]
            .merging(try fakeTimeEnvironment(offsetFile: offsetFile)) { _, new in new }
        process.currentDirectoryURL = URL(fileURLWithPath: workspace.directory.path)
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle(forWritingAtPath: log)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// The worker's rescue ran before its heartbeat: after a forward step longer than the lease, the
    /// rescue at the new time found the worker's own live lease expired and took the job back —
    /// `lease_expired` by the worker itself, the running transfer abandoned and, with max_attempts 1, the
    /// job failed with retryLimitExceeded although nothing had gone wrong with it.
    @Test("a clock stepped forward past the lease does not make the worker expire its own running job")
    func forwardStepKeepsTheLease() throws {
        let workspace = try CLIWorkspace("clock-step-forward")
        defer { workspace.directory.remove() }
        let server = try TrickleServer(.trickle(interval: 0.05))
        defer { server.stop() }
        let offsetFile = try workspace.write("faketime-offset", "+0\n")
        let id = try #require(try workspace.submit("""
            - kind: download-file
              source: \(server.baseURL)/slow.bin
              destination: out/slow.bin
              max_attempts: 1
            """).first)
        let log = workspace.directory.file("worker.log")
        let worker = try Self.startWorker(workspace, ["--lease", "30s", "--concurrency", "1"], offsetFile: offsetFile, log: log)
        defer { if worker.isRunning { worker.signalTree(SIGKILL); worker.waitForExit() } }
        let workerLog = { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        try #require(eventuallyTrue(seconds: 20) { workerLog().contains(" started \(id)") }, "\(workerLog())")

        try "+2h\n".write(toFile: offsetFile, atomically: true, encoding: .utf8)
        // The loop heartbeats and rescues within a poll interval or two; the rescue runs every 5 s at most.
        Thread.sleep(forTimeInterval: 7)

        let history = try workspace.jobctl(["history", id])
        #expect(!history.stdout.contains("lease_expired"), "the worker expired its own live lease:\n\(history.stdout)")
        #expect(!workerLog().contains("lease_lost"), "\(workerLog())")
        let shown = try workspace.jobctl(["show", id])
        #expect(shown.stdout.contains("running"), "\(shown.stdout)\(shown.stderr)")
        #expect(!shown.stdout.contains("retryLimitExceeded"), "\(shown.stdout)")

        signalIfRunning(worker, SIGTERM)
        worker.waitForExit()
        #expect(worker.terminationStatus == 0, "\(workerLog())")
    }

    /// A run's duration (and the rate derived from it) was the difference of two wall-clock times: a 4 s
    /// download across a 2 h step forward was logged `succeeded … duration_ms=7204…` at a rate of a few
    /// hundred bytes a second. Measured on the monotonic clock, it is the 4 s the transfer took.
    @Test("a run's logged duration is the time it took, whatever the wall clock did meanwhile")
    func durationIgnoresTheStep() throws {
        let workspace = try CLIWorkspace("clock-step-duration")
        defer { workspace.directory.remove() }
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        try FileManager.default.createDirectory(atPath: nginx.root + "/step", withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 4 << 20).write(to: URL(fileURLWithPath: nginx.root + "/step/down.bin"))
        let offsetFile = try workspace.write("faketime-offset", "+0\n")
        let id = try #require(try workspace.submit("""
            - {kind: download-file, source: "\(nginx.baseURL)/step/down.bin", destination: down.bin, max_rate: 1M}
            """).first)
        let log = workspace.directory.file("worker.log")
        let worker = try Self.startWorker(workspace, ["--drain"], offsetFile: offsetFile, log: log)
        defer { if worker.isRunning { worker.signalTree(SIGKILL); worker.waitForExit() } }
        let workerLog = { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        try #require(eventuallyTrue(seconds: 20) { workerLog().contains(" started \(id)") }, "\(workerLog())")
        try "+2h\n".write(toFile: offsetFile, atomically: true, encoding: .utf8)
        worker.waitForExit()
        #expect(worker.terminationStatus == 0, "\(workerLog())")

        let succeeded = try #require(workerLog().split(separator: "\n").first { $0.contains(" succeeded \(id)") }, "\(workerLog())")
        let duration = try #require(succeeded.split(separator: " ").first { $0.hasPrefix("duration_ms=") }
            .flatMap { Int64($0.dropFirst("duration_ms=".count)) }, "\(succeeded)")
        #expect((2_000..<60_000).contains(duration), "\(succeeded)")
        #expect(!workerLog().contains("slow_commit"), "\(workerLog())")
    }
}
