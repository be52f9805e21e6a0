import JobModel

// MARK: - Commands, decisions, refusals

/// What someone asks of one job. `JobLifecycle.decide(_:now:expectedVersion:leaseToken:)` answers with
/// the events to append, or a refusal.
public indirect enum JobCommand: Sendable, Equatable, Hashable {
    /// Put a new job into the log (the CLI's `submit`).
    case submit(JobSpec)
    /// Take a lease on a runnable job for `owner` with fencing token `token`, for `leaseMs`.
    case claim(owner: String, token: Int64, leaseMs: Int64)
    /// A fact the job's worker (or a tool) reports: `started`, `progress`, `released` (a graceful
    /// release), a worker outcome (`paused`, `cancelled`, `attempt_failed`, `succeeded`, `failed`), or a
    /// raw control fact. Accepted when the job's state allows that event (see the table on
    /// `JobLifecycle`). `start(_:)`, `reportProgress(_:)`, `release(_:reason:)` and `finish(_:)` build the
    /// common ones.
    case report(EventPayload)
    /// Pause the job (the CLI's `pause`).
    case pause
    /// Resume a paused job, or withdraw a pending pause (the CLI's `resume`).
    case resume
    /// Cancel the job; `actor` is named in the error a queued or paused job is cancelled with.
    case cancel(by: String)
    /// Open a failed or cancelled job again (the CLI's `retry`). For a job that waits for others
    /// (`after:`), decided on how they stand (`decide`'s `dependencies`, which the store reads).
    case retry
    /// The job's lease, held by `holder`, ran out at `expiredAtMs` (nil: the lease row vanished).
    case expireLease(holder: String, expiredAtMs: Int64?)
    /// Honour a request still pending on a job that no longer runs, which only logs written by older
    /// releases hold. Nothing to append when there is none.
    case settle
    /// Job `dependency` (idempotency key `key`), which this job waits for (`after:`), ended `outcome`
    /// (failed or cancelled) for good, so this job can never run: a waiting job ends `cancelled`.
    /// `root` is the job whose own end began the cascade that reached `dependency` (nil: `dependency` is it).
    case dependencyEnded(dependency: String, key: String?, outcome: JobState, root: String? = nil)
    /// Job `dependency` (idempotency key `key`), which this job waits for (`after:`), was opened again by
    /// `retry --with-dependants` (or by this command, for a dependency further up the chain). A job a
    /// dependency's end cancelled opens again (`retried`) and waits for it once more. `cancellation` is
    /// the job's last event (its `cancelled`, as the log holds it); `stillEnded` names another of its
    /// dependencies that is still failed or cancelled and is not opened again with it (nil: none).
    /// `wasPaused`: the job was paused when the cascade cancelled it (its event before the `cancelled` is a
    /// `paused`), so it opens paused, as its user left it.
    case dependencyRetried(dependency: String, key: String?, cancellation: EventPayload?, stillEnded: String?,
                           wasPaused: Bool = false)

    /// The worker started (or resumed) the transfer.
    public static func start(_ progress: TransferProgress) -> JobCommand { .report(.started(progress)) }
    /// The worker reports bytes moved (a checkpoint).
    public static func reportProgress(_ progress: TransferProgress) -> JobCommand { .report(.progress(progress)) }
    /// The worker gives the job back without failure (shutdown), at its resume point.
    public static func release(_ progress: TransferProgress, reason: String?) -> JobCommand {
        .report(.released(progress, reason: reason))
    }
    /// The worker reports how the attempt ended.
    public static func finish(_ outcome: WorkerOutcome) -> JobCommand { .report(outcome.payload) }
}

/// How a worker's attempt ended.
public indirect enum WorkerOutcome: Sendable, Equatable, Hashable {
    /// Stopped at the resume point for a pause.
    case paused(TransferProgress, reason: String?)
    /// Aborted for a cancel.
    case cancelled(TransferProgress, error: StorageError, reason: String?)
    /// Failed with a retryable error; runnable again at `retryAtMs`.
    case retryScheduled(TransferProgress, error: StorageError, retryAtMs: Int64)
    /// Done.
    case succeeded(TransferProgress, result: JobResult)
    /// Failed for good.
    case failed(TransferProgress, error: StorageError, reason: String?)

    /// The event that records the outcome.
    public var payload: EventPayload {
        switch self {
        case .paused(let progress, let reason): .paused(progress, reason: reason)
        case .cancelled(let progress, let error, let reason): .cancelled(progress, error: error, reason: reason)
        case .retryScheduled(let progress, let error, let at): .attemptFailed(progress, error: error, retryAtMs: at)
        case .succeeded(let progress, let result): .succeeded(progress, result: result)
        case .failed(let progress, let error, let reason): .failed(progress, error: error, reason: reason)
        }
    }
}

