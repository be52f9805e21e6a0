import Foundation
import JobLifecycle
import JobModel

/// The leftover sweep's constants that adapters share.
public enum LeftoverSweep {
    /// How far before a time-based read began the next one looks again, so that a job whose final event
    /// was written (by another process, or by a clock a little behind) while that read ran is not missed.
    public static let overlapMs: Int64 = 60_000
}

/// The event store as the CLI and the worker see it: persistence of the job log, whatever the engine.
///
/// An adapter (SQLite today: `EventStore`) implements it with SQL of its own; the rules about which
/// event may follow which are `JobLifecycle`'s, which the adapter asks and whose answer it persists.
/// Every write is one transaction that is durable when the method returns. Each adapter owns one
/// executor that serialises its use of the database, and its group commit.
///
/// Synchronous methods block the calling thread until the store's executor has run them; code on
/// Swift's cooperative pool uses the `async` methods (`appendGrouped`, `claimGrouped`, `run`), which
/// suspend instead.
public protocol JobStore: AnyObject, Sendable {
    /// Where the log lives, for messages (a path; never a password).
    var location: String { get }
    /// Whether the store was opened read-only (list, show, history, watch, audit, replay --verify).
    var isReadOnly: Bool { get }

    /// Cuts every wait for another process's lock short to `atMostNs` from now on (nil: waits last their
    /// usual time again). A stopping worker with nothing left to write asks it, and one whose grace has
    /// run out: waiting out a lock another process holds (SQLite's busy timeout is 30 s, per statement)
    /// kept it from exiting for as long, past a service manager's stop timeout.
    func capLockWaits(atMostNs: UInt64?)

    /// Cuts every wait for the database server's answer short to `atMostMs` (nil: the usual limit again),
    /// a wait under way too; the connection it was cut on is given up and the next call opens a new one.
    /// A stopping worker asks it, so that a write its connection stalled fails, and is tried again on a
    /// new connection, within its grace. A database without a server (SQLite) has nothing to cut.
    func capAnswerWaits(atMostMs: Int64?)

    /// Ends the store's waits on its database server at `monotonicMs` (`Clock.monotonicMs`; nil: no
    /// deadline again): from then on no connection is opened again, one opened before waits for the
    /// server at most until then, and an answer still awaited then is given up (its call fails as a lost
    /// connection). A stopping worker sets the end of its grace: with the server's path silent, its
    /// `released` writes and lease renewals made one 10 s connection attempt after another, and it
    /// exited 28–62 s after SIGTERM where its grace is 8 s. A database without a server (SQLite) has
    /// nothing to end (its lock waits are `capLockWaits`').
    func setStopDeadline(monotonicMs: Int64?)

    /// Whether one of the store's threads has been on one call (or group commit) for at least
    /// `forAtLeastMs`, and not for longer than the longest such a call waits by the limits the store
    /// sets itself: another process's lock (SQLite's busy timeout), a server's answer and a connection
    /// to it (PostgreSQL's answer limit and connect timeout). The store is then held by something
    /// outside this process, for no longer than its code allows: a worker's loop waiting on it is not
    /// hung (see `WorkerPool.isWaitingOnItsStore(forAtLeastMs:)`). A call past that limit is not one the
    /// store bounds any more, and says false: a thread hung there is left for a watchdog to find.
    func isWaitingWithinBounds(forAtLeastMs: Int64) -> Bool

    // MARK: Migrations

    /// The schema migrations this open applied (empty when the schema was already current).
    var appliedMigrations: [Int] { get }
    /// What the log's schema lacks or holds against it beside what its migrations make (a table, column
    /// or index dropped by hand, a trigger added or rewritten), each as a sentence saying what to do;
    /// empty when it is as made (`migrate` and `replay --verify` say so).
    func schemaProblems() throws(StoreError) -> [String]

    // MARK: Writing

    /// Submits jobs in one transaction: one `submitted` event per new job; a known idempotency key with
    /// the same spec maps to its existing job, with a different spec refuses the whole batch (`keyConflict`).
    func submit(_ specs: [JobSpec], actor: String, now: Int64) throws(StoreError) -> [SubmitOutcome]
    /// What `submit` would do with `specs` now (new jobs, jobs a key already names, `after:` resolved),
    /// with the same refusals, read in one read transaction: nothing is written (`submit --dry-run`).
    func planSubmit(_ specs: [JobSpec], now: Int64) throws(StoreError) -> SubmitPlan

