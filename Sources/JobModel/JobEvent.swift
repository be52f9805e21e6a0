import Foundation

/// The types of event in the log. Past-tense facts; raw values are what the `events.type` column holds.
public enum EventType: String, Codable, Sendable, CaseIterable, Hashable {
    case submitted
    case claimed
    case started
    case progress
    case pauseRequested = "pause_requested"
    case paused
    case resumeRequested = "resume_requested"
    case cancelRequested = "cancel_requested"
    case cancelled
    case attemptFailed = "attempt_failed"
    case leaseExpired = "lease_expired"
    /// A worker gave a job back without failure (shutdown), at its resume point.
    case released
    case succeeded
    case failed
    case retried
}

/// The JSON payload of an event (`events.data`). Every field is optional; which are set depends on the
/// type. `v` is the payload's schema version.
public struct EventData: Codable, Sendable, Equatable, Hashable {
    public var v: Int
    /// submitted: the job.
    public var spec: JobSpec?
    /// claimed: the new lease.
    public var leaseOwner: String?
    public var leaseExpiresAtMs: Int64?
    /// claimed/started: the attempt number (1-based).
    public var attempt: Int?
    /// progress and later: bytes done and total.
    public var bytesDone: Int64?
    public var bytesTotal: Int64?
    /// progress/paused/released/lease_expired/attempt_failed: where the next attempt continues.
    public var resumePoint: ResumePoint?
    /// attempt_failed/failed/cancelled: the error.
    public var error: StorageError?
    /// attempt_failed: when the job becomes runnable again.
    public var retryAtMs: Int64?
    /// succeeded: what the job produced.
    public var result: JobResult?
    /// Free text from the actor (e.g. "SIGTERM", a user's reason).
    public var reason: String?

    public init(v: Int = 1, spec: JobSpec? = nil, leaseOwner: String? = nil, leaseExpiresAtMs: Int64? = nil,
                attempt: Int? = nil, bytesDone: Int64? = nil, bytesTotal: Int64? = nil, resumePoint: ResumePoint? = nil,
                error: StorageError? = nil, retryAtMs: Int64? = nil, result: JobResult? = nil, reason: String? = nil) {
        self.v = v
        self.spec = spec
        self.leaseOwner = leaseOwner
        self.leaseExpiresAtMs = leaseExpiresAtMs
        self.attempt = attempt
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.resumePoint = resumePoint
        self.error = error
        self.retryAtMs = retryAtMs
        self.result = result
        self.reason = reason
    }
}

/// One row of the append-only event log.
public struct JobEvent: Codable, Sendable, Equatable, Hashable {
    /// Global order; nil before the event is stored.
    public var seq: Int64?
    public var jobID: String
    /// Per-job version, 1 for `submitted`, then +1 per event.
    public var version: Int
    public var type: EventType
    public var atMs: Int64
    /// Who appended it: `cli:<user>`, `worker:<host>:<pid>`.
    public var actor: String
    /// The lease token the appending worker held (fencing); nil for CLI events.
    public var leaseToken: Int64?
    public var data: EventData

    public init(seq: Int64? = nil, jobID: String, version: Int, type: EventType, atMs: Int64, actor: String,
                leaseToken: Int64? = nil, data: EventData = EventData()) {
        self.seq = seq
        self.jobID = jobID
        self.version = version
        self.type = type
        self.atMs = atMs
        self.actor = actor
        self.leaseToken = leaseToken
        self.data = data
    }
}

/// Firebase task observer statuses, derived from events.
public enum ObserverStatus: String, Codable, Sendable, CaseIterable, Hashable {
    case resume, progress, pause, success, failure

    /// started/resumed → resume · progress → progress · paused → pause · succeeded → success ·
    /// failed/cancelled → failure. Other events are not observable.
    public init?(_ type: EventType) {
        switch type {
        case .started: self = .resume
        case .progress: self = .progress
        case .paused: self = .pause
        case .succeeded: self = .success
        case .failed, .cancelled: self = .failure
        default: return nil
        }
    }
}
