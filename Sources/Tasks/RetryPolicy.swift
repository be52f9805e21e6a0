import Foundation

/// How long a job waits before its next attempt after a retryable failure.
///
/// The delay after attempt *n* (1-based) has the ceiling `min(baseDelay × multiplierⁿ⁻¹, maxDelay)`,
/// is spread by `jitter`, and is never shorter than the server's `Retry-After` (itself capped at
/// `maxRetryAfter`, so a hostile or broken header cannot park a job for days).
///
/// Why these defaults:
/// - **1 s base, ×2, 60 s cap** is Google's own guidance for Cloud Storage (start at 1 s, double,
///   cap between 32 and 64 s): the first retry is quick enough for a blip, and by the fifth attempt a job
///   backs off for a substantial part of a minute, which is how long regional incidents usually take to
///   show their shape.
/// - **Equal jitter** (half the ceiling fixed, half random) rather than full jitter: full jitter spreads
///   load best but may retry almost at once, and every retry here costs a claim transaction and several
///   log events. Equal jitter still de-synchronises a herd of jobs that failed together while
///   guaranteeing at least half the backoff.
/// - **Retry-After capped at 1 h**: the server knows best, but a job parked longer than that should be
///   visible as a failure to an operator rather than silently waiting.
public struct RetryPolicy: Sendable, Equatable, Hashable {
    /// How the random part of a delay is drawn.
    public enum Jitter: String, Sendable, Equatable, Hashable, CaseIterable {
        /// Exactly the ceiling (deterministic; for tests and tools).
        case none
        /// Uniform in `0 ..< ceiling` (AWS "full jitter").
        case full
        /// `ceiling/2` plus uniform in `0 ..< ceiling/2` (AWS "equal jitter").
        case equal
    }

    /// The ceiling of the first delay, in milliseconds.
    public var baseDelayMs: Int64
    /// How much the ceiling grows per attempt.
    public var multiplier: Double
    /// The largest ceiling, in milliseconds.
    public var maxDelayMs: Int64
    /// The longest `Retry-After` honoured, in milliseconds.
    public var maxRetryAfterMs: Int64
    /// How the delay is randomised below its ceiling.
    public var jitter: Jitter

    /// Creates a policy; the defaults are explained on the type.
    public init(baseDelayMs: Int64 = 1_000, multiplier: Double = 2, maxDelayMs: Int64 = 60_000,
                maxRetryAfterMs: Int64 = 3_600_000, jitter: Jitter = .equal) {
        self.baseDelayMs = max(0, baseDelayMs)
        self.multiplier = max(1, multiplier)
        self.maxDelayMs = max(0, maxDelayMs)
        self.maxRetryAfterMs = max(0, maxRetryAfterMs)
        self.jitter = jitter
    }

    /// 1 s, ×2, 60 s cap, equal jitter, Retry-After up to 1 h.
    public static let `default` = RetryPolicy()

    /// The delay ceiling after `attempt` (1-based) failed, before jitter, in milliseconds.
    public func ceilingMs(attempt: Int) -> Int64 {
        let exponent = Double(max(1, attempt) - 1)
        let raw = Double(baseDelayMs) * pow(multiplier, exponent)
        // `raw` may be +infinity for large attempts; `min` keeps it finite.
        return Int64(min(raw, Double(maxDelayMs)))
    }

    /// The longest wait honoured, in ms, when the server's `Retry-After` (seconds) asked for longer than
    /// `maxRetryAfterMs`; nil when it asked for no more (or sent none). The worker's log and `show` say
    /// so: the job retries sooner than the server asked.
    public func cappedRetryAfterMs(_ retryAfter: Double?) -> Int64? {
        guard let retryAfter, retryAfter.isFinite, retryAfter * 1000 > Double(maxRetryAfterMs) else { return nil }
        return maxRetryAfterMs
    }

    /// The delay after `attempt` (1-based) failed, in milliseconds.
    ///
    /// - Parameters:
    ///   - attempt: the attempt that just failed.
    ///   - retryAfter: the server's `Retry-After`, in seconds, if it sent one.
    ///   - random: a number in `0 ..< 1` (clamped) that draws the jitter; the caller owns randomness so
    ///     the policy stays a pure function.
    public func delayMs(attempt: Int, retryAfter: Double?, jitter random: Double) -> Int64 {
        let ceiling = ceilingMs(attempt: attempt)
        let unit = random.isFinite ? min(max(random, 0), 1.0.nextDown) : 0
        let jittered: Int64
        switch jitter {
        case .none:
            jittered = ceiling
        case .full:
            jittered = Int64((Double(ceiling) * unit).rounded(.down))
        case .equal:
            let fixed = ceiling / 2
            jittered = fixed + Int64((Double(ceiling - fixed) * unit).rounded(.down))
        }
        guard let retryAfter, retryAfter.isFinite, retryAfter > 0 else { return jittered }
        let serverMs = Int64(min((retryAfter * 1000).rounded(.up), Double(maxRetryAfterMs)))
        return max(jittered, serverMs)
    }
}
