import EventStore
import Foundation
import Synchronization
import Testing
import JobModel
import TestSupport

/// A `jobctl worker` (or other long-running jobctl) child process, killable with any signal.
final class JobctlProcess: @unchecked Sendable {
    let process = Process()
    let logPath: String

    /// - Parameter cleanSignalMask: start jobctl with no signal blocked, as a shell would. A child
    ///   otherwise inherits the blocked-signal mask of the test thread that spawns it (test threads
    ///   block most signals), which would hide how jobctl itself handles an early SIGTERM.
    /// - Parameter tracer: a command (strace and its options) that runs jobctl as its child; `killTracee`
    ///   signals jobctl itself.
    /// - Parameter journaled: set `JOURNAL_STREAM` to the log file's `device:inode`, as systemd names the
    ///   journal stream it connects a service's standard error to.
    init(database: String, arguments: [String], environment: [String: String] = [:], logDirectory: String,
         cleanSignalMask: Bool = false, tracer: [String]? = nil, journaled: Bool = false) throws {
        logPath = "\(logDirectory)/jobctl-\(UUID().uuidString.prefix(6)).log"
        #expect(FileManager.default.createFile(atPath: logPath, contents: nil), "could not create a file the test needs")
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        var environment = environment
        if journaled {
            var status = stat()
            #expect(fstat(log.fileDescriptor, &status) == 0)
            environment["JOURNAL_STREAM"] = "\(status.st_dev):\(status.st_ino)"
        }
        if cleanSignalMask {
            // Python clears the mask and execs jobctl in the same process (same pid).
            process.executableURL = URL(fileURLWithPath: "\(PackagePaths.venv)/bin/python")
            process.arguments = ["-c", "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execv(sys.argv[1], sys.argv[1:])",
                                 PackagePaths.jobctlBinary, "--db", database] + arguments
        } else if let tracer, let command = tracer.first {
            process.executableURL = URL(fileURLWithPath: command)
            process.arguments = Array(tracer.dropFirst()) + [PackagePaths.jobctlBinary, "--db", database] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
            process.arguments = ["--db", database] + arguments
        }
        var env = ProcessInfo.processInfo.environment
        env["NO_COLOR"] = "1"
        for (key, value) in environment { env[key] = value }
        process.environment = env
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    static func worker(database: String, _ arguments: [String] = [], environment: [String: String] = [:],
                       logDirectory: String, cleanSignalMask: Bool = false, journaled: Bool = false) throws -> JobctlProcess {
        try JobctlProcess(database: database, arguments: ["worker"] + arguments, environment: environment, logDirectory: logDirectory,
                          cleanSignalMask: cleanSignalMask, journaled: journaled)
    }

    /// Sends `number` to the process; SIGKILL goes to everything it started too (a tracer's jobctl, a
    /// worker's token command), which would otherwise keep it "running" to Foundation (`waitForExit`).
    func signal(_ number: Int32) { process.send(number) }

    /// Sends `number` to the jobctl a tracer started (the tracer's child); returns whether there was one.
    func killTracee(_ number: Int32) -> Bool {
        let pid = process.processIdentifier
        guard process.isRunning, let children = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else {
            return false
        }
        let tracees = children.split(separator: " ").compactMap { Int32($0) }.filter(runsJobctl(pid:))
        for tracee in tracees { kill(tracee, number) }
        return !tracees.isEmpty
    }

    /// Whether a thread of the jobctl a tracer started is stopped in system call `number` (the machine's
    /// numbering, `SYS_…`, as `/proc/PID/task/TID/syscall` shows it): held there by the tracer's injected delay.
    func traceeIsIn(syscall number: Int) -> Bool {
        let pid = process.processIdentifier
        guard process.isRunning, let children = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else {
            return false
        }
        for tracee in children.split(separator: " ").compactMap({ Int32($0) }).filter(runsJobctl(pid:)) {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(tracee)/task")) ?? []
            for task in tasks {
                let call = (try? String(contentsOfFile: "/proc/\(tracee)/task/\(task)/syscall", encoding: .utf8)) ?? ""
                if call.split(separator: " ").first == Substring(String(number)) { return true }
            }
        }
        return false
    }

    /// Waits for exit up to `seconds`; returns the status, or nil on timeout (then `threads` says what the
    /// process waited on).
    func wait(seconds: Double) -> Int32? {
        guard process.ended(within: seconds) else {
            stuck.withLock { $0 = StuckTests.threads(of: process.processIdentifier) }
            return nil
        }
        return process.terminationStatus
    }

    /// What the process's threads waited on when a `wait` last ran out (empty when none did): for the
    /// message of a test whose worker did not exit.
    var threads: String { stuck.withLock { $0 } }
    private let stuck = Mutex("")

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    deinit {
        if process.isRunning {
            process.signalTree(SIGKILL)
            process.waitForExit(seconds: 30)
        }
    }
}

/// Polls `condition` every 10 ms until it holds or `seconds` pass. Returns whether it held.
func eventually(seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(10_000)
    }
    return try condition()
}

