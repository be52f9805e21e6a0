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
        guard let civil = civil(ms) else { return formatted(ms) }
        // Written in place: the worker logs three lines a job, so no array or copy per timestamp.
        return String(unsafeUninitializedCapacity: 24) { buffer in
            write(civil) { at, byte in buffer[at] = byte }
            return 24
        }
    }

    /// Appends `string(ms)` as bytes; false, with nothing appended, for a time outside 1970…9999, which
    /// `string` leaves to Foundation's formatter.
    public static func append(_ ms: Int64, to bytes: inout [UInt8]) -> Bool {
        guard let civil = civil(ms) else { return false }
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: 24))
        // Written through one buffer: a subscript of the array per byte checked its bounds and its
        // uniqueness each time (~1,400 instructions a time, and every log line has one).
        bytes.withUnsafeMutableBufferPointer { buffer in
            let out = UnsafeMutableBufferPointer(rebasing: buffer[start...])
            write(civil) { at, byte in out[at] = byte }
        }
        return true
    }

    /// The 24 bytes of a time in 1970…9999, each handed to `put` with its offset.
    private static func write(_ civil: (year: Int64, month: Int64, day: Int64, msInDay: Int64), _ put: (Int, UInt8) -> Void) {
        var at = 0
        func digits(_ value: Int64, _ width: Int) {
            var rest = value
            for place in stride(from: width - 1, through: 0, by: -1) {
                put(at + place, UInt8(ascii: "0") + UInt8(rest % 10))
                rest /= 10
            }
            at += width
        }
        func separator(_ character: Unicode.Scalar) {
            put(at, UInt8(ascii: character))
            at += 1
        }
        digits(civil.year, 4); separator("-"); digits(civil.month, 2); separator("-"); digits(civil.day, 2); separator("T")
        digits(civil.msInDay / 3_600_000, 2); separator(":"); digits(civil.msInDay / 60_000 % 60, 2); separator(":")
        digits(civil.msInDay / 1_000 % 60, 2); separator("."); digits(civil.msInDay % 1_000, 3); separator("Z")
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
