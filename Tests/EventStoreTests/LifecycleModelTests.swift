import Foundation
import JobLifecycle
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore
@testable import PostgresStore

/// A seeded, randomized, model-based differential test of the job lifecycle: sequences of operations
/// over a few jobs (submits alone and in batches, with keys, priorities, schedules, retry limits and
/// `after:`; claims by several workers with several lease lengths; a worker's reports, alone and in
/// group commits, under live, stale or missing tokens and expected versions; heartbeats; lease expiry
/// and rescue; pause, resume, cancel and retry at every stage, alone or with a bulk form's state
/// guard (`ifStateIn`); `retry --with-dependants`, guarded or not, and its dry run; `archive` of the
/// jobs finished before a time (less those a job staying waits for); `archive --blobs-before` and its
/// dry run) run in lockstep against three implementations:
///
/// - the model: `JobLifecycle` values, one per job, with the store's rules around them (claim order,
///   dependencies, leases, rescue) written here again from their documentation, in memory;
/// - the SQLite store; and the PostgreSQL store (the tests' server), one store each per group of
///   sequences, every sequence ending with its jobs final so the next finds nothing of it to claim or
///   rescue.
///
/// After every step: every implementation's answer (accepted or refused, and how) is the same; each
/// store's projection of every job is the model's record; it is the fold of the store's own events;
/// each store's events are the model's, in the same order; the lease expiries and the `after:` waits
/// are the model's; and, on every implementation, no event follows a final state but `retried`,
/// versions are contiguous, seqs grow, tokens grow, attempts stay within `max_attempts`. After every
/// sequence, `replay --verify` on both stores.
///
/// Everything is derived from the seed: a failure prints the seed, the step and the steps up to it
/// (the shortest failing prefix), and `JOBCTL_LIFECYCLE_SEED=N` runs that seed alone.
@Suite("Lifecycle model", .onTestThreads, .serialized)
struct LifecycleModelTests {
    /// Sequences per run: 20 (~1,400 steps, each a write and four reads per store: ~15 s on a busy
    /// two-core machine); `JOBCTL_LIFECYCLE_SEQUENCES=200` for a soak (~160 s there).
    static let sequences = ProcessInfo.processInfo.environment["JOBCTL_LIFECYCLE_SEQUENCES"].flatMap(Int.init) ?? 20
    /// Random steps per sequence, before the steps that end its jobs.
    static let steps = 60
    /// Sequences that share one store per engine.
    static let sequencesPerStore = 25

    @Test("the stores follow the lifecycle model step by step, and agree with each other")
    func storesFollowTheModel() throws {
        StuckTests.allow(seconds: Double(Self.sequences) * 5 + 600)
        let seeds: [UInt64]
        if let one = ProcessInfo.processInfo.environment["JOBCTL_LIFECYCLE_SEED"].flatMap(UInt64.init) {
            seeds = [one]
        } else {
            seeds = (0..<UInt64(Self.sequences)).map { 0x10BC_7000 &+ $0 }
        }
        var counts: [String: Int] = [:]
        var index = 0
        while index < seeds.count {
            let group = Array(seeds[index..<min(seeds.count, index + Self.sequencesPerStore)])
            let sqlite = try StoreFixture("lifecycle-model", engine: .sqlite)
            let postgres = try StoreFixture("lifecycle_model", engine: .postgres)
            defer { sqlite.remove(); postgres.remove() }
            for (offset, seed) in group.enumerated() {
                let base = 1_700_000_000_000 + Int64(index + offset) * 100_000_000
                let run = try LifecycleRun(seed: seed, base: base, stores: [sqlite, postgres])
                if let failure = try run.run(steps: Self.steps, counts: &counts) {
                    Issue.record(Comment(rawValue: failure))
                    return
                }
            }
            index += group.count
        }
        // The generator reaches what it is meant to: each of these happened in some sequence.
        for outcome in ["claimed", "staleLease", "versionConflict", "invalidTransition", "invalidControl", "repeat",
                        "rescued", "reopened", "dependency cancel", "keyConflict", "settled", "lost lease", "blob",
                        "skipped", "dry run", "bulk dry run", "expired", "archived", "kept for dependants",
                        "retry of a job that could never run", "attempt_failed of a last attempt"]
            where seeds.count >= 20 {
            #expect(counts[outcome, default: 0] > 0, "no sequence reached '\(outcome)': \(counts)")
        }
    }
}

// MARK: - Random numbers

/// The model's choices, on TestSupport's SplitMix64 (`SeededGenerator`, whose `chance` it also uses).
extension SeededGenerator {
    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self) }
    mutating func int64(_ range: ClosedRange<Int64>) -> Int64 { Int64.random(in: range, using: &self) }
    mutating func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &self)] }
    /// One of `choices` by weight.
    mutating func weighted<T>(_ choices: [(T, Int)]) -> T {
        var roll = Int.random(in: 0..<choices.reduce(0) { $0 + $1.1 }, using: &self)
        for (value, weight) in choices {
            if roll < weight { return value }
            roll -= weight
        }
        return choices[choices.count - 1].0
    }
}

// MARK: - Steps

/// A job named in a step, as every implementation resolves it to its own id.
enum JobName: CustomStringConvertible {
    /// The nth job created in the sequence.
    case job(Int)
    /// An idempotency key (of this sequence, or one that names nothing).
    case key(String)

    var description: String {
        switch self {
        case .job(let index): "J\(index)"
        case .key(let key): "key:\(key)"
        }
    }
}

/// One spec of a submit.
struct SubmittedSpec: CustomStringConvertible {
    var kind: JobKind
    var key: String?
    var priority: Int
    var maxAttempts: Int
    var queue: String
    var runAfterMs: Int64?
    var ifExists: IfExists?
    var after: [JobName]

    var description: String {
        "\(kind.rawValue) key=\(key ?? "-") prio=\(priority) max=\(maxAttempts) q=\(queue)"
            + (runAfterMs.map { " at=\($0)" } ?? "") + (ifExists.map { " if_exists=\($0.rawValue)" } ?? "")
            + (after.isEmpty ? "" : " after=\(after)")
    }
}

/// What a worker reports.
enum Report: CustomStringConvertible {
    case started(occurredEarlierBy: Int64?)
    case progress(Int64)
    case succeeded(resultBytes: Int)
    case retryable(retryAtMs: Int64)
    case failed(limit: Bool)
    case paused
    case released
    case cancelled

    var description: String {
        switch self {
        case .started(let earlier): "started" + (earlier.map { "(-\($0)ms)" } ?? "")
        case .progress(let bytes): "progress(\(bytes))"
        case .succeeded(let bytes): "succeeded(\(bytes)B)"
        case .retryable(let at): "attempt_failed(retry at \(at))"
        case .failed(let limit): limit ? "failed(retry limit)" : "failed"
        case .paused: "paused"
        case .released: "released"
        case .cancelled: "cancelled"
        }
    }

    func payload() -> EventPayload {
        let error503 = StorageError(.unknown, "HTTP 503: the server is busy", httpStatus: 503, retryable: true)
        switch self {
        case .started: return .started(TransferProgress(bytesDone: 0, bytesTotal: 100))
        case .progress(let bytes): return .progress(TransferProgress(bytesDone: bytes, bytesTotal: 100))
        case .succeeded(let bytes):
            let data = bytes > 0 ? Data((0..<bytes).map { UInt8(truncatingIfNeeded: $0 &* 7) }) : nil
            return .succeeded(TransferProgress(bytesDone: 100, bytesTotal: 100), result: JobResult(size: 100, data: data))
        case .retryable(let at): return .attemptFailed(TransferProgress(bytesDone: 10), error: error503, retryAtMs: at)
        case .failed(let limit):
            let error = limit ? StorageError(.retryLimitExceeded, "no attempts left", cause: error503.message)
                : StorageError(.objectNotFound, "no such object", httpStatus: 404)
            return .failed(.none, error: error, reason: nil)
        case .paused: return .paused(TransferProgress(bytesDone: 40), reason: "pause requested")
        case .released: return .released(TransferProgress(bytesDone: 50), reason: "the worker is shutting down")
        case .cancelled:
            return .cancelled(.none, error: StorageError(.cancelled, "cancelled on request"), reason: nil)
        }
    }
}

/// One report of an append: which job, under which claim's token (nil: none), with which expected version.
struct ReportStep: CustomStringConvertible {
    var job: Int
    var claim: Int?
    var report: Report
    var expectedVersion: Int?

