import CSQLite
import Foundation
@_exported import JobLifecycle
import JobModel
@_exported import StorePort
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The SQLite adapter of the `JobStore` port: an append-only event log plus the `jobs` projection in
/// one SQLite file (WAL mode), shared by any number of CLI and worker processes.
///
/// Every write is one `BEGIN IMMEDIATE` transaction, and its write-ahead log is synced before the
/// method returns (`WALSync`: the connection runs with `synchronous=NORMAL` and the store syncs after
/// COMMIT, outside the write lock): when a method returns, its events are on disk. Concurrency between
/// processes is SQLite's file locking (with a busy timeout); within a process, every use of the
/// connection runs on the store's one executor thread (`StoreExecutor`), which also group-commits the
/// worker's appends and hands their sync to its second thread.
///
/// `@unchecked Sendable` is sound because the only mutable state, the SQLite connection (and its
/// statement cache), is reached solely through `withConnection`, which runs on the executor thread, so
/// no two threads ever touch the connection at once. The connection is opened with
/// `SQLITE_OPEN_NOMUTEX` precisely because the executor already serialises it.
public final class EventStore: JobStore, @unchecked Sendable {
    /// How `init(path:mode:)` opens the database.
    public enum OpenMode: Sendable, Equatable, CaseIterable {
        /// Reads only: never writes, never migrates, never switches the journal mode, never creates a
        /// file. Works on read-only media (see `init(path:mode:busyTimeoutMs:)`).
        case readOnly
        /// As `readOnly`, and a schema older than this jobctl's is opened too, never migrated: for a copy of
        /// the whole file (`backup(to:)`, a backup before an upgrade), which no other query may run on.
        case copying
        /// Reads and writes an existing jobctl database, applying pending migrations. A missing file
        /// is refused (`StoreError.noDatabase`): a mistyped path must not become a new, empty queue.
        case readWrite
        /// As `readWrite`, but creates the database (mode 0600) when the file is missing. Only the
        /// commands that bring a database into being (`submit`, `migrate`) use it.
        case create
    }

    /// The database file.
    public let path: String
    /// How the store was opened.
    public let mode: OpenMode
    /// Whether the store was opened read-only (list, show, history, watch, audit, replay --verify).
    public var isReadOnly: Bool { mode == .readOnly || mode == .copying }
    /// Whether a read-only open had to fall back to SQLite's `immutable=1` (read-only media without a
    /// `-shm` file): the store then reads the main file as it was and sees no later commits.
    public let isImmutable: Bool
    /// The migrations this open applied (empty when the schema was already current).
    public let appliedMigrations: [Int]

    /// Where the database is: its path.
    public var location: String { path }

    private let connection: SQLiteConnection
    private let executor: StoreExecutor
    /// The lock jobctl's writers on this database take before `BEGIN IMMEDIATE` (see `WriterLock`);
    /// nil for a read-only open, or where the file cannot be made. Used only on the executor thread.
    private var writerLock: WriterLock?
    /// How long a write waits for a lock, in nanoseconds.
    private let busyTimeoutNs: UInt64
    /// A cap on every wait for a lock, set by `capLockWaits` (see `LockWaitCap`).
    private let lockWaitCap = LockWaitCap()
    /// Syncs the WAL after each write transaction (nil for a read-only open).
    let walSync: WALSync?
    /// Checkpoints the WAL off the executor thread, once asked to (see `checkpointInBackground()`).
    private let checkpointer = Mutex<BackgroundCheckpointer?>(nil)
    /// Set while the executor's group commit runs its transaction: the executor syncs that commit
    /// (`StoreExecutor`'s durability barrier), not the transaction. Used only on the executor thread.
    private var groupCommitting = false

    /// The default busy timeout: how long a write waits for another process's transaction. Generous,
    /// because a commit's fsync can take seconds on a disk busy with a large transfer, and a `submit` or a
    /// worker that waits is better than one that fails; SQLite waits only as long as the lock is held.
    public static let defaultBusyTimeoutMs: Int32 = 30_000

    /// WAL pages after which a commit copies the WAL into the database file (a checkpoint, with two
    /// fsyncs). SQLite's default is 1,000 pages (4 MiB); a draining worker's commits rewrite the same
    /// hot pages (the jobs rows and their indexes) again and again, so a checkpoint every 4,000 pages
    /// writes each of them once where four checkpoints did, and syncs a quarter as often, for a WAL file
    /// of up to ~16 MiB on disk.
    ///
    /// See https://www.sqlite.org/pragma.html#pragma_wal_autocheckpoint
    public static let walCheckpointPages = 4_000

