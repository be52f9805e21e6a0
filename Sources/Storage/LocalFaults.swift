import Synchronization

/// Faults of this process rather than of the job it was running: libcurl that does not load here, a
/// thread the system refuses (`ulimit -u`, an address-space limit). Such a fault was recorded as the
/// job's failure — a libcurl that failed to load failed every HTTP job a worker claimed at its first
/// attempt, a refused thread burnt each job's attempts in seconds — though another worker, or this one
/// once its limits were raised, could run the job. A worker registers a handler that stops it and
/// releases its jobs with their attempts given back (see `WorkerPool.stopForLocalFault`); the handler
/// runs before the error reaches the job, so the job's attempt sees the stop first.
public enum LocalFaults {
    private static let handler = Mutex<(@Sendable (String) -> Void)?>(nil)

    /// Calls `body` with the reason at each fault from now on (nil: none is reported).
    public static func onFault(_ body: (@Sendable (String) -> Void)?) {
        handler.withLock { $0 = body }
    }

    /// Reports a fault of this process, `reason` saying what failed and what to do.
    static func report(_ reason: String) {
        let body = handler.withLock { $0 }
        body?(reason)
    }
}
