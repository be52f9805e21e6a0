import JobModel
import Storage

// MARK: - Phases and errors

/// Where one attempt of a job stands, as the state machine sees it (a public mirror of its private state).
public enum TaskPhase: Sendable, Equatable, Hashable, CustomStringConvertible {
    /// Claimed under a lease; nothing written by this attempt yet.
    case claimed
    /// `started` decided; the transfer runs (or is about to).
    case running
    /// A stop was requested; waiting for the transfer to return.
    case stopping(StopReason)
    /// `attempt_failed` decided; the job runs again later.
    case retryScheduled
    /// `succeeded` decided.
    case succeeded
    /// `failed` decided.
    case failed
    /// `paused` decided.
    case paused
    /// `cancelled` decided.
    case cancelled
    /// `released` decided (worker shutdown).
    case released
    /// Nothing more may be written for this attempt.
    case abandoned

    /// Whether the attempt is over (every phase but claimed, running and stopping).
    public var isFinal: Bool {
        switch self {
        case .claimed, .running, .stopping: false
        default: true
        }
    }

    /// `stopping(pause)`-style text.
    public var description: String {
        switch self {
        case .claimed: "claimed"
        case .running: "running"
        case .stopping(let reason): "stopping(\(reason.rawValue))"
        case .retryScheduled: "retryScheduled"
        case .succeeded: "succeeded"
        case .failed: "failed"
        case .paused: "paused"
        case .cancelled: "cancelled"
        case .released: "released"
        case .abandoned: "abandoned"
        }
    }
}

/// An event that cannot happen in the machine's current phase: a bug in the caller, never a runtime
/// condition. `TaskRunner` turns it into a `preconditionFailure`.
public struct TaskTransitionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The phase the machine was in.
    public let phase: TaskPhase
    /// The event that was refused, e.g. `progressReported`.
    public let event: String

    /// Creates the error.
    public init(phase: TaskPhase, event: String) {
        self.phase = phase
        self.event = event
    }

    /// `invalid transition: progressReported in succeeded`.
    public var description: String { "invalid task transition: \(event) in \(phase)" }
}

// MARK: - Actions

/// What to do after `attemptStarted`.
public enum AttemptStartedAction: Sendable, Equatable {
    /// Persist `started`, then start the transfer from `resumingFrom`.
    case persistAndStartTransfer(PendingTaskEvent, resumingFrom: ResumePoint?)
}

/// What to do after a progress report or a checkpoint.
public enum ProgressAction: Sendable, Equatable {
    /// Nothing (coalesced away, or nothing may be written).
    case none
    /// Persist this `progress` event.
    case persist(PendingTaskEvent)
}

/// What to do after a stop was requested.
public enum StopRequestedAction: Sendable, Equatable {
    /// Nothing: a repeat, or the attempt is already over.
    case none
    /// Tell the transfer to stop (`TransferControl.stop`).
    case stopTransfer(StopReason)
    /// The transfer never started: persist the final event (`paused`, `cancelled`, `released`) at once.
    case persist(PendingTaskEvent)
    /// The transfer never started and the lease is lost: write nothing.
    case abandon
}

/// What to do after the transfer returned (finished, stopped or failed).
public enum TransferEndedAction: Sendable, Equatable {
    /// Nothing: the attempt was already abandoned.
    case none
    /// Persist the attempt's final event.
    case persist(PendingTaskEvent)
    /// The lease is lost: write nothing; the attempt is abandoned.
    case abandon
}

/// What to do after the sink refused an event.
public enum PersistRefusedAction: Sendable, Equatable {
    /// Nothing: already abandoned.
    case none
    /// Write nothing more; when `stopTransfer`, tell the transfer to stop (`leaseLost`).
    case abandon(stopTransfer: Bool)
}

// MARK: - The machine

