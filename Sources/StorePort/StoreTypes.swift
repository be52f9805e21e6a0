import Checksums
import Foundation
import JobLifecycle
import JobModel
import Synchronization

// MARK: - PendingEvent

/// An event to append: what happened to which job, who says so, and under which guarantees.
public struct PendingEvent: Sendable, Equatable {
    /// The job the event belongs to.
    public var jobID: String
    /// What happened, with exactly that event's fields.
    public var payload: EventPayload {
        get { prepared.payload }
        set { prepared = PreparedPayload(newValue) }
    }
    /// The payload readied for the store where the event is made (see `PreparedPayload`); it holds the
    /// payload, so a pending event is copied (into the store's queue, its batches) as one reference.
    public private(set) var prepared: PreparedPayload
    /// A `succeeded` result's bytes (a download to memory) with the SHA-256 under which the store keeps
    /// them in its blobs; nil when the payload carries no bytes.
    public var hashedResult: HashedBytes? { prepared.hashedResult }
    /// Who appends it (`worker:<host>:<pid>`, `cli:<user>`).
    public var actor: String
    /// The lease token the appending worker holds: the append is refused (`staleLease`) unless the job
    /// is running under exactly this token. Nil for appends that are not a worker's (CLI control).
    public var leaseToken: Int64?
    /// The version the caller saw: the append is refused (`versionConflict`) unless it is still current.
    public var expectedVersion: Int?
    /// When the fact happened, when that was before the append (a worker's `started` written with the
    /// attempt's next event): the event's time, kept between the job's previous event and the append's
    /// own time. Nil: the append's time.
    public var occurredAtMs: Int64?

    /// The event's type.
    public var type: EventType { payload.type }
    /// The payload in its flat JSON shape.
    public var data: EventData { payload.wire }

    /// Creates a pending event.
    public init(jobID: String, actor: String, leaseToken: Int64? = nil, expectedVersion: Int? = nil,
                occurredAtMs: Int64? = nil, payload: EventPayload) {
        self.jobID = jobID
        self.prepared = PreparedPayload(payload)
        self.actor = actor
        self.leaseToken = leaseToken
        self.expectedVersion = expectedVersion
        self.occurredAtMs = occurredAtMs
    }

    /// Creates a pending event from a type and a payload in its flat JSON shape; refused
    /// (`invalidControl`) when `data` lacks a field `type` needs.
    public init(jobID: String, type: EventType, actor: String, leaseToken: Int64? = nil,
                expectedVersion: Int? = nil, data: EventData = EventData()) throws(StoreError) {
        let payload: EventPayload
        do {
            payload = try EventPayload(type: type, wire: data)
        } catch {
            throw StoreError.invalidControl("cannot append to job \(jobID): \(error)")
        }
        self.init(jobID: jobID, actor: actor, leaseToken: leaseToken, expectedVersion: expectedVersion, payload: payload)
    }
}

// MARK: - PreparedPayload

/// A reported payload readied for the store where the event is made (a worker's task), so that the
/// store's one thread, which every append of a worker waits for, neither hashes nor encodes it: a
/// `succeeded` result's bytes with their SHA-256, the payload as the log keeps it (those bytes replaced
/// by their hash, which names them in the blobs) and that payload's JSON. The store uses them when the
/// lifecycle decides exactly the reported payload, and makes its own otherwise.
///
/// A class of constants, so that an event handed from queue to batch is copied as one reference;
/// equal when the payloads are.
public final class PreparedPayload: Sendable, Equatable {
    /// The payload as reported.
    public let payload: EventPayload
    /// The result's bytes with their hash; nil when the payload carries no bytes.
    public let hashedResult: HashedBytes?
    /// The payload as the log keeps it.
    public let stored: EventPayload
    /// `stored`'s JSON; nil when it could not be encoded here (the store encodes it and says why).
    public let storedJSON: String?

    /// Readies `payload`.
    public init(_ payload: EventPayload) {
        self.payload = payload
        (stored, hashedResult) = Self.storedForm(of: payload)
        storedJSON = try? PayloadJSON.encode(stored)
    }