    /// Appends events in one transaction (group commit), each checked on its own: expected version,
    /// lease token (fencing), and the lifecycle's rules. Throws only when the transaction fails.
    func append(_ events: [PendingEvent], now: Int64) throws(StoreError) -> [Result<JobEvent, StoreError>]

    /// `append(_:now:)`, then a claim, in one transaction.
    func append(_ events: [PendingEvent], now: Int64, thenClaim request: ClaimRequest) throws(StoreError) -> AppendAndClaimOutcome

    /// Claims up to `limit` runnable jobs (priority, run_after, submission order) under fresh leases.
    func claim(owner: String, queues: [String]?, limit: Int, leaseMs: Int64, now: Int64) throws(StoreError) -> [ClaimedJob]

    /// Extends the leases `owner` still holds; returns the job ids whose lease was lost.
    func heartbeat(owner: String, leases: [String: Int64], leaseMs: Int64, now: Int64) throws(StoreError) -> Set<String>

    /// A worker's heartbeat: extends the leases `owner` still holds, as `heartbeat` does, without waiting
    /// behind the store's queued writes where the store can (PostgreSQL renews on a connection of its
    /// own, so a commit slower than a lease does not let the worker's other leases run out). Says which
    /// leases the server extended and which are lost; a lease in neither was not extended this time (its
    /// row is held by a write still in progress) and keeps the expiry it had.
    func renewLeases(owner: String, leases: [String: Int64], leaseMs: Int64, now: Int64) async throws -> LeaseRenewal

    /// Rescues running jobs whose lease expired by `now`; returns each as the rescue left it.
    func rescueExpired(now: Int64, actor: String) throws(StoreError) -> [RescuedJob]

    // MARK: Control

    /// Runs one control command (the lifecycle's pause, resume, cancel or retry) on the job `id` names
    /// (a unique prefix is fine): reads the job, asks the lifecycle, appends its answer — nothing for a
    /// harmless repeat — in one transaction. `requestPause` and its siblings below call this.
    ///
    /// With `ifStateIn`, the job is acted on only while its state, as the transaction reads it, is one of
    /// those; otherwise nothing is written and the answer is nil with the state it is in. A bulk control
    /// selects its jobs by state and then controls them one transaction each: a job a worker claimed in
    /// between is no longer one it selected (`cancel --state queued` sent a running job a cancel).
    func control(_ command: JobCommand, id: String, actor: String, now: Int64,
                 ifStateIn states: Set<JobState>?) throws(StoreError) -> (result: ControlResult?, state: JobState)

    /// `control` of each job of `ids` (full ids) in turn, all in one transaction, each inside a savepoint
    /// of its own: a job refused (or whose write failed) is that job's failure, its changes undone, and
    /// the others go on. A bulk control of thousands of jobs made one transaction, and one sync, per job
    /// (50,000 failed jobs: `retry --state failed` took 22 s); the caller chooses how many go in one.
    /// Throws when the transaction itself fails (nothing of it was written).
    func controlEach(_ command: JobCommand, ids: [String], actor: String, now: Int64,
                     ifStateIn states: Set<JobState>?) throws(StoreError) -> [Result<ControlAnswer, StoreError>]

    /// What `control` would do to the job `id` names now (`--dry-run`), read in one read transaction and
    /// decided on the same facts (a retry: how the jobs it waits for stand), nothing written: the events
    /// the lifecycle would append (none for a repeat) and the job as read, or the refusal thrown.
    /// `openedBefore`: as `retryWithDependants`'s (a bulk dry run's retries before this one).
    func planControl(_ command: JobCommand, id: String, now: Int64,
                     openedBefore: Set<String>) throws(StoreError) -> (events: [DecidedEvent], record: JobRecord)

    /// `retry` of the job `id` names, and every job that a dependency's end cancelled because of it,
    /// through the chain (`DependantsReader.planDependantsRetry`; the rules are `JobLifecycle`'s
    /// `dependencyRetried`): each gets its own `retried` event and waits for its dependencies again, all
    /// in one transaction — a refusal of the job leaves every job as it was. With `ifStateIn`, as
    /// `control`: nil (and the state) when the job is no longer in one of those states. `dryRun` reads
    /// what would happen in one read transaction and writes nothing; `openedBefore` are the jobs that
    /// the retries a dry run planned before this one would have opened (a bulk dry run: the jobs retried
    /// and reopened before), which its plan takes as open, as the log would have them.
    func retryWithDependants(id: String, actor: String, now: Int64, ifStateIn states: Set<JobState>?,
                             dryRun: Bool, openedBefore: Set<String>) throws(StoreError) -> (result: DependantsRetryResult?, state: JobState)