/// An event the lifecycle decided to append. The store gives it its version, time and actor.
public struct DecidedEvent: Sendable, Equatable, Hashable {
    /// What happens.
    public var payload: EventPayload
    /// The fencing token the event carries: the new token of a `claimed`, the reporting worker's token
    /// of a report, nil for everything else (control, rescue, settlement).
    public var leaseToken: Int64?

    /// Creates a decided event.
    public init(_ payload: EventPayload, leaseToken: Int64? = nil) {
        self.payload = payload
        self.leaseToken = leaseToken
    }
}

/// How the jobs a job waits for (`after:`) stand, as the store read them in a command's transaction: what
/// a `retry` of the job is decided on. A job that waits for one that failed or was cancelled can never run.
public struct DependencyStanding: Sendable, Equatable, Hashable {
    /// A job it waits for that has not succeeded.
    public struct Dependency: Sendable, Equatable, Hashable {
        /// The job's id.
        public var id: String
        /// Its idempotency key, named beside the id.
        public var key: String?
        /// Its state; nil when it is not in the log.
        public var state: JobState?
        /// The job whose retry with `--with-dependants` opens it again: for one a cascade cancelled, the
        /// job whose own end began the cascade (while that one is still failed or cancelled); else itself.
        public var root: String

        /// Creates a dependency as read.
        public init(id: String, key: String?, state: JobState?, root: String) {
            self.id = id
            self.key = key
            self.state = state
            self.root = root
        }
    }

    /// The jobs it still waits for (none that succeeded), in the store's order.
    public var unfinished: [Dependency]
    /// Whether the job's own `cancelled` names a dependency (a dependency's end cancelled it): a retry of
    /// that cascade's first job with `--with-dependants` opens it again, while a job cancelled by hand stays.
    public var cancelledByDependency: Bool

    /// Creates the standing as read.
    public init(unfinished: [Dependency], cancelledByDependency: Bool) {
        self.unfinished = unfinished
        self.cancelledByDependency = cancelledByDependency
    }
}

/// Why the lifecycle refused a command. Each description says what to do.
public enum LifecycleRefusal: Error, Sendable, Equatable, Hashable, CustomStringConvertible {
    /// The job does not exist (only `submit` may name a job that has no events).
    case notFound
    /// The caller expected the job at version `expected`; it is at `actual`.
    case versionConflict(expected: Int, actual: Int)
    /// The reporting worker's lease token `token` no longer holds the job.
    case staleLease(token: Int64)
    /// `event` cannot follow in state `state` (nil: the job does not exist).
    case invalidTransition(state: JobState?, event: EventType)
    /// A control command or call that makes no sense for this job; the message says why.
    case invalidControl(String)
    /// A claim of a queued job that is not runnable before `runAfterMs`.
    case notRunnableYet(runAfterMs: Int64)

    public var description: String {
        switch self {
        case .notFound:
            "no such job; `jobctl list` shows the jobs there are"
        case .versionConflict(let expected, let actual):
            "expected the job at version \(expected) but it is at \(actual); re-read the job and try again"
        case .staleLease(let token):
            "lease token \(token) no longer holds the job; this worker must stop working on it"
        case .invalidTransition(let state, let event):
            "'\(event.rawValue)' cannot happen to a job that " + (state.map { "is \($0.rawValue)" } ?? "does not exist")
        case .invalidControl(let message):
            message
        case .notRunnableYet(let runAfterMs):
            "the job is not runnable before \(runAfterMs) ms; claim it then"
        }
    }
}

// MARK: - The lifecycle

