import Foundation

/// Timestamps as RFC 3339 text with milliseconds, in UTC (`2026-11-30T12:00:00.123Z`): exactly what an
/// `ISO8601DateFormatter` with `[.withInternetDateTime, .withFractionalSeconds]` in UTC prints.
///
/// The one writer of times for the CLI and the worker's log. Times in 1970…9999, the ones jobctl stores,
/// are computed from the civil calendar without a formatter: building one per call cost ~0.1 ms, which
/// dominated `audit` on a big log and a third of a worker's CPU draining small jobs (three log lines a
/// job), and a shared one is not thread-safe. Other times go through Foundation's formatter.
public enum RFC3339 {
    /// `ms` (milliseconds since the epoch) as RFC 3339 text.
    public static func string(_ ms: Int64) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        guard append(ms, to: &bytes) else { return formatted(ms) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `string(ms)` as bytes; false, with nothing appended, for a time outside 1970…9999, which
    /// `string` leaves to Foundation's formatter.
    public static func append(_ ms: Int64, to bytes: inout [UInt8]) -> Bool {
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

    /// `string` through Foundation's formatter (times outside 1970…9999).
    private static func formatted(_ ms: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
