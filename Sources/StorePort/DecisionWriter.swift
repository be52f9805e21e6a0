import Foundation
import JobLifecycle
import JobModel

/// A write transaction of an adapter, seen as the few row operations that persisting a lifecycle
/// decision needs. `perform` and `appendEvent` below are written once, on top of them, for every
/// adapter: ask the lifecycle, fence against the lease table, move memory-download bytes into the
/// blobs, append the events, write the projection row and drop the lease once the job stops running.
public protocol DecisionWriter {
    /// The token of the job's row in the lease table, or nil when it has none.
    func leaseToken(ofJob jobID: String) throws(StoreError) -> Int64?
    /// Stores bytes once under their SHA-256 (hex), `sha256` (which `perform` computed or checked).
    func storeBlob(_ bytes: Data, sha256: String) throws(StoreError)
    /// Appends one event row and returns its `seq`.
    func insertEvent(jobID: String, version: Int, type: EventType, atMs: Int64, actor: String, leaseToken: Int64?,
                     data: String) throws(StoreError) -> Int64
    /// Writes the job's projection row: an update of `current` (the row as it stands), or an insert.
    func writeProjection(_ record: JobRecord, replacing current: JobRecord?) throws(StoreError)
    /// Removes the job's lease row.
    func dropLease(jobID: String) throws(StoreError)

    // MARK: Dependencies (`after:`)

    /// The job's projection row as it stands in this transaction, or nil (a job later in the same submit).
    func dependencyRecord(_ jobID: String) throws(StoreError) -> JobRecord?
    /// Records that `jobID` waits for `dependsOn` (a row of `job_dependencies`).
    func insertDependency(jobID: String, dependsOn: String) throws(StoreError)
    /// Removes every wait on `jobID`: it succeeded.
    func removeDependencies(on jobID: String) throws(StoreError)
    /// The queued or paused jobs that wait for `jobID`, in submission order, locked where the engine
    /// locks rows.
    func waitingDependants(of jobID: String) throws(StoreError) -> [JobRecord]
    /// The payload of the job's event at `version`, or nil.
    func payload(ofJob jobID: String, version: Int) throws(StoreError) -> EventPayload?
}

extension DecisionWriter {
    /// Appends one reported event to a job whose projection row the caller read (or wrote, or locked)
    /// in this same write transaction: `current` must be that row as it stands now (nil: no row).
    ///
    /// The lifecycle decides; when the event leaves a control request pending on a job that is no
    /// longer running, the events that honour it follow in the same decision. The returned record is
    /// the job after all of them, the returned event the one asked for.
    ///
    /// The event's time is `now`, or the time it happened (`occurredAtMs`) kept between the job's
    /// previous event and `now`: a job's events never go back in time.
    public func appendEvent(_ pending: PendingEvent, to current: JobRecord?, now: Int64) throws(StoreError) -> (JobEvent, JobRecord) {
        let at = pending.occurredAtMs.map { occurred in min(now, max(occurred, current?.updatedAtMs ?? occurred)) } ?? now
        let (events, record) = try perform(.report(pending.payload), jobID: pending.jobID, on: current,
                                           actor: pending.actor, expectedVersion: pending.expectedVersion,
                                           leaseToken: pending.leaseToken, prepared: pending.prepared, now: at)
        guard let first = events.first, let record else {
            // A report is never a repeat: the lifecycle decides at least the reported event.
            throw StoreError.invalidControl("the lifecycle decided nothing for a '\(pending.type.rawValue)' of job \(pending.jobID)")
        }
        return (first, record)
    }

    /// Asks the lifecycle what `command` does to job `jobID` (whose current row is `current`, nil: no
    /// row) and persists its answer: the events, the projection row, the lease row. Refusals become
    /// `StoreError`s. The caller holds a write transaction (with the job's row locked where the engine
    /// locks rows), and `current` is the row as it stands now.
    ///
    /// `prepared` is the reported payload readied where the event was made (`PendingEvent.prepared`):
    /// a decided event that is exactly that payload is stored as it says, without hashing or encoding
    /// here; any other is readied here.
    ///
    /// `dependencies` is how the jobs the job waits for stand, for a `retry` (`DependantsReader.control`
    /// reads them).
    ///
    /// Returns the events appended (empty for a repeat) and the job after them.
    public func perform(_ command: JobCommand, jobID: String, on current: JobRecord?, actor: String,
                        expectedVersion: Int? = nil, leaseToken: Int64? = nil, prepared: PreparedPayload? = nil,
                        dependencies: DependencyStanding? = nil, now: Int64) throws(StoreError) -> (events: [JobEvent], record: JobRecord?) {
        var ended: [EndedJob] = []
        let result = try decide(command, jobID: jobID, on: current, actor: actor, expectedVersion: expectedVersion,
                                leaseToken: leaseToken, prepared: prepared, dependencies: dependencies, now: now, ended: &ended)
        try cancelWaitingDependants(of: ended, actor: actor, now: now)
        return result
    }

