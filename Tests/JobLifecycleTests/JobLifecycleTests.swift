import JobLifecycle
import JobModel
import Testing

// MARK: - Fixtures

private let spec = JobSpec(kind: .downloadFile, source: "gs://b/o", destination: "/tmp/o", maxAttempts: 2)
private let point = ResumePoint.download(bytesWritten: 512, generation: "7", etag: nil, tempPath: nil)
private let halfway = TransferProgress(attempt: 1, bytesDone: 512, bytesTotal: 1_024, resumePoint: point)
private let busy = StorageError(.unknown, "the server is busy (503)", httpStatus: 503, retryable: true)
private let missing = StorageError(.objectNotFound, "object b/o does not exist", httpStatus: 404)
private let stopped = StorageError(.cancelled, "cancel requested")
/// When every command of the table is decided.
private let now: Int64 = 10_000

/// Decides `command` and folds what was decided, as the store does; throws the refusal.
@discardableResult
private func drive(_ lifecycle: inout JobLifecycle, _ command: JobCommand, at time: Int64,
                   leaseToken: Int64? = nil) throws -> [DecidedEvent] {
    let events = try lifecycle.decide(command, now: time, leaseToken: leaseToken).get()
    for event in events {
        let version = (lifecycle.record?.version ?? 0) + 1
        lifecycle.apply(JobEvent(seq: Int64(version), jobID: "JOB", version: version, atMs: time, actor: "test",
                                 leaseToken: event.leaseToken, payload: event.payload))
    }
    return events
}

/// Every situation the lifecycle distinguishes, each reached by driving a fresh job through real commands
/// (the two `stale…` states only exist in logs of older releases, so they are set on the record).
enum LifeState: String, CaseIterable, Sendable {
    case new, queued, notYetRunnable, running, pausePending, cancelPending, lastAttempt, paused
    case succeeded, failed, cancelled, staleQueuedPause, staleQueuedCancel

    func make() throws -> JobLifecycle {
        var job = JobLifecycle()
        if self == .new { return job }
        try drive(&job, .submit(spec), at: 100)
        switch self {
        case .new, .queued: break
        case .notYetRunnable:
            try drive(&job, .claim(owner: "w", token: 1, leaseMs: 1_000), at: 200)
            try drive(&job, .finish(.retryScheduled(halfway, error: busy, retryAtMs: 50_000)), at: 300)
        case .running: try drive(&job, .claim(owner: "w", token: 1, leaseMs: 1_000), at: 200)
        case .pausePending:
            try drive(&job, .claim(owner: "w", token: 1, leaseMs: 1_000), at: 200)
            try drive(&job, .pause, at: 300)
        case .cancelPending:
            try drive(&job, .claim(owner: "w", token: 1, leaseMs: 1_000), at: 200)
            try drive(&job, .cancel(by: "cli:bob"), at: 300)
        case .lastAttempt:
            try drive(&job, .claim(owner: "w", token: 1, leaseMs: 1_000), at: 200)
            try drive(&job, .finish(.retryScheduled(halfway, error: busy, retryAtMs: 300)), at: 250)
            try drive(&job, .claim(owner: "w", token: 2, leaseMs: 1_000), at: 400)
        case .paused: try drive(&job, .pause, at: 200)
        case .succeeded:
            try drive(&job, .claim(owner: "w", token: 1, leaseMs: 1_000), at: 200)
            try drive(&job, .finish(.succeeded(halfway, result: JobResult(size: 1_024))), at: 300)
        case .failed:
            try drive(&job, .claim(owner: "w", token: 1, leaseMs: 1_000), at: 200)
            try drive(&job, .finish(.failed(halfway, error: missing, reason: nil)), at: 300)
        case .cancelled: try drive(&job, .cancel(by: "cli:bob"), at: 200)
        case .staleQueuedPause, .staleQueuedCancel:
            var record = try #require(job.record)
            if self == .staleQueuedPause { record.pauseRequested = true } else { record.cancelRequested = true }
            job = JobLifecycle(record: record)
        }
        return job
    }
}