    // MARK: Queries

    /// The id of the job `text` names, as `after:` names jobs: its idempotency key, else its full id or a
    /// unique prefix of it (at least 6 characters, any case).
    func resolveID(_ text: String) throws(StoreError) -> String
    /// The job with exactly this id, or nil.
    func job(_ id: String) throws(StoreError) -> JobRecord?
    /// Jobs matching `filter`, newest first; those of a kind this jobctl does not know are counted in
    /// `passingOver` instead (`jobs(filter:)` drops the count).
    func jobs(filter: JobFilter, passingOver: PassedOver) throws(StoreError) -> [JobRecord]
    /// The state and open requests of each of these jobs that exists (in no particular order), read
    /// together: a worker's control poll, which needs neither specs nor results.
    func controlStates(ids: [String]) throws(StoreError) -> [JobControlState]
    /// How many jobs match `filter`, ignoring its `limit` (so a listing can say "50 of N").
    func countJobs(filter: JobFilter) throws(StoreError) -> Int
    /// The jobs `filter` matches (its `limit` aside) counted by state, with the sum of their `bytes_done`:
    /// one aggregate query, for a watcher that polls a batch of tens of thousands of jobs (reading every
    /// record at each change of the log cost it ~0.3 ms a job, more CPU than the worker it watched).
    func tally(filter: JobFilter) throws(StoreError) -> [JobState: JobTally]
    /// Every job matching `filter`, oldest first (submission time, then log order), handed to `body`
    /// one at a time as it is read, so memory stays flat whatever the number of jobs (`jobctl audit`).
    /// With `passes` above 1 the same jobs are read again, pass after pass (a table measures its
    /// columns, then prints). No snapshot is held while `body` runs: it may block on a slow reader of
    /// standard output for as long as that pleases, and an open read transaction would keep SQLite's WAL
    /// from being checkpointed (PostgreSQL's vacuum from cleaning up) all that time. A `limit` falls
    /// back to `jobs(filter:)`. Jobs of a kind this jobctl does not know are counted in `passingOver`
    /// (once, whatever the passes), not handed to `body`.
    func forEachJob(filter: JobFilter, passes: Int, passingOver: PassedOver,
                    _ body: @escaping (_ pass: Int, _ job: JobRecord) throws(StoreError) -> Void) throws(StoreError)
    /// The jobs in `states` (nil: any) whose history holds an event of a type this jobctl does not know
    /// (a newer jobctl wrote it), by id with one such event's type (`NewerEvents`); empty, from an empty
    /// index, while every event is of a known type.
    func jobsWithNewerEvents(inStates states: Set<JobState>?) throws(StoreError) -> [String: String]
    /// Every event of a job, oldest first.
    func events(jobID: String) throws(StoreError) -> [JobEvent]
    /// Up to `limit` events after `afterSeq`, in log order.
    func events(afterSeq: Int64, limit: Int) throws(StoreError) -> [JobEvent]
    /// As `events(afterSeq:limit:)`, for a reader that follows the log as it grows (`watch`) and
    /// continues after the last seq it was given: never an event above a seq that may still commit.
    func tailEvents(afterSeq: Int64, limit: Int) throws(StoreError) -> [JobEvent]
    /// How many jobs are in each state.
    func counts() throws(StoreError) -> [JobState: Int]
    /// The seq of the newest event; 0 for an empty log.
    func lastSeq() throws(StoreError) -> Int64
    /// The earliest `run_after` among queued jobs in `queues` (nil: any queue).
    func nextRunAfter(queues: [String]?) throws(StoreError) -> Int64?
    /// A number that changes when another process commits: polled cheaply by idle workers and watchers.
    func dataVersion() throws(StoreError) -> Int64
    /// Throws `StoreError.newerSchema` when a newer jobctl has upgraded the log since this store opened
    /// it: a worker that went on would write rows the newer schema reads otherwise (a running worker
    /// never looked at the ledger again, and its rows disagreed with the log's own replay).
    func refuseNewerSchema() throws(StoreError)
    /// The final jobs that create local temporary files (download-file; uploads to `file://`) finished at
    /// or after `finishedSince` (nil: all), oldest first, and the resume points of every unfinished job,
    /// read in one snapshot: what the orphan sweep and `jobctl orphans` look at.
    func leftoverCandidates(finishedSince: Int64?) throws(StoreError) -> LeftoverCandidates
    /// What the leftover sweep reads: the final jobs that create local files and became final after
    /// `position` (nil: every such job), the resume points of every unfinished job, and the position to
    /// read from next time — in one snapshot. A position is the adapter's own (SQLite: an event seq, exact;
    /// PostgreSQL: a finish time, `now` less `LeftoverSweep.overlapMs`, since its commits do not come in seq
    /// order); it only ever grows.
    ///
    /// `skipping` names jobs the caller knows left nothing (a worker's own first attempts that succeeded:
    /// see `OrphanSweeper`): they are not read at all, which is most of a draining worker's last sweep.
    func leftoversSince(position: Int64?, now: Int64, skipping: Set<String>) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64)
    /// How far the leftover sweeps on `host` have read (a position of `leftoversSince`): every final job
    /// that creates local files and was final there was looked at by a sweep on that host that
    /// completed; nil before the first. One for each host, since a sweep removes files from its own
    /// machine's disk only. A worker's first sweep starts there rather than at the beginning of the log.
    func sweepWatermark(host: String) throws(StoreError) -> Int64?
    /// Raises `host`'s sweep watermark to `position` in one transaction; a lower value leaves it as it is
    /// (several workers sweep, each raising it to what it read).
    func raiseSweepWatermark(host: String, to position: Int64) throws(StoreError)
    /// Jobs by queue × state, the oldest queued job, running jobs with their leases, and the outcomes of
    /// the last minute and hour (`jobctl stats`), for one queue or all (nil), read in one snapshot.
    func stats(queue: String?, now: Int64) throws(StoreError) -> StoreStats
    /// Jobs by queue × state, sorted by queue then state (the counts of `stats`, and only them): what a
    /// worker's `/metrics` reports at each scrape. The rest of `stats` reads the last hour's outcome
    /// events, which on a busy log are hundreds of thousands.
    func queueStateCounts() throws(StoreError) -> [StoreStats.QueueStateCount]

    // MARK: Blobs

    /// The bytes stored under a SHA-256 (hex, any case), or nil.
    func blob(sha256: String) throws(StoreError) -> Data?
    /// How many bytes are stored under a SHA-256 (hex, any case), or nil when none are: the stored
    /// bytes' own length, not the `size` column beside them, read without reading the bytes. A
    /// command checks it against what the job recorded before it loads them: a damaged log's blob may
    /// be any size.
    func blobSize(sha256: String) throws(StoreError) -> Int64?

    // MARK: Copying a log

    /// Up to `limit` rows of the log with `seq > afterSeq`, in seq order, exactly as stored (`data`
    /// byte for byte, not re-encoded): what `jobctl migrate --to` copies.
    func logRows(afterSeq: Int64, limit: Int) throws(StoreError) -> [LogRow]

    /// The SHA-256 of every stored blob, in ascending order.
    func blobDigests() throws(StoreError) -> [String]

    /// Every record of a blob `expireBlobs` removed, in ascending hash order, exactly as stored: what
    /// `jobctl migrate --to` copies beside the blobs, so `jobctl result` on the target still says that a
    /// result expired rather than that the log lost it.
    func expiredBlobRecords() throws(StoreError) -> [ExpiredBlob]

    /// Copies `source`'s whole log into this store, which must be empty (no events, jobs, blobs,
    /// expired blobs or leases; otherwise `invalidControl` and nothing is written), in one transaction:
    /// every event with its seq, version, time, actor, lease token and data; every blob and every
    /// expired blob's record (`expiredBlobRecords()`); the fencing-token counter
    /// set past the highest token in the log; the projection rebuilt by replay's fold. Leases are not
    /// copied: a job that was running has none, so the first rescue on this store expires it.
    /// Unless `allowingRunning`, a copy whose projection holds a running job is refused and nothing is
    /// written: the check is made on what was copied, inside the transaction, so a worker that claimed
    /// a job after the caller looked cannot slip it in (`runningJobs` says how many were copied).
    func importLog(from source: any JobStore, allowingRunning: Bool) throws(StoreError) -> LogImport

    // MARK: Archiving

    /// The final jobs (succeeded, failed, cancelled) that finished before `finishedBefore`, with their
    /// events and the blobs they reference, read in one snapshot: what `jobctl archive` writes to a file.
    func archiveSelection(finishedBefore: Int64) throws(StoreError) -> ArchiveSelection

    /// Removes an archived selection in one transaction — the only path that deletes from `events`:
    /// refuses (nothing removed) when a selected job changed since it was selected; otherwise deletes
    /// those jobs' events, projection rows and leases, and the selected blobs no remaining job
    /// references, and appends the `archived` event (`record`, with `blobsRemoved` filled in) to the
    /// log-level pseudo job `ArchiveRecord.logJobID`. `beforeCommit` runs last inside the transaction
    /// (a hook for crash tests). Returns the stored event.
    func removeArchived(_ selection: ArchiveSelection, record: ArchiveRecord, actor: String, now: Int64,
                        beforeCommit: @escaping () -> Void) throws(StoreError) -> JobEvent

    /// Removes the blobs of download-memory results whose every succeeded job finished before
    /// `finishedBefore` (a blob a later job also produced stays), remembering each one's hash, size and
    /// `now` in `expired_blobs`, in one transaction. With `dryRun`, only says which it would remove.
    func expireBlobs(finishedBefore: Int64, now: Int64, dryRun: Bool) throws(StoreError) -> BlobExpiry

    /// The expiry record of a blob `expireBlobs` removed (and no job stored again since), or nil.
    func expiredBlob(sha256: String) throws(StoreError) -> ExpiredBlob?

    // MARK: Clocks

    /// The database's clock (when it has its own) and the newest event's time, for the worker's
    /// clock-skew check.
    func clockReading() throws(StoreError) -> StoreClockReading

    // MARK: Replay

    /// Folds the whole log and compares it with the projection; without `verify`, also rewrites it.
    func replay(verify: Bool) throws(StoreError) -> ReplayReport

    // MARK: The executor

    /// Appends one event in the next group commit (shared with whatever else is queued), without
    /// blocking a thread of the caller's. Returns the stored event or why it was refused.
    func appendGrouped(_ event: PendingEvent) async -> Result<JobEvent, StoreError>

    /// Appends several events in order, side by side in the next group commit (a worker's `started`
    /// with the attempt's next event): consecutive events of one job are decided one after the other
    /// and its projection row is written once, for the last. Each event still succeeds or is refused on
    /// its own, in the order given; a failure of the whole commit fails all of them.
    func appendGrouped(_ events: [PendingEvent]) async -> [Result<JobEvent, StoreError>]

    /// Claims in the same transaction as the appends queued before it (one sync for both).
    func claimGrouped(_ request: ClaimRequest) async throws(StoreError) -> [ClaimedJob]

    /// Runs `body` on the store's executor, where the synchronous methods run without blocking again,
    /// and resumes the caller with its result.
    func run<T: Sendable>(_ body: @escaping @Sendable (any JobStore) throws -> T) async throws -> T

    /// How many group commits the executor made and the events they held (diagnostics, benchmarks).
    var groupCommitStats: GroupCommitStats { get }

    // MARK: Lost answers

    /// The job's newest event when it is `pending` as written — same type, lease token, actor and
    /// payload (a download-memory result compared by its stored blob's bytes) — or nil. A worker asks
    /// this when a write it retried after a failed answer is refused: the first write may have committed.
    func landedEvent(_ pending: PendingEvent) throws(StoreError) -> JobEvent?

    // MARK: Start-up checks

    /// Among the next `limit` queued jobs in claim order (priority, then run-after, then submission), at
    /// least every one whose stored spec text contains `text` (ASCII letters compared without case), in
    /// that order; a store may return more, never fewer. For a cheap look at a long queue: a store that
    /// can match the text before decoding a spec skips the specs that cannot match, and one that keeps
    /// the queue in claim order reads only the window.
    func nextQueuedJobs(limit: Int, specMentioning text: String) throws(StoreError) -> [JobRecord]
}

