import Foundation
import Testing
@testable import JobModel

@Suite("RFC 3339 timestamps") struct RFC3339Tests {
    static func foundation(_ ms: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    /// Leap days, the ends of days, months, years and centuries, and the edges of the computed range.
    @Test(arguments: [
        Int64(0), 1, 999, 1_000, 59_999, 86_399_999, 86_400_000, 951_782_400_000 /* 2000-02-29 */,
        1_709_251_199_999 /* 2024-02-29 23:59:59.999 */, 1_798_761_599_999 /* 2026-12-31 23:59:59.999 */,
        4_102_444_800_123 /* 2100-01-01 */, 253_402_300_799_999 /* 9999-12-31 23:59:59.999 */,
        1_796_045_473_668, 1_798_761_600_000 /* 2027-01-01 */,
    ])
    func computedTextIsFoundations(ms: Int64) {
        var bytes: [UInt8] = [UInt8(ascii: "x")]
        #expect(RFC3339.append(ms, to: &bytes))
        #expect(String(decoding: bytes.dropFirst(), as: UTF8.self) == Self.foundation(ms))
        #expect(RFC3339.string(ms) == Self.foundation(ms))
    }

    /// Every millisecond of one second and about four hundred months, each with another fraction.
    @Test func everyMillisecondOfASecondAndEveryMonth() {
        for offset in Int64(0)..<1_000 {
            let ms = 1_796_045_473_000 + offset
            #expect(RFC3339.string(ms) == Self.foundation(ms))
        }
        for month in Int64(0)..<400 {
            let ms = 1_767_225_600_000 + month * 2_678_400_017
            #expect(RFC3339.string(ms) == Self.foundation(ms))
        }
    }

    /// Before 1970 and after 9999 nothing is appended, and the text comes from Foundation's formatter.
    @Test(arguments: [Int64(-1), -86_400_001, -62_135_596_800_000 /* 0001-01-01 */, -62_167_219_200_001, 253_402_300_800_000])
    func outsideTheComputedRangeIsFoundations(ms: Int64) {
        var bytes: [UInt8] = [UInt8(ascii: "x")]
        #expect(!RFC3339.append(ms, to: &bytes))
        #expect(bytes == [UInt8(ascii: "x")])
        #expect(RFC3339.civil(ms) == nil)
        #expect(RFC3339.string(ms) == Self.foundation(ms))
        if ms == -1 { #expect(RFC3339.string(ms) == "1969-12-31T23:59:59.999Z") }
    }

    /// Valid times read as Foundation reads them (where it reads them right), fractions cut to ms.
    @Test(arguments: [
        ("2027-01-01T00:00:00Z", Int64(1_798_761_600_000)),
        ("2027-01-01t00:00:00z", 1_798_761_600_000),
        ("2027-01-01T09:30:00+09:30", 1_798_761_600_000),
        ("2026-12-31T14:00:00-10:00", 1_798_761_600_000),
        ("2027-01-01T00:00:00.5Z", 1_798_761_600_500),
        ("2027-01-01T00:00:00.123456789123Z", 1_798_761_600_123),
        ("2024-02-29T12:00:00Z", 1_709_208_000_000),
        ("2000-02-29T00:00:00Z", 951_782_400_000),
        ("1970-01-01T00:00:00Z", 0),
        ("1969-12-31T23:59:59.999Z", -1),
        ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
    ])
    func parsesValidTimes(text: String, ms: Int64) {
        #expect(RFC3339.parse(text) == ms)
    }

    /// Fields out of range are refused, not rolled over into another time.
    @Test(arguments: [
        "2027-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2027-04-31T00:00:00Z", "2027-13-01T00:00:00Z", "2027-00-10T00:00:00Z",
        "2027-01-00T00:00:00Z", "2027-01-01T24:00:00Z", "2027-01-01T23:60:00Z", "2027-01-01T23:59:60Z",
        "2027-01-01T00:00:00+99:00", "2027-01-01T00:00:00+24:00", "2027-01-01T00:00:00+05:99", "2027-01-01T00:00:00+0500",
        "2027-01-01T00:00:00", "2027-01-01T00:00:00.Z", "2027-01-01 00:00:00Z", "2027-01-01T00:00:00Z ", "2027-1-01T00:00:00Z",
        "+2027-01-01T00:00:00Z", "2027-01-01T00:00:00ZZ", "2027-01-01", "", "２０２７-01-01T00:00:00Z",
    ])
    func refusesOutOfRangeFields(text: String) {
        #expect(RFC3339.parse(text) == nil, "\(text)")
    }

    /// Every day of four years, as a date and as midnight UTC, matches the calendar `string` writes.
    @Test func datesRoundTripThroughTheWriter() {
        var ms: Int64 = 1_704_067_200_000   // 2024-01-01
        for _ in 0..<(366 + 365 * 3) {
            let written = RFC3339.string(ms)
            #expect(RFC3339.parse(written) == ms, "\(written)")
            #expect(RFC3339.parseDate(String(written.prefix(10))) == ms, "\(written)")
            ms += 86_400_000
        }
        #expect(RFC3339.parseDate("2027-02-30") == nil)
    }

    /// A leap second (23:59:60 UTC on the last day of a month) is read as 23:59:59.999, the last
    /// millisecond of its day; second 60 anywhere else is refused, and said to be a misplaced leap second.
    @Test func leapSecondsAreReadAsTheLastMillisecondOfTheirDay() throws {
        let lastOf2016 = try #require(RFC3339.parse("2016-12-31T23:59:59Z"))
        for text in ["2016-12-31T23:59:60Z", "2016-12-31T23:59:60.5Z", "2016-12-31t23:59:60z", "2017-01-01T00:59:60+01:00",
                     "2016-12-31T18:59:60-05:00"] {
            #expect(RFC3339.parse(text) == lastOf2016 + 999, "\(text)")
        }
        #expect(RFC3339.parse("2015-06-30T23:59:60Z") == RFC3339.parse("2015-06-30T23:59:59.999Z"))
        #expect(RFC3339.parse("2027-02-28T23:59:60Z") == RFC3339.parse("2027-02-28T23:59:59.999Z"))
        for text in ["2027-01-01T23:59:60Z", "2016-12-31T23:59:60+01:00", "2016-06-15T23:59:60Z", "2016-12-31T23:58:60Z",
                     "2016-12-31T22:59:60Z", "2028-02-28T23:59:60Z"] {
            #expect(RFC3339.parse(text) == nil, "\(text)")
            #expect(RFC3339.isMisplacedLeapSecond(text), "\(text)")
        }
        #expect(!RFC3339.isMisplacedLeapSecond("2027-01-01T23:59:61Z") && !RFC3339.isMisplacedLeapSecond("2027-02-30T23:59:60Z"))
        #expect(!RFC3339.isMisplacedLeapSecond("2016-12-31T23:59:60Z"))
    }

    /// The ends of the range: the last minute of 9999 (its next day in year 10000) and of 1969 are the
    /// last minutes of a month, so second 60 there is a leap second — the first the last millisecond
    /// jobctl takes, the other before 1970, which the callers' range check refuses as such. Both were
    /// called misplaced leap seconds.
    @Test func leapSecondsAtTheEndsOfTheRange() throws {
        #expect(RFC3339.parse("9999-12-31T23:59:60Z") == 253_402_300_799_999)
        #expect(RFC3339.parse("9999-12-31T23:59:60Z") == RFC3339.parse("9999-12-31T23:59:59.999Z"))
        for text in ["1969-12-31T23:59:60Z", "1970-01-01T00:59:60+01:00"] {
            #expect(RFC3339.parse(text) == -1, "\(text)")
            #expect(!RFC3339.isMisplacedLeapSecond(text), "\(text)")
        }
        #expect(RFC3339.parse("1969-12-30T23:59:60Z") == nil && RFC3339.isMisplacedLeapSecond("1969-12-30T23:59:60Z"))
        #expect(RFC3339.parse("1969-11-30T23:59:60Z") == RFC3339.parse("1969-11-30T23:59:59.999Z"))
        // Every 23:59 of 1960…2040 is a leap-second minute exactly when the next day is the 1st.
        let calendar = { var c = Calendar(identifier: .gregorian); c.timeZone = TimeZone(identifier: "UTC")!; return c }()
        var day = try #require(calendar.date(from: DateComponents(year: 1960, month: 1, day: 1)))
        let end = try #require(calendar.date(from: DateComponents(year: 2040, month: 1, day: 1)))
        while day < end {
            let minutes = Int64((day.timeIntervalSince1970 / 60).rounded()) + 1_439
            let next = try #require(calendar.date(byAdding: .day, value: 1, to: day))
            #expect(RFC3339.isLeapSecondMinute(minutes) == (calendar.component(.day, from: next) == 1), "\(day)")
            day = next
        }
    }
}