/// The life of one attempt of one job, as a pure value.
///
/// Inputs are past-tense facts; each method returns what to do next. No I/O, no clock (`nowMs` is an
/// argument), no randomness (jitter is an argument), no async. `TaskRunner` owns one, applies each
/// transition before any `await` and then performs the action.
///
/// Impossible transitions (a progress report after the transfer returned, a second start, …) **throw**
/// `TaskTransitionError` rather than trap, so the whole state × event table can be tested in process;
/// `TaskRunner` treats a thrown error as a programming error and traps with it. Harmless repeats (a
/// second stop request, a late report after abandonment) return `.none`.
///
/// Decisions worth knowing:
/// - A transfer that **finishes while a stop is pending** (pause, cancel or shutdown) is recorded as
///   `succeeded`: the bytes are there, and throwing them away to honour a cancel would be surprising and
///   wasteful. Only a lost lease prevents it (nothing may be written).
/// - A transfer that **fails while a stop is pending** is recorded as the stop: the failure is most
///   likely the abort the stop caused, and a user who paused or cancelled expects exactly that.
/// - The **first stop reason wins**, as in `TransferControl`, except that `leaseLost` overrides any other:
///   once the lease is gone nothing may be written.
/// - The transfer's own stop reason decides the final event when it differs from the requested one (for
///   example a cancel removed partial files, so the job must not be recorded as paused).
/// - Every `progress` event carries the latest confirmed resume point, so a projection that reads only
///   the newest progress event is still right. A stop that returns no resume point keeps the last known
///   one (from a checkpoint, or the one the attempt started from).
public struct TaskStateMachine: Sendable {
    /// Tunables of the machine.
    public struct Configuration: Sendable, Equatable, Hashable {
        /// Coalesced `progress` events are written at most once per this many milliseconds.
        public var progressIntervalMs: Int64
        /// Delays between attempts.
        public var retryPolicy: RetryPolicy

        /// Creates a configuration (1 s progress interval, default retry policy).
        public init(progressIntervalMs: Int64 = 1_000, retryPolicy: RetryPolicy = .default) {
            self.progressIntervalMs = progressIntervalMs
            self.retryPolicy = retryPolicy
        }
    }

    private indirect enum State: Sendable, Equatable {
        case claimed
        case running
        case stopping(StopReason)
        case retryScheduled(atMs: Int64, error: StorageError)
        case succeeded(JobResult)
        case failed(StorageError)
        case paused
        case cancelled(StorageError)
        case released
        case abandoned(reason: String)
    }

    /// This attempt's number, 1-based.
    public let attempt: Int
    /// Attempts allowed before `retryLimitExceeded`.
    public let maxAttempts: Int
    /// The tunables this machine was created with.
    public let configuration: Configuration

    private var state: State = .claimed
    /// The latest persisted-or-persisting resume point (initially the projection's).
    public private(set) var resumePoint: ResumePoint?
    /// Bytes done so far, as last reported.
    public private(set) var bytesDone: Int64
    /// The total, once known.
    public private(set) var bytesTotal: Int64?
    /// The bytes of earlier attempts this one kept: its resume point's at the claim, lowered by any
    /// checkpoint holding fewer (a download that dropped them, a session started again). A run's rate
    /// counts only what it moved past them: counting the claim's point made a download that dropped it
    /// report `moved_bytes` and a rate short by bytes it fetched again.
    public private(set) var bytesKeptFromEarlierAttempts: Int64
    private var lastProgressWrittenAtMs: Int64?

    /// Creates a machine for one claimed attempt.
    ///
    /// - Parameters:
    ///   - attempt: the attempt number (1-based) the claim assigned.
    ///   - maxAttempts: attempts before `retryLimitExceeded` (usually `JobSpec.maxAttempts`).
    ///   - resumePoint: where the previous attempt stopped, from the projection.
    ///   - bytesTotal: the total from the projection, if known.
    public init(attempt: Int, maxAttempts: Int, resumePoint: ResumePoint? = nil, bytesTotal: Int64? = nil,
                configuration: Configuration = Configuration()) {
        self.attempt = max(1, attempt)
        self.maxAttempts = max(1, maxAttempts)
        self.configuration = configuration
        self.resumePoint = resumePoint
        self.bytesDone = resumePoint?.bytesDone ?? 0
        self.bytesKeptFromEarlierAttempts = resumePoint?.bytesDone ?? 0
        self.bytesTotal = bytesTotal
    }

