import Foundation
import JobModel

/// A worker's heartbeats, one at a time, whoever asks for one: the pool's loop before its rescue, and
/// the pool's lease keeper while the loop waits on the store (`WorkerPool.keepLeases`).
///
/// A heartbeat is due `every` ms after the last one began, or at once when the clock stepped back past
/// it (`WorkerPool.isDue`). A caller that finds one in flight waits for it and then looks again, so a
/// caller that returns has seen a heartbeat begun no longer than `every` before it returned (the loop
/// relies on it: its rescue never expires a live lease of its own after a step of the clock).
///
/// The time a heartbeat renews from is read when it begins, after any wait: a time read before (the
/// loop's turn began, then waited seconds on a slow commit) renewed the leases to a moment already
/// past, and another worker rescued them at once.
actor HeartbeatTurns {
    private let clock: @Sendable () -> Int64
    private var lastStartedMs: Int64
    private var inFlight: Task<Void, Error>?

    /// Turns on `clock` (the wall clock's milliseconds); the first heartbeat is due `every` after now.
    init(clock: @escaping @Sendable () -> Int64 = { Clock.nowMs() }) {
        self.clock = clock
        lastStartedMs = clock()
    }

    /// Runs `beat` at the clock's time when a heartbeat is due, after any in flight has ended. Throws
    /// what `beat` threw when this call ran it.
    func beatIfDue(every: Int64, _ beat: @escaping @Sendable (_ now: Int64) async throws -> Void) async throws {
        while let running = inFlight {
            _ = try? await running.value
            if inFlight == running { inFlight = nil }
        }
        let now = clock()
        guard WorkerPool.isDue(since: lastStartedMs, every: every, now: now) else { return }
        lastStartedMs = now
        let started = Task { try await beat(now) }
        inFlight = started
        defer { if inFlight == started { inFlight = nil } }
        try await started.value
    }
}