/// Every command, and every event a worker or tool can report.
enum Command: String, CaseIterable, Sendable {
    case submit, claim, start, progress, release
    case finishPaused, finishCancelled, finishRetry, finishSucceeded, finishFailed
    case pause, resume, cancel, retry, expireLease, settle
    case reportPauseRequested, reportResumeRequested, reportCancelRequested, reportRetried, reportLeaseExpired
    case reportClaimed

    var command: JobCommand {
        switch self {
        case .submit: .submit(spec)
        case .claim: .claim(owner: "w2", token: 9, leaseMs: 1_000)
        case .start: .start(halfway)
        case .progress: .reportProgress(halfway)
        case .release: .release(halfway, reason: "worker shutting down")
        case .finishPaused: .finish(.paused(halfway, reason: "pause requested"))
        case .finishCancelled: .finish(.cancelled(halfway, error: stopped, reason: "cancel requested"))
        case .finishRetry: .finish(.retryScheduled(halfway, error: busy, retryAtMs: now + 500))
        case .finishSucceeded: .finish(.succeeded(halfway, result: JobResult(size: 1_024)))
        case .finishFailed: .finish(.failed(halfway, error: missing, reason: nil))
        case .pause: .pause
        case .resume: .resume
        case .cancel: .cancel(by: "cli:alice")
        case .retry: .retry
        case .expireLease: .expireLease(holder: "w", expiredAtMs: 9_000)
        case .settle: .settle
        case .reportPauseRequested: .report(.pauseRequested(reason: nil))
        case .reportResumeRequested: .report(.resumeRequested(reason: nil))
        case .reportCancelRequested: .report(.cancelRequested(reason: nil))
        case .reportRetried: .report(.retried(reason: nil))
        case .reportLeaseExpired: .report(.leaseExpired(.none, reason: "lease expired"))
        case .reportClaimed: .report(.claimed(leaseOwner: "w", leaseExpiresAtMs: 1, attempt: 1))
        }
    }
}

/// "events -> state" ("none" for a repeat), or "refused: <kind>".
private func summary(_ state: LifeState, _ command: Command) throws -> String {
    var job = try state.make()
    do {
        let events = try drive(&job, command.command, at: now)
        let types = events.isEmpty ? "none" : events.map(\.payload.type.rawValue).joined(separator: "+")
        return "\(types) -> \(job.record?.state.rawValue ?? "nothing")"
    } catch let refusal as LifecycleRefusal {
        return switch refusal {
        case .notFound: "refused: notFound"
        case .versionConflict: "refused: versionConflict"
        case .staleLease: "refused: staleLease"
        case .invalidTransition: "refused: invalidTransition"
        case .invalidControl: "refused: invalidControl"
        case .notRunnableYet: "refused: notRunnableYet"
        }
    }
}

// MARK: - The table

