import JobLifecycle
import JobModel

// MARK: - The plan

/// What `retry ID --with-dependants` does beyond the job itself: the jobs a dependency's end cancelled
/// (through the chain) that open again, and the cancelled dependants that stay cancelled, with why.
public struct DependantsRetryPlan: Sendable, Equatable {
    /// A dependant that opens again, as read before, with the command that opens it.
    public struct Reopening: Sendable, Equatable {
        /// The job before it opens again.
        public var record: JobRecord
        /// The lifecycle's `dependencyRetried` for it, with the facts the store read.
        public var command: JobCommand
    }

    /// A cancelled dependant left as it is.
    public struct Kept: Sendable, Equatable {
        /// The job.
        public var record: JobRecord
        /// Why it stays cancelled (the lifecycle's refusal).
        public var reason: String
    }

    /// The dependants that open again, in the order they do: every one after the dependencies it
    /// opens with.
    public internal(set) var reopened: [Reopening] = []
    /// The cancelled dependants (of the job or of one opened with it) that stay cancelled.
    public internal(set) var kept: [Kept] = []
}

/// The outcome of `retry ID --with-dependants` (or what it would be, for `--dry-run`).
public struct DependantsRetryResult: Sendable, Equatable {
    /// The job retried (a dry run: as it is now).
    public var job: ControlResult
    /// The dependants opened again, after their `retried` (a dry run: as they are now, cancelled).
    public var reopened: [JobRecord]
    /// The cancelled dependants that stay cancelled, with why.
    public var kept: [DependantsRetryPlan.Kept]

    /// Creates a result.
    public init(job: ControlResult, reopened: [JobRecord], kept: [DependantsRetryPlan.Kept]) {
        self.job = job
        self.reopened = reopened
        self.kept = kept
    }
}

// MARK: - What the store reads

/// A write transaction (or, for a dry run, a read transaction) of an adapter, with the reads that
/// opening dependants again needs on top of `DecisionWriter`'s row operations.
public protocol DependantsReader: DecisionWriter {
    /// The cancelled jobs that wait for `jobID` (a row of `job_dependencies`), in submission order;
    /// with `locking`, locked where the engine locks rows.
    func cancelledDependants(of jobID: String, locking: Bool) throws(StoreError) -> [JobRecord]
    /// The jobs `jobID` still waits for (its rows of `job_dependencies`: none that succeeded) and their
    /// states, nil for one not in the log; with `locking`, their rows are held against change (shared)
    /// until the transaction ends, where the engine locks rows.
    func remainingDependencies(of jobID: String, locking: Bool) throws(StoreError) -> [(id: String, state: JobState?)]
    /// The job's projection row as this transaction reads it, or nil; never locked (a dry run's read
    /// transaction takes no locks, and reading up a chain of cancels for a message must not lock it).
    func unlockedRecord(_ jobID: String) throws(StoreError) -> JobRecord?
    /// Throws `unknownEventType` when job `jobID`'s history holds an event of a type this jobctl does
    /// not know (`NewerEvents`): a control decided on its row alone, as if that event were not there.
    func refuseNewerEvents(_ jobID: String) throws(StoreError)
}

// MARK: - Control

extension DependantsReader {
    /// How the jobs `job` waits for (`after:`) stand in this transaction: what its `retry` is decided on;
    /// nil for a job that waits for none, for which nothing is read. With `locking`, their rows are held
    /// as `remainingDependencies` holds them: a dependency cannot end between this read and the commit of
    /// the retry that read it open. `openedBefore`: jobs taken as open (as `planDependantsRetry`).
    /// `known`: the roots the command found before (see `CascadeRoots`).
    public func dependencyStanding(of job: JobRecord, locking: Bool, openedBefore: Set<String> = [],
                                   known: CascadeRoots? = nil) throws(StoreError) -> DependencyStanding? {
        guard let after = job.spec.after, !after.isEmpty else { return nil }
        var unfinished: [DependencyStanding.Dependency] = []
        for (id, state) in try remainingDependencies(of: job.id, locking: locking) {
            let record = try unlockedRecord(id)
            if openedBefore.contains(id) {
                unfinished.append(DependencyStanding.Dependency(id: id, key: record?.key, state: .queued, root: id))
                continue
            }
            let root = if let record {
                try cascadeRoot(of: record, opened: openedBefore, known: known) { (above) throws(StoreError) in try unlockedRecord(above) }
            } else {
                id
            }
            unfinished.append(DependencyStanding.Dependency(id: id, key: record?.key, state: state, root: root))
        }
        let cancellation = job.state == .cancelled ? try payload(ofJob: job.id, version: job.version) : nil
        return DependencyStanding(unfinished: unfinished, cancelledByDependency: cancellation?.cancellingDependency != nil)
    }

