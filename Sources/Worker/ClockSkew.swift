import Foundation
import StorePort

/// The worker's clock against the database's, as a pure check: leases, retry times and every event's
/// time come from the clocks of the processes that write them, so a worker whose clock is off expires
/// other workers' leases early (or its own late) and dates its events wrongly.
public struct ClockSkew: Sendable, Equatable {
    /// What the worker's clock was compared with.
    public enum Source: String, Sendable {
        /// The database server's own clock (PostgreSQL).
        case databaseClock = "database_clock"
        /// The newest event in the log, written by some process's clock.
        case newestEvent = "newest_event"
    }

    public var source: Source
    /// How far the other clock is ahead of this worker's (negative: behind), in ms.
    public var aheadMs: Int64

    /// Skew beyond this is reported: a few seconds is normal drift and round trips; leases last 30 s.
    public static let toleranceMs: Int64 = 5_000

    /// The skew to warn about, or nil. `nowMs` is the worker's clock when the reading was taken
    /// (for the database clock, the middle of the round trip). The database clock is compared both
    /// ways; the newest event only when it lies in the future (an old newest event is just an idle log).
    public static func check(_ reading: StoreClockReading, nowMs: Int64, toleranceMs: Int64 = toleranceMs) -> ClockSkew? {
        if let database = reading.databaseNowMs, abs(database - nowMs) > toleranceMs {
            return ClockSkew(source: .databaseClock, aheadMs: database - nowMs)
        }
        if let newest = reading.newestEventAtMs, newest - nowMs > toleranceMs {
            return ClockSkew(source: .newestEvent, aheadMs: newest - nowMs)
        }
        return nil
    }
}
