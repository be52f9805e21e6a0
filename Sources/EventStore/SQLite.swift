import CSQLite
import Foundation
import JobModel
import Synchronization

// The one file that calls libsqlite3. Everything else in the module speaks `SQLiteConnection`,
// `SQLiteStatement`, `SQLiteRow` and `SQLiteValue`; no unsafe pointer leaves this file.

// MARK: - Values

/// A value bound to a statement parameter or read from a result column.
///
/// See https://www.sqlite.org/datatype3.html
enum SQLiteValue: Equatable, Sendable, CustomStringConvertible {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob(Data)

    static func optional(_ value: String?) -> SQLiteValue { value.map(SQLiteValue.text) ?? .null }
    static func optional(_ value: Int64?) -> SQLiteValue { value.map(SQLiteValue.integer) ?? .null }
    static func int(_ value: Int) -> SQLiteValue { .integer(Int64(value)) }
    static func bool(_ value: Bool) -> SQLiteValue { .integer(value ? 1 : 0) }

    /// Text for reports (`replay --verify` differences).
    var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let value): String(value)
        case .real(let value): String(value)
        case .text(let value): value
        case .blob(let value): "<\(value.count) bytes>"
        }
    }
}

// MARK: - Connection

/// A statement's SQL text as the statement cache's key. Hashed by its length and four 8-byte samples
/// (a quarter, half and three quarters in, and its end) instead of every byte: the store looks up a
/// statement for every row it reads or writes, and hashing whole texts of a few hundred bytes was
/// ~700 instructions a lookup (1.5 % of a small-job drain). Texts that share length and samples only
/// share a hash bucket; equality still compares the whole texts, so the right statement is found.
struct SQLText: Hashable {
    let text: String

    init(_ text: String) { self.text = text }

    static func == (lhs: SQLText, rhs: SQLText) -> Bool { lhs.text == rhs.text }

    func hash(into hasher: inout Hasher) {
        var text = text
        text.withUTF8 { utf8 in
            let count = utf8.count
            hasher.combine(count)
            guard count >= 8, let base = utf8.baseAddress else {
                hasher.combine(bytes: UnsafeRawBufferPointer(utf8))
                return
            }
            let raw = UnsafeRawPointer(base)
            let last = count - 8
            hasher.combine(raw.loadUnaligned(fromByteOffset: min(count / 4, last), as: UInt64.self))
            hasher.combine(raw.loadUnaligned(fromByteOffset: min(count / 2, last), as: UInt64.self))
            hasher.combine(raw.loadUnaligned(fromByteOffset: min(count * 3 / 4, last), as: UInt64.self))
            hasher.combine(raw.loadUnaligned(fromByteOffset: last, as: UInt64.self))
        }
    }
}