    var description: String {
        "J\(job) \(report) token=" + (claim.map { "#\($0)" } ?? "none") + (expectedVersion.map { " v=\($0)" } ?? "")
    }
}

struct ClaimStep: CustomStringConvertible {
    var worker: Int
    var limit: Int
    var leaseMs: Int64
    var queues: [String]?

    var description: String { "w\(worker) limit=\(limit) lease=\(leaseMs) queues=\(queues.map { "\($0)" } ?? "any")" }
}

enum ControlStep: String {
    case pause, resume, cancel, retry
}

enum LifecycleStep: CustomStringConvertible {
    case submit([SubmittedSpec])
    case claim(ClaimStep)
    case append([ReportStep], thenClaim: ClaimStep?)
    case heartbeat(worker: Int, claims: [Int], leaseMs: Int64)
    case rescue
    /// With `ifStateIn`: a bulk form's guard (the job is acted on only while in one of those states).
    case control(job: Int, ControlStep, ifStateIn: Set<JobState>? = nil)
    /// With `ifStateIn`, as `control`; a `dryRun` plans and writes nothing.
    case retryWithDependants(job: Int, ifStateIn: Set<JobState>? = nil, dryRun: Bool = false)
    /// The dry run of a bulk `retry --with-dependants`: each job's plan takes the jobs the plans before
    /// it opened as open (`openedBefore`); a job one of them reopened is not planned again.
    case bulkRetryDryRun(jobs: [Int])
    /// `archive`: the final jobs that finished before `finishedBefore` leave the log.
    case archive(finishedBefore: Int64)
    /// `archive --blobs-before` (a `dryRun` only lists).
    case expireBlobs(finishedBefore: Int64, dryRun: Bool)

    var description: String {
        switch self {
        case .submit(let specs): "submit \(specs)"
        case .claim(let claim): "claim \(claim)"
        case .append(let reports, let claim): "append \(reports)" + (claim.map { " then claim \($0)" } ?? "")
        case .heartbeat(let worker, let claims, let leaseMs): "heartbeat w\(worker) claims=\(claims.map { "#\($0)" }) lease=\(leaseMs)"
        case .rescue: "rescue"
        case .control(let job, let command, let states): "\(command.rawValue) J\(job)" + stateGuard(states)
        case .retryWithDependants(let job, let states, let dryRun):
            "retry J\(job) --with-dependants" + stateGuard(states) + (dryRun ? " --dry-run" : "")
        case .bulkRetryDryRun(let jobs): "retry \(jobs.map { "J\($0)" }) --with-dependants --dry-run"
        case .archive(let before): "archive --before \(before)"
        case .expireBlobs(let before, let dryRun): "archive --blobs-before \(before)" + (dryRun ? " --dry-run" : "")
        }
    }
}

/// A bulk form's state guard, for a step's description.
func stateGuard(_ states: Set<JobState>?) -> String {
    states.map { " if-state-in \($0.map(\.rawValue).sorted())" } ?? ""
}

/// The first 12 hex digits of a blob's hash: enough to tell the sequence's few blobs apart.
func blobName(_ sha256: String) -> String { "b" + sha256.prefix(12) }

// MARK: - An implementation under test

/// What every implementation (the model, each store) keeps beside its jobs: its own ids and tokens,
/// for the steps' logical names and the normalized views compared across implementations.
struct Names {
    /// Own id of the nth job created.
    var ids: [String] = []
    var nameOfID: [String: String] = [:]
    /// Own token of the nth claim, and the job it claimed.
    var claims: [(job: String, token: Int64)] = []
    var claimOfToken: [Int64: Int] = [:]
    /// Own ids of the jobs an archive removed from the log.
    var archived: Set<String> = []
    /// Own ids of the jobs still in the log.
    var live: [String] { ids.filter { !archived.contains($0) } }

    mutating func created(_ id: String) {
        nameOfID[id] = "J\(ids.count)"
        ids.append(id)
    }

    mutating func claimed(_ id: String, token: Int64) {
        claimOfToken[token] = claims.count
        claims.append((id, token))
    }

    func name(_ id: String) -> String { nameOfID[id] ?? "?\(id)" }

    /// `text` with every own id replaced by its name.
    func normalized(_ text: String) -> String {
        var text = text
        for (id, name) in nameOfID where text.contains(id) {
            text = text.replacingOccurrences(of: id, with: name)
        }
        return text
    }

    func token(_ token: Int64?) -> String {
        guard let token else { return "-" }
        return claimOfToken[token].map { "#\($0)" } ?? "?\(token)"
    }

    func error(_ error: StoreError) -> String {
        switch error {
        // The token's number is each implementation's own.
        case .staleLease(let jobID, let token): return "staleLease \(name(jobID)) \(self.token(token))"
        default:
            let kind = Mirror(reflecting: error).children.first?.label ?? "\(error)"
            // An id of no job (one a refused submit would have created) is each implementation's own too.
            let text = Self.unknownID.stringByReplacingMatches(in: normalized(error.description), range: NSRange(location: 0, length: normalized(error.description).utf16.count), withTemplate: "<id>")
            return "\(kind): \(text)"
        }
    }

    /// A job id (a ULID) that `normalized` did not replace.
    private static let unknownID = try! NSRegularExpression(pattern: "\\b[0-9A-HJKMNP-TV-Z]{26}\\b")

    func record(_ record: JobRecord) -> String {
        var record = record
        record.seq = 0
        let token = record.leaseToken
        record.leaseToken = nil
        let json = (try? StoreJSON.encode(record)) ?? "unencodable \(record)"
        return normalized(json) + " token=\(self.token(token))"
    }

    func event(_ event: JobEvent) -> String {
        let json = (try? StoreJSON.encode(event.payload.wire)) ?? "unencodable"
        return "v\(event.version) \(event.type.rawValue) at=\(event.atMs) by=\(event.actor) token=\(token(event.leaseToken)) "
            + normalized(json)
    }
}

/// What an implementation holds after a step, normalized: comparable across implementations.
struct Snapshot: Equatable {
    /// Each job's record, by name.
    var records: [String: String] = [:]
    /// Each job's events, by name, oldest first.
    var events: [String: [String]] = [:]
    /// The log order of the sequence's events: job name and version.
    var order: [String] = []
    /// Lease expiries of running jobs.
    var leaseExpiries: [String: Int64] = [:]
    /// `after:` waits: "job waits for dependency".
    var waits: Set<String> = []
}

protocol LifecycleImplementation: AnyObject {
    var label: String { get }
    var names: Names { get }
    /// Runs the step at `now`; returns its outcome, normalized.
    func perform(_ step: LifecycleStep, now: Int64) throws -> String
    /// The implementation's state, normalized, after checking what it must hold on its own (the
    /// projection is the fold of the events, versions, seqs, final states); a broken invariant throws.
    func snapshot() throws -> Snapshot
}

struct InvariantBroken: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// What must hold of any implementation's jobs and events, whatever the model says.
func checkInvariants(records: [String: JobRecord], events: [String: [JobEvent]], logOrder: [JobEvent], names: Names,
                     label: String) throws {
    for (id, record) in records {
        let name = names.name(id)
        let own = events[id] ?? []
        guard let first = own.first else { throw InvariantBroken("\(label): \(name) has a row and no events") }
        if own.map(\.version) != Array(1...own.count) {
            throw InvariantBroken("\(label): \(name)'s versions are \(own.map(\.version))")
        }
        if record.version != own.count { throw InvariantBroken("\(label): \(name) is at version \(record.version) with \(own.count) events") }
        if record.seq != first.seq ?? -1 { throw InvariantBroken("\(label): \(name)'s seq \(record.seq) is not its submission's \(first.seq ?? -1)") }
        for (earlier, later) in zip(own, own.dropFirst()) {
            if (later.seq ?? 0) <= (earlier.seq ?? 0) { throw InvariantBroken("\(label): \(name)'s seqs do not grow: \(own.map { $0.seq ?? 0 })") }
            if later.atMs < earlier.atMs { throw InvariantBroken("\(label): \(name)'s events go back in time at v\(later.version)") }
            switch earlier.type {
            case .succeeded:
                throw InvariantBroken("\(label): \(name) has '\(later.type.rawValue)' (v\(later.version)) after 'succeeded'")
            case .failed, .cancelled:
                if later.type != .retried {
                    throw InvariantBroken("\(label): \(name) has '\(later.type.rawValue)' (v\(later.version)) after '\(earlier.type.rawValue)'")
                }
            default: break
            }
        }
        let running = record.state == .running
        if running != (record.leaseOwner != nil) || running != (record.leaseToken != nil) {
            throw InvariantBroken("\(label): \(name) is \(record.state.rawValue) with lease \(record.leaseOwner ?? "-")/\(names.token(record.leaseToken))")
        }
        if !running && (record.pauseRequested || record.cancelRequested) {
            throw InvariantBroken("\(label): \(name) is \(record.state.rawValue) with a request pending")
        }
        if record.attempts < 0 || record.attempts > record.maxAttempts || (running && record.attempts < 1) {
            throw InvariantBroken("\(label): \(name) is \(record.state.rawValue) at attempt \(record.attempts) of \(record.maxAttempts)")
        }
        if (record.finishedAtMs != nil) != [.succeeded, .failed, .cancelled].contains(record.state) {
            throw InvariantBroken("\(label): \(name) is \(record.state.rawValue) with finished_at \(record.finishedAtMs.map(String.init) ?? "nil")")
        }
    }
    let seqs = logOrder.map { $0.seq ?? 0 }
    if seqs != seqs.sorted() || Set(seqs).count != seqs.count { throw InvariantBroken("\(label): the log's seqs do not grow") }
    let tokens = names.claims.map(\.token)
    if tokens != tokens.sorted() || Set(tokens).count != tokens.count {
        throw InvariantBroken("\(label): lease tokens did not grow: \(tokens)")
    }
}

