import Foundation
@testable import Storage
import Testing
import TestSupport

/// `LocalFiles.timestamp` writes times in 1970…9999 without the C calendar; the text must be the
/// calendar's, to the millisecond.
@Suite(.onTestThreads)
struct LocalTimestampCalendarTests {
    @Test(arguments: [
        Int64(0), 1, 999, 1_000, 59_999, 86_399_999, 951_782_400_000, 951_868_799_999, 1_796_045_473_668,
        4_107_542_400_000, 4_102_444_799_999, 253_402_300_799_999, 1_234_567_890_123,
    ])
    func matchesTheCalendar(ms: Int64) {
        let date = Date(timeIntervalSince1970: Double(ms) / 1_000)
        #expect(LocalFiles.timestamp(date) == LocalFiles.calendarTimestamp(ms))
        #expect(LocalFiles.timestamp(date).utf8.count == 24)
    }

    @Test func timesOutsideTheFastRangeStillFormat() {
        #expect(LocalFiles.timestamp(Date(timeIntervalSince1970: -1)) == "1969-12-31T23:59:59.000Z")
    }
}