private let table: [LifeState: [Command: String]] = {
    let transition = "refused: invalidTransition"
    let control = "refused: invalidControl"
    /// Everything refused except what `overrides` says.
    func row(_ overrides: [Command: String], base: String = transition) -> [Command: String] {
        var row = Dictionary(uniqueKeysWithValues: Command.allCases.map { ($0, base) })
        for command in [Command.pause, .resume, .cancel, .retry, .reportClaimed] { row[command] = control }
        row.merge(overrides) { $1 }
        return row
    }
    let queued: [Command: String] = [
        .claim: "claimed -> running", .finishPaused: "paused -> paused", .finishCancelled: "cancelled -> cancelled",
        .pause: "paused -> paused", .cancel: "cancelled -> cancelled", .settle: "none -> queued",
    ]
    let running: [Command: String] = [
        .start: "started -> running", .progress: "progress -> running", .release: "released -> queued",
        // A worker's pause nobody asked for (any more): a withdrawn pause, so the job is re-queued.
        .finishPaused: "paused+resume_requested -> queued", .finishCancelled: "cancelled -> cancelled",
        .finishRetry: "attempt_failed -> queued", .finishSucceeded: "succeeded -> succeeded",
        .finishFailed: "failed -> failed",
        .pause: "pause_requested -> running", .cancel: "cancel_requested -> running",
        .expireLease: "lease_expired -> queued", .settle: "none -> running",
        .reportPauseRequested: "pause_requested -> running", .reportResumeRequested: "resume_requested -> running",
        .reportCancelRequested: "cancel_requested -> running", .reportLeaseExpired: "lease_expired -> queued",
    ]
    var pausePending = running
    pausePending.merge([
        .release: "released+paused -> paused", .finishPaused: "paused -> paused",
        .finishRetry: "attempt_failed+paused -> paused", .pause: "none -> running",
        .resume: "resume_requested -> running", .expireLease: "lease_expired+paused -> paused",
        .reportLeaseExpired: "lease_expired+paused -> paused",
    ]) { $1 }
    var cancelPending = running
    cancelPending.merge([
        .release: "released+cancelled -> cancelled", .finishPaused: "paused+cancelled -> cancelled",
        .finishRetry: "attempt_failed+cancelled -> cancelled", .pause: control, .cancel: "none -> running",
        .expireLease: "lease_expired+cancelled -> cancelled", .reportLeaseExpired: "lease_expired+cancelled -> cancelled",
    ]) { $1 }
    var lastAttempt = running
    lastAttempt[.expireLease] = "failed -> failed"  // a crash keeps its charge: no attempts are left
    lastAttempt[.finishRetry] = "refused: invalidControl"  // the last attempt's failure is final: `failed`, not a retry
    var notYetRunnable = queued
    notYetRunnable[.claim] = "refused: notRunnableYet"
    var staleQueuedPause = queued
    staleQueuedPause.merge([.claim: "paused -> paused", .settle: "paused -> paused"]) { $1 }
    var staleQueuedCancel = queued
    staleQueuedCancel.merge([
        .claim: "cancelled -> cancelled", .settle: "cancelled -> cancelled",
        .pause: "paused+cancelled -> cancelled", .finishPaused: "paused+cancelled -> cancelled",
    ]) { $1 }
    return [
        .new: row([.submit: "submitted -> queued"], base: "refused: notFound").mapValues {
            $0 == control ? "refused: notFound" : $0
        }.merging([.reportClaimed: control]) { $1 },
        .queued: row(queued),
        .notYetRunnable: row(notYetRunnable),
        .running: row(running),
        .pausePending: row(pausePending),
        .cancelPending: row(cancelPending),
        .lastAttempt: row(lastAttempt),
        .paused: row([
            .finishCancelled: "cancelled -> cancelled", .pause: "none -> paused", .resume: "resume_requested -> queued",
            .cancel: "cancelled -> cancelled", .settle: "none -> paused", .reportResumeRequested: "resume_requested -> queued",
        ]),
        .succeeded: row([.settle: "none -> succeeded"]),
        .failed: row([.retry: "retried -> queued", .reportRetried: "retried -> queued", .settle: "none -> failed"]),
        .cancelled: row([
            .retry: "retried -> queued", .reportRetried: "retried -> queued", .cancel: "none -> cancelled",
            .settle: "none -> cancelled",
        ]),
        .staleQueuedPause: row(staleQueuedPause),
        .staleQueuedCancel: row(staleQueuedCancel),
    ]
}()

@Suite("JobLifecycle")
struct JobLifecycleTests {
    @Test("every state × every command", arguments: LifeState.allCases, Command.allCases)
    func transition(from state: LifeState, command: Command) throws {
        let expected = try #require(table[state]?[command], "no table entry for \(state) × \(command)")
        #expect(try summary(state, command) == expected, "\(state) × \(command)")
    }