/// One `sqlite3*` database connection with a small prepared-statement cache.
///
/// Not `Sendable`: a connection belongs to one thread at a time; `EventStore` serialises access
/// with its lock. Closed in `deinit` with `sqlite3_close_v2`, which also waits for any statement
/// still alive (https://www.sqlite.org/c3ref/close.html).
final class SQLiteConnection {
    private let handle: OpaquePointer
    private var cache: [SQLText: SQLiteStatement] = [:]
    /// The busy timeout, and when the current wait for a lock began (monotonic clock).
    private var busyTimeoutNs: UInt64 = 0
    private var busyStartedNs: UInt64 = 0
    /// A shorter limit for the waits of `withBusyWait(atMostNs:_:)`'s body, or nil.
    private var busyWaitCapNs: UInt64?
    /// The store's cap on every lock wait, which another thread may lower at any time.
    var lockWaitCap: LockWaitCap?
    let path: String
    /// Job specs this connection has decoded, by their JSON text (see `DecodedSpecCache`).
    let decodedSpecs = DecodedSpecCache()
    /// Running jobs' rows as this connection last committed them (see `CommittedRecordCache`).
    let committedRecords = CommittedRecordCache()
    /// Whether `job_dependencies` has no row, as found in the current transaction (nil: not looked at
    /// since it began). Lets a transaction that finishes many jobs look for their dependants once
    /// instead of running a DELETE for each job; reset when a transaction begins.
    var dependencyRowsAbsent: Bool?
    /// The lease expiry the claim in progress gives the job it claims (schema 10: kept in the job row):
    /// the claim sets it before the lifecycle decides, and `writeProjection` writes it with the update
    /// that makes the job `running`, so a claim writes its job's row once.
    var claimingLease: (jobID: String, expiresAtMs: Int64)?
    /// The job whose projection writes `writeProjection` holds back, because the group commit's next
    /// event is the same job's (see `appendBatch`), and the write held: the row as the table holds it,
    /// and the record it is to become.
    var holdingProjection: String?
    var heldProjection: (stored: JobRecord?, record: JobRecord)?
    /// While a group commit runs (`appendEach`; nil otherwise), every row `writeProjection` wrote in it,
    /// by job id, as written: a job's next event in the batch starts from its row as it stands. Kept
    /// by the one place every row write goes through, so it also holds the rows an event changed of
    /// other jobs (the dependants a job's end cancelled), which the event's own result does not name.
    var batchRecords: [String: JobRecord]?
    /// What `writeProjection` replaced in `batchRecords` during the current event, oldest first: a
    /// refused event's entries are put back from it (copying the whole map before each event cost a
    /// copy of every record in it at the event's first write).
    var batchRecordsUndo: [(id: String, record: JobRecord?)] = []
    /// The event `insertEvent` wrote last: a final job's projection write takes its `finished_seq`
    /// (schema 14) from it when it is the job's event at the record's version.
    var lastInsertedEvent: (jobID: String, version: Int, seq: Int64)?
    /// Group commits whose batch had an event fail after it wrote, and so ran again with a savepoint per
    /// event (see `appendBatch`; tests).
    var batchesRunAgainWithSavepoints = 0
    /// What `onCommit(inlineAt:_:)` installed: SQLite holds an unretained pointer to it for as
    /// long as the handle is open.
    private var commitHook: CommitHook?

    /// Opens (and with `create`, creates) the database file.
    ///
    /// With `immutable` (read-only only) the file is opened through a `file:` URI with `immutable=1`:
    /// SQLite then takes no locks and needs no `-shm` file, which is the only way to read a WAL database
    /// whose directory cannot be written; it also ignores any `-wal` file, so the caller must make sure
    /// there is none with content.
    ///
    /// See https://www.sqlite.org/c3ref/open.html and https://www.sqlite.org/uri.html#uriimmutable
    convenience init(path: String, readOnly: Bool, create: Bool, immutable: Bool = false) throws(StoreError) {
        try self.init(openingPath: path, readOnly: readOnly, create: create, immutable: immutable, inMemory: false)
    }

    /// A private database in memory, gone when the connection closes: the schema this jobctl's
    /// migrations make, built to compare a file's with (`SchemaCheck`).
    static func inMemory() throws(StoreError) -> SQLiteConnection {
        try SQLiteConnection(openingPath: ":memory:", readOnly: false, create: true, immutable: false, inMemory: true)
    }

