import Foundation
import JobModel

/// What `submit` did with one spec.
public struct SubmitOutcome: Sendable, Equatable, Hashable {
    /// The job's id: new, or the existing job's when the key was already known.
    public var id: String
    /// The spec's idempotency key.
    public var key: String?
    /// The spec's kind.
    public var kind: JobKind
    /// False when the key named an existing job (or an earlier spec of the same batch) and nothing was appended.
    public var created: Bool

    /// Creates an outcome.
    public init(id: String, key: String?, kind: JobKind, created: Bool) {
        self.id = id
        self.key = key
        self.kind = kind
        self.created = created
    }
}

// MARK: - Submit

extension EventStore {
    /// Submits jobs in one transaction: one `submitted` event and one projection row per new job.
    ///
    /// A spec whose idempotency key already exists maps to the existing job (`created: false`) and
    /// appends nothing — when it is the same spec. The same key with a different spec is refused
    /// (`keyConflict`, naming the key and the job) and the whole batch stores nothing: silently keeping
    /// the old job would drop the new one's changes. Specs are compared as the store encodes them
    /// (canonical JSON, sorted keys, byte for byte). A key repeated within the batch follows the same
    /// rule against its first spec. When this returns, the jobs are synced to disk.
    public func submit(_ specs: [JobSpec], actor: String, now: Int64) throws(StoreError) -> [SubmitOutcome] {
        guard !specs.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> [SubmitOutcome] in
            var outcomes: [SubmitOutcome] = []
            // Keys given a job in this batch: the job's id and its spec as stored.
            var batchKeys: [String: (id: String, spec: String)] = [:]
            for spec in specs {
                if let key = spec.key {
                    var existing = batchKeys[key]
                    if existing == nil {
                        existing = try connection.first("SELECT id, spec FROM jobs WHERE idempotency_key = ?", [.text(key)]) {
                            (row) throws(StoreError) in
                            // Re-encoded, so a spec an older jobctl wrote compares by content, not by its bytes.
                            let stored = try StoreJSON.decode(JobSpec.self, row.text(1), what: "job \(row.text(0)) spec")
                            return (row.text(0), try StoreJSON.encode(stored))
                        }
                    }
                    if let existing {
                        guard try StoreJSON.encode(spec).utf8.elementsEqual(existing.spec.utf8) else {
                            throw StoreError.keyConflict(key: key, existingID: existing.id)
                        }
                        outcomes.append(SubmitOutcome(id: existing.id, key: key, kind: spec.kind, created: false))
                        continue
                    }
                }
                let id = JobID.generate(atMs: now)
                _ = try connection.appendEvent(
                    PendingEvent(jobID: id, type: .submitted, actor: actor, data: EventData(spec: spec)), now: now)
                if let key = spec.key { batchKeys[key] = (id, try StoreJSON.encode(spec)) }
                outcomes.append(SubmitOutcome(id: id, key: spec.key, kind: spec.kind, created: true))
            }
            return outcomes
        }
    }
}

// MARK: - Control (pause, resume, cancel, retry)

/// What a control command did to one job.
public struct ControlResult: Sendable, Equatable {
    /// The job after the command (after any event the store appended to honour it).
    public var record: JobRecord
    /// True when the command was a harmless repeat — pausing a paused job or one whose pause is
    /// pending, cancelling a cancelled job or one whose cancel is pending — and appended nothing.
    public var isRepeat: Bool

    /// Creates a result.
    public init(record: JobRecord, isRepeat: Bool) {
        self.record = record
        self.isRepeat = isRepeat
    }
}

/// The rules, one command each (every state is listed, so a new state must be decided here):
///
/// | state \ command            | pause            | resume                 | cancel             | retry   |
/// |----------------------------|------------------|------------------------|--------------------|---------|
/// | queued                     | `paused`         | refused                | `cancelled`        | refused |
/// | running                    | `pause_requested`| refused                | `cancel_requested` | refused |
/// | running, pause pending     | repeat           | `resume_requested` (withdraws the pause) | `cancel_requested` | refused |
/// | running, cancel pending    | refused          | refused                | repeat             | refused |
/// | paused                     | repeat           | `resume_requested` → queued | `cancelled`   | refused |
/// | succeeded                  | refused          | refused                | refused            | refused |
/// | failed                     | refused          | refused (use retry)    | refused            | `retried` |
/// | cancelled                  | refused          | refused (use retry)    | repeat             | `retried` |
///
/// A *repeat* asks for what already holds or is already on its way: it succeeds and appends nothing.
/// A *refusal* (`invalidControl`, exit 1 in the CLI) says why. Pause and cancel are idempotent; resume
/// and retry act only on a job they can change. A pending cancel outranks everything but a final outcome.
extension EventStore {
    /// Pauses a job: a queued job is `paused` at once; a running job gets `pause_requested` and its
    /// worker stops at the resume point. A repeat on a paused or pause-requested job. Refused while a
    /// cancel is pending and for final jobs. `id` may be a unique prefix.
    public func requestPause(id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        try control(id: id, actor: actor, now: now) { (job) throws(StoreError) -> PendingEvent? in
            switch job.state {
            case .queued:
                return PendingEvent(jobID: job.id, type: .paused, actor: actor, expectedVersion: job.version)
            case .running:
                if job.cancelRequested {
                    throw StoreError.invalidControl("job \(job.id) is being cancelled (a cancel is pending); nothing to pause")
                }
                return job.pauseRequested ? nil
                    : PendingEvent(jobID: job.id, type: .pauseRequested, actor: actor, expectedVersion: job.version)
            case .paused:
                return nil
            case .succeeded, .failed, .cancelled:
                throw StoreError.invalidControl("job \(job.id) has already \(Self.finalWords(job.state)); nothing to pause")
            }
        }
    }