    @Test("a claim leases the job for attempt attempts + 1 under the new token, expiring at now + lease")
    func claimCarriesTheLease() throws {
        var job = try LifeState.notYetRunnable.make()
        let events = try drive(&job, .claim(owner: "w2", token: 9, leaseMs: 1_000), at: 60_000)
        #expect(events == [DecidedEvent(.claimed(leaseOwner: "w2", leaseExpiresAtMs: 61_000, attempt: 2), leaseToken: 9)])
        #expect(job.record?.leaseToken == 9 && job.record?.attempts == 2)
    }

    @Test("a report under a lease token must name the running job's current token")
    func fencing() throws {
        let running = try LifeState.running.make()
        #expect(running.decide(.reportProgress(halfway), now: now, leaseToken: 2) == .failure(.staleLease(token: 2)))
        #expect(try running.decide(.reportProgress(halfway), now: now, leaseToken: 1).get().first?.leaseToken == 1)
        let queued = try LifeState.queued.make()
        #expect(queued.decide(.finish(.paused(halfway, reason: nil)), now: now, leaseToken: 1)
            == .failure(.staleLease(token: 1)))
        // A claim carries its own, new token; the caller's is not checked.
        #expect(try queued.decide(.claim(owner: "w", token: 5, leaseMs: 10), now: now, leaseToken: 1).get().count == 1)
    }

    @Test("settlement events carry no lease token; the reported event keeps the worker's")
    func settlementIsNotFenced() throws {
        let job = try LifeState.cancelPending.make()
        let events = try job.decide(.release(halfway, reason: nil), now: now, leaseToken: 1).get()
        #expect(events.map(\.leaseToken) == [1, nil])
    }

    @Test("the expected version must be current; a new job is at version 0")
    func expectedVersion() throws {
        let queued = try LifeState.queued.make()
        #expect(queued.decide(.pause, now: now, expectedVersion: 2) == .failure(.versionConflict(expected: 2, actual: 1)))
        #expect(try queued.decide(.pause, now: now, expectedVersion: 1).get().count == 1)
        #expect(JobLifecycle().decide(.submit(spec), now: now, expectedVersion: 3)
            == .failure(.versionConflict(expected: 3, actual: 0)))
    }

    @Test("a rescue names the holder and the expiry; on the last attempt it fails with retryLimitExceeded")
    func rescueWording() throws {
        let expired = try LifeState.running.make().decide(.expireLease(holder: "w", expiredAtMs: 9_000), now: now).get()
        #expect(expired.first?.payload == .leaseExpired(.none, reason: "lease held by w expired at 9000"))
        let failed = try LifeState.lastAttempt.make().decide(.expireLease(holder: "w", expiredAtMs: nil), now: now).get()
        #expect(failed.first?.payload.error?.code == .retryLimitExceeded)
        #expect(failed.first?.payload.reason == "lease expired")
    }

    @Test("attempts: a pause or a release gives the charge back, a failure or a crash keeps it, retry resets")
    func attemptCounting() throws {
        var job = try LifeState.queued.make()
        func attempts() -> Int { job.record?.attempts ?? -1 }
        try drive(&job, .claim(owner: "w", token: 1, leaseMs: 1_000), at: 200)
        #expect(attempts() == 1)
        try drive(&job, .release(halfway, reason: nil), at: 300)
        #expect(attempts() == 0)
        try drive(&job, .claim(owner: "w", token: 2, leaseMs: 1_000), at: 400)
        try drive(&job, .pause, at: 450)
        try drive(&job, .finish(.paused(halfway, reason: nil)), at: 500)
        #expect(attempts() == 0 && job.record?.state == .paused)
        try drive(&job, .resume, at: 550)
        try drive(&job, .claim(owner: "w", token: 3, leaseMs: 1_000), at: 600)
        try drive(&job, .expireLease(holder: "w", expiredAtMs: 1_600), at: 1_700)
        #expect(attempts() == 1)
        try drive(&job, .claim(owner: "w", token: 4, leaseMs: 1_000), at: 1_800)
        try drive(&job, .finish(.failed(halfway, error: missing, reason: nil)), at: 1_900)
        #expect(attempts() == 2 && job.record?.state == .failed)
        try drive(&job, .retry, at: 2_000)
        #expect(attempts() == 0 && job.record?.error == nil)
    }

    @Test("folding the decided events gives the record the decisions were made for")
    func foldingMatches() throws {
        var job = try LifeState.pausePending.make()
        let before = try #require(job.record)
        try drive(&job, .expireLease(holder: "w", expiredAtMs: 900), at: now)
        let after = try #require(job.record)
        #expect(after.version == before.version + 2 && after.state == .paused && !after.pauseRequested)
        #expect(after.leaseOwner == nil && after.leaseToken == nil)
    }
}

