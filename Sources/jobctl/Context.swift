import EventStore
import Foundation
import Synchronization
import JobModel
import Manifest
import PostgresStore
import Storage

/// Process exit codes (sysexits-style where one fits). `ExitCode.helpText` lists them for `--help`.
enum ExitCode {
    static let ok: Int32 = 0
    /// A command that ran and failed (a refused control, a replay difference, a failed job for `watch`).
    static let failure: Int32 = 1
    /// `worker --drain` finished, and at least one job it ran ended failed.
    static let jobsFailed: Int32 = 2
    /// Bad command line (EX_USAGE), including a number out of its range.
    static let usage: Int32 = 64
    /// Bad manifest (EX_DATAERR).
    static let dataError: Int32 = 65
    /// A worker interrupted twice (the second SIGTERM/SIGINT/SIGHUP exits at once), as shells report SIGINT.
    static let interrupted: Int32 = 130

    static let helpText = """
    EXIT CODES:
      0    success
      1    failure (an error, a refused control, a failed job for watch, a replay difference)
      2    worker --drain: finished, but a job it ran ended failed
      64   usage error (unknown option, a number out of range, …)
      65   bad manifest (nothing was submitted)
      130  worker: a second SIGTERM/SIGINT/SIGHUP exited at once
    """
}

/// How a command's failure reaches standard error when it is not the `Error: …` line: a worker whose
/// log is JSON lines (`--log-format json`) writes it as one more of them (`worker_failed`), so a log
/// shipper that reads only JSON is not handed a plain line at the moment the worker fails.
enum FailureReport {
    private static let reporter = Mutex<(@Sendable (String, Int32) -> Void)?>(nil)

    /// Sets who reports failures from now on (nil: the `Error: …` line).
    static func set(_ report: (@Sendable (String, Int32) -> Void)?) {
        reporter.withLock { $0 = report }
    }

    /// Reports `message` through the reporter set, if any; whether it did.
    static func report(_ message: String, exitCode: Int32) -> Bool {
        guard let report = reporter.withLock({ $0 }) else { return false }
        report(message, exitCode)
        return true
    }
}

/// A failure to report as `Error: …` with exit code 1 (or a given code).
struct CommandFailure: Error, CustomStringConvertible {
    let message: String
    let exitCode: Int32
    init(_ message: String, exitCode: Int32 = ExitCode.failure) {
        self.message = message
        self.exitCode = exitCode
    }
    var description: String { message }
}

/// What every command needs: where the log is, how to print, who is acting.
struct Context: Sendable {
    let databasePath: String
    let useColor: Bool
    let stdoutIsTerminal: Bool
    /// `TERM=dumb`: the terminal takes no escape sequences (no colour, a progress bar without erasing).
    let terminalIsDumb: Bool
    let environment: [String: String]
    /// The configuration file's settings (already merged into `environment` and the arguments).
    let configuration: Configuration
    /// The environment as the process received it, before the configuration file filled it in.
    let processEnvironment: [String: String]
    /// Whether `--db` named the database (else `JOBCTL_DB`, the file's `db`, or the default).
    let databaseGivenByFlag: Bool

    init(arguments: ParsedArguments, environment: [String: String] = ProcessInfo.processInfo.environment,
         configuration: Configuration = Configuration(), processEnvironment: [String: String]? = nil) {
        self.environment = environment
        self.configuration = configuration
        self.processEnvironment = processEnvironment ?? environment
        let given = (try? arguments.value(Options.database)) ?? nil
        databaseGivenByFlag = given != nil
        databasePath = given ?? environment["JOBCTL_DB"].flatMap { $0.isEmpty ? nil : $0 } ?? "jobctl.db"
        stdoutIsTerminal = isatty(STDOUT_FILENO) == 1
        let noColor = environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        terminalIsDumb = environment["TERM"] == "dumb"
        useColor = stdoutIsTerminal && !noColor && !arguments[Options.noColor] && !terminalIsDumb
    }

