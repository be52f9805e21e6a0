import Foundation
import JobModel

/// Where each storage setting's value came from, by the environment variable it is read through: the
/// environment itself, a key of a configuration file, or a `worker` flag.
///
/// A configuration file's values reach the storage settings through the environment (`jobctl` fills a
/// variable the environment leaves unset with the file's value), so every message about a value named
/// the variable — "JOBCTL_CA_BUNDLE names '/etc/ca.pem', which holds no PEM certificate" — to a user who
/// had written `ca_bundle:` in a file and set no variable. Messages name what the user wrote instead.
public struct SettingOrigins: Sendable, Hashable {
    public enum Origin: Sendable, Hashable {
        /// The variable itself (set, or unset and the default applying).
        case environment
        /// A configuration file's `key`, at `place` (`FILE:LINE:COL`).
        case file(key: String, place: String)
        /// A `worker` flag (`--stall-timeout`).
        case flag(String)
    }

    private var origins: [String: Origin]

    /// Every setting from the environment, except those `origins` (by variable) says otherwise.
    public init(_ origins: [String: Origin] = [:]) {
        self.origins = origins
    }

    /// Where the setting read through `variable` came from.
    public subscript(variable: String) -> Origin {
        get { origins[variable] ?? .environment }
        set { origins[variable] = newValue }
    }

    /// How a message at start — printed to whoever runs the command, about the machine it runs on —
    /// names the setting: the variable, `KEY (FILE:LINE:COL)`, or the flag.
    public func name(_ variable: String) -> String {
        switch self[variable] {
        case .environment: variable
        case .file(let key, let place): "\(key) (\(place))"
        case .flag(let flag): flag
        }
    }

    /// How a message about a job names the setting. It is recorded in the event log, read later and from
    /// other machines, where a configuration file's path and line mean nothing (and the file has been
    /// edited since): a file's key is named without them.
    public func jobName(_ variable: String) -> String {
        switch self[variable] {
        case .file(let key, _): "the configuration file's \(key)"
        case .environment, .flag: name(variable)
        }
    }

    /// Whether the setting came from a configuration file.
    public func isFromFile(_ variable: String) -> Bool {
        if case .file = self[variable] { return true }
        return false
    }
}

/// One reason the storage settings cannot be used, as the worker refuses them at start: the variables
/// it is about (two for a token and a token command both set) and the error, which names them as
/// `SettingOrigins.name` does.
public struct StorageSettingProblem: Sendable {
    public let variables: [String]
    public let error: StorageError

    public init(_ variables: [String], _ error: StorageError) {
        self.variables = variables
        self.error = error
    }
}