// MARK: - Payloads

@Suite("EventPayload")
struct EventPayloadTests {
    /// One payload of each type, with every field its case has.
    static let samples: [EventPayload] = [
        .submitted(spec: spec),
        .claimed(leaseOwner: "w", leaseExpiresAtMs: 5, attempt: 2),
        .started(halfway), .progress(halfway),
        .pauseRequested(reason: "r"), .paused(halfway, reason: "r"), .resumeRequested(reason: "r"),
        .cancelRequested(reason: "r"), .cancelled(halfway, error: stopped, reason: "r"),
        .cancelled(.none, error: StorageError(.cancelled, "dependency 01DEP failed"), reason: "r", dependency: "01DEP"),
        .attemptFailed(halfway, error: busy, retryAtMs: 9), .leaseExpired(.none, reason: "r"),
        .released(halfway, reason: "r"), .succeeded(halfway, result: JobResult(size: 3)),
        .failed(halfway, error: missing, reason: "r"), .retried(reason: "r"),
        .archived(ArchiveRecord(file: "a.ndjson.gz", sha256: "ab", beforeMs: 1, jobs: 2, events: 3, blobs: 1, blobsRemoved: 1,
                                firstSeq: 4, lastSeq: 9)),
    ]

    @Test("one sample per event type")
    func everyType() {
        #expect(Set(Self.samples.map(\.type)) == Set(EventType.allCases))
    }

    @Test("the JSON shape converts back to the same payload", arguments: samples)
    func roundTrip(payload: EventPayload) throws {
        #expect(try EventPayload(type: payload.type, wire: payload.wire) == payload)
        #expect(payload.wire.v == 1)
    }

    @Test("a payload missing a field its type needs is refused, naming the field",
          arguments: [(EventType.submitted, "spec"), (.claimed, "leaseOwner"), (.attemptFailed, "error"),
                      (.succeeded, "result"), (.failed, "error"), (.archived, "archive")])
    func missingField(type: EventType, field: String) {
        #expect(throws: EventPayloadError(type: type, problem: "has no '\(field)'")) {
            try EventPayload(type: type, wire: EventData())
        }
    }

    @Test("a newer payload schema is refused, not misread")
    func newerSchema() {
        #expect(throws: EventPayloadError.self) { try EventPayload(type: .progress, wire: EventData(v: 2)) }
    }
}

// MARK: - Dependencies

@Suite("JobLifecycle: a dependency that ended failed or cancelled")
struct DependencyEndedTests {
    @Test("a queued or paused dependant ends cancelled naming the dependency; any other is left alone",
          arguments: LifeState.allCases)
    func dependencyEnded(state: LifeState) throws {
        var job = try state.make()
        let command = JobCommand.dependencyEnded(dependency: "01DEP", key: "up", outcome: .failed)
        guard state != .new else {
            #expect(job.decide(command, now: now) == .failure(.notFound))
            return
        }
        let before = try #require(job.record?.state)
        let events = try drive(&job, command, at: now)
        switch before {
        case .queued, .paused:
            #expect(events.map(\.payload.type) == [.cancelled])
            #expect(events.first?.payload.error == StorageError(.cancelled, "dependency 01DEP (key up) failed"))
            #expect(events.first?.leaseToken == nil && job.record?.state == .cancelled)
        case .running, .succeeded, .failed, .cancelled:
            #expect(events.isEmpty)
            #expect(job.record?.state == before)
        }
    }

