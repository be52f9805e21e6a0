import Tasks

/// Since when a worker's store has been failing with no job's outcome written: what a drain gives up on
/// (`WorkerPool.drainGivesUp`).
///
/// Fed by the loop's own store calls and by the runs' writes alike: a job's outcome can be refused for
/// ever while the loop's small writes (heartbeats, claims) go through — an outcome too large for the
/// file size limit left in the `-wal`, a disk with room for a lease renewal and not for a result — and
/// a streak fed by the loop alone never began, so the drain went round for ever. Outcomes, not any
/// write, end it, for the same reason.
struct StoreFailureStreak: Sendable {
    /// When the streak's first failed call began (nil: no streak).
    private(set) var since: Int64?
    /// When the latest failed call ended.
    private var lastEnded: Int64?
    /// The failures in the streak (the loop's and the runs'), for the log.
    private(set) var count = 0

    /// A store call that began at `start` failed at `end`; returns how long the streak has lasted (from
    /// its first failure's start to this one's end). A failure that begins more than `gapMs` after the
    /// latest one ended starts a streak of its own: measured from the end of the last failed call, not
    /// from its start, a call that fails only after waiting (a silent server's connect timeout, 10 s) put
    /// its own wait in the gap, every failure then looked like a streak of its own, and a drain whose
    /// server had gone silent went round for ever.
    mutating func failed(from start: Int64, to end: Int64, gapMs: Int64) -> Int64 {
        if let last = lastEnded, start - last > gapMs {
            since = nil
            count = 0
        }
        let first = min(since ?? start, start)
        since = first
        lastEnded = max(lastEnded ?? end, end)
        count += 1
        return end - first
    }

    /// A job's outcome was written: the store takes what matters, whatever failed before.
    mutating func outcomeWritten() {
        since = nil
        count = 0
    }
}

extension TaskRunOutcome {
    /// Whether the run's end is in the log: every outcome but an abandoned run's.
    var wasWritten: Bool {
        if case .abandoned = self { return false }
        return true
    }
}
