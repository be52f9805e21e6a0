import Foundation
import Testing

/// Another SQLite client (Python's sqlite3 module) holding the database's write lock
/// (`BEGIN IMMEDIATE`) until `release()`: while it is held, no worker can commit an event, so a
/// test can hold a worker in the middle of a step that must write.
public final class SQLiteWriteLock: @unchecked Sendable {
    private let process = Process()
    private let input = Pipe()

    /// Returns once the lock is held.
    public init(database: String) throws {
        let script = """
        import sqlite3, sys
        connection = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
        connection.execute("BEGIN IMMEDIATE")
        print("locked", flush=True)
        sys.stdin.read()
        connection.execute("ROLLBACK")
        """
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: "\(PackagePaths.venv)/bin/python")
        process.arguments = ["-c", script, database]
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        let line = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        guard line.hasPrefix("locked") else {
            release()
            throw TestServerError("could not take the write lock on \(database): '\(line)'")
        }
    }

    /// Rolls back and waits for the client to exit.
    public func release() {
        try? input.fileHandleForWriting.close()
        process.waitForExit()
    }
}
