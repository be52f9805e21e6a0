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

    /// `text` with epoch-millisecond timestamps after "at " (as older logs wrote them: `expired at
    /// 1764410400000`) rewritten as RFC 3339.
    static func rewritingEpochs(in text: String) -> String {
        guard text.contains(" at ") else { return text }
        var output = ""
        var rest = Substring(text)
        while let range = rest.range(of: " at ") {
            output += rest[..<range.upperBound]
            rest = rest[range.upperBound...]
            let digits = rest.prefix { $0.isASCII && $0.isNumber }
            // 12 or 13 digits: milliseconds between 2001 and 2286.
            if (12...13).contains(digits.count), let ms = Int64(digits) {
                output += RFC3339.string(ms)
                rest = rest.dropFirst(digits.count)
            }
        }
        return output + rest
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