// MARK: - The model

/// The model: one `JobLifecycle` per job, and the rules the store port documents around them, kept
/// in memory. No SQL, no clock.
final class LifecycleModel: LifecycleImplementation {
    let label = "model"
    private(set) var names = Names()
    private var jobs: [String: JobLifecycle] = [:]
    private var log: [JobEvent] = []
    private var nextSeq: Int64 = 1
    private var nextToken: Int64 = 1
    private var leaseExpiry: [String: Int64] = [:]

    /// The nth job's record, for the generator.
    func record(_ index: Int) -> JobRecord? {
        guard index < names.ids.count else { return nil }
        return jobs[names.ids[index]]?.record
    }

    var jobCount: Int { names.ids.count }

    /// The claims, by index: the job (by index) and whether it still runs under it.
    func claim(_ index: Int) -> (job: Int, live: Bool, worker: String?) {
        let (id, token) = names.claims[index]
        let record = jobs[id]?.record
        let job = names.ids.firstIndex(of: id) ?? 0
        return (job, record?.state == .running && record?.leaseToken == token, claimOwners[index])
    }

    var claimCount: Int { names.claims.count }
    private var claimOwners: [String] = []

    private func id(_ name: JobName) -> String {
        switch name {
        case .job(let index): names.ids[index]
        case .key(let key): key
        }
    }

    private var byKey: [String: String] = [:]

    func perform(_ step: LifecycleStep, now: Int64) throws -> String {
        do throws(StoreError) {
            return try performOrRefuse(step, now: now)
        } catch {
            return "refused " + names.error(error)
        }
    }

    private func performOrRefuse(_ step: LifecycleStep, now: Int64) throws(StoreError) -> String {
        switch step {
        case .submit(let submitted):
            let specs = submitted.map { makeSpec($0, id: id) }
            return try submit(specs, now: now)
        case .claim(let request):
            return try claim(request, now: now)
        case .append(let reports, let thenClaim):
            var outcomes: [String] = []
            for report in reports {
                let jobID = names.ids[report.job]
                let token = report.claim.map { names.claims[$0].token }
                var occurred: Int64?
                if case .started(let earlier?) = report.report { occurred = now - earlier }
                do throws(StoreError) {
                    let at = occurred.map { min(now, max($0, jobs[jobID]?.record?.updatedAtMs ?? $0)) } ?? now
                    let events = try perform(.report(report.report.payload()), jobID: jobID, actor: workerActor(report.claim),
                                             expectedVersion: report.expectedVersion, leaseToken: token, now: at)
                    outcomes.append("ok v\(events[0].version) \(events[0].type.rawValue)")
                } catch {
                    outcomes.append("refused " + names.error(error))
                }
            }
            if let thenClaim { outcomes.append(try claim(thenClaim, now: now)) }
            return outcomes.joined(separator: "; ")
        case .heartbeat(let worker, let claims, let leaseMs):
            var lost: [String] = []
            for claim in claims {
                let (jobID, token) = names.claims[claim]
                let record = jobs[jobID]?.record
                if record?.state == .running, record?.leaseToken == token, record?.leaseOwner == workerName(worker) {
                    leaseExpiry[jobID] = now + leaseMs
                } else {
                    lost.append(names.name(jobID))
                }
            }
            return "lost \(lost.sorted())"
        case .rescue:
            var rescued: [String] = []
            for id in submissionOrder {
                guard let record = jobs[id]?.record, record.state == .running else { continue }
                let expiry = leaseExpiry[id]
                if let expiry, expiry > now { continue }
                _ = try perform(.expireLease(holder: record.leaseOwner ?? "an unknown worker", expiredAtMs: expiry), jobID: id,
                                actor: "rescuer", expectedVersion: record.version, leaseToken: nil, now: now)
                rescued.append(names.name(id))
            }
            return "rescued \(rescued)"
        case .control(let job, let command, let states):
            let jobID = names.ids[job]
            guard let record = jobs[jobID]?.record else { throw StoreError.notFound(jobID) }
            if let states, !states.contains(record.state) { return "skipped \(record.state.rawValue)" }
            let events = try perform(command.command, jobID: jobID, actor: cliActor, expectedVersion: record.version,
                                     leaseToken: nil, now: now)
            let after = jobs[jobID]?.record ?? record
            return "\(events.isEmpty ? "repeat" : "done") \(after.state.rawValue) v\(after.version)"
        case .retryWithDependants(let job, let states, let dryRun):
            let jobID = names.ids[job]
            guard let record = jobs[jobID]?.record else { throw StoreError.notFound(jobID) }
            if let states, !states.contains(record.state) { return "skipped \(record.state.rawValue)" }
            guard dryRun else { return try retryWithDependants(jobID, now: now, dryRun: false) }
            // A dry run: the retry as it would go, then everything as it was.
            let saved = (jobs, log, nextSeq, leaseExpiry, expiredBlobs)
            defer { (jobs, log, nextSeq, leaseExpiry, expiredBlobs) = saved }
            return try retryWithDependants(jobID, now: now, dryRun: true)
        case .bulkRetryDryRun(let indices):
            // Each retry as it would go, on what the ones before left; then everything as it was.
            let saved = (jobs, log, nextSeq, leaseExpiry, expiredBlobs)
            defer { (jobs, log, nextSeq, leaseExpiry, expiredBlobs) = saved }
            var opened: Set<String> = []
            var outcomes: [String] = []
            for index in indices {
                let jobID = names.ids[index]
                if opened.contains(jobID) {
                    outcomes.append("repeat")
                    continue
                }
                guard jobs[jobID]?.record != nil else {
                    outcomes.append("refused " + names.error(.notFound(jobID)))
                    continue
                }
                do throws(StoreError) {
                    outcomes.append(try retryWithDependants(jobID, now: now, dryRun: true))
                    opened.insert(jobID)
                    opened.formUnion(lastReopened)
                } catch {
                    outcomes.append("refused " + names.error(error))
                }
            }
            return outcomes.joined(separator: "; ")
        case .archive(let before):
            return archive(finishedBefore: before)
        case .expireBlobs(let before, let dryRun):
            // Only the blobs this sequence's jobs produced: the stores hold earlier sequences' too.
            var latest: [String: Int64] = [:]
            for id in names.ids {
                guard let record = jobs[id]?.record, record.state == .succeeded, let blob = record.result?.blob else { continue }
                latest[blob] = max(latest[blob] ?? .min, record.finishedAtMs ?? .max)
            }
            let expiring = latest.filter { $0.value < before && !expiredBlobs.contains($0.key) }.keys.sorted()
            if !dryRun { expiredBlobs.formUnion(expiring) }
            let present = latest.keys.filter { !expiredBlobs.contains($0) }.sorted()
            return "expired \(expiring.map(blobName)) present \(present.map(blobName))"
        }
    }

    /// The dependants the last `retryWithDependants` reopened.
    private var lastReopened: [String] = []

    /// The state each archived job left the log in.
    private var archivedStates: [String: JobState] = [:]

