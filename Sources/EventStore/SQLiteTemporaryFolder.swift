import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// The folder SQLite writes its temporary files in (a sort or a grouping too large for memory, a
/// statement journal), found as SQLite's unix VFS finds it: `SQLITE_TMPDIR`, else `TMPDIR`, else
/// `/var/tmp`, `/usr/tmp`, `/tmp` and the working folder — the first that is a folder this process may
/// write and search (`unixTempFileDir` in SQLite's os_unix.c; jobctl sets no `sqlite3_temp_directory`).
///
/// For messages only: a read-only `jobctl stats` whose temporary file reached the file size limit was
/// said to have met it with the database, and one whose `TMPDIR` could not hold a file said "unable to
/// open database file".
enum SQLiteTemporaryFolder {
    /// The folder, and the variable that named it (nil: one of SQLite's defaults); nil when none will do.
    static func chosen() -> (path: String, variable: String?)? {
        let environment = ProcessInfo.processInfo.environment
        let named: [(String?, String?)] = [(environment["SQLITE_TMPDIR"], "SQLITE_TMPDIR"), (environment["TMPDIR"], "TMPDIR")]
        for (path, variable) in named + ["/var/tmp", "/usr/tmp", "/tmp", "."].map({ ($0, nil) }) {
            guard let path, !path.isEmpty else { continue }
            var info = stat()
            if stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, access(path, W_OK | X_OK) == 0 { return (path, variable) }
        }
        return nil
    }

    /// The folder as a message says it: `'/var/tmp'`, `'/scratch' (TMPDIR)`.
    private static func describe(_ folder: (path: String, variable: String?)) -> String {
        "'\(TerminalText.printable(folder.path))'" + (folder.variable.map { " (\($0))" } ?? "")
    }

    /// SQLite's temporary file, for a message saying that it reached the file size limit.
    static func describeFile() -> String {
        guard let folder = chosen() else { return "a temporary file of SQLite's" }
        return "a temporary file of SQLite's in \(describe(folder))"
    }

    /// Why SQLite can make no temporary file, as a sentence (with what to do), or nil when it can: its
    /// folder refuses a new file (tried, and removed at once), or there is no folder it would use.
    static func unusable() -> String? {
        let remedy = "point TMPDIR (or SQLITE_TMPDIR) at a folder this user may write"
        guard let folder = chosen() else {
            return "SQLite finds no folder for its temporary files (SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, /tmp, the working folder): \(remedy)"
        }
        let probe = folder.path + "/.jobctl-temporary-\(getpid())-\(UInt32.random(in: 0 ... .max))"
        let descriptor = open(probe, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor < 0 else {
            close(descriptor)
            unlink(probe)
            return nil
        }
        return "SQLite's folder for temporary files \(describe(folder)) cannot hold a file (\(String(cString: strerror(errno)))): \(remedy)"
    }
}
