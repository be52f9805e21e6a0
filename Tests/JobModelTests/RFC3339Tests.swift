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
}
