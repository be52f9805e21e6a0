import JobModel

/// The state of one job as folded from its events: exactly one row of the `jobs` projection.
///
/// The projection is a cache of `JobRecord.folding(events)`; `EventStore.replay(verify:)` proves it.
public struct JobRecord: Codable, Equatable, Hashable, Sendable {
    /// The job id (a ULID).
    public var id: String
    /// The global sequence number of the `submitted` event: the first-come tie-break when claiming.
    public var seq: Int64
    /// What kind of transfer the job is.
    public var kind: JobKind
    /// Where the job is in its life.
    public var state: JobState
    /// The queue workers select from.
    public var queue: String
    /// Higher runs first.
    public var priority: Int
    /// The job is runnable at or after this time (ms since the epoch) while queued.
    public var runAfterMs: Int64
    /// Attempts charged against `maxAttempts` since submission or the last `retried`: every claim
    /// charges one, and a run that ends `paused` or `released` (stopped on request or by a graceful
    /// shutdown, not by a failure) gives it back. So the count is the attempts that failed or that a
    /// crash lost (`lease_expired`), plus the one running now or the one that ended the job.
    public var attempts: Int
    /// Attempts allowed before `retryLimitExceeded`.
    public var maxAttempts: Int
    /// The worker holding the lease while running.
    public var leaseOwner: String?
    /// The fencing token of the current lease while running.
    public var leaseToken: Int64?
    /// Bytes transferred so far (last reported).
    public var bytesDone: Int64
    /// Total bytes, when known.
    public var bytesTotal: Int64?
    /// Where the next attempt continues.
    public var resumePoint: ResumePoint?
    /// The last error (kept after a retry is scheduled; cleared by `retried`).
    public var error: StorageError?
    /// What the job produced (download-memory bytes are referenced by `result.blob`).
    public var result: JobResult?
    /// The submitted job.
    public var spec: JobSpec
    /// The idempotency key, unique across all jobs.
    public var key: String?
    /// A pause was requested while running; the worker stops at its resume point. Set only while
    /// running: when the job leaves `running` the store honours it at once (see `settlement`).
    public var pauseRequested: Bool
    /// A cancel was requested while running; the worker aborts. Set only while running, like
    /// `pauseRequested`.
    public var cancelRequested: Bool
    /// The version of the job's last event (1 after `submitted`).
    public var version: Int
    /// When the job was submitted.
    public var createdAtMs: Int64
    /// When the last event happened.
    public var updatedAtMs: Int64
    /// When a worker first started the transfer.
    public var startedAtMs: Int64?
    /// When the job reached a final state.
    public var finishedAtMs: Int64?

    /// Creates a record; normally the store or `folding(_:)` does this.
    public init(id: String, seq: Int64, kind: JobKind, state: JobState, queue: String, priority: Int,
                runAfterMs: Int64, attempts: Int, maxAttempts: Int, leaseOwner: String? = nil,
                leaseToken: Int64? = nil, bytesDone: Int64 = 0, bytesTotal: Int64? = nil,
                resumePoint: ResumePoint? = nil, error: StorageError? = nil, result: JobResult? = nil,
                spec: JobSpec, key: String?, pauseRequested: Bool = false, cancelRequested: Bool = false,
                version: Int, createdAtMs: Int64, updatedAtMs: Int64, startedAtMs: Int64? = nil,
                finishedAtMs: Int64? = nil) {
        self.id = id
        self.seq = seq
        self.kind = kind
        self.state = state
        self.queue = queue
        self.priority = priority
        self.runAfterMs = runAfterMs
        self.attempts = attempts
        self.maxAttempts = maxAttempts
        self.leaseOwner = leaseOwner
        self.leaseToken = leaseToken
        self.bytesDone = bytesDone
        self.bytesTotal = bytesTotal
        self.resumePoint = resumePoint
        self.error = error
        self.result = result
        self.spec = spec
        self.key = key
        self.pauseRequested = pauseRequested
        self.cancelRequested = cancelRequested
        self.version = version
        self.createdAtMs = createdAtMs
        self.updatedAtMs = updatedAtMs
        self.startedAtMs = startedAtMs
        self.finishedAtMs = finishedAtMs
    }
}

// MARK: - The fold

extension JobRecord {
    /// Creates the record a `submitted` event describes; nil for any other event or one without a spec.
    public init?(submitted event: JobEvent) {
        guard event.type == .submitted, let spec = event.data.spec else { return nil }
        self.init(id: event.jobID, seq: event.seq ?? 0, kind: spec.kind, state: .queued, queue: spec.queue,
                  priority: spec.priority, runAfterMs: event.atMs, attempts: 0, maxAttempts: spec.maxAttempts,
                  spec: spec, key: spec.key, version: event.version, createdAtMs: event.atMs,
                  updatedAtMs: event.atMs)
    }

    /// Folds a job's events, oldest first, into its record. Nil when the list is empty or does not
    /// start with `submitted`. Pure: no SQL, no clock.
    public static func folding(_ events: [JobEvent]) -> JobRecord? {
        guard let first = events.first, var record = JobRecord(submitted: first) else { return nil }
        for event in events.dropFirst() { record.apply(event) }
        return record
    }

