import Foundation
import JobModel
import Storage
import Synchronization
import Testing
@testable import Tasks
import TestSupport

// MARK: - Test doubles

/// A `StorageBackend` that plays a fixed script. `StorageBackend` is our own Swift protocol, so a scripted
/// one tests the runner's sequencing; real backends are exercised by the storage and worker suites.
final class ScriptedBackend: StorageBackend {
    enum Step: Sendable {
        case report(TransferEvent)
        /// Tells the test the script got here (see `reached`).
        case signal(String)
        /// Waits until the control asks to stop, then returns `.stopped(reason, resumePoint)`.
        case awaitStop(ResumePoint?)
        case finish(JobResult)
        case fail(StorageError)
    }

    private let steps: [Step]
    let reached: AsyncStream<String>
    private let reachedContinuation: AsyncStream<String>.Continuation
    private let state = Mutex<(calls: Int, resumedFrom: ResumePoint?, stopSeen: StopReason?)>((0, nil, nil))

    init(_ steps: [Step]) {
        self.steps = steps
        (reached, reachedContinuation) = AsyncStream<String>.makeStream()
    }

    var calls: Int { state.withLock { $0.calls } }
    var resumedFrom: ResumePoint? { state.withLock { $0.resumedFrom } }
    var stopSeen: StopReason? { state.withLock { $0.stopSeen } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        state.withLock { $0.calls += 1; $0.resumedFrom = resumePoint }
        for step in steps {
            switch step {
            case .report(let event):
                report(event)
            case .signal(let name):
                reachedContinuation.yield(name)
            case .awaitStop(let resumePoint):
                let deadline = ContinuousClock.now + .seconds(10)
                while control.stopReason == nil, ContinuousClock.now < deadline {
                    try? await Task.sleep(for: .milliseconds(1))
                }
                guard let reason = control.stopReason else {
                    throw StorageError(.internalError, "script: no stop request within 10 s")
                }
                state.withLock { $0.stopSeen = reason }
                return .stopped(reason, resumePoint)
            case .finish(let result):
                return .finished(result)
            case .fail(let error):
                throw error
            }
        }
        throw StorageError(.internalError, "script ended without an outcome")
    }

    /// Waits for `.signal(name)`.
    func waitUntil(_ name: String) async {
        for await signal in reached where signal == name { return }
    }
}

/// Records what the runner persists; refuses events on demand.
final class RecordingSink: TaskEventSink {
    private let recorded = Mutex<[PendingTaskEvent]>([])
    private let refusal: @Sendable (PendingTaskEvent) -> TaskSinkError?
    private let delay: Duration?

    init(delay: Duration? = nil, refusing refusal: @escaping @Sendable (PendingTaskEvent) -> TaskSinkError? = { _ in nil }) {
        self.refusal = refusal
        self.delay = delay
    }

    var events: [PendingTaskEvent] { recorded.withLock { $0 } }
    var types: [EventType] { events.map(\.type) }

    func persist(_ event: PendingTaskEvent, jobID: String) async throws(TaskSinkError) {
        try await persist([event], jobID: jobID)
    }

    /// Each call is one batch (one commit in the worker's sink); a refused event refuses the batch.
    func persist(_ events: [PendingTaskEvent], jobID: String) async throws(TaskSinkError) {
        if let delay { try? await Task.sleep(for: delay) }
        for event in events {
            if let error = refusal(event) { throw error }
        }
        recorded.withLock { $0 += events }
        batchTypes.withLock { $0.append(events.map(\.type)) }
    }

    private let batchTypes = Mutex<[[EventType]]>([])
    /// The types of each call's events, call by call.
    var batches: [[EventType]] { batchTypes.withLock { $0 } }
}

/// A clock that moves 2 s per reading, so no progress report is coalesced away by time.
final class SteppingClock: Sendable {
    private let now = Mutex<Int64>(1_000_000)
    private let step: Int64
    init(step: Int64 = 2_000) { self.step = step }
    func read() -> Int64 { now.withLock { $0 += step; return $0 } }
}

