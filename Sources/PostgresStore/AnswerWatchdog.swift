import Foundation
import JobModel
import Synchronization

/// Gives up a connection whose server has not answered for too long.
///
/// libpq waits for an answer without a limit, and a session can go quiet without breaking: a stalled
/// proxy or load balancer, a server host gone without a reset, a network dropping packets with
/// nothing unacknowledged. A worker waiting there would hang for ever, silent — no heartbeat, no
/// `store_error`, deaf to SIGTERM's release of its leases. While a call waits on the server
/// (`arm`…`disarm`), this watchdog's thread shuts the socket down once the deadline passes: libpq's
/// wait ends at once and the connection is bad, so the call fails as a lost connection and the next
/// one opens a new session (the store's usual path after a restart). The descriptor is never closed
/// here (libpq owns it), and it is touched only while armed, under the lock `disarm` takes.
final class AnswerWatchdog: Sendable {
    private struct State {
        var socket: Int32 = -1
        var armedAt: UInt64 = 0
        var deadline: UInt64?
        var fired = false
        /// The limit the last wait given up was held to (`timeoutMs`, or less under `cap`).
        var firedLimitMs: Int64 = 0
        var stopped = false
    }

    /// How long a call may wait for the server.
    let timeoutMs: Int64
    /// A shorter limit set from another thread (a stopping worker's), which also shortens a wait under way.
    private let cap: AnswerWaitCap?
    private let state = Mutex(State())

    init(timeoutMs: Int64, cap: AnswerWaitCap? = nil) throws(ThreadStartFailure) {
        self.timeoutMs = max(1, timeoutMs)
        self.cap = cap
        let tick = UInt32(min(250, max(10, self.timeoutMs / 4)) * 1_000)
        // The thread holds the watchdog until `stop()`, which the connection calls when it goes.
        try StartedThread.start(name: "jobctl-pg-watch") { [self] in
            while true {
                usleep(tick)
                let stop = state.withLock { state -> Bool in
                    if state.stopped { return true }
                    guard let deadline = state.deadline else { return false }
                    let limitMs = min(timeoutMs, cap?.milliseconds ?? timeoutMs)
                    if Self.nowNs() >= min(deadline, state.armedAt + UInt64(max(1, limitMs)) * 1_000_000) {
                        shutdown(state.socket, Int32(SHUT_RDWR))
                        state.deadline = nil
                        state.fired = true
                        state.firedLimitMs = limitMs
                    }
                    return false
                }
                if stop { return }
            }
        }
    }

    /// Starts the clock for a call about to wait on `socket`.
    func arm(socket: Int32) {
        guard socket >= 0 else { return }
        state.withLock { state in
            state.socket = socket
            state.fired = false
            state.armedAt = Self.nowNs()
            state.deadline = state.armedAt + UInt64(timeoutMs) * 1_000_000
        }
    }

    /// Stops the clock; true when the deadline passed and the socket was shut down.
    func disarm() -> Bool {
        state.withLock { state in
            state.deadline = nil
            let fired = state.fired
            state.fired = false
            return fired
        }
    }

    /// The limit the last wait given up was held to: `timeoutMs`, or the cap's when that was shorter.
    var firedLimitMs: Int64 { state.withLock { $0.firedLimitMs } }

    /// Ends the watchdog's thread (within one tick).
    func stop() {
        state.withLock { $0.stopped = true; $0.deadline = nil }
    }

    private static func nowNs() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}

/// A limit on a connection's answer waits shorter than its answer timeout, set from any thread: a
/// stopping worker's writes must fail (and be tried on a new connection) within its grace.
final class AnswerWaitCap: Sendable {
    private let limit = Mutex<Int64?>(nil)

    /// The limit in milliseconds (nil: none beyond the answer timeout).
    var milliseconds: Int64? {
        get { limit.withLock { $0 } }
        set { limit.withLock { $0 = newValue } }
    }
}