    /// `payload` as the log keeps it: a `succeeded` result's bytes, when there are more than
    /// `inlineResultLimit` of them, replaced by their SHA-256, which names them in the blobs, with those
    /// bytes and their hash (nil when the payload carries none or keeps them). The one place that decides
    /// it, for payloads readied here and for those the store readies itself.
    public static func storedForm(of payload: EventPayload) -> (stored: EventPayload, hashedResult: HashedBytes?) {
        guard case .succeeded(let progress, var result) = payload, let bytes = result.data,
              bytes.count > inlineResultLimit else { return (payload, nil) }
        let hashed = HashedBytes(bytes)
        result.blob = hashed.sha256
        result.data = nil
        return (.succeeded(progress, result: result), hashed)
    }

    /// The most bytes a download-to-memory result keeps in its `succeeded` event itself (base64 in the
    /// event's JSON) instead of in the content-addressed blobs. A blob costs a row in `blobs` and an entry
    /// in its index by hash, whose random keys put every result of a group commit on a page of its own
    /// (a drain of 10,000 64-byte results wrote ~19 index pages a commit, a third of the log's pages),
    /// and the event still carries the 64-character hash; 256 bytes in base64 take 344 characters.
    public static let inlineResultLimit = 256

    public static func == (lhs: PreparedPayload, rhs: PreparedPayload) -> Bool {
        lhs === rhs || lhs.payload == rhs.payload
    }
}

extension JobResult {
    /// download-memory: the SHA-256 (lowercase hex) of the result's bytes, whether they are in the blobs
    /// (`blob` names them) or in the event itself (`data`, at most `PreparedPayload.inlineResultLimit`).
    public var bytesSHA256: String? {
        blob ?? data.map(Digest.sha256Hex)
    }
}

// MARK: - HashedBytes

/// Bytes with their SHA-256 in lowercase hex, computed together: the hash cannot name other bytes.
public struct HashedBytes: Sendable, Equatable {
    /// The bytes.
    public let bytes: Data
    /// Their SHA-256, lowercase hex.
    public let sha256: String

    /// Hashes `bytes`.
    public init(_ bytes: Data) {
        self.bytes = bytes
        self.sha256 = Digest.sha256Hex(bytes)
    }
}

// MARK: - SubmitOutcome

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

// MARK: - ControlResult

/// What a control command did to one job.
/// Jobs of one state in `JobStore.tally`: how many, and the bytes they report done (moved so far for
/// a running job; the size for a succeeded transfer).
public struct JobTally: Sendable, Equatable {
    public var count: Int
    public var bytesDone: Int64

    public init(count: Int, bytesDone: Int64) {
        self.count = count
        self.bytesDone = bytesDone
    }
}

/// What `JobStore.controlEach` did to one job: as `control` answers (`result` nil when the job was in
/// none of the states asked for, `state` the state it is in after), and the events it appended.
public struct ControlAnswer: Sendable, Equatable {
    public var result: ControlResult?
    public var state: JobState
    /// The types of the events appended, in order (none for a repeat or a job left alone).
    public var events: [EventType]

    public init(result: ControlResult?, state: JobState, events: [EventType]) {
        self.result = result
        self.state = state
        self.events = events
    }
}

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

// MARK: - JobControlState

/// What a worker's control poll needs of a job it runs: its state and its open requests, without the
/// spec, result or history (`JobStore.controlStates(ids:)`).
public struct JobControlState: Sendable, Equatable {
    public let id: String
    public let state: JobState
    public let pauseRequested: Bool
    public let cancelRequested: Bool
    /// The type of an event in the job's history that this jobctl does not know (a newer jobctl wrote
    /// it, perhaps "hold this job"), nil when there is none (`NewerEvents`).
    public let newerEventType: String?

    public init(id: String, state: JobState, pauseRequested: Bool, cancelRequested: Bool, newerEventType: String? = nil) {
        self.id = id
        self.state = state
        self.pauseRequested = pauseRequested
        self.cancelRequested = cancelRequested
        self.newerEventType = newerEventType
    }

