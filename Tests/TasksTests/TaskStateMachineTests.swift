import JobModel
import Storage
import Testing
@testable import Tasks
import TestSupport

// MARK: - Fixtures

private let uploadPoint = ResumePoint.upload(sessionURI: "https://storage.test/upload/session-1", confirmedOffset: 262_144, total: 1_048_576)
private let laterPoint = ResumePoint.upload(sessionURI: "https://storage.test/upload/session-1", confirmedOffset: 524_288, total: 1_048_576)
private let serverBusy = StorageError(.unknown, "the server is busy (503)", httpStatus: 503,
                                      url: "https://storage.test/b/o", retryable: true, cause: "Service Unavailable")
private let notFound = StorageError(.objectNotFound, "object b/o does not exist", httpStatus: 404, url: "https://storage.test/b/o")
private let uploaded = JobResult(size: 1_048_576, md5: "md5==")

/// Every phase, each reached by driving a fresh machine (attempt 1 of 3) through real events.
enum StartState: String, CaseIterable, Sendable {
    case claimed, running
    case stoppingPause, stoppingCancel, stoppingShutdown, stoppingLeaseLost
    case retryScheduled, succeeded, failed, paused, cancelled, released, abandoned

    func make() throws -> TaskStateMachine {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 3, resumePoint: uploadPoint)
        if self == .claimed { return machine }
        _ = try machine.attemptStarted(nowMs: 1_000)
        switch self {
        case .claimed, .running: break
        case .stoppingPause: _ = machine.stopRequested(.pause, nowMs: 1_100)
        case .stoppingCancel: _ = machine.stopRequested(.cancel, nowMs: 1_100)
        case .stoppingShutdown: _ = machine.stopRequested(.shutdown, nowMs: 1_100)
        case .stoppingLeaseLost: _ = machine.stopRequested(.leaseLost, nowMs: 1_100)
        case .retryScheduled: _ = try machine.transferFailed(serverBusy, nowMs: 1_100, jitter: 0)
        case .succeeded: _ = try machine.transferFinished(uploaded, nowMs: 1_100)
        case .failed: _ = try machine.transferFailed(notFound, nowMs: 1_100, jitter: 0)
        case .paused:
            _ = machine.stopRequested(.pause, nowMs: 1_100)
            _ = try machine.transferStopped(.pause, resumePoint: laterPoint, nowMs: 1_200)
        case .cancelled:
            _ = machine.stopRequested(.cancel, nowMs: 1_100)
            _ = try machine.transferStopped(.cancel, resumePoint: nil, nowMs: 1_200)
        case .released:
            _ = machine.stopRequested(.shutdown, nowMs: 1_100)
            _ = try machine.transferStopped(.shutdown, resumePoint: laterPoint, nowMs: 1_200)
        case .abandoned: _ = machine.persistRefused(.staleLease)
        }
        return machine
    }
}

/// Every input the machine accepts (stop and stopped once per reason, failures retryable and not).
enum Input: String, CaseIterable, Sendable {
    case start, progress, checkpoint
    case stopPause, stopCancel, stopShutdown, stopLeaseLost
    case finished
    case stoppedPause, stoppedCancel, stoppedShutdown, stoppedLeaseLost
    case failedRetryable, failedFatal
    case refused

