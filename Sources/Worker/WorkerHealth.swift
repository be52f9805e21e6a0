import JobModel
import Synchronization

/// What `--metrics`' `/healthz` and `/readyz` answer, for a supervisor's probes (a container
/// orchestrator's liveness and readiness checks, a load balancer, `curl -f`).
///
/// Live: the worker's loop turned within `stalledAfterMs` (it turns at least every few seconds, idle
/// or not; the limit is longer than one store call may wait: SQLite's busy timeout of 30 s, a PostgreSQL
/// answer timeout), or its turn waits on a store held within the limits it sets itself
/// (`WorkerPool.isWaitingOnItsStore`: a turn makes several calls, each queued behind the jobs' own, so
/// it may wait longer than any one call); a loop stuck longer is a worker to restart. Ready: live, not stopping (a first
/// SIGTERM began the shutdown), the store answered the last read in time — a worker whose database
/// does not answer takes no work, though it is alive — and it takes the worker's writes (`StoreWrites`):
/// one that answers reads but refuses every write (a full disk, a database made read-only) left the
/// worker ready while it could claim, start or finish no job.
public final class WorkerHealth: Sendable {
    /// A loop that has not turned for this long is reported stalled, by default.
    public static let stalledAfterMs: Int64 = 60_000

    /// A loop that has not turned for this long is reported stalled.
    public let stalledAfterMs: Int64

    private struct State {
        var turnedAtMs: Int64?
        var stopping = false
    }

    private let state = Mutex(State())
    private let startedAtMs: Int64

    /// - Parameter storeWaitMs: the longest one store call may wait for an answer: the limit is at least
    ///   half a minute longer (and at least `WorkerHealth.stalledAfterMs`).
    public init(storeWaitMs: Int64 = 30_000, nowMs: Int64 = Clock.monotonicMs()) {
        startedAtMs = nowMs
        stalledAfterMs = max(Self.stalledAfterMs, storeWaitMs + 30_000)
    }

    /// One turn of the worker's loop.
    public func loopTurned(nowMs: Int64 = Clock.monotonicMs()) {
        state.withLock { $0.turnedAtMs = nowMs }
    }

    /// The worker began its shutdown.
    public func stopping() {
        state.withLock { $0.stopping = true }
    }

    /// Whether the worker is alive, and a line saying so or why not. `waitingOnStore`: whether the loop
    /// waits on its store within the store's limits (see `WorkerPool.isWaitingOnItsStore`), asked only
    /// once the loop has not turned for `stalledAfterMs`.
    public func live(nowMs: Int64 = Clock.monotonicMs(), waitingOnStore: () -> Bool = { false }) -> (ok: Bool, text: String) {
        Self.live(loop(nowMs: nowMs, waitingOnStore: waitingOnStore))
    }

    private static func live(_ loop: Loop) -> (ok: Bool, text: String) {
        switch loop {
        case .starting: (true, "ok: starting\n")
        case .turning: (true, "ok\n")
        case .waitingOnStore(let seconds): (true, "ok: its loop waits on the database (\(seconds) s), within the limits jobctl sets\n")
        case .stalled(let what, let seconds): (false, "stalled: the worker \(what) for \(seconds) s\n")
        }
    }

    /// What the loop is doing, as the probes say.
    private enum Loop {
        case starting, turning
        case waitingOnStore(seconds: Int64)
        case stalled(what: String, seconds: Int64)
    }

    private func loop(nowMs: Int64, waitingOnStore: () -> Bool) -> Loop {
        let turnedAt = state.withLock { $0.turnedAtMs }
        // Before its first turn the worker is starting (opening the store, the first sweep): as stalled
        // as a loop only after the same time.
        let since = nowMs - (turnedAt ?? startedAtMs)
        guard since > stalledAfterMs else { return turnedAt == nil ? .starting : .turning }
        if waitingOnStore() { return .waitingOnStore(seconds: since / 1000) }
        return .stalled(what: turnedAt == nil ? "has not started its loop" : "has not turned its loop", seconds: since / 1000)
    }

    /// Whether the worker takes work: alive, not stopping, its store answering (`storeUp`) and taking its
    /// writes (`writesRefused` nil; see `StoreWrites.refusal`).
    public func ready(storeUp: Bool, writesRefused: StoreWrites.Refusal? = nil,
                      nowMs: Int64 = Clock.monotonicMs(), waitingOnStore: () -> Bool = { false }) -> (ok: Bool, text: String) {
        let loop = loop(nowMs: nowMs, waitingOnStore: waitingOnStore)
        let live = Self.live(loop)
        guard live.ok else { return live }
        if case .waitingOnStore(let seconds) = loop { return (false, "not ready: its loop waits on the database (\(seconds) s)\n") }
        let (stopping, turned) = state.withLock { ($0.stopping, $0.turnedAtMs != nil) }
        if stopping { return (false, "not ready: stopping (finishing or pausing its transfers)\n") }
        if !turned { return (false, "not ready: starting\n") }
        if !storeUp { return (false, "not ready: the store did not answer in time\n") }
        if let writesRefused { return (false, "not ready: \(writesRefused.text(nowMs: nowMs))\n") }
        return (true, "ready\n")
    }
}