    /// The control state of a whole record.
    public init(_ record: JobRecord) {
        self.init(id: record.id, state: record.state, pauseRequested: record.pauseRequested,
                  cancelRequested: record.cancelRequested)
    }
}

// MARK: - ClaimedJob

/// A job a worker now holds, with the fencing token its appends must carry.
public struct ClaimedJob: Sendable, Equatable {
    /// The job as of its `claimed` event (state running).
    public var record: JobRecord
    /// The lease (fencing) token: pass it as `PendingEvent.leaseToken` and to `heartbeat`.
    public var token: Int64

    /// Creates a claimed job.
    public init(record: JobRecord, token: Int64) {
        self.record = record
        self.token = token
    }
}

// MARK: - RescuedJob

/// A running job whose lease had expired, as the rescue left it: back in the queue, or ended (`failed`
/// on its last attempt, `cancelled` or `paused` for a request pending on it). The worker that rescued it
/// logs it, and a drain counts one the rescue failed among its failures.
public struct RescuedJob: Sendable, Equatable {
    /// The job after the rescue's events.
    public var record: JobRecord
    /// The worker whose lease expired (its owner name as the lease recorded it).
    public var holder: String

    public init(record: JobRecord, holder: String) {
        self.record = record
        self.holder = holder
    }

    public var id: String { record.id }
}

// MARK: - ClaimRequest

/// What a worker asks of `EventStore.claim`: up to `limit` jobs from `queues` for `owner`.
public struct ClaimRequest: Sendable, Equatable {
    /// The lease owner and the events' actor.
    public var owner: String
    /// Queues to take jobs from; nil: any queue, empty: none.
    public var queues: [String]?
    /// At most this many jobs.
    public var limit: Int
    /// How long the lease lasts without a heartbeat.
    public var leaseMs: Int64
    /// The claim's time: runnable means `run_after ≤ now`; leases expire at `now + leaseMs`.
    public var now: Int64

    /// Creates a request.
    public init(owner: String, queues: [String]?, limit: Int, leaseMs: Int64, now: Int64) {
        self.owner = owner
        self.queues = queues
        self.limit = limit
        self.leaseMs = leaseMs
        self.now = now
    }

    /// Whether the request cannot claim anything (no slot, or no queue).
    public var isEmpty: Bool { limit <= 0 || queues.map(\.isEmpty) ?? false }
}

// MARK: - LeaseRenewal

/// What a worker's heartbeat (`JobStore.renewLeases`) did to each lease it was given.
public struct LeaseRenewal: Sendable, Equatable {
    /// The jobs whose lease the server extended to the heartbeat's `now + leaseMs`.
    public var renewed: Set<String>
    /// The jobs whose lease `owner` no longer holds under the token given (rescued, ended, taken over).
    public var lost: Set<String>

    /// A lease in neither set was not extended this time: its job's row was held by another write still
    /// in progress (a commit of the worker's own, a control); it keeps the expiry it had.
    public init(renewed: Set<String>, lost: Set<String>) {
        self.renewed = renewed
        self.lost = lost
    }
}

// MARK: - AppendAndClaimOutcome

/// What `EventStore.append(_:now:thenClaim:)` did: the per-event outcomes and the claim's.
public struct AppendAndClaimOutcome: Sendable {
    /// One outcome per event given, in order (as `append(_:now:)` returns them).
    public var appended: [Result<JobEvent, StoreError>]
    /// The jobs claimed, or why the claim was refused.
    public var claimed: Result<[ClaimedJob], StoreError>

    /// Creates an outcome.
    public init(appended: [Result<JobEvent, StoreError>], claimed: Result<[ClaimedJob], StoreError>) {
        self.appended = appended
        self.claimed = claimed
    }
}

// MARK: - JobFilter

