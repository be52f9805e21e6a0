import EventStore
import Foundation
import JobModel

/// Process exit codes (sysexits-style where one fits).
enum ExitCode {
    static let ok: Int32 = 0
    /// A command that ran and failed (a refused control, a replay difference, a failed job for `watch`).
    static let failure: Int32 = 1
    /// Bad command line (EX_USAGE).
    static let usage: Int32 = 64
    /// Bad manifest (EX_DATAERR).
    static let dataError: Int32 = 65
    /// Interrupted by a signal, as shells report it.
    static let interrupted: Int32 = 130
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
    let environment: [String: String]

    init(arguments: ParsedArguments, environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
        databasePath = arguments.value("db") ?? environment["JOBCTL_DB"].flatMap { $0.isEmpty ? nil : $0 } ?? "jobctl.db"
        stdoutIsTerminal = isatty(STDOUT_FILENO) == 1
        let noColor = environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        useColor = stdoutIsTerminal && !noColor && !arguments.flag("no-color") && environment["TERM"] != "dumb"
    }

    /// `cli:<user>` — recorded as the actor of control events.
    var actor: String {
        let user = environment["USER"] ?? environment["LOGNAME"] ?? "uid\(getuid())"
        return "cli:\(user)"
    }

    /// Opens the event log: read-only for commands that only read; otherwise read-write, applying
    /// pending migrations. Only `create` (submit, migrate) makes a missing database; every other
    /// command refuses one (`StoreError.noDatabase`), so a mistyped --db does not start a new queue.
    ///
    /// The one place the CLI names an adapter: every command works with the `JobStore` port.
    func openStore(readOnly: Bool = false, create: Bool = false) throws -> any JobStore {
        try EventStore(path: databasePath, mode: readOnly ? .readOnly : create ? .create : .readWrite)
    }

    /// Named local buckets (`file://NAME/…`) live in `buckets/` beside the database unless JOBCTL_BUCKETS says otherwise.
    var localBucketsDirectory: String {
        let directory = URL(fileURLWithPath: databasePath).deletingLastPathComponent().path
        return "\(directory)/buckets"
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

/// Writes to standard output.
func emit(_ text: String) {
    FileHandle.standardOutput.write(Data((text.hasSuffix("\n") ? text : text + "\n").utf8))
}

/// Writes to standard error.
func emitError(_ text: String) {
    FileHandle.standardError.write(Data((text.hasSuffix("\n") ? text : text + "\n").utf8))
}

/// JSON for `--json` output: sorted keys, pretty-printed, no escaped slashes.
func jsonText<T: Encodable>(_ value: T) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}

/// One JSON object per line (for streams: `watch`).
func jsonLine<T: Encodable>(_ value: T) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}

/// A plain-text table: headers, left-aligned columns, long cells cut with an ellipsis.
func renderTable(_ headers: [String], _ rows: [[String]], maxWidths: [Int: Int] = [:]) -> String {
    func visibleCount(_ text: String) -> Int {
        // ANSI colour sequences take no columns.
        var count = 0
        var inEscape = false
        for character in text {
            if character == "\u{1B}" { inEscape = true; continue }
            if inEscape { if character == "m" { inEscape = false }; continue }
            count += 1
        }
        return count
    }
    let cut: [[String]] = rows.map { row in
        row.enumerated().map { index, cell in
            guard let limit = maxWidths[index], visibleCount(cell) > limit, limit > 1 else { return cell }
            return String(cell.prefix(limit - 1)) + "…"
        }
    }
    var widths = headers.map(\.count)
    for row in cut {
        for (index, cell) in row.enumerated() where index < widths.count {
            widths[index] = max(widths[index], visibleCount(cell))
        }
    }
    func line(_ cells: [String]) -> String {
        cells.enumerated().map { index, cell in
            index == cells.count - 1 ? cell : cell + String(repeating: " ", count: max(0, widths[index] - visibleCount(cell)))
        }.joined(separator: "  ")
    }
    return ([line(headers)] + cut.map(line)).joined(separator: "\n")
}

// MARK: - Time

enum TimeText {
    /// RFC 3339 with milliseconds, UTC.
    static func rfc3339(_ ms: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    /// `12s`, `5m`, `3h`, `2d`.
    static func age(_ ms: Int64, now: Int64) -> String {
        let seconds = max(0, (now - ms) / 1000)
        if seconds < 60 { return "\(seconds)s" }
        if seconds < 3600 { return "\(seconds / 60)m" }
        if seconds < 86400 { return "\(seconds / 3600)h" }
        return "\(seconds / 86400)d"
    }

    /// Parses RFC 3339 (`2026-11-29T10:00:00Z`, fractional seconds allowed), a date (`2026-11-29`), or a
    /// relative time back from now (`90s`, `15m`, `1h`, `7d`).
    static func parse(_ text: String, now: Int64) -> Int64? {
        let units: [(String, Int64)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000), ("w", 604_800_000)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            if let amount = Int64(text.dropLast(suffix.count)), amount >= 0 { return now - amount * factor }
        }
        let formatter = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime], [.withFullDate]] {
            formatter.formatOptions = options
            if let date = formatter.date(from: text) { return Int64((date.timeIntervalSince1970 * 1000).rounded()) }
        }
        return nil
    }
}