    /// `perform` without the cascade: a job that ends failed or cancelled here is added to `ended`, for
    /// `cancelWaitingDependants` to cancel what waits for it.
    private func decide(_ command: JobCommand, jobID: String, on current: JobRecord?, actor: String,
                        expectedVersion: Int?, leaseToken: Int64?, prepared: PreparedPayload?,
                        dependencies: DependencyStanding? = nil, now: Int64,
                        ended: inout [EndedJob]) throws(StoreError) -> (events: [JobEvent], record: JobRecord?) {
        precondition(current?.id.hasSameUTF8(as: jobID) ?? true,
                     "perform: the record is not job \(jobID)'s")
        var lifecycle = JobLifecycle(record: current)
        let decided: [DecidedEvent]
        switch lifecycle.decide(command, now: now, expectedVersion: expectedVersion, leaseToken: leaseToken,
                                dependencies: dependencies) {
        case .success(let events): decided = events
        case .failure(let refusal): throw StoreError(refusal, jobID: jobID)
        }
        // Fencing against the lease table too: the row is the store's own record of who holds the job.
        if let leaseToken, case .report = command, try self.leaseToken(ofJob: jobID) != leaseToken {
            throw StoreError.staleLease(jobID: jobID, token: leaseToken)
        }
        var events: [JobEvent] = []
        events.reserveCapacity(decided.count)
        for decision in decided {
            let (payload, json) = try storable(decision.payload, prepared: prepared)
            let version = (lifecycle.record?.version ?? 0) + 1
            let seq = try insertEvent(jobID: jobID, version: version, type: payload.type, atMs: now, actor: actor,
                                      leaseToken: decision.leaseToken, data: json)
            let event = JobEvent(seq: seq, jobID: jobID, version: version, atMs: now, actor: actor,
                                 leaseToken: decision.leaseToken, payload: payload)
            lifecycle.apply(event)
            events.append(event)
        }
        guard var record = lifecycle.record, !events.isEmpty else { return (events, lifecycle.record) }
        try writeProjection(record, replacing: current)
        if record.state != .running {
            try dropLease(jobID: record.id)
        }
        if let later = try persistDependencies(of: record, stateBefore: current?.state, actor: actor, now: now,
                                               ended: &ended) {
            events += later.events
            record = later.record ?? record
        }
        return (events, record)
    }

    /// `payload` as the log keeps it, and its JSON: download-to-memory bytes go to the content-addressed
    /// blobs and the event references them by hash. Taken from `prepared` when `payload` is the payload
    /// it readied, else made here.
    private func storable(_ payload: EventPayload, prepared: PreparedPayload?) throws(StoreError) -> (EventPayload, String) {
        if let prepared, let json = prepared.storedJSON, payload == prepared.payload {
            if let hashed = prepared.hashedResult { try storeBlob(hashed.bytes, sha256: hashed.sha256) }
            return (prepared.stored, json)
        }
        let (stored, hashed) = PreparedPayload.storedForm(of: payload)
        if let hashed { try storeBlob(hashed.bytes, sha256: hashed.sha256) }
        return (stored, try PayloadJSON.encode(stored))
    }

    /// What `after:` makes of a decision, in its transaction: a new job's waits are recorded (none for a
    /// dependency that already succeeded; a dependency already failed or cancelled cancels it at once); a
    /// job that just succeeded frees its dependants; one that just ended failed or cancelled goes into
    /// `ended`, whose waiting dependants `cancelWaitingDependants` cancels.
    ///
    /// Returns the events a new job got beyond its `submitted` and the job after them, or nil.
    /// `stateBefore` is the job's state before the decision (nil: a new job); only the state is asked
    /// for, so the record before is not copied for every decision.
    private func persistDependencies(of record: JobRecord, stateBefore: JobState?, actor: String, now: Int64,
                                     ended: inout [EndedJob]) throws(StoreError) -> (events: [JobEvent], record: JobRecord?)? {
        guard let stateBefore else {
            guard let after = record.spec.after, !after.isEmpty else { return nil }
            var endedDependency: JobRecord?
            for dependency in after {
                let known = try dependencyRecord(dependency)
                if known?.state == .succeeded { continue }
                try insertDependency(jobID: record.id, dependsOn: dependency)
                if let known, known.state == .failed || known.state == .cancelled, endedDependency == nil {
                    endedDependency = known
                }
            }
            guard let endedDependency else { return nil }
            // The new job's own cancel: one level, its stateBefore is `queued`. Its remedy names the job
            // whose own end began the cascade that cancelled the dependency, as a cascade's cancels do.
            return try decide(.dependencyEnded(dependency: endedDependency.id, key: endedDependency.key,
                                               outcome: endedDependency.state, root: try cascadeRoot(of: endedDependency)),
                              jobID: record.id, on: record, actor: actor, expectedVersion: record.version,
                              leaseToken: nil, prepared: nil, now: now, ended: &ended)
        }
        guard stateBefore != record.state else { return nil }
        switch record.state {
        case .succeeded:
            try removeDependencies(on: record.id)
        case .failed, .cancelled:
            ended.append(EndedJob(id: record.id, key: record.key, state: record.state))
        case .queued, .running, .paused:
            break
        }
        return nil
    }

