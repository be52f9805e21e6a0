import Foundation
import JobLifecycle
import JobModel
import Storage
import StorePort
import Synchronization
import Tasks

/// How a worker process behaves.
public struct WorkerConfiguration: Sendable {
    /// Recorded as the lease owner and event actor: `worker:<host>:<pid>` by default.
    public var owner: String
    /// Transfers run at once.
    public var concurrency: Int
    /// Queues to take jobs from; nil means every queue.
    public var queues: [String]?
    /// How long a claim lasts without a heartbeat.
    public var leaseMs: Int64
    /// Exit once no job is queued or running (paused jobs do not hold the worker).
    public var drain: Bool
    /// How often an idle worker checks the store's data version for new work and control requests.
    public var pollIntervalMs: Int64
    /// Exit within this long after the first SIGTERM/SIGINT/SIGHUP.
    public var shutdownGraceMs: Int64
    /// How often the orphan sweep runs after the one at start (0: only at start and before a drain exits).
    public var orphanSweepIntervalMs: Int64
    /// Jobs claimed ahead of free slots and held, leased and heartbeated, until a slot frees (0: claim
    /// only for free slots). A slot that frees starts the next held job at once, so its `started`
    /// event joins the group commit of the outcome that freed the slot, and claims come in batches
    /// that share a commit with other jobs' outcomes. Held jobs are released on shutdown, honour
    /// pause and cancel at once, and are rescued like any running job when the worker dies.
    ///
    /// This is the buffer while jobs finish slowly. When they finish fast, it grows to what finished in
    /// the last `claimAheadHorizonMs` (up to sixteen times this, at most 256), so a claim's round trip
    /// does not leave slots idle; held jobs then wait a few milliseconds, not long enough to matter to
    /// other workers.
    public var claimAhead: Int
    /// How long an attempt's `started` event may wait to be written with the attempt's next event (its
    /// first progress or its end, in one commit) while its transfer runs; nil: written before the
    /// transfer begins. A transfer shorter than this costs its job one commit and one projection write
    /// fewer; the event keeps the time the attempt started either way.
    public var startedHoldMs: Int64?
    /// The machine this worker runs on, as the orphan sweep's watermark names it (its disk is the one the
    /// sweep looks at): the host name by default, as `hostname` prints it.
    public var host: String
    /// The longest the loop rests after a store error before it tries again (the rest grows by 250 ms an
    /// error up to this). A service manager's watchdog fed from the loop needs a rest well inside its
    /// interval: `jobctl worker` sets a quarter of it (see `ServiceNotifier`).
    public var errorRestLimitMs: Int64 = 5_000

    public init(owner: String = WorkerConfiguration.defaultOwner(), concurrency: Int = 4, queues: [String]? = nil,
                leaseMs: Int64 = 30_000, drain: Bool = false, pollIntervalMs: Int64 = 20, shutdownGraceMs: Int64 = 8_000,
                orphanSweepIntervalMs: Int64 = 300_000, claimAhead: Int? = nil, startedHoldMs: Int64? = 200,
                host: String = WorkerConfiguration.localHostName()) {
        self.owner = owner
        self.host = host
        self.concurrency = max(1, concurrency)
        self.queues = queues
        self.leaseMs = max(1_000, leaseMs)
        self.drain = drain
        self.pollIntervalMs = max(1, pollIntervalMs)
        self.shutdownGraceMs = shutdownGraceMs
        self.orphanSweepIntervalMs = max(0, orphanSweepIntervalMs)
        self.claimAhead = max(0, claimAhead ?? self.concurrency)
        self.startedHoldMs = startedHoldMs.map { max(0, $0) }
    }

    /// `worker:<this machine's name>:<pid>`, the machine named as the sweep's `host` names it.
    public static func defaultOwner() -> String {
        "worker:\(localHostName()):\(getpid())"
    }

    /// This machine's name as `gethostname(2)` gives it (what `hostname` prints), without the name
    /// lookup `ProcessInfo.hostName` may make; "localhost" when there is none.
    public static func localHostName() -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let ok = buffer.withUnsafeMutableBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { chars in
                guard let start = chars.baseAddress else { return false }
                return gethostname(start, chars.count - 1) == 0
            }
        }
        let name = String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self)
        return ok && !name.isEmpty ? name : "localhost"
    }
}

/// What a worker did, for the exit summary.
public struct WorkerSummary: Sendable, Equatable {
    public var claimed = 0
    public var succeeded = 0
    public var failed = 0
    public var retried = 0
    public var paused = 0
    public var cancelled = 0
    public var released = 0
    public var abandoned = 0
    /// Jobs of other workers (or of this one, once its lease ran out) whose expired lease this worker's
    /// rescue took back, and of those the ones it ended `failed` (their last attempt died with its worker).
    public var rescued = 0
    public var rescuedFailed = 0
    public var groupCommits = 0
    public var eventsWritten = 0
    /// A drain's end: the queued jobs of its queues left waiting for a job that did not finish in it (one
    /// paused, or queued in a queue this worker does not take). They do not hold a drain, which ran all it could.
    public var leftWaiting = 0
}

/// What a drain that ended left queued in its queues (`WorkerPool.leftWaiting`).
struct LeftWaiting: Sendable, Equatable {
    /// How many jobs.
    let count: Int
    /// One of them (from the first of its queues that has one).
    let first: String
    /// The job that holds it back: the first unfinished one up its chain of waits that is not itself waiting.
    let holder: String
    /// Why that job does not finish in this drain.
    let reason: String
}

/// A pool of task runners fed by batched claims, with heartbeats, rescue of expired leases,
/// cross-process control (pause/cancel reach a running transfer within a poll interval) and graceful
/// shutdown.
public final class WorkerPool: Sendable {
    private struct Running: Sendable {
        let runner: TaskRunner
        let token: Int64
        let kind: JobKind
        let claimedAtMs: Int64
        /// Whether this claim is the job's first event after `submitted` (no earlier attempt, pause or
        /// resume point): a success then left no local file behind (see `OrphanSweeper.noteLeftNothing`).
        let firstRun: Bool
        /// Whether the runner was started; a job claimed ahead waits in `State.waiting` until a slot frees.
        var started: Bool
        /// When the runner was started (given a slot): where its logged duration and rate begin.
        var launchedAtMs: Int64?
        /// The claim and the start on the monotonic clock: a run's duration is measured on it, since the
        /// wall clock may step meanwhile (a run across a 2 h step forward was logged as 2 h long at a
        /// rate of a few bytes a second; one across a step back as 0 ms long).
        let claimedAt = Clock.monotonicMs()
        var launchedAt: Int64?
        var stopRequested: StopReason?
        /// When the lease ends unless a heartbeat extends it (as this worker last set it).
        var leaseExpiresAtMs: Int64
        /// Whether the log already said this run lost its lease (a heartbeat or a fenced append may tell first).
        var leaseLossLogged = false
        /// Whether the runner was asked to write its held `started` (see `startedHoldMs`).
        var heldEventsAsked = false
        /// Whether the transfer has returned: the slot went to the next job while this one's outcome is
        /// written.
        var transferReturned = false
        /// Whether `finished` is logging this run's outcome: the stop's sweep of the runs left leaves it
        /// to that, and waits for it.
        var reporting = false
    }

    private struct State: Sendable {
        /// Every job this worker holds a lease on: started ones and those claimed ahead.
        var running: [String: Running] = [:]
        /// Runs whose job this worker claimed again while they were still ending (their outcome written,
        /// their files being removed: a `retry` or `resume` came in between), by lease token. Their
        /// entry in `running` is the new attempt's; they hold no lease, and give back their slot (or
        /// their place among `finishing`) when they return.
        var superseded: [Int64: Running] = [:]
        /// Jobs claimed ahead, in claim order, not started yet.
        var waiting: [String] = []
        /// Runners started whose transfer has not returned: the slots in use.
        var active = 0
        /// Runners whose transfer returned and whose outcome is being written: they hold a lease and no
        /// slot, and take no room from the claim-ahead buffer (up to `concurrency` of them).
        var finishing = 0
        var summary = WorkerSummary()
        var shuttingDown = false
        /// Why the worker stopped itself: a fault of this process, not of a job (`stopForLocalFault`).
        var localFault: String?
        /// When the shutdown began (`beginShutdown`, the wall clock's ms): its grace counts from then.
        var shutdownBeganAtMs: Int64?
        var slotFreed = false
        /// An error a job's write met that no retry mends (`stopsTheWorker`): the loop stops on it.
        var fatalStoreError: StoreError?
        /// Runs finished lately, which size the claim-ahead buffer.
        var finishes = FinishCounter()
        /// The highest lease token this worker has held.
        var highestToken: Int64 = 0
        /// Set when a claim failed without an answer: it may have committed, leaving jobs leased to this
        /// worker that it does not know of. The next turn adopts them (see `adoptUnansweredClaims`).
        var unansweredClaims: UnansweredClaims?
        /// Since when the store has been failing with no job's outcome written, the loop's calls and the
        /// runs' writes alike (see `drainGivesUp`).
        var failures = StoreFailureStreak()
        /// A run's write failed since the loop last looked (see `noteRunWriteFailed`): the error, and how
        /// long the streak had lasted then.
        var runWriteFailure: (error: StoreError, failingForMs: Int64)?
        /// The drain gave up on its store (`giveUpDrain`): the runs writing their outcome stop retrying.
        var drainGaveUp = false

        /// The jobs whose transfer has not returned: those started and under way, and those claimed ahead
        /// and not started yet. A drain never gives up while one is left (see `drainGivesUp`).
        var transferring: Int { running.values.count { !$0.transferReturned } }

        /// The jobs that count against the slots and the claim-ahead buffer: every job held but those
        /// whose outcome is being written, of which up to `concurrency` are not counted (so a slow
        /// commit still bounds how many jobs one worker holds).
        func heldCount(_ config: WorkerConfiguration) -> Int {
            running.count - min(finishing, config.concurrency)
        }

