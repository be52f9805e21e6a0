import Foundation
import TestSupport

/// A scratch workspace with its own database, for running the built `jobctl` binary.
struct CLIWorkspace {
    let directory: TemporaryDirectory
    var database: String { directory.file("jobctl.db") }

    init(_ label: String = "cli") throws {
        directory = try TemporaryDirectory(label)
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