/// `eventually` for async tests: waits without blocking a cooperative thread, which an in-process pool
/// under test needs.
func eventually(seconds: Double, _ condition: () throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1_000))
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return try condition()
}

/// Submits a manifest through the built binary and returns the job ids.
func submit(_ manifest: String, database: String, directory: TemporaryDirectory) throws -> [String] {
    let path = directory.file("manifest-\(UUID().uuidString.prefix(6)).yaml")
    try manifest.write(toFile: path, atomically: true, encoding: .utf8)
    let output = try runProcess(PackagePaths.jobctlBinary, ["--db", database, "submit", path])
    guard output.status == 0 else { throw WorkerTestError("submit failed (\(output.status)): \(output.stderr)") }
    return output.stdout.split(separator: "\n").map(String.init)
}

/// A database on the shared test PostgreSQL with roles made for `label`, migrated by its owner and granted
/// to its worker role: the worker role's URL, what workers connect with.
func grantedWorkerDatabase(_ label: String) throws -> String {
    let roles = try PostgresServer.shared().makeRoles(label)
    let granted = try jobctl(["migrate", "--grant", roles.worker], database: roles.ownerURL)
    try #require(granted.status == 0, "\(granted.stderr)")
    return roles.workerURL
}

/// Runs a jobctl command to completion against `database`.
@discardableResult
func jobctl(_ arguments: [String], database: String) throws -> ProcessOutput {
    try runProcess(PackagePaths.jobctlBinary, ["--db", database] + arguments, environment: ["NO_COLOR": "1"])
}

struct WorkerTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Whether process `pid` has SIGTERM and SIGINT blocked (`SigBlk` in /proc/PID/status).
func shutdownSignalsBlocked(pid: Int32) -> Bool {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }),
          let mask = UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16) else { return false }
    let wanted: UInt64 = (1 << UInt64(SIGTERM - 1)) | (1 << UInt64(SIGINT - 1))
    return mask & wanted == wanted
}

/// Whether process `pid` has a file open whose path starts with `prefix` (a database and its -wal/-shm).
func hasOpenFile(pid: Int32, prefix: String) -> Bool {
    let resolved = URL(fileURLWithPath: prefix).resolvingSymlinksInPath().path
    guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return false }
    return descriptors.contains { descriptor in
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(descriptor)") else { return false }
        return target.hasPrefix(resolved) || target.hasPrefix(prefix)
    }
}

/// Whether process `pid` is running the jobctl binary (it may still be a launcher about to exec it).
func runsJobctl(pid: Int32) -> Bool {
    guard let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe") else { return false }
    return executable == URL(fileURLWithPath: PackagePaths.jobctlBinary).resolvingSymlinksInPath().path
}
