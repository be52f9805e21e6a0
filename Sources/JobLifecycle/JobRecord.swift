import JobModel

/// The state of one job as folded from its events: exactly one row of the `jobs` projection.
///
/// The projection is a cache of `JobRecord.folding(events)`; the store's `replay(verify:)` proves it.
/// Which events may follow which is `JobLifecycle`'s business; this type only folds.
public struct JobRecord: Codable, Equatable, Hashable, Sendable {
    // MARK: - Copy-on-write storage

    /// The stored fields, one for one with the public properties (documented there). The synthesized
    /// `Codable`, `Equatable` and `Hashable` of this plain struct are the record's own, so the JSON keys
    /// and shape are what they were when the fields were the record's stored properties.
    fileprivate struct Fields: Codable, Equatable, Hashable, Sendable {
        var id: String
        var seq: Int64
        var kind: JobKind
        var state: JobState
        var queue: String
        var priority: Int
        var runAfterMs: Int64
        var attempts: Int
        var maxAttempts: Int
        var leaseOwner: String?
        var leaseToken: Int64?
        var bytesDone: Int64
        var bytesTotal: Int64?
        var resumePoint: ResumePoint?
        var error: StorageError?
        var result: JobResult?
        var spec: JobSpec
        var key: String?
        var pauseRequested: Bool
        var cancelRequested: Bool
        var version: Int
        var createdAtMs: Int64
        var updatedAtMs: Int64
        var startedAtMs: Int64?
        var finishedAtMs: Int64?
    }

    /// The fields' box: copying a record copies one reference (see `CopyOnWrite`).
    private var storage: CopyOnWrite<Fields>

    /// The box's identity, for tests that check a copy shares it and an unshared record keeps it.
    var storageIdentity: ObjectIdentifier { storage.identity }

    // MARK: - Fields

    /// The job id (a ULID).
    public var id: String {
        get { storage.fields.id }
        set { storage.fields.id = newValue }
    }
    /// The global sequence number of the `submitted` event: the first-come tie-break when claiming.
    public var seq: Int64 {
        get { storage.fields.seq }
        set { storage.fields.seq = newValue }
    }
    /// What kind of transfer the job is.
    public var kind: JobKind {
        get { storage.fields.kind }
        set { storage.fields.kind = newValue }
    }
    /// Where the job is in its life.
    public var state: JobState {
        get { storage.fields.state }
        set { storage.fields.state = newValue }
    }
    /// The queue workers select from.
    public var queue: String {
        get { storage.fields.queue }
        set { storage.fields.queue = newValue }
    }
    /// Higher runs first.
    public var priority: Int {
        get { storage.fields.priority }
        set { storage.fields.priority = newValue }
    }
    /// The job is runnable at or after this time (ms since the epoch) while queued.
    public var runAfterMs: Int64 {
        get { storage.fields.runAfterMs }
        set { storage.fields.runAfterMs = newValue }
    }
    /// Attempts charged against `maxAttempts` since submission or the last `retried`: every claim
    /// charges one, and a run that ends `paused` or `released` (stopped on request or by a graceful
    /// shutdown, not by a failure) gives it back. So the count is the attempts that failed or that a
    /// crash lost (`lease_expired`), plus the one running now or the one that ended the job.
    public var attempts: Int {
        get { storage.fields.attempts }
        set { storage.fields.attempts = newValue }
    }
    /// Attempts allowed before `retryLimitExceeded`.
    public var maxAttempts: Int {
        get { storage.fields.maxAttempts }
        set { storage.fields.maxAttempts = newValue }
    }
    /// The worker holding the lease while running.
    public var leaseOwner: String? {
        get { storage.fields.leaseOwner }
        set { storage.fields.leaseOwner = newValue }
    }
    /// The fencing token of the current lease while running.
    public var leaseToken: Int64? {
        get { storage.fields.leaseToken }
        set { storage.fields.leaseToken = newValue }
    }
    /// Bytes transferred so far (last reported).
    public var bytesDone: Int64 {
        get { storage.fields.bytesDone }
        set { storage.fields.bytesDone = newValue }
    }
    /// Total bytes, when known.
    public var bytesTotal: Int64? {
        get { storage.fields.bytesTotal }
        set { storage.fields.bytesTotal = newValue }
    }
    /// Where the next attempt continues.
    public var resumePoint: ResumePoint? {
        get { storage.fields.resumePoint }
        set { storage.fields.resumePoint = newValue }
    }
    /// Where a claimed attempt starts: `resumePoint` (since this release the rescue of a dead attempt
    /// records `ResumePoint.unanswered` there itself), or, for logs written before, `unanswered` for a
    /// delete, or an `if_exists: fail` upload or download-file, whose earlier attempts all ended without a
    /// word — no resume point and no error recorded, so each one's worker died (its lease ran out). What such an
    /// attempt sent may have been carried out before the crash: the delete then takes a missing object
    /// as done, the upload an object holding exactly the source's bytes as its own (the download a
    /// destination file holding the object's), instead of failing the job on its own work. (A worker
    /// that dies before sending anything leaves the same record; the object the job names is gone, or
    /// holds the job's bytes, either way.)
    public var resumePointForAttempt: ResumePoint? {
        if let resumePoint { return resumePoint }
        guard attempts > 1, error == nil, mayMeetItsOwnWork else { return nil }
        return .unanswered
    }

