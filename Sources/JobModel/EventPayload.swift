import Foundation

/// What a worker knows about a transfer when it reports an event: the attempt, the bytes and where the
/// next attempt continues. Absent fields leave the job's last known values in place.
public struct TransferProgress: Sendable, Equatable, Hashable {
    /// The attempt number (1-based) the worker is running.
    public var attempt: Int?
    /// Bytes transferred so far.
    public var bytesDone: Int64?
    /// Total bytes, when known.
    public var bytesTotal: Int64?
    /// Where the next attempt continues.
    public var resumePoint: ResumePoint?

    /// Creates progress; every field is optional.
    public init(attempt: Int? = nil, bytesDone: Int64? = nil, bytesTotal: Int64? = nil, resumePoint: ResumePoint? = nil) {
        self.attempt = attempt
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.resumePoint = resumePoint
    }

    /// No progress at all.
    public static let none = TransferProgress()
}

/// The payload of one event, typed by its event type: each case holds exactly the fields that event
/// carries, so "a `submitted` event without a spec" cannot be built.
///
/// The log stores payloads as JSON in the flat shape of `EventData` (schema version 1); `wire` and
/// `init(type:wire:)` convert, and a payload read from the log re-encodes to the same bytes.
///
/// Every case is `indirect` (boxed): inline, the cases with a spec, a result or an error made a payload
/// ~600 bytes with dozens of references, and even with those boxed the progress cases kept it at 144
/// bytes. A payload is copied many times between a worker's report and its row (a drain copied ~1.3 GB
/// through `memmove` for 10,000 jobs, half of it payloads and what holds them); boxed, a copy is one
/// reference.
public indirect enum EventPayload: Sendable, Equatable, Hashable {
    /// A job entered the log.
    case submitted(spec: JobSpec)
    /// A worker took a lease on the job for attempt `attempt`.
    case claimed(leaseOwner: String, leaseExpiresAtMs: Int64, attempt: Int)
    /// The worker started (or resumed) the transfer.
    case started(TransferProgress)
    /// Bytes moved; a checkpoint.
    case progress(TransferProgress)
    /// Someone asked the running job to pause.
    case pauseRequested(reason: String?)
    /// The job stopped at its resume point (the worker's answer to a pause, or a pause of a queued job).
    case paused(TransferProgress, reason: String?)
    /// Someone asked a paused job to run again (or withdrew a pending pause).
    case resumeRequested(reason: String?)
    /// Someone asked the running job to cancel.
    case cancelRequested(reason: String?)
    /// The job was cancelled; `error` has code `cancelled` (absent only in logs of early releases).
    /// `dependency` names the job (`after:`) whose failure or cancellation cancelled this one; nil for
    /// any other cancel (a user's, a worker's, a settled request) and in logs of earlier releases.
    case cancelled(TransferProgress, error: StorageError?, reason: String?, dependency: String? = nil)
    /// The attempt failed with a retryable error; the job runs again at `retryAtMs`.
    case attemptFailed(TransferProgress, error: StorageError, retryAtMs: Int64)
    /// The lease ran out without a heartbeat (the worker died or stalled); another worker rescued the job.
    /// The progress is the rescue's word on where the next attempt starts: `ResumePoint.unanswered` for a
    /// job whose dead attempt may have done its work unreported (none in logs of earlier releases).
    case leaseExpired(TransferProgress, reason: String?)
    /// The worker gave the job back without failure (shutdown), at its resume point.
    case released(TransferProgress, reason: String?)
    /// The job is done.
    case succeeded(TransferProgress, result: JobResult)
    /// The job failed for good.
    case failed(TransferProgress, error: StorageError, reason: String?)
    /// A failed or cancelled job was opened again.
    case retried(reason: String?)
    /// Finished jobs were moved out of the log (an event of the log-level pseudo job).
    case archived(ArchiveRecord)

    /// The event type this payload belongs to.
    public var type: EventType {
        switch self {
        case .submitted: .submitted
        case .claimed: .claimed
        case .started: .started
        case .progress: .progress
        case .pauseRequested: .pauseRequested
        case .paused: .paused
        case .resumeRequested: .resumeRequested
        case .cancelRequested: .cancelRequested
        case .cancelled: .cancelled
        case .attemptFailed: .attemptFailed
        case .leaseExpired: .leaseExpired
        case .released: .released
        case .succeeded: .succeeded
        case .failed: .failed
        case .retried: .retried
        case .archived: .archived
        }
    }
}

