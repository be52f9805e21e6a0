import Foundation
import JobModel
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The one thread that uses a store's database connection, and its group commit. Every adapter
/// (`EventStore` for SQLite, `PostgresStore`) owns one.
///
/// Database calls block (locks, fsync, network round trips). Run on Swift's cooperative pool — two threads on a two-core
/// machine — one fsync would stall half of all tasks. So every use of the connection runs here:
/// synchronous callers (the CLI) block on a semaphore until their call has run, asynchronous ones (the
/// worker's tasks) suspend on a continuation. Each time the thread wakes it takes *every* call queued
/// meanwhile, and writes the appends among them in one transaction (group commit: many tasks' events,
/// one fsync). A call made from this thread (a store method used inside `run`) runs at once.
///
/// This replaces the lock the store used to hold around the connection plus a second thread in the
/// worker that serialised the same connection: one executor, owned by the store.
public final class StoreExecutor: Sendable {
    public typealias AppendContinuation = CheckedContinuation<Result<JobEvent, StoreError>, Never>
    public typealias ClaimContinuation = CheckedContinuation<Result<[ClaimedJob], StoreError>, Never>
    /// Writes a batch of appends (and a claim after them, in the same transaction). Throws when the
    /// transaction as a whole failed.
    public typealias Flush = @Sendable ([PendingEvent], ClaimRequest?) throws(StoreError) -> AppendAndClaimOutcome
    /// Makes every transaction committed so far durable (the SQLite store: an fdatasync of its WAL).
    public typealias DurabilityBarrier = @Sendable () throws(StoreError) -> Void

    /// A call queued by a caller that waits for it (blocked on `done`, or suspended on a continuation
    /// inside `body`). `@unchecked Sendable` is sound because `body` is run exactly once, on the
    /// executor thread, and the caller touches nothing it captures until it has run.
    ///
    /// The body returns what resumes its caller, and `perform` lets go of the body — and of everything it
    /// captured, a store among them (`EventStore.run` passes itself) — before it calls that, and before
    /// `done` is signalled: a caller that resumed while this thread still held them could drop its own
    /// last reference to the store and let the process exit before the store was released, its database
    /// never closed (a drain's WAL left behind, about one drain in twenty once its last sweep got quick).
    private final class Call: @unchecked Sendable {
        private var body: (() -> (() -> Void))?
        private let done: DispatchSemaphore?

        init(_ body: @escaping () -> (() -> Void), done: DispatchSemaphore?) {
            self.body = body
            self.done = done
        }

        /// Runs the body (once), lets go of it, then resumes the caller.
        func perform() {
            let resume: () -> Void
            do {
                guard let body else { return }
                self.body = nil
                resume = body()
            }
            resume()
            done?.signal()
        }
    }

    /// The result of a synchronous call, written on the executor thread before `done` is signalled and
    /// read by the caller after it; the semaphore orders the two, hence `@unchecked Sendable`.
    private final class Outcome<T>: @unchecked Sendable {
        var result: Result<T, StoreError>?
    }

    /// Who waits for an append: one caller, or a caller of several appends queued together, which is
    /// resumed once all of them are done.
    fileprivate enum AppendWaiter: Sendable {
        case one(AppendContinuation)
        case part(of: AppendUnit, at: Int)

        func resume(returning result: Result<JobEvent, StoreError>) {
            switch self {
            case .one(let continuation): continuation.resume(returning: result)
            case .part(let unit, let index): unit.deliver(result, at: index)
            }
        }
    }

    /// The outcomes of appends queued together, collected until the last one arrives.
    fileprivate final class AppendUnit: Sendable {
        private struct Collected {
            var results: [Result<JobEvent, StoreError>?]
            var missing: Int
        }

        private let collected: Mutex<Collected>
        private let continuation: CheckedContinuation<[Result<JobEvent, StoreError>], Never>

        init(count: Int, continuation: CheckedContinuation<[Result<JobEvent, StoreError>], Never>) {
            collected = Mutex(Collected(results: Array(repeating: nil, count: count), missing: count))
            self.continuation = continuation
        }

        func deliver(_ result: Result<JobEvent, StoreError>, at index: Int) {
            let complete: [Result<JobEvent, StoreError>]? = collected.withLock { collected in
                collected.results[index] = result
                collected.missing -= 1
                guard collected.missing == 0 else { return nil }
                return collected.results.map { $0! }
            }
            if let complete { continuation.resume(returning: complete) }
        }
    }

