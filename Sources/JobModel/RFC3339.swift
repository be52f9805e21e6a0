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

// MARK: - Reading

extension RFC3339 {
    /// Epoch milliseconds of an RFC 3339 date-time (`2027-01-01T09:30:00Z`, `…T09:30:00.5+02:00`; `T` or
    /// `t`, `Z` or `z`, fractional seconds cut to milliseconds); nil for anything else — and for any
    /// field out of its range: a 13th month, February 30th, hour 24, minute 60, an offset of +99:00,
    /// second 60 anywhere but a leap second (23:59:60 UTC on a month's last day, read as 23:59:59.999).
    ///
    /// Read by hand: Foundation's `ISO8601DateFormatter` rolls such values over (2027-02-29 became March
    /// 1st, +99:00 became +09:00, `.123456789123` seconds the previous day), so a mistyped time was
    /// stored as another one instead of being refused.
    public static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, let date = dateFields(bytes),
              bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
              let hour = number(bytes, 11, 2), bytes[13] == UInt8(ascii: ":"),
              let minute = number(bytes, 14, 2), bytes[16] == UInt8(ascii: ":"),
              let second = number(bytes, 17, 2),
              hour <= 23, minute <= 59, second <= 60 else { return nil }
        var at = 19
        var milliseconds: Int64 = 0
        if bytes[at] == UInt8(ascii: ".") {
            at += 1
            let start = at
            while at < bytes.count, isDigit(bytes[at]) {
                if at - start < 3 { milliseconds = milliseconds * 10 + Int64(bytes[at] - UInt8(ascii: "0")) }
                at += 1
            }
            guard at > start else { return nil }
            for _ in min(3, at - start)..<3 { milliseconds *= 10 }
        }
        guard at < bytes.count else { return nil }
        var offsetMinutes: Int64 = 0
        switch bytes[at] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            at += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard bytes.count == at + 6, let hours = number(bytes, at + 1, 2), bytes[at + 3] == UInt8(ascii: ":"),
                  let minutes = number(bytes, at + 4, 2), hours <= 23, minutes <= 59 else { return nil }
            offsetMinutes = (hours * 60 + minutes) * (bytes[at] == UInt8(ascii: "-") ? -1 : 1)
            at += 6
        default:
            return nil
        }
        guard at == bytes.count else { return nil }
        let days = daysFromCivil(year: date.year, month: date.month, day: date.day)
        let minutes = (days * 24 + hour) * 60 + minute - offsetMinutes
        guard second == 60 else { return minutes * 60_000 + second * 1_000 + milliseconds }
        // A leap second: only 23:59:60 UTC on the last day of a month can be one (RFC 3339 §5.7; all
        // 27 so far ended June or December). Read as 23:59:59.999, the last millisecond of the day: a
        // millisecond clock has no 61st second, and this keeps it after every :59 and before midnight.
        guard isLeapSecondMinute(minutes) else { return nil }
        return minutes * 60_000 + 59_999
    }

    /// Whether the minute `minutes` (since the epoch, UTC) is 23:59 on the last day of a month — any such
    /// minute, not only those of 1970…9999: `9999-12-31T23:59:60Z` is one (its next day is in year 10000)
    /// and so is `1969-12-31T23:59:60Z`, which the caller's range check then refuses as before 1970
    /// (both were called misplaced leap seconds).
    static func isLeapSecondMinute(_ minutes: Int64) -> Bool {
        let (day, minuteOfDay) = minutes.floorDividedAndModulo(1_440)
        return minuteOfDay == 1_439 && dayOfMonth(daysSinceEpoch: day + 1) == 1
    }

    /// The day of the month of a date given as days since 1970-01-01, before 1970 too (Howard Hinnant's
    /// days-to-civil with its flooring eras; `civil` keeps to 1970…9999).
    private static func dayOfMonth(daysSinceEpoch days: Int64) -> Int64 {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        return dayOfYear - (153 * monthIndex + 2) / 5 + 1
    }

    /// Whether `text` would be an RFC 3339 time but for a second of 60 where no leap second can be
    /// (`2027-01-01T23:59:60Z`: not the end of a month; `…T23:59:60+01:00`: 22:59:60 UTC), so a message
    /// can say so rather than "not an RFC 3339 time".
    public static func isMisplacedLeapSecond(_ text: String) -> Bool {
        var bytes = Array(text.utf8)
        guard parse(text) == nil, bytes.count >= 20, bytes[17] == UInt8(ascii: "6"), bytes[18] == UInt8(ascii: "0") else { return false }
        bytes[17] = UInt8(ascii: "5")
        bytes[18] = UInt8(ascii: "9")
        return parse(String(decoding: bytes, as: UTF8.self)) != nil
    }

    /// Epoch milliseconds of a plain date (`2027-01-01`, midnight UTC); nil for anything else or a day
    /// that does not exist.
    public static func parseDate(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 10, let date = dateFields(bytes) else { return nil }
        return daysFromCivil(year: date.year, month: date.month, day: date.day) * 86_400_000
    }

    /// `YYYY-MM-DD` at the start of `bytes`, the day checked against its month (leap years included).
    private static func dateFields(_ bytes: [UInt8]) -> (year: Int64, month: Int64, day: Int64)? {
        guard bytes.count >= 10, let year = number(bytes, 0, 4), bytes[4] == UInt8(ascii: "-"),
              let month = number(bytes, 5, 2), bytes[7] == UInt8(ascii: "-"), let day = number(bytes, 8, 2),
              (1...12).contains(month), day >= 1 else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let lengths: [Int64] = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day <= lengths[Int(month - 1)] else { return nil }
        return (year, month, day)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days-from-civil).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The decimal number in `bytes[at..<at + width]`, all digits; nil otherwise.
    private static func number(_ bytes: [UInt8], _ at: Int, _ width: Int) -> Int64? {
        guard at + width <= bytes.count else { return nil }
        var value: Int64 = 0
        for byte in bytes[at..<(at + width)] {
            guard isDigit(byte) else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        return value
    }

    private static func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
}

private extension Int64 {
    /// The quotient rounded towards minus infinity and the remainder in `0..<divisor` (`divisor` > 0).
    func floorDividedAndModulo(_ divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let remainder = self % divisor
        return remainder < 0 ? (self / divisor - 1, remainder + divisor) : (self / divisor, remainder)
    }
}