    private init(openingPath path: String, readOnly: Bool, create: Bool, immutable: Bool, inMemory: Bool) throws(StoreError) {
        _ = Self.processConfiguration
        var flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_PRIVATECACHE
        flags |= readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
        // A relative name is given as `./NAME`: SQLite (Debian's is built to read URIs) takes `file:NAME`
        // as a URI and `:memory:` as no file at all, while everything else of jobctl (the writer lock, the
        // WAL sync, the permission checks) names the file as written — `--db file:real.db` committed into
        // `real.db` and then failed for want of `file:real.db-wal`.
        var name = inMemory ? ":memory:" : path.hasPrefix("/") ? path : "./" + path
        if immutable && readOnly {
            flags |= SQLITE_OPEN_URI
            name = "file:\(Self.uriPath(path))?immutable=1"
        }
        var db: OpaquePointer?
        let code = sqlite3_open_v2(name, &db, flags, nil)
        guard code == SQLITE_OK, let db else {
            let message = db.map { Self.message(of: $0) } ?? String(cString: sqlite3_errstr(code))
            let number = db.map { sqlite3_system_errno($0) } ?? 0
            sqlite3_close_v2(db)
            // Out of descriptors, the file that exists and may be read was said to be missing or unreadable.
            if number == EMFILE || number == ENFILE {
                throw StoreError.io("cannot open database '\(path)': \(message); the process may open no more files: raise its limit "
                                        + "(`ulimit -n`, systemd's LimitNOFILE=)\(number == ENFILE ? " or the system's (fs.file-max)" : "")")
            }
            if let denied = EventStore.permissionProblem(path, writing: false) { throw StoreError.io("cannot open database: \(denied)") }
            throw StoreError.io("cannot open database '\(path)': \(message); check that the file exists and is readable")
        }
        self.handle = db
        self.path = path
        sqlite3_extended_result_codes(db, 1)
    }

    /// How large a statement journal may grow in memory before SQLite spills it to a temporary file.
    ///
    /// A statement journal holds the undo copies of the pages a savepoint (or a statement that may
    /// abort) changes. Every event of a group commit runs in its own savepoint, and SQLite's default
    /// (64 KiB, 16 pages) is exceeded by a claim of a few dozen jobs; from then until the commit every
    /// savepoint wrote its pages to a file in the temporary directory — about 16 page writes per job of
    /// a drain, two thirds of all its `pwrite` calls. The journal is only ever read to roll a savepoint
    /// back inside its transaction, never for crash recovery (the WAL is), so keeping it in memory
    /// changes nothing of durability; it is emptied when the outermost savepoint is released, so this
    /// bounds the memory one savepoint or statement can take before spilling as before.
    ///
    /// Just under 128 KiB, and never more: SQLite keeps the journal in chunks of this size and, on
    /// spilling, writes each chunk in one call, which its unix VFS caps at 128 KiB - 1 bytes (a mask in
    /// `seekAndWriteFd`) — a chunk of 128 KiB or more is written short and the statement fails with
    /// SQLITE_FULL, "database or disk is full", on any disk (SQLite 3.40, Debian 12). With 4 MiB, the
    /// value this had, every statement whose journal passed 4 MiB failed so: deleting one event or
    /// result of a few MiB (an archive of a 6 MiB `upload-data` job could never succeed), a migration
    /// rebuilding a table.
    static let statementJournalSpillBytes: Int32 = (128 << 10) - 1

    /// Process-wide settings made once, before the first connection opens (they must precede
    /// `sqlite3_initialize`, which the first open calls). Set only here, so they cannot fail for a
    /// reason of their own; if SQLite was already initialised they are refused with SQLITE_MISUSE and
    /// SQLite keeps its defaults, which only costs speed.
    ///
    /// Memory statistics are off: nothing here reads them (no soft heap limit, no `sqlite3_memory_used`),
    /// and with them on every allocation SQLite makes takes a process-wide mutex to count itself.
    ///
    /// See https://www.sqlite.org/c3ref/c_config_covering_index_scan.html#sqliteconfigstmtjrnlspill and
    /// https://www.sqlite.org/c3ref/c_config_covering_index_scan.html#sqliteconfigmemstatus
    private static let processConfiguration: Bool = {
        let spill = jobctl_sqlite3_config_statement_journal_spill(statementJournalSpillBytes)
        let statistics = jobctl_sqlite3_config_memory_statistics(0)
        return spill == SQLITE_OK && statistics == SQLITE_OK
    }()

    /// Whether the process-wide settings took effect (tests).
    static var isProcessConfigured: Bool { processConfiguration }

    deinit {
        cache.removeAll()
        sqlite3_close_v2(handle)
    }

    /// `path` escaped for the path part of a `file:` URI: `?`, `#` and `%` would otherwise end or
    /// change it (https://www.sqlite.org/uri.html).
    private static func uriPath(_ path: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "?#%")
        return path.addingPercentEncoding(withAllowedCharacters: allowed) ?? path
    }

    /// Whether SQLite opened the file read-only: asked for read-only, or asked for read-write on a file
    /// it could not open for writing (a read-only filesystem, no write permission), which SQLite does
    /// silently. See https://www.sqlite.org/c3ref/db_readonly.html
    var isReadOnly: Bool { sqlite3_db_readonly(handle, "main") == 1 }

    /// Reads the schema once: the first read is where a WAL database needs its `-shm` file (and the
    /// right to create it). Returns nil when the read worked, otherwise the error and whether it is one
    /// of the failures that means "the -shm/-wal files cannot be created or used here" (CANTOPEN,
    /// READONLY_*), for which an immutable open may help.
    ///
    /// See https://www.sqlite.org/wal.html#readonly
    func probe() -> (error: StoreError, walFilesUnavailable: Bool)? {
        let sql = "SELECT count(*) FROM sqlite_master"
        var raw: OpaquePointer?
        var code = sqlite3_prepare_v2(handle, sql, -1, &raw, nil)
        if code == SQLITE_OK, let raw {
            code = sqlite3_step(raw)
            sqlite3_finalize(raw)
            if code == SQLITE_ROW || code == SQLITE_DONE { return nil }
        } else if let raw {
            sqlite3_finalize(raw)
        }
        let primary = code & 0xFF
        let error = Self.error(code: code, message: Self.message(of: handle), sql: nil)
        return (error, primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY)
    }

