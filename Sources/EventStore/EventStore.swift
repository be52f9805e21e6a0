import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The durable, event-sourced job queue: an append-only event log plus the `jobs` projection in one
/// SQLite file (WAL mode), shared by any number of CLI and worker processes.
///
/// Every write is one `BEGIN IMMEDIATE` transaction with `synchronous=FULL`: when a method returns,
/// its events are on disk. Concurrency between processes is SQLite's file locking (with a busy
/// timeout); concurrency between tasks of one process is this object's lock.
///
/// `@unchecked Sendable` is sound because the only mutable state, the SQLite connection (and its
/// statement cache), is reached solely through `withConnection`, which holds `lock` for the whole
/// use, so no two threads ever touch the connection at once. The connection is opened with
/// `SQLITE_OPEN_NOMUTEX` precisely because this lock already serialises it.
public final class EventStore: @unchecked Sendable {
    /// The database file.
    public let path: String
    /// Whether the store was opened read-only (list, show, history, watch, replay --verify).
    public let isReadOnly: Bool
    /// The migrations this open applied (empty when the schema was already current).
    public let appliedMigrations: [Int]

    private let connection: SQLiteConnection
    private let lock = NSLock()

    /// The default busy timeout: how long a write waits for another process's transaction. Generous,
    /// because a commit's fsync can take seconds on a disk busy with a large transfer, and a `submit` or a
    /// worker that waits is better than one that fails; SQLite waits only as long as the lock is held.
    public static let defaultBusyTimeoutMs: Int32 = 30_000

    /// The newest schema version this binary knows (the highest `migrations/NNN_*.sql`).
    public static var knownSchemaVersion: Int { Migrator.latestVersion }

    /// Opens the store at `path`.
    ///
    /// A writable open creates the file (mode 0600) if needed, switches it to WAL, and applies pending
    /// migrations. A read-only open never writes; it needs an existing, fully migrated database and
    /// works while writers are active. Either refuses (`StoreError.newerSchema`) a database migrated by
    /// a newer jobctl, before touching it.
    ///
    /// Wraps https://www.sqlite.org/c3ref/open.html, https://www.sqlite.org/wal.html,
    /// https://www.sqlite.org/pragma.html#pragma_synchronous and
    /// https://www.sqlite.org/c3ref/busy_timeout.html.
    public init(path: String, readOnly: Bool = false, busyTimeoutMs: Int32 = EventStore.defaultBusyTimeoutMs) throws(StoreError) {
        self.path = path
        self.isReadOnly = readOnly
        if !readOnly { try Self.createPrivateFile(path) } else if !FileManager.default.fileExists(atPath: path) {
            throw StoreError.io("no database at '\(path)'; submit a job first to create it")
        }
        let connection = try SQLiteConnection(path: path, readOnly: readOnly, create: false)
        try connection.setBusyTimeout(milliseconds: busyTimeoutMs)
        try connection.enableDefensive()
        try connection.execute("PRAGMA foreign_keys = ON")
        // Read the ledger before anything can write: a newer schema is refused untouched.
        let applied = try Migrator.appliedVersions(connection)
        try Migrator.refuseNewer(applied)
        if readOnly {
            let found = applied.max() ?? 0
            if found < Migrator.latestVersion {
                throw StoreError.olderSchema(found: found, known: Migrator.latestVersion)
            }
            self.appliedMigrations = []
        } else {
            try Self.enableWAL(connection, timeoutMs: Int64(busyTimeoutMs))
            try connection.execute("PRAGMA synchronous = FULL")
            self.appliedMigrations = try Migrator.migrate(connection, now: Clock.nowMs())
        }
        self.connection = connection
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
        try EventStore(path: path).appliedMigrations
    }

    /// Creates the file with mode 0600 before SQLite sees it, so the log is private from the start
    /// (SQLite gives its -wal and -shm files the same mode). An existing file keeps its mode.
    private static func createPrivateFile(_ path: String) throws(StoreError) {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            throw StoreError.io("cannot create database '\(path)': \(reason); check the directory exists and is writable")
        }
        close(descriptor)
    }

    // MARK: - Serialised access

    /// Runs `body` with the connection while holding the lock.
    func withConnection<T>(_ body: (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(connection)
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction (the write lock is taken up front, so the
    /// reads inside see the state the writes apply to); commits, or rolls back on error.
    ///
    /// See https://www.sqlite.org/lang_transaction.html
    func writeTransaction<T>(_ body: (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        guard !isReadOnly else {
            throw StoreError.invalidControl("the store at '\(path)' was opened read-only; this operation writes")
        }
        return try transaction("BEGIN IMMEDIATE", body)
    }

    /// Runs `body` in one read transaction, so every query in it sees the same snapshot.
    func readTransaction<T>(_ body: (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try transaction("BEGIN DEFERRED", body)
    }

    /// Runs `body` between `begin` and COMMIT on the connection, rolling back when it throws.
    private func transaction<T>(_ begin: String, _ body: (SQLiteConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try withConnection { (connection) throws(StoreError) -> T in
            try connection.run(begin)
            do throws(StoreError) {
                let result = try body(connection)
                try connection.run("COMMIT")
                return result
            } catch {
                if connection.isInTransaction { try? connection.run("ROLLBACK") }
                throw error
            }
        }
    }
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