    /// Applies the input at t = 10 s and summarises the action; throws `TaskTransitionError` when refused.
    func apply(to machine: inout TaskStateMachine) throws(TaskTransitionError) -> String {
        let now: Int64 = 10_000
        switch self {
        case .start:
            switch try machine.attemptStarted(nowMs: now) {
            case .persistAndStartTransfer(let event, _): return "persist(\(event.type.rawValue))+start"
            }
        case .progress: return Self.summary(try machine.progressReported(bytesDone: 600_000, bytesTotal: 1_048_576, nowMs: now))
        case .checkpoint: return Self.summary(try machine.checkpointReached(laterPoint, bytesTotal: 1_048_576, nowMs: now))
        case .stopPause: return Self.summary(machine.stopRequested(.pause, nowMs: now))
        case .stopCancel: return Self.summary(machine.stopRequested(.cancel, nowMs: now))
        case .stopShutdown: return Self.summary(machine.stopRequested(.shutdown, nowMs: now))
        case .stopLeaseLost: return Self.summary(machine.stopRequested(.leaseLost, nowMs: now))
        case .finished: return Self.summary(try machine.transferFinished(uploaded, nowMs: now))
        case .stoppedPause: return Self.summary(try machine.transferStopped(.pause, resumePoint: laterPoint, nowMs: now))
        case .stoppedCancel: return Self.summary(try machine.transferStopped(.cancel, resumePoint: nil, nowMs: now))
        case .stoppedShutdown: return Self.summary(try machine.transferStopped(.shutdown, resumePoint: laterPoint, nowMs: now))
        case .stoppedLeaseLost: return Self.summary(try machine.transferStopped(.leaseLost, resumePoint: laterPoint, nowMs: now))
        case .failedRetryable: return Self.summary(try machine.transferFailed(serverBusy, nowMs: now, jitter: 0.5))
        case .failedFatal: return Self.summary(try machine.transferFailed(notFound, nowMs: now, jitter: 0.5))
        case .refused:
            switch machine.persistRefused(.staleLease) {
            case .none: return "none"
            case .abandon(let stop): return stop ? "abandon+stop" : "abandon"
            }
        }
    }

    private static func summary(_ action: ProgressAction) -> String {
        switch action {
        case .none: "none"
        case .persist(let event): "persist(\(event.type.rawValue))"
        }
    }

    private static func summary(_ action: StopRequestedAction) -> String {
        switch action {
        case .none: "none"
        case .stopTransfer(let reason): "stop(\(reason.rawValue))"
        case .persist(let event): "persist(\(event.type.rawValue))"
        case .abandon: "abandon"
        }
    }

    private static func summary(_ action: TransferEndedAction) -> String {
        switch action {
        case .none: "none"
        case .persist(let event): "persist(\(event.type.rawValue))"
        case .abandon: "abandon"
        }
    }
}

// MARK: - The transition table