/// Which jobs `JobStore.jobs(filter:)` lists and `JobStore.countJobs(filter:)` counts. Nil fields do not filter.
public struct JobFilter: Sendable, Equatable {
    /// Only jobs in these states.
    public var states: Set<JobState>?
    /// Only jobs of these kinds.
    public var kinds: Set<JobKind>?
    /// Only jobs in this queue.
    public var queue: String?
    /// At most this many jobs (newest first).
    public var limit: Int?
    /// Submitted at or after this time (ms).
    public var createdSince: Int64?
    /// Submitted before this time (ms).
    public var createdUntil: Int64?
    /// Finished at or after this time (ms); unfinished jobs are left out when set.
    public var finishedSince: Int64?
    /// Finished before this time (ms); unfinished jobs are left out when set.
    public var finishedUntil: Int64?
    /// Only jobs of this batch (the id `submit` printed for a folder, glob or prefix).
    public var batch: String?
    /// Whether `jobs(filter:)` reads each succeeded job's result (its `succeeded` event's payload). A
    /// listing that shows none leaves it false: the records' `result` is nil, and no payload is read —
    /// a download-memory result's bytes, wherever they are kept, never come into memory to be dropped.
    /// Chooses what is read, not which jobs match.
    public var readsResults: Bool

    /// Creates a filter; the default lists every job.
    public init(states: Set<JobState>? = nil, kinds: Set<JobKind>? = nil, queue: String? = nil, limit: Int? = nil,
                createdSince: Int64? = nil, createdUntil: Int64? = nil,
                finishedSince: Int64? = nil, finishedUntil: Int64? = nil, batch: String? = nil, readsResults: Bool = true) {
        self.states = states
        self.kinds = kinds
        self.queue = queue
        self.limit = limit
        self.createdSince = createdSince
        self.createdUntil = createdUntil
        self.finishedSince = finishedSince
        self.finishedUntil = finishedUntil
        self.batch = batch
        self.readsResults = readsResults
    }
}

// MARK: - LeftoverCandidates

/// A final transfer job that may have left hidden files on local disk (a partial download, a `file://`
/// upload session or sidecar temporary): what the orphan sweep needs to find them.
public struct FinishedTransferRecord: Sendable, Equatable {
    public var id: String
    /// succeeded, failed or cancelled.
    public var state: JobState
    public var kind: JobKind
    /// download-file: the local path; uploads and update-metadata: the destination reference; fetch-url:
    /// its source reference.
    public var destination: String?
    /// The last resume point the log recorded.
    public var resumePoint: ResumePoint?
    /// When the job reached its final state.
    public var finishedAtMs: Int64
    /// The lease tokens of the job's claims, which name the sidecar temporaries and `file://` upload
    /// sessions its attempts wrote (jobs that write a `file://` sidecar; empty for downloads).
    public var leaseTokens: [Int64]

    public init(id: String, state: JobState, kind: JobKind, destination: String?, resumePoint: ResumePoint?,
                finishedAtMs: Int64, leaseTokens: [Int64] = []) {
        self.id = id
        self.state = state
        self.kind = kind
        self.destination = destination
        self.resumePoint = resumePoint
        self.finishedAtMs = finishedAtMs
        self.leaseTokens = leaseTokens
    }

    /// The tokens of a comma-separated list the stores' reads aggregate (nil or empty: none).
    public static func leaseTokens(fromList list: String?) -> [Int64] {
        guard let list, !list.isEmpty else { return [] }
        return list.split(separator: ",").compactMap { Int64($0) }
    }
}

/// What `JobStore.leftoverCandidates(finishedSince:)` returns: the final jobs whose local files may be
/// left over, and the resume points of every unfinished job (whose files must never be touched).
public struct LeftoverCandidates: Sendable, Equatable {
    public var finished: [FinishedTransferRecord]
    public var unfinishedResumePoints: [ResumePoint]

    public init(finished: [FinishedTransferRecord], unfinishedResumePoints: [ResumePoint]) {
        self.finished = finished
        self.unfinishedResumePoints = unfinishedResumePoints
    }
}

// MARK: - ReplayDifference