    /// The size the WAL file is cut back to when SQLite starts the log over (after a checkpoint that
    /// copied all of it): twice the length a checkpoint keeps it under, so a log of normal length is
    /// never cut. SQLite reuses the file from its start but never shrinks it by itself: after a reader
    /// held an old snapshot through a drain (an `audit` into a pipe read slowly), no checkpoint could
    /// start the log over and it grew with every commit (~76 MiB for 15,000 jobs), and it stayed that
    /// size for as long as any writer kept the database open.
    ///
    /// See https://www.sqlite.org/pragma.html#pragma_journal_size_limit
    public static let walSizeLimitBytes = 2 * walCheckpointPages * 4_096

    /// While a worker's appends keep coming, a small group commit of them that comes less than this many
    /// microseconds after the previous one first waits this long for more (see `StoreExecutor.init`):
    /// each commit rewrites whole pages into the WAL (~14 of 4 KiB for a commit of a few small transfers'
    /// outcomes) and costs a sync (~0.12 ms of kernel CPU here), so 2,000 small HTTP transfers made ~250
    /// commits of ~16 events; spaced, ~125 of ~32, for 10–14 % less of the worker's CPU. An outcome waits
    /// at most this long more before it is written.
    static let appendCommitSpacingUs: Int64 = 1_000

    /// The newest schema version this binary knows (the highest `migrations/sqlite/NNN_*.sql`).
    public static var knownSchemaVersion: Int { Migrator.latestVersion }

    /// Opens the store at `path` read-only, or read-write creating it when missing (tests and tools;
    /// the CLI says which commands may create a database through `init(path:mode:busyTimeoutMs:)`).
    public convenience init(path: String, readOnly: Bool = false,
                            busyTimeoutMs: Int32 = EventStore.defaultBusyTimeoutMs) throws(StoreError) {
        try self.init(path: path, mode: readOnly ? .readOnly : .create, busyTimeoutMs: busyTimeoutMs)
    }

    /// Opens the store at `path`.
    ///
    /// - `create` makes the file (mode 0600) when it is missing; `readWrite` and `readOnly` refuse a
    ///   missing file, an empty one, or one without jobctl's schema ledger (`StoreError.noDatabase`).
    /// - A writable open switches the file to WAL and applies pending migrations. It refuses a file it
    ///   cannot write (a read-only filesystem, no permission on the file or on its directory, where
    ///   SQLite creates the `-wal` and `-shm` files) with `StoreError.readOnly`, before any work.
    /// - A read-only open never writes; it needs a fully migrated database (`olderSchema` otherwise) and
    ///   works while writers are active. On read-only media, where SQLite cannot create the `-shm` file a
    ///   WAL reader needs, it falls back to an `immutable=1` open — but only when no `-wal` file holds
    ///   transactions the main file lacks (an immutable open would not see them); otherwise it says so.
    /// - Every mode refuses (`StoreError.newerSchema`) a database migrated by a newer jobctl, before
    ///   touching it.
    ///
    /// Wraps https://www.sqlite.org/c3ref/open.html, https://www.sqlite.org/wal.html,
    /// https://www.sqlite.org/pragma.html#pragma_synchronous and
    /// https://www.sqlite.org/c3ref/busy_timeout.html.
    /// Refuses a database path that is empty, or names something other than a regular file (after links):
    /// opening a FIFO blocks until a writer comes, for ever; a directory or a device is no database, and
    /// SQLite's own words for them ("disk I/O error", "no database") send the user the wrong way.
    static func refuseNonFile(_ path: String) throws(StoreError) {
        guard !path.isEmpty else { throw StoreError.unusablePath("the database path is empty: give --db a file name (or set JOBCTL_DB)") }
        var info = stat()
        guard stat(path, &info) == 0 else {
            let number = errno
            if number == ENOENT { return }   // missing: created or refused as such below
            // Not "no database" (nor, for submit, "cannot create" one that exists): it could not be looked at.
            throw StoreError.io("cannot reach the database '\(path)': \(String(cString: strerror(number)))"
                                + (number == EACCES ? " (a folder on its path may not be searched by this user, \(Self.currentUser))" : "")
                                + "; check the folders on its path")
        }
        let kind = FileKind.notRegular(mode: info.st_mode)
        if let kind {
            throw StoreError.unusablePath("'\(path)' is \(kind), not a database file: give --db the path of a jobctl database file")
        }
        // SQLite keeps a database's -wal and -shm beside the name it was opened by, and takes WAL-mode locks
        // in the -shm: processes opening one file by two hard-linked names write two logs and lock nothing
        // against each other — two workers each claimed and ran every job, each seeing only its own events.
        // (A symbolic link is resolved by SQLite to the file's own name, so it is safe.)
        if info.st_nlink > 1 {
            throw StoreError.unusablePath("'\(path)' has \(info.st_nlink) hard links: SQLite keeps the -wal and -shm files, and the locks, beside "
                                    + "the name a database is opened by, so processes using different names would neither see nor "
                                    + "lock out each other's writes; remove the other names (`find -samefile`) and use one, "
                                    + "or a symbolic link to it")
        }
    }