    /// Whether a later attempt could fail on, or skip, what an earlier one did and never reported: a
    /// delete (the object gone), an `if_exists: fail` or `skip` upload or download-file (the destination
    /// taken: `skip` would report the job's own transfer as skipped).
    public var mayMeetItsOwnWork: Bool {
        switch kind {
        case .delete: true
        case .uploadFile, .uploadData, .downloadFile: spec.ifExists == .fail || spec.ifExists == .skip
        default: false
        }
    }
    /// The job's current error: the last attempt's while a retry is scheduled, the failure of a failed
    /// or cancelled job. Cleared by `retried`, and by `succeeded`: a job that succeeded on a later
    /// attempt has no error (its `list` row, `show` and JSON read as any success); the earlier attempts'
    /// errors stay in its history (`attempt_failed` events). Since schema 18 (PostgreSQL 20); the fold
    /// before kept the last failed attempt's error on the succeeded job.
    public var error: StorageError? {
        get { storage.fields.error }
        set { storage.fields.error = newValue }
    }
    /// What the job produced (download-memory bytes are referenced by `result.blob`).
    public var result: JobResult? {
        get { storage.fields.result }
        set { storage.fields.result = newValue }
    }
    /// The submitted job.
    public var spec: JobSpec {
        get { storage.fields.spec }
        set { storage.fields.spec = newValue }
    }
    /// The idempotency key, unique across all jobs.
    public var key: String? {
        get { storage.fields.key }
        set { storage.fields.key = newValue }
    }
    /// A pause was requested while running; the worker stops at its resume point. Set only while
    /// running: when the job leaves `running` the lifecycle honours it at once (`JobLifecycle`).
    public var pauseRequested: Bool {
        get { storage.fields.pauseRequested }
        set { storage.fields.pauseRequested = newValue }
    }
    /// A cancel was requested while running; the worker aborts. Set only while running, like
    /// `pauseRequested`.
    public var cancelRequested: Bool {
        get { storage.fields.cancelRequested }
        set { storage.fields.cancelRequested = newValue }
    }
    /// The version of the job's last event (1 after `submitted`).
    public var version: Int {
        get { storage.fields.version }
        set { storage.fields.version = newValue }
    }
    /// When the job was submitted.
    public var createdAtMs: Int64 {
        get { storage.fields.createdAtMs }
        set { storage.fields.createdAtMs = newValue }
    }
    /// When the last event happened.
    public var updatedAtMs: Int64 {
        get { storage.fields.updatedAtMs }
        set { storage.fields.updatedAtMs = newValue }
    }
    /// When a worker first started the transfer.
    public var startedAtMs: Int64? {
        get { storage.fields.startedAtMs }
        set { storage.fields.startedAtMs = newValue }
    }
    /// When the job reached a final state.
    public var finishedAtMs: Int64? {
        get { storage.fields.finishedAtMs }
        set { storage.fields.finishedAtMs = newValue }
    }