    /// Applies one event that followed the record's current version.
    ///
    /// The log is the truth, so this never refuses: `allows(_:)` is what keeps impossible events out of
    /// the log in the first place. A second `submitted` is ignored.
    ///
    /// Changing what an event does here changes the meaning of every old log: the migration that ships
    /// such a change must rebuild the projection (`Migrator.rebuildsProjection`).
    public mutating func apply(_ event: JobEvent) {
        guard event.type != .submitted else { return }
        let data = event.data
        let wasRunning = state == .running
        version = event.version
        updatedAtMs = event.atMs
        switch event.type {
        case .submitted:
            break
        case .claimed:
            state = .running
            attempts += 1
            leaseOwner = data.leaseOwner
            leaseToken = event.leaseToken
            pauseRequested = false
            cancelRequested = false
        case .started:
            if startedAtMs == nil { startedAtMs = event.atMs }
            keepProgress(data)
        case .progress:
            keepProgress(data)
        case .pauseRequested:
            pauseRequested = true
        case .paused:
            // A run stopped on request is not a failed attempt: it gives its charge back.
            if wasRunning { attempts = max(0, attempts - 1) }
            state = .paused
            clearLease()
            pauseRequested = false
            keepProgress(data)
        case .resumeRequested:
            if state == .paused {
                state = .queued
                runAfterMs = event.atMs
            }
            pauseRequested = false
        case .cancelRequested:
            cancelRequested = true
        case .cancelled:
            state = .cancelled
            error = data.error ?? StorageError(.cancelled, data.reason.map { "cancelled: \($0)" } ?? "the job was cancelled")
            clearLease()
            pauseRequested = false
            cancelRequested = false
            finishedAtMs = event.atMs
        case .attemptFailed:
            state = .queued
            runAfterMs = data.retryAtMs ?? event.atMs
            if let failure = data.error { error = failure }
            clearLease()
            keepProgress(data)
        case .leaseExpired, .released:
            // A graceful release gives its charge back; a crash (lease expired) keeps it.
            if event.type == .released && wasRunning { attempts = max(0, attempts - 1) }
            state = .queued
            runAfterMs = event.atMs
            clearLease()
            keepProgress(data)
        case .succeeded:
            state = .succeeded
            result = data.result
            clearLease()
            keepProgress(data)
            finishedAtMs = event.atMs
            // A request that came too late has nothing left to act on.
            pauseRequested = false
            cancelRequested = false
        case .failed:
            state = .failed
            error = data.error ?? error
            clearLease()
            keepProgress(data)
            finishedAtMs = event.atMs
            pauseRequested = false
            cancelRequested = false
        case .retried:
            state = .queued
            attempts = 0
            error = nil
            finishedAtMs = nil
            runAfterMs = event.atMs
            pauseRequested = false
            cancelRequested = false
        }
    }

    private mutating func clearLease() {
        leaseOwner = nil
        leaseToken = nil
    }

    /// Progress fields an event carries replace the old ones; absent fields keep them (the resume point
    /// survives pauses, rescues and failed attempts).
    private mutating func keepProgress(_ data: EventData) {
        if let done = data.bytesDone { bytesDone = done }
        if let total = data.bytesTotal { bytesTotal = total }
        if let point = data.resumePoint { resumePoint = point }
    }
}

// MARK: - Transitions

/// An event the store appends on its own, right after another, to honour a control request that was
/// acknowledged while the job was running (see `JobRecord.settlement(after:from:)`).
public struct Settlement: Sendable, Equatable {
    /// `cancelled`, `paused` or `resume_requested`.
    public var type: EventType
    /// Its payload (the error of a `cancelled`, the reason).
    public var data: EventData
}

extension JobRecord {
    /// What honours a request still pending on a job that is no longer running, or nil.
    ///
    /// Pause and cancel requests are flags on a running job, acted on by its worker. When the job leaves
    /// `running` some other way — the worker paused it for a pause that a cancel then overtook, it
    /// released it at shutdown, scheduled a retry, or its lease expired — the store appends this event
    /// in the same transaction, so a request that was acknowledged is never left pending:
    ///
    /// - a pending **cancel** on a queued or paused job → `cancelled` (it outranks a pause);
    /// - a pending **pause** on a queued job → `paused`, at its resume point.
    ///
    /// A final outcome (`succeeded`, `failed`) wins over a request that came too late, and clears it.
    public func settlement() -> Settlement? {
        switch state {
        case .queued, .paused:
            if cancelRequested {
                let error = StorageError(.cancelled, "cancelled on request; `jobctl retry \(id)` starts it again")
                return Settlement(type: .cancelled, data: EventData(
                    error: error, reason: "a cancel was requested while the job was running"))
            }
            if state == .queued && pauseRequested {
                return Settlement(type: .paused, data: EventData(reason: "a pause was requested while the job was running"))
            }
            return nil
        case .running, .succeeded, .failed, .cancelled:
            return nil
        }
    }

    /// `settlement()`, plus the one case only the event that just happened reveals: a worker's
    /// `paused` for a pause that `resume` withdrew while the worker was already stopping. The resume
    /// was acknowledged, so the job is re-queued at once (`resume_requested`) instead of staying paused.
    ///
    /// - Parameters:
    ///   - event: the event just applied.
    ///   - before: the record before it.
    public func settlement(after event: JobEvent, from before: JobRecord) -> Settlement? {
        if let pending = settlement() { return pending }
        if event.type == .paused && before.state == .running && !before.pauseRequested {
            return Settlement(type: .resumeRequested,
                              data: EventData(reason: "the pause was withdrawn (resumed) while the worker was stopping"))
        }
        return nil
    }

    /// Whether `type` may be appended to a job in this state; the store refuses the others with
    /// `StoreError.invalidTransition`.
    public func allows(_ type: EventType) -> Bool {
        switch type {
        case .submitted: false
        case .claimed: state == .queued
        case .started, .progress, .pauseRequested, .cancelRequested, .attemptFailed, .leaseExpired,
             .released, .succeeded, .failed:
            state == .running
        case .paused: state == .queued || state == .running
        case .resumeRequested: state == .paused || state == .running
        case .cancelled: state == .queued || state == .paused || state == .running
        case .retried: state == .failed || state == .cancelled
        }
    }
}