/// One job's life across attempts, workers and control requests, as a pure value: `apply(_:)` folds
/// the job's events, `decide(_:now:expectedVersion:leaseToken:)` says which events a command appends.
/// No I/O, no clock: time is an argument. The event store asks it and only persists.
///
/// The rules, written down once:
///
/// **Reports** (`.report`, a worker's facts) — which event may follow which state:
///
/// | event \ state                                       | queued | running | paused | succeeded/failed/cancelled |
/// |-----------------------------------------------------|--------|---------|--------|----------------------------|
/// | started, progress, pause_requested, cancel_requested, attempt_failed¹, lease_expired, released, succeeded, failed | – | ✓ | – | – |
/// | paused                                              | ✓      | ✓       | –      | – |
/// | resume_requested                                    | –      | ✓       | ✓      | – |
/// | cancelled                                           | ✓      | ✓       | ✓      | – |
/// | retried                                             | –      | –       | –      | failed, cancelled |
/// | submitted, claimed                                  | only through `submit` and `claim` |
///
/// ¹ Not for the job's last attempt (`attempts` at `max_attempts`): its failure is final, reported as
/// `failed` (`retryLimitExceeded`), as the rescue of a last attempt decides it.
///
/// **Control** (`pause`, `resume`, `cancel`, `retry`):
///
/// | state \ command            | pause            | resume                 | cancel             | retry   |
/// |----------------------------|------------------|------------------------|--------------------|---------|
/// | queued                     | `paused`         | refused                | `cancelled`        | refused |
/// | running                    | `pause_requested`| refused                | `cancel_requested` | refused |
/// | running, pause pending     | repeat           | `resume_requested` (withdraws the pause) | `cancel_requested` | refused |
/// | running, cancel pending    | refused          | refused                | repeat             | refused |
/// | paused                     | repeat           | `resume_requested` → queued | `cancelled`   | refused |
/// | succeeded                  | refused          | refused                | refused            | refused |
/// | failed                     | refused          | refused (use retry)    | refused            | `retried`² |
/// | cancelled                  | refused          | refused (use retry)    | repeat             | `retried`² |
///
/// A *repeat* asks for what already holds or is on its way: no events. A *refusal* says why.
///
/// ² Refused while a job it waits for (`after:`) is failed or cancelled, or not in the log: it could never
/// run. The refusal names the retry that opens it with that job (`--with-dependants`).
///
/// **Claim**: a queued job whose `run_after` has come gets `claimed` with the new token and attempt
/// `attempts + 1`. **Lease expiry** of a running job: `lease_expired`, or `failed`
/// (`retryLimitExceeded`) when its attempts are used up and no cancel is pending.
///
/// **Dependencies** (`after:`): the store claims no job that waits for a job not yet succeeded. When a
/// dependency ends failed or cancelled (`dependencyEnded`), a queued or paused dependant ends `cancelled`
/// (error code `cancelled`, "dependency ID (key K) failed", and the dependency's id in the event's
/// `dependency`, for tools to read without parsing the message); a running or finished one is a repeat. The
/// store applies this to the dependant's own dependants in turn, in the same transaction.
///
/// `dependencyRetried` is the way back: a `cancelled` job whose `cancelled` event names a dependency
/// (`dependency`, written since that field exists) opens again (`retried`) when a dependency of its is
/// retried with `--with-dependants`, and waits for it again. Refused, so the job stays cancelled, when
/// it is not cancelled, when its cancel names no dependency (a user's cancel, a worker's, a log of an
/// earlier release: the user decided, or nothing says otherwise), and while another of its dependencies
/// is still failed or cancelled (it could never run; retrying that one with `--with-dependants` opens
/// it, whichever dependency's end cancelled it). The store walks the chain and applies this to each
/// dependant in turn, in the retry's transaction.
///
/// **Attempts**: every claim charges one; a run that ends `paused` or `released` gives it back; a
/// failure or a crash (`lease_expired`) keeps it; `retried` starts afresh.
///
/// **Settlement**: pause and cancel requests are flags on a running job, acted on by its worker. When
/// the job leaves `running` some other way, the events that honour a request still pending follow in
/// the same decision, so an acknowledged request is never left pending: a pending cancel on a queued
/// or paused job → `cancelled` (it outranks a pause); a pending pause on a queued job → `paused`; a
/// worker's `paused` for a pause that `resume` withdrew meanwhile → `resume_requested`. A final outcome
/// wins over a request that came too late. A claim of a queued job that still holds a request (logs
/// of older releases) honours it instead of claiming.
public struct JobLifecycle: Sendable, Equatable, Hashable {
    /// The job as folded so far; nil before its `submitted` event.
    public private(set) var record: JobRecord?

    /// A lifecycle at `record` (nil: a job not yet submitted).
    public init(record: JobRecord? = nil) {
        self.record = record
    }

    /// The lifecycle after `events`, oldest first.
    public init(folding events: [JobEvent]) {
        self.init()
        for event in events { apply(event) }
    }

