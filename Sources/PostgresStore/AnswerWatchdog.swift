import Foundation
import JobModel
import Synchronization

/// Gives up a connection whose server has gone silent for too long.
///
/// libpq waits for an answer without a limit, and a session can go quiet without breaking: a stalled
/// proxy or load balancer, a server host gone without a reset, a network dropping packets with
/// nothing unacknowledged. A worker waiting there would hang for ever, silent — no heartbeat, no
/// `store_error`, deaf to SIGTERM's release of its leases. While a call waits on the server
/// (`arm`…`disarm`), this watchdog's thread shuts the socket down once the limit passes: libpq's
/// wait ends at once and the connection is bad, so the call fails as a lost connection and the next
/// one opens a new session (the store's usual path after a restart). The descriptor is never closed
/// here (libpq owns it), and it is touched only while armed, under the lock `disarm` takes.
///
/// What the limit is measured on is the call's (`arm(socket:measure:)`):
/// - `silence`: the time no byte has arrived from the server, since the call began or since its last
///   byte. A large answer (`list --json`, `audit` over many jobs) that keeps arriving through a slow
///   link is read however long it takes; a server that says nothing, or stops part way, is given up
///   as before. Arrivals are read off the kernel (`TCP_INFO`'s `tcpi_last_data_recv`, the time since
///   the socket last received data) by this thread, and only once the call has run the limit and again
///   when the silence could first reach it: the calling thread pays nothing, and the thousands of short
///   calls a second a worker makes never cause a system call. On a socket that is not TCP (a Unix
///   socket to a local server) nothing can be read off, and the whole call is measured.
/// - `wholeCall`: the time since the call began, whatever arrives: for calls whose answer is worth
///   nothing once late (see `PostgresConnection.timingAnswersWhole`).
///
/// A `cap` (a stopping worker's) always bounds the whole call: the grace it must fit in is time on the
/// clock, not silence; and its `deadline`, once set, ends any wait still under way when it passes (a
/// call begun after it, at its first look).
final class AnswerWatchdog: Sendable {
    /// What a wait's limit is measured on.
    enum Measure: Sendable {
        /// The time since the last byte from the server (or since the call began, when none came).
        case silence
        /// The time since the call began.
        case wholeCall
    }

    /// Why the last wait given up was given up.
    struct Firing: Sendable, Equatable {
        /// The limit it was held to (`timeoutMs`, or less under `cap`).
        let limitMs: Int64
        /// Whether the limit was on the whole call (`wholeCall`, or a cap); otherwise on silence.
        let wholeCall: Bool
        /// Whether some of the answer had arrived (as far as the kernel can say: false when unknown).
        let answerBegun: Bool
        /// Whether it was the cap's deadline (a stopping worker's grace) that ended the wait.
        var atDeadline = false
    }

    private struct State {
        var socket: Int32 = -1
        var armed = false
        var measure = Measure.silence
        var armedAt: UInt64 = 0
        /// Before this, the wait cannot be over its limit: no need to look at the socket.
        var dueAt: UInt64 = 0
        var fired = false
        var lastFiring: Firing?
        var stopped = false
    }