    // MARK: Return codes

    /// Turns a non-OK return code into a `StoreError` carrying SQLite's message and the SQL.
    ///
    /// See https://www.sqlite.org/rescode.html
    func check(_ code: Int32, sql: String? = nil) throws(StoreError) {
        guard code != SQLITE_OK && code != SQLITE_ROW && code != SQLITE_DONE else { return }
        throw Self.error(code: code, message: Self.message(of: handle), sql: sql)
    }

    /// The connection's last error message; for an I/O-class error (I/O, full, cannot open, permission)
    /// with the operating system's own word on it, which SQLite's text leaves out: "disk I/O error" alone
    /// does not say that the disk is full (`No space left on device`) or that a file may not be written.
    static func message(of connection: OpaquePointer?) -> String {
        let message = String(cString: sqlite3_errmsg(connection))
        let primary = sqlite3_extended_errcode(connection) & 0xFF
        guard [SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PERM].contains(primary) else { return message }
        let number = sqlite3_system_errno(connection)
        if number == EFBIG || (number == 0 && primary != SQLITE_CANTOPEN), let full = atSizeLimit(connection, sawEFBIG: number == EFBIG) {
            // SQLite names neither the file nor the limit, and its errno is often gone by now (another
            // call overwrote it): "disk I/O error" alone sent users to look for a failing disk.
            return "\(message): \(String(cString: strerror(EFBIG))); \(full)"
        }
        // A temporary file SQLite could not create (a large sort's) was said to be the database
        // ("unable to open database file"): the folder it tried is named when it is that.
        let temporary = primary == SQLITE_CANTOPEN ? SQLiteTemporaryFolder.unusable() : nil
        let why = number == 0 ? message : "\(message): \(String(cString: strerror(number)))"
        return temporary.map { "\(why); \($0)" } ?? why
    }

    /// What reached the process's file size limit (`RLIMIT_FSIZE`) when a call of `connection` failed, as
    /// `FileSizeLimit.exceeded` says it: a write past it fails with `EFBIG` (jobctl ignores SIGXFSZ),
    /// which SQLite reports as a plain I/O error. A write stops short exactly at the limit, so a file
    /// the connection wrote that is below it is not the one. The files looked at, in order: the one
    /// `writing(_:shownAs:_:)` names (`VACUUM INTO`'s copy), the -wal and the database when the
    /// connection may write them, the -shm every connection extends. None at the limit after an `EFBIG`:
    /// SQLite's temporary file (a large sort's) — the database, 9.7 MB past a 1 MB limit, was blamed for
    /// the backup's copy and for a read-only `stats`' temporary file. None, and no `EFBIG` seen: nil.
    private static func atSizeLimit(_ connection: OpaquePointer?, sawEFBIG: Bool) -> String? {
        guard let limit = FileSizeLimit.bytes else { return nil }
        var files: [(path: String, shown: String)] = []
        if let written = alsoWritten.withLock({ $0[UInt(bitPattern: connection)] }) { files.append(written) }
        if let name = sqlite3_db_filename(connection, "main"), case let database = String(cString: name), !database.isEmpty {
            if sqlite3_db_readonly(connection, "main") == 0 {
                files += [sqliteSidecarPath(database, "-wal"), database].map { ($0, $0) }
            }
            files.append((sqliteSidecarPath(database, "-shm"), sqliteSidecarPath(database, "-shm")))
        }
        for file in files {
            var info = stat()
            if stat(file.path, &info) == 0, UInt64(max(0, info.st_size)) >= limit { return FileSizeLimit.exceeded(file.shown) }
        }
        guard sawEFBIG else { return nil }
        return FileSizeLimit.exceeded(named: SQLiteTemporaryFolder.describeFile())
    }

    /// The file each connection writes besides its own (see `writing(_:shownAs:_:)`), by its handle.
    private static let alsoWritten = Mutex<[UInt: (path: String, shown: String)]>([:])