    /// Folds one event: a `submitted` creates the record, every other event changes it (see
    /// `JobRecord.apply`). Never refuses: the log is the truth. Events before a `submitted` are ignored.
    public mutating func apply(_ event: JobEvent) {
        if record == nil {
            record = JobRecord(submitted: event)
        } else {
            // In place: a copy out and back would share the record's box, so `apply` would copy it.
            record?.apply(event)
        }
    }

    /// The events `command` appends to this job at `now`, in order, or why it is refused. Empty for a
    /// harmless repeat.
    ///
    /// - Parameters:
    ///   - expectedVersion: the version the caller saw; refused (`versionConflict`) unless current.
    ///   - leaseToken: the reporting worker's token; refused (`staleLease`) unless the job is running
    ///     under exactly it. Ignored by `claim`, which carries its new token.
    ///   - dependencies: how the jobs this one waits for (`after:`) stand, read in the command's
    ///     transaction. A `retry` of a job that waits for any is refused without it; other commands
    ///     ignore it.
    public func decide(_ command: JobCommand, now: Int64, expectedVersion: Int? = nil, leaseToken: Int64? = nil,
                       dependencies: DependencyStanding? = nil) -> Result<[DecidedEvent], LifecycleRefusal> {
        do throws(LifecycleRefusal) {
            return .success(try decided(command, now: now, expectedVersion: expectedVersion, leaseToken: leaseToken,
                                        dependencies: dependencies))
        } catch {
            return .failure(error)
        }
    }

    private func decided(_ command: JobCommand, now: Int64, expectedVersion: Int?, leaseToken: Int64?,
                         dependencies: DependencyStanding?) throws(LifecycleRefusal) -> [DecidedEvent] {
        if case .report(let payload) = command, payload.type == .submitted || payload.type == .claimed {
            throw .invalidControl("'\(payload.type.rawValue)' events are written by submit and claim, not reported")
        }
        guard let job = record else {
            guard case .submit(let spec) = command else { throw .notFound }
            if let expectedVersion, expectedVersion != 0 { throw .versionConflict(expected: expectedVersion, actual: 0) }
            return [DecidedEvent(.submitted(spec: spec))]
        }
        if case .submit = command { throw .invalidTransition(state: job.state, event: .submitted) }
        // A row at the largest version (edited by hand, or damaged) can take no event: its next version
        // trapped the worker that claimed it (exit 132, at every start) and the command that controlled it.
        guard job.version < Int.max else {
            throw .invalidControl("job \(job.id)'s version (\(job.version)) is at its largest, which no run leaves: the row was "
                                      + "changed outside jobctl; `jobctl replay` rebuilds it from the log")
        }
        if let expectedVersion, expectedVersion != job.version {
            throw .versionConflict(expected: expectedVersion, actual: job.version)
        }
        if let leaseToken, !Self.isClaim(command) {
            guard job.state == .running, job.leaseToken == leaseToken else { throw .staleLease(token: leaseToken) }
        }
        switch command {
        case .submit:
            throw .invalidTransition(state: job.state, event: .submitted)
        case .claim(let owner, let token, let leaseMs):
            if let pending = Self.settlement(job) { return settled([pending], now: now) }
            guard job.state == .queued else { throw .invalidTransition(state: job.state, event: .claimed) }
            guard job.runAfterMs <= now else { throw .notRunnableYet(runAfterMs: job.runAfterMs) }
            // A row whose numbers no run could have left (edited by hand, or damaged) trapped the worker's
            // arithmetic here, at every start, with every other job waiting behind it: the job is set aside
            // (paused, saying why) and the claim goes on to the next.
            let (attempt, attemptOverflow) = job.attempts.addingReportingOverflow(1)
            let (expiry, expiryOverflow) = now.addingReportingOverflow(leaseMs)
            guard !attemptOverflow, !expiryOverflow else {
                return settled([DecidedEvent(.paused(.none, reason: "its row's attempt count (\(job.attempts)) is out of range, which no run "
                                                         + "leaves: the row was changed outside jobctl; `jobctl replay` rebuilds it from the "
                                                         + "log, then `jobctl resume` runs it"))], now: now)
            }
            return settled([DecidedEvent(.claimed(leaseOwner: owner, leaseExpiresAtMs: expiry, attempt: attempt), leaseToken: token)],
                           now: now)
        case .report(let payload):
            guard Self.allows(payload.type, in: job.state) else {
                throw .invalidTransition(state: job.state, event: payload.type)
            }
            if payload.type == .attemptFailed, job.attempts >= job.maxAttempts {
                throw .invalidControl(Self.lastAttemptMessage(job))
            }
            return settled([DecidedEvent(payload, leaseToken: leaseToken)], now: now)
        case .pause:
            return settled(try Self.pause(job), now: now)
        case .resume:
            return settled(try Self.resume(job), now: now)
        case .cancel(let actor):
            return settled(try Self.cancel(job, by: actor), now: now)
        case .retry:
            return settled(try Self.retry(job, dependencies: dependencies), now: now)
        case .expireLease(let holder, let expiredAtMs):
            guard job.state == .running else { throw .invalidTransition(state: job.state, event: .leaseExpired) }
            return settled([Self.expiry(job, holder: holder, expiredAtMs: expiredAtMs)], now: now)
        case .settle:
            guard let pending = Self.settlement(job) else { return [] }
            return settled([pending], now: now)
        case .dependencyEnded(let dependency, let key, let outcome, let root):
            return settled(try Self.dependencyEnded(job, dependency: dependency, key: key, outcome: outcome, root: root), now: now)
        case .dependencyRetried(let dependency, let key, let cancellation, let stillEnded, let wasPaused):
            return try Self.dependencyRetried(job, dependency: dependency, key: key, cancellation: cancellation,
                                              stillEnded: stillEnded, wasPaused: wasPaused)
        }
    }

