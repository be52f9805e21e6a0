import Foundation
import Testing
import TestSupport

/// A scratch workspace with its own database, for running the built `jobctl` binary.
struct CLIWorkspace {
    let directory: TemporaryDirectory
    /// The `--db` every command gets: a file in the workspace, or a PostgreSQL URL.
    let database: String

    /// A workspace whose database is a file in it (SQLite) or a fresh schema of the tests' PostgreSQL server.
    init(_ label: String = "cli", engine: StoreEngine = .sqlite) throws {
        directory = try TemporaryDirectory(label)
        switch engine {
        case .sqlite: database = directory.file("jobctl.db")
        case .postgres: database = try PostgresServer.shared().makeSchema(label)
        }
    }

    /// Writes a file into the workspace and returns its path.
    @discardableResult
    func write(_ name: String, _ text: String) throws -> String {
        let path = directory.file(name)
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Runs `jobctl --db <workspace db> ARGS`.
    func jobctl(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) throws -> ProcessOutput {
        try runProcess(PackagePaths.jobctlBinary, ["--db", database] + arguments, stdin: stdin,
                       environment: environment.merging(["NO_COLOR": "1"]) { a, _ in a }, currentDirectory: directory.path)
    }

    /// Runs jobctl and decodes its standard output as JSON.
    func json(_ arguments: [String]) throws -> Any {
        let output = try jobctl(arguments)
        guard output.status == 0 else {
            throw CLITestError("jobctl \(arguments.joined(separator: " ")) exited \(output.status): \(output.stderr)")
        }
        return try JSONSerialization.jsonObject(with: Data(output.stdout.utf8))
    }
}

struct CLITestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension CLIWorkspace {
    /// Runs `jobctl --db <workspace db> ARGS` on a pseudo-terminal (`script`) `columns` wide; the
    /// output is what the terminal received (lines end in CR LF).
    func jobctlOnTerminal(_ arguments: [String], columns: Int = 80) throws -> ProcessOutput {
        let command = ([PackagePaths.jobctlBinary, "--db", database] + arguments).map { "'\($0)'" }.joined(separator: " ")
        return try runProcess("/usr/bin/script", ["-qfec", "stty cols \(columns) rows 40; exec \(command)", "/dev/null"],
                              environment: ["NO_COLOR": "1", "TERM": "xterm", "COLUMNS": ""], currentDirectory: directory.path)
    }

    /// The ids `submit` printed for a manifest written into the workspace.
    func submit(_ manifest: String) throws -> [String] {
        let path = try write("manifest-\(UUID().uuidString.prefix(6)).yaml", manifest)
        let output = try jobctl(["submit", path])
        guard output.status == 0 else { throw CLITestError("submit exited \(output.status): \(output.stderr)") }
        return output.stdout.split(separator: "\n").map(String.init)
    }
}

extension CLIWorkspace {
    /// Runs `jobctl --db <workspace db> ARGS` (NO_COLOR set, standard output discarded) and returns its
    /// exit status, its standard error and its peak resident memory: `ru_maxrss` of that one process,
    /// from `wait4`. A small python3 process starts it and waits: Linux carries a process's peak across
    /// fork and exec, so a child of this test process (tens of MiB) would report at least that.
    func jobctlPeakMemory(_ arguments: [String]) throws -> (status: Int32, stderr: String, peakBytes: Int64) {
        let errorPath = directory.file("stderr-\(UUID().uuidString.prefix(6)).txt")
        let measured = try runProcess("/usr/bin/python3", ["-c", """
            import os, sys
            err = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            null = os.open(os.devnull, os.O_RDWR)
            pid = os.posix_spawn(sys.argv[2], sys.argv[2:], dict(os.environ, NO_COLOR="1"), file_actions=[
                (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, err, 2)])
            _, status, usage = os.wait4(pid, 0)
            print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
            """, errorPath, PackagePaths.jobctlBinary, "--db", database] + arguments)
        let fields = measured.stdout.split(separator: " ").compactMap { Int64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard measured.status == 0, fields.count == 2 else {
            throw CLITestError("measuring jobctl \(arguments.joined(separator: " ")) failed: \(measured.stdout)\(measured.stderr)")
        }
        let stderr = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        return (Int32(fields[0]), stderr, fields[1])
    }
}

/// A real `jobctl worker` on a workspace's database, started at once, its standard error written to a
/// file in the workspace (`log()` reads it as it grows). Its environment is NO_COLOR, PATH, HOME (the
/// workspace), JOBCTL_BUCKETS (the workspace's `buckets`), then `environment`. `kill()` ends it with
/// SIGKILL if it still runs and waits: call it in a `defer` (the object's end kills it too).
final class LoggedWorker {
    let process = Process()
    let logPath: String
    private let logFile: FileHandle

    init(_ workspace: CLIWorkspace, _ arguments: [String], environment: [String: String] = [:],
         logName: String = "worker.log") throws {
        logPath = workspace.directory.file(logName)
        guard FileManager.default.createFile(atPath: logPath, contents: nil),
              let file = FileHandle(forWritingAtPath: logPath) else {
            throw CLITestError("could not create \(logPath), a file the test needs")
        }
        logFile = file
        process.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        process.arguments = ["--db", workspace.database, "worker"] + arguments
        process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": workspace.directory.path,
                               "JOBCTL_BUCKETS": workspace.directory.file("buckets")].merging(environment) { _, new in new }
        process.currentDirectoryURL = URL(fileURLWithPath: workspace.directory.path)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = file
        try process.run()
    }

    /// A worker still running when its test lets it go (a failed `#require` left early) is killed with
    /// what it started: left running, it polled the rest of the run's machine for as long as the run.
    deinit {
        if process.isRunning {
            process.signalTree(SIGKILL)
            process.waitForExit(seconds: 30)
        }
        try? logFile.close()
    }

    /// What the worker has written to standard error so far.
    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` (if it still runs) and waits for it to exit.
    func stop(_ signal: Int32 = SIGTERM) {
        process.send(signal)
        process.waitForExit()
    }

    /// Ends it with SIGKILL if it still runs, and waits.
    func kill() { stop(SIGKILL) }
}

/// The lines a terminal shows: split at CR and LF, erase-line sequences removed.
func terminalLines(_ screen: String) -> [String] {
    screen.replacingOccurrences(of: "\u{1B}[2K", with: "")
        .split(whereSeparator: { $0 == "\r" || $0 == "\n" || $0 == "\r\n" }).map(String.init)
}

/// The store adapters a parameterised CLI test runs against (`--db` a file, or a `postgres://` URL).
enum StoreEngine: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }
}
