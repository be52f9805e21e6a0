import Foundation
import JobLifecycle
import JobModel
import StorePort

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
            try Self.plan(specs, now: now, on: connection).persist(on: connection, actor: actor, now: now)
        }
    }

    /// What `submit` would do with `specs` now, read in one read transaction; nothing is written.
    public func planSubmit(_ specs: [JobSpec], now: Int64) throws(StoreError) -> SubmitPlan {
        try readTransaction { (connection) throws(StoreError) -> SubmitPlan in try Self.plan(specs, now: now, on: connection) }
    }

    /// The plan of `specs` against the log as `connection` reads it.
    private static func plan(_ specs: [JobSpec], now: Int64, on connection: SQLiteConnection) throws(StoreError) -> SubmitPlan {
        try SubmitPlan(specs, now: now, storedByKey: { (key) throws(StoreError) in
            try connection.first("SELECT id, \(JobRecord.specSQL) FROM jobs WHERE idempotency_key = ?", [.text(key)]) {
                (row) throws(StoreError) in
                // Re-encoded, so a spec an older jobctl wrote compares by content, not by its bytes.
                guard let text = row.optionalText(1) else { throw StoreError.notItsSubmission(jobID: row.text(0)) }
                guard let stored = try StoreJSON.decode(EventData.self, text, what: "job \(row.text(0)) submitted event").spec else {
                    throw StoreError.corrupt("job \(row.text(0)) has no spec in its submitted event: run `jobctl replay --verify`")
                }
                return (row.text(0), try StoreJSON.encode(stored))
            }
        }, logJob: { (name) throws(StoreError) in try connection.dependencyID(name) })
    }
}

// MARK: - Control (pause, resume, cancel, retry)

/// The control commands. Their rules (which state gets which event, what is a harmless repeat, what
/// is refused and why) are `JobLifecycle`'s; the store reads the job, asks, and persists the answer.
extension EventStore {
    /// The id of the job `text` names, as `after:` names jobs: its idempotency key, else its id or a
    /// unique id prefix (at least 6 characters, any case).
    public func resolveID(_ text: String) throws(StoreError) -> String {
        try withConnection { (connection) throws(StoreError) -> String in try connection.namedJobID(text) }
    }

    /// Reads the job, asks the lifecycle, appends its answer (nothing for a repeat), all in one
    /// IMMEDIATE transaction.
    public func control(_ command: JobCommand, id: String, actor: String, now: Int64,
                        ifStateIn states: Set<JobState>?) throws(StoreError) -> (result: ControlResult?, state: JobState) {
        try writeTransaction { (connection) throws(StoreError) -> (result: ControlResult?, state: JobState) in
            let resolved = try connection.resolveID(id)
            let answer = try connection.controlAnswer(command, id: id, job: try connection.loadJob(resolved), actor: actor, now: now,
                                                      ifStateIn: states)
            return (answer.result, answer.state)
        }
    }

    /// `control` of each job in one IMMEDIATE transaction, each in a savepoint (see `JobStore.controlEach`).
    public func controlEach(_ command: JobCommand, ids: [String], actor: String, now: Int64,
                            ifStateIn states: Set<JobState>?) throws(StoreError) -> [Result<ControlAnswer, StoreError>] {
        guard !ids.isEmpty else { return [] }
        return try writeTransaction { (connection) throws(StoreError) -> [Result<ControlAnswer, StoreError>] in
            // A bulk retry of a cancelled chain asks each link for its cascade's root: found once, kept.
            let known = CascadeRoots()
            return ids.map { (id) -> Result<ControlAnswer, StoreError> in
                do throws(StoreError) {
                    return .success(try connection.savepoint { () throws(StoreError) -> ControlAnswer in
                        try connection.controlAnswer(command, id: id, job: try connection.loadJob(id), actor: actor, now: now,
                                                     ifStateIn: states, known: known)
                    })
                } catch {
                    return .failure(error)
                }
            }
        }
    }