    /// Runs `body` while the connection writes `path` besides the database (`VACUUM INTO`'s copy): an
    /// error at the file size limit names it, as `shown`, when it is the file that reached the limit.
    func writing<T>(_ path: String, shownAs shown: String, _ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        let key = UInt(bitPattern: handle)
        Self.alsoWritten.withLock { $0[key] = (path, shown) }
        defer { _ = Self.alsoWritten.withLock { $0.removeValue(forKey: key) } }
        return try body()
    }

    static func error(code: Int32, message: String, sql: String?) -> StoreError {
        switch code & 0xFF {
        case SQLITE_BUSY, SQLITE_LOCKED:
            return .busy(sql: sql)
        case SQLITE_READONLY:
            return .readOnly("the database is read-only (\(message), SQLite code \(code)): this command writes to it; "
                             + "run it where the database file and its directory are writable")
        case SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PERM:
            return .io("\(message) (SQLite code \(code))")
        case SQLITE_NOTADB, SQLITE_CORRUPT:
            return .damaged("SQLite: \(message), code \(code)")
        default:
            return .sqlite(code: code, message: message, sql: sql)
        }
    }

    // MARK: Configuration

    /// How long a writer waits for another connection's lock before `busy`.
    ///
    /// Waits through a busy handler of our own: SQLite's `sqlite3_busy_timeout` sleeps 1, 2, 5, 10, …
    /// 25 ms and more between tries, while another process's group commit holds the write lock
    /// (its fsync included) for a millisecond or two, so with several worker processes the lock stood free
    /// much of the time while every waiter slept on. This one retries after 20 µs, doubling up to 1 ms,
    /// until `milliseconds` have passed since the first try. (A gentler 250 µs start was measured too:
    /// fewer wake-ups, but four processes on two cores drained ~10 % slower than with this one.)
    ///
    /// See https://www.sqlite.org/c3ref/busy_handler.html
    func setBusyTimeout(milliseconds: Int32) throws(StoreError) {
        busyTimeoutNs = UInt64(max(0, milliseconds)) * 1_000_000
        let context = Unmanaged.passUnretained(self).toOpaque()
        // The handler lives as long as the handle, which this object closes in `deinit`.
        try check(sqlite3_busy_handler(handle, { context, count in
            guard let context else { return 0 }
            return Unmanaged<SQLiteConnection>.fromOpaque(context).takeUnretainedValue().waitWhileBusy(try: Int(count))
        }, context))
    }