        /// How many jobs to hold claimed ahead of the slots now (see `WorkerConfiguration.claimAhead`).
        func claimAhead(_ config: WorkerConfiguration, now: Int64) -> Int {
            WorkerPool.claimAheadSize(configured: config.claimAhead, recentFinishes: finishes.recent(now: now))
        }
    }

    /// Runs finished in the current and the previous window of `claimAheadHorizonMs`.
    struct FinishCounter: Sendable {
        private var windowStartMs: Int64 = 0
        private var current = 0
        private var previous = 0

        mutating func note(now: Int64) {
            roll(now: now)
            current += 1
        }

        /// The larger of the two windows' counts, or 0 once no run finished for two windows.
        func recent(now: Int64) -> Int {
            let elapsed = now - windowStartMs
            if elapsed >= 2 * WorkerPool.claimAheadHorizonMs { return 0 }
            if elapsed >= WorkerPool.claimAheadHorizonMs { return current }
            return max(current, previous)
        }

        private mutating func roll(now: Int64) {
            let elapsed = now - windowStartMs
            guard elapsed >= WorkerPool.claimAheadHorizonMs else { return }
            previous = elapsed >= 2 * WorkerPool.claimAheadHorizonMs ? 0 : current
            current = 0
            windowStartMs = now
        }
    }

    public let configuration: WorkerConfiguration
    private let store: any JobStore
    private let backend: any StorageBackend
    private let state = Mutex(State())
    /// Whether the last lease renewal failed: a streak of failures is logged once, at its first.
    private let renewalsFailing = Mutex(false)
    private let wakeup = Wakeup()
    /// Whether the loop rests between two turns (waits on `wakeup`) rather than works: a loop that rests
    /// waits on no store call (see `isWaitingOnItsStore`).
    private let loopRests = Atomic<Bool>(false)
    /// Cuts the store's lock waits short once the shutdown's grace has run out (see `beginShutdown`).
    private let graceTimer = GraceTimer()
    /// The jobs' tasks not ended yet (see `launch`).
    private let jobTasks = JobTasks()
    private let sweeper: OrphanSweeper
    /// Where every transition the pool makes is reported.
    public let log: WorkerLog
    /// Counted beside each log call, for the Prometheus endpoint.
    public let metrics: WorkerMetrics

    /// A pool on `store`. Every store call goes through the store's own executor (its `async`
    /// methods), so no thread of Swift's cooperative pool ever waits for SQLite. Each transition is
    /// reported to `log` (silent by default) and counted in `metrics`.
    public init(store: any JobStore, backend: any StorageBackend, configuration: WorkerConfiguration,
                log: WorkerLog = .silent, metrics: WorkerMetrics = WorkerMetrics()) {
        self.configuration = configuration
        self.store = store
        self.backend = backend
        self.log = log
        self.metrics = metrics
        self.sweeper = OrphanSweeper(store: store, backend: backend, host: configuration.host,
                                     intervalMs: configuration.orphanSweepIntervalMs, log: log)
    }