/// Why stored JSON could not become a typed payload.
public struct EventPayloadError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The event type.
    public var type: EventType
    /// What is wrong.
    public var problem: String

    /// Creates an error.
    public init(type: EventType, problem: String) {
        self.type = type
        self.problem = problem
    }

    public var description: String {
        "a '\(type.rawValue)' event \(problem); `jobctl replay --verify` lists the log's problems"
    }
}

// MARK: - The JSON shape

extension EventPayload {
    /// The schema version every payload is written with.
    public static let schemaVersion = 1

    /// Reads the flat JSON shape of an event of type `type`.
    ///
    /// Throws when a field the type needs is missing, or the payload is of a newer schema version.
    public init(type: EventType, wire: EventData) throws(EventPayloadError) {
        guard wire.v == Self.schemaVersion else {
            throw EventPayloadError(type: type, problem: "has payload schema version \(wire.v), which this jobctl does not know; upgrade jobctl")
        }
        let progress = TransferProgress(attempt: wire.attempt, bytesDone: wire.bytesDone, bytesTotal: wire.bytesTotal,
                                        resumePoint: wire.resumePoint)
        func need<T>(_ value: T?, _ field: String) throws(EventPayloadError) -> T {
            guard let value else { throw EventPayloadError(type: type, problem: "has no '\(field)'") }
            return value
        }
        switch type {
        case .submitted:
            self = .submitted(spec: try need(wire.spec, "spec"))
        case .claimed:
            self = .claimed(leaseOwner: try need(wire.leaseOwner, "leaseOwner"),
                            leaseExpiresAtMs: try need(wire.leaseExpiresAtMs, "leaseExpiresAtMs"),
                            attempt: try need(wire.attempt, "attempt"))
        case .started: self = .started(progress)
        case .progress: self = .progress(progress)
        case .pauseRequested: self = .pauseRequested(reason: wire.reason)
        case .paused: self = .paused(progress, reason: wire.reason)
        case .resumeRequested: self = .resumeRequested(reason: wire.reason)
        case .cancelRequested: self = .cancelRequested(reason: wire.reason)
        case .cancelled: self = .cancelled(progress, error: wire.error, reason: wire.reason, dependency: wire.dependency)
        case .attemptFailed:
            self = .attemptFailed(progress, error: try need(wire.error, "error"), retryAtMs: try need(wire.retryAtMs, "retryAtMs"))
        case .leaseExpired: self = .leaseExpired(progress, reason: wire.reason)
        case .released: self = .released(progress, reason: wire.reason)
        case .succeeded: self = .succeeded(progress, result: try need(wire.result, "result"))
        case .failed: self = .failed(progress, error: try need(wire.error, "error"), reason: wire.reason)
        case .retried: self = .retried(reason: wire.reason)
        case .archived: self = .archived(try need(wire.archive, "archive"))
        }
    }

