import JobModel
import StorePort
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Makes a database's committed transactions durable by syncing its write-ahead log, outside SQLite.
///
/// The store's connections run with `synchronous=NORMAL`: a COMMIT appends its frames to the WAL and
/// returns without waiting for the disk, and SQLite still syncs the WAL before every checkpoint copies
/// it into the database, the database after the checkpoint, and the WAL's header before the file is
/// reused — so the file is never damaged, and a commit can be lost only to a crash of the machine
/// before its frames reach the disk. `sync()` closes that gap: one `fdatasync` of the WAL makes every
/// commit appended so far durable (the sync is the file's, whichever descriptor wrote it), and the
/// store reports nothing written before it returns.
///
/// What this buys over `synchronous=FULL`, where SQLite syncs inside COMMIT: the sync runs after the
/// transaction has released the write lock, so another process's transaction, or this worker's next
/// group commit, proceeds while the disk works, and one sync covers every commit made meanwhile.
///
/// A commit is visible to readers from its COMMIT, a sync before it is durable; a reader in another
/// process may therefore see a transaction that a crash of the machine (not of a process: the
/// operating system keeps the written pages) would then lose.
///
/// See https://www.sqlite.org/pragma.html#pragma_synchronous and https://www.sqlite.org/wal.html
///
/// Each sync first checks that the database's path still names the file opened (`checkDatabaseFile`):
/// a database deleted, moved away or replaced under a running worker (`rm`, `mv`, a backup restored
/// over it) left it committing, and syncing, into a file no other process reads — and a new database
/// made at the path took over, and removed, the `-wal` its commits were in: every outcome lost, the
/// worker logging them as written.
/// The path of a file SQLite keeps beside the database at `databasePath` (`-wal`, `-shm`, and jobctl's
/// `-writer-lock` with them): beside the database file itself, the symbolic links on the way resolved, as
/// SQLite's own VFS names them. Through a link, `databasePath + "-wal"` named a file that never exists, and
/// every write failed its sync ("cannot find the write-ahead log"). A database not there yet keeps the path
/// as given.
func sqliteSidecarPath(_ databasePath: String, _ suffix: String) -> String {
    guard let resolved = realpath(databasePath, nil) else { return databasePath + suffix }
    defer { free(resolved) }
    // A real path that is not UTF-8 is named as given: decoded, it would name another file.
    return (PathText.decoded(cString: resolved) ?? databasePath) + suffix
}

/// The files an SQLite log at `databasePath` consists of: the database, its `-wal`, `-shm` and
/// `-journal` files and jobctl's writer lock (what no transfer may write over: `ProtectedFiles`).
public func sqliteLogFiles(_ databasePath: String) -> [String] {
    [databasePath] + ["-wal", "-shm", "-journal", "-writer-lock"].map { sqliteSidecarPath(databasePath, $0) }
}

final class WALSync: Sendable {
    private let path: String
    private let databasePath: String
    /// The database file's device and inode when the store opened it (nil: it could not be looked at).
    private let database: (device: dev_t, inode: ino_t)?
    /// The open WAL and its inode: reopened when the file at `path` is another one (SQLite deletes the
    /// WAL when the database's last connection closes, and a later open creates a new file).
    private let file = Mutex<(descriptor: Int32, inode: ino_t)?>(nil)
    private let syncCount = Mutex(0)
    /// The first failed sync, once there was one (see `sync`).
    private let failed = Mutex<StoreError?>(nil)

    /// - Parameter databasePath: the database file; its WAL is that path with `-wal` appended.
    init(databasePath: String) {
        path = sqliteSidecarPath(databasePath, "-wal")
        // Checked by its absolute path, as SQLite names the file: a relative one (`--db ../data/jobctl.db`)
        // was looked up again from the current directory at every check, so moving that directory (the
        // database untouched) stopped the worker as if its database had been moved away.
        self.databasePath = CurrentDirectory.anchored(databasePath)
        var info = stat()
        database = stat(self.databasePath, &info) == 0 ? (info.st_dev, info.st_ino) : nil
    }

    /// Throws `replaced` when the database's path no longer names the file the store opened.
    func checkDatabaseFile() throws(StoreError) {
        guard let database else { return }
        var now = stat()
        if stat(databasePath, &now) != 0 {
            let code = errno
            guard code == ENOENT || code == ENOTDIR else { return }   // unreadable for now: the sync says more
            throw StoreError.replaced(path: databasePath, what: "was deleted or moved away")
        }
        if now.st_dev != database.device || now.st_ino != database.inode {
            throw StoreError.replaced(path: databasePath, what: "was replaced by another file (moved, copied or restored over it)")
        }
    }

    deinit {
        if let open = file.withLock({ $0 }) { close(open.descriptor) }
    }

    /// Syncs the WAL: when it returns, every transaction committed before the call is on disk.
    ///
    /// A failed `fdatasync` is final for this process (`failed`): Linux reports a write-back error once
    /// and may drop the pages it could not write, marking them clean, so a later sync — through this
    /// descriptor or a new one — succeeds without them, and reporting the commits after it written would
    /// report lost ones (the WAL's frames chain: a crash then ends the log at the first lost frame). As
    /// PostgreSQL does since 2018, the failure is not retried: every later sync fails with it.
    /// See https://wiki.postgresql.org/wiki/Fsync_Errors
    func sync() throws(StoreError) {
        try checkDatabaseFile()
        let result: Result<Void, StoreError> = file.withLock { cached in
            do throws(StoreError) {
                if let earlier = failed.withLock({ $0 }) { throw earlier }
                let descriptor = try currentDescriptor(&cached)
                while fdatasync(descriptor) != 0 {
                    let code = errno
                    guard code == EINTR else {
                        let error = StoreError.syncFailed(Self.describe("cannot sync", path, code))
                        failed.withLock { $0 = error }
                        throw error
                    }
                }
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
        syncCount.withLock { $0 += 1 }
    }

    /// Syncs made so far (tests).
    var syncs: Int { syncCount.withLock { $0 } }

    /// The descriptor of the WAL now at `path`, opened (again) when needed.
    private func currentDescriptor(_ cached: inout (descriptor: Int32, inode: ino_t)?) throws(StoreError) -> Int32 {
        var now = stat()
        guard stat(path, &now) == 0 else {
            throw StoreError.io(Self.describe("cannot find the write-ahead log to sync", path, errno))
        }
        if let current = cached, current.inode == now.st_ino { return current.descriptor }
        if let stale = cached { close(stale.descriptor) }
        cached = nil
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw StoreError.io(Self.describe("cannot open", path, errno)) }
        var opened = stat()
        guard fstat(descriptor, &opened) == 0 else {
            let code = errno
            close(descriptor)
            throw StoreError.io(Self.describe("cannot inspect", path, code))
        }
        cached = (descriptor, opened.st_ino)
        return descriptor
    }

    private static func describe(_ what: String, _ path: String, _ code: Int32) -> String {
        "\(what) '\(path)': \(String(cString: strerror(code))); the last commits may not be on disk"
    }
}
