import CFileSystem
import Storage

/// Whether a worker lets the kernel write its memory out in a core dump.
///
/// A worker holding credentials — a service account's private key, an access token, a token command's
/// output, a PostgreSQL password (libpq keeps it for reconnecting), a proxy's password — has them in its memory, and a core
/// dump (`kill -QUIT`, a watchdog's abort, a crash; `systemd-coredump` keeps them for days) wrote them to
/// disk: a probe found the token six times and the private key twice in one. Such a worker makes itself
/// undumpable at start, as ssh-agent and gpg-agent do: no core file, and no other process of its user
/// may attach to it or read its memory (root still can). A worker with nothing secret (an SQLite log and
/// `file://` or anonymous storage) stays dumpable, for bug reports.
public enum CoreDumps {
    /// Whether a worker with this storage configuration, on a PostgreSQL log or not, in this environment
    /// (a proxy's password), holds a secret.
    public static func holdsSecrets(_ storage: StorageConfiguration, postgres: Bool, environment: [String: String]) -> Bool {
        postgres || storage.accessToken != nil || storage.tokenCommand != nil || storage.googleCredentials != nil
            || ProxyEnvironment.variables.contains { environment[$0]?.utf8.contains(UInt8(ascii: "@")) == true }
    }

    /// Turns core dumps (and same-user attaching) off for this process when it holds secrets; true when
    /// it did.
    @discardableResult
    public static func refuseIfHoldingSecrets(_ storage: StorageConfiguration, postgres: Bool, environment: [String: String]) -> Bool {
        guard holdsSecrets(storage, postgres: postgres, environment: environment) else { return false }
        return jobctl_set_dumpable(0) == 0
    }
}
