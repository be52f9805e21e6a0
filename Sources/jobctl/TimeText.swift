import Foundation
import JobModel

/// Times and durations as people read them.
enum TimeText {
    /// `12s`, `5m`, `3h`, `2d`.
    static func age(_ ms: Int64, now: Int64) -> String {
        let seconds = max(0, between(ms, now) / 1000)
        if seconds < 60 { return "\(seconds)s" }
        if seconds < 3600 { return "\(seconds / 60)m" }
        if seconds < 86400 { return "\(seconds / 3600)h" }
        return "\(seconds / 86400)d"
    }

    /// `to - from` in milliseconds, held to Int64's range: times read from the log are not trusted to be
    /// near each other (a row edited by hand with `created_at_ms = -2⁶³` trapped `list` and `stats`).
    static func between(_ from: Int64, _ to: Int64) -> Int64 {
        to.saturatingSubtracting(from)
    }

    /// A duration in two units at most: `45s`, `6m14s`, `1h02m`, `2d03h`.
    static func duration(seconds: Int64) -> String {
        let s = max(0, seconds)
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m\(twoDigits(s % 60))s" }
        if s < 86400 { return "\(s / 3600)h\(twoDigits(s % 3600 / 60))m" }
        return "\(s / 86400)d\(twoDigits(s % 86400 / 3600))h"
    }

    private static func twoDigits(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }

    /// The phrasings in which a rescue writes the time a lease ran out, in epoch milliseconds, into its
    /// event's reason (`JobLifecycle`'s rescue, since the first release): the text before the time, and
    /// what must follow it ("" when the time ends the reason).
    static let rescueTimePhrasings: [(prefix: String, marker: String, after: String)] = [
        ("lease expired", " at ", ""),
        ("lease held by ", " expired at ", ""),
        ("its worker (", " died or lost its lease at ", " while a pause was pending"),
    ]

    /// A rescue's reason (`rescueTimePhrasings`, `lease held by w expired at 1764410400000`) with its time
    /// in RFC 3339, for the text `history` prints; any other text unchanged. Only these phrasings: a
    /// reason may hold a user's words (a cancelled dependency's error, a path with digits after " at ").
    /// `--json` prints every reason as the log holds it.
    static func rescueReasonWithReadableTime(_ text: String) -> String {
        for phrasing in rescueTimePhrasings where text.hasPrefix(phrasing.prefix) {
            guard let marker = text.range(of: phrasing.marker, options: .backwards) else { continue }
            let rest = text[marker.upperBound...]
            let digits = rest.prefix { $0.isASCII && $0.isNumber }
            let after = rest.dropFirst(digits.count)
            guard !digits.isEmpty, digits.count <= 18, let ms = Int64(digits),
                  phrasing.after.isEmpty ? after.isEmpty : after.hasPrefix(phrasing.after) else { continue }
            return String(text[..<marker.upperBound]) + RFC3339.string(ms) + String(after)
        }
        return text
    }
}

/// `1 byte`, `2 bytes`, `1 job`, `3 jobs`.
func plural(_ count: Int, _ singular: String, _ pluralForm: String? = nil) -> String {
    "\(count) \(count == 1 ? singular : pluralForm ?? singular + "s")"
}

/// `plural` for byte counts and other 64-bit numbers.
func plural(_ count: Int64, _ singular: String, _ pluralForm: String? = nil) -> String {
    "\(count) \(count == 1 ? singular : pluralForm ?? singular + "s")"
}