    /// Stop claiming; ask every running transfer to pause at its resume point and release its lease.
    /// Jobs claimed ahead start now only to write `released`: their transfer never begins.
    public func beginShutdown() {
        let (runners, held): ([TaskRunner], [(String, TaskRunner)]) = state.withLock { state in
            state.shuttingDown = true
            if state.shutdownBeganAtMs == nil { state.shutdownBeganAtMs = Clock.nowMs() }
            return (state.running.values.map(\.runner), Self.startWaiting(&state, limit: .max, now: Clock.nowMs()))
        }
        wakeup.signal()
        // Whatever the store does for the stopping worker ends with its grace: with the server's path
        // silent (connections stalled or reset, new ones answered by no one) the `released` writes and the
        // lease renewals made one 10 s connection attempt after another, and the worker exited 28–62 s
        // after SIGTERM. Past the deadline no connection is tried and no answer waited for.
        store.setStopDeadline(monotonicMs: Clock.monotonicMs() + configuration.shutdownGraceMs)
        // A write waiting for a lock another process holds (SQLite waits up to its busy timeout, 30 s, per
        // statement) kept the loop from seeing the grace run out, and the worker from exiting: with nothing
        // to write it waited out the other process's lock, then wrote nothing; with runs to release it
        // exited only once the lock was free (40 s while another client held it for 40), past systemd's stop
        // timeout. With nothing to release the waits are cut to a second now (a wait already that long
        // ends at once; this process's own checkpointer or a claim in flight still gets its second);
        // otherwise once the grace is over.
        if runners.isEmpty && held.isEmpty {
            store.capLockWaits(atMostNs: Self.stoppingLockWaitNs)
        } else {
            // A `released` its store connection stalled failed only at the answer limit (the lease, at
            // least 10 s), after the grace: the worker exited without trying it on a new connection, and
            // the jobs waited for the rescue. Cut to half the grace, a retry still fits in it.
            store.capAnswerWaits(atMostMs: Self.stoppingAnswerWaitMs(configuration))
            // On a dispatch queue, not a task: the cooperative pool's threads may all be waiting then.
            let store = self.store, graceTimer = self.graceTimer
            let armed = graceTimer.state.withLock { timer in
                guard !timer.armed else { return false }
                timer.armed = true
                return true
            }
            if armed {
                // Weakly: held here, the store outlived the command and its database was never closed (its WAL left).
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(configuration.shutdownGraceMs))) { [weak store] in
                    if !graceTimer.state.withLock({ $0.runEnded }) { store?.capLockWaits(atMostNs: WorkerPool.stoppingLockWaitNs) }
                }
            }
        }
        for runner in runners {
            runner.requestStop(.shutdown)
        }
        for (jobID, runner) in held { launch(jobID, runner) }
    }

    /// Stops the worker for a fault of this process rather than of the job that met it (libcurl that does
    /// not load, a thread the system refuses; see `LocalFaults`): as a shutdown, every job it holds is
    /// released with its attempt given back — the one that met the fault too, whose stop is requested
    /// before its transfer returns the error — for another worker, or this one restarted. The first
    /// fault's reason is kept (`localFault`) for the worker's exit, which says it.
    public func stopForLocalFault(_ reason: String) {
        let first = state.withLock { state -> Bool in
            guard state.localFault == nil else { return false }
            state.localFault = reason
            return true
        }
        guard first else { return }
        beginShutdown()
    }

    /// The fault of this process that stopped the worker (see `stopForLocalFault`), if one did.
    public var localFault: String? { state.withLock { $0.localFault } }

    /// Why a run still going when the worker stopped was left (see the end of `run`).
    static let leftAtStopReason = "the worker stopped before this run's outcome could be written (the shutdown grace ran out); "
        + "the job stays running until its lease expires, then it is rescued"

    /// How long a stopping worker's writes wait for a lock (see `beginShutdown`).
    static let stoppingLockWaitNs: UInt64 = 1_000_000_000

    /// How long a stopping worker with runs to release waits for the database server's answer: half the
    /// grace (at least a second), leaving room for a retry on a new connection; an outcome's commit that
    /// takes longer (a large result) is cut and its retry asks whether it landed.
    static func stoppingAnswerWaitMs(_ config: WorkerConfiguration) -> Int64 { max(1_000, config.shutdownGraceMs / 2) }

    public var isShuttingDown: Bool { state.withLock { $0.shuttingDown } }

    /// Whether the loop is at work (not resting between turns) while the store has been held for at least
    /// `forAtLeastMs` in a call within the limits it sets itself (`JobStore.isWaitingWithinBounds`): the
    /// loop waits on the store, or behind a call that does, for a time its code bounds. What feeds a
    /// service manager's watchdog (and keeps `/healthz` alive) while a turn waits on a silent server or a
    /// lock another process holds, past the watchdog's interval: the loop turns again when the wait ends.
    /// False for a loop hung anywhere else, or on a call past the store's limits.
    public func isWaitingOnItsStore(forAtLeastMs minimumMs: Int64) -> Bool {
        !loopRests.load(ordering: .relaxed) && store.isWaitingWithinBounds(forAtLeastMs: minimumMs)
    }

    /// The loop's rest between turns (see `isWaitingOnItsStore`).
    private func rest(milliseconds: Int64) async {
        loopRests.store(true, ordering: .relaxed)
        await wakeup.wait(milliseconds: milliseconds)
        loopRests.store(false, ordering: .relaxed)
    }

    /// The states of the jobs a worker may yet run, whose newer events it logs that it left alone.
    static let unfinishedStates: Set<JobState> = [.queued, .running, .paused]

    /// Runs until shutdown (or, with `drain`, until no job is queued or running). Returns what it did.
    ///
    /// `opened` is called just after `worker_started` is logged and `closing` just before
    /// `worker_stopped` is (or before the error is thrown): what logs about the worker from outside, such
    /// as the signal handling, does so between them, so that those two lines open and close the log.
    ///
    /// `turned` is called at every turn of the worker's loop (at least every poll interval, also while
    /// it stops) with the runs under way and the summary so far: a service manager's watchdog is fed there.
    public func run(opened: () -> Void = {}, closing: () -> Void = {},
                    turned: (_ running: Int, _ summary: WorkerSummary) -> Void = { _, _ in }) async throws -> WorkerSummary {
        let config = configuration
        var lastDataVersion: Int64 = -1
        var lastDataVersionCheck: Int64 = 0
        var controlPollPending = false
        var lastControlPoll: Int64 = 0
        let heartbeats = HeartbeatTurns()
        var lastRescue: Int64 = 0
        // Whether the jobs left alone for their newer events were logged (again once none is left).
        var newerEventsLogged = false
        var nextDue: Int64? = nil
        var shutdownStarted: Int64? = nil
        var consecutiveErrors = 0
        // While a drain waits for other workers' runs (nothing of its own running, nothing to claim): the
        // next wait, and when the queue was last asked about (see `drainWait`).
        var drainWaitMs: Int64?
        var drainWaitStarted: Int64 = 0
        var lastDrainCheck: Int64 = 0
        // When the ledger was last read, and whether another writer committed since (see `schemaCheckMs`).
        var lastSchemaCheck = Clock.nowMs()
        var schemaCheckPending = false
        // Rescue promptly when a lease can have expired; heartbeat three times per lease.
        let heartbeatEvery = Self.heartbeatEveryMs(config)
        let rescueEvery = max(200, min(config.leaseMs / 2, 5_000))
        // The loop waits on the store at every turn (a claim joins a group commit); the keeper renews the
        // leases while it does, so a commit slower than a lease does not let them run out.
        let leaseKeeper = Task { [self] in await keepLeases(heartbeats, every: heartbeatEvery) }
        defer { leaseKeeper.cancel() }
        log.workerStarted(owner: config.owner, concurrency: config.concurrency, leaseMs: config.leaseMs,
                          queues: config.queues, drain: config.drain, now: Clock.nowMs())
        var closed = false
        defer { if !closed { closing() } }
        opened()
        // A sweep that found the database damaged stops the worker at the loop's next turn (`storeFailed`),
        // as a claim or a commit that finds it does: the sweep's own log line says to stop every worker.
        if let failure = await sweeper.sweepIfDue(now: Clock.nowMs()) { storeFailed(failure) }

        while true {
            let now = Clock.nowMs()
            let (shuttingDown, runningCount, heldCount, claimAhead, activeCount, waitingCount, slotFreed, oldestRun, heldTooLong, summarySoFar) = state.withLock { state in
                let freed = state.slotFreed
                state.slotFreed = false
                let oldest = state.running.values.lazy.filter { !$0.transferReturned }.compactMap(\.launchedAtMs).min()
                let stale = state.waiting.filter { id in state.running[id].map { now - $0.claimedAtMs >= Self.holdLimitMs(config) } ?? false }
                return (state.shuttingDown, state.running.count, state.heldCount(config), state.claimAhead(config, now: now),
                        state.active, state.waiting.count, freed, oldest, stale, state.summary)
            }
            turned(activeCount, summarySoFar)
            // Jobs claimed ahead that waited too long for a slot go back to the queue for other workers.
            for jobID in heldTooLong where !shuttingDown { stop(jobID, .shutdown) }
            if let holdMs = config.startedHoldMs, let oldestRun, now - oldestRun >= holdMs { askForHeldEvents(now: now, holdMs: holdMs) }
            if shuttingDown {
                // From the signal, not from the first turn that saw it: a turn waiting on the store when it
                // came (a statement the stopping worker's answer limit cut) saw it only seconds later.
                if shutdownStarted == nil { shutdownStarted = state.withLock { $0.shutdownBeganAtMs } ?? now }
                if runningCount == 0 { break }
                if let started = shutdownStarted, now - started > config.shutdownGraceMs { break }
                await rest(milliseconds: config.pollIntervalMs)
                continue
            }
            // A run's outcome the store keeps refusing while the loop's own calls go through: the drain gives
            // up as on the loop's failures (judged when a failure comes, so a spell that is over never ends it).
            if config.drain, let (error, failingForMs, failures, transferring) = state.withLock({ state -> (StoreError, Int64, Int, Int)? in
                defer { state.runWriteFailure = nil }
                return state.runWriteFailure.map { ($0.error, $0.failingForMs, state.failures.count, state.transferring) }
            }), Self.drainGivesUp(config, transferring: transferring, failingForMs: failingForMs) {
                try await giveUpDrain(error, consecutive: failures, failingForMs: failingForMs)
            }

            // A store error (a lock held past the busy timeout, a full disk) must not kill the pool and
            // strand its running transfers: report it, wait a little, try again.
            do {
                // A job's write found the log damaged or replaced: the loop's own questions may not (they can
                // be answered from pages still cached), and the worker went on idling on it for ever.
                if let fatal = state.withLock({ $0.fatalStoreError }) { throw fatal }
                // Before anything else (the rescue would expire them once their lease ran out): jobs a claim
                // whose answer was lost leased to this worker.
                if let lost = state.withLock({ $0.unansweredClaims }) { try await adoptUnansweredClaims(lost, now: now) }
                // Whether another writer changed the log (new jobs, control requests), asked at most every
                // poll interval: the loop also turns at every freed slot, and each question is a read
                // transaction on the store's thread.
                var changed = false
                if Self.isDue(since: lastDataVersionCheck, every: drainWaitMs ?? config.pollIntervalMs, now: now) {
                    lastDataVersionCheck = now
                    let version = try await store.run { try $0.dataVersion() }
                    changed = version != lastDataVersion
                    lastDataVersion = version
                    // Another writer committed: a newer jobctl may have upgraded the log (looked at every few
                    // seconds at most, one read of the ledger). This worker then stops (`stopsTheWorker`).
                    schemaCheckPending = schemaCheckPending || changed
                    if schemaCheckPending && Self.isDue(since: lastSchemaCheck, every: Self.schemaCheckMs, now: now) {
                        lastSchemaCheck = now
                        schemaCheckPending = false
                        try await store.run { try $0.refuseNewerSchema() }
                    }
                }

                // Heartbeat before the rescue: after the wall clock stepped forward by more than a lease
                // (NTP, a resumed VM), the rescue at the new time found this worker's own live leases
                // expired and took its running jobs back (an attempt spent, the transfer abandoned; with
                // max_attempts 1 the job failed). Renewed first, a live lease is never expired by its holder.
                // At the time the heartbeat is made, not the turn's `now`: the turn may have waited on the
                // store since, and a lease renewed from a time long past could already have run out.
                try await heartbeats.beatIfDue(every: heartbeatEvery) { [self] now in try await heartbeat(now: now) }
                if Self.isDue(since: lastRescue, every: rescueEvery, now: now) {
                    lastRescue = now
                    // Claims and rescues pass over jobs with a newer jobctl's event (`WorkableRows`); said
                    // once when such jobs appear (an empty index read: nothing while there are none).
                    let leftAlone = try await store.run { try $0.jobsWithNewerEvents(inStates: Self.unfinishedStates) }
                    if !leftAlone.isEmpty && !newerEventsLogged { log.newerEventsLeftAlone(leftAlone, now: now) }
                    newerEventsLogged = !leftAlone.isEmpty
                    let owner = config.owner
                    let rescued: [RescuedJob]
                    do {
                        rescued = try await store.run { try $0.rescueExpired(now: now, actor: owner) }
                    } catch {
                        metrics.storeWrites.failed(error)
                        throw error
                    }
                    // One that found no expired lease wrote nothing: it says nothing of the store's writes.
                    if !rescued.isEmpty { metrics.storeWrites.succeeded() }
                    metrics.rescued(rescued.count)
                    if !rescued.isEmpty { noteRescued(rescued, now: now) }
                }
                // Another writer's commit may carry a pause or cancel for a job here: read them, at most
                // every `controlPollMs` (while other worker processes commit all the time, a read after
                // each of their commits was ~2 read transactions a job, each re-reading pages).
                if changed { controlPollPending = true }
                if controlPollPending && runningCount > 0 && Self.isDue(since: lastControlPoll, every: Self.controlPollMs, now: now) {
                    controlPollPending = false
                    lastControlPoll = now
                    try await pollControls()
                }

                // Room for the free slots plus the claim-ahead buffer; with a buffer, claims wait until
                // half of it is free (fewer, larger claims), unless a slot is idle with nothing held.
                // Claim ahead only while slots turn over quickly (every run younger than the window):
                // behind long transfers a held job would only wait, while another worker could run it.
                let free = config.concurrency - activeCount
                let turningOver = oldestRun.map { now - $0 < Self.claimAheadWindowMs } ?? true
                let room = turningOver ? config.concurrency + claimAhead - heldCount : config.concurrency - heldCount
                let idleSlot = free > 0 && waitingCount == 0
                let wantClaim = room > 0 && (idleSlot || room >= Self.claimBatchFloor(claimAhead))
                let due = nextDue.map { $0 <= now } ?? false
                if wantClaim && (changed || slotFreed || due || lastRescue == now) {
                    let claimed = try await claim(limit: room, now: now)
                    if claimed < room {
                        let queues = config.queues
                        nextDue = try await store.run { try $0.nextRunAfter(queues: queues) }
                    }
                    if claimed > 0 { continue }
                }

                if config.drain && runningCount == 0 {
                    if drainWaitMs == nil { drainWaitStarted = now }
                    // Asked when the drain starts waiting, when another writer has committed since the last
                    // look, and at least every poll interval.
                    if drainWaitMs == nil || changed || Self.isDue(since: lastDrainCheck, every: config.pollIntervalMs, now: now) {
                        lastDrainCheck = now
                        let queues = config.queues
                        // Queued anywhere (due or not) or running in any worker holds the drain. The running
                        // jobs are counted alone (the index on the state finds them): every state's count read
                        // the whole table's index, at each turn of a worker waiting for others to finish.
                        let busy = try await store.run { store -> Bool in
                            try store.nextRunAfter(queues: queues) != nil || (try store.countJobs(filter: JobFilter(states: [.running]))) > 0
                        }
                        if !busy {
                            // Jobs still queued in its queues wait for a job this drain cannot run: said, not waited for.
                            // A note only: a read it cannot make (a job of a kind a newer jobctl wrote, which reads
                            // refuse) leaves it out rather than fail a drain that did all it could.
                            if let left = try? await store.run({ store in try Self.leftWaiting(store, queues: queues) }) {
                                state.withLock { $0.summary.leftWaiting = left.count }
                                log.drainLeftWaiting(left, now: Clock.nowMs())
                            }
                            break
                        }
                    }
                    drainWaitMs = Self.drainWait(after: drainWaitMs, changed: changed, waitedMs: now - drainWaitStarted,
                                                 pollIntervalMs: config.pollIntervalMs)
                } else {
                    drainWaitMs = nil
                }
            } catch {
                consecutiveErrors += 1
                // A damaged database stays damaged: retrying would spin for ever (a drain never ending),
                // so the worker stops and says what to do; its leases expire for the rescue. So does one
                // whose file was deleted or replaced: every write from here on would be lost.
                if let error = error as? StoreError, Self.stopsTheWorker(error) {
                    log.storeError(error, consecutive: consecutiveErrors, stopping: true, now: Clock.nowMs())
                    throw error
                }
                // A drain with no transfer under way whose store has failed for a lease's length with no
                // outcome written (a full disk, a database gone read-only) stops and says so, rather than
                // retrying for ever: a drain is a command that ends. A worker without --drain keeps trying
                // (a service outlives a full disk once space is freed).
                let ended = Clock.nowMs()
                // Jobs transferring now, not at the turn's start: the turn's own claim may have started some.
                let (failingForMs, transferring) = state.withLock { state in
                    (state.failures.failed(from: now, to: ended, gapMs: Self.streakGapMs(config)), state.transferring)
                }
                if Self.drainGivesUp(config, transferring: transferring, failingForMs: failingForMs) {
                    try await giveUpDrain(error, consecutive: consecutiveErrors, failingForMs: failingForMs)
                }
                log.storeError(error, consecutive: consecutiveErrors, now: Clock.nowMs())
                await rest(milliseconds: Self.errorRestMs(consecutiveErrors: consecutiveErrors, config))
                continue
            }
            consecutiveErrors = 0
            if let failure = await sweeper.sweepIfDue(now: now) { storeFailed(failure) }
            await rest(milliseconds: drainWaitMs ?? config.pollIntervalMs)
        }
        leaseKeeper.cancel()
        await leaseKeeper.value
        graceTimer.state.withLock { $0.runEnded = true }
        if config.drain && !isShuttingDown, let failure = await sweeper.sweepIfDue(now: Clock.nowMs(), force: true) {
            storeFailed(failure)
        }
        // Every run has reported; its task may still be on its last statements. Once none is left, no
        // task holds the pool or the store (see `launch`). Not when runs outlived the shutdown's grace.
        if state.withLock({ $0.running.isEmpty }) { await jobTasks.untilNone() }
        // The drain's last sweep (or a heartbeat since the loop's last turn) found the database damaged:
        // the drain did not end well, whatever ran.
        if let fatal = state.withLock({ $0.fatalStoreError }) {
            log.storeError(fatal, consecutive: consecutiveErrors + 1, stopping: true, now: Clock.nowMs())
            throw fatal
        }
        // Runs still going when the grace ran out (their `released` waiting for a lock another process
        // holds, a transfer that would not stop) are left to their leases: the summary said
        // `abandoned=0` while they stayed `running`. They are logged and counted as abandoned now, and
        // their entries dropped, so a run that returns later is neither logged after `worker_stopped`
        // nor counted twice.
        let now = Clock.nowMs()
        let left: [(String, Running)] = state.withLock { state in
            // Superseded runs wrote their outcome already (see `State.superseded`): nothing of theirs is left.
            // Nor is a run whose return `finished` is logging just now: its own outcome is logged and counted
            // there (taken here too, the same job had two `abandoned` lines, one of them `left at stop`).
            let left = state.running.filter { !$0.value.reporting }.map { ($0.key, $0.value) }
            for (jobID, _) in left { state.running.removeValue(forKey: jobID) }
            state.waiting.removeAll()
            state.summary.abandoned += left.count
            return left
        }
        // Those runs' entries go as soon as their lines are written: the summary counts them.
        while state.withLock({ !$0.running.isEmpty }) { try? await Task.sleep(for: .milliseconds(1)) }
        let summaryLeft = state.withLock { $0.summary }
        for (jobID, entry) in left.sorted(by: { $0.0 < $1.0 }) {
            let startedAtMs = now - max(0, Clock.monotonicMs() - (entry.launchedAt ?? entry.claimedAt))
            let outcome = TaskRunOutcome.abandoned(reason: Self.leftAtStopReason)
            log.finished(jobID: jobID, kind: entry.kind, outcome: outcome, startedAtMs: startedAtMs, now: now)
            metrics.finished(kind: entry.kind, outcome: outcome, startedAtMs: startedAtMs, now: now)
        }
        var summary = summaryLeft
        let stats = store.groupCommitStats
        summary.groupCommits = stats.commits
        summary.eventsWritten = stats.events
        closed = true
        closing()
        log.workerStopped(summary, now: Clock.nowMs())
        store.capLockWaits(atMostNs: nil)
        store.capAnswerWaits(atMostMs: nil)
        store.setStopDeadline(monotonicMs: nil)
        return summary
    }

    /// What a drain leaves queued in `queues` (nil: every queue) when it ends, or nil for nothing. Once no
    /// queued job of its queues is runnable (due or not) and no job runs anywhere, a job still queued there
    /// waits for another (or holds a newer jobctl's event: said by `newer_events`, not counted here). The
    /// first one's chain of waits is followed up to the job that holds it: paused, or queued in a queue this
    /// worker does not take. A few reads, once, at the drain's end.
    static func leftWaiting(_ store: any JobStore, queues: [String]?) throws(StoreError) -> LeftWaiting? {
        let looked: [String?] = queues.map { $0.map { Optional($0) } } ?? [nil]
        var count = 0
        for queue in looked { count += try store.countJobs(filter: JobFilter(states: [.queued], queue: queue)) }
        guard count > 0 else { return nil }
        let newer = try store.jobsWithNewerEvents(inStates: [.queued])
        var first: JobRecord?
        for queue in looked where first == nil {
            first = try store.jobs(filter: JobFilter(states: [.queued], queue: queue, limit: newer.count + 1)).first { newer[$0.id] == nil }
        }
        for id in newer.keys {
            if let job = try store.job(id), queues?.contains(job.queue) ?? true { count -= 1 }
        }
        guard count > 0, let first else { return nil }
        // Up the chain: the first dependency that has not succeeded, while it is itself a job of these
        // queues waiting in turn (bounded: a chain of waits ends, and ids are seen once).
        var current = first
        var seen: Set<String> = [first.id]
        var reason = "it waits for a job that is not in the log"
        while let after = current.spec.after {
            var holder: JobRecord?
            for id in after {
                if let job = try store.job(id), job.state != .succeeded { holder = job; break }
            }
            guard let holder, seen.insert(holder.id).inserted else { break }
            current = holder
            let inQueues = queues?.contains(holder.queue) ?? true
            if holder.state == .queued && inQueues && holder.spec.after != nil { continue }
            reason = switch holder.state {
            case .paused: "it is paused (`jobctl resume \(holder.id)`)"
            case .queued where !inQueues: "it is queued in queue \(holder.queue), which this worker does not take"
            default: "it is \(holder.state.rawValue)"
            }
            break
        }
        return LeftWaiting(count: count, first: first.id, holder: current.id, reason: reason)
    }

    /// Logs each job the rescue took back and counts them: one it failed is a failure of the drain's too
    /// (`submit && worker --drain` exited 0 with a job that had just failed for good, and no line said so).
    private func noteRescued(_ rescued: [RescuedJob], now: Int64) {
        for job in rescued { log.rescued(job, now: now) }
        let failed = rescued.count { $0.record.state == .failed }
        state.withLock { state in
            state.summary.rescued += rescued.count
            state.summary.rescuedFailed += failed
        }
    }

    /// Asks each runner whose transfer has run `holdMs` (`startedHoldMs`) to write the `started` it holds.
    private func askForHeldEvents(now: Int64, holdMs: Int64) {
        let due: [TaskRunner] = state.withLock { state in
            let ids = state.running.compactMap { jobID, entry in
                !entry.heldEventsAsked && entry.launchedAtMs.map { now - $0 >= holdMs } == true ? jobID : nil
            }
            return ids.compactMap { jobID in
                state.running[jobID]?.heldEventsAsked = true
                return state.running[jobID]?.runner
            }
        }
        for runner in due { runner.writeHeldEvents() }
    }

    /// Whether a store error ends the worker instead of being retried: the file is damaged, is no
    /// longer the one at the database's path, or its disk failed a sync.
    static func stopsTheWorker(_ error: StoreError) -> Bool {
        switch error {
        // A log a newer jobctl upgraded: each write from here on would be in the older schema's terms.
        case .damaged, .replaced, .syncFailed, .newerSchema: true
        default: false
        }
    }

    /// How often at most a worker looks whether the log was upgraded past it, once another writer committed.
    static let schemaCheckMs: Int64 = 5_000

    /// Whether something done at `since` and every `every` ms is due again at `now`; at once when the
    /// clock stepped back past `since` (else heartbeats would stop until it caught up, and the leases
    /// they keep would expire).
    static func isDue(since: Int64, every: Int64, now: Int64) -> Bool {
        now - since >= every || now < since
    }

    /// How long a drain that waits for other workers' runs sleeps before it looks again: 1 ms at first,
    /// 2 ms after a turn that saw another writer's commit, else twice the last wait, at most the poll
    /// interval. Each turn asks only whether the log changed (SQLite's `data_version`, a read of shared
    /// memory; PostgreSQL's snapshot); the queue and the running jobs are asked about only after a change
    /// (or once per poll interval). While other workers finish their last jobs they commit every few
    /// milliseconds, so the drain keeps looking every 2 ms and ends within a few of the last run's
    /// outcome — with the poll interval alone, each waiting worker of a multi-process drain ended up to
    /// 20 ms after the last run, and the drain took that much longer; behind a long run elsewhere the log
    /// stops changing and the waits grow back to the poll interval.
    ///
    /// A change brings the wait back to 2 ms only during the first `drainFastLooks` poll intervals of a
    /// wait (a second by default); after that the waits only grow. A drain can wait for as long as any job
    /// runs in any worker — for ever beside workers that never run out of work — and must not look ten
    /// times as often as it did for all that time.
    static func drainWait(after previous: Int64?, changed: Bool, waitedMs: Int64, pollIntervalMs: Int64) -> Int64 {
        let next: Int64
        if let previous {
            // Compared and doubled without overflowing, whatever the poll interval.
            let fast = changed && waitedMs / drainFastLooks < pollIntervalMs
            next = fast ? 2 : previous >= pollIntervalMs / 2 ? pollIntervalMs : previous * 2
        } else {
            next = 1
        }
        return max(1, min(pollIntervalMs, next))
    }

    /// For how many poll intervals of a drain's wait a change brings the next look back to 2 ms.
    static let drainFastLooks: Int64 = 50

    /// The least time between two reads of the running jobs' control requests (a pause or cancel from
    /// `jobctl`, seen when the log has changed): well inside the second within which they are honoured.
    static let controlPollMs: Int64 = 100

    /// The loop's rest after its `consecutiveErrors`-th store error in a row: 250 ms more each time, up to
    /// `errorRestLimitMs` (5 s unless a watchdog asks for less), at least a millisecond.
    static func errorRestMs(consecutiveErrors: Int, _ config: WorkerConfiguration) -> Int64 {
        max(1, min(config.errorRestLimitMs, 250 * Int64(consecutiveErrors)))
    }

    /// Store errors at most this far apart are one streak: longer than the loop's longest wait after an
    /// error (5 s), and than a lease.
    static func streakGapMs(_ config: WorkerConfiguration) -> Int64 { max(config.leaseMs, 10_000) }

    /// Whether a drain stops on a store that refuses writes: once the store has failed with no outcome
    /// written for the lease's length — how long the pool's own jobs would wait for a rescue anyway — and
    /// with no transfer of its own under way (one still running may yet write its outcome, and must not
    /// be cut short). Runs whose transfer has ended and whose outcome is refused do not hold it: their
    /// leases can be renewed for ever (a heartbeat is a small write; an outcome carrying a download's
    /// result may never fit), and a drain waiting for them never ended (see `giveUpDrain`).
    static func drainGivesUp(_ config: WorkerConfiguration, transferring: Int, failingForMs: Int64) -> Bool {
        config.drain && transferring == 0 && failingForMs >= config.leaseMs
    }

    /// Ends a drain whose store keeps refusing its writes (`drainGivesUp`) with `WorkerStopped`, saying
    /// so. The runs still writing their outcome are told no lease holds for their writes any more (see
    /// `leaseExpiry`): each stops retrying, is logged `abandoned` (its outcome was never written, and is
    /// never said to be) and its job stays `running` in the log until its lease expires, for the rescue of
    /// a later worker. They are waited for up to the shutdown grace, so their lines come before the exit.
    private func giveUpDrain(_ error: any Error, consecutive: Int, failingForMs: Int64) async throws -> Never {
        state.withLock { $0.drainGaveUp = true }
        log.storeError(error, consecutive: consecutive, stopping: true, now: Clock.nowMs())
        let started = Clock.monotonicMs()
        while state.withLock({ !$0.running.isEmpty }), Clock.monotonicMs() - started < configuration.shutdownGraceMs {
            await rest(milliseconds: configuration.pollIntervalMs)
        }
        if state.withLock({ $0.running.isEmpty }) { await jobTasks.untilNone() }
        throw WorkerStopped.storeRefusesWrites(WorkerLog.describe(error), cause: error as? StoreError, forMs: failingForMs)
    }

    /// A run's write failed with `error` (the store could not write; see `LeaseSink.isTransient`), in a
    /// call that ended at `end`: part of the store's streak of failures, which the loop judges at its
    /// next turn (see `drainGivesUp`). Counted from its end: one slow write whose answer was lost (a
    /// commit that outlasted the lease) is no streak — the run finds out whether it landed — and a drain
    /// gave up on it, where the job had succeeded; an outcome refused again and again for a lease is one.
    private func noteRunWriteFailed(_ error: StoreError, at end: Int64) {
        let gapMs = Self.streakGapMs(configuration)
        state.withLock { state in
            let failingForMs = state.failures.failed(from: end, to: end, gapMs: gapMs)
            state.runWriteFailure = (error, failingForMs)
        }
    }

    // MARK: - Claims

    /// Claiming ahead happens only while every running transfer started less than this long ago.
    static let claimAheadWindowMs: Int64 = 1_000

    /// How often the leases are renewed: three times a lease.
    static func heartbeatEveryMs(_ config: WorkerConfiguration) -> Int64 { max(200, config.leaseMs / 3) }

    /// How long a job claimed ahead may wait for a slot before it is released for other workers:
    /// a third of the lease (one heartbeat period), at least a second.
    private static func holdLimitMs(_ config: WorkerConfiguration) -> Int64 {
        max(1_000, config.leaseMs / 3)
    }

    /// The fewest jobs a claim asks for while the worker holds jobs claimed ahead (half the buffer).
    private static func claimBatchFloor(_ claimAhead: Int) -> Int {
        max(1, claimAhead / 2)
    }

    /// The claim-ahead buffer holds about as many jobs as finished in this long (see `claimAhead`).
    static let claimAheadHorizonMs: Int64 = 100

    /// The claim-ahead buffer for a configured one and the runs finished lately: what finished, at least
    /// the configured buffer, and grown at most to `claimAheadGrowth` times it or `claimAheadCeiling`,
    /// whichever is smaller (none when none is configured; a configured buffer above the ceiling does
    /// not grow).
    static func claimAheadSize(configured: Int, recentFinishes: Int) -> Int {
        guard configured > 0 else { return 0 }
        let grown = min(recentFinishes, claimAheadGrowth * configured, claimAheadCeiling)
        return max(configured, grown)
    }

    /// How many times the configured buffer it may grow to by itself.
    ///
    /// The buffer has to outlast a claim's round trip: a claim is asked for when half of it is left,
    /// and its jobs arrive once its commit is synced — behind the other processes' commits when several
    /// share the log. At four times (a 16-slot worker held at most 64), a 16-slot worker draining tiny
    /// jobs found no held job at ~42 % of its slot turns (~13 % at sixteen times) and spent 11–16 %
    /// more CPU a job than a 64-slot one (BENCHMARKS.md, "Claiming further ahead").
    static let claimAheadGrowth = 16

    /// How far the buffer grows by itself. A held job costs ~16 KiB (a worker at concurrency 64
    /// holding 256 peaked ~3 MiB above one holding 64) and, when transfers turn out long, waits up to
    /// `holdLimitMs` before it is released to other workers; `--claim-ahead` sets a larger buffer.
    static let claimAheadCeiling = 256

    private func claim(limit: Int, now: Int64) async throws -> Int {
        let config = configuration
        let claimed: [ClaimedJob]
        do {
            claimed = try await store.claimGrouped(
                ClaimRequest(owner: config.owner, queues: config.queues, limit: limit, leaseMs: config.leaseMs, now: now))
        } catch {
            metrics.storeWrites.failed(error)
            // The claim may have committed with only its answer lost (a connection reset after the
            // server's COMMIT): its jobs are leased to this worker, which knows nothing of them.
            state.withLock { state in
                var lost = state.unansweredClaims ?? UnansweredClaims(aboveToken: state.highestToken, leaseExpiries: [])
                lost.leaseExpiries.insert(now + config.leaseMs)
                state.unansweredClaims = lost
            }
            throw error
        }
        if claimed.isEmpty {
            metrics.storeWrites.claimFoundNothing(held: state.withLock { $0.running.count })
        } else {
            metrics.storeWrites.succeeded()
        }
        log.claimed(claimed, leaseMs: config.leaseMs, now: now)
        for job in claimed { hold(job, now: now) }
        return claimed.count
    }

    /// Takes up the jobs a claim whose answer was lost leased to this worker (see `UnansweredClaims`).
    /// Each is held as if the claim had answered: its `claimed` event is in the log with the attempt
    /// charged, and until now only the rescue would have ended it, once the lease ran out, as a run
    /// lost to a crash (with `max_attempts: 1` the job failed, its worker alive).
    private func adoptUnansweredClaims(_ lost: UnansweredClaims, now: Int64) async throws {
        let owner = configuration.owner
        let leased = try await store.run { store in
            try store.jobs(filter: JobFilter(states: [.running], readsResults: false))
                .filter { $0.leaseOwner == owner && ($0.leaseToken ?? Int64.min) > lost.aboveToken }
                .map { record in (record, try store.events(jobID: record.id).last) }
        }
        let adopted = state.withLock { state -> [ClaimedJob] in
            state.unansweredClaims = nil
            let held = Set(state.running.values.map(\.token)).union(state.superseded.keys)
            return leased.compactMap { record, last in
                lost.adopts(record, lastEvent: last, owner: owner, held: held).map { ClaimedJob(record: record, token: $0) }
            }
        }
        guard !adopted.isEmpty else { return }
        log.claimed(adopted, leaseMs: configuration.leaseMs, now: now)
        for job in adopted { hold(job, now: now) }
    }

    /// Claims of this worker that failed without an answer, which may have committed: what tells their
    /// jobs from every other running job.
    struct UnansweredClaims: Sendable, Equatable {
        /// The highest lease token the worker held before the first of them: its earlier runs (an
        /// abandoned one is the rescue's) have tokens at most this.
        var aboveToken: Int64
        /// The lease expiry each of them gave its jobs (`now + lease`, in the `claimed` events they wrote).
        var leaseExpiries: Set<Int64>

        /// The token under which this worker takes up `record`, or nil when it is not a job these claims
        /// leased to it: running, leased to `owner` under a token above `aboveToken` that the worker does
        /// not hold, with its last event the `claimed` of that token, that owner and one of these claims'
        /// expiries. The owner name (`worker:<host>:<pid>`) is not proof alone: two containers may share a
        /// host name and a pid, and another live worker's job must never be run twice under one token.
        func adopts(_ record: JobRecord, lastEvent: JobEvent?, owner: String, held: Set<Int64>) -> Int64? {
            guard record.state == .running, record.leaseOwner == owner, let token = record.leaseToken, token > aboveToken,
                  !held.contains(token), let last = lastEvent, last.type == .claimed, last.leaseToken == token,
                  last.data.leaseOwner == owner, let expiry = last.data.leaseExpiresAtMs, leaseExpiries.contains(expiry) else {
                return nil
            }
            return token
        }
    }

    /// Takes a claimed job: starts it when a slot is free, else keeps it waiting for one. A job claimed
    /// after shutdown began starts only to write `released`.
    private func hold(_ job: ClaimedJob, now: Int64) {
        let record = job.record
        let jobID = record.id
        let sink = LeaseSink(store: store, owner: configuration.owner, token: job.token, kind: record.kind, log: log, metrics: metrics,
                             leaseLost: { [weak self] in self?.noteLeaseLost(record.id, now: Clock.nowMs()) },
                             leaseExpiresAtMs: { [weak self] in self?.leaseExpiry(of: record.id) },
                             storeFailed: { [weak self] error in self?.storeFailed(error) },
                             writeFailed: { [weak self] error, end in self?.noteRunWriteFailed(error, at: end) })
        let runner = TaskRunner(jobID: record.id, spec: record.spec, attempt: record.attempts,
                                maxAttempts: record.maxAttempts, resumePoint: record.resumePointForAttempt,
                                backend: backend, sink: sink, holdStarted: configuration.startedHoldMs != nil,
                                transferReturned: { [weak self] in self?.transferReturned(jobID, token: job.token) },
                                leaseToken: job.token)
        let concurrency = configuration.concurrency
        let leaseMs = configuration.leaseMs
        let (startNow, shuttingDown) = state.withLock { state in
            let startNow = state.shuttingDown || state.active < concurrency
            // The job's last attempt here wrote its end and has not returned yet: keyed by job, its entry
            // would be taken for the new attempt's — by its return, which then dropped the new attempt from
            // the books (no heartbeat, no control read, never started when claimed ahead).
            if let previous = state.running[record.id] { state.superseded[previous.token] = previous }
            state.running[record.id] = Running(runner: runner, token: job.token, kind: record.kind, claimedAtMs: now,
                                               firstRun: record.version == 2 && record.resumePoint == nil, started: startNow, launchedAtMs: startNow ? now : nil,
                                               launchedAt: startNow ? Clock.monotonicMs() : nil, leaseExpiresAtMs: now + leaseMs)
            state.summary.claimed += 1
            state.highestToken = max(state.highestToken, job.token)
            if startNow { state.active += 1 } else { state.waiting.append(record.id) }
            return (startNow, state.shuttingDown)
        }
        if shuttingDown { runner.requestStop(.shutdown) }
        if startNow { launch(record.id, runner) }
    }

    /// Moves up to `limit` waiting jobs to started (a slot each) and returns them, for `launch`.
    private static func startWaiting(_ state: inout State, limit: Int, now: Int64) -> [(String, TaskRunner)] {
        var taken: [(String, TaskRunner)] = []
        while taken.count < limit, !state.waiting.isEmpty {
            let jobID = state.waiting.removeFirst()
            guard var entry = state.running[jobID], !entry.started else { continue }
            entry.started = true
            entry.launchedAtMs = now
            entry.launchedAt = Clock.monotonicMs()
            state.running[jobID] = entry
            state.active += 1
            taken.append((jobID, entry.runner))
        }
        return taken
    }

    /// Runs the attempt; its outcome comes back through `finished`.
    ///
    /// The task holds the pool weakly and takes its runner out of a box, so what it captured cannot keep
    /// the pool — or, through the runner's sink, the store — alive once its run is over: a task releases
    /// its captures only after its last statement. `run()` waits for `jobTasks` to reach zero, so when
    /// it returns no job's task holds either, and the command that ends the worker releases the store
    /// (and so closes the database: a checkpoint, the WAL removed) before the process exits. Before,
    /// the last job's task could still hold them then, and about one drain in six left its WAL behind.
    private func launch(_ jobID: String, _ runner: TaskRunner) {
        let handOver = RunnerHandOver(runner)
        let jobTasks = jobTasks
        jobTasks.enter()
        // Named, not inherited: a slot turned over by a returning transfer launches from that transfer's
        // thread, outside any task (see `WorkPriority`).
        Task(priority: WorkPriority.task) { [weak self] in
            await Self.runJob(jobID, handOver, reportingTo: self)
            jobTasks.leave()
        }
    }

    /// The body of a job's task (see `launch`): its locals end with it, before the task's last statement.
    private static func runJob(_ jobID: String, _ handOver: RunnerHandOver, reportingTo pool: WorkerPool?) async {
        guard let runner = handOver.take() else { return }
        // The bytes of earlier attempts the run kept, not the claim's point: a download may have dropped them.
        let (outcome, kept) = await runner.runCountingKeptBytes()
        pool?.finished(jobID, runner: runner, outcome: outcome, keptBytes: kept)
    }

    /// A runner handed to the task that runs it (see `launch`).
    private final class RunnerHandOver: Sendable {
        private let runner: Mutex<TaskRunner?>
        init(_ runner: TaskRunner) { self.runner = Mutex(runner) }
        /// The runner, once; nil after.
        func take() -> TaskRunner? { runner.withLock { runner in defer { runner = nil }; return runner } }
    }

    /// Until when this worker's lease on `jobID` holds, as far as it knows (claim or last heartbeat).
    ///
    /// Once a stopping worker's grace is over, no lease holds for its writes any more: past it the store
    /// opens no connection (`JobStore.setStopDeadline`), and the writes retried until the lease ran out
    /// only filled the log with refusals before the worker exited.
    private func leaseExpiry(of jobID: String) -> Int64? {
        let graceMs = configuration.shutdownGraceMs
        return state.withLock { state in
            if let began = state.shutdownBeganAtMs, Clock.nowMs() - began >= graceMs { return nil }
            // Nor once a drain gave up on its store: the outcomes retried would keep it from ending.
            if state.drainGaveUp { return nil }
            return state.running[jobID]?.leaseExpiresAtMs
        }
    }

    /// The entry of `runner`'s run of `jobID`: the job's current one, or one a new claim superseded.
    private static func entry(_ state: State, _ jobID: String, _ runner: TaskRunner) -> Running? {
        if let entry = state.running[jobID], entry.runner === runner { return entry }
        return state.superseded.values.first { $0.runner === runner }
    }

    private func finished(_ jobID: String, runner: TaskRunner, outcome: TaskRunOutcome, keptBytes: Int64) {
        // The run is logged (and counted) while the job is still among the running ones: a draining pool
        // only stops once none is, so no outcome's log line can be lost to the process exiting first.
        // Marked as being logged here, so that the stop's sweep (which may come between this line and the
        // entry's removal below) does not log it a second time as left behind.
        let reported = state.withLock { state -> Running? in
            guard let entry = Self.entry(state, jobID, runner) else { return nil }
            if state.running[jobID]?.runner === runner { state.running[jobID]?.reporting = true }
            return entry
        }
        if let entry = reported {
            let now = Clock.nowMs()
            // A run's duration (and the rate the log derives from it) starts when it got its slot: a job
            // claimed ahead first waits for one, and counting that wait made a 16 KiB transfer that took a
            // millisecond read as ~50 ms at ~330 KiB/s in a drain of small files. A run stopped before it
            // got a slot (released, paused, cancelled while held) counts from its claim.
            // Measured on the monotonic clock, handed on as the wall-clock start it stands for.
            let startedAtMs = now - max(0, Clock.monotonicMs() - (entry.launchedAt ?? entry.claimedAt))
            log.finished(jobID: jobID, kind: entry.kind, outcome: outcome, startedAtMs: startedAtMs, resumedFrom: keptBytes, now: now)
            metrics.finished(kind: entry.kind, outcome: outcome, startedAtMs: startedAtMs, now: now)
            if entry.firstRun, case .succeeded = outcome { sweeper.noteLeftNothing(jobID, kind: entry.kind) }
        }
        let config = configuration
        let now = Clock.nowMs()
        let (next, wake): ([(String, TaskRunner)], Bool) = state.withLock { state in
            let entry: Running?
            if let current = state.running[jobID], current.runner === runner {
                entry = state.running.removeValue(forKey: jobID)
            } else {
                entry = state.superseded.first { $0.value.runner === runner }.flatMap { state.superseded.removeValue(forKey: $0.key) }
            }
            if let entry, entry.started {
                if entry.transferReturned { state.finishing -= 1 } else { state.active -= 1 }
            }
            state.slotFreed = true
            state.finishes.note(now: now)
            // A written outcome ends the store's streak of failures: claims and rescues can go through on a
            // nearly full disk while every outcome is refused, so any write would not do.
            if outcome.wasWritten { state.failures.outcomeWritten() }
            // A run without an entry was taken by the stop's sweep, which logged and counted it as left
            // behind: counted here too, a stop's summary read `abandoned=3` for two jobs.
            guard entry != nil else { return ([], false) }
            switch outcome {
            case .succeeded: state.summary.succeeded += 1
            case .failed: state.summary.failed += 1
            case .retryScheduled: state.summary.retried += 1
            case .paused: state.summary.paused += 1
            case .cancelled: state.summary.cancelled += 1
            case .released: state.summary.released += 1
            case .abandoned: state.summary.abandoned += 1
            }
            // The freed slot goes to the next job claimed ahead at once, without a trip through the loop.
            let next = state.shuttingDown ? [] : Self.startWaiting(&state, limit: max(0, config.concurrency - state.active), now: now)
            return (next, Self.loopHasWork(state, config, now: now))
        }
        for (nextID, runner) in next { launch(nextID, runner) }
        if wake { wakeup.signal() }
    }

    /// A started job's transfer returned (the runner writes its outcome next): its slot goes to the next
    /// job claimed ahead at once, so a slot does not wait through the outcome's commit and sync. The job
    /// keeps its lease until `finished`.
    private func transferReturned(_ jobID: String, token: Int64) {
        let config = configuration
        let now = Clock.nowMs()
        let (next, wake): ([(String, TaskRunner)], Bool) = state.withLock { state in
            guard var entry = state.running[jobID], entry.token == token, entry.started, !entry.transferReturned else { return ([], false) }
            entry.transferReturned = true
            state.running[jobID] = entry
            state.active -= 1
            state.finishing += 1
            state.slotFreed = true
            let next = state.shuttingDown ? [] : Self.startWaiting(&state, limit: max(0, config.concurrency - state.active), now: now)
            return (next, Self.loopHasWork(state, config, now: now))
        }
        for (nextID, runner) in next { launch(nextID, runner) }
        if wake { wakeup.signal() }
    }

    /// Whether the loop has something to do after a slot freed: claim a batch, or notice the end.
    private static func loopHasWork(_ state: State, _ config: WorkerConfiguration, now: Int64) -> Bool {
        let claimAhead = state.claimAhead(config, now: now)
        let room = config.concurrency + claimAhead - state.heldCount(config)
        return state.shuttingDown || state.running.isEmpty || state.waiting.isEmpty || room >= claimBatchFloor(claimAhead)
    }

    // MARK: - Leases and control

    /// Heartbeats while the pool runs (until cancelled), whenever one is due and the loop has not made
    /// it: the loop heartbeats only between its waits on the store. Errors are the loop's to report (its
    /// own calls meet them too); here the next turn simply tries again.
    private func keepLeases(_ heartbeats: HeartbeatTurns, every: Int64) async {
        let tick = max(20, every / 4)
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(tick))
            if Task.isCancelled { return }
            try? await heartbeats.beatIfDue(every: every) { [self] now in try await heartbeat(now: now) }
        }
    }

    /// Renews the leases of every job held (`JobStore.renewLeases`), and stops the runs whose lease is
    /// lost. Only a lease the store says it extended is noted as extended.
    private func heartbeat(now: Int64) async throws {
        let leases = state.withLock { state in state.running.mapValues(\.token) }
        guard !leases.isEmpty else { return }
        let config = configuration
        let renewal: LeaseRenewal
        do {
            renewal = try await store.renewLeases(owner: config.owner, leases: leases, leaseMs: config.leaseMs, now: now)
        } catch {
            metrics.storeWrites.failed(error)
            // The lease keeper's beats throw to no one: unsaid, the leases ran out and the running jobs
            // went to the rescue with nothing in the log to say why.
            // One no retry mends (a damaged database) stops the worker, the lease keeper's beats' too.
            if let error = error as? StoreError { storeFailed(error) }
            if !renewalsFailing.withLock({ failing in defer { failing = true }; return failing }) {
                let expiries = state.withLock { state in leases.keys.compactMap { state.running[$0]?.leaseExpiresAtMs } }
                log.leasesNotRenewed(error, leases: leases.count, leaseLeftMs: (expiries.min() ?? now) - now,
                                     everyMs: Self.heartbeatEveryMs(config), now: Clock.nowMs())
            }
            throw error
        }
        renewalsFailing.withLock { $0 = false }
        if !renewal.renewed.isEmpty { metrics.storeWrites.succeeded() }
        let lost = renewal.lost
        // A run whose transfer has returned is writing its outcome: the heartbeat's update may have come
        // just after that commit (the job no longer running), which is no lost lease. Its outcome's own
        // append is fenced, so a lease really lost is still learnt, from there (`LeaseSink`). Taken for
        // lost, 11 of 3,000 small jobs of a drain with a 1 s lease logged `lease_lost … stopping the
        // transfer` and counted a lease loss, each having succeeded.
        let reallyLost: [String] = state.withLock { state in
            for jobID in renewal.renewed where state.running[jobID]?.token == leases[jobID] {
                state.running[jobID]?.leaseExpiresAtMs = now + config.leaseMs
            }
            return lost.filter { state.running[$0]?.transferReturned != true }
        }
        for jobID in reallyLost {
            noteLeaseLost(jobID, now: now)
            stop(jobID, .leaseLost)
        }
    }

    /// Another process changed the log: look for pause/cancel requests on our running jobs.
    private func pollControls() async throws {
        let ids = state.withLock { state in Array(state.running.keys) }
        guard !ids.isEmpty else { return }
        let controls = try await store.run { store in try store.controlStates(ids: ids) }
        for control in controls {
            if let type = control.newerEventType {
                // A newer jobctl's event (a "hold", say) this run cannot fold: it stops without an outcome,
                // as on a lost lease; the lease runs out and a newer worker's rescue takes the job.
                if state.withLock({ $0.running[control.id]?.stopRequested == nil }) {
                    log.newerEventStoppedRun(jobID: control.id, type: type, now: Clock.nowMs())
                }
                stop(control.id, .leaseLost)
            } else if control.cancelRequested || control.state == .cancelled {
                stop(control.id, .cancel)
            } else if control.pauseRequested || control.state == .paused {
                stop(control.id, .pause)
            }
        }
    }

    /// A job's write met an error that stops the worker: noted for the loop, which is woken to stop on it.
    private func storeFailed(_ error: StoreError) {
        guard Self.stopsTheWorker(error) else { return }
        state.withLock { state in if state.fatalStoreError == nil { state.fatalStoreError = error } }
        wakeup.signal()
    }

    /// Logs, once per run, that the worker learnt it no longer holds the job's lease.
    private func noteLeaseLost(_ jobID: String, now: Int64) {
        let entry: Running? = state.withLock { state in
            guard var entry = state.running[jobID], !entry.leaseLossLogged else { return nil }
            entry.leaseLossLogged = true
            state.running[jobID] = entry
            return entry
        }
        if let entry {
            log.leaseLost(jobID: jobID, kind: entry.kind, token: entry.token, now: now)
            metrics.leaseLost(kind: entry.kind)
        }
    }

    /// Asks the job's runner to stop. A job claimed ahead starts at once to write its end (`paused`,
    /// `cancelled`) or to abandon it (lease lost): its transfer never begins.
    private func stop(_ jobID: String, _ reason: StopReason) {
        let (runner, launchNow): (TaskRunner?, Bool) = state.withLock { state in
            guard var entry = state.running[jobID], entry.stopRequested == nil else { return (nil, false) }
            entry.stopRequested = reason
            let launchNow = !entry.started
            if launchNow {
                entry.started = true
                entry.launchedAtMs = Clock.nowMs()
                entry.launchedAt = Clock.monotonicMs()
                state.active += 1
                state.waiting.removeAll { $0 == jobID }
            }
            state.running[jobID] = entry
            return (entry.runner, launchNow)
        }
        runner?.requestStop(reason)
        if let runner, launchNow { launch(jobID, runner) }
    }
}

