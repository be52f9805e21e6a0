import JobModel
import Storage

// MARK: - Events the runner writes

/// An event the task runner wants appended to the job's log, before the sink has stored it.
///
/// The sink adds what only the worker knows (version, actor, lease token) and writes it, fenced by the
/// lease. `atMs` is the time the state machine was given when it decided to write the event.
public struct PendingTaskEvent: Sendable, Equatable, Hashable, CustomStringConvertible {
    /// What happened (`started`, `progress`, `paused`, `succeeded`, …), with exactly that event's fields.
    public var payload: EventPayload
    /// When the fact became true, in wall-clock milliseconds.
    public var atMs: Int64

    /// The event's type.
    public var type: EventType { payload.type }
    /// The payload in its flat JSON shape (for reading optional fields).
    public var data: EventData { payload.wire }

    /// Creates a pending event.
    public init(payload: EventPayload, atMs: Int64) {
        self.payload = payload
        self.atMs = atMs
    }

    /// `type@atMs`, for failure messages in tests and logs.
    public var description: String { "\(type.rawValue)@\(atMs)" }
}

/// Why the sink refused to store an event.
public enum TaskSinkError: Error, Sendable, Equatable, Hashable, CustomStringConvertible {
    /// The worker's lease token is no longer the job's current one: another worker may own the job.
    /// Nothing more may be written for this attempt.
    case staleLease
    /// The event log could not be written (disk full, database corrupt, …); the text says why.
    case storage(String)

    /// A sentence for logs.
    public var description: String {
        switch self {
        case .staleLease: "the lease is stale: another worker may own the job"
        case .storage(let message): "the event log refused the write: \(message)"
        }
    }
}

/// Where a task runner's events go: the worker's group-committed, lease-fenced event writer.
///
/// `persist` returns once the event is durable (or throws). The runner awaits each event it must write
/// before relying on it, and never calls `persist` concurrently for one job, so events arrive in order.
public protocol TaskEventSink: Sendable {
    /// Stores `event` for `jobID`; throws `.staleLease` when the lease is gone.
    func persist(_ event: PendingTaskEvent, jobID: String) async throws(TaskSinkError)

    /// Stores `events` for `jobID`, in order, together where the sink can (one commit); throws when any
    /// of them is refused. Returns once all of them are durable.
    func persist(_ events: [PendingTaskEvent], jobID: String) async throws(TaskSinkError)

    /// Whether the job's log now ends it failed or cancelled. Asked after an attempt ended without
    /// ending the job (paused, released, retry scheduled): the store honours a cancel the attempt's end
    /// left pending in the same transaction (`cancelled` after the `paused`), and the files the attempt
    /// kept to resume from are then the cancelled job's leftovers. False when it cannot tell.
    func jobEndedForGood(jobID: String) async -> Bool
}

extension TaskEventSink {
    /// Nothing tells this sink: false.
    public func jobEndedForGood(jobID: String) async -> Bool { false }

    /// One after another.
    public func persist(_ events: [PendingTaskEvent], jobID: String) async throws(TaskSinkError) {
        for event in events { try await persist(event, jobID: jobID) }
    }
}

// MARK: - How an attempt ends

/// How one attempt of a job ended, as recorded in the log (or, for `abandoned`, not recorded at all).
public indirect enum TaskRunOutcome: Sendable, Equatable, Hashable {
    /// `succeeded` was written.
    case succeeded(JobResult)
    /// `failed` was written: a non-retryable error, or `retryLimitExceeded` carrying the last one.
    case failed(StorageError)
    /// `attempt_failed` was written; the job is runnable again at `atMs`.
    case retryScheduled(atMs: Int64, error: StorageError)
    /// `paused` was written at this resume point.
    case paused(ResumePoint?)
    /// `cancelled` was written (error code `cancelled`).
    case cancelled
    /// `released` was written (the worker is shutting down) at this resume point.
    case released(ResumePoint?)
    /// Nothing more could be written (lease lost, stale lease, event log failure). The lease will expire
    /// and another worker rescues the job from its last persisted resume point.
    case abandoned(reason: String)
}