    /// The final jobs that finished before `before` leave the log — except one a job staying in the log
    /// still waits for (a `job_dependencies` row), and so on down its chain.
    private func archive(finishedBefore before: Int64) -> String {
        var selected: Set<String> = []
        for id in names.live {
            guard let record = jobs[id]?.record, [.succeeded, .failed, .cancelled].contains(record.state),
                  let finished = record.finishedAtMs, finished < before else { continue }
            selected.insert(id)
        }
        let byTime = selected
        var changed = true
        while changed {
            changed = false
            for id in names.live where !selected.contains(id) {
                for dependency in waits(of: id) where selected.remove(dependency) != nil { changed = true }
            }
        }
        for id in selected {
            archivedStates[id] = jobs[id]?.record?.state
            if let key = jobs[id]?.record?.key { byKey[key] = nil }
            jobs[id] = nil
            leaseExpiry[id] = nil
            names.archived.insert(id)
        }
        return "archived \(selected.map(names.name).sorted()) kept \(byTime.subtracting(selected).map(names.name).sorted())"
    }

    /// The jobs `id` waits for: its `job_dependencies` rows (a dependency that succeeded, or left the
    /// log, has none).
    private func waits(of id: String) -> [String] {
        (jobs[id]?.record?.spec.after ?? []).filter { dependency in
            archivedStates[dependency] == nil && jobs[dependency]?.record?.state != .succeeded
        }
    }

    /// The blobs of this sequence's jobs that an expiry removed, until a job stores the same bytes again.
    private var expiredBlobs: Set<String> = []

    private var submissionOrder: [String] = []

    // MARK: Submit

    private func submit(_ specs: [JobSpec], now: Int64) throws(StoreError) -> String {
        let plan = try SubmitPlan(specs, now: now, storedByKey: { (key) throws(StoreError) in
            guard let id = byKey[key], let spec = jobs[id]?.record?.spec else { return nil }
            return (id, try StoreJSON.encode(spec))
        }, logJob: { (name) throws(StoreError) in byKey[name] ?? (jobs[name] != nil ? name : nil) })
        var outcomes: [SubmitOutcome] = []
        for entry in plan.entries {
            if entry.creates {
                names.created(entry.id)
                submissionOrder.append(entry.id)
                if let key = entry.spec.key { byKey[key] = entry.id }
                _ = try perform(.submit(entry.spec), jobID: entry.id, actor: cliActor, expectedVersion: 0, leaseToken: nil, now: now)
            }
            outcomes.append(SubmitOutcome(id: entry.id, key: entry.spec.key, kind: entry.spec.kind, created: entry.creates))
        }
        return submitOutcome(outcomes, names: names)
    }

    // MARK: Claim

    private func claim(_ request: ClaimStep, now: Int64) throws(StoreError) -> String {
        var claimed: [String] = []
        if request.limit <= 0 || request.queues?.isEmpty == true { return "claimed \(claimed)" }
        while claimed.count < request.limit {
            let runnable = submissionOrder.compactMap { jobs[$0]?.record }.filter { job in
                job.state == .queued && job.runAfterMs <= now && (request.queues?.contains(job.queue) ?? true)
                    && waits(of: job.id).isEmpty
            }.sorted { a, b in
                if a.priority != b.priority { return a.priority > b.priority }
                if a.runAfterMs != b.runAfterMs { return a.runAfterMs < b.runAfterMs }
                return a.seq < b.seq
            }.prefix(request.limit - claimed.count)
            if runnable.isEmpty { break }
            for job in runnable {
                let token = nextToken
                nextToken += 1
                let events = try perform(.claim(owner: workerName(request.worker), token: token, leaseMs: request.leaseMs),
                                         jobID: job.id, actor: workerName(request.worker), expectedVersion: job.version,
                                         leaseToken: nil, now: now)
                guard case .claimed? = events.first?.payload else { continue }
                names.claimed(job.id, token: token)
                claimOwners.append(workerName(request.worker))
                claimed.append(names.name(job.id))
            }
        }
        return "claimed \(claimed)"
    }

    // MARK: Retry with dependants

    private func retryWithDependants(_ jobID: String, now: Int64, dryRun: Bool) throws(StoreError) -> String {
        guard let job = jobs[jobID]?.record else { throw StoreError.notFound(jobID) }
        _ = try perform(.retry, jobID: jobID, actor: cliActor, expectedVersion: job.version, leaseToken: nil, now: now)
        var opening: Set<String> = [jobID]
        var reopening: [(record: JobRecord, command: JobCommand)] = []
        var kept: Set<String> = []
        var walk: [(id: String, key: String?)] = [(jobID, job.key)]
        var next = 0
        while next < walk.count {
            let dependency = walk[next]
            next += 1
            let dependants = submissionOrder.compactMap { jobs[$0]?.record }.filter { record in
                record.state == .cancelled && (record.spec.after ?? []).contains(dependency.id)
            }
            for dependant in dependants where !opening.contains(dependant.id) {
                let cancellation = log.last { $0.jobID == dependant.id }?.payload
                let stillEnded = (dependant.spec.after ?? []).first { other in
                    guard !opening.contains(other) else { return false }
                    // An archived job is not waited for (its waits left the log with it: it had succeeded,
                    // or its dependants left with it).
                    guard archivedStates[other] == nil else { return false }
                    guard let state = jobs[other]?.record?.state else { return true }
                    return state == .failed || state == .cancelled
                }
                // Paused when the cascade cancelled it (its event before the `cancelled`): it opens paused.
                let wasPaused = log.last { $0.jobID == dependant.id && $0.version == dependant.version - 1 }?.payload.type == .paused
                let command = JobCommand.dependencyRetried(dependency: dependency.id, key: dependency.key,
                                                           cancellation: cancellation, stillEnded: stillEnded,
                                                           wasPaused: wasPaused)
                switch JobLifecycle(record: dependant).decide(command, now: now, expectedVersion: dependant.version) {
                case .success(let events) where !events.isEmpty:
                    opening.insert(dependant.id)
                    reopening.append((dependant, command))
                    walk.append((dependant.id, dependant.key))
                case .success:
                    break
                case .failure:
                    kept.insert(dependant.id)
                }
            }
        }
        lastReopened = reopening.map(\.record.id)
        for (record, command) in reopening {
            _ = try perform(command, jobID: record.id, actor: cliActor, expectedVersion: record.version, leaseToken: nil, now: now)
        }
        // A dry run shows the job as it is now.
        let state = dryRun ? job.state.rawValue : jobs[jobID]?.record?.state.rawValue ?? "?"
        return (dryRun ? "dry run " : "") + "\(state) reopened \(reopening.map { names.name($0.record.id) }) kept \(kept.subtracting(opening).map(names.name).sorted())"
    }

    // MARK: Deciding and folding

    /// Asks the lifecycle, appends its events, and does what `after:` makes of them (a new job's
    /// waits, the cascade of a job that ended failed or cancelled). Returns the job's own events.
    @discardableResult
    private func perform(_ command: JobCommand, jobID: String, actor: String, expectedVersion: Int?, leaseToken: Int64?,
                         now: Int64) throws(StoreError) -> [JobEvent] {
        var ended: [(id: String, key: String?, state: JobState, root: String?)] = []
        let events = try decide(command, jobID: jobID, actor: actor, expectedVersion: expectedVersion, leaseToken: leaseToken,
                                now: now, ended: &ended)
        var next = 0
        while next < ended.count {
            let job = ended[next]
            next += 1
            let root = job.root ?? job.id
            let waiting = submissionOrder.compactMap { jobs[$0]?.record }.filter { record in
                (record.state == .queued || record.state == .paused) && (record.spec.after ?? []).contains(job.id)
            }
            for dependant in waiting {
                let before = ended.count
                _ = try decide(.dependencyEnded(dependency: job.id, key: job.key, outcome: job.state, root: root),
                               jobID: dependant.id, actor: actor, expectedVersion: dependant.version, leaseToken: nil,
                               now: now, ended: &ended)
                for index in before..<ended.count { ended[index].root = root }
            }
        }
        return events
    }