/// Persists a task's events through the store's group commit under the task's lease token (fencing).
struct LeaseSink: TaskEventSink {
    let store: any JobStore
    let owner: String
    let token: Int64
    let kind: JobKind
    let log: WorkerLog
    let metrics: WorkerMetrics
    /// Called when the store refuses an append for the lease token (fencing): the lease is gone.
    let leaseLost: @Sendable () -> Void
    /// Until when the worker's lease holds as far as it knows (nil: the job is no longer held).
    let leaseExpiresAtMs: @Sendable () -> Int64?
    /// Told of every write that failed for good (the pool stops on a damaged or replaced database).
    let storeFailed: @Sendable (StoreError) -> Void
    /// Told of every try the store could not write (`isTransient`), with when it ended: what
    /// tells a drain that an outcome is being refused for ever (see `WorkerPool.drainGivesUp`).
    let writeFailed: @Sendable (StoreError, _ endedAtMs: Int64) -> Void
    /// The `from_bytes` the attempt's `resumed` line logged, until a checkpoint holding fewer says the
    /// transfer could not keep them (`WorkerLog.restarted`).
    let resumedFrom = ResumedFrom()

    /// What an attempt's `resumed` line claimed (one sink per attempt; its events are written in order).
    final class ResumedFrom: Sendable {
        let bytes = Mutex<Int64?>(nil)
    }