/// One event as stored in the log, without decoding its data: for copying a log between stores.
public struct LogRow: Sendable, Equatable {
    public var seq: Int64
    public var jobID: String
    public var version: Int
    /// The event type as stored (`submitted`, `claimed`, …).
    public var type: String
    public var atMs: Int64
    public var actor: String
    public var leaseToken: Int64?
    /// The event's JSON, byte for byte.
    public var data: String

    public init(seq: Int64, jobID: String, version: Int, type: String, atMs: Int64, actor: String, leaseToken: Int64?, data: String) {
        self.seq = seq
        self.jobID = jobID
        self.version = version
        self.type = type
        self.atMs = atMs
        self.actor = actor
        self.leaseToken = leaseToken
        self.data = data
    }
}

/// What `importLog(from:allowingRunning:)` copied.
public struct LogImport: Sendable, Equatable {
    /// Events copied.
    public var events: Int
    /// Blobs copied.
    public var blobs: Int
    /// Records of expired blobs copied (`jobctl archive --blobs-before` removed their bytes).
    public var expiredBlobs: Int
    /// Jobs in the rebuilt projection.
    public var jobs: Int
    /// The highest fencing token in the log (the next one handed out is above it); 0 when none.
    public var highestLeaseToken: Int64
    /// Jobs copied in the running state (without a lease: the first rescue on the target expires them).
    public var runningJobs: Int = 0