    /// `cli:<user>` — recorded as the actor of control events: `$USER`, else `$LOGNAME`, else `uidN`.
    /// Whoever runs the command sets these, so the name is a label, not an identity (README says so).
    /// It is cut to `actorUserLimit` bytes, between two characters: taken whole, a 100 KB `$USER` was
    /// stored in every event the command appended.
    var actor: String {
        let user = environment["USER"] ?? environment["LOGNAME"] ?? "uid\(getuid())"
        return "cli:\(Self.boundedActorUser(user))"
    }

    /// The most bytes (UTF-8) of a user name an actor records.
    static let actorUserLimit = 256

    /// `user`'s longest prefix within `actorUserLimit` bytes that ends between two Unicode scalars (never
    /// inside one's UTF-8 bytes, so the name stays valid text).
    static func boundedActorUser(_ user: String) -> String {
        guard user.utf8.count > actorUserLimit else { return user }
        var kept = String.UnicodeScalarView()
        var bytes = 0
        for scalar in user.unicodeScalars {
            bytes += UTF8.width(scalar)
            guard bytes <= actorUserLimit else { break }
            kept.append(scalar)
        }
        return String(kept)
    }

    /// The database as it may be shown: a URL's password (`postgres://u:pw@…`) is redacted.
    var databaseDisplay: String { redactedDatabaseURL(databasePath) }