    /// The first wait before a failed write is tried again; it doubles up to `maxRetryDelayMs`.
    static let firstRetryDelayMs: Int64 = 50
    static let maxRetryDelayMs: Int64 = 1_000

    func persist(_ event: PendingTaskEvent, jobID: String) async throws(TaskSinkError) {
        try await persist([event], jobID: jobID)
    }

    /// Writes `events` side by side in one group commit (a held `started` with the attempt's next
    /// event), each under this sink's lease token. A `started` keeps the time the attempt began.
    func persist(_ events: [PendingTaskEvent], jobID: String) async throws(TaskSinkError) {
        guard let last = events.last else { return }
        var remaining = events.map { event in
            PendingEvent(jobID: jobID, actor: owner, leaseToken: token,
                         occurredAtMs: event.type == .started ? event.atMs : nil, payload: event.payload)
        }
        let before = Clock.monotonicMs()   // a commit's time, not the wall clock's steps (a false slow_commit)
        var failure = await append(&remaining)
        // The store could not write at all (the server is down or restarting, the disk is full): the
        // events are not in the log, and the lease is still ours until it expires, so the write is tried
        // again — with backoff, while the lease holds — instead of abandoning the job for a rescue.
        // Fencing keeps this safe: should the job be rescued meanwhile, the retry is refused as stale.
        //
        // A failed try may still have committed: the store can fail after its COMMIT (the connection
        // broke before the answer came back). So each retry first asks whether the job's newest event
        // is one of these (same type, lease token and payload) and, if so, carries on from there instead
        // of writing it twice; and a retry refused (version moved, lease gone) is checked the same way.
        var delayMs = Self.firstRetryDelayMs
        var attempt = 0
        var firstFailure: StoreError?
        while let error = failure, Self.isTransient(error, storeIsReadOnly: store.isReadOnly) {
            let now = Clock.nowMs()
            guard let expiresAt = leaseExpiresAtMs(), now + delayMs < expiresAt else { break }
            attempt += 1
            if firstFailure == nil { firstFailure = error }
            log.writeRetrying(error, jobID: jobID, kind: kind, event: last.type, attempt: attempt, delayMs: delayMs,
                              leaseExpiresAtMs: expiresAt, now: now)
            try? await Task.sleep(for: .milliseconds(delayMs))
            delayMs = min(delayMs * 2, Self.maxRetryDelayMs)
            if await dropLanded(&remaining, failure: error) {
                failure = nil
                break
            }
            failure = await append(&remaining)
        }
        // A write whose outcome is unknown — a try failed without an answer, and the retries were refused
        // or the lease ran out before one could be made — may be in the log all the same: a commit that
        // took longer than the lease (a download's result of hundreds of MiB) is answered, or given up,
        // only after it. Reported `abandoned`, such a job was `succeeded` in the log.
        if let unknown = firstFailure ?? failure.flatMap({ Self.isTransient($0, storeIsReadOnly: store.isReadOnly) ? $0 : nil }), failure != nil,
           await dropLanded(&remaining, failure: unknown) {
            failure = nil
        }
        // A retry refused for a stale lease after a try whose outcome is unknown: that try may be what
        // ended the lease (its `failed`, `succeeded` or `paused` committed). The refusal proves its
        // transaction over, so the job's history says, without the row lock `landedEvent` waits for —
        // whose own transaction's answer can be lost too: then the worker logged `lease_lost` and
        // `abandoned … the lease is stale` while the log held its own outcome, and a drain exited 0 for a
        // job that had failed.
        if case .staleLease? = failure, let unknown = firstFailure, await dropLandedUnderLease(&remaining, failure: unknown) {
            failure = nil
        }
        let after = Clock.nowMs()
        let tookMs = Clock.monotonicMs() - before
        log.commitTook(tookMs, jobID: jobID, kind: kind, event: last.type, now: after)
        metrics.commitTook(tookMs)
        if let failure {
            if case .staleLease = failure {
                leaseLost()
                throw .staleLease
            }
            storeFailed(failure)
            throw .storage(WorkerLog.describe(failure))
        }
        // Outcomes (paused, succeeded, …) are reported by the pool when the run returns.
        for event in events {
            switch event.payload {
            case .started(let progress):
                let from = log.started(jobID: jobID, kind: kind, progress: progress, now: after)
                resumedFrom.bytes.withLock { $0 = from }
            case .progress(let progress):
                // A checkpoint holding fewer bytes than the `resumed` line claimed: the transfer dropped
                // them (found only once it ran), and the log says so as that checkpoint is written.
                if let point = progress.resumePoint,
                   let claimed = resumedFrom.bytes.withLock({ claimed -> Int64? in
                       guard let from = claimed, point.bytesDone < from else { return nil }
                       claimed = point.bytesDone > 0 ? point.bytesDone : nil
                       return from
                   }) {
                    log.restarted(jobID: jobID, kind: kind, loggedFrom: claimed, point: point, bytesTotal: progress.bytesTotal, now: after)
                }
                if log.isEnabled(.debug) { log.progress(jobID: jobID, kind: kind, progress: progress, now: after) }
            default: break
            }
        }
    }