    /// This process's user as messages name it: "name (uid N)", or "uid N" when it has no name.
    static var currentUser: String { SystemUser.described(geteuid()) }

    /// A file's permission bits as `chmod` takes them, four octal digits at least: `0644`, `04755`, `0000`
    /// (a file of mode 000 read `mode 00`).
    static func octalMode(_ mode: mode_t) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return "0" + String(repeating: "0", count: max(0, 3 - digits.count)) + digits
    }

    /// Why this user cannot open the existing file at `path` for reading (and, with `writing`, writing),
    /// naming its owner and mode; nil when `access(2)` finds no lack of permission.
    static func permissionProblem(_ path: String, writing: Bool) -> String? {
        guard access(path, writing ? R_OK | W_OK : R_OK) != 0, errno == EACCES else { return nil }
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let owner = SystemUser.name(info.st_uid)
        let group = getgrgid(info.st_gid).flatMap { $0.pointee.gr_name.map { String(cString: $0) } } ?? "gid \(info.st_gid)"
        return "permission denied: '\(path)' is owned by \(owner), group \(group), mode \(octalMode(info.st_mode)), and this user, "
            + "\(currentUser), may not \(writing ? "read and write" : "read") it; run jobctl as a user who may, "
            + "or change the file's owner, group or mode"
    }

    public init(path: String, mode: OpenMode, busyTimeoutMs: Int32 = EventStore.defaultBusyTimeoutMs) throws(StoreError) {
        self.path = path
        self.mode = mode
        try Self.refuseNonFile(path)
        if !FileManager.default.fileExists(atPath: path) {
            guard mode == .create else { throw StoreError.noDatabase(path: path) }
            try Self.createDatabaseFile(path)
        }
        let connection: SQLiteConnection
        var immutable = false
        if mode == .readOnly || mode == .copying {
            (connection, immutable) = try Self.openForReading(path, busyTimeoutMs: busyTimeoutMs)
        } else {
            connection = try Self.openForWriting(path, busyTimeoutMs: busyTimeoutMs)
        }
        self.isImmutable = immutable
        try connection.enableDefensive()
        try connection.execute("PRAGMA foreign_keys = ON")
        // Read the ledger before anything can write: a newer schema is refused untouched, and so is another
        // program's table of the ledger's name (its versions are not jobctl's).
        if let columns = try Migrator.foreignLedgerColumns(connection) {
            throw StoreError.io("'\(path)' is an SQLite database but not jobctl's (its schema_migrations table, with columns "
                                + "\(columns.joined(separator: ", ")), is another program's migration ledger); check the path")
        }
        let applied = try Migrator.appliedVersions(connection)
        try Migrator.refuseNewer(applied)
        try Migrator.refuseGaps(applied)
        if applied.isEmpty {
            try Self.refuseNonDatabase(path, connection, creating: mode == .create)
        }
        if mode == .copying {
            self.appliedMigrations = []
        } else if mode == .readOnly {
            let found = applied.max() ?? 0
            if found < Migrator.latestVersion {
                // Not "run migrate" while another process is migrating it.
                if Self.writeLockHeldElsewhere(path) {
                    throw StoreError.busy(sql: nil, holder: .migration(from: found, to: Migrator.latestVersion))
                }
                throw StoreError.olderSchema(found: found, known: Migrator.latestVersion)
            }
            self.appliedMigrations = []
        } else {
            try Self.enableWAL(connection, timeoutMs: Int64(busyTimeoutMs))
            try connection.execute("PRAGMA synchronous = FULL")
            try connection.execute("PRAGMA wal_autocheckpoint = \(Self.walCheckpointPages)")
            try connection.execute("PRAGMA journal_size_limit = \(Self.walSizeLimitBytes)")
            self.appliedMigrations = try Migrator.migrate(connection, now: Clock.nowMs())
            // From here on every write transaction syncs the WAL itself, after COMMIT (see `WALSync`).
            try connection.execute("PRAGMA synchronous = NORMAL")
        }
        let reads = mode == .readOnly || mode == .copying
        let walSync = reads ? nil : WALSync(databasePath: path)
        self.walSync = walSync
        connection.lockWaitCap = lockWaitCap
        self.connection = connection
        self.busyTimeoutNs = UInt64(max(0, busyTimeoutMs)) * 1_000_000
        // Only writers take it, so only they create it (after the checks above refused what they refuse).
        self.writerLock = reads ? nil : try WriterLock.openOrCreate(forDatabase: path)
        // The executor's group commit calls back into the store; the store owns the executor, so the
        // reference back is weak (set once, below, before any call can reach the executor).
        let owner = Mutex<WeakStore>(WeakStore())
        let writerLock = GroupCommitLock(acquire: { (waitNs) throws(StoreError) -> Bool in
            guard let store = owner.withLock({ $0.store }) else { return false }
            return try store.lockWriters(waitingAtMostNs: waitNs)
        }, release: {
            owner.withLock { $0.store }?.unlockWriters()
        })
        var barrier: StoreExecutor.DurabilityBarrier?
        if let walSync { barrier = { () throws(StoreError) in try walSync.sync() } }
        self.executor = try StoreExecutor(name: "jobctl-store", busyRetryMs: Int64(busyTimeoutMs), writerLock: writerLock,
                                      durabilityBarrier: barrier, appendCommitSpacingUs: Self.appendCommitSpacingUs) {
            (events, request) throws(StoreError) -> AppendAndClaimOutcome in
            guard let store = owner.withLock({ $0.store }) else {
                throw StoreError.io("the store was closed while appends were queued")
            }
            return try store.groupCommit(events, thenClaim: request)
        }
        owner.withLock { $0.store = self }
    }

    /// WAL pages not yet copied into the database after which a commit asks the background checkpointer
    /// for a checkpoint (see `checkpointInBackground()`): a quarter of the automatic checkpoint's length,
    /// since a checkpoint no longer holds up the commits. Measured on 10,000-job drains against the
    /// automatic checkpoint alone, five alternating rounds each: one worker 5.5 % less wall time, four
    /// 3.4 % less; 2,000 pages did no better.
    public static let backgroundCheckpointPages: Int32 = 1_000

    /// From now on the WAL is checkpointed on a thread of its own (`BackgroundCheckpointer`), not inside
    /// the commits that make it long: for a long-running writer, the worker, whose every append and claim
    /// waits for the executor (a checkpoint of a draining worker's log took ~10–20 ms of it, two or three
    /// times in 10,000 jobs, with the writer lock held). Short-lived commands keep SQLite's automatic
    /// checkpoint. A commit that finds the log at the automatic checkpoint's length all the same (the
    /// checkpointer could not catch up with the commits) still checkpoints itself, so the log stays as
    /// short as before. Once; no effect on a read-only open. The lengths, in WAL pages, are for tests.
    public func checkpointInBackground(afterLogPages pages: Int32 = EventStore.backgroundCheckpointPages,
                                       inlineAfterLogPages inline: Int32 = Int32(EventStore.walCheckpointPages)) throws(StoreError) {
        guard !isReadOnly, checkpointer.withLock({ $0 == nil }) else { return }
        let started = try BackgroundCheckpointer(path: path, thresholdPages: pages)
        checkpointer.withLock { $0 = started }
        try withConnection { connection in
            connection.onCommit(inlineAt: inline) { logPages in started.committed(logPages: logPages) }
        }
    }

    /// Checkpoints a commit made itself because the log reached `checkpointInBackground`'s inline length (tests).
    var inlineCheckpoints: Int { (try? withConnection { connection in connection.inlineCheckpoints }) ?? 0 }

    /// Checkpoints the background checkpointer completed (tests).
    var backgroundCheckpoints: Int { checkpointer.withLock { $0 }?.checkpoints ?? 0 }

    deinit {
        executor.stop()
        // After the executor: no commit asks for a checkpoint any more. Its connection closes before the
        // store's, which, the last, checkpoints what remains and removes the WAL.
        checkpointer.withLock { $0 }?.stop()
    }

    // MARK: - Opening

    /// Opens for reading; on read-only media without a usable `-shm`, falls back to `immutable=1` when
    /// that cannot miss a committed transaction. Returns the connection and whether it is immutable.
    private static func openForReading(_ path: String, busyTimeoutMs: Int32) throws(StoreError) -> (SQLiteConnection, Bool) {
        let connection = try SQLiteConnection(path: path, readOnly: true, create: false)
        try connection.setBusyTimeout(milliseconds: busyTimeoutMs)
        guard let problem = connection.probe() else { return (connection, false) }
        // A hot rollback journal (another program switched the file to `journal_mode=delete` and died
        // mid-transaction): the main file holds that transaction's uncommitted pages until a writable
        // open rolls them back from the journal, which a read-only one may not do (SQLite refuses it,
        // READONLY_ROLLBACK). An immutable open would read those pages as if committed.
        if let journal = hotJournal(path) {
            throw StoreError.readOnly(
                "cannot read '\(path)' read-only: '\(journal)' is a hot rollback journal (another program was writing "
                    + "the database in rollback-journal mode and stopped mid-transaction), so the database file holds "
                    + "uncommitted changes until a writable open rolls them back; run `jobctl migrate` (or any writing "
                    + "command) on it once, where the database and its folder are writable")
        }
        guard problem.walFilesUnavailable else { throw problem.error }
        // A WAL reader needs the -shm file, and SQLite could neither use nor create it here (read-only
        // directory or filesystem). With no -wal content every committed transaction is in the main
        // file, which an immutable open reads without -shm or locks. With -wal content it would not.
        if Self.fileSize(sqliteSidecarPath(path, "-wal")) > 0 {
            throw StoreError.readOnly(
                "cannot read '\(path)' here: its -wal file may hold transactions not yet copied into the database, "
                    + "and reading them needs '\(path)-shm', which cannot be created in a read-only directory or "
                    + "filesystem; run `jobctl migrate` on it once where it is writable (that checkpoints the -wal), "
                    + "or copy the database and its -wal file to writable storage")
        }
        let immutable = try SQLiteConnection(path: path, readOnly: true, create: false, immutable: true)
        if let problem = immutable.probe() { throw problem.error }
        return (immutable, true)
    }

    /// Whether another process holds SQLite's write lock on the WAL database at `path` (and still does a
    /// tenth of a second later: not one commit): `WAL_WRITE_LOCK`, a POSIX lock on byte 120 of the `-shm`
    /// file, asked of the kernel (`F_GETLK`) through a read-only descriptor, so the reader changes nothing.
    /// False when it cannot tell (no `-shm`).
    ///
    /// See https://www.sqlite.org/walformat.html#locks
    static func writeLockHeldElsewhere(_ path: String) -> Bool {
        let descriptor = open(sqliteSidecarPath(path, "-shm"), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        guard jobctl_posix_write_lock_held(descriptor, 120) == 1 else { return false }
        usleep(100_000)
        return jobctl_posix_write_lock_held(descriptor, 120) == 1
    }

    /// The database's `-journal` file when it is there and not empty: a rollback journal SQLite may have
    /// to play back before the main file can be read as committed ("hot"; an empty one, or none, never is).
    ///
    /// See https://www.sqlite.org/fileformat.html#the_rollback_journal
    static func hotJournal(_ path: String) -> String? {
        let journal = sqliteSidecarPath(path, "-journal")
        var info = stat()
        guard lstat(journal, &info) == 0, info.st_size > 0 else { return nil }
        return journal
    }

    /// SQLite gives a `-wal` or `-shm` file it creates the database's mode: a command that only read the
    /// database while its owner had made it read-only (`chmod 444`) left them 0444, and once the database
    /// was writable again every write failed "the database is read-only", naming neither file. A writer
    /// whose user owns such a file, and may write the database, gives it the database's mode, as SQLite
    /// would have (through a descriptor opened without following a link).
    static func restoreSidecarModes(_ path: String) {
        var database = stat()
        guard stat(path, &database) == 0, access(path, W_OK) == 0 else { return }
        for suffix in ["-wal", "-shm"] {
            let sidecar = sqliteSidecarPath(path, suffix)
            let descriptor = open(sidecar, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            var info = stat()
            guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_uid == geteuid(),
                  info.st_mode & 0o200 == 0 else { continue }
            _ = fchmod(descriptor, database.st_mode & 0o777)
        }
    }

    /// What keeps a writer out when the database itself may be written but its `-wal` or `-shm` may not
    /// (another user's reader left it, with a mode this user cannot write): SQLite then says only that
    /// the database is read-only. Nil when nothing such is there.
    static func unwritableSidecar(_ path: String) -> String? {
        guard access(path, W_OK) == 0 else { return nil }
        for suffix in ["-wal", "-shm"] {
            let sidecar = sqliteSidecarPath(path, suffix)
            var info = stat()
            guard lstat(sidecar, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, access(sidecar, W_OK) != 0 else { continue }
            return "the database '\(path)' may be written, but its '\(sidecar)' may not by this user (mode \(octalMode(info.st_mode)), owner uid "
                + "\(info.st_uid)): a command that read the database while it was read-only left it so; remove it while no jobctl "
                + "runs on this database, or make it writable for this user"
        }
        return nil
    }

    /// Opens for writing, refusing at once a file that cannot be written: SQLite silently opens such a
    /// file read-only and would fail only at the first write, with a less helpful message.
    private static func openForWriting(_ path: String, busyTimeoutMs: Int32) throws(StoreError) -> SQLiteConnection {
        restoreSidecarModes(path)
        if let blocking = unwritableSidecar(path) { throw StoreError.readOnly(blocking) }
        let connection = try SQLiteConnection(path: path, readOnly: false, create: false)
        try connection.setBusyTimeout(milliseconds: busyTimeoutMs)
        if connection.isReadOnly {
            throw StoreError.readOnly(Self.isOnReadOnlyFilesystem(path)
                ? "the database '\(path)' is on a read-only filesystem and this command writes to it; "
                    + "run it where the database is writable (list, show, history, audit and replay --verify only read)"
                : "the database '\(path)' is read-only for this user and this command writes to it; "
                    + "check the file's permissions (list, show, history, audit and replay --verify only read)")
        }
        if let problem = connection.probe() {
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
            if problem.walFilesUnavailable && access(directory, W_OK) != 0 {
                throw StoreError.readOnly(
                    "the directory '\(directory)' is read-only, and SQLite must create '\(path)-wal' and "
                        + "'\(path)-shm' there to write; make the directory writable (list, show, history, audit "
                        + "and replay --verify only read)")
            }
            throw problem.error
        }
        return connection
    }

    /// Called when a file has no migration ledger. Empty, it is no jobctl database: migrating it would
    /// turn a mistyped path into a new queue, so only a creating open (`submit`, `migrate`) goes on. A
    /// file another program made is refused by every open: `submit` and `migrate` put jobctl's tables
    /// into it and switched it to WAL — another application's database changed by a mistyped `--db`.
    private static func refuseNonDatabase(_ path: String, _ connection: SQLiteConnection, creating: Bool) throws(StoreError) {
        // One read of the schema: the ledger read before it may have come just before another jobctl
        // process, creating this database at once (concurrent first submits), committed its tables —
        // which counted alone read as another program's database.
        let (tables, ledger) = try connection.first(
            "SELECT count(*), count(CASE WHEN type = 'table' AND name = 'schema_migrations' THEN 1 END) FROM sqlite_master"
        ) { row in (row.int(0), row.int(1)) } ?? (0, 0)
        if ledger > 0 { return }
        if tables == 0 {
            if creating { return }
            throw StoreError.noDatabase(path: path)
        }
        throw StoreError.io("'\(path)' is an SQLite database but not jobctl's (it has no schema_migrations table); "
                            + "check the path")
    }

    private static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        guard stat(path, &info) == 0 else { return 0 }
        return Int64(info.st_size)
    }

    private static func isOnReadOnlyFilesystem(_ path: String) -> Bool {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return false }
        return info.f_flag & UInt(ST_RDONLY) != 0
    }

    /// Switches the file to WAL. The mode is stored in the file, so once any process has set it, reading
    /// it needs no lock and nothing is changed. Switching needs an exclusive lock, and SQLite may answer
    /// SQLITE_BUSY at once instead of calling the busy handler when several processes open a brand-new
    /// file together: retry until the busy timeout.
    ///
    /// See https://www.sqlite.org/pragma.html#pragma_journal_mode
    private static func enableWAL(_ connection: SQLiteConnection, timeoutMs: Int64) throws(StoreError) {
        let deadline = Clock.nowMs() + timeoutMs
        while true {
            do throws(StoreError) {
                let mode = try connection.first("PRAGMA journal_mode") { row in row.text(0) }
                if mode?.lowercased() == "wal" { return }
                try connection.execute("PRAGMA journal_mode = WAL")
                return
            } catch {
                guard case .busy = error, Clock.nowMs() < deadline else { throw error }
                usleep(10_000)
            }
        }
    }

    /// Creates (if needed) and migrates the database at `path`; returns the versions applied now.
    public static func migrate(path: String) throws(StoreError) -> [Int] {
        try EventStore(path: path, mode: .create).appliedMigrations
    }

    /// Creates the file before SQLite sees it: mode 0660 when the umask lets the group write (007, 002),
    /// else 0600 (077, 027 and the common 022), and never any access for others (the log keeps URLs
    /// with their secrets). So a worker run with `UMask=0007` shares its database with the members of its
    /// group, and a user's database stays private under the usual umask. Never a group that may only
    /// read: in a folder the group may write, such a reader's open leaves -wal and -shm files it owns,
    /// with the database's mode, which the owner then cannot write ("attempt to write a readonly
    /// database") until they are removed. SQLite gives its -wal and -shm files the database's mode, and
    /// the writer lock takes it too. (SQLite's own default, 0644 less the umask, would let every user
    /// read the log.) A dangling symbolic link's target is created so, as before; an existing file
    /// (another process was first) keeps its mode unless it is still an empty file of this user.
    private static func createDatabaseFile(_ path: String) throws(StoreError) {
        // The kernel applies the umask (or a default ACL) to 0660; what the group is left decides.
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o660)
        guard descriptor >= 0 else {
            let number = errno
            let reason = String(cString: strerror(number))
            if number == EROFS || number == EACCES {
                throw StoreError.readOnly("cannot create database '\(path)': \(reason); create it where the directory is writable")
            }
            throw StoreError.io("cannot create database '\(path)': \(reason); check the directory exists and is writable")
        }
        defer { close(descriptor) }
        var info = stat()
        if fstat(descriptor, &info) == 0, info.st_size == 0, info.st_uid == geteuid(), info.st_mode & 0o020 == 0 {
            _ = fchmod(descriptor, info.st_mode & 0o600)
        }
    }

    // MARK: - The executor

    /// Runs `body` with the connection on the executor thread, blocking the caller until it has run.
    func withConnection<T>(_ body: @escaping (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        let connection = connection
        return try executor.sync { () throws(StoreError) -> T in try body(connection) }
    }

    /// Appends one event in the executor's next group commit.
    public func appendGrouped(_ event: PendingEvent) async -> Result<JobEvent, StoreError> {
        await executor.append(event)
    }

    /// Appends events side by side, in order, in the executor's next group commit.
    public func appendGrouped(_ events: [PendingEvent]) async -> [Result<JobEvent, StoreError>] {
        await executor.append(events)
    }

    /// Claims in the same transaction as the appends queued before it.
    public func claimGrouped(_ request: ClaimRequest) async throws(StoreError) -> [ClaimedJob] {
        try await executor.claim(request).get()
    }

    /// Runs `body` on the executor thread, where the store's synchronous methods run without a hop.
    public func run<T: Sendable>(_ body: @escaping @Sendable (any JobStore) throws -> T) async throws -> T {
        try await executor.run { [self] in try body(self) }
    }

    /// How many group commits the executor made and how many events they held.
    public var groupCommitStats: GroupCommitStats { executor.groupCommitStats }

    /// WAL syncs made by this store's write transactions and group commits (tests).
    var walSyncs: Int { walSync?.syncs ?? 0 }

    /// Calls queued on the executor and not yet taken (tests).
    var queuedCalls: Int { executor.queuedCount }

    /// How long a group commit waits for another process's write lock before it hands back to the
    /// executor, which adds the appends queued meanwhile and tries again (until the busy timeout): about
    /// one commit of another process, its fsync included.
    static let groupCommitLockWaitNs: UInt64 = 1_000_000

    /// One group commit: the appends, then the claim when there is one, in one transaction. Gives up
    /// with `busy` (nothing written) after `groupCommitLockWaitNs` while another process holds the
    /// write lock; the executor then gathers more and retries.
    private func groupCommit(_ events: [PendingEvent], thenClaim request: ClaimRequest?) throws(StoreError) -> AppendAndClaimOutcome {
        let now = Clock.nowMs()
        groupCommitting = true
        defer { groupCommitting = false }
        return try connection.withBusyWait(atMostNs: Self.groupCommitLockWaitNs) { () throws(StoreError) -> AppendAndClaimOutcome in
            if let request { return try append(events, now: now, thenClaim: request) }
            return AppendAndClaimOutcome(appended: try append(events, now: now), claimed: .success([]))
        }
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction (the write lock is taken up front, so the
    /// reads inside see the state the writes apply to); commits, or rolls back on error.
    ///
    /// See https://www.sqlite.org/lang_transaction.html
    ///
    /// With `syncing: false` the WAL is not synced after COMMIT: for housekeeping whose loss in a crash
    /// only costs work again (the sweep watermark), never for the log; the next synced commit makes it
    /// durable too.
    func writeTransaction<T>(syncing: Bool = true, _ body: @escaping (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        guard !isReadOnly else {
            throw StoreError.readOnly("the store at '\(path)' was opened read-only and this operation writes; open it read-write")
        }
        return try transaction("BEGIN IMMEDIATE", syncing: syncing, body)
    }

    /// Runs `body` in one read transaction, so every query in it sees the same snapshot.
    func readTransaction<T>(_ body: @escaping (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try transaction("BEGIN DEFERRED", body)
    }

    /// Runs `body` between `begin` and COMMIT on the connection, rolling back when it throws. A write
    /// transaction holds the writer lock from before `begin` until after COMMIT or ROLLBACK, unless the
    /// group commit that runs it holds it already; then, lock released, it syncs the WAL, unless it is
    /// the group commit's (whose executor syncs it) or it changed no row: a rescue that found no expired
    /// lease (every worker's start), a claim that found nothing, appended nothing to the WAL, and a sync
    /// of it waited on the disk (~1–2 ms here) for nothing.
    private func transaction<T>(_ begin: String, syncing: Bool = true,
                                _ body: @escaping (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        // Weakly: the executor keeps a call's closure until its whole batch is done, and a store whose
        // last reference went with it would be closed on the executor thread, racing the process's exit
        // (its SQLite connection, and the checkpoint closing it makes, cut short).
        let timeoutNs = busyTimeoutNs
        let writes = begin == "BEGIN IMMEDIATE"
        return try withConnection { [weak self] (connection) throws(StoreError) -> T in
            var locked = false
            if writes, let self { locked = try self.lockWriters(waitingAtMostNs: timeoutNs) }
            defer { if locked { self?.unlockWriters() } }
            try connection.run(begin)
            // Rows written by INSERT, UPDATE and DELETE, triggers' included (write transactions run no DDL:
            // migrations have their own).
            let changesBefore = connection.totalChanges
            // What the connection learnt about the tables in an earlier transaction may be stale now.
            connection.dependencyRowsAbsent = nil
            let result: T
            do throws(StoreError) {
                result = try body(connection)
                try connection.run("COMMIT")
                // The rows this transaction wrote now stand as written (see `CommittedRecordCache`).
                connection.committedRecords.commitNoted()
            } catch {
                connection.committedRecords.discardNoted()
                if connection.isInTransaction { try? connection.run("ROLLBACK") }
                throw error
            }
            if locked {
                locked = false
                self?.unlockWriters()
            }
            if writes, syncing, connection.totalChanges != changesBefore, let self, !self.groupCommitting {
                try self.walSync?.sync()
            }
            return result
        }
    }
}

// MARK: - The writer lock

extension EventStore {
    /// Takes the writer lock on the executor thread, waiting at most `waitNs`. True: held (call
    /// `unlockWriters` after COMMIT); false: this store uses none. Throws `busy` when another process
    /// held it for the whole wait.
    fileprivate func lockWriters(waitingAtMostNs waitNs: UInt64) throws(StoreError) -> Bool {
        guard let lock = writerLock, !lock.isHeld else { return false }
        // In slices, so that a cap set meanwhile (`capLockWaits`) ends the wait.
        let startedNs = DispatchTime.now().uptimeNanoseconds
        while true {
            let waitedNs = DispatchTime.now().uptimeNanoseconds - startedNs
            let limitNs = min(waitNs, lockWaitCap.ns)
            let slice = min(limitNs - min(waitedNs, limitNs), Self.writerLockWaitSliceNs)
            switch lock.lock(waitingAtMostNs: slice) {
            case .acquired:
                return true
            case .timedOut:
                if DispatchTime.now().uptimeNanoseconds - startedNs >= min(waitNs, lockWaitCap.ns) {
                    throw StoreError.busy(sql: "BEGIN IMMEDIATE", holder: .writerLock(path: lock.path))
                }
            case .unusable:
                // SQLite's locking alone is still correct, only slower with several processes.
                writerLock = nil
                return false
            }
        }
    }

    /// The longest single wait for the writer lock before the cap is looked at again.
    static let writerLockWaitSliceNs: UInt64 = 100_000_000

    /// See `JobStore.isWaitingWithinBounds(forAtLeastMs:)`: the executor's call or group commit, which
    /// waits for another process's locks at most `callWaitBoundNs`.
    public func isWaitingWithinBounds(forAtLeastMs minimumMs: Int64) -> Bool {
        executor.isOnWork(forAtLeastMs: minimumMs, lessThanNs: Self.callWaitBoundNs(busyTimeoutNs: busyTimeoutNs))
    }

    /// The longest one call (or group commit) of the executor runs by the limits this store sets: the
    /// writer lock and SQLite's own lock, each waited for up to the busy timeout (a group commit's
    /// retries share one), and a few seconds for the work itself (a sync on a disk busy with a transfer).
    static func callWaitBoundNs(busyTimeoutNs: UInt64) -> UInt64 {
        2 * busyTimeoutNs + 5_000_000_000
    }

    /// See `JobStore.capLockWaits`.
    public func capLockWaits(atMostNs limitNs: UInt64?) {
        lockWaitCap.set(limitNs)
        executor.capBusyRetries(atMostNs: limitNs)
    }

    fileprivate func unlockWriters() {
        writerLock?.unlock()
    }

    /// The writer lock's file, when this store uses one (tests).
    var writerLockPath: String? { try? withConnection { [weak self] _ in self?.writerLock?.path } }

    /// Times this store took the writer lock from a holder that had died (tests).
    var writerLockRecoveries: Int {
        (try? withConnection { [weak self] _ in self?.writerLock?.recoveredFromDeadOwner ?? 0 }) ?? 0
    }
}

/// The store the executor's group commit writes through, held weakly (the store owns the executor).
private struct WeakStore {
    weak var store: EventStore?
}

// MARK: - Savepoints

extension SQLiteConnection {
    /// Runs `body` inside a SAVEPOINT: on error only its own changes are undone and the surrounding
    /// transaction goes on. See https://www.sqlite.org/lang_savepoint.html
    func savepoint<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        try run("SAVEPOINT one_event")
        do throws(StoreError) {
            let result = try body()
            try run("RELEASE one_event")
            return result
        } catch {
            try run("ROLLBACK TO one_event")
            try run("RELEASE one_event")
            throw error
        }
    }
}

/// A cap on every wait of one store for another process's lock (SQLite's busy handler, the writer lock),
/// which another thread may set at any time: `UInt64.max` for none.
final class LockWaitCap: Sendable {
    private let value = Atomic<UInt64>(.max)

    var ns: UInt64 { value.load(ordering: .relaxed) }

    func set(_ limitNs: UInt64?) { value.store(limitNs ?? .max, ordering: .relaxed) }
}
