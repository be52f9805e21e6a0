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
