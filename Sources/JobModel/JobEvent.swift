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
    /// Finished jobs were moved out of the log into an archive file (an event of the log itself).
    case archived
}

/// The JSON shape of an event's payload (`events.data`): every field optional, `v` the schema version.
///
/// Code works with the typed `EventPayload`; this flat shape is what the log holds and what `--json`
/// prints. `EventPayload.wire` and `EventPayload(type:wire:)` convert.
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
    /// archived: what was moved out of the log.
    public var archive: ArchiveRecord?
    /// cancelled: the job (`after:`) whose failure or cancellation cancelled this one.
    public var dependency: String?

    public init(v: Int = 1, spec: JobSpec? = nil, leaseOwner: String? = nil, leaseExpiresAtMs: Int64? = nil,
                attempt: Int? = nil, bytesDone: Int64? = nil, bytesTotal: Int64? = nil, resumePoint: ResumePoint? = nil,
                error: StorageError? = nil, retryAtMs: Int64? = nil, result: JobResult? = nil, reason: String? = nil, archive: ArchiveRecord? = nil,
                dependency: String? = nil) {
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
        self.archive = archive
        self.dependency = dependency
    }
}

/// One row of the append-only event log.
public struct JobEvent: Sendable, Equatable, Hashable {
    /// Global order; nil before the event is stored.
    public var seq: Int64?
    public var jobID: String
    /// Per-job version, 1 for `submitted`, then +1 per event.
    public var version: Int
    public var atMs: Int64
    /// Who appended it: `cli:<user>`, `worker:<host>:<pid>`.
    public var actor: String
    /// The lease token the appending worker held (fencing); nil for CLI events.
    public var leaseToken: Int64?
    /// What happened, with exactly the fields that event carries.
    public var payload: EventPayload

    /// What happened: the payload's type.
    public var type: EventType { payload.type }
    /// The payload in its flat JSON shape (for reading optional fields and for printing).
    public var data: EventData { payload.wire }

    /// Creates an event.
    public init(seq: Int64? = nil, jobID: String, version: Int, atMs: Int64, actor: String, leaseToken: Int64? = nil,
                payload: EventPayload) {
        self.seq = seq
        self.jobID = jobID
        self.version = version
        self.atMs = atMs
        self.actor = actor
        self.leaseToken = leaseToken
        self.payload = payload
    }

    /// Creates an event from a type and a payload in its JSON shape; throws when the shape lacks a field
    /// the type needs.
    public init(seq: Int64? = nil, jobID: String, version: Int, type: EventType, atMs: Int64, actor: String,
                leaseToken: Int64? = nil, data: EventData = EventData()) throws(EventPayloadError) {
        self.init(seq: seq, jobID: jobID, version: version, atMs: atMs, actor: actor, leaseToken: leaseToken,
                  payload: try EventPayload(type: type, wire: data))
    }
}

extension JobEvent: Codable {
    private enum CodingKeys: String, CodingKey {
        case seq, jobID, version, type, atMs, actor, leaseToken, data
    }

    /// Decodes the shape `encode(to:)` writes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let type = try container.decode(EventType.self, forKey: .type)
        let wire = try container.decode(EventData.self, forKey: .data)
        do {
            try self.init(seq: container.decodeIfPresent(Int64.self, forKey: .seq),
                          jobID: container.decode(String.self, forKey: .jobID),
                          version: container.decode(Int.self, forKey: .version), type: type,
                          atMs: container.decode(Int64.self, forKey: .atMs), actor: container.decode(String.self, forKey: .actor),
                          leaseToken: container.decodeIfPresent(Int64.self, forKey: .leaseToken), data: wire)
        } catch let error as EventPayloadError {
            throw DecodingError.dataCorruptedError(forKey: .data, in: container, debugDescription: error.description)
        }
    }

    /// Encodes the row's fields, the payload in its flat JSON shape.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(seq, forKey: .seq)
        try container.encode(jobID, forKey: .jobID)
        try container.encode(version, forKey: .version)
        try container.encode(type, forKey: .type)
        try container.encode(atMs, forKey: .atMs)
        try container.encode(actor, forKey: .actor)
        try container.encodeIfPresent(leaseToken, forKey: .leaseToken)
        try container.encode(data, forKey: .data)
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