    private func decide(_ command: JobCommand, jobID: String, actor: String, expectedVersion: Int?, leaseToken: Int64?,
                        now: Int64, ended: inout [(id: String, key: String?, state: JobState, root: String?)]) throws(StoreError) -> [JobEvent] {
        var lifecycle = jobs[jobID] ?? JobLifecycle()
        let before = lifecycle.record?.state
        let decided: [DecidedEvent]
        let dependencies = command == .retry ? lifecycle.record.flatMap(dependencyStanding) : nil
        switch lifecycle.decide(command, now: now, expectedVersion: expectedVersion, leaseToken: leaseToken,
                                dependencies: dependencies) {
        case .success(let events): decided = events
        case .failure(let refusal): throw StoreError(refusal, jobID: jobID)
        }
        var events: [JobEvent] = []
        for decision in decided {
            let event = JobEvent(seq: nextSeq, jobID: jobID, version: (lifecycle.record?.version ?? 0) + 1, atMs: now, actor: actor,
                                 leaseToken: decision.leaseToken, payload: PreparedPayload.storedForm(of: decision.payload).stored)
            nextSeq += 1
            lifecycle.apply(event)
            log.append(event)
            events.append(event)
            if case .claimed(_, let expiresAt, _) = event.payload { leaseExpiry[jobID] = expiresAt }
            // Bytes stored again are a blob again.
            if case .succeeded(_, let result) = event.payload, let blob = result.blob { expiredBlobs.remove(blob) }
        }
        jobs[jobID] = lifecycle
        guard let record = lifecycle.record, !events.isEmpty else { return events }
        if record.state != .running { leaseExpiry[jobID] = nil }
        if before == nil {
            // A new job: a dependency already failed or cancelled cancels it at once (the first such, in `after:` order).
            let endedDependency = (record.spec.after ?? []).compactMap { jobs[$0]?.record }
                .first { $0.state == .failed || $0.state == .cancelled }
            if let dependency = endedDependency {
                events += try decide(.dependencyEnded(dependency: dependency.id, key: dependency.key, outcome: dependency.state,
                                                      root: cascadeRoot(of: dependency)),
                                     jobID: jobID, actor: actor, expectedVersion: record.version, leaseToken: nil, now: now,
                                     ended: &ended)
            }
        } else if before != record.state, record.state == .failed || record.state == .cancelled {
            ended.append((record.id, record.key, record.state, nil))
        }
        return events
    }

    /// How the jobs `job` waits for stand, as the stores read it for a retry (the store's rule, written
    /// again): its waits in id order, each with its state, key and cascade root; nil when it waits for none.
    private func dependencyStanding(of job: JobRecord) -> DependencyStanding? {
        guard let after = job.spec.after, !after.isEmpty else { return nil }
        let unfinished = waits(of: job.id).sorted().map { id in
            let record = jobs[id]?.record
            return DependencyStanding.Dependency(id: id, key: record?.key, state: record?.state, root: record.map(cascadeRoot) ?? id)
        }
        let cancellation = job.state == .cancelled ? log.last { $0.jobID == job.id }?.payload : nil
        return DependencyStanding(unfinished: unfinished, cancelledByDependency: cancellation?.cancellingDependency != nil)
    }

    /// The job whose own end began the cascade that cancelled `job`: up through each `cancelled` event's
    /// `dependency` while the job above is still failed or cancelled (the store's rule, written again).
    private func cascadeRoot(of job: JobRecord) -> String {
        var current = job
        var seen: Set<String> = [job.id]
        while current.state == .cancelled,
              let cause = log.last(where: { $0.jobID == current.id && $0.version == current.version })?.payload.cancellingDependency,
              seen.insert(cause).inserted,
              let above = jobs[cause]?.record, above.state == .failed || above.state == .cancelled {
            current = above
        }
        return current.id
    }

    // MARK: Snapshot

    /// Each job's events normalized, and the log order, as far as `normalizedUpTo`: events never change.
    private var normalizedEvents: [String: [String]] = [:]
    private var eventsByJob: [String: [JobEvent]] = [:]
    private var order: [String] = []
    private var normalizedUpTo = 0
    /// What the model's events have shown so far (dependency cancels, settlements, blobs), for the tally.
    private(set) var features: Set<String> = []

    func snapshot() throws -> Snapshot {
        for event in log.dropFirst(normalizedUpTo) {
            let text = names.event(event)
            normalizedEvents[names.name(event.jobID), default: []].append(text)
            eventsByJob[event.jobID, default: []].append(event)
            order.append("\(names.name(event.jobID))v\(event.version)")
            if case .cancelled(_, _, _, let dependency?) = event.payload, !dependency.isEmpty { features.insert("dependency cancel") }
            if text.contains("while the job was running") || text.contains("withdrawn") { features.insert("settled") }
            if case .succeeded(_, let result) = event.payload, result.blob != nil { features.insert("blob") }
        }
        normalizedUpTo = log.count
        var snapshot = Snapshot()
        var records: [String: JobRecord] = [:]
        for id in names.ids {
            guard let record = jobs[id]?.record else { continue }
            records[id] = record
            snapshot.records[names.name(id)] = names.record(record)
            if record.state == .running { snapshot.leaseExpiries[names.name(id)] = leaseExpiry[id] }
            for dependency in waits(of: id) {
                snapshot.waits.insert("\(names.name(id)) waits for \(names.name(dependency))")
            }
        }
        snapshot.events = normalizedEvents
        snapshot.order = order
        try checkInvariants(records: records, events: eventsByJob, logOrder: log, names: names, label: label)
        return snapshot
    }
}

let cliActor = "cli:model"

func workerName(_ worker: Int) -> String { "worker:model-\(worker)" }

/// The actor of a report under claim `claim`: its worker (the claims are the same across implementations).
func workerActor(_ claim: Int?) -> String { claim.map { "worker:claim-\($0 % 3)" } ?? "tool:model" }

extension ControlStep {
    var command: JobCommand {
        switch self {
        case .pause: .pause
        case .resume: .resume
        case .cancel: .cancel(by: cliActor)
        case .retry: .retry
        }
    }
}

/// The spec a step's spec is, with `after:` named as `id` resolves the names.
func makeSpec(_ submitted: SubmittedSpec, id: (JobName) -> String) -> JobSpec {
    let source = submitted.kind == .uploadFile ? "/tmp/model-source.bin" : "gs://bucket/model-object.bin"
    let destination = submitted.kind == .uploadFile ? "gs://bucket/model-object.bin" : nil
    var spec = JobSpec(kind: submitted.kind, source: source, destination: destination,
                       maxSize: submitted.kind == .downloadMemory ? 1024 : nil, key: submitted.key,
                       priority: submitted.priority, maxAttempts: submitted.maxAttempts, queue: submitted.queue,
                       ifExists: submitted.ifExists, runAfterMs: submitted.runAfterMs)
    spec.after = submitted.after.isEmpty ? nil : submitted.after.map(id)
    return spec
}

func submitOutcome(_ outcomes: [SubmitOutcome], names: Names) -> String {
    "submitted " + outcomes.map { names.name($0.id) + ($0.created ? "+" : "=") }.joined(separator: " ")
}

// MARK: - A store

/// One store (SQLite or PostgreSQL) driven by the steps, through the store port only.
final class StoreUnderTest: LifecycleImplementation {
    let label: String
    private(set) var names = Names()
    private let fixture: StoreFixture
    private var store: any JobStore { fixture.store }
    /// The sequence's first time: its jobs are those created since.
    private let base: Int64
    /// The log's last seq before the sequence: its events are those after.
    private let seqBefore: Int64

    init(_ fixture: StoreFixture, base: Int64) throws {
        self.fixture = fixture
        self.label = fixture.engine.rawValue
        self.base = base
        seqBefore = try fixture.store.lastSeq()
    }

    private func id(_ name: JobName) -> String {
        switch name {
        case .job(let index): names.ids[index]
        case .key(let key): key
        }
    }

    func perform(_ step: LifecycleStep, now: Int64) throws -> String {
        do throws(StoreError) {
            return try performOrRefuse(step, now: now)
        } catch {
            return "refused " + names.error(error)
        }
    }