    /// A control command (pause, resume, cancel, retry) on `job`, its row as it stands in this write
    /// transaction (locked where the engine locks rows): `perform`, with how the jobs it waits for stand
    /// when it is a retry (read here, their rows held until the commit). `known`: as `dependencyStanding`.
    public func control(_ command: JobCommand, on job: JobRecord, actor: String, now: Int64,
                        known: CascadeRoots? = nil) throws(StoreError) -> (events: [JobEvent], record: JobRecord?) {
        try refuseNewerEvents(job.id)
        let dependencies = command == .retry ? try dependencyStanding(of: job, locking: true, known: known) : nil
        return try perform(command, jobID: job.id, on: job, actor: actor, expectedVersion: job.version,
                           dependencies: dependencies, now: now)
    }

    /// `control` of `job` (read, and locked where the engine locks rows, as `id` in the caller's write
    /// transaction; nil: no such job) for `JobStore.control` and `controlEach`: with `ifStateIn`, a job
    /// in none of those states is left alone (no result, its state). `known`: the roots found by the
    /// command's jobs before this one (`controlEach`), forgotten when this job changes.
    public func controlAnswer(_ command: JobCommand, id: String, job: JobRecord?, actor: String, now: Int64,
                              ifStateIn states: Set<JobState>?, known: CascadeRoots? = nil) throws(StoreError) -> ControlAnswer {
        guard let job else { throw StoreError.notFound(id) }
        if let states, !states.contains(job.state) { return ControlAnswer(result: nil, state: job.state, events: []) }
        let (events, record) = try control(command, on: job, actor: actor, now: now, known: known)
        if !events.isEmpty { known?.forget() }
        return ControlAnswer(result: ControlResult(record: record ?? job, isRepeat: events.isEmpty), state: (record ?? job).state,
                             events: events.map(\.type))
    }

    /// What `control` would append to `job` (read in the caller's transaction), changing nothing: the
    /// lifecycle's events, or its refusal thrown. `openedBefore`: as `planDependantsRetry`.
    public func planControl(_ command: JobCommand, on job: JobRecord, now: Int64,
                            openedBefore: Set<String> = []) throws(StoreError) -> [DecidedEvent] {
        try refuseNewerEvents(job.id)
        let dependencies = command == .retry ? try dependencyStanding(of: job, locking: false, openedBefore: openedBefore) : nil
        switch JobLifecycle(record: job).decide(command, now: now, expectedVersion: job.version, dependencies: dependencies) {
        case .success(let events): return events
        case .failure(let refusal): throw StoreError(refusal, jobID: job.id)
        }
    }
}

// MARK: - Planning and performing