    private enum Work: Sendable {
        case append(PendingEvent, AppendWaiter)
        case claim(ClaimRequest, ClaimContinuation)
        case call(Call)

        var isAppend: Bool {
            if case .append = self { return true }
            return false
        }
    }

    /// Claims and calls end a commit's wait for more appends (see `init`'s `appendCommitSpacingUs`).
    private let queue = BatchHandOff<Work>(isUrgent: { !$0.isAppend })
    private let thread = Mutex<pthread_t?>(nil)
    private let flush: Flush
    /// How long a group commit may keep retrying while `flush` finds the write lock taken (nil: it
    /// does not retry; `flush` waits for the lock itself).
    private let busyRetryNs: UInt64?
    /// A cap on `busyRetryNs` another thread may set at any time (`capBusyRetries`); `UInt64.max`: none.
    private let busyRetryCapNs = Atomic<UInt64>(.max)
    /// A lock between processes that each group commit holds around `flush` (nil: none).
    private let writerLock: GroupCommitLock?
    private let stats = Mutex(GroupCommitStats())
    /// Signalled when the thread has ended.
    private let ended = DispatchSemaphore(value: 0)
    /// Where committed group commits wait for their sync before their waiters resume (nil: `flush`
    /// returns only once its commit is durable).
    private let syncer: CommitSyncer?
    /// How long a small group commit of appends alone waits for more when the previous group commit was
    /// made less than this long before (nil: a commit starts as soon as anything is queued). See `init`.
    private let appendCommitSpacingNs: UInt64?
    /// When the last group commit was made (monotonic ns; `neverCommitted` before the first); read and
    /// written on the executor thread only. Not 0 before the first: the monotonic clock counts from the
    /// machine's boot, so a first append within the spacing of the boot would wait the spacing out.
    private let lastCommitEndNs = Atomic<UInt64>(StoreExecutor.neverCommitted)
    private static let neverCommitted = UInt64.max
    /// When the thread took up the work it is doing now (a call, or a group commit), monotonic ns; 0
    /// while it waits for work. Read from any thread (`workInHandNs`).
    private let workTakenUpNs = Atomic<UInt64>(0)

    /// A group commit that already holds this many appends does not wait for more (see `init`).
    static let spacedCommitFullAt = 32

    /// The syncing thread's name beside the executor's (`jobctl-store` → `jobctl-store-s`): "-sync"
    /// appended would be cut at Linux's 15 bytes into the executor's own name for longer ones.
    static func syncThreadName(of name: String) -> String {
        ThreadName.prefix(name, bytes: ThreadName.limit - 2) + "-s"
    }