    /// Creates a record; normally the store or `folding(_:)` does this.
    public init(id: String, seq: Int64, kind: JobKind, state: JobState, queue: String, priority: Int,
                runAfterMs: Int64, attempts: Int, maxAttempts: Int, leaseOwner: String? = nil,
                leaseToken: Int64? = nil, bytesDone: Int64 = 0, bytesTotal: Int64? = nil,
                resumePoint: ResumePoint? = nil, error: StorageError? = nil, result: JobResult? = nil,
                spec: JobSpec, key: String?, pauseRequested: Bool = false, cancelRequested: Bool = false,
                version: Int, createdAtMs: Int64, updatedAtMs: Int64, startedAtMs: Int64? = nil,
                finishedAtMs: Int64? = nil) {
        storage = CopyOnWrite(Fields(id: id, seq: seq, kind: kind, state: state, queue: queue, priority: priority,
                                 runAfterMs: runAfterMs, attempts: attempts, maxAttempts: maxAttempts,
                                 leaseOwner: leaseOwner, leaseToken: leaseToken, bytesDone: bytesDone,
                                 bytesTotal: bytesTotal, resumePoint: resumePoint, error: error, result: result,
                                 spec: spec, key: key, pauseRequested: pauseRequested, cancelRequested: cancelRequested,
                                 version: version, createdAtMs: createdAtMs, updatedAtMs: updatedAtMs,
                                 startedAtMs: startedAtMs, finishedAtMs: finishedAtMs))
    }

    // MARK: - Value semantics

    /// Decodes the fields' own JSON (see `Fields`), so records stored or printed before the box read back.
    public init(from decoder: any Decoder) throws {
        storage = try CopyOnWrite(from: decoder)
    }

    /// Encodes the fields alone, at the top level: the box adds no key and no nesting.
    public func encode(to encoder: any Encoder) throws {
        try storage.encode(to: encoder)
    }
}

extension JobRecord: CustomReflectable {
    /// The fields, not the box: `print`, `dump` and test failures show a record as they did when the
    /// fields were its stored properties.
    public var customMirror: Mirror {
        storage.mirror(of: self)
    }
}

// MARK: - The fold

extension JobRecord {
    /// Creates the record a `submitted` event describes; nil for any other event.
    public init?(submitted event: JobEvent) {
        guard case .submitted(let spec) = event.payload else { return nil }
        self.init(id: event.jobID, seq: event.seq ?? 0, kind: spec.kind, state: .queued, queue: spec.queue,
                  priority: spec.priority, runAfterMs: Self.scheduled(spec, at: event.atMs), attempts: 0, maxAttempts: spec.maxAttempts,
                  spec: spec, key: spec.key, version: event.version, createdAtMs: event.atMs,
                  updatedAtMs: event.atMs)
    }

    /// When a job queued at `atMs` may run: its schedule (`run_after:`, `delay:`, `submit --at`) when that
    /// is later, else at once. A schedule in the past runs at once, in submission order.
    public static func scheduled(_ spec: JobSpec, at atMs: Int64) -> Int64 {
        max(atMs, spec.runAfterMs ?? atMs)
    }

    /// The batch the job was expanded in (`jobs.batch`), if any.
    public var batch: String? { spec.batch?.id }

    /// Folds a job's events, oldest first, into its record. Nil when the list is empty or does not
    /// start with `submitted`. Pure: no SQL, no clock.
    public static func folding(_ events: [JobEvent]) -> JobRecord? {
        guard let first = events.first, var record = JobRecord(submitted: first) else { return nil }
        for event in events.dropFirst() { record.apply(event) }
        return record
    }