    /// The busy handler: 1 to try again, 0 to give up (SQLite then returns SQLITE_BUSY).
    private func waitWhileBusy(try count: Int) -> Int32 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowNs = UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
        if count == 0 { busyStartedNs = nowNs }
        guard nowNs &- busyStartedNs < min(busyTimeoutNs, busyWaitCapNs ?? .max, lockWaitCap?.ns ?? .max) else { return 0 }
        usleep(useconds_t(min(1_000, 20 << min(count, 6))))
        return 1
    }

    /// Runs `body` with every wait for a lock cut short after `limitNs` (the busy timeout still applies
    /// when it is shorter): a caller with other work to do while the lock is held elsewhere gets `busy`
    /// soon instead of sleeping for the whole timeout.
    func withBusyWait<T>(atMostNs limitNs: UInt64, _ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        busyWaitCapNs = limitNs
        defer { busyWaitCapNs = nil }
        return try body()
    }

    /// Refuses writes that could corrupt the file (`writable_schema`, raw page edits).
    ///
    /// See https://www.sqlite.org/c3ref/c_dbconfig_defensive.html
    func enableDefensive() throws(StoreError) {
        try check(jobctl_sqlite3_enable_defensive(handle))
    }

    // MARK: Statements

    /// Runs one or more statements without parameters (migrations, pragmas, transaction control).
    ///
    /// See https://www.sqlite.org/c3ref/exec.html
    func execute(_ sql: String) throws(StoreError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if code != SQLITE_OK {
            // The connection's message is exec's own (SQLite copies it), plus the system's word on an I/O error.
            let message = sqlite3_errcode(handle) == code ? Self.message(of: handle) : errorMessage.map { String(cString: $0) } ?? Self.message(of: handle)
            sqlite3_free(errorMessage)
            throw Self.error(code: code, message: message, sql: sql)
        }
    }

    /// A prepared statement for `sql`, reused across calls; it comes back reset with no bindings.
    ///
    /// See https://www.sqlite.org/c3ref/prepare.html
    func statement(_ sql: String) throws(StoreError) -> SQLiteStatement {
        if let cached = cache[SQLText(sql)] {
            cached.reset()
            return cached
        }
        var raw: OpaquePointer?
        let code = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &raw, nil)
        guard code == SQLITE_OK, let raw else {
            throw Self.error(code: code, message: Self.message(of: handle), sql: sql)
        }
        let statement = SQLiteStatement(handle: raw, database: handle, sql: sql)
        // A small cache: the store uses a few dozen distinct statements; dynamic IN-lists are the exception.
        if cache.count >= 128 { cache.removeAll() }
        cache[SQLText(sql)] = statement
        return statement
    }

    /// Runs a statement that returns no rows.
    func run(_ sql: String, _ values: [SQLiteValue] = []) throws(StoreError) {
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.withBindings(values) { () throws(StoreError) in
            while try statement.step() {}
        }
    }

    /// Runs a query and maps every row.
    func query<T>(_ sql: String, _ values: [SQLiteValue] = [],
                  _ transform: (SQLiteRow) throws(StoreError) -> T) throws(StoreError) -> [T] {
        var results: [T] = []
        try forEach(sql, values) { (row) throws(StoreError) in results.append(try transform(row)) }
        return results
    }

    /// Runs a query and hands each row to `body` as it is stepped (streaming).
    func forEach(_ sql: String, _ values: [SQLiteValue] = [],
                 _ body: (SQLiteRow) throws(StoreError) -> Void) throws(StoreError) {
        let statement = try statement(sql)
        defer { statement.reset() }
        try statement.withBindings(values) { () throws(StoreError) in
            while try statement.step() {
                try body(SQLiteRow(statement: statement))
            }
        }
    }

    /// The first row mapped, or nil.
    func first<T>(_ sql: String, _ values: [SQLiteValue] = [],
                  _ transform: (SQLiteRow) throws(StoreError) -> T) throws(StoreError) -> T? {
        let statement = try statement(sql)
        defer { statement.reset() }
        return try statement.withBindings(values) { () throws(StoreError) -> T? in
            guard try statement.step() else { return nil }
            return try transform(SQLiteRow(statement: statement))
        }
    }

    /// How many times this connection ran `sql` since it prepared it, or nil when no prepared statement
    /// of that text is cached: what a test counts of a read a path repeats (a row visited, an event
    /// decoded), where a time would depend on the machine. See https://www.sqlite.org/c3ref/stmt_status.html
    func timesRun(_ sql: String) -> Int? {
        cache[SQLText(sql)].map { Int($0.timesRun) }
    }

    /// Rows changed by the last INSERT/UPDATE/DELETE. See https://www.sqlite.org/c3ref/changes.html
    var changes: Int { Int(sqlite3_changes(handle)) }

    /// Rows inserted, updated or deleted through this connection since it opened (a statement that
    /// failed counts none: SQLite undid its changes). See https://www.sqlite.org/c3ref/total_changes.html
    var totalChanges: Int64 { sqlite3_total_changes64(handle) }

    /// A PASSIVE checkpoint of the main database: copies what it can of the WAL into the database file
    /// without waiting for any lock. Returns how many of the log's frames are now in the database (the
    /// whole log when it caught up), or nil when SQLite did not checkpoint (another checkpoint running,
    /// I/O).
    ///
    /// See https://www.sqlite.org/c3ref/wal_checkpoint_v2.html
    func checkpointPassive() -> Int32? {
        var logPages: Int32 = 0
        var copiedPages: Int32 = 0
        let code = sqlite3_wal_checkpoint_v2(handle, "main", SQLITE_CHECKPOINT_PASSIVE, &logPages, &copiedPages)
        return code == SQLITE_OK ? copiedPages : nil
    }

    /// Replaces SQLite's automatic checkpoint (`PRAGMA wal_autocheckpoint`, which checkpoints inside the
    /// COMMIT that makes the log long) with `action`, called on the committing thread after each commit
    /// with the WAL's length in pages; `action` must return at once. A commit that leaves it at
    /// `inlineAt` pages or more checkpoints itself instead, as the automatic checkpoint does: a
    /// checkpoint running beside a stream of commits may never catch up with them, and SQLite starts the
    /// log over only after one has, so this bounds the log as before.
    ///
    /// See https://www.sqlite.org/c3ref/wal_hook.html
    func onCommit(inlineAt inlinePages: Int32, _ action: @escaping @Sendable (_ logPages: Int32) -> Void) {
        let hook = CommitHook(inlinePages: inlinePages, action: action)
        commitHook = hook
        sqlite3_wal_hook(handle, { context, db, name, logPages in
            guard let context else { return SQLITE_OK }
            let hook = Unmanaged<CommitHook>.fromOpaque(context).takeUnretainedValue()
            if logPages >= hook.inlinePages {
                // What SQLite's own hook does; its outcome is SQLite's to report, and the next commit tries again.
                _ = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
                hook.inlineCheckpoints += 1
            } else {
                hook.action(logPages)
            }
            return SQLITE_OK
        }, Unmanaged.passUnretained(hook).toOpaque())
    }

    /// Checkpoints the committing thread made itself because the log reached `onCommit`'s `inlineAt` (tests).
    var inlineCheckpoints: Int { commitHook?.inlineCheckpoints ?? 0 }

    /// The rowid of the last INSERT. See https://www.sqlite.org/c3ref/last_insert_rowid.html
    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// Whether a transaction is open. See https://www.sqlite.org/c3ref/get_autocommit.html
    var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }
}

