import Foundation
import JobModel
import Synchronization

/// Files no transfer of this process may replace or delete: the event log's own (an SQLite database and
/// its `-wal`, `-shm`, `-journal` and writer-lock files), registered by a worker once it has opened them.
/// A download whose destination was the database (`destination: jobctl.db`, a typo or a hostile
/// manifest), or a `file://` object of that name in a bucket folder that holds it, renamed a file over
/// the log: every job's history gone, and the worker only noticed on its next write. Files are known by
/// device and inode, so another path to one (a link to its folder, a hard link) is the same file.
public enum ProtectedFiles {
    private static let files = Mutex<[FileIdentity: String]>([:])

    /// Registers each of `paths` that exists now, as `description` (for messages: "this worker's event log").
    public static func protect(_ paths: [String], as description: String) {
        var found: [FileIdentity: String] = [:]
        for path in paths {
            guard let identity = identity(of: path) else { continue }
            let shown = realpath(path, nil).flatMap { resolved in defer { free(resolved) }; return PathText.decoded(cString: resolved) } ?? path
            found[identity] = "\(description) ('\(shown)')"
        }
        files.withLock { $0.merge(found) { _, new in new } }
    }

    /// Forgets `paths` (each as it is now): before a protected file goes, since its inode may then be
    /// given to a new file that nothing protects (tests; a worker's log files outlive the worker).
    public static func unprotect(_ paths: [String]) {
        let gone = paths.compactMap(identity(of:))
        files.withLock { files in for identity in gone { files[identity] = nil } }
    }

    /// The file at `path` (links followed), as `FileStatus` knows files; nil when there is none.
    private static func identity(of path: String) -> FileIdentity? {
        var info = stat()
        return stat(path, &info) == 0 ? FileStatus(info).identity : nil
    }

    /// Refuses `identity` when it is a protected file: `path` is where the job would write or delete.
    static func refuse(_ identity: FileIdentity, at path: String, _ what: String) throws(StorageError) {
        guard let description = files.withLock({ $0[identity] }) else { return }
        throw StorageError(.invalidArgument, "'\(path)' is \(description): \(what) never replaces or deletes it, "
                               + "so nothing was changed — choose another path", retryable: false)
    }
}