    public init(events: Int, blobs: Int, expiredBlobs: Int = 0, jobs: Int, highestLeaseToken: Int64) {
        self.events = events
        self.blobs = blobs
        self.expiredBlobs = expiredBlobs
        self.jobs = jobs
        self.highestLeaseToken = highestLeaseToken
    }
}

extension JobStore {
    /// Not compared (PostgreSQL).
    public func schemaProblems() throws(StoreError) -> [String] { [] }

    /// No lock waits to cut short (PostgreSQL: its answer timeout bounds every wait).
    public func capLockWaits(atMostNs: UInt64?) {}

    /// No server's answers to wait for (SQLite).
    public func capAnswerWaits(atMostMs: Int64?) {}

    /// No server to connect to (SQLite).
    public func setStopDeadline(monotonicMs: Int64?) {}

    /// A store without waits it bounds (a wrapper in tests) is never held within them.
    public func isWaitingWithinBounds(forAtLeastMs: Int64) -> Bool { false }

    /// `heartbeat` on the store's executor, behind whatever is queued there (SQLite: a heartbeat needs the
    /// database's one write lock, as every commit does). Every lease not lost was extended.
    public func renewLeases(owner: String, leases: [String: Int64], leaseMs: Int64, now: Int64) async throws -> LeaseRenewal {
        let lost = try await run { store in try store.heartbeat(owner: owner, leases: leases, leaseMs: leaseMs, now: now) }
        return LeaseRenewal(renewed: Set(leases.keys).subtracting(lost), lost: lost)
    }