// MARK: - Statement

/// One `sqlite3_stmt*`, finalized in `deinit`. Not `Sendable`.
///
/// See https://www.sqlite.org/c3ref/stmt.html
final class SQLiteStatement {
    private let handle: OpaquePointer
    /// The owning connection's handle, for error messages; `sqlite3_close_v2` keeps it valid while
    /// this statement lives.
    private let database: OpaquePointer
    let sql: String

    fileprivate init(handle: OpaquePointer, database: OpaquePointer, sql: String) {
        self.handle = handle
        self.database = database
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    /// How many times the statement ran to its end or was reset after a step (`SQLITE_STMTSTATUS_RUN`).
    var timesRun: Int32 { sqlite3_stmt_status(handle, SQLITE_STMTSTATUS_RUN, 0) }

    /// Resets the statement and clears its bindings.
    ///
    /// See https://www.sqlite.org/c3ref/reset.html and https://www.sqlite.org/c3ref/clear_bindings.html
    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Binds `values` to parameters 1...n and runs `body` (which steps the statement), lending SQLite the
    /// bytes of every text and blob instead of having it copy them (`SQLITE_STATIC`): they stay valid
    /// for as long as `body` runs, because `body` runs inside the calls that lend them. The caller resets
    /// the statement before it steps it again (`SQLiteConnection`'s `defer`), so SQLite never reads a lent
    /// value after `body` returned. A bound text was an allocation and a copy inside SQLite per value.
    ///
    /// See https://www.sqlite.org/c3ref/bind_blob.html
    func withBindings<R>(_ values: [SQLiteValue], _ body: () throws(StoreError) -> R) throws(StoreError) -> R {
        var lent = 0
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            switch value {
            case .null: try check(sqlite3_bind_null(handle, index))
            case .integer(let integer): try check(sqlite3_bind_int64(handle, index, integer))
            case .real(let real): try check(sqlite3_bind_double(handle, index, real))
            case .text, .blob: lent += 1
            }
        }
        guard lent > 0 else { return try body() }
        return try lend(values, from: 0, body)
    }

    /// Binds the texts and blobs of `values` from `offset` on, each inside the call that lends its
    /// bytes, then runs `body` inside the innermost.
    private func lend<R>(_ values: [SQLiteValue], from offset: Int, _ body: () throws(StoreError) -> R) throws(StoreError) -> R {
        var offset = offset
        while offset < values.count {
            let index = Int32(offset + 1)
            switch values[offset] {
            case .text(var text):
                return try text.withUTF8 { buffer in
                    Result { () throws(StoreError) -> R in
                        // An empty buffer may have no base address; "" must still bind as text, not NULL.
                        let code = buffer.withMemoryRebound(to: CChar.self) { chars in
                            jobctl_sqlite3_bind_text_static(handle, index, chars.baseAddress ?? Self.emptyTextPointer, Int32(chars.count))
                        }
                        try check(code)
                        return try lend(values, from: offset + 1, body)
                    }
                }.get()
            case .blob(let data):
                return try data.withUnsafeBytes { bytes in
                    Result { () throws(StoreError) -> R in
                        if let base = bytes.baseAddress, bytes.count > 0 {
                            try check(jobctl_sqlite3_bind_blob_static(handle, index, base, Int32(bytes.count)))
                        } else {
                            try check(sqlite3_bind_zeroblob(handle, index, 0))
                        }
                        return try lend(values, from: offset + 1, body)
                    }
                }.get()
            case .null, .integer, .real:
                offset += 1
            }
        }
        return try body()
    }