    // MARK: Queries

    /// The current phase.
    public var phase: TaskPhase {
        switch state {
        case .claimed: .claimed
        case .running: .running
        case .stopping(let reason): .stopping(reason)
        case .retryScheduled: .retryScheduled
        case .succeeded: .succeeded
        case .failed: .failed
        case .paused: .paused
        case .cancelled: .cancelled
        case .released: .released
        case .abandoned: .abandoned
        }
    }

    /// How the attempt ended; nil while it is still going.
    public var outcome: TaskRunOutcome? {
        switch state {
        case .claimed, .running, .stopping: nil
        case .retryScheduled(let atMs, let error): .retryScheduled(atMs: atMs, error: error)
        case .succeeded(let result): .succeeded(result)
        case .failed(let error): .failed(error)
        case .paused: .paused(resumePoint)
        case .cancelled: .cancelled
        case .released: .released(resumePoint)
        case .abandoned(let reason): .abandoned(reason: reason)
        }
    }

    /// The error the attempt ended with (failed, cancelled, retry scheduled), if any.
    public var error: StorageError? {
        switch state {
        case .retryScheduled(_, let error), .failed(let error), .cancelled(let error): error
        default: nil
        }
    }

    /// What a successful attempt produced.
    public var result: JobResult? {
        if case .succeeded(let result) = state { return result }
        return nil
    }

    // MARK: Events

    /// The worker began the attempt: persist `started`, then start the transfer.
    public mutating func attemptStarted(nowMs: Int64) throws(TaskTransitionError) -> AttemptStartedAction {
        guard case .claimed = state else { throw refused("attemptStarted") }
        state = .running
        // `started` counts as the first progress write: a transfer that ends before its first progress
        // tick writes no `progress` event at all (its outcome carries the counts).
        lastProgressWrittenAtMs = nowMs
        return .persistAndStartTransfer(event(.started(progress(resumePoint)), nowMs), resumingFrom: resumePoint)
    }

    /// The transfer moved bytes. Persisted at most once per `progressIntervalMs` (counted from the
    /// `started` event, so never within the first interval), else `.none`.
    public mutating func progressReported(bytesDone: Int64, bytesTotal: Int64?, nowMs: Int64) throws(TaskTransitionError) -> ProgressAction {
        switch state {
        case .running, .stopping(.pause), .stopping(.cancel), .stopping(.shutdown):
            self.bytesDone = bytesDone
            if let bytesTotal { self.bytesTotal = bytesTotal }
            // A clock stepped back (nowMs before the last write) counts as due: measured from a time in the
            // future, no progress was written until the clock caught up with it (an hour's step, an hour).
            if let last = lastProgressWrittenAtMs, nowMs >= last, nowMs - last < configuration.progressIntervalMs { return .none }
            lastProgressWrittenAtMs = nowMs
            return .persist(event(.progress(progress(resumePoint)), nowMs))
        case .stopping(.leaseLost), .abandoned:
            return .none
        case .claimed, .retryScheduled, .succeeded, .failed, .paused, .cancelled, .released:
            throw refused("progressReported")
        }
    }