    /// How long a call may wait for the server (in silence, or in all, as its `Measure` says).
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
                    if state.armed { check(&state) }
                    return false
                }
                if stop { return }
            }
        }
    }

    /// One look at an armed wait (under the lock): shuts the socket down when it is over its limit.
    private func check(_ state: inout State) {
        let now = Self.nowNs()
        let waitedNs = now - state.armedAt
        if let deadline = cap?.deadline?.deadlineNs, now >= deadline {
            fire(&state, Firing(limitMs: Int64(waitedNs / 1_000_000), wholeCall: true,
                                answerBegun: Self.answerBegun(state.socket, waitedNs: waitedNs), atDeadline: true))
            return
        }
        if let capMs = cap?.milliseconds, capMs < timeoutMs, waitedNs >= Self.ns(capMs) {
            fire(&state, Firing(limitMs: max(1, capMs), wholeCall: true, answerBegun: Self.answerBegun(state.socket, waitedNs: waitedNs)))
            return
        }
        guard now >= state.dueAt else { return }
        let limitNs = Self.ns(timeoutMs)
        switch state.measure {
        case .wholeCall:
            fire(&state, Firing(limitMs: timeoutMs, wholeCall: true, answerBegun: Self.answerBegun(state.socket, waitedNs: waitedNs)))
        case .silence:
            let silentNs = min(waitedNs, Self.sinceLastByteNs(state.socket) ?? waitedNs)
            if silentNs >= limitNs {
                fire(&state, Firing(limitMs: timeoutMs, wholeCall: false, answerBegun: Self.answerBegun(state.socket, waitedNs: waitedNs)))
            } else {
                // Bytes came within the limit: not over it before as long again after the last of them.
                state.dueAt = now + (limitNs - silentNs)
            }
        }
    }

    private func fire(_ state: inout State, _ firing: Firing) {
        shutdown(state.socket, Int32(SHUT_RDWR))
        state.armed = false
        state.fired = true
        state.lastFiring = firing
    }

    /// Starts the clock for a call about to wait on `socket`, its limit measured on `measure`. Costs the
    /// caller a lock and a clock reading, as `disarm` does: no system call beyond the clock's (vDSO).
    func arm(socket: Int32, measure: Measure = .silence) {
        guard socket >= 0 else { return }
        state.withLock { state in
            state.socket = socket
            state.fired = false
            state.measure = measure
            state.armedAt = Self.nowNs()
            state.dueAt = state.armedAt + Self.ns(timeoutMs)
            state.armed = true
        }
    }

    /// Stops the clock; true when the limit passed and the socket was shut down.
    func disarm() -> Bool {
        state.withLock { state in
            state.armed = false
            let fired = state.fired
            state.fired = false
            return fired
        }
    }

    /// Why the last wait given up was given up (nil: none was).
    var lastFiring: Firing? { state.withLock { $0.lastFiring } }

    /// Ends the watchdog's thread (within one tick).
    func stop() {
        state.withLock { $0.stopped = true; $0.armed = false }
    }

    /// How long ago `socket` last received data from the server, as its TCP connection counts it; nil
    /// when the kernel cannot say (not a TCP socket).
    ///
    /// See tcp(7), `TCP_INFO`.
    private static func sinceLastByteNs(_ socket: Int32) -> UInt64? {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        guard getsockopt(socket, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return nil }
        return UInt64(info.tcpi_last_data_recv) * 1_000_000
    }

    /// Whether data came on `socket` during a wait of `waitedNs` (false when the kernel cannot say), for
    /// the message. The kernel counts in ticks of up to 10 ms: the end of the answer before, read just
    /// before the wait began, must not pass for a first byte of this one.
    private static func answerBegun(_ socket: Int32, waitedNs: UInt64) -> Bool {
        guard let silentNs = sinceLastByteNs(socket) else { return false }
        return silentNs + 50_000_000 < waitedNs
    }

    private static func ns(_ milliseconds: Int64) -> UInt64 { UInt64(max(0, milliseconds)) * 1_000_000 }

    private static func nowNs() -> UInt64 { StopDeadline.nowNs() }
}

/// A limit on a connection's answer waits shorter than its answer timeout, set from any thread: a
/// stopping worker's writes must fail (and be tried on a new connection) within its grace.
final class AnswerWaitCap: Sendable {
    private let limit = Mutex<Int64?>(nil)
    /// The store's stop deadline (see `StopDeadline`), which ends every wait still under way when it passes.
    let deadline: StopDeadline?

    init(deadline: StopDeadline? = nil) {
        self.deadline = deadline
    }

    /// The limit in milliseconds (nil: none beyond the answer timeout).
    var milliseconds: Int64? {
        get { limit.withLock { $0 } }
        set { limit.withLock { $0 = newValue } }
    }
}

/// When a stopping worker's grace ends, set from any thread (`JobStore.setStopDeadline`): past it no
/// connection to the server is opened again, none is waited for longer than up to it, and no answer is
/// waited for (see `PostgresConnection.reconnect` and `AnswerWatchdog`). A stopping worker's store work
/// then ends with its grace, however silent the server: the worker exits on time.
final class StopDeadline: Sendable {
    private let at = Mutex<UInt64?>(nil)

    /// The deadline on `CLOCK_MONOTONIC`, in nanoseconds (nil: none).
    var deadlineNs: UInt64? {
        get { at.withLock { $0 } }
        set { at.withLock { $0 = newValue } }
    }

    /// How long until the deadline (0 once it has passed), or nil when there is none.
    func remainingNs() -> UInt64? {
        guard let deadline = deadlineNs else { return nil }
        let now = Self.nowNs()
        return deadline > now ? deadline - now : 0
    }

    /// What a connection not attempted past the deadline says.
    static let passedMessage = "not attempted: the stopping worker's grace is over"

    /// `CLOCK_MONOTONIC` in nanoseconds (as `Clock.monotonicMs`, finer).
    static func nowNs() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}