    /// Starts the thread; `flush` writes a group commit (it runs on the thread).
    ///
    /// With `busyRetryMs`, `flush` is expected to give up quickly (`StoreError.busy`, nothing written)
    /// while another process holds the database's write lock. The executor then adds to the commit the
    /// appends queued meanwhile and tries again, for up to `busyRetryMs` in all, so that under
    /// contention one commit (one lock hand-over, one sync) carries everything that arrived while it
    /// waited, instead of a fixed batch waiting while the next one piles up behind it.
    ///
    /// With `writerLock`, each group commit first takes that lock (waiting at most what is left of
    /// `busyRetryMs`, or the whole of it), then adds to the commit the appends queued while it waited,
    /// and releases it after `flush`: waiting there costs no CPU, and the commit that follows carries
    /// everything that arrived meanwhile.
    ///
    /// With `durabilityBarrier`, `flush` only commits, and the sync is the barrier's: a second thread
    /// runs it for the commits made so far and only then resumes their waiters, while this thread goes
    /// on with the next transaction. Nothing is reported written before its commit is synced, yet the
    /// executor does not sit idle through each sync, and the writer lock between processes is released
    /// before it. Calls (`sync`, `run`) are not deferred: they do their own syncing.
    ///
    /// With `appendCommitSpacingUs`, a group commit that would hold appends alone, fewer than
    /// `spacedCommitFullAt`, and come less than that long after the previous group commit was made, first
    /// waits that long for more appends, or until a claim or a call is queued (those never wait).
    /// Busy with many short transfers, a worker's outcomes then share fewer, larger commits — each
    /// commit's fixed cost (its transaction, the pages it rewrites in SQLite's WAL, its sync) spread over
    /// more events — at the price of at most that long before an outcome is written (PostgreSQL's
    /// `commit_delay` does the same for its WAL flushes); an append after a quiet spell is written at once.
    /// Durability is unchanged: a waiter still resumes only once its commit is synced.
    public init(name: String, busyRetryMs: Int64? = nil, writerLock: GroupCommitLock? = nil,
                durabilityBarrier: DurabilityBarrier? = nil, appendCommitSpacingUs: Int64? = nil,
                flush: @escaping Flush) throws(StoreError) {
        self.flush = flush
        self.appendCommitSpacingNs = appendCommitSpacingUs.flatMap { $0 > 0 ? UInt64($0) * 1_000 : nil }
        do throws(ThreadStartFailure) {
            self.syncer = try durabilityBarrier.map { (barrier) throws(ThreadStartFailure) in
                try CommitSyncer(name: Self.syncThreadName(of: name), barrier: barrier)
            }
        } catch {
            throw StoreError.io(error.description)
        }
        self.writerLock = writerLock
        self.busyRetryNs = busyRetryMs.map { UInt64(max(0, $0)) * 1_000_000 }
        let started = DispatchSemaphore(value: 0)
        do throws(ThreadStartFailure) {
            try StartedThread.start(name: name) { [self] in
                self.thread.withLock { $0 = pthread_self() }
                started.signal()
                self.loop()
            }
        } catch {
            syncer?.finish()  // its thread, started above, ends
            throw StoreError.io(error.description)
        }
        // Calls made before the thread knows its own id would not be recognised as its own.
        started.wait()
    }

    /// Whether the caller is the executor thread.
    private var isCurrent: Bool {
        guard let id = thread.withLock({ $0 }) else { return false }
        return pthread_equal(id, pthread_self()) != 0
    }

    // MARK: - Calls

    /// Runs `body` on the executor and returns its result, blocking the calling thread meanwhile (at
    /// once when the caller is the executor).
    public func sync<T>(_ body: @escaping () throws(StoreError) -> T) throws(StoreError) -> T {
        if isCurrent { return try body() }
        let outcome = Outcome<T>()
        let done = DispatchSemaphore(value: 0)
        enqueue(.call(Call({
            outcome.result = Result { () throws(StoreError) -> T in try body() }
            return {}
        }, done: done)))
        done.wait()
        guard let result = outcome.result else {
            // The executor signals `done` only after running the call, which sets the result.
            throw StoreError.invalidControl("the store's executor finished a call without a result")
        }
        return try result.get()
    }