    /// Resumes a paused job (re-queued at its resume point), or withdraws a running job's pending
    /// pause. Refused for every other job: a queued or running job has nothing to resume, a job being
    /// cancelled cannot be resumed, and a final job needs `retry`.
    public func requestResume(id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        try control(id: id, actor: actor, now: now) { (job) throws(StoreError) -> PendingEvent? in
            switch job.state {
            case .paused:
                return PendingEvent(jobID: job.id, type: .resumeRequested, actor: actor, expectedVersion: job.version)
            case .running:
                if job.cancelRequested {
                    throw StoreError.invalidControl("job \(job.id) is being cancelled (a cancel is pending); nothing to resume")
                }
                guard job.pauseRequested else {
                    throw StoreError.invalidControl("job \(job.id) is running, not paused; nothing to resume")
                }
                return PendingEvent(jobID: job.id, type: .resumeRequested, actor: actor, expectedVersion: job.version)
            case .queued:
                throw StoreError.invalidControl("job \(job.id) is queued, not paused; nothing to resume")
            case .succeeded:
                throw StoreError.invalidControl("job \(job.id) has already succeeded; nothing to resume")
            case .failed, .cancelled:
                throw StoreError.invalidControl(
                    "job \(job.id) has \(Self.finalWords(job.state)); use `jobctl retry \(job.id)` to run it again")
            }
        }
    }

    /// Cancels a job: a queued or paused job is `cancelled` at once (error code `cancelled`); a running
    /// job gets `cancel_requested` and its worker aborts — and if the worker stops it some other way
    /// first (a pause, a shutdown, a retry, a crash), the store cancels it then. A repeat on a cancelled
    /// or cancel-requested job. Refused for succeeded and failed jobs.
    public func requestCancel(id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        try control(id: id, actor: actor, now: now) { (job) throws(StoreError) -> PendingEvent? in
            switch job.state {
            case .queued, .paused:
                let error = StorageError(.cancelled, "cancelled by \(actor) while \(job.state.rawValue)")
                return PendingEvent(jobID: job.id, type: .cancelled, actor: actor, expectedVersion: job.version,
                                    data: EventData(error: error))
            case .running:
                return job.cancelRequested ? nil
                    : PendingEvent(jobID: job.id, type: .cancelRequested, actor: actor, expectedVersion: job.version)
            case .cancelled:
                return nil
            case .succeeded, .failed:
                throw StoreError.invalidControl("job \(job.id) has already \(Self.finalWords(job.state)); nothing to cancel")
            }
        }
    }

    /// Re-opens a failed or cancelled job as a new series of attempts (`retried` → queued, attempts
    /// reset, error cleared). Refused for every other state.
    public func retry(id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        try control(id: id, actor: actor, now: now) { (job) throws(StoreError) -> PendingEvent? in
            switch job.state {
            case .failed, .cancelled:
                return PendingEvent(jobID: job.id, type: .retried, actor: actor, expectedVersion: job.version)
            case .succeeded:
                throw StoreError.invalidControl("job \(job.id) has already succeeded; only failed or cancelled jobs can be retried")
            case .queued, .running, .paused:
                throw StoreError.invalidControl(
                    "job \(job.id) is \(job.state.rawValue), not failed or cancelled; only those can be retried")
            }
        }
    }

    /// Resolves an id or a unique id prefix (at least 6 characters, any case) to the full job id.
    public func resolveID(_ text: String) throws(StoreError) -> String {
        try withConnection { (connection) throws(StoreError) -> String in try connection.resolveID(text) }
    }

    /// Reads the job, decides, appends (or not: a repeat), all in one IMMEDIATE transaction.
    private func control(id: String, actor: String, now: Int64,
                         decide: (JobRecord) throws(StoreError) -> PendingEvent?) throws(StoreError) -> ControlResult {
        try writeTransaction { (connection) throws(StoreError) -> ControlResult in
            let resolved = try connection.resolveID(id)
            guard let job = try connection.loadJob(resolved) else { throw StoreError.notFound(id) }
            guard let pending = try decide(job) else { return ControlResult(record: job, isRepeat: true) }
            return ControlResult(record: try connection.appendEvent(pending, to: job, now: now).1, isRepeat: false)
        }
    }

    private static func finalWords(_ state: JobState) -> String {
        switch state {
        case .succeeded: "succeeded"
        case .failed: "failed"
        case .cancelled: "been cancelled"
        case .queued, .running, .paused: state.rawValue
        }
    }
}

extension SQLiteConnection {
    /// The full id for an id or unique prefix (≥ 6 characters, case-insensitive).
    func resolveID(_ text: String) throws(StoreError) -> String {
        let prefix = text.trimmingCharacters(in: .whitespaces).uppercased()
        let alphabet = Set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
        guard !prefix.isEmpty, prefix.allSatisfy({ alphabet.contains($0) }) else { throw StoreError.notFound(text) }
        if prefix.count == 26 {
            guard try first("SELECT 1 FROM jobs WHERE id = ?", [.text(prefix)], { _ in true }) != nil else {
                throw StoreError.notFound(text)
            }
            return prefix
        }
        guard prefix.count >= 6 else {
            throw StoreError.invalidControl("job id prefix '\(text)' is too short: give at least 6 characters of the id")
        }
        // The prefix holds only id characters, so GLOB needs no escaping and can use the primary key.
        let matches = try query("SELECT id FROM jobs WHERE id GLOB ? ORDER BY id LIMIT 20", [.text(prefix + "*")]) { row in
            row.text(0)
        }
        switch matches.count {
        case 0: throw StoreError.notFound(text)
        case 1: return matches[0]
        default: throw StoreError.ambiguous(prefix: text, matches: matches)
        }
    }
}
