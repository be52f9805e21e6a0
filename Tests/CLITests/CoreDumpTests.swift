import Foundation
import Testing
import TestSupport

/// A worker holding credentials writes no core dump: one taken with `kill -QUIT` held the access token and
/// the service account's private key. A worker with nothing secret still writes one (the control, which
/// also shows the test can fail).
@Suite(.onTestThreads) struct CoreDumpTests {
    /// Whether this machine writes cores as plain files in the crashing process's folder (`core`,
    /// `core.PID`): under a pipe (systemd-coredump, apport) the test cannot look for the file.
    static var coresAreFilesHere: Bool {
        guard let pattern = try? String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8) else { return false }
        let trimmed = pattern.trimmingCharacters(in: .whitespacesAndNewlines)
        return !trimmed.hasPrefix("|") && !trimmed.contains("/")
    }

    /// Starts a worker under `ulimit -c unlimited` with `environment`, waits for it to start, sends
    /// SIGQUIT, and returns the core files its folder then holds (removed).
    private func coresAfterQuit(_ name: String, environment: [String: String]) throws -> [String] {
        let workspace = try CLIWorkspace(name)
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let log = workspace.directory.file("worker.log")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "ulimit -c unlimited && exec \"$0\" \"$@\" 2>\"$LOG\"", PackagePaths.jobctlBinary,
                             "--db", workspace.database, "worker"]
        process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": workspace.directory.path, "LOG": log,
                               "JOBCTL_BUCKETS": workspace.directory.file("buckets")].merging(environment) { _, new in new }
        process.currentDirectoryURL = URL(fileURLWithPath: workspace.directory.path)
        try process.run()
        defer { if process.isRunning { _ = process.signalTree(SIGKILL); process.waitForExit(seconds: 30) } }
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, !((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("worker_started") {
            Thread.sleep(forTimeInterval: 0.05)
        }
        process.send(SIGQUIT)
        process.waitForExit(seconds: 60)
        #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGQUIT,
                "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        let names = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path).filter { $0 == "core" || $0.hasPrefix("core.") }
        return names
    }

    @Test("a worker holding an access token writes no core dump; one holding nothing secret does",
          .enabled(if: coresAreFilesHere, "cores are not plain files in the process's folder here"))
    func noCoreWithSecrets() throws {
        #expect(try coresAfterQuit("core-secret", environment: ["GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.core-dump-probe"]).isEmpty)
        #expect(try coresAfterQuit("core-plain", environment: [:]).count == 1)
    }
}