    @Test("the cancel names the dependency in a field of its own; a user's cancel names none")
    func theCancelNamesItsDependency() throws {
        var job = try LifeState.queued.make()
        let cancellation = try #require(try drive(&job, .dependencyEnded(dependency: "01DEP", key: "up", outcome: .failed), at: now).first).payload
        #expect(cancellation.cancellingDependency == "01DEP")
        #expect(cancellation.wire.dependency == "01DEP")
        #expect(try EventPayload(type: .cancelled, wire: cancellation.wire) == cancellation)
        #expect(job.record?.error?.message == "dependency 01DEP (key up) failed")
        var other = try LifeState.queued.make()
        #expect(try drive(&other, .cancel(by: "cli:bob"), at: now).first?.payload.cancellingDependency == nil)
    }

    @Test("the message names a cancelled dependency, with or without its key")
    func wording() throws {
        #expect(JobLifecycle.dependencyMessage(dependency: "01A", key: nil, outcome: .cancelled) == "dependency 01A was cancelled")
        #expect(JobLifecycle.dependencyMessage(dependency: "01A", key: "k", outcome: .failed) == "dependency 01A (key k) failed")
        var job = try LifeState.queued.make()
        // Only a final failure or cancellation of the dependency cancels; anything else is refused.
        #expect(throws: LifecycleRefusal.self) {
            try job.decide(.dependencyEnded(dependency: "01A", key: nil, outcome: .succeeded), now: now).get()
        }
        try drive(&job, .dependencyEnded(dependency: "01A", key: nil, outcome: .cancelled), at: now)
        #expect(job.record?.error?.message == "dependency 01A was cancelled")
    }
}

/// `dependencyRetried` (`retry --with-dependants`): only a cancelled job whose cancel names a dependency
/// opens again, and only once no other dependency of its is still failed or cancelled.
struct DependencyRetriedTests {
    /// The cancel a dependency's end decides, as the log holds it.
    private func cancelledByDependency() throws -> (JobLifecycle, EventPayload) {
        var job = try LifeState.queued.make()
        let events = try drive(&job, .dependencyEnded(dependency: "01DEP", key: "up", outcome: .failed), at: now)
        return (job, try #require(events.first).payload)
    }

    @Test("a job a dependency's end cancelled opens again and waits; with another dependency still ended it stays")
    func aDependencyCancelOpensAgain() throws {
        var (job, cancellation) = try cancelledByDependency()
        let blocked = JobCommand.dependencyRetried(dependency: "01DEP", key: "up", cancellation: cancellation, stillEnded: "01OTHER")
        guard case .failure(.invalidControl(let why)) = job.decide(blocked, now: now) else {
            Issue.record("a job still waiting for an ended dependency was opened")
            return
        }
        #expect(why.contains("also waits for 01OTHER, which is still failed or cancelled"), "\(why)")
        let events = try drive(&job, .dependencyRetried(dependency: "01DEP", key: "up", cancellation: cancellation, stillEnded: nil),
                               at: now + 1)
        #expect(events == [DecidedEvent(.retried(reason: "dependency 01DEP (key up) opened again (`retry --with-dependants`)"))])
        #expect(job.record?.state == .queued && job.record?.attempts == 0 && job.record?.error == nil)
    }

    @Test("a job paused when the cascade cancelled it opens paused")
    func aPausedJobOpensPaused() throws {
        var (job, cancellation) = try cancelledByDependency()
        let events = try drive(&job, .dependencyRetried(dependency: "01DEP", key: nil, cancellation: cancellation, stillEnded: nil,
                                                        wasPaused: true), at: now + 1)
        #expect(events.map(\.payload.type) == [.retried, .paused])
        #expect(job.record?.state == .paused && job.record?.attempts == 0 && job.record?.error == nil)
    }

    @Test("any job but one a dependency's cancel ended is refused and left as it is", arguments: LifeState.allCases)
    func everyOtherJobIsLeftAlone(state: LifeState) throws {
        let job = try state.make()
        // What the store would pass: the job's last event (a user's cancel, for the cancelled state).
        let last: EventPayload? = state == .cancelled ? .cancelled(.none, error: StorageError(.cancelled, "cancelled by cli:bob"), reason: nil) : nil
        let command = JobCommand.dependencyRetried(dependency: "01DEP", key: nil, cancellation: last, stillEnded: nil)
        switch job.decide(command, now: now) {
        case .success(let events):
            Issue.record("\(state) was opened again: \(events)")
        case .failure(let refusal):
            switch state {
            case .new: #expect(refusal == .notFound)
            case .cancelled: #expect("\(refusal)".contains("was not cancelled by a dependency's end"), "\(refusal)")
            default: #expect("\(refusal)".contains(", not cancelled; retrying its dependency leaves it as it is"), "\(refusal)")
            }
        }
    }
}

/// A plain `retry` of a job that waits for others (`after:`) is decided on how they stand: opened while
/// one of them is failed or cancelled, it could never run.
struct RetryOfADependantTests {
    private typealias Dependency = DependencyStanding.Dependency

