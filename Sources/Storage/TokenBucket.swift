import Foundation
import Synchronization

/// A token bucket: `rate` bytes per second, at most `capacity` saved up. Pure: the caller passes the time.
///
/// A transfer takes a whole chunk while the bucket is not in debt (tokens may go below zero), and waits
/// while it is. Over a transfer the average rate is therefore `rate`, off by at most `capacity` plus one
/// chunk — which is why limited exchanges use small curl buffers (see `chunkSize(for:)`).
struct TokenBucket: Sendable {
    let rate: Int64
    let capacity: Double
    private var tokens: Double
    private var last: ContinuousClock.Instant?

    /// A bucket of `rate` bytes per second that starts empty (no burst at the start, so the average from
    /// the start never exceeds `rate` by more than one chunk) and saves up at most half a second's worth
    /// (time lost while the thread was not scheduled is partly made up).
    init(rate: Int64) {
        self.rate = max(1, rate)
        capacity = Double(self.rate) / 2
        tokens = 0
    }

    private mutating func refill(at now: ContinuousClock.Instant) {
        if let last {
            let elapsed = last.duration(to: now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            tokens = min(capacity, tokens + seconds * Double(rate))
        }
        last = now
    }

    /// Whether a chunk may move now (the bucket is not in debt).
    mutating func isReady(at now: ContinuousClock.Instant) -> Bool {
        refill(at: now)
        return tokens >= 0
    }

    /// Records `bytes` moved.
    mutating func take(_ bytes: Int, at now: ContinuousClock.Instant) {
        refill(at: now)
        tokens -= Double(bytes)
    }

    /// Milliseconds until the bucket is out of debt (0 when it is).
    mutating func millisecondsUntilReady(at now: ContinuousClock.Instant) -> Int {
        refill(at: now)
        guard tokens < 0 else { return 0 }
        return max(1, Int((-tokens / Double(rate) * 1000).rounded(.up)))
    }

    /// The curl buffer size for a transfer limited to `rate`: a sixteenth of a second's worth, 16 KiB to 256 KiB.
    static func chunkSize(for rate: Int64) -> Int {
        Int(min(256 * 1024, max(16 * 1024, rate / 16)))
    }

    /// A `file://` copy's step under `rate`: a sixteenth of a second's worth, at most 256 KiB. Unlike a
    /// curl buffer it has no 16 KiB floor (64 bytes at the lowest rate, 1 KiB/s): a copy moves each step
    /// before it waits for it, so the floor was a burst of up to 16 s at `max_rate: 1k` for every attempt.
    static func copyStep(for rate: Int64) -> Int {
        Int(min(256 * 1024, max(1, rate / 16)))
    }
}

/// A token bucket several transfers draw from (the worker's `--bwlimit`), safe to share across threads.
public final class SharedBandwidth: Sendable {
    private let bucket: Mutex<TokenBucket>
    /// Bytes per second.
    public let rate: Int64

    public init(rate: Int64) {
        self.rate = rate
        bucket = Mutex(TokenBucket(rate: rate))
    }

    func isReady(at now: ContinuousClock.Instant) -> Bool { bucket.withLock { $0.isReady(at: now) } }
    func take(_ bytes: Int, at now: ContinuousClock.Instant) { bucket.withLock { $0.take(bytes, at: now) } }
    func millisecondsUntilReady(at now: ContinuousClock.Instant) -> Int { bucket.withLock { $0.millisecondsUntilReady(at: now) } }
}