    /// Runs `body` on the executor and resumes the caller with its result.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            enqueue(.call(Call({
                let result = Result { try body() }
                return { continuation.resume(with: result) }
            }, done: nil)))
        }
    }

    /// Appends one event in the next group commit.
    public func append(_ event: PendingEvent) async -> Result<JobEvent, StoreError> {
        await withCheckedContinuation { continuation in
            enqueue(.append(event, .one(continuation)))
        }
    }

    /// Appends events side by side, in order, in the next group commit: they are queued at once, so no
    /// other work comes between them and one transaction writes them all.
    public func append(_ events: [PendingEvent]) async -> [Result<JobEvent, StoreError>] {
        guard !events.isEmpty else { return [] }
        return await withCheckedContinuation { continuation in
            let unit = AppendUnit(count: events.count, continuation: continuation)
            enqueue(contentsOf: events.enumerated().map { index, event in .append(event, .part(of: unit, at: index)) })
        }
    }

    /// Claims in the same transaction as the appends queued before it (one sync for both).
    public func claim(_ request: ClaimRequest) async -> Result<[ClaimedJob], StoreError> {
        await withCheckedContinuation { continuation in
            enqueue(.claim(request, continuation))
        }
    }

    /// Finishes queued work, ends the thread and waits until it has ended, so that nothing the thread
    /// held (the calls' closures, and through them the connection) outlives this call: the store that
    /// stops its executor in `deinit` closes its database then, deterministically. From the executor
    /// thread itself (the store's last reference dropped there) it cannot wait, and does not.
    public func stop() {
        queue.close()
        if !isCurrent { ended.wait() }
    }

    /// The group commits made so far: totals and events per commit (a snapshot).
    public var groupCommitStats: GroupCommitStats {
        var snapshot = stats.withLock { $0 }
        snapshot.deferredSyncs = syncer?.syncs
        return snapshot
    }

    /// How long the thread has been on the work it is doing now (a call, or a group commit and its waits
    /// for a lock), in nanoseconds; nil while it waits for work. A store tells from it whether its thread
    /// is held in a wait its code bounds (see `JobStore.isWaitingWithinBounds(forAtLeastMs:)`).
    public var workInHandNs: UInt64? {
        let taken = workTakenUpNs.load(ordering: .relaxed)
        guard taken != 0 else { return nil }
        let now = Self.monotonicNs()
        return now > taken ? now - taken : 0
    }

    /// Whether the thread has been on its work for at least `minimumMs`, and for less than `boundNs`.
    public func isOnWork(forAtLeastMs minimumMs: Int64, lessThanNs boundNs: UInt64) -> Bool {
        guard let inHand = workInHandNs else { return false }
        return inHand >= UInt64(max(0, minimumMs)) * 1_000_000 && inHand < boundNs
    }

    /// Calls queued and not yet taken by the thread (tests).
    public var queuedCount: Int { queue.withItems { $0.count } }

    /// Whether the thread is waiting for more appends before a group commit (tests; see `init`).
    public var isLingering: Bool { queue.isLingering }

    private func enqueue(_ work: Work) {
        queue.put(work)
    }

    private func enqueue(contentsOf work: [Work]) {
        queue.put(contentsOf: work)
    }

    // MARK: - The thread

    private func loop() {
        while var batch = queue.takeAll() {
            if let spacing = appendCommitSpacingNs, batch.count < Self.spacedCommitFullAt, batch.allSatisfy(\.isAppend) {
                let now = Self.monotonicNs()
                let last = lastCommitEndNs.load(ordering: .relaxed)
                if last != Self.neverCommitted, now &- last < spacing {
                    queue.linger(untilNs: now &+ spacing)
                    let gathered = queue.takeQueued()
                    batch += gathered
                    let appends = gathered.lazy.filter(\.isAppend).count
                    stats.withLock { $0.recordSpaced(gathering: appends) }
                }
            }
            process(batch)
        }
        // Every commit's waiters are resumed before the thread ends.
        syncer?.finish()
        ended.signal()
    }

    private func process(_ batch: [Work]) {
        defer { workTakenUpNs.store(0, ordering: .relaxed) }
        var appends: [(PendingEvent, AppendWaiter)] = []
        for work in batch {
            switch work {
            case .append(let event, let continuation):
                appends.append((event, continuation))
            case .claim(let request, let continuation):
                write(&appends, thenClaim: (request, continuation))
            case .call(let call):
                // Calls see every append queued before them.
                write(&appends)
                takingUp()
                call.perform()
            }
        }
        write(&appends)
    }

    /// Notes that the thread takes up a new piece of work now (see `workInHandNs`).
    private func takingUp() {
        workTakenUpNs.store(Self.monotonicNs(), ordering: .relaxed)
    }

    /// Writes the queued appends in one transaction — with the claim, when there is one, after them in
    /// the same transaction — and resumes every waiter with its outcome.
    private func write(_ appends: inout [(PendingEvent, AppendWaiter)],
                       thenClaim request: (ClaimRequest, ClaimContinuation)? = nil) {
        guard !appends.isEmpty || request != nil else { return }
        takingUp()
        // A claim queued while the commit waited for the writer lock may join it (see below).
        var claim = request
        defer { if appendCommitSpacingNs != nil { lastCommitEndNs.store(Self.monotonicNs(), ordering: .relaxed) } }
        do throws(StoreError) {
            let outcome = try flushGathering(&appends, thenClaim: &claim)
            // Counted before any waiter resumes, so a waiter that reads the stats sees its commit.
            stats.withLock { $0.recordCommit(of: appends.count) }
            let committed = CommittedWrite(outcome: outcome, appendWaiters: appends.map(\.1), claimWaiter: claim?.1)
            if let syncer {
                syncer.submit(committed)
            } else {
                committed.resume(synced: nil)
            }
        } catch {
            for entry in appends { entry.1.resume(returning: .failure(error)) }
            claim?.1.resume(returning: .failure(error))
        }
        appends.removeAll(keepingCapacity: true)
    }

    /// Cuts the retries of a group commit that another process's write lock keeps out short to `atMostNs`
    /// (nil: the busy timeout again), for a stopping worker (see `JobStore.capLockWaits`).
    public func capBusyRetries(atMostNs limitNs: UInt64?) {
        busyRetryCapNs.store(limitNs ?? .max, ordering: .relaxed)
    }

    /// `flush`, and while it reports the write lock busy (and `busyRetryNs` allows), again with the
    /// appends queued meanwhile added to `appends`.
    ///
    /// Only appends at the head of the queue are taken, up to the first claim or call, which stay
    /// queued in their order. The appends taken come from tasks running concurrently with everything
    /// still to be processed, and a task queues its next event only after the previous one's outcome,
    /// so no job's events change order. A busy `flush` wrote nothing (its transaction never began or
    /// was rolled back), so retrying cannot write an event twice.
    private func flushGathering(_ appends: inout [(PendingEvent, AppendWaiter)],
                                thenClaim claim: inout (ClaimRequest, ClaimContinuation)?) throws(StoreError) -> AppendAndClaimOutcome {
        guard let busyRetryNs else { return try flushHoldingWriterLock(&appends, thenClaim: &claim, waitingAtMostNs: nil) }
        let started = Self.monotonicNs()
        while true {
            let limitNs = min(busyRetryNs, busyRetryCapNs.load(ordering: .relaxed))
            do throws(StoreError) {
                let waited = Self.monotonicNs() &- started
                return try flushHoldingWriterLock(&appends, thenClaim: &claim,
                                                  waitingAtMostNs: limitNs > waited ? limitNs - waited : 0)
            } catch {
                guard case .busy = error, Self.monotonicNs() &- started < min(limitNs, busyRetryCapNs.load(ordering: .relaxed)) else { throw error }
                let gathered = takeQueued(claimToo: false).appends
                appends += gathered
                stats.withLock { $0.recordBusyRetry(gathering: gathered.count) }
            }
        }
    }

    /// `flush` with the writer lock held, when there is one: takes it (waiting at most `waitNs`, without
    /// a limit when nil), adds the appends queued while it waited — and, when this commit has no claim,
    /// the first claim among them with the appends queued after it — flushes, releases it. Throws `busy`
    /// when the lock stayed held elsewhere for the whole wait (nothing written).
    ///
    /// A claim taken along runs after every append of the commit, as a claim always does; the appends
    /// queued after it cannot belong to the jobs it claims (those are known only once it returns), so
    /// writing them before it changes no job's order of events. With several worker processes this
    /// saves a commit per turn of a worker's slots: the `succeeded` events and the claim that refills the
    /// slots they free, queued a moment apart while the lock was held elsewhere, share one.
    private func flushHoldingWriterLock(_ appends: inout [(PendingEvent, AppendWaiter)],
                                        thenClaim claim: inout (ClaimRequest, ClaimContinuation)?,
                                        waitingAtMostNs waitNs: UInt64?) throws(StoreError) -> AppendAndClaimOutcome {
        guard let writerLock, try writerLock.acquire(waitNs ?? .max) else { return try flush(appends.map(\.0), claim?.0) }
        defer { writerLock.release() }
        let gathered = takeQueued(claimToo: claim == nil)
        if !gathered.appends.isEmpty || gathered.claim != nil {
            appends += gathered.appends
            if let taken = gathered.claim { claim = taken }
            stats.withLock { $0.recordGatheredWhileLocking(gathered.appends.count, claim: gathered.claim != nil) }
        }
        return try flush(appends.map(\.0), claim?.0)
    }

    /// Removes the appends at the head of the queue and returns them: up to the first other work, or
    /// with `claimToo` past the first claim (taken too) up to the next other work.
    private func takeQueued(claimToo: Bool) -> (appends: [(PendingEvent, AppendWaiter)], claim: (ClaimRequest, ClaimContinuation)?) {
        queue.withItems { queued in
            var taken: [(PendingEvent, AppendWaiter)] = []
            var claim: (ClaimRequest, ClaimContinuation)?
            var count = 0
            for work in queued {
                if case .append(let event, let continuation) = work {
                    taken.append((event, continuation))
                } else if case .claim(let request, let continuation) = work, claimToo, claim == nil {
                    claim = (request, continuation)
                } else {
                    break
                }
                count += 1
            }
            queued.removeFirst(count)
            return (taken, claim)
        }
    }

    fileprivate static func monotonicNs() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}

