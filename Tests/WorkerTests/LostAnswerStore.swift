import Foundation
import JobLifecycle
import JobModel
import StorePort
import Synchronization

/// A real store whose answer to one write is lost: the first grouped append of an event of type
/// `loseAnswerTo` is written (committed by the real store underneath), and then the caller is told the
/// store failed (`io`), as a worker hears it when the connection breaks after COMMIT. Every other call
/// goes to the real store unchanged. A fault of our own around a real database, not a mock of one.
///
/// With `answerDelayMs`, that failure is told only after so long (a commit whose answer came back, or
/// was given up, after the lease had run out: a download's result of hundreds of MiB on PostgreSQL).
///
/// With `damagedFromRun`, the executor calls (`run`) from that one on fail as SQLite's would on a file
/// damaged under the worker (`StoreError.damaged`), which no real file does on demand mid-run.
///
/// It also records the position each sweep's read of leftovers starts from (`leftoverReads`) and the jobs
/// it skips (`leftoverSkips`), fails the first `failingLeftoverReads` of them as a broken connection
/// would (`io`), and counts the watermark's raises (`watermarkRaises`).
final class LostAnswerStore: JobStore {
    let inner: any JobStore
    let loseAnswerTo: EventType
    /// How many answers were lost so far (at most one).
    let lost = Mutex(0)
    let damagedFromRun: Int?
    let answerDelayMs: Int64
    /// Executor calls so far.
    let runs = Mutex(0)
    /// `stats` calls so far (the whole statistics, outcome windows included).
    let statsCalls = Mutex(0)
    /// The `position` of every `leftoversSince` call so far, in order.
    let leftoverReads = Mutex<[Int64?]>([])
    /// The jobs every `leftoversSince` call so far was asked to skip, in order.
    let leftoverSkips = Mutex<[Set<String>]>([])
    /// How many of the next `leftoversSince` calls fail (after being recorded).
    let failingLeftoverReads = Mutex(0)
    /// `raiseSweepWatermark` calls so far.
    let watermarkRaises = Mutex(0)
    /// From which `leftoversSince` call on (1: the first) every one fails as SQLite's would on a file whose
    /// pages the sweep reads are damaged (`StoreError.damaged`); nil: none does.
    let damagedLeftoverReadsFrom = Mutex<Int?>(nil)

    init(_ inner: any JobStore, loseAnswerTo: EventType, damagedFromRun: Int? = nil, answerDelayMs: Int64 = 0) {
        self.inner = inner
        self.loseAnswerTo = loseAnswerTo
        self.damagedFromRun = damagedFromRun
        self.answerDelayMs = answerDelayMs
    }

    func appendGrouped(_ event: PendingEvent) async -> Result<JobEvent, StoreError> {
        let result = await inner.appendGrouped(event)
        guard case .success = result, event.type == loseAnswerTo else { return result }
        let loseIt = lost.withLock { count in
            defer { count += 1 }
            return count == 0
        }
        guard loseIt else { return result }
        if answerDelayMs > 0 { try? await Task.sleep(for: .milliseconds(answerDelayMs)) }
        return .failure(.io("the connection broke after COMMIT (test fault)"))
    }

    // MARK: - Everything else: the real store

    var location: String { inner.location }
    var isReadOnly: Bool { inner.isReadOnly }
    var appliedMigrations: [Int] { inner.appliedMigrations }
    var groupCommitStats: GroupCommitStats { inner.groupCommitStats }