    /// The width output should fit, or nil when it need not (a pipe without `COLUMNS`).
    var width: Int? { Terminal.width(environment: environment, stdoutIsTerminal: stdoutIsTerminal) }
    /// Whether standard error is a terminal (where `submit --wait` draws its bar), and its width.
    var stderrIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }
    var stderrWidth: Int? { Terminal.width(environment: environment, stdoutIsTerminal: stderrIsTerminal, descriptor: STDERR_FILENO) }

    /// The variable bounding a one-shot command's wait for a PostgreSQL server's answer.
    static let answerTimeoutVariable = "JOBCTL_DB_ANSWER_TIMEOUT"
    /// Its default.
    static let defaultAnswerTimeoutMs: Int64 = 30_000

    /// `JOBCTL_DB_ANSWER_TIMEOUT` in milliseconds (nil: no limit), `fallback` when it is unset or empty.
    func databaseAnswerTimeoutMs(default fallback: Int64?) throws(UsageError) -> Int64? {
        guard let text = environment[Self.answerTimeoutVariable], !text.isEmpty else { return fallback }
        return try Self.answerTimeoutMs(parsing: text)
    }

    /// A duration of 1 s to 1 day (`45s`, `2m`), or `0` (`0s`, any zero duration) / `off` for no limit. Read
    /// as every duration is (`DurationText`: spaces and tabs around ignored, a no-break space refused).
    /// The error names the setting `name`: the variable, or a configuration file's key.
    static func answerTimeoutMs(parsing text: String, name: String = answerTimeoutVariable) throws(UsageError) -> Int64? {
        let trimmed = DecimalText.trimmed(text).lowercased()
        if trimmed == "0" || trimmed == "off" { return nil }
        let reading = DurationText.read(trimmed)
        if reading == .milliseconds(0) { return nil }
        guard case .milliseconds(let ms) = reading, (1_000...86_400_000).contains(ms) else {
            let given = name == answerTimeoutVariable ? "\(name)=\(text)" : "\(name) '\(text)'"
            throw UsageError("\(given) is not a duration of 1s to 1d (e.g. 30s, 2m) or 0/off for no limit")
        }
        return ms
    }

    /// Opens the event log: read-only for commands that only read; otherwise read-write, applying
    /// pending migrations. Only `create` (submit, migrate) makes a missing database; every other
    /// command refuses one (`StoreError.noDatabase`), so a mistyped --db does not start a new queue.
    ///
    /// The one place the CLI names an adapter: every command works with the `JobStore` port. A
    /// `postgres://` (or `postgresql://`) URL selects PostgreSQL; anything else is an SQLite file path.
    ///
    /// A `worker` (a writer that runs for long and commits all the time) has an SQLite log's WAL
    /// checkpointed on a thread of its own rather than inside its commits (see
    /// `EventStore.checkpointInBackground()`).
    ///
    /// A worker on PostgreSQL gives a session up once the server leaves a call unanswered for
    /// `answerTimeoutMs` (see `PostgresStore.init`), then opens a new one. Every other command waits at
    /// most `JOBCTL_DB_ANSWER_TIMEOUT` (30 s by default) without a byte of the answer (an answer still
    /// arriving is read however long it takes) and then fails, so a stopped
    /// server or a proxy that stopped forwarding cannot hang it; a `wholeLog` command (one that may keep
    /// the server busy with the whole log in one statement: archive, replay, migrate) waits only as long
    /// as the variable says, and as long as the server takes when it is unset.
    ///
    /// A command that upgraded an existing log on the way (its migrations applied: `submit`, `cancel`, …)
    /// says so on standard error, unless `announcesUpgrade` is false (`migrate` prints its own, a worker
    /// logs it): a jobctl older than this one can no longer open the log, and it used to change silently.
    func openStore(readOnly: Bool = false, create: Bool = false, worker: Bool = false, wholeLog: Bool = false,
                   answerTimeoutMs: Int64? = nil, announcesUpgrade: Bool = true) throws -> any JobStore {
        if let problem = databaseTargetProblem { throw problem }
        let store: any JobStore
        if isPostgresURL(databasePath) {
            let timeout = try worker ? answerTimeoutMs
                : answerTimeoutMs ?? databaseAnswerTimeoutMs(default: wholeLog ? nil : Self.defaultAnswerTimeoutMs)
            store = try PostgresStore(url: databasePath, mode: readOnly ? .readOnly : create ? .create : .readWrite,
                                      answerTimeoutMs: timeout)
        } else {
            let local = try EventStore(path: databasePath, mode: readOnly ? .readOnly : create ? .create : .readWrite)
            if worker && !readOnly {
                try local.checkpointInBackground()
                // No job of this worker writes over or deletes the log it records them in.
                ProtectedFiles.protect(localLogFiles, as: "this worker's event log")
            }
            store = local
        }
        if announcesUpgrade && !worker, let upgrade = Self.upgrade(by: store) {
            emitError("note: \(Self.upgradeText(upgrade))")
        }
        return store
    }

    /// The migrations (first and last) that upgraded an existing log when `store` was opened; nil when
    /// nothing was applied, or when the log was made by this open (all its migrations are its creation).
    /// The first applied, not the schema before it: numbers may skip (PostgreSQL has no migration 9).
    static func upgrade(by store: any JobStore) -> (first: Int, to: Int)? {
        let applied = store.appliedMigrations
        guard let first = applied.min(), first > 1, let last = applied.max() else { return nil }
        return (first, last)
    }

    /// What an upgrade means to the user: no jobctl that knows an older schema can open the log.
    static func upgradeText(_ upgrade: (first: Int, to: Int)) -> String {
        "the event log was upgraded to schema \(upgrade.to) (migrations \(upgrade.first)–\(upgrade.to) applied): a jobctl that knows "
            + "an older schema (the schemas a jobctl knows are in its --version) can no longer open it — upgrade every jobctl that "
            + "shares the log, and stop any older worker still running on it (what it writes now may disagree with the new schema "
            + "until `jobctl replay`)"
    }

    /// What every command refuses in the database it was given before opening anything (a usage error):
    /// a libpq key/value string, which would be taken for an SQLite file's name, and a URL whose user
    /// information libpq would read otherwise than jobctl. `jobctl config` reports it as the worker would.
    var databaseTargetProblem: UsageError? {
        if isConnectionKeywords(databasePath) {
            return UsageError("the database '\(TerminalText.printable(databaseDisplay))' is a libpq key/value connection string; jobctl "
                                  + "takes PostgreSQL as a URL: \(SecretRedaction.credentialsPlaceholder(scheme: "postgresql"))/<dbname>?sslmode=… (key/value "
                                  + "settings go in its query: ?sslmode=require&application_name=…); an SQLite file of that name is reached as ./NAME")
        }
        if let problem = userInformationProblem(databasePath) { return UsageError("\(databaseName): \(problem)") }
        return nil
    }

    /// How a message names the database setting, as it was given: `--db`, `JOBCTL_DB`, or the
    /// configuration file's `db (FILE:LINE:COL)`.
    var databaseName: String {
        if databaseGivenByFlag { return "--db" }
        if let set = processEnvironment["JOBCTL_DB"], !set.isEmpty { return "JOBCTL_DB" }
        if let fromFile = configuration.fileValues["db"] { return "db (\(fromFile.source))" }
        return "--db"
    }

    /// The files of the SQLite log this command uses (none for PostgreSQL): what no output of it may
    /// write over.
    var localLogFiles: [String] { isPostgresURL(databasePath) ? [] : sqliteLogFiles(databasePath) }

    /// Whether the event log is a PostgreSQL database (else an SQLite file).
    var usesPostgres: Bool { isPostgresURL(databasePath) }

    /// Named local buckets (`file://NAME/…`) live in `buckets/` beside the database unless JOBCTL_BUCKETS says
    /// otherwise; with a PostgreSQL database (no directory of its own), in `buckets/` of the current directory.
    var localBucketsDirectory: String {
        let relative = isPostgresURL(databasePath) || !databasePath.hasPrefix("/")
        let current = CurrentDirectory.path
        if relative && current == nil {
            // The current directory was removed: left relative, so that a job using it fails (ENOENT)
            // instead of Foundation's "" putting the buckets in /buckets at the root.
            return isPostgresURL(databasePath) ? "buckets" : "\(SlashSeparatedPath.directory(of: databasePath))/buckets"
        }
        let absolute = isPostgresURL(databasePath) ? nil : databasePath.hasPrefix("/") ? databasePath : (current ?? "") + "/" + databasePath
        guard let absolute else { return "\(current ?? "")/buckets" }
        return "\(SlashSeparatedPath.directory(of: LocalPath.resolve(absolute)))/buckets"
    }

    func paint(_ text: String, _ code: String) -> String {
        useColor ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    func paint(state: JobState) -> String {
        switch state {
        case .succeeded: paint(state.rawValue, "32")
        case .failed: paint(state.rawValue, "31")
        case .cancelled: paint(state.rawValue, "33")
        case .running: paint(state.rawValue, "36")
        case .paused: paint(state.rawValue, "35")
        case .queued: state.rawValue
        }
    }
}

// MARK: - Output helpers

/// Writes to standard output (see `StandardOutput` for a write that fails).
func emit(_ text: String) {
    StandardOutput.write(text.hasSuffix("\n") ? text : text + "\n")
}

/// Writes to standard error. Any URL in the text has its secrets redacted and every control character
/// but the line break and the tab is shown as `\u{…}`: errors from any layer (a store error naming a
/// database URL, a storage error quoting a server's reply) pass through here.
func emitError(_ text: String) {
    let safe = TerminalText.printableKeepingLines(SecretRedaction.redactURLs(in: text))
    StandardStreams.write(safe.hasSuffix("\n") ? safe : safe + "\n", to: STDERR_FILENO)
}

/// JSON for `--json` output: sorted keys, pretty-printed, no escaped slashes, and no control character
/// left raw (`TerminalText.escapingJSONControls`: the encoder escapes C0 only).
func jsonText<T: Encodable>(_ value: T) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
    return String(decoding: TerminalText.escapingJSONControls(try encoder.encode(value)), as: UTF8.self)
}

/// One JSON object per line (for streams: `watch`).
func jsonLine<T: Encodable>(_ value: T) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: TerminalText.escapingJSONControls(try encoder.encode(value)), as: UTF8.self)
}