    /// Whether the job is failed or cancelled in the log now (see `TaskEventSink.jobEndedForGood`).
    func jobEndedForGood(jobID: String) async -> Bool {
        let state = try? await store.run { store in try store.job(jobID)?.state }
        return state == .cancelled || state == .failed
    }

    /// Appends `remaining` in one group commit, removes those written before the first failure and
    /// returns that failure (nil: all written). Each try is told to `metrics.storeWrites`.
    private func append(_ remaining: inout [PendingEvent]) async -> StoreError? {
        let results = remaining.count == 1 ? [await store.appendGrouped(remaining[0])] : await store.appendGrouped(remaining)
        for (index, result) in results.enumerated() {
            if case .failure(let error) = result {
                if index > 0 { metrics.storeWrites.succeeded() }
                metrics.storeWrites.failed(error)
                if Self.isTransient(error, storeIsReadOnly: store.isReadOnly) { writeFailed(error, Clock.nowMs()) }
                remaining.removeFirst(index)
                return error
            }
        }
        metrics.storeWrites.succeeded()
        remaining.removeAll()
        return nil
    }

    /// Whether every one of `remaining` is in the log after all (a failed try that committed), found
    /// by the job's newest event; removes from it those that are. Logged against `failure`.
    private func dropLanded(_ remaining: inout [PendingEvent], failure: StoreError) async -> Bool {
        for index in remaining.indices.reversed() {
            if let landed = await landedEvent(remaining[index]) {
                log.writeLanded(jobID: landed.jobID, kind: kind, event: landed.type, seq: landed.seq, failure: failure,
                                now: Clock.nowMs())
                remaining.removeFirst(index + 1)
                return remaining.isEmpty
            }
        }
        return false
    }