    private static func isClaim(_ command: JobCommand) -> Bool {
        if case .claim = command { return true }
        return false
    }

    // MARK: - Reports

    /// Whether a reported `type` may follow in `state` (the reports table above).
    private static func allows(_ type: EventType, in state: JobState) -> Bool {
        switch type {
        case .submitted, .claimed: false
        case .started, .progress, .pauseRequested, .cancelRequested, .attemptFailed, .leaseExpired,
             .released, .succeeded, .failed:
            state == .running
        case .paused: state == .queued || state == .running
        case .resumeRequested: state == .paused || state == .running
        case .cancelled: state == .queued || state == .paused || state == .running
        case .retried: state == .failed || state == .cancelled
        // The log's own event: never a job's.
        case .archived: false
        }
    }

    /// Why an `attempt_failed` of the job's last attempt is refused. It would queue the job for an attempt
    /// beyond `max_attempts`: claimed again, attempt 4 of 3, and a crash of that run failed it only then.
    /// The failure of the last attempt is final, as the rescue of a last attempt is (`expiry`); it is the
    /// reporter's to say so with `failed`, as our worker does, and its own error and reason go with it —
    /// the lifecycle does not store another event than the one reported (whose answer is that event, and
    /// which a retried write looks for in the log).
    private static func lastAttemptMessage(_ job: JobRecord) -> String {
        "job \(job.id): attempt \(job.attempts) of \(job.maxAttempts) was its last (max_attempts), so its failure is final: "
            + "report it as 'failed' (error code retryLimitExceeded), not 'attempt_failed', which would queue the job for "
            + "an attempt it does not have; nothing was recorded"
    }

    // MARK: - Control

    private static func pause(_ job: JobRecord) throws(LifecycleRefusal) -> [DecidedEvent] {
        switch job.state {
        case .queued:
            return [DecidedEvent(.paused(.none, reason: nil))]
        case .running:
            if job.cancelRequested {
                throw .invalidControl("job \(job.id) is being cancelled (a cancel is pending); nothing to pause")
            }
            return job.pauseRequested ? [] : [DecidedEvent(.pauseRequested(reason: nil))]
        case .paused:
            return []
        case .succeeded, .failed, .cancelled:
            throw .invalidControl("job \(job.id) has already \(finalWords(job.state)); nothing to pause")
        }
    }

    private static func resume(_ job: JobRecord) throws(LifecycleRefusal) -> [DecidedEvent] {
        switch job.state {
        case .paused:
            return [DecidedEvent(.resumeRequested(reason: nil))]
        case .running:
            if job.cancelRequested {
                throw .invalidControl("job \(job.id) is being cancelled (a cancel is pending); nothing to resume")
            }
            guard job.pauseRequested else {
                throw .invalidControl("job \(job.id) is running, not paused; nothing to resume")
            }
            return [DecidedEvent(.resumeRequested(reason: nil))]
        case .queued:
            throw .invalidControl("job \(job.id) is queued, not paused; nothing to resume")
        case .succeeded:
            throw .invalidControl("job \(job.id) has already succeeded; nothing to resume")
        case .failed, .cancelled:
            throw .invalidControl(
                "job \(job.id) has \(finalWords(job.state)); use `jobctl retry \(job.id)` to run it again")
        }
    }