/// "action -> phase", or "refused" for a transition that throws `TaskTransitionError`.
private let transitions: [StartState: [Input: String]] = {
    let refused = "refused"
    /// After the transfer returned: transfer inputs are impossible, stops are harmless, a refused write abandons.
    func ended(_ phase: String) -> [Input: String] {
        [.start: refused, .progress: refused, .checkpoint: refused,
         .stopPause: "none -> \(phase)", .stopCancel: "none -> \(phase)",
         .stopShutdown: "none -> \(phase)", .stopLeaseLost: "none -> \(phase)",
         .finished: refused, .stoppedPause: refused, .stoppedCancel: refused,
         .stoppedShutdown: refused, .stoppedLeaseLost: refused,
         .failedRetryable: refused, .failedFatal: refused,
         .refused: "abandon -> abandoned"]
    }
    /// A stop is pending: reports still persist, the transfer's end decides, a failure yields to the stop.
    func stopping(_ reason: String, stopWins: String) -> [Input: String] {
        let phase = "stopping(\(reason))"
        return [.start: refused,
                .progress: "persist(progress) -> \(phase)", .checkpoint: "persist(progress) -> \(phase)",
                .stopPause: "none -> \(phase)", .stopCancel: "none -> \(phase)", .stopShutdown: "none -> \(phase)",
                .stopLeaseLost: "stop(leaseLost) -> stopping(leaseLost)",
                .finished: "persist(succeeded) -> succeeded",
                .stoppedPause: "persist(paused) -> paused", .stoppedCancel: "persist(cancelled) -> cancelled",
                .stoppedShutdown: "persist(released) -> released", .stoppedLeaseLost: "abandon -> abandoned",
                .failedRetryable: stopWins, .failedFatal: stopWins,
                .refused: "abandon+stop -> abandoned"]
    }
    return [
        .claimed: [
            .start: "persist(started)+start -> running",
            .progress: refused, .checkpoint: refused,
            .stopPause: "persist(paused) -> paused", .stopCancel: "persist(cancelled) -> cancelled",
            .stopShutdown: "persist(released) -> released", .stopLeaseLost: "abandon -> abandoned",
            .finished: refused, .stoppedPause: refused, .stoppedCancel: refused,
            .stoppedShutdown: refused, .stoppedLeaseLost: refused,
            .failedRetryable: refused, .failedFatal: refused,
            .refused: "abandon -> abandoned",
        ],
        .running: [
            .start: refused,
            .progress: "persist(progress) -> running", .checkpoint: "persist(progress) -> running",
            .stopPause: "stop(pause) -> stopping(pause)", .stopCancel: "stop(cancel) -> stopping(cancel)",
            .stopShutdown: "stop(shutdown) -> stopping(shutdown)", .stopLeaseLost: "stop(leaseLost) -> stopping(leaseLost)",
            .finished: "persist(succeeded) -> succeeded",
            .stoppedPause: "persist(paused) -> paused", .stoppedCancel: "persist(cancelled) -> cancelled",
            .stoppedShutdown: "persist(released) -> released", .stoppedLeaseLost: "abandon -> abandoned",
            .failedRetryable: "persist(attempt_failed) -> retryScheduled", .failedFatal: "persist(failed) -> failed",
            .refused: "abandon+stop -> abandoned",
        ],
        .stoppingPause: stopping("pause", stopWins: "persist(paused) -> paused"),
        .stoppingCancel: stopping("cancel", stopWins: "persist(cancelled) -> cancelled"),
        .stoppingShutdown: stopping("shutdown", stopWins: "persist(released) -> released"),
        .stoppingLeaseLost: [
            .start: refused,
            .progress: "none -> stopping(leaseLost)", .checkpoint: "none -> stopping(leaseLost)",
            .stopPause: "none -> stopping(leaseLost)", .stopCancel: "none -> stopping(leaseLost)",
            .stopShutdown: "none -> stopping(leaseLost)", .stopLeaseLost: "none -> stopping(leaseLost)",
            .finished: "abandon -> abandoned",
            .stoppedPause: "abandon -> abandoned", .stoppedCancel: "abandon -> abandoned",
            .stoppedShutdown: "abandon -> abandoned", .stoppedLeaseLost: "abandon -> abandoned",
            .failedRetryable: "abandon -> abandoned", .failedFatal: "abandon -> abandoned",
            .refused: "abandon+stop -> abandoned",
        ],
        .retryScheduled: ended("retryScheduled"),
        .succeeded: ended("succeeded"),
        .failed: ended("failed"),
        .paused: ended("paused"),
        .cancelled: ended("cancelled"),
        .released: ended("released"),
        .abandoned: [
            .start: refused,
            .progress: "none -> abandoned", .checkpoint: "none -> abandoned",
            .stopPause: "none -> abandoned", .stopCancel: "none -> abandoned",
            .stopShutdown: "none -> abandoned", .stopLeaseLost: "none -> abandoned",
            .finished: "none -> abandoned", .stoppedPause: "none -> abandoned", .stoppedCancel: "none -> abandoned",
            .stoppedShutdown: "none -> abandoned", .stoppedLeaseLost: "none -> abandoned",
            .failedRetryable: "none -> abandoned", .failedFatal: "none -> abandoned",
            .refused: "none -> abandoned",
        ],
    ]
}()

@Suite("TaskStateMachine", .onTestThreads)
struct TaskStateMachineTests {
    @Test("every state × every input", arguments: StartState.allCases, Input.allCases)
    func transition(from start: StartState, input: Input) throws {
        let expected = try #require(transitions[start]?[input], "no table entry for \(start) × \(input)")
        var machine = try start.make()
        let before = machine.phase
        let observed: String
        do {
            let action = try input.apply(to: &machine)
            observed = "\(action) -> \(machine.phase)"
        } catch {
            #expect(error.phase == before)
            #expect(machine.phase == before, "a refused transition must not change the state")
            observed = "refused"
        }
        #expect(observed == expected)
    }