/// A committed group commit whose waiters have not been resumed yet.
private struct CommittedWrite: Sendable {
    let outcome: AppendAndClaimOutcome
    let appendWaiters: [StoreExecutor.AppendWaiter]
    let claimWaiter: StoreExecutor.ClaimContinuation?

    /// Resumes every waiter with the commit's outcome, or with `synced`'s error when the commit could
    /// not be made durable (it may be in the log: a writer that retries finds out, see `LeaseSink`).
    func resume(synced failure: StoreError?) {
        if let failure {
            claimWaiter?.resume(returning: .failure(failure))
            for waiter in appendWaiters { waiter.resume(returning: .failure(failure)) }
            return
        }
        claimWaiter?.resume(returning: outcome.claimed)
        for (index, waiter) in appendWaiters.enumerated() {
            waiter.resume(returning: outcome.appended[index])
        }
    }
}

/// The thread that syncs committed group commits and then resumes their waiters: each turn takes
/// every commit made since the last, runs the barrier once for all of them (it covers every commit
/// made before it starts), and resumes them in commit order.
private final class CommitSyncer: Sendable {
    private let committed = BatchHandOff<CommittedWrite>()
    private let syncCount = Mutex(0)
    private let barrier: StoreExecutor.DurabilityBarrier
    private let ended = DispatchSemaphore(value: 0)