/// Collects observer calls.
final class ObserverLog: Sendable {
    private let calls = Mutex<[(String, TaskSnapshot)]>([])
    func handler(_ name: String) -> @Sendable (TaskSnapshot) -> Void {
        { snapshot in self.calls.withLock { $0.append((name, snapshot)) } }
    }
    var names: [String] { calls.withLock { $0.map(\.0) } }
    var snapshots: [TaskSnapshot] { calls.withLock { $0.map(\.1) } }
}

private let spec = JobSpec(kind: .uploadFile, source: "/data/in.bin", destination: "gs://bucket/in.bin", maxAttempts: 3)
private let firstPoint = ResumePoint.upload(sessionURI: "https://storage.test/upload/s1", confirmedOffset: 262_144, total: 1_048_576)
private let secondPoint = ResumePoint.upload(sessionURI: "https://storage.test/upload/s1", confirmedOffset: 524_288, total: 1_048_576)
private let result = JobResult(size: 1_048_576, md5: "md5==", crc32c: "crc==")

private func makeRunner(_ backend: ScriptedBackend, _ sink: RecordingSink, attempt: Int = 1, resumePoint: ResumePoint? = nil,
                clock: SteppingClock = SteppingClock(), random: Double = 0, holdStarted: Bool = false) -> TaskRunner {
    TaskRunner(jobID: "01JOBTEST0000000000000000", spec: spec, attempt: attempt, resumePoint: resumePoint,
               backend: backend, sink: sink, holdStarted: holdStarted, clock: { clock.read() }, random: { random })
}

// MARK: - Tests

@Suite("TaskRunner", .onTestThreads)
struct TaskRunnerTests {
    @Test func successPersistsStartedProgressAndSucceededInOrder() async throws {
        let backend = ScriptedBackend([
            .report(.progress(bytesDone: 100_000, bytesTotal: 1_048_576)),
            .report(.progress(bytesDone: 200_000, bytesTotal: 1_048_576)),
            .report(.checkpoint(firstPoint, bytesTotal: 1_048_576)),
            .report(.progress(bytesDone: 400_000, bytesTotal: 1_048_576)),
            .report(.checkpoint(secondPoint, bytesTotal: 1_048_576)),
            .report(.progress(bytesDone: 1_048_576, bytesTotal: 1_048_576)),
            .finish(result),
        ])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink)
        let outcome = await runner.run()