    @Test("the table covers every state and input")
    func tableIsComplete() {
        #expect(transitions.count == StartState.allCases.count)
        for row in transitions.values { #expect(row.count == Input.allCases.count) }
    }

    // MARK: Events' data

    @Test func startedCarriesAttemptAndResumePoint() throws {
        var machine = TaskStateMachine(attempt: 2, maxAttempts: 5, resumePoint: uploadPoint, bytesTotal: 1_048_576)
        let action = try machine.attemptStarted(nowMs: 42)
        #expect(action == .persistAndStartTransfer(
            PendingTaskEvent(payload: .started(TransferProgress(attempt: 2, bytesDone: 262_144, bytesTotal: 1_048_576, resumePoint: uploadPoint)), atMs: 42),
            resumingFrom: uploadPoint))
    }

    @Test func progressIsCoalescedPerInterval() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 3)
        _ = try machine.attemptStarted(nowMs: 0)
        // Two reports 300 ms apart: one event.
        #expect(try machine.progressReported(bytesDone: 10, bytesTotal: 100, nowMs: 1_000) != .none)
        #expect(try machine.progressReported(bytesDone: 20, bytesTotal: 100, nowMs: 1_300) == .none)
        // 1.2 s after the last written one: a second event, with the newest counts.
        let second = try machine.progressReported(bytesDone: 30, bytesTotal: 100, nowMs: 2_200)
        guard case .persist(let event) = second else { Issue.record("expected a progress event"); return }
        #expect(event.type == .progress && event.data.bytesDone == 30 && event.data.bytesTotal == 100 && event.atMs == 2_200)
        #expect(machine.bytesDone == 30)
    }

    /// The wall clock stepped back an hour during the transfer: progress was measured from the last write's
    /// time, now an hour in the future, so nothing was written for an hour (`watch` and `show` froze).
    @Test func progressAfterTheClockSteppedBackIsWritten() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 3)
        _ = try machine.attemptStarted(nowMs: 10_000_000)
        #expect(try machine.progressReported(bytesDone: 10, bytesTotal: 100, nowMs: 10_001_500) != .none)
        // The clock steps back an hour: the next report is written, and the interval counts from it.
        let stepped = try machine.progressReported(bytesDone: 20, bytesTotal: 100, nowMs: 6_401_600)
        guard case .persist(let event) = stepped else { Issue.record("no progress written after the clock stepped back"); return }
        #expect(event.data.bytesDone == 20 && event.atMs == 6_401_600)
        #expect(try machine.progressReported(bytesDone: 30, bytesTotal: 100, nowMs: 6_401_900) == .none)
        #expect(try machine.progressReported(bytesDone: 40, bytesTotal: 100, nowMs: 6_402_700) != .none)
    }

    @Test func coalescedAwayReportsStillUpdateCounts() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 3)
        _ = try machine.attemptStarted(nowMs: 0)
        _ = try machine.progressReported(bytesDone: 10, bytesTotal: nil, nowMs: 100)
        #expect(try machine.progressReported(bytesDone: 70, bytesTotal: 100, nowMs: 200) == .none)
        #expect(machine.bytesDone == 70 && machine.bytesTotal == 100)
    }

    @Test func checkpointsAreAlwaysPersistedAndLaterProgressCarriesThem() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 3)
        _ = try machine.attemptStarted(nowMs: 0)
        _ = try machine.progressReported(bytesDone: 10, bytesTotal: 100, nowMs: 1_000)
        let checkpoint = try machine.checkpointReached(laterPoint, bytesTotal: 1_048_576, nowMs: 1_001)
        guard case .persist(let event) = checkpoint else { Issue.record("checkpoint not persisted"); return }
        #expect(event.type == .progress && event.data.resumePoint == laterPoint && event.data.bytesDone == 524_288)
        #expect(try machine.checkpointReached(laterPoint, bytesTotal: nil, nowMs: 1_002) != .none)
        // The checkpoint counts as a progress write for coalescing.
        #expect(try machine.progressReported(bytesDone: 600_000, bytesTotal: nil, nowMs: 1_500) == .none)
        guard case .persist(let next) = try machine.progressReported(bytesDone: 700_000, bytesTotal: nil, nowMs: 2_100) else {
            Issue.record("expected a progress event"); return
        }
        #expect(next.data.resumePoint == laterPoint)
    }

    /// A download that dropped its partial file reports a checkpoint of no bytes: the attempt's failure
    /// carries it and no bytes done, so the next attempt is not logged as resuming from the bytes that went.
    @Test func aCheckpointOfFewerBytesReplacesTheProgressOfTheBytesDropped() throws {
        let held = ResumePoint.download(bytesWritten: 8_388_608, generation: nil, etag: "\"v1\"", tempPath: "/t/.f.partial")
        let dropped = ResumePoint.download(bytesWritten: 0, generation: nil, etag: nil, tempPath: "/t/.f.partial")
        var machine = TaskStateMachine(attempt: 2, maxAttempts: 3, resumePoint: held)
        _ = try machine.attemptStarted(nowMs: 0)
        guard case .persist(let checkpoint) = try machine.checkpointReached(dropped, bytesTotal: nil, nowMs: 10) else {
            Issue.record("checkpoint not persisted"); return
        }
        #expect(checkpoint.data.resumePoint == dropped && checkpoint.data.bytesDone == 0)
        guard case .persist(let failed) = try machine.transferFailed(serverBusy, nowMs: 20, jitter: 0) else {
            Issue.record("failure not persisted"); return
        }
        #expect(failed.type == .attemptFailed && failed.data.resumePoint == dropped && failed.data.bytesDone == 0,
                "\(String(describing: failed.data.resumePoint)) \(String(describing: failed.data.bytesDone))")
    }

    /// An attempt claimed at a point of 8 MiB that dropped them (its checkpoint of no bytes) and then
    /// fetched the whole file kept nothing of the earlier attempts: its rate counts every byte. The pool
    /// took the claim's 8 MiB, and the success read `moved_bytes` short by them.
    @Test func theBytesKeptFromEarlierAttemptsFollowADroppedPoint() throws {
        let held = ResumePoint.slicedDownload(slices: [DownloadSlice(start: 0, length: 16 << 20, confirmed: 8 << 20)], generation: "1",
                                              tempPath: "/t/.f.partial", file: FileIdentity(device: 1, inode: 2))
        var machine = TaskStateMachine(attempt: 2, maxAttempts: 3, resumePoint: held)
        #expect(machine.bytesKeptFromEarlierAttempts == 8 << 20)
        _ = try machine.attemptStarted(nowMs: 0)
        let dropped = ResumePoint.download(bytesWritten: 0, generation: nil, etag: nil, tempPath: "/t/.f.partial")
        _ = try machine.checkpointReached(dropped, bytesTotal: 16 << 20, nowMs: 10)
        let later = ResumePoint.download(bytesWritten: 12 << 20, generation: "2", etag: nil, tempPath: "/t/.f.partial")
        _ = try machine.checkpointReached(later, bytesTotal: 16 << 20, nowMs: 20)
        #expect(machine.bytesKeptFromEarlierAttempts == 0)
        // One that kept its point keeps its bytes, whatever it adds.
        var kept = TaskStateMachine(attempt: 2, maxAttempts: 3, resumePoint: held)
        _ = try kept.attemptStarted(nowMs: 0)
        _ = try kept.checkpointReached(later, bytesTotal: 16 << 20, nowMs: 10)
        #expect(kept.bytesKeptFromEarlierAttempts == 8 << 20)
    }

    @Test func customProgressInterval() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 1, configuration: .init(progressIntervalMs: 100))
        _ = try machine.attemptStarted(nowMs: 0)
        #expect(try machine.progressReported(bytesDone: 1, bytesTotal: nil, nowMs: 10) == .none)
        #expect(try machine.progressReported(bytesDone: 2, bytesTotal: nil, nowMs: 100) != .none)
        #expect(try machine.progressReported(bytesDone: 3, bytesTotal: nil, nowMs: 199) == .none)
        #expect(try machine.progressReported(bytesDone: 4, bytesTotal: nil, nowMs: 200) != .none)
    }

    /// `started` counts as the first progress write: a transfer that ends within its first progress
    /// interval writes `started` and its outcome, no `progress` event, and the outcome has the counts.
    @Test func noProgressEventBeforeTheFirstTick() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 3)
        _ = try machine.attemptStarted(nowMs: 5_000)
        #expect(try machine.progressReported(bytesDone: 32, bytesTotal: 64, nowMs: 5_001) == .none)
        #expect(try machine.progressReported(bytesDone: 64, bytesTotal: 64, nowMs: 5_999) == .none)
        guard case .persist(let outcome) = try machine.transferFinished(JobResult(size: 64), nowMs: 6_000) else {
            Issue.record("expected the succeeded event"); return
        }
        #expect(outcome.type == .succeeded && outcome.data.bytesDone == 64 && outcome.data.bytesTotal == 64)
    }

    /// A transfer still running one interval after `started` writes its first `progress` event then.
    @Test func firstProgressEventOneIntervalAfterStart() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 3)
        _ = try machine.attemptStarted(nowMs: 5_000)
        #expect(try machine.progressReported(bytesDone: 10, bytesTotal: 100, nowMs: 5_999) == .none)
        guard case .persist(let event) = try machine.progressReported(bytesDone: 20, bytesTotal: 100, nowMs: 6_000) else {
            Issue.record("expected a progress event"); return
        }
        #expect(event.type == .progress && event.data.bytesDone == 20 && event.atMs == 6_000)
    }

    // MARK: Failures and retries

    @Test func retryableFailureSchedulesARetry() throws {
        var machine = TaskStateMachine(attempt: 2, maxAttempts: 5, resumePoint: uploadPoint,
                                       configuration: .init(retryPolicy: RetryPolicy(jitter: .none)))
        _ = try machine.attemptStarted(nowMs: 0)
        let action = try machine.transferFailed(serverBusy, nowMs: 10_000, jitter: 0.3)
        guard case .persist(let event) = action else { Issue.record("expected attempt_failed"); return }
        #expect(event.type == .attemptFailed)
        #expect(event.data.retryAtMs == 12_000) // attempt 2: 1 s × 2
        #expect(event.data.error == serverBusy && event.data.attempt == 2 && event.data.resumePoint == uploadPoint)
        #expect(machine.outcome == .retryScheduled(atMs: 12_000, error: serverBusy))
    }

    @Test func retryAfterIsHonoured() throws {
        var error = serverBusy
        error.retryAfter = 30
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5)
        _ = try machine.attemptStarted(nowMs: 0)
        guard case .persist(let event) = try machine.transferFailed(error, nowMs: 1_000, jitter: 0.99) else {
            Issue.record("expected attempt_failed"); return
        }
        #expect(event.data.retryAtMs == 31_000)
    }

    @Test func exhaustedAttemptsFailWithRetryLimitExceededCarryingTheLastError() throws {
        var machine = TaskStateMachine(attempt: 3, maxAttempts: 3)
        _ = try machine.attemptStarted(nowMs: 0)
        guard case .persist(let event) = try machine.transferFailed(serverBusy, nowMs: 5, jitter: 0) else {
            Issue.record("expected failed"); return
        }
        #expect(event.type == .failed)
        let error = try #require(event.data.error)
        #expect(error.code == .retryLimitExceeded)
        #expect(error.httpStatus == 503 && error.url == "https://storage.test/b/o")
        #expect(!error.retryable)
        #expect(error.message.contains("3 attempts") && error.message.contains(serverBusy.message))
        #expect(error.cause?.contains("Service Unavailable") == true && error.cause?.contains("HTTP 503") == true)
        #expect(machine.outcome == .failed(error))
    }

    @Test func nonRetryableErrorFailsAtOnce() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5)
        _ = try machine.attemptStarted(nowMs: 0)
        guard case .persist(let event) = try machine.transferFailed(notFound, nowMs: 5, jitter: 0) else {
            Issue.record("expected failed"); return
        }
        #expect(event.type == .failed && event.data.error == notFound && event.data.retryAtMs == nil)
        #expect(machine.outcome == .failed(notFound))
    }

    @Test("a stop requested before a failure wins", arguments: [
        (StopReason.pause, EventType.paused), (.cancel, .cancelled), (.shutdown, .released),
    ])
    func stopThenFailure(reason: StopReason, expected: EventType) throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5, resumePoint: uploadPoint)
        _ = try machine.attemptStarted(nowMs: 0)
        #expect(machine.stopRequested(reason, nowMs: 1) == .stopTransfer(reason))
        guard case .persist(let event) = try machine.transferFailed(serverBusy, nowMs: 2, jitter: 0) else {
            Issue.record("expected the stop's event"); return
        }
        #expect(event.type == expected)
        #expect(event.data.reason?.contains("503") == true)
        if reason == .cancel {
            #expect(event.data.error?.code == .cancelled && machine.outcome == .cancelled)
        } else {
            #expect(event.data.resumePoint == uploadPoint)
        }
    }

    @Test func leaseLostThenFailureWritesNothing() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5)
        _ = try machine.attemptStarted(nowMs: 0)
        _ = machine.stopRequested(.leaseLost, nowMs: 1)
        #expect(try machine.transferFailed(notFound, nowMs: 2, jitter: 0) == .abandon)
        #expect(machine.phase == .abandoned)
    }

    // MARK: Stops

    @Test func repeatedStopIsHarmless() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5)
        _ = try machine.attemptStarted(nowMs: 0)
        #expect(machine.stopRequested(.pause, nowMs: 1) == .stopTransfer(.pause))
        #expect(machine.stopRequested(.pause, nowMs: 2) == .none)
        #expect(machine.stopRequested(.cancel, nowMs: 3) == .none) // first reason wins, as in TransferControl
        #expect(machine.stopRequested(.leaseLost, nowMs: 4) == .stopTransfer(.leaseLost)) // except a lost lease
        #expect(machine.stopRequested(.leaseLost, nowMs: 5) == .none)
    }

    @Test func pauseKeepsTheLastCheckpointWhenTheTransferReturnsNone() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5, resumePoint: uploadPoint)
        _ = try machine.attemptStarted(nowMs: 0)
        _ = try machine.checkpointReached(laterPoint, bytesTotal: 1_048_576, nowMs: 1)
        _ = machine.stopRequested(.pause, nowMs: 2)
        guard case .persist(let event) = try machine.transferStopped(.pause, resumePoint: nil, nowMs: 3) else {
            Issue.record("expected paused"); return
        }
        #expect(event.type == .paused && event.data.resumePoint == laterPoint)
        #expect(machine.outcome == .paused(laterPoint))
    }

    @Test func cancelledCarriesTheCancelledCodeAndNoResumePoint() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5, resumePoint: uploadPoint)
        _ = try machine.attemptStarted(nowMs: 0)
        _ = machine.stopRequested(.cancel, nowMs: 1)
        guard case .persist(let event) = try machine.transferStopped(.cancel, resumePoint: uploadPoint, nowMs: 2) else {
            Issue.record("expected cancelled"); return
        }
        #expect(event.type == .cancelled && event.data.error?.code == .cancelled && event.data.resumePoint == nil)
        #expect(ObserverStatus(event.type) == .failure)
    }

    @Test func finishingWhileCancelPendingStillSucceeds() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5)
        _ = try machine.attemptStarted(nowMs: 0)
        _ = machine.stopRequested(.cancel, nowMs: 1)
        guard case .persist(let event) = try machine.transferFinished(uploaded, nowMs: 2) else {
            Issue.record("expected succeeded"); return
        }
        #expect(event.type == .succeeded && event.data.result == uploaded && event.data.bytesDone == 1_048_576)
        #expect(machine.outcome == .succeeded(uploaded))
    }

    @Test func stopBeforeStartFinishesAtOnceWithTheProjectionsResumePoint() {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5, resumePoint: uploadPoint)
        guard case .persist(let event) = machine.stopRequested(.shutdown, nowMs: 7) else {
            Issue.record("expected released"); return
        }
        #expect(event.type == .released && event.data.resumePoint == uploadPoint)
        #expect(machine.outcome == .released(uploadPoint))
    }

    @Test func refusedSuccessIsAnAbandonment() throws {
        var machine = TaskStateMachine(attempt: 1, maxAttempts: 5)
        _ = try machine.attemptStarted(nowMs: 0)
        _ = try machine.transferFinished(uploaded, nowMs: 1)
        #expect(machine.persistRefused(.storage("disk full")) == .abandon(stopTransfer: false))
        guard case .abandoned(let reason) = machine.outcome else { Issue.record("expected abandoned"); return }
        #expect(reason.contains("disk full"))
    }
}