    private static func cancel(_ job: JobRecord, by actor: String) throws(LifecycleRefusal) -> [DecidedEvent] {
        switch job.state {
        case .queued, .paused:
            let error = StorageError(.cancelled, "cancelled by \(actor) while \(job.state.rawValue)")
            return [DecidedEvent(.cancelled(.none, error: error, reason: nil))]
        case .running:
            return job.cancelRequested ? [] : [DecidedEvent(.cancelRequested(reason: nil))]
        case .cancelled:
            return []
        case .succeeded, .failed:
            throw .invalidControl("job \(job.id) has already \(finalWords(job.state)); nothing to cancel")
        }
    }

    /// A failed or cancelled job opens again — unless it waits for a job that failed or was cancelled (or
    /// left the log): opened, it could never run, and nothing would say so. Refused then, naming the
    /// dependency and the retry that opens it with the job (the cascade's first job, with
    /// `--with-dependants`), as `dependencyRetried` keeps such a job cancelled.
    private static func retry(_ job: JobRecord, dependencies: DependencyStanding?) throws(LifecycleRefusal) -> [DecidedEvent] {
        switch job.state {
        case .failed, .cancelled:
            if let after = job.spec.after, !after.isEmpty {
                guard let dependencies else {
                    throw .invalidControl("job \(job.id) waits for other jobs (after:), and its retry was asked without how they "
                                              + "stand; nothing was changed")
                }
                let ended = dependencies.unfinished.filter { dependency in
                    dependency.state.map { $0 == .failed || $0 == .cancelled } ?? true
                }
                if !ended.isEmpty {
                    throw .invalidControl(neverRunsMessage(job, ended: ended, cancelledByDependency: dependencies.cancelledByDependency))
                }
            }
            return [DecidedEvent(.retried(reason: nil))]
        case .succeeded:
            throw .invalidControl("job \(job.id) has already succeeded; only failed or cancelled jobs can be retried")
        case .queued, .running, .paused:
            throw .invalidControl(
                "job \(job.id) is \(job.state.rawValue), not failed or cancelled; only those can be retried")
        }
    }

    /// "job B still waits for A (key a), which failed; retried alone, it could never run: `jobctl retry A
    /// --with-dependants` opens it again with A".
    private static func neverRunsMessage(_ job: JobRecord, ended: [DependencyStanding.Dependency],
                                         cancelledByDependency: Bool) -> String {
        let named = ended.map { dependency in
            let how = switch dependency.state {
            case .failed?: "which failed"
            case .cancelled?: "which was cancelled"
            default: "which is no longer in the log"
            }
            return (dependency.key.map { "\(dependency.id) (key \($0))" } ?? dependency.id) + ", " + how
        }.joined(separator: ", and ")
        let stuck = "job \(job.id) still waits for \(named); retried alone, it could never run"
        if ended.contains(where: { $0.state == nil }) {
            return stuck + ": submit it again without that dependency"
        }
        var roots: [String] = []
        for dependency in ended where !roots.contains(dependency.root) { roots.append(dependency.root) }
        let command = "`jobctl retry \(roots.joined(separator: " ")) --with-dependants`"
        if cancelledByDependency {
            return stuck + ": \(command) opens it again with " + (roots.count == 1 ? roots[0] : "them")
        }
        return stuck + ": \(command) first, then `jobctl retry \(job.id)`"
    }

    // MARK: - Dependencies

    /// A queued or paused job whose dependency ended failed or cancelled can never run: it ends
    /// `cancelled`, naming the dependency. Anything else is left as it is.
    ///
    /// Its remedy names the job to retry with `--with-dependants`: the one whose own end began the
    /// cascade (`root`). The job's direct dependency, when a cascade cancelled it too, would open again
    /// only to wait for the failed job above it — the chain's tail would wait for ever.
    private static func dependencyEnded(_ job: JobRecord, dependency: String, key: String?,
                                        outcome: JobState, root: String?) throws(LifecycleRefusal) -> [DecidedEvent] {
        guard outcome == .failed || outcome == .cancelled else {
            throw .invalidControl("dependency \(dependency) is \(outcome.rawValue), not failed or cancelled; job \(job.id) still waits")
        }
        switch job.state {
        case .queued, .paused:
            let message = dependencyMessage(dependency: dependency, key: key, outcome: outcome)
            let error = StorageError(.cancelled, message)
            let remedy = if let root, root != dependency {
                "`jobctl retry \(root) --with-dependants` opens it again with \(root), whose end cancelled its dependency"
            } else {
                "`jobctl retry \(dependency) --with-dependants` opens it again with its dependency"
            }
            return [DecidedEvent(.cancelled(.none, error: error, reason: remedy, dependency: dependency))]
        case .running, .succeeded, .failed, .cancelled:
            return []
        }
    }