    @Test("a retry is refused while a dependency is failed, cancelled or gone, naming the retry that opens it; taken once none is")
    func aRetryWaitsForItsDependencies() throws {
        var dependant = spec
        dependant.after = ["01A", "01B"]
        var job = JobLifecycle()
        try drive(&job, .submit(dependant), at: 100)
        try drive(&job, .dependencyEnded(dependency: "01A", key: "a", outcome: .failed), at: 200)
        func refusal(_ unfinished: [Dependency]?, cancelledByDependency: Bool = true) -> String? {
            let standing = unfinished.map { DependencyStanding(unfinished: $0, cancelledByDependency: cancelledByDependency) }
            switch job.decide(.retry, now: now, dependencies: standing) {
            case .failure(.invalidControl(let why)): return why
            case .failure(let other): return "\(other)"
            case .success: return nil
            }
        }
        let failedA = Dependency(id: "01A", key: "a", state: .failed, root: "01A")
        let cancelledB = Dependency(id: "01B", key: nil, state: .cancelled, root: "01R")
        let never = "retried alone, it could never run"
        #expect(refusal(nil)?.contains("its retry was asked without how they stand") == true, "a store must say how they stand")
        #expect(refusal([failedA, cancelledB]) == "job JOB still waits for 01A (key a), which failed, and 01B, which was cancelled; "
                + "\(never): `jobctl retry 01A 01R --with-dependants` opens it again with them")
        #expect(refusal([cancelledB], cancelledByDependency: false) == "job JOB still waits for 01B, which was cancelled; \(never): "
                + "`jobctl retry 01R --with-dependants` first, then `jobctl retry JOB`")
        #expect(refusal([Dependency(id: "01B", key: nil, state: nil, root: "01B")])
                == "job JOB still waits for 01B, which is no longer in the log; \(never): submit it again without that dependency")
        // Dependencies that can still succeed: it opens, and waits for them.
        let open = DependencyStanding(unfinished: [Dependency(id: "01A", key: "a", state: .queued, root: "01A"),
                                                   Dependency(id: "01B", key: nil, state: .running, root: "01B")],
                                      cancelledByDependency: true)
        #expect(try job.decide(.retry, now: now, dependencies: open).get() == [DecidedEvent(.retried(reason: nil))])
        // A job that waits for nothing needs no standing.
        var alone = try LifeState.failed.make()
        #expect(try drive(&alone, .retry, at: now).map(\.payload.type) == [.retried])
    }
}