/// One column where the stored projection and the fold of the log disagree.
public struct ReplayDifference: Sendable, Equatable, Hashable, CustomStringConvertible {
    /// The job.
    public var jobID: String
    /// The `jobs` column, or `(row)` when the whole row is missing on one side.
    public var column: String
    /// The stored value as text (nil: no stored row).
    public var stored: String?
    /// The rebuilt value as text (nil: the log has no such job).
    public var rebuilt: String?

    /// Creates a difference.
    public init(jobID: String, column: String, stored: String?, rebuilt: String?) {
        self.jobID = jobID
        self.column = column
        self.stored = stored
        self.rebuilt = rebuilt
    }

    /// `JOBID column: stored X, rebuilt Y`.
    public var description: String {
        "\(jobID) \(column): stored \(stored ?? "(no row)"), rebuilt \(rebuilt ?? "(no job in the log)")"
    }
}

// MARK: - ReplayReport

/// What `EventStore.replay(verify:)` found (and did).
public struct ReplayReport: Sendable, Equatable {
    /// Events folded.
    public var eventsRead: Int
    /// Jobs the fold produced.
    public var jobsRebuilt: Int
    /// Columns where the stored projection differs from the fold (computed before any rewrite).
    public var differences: [ReplayDifference]
    /// Oddities of the log itself (events before their job's `submitted`, version gaps).
    public var problems: [String]
    /// Whether the `jobs` table was rewritten from the fold.
    public var rewritten: Bool
    /// The jobs not checked, by id with the type of their first event this jobctl does not know: a newer
    /// jobctl wrote it, and only as new a jobctl can fold their history (not a fault of the log).
    public var unchecked: [String: String]

    /// Whether the projection matched the log exactly and the log had no problems (jobs `unchecked` aside).
    public var isConsistent: Bool { differences.isEmpty && problems.isEmpty }

    /// Creates a report.
    public init(eventsRead: Int, jobsRebuilt: Int, differences: [ReplayDifference], problems: [String], rewritten: Bool,
                unchecked: [String: String] = [:]) {
        self.eventsRead = eventsRead
        self.jobsRebuilt = jobsRebuilt
        self.differences = differences
        self.problems = problems
        self.rewritten = rewritten
        self.unchecked = unchecked
    }
}

/// The job rows a worker may take — claim, rescue, wait for — as one SQL condition on `jobs` (both
/// engines): of a kind this jobctl runs, below the largest version, and with no event of a type this
/// jobctl does not know. A job of a kind a newer jobctl added stays for a newer worker (read, it stopped
/// every claim of an older one: its row could not be decoded, every 5 s for ever); a row at the largest
/// version takes no event (the lifecycle refuses it; claimed, it trapped the worker at every start); a
/// job whose history holds a newer jobctl's event (one that may mean "hold this job") was claimed and
/// run as if that event were not there (see `NewerEvents`).
public enum WorkableRows {
    /// The condition on the table's own columns, or on `alias`'s (`j`).
    public static func condition(alias: String? = nil) -> String {
        let table = alias ?? "jobs"
        return "\(table).kind IN (\(knownKinds)) AND \(table).version < \(Int64.max)"
            + " AND NOT EXISTS (SELECT 1 FROM events ev WHERE ev.job_id = \(table).id AND \(NewerEvents.condition(alias: "ev")))"
    }

    /// The kinds this jobctl runs, as an SQL list (`'upload-file', 'upload-data', …`).
    static let knownKinds = JobKind.allCases.map { "'\($0.rawValue)'" }.joined(separator: ", ")
}

// MARK: - NewerEvents