    /// A job a dependency's end cancelled opens again now that `dependency` was retried — paused again
    /// when it was paused then: the cascade ended it, not its user's pause, which a plain `retried` would
    /// have dropped (it would run once its dependencies succeed); anything else is refused with the
    /// reason it stays as it is.
    private static func dependencyRetried(_ job: JobRecord, dependency: String, key: String?, cancellation: EventPayload?,
                                          stillEnded: String?, wasPaused: Bool) throws(LifecycleRefusal) -> [DecidedEvent] {
        guard job.state == .cancelled else {
            throw .invalidControl("job \(job.id) is \(job.state.rawValue), not cancelled; retrying its dependency leaves it as it is")
        }
        guard cancellation?.type == .cancelled, cancellation?.cancellingDependency != nil else {
            throw .invalidControl("job \(job.id) was not cancelled by a dependency's end (cancelled by hand, or by a jobctl "
                                      + "that did not record why); it stays cancelled: `jobctl retry \(job.id)` opens it again")
        }
        if let stillEnded {
            throw .invalidControl("job \(job.id) also waits for \(stillEnded), which is still failed or cancelled; it stays "
                                      + "cancelled: `jobctl retry \(stillEnded) --with-dependants` opens it again")
        }
        let named = key.map { "\(dependency) (key \($0))" } ?? dependency
        let retried = DecidedEvent(.retried(reason: "dependency \(named) opened again (`retry --with-dependants`)"))
        guard wasPaused else { return [retried] }
        return [retried, DecidedEvent(.paused(.none, reason: "it was paused when its dependency's end cancelled it; "
                                                  + "`jobctl resume \(job.id)` lets it run"))]
    }

    /// "dependency ID (key K) failed" / "… was cancelled".
    public static func dependencyMessage(dependency: String, key: String?, outcome: JobState) -> String {
        let named = key.map { "\(dependency) (key \($0))" } ?? dependency
        return "dependency \(named) " + (outcome == .failed ? "failed" : "was cancelled")
    }

    private static func finalWords(_ state: JobState) -> String {
        switch state {
        case .succeeded: "succeeded"
        case .failed: "failed"
        case .cancelled: "been cancelled"
        case .queued, .running, .paused: state.rawValue
        }
    }

    // MARK: - Rescue

    /// A crash keeps its attempt's charge, so a job whose attempts are used up fails instead of
    /// returning to the queue — unless a cancel is pending, which wins (`lease_expired`, then `cancelled`),
    /// or a pause: acknowledged, it is honoured as a cancel is. Its job was failed (`retryLimitExceeded`)
    /// instead, the pause lost. It is `paused` at once, which gives the dead run's charge back as any run
    /// stopped on request does: resumed, the job runs its last attempt again, never one beyond
    /// `max_attempts`; and paused, it runs only when someone resumes it, so a job that kills its
    /// workers cannot loop on that. (With attempts left the pause follows `lease_expired`, as before.)
    private static func expiry(_ job: JobRecord, holder: String, expiredAtMs: Int64?) -> DecidedEvent {
        let when = expiredAtMs.map { " at \($0)" } ?? ""
        if job.attempts >= job.maxAttempts && job.pauseRequested && !job.cancelRequested {
            return DecidedEvent(.paused(Self.rescued(job), reason: "its worker (\(holder)) died or lost its lease\(when) while a pause "
                                            + "was pending; `jobctl resume \(job.id)` runs it again"))
        }
        if job.attempts >= job.maxAttempts && !job.cancelRequested {
            let error = StorageError(
                .retryLimitExceeded,
                "attempt \(job.attempts) of \(job.maxAttempts) ended when its worker (\(holder)) died or lost its lease; "
                    + "no attempts are left: check the workers' logs, then `jobctl retry \(job.id)`")
            // The dead attempt may have done the work: a `retry` must not fail on it (`ResumePoint.unanswered`).
            return DecidedEvent(.failed(Self.rescued(job), error: error, reason: "lease expired\(when)"))
        }
        return DecidedEvent(.leaseExpired(Self.rescued(job), reason: "lease held by \(holder) expired\(when)"))
    }