// MARK: - Retry policy

@Suite("RetryPolicy", .onTestThreads)
struct RetryPolicyTests {
    @Test func ceilingGrowsExponentiallyAndIsCapped() {
        let policy = RetryPolicy()
        #expect((1...7).map { policy.ceilingMs(attempt: $0) } == [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000])
        #expect(policy.ceilingMs(attempt: 10_000) == 60_000)
        #expect(policy.ceilingMs(attempt: 0) == 1_000)
    }

    @Test func withoutJitterTheDelayIsTheCeiling() {
        let policy = RetryPolicy(jitter: .none)
        #expect(policy.delayMs(attempt: 3, retryAfter: nil, jitter: 0.7) == 4_000)
    }

    @Test("jitter stays in its bounds", arguments: RetryPolicy.Jitter.allCases)
    func jitterBounds(jitter: RetryPolicy.Jitter) {
        let policy = RetryPolicy(jitter: jitter)
        for attempt in 1...8 {
            let ceiling = policy.ceilingMs(attempt: attempt)
            let lower: Int64 = switch jitter {
            case .none: ceiling
            case .full: 0
            case .equal: ceiling / 2
            }
            for random in stride(from: 0.0, to: 1.0, by: 0.05) + [0.999_999, -3, 7, .nan] {
                let delay = policy.delayMs(attempt: attempt, retryAfter: nil, jitter: random)
                #expect(delay >= lower && delay <= ceiling, "attempt \(attempt), random \(random): \(delay)")
                if jitter != .none && random.isFinite && random < 1 { #expect(delay < ceiling || ceiling == 0) }
            }
        }
        if jitter == .equal {
            #expect(policy.delayMs(attempt: 1, retryAfter: nil, jitter: 0) == 500)
            #expect(policy.delayMs(attempt: 1, retryAfter: nil, jitter: 0.5) == 750)
        }
        if jitter == .full {
            #expect(policy.delayMs(attempt: 2, retryAfter: nil, jitter: 0.25) == 500)
        }
    }

    @Test func retryAfterIsAFloorCappedAtAnHour() {
        let policy = RetryPolicy()
        #expect(policy.delayMs(attempt: 1, retryAfter: 30, jitter: 0.9) == 30_000)
        #expect(policy.delayMs(attempt: 1, retryAfter: 0.25, jitter: 0) == 500) // below the backoff: backoff wins
        #expect(policy.delayMs(attempt: 1, retryAfter: 7_200, jitter: 0) == 3_600_000)
        #expect(policy.delayMs(attempt: 1, retryAfter: .infinity, jitter: 0) == 500)
        #expect(policy.delayMs(attempt: 1, retryAfter: -5, jitter: 0) == 500)
        #expect(policy.delayMs(attempt: 20, retryAfter: 120, jitter: 0.99) == 120_000) // above the 60 s cap
    }
}