        #expect(outcome == .succeeded(result))
        let types = sink.types
        #expect(types.first == .started)
        #expect(types.last == .succeeded)
        #expect(types.dropFirst().dropLast().allSatisfy { $0 == .progress } && types.count >= 5)
        // Checkpoints are persisted, in order, each carrying its resume point.
        let checkpoints = sink.events.compactMap { $0.type == .progress ? $0.data.resumePoint : nil }
        #expect(checkpoints.first == firstPoint && checkpoints.last == secondPoint)
        let done = sink.events.filter { $0.type == .progress }.compactMap(\.data.bytesDone)
        #expect(done == done.sorted())
        #expect(sink.events.last?.data.result == result)
        #expect(await runner.phase == .succeeded)
    }

    @Test func manyCheckpointsArePersistedInOrderBehindASlowSink() async {
        let points = (1...40).map { ResumePoint.download(bytesWritten: Int64($0) * 1_000, generation: "7", etag: nil, tempPath: nil) }
        var steps: [ScriptedBackend.Step] = []
        for (index, point) in points.enumerated() {
            steps.append(.report(.progress(bytesDone: Int64(index) * 1_000 + 500, bytesTotal: 40_000)))
            steps.append(.report(.checkpoint(point, bytesTotal: 40_000)))
        }
        steps.append(.finish(JobResult(size: 40_000)))
        let backend = ScriptedBackend(steps)
        let sink = RecordingSink(delay: .microseconds(300))
        let outcome = await makeRunner(backend, sink).run()
        #expect(outcome == .succeeded(JobResult(size: 40_000)))
        let persisted = sink.events.filter { $0.type == .progress }.compactMap(\.data.resumePoint)
        // Every progress event carries the latest resume point, so dedupe consecutive repeats.
        var distinct: [ResumePoint] = []
        for point in persisted where distinct.last != point { distinct.append(point) }
        #expect(distinct == points)
    }

    @Test func resumesFromTheProjectionsResumePoint() async {
        let backend = ScriptedBackend([.finish(result)])
        let sink = RecordingSink()
        _ = await makeRunner(backend, sink, attempt: 2, resumePoint: firstPoint).run()
        #expect(backend.resumedFrom == firstPoint)
        #expect(sink.events.first?.data.resumePoint == firstPoint && sink.events.first?.data.attempt == 2)
    }

    @Test func pauseMidTransferPersistsPausedWithTheResumePoint() async {
        let backend = ScriptedBackend([
            .report(.progress(bytesDone: 300_000, bytesTotal: 1_048_576)),
            .report(.checkpoint(firstPoint, bytesTotal: 1_048_576)),
            .signal("mid"),
            .awaitStop(secondPoint),
        ])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink)
        let log = ObserverLog()
        await runner.observe(.pause, handler: log.handler("pause"))
        await runner.observe(.failure, handler: log.handler("failure"))
        let run = Task { await runner.run() }
        await backend.waitUntil("mid")
        runner.requestStop(.pause)
        let outcome = await run.value

        #expect(outcome == .paused(secondPoint))
        #expect(backend.stopSeen == .pause)
        #expect(sink.types.last == .paused)
        #expect(sink.events.last?.data.resumePoint == secondPoint)
        #expect(sink.events.last?.data.bytesDone == 524_288)
        #expect(log.names == ["pause"])
        #expect(log.snapshots.first?.status == .pause)
        // Pause is not the end of the task: observers stay.
        #expect(await runner.observerCount == 2)
        let snapshot = await runner.snapshot
        #expect(snapshot.status == .pause && snapshot.bytesDone == 524_288 && snapshot.fractionCompleted == 0.5)
    }

    @Test func cancelPersistsCancelledAndFailsObserversWithCancelled() async throws {
        let backend = ScriptedBackend([
            .report(.checkpoint(firstPoint, bytesTotal: 1_048_576)),
            .signal("mid"),
            .awaitStop(firstPoint),
        ])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink)
        let log = ObserverLog()
        await runner.observe(.failure, handler: log.handler("failure"))
        let run = Task { await runner.run() }
        await backend.waitUntil("mid")
        runner.requestStop(.cancel)
        runner.requestStop(.cancel) // a repeat is harmless
        #expect(await run.value == .cancelled)
        #expect(backend.stopSeen == .cancel)
        #expect(sink.types.last == .cancelled)
        #expect(sink.types.filter { $0 == .cancelled }.count == 1)
        #expect(sink.events.last?.data.error?.code == .cancelled)
        let snapshot = try #require(log.snapshots.first)
        #expect(log.names == ["failure"] && snapshot.error?.code == .cancelled)
        #expect(await runner.observerCount == 0)
    }

    @Test func staleLeaseAbandonsAndStopsTheTransfer() async {
        let backend = ScriptedBackend([
            .report(.checkpoint(firstPoint, bytesTotal: 1_048_576)),
            .awaitStop(secondPoint),
        ])
        // The lease is stolen after `started`: the checkpoint is refused.
        let sink = RecordingSink { $0.type == .started ? nil : .staleLease }
        let runner = makeRunner(backend, sink)
        let outcome = await runner.run()
        guard case .abandoned(let reason) = outcome else { Issue.record("expected abandoned, got \(outcome)"); return }
        #expect(reason.contains("stale"))
        #expect(backend.stopSeen == .leaseLost)
        #expect(sink.types == [.started]) // nothing after the refusal
    }

    @Test func staleLeaseOnStartNeverStartsTheTransfer() async {
        let backend = ScriptedBackend([.finish(result)])
        let sink = RecordingSink { _ in .staleLease }
        let outcome = await makeRunner(backend, sink).run()
        #expect(outcome == .abandoned(reason: TaskSinkError.staleLease.description))
        #expect(backend.calls == 0)
    }

    @Test func lostLeaseWritesNothingMore() async {
        let backend = ScriptedBackend([.signal("mid"), .awaitStop(firstPoint)])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink)
        let run = Task { await runner.run() }
        await backend.waitUntil("mid")
        runner.requestStop(.leaseLost)
        guard case .abandoned = await run.value else { Issue.record("expected abandoned"); return }
        #expect(sink.types == [.started])
    }

    @Test func retryableErrorSchedulesARetry() async {
        let busy = StorageError(.unknown, "the server is busy", httpStatus: 503, url: "https://storage.test/b/o", retryable: true)
        let backend = ScriptedBackend([.report(.progress(bytesDone: 10, bytesTotal: 100)), .fail(busy)])
        let sink = RecordingSink()
        let clock = SteppingClock(step: 0)
        let outcome = await makeRunner(backend, sink, clock: clock, random: 0).run()
        // attempt 1 → ceiling 1 s, equal jitter at 0 → 500 ms.
        #expect(outcome == .retryScheduled(atMs: 1_000_500, error: busy))
        // The progress report came within the first progress interval: no `progress` event.
        #expect(sink.types == [.started, .attemptFailed])
        #expect(sink.events.last?.data.retryAtMs == 1_000_500)
        #expect(sink.events.last?.data.error == busy)
    }

    @Test func stopRequestedBeforeRunNeverStartsTheTransfer() async {
        let backend = ScriptedBackend([.finish(result)])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink, resumePoint: firstPoint)
        runner.requestStop(.pause)
        #expect(await runner.run() == .paused(firstPoint))
        #expect(backend.calls == 0)
        #expect(sink.types == [.paused])
    }

    @Test func cancellingTheRunningTaskReleasesTheJob() async {
        let backend = ScriptedBackend([.signal("mid"), .awaitStop(secondPoint)])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink)
        let run = Task { await runner.run() }
        await backend.waitUntil("mid")
        run.cancel()
        #expect(await run.value == .released(secondPoint))
        #expect(sink.types.last == .released)
    }

    // MARK: Observers

    @Test func observersSeeResumeProgressAndSuccessThenAreRemoved() async throws {
        let backend = ScriptedBackend([
            .report(.progress(bytesDone: 524_288, bytesTotal: 1_048_576)),
            .finish(result),
        ])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink)
        let log = ObserverLog()
        for status in ObserverStatus.allCases {
            await runner.observe(status, handler: log.handler(status.rawValue))
        }
        #expect(await runner.observerCount == 5)
        _ = await runner.run()

        #expect(log.names == ["resume", "progress", "success"])
        let progress = try #require(log.snapshots.dropFirst().first)
        #expect(progress.bytesDone == 524_288 && progress.fractionCompleted == 0.5 && progress.spec == spec)
        let success = try #require(log.snapshots.last)
        #expect(success.result == result && success.fractionCompleted == 1 && success.jobID == runner.jobID)
        #expect(await runner.observerCount == 0)
        // Observers added after the end are never registered.
        await runner.observe(.success, handler: log.handler("late"))
        #expect(await runner.observerCount == 0)
    }

    @Test func failureObserversGetTheErrorAndAreRemoved() async throws {
        let missing = StorageError(.objectNotFound, "no such object", httpStatus: 404)
        let backend = ScriptedBackend([.fail(missing)])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink)
        let log = ObserverLog()
        await runner.observe(.failure, handler: log.handler("failure"))
        await runner.observe(.progress, handler: log.handler("progress"))
        #expect(await runner.run() == .failed(missing))
        #expect(log.names == ["failure"])
        #expect(log.snapshots.first?.error == missing)
        #expect(sink.types == [.started, .failed])
        #expect(await runner.observerCount == 0)
    }

    @Test func removedObserversAreNotCalled() async {
        let backend = ScriptedBackend([
            .report(.progress(bytesDone: 1, bytesTotal: 4)),
            .report(.checkpoint(.download(bytesWritten: 2, generation: nil, etag: nil, tempPath: nil), bytesTotal: 4)),
            .finish(JobResult(size: 4)),
        ])
        let runner = makeRunner(backend, RecordingSink())
        let log = ObserverLog()
        let removed = await runner.observe(.progress, handler: log.handler("removed"))
        await runner.observe(.progress, handler: log.handler("kept"))
        await runner.observe(.resume, handler: log.handler("resume-a"))
        await runner.observe(.resume, handler: log.handler("resume-b"))
        await runner.removeObserver(withHandle: removed)
        await runner.removeAllObservers(for: .resume)
        #expect(await runner.observerCount == 1)
        _ = await runner.run()
        #expect(!log.names.isEmpty && log.names.allSatisfy { $0 == "kept" })
    }

    @Test func fractionCompletedIsZeroWhileTheTotalIsUnknown() {
        let snapshot = TaskSnapshot(jobID: "j", status: .progress, bytesDone: 10, bytesTotal: nil, spec: spec)
        #expect(snapshot.fractionCompleted == 0)
        var done = snapshot
        done.bytesTotal = 5
        #expect(done.fractionCompleted == 1) // clamped
    }

    @Test func removeAllObserversSilencesEverything() async {
        let runner = makeRunner(ScriptedBackend([.finish(result)]), RecordingSink())
        let log = ObserverLog()
        for status in ObserverStatus.allCases { await runner.observe(status, handler: log.handler(status.rawValue)) }
        await runner.removeAllObservers()
        _ = await runner.run()
        #expect(log.names.isEmpty)
    }
}

