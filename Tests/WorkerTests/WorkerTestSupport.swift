import EventStore
import Foundation
import JobModel
import TestSupport

/// A `jobctl worker` (or other long-running jobctl) child process, killable with any signal.
final class JobctlProcess: @unchecked Sendable {
    let process = Process()
    let logPath: String

    init(database: String, arguments: [String], environment: [String: String] = [:], logDirectory: String) throws {
        logPath = "\(logDirectory)/jobctl-\(UUID().uuidString.prefix(6)).log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        process.arguments = ["--db", database] + arguments
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
                       logDirectory: String) throws -> JobctlProcess {
        try JobctlProcess(database: database, arguments: ["worker"] + arguments, environment: environment, logDirectory: logDirectory)
    }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for exit up to `seconds`; returns the status, or nil on timeout.
    func wait(seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { return nil }
        return process.terminationStatus
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
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

/// Submits a manifest through the built binary and returns the job ids.
func submit(_ manifest: String, database: String, directory: TemporaryDirectory) throws -> [String] {
    let path = directory.file("manifest-\(UUID().uuidString.prefix(6)).yaml")
    try manifest.write(toFile: path, atomically: true, encoding: .utf8)
    let output = try runProcess(PackagePaths.jobctlBinary, ["--db", database, "submit", path])
    guard output.status == 0 else { throw WorkerTestError("submit failed (\(output.status)): \(output.stderr)") }
    return output.stdout.split(separator: "\n").map(String.init)
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
