import Foundation
import JobModel
import PostgresStore
import Storage
import Worker

// MARK: - Typed option declarations

/// An option declared once — name, help, and how its value is read — and read through that
/// declaration, so a misspelt name cannot compile and every value is checked the same way.
protocol OptionDeclaration: Sendable {
    /// What the parser and the help text need.
    var spec: OptionSpec { get }
}

/// A flag: present or not.
struct Flag: OptionDeclaration {
    let spec: OptionSpec

    init(_ long: String, short: Character? = nil, help: String) {
        spec = OptionSpec(long, short: short, help: help)
    }

    /// The same flag with a command-specific help line.
    func help(_ text: String) -> Flag { Flag(spec.long, short: spec.short, help: text) }
}

/// An option with a value, parsed (and range-checked) into `Value` by `parse`. The parser also runs
/// while the command line is read, so a bad value is a usage error before the command starts.
struct Option<Value>: OptionDeclaration {
    let spec: OptionSpec
    let parse: @Sendable (String) throws -> Value

    init(_ long: String, short: Character? = nil, value valueName: String, repeatable: Bool = false, help: String,
         choices: [String] = [], completesFiles: Bool = false, parse: @escaping @Sendable (String) throws -> Value) {
        self.parse = parse
        spec = OptionSpec(long, short: short, value: valueName, repeatable: repeatable, help: help, choices: choices,
                          completesFiles: completesFiles, validate: { text in _ = try parse(text) })
    }

    /// The same option with a command-specific help line.
    func help(_ text: String) -> Option {
        Option(spec.long, short: spec.short, value: spec.valueName ?? "value", repeatable: spec.repeatable, help: text,
               choices: spec.choices, completesFiles: spec.completesFiles, parse: parse)
    }
}

extension Option where Value == String {
    /// A text option taken as given.
    init(_ long: String, short: Character? = nil, value valueName: String, repeatable: Bool = false, completesFiles: Bool = false,
         help: String) {
        self.init(long, short: short, value: valueName, repeatable: repeatable, help: help, completesFiles: completesFiles,
                  parse: { $0 })
    }
}

extension Option where Value == String {
    /// A path (or URL) option: any text but an empty one, which names no file and was refused only once
    /// the command ran (exit 1, "the database path is empty", "cannot open ''") — a usage error, 64.
    static func path(_ long: String, short: Character? = nil, value valueName: String, what: String, help: String) -> Option {
        Option(long, short: short, value: valueName, help: help, completesFiles: true) { text in
            guard !text.isEmpty else { throw UsageError("--\(long) expects \(what), not an empty text") }
            return text
        }
    }
}

extension Option where Value == Int {
    /// A whole number that must lie in `range`; the range is named in the help and in every refusal.
    static func integer(_ long: String, short: Character? = nil, value valueName: String = "n", range: ClosedRange<Int>,
                        help: String) -> Option {
        Option(long, short: short, value: valueName, help: "\(help) (\(range.lowerBound)–\(range.upperBound)).") { text in
            try NumberInput.integer(text, option: long, range: range)
        }
    }
}

// MARK: - The options, declared once

/// Every option of every command. Commands list the ones they accept; help lines that differ per
/// command are set with `.help(_:)`.
enum Options {
    // Global.
    static let database = Option<String>.path("db", value: "path|url", what: "a database file's path or a postgres:// URL", help: "The event log: an SQLite file, or a postgres:// URL (default: $JOBCTL_DB, else the configuration file's db, else ./jobctl.db).")
    static let noColor = Flag("no-color", help: "Never use colours (also: NO_COLOR set, or output not a terminal).")
    static let help = Flag("help", short: "h", help: "Show help information.")
    static let config = Option<String>("config", value: "file", completesFiles: true, help: "Read settings from this YAML file (default: $JOBCTL_CONFIG, else /etc/jobctl/config.yaml and $XDG_CONFIG_HOME/jobctl/config.yaml).")

    // Output.
    static let json = Flag("json", help: "Print JSON.")
    static let csv = Flag("csv", help: "Print CSV (RFC 4180) with a header row.")
    static let showSecrets = Flag("show-secrets", help: "Print secrets in URLs (tokens, signatures, passwords) instead of REDACTED.")

