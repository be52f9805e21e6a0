import Foundation
import JobLifecycle
import JobModel
import StorePort

/// The command table: one static `CommandSpec` per command, defined in `Commands+*.swift`.
enum Commands {}

// MARK: - Shared option parsing

extension ParsedArguments {
    /// `--state` values (repeatable, comma-separated), validated.
    func states() throws -> [JobState] {
        try all("state").flatMap { $0.split(separator: ",") }.map { text in
            guard let state = JobState(rawValue: String(text)) else {
                throw UsageError("unknown state '\(text)'; expected one of \(JobState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return state
        }
    }

    /// `--kind` values (repeatable, comma-separated), validated.
    func kinds() throws -> [JobKind] {
        try all("kind").flatMap { $0.split(separator: ",") }.map { text in
            guard let kind = JobKind(rawValue: String(text)) else {
                throw UsageError("unknown kind '\(text)'; expected one of \(JobKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return kind
        }
    }

    /// `--state` as a filter set (nil when not given).
    func stateSet() throws -> Set<JobState>? {
        let states = try states()
        return states.isEmpty ? nil : Set(states)
    }

    /// `--kind` as a filter set (nil when not given).
    func kindSet() throws -> Set<JobKind>? {
        let kinds = try kinds()
        return kinds.isEmpty ? nil : Set(kinds)
    }

    /// A time option in RFC 3339 or relative form (`1h`).
    func time(_ name: String, now: Int64) throws -> Int64? {
        guard let text = value(name) else { return nil }
        guard let ms = TimeText.parse(text, now: now) else {
            throw UsageError("--\(name) expects a time like 2026-11-29T10:00:00Z, 2026-11-29 or a relative 90s/15m/1h/7d, not '\(text)'")
        }
        return ms
    }
}

// MARK: - Shared rendering

extension JobRecord {
    /// `42%` or `1.2 MiB` or `-`.
    var progressText: String {
        if state == .succeeded { return "100%" }
        if let total = bytesTotal, total > 0 {
            return "\(Int((Double(bytesDone) / Double(total) * 100).rounded(.down)))%"
        }
        return bytesDone > 0 ? ByteSize.format(bytesDone) : "-"
    }

    var routeText: String {
        let source = spec.source ?? (spec.kind == .uploadData ? "<\(spec.data?.count ?? 0) bytes>" : "-")
        let destination = spec.destination ?? (spec.kind == .downloadMemory ? "<memory>" : spec.kind == .fetchURL ? "<url>" : "-")
        return "\(source) → \(destination)"
    }
}

extension StorageError {
    /// The `error` object of `--json` output and of `show`.
    var summary: ErrorSummary {
        ErrorSummary(code: code.rawValue, name: code.name, message: message, httpStatus: httpStatus, url: url,
                     retryable: retryable, cause: cause)
    }
}

/// An error as `show --json` prints it.
struct ErrorSummary: Encodable {
    let code: Int
    let name: String
    let message: String
    let httpStatus: Int?
    let url: String?
    let retryable: Bool
    let cause: String?

    enum CodingKeys: String, CodingKey {
        case code, name, message, url, retryable, cause
        case httpStatus = "http_status"
    }
}