    init(name: String, barrier: @escaping StoreExecutor.DurabilityBarrier) throws(ThreadStartFailure) {
        self.barrier = barrier
        try StartedThread.start(name: name) { [self] in self.loop() }
    }

    /// Queues a committed write for the next sync.
    func submit(_ write: CommittedWrite) {
        committed.put(write)
    }

    /// Barriers run so far (each for one or more commits).
    var syncs: Int { syncCount.withLock { $0 } }

    /// Syncs and resumes everything queued, then ends the thread and waits until it has ended.
    func finish() {
        committed.close()
        ended.wait()
    }

    private func loop() {
        while let taken = committed.takeAll() {
            var failure: StoreError?
            do throws(StoreError) { try barrier() } catch { failure = error }
            syncCount.withLock { $0 += 1 }
            for write in taken { write.resume(synced: failure) }
        }
        ended.signal()
    }
}

/// Items handed from any thread to one consuming thread, which takes all of them at once: the
/// executor's queued work, the syncer's committed writes.
private final class BatchHandOff<Item: Sendable>: Sendable {
    private struct State {
        var items: [Item] = []
        var closed = false
        /// Whether an urgent item is among `items`.
        var urgentQueued = false
        /// Whether the consumer lingers (see `linger`).
        var lingering = false

        /// Whether a hand-over now has to wake the consumer: always, unless it lingers and nothing
        /// that ends the linger has arrived.
        var wakesConsumer: Bool { !lingering || closed || urgentQueued }
    }