    // Filters.
    static let state = Option<[JobState]>("state", value: "state", repeatable: true,
                                          help: "Only jobs in this state (queued, running, paused, succeeded, failed, cancelled); repeatable or comma-separated.",
                                          choices: JobState.allCases.map(\.rawValue)) { text in
        try text.split(separator: ",", omittingEmptySubsequences: false).map { part in
            guard let state = JobState(rawValue: String(part)) else {
                throw UsageError("unknown state '\(part)'; expected one of \(JobState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return state
        }
    }
    static let kind = Option<[JobKind]>("kind", value: "kind", repeatable: true,
                                        help: "Only jobs of this kind; repeatable or comma-separated.",
                                        choices: JobKind.allCases.map(\.rawValue)) { text in
        try text.split(separator: ",", omittingEmptySubsequences: false).map { part in
            guard let kind = JobKind(rawValue: String(part)) else {
                throw UsageError("unknown kind '\(part)'; expected one of \(JobKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return kind
        }
    }
    static let queue = Option<String>("queue", value: "name", help: "Only jobs of this queue.", parse: queueName)
    /// A queue's name as a manifest's `queue:` takes it: a name no manifest can give would select nothing,
    /// silently (`list --queue 'no such queue!'` said "no jobs"), and text with control characters went to
    /// the terminal as it was (`stats --queue` prints it back).
    static func queueName(_ text: String) throws -> String {
        guard QueueName.isValid(text) else {
            throw UsageError("--queue must be \(QueueName.rule) (as a manifest's queue:), not '\(TerminalText.printable(text))'")
        }
        return text
    }
    static let limit = Option<Int>.integer("limit", range: 0...1_000_000_000,
                                           help: "At most n jobs, newest first; 0 for all, default 50 for the table and all for --json")
    static let since = Option<Int64>("since", value: "time",
                                     help: "Jobs submitted at or after this time (RFC 3339, a date, or relative: 90s, 15m, 1h, 7d).") { text in
        try TimeInput.parse(text, option: "since", now: Clock.nowMs())
    }
    static let until = Option<Int64>("until", value: "time", help: "Jobs submitted before this time (same forms as --since).") { text in
        try TimeInput.parse(text, option: "until", now: Clock.nowMs())
    }
    static let batch = Option<String>("batch", value: "id",
                                      help: "Only jobs of this batch (the id submit printed for a folder, glob or prefix).") { text in
        guard JobID.isValid(text) else {
            throw UsageError("--batch expects a batch id of 26 letters and digits (as submit printed it), not '\(text)'")
        }
        return text.uppercased()
    }
    static let at = Option<Int64>("at", value: "time",
                                  help: "Run the jobs no earlier than this: an RFC 3339 time, or a duration from now (15m, 2h, 1d; at most 3650d).") { text in
        try TimeInput.future(text, option: "at", now: Clock.nowMs())
    }

    // Worker.
    static let concurrency = Option<Int>.integer("concurrency", short: "c", range: 1...256, help: "Transfers at once, default 4")
    static let claimAhead = Option<Int>.integer(
        "claim-ahead", range: 0...1_024,
        help: "Jobs held claimed beyond the free slots (default --concurrency, grown up to 16× but at most 256 while jobs finish fast; 0: none)")
    static let workerQueue = Option<String>("queue", value: "name", repeatable: true,
                                            help: "Only take jobs from this queue; repeatable (default: all queues).",
                                            parse: queueName)
    static let drain = Flag("drain", help: "Exit once no job is queued or running (paused jobs do not hold it); exit 2 if a job it ran failed.")
    static let lease = Option<Int64>("lease", value: "seconds",
                                     help: "Lease length: seconds or a duration (30, 90s, 5m); a worker that stops heartbeating loses its jobs after this (default 30; 1s–24h).") { text in
        try DurationInput.milliseconds(text, option: "lease", defaultUnitMs: 1_000, range: 1_000...86_400_000,
                                       rangeText: "from 1s to 24h")
    }

    static let logFormat = Option<WorkerLogFormatter.Format>("log-format", value: "format",
                                                             help: "Worker log lines on standard error: text (default) or json (one object per line).",
                                                             choices: WorkerLogFormatter.Format.allCases.map(\.rawValue)) { text in
        guard let format = WorkerLogFormatter.Format(rawValue: text) else {
            throw UsageError("--log-format expects text or json, not '\(text)'")
        }
        return format
    }
    static let quiet = Flag("quiet", short: "q", help: "Log only warnings and errors (no line per job).")
    static let verbose = Flag("verbose", short: "v", help: "Also log transfer progress (about one line a second per running job).")

    static let metrics = Option<MetricsAddress>("metrics", value: "host:port",
                                                 help: "Serve Prometheus metrics at http://HOST:PORT/metrics, and the probes /healthz and /readyz (HOST an IPv4 loopback address unless --metrics-allow-remote; port 1–65535).") { text in
        do throws(WorkerError) {
            return try MetricsAddress(parsing: text)
        } catch { throw UsageError(error.message) }
    }
    static let metricsAllowRemote = Flag("metrics-allow-remote",
                                         help: "Let --metrics listen on a non-loopback address (the endpoint has no authentication).")

    static let stallTimeout = Option<Int>("stall-timeout", value: "duration",
                                          help: "Retry a transfer that moves no data for this long, 1s to 1h (default $JOBCTL_STALL_TIMEOUT, else 60s).") { text in
        do throws(StorageError) {
            return try StorageConfiguration.stallTimeout(parsing: text, from: "--stall-timeout")
        } catch { throw UsageError(error.message) }
    }
    static let minRate = Option<Int64>("min-rate", value: "rate",
                                       help: "Retry a transfer moving less than this a second over the last --stall-timeout (jobctl's own pauses left out; at most a quarter of a max_rate or --bwlimit holding it), as curl's --speed-limit: 512, 1k, 10KiB/s; 0 turns it off (default $JOBCTL_MIN_RATE, else 1KiB/s).") { text in
        do throws(StorageError) {
            return try StorageConfiguration.minRate(parsing: text, from: "--min-rate")
        } catch { throw UsageError(error.message) }
    }
    static let bandwidthLimit = Option<Int64>("bwlimit", value: "rate",
                                              help: "Bandwidth shared by all of this worker's transfers (gs://, http(s), file://), as rclone writes it: 512k, 10M (bytes per second, 1k to 1T).") { text in
        if let problem = TransferRate.problem(with: text, what: "--bwlimit") { throw UsageError(problem) }
        // `problem` returned nil, so the text parses.
        return TransferRate.parse(text) ?? 0
    }
    static let slicedThreshold = Option<Int64?>("sliced-threshold", value: "size",
                                                help: "Download gs:// objects of at least this size to files in parallel slices (1MiB to 1TiB; 0 or off: never; default $JOBCTL_SLICED_THRESHOLD, else 150MiB).") { text in
        do throws(StorageError) {
            return try StorageConfiguration.slicedThreshold(parsing: text, from: "--sliced-threshold")
        } catch { throw UsageError(error.message) }
    }
    static let slices = Option<Int>("slices", value: "count",
                                    help: "Slices of a sliced download, 2 to 16 (default $JOBCTL_SLICES, else 4).") { text in
        do throws(StorageError) {
            return try StorageConfiguration.sliceCount(parsing: text, from: "--slices")
        } catch { throw UsageError(error.message) }
    }

    // Watch.
    static let all = Flag("all", help: "Follow every job's events (until interrupted, or until idle with --exit-when-idle).")
    static let on = Option<Set<ObserverStatus>>("on", value: "statuses",
                                                help: "Only these observer statuses: resume, progress, pause, success, failure (comma-separated).",
                                                choices: ObserverStatus.allCases.map(\.rawValue)) { text in
        Set(try text.split(separator: ",", omittingEmptySubsequences: false).map { part in
            guard let status = ObserverStatus(rawValue: part.trimmingCharacters(in: .whitespaces)) else {
                throw UsageError("unknown status '\(part)'; expected resume, progress, pause, success or failure")
            }
            return status
        })
    }
    static let exitWhenIdle = Flag("exit-when-idle", help: "With --all: exit once no job is queued or running.")

    // Others.
    static let output = Option<String>.path("output", short: "o", value: "file", what: "the path of the file to write (- for standard output)",
                                       help: "Write the result to this file instead of standard output (- for standard output, even a terminal).")
    static let dryRun = Flag("dry-run", help: "Validate the manifests and print what would be submitted; store nothing.")
    static let wait = Flag("wait", help: "Then wait until every job submitted (or already in the log under its key) has ended: exit 0 "
                           + "when all succeeded, 1 otherwise (a bar on standard error when it is a terminal, a count by outcome at the end).")
    static let withDependants = Flag("with-dependants",
                                     help: "Also reopen the jobs cancelled because this one failed or was cancelled (after:), through the chain; they wait for it again.")
    static let removeOrphans = Flag("remove", help: "Remove the files listed now instead of waiting for a worker's sweep.")
    static let noCheckSources = Flag("no-check-sources", help: "Do not check that upload-file sources exist and are readable now (they will by the time the jobs run).")
    static let verify = Flag("verify", help: "Compare the rebuilt projection with the stored one; print differences, change nothing, exit 1 if any.")
    static let migrateTo = Option<String>("to", value: "url",
                                          help: "Copy the --db log into this empty PostgreSQL database (postgres://…) and verify it there.") { text in
        guard isPostgresURL(text) else {
            throw UsageError("--to expects a postgres:// URL of an empty database, not '\(TerminalText.printable(redactedDatabaseURL(text)))'")
        }
        if let problem = userInformationProblem(text) { throw UsageError("--to: \(problem)") }
        return text
    }
    static let grant = Option<String>("grant", value: "role",
                                      help: "PostgreSQL: after migrating, give this existing role what workers and the CLI need (insert-only on the log) and nothing else.") { text in
        // A role name is an identifier of at most 63 bytes (NAMEDATALEN - 1); the server quotes it.
        guard !text.isEmpty, text.utf8.count <= 63, !text.contains("\0") else {
            throw UsageError("--grant expects a PostgreSQL role name of 1 to 63 bytes, not '\(text)'")
        }
        return text
    }
    static let eventType = Option<[EventType]>("type", value: "type", repeatable: true,
                                               help: "Only events of this type (submitted, claimed, started, progress, …); repeatable or comma-separated.",
                                               choices: EventType.allCases.map(\.rawValue)) { text in
        try text.split(separator: ",", omittingEmptySubsequences: false).map { part in
            guard let type = EventType(rawValue: String(part)) else {
                throw UsageError("unknown event type '\(part)'; expected one of \(EventType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return type
        }
    }
    static let allEvents = Flag("all", help: "Show every progress event instead of one line per run of them.")
    static let archiveBefore = Option<Int64>("before", value: "time",
                                             help: "Archive jobs that finished before this time (relative: 90d, 12h; or RFC 3339, a date).") { text in
        try TimeInput.parse(text, option: "before", now: Clock.nowMs())
    }
    static let blobsBefore = Option<Int64>("blobs-before", value: "time",
                                           help: "Remove download-memory result blobs whose jobs finished before this time (7d, or a date); the history keeps their hashes.") { text in
        try TimeInput.parse(text, option: "blobs-before", now: Clock.nowMs())
    }
    static let archiveTo = Option<String>("to", value: "file", help: "The archive file to write (gzip-compressed NDJSON).",
                                          completesFiles: true) { text in
        guard !text.isEmpty else { throw UsageError("--to expects the path of the archive file to write, not an empty text") }
        // Not standard output: the file is read back, and the log records its name and checksum.
        guard text != "-" else { throw UsageError("--to - would be a file named '-': archive writes a file it reads back and records; give its path (./- if you mean that name)") }
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: text, isDirectory: &isFolder), isFolder.boolValue {
            throw UsageError("--to '\(text)' is a folder; give the path of the archive file to write (in it, if you like)")
        }
        return text
    }
    static let archiveFrom = Option<String>.path("from", value: "file", what: "the path of an archive file", help: "Read the jobs from this archive file (written by `jobctl archive`) instead of the log.")
    static let force = Flag("force", help: "With --to: copy even while jobs are running (on the target they have no lease; the first worker's rescue expires them).")
}

// MARK: - Numbers from users

/// Whole numbers from the command line: `DecimalText`'s grammar (digits only: `+4` is refused as
/// `-4` is), range-checked, never trapping.
enum NumberInput {
    static func integer(_ text: String, option: String, range: ClosedRange<Int>) throws -> Int {
        let expected = "a whole number from \(range.lowerBound) to \(range.upperBound)"
        let outOfRange = UsageError("--\(option) \(text) is out of range: expected \(expected)")
        switch DecimalText.read(text) {
        case .value(let value):
            guard let value = Int(exactly: value), range.contains(value) else { throw outOfRange }
            return value
        case .tooLarge:
            throw outOfRange
        case .leadingZero:
            throw UsageError("--\(option) \(text): \(DecimalText.leadingZeroRule)")
        case .invalid:
            // A minus and digits is a number, one below any range here.
            if text.hasPrefix("-"), DecimalText.isDigits(DecimalText.trimmed(text.dropFirst())) { throw outOfRange }
            throw UsageError("--\(option) expects \(expected) (digits only), not '\(text)'")
        }
    }
}

/// Duration options: the one grammar of `DurationText`, range-checked into a usage error.
enum DurationInput {
    /// Reads `text`; a bare number is in `defaultUnitMs` (nil: a unit is required).
    static func read(_ text: String, defaultUnitMs: Int64?) -> DurationText.Reading {
        DurationText.read(text, defaultUnitMs: defaultUnitMs)
    }

    /// A duration option in milliseconds within `range`, or a usage error naming the option and range.
    static func milliseconds(_ text: String, option: String, defaultUnitMs: Int64?, range: ClosedRange<Int64>,
                             rangeText: String) throws -> Int64 {
        switch read(text, defaultUnitMs: defaultUnitMs) {
        case .milliseconds(let ms) where range.contains(ms):
            return ms
        case .milliseconds, .tooLarge:
            throw UsageError("--\(option) \(text) is out of range: expected a duration \(rangeText)")
        case .invalid:
            throw UsageError("--\(option) expects whole seconds or a duration like 90s, 15m or 1h \(rangeText), not '\(text)'"
                             + DecimalText.leadingZeroNote(for: text))
        }
    }
}

/// Times for `--since`/`--until`: RFC 3339, a date, or relative back from now, range-checked.
enum TimeInput {
    /// 1970-01-01T00:00:00Z.
    static let earliestMs: Int64 = 0
    /// 9999-12-31T23:59:59.999Z.
    static let latestMs: Int64 = 253_402_300_799_999
    /// The furthest back a relative time may reach: 36500 days (100 years).
    static let longestRelativeMs: Int64 = 36_500 * 86_400_000

    static let forms = "an RFC 3339 time (2026-11-29T10:00:00Z), a date (2026-11-29) between 1970-01-01 and 9999-12-31, "
        + "or a relative time back from now (90s, 15m, 1h, 7d; at most 36500d)"

    /// A time for `submit --at`: RFC 3339, or a duration forward from now (at most 3650 days). A past
    /// time is fine (the jobs run at once). Either way no later than 9999-12-31, as an RFC 3339 time and
    /// a manifest's `delay:` are: a duration from a clock near the end of 9999 reached year 10009.
    static func future(_ text: String, option: String, now: Int64) throws -> Int64 {
        switch DurationInput.read(text, defaultUnitMs: nil) {
        case .milliseconds(let ms) where ms <= 3_650 * 86_400_000:
            guard now.saturatingAdding(ms) <= latestMs else {
                throw UsageError("--\(option) \(text) reaches past 9999-12-31; use a shorter duration")
            }
            return now + ms
        case .milliseconds, .tooLarge:
            throw UsageError("--\(option) \(text) is out of range: a duration from now may be at most 3650d (ten years)")
        case .invalid:
            break
        }
        if let ms = try absolute(text, option: option, dateOnly: false) { return ms }
        throw UsageError("--\(option) expects an RFC 3339 time (2026-12-01T02:00:00Z) or a duration from now (15m, 2h, 1d), not '\(text)'")
    }

    static func parse(_ text: String, option: String, now: Int64) throws -> Int64 {
        switch DurationInput.read(text, defaultUnitMs: nil) {
        case .milliseconds(let ms) where ms <= longestRelativeMs:
            // Before 1970 no job was submitted: the earliest time, not a negative one that a --json
            // echo or a query bound would carry (a clock behind, too, stays in range).
            return min(max(now - ms, earliestMs), latestMs)
        case .milliseconds, .tooLarge:
            throw UsageError("--\(option) \(text) is out of range: a relative time reaches back at most 36500d (100 years)")
        case .invalid:
            break
        }
        if let ms = try absolute(text, option: option, dateOnly: true) { return ms }
        throw UsageError("--\(option) expects \(forms), not '\(text)'")
    }

    /// An RFC 3339 time (with or without fractional seconds; with `dateOnly`, also a plain date) in epoch
    /// milliseconds, range-checked; nil when `text` is none of these.
    private static func absolute(_ written: String, option: String, dateOnly: Bool) throws -> Int64? {
        // Spaces and tabs around ignored, as around a relative time or any number (`--since " 1h"` was
        // taken and `--since " 2026-01-01"` refused).
        let text = String(DecimalText.trimmed(written))
        // Strict: a day or an hour out of range (2027-02-30, T24:00, +99:00) is refused, not rolled over.
        guard let ms = RFC3339.parse(text) ?? (dateOnly ? RFC3339.parseDate(text) : nil) else {
            if RFC3339.isMisplacedLeapSecond(text) {
                throw UsageError("--\(option) \(text) has second 60, a leap second, which only 23:59:60 UTC on the last day of a month can be")
            }
            return nil
        }
        guard ms >= earliestMs, ms <= latestMs else {
            throw UsageError("--\(option) \(text) is out of range: expected a time between 1970-01-01 and 9999-12-31")
        }
        return ms
    }
}
