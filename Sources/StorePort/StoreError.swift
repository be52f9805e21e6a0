import JobLifecycle
import JobModel

/// Everything the event store can refuse or fail with. Each description says what happened and what to do.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The database was migrated by a newer jobctl (`found`) than this binary knows (`known`); it was not touched.
    case newerSchema(found: Int, known: Int)
    /// A read-only open found a database that still needs migrations (`found` < `known`).
    case olderSchema(found: Int, known: Int)
    /// The migration ledger lacks versions `missing`, each below `highest`, which it records as applied:
    /// the ledger was edited or damaged. Nothing was applied: migrations run in order, so one missing
    /// below the newest was applied once, and running it again rebuilt tables without the columns that
    /// later migrations added.
    case damagedLedger(missing: [Int], highest: Int)
    /// The append named a version (`expected`) that is not the job's current one (`actual`).
    case versionConflict(expected: Int, actual: Int)
    /// The append carried lease token `token`, which no longer holds job `jobID` (fencing).
    case staleLease(jobID: String, token: Int64)
    /// Event `event` cannot happen to job `jobID` in state `state` (nil: the job does not exist yet).
    case invalidTransition(jobID: String, state: JobState?, event: EventType)
    /// A control command (pause, resume, cancel, retry) or API call that makes no sense; the message says why.
    case invalidControl(String)
    /// No job with this id (or id prefix).
    case notFound(String)
    /// Job `jobID` is of kind `kind`, which this jobctl does not know: a newer jobctl submitted it. Not
    /// damage (`corrupt`): the log is as it should be, this binary is too old to read the job.
    case unknownKind(jobID: String, kind: String)
    /// Job `jobID`'s history holds an event of type `type`, which this jobctl does not know: a newer
    /// jobctl wrote it. Not damage (`corrupt`): this binary cannot fold the job's history, so it neither
    /// reads, runs nor changes the job.
    case unknownEventType(jobID: String, type: String)
    /// The id prefix matches several jobs.
    case ambiguous(prefix: String, matches: [String])
    /// `name` is the key of job `keyed` and also names another job by its id: a prefix of `byID`'s ids
    /// (one, or several when the prefix is ambiguous on its own).
    case keyAndIDPrefix(name: String, keyed: String, byID: [String])
    /// SQLite returned `code` (extended result code) with `message` while running `sql`.
    case sqlite(code: Int32, message: String, sql: String?)
    /// Another connection held the write lock past the busy timeout; `holder` says whose it was, when
    /// that is known (see `BusyHolder`).
    case busy(sql: String?, holder: BusyHolder? = nil)
    /// There is no database at `path`, and the command may not create one (only `submit` and `migrate` do).
    case noDatabase(path: String)
    /// A write was refused because the database (its file, its directory or the filesystem) is read-only;
    /// the message says which.
    case readOnly(String)
    /// The idempotency key `key` already names job `existingID`, whose spec differs from the one submitted.
    case keyConflict(key: String, existingID: String)
    /// The file could not be opened, read or written.
    case io(String)
    /// The database path names what cannot be a database (nothing at all, a folder, a FIFO, a device, a
    /// file with several hard links): the message says what and what to give instead. Not an I/O error
    /// (it was labelled "database I/O error: 'db' is a directory…", a failing disk's words).
    case unusablePath(String)
    /// The database server failed a statement for a reason of the session, the transaction or the server
    /// itself — not of the rows it wrote (`serverRefused`), not a lost connection (`unreachable`): with
    /// SQLSTATE `sqlstate` (a statement cancelled or past its `statement_timeout`, a table or privilege
    /// missing, a full disk, a lock not had in time, …) and `message`, which says so with the statement.
    /// It was labelled a "database I/O error", and a stopped drain's advice was to free disk space.
    case server(sqlstate: String, message: String)
    /// The database server could not be reached, or its connection was lost or stopped answering (a
    /// server database only); the message says which and what to check.
    case unreachable(String)
    /// The connection to the database server was lost, or stopped answering, while a transaction's COMMIT
    /// was under way: the server may have committed it. `message` says what happened and gives no advice,
    /// which depends on who wrote: a command is run again by its user (`description` says to check first);
    /// a worker finds out from the log itself before it writes again (`landedAdvice` says so in its log).
    case commitUnconfirmed(String)
    /// The database file is damaged, or is not a database at all (SQLite's "malformed" and "not a
    /// database"): no retry can help, so a worker stops rather than retrying for ever.
    case damaged(String)
    /// The database file at `path` is no longer the file this process opened (`what` says how: deleted
    /// or moved away, another file put there): what it writes would reach no one, so a worker stops.
    case replaced(path: String, what: String)
    /// A stored row or event could not be decoded, or a value could not be encoded as JSON.
    case corrupt(String)
    /// An `after:` entry names no job: not a key of the jobs submitted with it, nor a key or id (prefix)
    /// of a job in the log.
    case unknownDependency(String)
    /// `after:` edges among the jobs of one submit close a cycle: the indices (in the submitted specs) of
    /// the jobs on it, in order, the first repeated at the end.
    case dependencyCycle(specIndices: [Int])
    /// A write larger than the database takes in one statement or one value (PostgreSQL: 1 GB); nothing
    /// of it was sent. The message says how large and what to do.
    case tooLarge(String)
    /// The database server refused a write for a reason of the rows it wrote — a constraint, a value it
    /// does not take, a trigger that raised — with SQLSTATE `sqlstate` and `message` (the server's primary
    /// message, not its detail, which may repeat a whole row). Nothing of that write was written; written
    /// again, it is refused again. In a group commit it is one event's refusal: the others are written.
    case serverRefused(sqlstate: String, message: String)
    /// Syncing the database's write-ahead log failed (the message says how): the kernel may have dropped
    /// the pages it could not write, so a later sync that succeeds proves nothing about them. This
    /// process reports nothing written from then on, and a worker stops.
    case syncFailed(String)

    public var description: String {
        switch self {
        case .newerSchema(let found, let known):
            return "the database schema is version \(found) but this jobctl knows only up to \(known); "
                + "it was left untouched: upgrade jobctl to use it"
        case .olderSchema(let found, let known):
            return "the database schema is version \(found) but this jobctl expects \(known), and a read-only open "
                + "never migrates: run `jobctl migrate` once where the database is writable"
        case .damagedLedger(let missing, let highest):
            let versions = missing.map(String.init).joined(separator: ", ")
            return "the database's migration ledger (schema_migrations) lacks version\(missing.count == 1 ? "" : "s") \(versions), "
                + "below version \(highest), which it records as applied: the ledger was edited or damaged; nothing was "
                + "migrated or changed, since applying \(missing.count == 1 ? "that migration" : "those migrations") again "
                + "would undo later ones. Put the missing ledger rows back (from a backup of the database), or restore the backup"
        case .versionConflict(let expected, let actual):
            return "version conflict: expected the job at version \(expected) but it is at \(actual); "
                + "someone else changed it first: re-read the job and try again"
        case .staleLease(let jobID, let token):
            return "stale lease: token \(token) no longer holds job \(jobID) (it expired and was rescued, "
                + "or the job left the running state); this worker must stop working on it"
        case .invalidTransition(let jobID, let state, let event):
            let where_ = state.map { "it is \($0.rawValue)" } ?? "it does not exist"
            return "cannot record '\(event.rawValue)' for job \(jobID): \(where_)"
        case .invalidControl(let message):
            return message
        case .notFound(let id):
            return "no job matches '\(id)'; `jobctl list` shows the jobs there are"
        case .unknownKind(let jobID, let kind):
            return "job \(jobID) is of kind '\(TerminalText.storedName(kind))', which this jobctl does not know: a newer "
                + "jobctl submitted it, and only as new a jobctl can read, run or change it; upgrade this one"
        case .unknownEventType(let jobID, let type):
            return "job \(jobID) has an event of type '\(TerminalText.storedName(type))', which this jobctl does not "
                + "know: a newer jobctl wrote it, and only as new a jobctl can read, run or change the job; upgrade this one"
        case .ambiguous(let prefix, let matches):
            return "'\(prefix)' matches \(matches.count) jobs (\(matches.prefix(5).joined(separator: ", "))"
                + "\(matches.count > 5 ? ", …" : "")); give more characters of the id"
        case .keyAndIDPrefix(let name, let keyed, let byID):
            return "'\(TerminalText.printable(name))' names two jobs: \(keyed) by its key, and \(byID.count == 1 ? byID[0] : "\(byID.count) jobs") "
                + "by \(byID.count == 1 ? "its id, which starts" : "their ids, which start") with it; give the whole id of the one you mean"
        case .sqlite(let code, let message, let sql):
            return "SQLite error \(code): \(message)" + (sql.map { " in `\(Self.abbreviate($0))`" } ?? "")
        case .busy(let sql, .writerLock(let writerLock)?):
            return "the database is busy: jobctl's writer lock '\(writerLock)' was held by another process past the busy timeout"
                + (sql.map { " (`\(Self.abbreviate($0))`)" } ?? "") + "; try again. If no jobctl process uses this database "
                + "(`fuser -v '\(writerLock)'` or `lsof '\(writerLock)'` lists none), the lock file is stale (copied while "
                + "a writer held it, as by a backup of a live folder): remove it, and the next writer makes a new one"
        case .busy(_, .migration(let from, let to)?):
            return "the database is busy: a migration of this database is in progress (its schema is at version \(from) of \(to), "
                + "and another process has held its write lock all the while; a large log takes minutes): wait for it to finish, "
                + "then try again"
        case .busy(let sql, _):
            return "the database is busy: another process held the write lock past the busy timeout"
                + (sql.map { " (`\(Self.abbreviate($0))`)" } ?? "") + "; try again or raise the busy timeout"
        case .noDatabase(let path):
            return "no database at \(path): run `jobctl submit` or `jobctl migrate` to create one"
        case .readOnly(let message):
            return message
        case .keyConflict(let key, let existingID):
            return "idempotency key '\(key)' already names job \(existingID), submitted with a different spec; "
                + "nothing was submitted: give this job a new key, or submit the same spec to get \(existingID) back"
        case .io(let message):
            return "database I/O error: \(message)"
        case .unusablePath(let message):
            return message
        case .server(_, let message):
            return message
        case .unreachable(let message):
            return message
        case .commitUnconfirmed(let message):
            return message + "; " + Self.commitUnconfirmedAdvice
        case .damaged(let message):
            return "the database file is damaged or is not a jobctl database (\(message)): check that it is the file "
                + "meant; if it is, stop every worker, keep a copy of it with its -wal and -shm files, and check it with "
                + "`sqlite3 FILE 'PRAGMA integrity_check'` (`.recover` saves what can be read)"
        case .replaced(let path, let what):
            return "the database file '\(path)' \(what) while this process had it open: its writes would go to a file no "
                + "other jobctl reads, and its -wal file may now be another database's; stop every jobctl process using "
                + "'\(path)', put the file back (with its -wal and -shm files) or choose the database to keep, and start them again"
        case .corrupt(let message):
            return "stored data could not be read or written: \(message); `jobctl replay --verify` checks the log"
        case .unknownDependency(let name):
            return "'after' names '\(name)', which is neither the key of a job in the manifest nor a key or id (prefix) "
                + "of a job in the log; nothing was submitted: name a job that exists (`jobctl list` shows them; a job "
                + "`jobctl archive` moved out of the log is named by nothing)"
        case .dependencyCycle(let indices):
            return "'after' makes a cycle among the jobs submitted (jobs \(indices.map { String($0 + 1) }.joined(separator: " → "))): "
                + "they would wait for each other forever; nothing was submitted: remove one of the edges"
        case .tooLarge(let message):
            return message
        case .serverRefused(let sqlstate, let message):
            return "the database server refused the write (SQLSTATE \(sqlstate): \(message)); nothing of it was written, "
                + "and written again it is refused again: the value, or the constraint or trigger on jobctl's tables that "
                + "the server names, must change first"
        case .syncFailed(let message):
            return "the disk did not confirm the event log's writes (\(message)); a sync that fails may lose what it "
                + "was to write even if a later one succeeds, so this process reports nothing more as written: stop "
                + "every jobctl process using the database, check the disk (`dmesg`, its free space), start them again, "
                + "and run `jobctl replay --verify`"
        }
    }

    /// What a user does after a command's write whose COMMIT went unanswered: it may be in the log. Said
    /// when the command has nothing better to say; each writing command says what to look at and what
    /// running it again would do (submit: jobs with a `key:` are never created twice; a control: the
    /// job's state; archive: the archives the log records; migrate --to: the target).
    public static let commitUnconfirmedAdvice = "the server may have committed the transaction before the connection went: "
        + "check what it wrote (`jobctl list`, `jobctl history ID`) before running the command again"

    private static func abbreviate(_ sql: String) -> String {
        let flat = sql.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        return flat.count > 120 ? String(flat.prefix(117)) + "..." : flat
    }
}

