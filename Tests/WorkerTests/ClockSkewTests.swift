import StorePort
import Synchronization
import Testing
@testable import Worker
import TestSupport

/// The clock-skew check as a value: the database clock both ways, the newest event only ahead.
@Suite("clock skew", .onTestThreads) struct ClockSkewTests {
    @Test("what is reported, and what is not", arguments: [
        (StoreClockReading(databaseNowMs: 100_000, newestEventAtMs: nil), ClockSkew(source: .databaseClock, aheadMs: 90_000)),
        (StoreClockReading(databaseNowMs: 4_000, newestEventAtMs: nil), ClockSkew(source: .databaseClock, aheadMs: -6_000)),
        (StoreClockReading(databaseNowMs: 14_000, newestEventAtMs: nil), nil),
        (StoreClockReading(databaseNowMs: 6_000, newestEventAtMs: nil), nil),
        (StoreClockReading(databaseNowMs: nil, newestEventAtMs: 20_000), ClockSkew(source: .newestEvent, aheadMs: 10_000)),
        (StoreClockReading(databaseNowMs: nil, newestEventAtMs: 15_000), nil),
        (StoreClockReading(databaseNowMs: nil, newestEventAtMs: 1), nil),
        (StoreClockReading(databaseNowMs: 10_500, newestEventAtMs: 90_000), ClockSkew(source: .newestEvent, aheadMs: 80_000)),
        (StoreClockReading(databaseNowMs: nil, newestEventAtMs: nil), nil),
    ] as [(StoreClockReading, ClockSkew?)])
    func check(reading: StoreClockReading, expected: ClockSkew?) {
        #expect(ClockSkew.check(reading, nowMs: 10_000) == expected)
    }

    @Test("the warning names the source, the skew and what to do")
    func logLine() {
        let lines = Mutex<[String]>([])
        let log = WorkerLog(minimumLevel: .warning, write: { line in lines.withLock { $0.append(line) } })
        log.clockSkew(ClockSkew(source: .databaseClock, aheadMs: -90_000), now: 1_000)
        let line = lines.withLock { $0.joined() }
        #expect(line.contains("clock_skew") && line.contains("database_clock") && line.contains("-90000") && line.contains("90s behind"),
                "\(line)")
    }
}