// MARK: - `started` held for the attempt's next event

@Suite("TaskRunner holding started", .onTestThreads)
struct TaskRunnerHeldStartedTests {
    @Test func aShortTransferWritesStartedWithItsOutcomeInOneBatch() async {
        let backend = ScriptedBackend([.finish(result)])
        let sink = RecordingSink()
        let observed = ObserverLog()
        let runner = makeRunner(backend, sink, holdStarted: true)
        await runner.observe(.resume, handler: observed.handler("resume"))
        await runner.observe(.success, handler: observed.handler("success"))
        #expect(await runner.run() == .succeeded(result))
        #expect(sink.batches == [[.started, .succeeded]])
        // The event keeps the time the attempt started, before the outcome's.
        let events = sink.events
        #expect(events.count == 2 && events[0].atMs < events[1].atMs)
        #expect(observed.names == ["resume", "success"])
        #expect(backend.calls == 1)
    }

    @Test func withoutHoldingStartedIsWrittenAloneBeforeTheTransfer() async {
        let backend = ScriptedBackend([.finish(result)])
        let sink = RecordingSink()
        #expect(await makeRunner(backend, sink).run() == .succeeded(result))
        #expect(sink.batches == [[.started], [.succeeded]])
    }

    @Test func theFirstProgressCarriesTheHeldStarted() async {
        let backend = ScriptedBackend([
            .report(.checkpoint(firstPoint, bytesTotal: 1_048_576)),
            .report(.checkpoint(secondPoint, bytesTotal: 1_048_576)),
            .finish(result),
        ])
        let sink = RecordingSink()
        #expect(await makeRunner(backend, sink, holdStarted: true).run() == .succeeded(result))
        #expect(sink.batches == [[.started, .progress], [.progress], [.succeeded]])
    }