    private func performOrRefuse(_ step: LifecycleStep, now: Int64) throws(StoreError) -> String {
        switch step {
        case .submit(let submitted):
            let outcomes = try store.submit(submitted.map { makeSpec($0, id: id) }, actor: cliActor, now: now)
            for outcome in outcomes where outcome.created { names.created(outcome.id) }
            return submitOutcome(outcomes, names: names)
        case .claim(let request):
            return claimed(try store.claim(owner: workerName(request.worker), queues: request.queues, limit: request.limit,
                                           leaseMs: request.leaseMs, now: now))
        case .append(let reports, let thenClaim):
            let pending = reports.map { report in
                var occurred: Int64?
                if case .started(let earlier?) = report.report { occurred = now - earlier }
                return PendingEvent(jobID: names.ids[report.job], actor: workerActor(report.claim),
                                    leaseToken: report.claim.map { names.claims[$0].token },
                                    expectedVersion: report.expectedVersion, occurredAtMs: occurred, payload: report.report.payload())
            }
            var outcomes: [String] = []
            let appended: [Result<JobEvent, StoreError>]
            if let thenClaim {
                let outcome = try store.append(pending, now: now, thenClaim: ClaimRequest(
                    owner: workerName(thenClaim.worker), queues: thenClaim.queues, limit: thenClaim.limit,
                    leaseMs: thenClaim.leaseMs, now: now))
                appended = outcome.appended
                let claims = outcome.claimed.map { claimed($0) }
                outcomes = appended.map(describe)
                switch claims {
                case .success(let text): outcomes.append(text)
                case .failure(let error): outcomes.append("claim refused " + names.error(error))
                }
                return outcomes.joined(separator: "; ")
            }
            appended = try store.append(pending, now: now)
            return appended.map(describe).joined(separator: "; ")
        case .heartbeat(let worker, let claims, let leaseMs):
            var leases: [String: Int64] = [:]
            for claim in claims { leases[names.claims[claim].job] = names.claims[claim].token }
            let lost = try store.heartbeat(owner: workerName(worker), leases: leases, leaseMs: leaseMs, now: now)
            return "lost \(lost.map(names.name).sorted())"
        case .rescue:
            // Only this sequence's jobs: every job of an earlier one is final.
            return "rescued \(try store.rescueExpired(now: now, actor: "rescuer").map(\.id).map(names.name))"
        case .control(let job, let command, let states):
            let (answer, state) = try store.control(command.command, id: names.ids[job], actor: cliActor, now: now, ifStateIn: states)
            guard let result = answer else {
                if states == nil { throw StoreError.notFound(names.ids[job]) }
                return "skipped \(state.rawValue)"
            }
            return "\(result.isRepeat ? "repeat" : "done") \(result.record.state.rawValue) v\(result.record.version)"
        case .retryWithDependants(let job, let states, let dryRun):
            let (result, state) = try store.retryWithDependants(id: names.ids[job], actor: cliActor, now: now, ifStateIn: states,
                                                                dryRun: dryRun)
            guard let result else { return states == nil ? "no result" : "skipped \(state.rawValue)" }
            return (dryRun ? "dry run " : "") + "\(result.job.record.state.rawValue) reopened \(result.reopened.map { names.name($0.id) }) "
                + "kept \(result.kept.map { names.name($0.record.id) }.sorted())"
        case .bulkRetryDryRun(let indices):
            var opened: Set<String> = []
            var outcomes: [String] = []
            for index in indices {
                let jobID = names.ids[index]
                if opened.contains(jobID) {
                    outcomes.append("repeat")
                    continue
                }
                do throws(StoreError) {
                    let (answer, _) = try store.retryWithDependants(id: jobID, actor: cliActor, now: now, ifStateIn: nil, dryRun: true,
                                                                    openedBefore: opened)
                    guard let result = answer else { throw StoreError.notFound(jobID) }
                    outcomes.append("dry run \(result.job.record.state.rawValue) reopened \(result.reopened.map { names.name($0.id) }) "
                        + "kept \(result.kept.map { names.name($0.record.id) }.sorted())")
                    opened.insert(jobID)
                    opened.formUnion(result.reopened.map(\.id))
                } catch {
                    outcomes.append("refused " + names.error(error))
                }
            }
            return outcomes.joined(separator: "; ")
        case .archive(let before):
            // Only this sequence's jobs are compared: earlier sequences' finished before it began, and go too.
            let selection = try store.archiveSelection(finishedBefore: before)
            let byTime = try store.jobs(filter: JobFilter(createdSince: base)).filter { record in
                [.succeeded, .failed, .cancelled].contains(record.state) && (record.finishedAtMs ?? .max) < before
            }.map(\.id)
            let selected = selection.jobs.map(\.id).filter { names.nameOfID[$0] != nil }
            if !selection.isEmpty {
                let record = ArchiveRecord(file: "lifecycle-model.archive", sha256: String(repeating: "0", count: 64), beforeMs: before,
                                           jobs: selection.jobs.count, events: selection.rows.count, blobs: selection.blobs.count,
                                           blobsRemoved: 0, firstSeq: selection.rows.first?.seq ?? 0,
                                           lastSeq: selection.rows.last?.seq ?? 0)
                _ = try store.removeArchived(selection, record: record, actor: cliActor, now: now, beforeCommit: {})
            }
            names.archived.formUnion(selected)
            return "archived \(selected.map(names.name).sorted()) kept \(Set(byTime).subtracting(selected).map(names.name).sorted())"
        case .expireBlobs(let before, let dryRun):
            let expiry = try store.expireBlobs(finishedBefore: before, now: now, dryRun: dryRun)
            // Only the blobs this sequence's jobs produced (as the model): the store holds earlier sequences' too.
            var produced: Set<String> = []
            for record in try store.jobs(filter: JobFilter(createdSince: base)) where record.state == .succeeded {
                if let blob = record.result?.blob { produced.insert(blob) }
            }
            if expiry.digests != expiry.digests.sorted() { return "expiry digests out of order: \(expiry.digests)" }
            var present: [String] = []
            for blob in produced.sorted() where try store.blobSize(sha256: blob) != nil { present.append(blob) }
            return "expired \(expiry.digests.filter(produced.contains).map(blobName)) present \(present.map(blobName))"
        }
    }

    private func claimed(_ claims: [ClaimedJob]) -> String {
        for claim in claims { names.claimed(claim.record.id, token: claim.token) }
        return "claimed \(claims.map { names.name($0.record.id) })"
    }

    private func describe(_ outcome: Result<JobEvent, StoreError>) -> String {
        switch outcome {
        case .success(let event): "ok v\(event.version) \(event.type.rawValue)"
        case .failure(let error): "refused " + names.error(error)
        }
    }

    /// The sequence's events read so far, by job and in log order, and normalized: the log only grows
    /// (its triggers refuse updates and deletes), so each snapshot reads only the events after the last
    /// (`verifyReplay` reads them all again).
    private var log: [JobEvent] = []
    private var eventsByJob: [String: [JobEvent]] = [:]
    private var normalizedEvents: [String: [String]] = [:]
    private var order: [String] = []

    func snapshot() throws -> Snapshot {
        var snapshot = Snapshot()
        let stored = try store.jobs(filter: JobFilter(createdSince: base))
        for event in try store.events(afterSeq: log.last?.seq ?? seqBefore, limit: 1_000_000)
            where event.jobID != ArchiveRecord.logJobID {
            guard names.nameOfID[event.jobID] != nil else {
                throw InvariantBroken("\(label): an event (\(event.type.rawValue)) of \(event.jobID), not a job of this sequence")
            }
            log.append(event)
            eventsByJob[event.jobID, default: []].append(event)
            normalizedEvents[names.name(event.jobID), default: []].append(names.event(event))
            order.append("\(names.name(event.jobID))v\(event.version)")
        }
        var records: [String: JobRecord] = [:]
        for record in stored { records[record.id] = record }
        if Set(records.keys) != Set(names.live) {
            throw InvariantBroken("\(label): the store lists \(records.keys.map(names.name).sorted()), the sequence has \(names.live.map(names.name))")
        }
        for (id, record) in records {
            let name = names.name(id)
            // The projection is the fold of the store's own events.
            let folded = JobRecord.folding(eventsByJob[id] ?? [])
            if folded != record {
                throw InvariantBroken("\(label): \(name)'s row is not the fold of its events:\n  row  \(names.record(record))\n  fold \(folded.map(names.record) ?? "nil")")
            }
            snapshot.records[name] = names.record(record)
        }
        snapshot.events = normalizedEvents
        snapshot.order = order
        // The lease expiries of running jobs and the `after:` waits, in one query (one round trip).
        for row in try fixture.rows("""
            SELECT 'lease', id, CAST(lease_expires_at_ms AS TEXT) FROM jobs WHERE state = 'running'
            UNION ALL SELECT 'wait', job, depends_on FROM job_dependencies
            """) where names.nameOfID[row[1]] != nil {
            if row[0] == "lease" {
                snapshot.leaseExpiries[names.name(row[1])] = Int64(row[2])
            } else {
                snapshot.waits.insert("\(names.name(row[1])) waits for \(names.name(row[2]))")
            }
        }
        try checkInvariants(records: records, events: eventsByJob, logOrder: log, names: names, label: label)
        return snapshot
    }