/// Whose lock a `StoreError.busy` was kept waiting by, when the store can tell.
public enum BusyHolder: Sendable, Equatable {
    /// jobctl's writer lock beside the database (not SQLite's own lock) was not given up: another jobctl
    /// writer held it, or the file is stale (copied while held).
    case writerLock(path: String)
    /// The schema is at version `from`, behind this jobctl's `to`, and another process held SQLite's write
    /// lock all the while: migrating it (a large log takes minutes), as every writer of a database behind
    /// does first.
    case migration(from: Int, to: Int)
}

extension StoreError {
    /// Job `jobID`'s row (`jobs.seq`) does not point at the job's own `submitted` event — the event there
    /// is missing, another job's, or of another type — so its spec cannot be read. Refused rather than
    /// read from whatever event is there: another job's spec made a worker run that job's transfer as
    /// this one.
    public static func notItsSubmission(jobID: String) -> StoreError {
        .corrupt("job \(jobID)'s row does not point at its own submitted event (the event at its seq is missing, another "
            + "job's, or not a submission), so its spec cannot be read; nothing was run or changed")
    }

    /// The store's error for the lifecycle's refusal of a command on job `jobID`.
    public init(_ refusal: LifecycleRefusal, jobID: String) {
        switch refusal {
        case .notFound: self = .notFound(jobID)
        case .versionConflict(let expected, let actual): self = .versionConflict(expected: expected, actual: actual)
        case .staleLease(let token): self = .staleLease(jobID: jobID, token: token)
        case .invalidTransition(let state, let event): self = .invalidTransition(jobID: jobID, state: state, event: event)
        case .invalidControl(let message): self = .invalidControl(message)
        case .notRunnableYet: self = .invalidControl("job \(jobID): \(refusal)")
        }
    }
}