    @Test func askedToWriteHeldEventsItWritesStartedAloneWhileTheTransferRuns() async {
        let backend = ScriptedBackend([.signal("running"), .awaitStop(firstPoint)])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink, holdStarted: true)
        let run = Task { await runner.run() }
        await backend.waitUntil("running")
        #expect(sink.batches.isEmpty)
        runner.writeHeldEvents()
        let deadline = ContinuousClock.now + .seconds(10)
        while sink.batches.isEmpty, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(1)) }
        #expect(sink.batches == [[.started]])
        // Asking again with nothing held writes nothing.
        runner.writeHeldEvents()
        runner.requestStop(.pause)
        #expect(await run.value == .paused(firstPoint))
        #expect(sink.batches == [[.started], [.paused]])
    }

    /// A worker may ask before the runner's task has run at all (a loaded process: the ask comes once
    /// the slot was taken long enough, by the worker's clock): the ask is kept, not lost, and the
    /// `started` it finds held as soon as the attempt starts is written at once.
    @Test func anAskBeforeTheAttemptStartsIsKeptForItsStarted() async {
        let backend = ScriptedBackend([.signal("running"), .awaitStop(firstPoint)])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink, holdStarted: true)
        runner.writeHeldEvents()
        let run = Task { await runner.run() }
        await backend.waitUntil("running")
        let deadline = ContinuousClock.now + .seconds(10)
        while sink.batches.isEmpty, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(1)) }
        #expect(sink.batches == [[.started]], "the transfer runs and no other event comes: only the ask writes it")
        runner.requestStop(.pause)
        #expect(await run.value == .paused(firstPoint))
        #expect(sink.batches == [[.started], [.paused]])
        #expect(backend.calls == 1)
    }

    @Test func aRefusedBatchAbandonsTheAttemptAndStopsTheTransfer() async {
        let backend = ScriptedBackend([.report(.checkpoint(firstPoint, bytesTotal: 1_048_576)), .awaitStop(secondPoint)])
        let sink = RecordingSink { _ in .staleLease }
        let outcome = await makeRunner(backend, sink, holdStarted: true).run()
        guard case .abandoned(let reason) = outcome else { Issue.record("expected abandoned, got \(outcome)"); return }
        #expect(reason.contains("stale"))
        #expect(backend.stopSeen == .leaseLost)
        #expect(sink.batches.isEmpty)
    }

    @Test func aStopBeforeTheRunNeverStartsAndHoldsNothing() async {
        let backend = ScriptedBackend([.finish(result)])
        let sink = RecordingSink()
        let runner = makeRunner(backend, sink, holdStarted: true)
        runner.requestStop(.cancel)
        #expect(await runner.run() == .cancelled)
        #expect(backend.calls == 0)
        #expect(sink.batches == [[.cancelled]])
    }
}