    private let state = Mutex(State())
    private let condition = NSCondition()
    /// Which items end a linger at once.
    private let isUrgent: @Sendable (Item) -> Bool

    init(isUrgent: @escaping @Sendable (Item) -> Bool = { _ in true }) {
        self.isUrgent = isUrgent
    }

    /// Hands over one item.
    func put(_ item: Item) {
        let urgent = isUrgent(item)
        let wakes = state.withLock { state in
            state.items.append(item)
            if urgent { state.urgentQueued = true }
            return state.wakesConsumer
        }
        if wakes { wake() }
    }

    /// Hands over several items, side by side.
    func put(contentsOf items: [Item]) {
        let urgent = items.contains(where: isUrgent)
        let wakes = state.withLock { state in
            state.items.append(contentsOf: items)
            if urgent { state.urgentQueued = true }
            return state.wakesConsumer
        }
        if wakes { wake() }
    }

    /// No more items come: `takeAll` returns what is left, then nil.
    func close() {
        state.withLock { $0.closed = true }
        wake()
    }

    /// Every item handed over and not taken yet, waiting until there is one; nil once closed and empty.
    func takeAll() -> [Item]? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            let (taken, closed) = state.withLock { state in (Self.take(&state), state.closed) }
            if !taken.isEmpty { return taken }
            if closed { return nil }
            condition.wait()
        }
    }

    /// Whether the consumer is in `linger`.
    var isLingering: Bool { state.withLock { $0.lingering } }

    /// Every item handed over and not taken yet, without waiting (none: empty).
    func takeQueued() -> [Item] {
        state.withLock { Self.take(&$0) }
    }

    private static func take(_ state: inout State) -> [Item] {
        let taken = state.items
        state.items.removeAll(keepingCapacity: true)
        state.urgentQueued = false
        return taken
    }

    /// Waits, without being woken by the hand-overs meanwhile, until `deadlineNs` (monotonic), an urgent
    /// item is queued or the hand-off is closed, whichever comes first; the items stay queued. (The
    /// condition's timeout is on the wall clock: were it stepped back during the wait, the wait would
    /// last until the next urgent item — in a worker, its next call, within a poll interval.)
    func linger(untilNs deadlineNs: UInt64) {
        condition.lock()
        defer { condition.unlock() }
        let ready = state.withLock { state -> Bool in
            state.lingering = true
            return state.wakesConsumer
        }
        defer { state.withLock { $0.lingering = false } }
        if ready { return }
        while true {
            let now = StoreExecutor.monotonicNs()
            guard now < deadlineNs else { return }
            _ = condition.wait(until: Date(timeIntervalSinceNow: Double(deadlineNs - now) / 1_000_000_000))
            if state.withLock({ $0.wakesConsumer }) { return }
        }
    }

    /// Runs `body` on the items not taken yet (the consumer taking some of them out of turn).
    func withItems<T>(_ body: (inout [Item]) -> T) -> T {
        state.withLock { state in
            let result = body(&state.items)
            state.urgentQueued = state.items.contains(where: isUrgent)
            return result
        }
    }

    /// The consumer checks for items under `condition` before it waits, so a signal sent after the
    /// items were added is never lost.
    private func wake() {
        condition.lock()
        condition.signal()
        condition.unlock()
    }
}

/// A lock between processes that a store's group commit holds around its transaction (the SQLite
/// store's writer lock), so that a waiting commit sleeps until the holder is done and then writes
/// everything queued meanwhile in one transaction.
public struct GroupCommitLock: Sendable {
    /// Takes the lock, waiting at most the given nanoseconds. True: held, and `release` follows; false:
    /// no lock is in use (the commit goes ahead without). Throws `StoreError.busy` when the wait ran out.
    public let acquire: @Sendable (_ waitNs: UInt64) throws(StoreError) -> Bool
    /// Releases a lock `acquire` took.
    public let release: @Sendable () -> Void

    public init(acquire: @escaping @Sendable (_ waitNs: UInt64) throws(StoreError) -> Bool,
                release: @escaping @Sendable () -> Void) {
        self.acquire = acquire
        self.release = release
    }
}