    /// The server confirmed (upload) or the disk holds (download) everything up to `resumePoint`:
    /// always persisted, so a later attempt can rely on it.
    public mutating func checkpointReached(_ resumePoint: ResumePoint, bytesTotal: Int64?, nowMs: Int64) throws(TaskTransitionError) -> ProgressAction {
        switch state {
        case .running, .stopping(.pause), .stopping(.cancel), .stopping(.shutdown):
            // A point holding fewer bytes than the one it replaces says they went (a download that had
            // to start again from zero): so did the progress. Otherwise progress may be ahead of a late one.
            let dropped = resumePoint.bytesDone < (self.resumePoint?.bytesDone ?? 0)
            self.resumePoint = resumePoint
            bytesDone = dropped ? resumePoint.bytesDone : max(bytesDone, resumePoint.bytesDone)
            bytesKeptFromEarlierAttempts = min(bytesKeptFromEarlierAttempts, resumePoint.bytesDone)
            if let bytesTotal { self.bytesTotal = bytesTotal }
            lastProgressWrittenAtMs = nowMs
            return .persist(event(.progress(progress(resumePoint)), nowMs))
        case .stopping(.leaseLost), .abandoned:
            return .none
        case .claimed, .retryScheduled, .succeeded, .failed, .paused, .cancelled, .released:
            throw refused("checkpointReached")
        }
    }

    /// Someone asked the attempt to stop (control poll, signal, lost lease). Never refused.
    public mutating func stopRequested(_ reason: StopReason, nowMs: Int64) -> StopRequestedAction {
        switch state {
        case .claimed:
            // The transfer never started: the stop is final at once.
            return finishStopped(reason, nowMs: nowMs, note: "stop requested before the transfer started").stopAction
        case .running:
            state = .stopping(reason)
            return .stopTransfer(reason)
        case .stopping(let current):
            guard reason == .leaseLost, current != .leaseLost else { return .none }
            state = .stopping(.leaseLost)
            return .stopTransfer(.leaseLost)
        case .retryScheduled, .succeeded, .failed, .paused, .cancelled, .released, .abandoned:
            return .none
        }
    }

    /// The transfer completed. Recorded as `succeeded` even when a pause, cancel or shutdown was pending
    /// (the bytes are there); abandoned when the lease is lost.
    public mutating func transferFinished(_ result: JobResult, nowMs: Int64) throws(TaskTransitionError) -> TransferEndedAction {
        switch state {
        case .running, .stopping(.pause), .stopping(.cancel), .stopping(.shutdown):
            if let size = result.size {
                bytesDone = size
                if bytesTotal == nil { bytesTotal = size }
            }
            state = .succeeded(result)
            return .persist(event(.succeeded(progress(), result: result), nowMs))
        case .stopping(.leaseLost):
            state = .abandoned(reason: "the lease was lost before the transfer finished")
            return .abandon
        case .abandoned:
            return .none
        case .claimed, .retryScheduled, .succeeded, .failed, .paused, .cancelled, .released:
            throw refused("transferFinished")
        }
    }

    /// The transfer stopped on request at `resumePoint` (nil keeps the last known one).
    public mutating func transferStopped(_ reason: StopReason, resumePoint: ResumePoint?, nowMs: Int64) throws(TaskTransitionError) -> TransferEndedAction {
        switch state {
        case .running, .stopping:
            if let resumePoint {
                self.resumePoint = resumePoint
                bytesDone = resumePoint.bytesDone
            }
            if case .stopping(.leaseLost) = state {
                return finishStopped(.leaseLost, nowMs: nowMs, note: nil).endAction
            }
            return finishStopped(reason, nowMs: nowMs, note: nil).endAction
        case .abandoned:
            return .none
        case .claimed, .retryScheduled, .succeeded, .failed, .paused, .cancelled, .released:
            throw refused("transferStopped")
        }
    }