@Suite("TaskMailbox", .onTestThreads)
struct TaskMailboxTests {
    @Test func aReportThatCompletesTheBytesWaitsForTheEndToRing() async {
        let mailbox = TaskMailbox()
        mailbox.post(.transfer(.progress(bytesDone: 16_384, bytesTotal: 16_384)))
        #expect(!mailbox.isRung)
        mailbox.post(.transferEnded(.success(.finished(result))))
        #expect(mailbox.isRung)
        await mailbox.waitForRing()
        // Taken with the end, in the order posted.
        let items = mailbox.take()
        #expect(items.count == 2)
        guard items.count == 2, case .transfer(.progress(16_384, 16_384)) = items[0], case .transferEnded = items[1] else {
            Issue.record("unexpected items \(items)")
            return
        }
    }

    @Test func everyOtherItemRings() async {
        let items: [TaskMailbox.Item] = [
            .transfer(.progress(bytesDone: 0, bytesTotal: 16_384)),
            .transfer(.progress(bytesDone: 8_192, bytesTotal: 16_384)),
            .transfer(.progress(bytesDone: 16_384, bytesTotal: nil)),   // size not known: not complete
            .transfer(.progress(bytesDone: 20_000, bytesTotal: 16_384)),
            .transfer(.checkpoint(firstPoint, bytesTotal: 1_048_576)),
            .writeHeld,
            .transferEnded(.failure(StorageError(.unknown, "x"))),
        ]
        for item in items {
            let mailbox = TaskMailbox()
            mailbox.post(item)
            #expect(mailbox.isRung, "\(item)")
            await mailbox.waitForRing()
            #expect(!mailbox.isRung)
            #expect(mailbox.take().count == 1)
        }
        let stopped = TaskMailbox()
        stopped.postStop(.pause, control: TransferControl())
        #expect(stopped.isRung)
    }

    @Test func aRunnerWhoseOnlyReportCompletesTheBytesStillPersistsAndTellsItBeforeTheEnd() async {
        let backend = ScriptedBackend([.report(.progress(bytesDone: 1_048_576, bytesTotal: 1_048_576)), .finish(result)])
        let sink = RecordingSink()
        let observed = ObserverLog()
        let runner = makeRunner(backend, sink)
        await runner.observe(.progress, handler: observed.handler("progress"))
        await runner.observe(.success, handler: observed.handler("success"))
        #expect(await runner.run() == .succeeded(result))
        #expect(sink.types == [.started, .progress, .succeeded])
        #expect(observed.names == ["progress", "success"])
        #expect(observed.snapshots.first?.bytesDone == 1_048_576)
    }
}
