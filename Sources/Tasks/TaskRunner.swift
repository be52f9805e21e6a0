import JobModel
import Storage

/// Runs one attempt of one claimed job: drives the transfer, persists its events through the sink and
/// tells observers, as a Cloud Storage for Firebase task does.
///
/// The runner owns a `TaskStateMachine` and applies each transition **before** any `await`, then performs
/// the action. Transfer reports arrive on the transfer's thread and go through a lock-protected mailbox, so
/// the transfer never waits for the database and coalesced progress costs no `await`; the runner takes
/// them in order, so checkpoints are persisted in the order they were reached and all of them before the
/// final event.
///
/// `run()` returns only after the transfer has returned, even when the attempt was abandoned, so a worker
/// never has two transfers writing the same local file.
public actor TaskRunner {
    /// The job this attempt belongs to.
    public nonisolated let jobID: String
    /// The job.
    public nonisolated let spec: JobSpec

    private var machine: TaskStateMachine
    private let backend: any StorageBackend
    private let sink: any TaskEventSink
    private let control: TransferControl
    private let mailbox = TaskMailbox()
    private let clock: @Sendable () -> Int64
    private let random: @Sendable () -> Double

    /// Whether the attempt's `started` waits to be written with its next event (see `init`).
    private let holdsStarted: Bool
    /// The `started` event held back, until the next event or `writeHeldEvents()`.
    private var heldStarted: PendingTaskEvent?
    /// `writeHeldEvents()` came before the attempt started (the runner's task had not run yet when the
    /// worker saw the transfer's slot taken long enough): the `started` is written as soon as it is made.
    private var heldWriteAsked = false

    private var hasRun = false
    private var transferRunning = false
    /// Called once the transfer has returned, before its outcome is written (see `init`).
    private let transferReturned: (@Sendable () -> Void)?
    private var observersClosed = false
    private var nextObserverID: UInt64 = 0
    private var observers: [ObserverStatus: [(id: UInt64, handler: @Sendable (TaskSnapshot) -> Void)]] = [:]

    /// Creates a runner for a claimed attempt.
    ///
    /// - Parameters:
    ///   - jobID: the job's id.
    ///   - spec: the job.
    ///   - attempt: the attempt number (1-based) from the claim.
    ///   - maxAttempts: attempts before `retryLimitExceeded`; `spec.maxAttempts` when nil.
    ///   - resumePoint: where the previous attempt stopped (from the projection).
    ///   - bytesTotal: the total from the projection, if known.
    ///   - backend: performs the transfer.
    ///   - sink: persists events (lease-fenced).
    ///   - configuration: progress interval and retry policy.
    ///   - holdStarted: start the transfer without waiting for `started` to be written, and write it
    ///     with the attempt's next event (its first progress, or its end) in one commit, or alone when
    ///     `writeHeldEvents()` asks. A short transfer then costs its job one commit and one projection
    ///     write fewer. The event keeps the time the attempt started. Without it, `started` is durable
    ///     before the transfer begins.
    ///   - transferReturned: called once, from the transfer's thread, as soon as the transfer has
    ///     returned (finished, stopped or failed) and before its outcome is written: what the transfer
    ///     held (a connection, a file) is free from then on, so a worker can start its next transfer
    ///     while this attempt's end is committed.
    ///   - leaseToken: the attempt's lease token: the temporaries it writes whole and renames (a `file://`
    ///     sidecar's) carry it, so no other attempt of the job shares their names.
    ///   - clock: wall-clock milliseconds (injectable for tests).
    ///   - random: numbers in `0 ..< 1` for retry jitter (injectable for tests).
    public init(jobID: String, spec: JobSpec, attempt: Int, maxAttempts: Int? = nil, resumePoint: ResumePoint? = nil,
                bytesTotal: Int64? = nil, backend: any StorageBackend, sink: any TaskEventSink,
                configuration: TaskStateMachine.Configuration = .init(), holdStarted: Bool = false,
                transferReturned: (@Sendable () -> Void)? = nil, leaseToken: Int64? = nil,
                clock: @escaping @Sendable () -> Int64 = { Clock.nowMs() },
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.jobID = jobID
        self.spec = spec
        self.machine = TaskStateMachine(attempt: attempt, maxAttempts: maxAttempts ?? spec.maxAttempts,
                                        resumePoint: resumePoint, bytesTotal: bytesTotal, configuration: configuration)
        self.backend = backend
        self.sink = sink
        self.holdsStarted = holdStarted
        self.transferReturned = transferReturned
        self.control = TransferControl(jobID: jobID, leaseToken: leaseToken)
        self.clock = clock
        self.random = random
    }

    // MARK: - Control

    /// Asks the attempt to stop (pause, cancel, shutdown, lost lease). Safe from any thread, including a
    /// signal-handling task: the transfer sees the request at once through `TransferControl.stop`; the
    /// runner records it in order with the transfer's reports. A stop before `run()` means the transfer
    /// never starts.
    public nonisolated func requestStop(_ reason: StopReason) {
        mailbox.postStop(reason, control: control)
    }

    /// Asks the runner to write the `started` event it holds (see `init`'s `holdStarted`) now rather
    /// than with the attempt's next event. Safe from any thread; nothing happens when none is held.
    public nonisolated func writeHeldEvents() {
        mailbox.post(.writeHeld)
    }

    /// Runs the attempt to its end and returns how it ended. Call once.
    ///
    /// Cancelling the calling task requests a `shutdown` stop (the job is released at its resume point).
    public func run() async -> TaskRunOutcome {
        precondition(!hasRun, "TaskRunner.run() called twice for job \(jobID)")
        hasRun = true
        return await withTaskCancellationHandler {
            await runAttempt()
        } onCancel: {
            requestStop(.shutdown)
        }
    }

    /// `run()` and the bytes of earlier attempts it kept (`TaskStateMachine.bytesKeptFromEarlierAttempts`,
    /// what its logged rate leaves out), read in the same turn on this actor: asked for apart, they were a
    /// second hop onto the runner for every job.
    public func runCountingKeptBytes() async -> (outcome: TaskRunOutcome, keptBytes: Int64) {
        let outcome = await run()
        return (outcome, machine.bytesKeptFromEarlierAttempts)
    }

    /// The phase of the attempt right now.
    public var phase: TaskPhase { machine.phase }

    /// A snapshot of the task right now. `status` is `progress` while the attempt runs, `success` or
    /// `failure` (failed, cancelled) once it ended that way, and `pause` when it stopped without an end
    /// (paused, released, retry scheduled, abandoned): the job will run again.
    public var snapshot: TaskSnapshot {
        let status: ObserverStatus = switch machine.phase {
        case .claimed, .running, .stopping: .progress
        case .succeeded: .success
        case .failed, .cancelled: .failure
        case .paused, .released, .retryScheduled, .abandoned: .pause
        }
        return makeSnapshot(status)
    }

    // MARK: - Observers

    /// Calls `handler` with a snapshot each time the task reaches `status` (resume, progress, pause,
    /// success, failure). Handlers run on the runner's executor: keep them short. Observers added after
    /// the attempt succeeded or failed are never called.
    @discardableResult
    public func observe(_ status: ObserverStatus, handler: @escaping @Sendable (TaskSnapshot) -> Void) -> ObserverHandle {
        nextObserverID += 1
        let handle = ObserverHandle(status: status, id: nextObserverID)
        if !observersClosed {
            observers[status, default: []].append((handle.id, handler))
        }
        return handle
    }

    /// Removes one observer; unknown handles are ignored.
    public func removeObserver(withHandle handle: ObserverHandle) {
        observers[handle.status]?.removeAll { $0.id == handle.id }
    }

    /// Removes every observer of `status`.
    public func removeAllObservers(for status: ObserverStatus) {
        observers[status] = nil
    }

    /// Removes every observer. Done automatically after success or failure.
    public func removeAllObservers() {
        observers.removeAll()
    }

    /// How many observers are registered (all statuses).
    public var observerCount: Int {
        observers.values.reduce(0) { $0 + $1.count }
    }

    // MARK: - The attempt

    private func runAttempt() async -> TaskRunOutcome {
        // Stops requested before run() are applied first: a job paused before it started never starts.
        await processMailbox()
        if machine.outcome == nil {
            let now = clock()
            let start: AttemptStartedAction
            do { start = try machine.attemptStarted(nowMs: now) } catch { refusedTransition(error) }
            switch start {
            case .persistAndStartTransfer(let event, let resumePoint):
                if holdsStarted {
                    heldStarted = event
                    notify(.resume)
                    launchTransfer(from: resumePoint)
                    if heldWriteAsked { _ = await persist(nil) }
                } else if await persist(event) {
                    notify(.resume)
                    launchTransfer(from: resumePoint)
                }
            }
        }
        // Checked before waiting: an attempt abandoned before its transfer started gets no more rings.
        while !isOver {
            await mailbox.waitForRing()
            await processMailbox()
        }
        let outcome = machine.outcome ?? .abandoned(reason: "the runner stopped before the attempt ended")
        await discardLocalFilesIfFinal(outcome)
        return outcome
    }

    /// A job that ended failed or cancelled never resumes, so its partial download or upload session goes
    /// now, recorded or not (a retry starts over), and this attempt's session and sidecar temporary if
    /// still there (a killed earlier attempt's, named with that attempt's lease token, are the sweep's, which
    /// reads the job's tokens from the log). Paused, released and retry-scheduled jobs keep theirs:
    /// they resume from them. Runs after the final event is in the log and the transfer has returned,
    /// off the cooperative pool (a removal syncs the folder).
    ///
    /// An attempt that ended paused, released or retry-scheduled while a cancel was pending (a pause or a
    /// shutdown stopped it first, or it failed before the worker read the request) is followed in the log
    /// by `cancelled`, in the same transaction: its files go then too. Kept, they stayed until the next
    /// worker's sweep — for ever when none came.
    private func discardLocalFilesIfFinal(_ outcome: TaskRunOutcome) async {
        // Taken before any wait: a file changed after it is a later attempt's (a `retry` and a new claim
        // can come while the job's state is read), which the removal must spare.
        let endedAtMs = clock()
        switch outcome {
        case .failed, .cancelled:
            break
        case .retryScheduled, .paused, .released:
            guard await sink.jobEndedForGood(jobID: jobID) else { return }
        case .succeeded, .abandoned:
            return
        }
        let (backend, files) = (backend, JobLocalFiles(jobID: jobID, spec: spec, resumePoint: machine.resumePoint,
                                                       finishedAtMs: endedAtMs, leaseTokens: control.leaseToken.map { [$0] } ?? []))
        _ = await BlockingFileWork.run { backend.discardResumePoint(of: files) }
    }

    private var isOver: Bool { machine.outcome != nil && !transferRunning }

    /// Starts the transfer; its reports and its outcome reach the runner through the mailbox, posted
    /// from the transfer's own thread (no task of the runner's waits for it).
    private func launchTransfer(from resumePoint: ResumePoint?) {
        transferRunning = true
        let mailbox = mailbox
        let transferReturned = transferReturned
        backend.perform(spec, resumingFrom: resumePoint, control: control,
                        report: { event in mailbox.post(.transfer(event)) },
                        completion: { result in
                            // Told before the outcome is posted, so the pool knows the transfer returned
                            // before the outcome can be written (see `WorkerPool.heartbeat`).
                            transferReturned?()
                            mailbox.post(.transferEnded(result))
                        })
    }

    private func processMailbox() async {
        for item in mailbox.take() {
            await handle(item)
        }
    }

    private func handle(_ item: TaskMailbox.Item) async {
        let now = clock()
        switch item {
        case .stop(let reason):
            switch machine.stopRequested(reason, nowMs: now) {
            case .none, .abandon:
                break
            case .stopTransfer(let reason):
                control.stop(reason)
            case .persist(let event):
                await persistAndNotify(event)
            }

        case .transfer(.progress(let bytesDone, let bytesTotal)):
            let action: ProgressAction
            do {
                action = try machine.progressReported(bytesDone: bytesDone, bytesTotal: bytesTotal, nowMs: now)
            } catch {
                refusedTransition(error)
            }
            await performProgress(action)

        case .transfer(.checkpoint(let resumePoint, let bytesTotal)):
            let action: ProgressAction
            do {
                action = try machine.checkpointReached(resumePoint, bytesTotal: bytesTotal, nowMs: now)
            } catch {
                refusedTransition(error)
            }
            await performProgress(action)

        case .transferEnded(let result):
            transferRunning = false
            let action: TransferEndedAction
            do {
                switch result {
                case .success(.finished(let jobResult)):
                    action = try machine.transferFinished(jobResult, nowMs: now)
                case .success(.stopped(let reason, let resumePoint)):
                    action = try machine.transferStopped(reason, resumePoint: resumePoint, nowMs: now)
                case .failure(let error):
                    action = try machine.transferFailed(error, nowMs: now, jitter: random())
                }
            } catch {
                refusedTransition(error)
            }
            if case .persist(let event) = action {
                await persistAndNotify(event)
            }

        case .writeHeld:
            if heldStarted != nil {
                _ = await persist(nil)
            } else if machine.phase == .claimed {
                heldWriteAsked = true
            }
        }
    }

    private func performProgress(_ action: ProgressAction) async {
        if case .persist(let event) = action {
            guard await persist(event) else { return }
        }
        if machine.phase != .abandoned, machine.phase != .stopping(.leaseLost) {
            notify(.progress)
        }
    }

    /// A refused transition is a bug in this runner (the mailbox keeps every report before the outcome),
    /// so it traps with the phase and the event.
    private func refusedTransition(_ error: TaskTransitionError) -> Never {
        preconditionFailure("job \(jobID): \(error)")
    }

    private func persistAndNotify(_ event: PendingTaskEvent) async {
        guard await persist(event) else { return }
        if let status = ObserverStatus(event.type) {
            notify(status)
        }
    }

    /// Hands `event` to the sink, after the `started` event held back if there is one (nil: that one
    /// alone); on refusal the attempt is abandoned (and the transfer told to stop).
    private func persist(_ event: PendingTaskEvent?) async -> Bool {
        do throws(TaskSinkError) {
            if let held = heldStarted {
                heldStarted = nil
                try await sink.persist(event.map { [held, $0] } ?? [held], jobID: jobID)
            } else if let event {
                try await sink.persist(event, jobID: jobID)
            }
            return true
        } catch {
            switch machine.persistRefused(error) {
            case .none:
                break
            case .abandon(let stopTransfer):
                if stopTransfer { control.stop(.leaseLost) }
            }
            return false
        }
    }

    // MARK: - Notifying

    private func makeSnapshot(_ status: ObserverStatus) -> TaskSnapshot {
        TaskSnapshot(jobID: jobID, status: status, bytesDone: machine.bytesDone, bytesTotal: machine.bytesTotal,
                     error: machine.error, result: machine.result, spec: spec)
    }

    private func notify(_ status: ObserverStatus) {
        guard !observersClosed else { return }
        let handlers = observers[status] ?? []
        if !handlers.isEmpty {
            let snapshot = makeSnapshot(status)
            for observer in handlers { observer.handler(snapshot) }
        }
        if status == .success || status == .failure {
            // As in Firebase: a finished task drops its observers.
            observersClosed = true
            observers.removeAll()
        }
    }
}