    /// The transfer threw. A pending stop wins; otherwise a retryable error schedules a retry while
    /// attempts remain (then `retryLimitExceeded` carrying it), and any other error fails the job.
    ///
    /// - Parameter jitter: a number in `0 ..< 1` for the retry delay's jitter.
    public mutating func transferFailed(_ error: StorageError, nowMs: Int64, jitter: Double) throws(TaskTransitionError) -> TransferEndedAction {
        switch state {
        case .stopping(let requested):
            return finishStopped(requested, nowMs: nowMs, note: "the transfer ended with \(error)").endAction
        case .running:
            guard error.retryable else {
                state = .failed(error)
                return .persist(event(.failed(progress(), error: error, reason: nil), nowMs))
            }
            guard attempt < maxAttempts else {
                let limit = Self.retryLimitExceeded(after: attempt, last: error)
                state = .failed(limit)
                return .persist(event(.failed(progress(), error: limit, reason: nil), nowMs))
            }
            let delay = configuration.retryPolicy.delayMs(attempt: attempt, retryAfter: error.retryAfter, jitter: jitter)
            let retryAtMs = nowMs + delay
            state = .retryScheduled(atMs: retryAtMs, error: error)
            return .persist(event(.attemptFailed(progress(resumePoint), error: error, retryAtMs: retryAtMs), nowMs))
        case .abandoned:
            return .none
        case .claimed, .retryScheduled, .succeeded, .failed, .paused, .cancelled, .released:
            throw refused("transferFailed")
        }
    }

    /// The sink refused an event (stale lease, event log failure): write nothing more. The event that was
    /// refused is not in the log, so even a decided success becomes an abandonment.
    public mutating func persistRefused(_ error: TaskSinkError) -> PersistRefusedAction {
        let transferMayRun: Bool
        switch state {
        case .abandoned:
            return .none
        case .running, .stopping:
            transferMayRun = true
        case .claimed, .retryScheduled, .succeeded, .failed, .paused, .cancelled, .released:
            transferMayRun = false
        }
        state = .abandoned(reason: error.description)
        return .abandon(stopTransfer: transferMayRun)
    }

    // MARK: Helpers

    private enum StopEnd {
        case persist(PendingTaskEvent)
        case abandon

        var stopAction: StopRequestedAction {
            switch self {
            case .persist(let event): .persist(event)
            case .abandon: .abandon
            }
        }

        var endAction: TransferEndedAction {
            switch self {
            case .persist(let event): .persist(event)
            case .abandon: .abandon
            }
        }
    }

    private mutating func finishStopped(_ reason: StopReason, nowMs: Int64, note: String?) -> StopEnd {
        switch reason {
        case .pause:
            state = .paused
            return .persist(event(.paused(progress(resumePoint), reason: note ?? "pause requested"), nowMs))
        case .cancel:
            // Cancel removes partial files: there is nothing to resume from.
            let error = StorageError(.cancelled, "the job was cancelled by request; `jobctl retry` starts it again")
            resumePoint = nil
            state = .cancelled(error)
            return .persist(event(.cancelled(progress(), error: error, reason: note ?? "cancel requested"), nowMs))
        case .shutdown:
            state = .released
            return .persist(event(.released(progress(resumePoint), reason: note ?? "worker shutting down"), nowMs))
        case .leaseLost:
            state = .abandoned(reason: "the lease was lost")
            return .abandon
        }
    }

    /// The attempt's progress as events report it, with `resumePoint` when the event carries one.
    private func progress(_ resumePoint: ResumePoint? = nil) -> TransferProgress {
        TransferProgress(attempt: attempt, bytesDone: bytesDone, bytesTotal: bytesTotal, resumePoint: resumePoint)
    }

    private func event(_ payload: EventPayload, _ nowMs: Int64) -> PendingTaskEvent {
        PendingTaskEvent(payload: payload, atMs: nowMs)
    }

    private func refused(_ event: String) -> TaskTransitionError {
        TaskTransitionError(phase: phase, event: event)
    }

    /// `retryLimitExceeded` that keeps the last failure's HTTP status, URL and text.
    static func retryLimitExceeded(after attempts: Int, last: StorageError) -> StorageError {
        let cause = last.cause.map { "\(last.description); cause: \($0)" } ?? last.description
        return StorageError(.retryLimitExceeded,
                            "gave up after \(attempts) attempt\(attempts == 1 ? "" : "s"); the last failure was: \(last.message). Fix the cause, then `jobctl retry`",
                            httpStatus: last.httpStatus, url: last.url, retryable: false, cause: cause)
    }
}
