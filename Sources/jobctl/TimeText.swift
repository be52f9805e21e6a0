import Foundation

/// Times and durations as people read them.
enum TimeText {
    /// RFC 3339 with milliseconds, UTC.
    ///
    /// Computed from the civil calendar (days since the epoch → year, month, day) for 1970…9999, the
    /// times jobctl stores: the same text `ISO8601DateFormatter` gives, without building a formatter
    /// per call — which cost ~0.1 ms each and dominated `audit` on a big log. Other times go through
    /// the formatter.
    static func rfc3339(_ ms: Int64) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        guard appendRFC3339(ms, to: &bytes) else { return formatted(ms) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `rfc3339(ms)` as bytes (`audit` writes its rows this way); false, with part of it
    /// appended, for a time outside 1970…9999, which `rfc3339` leaves to Foundation's formatter.
    static func appendRFC3339(_ ms: Int64, to bytes: inout [UInt8]) -> Bool {
        guard let civil = civil(ms) else { return false }
        func digits(_ value: Int64, _ width: Int) {
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(civil.year, 4); bytes.append(UInt8(ascii: "-")); digits(civil.month, 2); bytes.append(UInt8(ascii: "-"))
        digits(civil.day, 2); bytes.append(UInt8(ascii: "T"))
        digits(civil.msInDay / 3_600_000, 2); bytes.append(UInt8(ascii: ":")); digits(civil.msInDay / 60_000 % 60, 2)
        bytes.append(UInt8(ascii: ":")); digits(civil.msInDay / 1_000 % 60, 2); bytes.append(UInt8(ascii: "."))
        digits(civil.msInDay % 1_000, 3); bytes.append(UInt8(ascii: "Z"))
        return true
    }

    /// The UTC calendar date of `ms` and the milliseconds into that day, for times between 1970 and
    /// 9999 (nil for others).
    static func civil(_ ms: Int64) -> (year: Int64, month: Int64, day: Int64, msInDay: Int64)? {
        guard (0...253_402_300_799_999).contains(ms) else { return nil }
        // Howard Hinnant's days-to-civil algorithm (proleptic Gregorian, eras of 400 years).
        let days = ms / 86_400_000, inDay = ms % 86_400_000
        let shifted = days + 719_468
        let era = shifted / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day, inDay)
    }

    /// `rfc3339` through Foundation's formatter (times outside 1970…9999).
    private static func formatted(_ ms: Int64) -> String {
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
                output += rfc3339(ms)
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
