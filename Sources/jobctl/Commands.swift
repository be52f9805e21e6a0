import Foundation
import JobLifecycle
import JobModel
import StorePort

/// The command table: one static `CommandSpec` per command, defined in `Commands+*.swift`.
enum Commands {}

// MARK: - Shared option reading

extension ParsedArguments {
    /// `--state` as a filter set (nil when not given).
    func stateSet() throws -> Set<JobState>? {
        let states = try values(Options.state).flatMap { $0 }
        return states.isEmpty ? nil : Set(states)
    }

    /// `--kind` as a filter set (nil when not given).
    func kindSet() throws -> Set<JobKind>? {
        let kinds = try values(Options.kind).flatMap { $0 }
        return kinds.isEmpty ? nil : Set(kinds)
    }

    /// How URLs are shown: redacted unless the command accepts `--show-secrets` and it was given.
    var display: Display { Display(showSecrets: self[Options.showSecrets]) }
}

// MARK: - Writing results

/// Writes `data` to `path` (created or truncated), or a failure naming the path.
func write(_ data: Data, toFile path: String) throws {
    guard FileManager.default.createFile(atPath: path, contents: data) else {
        throw CommandFailure("cannot write '\(path)': \(String(cString: strerror(errno))); check the directory exists and is writable")
    }
}