/// Events of a type this jobctl does not know: during a rolling upgrade a newer jobctl appends them to
/// the log older ones share. Such an event may change what the job may do (a newer "hold this job"), so
/// a jobctl that cannot fold it neither runs nor changes the job, and says so instead of calling the log
/// damaged.
///
/// Found through a partial index of the events whose type is none of `indexedTypes` (SQLite migration
/// 15, PostgreSQL 17), which holds no entry while every event is of a type all jobctls since then know:
/// a claim's look for them is a probe of an empty index (~0.1 µs a job claimed, SQLite), and no append
/// of a known type writes an entry.
public enum NewerEvents {
    /// The event types of the partial index's condition, word for word and in its order (a planner uses
    /// the index only for the same condition): the types every jobctl since that migration knows. Never
    /// changed: a type added later is excluded by a condition of its own (`condition`).
    static let indexedTypes = ["submitted", "claimed", "started", "progress", "pause_requested", "paused", "resume_requested",
                               "cancel_requested", "cancelled", "attempt_failed", "lease_expired", "released", "succeeded",
                               "failed", "retried", "archived"]

    /// The SQL condition on an `events` row aliased `alias` (`ev`) that its type is one this jobctl does
    /// not know: the partial index's condition, as comparisons in its order (no IN list: see the
    /// migration), and the types added since excluded too.
    public static func condition(alias: String) -> String {
        let addedSince = EventType.allCases.map(\.rawValue).filter { !indexedTypes.contains($0) }
        return (indexedTypes + addedSince).map { "\(alias).type <> '\($0)'" }.joined(separator: " AND ")
    }

    /// The SQL that reads every job with such an event, in `states` (nil: any), as its id and one such
    /// event's type (`jobsWithNewerEvents`).
    ///
    /// The index is read first and the jobs it names looked up after, by id: joined to `jobs` directly,
    /// SQLite read every job in those states and probed the index once for each.
    public static func jobsSQL(inStates states: Set<JobState>?) -> String {
        let newer = "SELECT ev.job_id, min(ev.type) AS type FROM events ev WHERE \(condition(alias: "ev")) GROUP BY ev.job_id"
        guard let states else { return newer }
        let listed = states.map { "j.state = '\($0.rawValue)'" }.sorted().joined(separator: " OR ")
        return "SELECT n.job_id, n.type FROM (\(newer)) AS n JOIN jobs j ON j.id = n.job_id WHERE \(listed)"
    }

    /// The SQL that reads the type of one job's first such event; `parameter` is the job id's
    /// placeholder (`?`, `$1`), or a column (`jobs.id`) for a sub-select.
    public static func firstOfJobSQL(parameter: String) -> String {
        "SELECT ev.type FROM events ev WHERE ev.job_id = \(parameter) AND \(condition(alias: "ev")) ORDER BY ev.seq LIMIT 1"
    }
}

// MARK: - PassedOver

/// The jobs a read of many (`list`, `audit`, a bulk control, `stats`' running jobs) passed over because
/// this jobctl does not know their kind, or the type of an event in their history: a newer jobctl
/// submitted them or wrote that event, and a log shared during a rolling upgrade holds them. One such
/// job made every such command fail (or, for an event, was listed and changed as if the event were not
/// there); now the others are read, and the command says what it left out.
public final class PassedOver: Sendable {
    private let byKind = Mutex<[String: Int]>([:])
    private let byEventType = Mutex<[String: Int]>([:])

    public init() {}

    /// Counts one job of `kind`, which this jobctl does not know.
    public func note(kind: String) {
        byKind.withLock { $0[kind, default: 0] += 1 }
    }

    /// Counts one job with an event of `type`, which this jobctl does not know.
    public func note(eventType type: String) {
        byEventType.withLock { $0[type, default: 0] += 1 }
    }

    /// `jobs` without those in `newer` (job id to the type of one of its events this jobctl does not
    /// know, `JobStore.jobsWithNewerEvents`), each of which is counted.
    public func passingOver(_ newer: [String: String], in jobs: [JobRecord]) -> [JobRecord] {
        guard !newer.isEmpty else { return jobs }
        return jobs.filter { job in
            guard let type = newer[job.id] else { return true }
            note(eventType: type)
            return false
        }
    }

    /// Counts what `other` counted.
    public func add(_ other: PassedOver) {
        let (kinds, types) = (other.byKind.withLock { $0 }, other.byEventType.withLock { $0 })
        byKind.withLock { mine in
            for (kind, count) in kinds { mine[kind, default: 0] += count }
        }
        byEventType.withLock { mine in
            for (type, count) in types { mine[type, default: 0] += count }
        }
    }