    /// What `control` would append to the job now, read in one read transaction; nothing is written.
    public func planControl(_ command: JobCommand, id: String, now: Int64,
                            openedBefore: Set<String>) throws(StoreError) -> (events: [DecidedEvent], record: JobRecord) {
        try readTransaction { (connection) throws(StoreError) -> (events: [DecidedEvent], record: JobRecord) in
            let resolved = try connection.resolveID(id)
            guard let job = try connection.loadJob(resolved) else { throw StoreError.notFound(id) }
            return (try connection.planControl(command, on: job, now: now, openedBefore: openedBefore), job)
        }
    }

    /// Retries the job and opens again the jobs its end cancelled, in one IMMEDIATE transaction (a dry
    /// run: one read transaction, nothing written).
    public func retryWithDependants(id: String, actor: String, now: Int64, ifStateIn states: Set<JobState>?, dryRun: Bool,
                                    openedBefore: Set<String>) throws(StoreError) -> (result: DependantsRetryResult?, state: JobState) {
        let body = { (connection: SQLiteConnection) throws(StoreError) -> (result: DependantsRetryResult?, state: JobState) in
            let resolved = try connection.resolveID(id)
            guard let job = try connection.loadJob(resolved) else { throw StoreError.notFound(id) }
            if let states, !states.contains(job.state) { return (nil, job.state) }
            let result = dryRun ? try connection.planRetryWithDependants(job, now: now, openedBefore: openedBefore)
                                : try connection.retryWithDependants(job, actor: actor, now: now)
            return (result, result.job.record.state)
        }
        return dryRun ? try readTransaction(body) : try writeTransaction(body)
    }
}

extension SQLiteConnection {
    /// The id of the job whose idempotency key is `key`, or nil.
    func keyedJobID(_ key: String) throws(StoreError) -> String? {
        try first("SELECT id FROM jobs WHERE idempotency_key = ?", [.text(key)], { row in row.text(0) })
    }

    /// The job `name` names: the job with that idempotency key, else the job with that id or unique id
    /// prefix (the rule, with its exceptions, is `JobIDQuery.named`'s); `notFound`, `ambiguous`,
    /// `keyAndIDPrefix` or `invalidControl` (too short) when there is none or it is not one job.
    func namedJobID(_ name: String) throws(StoreError) -> String {
        try JobIDQuery.named(name, keyed: keyedJobID(name)) { (text) throws(StoreError) in try resolveID(text) }
    }

    /// The job an `after:` name means (`namedJobID`); nil when there is none.
    func dependencyID(_ name: String) throws(StoreError) -> String? {
        do throws(StoreError) {
            return try namedJobID(name)
        } catch {
            switch error {
            case .notFound, .invalidControl: return nil  // not an id, or too short to be a prefix
            default: throw error
            }
        }
    }

    /// The full id for an id or unique prefix (the rules are `JobIDQuery`'s).
    func resolveID(_ text: String) throws(StoreError) -> String {
        switch try JobIDQuery(text) {
        case .exact(let id):
            let found = try first("SELECT id FROM jobs WHERE id = ?", [.text(id)]) { row in row.text(0) }
            return try JobIDQuery.resolve(text, matches: found.map { [$0] } ?? [], batchSize: { () throws(StoreError) in
                try first("SELECT count(*) FROM jobs WHERE batch = ?", [.text(id)]) { row in row.int(0) } ?? 0
            })
        case .prefix(let prefix):
            // The prefix holds only id characters, so GLOB needs no escaping and can use the primary key.
            return try JobIDQuery.resolve(text, matches: query("SELECT id FROM jobs WHERE id GLOB ? ORDER BY id LIMIT ?",
                                                               [.text(prefix + "*"), .int(JobIDQuery.matchLimit)]) { row in row.text(0) })
        }
    }
}