    /// `replay --verify` over the whole log.
    func verifyReplay() throws {
        // Less the events archives removed, and the archives' own.
        let all = try store.events(afterSeq: seqBefore, limit: 1_000_000).filter { $0.jobID != ArchiveRecord.logJobID }
        if all.map(names.event) != log.filter({ !names.archived.contains($0.jobID) }).map(names.event) {
            throw InvariantBroken("\(label): the sequence's events read again are not those read step by step")
        }
        let report = try store.replay(verify: true)
        if !report.isConsistent {
            throw InvariantBroken("\(label): replay --verify: \(report.differences.map { names.normalized($0.description) }) \(report.problems)")
        }
    }
}

extension StoreFixture {
    /// The rows of a query without parameters, each column as text (NULL as "NULL").
    func rows(_ text: String) throws -> [[String]] {
        switch engine {
        case .sqlite:
            let sqlite = try #require(sqlite)
            return try sqlite.withConnection { (connection) throws(StoreError) in
                try connection.query(text, []) { row in (0..<row.count).map { row.value($0).description } }
            }
        case .postgres:
            let store = try #require(store as? PostgresStore)
            return try store.withConnection { (connection) throws(StoreError) in
                try connection.rows(text, []) { (row) throws(StoreError) in
                    try (0..<row.count).map { (index) throws(StoreError) in try row.typedValue(index).description }
                }
            }
        }
    }
}

// MARK: - One sequence

/// One seeded sequence: the generator picks each step from the model's state, every implementation
/// performs it, and the answers and states are compared.
final class LifecycleRun {
    let seed: UInt64
    private var random: SeededGenerator
    private let model = LifecycleModel()
    private let stores: [StoreUnderTest]
    private var now: Int64
    private var steps: [(now: Int64, step: LifecycleStep)] = []
    /// Keys given so far, with the spec each was given with (for a submit again, same or changed).
    private var keyed: [(key: String, spec: SubmittedSpec)] = []
    private var nextKey = 0

    init(seed: UInt64, base: Int64, stores: [StoreFixture]) throws {
        self.seed = seed
        random = SeededGenerator(seed: seed)
        now = base
        self.stores = try stores.map { try StoreUnderTest($0, base: base) }
    }

    var implementations: [any LifecycleImplementation] { [model] + stores }

    /// Runs `count` random steps, then the steps that end every job; nil, or what went wrong.
    func run(steps count: Int, counts: inout [String: Int]) throws -> String? {
        for _ in 0..<count {
            now += random.chance(0.1) ? random.int64(5_000...40_000) : random.int64(0...2_000)
            if let failure = try step(generate(), counts: &counts) { return failure }
        }
        // The end: every lease expired, every job final (so the next sequence on these stores finds none).
        now += 10_000_000
        if let failure = try step(.rescue, counts: &counts) { return failure }
        for index in 0..<model.jobCount {
            guard let record = model.record(index), [.queued, .paused].contains(record.state) else { continue }
            now += 1
            if let failure = try step(.control(job: index, .cancel), counts: &counts) { return failure }
        }
        for store in stores {
            do {
                try store.verifyReplay()
            } catch {
                return failureReport("\(error)")
            }
        }
        return nil
    }

    private func step(_ step: LifecycleStep, counts: inout [String: Int]) throws -> String? {
        steps.append((now, step))
        var outcomes: [String] = []
        for implementation in implementations {
            outcomes.append(try implementation.perform(step, now: now))
        }
        for (implementation, outcome) in zip(implementations, outcomes).dropFirst() where outcome != outcomes[0] {
            return failureReport("\(implementation.label) answered differently from the model:\n  model: \(outcomes[0])\n  \(implementation.label): \(outcome)")
        }
        tally(step, outcomes[0], into: &counts)
        let snapshots: [Snapshot]
        do {
            snapshots = try implementations.map { try $0.snapshot() }
        } catch {
            return failureReport("\(error)")
        }
        for (implementation, snapshot) in zip(implementations, snapshots).dropFirst() {
            if let difference = Self.difference(model: snapshots[0], store: snapshot, label: implementation.label) {
                return failureReport(difference)
            }
        }
        return nil
    }

    /// The first difference between the model's state and a store's, or nil.
    static func difference(model: Snapshot, store: Snapshot, label: String) -> String? {
        for name in Set(model.records.keys).union(store.records.keys).sorted() where model.records[name] != store.records[name] {
            return "\(label)'s record of \(name) is not the model's:\n  model: \(model.records[name] ?? "none")\n  \(label): \(store.records[name] ?? "none")"
        }
        for name in Set(model.events.keys).union(store.events.keys).sorted() where model.events[name] != store.events[name] {
            let (mine, theirs) = (model.events[name] ?? [], store.events[name] ?? [])
            let first = zip(mine, theirs).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(mine.count, theirs.count)
            return "\(label)'s events of \(name) are not the model's from event \(first + 1):\n  model: \(mine.dropFirst(first).prefix(3))\n  \(label): \(theirs.dropFirst(first).prefix(3))"
        }
        if model.order != store.order {
            return "\(label)'s log order is not the model's:\n  model: \(model.order)\n  \(label): \(store.order)"
        }
        if model.leaseExpiries != store.leaseExpiries {
            return "\(label)'s lease expiries are not the model's:\n  model: \(model.leaseExpiries)\n  \(label): \(store.leaseExpiries)"
        }
        if model.waits != store.waits {
            return "\(label)'s waits are not the model's:\n  model: \(model.waits.sorted())\n  \(label): \(store.waits.sorted())"
        }
        return nil
    }

    private func failureReport(_ what: String) -> String {
        var lines = ["lifecycle model: seed \(seed) failed at step \(steps.count) of its sequence "
                         + "(JOBCTL_LIFECYCLE_SEED=\(seed) runs it alone): \(what)",
                     "the shortest failing prefix (\(steps.count) steps):"]
        for (index, step) in steps.enumerated() { lines.append("  \(index + 1). @\(step.now) \(step.step)") }
        return lines.joined(separator: "\n")
    }

    private func tally(_ step: LifecycleStep, _ outcome: String, into counts: inout [String: Int]) {
        for word in ["staleLease", "versionConflict", "invalidTransition", "invalidControl", "repeat", "keyConflict"]
            where outcome.contains(word) {
            counts[word, default: 0] += 1
        }
        if outcome.contains("claimed [\"J") { counts["claimed", default: 0] += 1 }
        if outcome.hasPrefix("rescued [\"J") { counts["rescued", default: 0] += 1 }
        if outcome.contains("reopened [\"J") { counts["reopened", default: 0] += 1 }
        if outcome.hasPrefix("skipped") { counts["skipped", default: 0] += 1 }
        if outcome.contains("retried alone, it could never run") { counts["retry of a job that could never run", default: 0] += 1 }
        if outcome.contains("was its last (max_attempts)") { counts["attempt_failed of a last attempt", default: 0] += 1 }
        if outcome.hasPrefix("dry run") { counts["dry run", default: 0] += 1 }
        if case .bulkRetryDryRun = step, outcome.contains("dry run"), outcome.contains("; ") { counts["bulk dry run", default: 0] += 1 }
        if outcome.hasPrefix("expired [\"") { counts["expired", default: 0] += 1 }
        if outcome.contains("present [\"") { counts["blob present", default: 0] += 1 }
        if outcome.hasPrefix("archived [\"") { counts["archived", default: 0] += 1 }
        if outcome.hasPrefix("archived") && !outcome.hasSuffix("kept []") { counts["kept for dependants", default: 0] += 1 }
        if case .heartbeat = step, !outcome.hasSuffix("[]") { counts["lost lease", default: 0] += 1 }
        for feature in model.features { counts[feature, default: 0] += 1 }
    }

    // MARK: Generating