    /// `dropLanded` after a write refused for a stale lease: each of `remaining` looked for as the newest
    /// event under this sink's lease token (`JobStore.landedEventUnderLease`), read from the history.
    private func dropLandedUnderLease(_ remaining: inout [PendingEvent], failure: StoreError) async -> Bool {
        for index in remaining.indices.reversed() {
            let pending = remaining[index]
            let found = try? await store.run { store in try store.landedEventUnderLease(pending) }
            guard let landed = found ?? nil else { continue }
            log.writeLanded(jobID: landed.jobID, kind: kind, event: landed.type, seq: landed.seq, failure: failure, now: Clock.nowMs())
            remaining.removeFirst(index + 1)
            return remaining.isEmpty
        }
        return false
    }

    /// The job's newest event when it is `pending` as this worker wrote it, or nil (also when the store
    /// cannot be read now: the caller then writes, or reports, as it would have).
    private func landedEvent(_ pending: PendingEvent) async -> JobEvent? {
        let found = try? await store.run { store in try store.landedEvent(pending) }
        return found ?? nil
    }

    /// Whether `error` says the store could not write (and may later), not that it refused this event.
    ///
    /// A database that takes no writes for now is such a failure: a PostgreSQL server made read-only
    /// (`default_transaction_read_only` set and reloaded, a primary demoted to a standby: SQLSTATE
    /// 25006), an SQLite file or filesystem made read-only. Refused at once, every running job was given
    /// up at the first write of a brief read-only spell (an attempt spent; with `max_attempts: 1`,
    /// failed). A store opened read-only (`storeIsReadOnly`, never a worker's) is another thing: it never
    /// writes. The server's other refusals of a session or a transaction (57P01 and 57P03, an
    /// administrator's shutdown, a server starting or stopping; 57014, a statement cancelled) come as
    /// `unreachable` or `io`.
    static func isTransient(_ error: StoreError, storeIsReadOnly: Bool) -> Bool {
        switch error {
        case .io, .server, .unreachable, .commitUnconfirmed, .busy: true
        case .readOnly: !storeIsReadOnly
        default: false
        }
    }
}