    /// What an empty text binds to: a NUL-terminated C string in the binary's constants, valid for as long
    /// as the process runs.
    private static let emptyText: StaticString = ""

    private static var emptyTextPointer: UnsafePointer<CChar> {
        UnsafeRawPointer(emptyText.utf8Start).assumingMemoryBound(to: CChar.self)
    }

    /// Steps once: true for a row, false when done. The one switch over `sqlite3_step`.
    ///
    /// See https://www.sqlite.org/c3ref/step.html
    func step() throws(StoreError) -> Bool {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            // sqlite3_reset returns the same error; reset now so the statement's locks are released.
            let message = SQLiteConnection.message(of: database)
            sqlite3_reset(handle)
            throw SQLiteConnection.error(code: code, message: message, sql: sql)
        }
    }

    private func check(_ code: Int32) throws(StoreError) {
        guard code != SQLITE_OK else { return }
        throw SQLiteConnection.error(code: code, message: SQLiteConnection.message(of: database), sql: sql)
    }

    // MARK: Columns (https://www.sqlite.org/c3ref/column_blob.html)

    fileprivate func isNull(_ index: Int32) -> Bool {
        sqlite3_column_type(handle, index) == SQLITE_NULL
    }

    fileprivate func int64(_ index: Int32) -> Int64 {
        sqlite3_column_int64(handle, index)
    }

    fileprivate func double(_ index: Int32) -> Double {
        sqlite3_column_double(handle, index)
    }

    fileprivate func text(_ index: Int32) -> String {
        guard let bytes = sqlite3_column_text(handle, index) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, index))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    fileprivate func blob(_ index: Int32) -> Data {
        guard let bytes = sqlite3_column_blob(handle, index) else { return Data() }
        let count = Int(sqlite3_column_bytes(handle, index))
        return Data(bytes: bytes, count: count)
    }

    fileprivate func type(_ index: Int32) -> Int32 {
        sqlite3_column_type(handle, index)
    }

    fileprivate var columnCount: Int32 { sqlite3_column_count(handle) }
}

// MARK: - Row

/// The current row of a stepping statement; valid only inside the closure it is handed to.
struct SQLiteRow {
    fileprivate let statement: SQLiteStatement

    var count: Int { Int(statement.columnCount) }

    func isNull(_ index: Int) -> Bool { statement.isNull(Int32(index)) }
    func int64(_ index: Int) -> Int64 { statement.int64(Int32(index)) }
    func int(_ index: Int) -> Int { Int(statement.int64(Int32(index))) }
    func bool(_ index: Int) -> Bool { statement.int64(Int32(index)) != 0 }
    func text(_ index: Int) -> String { statement.text(Int32(index)) }
    func blob(_ index: Int) -> Data { statement.blob(Int32(index)) }
    func optionalText(_ index: Int) -> String? { isNull(index) ? nil : text(index) }
    func optionalInt64(_ index: Int) -> Int64? { isNull(index) ? nil : int64(index) }

    /// The column as a typed value, for comparisons that must not lose the storage class.
    func value(_ index: Int) -> SQLiteValue {
        let column = Int32(index)
        switch statement.type(column) {
        case SQLITE_INTEGER: return .integer(statement.int64(column))
        case SQLITE_FLOAT: return .real(statement.double(column))
        case SQLITE_TEXT: return .text(statement.text(column))
        case SQLITE_BLOB: return .blob(statement.blob(column))
        default: return .null
        }
    }
}

/// The WAL hook's context (see `SQLiteConnection.onCommit(inlineAt:_:)`).
private final class CommitHook {
    let inlinePages: Int32
    let action: @Sendable (Int32) -> Void
    /// Used only on the connection's thread, inside its commits.
    var inlineCheckpoints = 0
    init(inlinePages: Int32, action: @escaping @Sendable (Int32) -> Void) {
        self.inlinePages = inlinePages
        self.action = action
    }
}