extension DependantsReader {
    /// Which cancelled dependants of `job` open again when it is retried with its dependants, walked level
    /// by level with a work list (a chain of any length, no recursion): a cancelled job waiting for one
    /// that opens again is asked about (`JobCommand.dependencyRetried`, the rules are the lifecycle's),
    /// with the dependency that opens it, the event that cancelled it and, of its other dependencies
    /// still failed or cancelled, one that does not open with it. A job waiting for several is asked
    /// again at each of them, so it opens once the last of them does; refused at every one, it is kept.
    ///
    /// `openedBefore`: jobs taken as open although the log has them failed or cancelled (those a bulk
    /// dry run's earlier retries would have opened).
    ///
    /// Only reads: `retryWithDependants` performs the plan in the same transaction, a dry run shows it.
    public func planDependantsRetry(of job: JobRecord, locking: Bool, now: Int64,
                                    openedBefore: Set<String> = []) throws(StoreError) -> DependantsRetryPlan {
        var plan = DependantsRetryPlan()
        // Job ids are ASCII (ULIDs): `String` equality is byte equality for them.
        var opening = openedBefore
        opening.insert(job.id)
        var keptInOrder: [JobRecord] = []
        var keptBecause: [String: String] = [:]
        var walk: [(id: String, key: String?)] = [(job.id, job.key)]
        var next = 0
        while next < walk.count {
            let dependency = walk[next]
            next += 1
            for dependant in try cancelledDependants(of: dependency.id, locking: locking) where !opening.contains(dependant.id) {
                let cancellation = try payload(ofJob: dependant.id, version: dependant.version)
                let stillEnded = try remainingDependencies(of: dependant.id, locking: locking).first { other in
                    guard !opening.contains(other.id) else { return false }
                    guard let state = other.state else { return true }
                    return state == .failed || state == .cancelled
                }
                // Paused when the cascade cancelled it: its event before the `cancelled` left it so.
                let before = dependant.version > 1 ? try payload(ofJob: dependant.id, version: dependant.version - 1) : nil
                let wasPaused = before?.type == .paused
                let command = JobCommand.dependencyRetried(dependency: dependency.id, key: dependency.key,
                                                           cancellation: cancellation, stillEnded: stillEnded?.id,
                                                           wasPaused: wasPaused)
                switch JobLifecycle(record: dependant).decide(command, now: now, expectedVersion: dependant.version) {
                case .success(let events) where !events.isEmpty:
                    opening.insert(dependant.id)
                    plan.reopened.append(DependantsRetryPlan.Reopening(record: dependant, command: command))
                    walk.append((dependant.id, dependant.key))
                case .success:
                    break
                case .failure(let refusal):
                    if keptBecause[dependant.id] == nil { keptInOrder.append(dependant) }
                    keptBecause[dependant.id] = refusal.description
                }
            }
        }
        // A dependant refused at one of its dependencies and opened at a later one is not kept.
        plan.kept = keptInOrder.filter { !opening.contains($0.id) }.map { record in
            DependantsRetryPlan.Kept(record: record, reason: keptBecause[record.id] ?? "")
        }
        return plan
    }

    /// `retry` of `job` (its row as it stands in this write transaction, locked where the engine locks
    /// rows; refused, as `control` refuses it, while a job it waits for is failed or cancelled), then
    /// every dependant `planDependantsRetry` opens again, each through the lifecycle and with its own
    /// `retried` event, all in the caller's transaction: a refusal of any throws, and the caller's
    /// rollback leaves every job as it was.
    public func retryWithDependants(_ job: JobRecord, actor: String, now: Int64) throws(StoreError) -> DependantsRetryResult {
        let (events, record) = try control(.retry, on: job, actor: actor, now: now)
        let retried = record ?? job
        let plan = try planDependantsRetry(of: retried, locking: true, now: now)
        var reopened: [JobRecord] = []
        reopened.reserveCapacity(plan.reopened.count)
        for reopening in plan.reopened {
            let dependant = reopening.record
            try refuseNewerEvents(dependant.id)
            let (_, after) = try perform(reopening.command, jobID: dependant.id, on: dependant, actor: actor,
                                         expectedVersion: dependant.version, now: now)
            reopened.append(after ?? dependant)
        }
        return DependantsRetryResult(job: ControlResult(record: retried, isRepeat: events.isEmpty), reopened: reopened,
                                     kept: plan.kept)
    }

    /// What `retryWithDependants` would do to `job` (read in the caller's transaction), changing nothing:
    /// the job's own retry is refused as it would be. `openedBefore`: as `planDependantsRetry`.
    public func planRetryWithDependants(_ job: JobRecord, now: Int64,
                                        openedBefore: Set<String> = []) throws(StoreError) -> DependantsRetryResult {
        _ = try planControl(.retry, on: job, now: now, openedBefore: openedBefore)
        let plan = try planDependantsRetry(of: job, locking: false, now: now, openedBefore: openedBefore)
        return DependantsRetryResult(job: ControlResult(record: job, isRepeat: false), reopened: plan.reopened.map(\.record),
                                     kept: plan.kept)
    }
}
