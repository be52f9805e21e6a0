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
    /// appends nothing; a key repeated within the batch maps to its first spec. When this returns,
    /// the jobs are synced to disk.
    public func submit(_ specs: [JobSpec], actor: String, now: Int64) throws(StoreError) -> [SubmitOutcome] {
        guard !specs.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> [SubmitOutcome] in
            var outcomes: [SubmitOutcome] = []
            var batchKeys: [String: String] = [:]
            for spec in specs {
                if let key = spec.key {
                    var existing = batchKeys[key]
                    if existing == nil {
                        existing = try connection.first("SELECT id FROM jobs WHERE idempotency_key = ?", [.text(key)]) { row in
                            row.text(0)
                        }
                    }
                    if let existing {
                        outcomes.append(SubmitOutcome(id: existing, key: key, kind: spec.kind, created: false))
                        continue
                    }
                }
                let id = JobID.generate(atMs: now)
                _ = try connection.appendEvent(
                    PendingEvent(jobID: id, type: .submitted, actor: actor, data: EventData(spec: spec)), now: now)
                if let key = spec.key { batchKeys[key] = id }
                outcomes.append(SubmitOutcome(id: id, key: spec.key, kind: spec.kind, created: true))
            }
            return outcomes
        }
    }
}

// MARK: - Control (pause, resume, cancel, retry)

extension EventStore {
    /// Pauses a job: a queued job is `paused` at once; a running job gets `pause_requested` and its
    /// worker stops at the resume point; an already paused (or pause-requested) job is left as it is.
    /// Refused for final jobs. `id` may be a unique prefix.
    public func requestPause(id: String, actor: String, now: Int64) throws(StoreError) -> JobRecord {
        try control(id: id, actor: actor, now: now) { (job) throws(StoreError) -> PendingEvent? in
            switch job.state {
            case .queued:
                return PendingEvent(jobID: job.id, type: .paused, actor: actor, expectedVersion: job.version)
            case .running:
                return job.pauseRequested ? nil
                    : PendingEvent(jobID: job.id, type: .pauseRequested, actor: actor, expectedVersion: job.version)
            case .paused:
                return nil
            case .succeeded, .failed, .cancelled:
                throw StoreError.invalidControl("job \(job.id) has already \(Self.finalWords(job.state)); nothing to pause")
            }
        }
    }

    /// Resumes a job: a paused job is re-queued; a running job's pending pause request is withdrawn;
    /// a queued (or running, unpaused) job is left as it is. Refused for final jobs (use `retry`).
    public func requestResume(id: String, actor: String, now: Int64) throws(StoreError) -> JobRecord {
        try control(id: id, actor: actor, now: now) { (job) throws(StoreError) -> PendingEvent? in
            switch job.state {
            case .paused:
                return PendingEvent(jobID: job.id, type: .resumeRequested, actor: actor, expectedVersion: job.version)
            case .running:
                return job.pauseRequested
                    ? PendingEvent(jobID: job.id, type: .resumeRequested, actor: actor, expectedVersion: job.version)
                    : nil
            case .queued:
                return nil
            case .succeeded:
                throw StoreError.invalidControl("job \(job.id) has already succeeded; nothing to resume")
            case .failed, .cancelled:
                throw StoreError.invalidControl(
                    "job \(job.id) has \(Self.finalWords(job.state)); use `jobctl retry \(job.id)` to run it again")
            }
        }
    }

    /// Cancels a job: a queued or paused job is `cancelled` at once (error code `cancelled`); a running
    /// job gets `cancel_requested` and its worker aborts; a cancelled job is left as it is. Refused for
    /// succeeded and failed jobs.
    public func requestCancel(id: String, actor: String, now: Int64) throws(StoreError) -> JobRecord {
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
    public func retry(id: String, actor: String, now: Int64) throws(StoreError) -> JobRecord {
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

    /// Reads the job, decides, appends (or not), all in one IMMEDIATE transaction.
    private func control(id: String, actor: String, now: Int64,
                         decide: (JobRecord) throws(StoreError) -> PendingEvent?) throws(StoreError) -> JobRecord {
        try writeTransaction { (connection) throws(StoreError) -> JobRecord in
            let resolved = try connection.resolveID(id)
            guard let job = try connection.loadJob(resolved) else { throw StoreError.notFound(id) }
            guard let pending = try decide(job) else { return job }
            return try connection.appendEvent(pending, to: job, now: now).1
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