    /// Applies one event that followed the record's current version.
    ///
    /// The log is the truth, so this never refuses: `JobLifecycle.decide` is what keeps impossible
    /// events out of the log in the first place. A second `submitted` is ignored.
    ///
    /// Changing what an event does here changes the meaning of every old log: the migration that ships
    /// such a change must rebuild the projection (`Migrator.rebuildsProjection`).
    public mutating func apply(_ event: JobEvent) {
        if case .submitted = event.payload { return }
        let wasRunning = state == .running
        version = event.version
        updatedAtMs = event.atMs
        switch event.payload {
        case .submitted:
            break
        case .claimed(let owner, _, _):
            state = .running
            attempts += 1
            leaseOwner = owner
            leaseToken = event.leaseToken
            pauseRequested = false
            cancelRequested = false
        case .started(let progress):
            if startedAtMs == nil { startedAtMs = event.atMs }
            keep(progress)
        case .progress(let progress):
            keep(progress)
        case .pauseRequested:
            pauseRequested = true
        case .paused(let progress, _):
            // A run stopped on request is not a failed attempt: it gives its charge back.
            if wasRunning { attempts = max(0, attempts - 1) }
            state = .paused
            clearLease()
            pauseRequested = false
            keep(progress)
        case .resumeRequested:
            if state == .paused {
                state = .queued
                // A job paused before its scheduled time keeps the schedule, and one paused while its
                // retry waited (`attempt_failed`) keeps the retry's time, a server's Retry-After with it
                // (since schema 17; the fold before dropped the backoff). A time already past is now.
                runAfterMs = max(Self.scheduled(spec, at: event.atMs), runAfterMs)
            }
            pauseRequested = false
        case .cancelRequested:
            cancelRequested = true
        case .cancelled(_, let failure, let reason, _):
            state = .cancelled
            error = failure ?? StorageError(.cancelled, reason.map { "cancelled: \($0)" } ?? "the job was cancelled")
            clearLease()
            pauseRequested = false
            cancelRequested = false
            finishedAtMs = event.atMs
        case .attemptFailed(let progress, let failure, let retryAtMs):
            state = .queued
            runAfterMs = retryAtMs
            error = failure
            clearLease()
            keep(progress)
        case .leaseExpired(let progress, _):
            // A crash (lease expired) keeps the attempt's charge.
            state = .queued
            runAfterMs = event.atMs
            clearLease()
            keep(progress)
        case .released(let progress, _):
            // A graceful release gives its charge back.
            if wasRunning { attempts = max(0, attempts - 1) }
            state = .queued
            runAfterMs = event.atMs
            clearLease()
            keep(progress)
        case .succeeded(let progress, let produced):
            state = .succeeded
            result = produced
            // An earlier attempt's failure is history, not the job's error (since schema 18 / PostgreSQL 20).
            error = nil
            clearLease()
            keep(progress)
            finishedAtMs = event.atMs
            // A request that came too late has nothing left to act on.
            pauseRequested = false
            cancelRequested = false
        case .failed(let progress, let failure, _):
            state = .failed
            error = failure
            clearLease()
            keep(progress)
            finishedAtMs = event.atMs
            pauseRequested = false
            cancelRequested = false
        case .retried:
            state = .queued
            attempts = 0
            error = nil
            finishedAtMs = nil
            // A job retried before its scheduled time keeps the schedule, as a resumed one does: `retry`
            // re-opens the job, it does not move its time (since schema 16; the fold before ran it at once).
            runAfterMs = Self.scheduled(spec, at: event.atMs)
            pauseRequested = false
            cancelRequested = false
        case .archived:
            // The log's own event (ArchiveRecord.logJobID); it never reaches a job.
            break
        }
    }

    private mutating func clearLease() {
        leaseOwner = nil
        leaseToken = nil
    }

    /// Progress fields an event carries replace the old ones; absent fields keep them (the resume point
    /// survives pauses, rescues and failed attempts).
    private mutating func keep(_ progress: TransferProgress) {
        if let done = progress.bytesDone { bytesDone = done }
        if let total = progress.bytesTotal { bytesTotal = total }
        if let point = progress.resumePoint { resumePoint = point }
    }
}