    /// Where the attempt after a dead one starts, as the rescue records it: `ResumePoint.unanswered` for a
    /// job whose dead attempt may have done its work unreported (`JobRecord.mayMeetItsOwnWork`) and left no
    /// resume point saying more — whatever an earlier attempt's answered failure left in `error`, which
    /// the claim's own guess (`JobRecord.resumePointForAttempt`, for logs written before the rescue said
    /// so) cannot see past. Nothing for any other job.
    private static func rescued(_ job: JobRecord) -> TransferProgress {
        job.resumePoint == nil && job.mayMeetItsOwnWork ? TransferProgress(resumePoint: .unanswered) : .none
    }

    // MARK: - Settlement

    /// `events`, followed by the events that honour a request they leave pending (see the type's
    /// documentation). Settlement events carry no lease token.
    private func settled(_ events: [DecidedEvent], now: Int64) -> [DecidedEvent] {
        // The common case, a worker's report on a job with no request pending: nothing can need
        // honouring, so the events are not folded into copies of the record to find that out (nor is
        // the record copied to ask).
        guard !events.isEmpty, let pauseRequested = record?.pauseRequested, let cancelRequested = record?.cancelRequested,
              !Self.leavesNothingToSettle(pauseRequested: pauseRequested, cancelRequested: cancelRequested, events),
              var job = record else { return events }
        var all = events
        var before = job
        for event in events {
            before = job
            job.apply(Self.folded(event, job: job, now: now))
        }
        var last = all[all.count - 1]
        // Each settlement takes the job out of `running` or to a final state, so two steps end it.
        for _ in 0..<3 {
            guard let next = Self.settlement(job, after: last.payload, from: before) else { break }
            all.append(next)
            before = job
            job.apply(Self.folded(next, job: job, now: now))
            last = next
        }
        return all
    }

    /// Whether folding `events` into `job` cannot leave a request to honour: none is pending on the job,
    /// none is among the events (only `pause_requested` and `cancel_requested` set one), and no `paused`
    /// could be followed by the withdrawal of its request. Exactly the cases where `settled` adds nothing.
    private static func leavesNothingToSettle(pauseRequested: Bool, cancelRequested: Bool, _ events: [DecidedEvent]) -> Bool {
        guard !pauseRequested, !cancelRequested else { return false }
        return events.allSatisfy { event in
            switch event.payload {
            case .pauseRequested, .cancelRequested, .paused: false
            default: true
            }
        }
    }

    /// A decided event as the fold sees it once stored.
    private static func folded(_ event: DecidedEvent, job: JobRecord, now: Int64) -> JobEvent {
        JobEvent(jobID: job.id, version: job.version + 1, atMs: now, actor: "", leaseToken: event.leaseToken,
                 payload: event.payload)
    }

    /// What honours a request still pending on a job that is no longer running, or nil.
    private static func settlement(_ job: JobRecord) -> DecidedEvent? {
        switch job.state {
        case .queued, .paused:
            if job.cancelRequested {
                let error = StorageError(.cancelled, "cancelled on request; `jobctl retry \(job.id)` starts it again")
                return DecidedEvent(.cancelled(.none, error: error, reason: "a cancel was requested while the job was running"))
            }
            if job.state == .queued && job.pauseRequested {
                return DecidedEvent(.paused(.none, reason: "a pause was requested while the job was running"))
            }
            return nil
        case .running, .succeeded, .failed, .cancelled:
            return nil
        }
    }

    /// `settlement(_:)`, plus the one case only the event that just happened reveals: a worker's `paused`
    /// for a pause that `resume` withdrew while the worker was already stopping. The resume was
    /// acknowledged, so the job is re-queued at once instead of staying paused.
    private static func settlement(_ job: JobRecord, after payload: EventPayload, from before: JobRecord) -> DecidedEvent? {
        if let pending = settlement(job) { return pending }
        if case .paused = payload, before.state == .running, !before.pauseRequested {
            return DecidedEvent(.resumeRequested(reason: "the pause was withdrawn (resumed) while the worker was stopping"))
        }
        return nil
    }
}