    /// The flat JSON shape the log stores (only this payload's fields are set).
    public var wire: EventData {
        var wire = EventData(v: Self.schemaVersion)
        func put(_ progress: TransferProgress) {
            wire.attempt = progress.attempt
            wire.bytesDone = progress.bytesDone
            wire.bytesTotal = progress.bytesTotal
            wire.resumePoint = progress.resumePoint
        }
        switch self {
        case .submitted(let spec):
            wire.spec = spec
        case .claimed(let owner, let expiresAt, let attempt):
            wire.leaseOwner = owner
            wire.leaseExpiresAtMs = expiresAt
            wire.attempt = attempt
        case .started(let progress), .progress(let progress):
            put(progress)
        case .pauseRequested(let reason), .resumeRequested(let reason), .cancelRequested(let reason), .retried(let reason):
            wire.reason = reason
        case .paused(let progress, let reason), .released(let progress, let reason), .leaseExpired(let progress, let reason):
            put(progress)
            wire.reason = reason
        case .cancelled(let progress, let error, let reason, let dependency):
            put(progress)
            wire.error = error
            wire.reason = reason
            wire.dependency = dependency
        case .attemptFailed(let progress, let error, let retryAtMs):
            put(progress)
            wire.error = error
            wire.retryAtMs = retryAtMs
        case .succeeded(let progress, let result):
            put(progress)
            wire.result = result
        case .failed(let progress, let error, let reason):
            put(progress)
            wire.error = error
            wire.reason = reason
        case .archived(let record):
            wire.archive = record
        }
        return wire
    }
}

// MARK: - Reading fields

extension EventPayload {
    /// The progress a worker reported with this event, if the event carries any.
    public var progress: TransferProgress? {
        switch self {
        case .started(let progress), .progress(let progress), .paused(let progress, _), .cancelled(let progress, _, _, _),
             .attemptFailed(let progress, _, _), .released(let progress, _), .succeeded(let progress, _),
             .failed(let progress, _, _), .leaseExpired(let progress, _):
            progress
        case .submitted, .claimed, .pauseRequested, .resumeRequested, .cancelRequested, .retried, .archived:
            nil
        }
    }

    /// submitted: the job.
    public var spec: JobSpec? { if case .submitted(let spec) = self { spec } else { nil } }
    /// claimed: the lease owner.
    public var leaseOwner: String? { if case .claimed(let owner, _, _) = self { owner } else { nil } }
    /// claimed: when the lease expires unless renewed.
    public var leaseExpiresAtMs: Int64? { if case .claimed(_, let expiry, _) = self { expiry } else { nil } }
    /// The attempt number (1-based) the event belongs to, when it says.
    public var attempt: Int? {
        if case .claimed(_, _, let attempt) = self { return attempt }
        return progress?.attempt
    }
    /// Bytes done, when the event reports them.
    public var bytesDone: Int64? { progress?.bytesDone }
    /// Total bytes, when the event reports them.
    public var bytesTotal: Int64? { progress?.bytesTotal }
    /// Where the next attempt continues, when the event says.
    public var resumePoint: ResumePoint? { progress?.resumePoint }
    /// The error of a `cancelled`, `attempt_failed` or `failed` event.
    public var error: StorageError? {
        switch self {
        case .cancelled(_, let error, _, _): error
        case .attemptFailed(_, let error, _), .failed(_, let error, _): error
        default: nil
        }
    }
    /// attempt_failed: when the job becomes runnable again.
    public var retryAtMs: Int64? { if case .attemptFailed(_, _, let at) = self { at } else { nil } }
    /// succeeded: what the job produced.
    public var result: JobResult? { if case .succeeded(_, let result) = self { result } else { nil } }
    /// Free text from the actor, when the event carries it.
    public var reason: String? {
        switch self {
        case .pauseRequested(let reason), .resumeRequested(let reason), .cancelRequested(let reason),
             .leaseExpired(_, let reason), .retried(let reason), .paused(_, let reason), .released(_, let reason),
             .cancelled(_, _, let reason, _), .failed(_, _, let reason):
            reason
        case .submitted, .claimed, .started, .progress, .attemptFailed, .succeeded, .archived:
            nil
        }
    }
    /// cancelled: the dependency (`after:`) whose failure or cancellation cancelled the job, when it was one.
    public var cancellingDependency: String? { if case .cancelled(_, _, _, let dependency) = self { dependency } else { nil } }
}