    func submit(_ specs: [JobSpec], actor: String, now: Int64) throws(StoreError) -> [SubmitOutcome] {
        try inner.submit(specs, actor: actor, now: now)
    }
    func planSubmit(_ specs: [JobSpec], now: Int64) throws(StoreError) -> SubmitPlan { try inner.planSubmit(specs, now: now) }
    func append(_ events: [PendingEvent], now: Int64) throws(StoreError) -> [Result<JobEvent, StoreError>] {
        try inner.append(events, now: now)
    }
    func append(_ events: [PendingEvent], now: Int64, thenClaim request: ClaimRequest) throws(StoreError) -> AppendAndClaimOutcome {
        try inner.append(events, now: now, thenClaim: request)
    }
    func claim(owner: String, queues: [String]?, limit: Int, leaseMs: Int64, now: Int64) throws(StoreError) -> [ClaimedJob] {
        try inner.claim(owner: owner, queues: queues, limit: limit, leaseMs: leaseMs, now: now)
    }
    func heartbeat(owner: String, leases: [String: Int64], leaseMs: Int64, now: Int64) throws(StoreError) -> Set<String> {
        try inner.heartbeat(owner: owner, leases: leases, leaseMs: leaseMs, now: now)
    }
    func rescueExpired(now: Int64, actor: String) throws(StoreError) -> [RescuedJob] { try inner.rescueExpired(now: now, actor: actor) }
    func control(_ command: JobCommand, id: String, actor: String, now: Int64,
                 ifStateIn states: Set<JobState>?) throws(StoreError) -> (result: ControlResult?, state: JobState) {
        try inner.control(command, id: id, actor: actor, now: now, ifStateIn: states)
    }
    func tally(filter: JobFilter) throws(StoreError) -> [JobState: JobTally] { try inner.tally(filter: filter) }
    func controlEach(_ command: JobCommand, ids: [String], actor: String, now: Int64,
                     ifStateIn states: Set<JobState>?) throws(StoreError) -> [Result<ControlAnswer, StoreError>] {
        try inner.controlEach(command, ids: ids, actor: actor, now: now, ifStateIn: states)
    }
    func planControl(_ command: JobCommand, id: String, now: Int64,
                     openedBefore: Set<String>) throws(StoreError) -> (events: [DecidedEvent], record: JobRecord) {
        try inner.planControl(command, id: id, now: now, openedBefore: openedBefore)
    }
    func retryWithDependants(id: String, actor: String, now: Int64, ifStateIn states: Set<JobState>?, dryRun: Bool,
                             openedBefore: Set<String>) throws(StoreError) -> (result: DependantsRetryResult?, state: JobState) {
        try inner.retryWithDependants(id: id, actor: actor, now: now, ifStateIn: states, dryRun: dryRun, openedBefore: openedBefore)
    }
    func resolveID(_ text: String) throws(StoreError) -> String { try inner.resolveID(text) }
    func job(_ id: String) throws(StoreError) -> JobRecord? { try inner.job(id) }
    func jobs(filter: JobFilter, passingOver: PassedOver) throws(StoreError) -> [JobRecord] { try inner.jobs(filter: filter, passingOver: passingOver) }
    func countJobs(filter: JobFilter) throws(StoreError) -> Int { try inner.countJobs(filter: filter) }
    func jobsWithNewerEvents(inStates states: Set<JobState>?) throws(StoreError) -> [String: String] {
        try inner.jobsWithNewerEvents(inStates: states)
    }
    func events(jobID: String) throws(StoreError) -> [JobEvent] { try inner.events(jobID: jobID) }
    func events(afterSeq: Int64, limit: Int) throws(StoreError) -> [JobEvent] { try inner.events(afterSeq: afterSeq, limit: limit) }
    func tailEvents(afterSeq: Int64, limit: Int) throws(StoreError) -> [JobEvent] { try inner.tailEvents(afterSeq: afterSeq, limit: limit) }
    func counts() throws(StoreError) -> [JobState: Int] { try inner.counts() }
    func lastSeq() throws(StoreError) -> Int64 { try inner.lastSeq() }
    func nextRunAfter(queues: [String]?) throws(StoreError) -> Int64? { try inner.nextRunAfter(queues: queues) }
    func dataVersion() throws(StoreError) -> Int64 { try inner.dataVersion() }
    func refuseNewerSchema() throws(StoreError) { try inner.refuseNewerSchema() }
    func leftoverCandidates(finishedSince: Int64?) throws(StoreError) -> LeftoverCandidates {
        try inner.leftoverCandidates(finishedSince: finishedSince)
    }
    func leftoversSince(position: Int64?, now: Int64, skipping: Set<String>) throws(StoreError) -> (candidates: LeftoverCandidates, position: Int64) {
        leftoverReads.withLock { $0.append(position) }
        leftoverSkips.withLock { $0.append(skipping) }
        let fail = failingLeftoverReads.withLock { left in
            defer { left = max(0, left - 1) }
            return left > 0
        }
        if fail { throw StoreError.io("the connection broke while reading leftover candidates (test fault)") }
        if let from = damagedLeftoverReadsFrom.withLock({ $0 }), leftoverReads.withLock({ $0.count }) >= from {
            throw StoreError.damaged("SQLite: database disk image is malformed, code 11 (test fault)")
        }
        return try inner.leftoversSince(position: position, now: now, skipping: skipping)
    }
    func sweepWatermark(host: String) throws(StoreError) -> Int64? { try inner.sweepWatermark(host: host) }
    func raiseSweepWatermark(host: String, to position: Int64) throws(StoreError) {
        watermarkRaises.withLock { $0 += 1 }
        try inner.raiseSweepWatermark(host: host, to: position)
    }
    func stats(queue: String?, now: Int64) throws(StoreError) -> StoreStats {
        statsCalls.withLock { $0 += 1 }
        return try inner.stats(queue: queue, now: now)
    }
    func queueStateCounts() throws(StoreError) -> [StoreStats.QueueStateCount] { try inner.queueStateCounts() }
    func blob(sha256: String) throws(StoreError) -> Data? { try inner.blob(sha256: sha256) }
    func blobSize(sha256: String) throws(StoreError) -> Int64? { try inner.blobSize(sha256: sha256) }
    func logRows(afterSeq: Int64, limit: Int) throws(StoreError) -> [LogRow] { try inner.logRows(afterSeq: afterSeq, limit: limit) }
    func blobDigests() throws(StoreError) -> [String] { try inner.blobDigests() }
    func expiredBlobRecords() throws(StoreError) -> [ExpiredBlob] { try inner.expiredBlobRecords() }
    func importLog(from source: any JobStore, allowingRunning: Bool) throws(StoreError) -> LogImport {
        try inner.importLog(from: source, allowingRunning: allowingRunning)
    }
    func archiveSelection(finishedBefore: Int64) throws(StoreError) -> ArchiveSelection {
        try inner.archiveSelection(finishedBefore: finishedBefore)
    }
    func removeArchived(_ selection: ArchiveSelection, record: ArchiveRecord, actor: String, now: Int64,
                        beforeCommit: @escaping () -> Void) throws(StoreError) -> JobEvent {
        try inner.removeArchived(selection, record: record, actor: actor, now: now, beforeCommit: beforeCommit)
    }
    func expireBlobs(finishedBefore: Int64, now: Int64, dryRun: Bool) throws(StoreError) -> BlobExpiry {
        try inner.expireBlobs(finishedBefore: finishedBefore, now: now, dryRun: dryRun)
    }
    func expiredBlob(sha256: String) throws(StoreError) -> ExpiredBlob? { try inner.expiredBlob(sha256: sha256) }
    func clockReading() throws(StoreError) -> StoreClockReading { try inner.clockReading() }
    func replay(verify: Bool) throws(StoreError) -> ReplayReport { try inner.replay(verify: verify) }
    func claimGrouped(_ request: ClaimRequest) async throws(StoreError) -> [ClaimedJob] { try await inner.claimGrouped(request) }
    func run<T: Sendable>(_ body: @escaping @Sendable (any JobStore) throws -> T) async throws -> T {
        let count = runs.withLock { count in
            count += 1
            return count
        }
        if let damagedFromRun, count >= damagedFromRun {
            throw StoreError.damaged("SQLite: database disk image is malformed, code 11 (test fault)")
        }
        // On the real store's executor, with this store as the one `body` uses (so its faults apply).
        return try await inner.run { _ in try body(self) }
    }
    func landedEvent(_ pending: PendingEvent) throws(StoreError) -> JobEvent? { try inner.landedEvent(pending) }
}
