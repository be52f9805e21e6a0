import Foundation

/// The one rule that ends an exchange whose peer stopped keeping up: over the last stall window
/// (`--stall-timeout`), it moved nothing (stalled) or less than the minimum rate (`--min-rate`) on
/// average (too slow), as curl's `--speed-limit N --speed-time T` and rclone's idle timeout do.
///
/// Time jobctl itself held the exchange back (a rate limit's pause, a hashing back-pressure pause) is
/// left out: the window is of the exchange's running time, so a transfer slowed by its own limits never
/// trips. Pure: the caller passes the time and libcurl's byte counts; no clock, no I/O.
///
/// libcurl's own `CURLOPT_LOW_SPEED_LIMIT`/`TIME` are not used: they count a paused transfer's time as
/// slow (https://curl.se/libcurl/c/CURLOPT_LOW_SPEED_LIMIT.html), and this engine pauses transfers for
/// its rate limits and its hashing.
struct MovementWindow {
    /// What `ticked` found: the rule's verdict over the last window.
    enum Shortfall: Equatable {
        /// No byte moved over the window.
        case stalled
        /// Bytes moved, but at this many bytes per second on average, below the minimum.
        case tooSlow(bytesPerSecond: Int64)
    }

    /// The stall window: how much running time the rule looks back over.
    let window: Duration
    /// A sixteenth of the window: the least running time between two samples (worked out once: a
    /// `Duration` division is a 128-bit one, and libcurl calls the progress callback many times a second).
    private let step: Duration
    /// The least average rate over the window, in bytes per second; 0 checks only that bytes move.
    let minimum: Int64

    /// Running time and byte count, oldest first, at most a sixteenth of the window apart; the first is
    /// the newest one at least a window old once the exchange has run that long. At most ~18 entries.
    private var samples: [(running: Duration, bytes: Int64)]
    /// Running time before `runningSince`.
    private var runningBefore: Duration = .zero
    /// When the exchange last started running again; nil while jobctl holds it back.
    private var runningSince: ContinuousClock.Instant?

    init(window: Duration, minimum: Int64, startedAt start: ContinuousClock.Instant) {
        self.window = window
        step = window / 16
        self.minimum = max(0, minimum)
        samples = [(.zero, 0)]
        runningSince = start
    }

    /// The minimum for an exchange that jobctl's own rate limits (`max_rate:`, `--bwlimit`) hold to
    /// `limit`: at most a quarter of the lowest limit, so a limit below the minimum (or a share of a
    /// shared limit) cannot trip it; `minimum` as it is when no limit holds the exchange.
    static func minimum(_ minimum: Int64, limitedTo limit: Int64?) -> Int64 {
        guard let limit else { return minimum }
        return min(minimum, max(1, limit / 4))
    }

    /// The exchange's running time at `now`: time since its start, less the time it was held back.
    func running(at now: ContinuousClock.Instant) -> Duration {
        runningBefore + (runningSince.map { $0.duration(to: now) } ?? .zero)
    }

    /// jobctl paused the exchange (a harmless repeat while paused).
    mutating func paused(at now: ContinuousClock.Instant) {
        guard let since = runningSince else { return }
        runningBefore += since.duration(to: now)
        runningSince = nil
    }

    /// jobctl let the exchange go again (a harmless repeat while running).
    mutating func resumed(at now: ContinuousClock.Instant) {
        if runningSince == nil { runningSince = now }
    }

    /// libcurl reported `bytes` moved in all (both directions) at `now`: the shortfall, if the window
    /// that just ended moved too little; nil while paused, or before the exchange ran a whole window.
    mutating func ticked(bytes: Int64, at now: ContinuousClock.Instant) -> Shortfall? {
        guard runningSince != nil else { return nil }
        let running = running(at: now)
        // libcurl's counts start again when it resends the request on a fresh connection: measured anew.
        // (`samples` is never empty: made with one, and only ever replaced by one or trimmed to one.)
        guard bytes >= samples[samples.count - 1].bytes else {
            samples = [(running, bytes)]
            return nil
        }
        if running - samples[samples.count - 1].running >= step { samples.append((running, bytes)) }
        while samples.count >= 2, running - samples[1].running >= window { samples.removeFirst() }
        let span = running - samples[0].running
        guard span >= window else { return nil }
        let moved = bytes - samples[0].bytes
        if moved == 0 { return .stalled }
        let milliseconds = max(1, span.components.seconds * 1000 + span.components.attoseconds / 1_000_000_000_000_000)
        let rate = moved.multipliedReportingOverflow(by: 1000)
        let bytesPerSecond = rate.overflow ? Int64.max : rate.partialValue / milliseconds
        return bytesPerSecond < minimum ? .tooSlow(bytesPerSecond: bytesPerSecond) : nil
    }
}