/// Why a worker stopped before its work was done.
public enum WorkerStopped: Error, Sendable, CustomStringConvertible {
    /// A drain with no transfer under way found the store failing, no outcome written, for `forMs` (its
    /// last error, and that error when it is the store's own).
    case storeRefusesWrites(String, cause: StoreError?, forMs: Int64)

    public var description: String {
        switch self {
        case .storeRefusesWrites(let error, let cause, let ms):
            "the drain stopped: the event log kept failing for \(String(format: "%.1f", Double(ms) / 1_000)) s without recording any job's outcome, with no transfer under way "
                + "(\(error)); \(Self.remedy(for: cause)), then run the worker again — no job is lost: "
                + "those this worker held go back to the queue when their leases expire"
        }
    }

    /// What to do about the error that stopped the drain: it is the error's cause that is named (a
    /// server that cannot be reached is not a full disk).
    private static func remedy(for error: StoreError?) -> String {
        switch error {
        case .unreachable?, .commitUnconfirmed?: "check that the database server is running and reachable from this machine"
        case .readOnly?: "make the database writable"
        case .busy?: "find the process that holds the database's write lock (a stopped worker, a long transaction)"
        case .io(let message)? where message.contains("file size limit"):
            // EFBIG: the database or its -wal reached the process's limit, not a full or read-only disk.
            "raise the worker's file size limit (`ulimit -f`, systemd's LimitFSIZE=)"
        case .io?: "free space on the database's disk or make it writable"
        case .server(let sqlstate, _)?: serverRemedy(sqlstate)
        default: "fix what the error says"
        }
    }

    /// What to do about a PostgreSQL server's error, by its SQLSTATE (its class when no code is named).
    /// See https://www.postgresql.org/docs/current/errcodes-appendix.html
    static func serverRemedy(_ sqlstate: String) -> String {
        switch (sqlstate, String(sqlstate.prefix(2))) {
        case ("57014", _):
            "a statement ran past the server's statement_timeout (set for the role or the database, or in the URL's options) "
                + "or was cancelled on the server: raise or lift the timeout for jobctl's role (`ALTER ROLE … SET statement_timeout`)"
        case ("42P01", _), ("3F000", _):
            "jobctl's tables are not in the database and schema the URL names (a schema dropped or renamed, another database, "
                + "or the URL's search_path naming another schema): check the URL, or restore the schema; `jobctl migrate` makes "
                + "new, empty tables there, without the jobs"
        case ("42501", _):
            "give the role in the URL what jobctl needs (`jobctl migrate --grant ROLE`, run as the role that owns the tables)"
        case ("53100", _):
            "free space on the database server's disk"
        case (_, "53"):
            "the database server is short of a resource (memory, connections): free it, or raise the server's limit"
        case ("55P03", _):
            "find the session that holds a lock on jobctl's tables (`pg_locks`, `pg_stat_activity`)"
        default:
            "fix what the server's error says (its log has more)"
        }
    }
}

/// Whether a stopping pool's grace timer was set, and whether the pool's run has ended since (then the
/// timer does nothing).
private final class GraceTimer: Sendable {
    let state = Mutex<(armed: Bool, runEnded: Bool)>((false, false))
}