    /// "2 jobs of kinds 'a', 'b', which this jobctl does not know, were VERB: …" (at most five kinds
    /// named), and as much for the jobs with events of types it does not know, on a line of their own;
    /// nil when none was passed over.
    public func sentence(_ verb: String) -> String? {
        let lines = [kindSentence(verb), eventTypeSentence(verb)].compactMap { $0 }
        return lines.isEmpty ? nil : lines.joined(separator: "\n")
    }

    private func kindSentence(_ verb: String) -> String? {
        let counts = byKind.withLock { $0 }
        let total = counts.values.reduce(0, +)
        guard total > 0 else { return nil }
        let subject = total == 1 ? "1 job of kind \(Self.quotedNames(counts.keys)), which this jobctl does not know, was"
            : "\(total) jobs of kind\(counts.count == 1 ? "" : "s") \(Self.quotedNames(counts.keys)), which this jobctl does not know, were"
        return "\(subject) \(verb): a newer jobctl submitted \(total == 1 ? "it" : "them"); upgrade this jobctl to include \(total == 1 ? "it" : "them")"
    }

    private func eventTypeSentence(_ verb: String) -> String? {
        let counts = byEventType.withLock { $0 }
        let total = counts.values.reduce(0, +)
        guard total > 0 else { return nil }
        let types = "type\(counts.count == 1 ? "" : "s") \(Self.quotedNames(counts.keys))"
        let subject = total == 1 ? "1 job with an event of \(types), which this jobctl does not know, was"
            : "\(total) jobs with events of \(types), which this jobctl does not know, were"
        return "\(subject) \(verb): a newer jobctl wrote \(counts.count == 1 && total == 1 ? "it" : "them"); "
            + "upgrade this jobctl to include \(total == 1 ? "that job" : "those jobs")"
    }

    /// At most five of `names` (kinds or event types as stored), sorted, quoted and shown as stored names
    /// are, then `…` when there are more.
    public static func quotedNames(_ names: some Collection<String>) -> String {
        Set(names).sorted().prefix(5).map { "'" + TerminalText.storedName($0) + "'" }.joined(separator: ", ")
            + (Set(names).count > 5 ? ", …" : "")
    }
}

// MARK: - StoredResult

/// What a read of a succeeded job's result finds at the job's version, as both stores select it: the
/// `succeeded` event's payload (or its result), or `notSucceededMark` and the type of the event that is
/// there instead (the mark alone: no event). `succeeded` is final and the only event with a result, so
/// any other event there is a damaged or hand-edited log: read as a payload it showed the job with no
/// result (`audit` and `show` printed no checksum, `result` said a succeeded job had none).
public enum StoredResult {
    /// What no JSON text starts with: the column holds an event type, not a payload.
    public static let notSucceededMark = "!"

    /// The payload in `text` (nil: the job did not succeed, or its result was not read), or the error
    /// for the event that is at the job's version instead. An event of a type this jobctl does not know
    /// is a newer jobctl's, not damage: the job reads with no result, as before.
    public static func payload(_ text: String?, jobID: String, version: Int) throws(StoreError) -> String? {
        guard let text, text.hasPrefix(notSucceededMark) else { return text }
        let type = String(text.dropFirst(notSucceededMark.count))
        if !type.isEmpty, EventType(rawValue: type) == nil { return nil }
        let found = type.isEmpty ? "there is no event at its version (\(version))"
            : "the event at its version (\(version)) is '\(TerminalText.storedName(type))'"
        throw StoreError.corrupt("job \(jobID) is succeeded, but \(found), not the 'succeeded' event that holds its result")
    }

    /// The error for a `succeeded` event at `version` that holds no result.
    public static func noResult(jobID: String, version: Int) -> StoreError {
        .corrupt("job \(jobID) is succeeded, but its 'succeeded' event (version \(version)) holds no result")
    }
}