    /// The next step, from the model's state.
    private func generate() -> LifecycleStep {
        let jobs = model.jobCount
        // Blobs are rare (a download-memory job that succeeded with more than 256 bytes): once there is
        // one, expiry is tried more often.
        let blobs = (0..<jobs).contains { model.record($0)?.result?.blob != nil }
        let kind = random.weighted([("submit", jobs < 3 ? 40 : (jobs < 10 ? 8 : 1)), ("claim", 14), ("append", jobs > 0 ? 30 : 0),
                                    ("heartbeat", 5), ("rescue", 5), ("control", jobs > 0 ? 18 : 0),
                                    ("retryWithDependants", jobs > 0 ? 4 : 0), ("expireBlobs", blobs ? 10 : (jobs > 0 ? 2 : 0)),
                                    ("archive", jobs > 0 ? 2 : 0), ("bulkRetryDryRun", jobs > 1 ? 3 : 0)])
        switch kind {
        case "submit":
            return .submit(submitted())
        case "claim":
            return .claim(claimStep())
        case "append":
            var reports: [ReportStep] = []
            for _ in 0..<random.weighted([(1, 6), (2, 3), (3, 1)]) { reports += reportSteps() }
            return .append(reports, thenClaim: random.chance(0.2) ? claimStep() : nil)
        case "heartbeat":
            let worker = random.int(0...2)
            var claims: [Int] = []
            var seen: Set<Int> = []
            for claim in (0..<model.claimCount).reversed() {
                let (job, live, owner) = model.claim(claim)
                guard !seen.contains(job) else { continue }
                if (live && owner == workerName(worker)) || random.chance(0.05) {
                    seen.insert(job)
                    claims.append(claim)
                }
            }
            return .heartbeat(worker: worker, claims: claims, leaseMs: random.pick([5_000, 30_000]))
        case "rescue":
            return .rescue
        case "control":
            let command = random.weighted([(ControlStep.pause, 3), (.resume, 3), (.cancel, 3), (.retry, 2)])
            return .control(job: preferredJob(for: command), command, ifStateIn: stateGuard())
        case "bulkRetryDryRun":
            // The failed and cancelled jobs (as `retry --state failed,cancelled --with-dependants --dry-run`), now and then another.
            var picked = (0..<jobs).filter { [.failed, .cancelled].contains(model.record($0)?.state) && random.chance(0.7) }
            if picked.isEmpty || random.chance(0.1) { picked.append(random.int(0...(jobs - 1))) }
            return .bulkRetryDryRun(jobs: picked)
        case "archive":
            return .archive(finishedBefore: now - random.int64(-1...20_000))
        case "expireBlobs":
            return .expireBlobs(finishedBefore: random.chance(0.5) ? now + 1 : now - random.int64(0...20_000), dryRun: random.chance(0.3))
        default:
            return .retryWithDependants(job: preferredJob(for: .retry), ifStateIn: random.chance(0.5) ? stateGuard() : nil,
                                        dryRun: random.chance(0.35))
        }
    }

    /// A bulk form's state guard (`--state`), one time in three; nil otherwise.
    private func stateGuard() -> Set<JobState>? {
        guard random.chance(0.35) else { return nil }
        return random.pick([[.queued], [.running], [.paused], [.queued, .paused], [.failed, .cancelled], [.cancelled], [.failed]])
    }

    /// A job for `command`, mostly one it applies to.
    private func preferredJob(for command: ControlStep) -> Int {
        let fitting = (0..<model.jobCount).filter { index in
            guard let record = model.record(index) else { return false }
            switch command {
            case .pause: return [.queued, .running].contains(record.state)
            case .resume: return record.state == .paused || record.pauseRequested
            case .cancel: return [.queued, .running, .paused].contains(record.state)
            case .retry: return [.failed, .cancelled].contains(record.state)
            }
        }
        return !fitting.isEmpty && random.chance(0.75) ? random.pick(fitting) : random.int(0...(model.jobCount - 1))
    }

    private func claimStep() -> ClaimStep {
        ClaimStep(worker: random.int(0...2), limit: random.weighted([(1, 5), (2, 3), (3, 2), (0, 1)]),
                  leaseMs: random.pick([5_000, 30_000]),
                  queues: random.weighted([(nil, 6), (["qa"], 2), (["qb"], 2), (["qa", "qb"], 1), ([], 1)]))
    }

    private func submitted() -> [SubmittedSpec] {
        var batch: [SubmittedSpec] = []
        let size = random.weighted([(1, 6), (2, 3), (3, 2)])
        var batchKeys: [String] = []
        for position in 0..<size {
            if !keyed.isEmpty && random.chance(0.08) {
                // A key again: the same spec (its job), or a different one (refused).
                var again = random.pick(keyed).spec
                if random.chance(0.4) { again.priority += 1 }
                batch.append(again)
                continue
            }
            var spec = SubmittedSpec(kind: random.weighted([(.uploadFile, 3), (.delete, 1), (.downloadMemory, 2)]), key: nil,
                                     priority: random.int(0...2), maxAttempts: random.int(1...3),
                                     queue: random.pick(["qa", "qb"]), runAfterMs: nil, ifExists: nil, after: [])
            if spec.kind == .uploadFile && random.chance(0.5) { spec.ifExists = .fail }
            if random.chance(0.25) { spec.runAfterMs = now + random.int64(-5_000...20_000) }
            if random.chance(0.8) {
                nextKey += 1
                spec.key = "s\(seed)-k\(nextKey)"
                batchKeys.append(spec.key ?? "")
            }
            if random.chance(0.4) {
                for _ in 0..<random.weighted([(1, 3), (2, 1)]) {
                    let roll = random.int(0...99)
                    if roll < 4 {
                        spec.after.append(.key("s\(seed)-nothing"))
                    } else if roll < 14 && position + 1 < size {
                        // A job later in the batch: its key, which it is about to get.
                        spec.after.append(.key("s\(seed)-k\(nextKey + 1)"))
                    } else if model.jobCount > 0 {
                        let index = random.int(0...(model.jobCount - 1))
                        if let key = model.record(index)?.key, random.chance(0.6) {
                            spec.after.append(.key(key))
                        } else {
                            spec.after.append(.job(index))
                        }
                    } else if let earlier = batchKeys.dropLast().last {
                        spec.after.append(.key(earlier))
                    }
                }
            }
            if let key = spec.key { keyed.append((key, spec)) }
            batch.append(spec)
        }
        return batch
    }

    /// One report, or a worker's `started` and its next report.
    private func reportSteps() -> [ReportStep] {
        let live = (0..<model.claimCount).filter { model.claim($0).live }
        let roll = random.int(0...99)
        let claim: Int?
        var job: Int
        if !live.isEmpty && roll < 75 {
            claim = random.pick(live)
            job = model.claim(claim ?? 0).job
        } else if model.claimCount > 0 && roll < 88 {
            // A token that no longer holds its job (or still does, by chance).
            claim = random.int(0...(model.claimCount - 1))
            job = model.claim(claim ?? 0).job
        } else if roll < 96 || model.claimCount == 0 {
            // A report without a token (a tool's), mostly on a job that waits for another.
            claim = nil
            let waiting = (0..<model.jobCount).filter { model.record($0)?.spec.after != nil }
            job = !waiting.isEmpty && random.chance(0.6) ? random.pick(waiting) : random.int(0...(model.jobCount - 1))
        } else {
            // A live token, on another job.
            claim = random.int(0...(model.claimCount - 1))
            job = random.int(0...(model.jobCount - 1))
        }
        let record = model.record(job)
        var expectedVersion: Int?
        if let version = record?.version, random.chance(0.15) {
            expectedVersion = random.chance(0.6) ? version : version - random.int(1...2)
        }
        let report = pickReport(record)
        var reports = [ReportStep(job: job, claim: claim, report: report, expectedVersion: expectedVersion)]
        if case .started = report, random.chance(0.4) {
            // The worker's `started` queued with the attempt's next event (one group commit).
            reports.append(ReportStep(job: job, claim: claim, report: pickReport(record, afterStart: true), expectedVersion: nil))
        }
        return reports
    }

    private func pickReport(_ record: JobRecord?, afterStart: Bool = false) -> Report {
        let started = afterStart || (record?.startedAtMs != nil && record?.state == .running)
        let attemptsLeft = (record?.attempts ?? 0) < (record?.maxAttempts ?? 1)
        var choices: [(Report, Int)] = [
            (.started(occurredEarlierBy: random.chance(0.5) ? random.int64(0...3_000) : nil), started ? 2 : 12),
            (.progress(random.int64(1...99)), started ? 6 : 1),
            (.succeeded(resultBytes: record?.kind == .downloadMemory ? random.weighted([(10, 1), (300, 2)]) : 0), started ? 6 : 1),
            (attemptsLeft ? .retryable(retryAtMs: now + random.int64(0...10_000)) : .failed(limit: true), 4),
            (.failed(limit: false), 2),
            (.paused, record?.pauseRequested == true ? 8 : 1),
            (.released, 2),
            (.cancelled, record?.cancelRequested == true ? 8 : 1),
        ]
        // Now and then a client's `attempt_failed` for the last attempt (our worker writes `failed` there):
        // refused, the failure of the last attempt being final.
        if !attemptsLeft { choices.append((.retryable(retryAtMs: now + random.int64(0...10_000)), 1)) }
        if !started { choices.removeAll { if case .progress = $0.0 { true } else { false } } }
        return random.weighted(choices)
    }
}