    /// `leftoversSince(position:now:skipping:)` skipping nothing.
    public func leftoversSince(position: Int64?, now: Int64) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) {
        try leftoversSince(position: position, now: now, skipping: [])
    }

    /// One group commit after another, in order, for a store without an executor of its own (a
    /// wrapper in tests); the adapters queue the events together. After a failure the rest are not
    /// tried and fail the same way, as they would have in one failed commit.
    public func appendGrouped(_ events: [PendingEvent]) async -> [Result<JobEvent, StoreError>] {
        var results: [Result<JobEvent, StoreError>] = []
        for event in events {
            if case .failure(let error)? = results.last {
                results.append(.failure(error))
            } else {
                results.append(await appendGrouped(event))
            }
        }
        return results
    }

    /// Every one of the next `limit` queued jobs in claim order: a superset of those whose spec mentions
    /// `text`. (Reads every queued job: the stores override it.)
    public func nextQueuedJobs(limit: Int, specMentioning text: String) throws(StoreError) -> [JobRecord] {
        let queued = try jobs(filter: JobFilter(states: [.queued]))
        let inClaimOrder = queued.sorted { a, b in
            if a.priority != b.priority { return a.priority > b.priority }
            if a.runAfterMs != b.runAfterMs { return a.runAfterMs < b.runAfterMs }
            return a.seq < b.seq
        }
        return Array(inClaimOrder.prefix(max(0, limit)))
    }

    /// Pauses a job: a queued job is `paused` at once; a running job gets `pause_requested` and its
    /// worker stops at the resume point. A repeat on a paused or pause-requested job. Refused while a
    /// cancel is pending and for final jobs. `id` may be a unique prefix.
    /// `control(_:id:actor:now:ifStateIn:)` whatever the job's state.
    public func control(_ command: JobCommand, id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        let answer = try control(command, id: id, actor: actor, now: now, ifStateIn: nil)
        guard let result = answer.result else { throw StoreError.notFound(id) }   // no state condition: never nil
        return result
    }

    public func requestPause(id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        try control(.pause, id: id, actor: actor, now: now)
    }

    /// Resumes a paused job (re-queued at its resume point), or withdraws a running job's pending
    /// pause. Refused for every other job: a queued or running job has nothing to resume, a job being
    /// cancelled cannot be resumed, and a final job needs `retry`.
    public func requestResume(id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        try control(.resume, id: id, actor: actor, now: now)
    }

    /// Cancels a job: a queued or paused job is `cancelled` at once (error code `cancelled`); a running
    /// job gets `cancel_requested` and its worker aborts — and if the worker stops it some other way
    /// first (a pause, a shutdown, a retry, a crash), it is cancelled then. A repeat on a cancelled
    /// or cancel-requested job. Refused for succeeded and failed jobs.
    public func requestCancel(id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        try control(.cancel(by: actor), id: id, actor: actor, now: now)
    }

    /// Re-opens a failed or cancelled job as a new series of attempts (`retried` → queued, attempts
    /// reset, error cleared). Refused for every other state.
    public func retry(id: String, actor: String, now: Int64) throws(StoreError) -> ControlResult {
        try control(.retry, id: id, actor: actor, now: now)
    }

    /// Adapters that cannot be the target of a copy refuse it with a message saying which can.
    public func importLog(from source: any JobStore, allowingRunning: Bool) throws(StoreError) -> LogImport {
        throw StoreError.invalidControl("this store (\(location)) cannot be the target of `jobctl migrate --to`; the target must be a postgres:// URL")
    }

    /// The counts of `stats`, through it, for adapters without a query of their own.
    public func queueStateCounts() throws(StoreError) -> [StoreStats.QueueStateCount] {
        try stats(queue: nil, now: Int64(Date().timeIntervalSince1970 * 1000)).counts
    }

    /// Adapters that do not implement `stats` yet refuse it with a message saying so.
    public func stats(queue: String?, now: Int64) throws(StoreError) -> StoreStats {
        throw StoreError.invalidControl("statistics are not supported by this store (\(location)) yet; `jobctl list` and `jobctl audit` work with it")
    }

    /// Adapters without a streaming read list the jobs in memory, newest first, and hand them over
    /// oldest first.
    public func forEachJob(filter: JobFilter, passes: Int, passingOver: PassedOver,
                           _ body: @escaping (_ pass: Int, _ job: JobRecord) throws(StoreError) -> Void) throws(StoreError) {
        try forEachListedJob(filter: filter, passes: passes, passingOver: passingOver, body)
    }

    /// `forEachJob` from a list read in memory (newest first, handed over oldest first): the default, and
    /// what streaming adapters do for a `--limit`ed selection, which is small by definition.
    public func forEachListedJob(filter: JobFilter, passes: Int, passingOver: PassedOver,
                                 _ body: @escaping (_ pass: Int, _ job: JobRecord) throws(StoreError) -> Void) throws(StoreError) {
        let jobs = try jobs(filter: filter, passingOver: passingOver)
        for pass in 1...max(1, passes) {
            for job in jobs.reversed() { try body(pass, job) }
        }
    }

    /// `forEachJob`, not counting the jobs it passes over.
    public func forEachJob(filter: JobFilter, passes: Int,
                           _ body: @escaping (_ pass: Int, _ job: JobRecord) throws(StoreError) -> Void) throws(StoreError) {
        try forEachJob(filter: filter, passes: passes, passingOver: PassedOver(), body)
    }

    /// Jobs matching `filter`, newest first, passing over those of kinds this jobctl does not know.
    public func jobs(filter: JobFilter) throws(StoreError) -> [JobRecord] { try jobs(filter: filter, passingOver: PassedOver()) }

    /// Every job, newest first.
    public func jobs() throws(StoreError) -> [JobRecord] { try jobs(filter: JobFilter()) }

    /// Built from `job(_:)`, one read per id: adapters answer it with one light query.
    public func controlStates(ids: [String]) throws(StoreError) -> [JobControlState] {
        var states: [JobControlState] = []
        for id in ids {
            if let record = try job(id) { states.append(JobControlState(record)) }
        }
        return states
    }

    /// `retryWithDependants` with no job taken as opened before.
    public func retryWithDependants(id: String, actor: String, now: Int64, ifStateIn states: Set<JobState>?,
                                    dryRun: Bool) throws(StoreError) -> (result: DependantsRetryResult?, state: JobState) {
        try retryWithDependants(id: id, actor: actor, now: now, ifStateIn: states, dryRun: dryRun, openedBefore: [])
    }

    /// Built from `events(jobID:)` and `blob(sha256:)`: reads the job's whole history (a rare path).
    public func landedEvent(_ pending: PendingEvent) throws(StoreError) -> JobEvent? {
        try landedEventInHistory(pending)
    }

    /// `landedEvent` as the job's history reads now: its newest event compared with `pending`.
    public func landedEventInHistory(_ pending: PendingEvent) throws(StoreError) -> JobEvent? {
        guard let newest = try events(jobID: pending.jobID).last else { return nil }
        return try isWritten(pending, as: newest) ? newest : nil
    }

    /// The newest event of the job written under `pending`'s lease token when it is `pending` as written
    /// (same type, token, actor and payload), or nil; read from the history as it stands, without
    /// waiting for a transaction that holds the job's row.
    ///
    /// A writer asks this when a write of `pending` was refused for a stale lease after a try whose
    /// outcome is unknown: that try may be what ended the lease (a `failed`, `succeeded` or `paused` that
    /// committed), and the refusal's own transaction locked the job's row after it, so whatever it wrote
    /// is there to read. Events of others (a retry, another worker's claim) may follow it: it is the
    /// newest of its lease token that counts, not the job's newest.
    public func landedEventUnderLease(_ pending: PendingEvent) throws(StoreError) -> JobEvent? {
        guard let token = pending.leaseToken,
              let newest = try events(jobID: pending.jobID).last(where: { $0.leaseToken == token }) else { return nil }
        return try isWritten(pending, as: newest) ? newest : nil
    }

    /// Whether `stored` is `pending` as the store wrote it: same type, lease token, actor and payload (a
    /// download-memory result compared by its stored blob's bytes).
    private func isWritten(_ pending: PendingEvent, as stored: JobEvent) throws(StoreError) -> Bool {
        guard stored.type == pending.type, stored.leaseToken == pending.leaseToken, stored.actor == pending.actor else { return false }
        if stored.payload == pending.payload { return true }
        // The store moves a download's bytes into a blob and writes its hash in their place.
        guard case .succeeded(let progress, var result) = pending.payload, let bytes = result.data,
              case .succeeded(_, let kept)? = Optional(stored.payload), let hash = kept.blob,
              try blob(sha256: hash) == bytes else { return false }
        result.data = nil
        result.blob = hash
        return stored.payload == .succeeded(progress, result: result)
    }

    /// How many jobs there are.
    public func countJobs() throws(StoreError) -> Int { try countJobs(filter: JobFilter()) }

    /// Up to 1,000 events after `afterSeq`, in log order.
    public func events(afterSeq: Int64) throws(StoreError) -> [JobEvent] { try events(afterSeq: afterSeq, limit: 1_000) }

    /// A store whose seqs are committed in the order they are taken (SQLite: one writer at a time) tails
    /// the log as it reads it.
    public func tailEvents(afterSeq: Int64, limit: Int) throws(StoreError) -> [JobEvent] {
        try events(afterSeq: afterSeq, limit: limit)
    }

    /// Appends one event in its own transaction and returns it as stored; throws its refusal or the
    /// transaction's failure.
    @discardableResult
    public func append(_ event: PendingEvent, now: Int64) throws(StoreError) -> JobEvent {
        guard let outcome = try append([event], now: now).first else {
            // append([one]) returns exactly one outcome per event given.
            throw StoreError.invalidControl("append returned no outcome for job \(event.jobID)")
        }
        return try outcome.get()
    }

    /// The job a key, full id or unique id prefix names (`resolveID`); `notFound` otherwise.
    /// A job whose history holds an event of a type this jobctl does not know is refused
    /// (`unknownEventType`): its row alone does not say what a newer jobctl made of it.
    public func job(resolving text: String) throws(StoreError) -> JobRecord {
        let id = try resolveID(text)
        guard let job = try job(id) else { throw StoreError.notFound(text) }
        if let type = try controlStates(ids: [job.id]).first?.newerEventType { throw StoreError.unknownEventType(jobID: job.id, type: type) }
        return job
    }
}