    /// The job whose own end (a failure, a cancel by hand) cancelled `job` through a chain of dependency
    /// cancels, each read from the `dependency` field of the job's `cancelled` event: `job` itself when a
    /// dependency's end did not cancel it, or when the job above it is no longer failed or cancelled
    /// (retried since: retrying `job` with its dependants is then the remedy). The jobs above are read
    /// (and locked) as dependencies.
    private func cascadeRoot(of job: JobRecord) throws(StoreError) -> String {
        try cascadeRoot(of: job, opened: []) { (id) throws(StoreError) in try dependencyRecord(id) }
    }

    /// `cascadeRoot(of:)`, reading each job above with `record`; `opened` are jobs taken as open although
    /// the log has them failed or cancelled (a bulk dry run's earlier retries).
    ///
    /// With `known` (and nothing `opened`), a walk stops at a job whose root it holds, and leaves the
    /// root of every job it passed there: every job of a cancelled chain has the same root, so a bulk
    /// retry of the chain's N links walks it once instead of N times (each step a read and a decoded
    /// event: 2,000 links took over two minutes).
    func cascadeRoot(of job: JobRecord, opened: Set<String>, known: CascadeRoots? = nil,
                     record: (String) throws(StoreError) -> JobRecord?) throws(StoreError) -> String {
        let known = opened.isEmpty ? known : nil
        var current = job
        var seen: Set<String> = [job.id]
        var passed: [String] = []
        while current.state == .cancelled {
            if let root = known?.roots[current.id] {
                known?.remember(root, for: passed)
                return root
            }
            guard let cause = try payload(ofJob: current.id, version: current.version)?.cancellingDependency,
                  !opened.contains(cause), let above = try record(cause), above.state == .failed || above.state == .cancelled
            else { break }
            // A loop of cancels (no log holds one: a job waits only for jobs submitted before it) ends the
            // walk where it closes; a root found so is this walk's alone, not kept.
            guard seen.insert(cause).inserted else { return current.id }
            passed.append(current.id)
            current = above
        }
        passed.append(current.id)
        known?.remember(current.id, for: passed)
        return current.id
    }

    /// Cancels the queued or paused jobs waiting for the jobs in `ended`, and those waiting for them in
    /// turn, level by level with a work list: a chain of any length takes no more stack than one link
    /// (recursing once per link overflowed the stack at a few thousand). Each job's dependants are read
    /// when its turn comes, after every cancel before it, so a job that waits for two of them (a
    /// diamond) is read as it stands, already cancelled by the first, and not cancelled twice.
    private func cancelWaitingDependants(of ended: [EndedJob], actor: String, now: Int64) throws(StoreError) {
        var ended = ended
        var next = 0
        while next < ended.count {
            let job = ended[next]
            next += 1
            let root = job.root ?? job.id
            for dependant in try waitingDependants(of: job.id) {
                let before = ended.count
                _ = try decide(.dependencyEnded(dependency: job.id, key: job.key, outcome: job.state, root: root), jobID: dependant.id,
                               on: dependant, actor: actor, expectedVersion: dependant.version, leaseToken: nil,
                               prepared: nil, now: now, ended: &ended)
                // The dependant this cancelled goes on the list; its own dependants' cancels name the same root.
                for index in before..<ended.count { ended[index].root = root }
            }
            // What was read is not needed again: a long cascade keeps only the jobs still to do.
            if next >= 4_096 && next * 2 >= ended.count {
                ended.removeFirst(next)
                next = 0
            }
        }
    }
}

/// A job that ended failed or cancelled in a decision, whose waiting dependants are still to cancel.
struct EndedJob {
    let id: String
    let key: String?
    let state: JobState
    /// The job whose own end began the cascade that cancelled this one (nil: this job is it).
    var root: String? = nil
}

/// The cascade roots (`cascadeRoot`) one command found, by job, while nothing it did changed a job:
/// `controlEach` keeps one for its jobs and forgets it after every job it changed (a retried job stops
/// the walks through it).
public final class CascadeRoots {
    /// The root of each job walked, by job id.
    private(set) var roots: [String: String] = [:]

    public init() {}

    /// Records `root` as the root of every job in `jobs`.
    func remember(_ root: String, for jobs: [String]) {
        for job in jobs { roots[job] = root }
    }

    /// Forgets every root: a job changed.
    public func forget() { roots.removeAll() }
}
