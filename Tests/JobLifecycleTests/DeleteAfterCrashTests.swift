import JobLifecycle
import JobModel
import Testing

/// Where a claimed attempt of a delete or an `if_exists: fail` upload starts: after earlier attempts that all
/// ended without a word (their workers died), what they sent may have been carried out (`unanswered`);
/// otherwise where the log says.
@Suite("a delete's attempt after a crash")
struct DeleteAfterCrashTests {
    private func event(_ version: Int, _ payload: EventPayload, token: Int64? = nil) -> JobEvent {
        JobEvent(seq: Int64(version), jobID: "01DEL", version: version, atMs: Int64(version) * 10, actor: "test", leaseToken: token, payload: payload)
    }

    /// The record after `submitted` and the given events (versions follow on).
    private func record(_ kind: JobKind, ifExists: IfExists? = nil, _ payloads: [(EventPayload, Int64?)]) throws -> JobRecord {
        let spec = switch kind {
        case .delete: JobSpec(kind: .delete, destination: "gs://b/x.txt")
        case .downloadFile: JobSpec(kind: .downloadFile, source: "gs://b/x.txt", destination: "/tmp/x.txt", ifExists: ifExists)
        default: JobSpec(kind: .uploadData, destination: "gs://b/x.txt", data: .init("x".utf8), ifExists: ifExists)
        }
        var events = [event(1, .submitted(spec: spec))]
        for (payload, token) in payloads { events.append(event(events.count + 1, payload, token: token)) }
        return try #require(JobRecord.folding(events))
    }

    private func claim(_ attempt: Int) -> (EventPayload, Int64?) {
        (.claimed(leaseOwner: "w\(attempt)", leaseExpiresAtMs: 1_000_000, attempt: attempt), Int64(attempt))
    }
    private let crash: (EventPayload, Int64?) = (.leaseExpired(.none, reason: "lease held by w expired"), nil)
    private let busy = StorageError(.unknown, "the server is busy (503)", httpStatus: 503, retryable: true)

    @Test("first attempt: the log's resume point (none)")
    func firstAttempt() throws {
        #expect(try record(.delete, [claim(1)]).resumePointForAttempt == nil)
    }

    @Test("after a crash (lease expired): unanswered for a delete and an if_exists: fail or skip transfer, nothing for others")
    func afterCrash() throws {
        #expect(try record(.uploadData, ifExists: .skip, [claim(1), crash, claim(2)]).resumePointForAttempt == .unanswered)
        #expect(try record(.downloadFile, ifExists: .skip, [claim(1), crash, claim(2)]).resumePointForAttempt == .unanswered)
        #expect(try record(.delete, [claim(1), crash, claim(2)]).resumePointForAttempt == .unanswered)
        #expect(try record(.delete, [claim(1), crash, claim(2), crash, claim(3)]).resumePointForAttempt == .unanswered)
        #expect(try record(.uploadData, ifExists: .fail, [claim(1), crash, claim(2)]).resumePointForAttempt == .unanswered)
        #expect(try record(.uploadData, [claim(1), crash, claim(2)]).resumePointForAttempt == nil)
        #expect(try record(.uploadData, ifExists: .skipIdentical, [claim(1), crash, claim(2)]).resumePointForAttempt == nil)
        #expect(try record(.downloadFile, ifExists: .fail, [claim(1), crash, claim(2)]).resumePointForAttempt == .unanswered)
        #expect(try record(.downloadFile, [claim(1), crash, claim(2)]).resumePointForAttempt == nil)
    }

    @Test("after an attempt that failed with an answer, a missing object stays an error")
    func afterAnsweredFailure() throws {
        let failed: (EventPayload, Int64?) = (.attemptFailed(TransferProgress(attempt: 1), error: busy, retryAtMs: 0), 1)
        #expect(try record(.delete, [claim(1), failed, claim(2)]).resumePointForAttempt == nil)
    }

    @Test("an attempt that recorded sentDelete keeps it; a paused or released run gives its charge back")
    func recordedOrReleased() throws {
        let sent: (EventPayload, Int64?) = (.attemptFailed(TransferProgress(attempt: 1, resumePoint: .sentDelete), error: busy, retryAtMs: 0), 1)
        #expect(try record(.delete, [claim(1), sent, claim(2)]).resumePointForAttempt == .sentDelete)
        let released: (EventPayload, Int64?) = (.released(TransferProgress(attempt: 1), reason: "shutdown"), 1)
        #expect(try record(.delete, [claim(1), released, claim(1)]).resumePointForAttempt == nil)
    }

    @Test("after `retry` the job starts afresh")
    func afterRetry() throws {
        let failed: (EventPayload, Int64?) = (.failed(TransferProgress(attempt: 2), error: busy, reason: nil), 2)
        #expect(try record(.delete, [claim(1), crash, claim(2), failed, (.retried(reason: "again"), nil), claim(1)]).resumePointForAttempt == nil)
    }

    /// The events a rescue decides for the job `payloads` leave running (a lease of `holder`).
    private func rescue(_ spec: JobSpec, _ payloads: [(EventPayload, Int64?)]) throws -> (decided: EventPayload, events: [JobEvent]) {
        var events = [event(1, .submitted(spec: spec))]
        for (payload, token) in payloads { events.append(event(events.count + 1, payload, token: token)) }
        let decided = try #require(try JobLifecycle(folding: events).decide(.expireLease(holder: "w", expiredAtMs: nil), now: 1_000).get().first)
        return (decided.payload, events)
    }

    @Test("a rescue records unanswered for these kinds, even after an answered failure the record still shows")
    func rescueSaysUnanswered() throws {
        let delete = JobSpec(kind: .delete, destination: "gs://b/x.txt")
        let failed: (EventPayload, Int64?) = (.attemptFailed(TransferProgress(attempt: 1), error: busy, retryAtMs: 0), 1)
        // Attempt 1 answered 503; attempt 2 died after sending its DELETE: attempt 3 must take a 404 as done.
        var (expired, events) = try rescue(delete, [claim(1), failed, claim(2)])
        #expect(expired == .leaseExpired(TransferProgress(resumePoint: .unanswered), reason: "lease held by w expired"))
        events.append(event(events.count + 1, expired))
        events.append(event(events.count + 1, claim(3).0, token: 3))
        let third = try #require(JobRecord.folding(events))
        #expect(third.error?.code == .unknown, "the answered failure is still the record's last error")
        #expect(third.resumePointForAttempt == .unanswered)
        // The same without the rescue's word (a log of an earlier release): the error hides the death.
        var legacy = Array(events.dropLast(2))
        legacy.append(event(legacy.count + 1, crash.0))
        legacy.append(event(legacy.count + 1, claim(3).0, token: 3))
        #expect(try #require(JobRecord.folding(legacy)).resumePointForAttempt == nil)

        // Kinds that cannot meet their own work, and points that say more, get no word.
        let plain = JobSpec(kind: .uploadData, destination: "gs://b/x.txt", data: .init("x".utf8))
        #expect(try rescue(plain, [claim(1)]).decided == .leaseExpired(.none, reason: "lease held by w expired"))
        let sent: (EventPayload, Int64?) = (.attemptFailed(TransferProgress(attempt: 1, resumePoint: .sentDelete), error: busy, retryAtMs: 0), 1)
        #expect(try rescue(delete, [claim(1), sent, claim(2)]).decided.progress == TransferProgress.none)
        let download = JobSpec(kind: .downloadFile, source: "gs://b/x.txt", destination: "/tmp/x.txt", ifExists: .fail)
        let point = ResumePoint.download(bytesWritten: 8, generation: "1", etag: nil, tempPath: "/tmp/.x.txt.01DEL.jobctl-partial",
                                         file: FileIdentity(device: 1, inode: 2))
        let checkpoint: (EventPayload, Int64?) = (.progress(TransferProgress(attempt: 1, bytesDone: 8, resumePoint: point)), 1)
        (expired, events) = try rescue(download, [claim(1), checkpoint])
        #expect(expired.progress == TransferProgress.none, "a download's resume point stays (its file is how the next attempt knows its own)")
        events.append(event(events.count + 1, expired))
        #expect(try #require(JobRecord.folding(events)).resumePoint == point)
    }

    @Test("a last attempt that died fails the job carrying unanswered (for these kinds), so `retry` keeps it")
    func lastAttemptDied() throws {
        for (kind, ifExists, expected) in [(JobKind.delete, IfExists?.none, ResumePoint?.some(.unanswered)),
                                           (.uploadData, .fail, .unanswered), (.uploadData, nil, nil)] {
            // max_attempts 2: the second claim is the last attempt.
            var spec = kind == .delete ? JobSpec(kind: .delete, destination: "gs://b/x.txt")
                                       : JobSpec(kind: .uploadData, destination: "gs://b/x.txt", data: .init("x".utf8), ifExists: ifExists)
            spec.maxAttempts = 2
            var events = [event(1, .submitted(spec: spec))]
            for (payload, token) in [claim(1), crash, claim(2)] { events.append(event(events.count + 1, payload, token: token)) }
            let lifecycle = JobLifecycle(folding: events)
            let decided = try lifecycle.decide(.expireLease(holder: "w2", expiredAtMs: nil), now: 1_000).get()
            let failed = try #require(decided.first)
            #expect(failed.payload.error?.code == .retryLimitExceeded, "\(kind)")
            #expect(failed.payload.progress?.resumePoint == expected, "\(kind) \(String(describing: ifExists))")
            events.append(event(events.count + 1, failed.payload))
            events.append(event(events.count + 1, .retried(reason: "again")))
            events.append(event(events.count + 1, claim(1).0, token: 9))
            let record = try #require(JobRecord.folding(events))
            #expect(record.state == .running && record.attempts == 1)
            #expect(record.resumePointForAttempt == expected, "\(kind) after retry")
        }
    }

    /// A pause acknowledged for a job whose last attempt then died with its worker was lost: the rescue
    /// failed the job (`retryLimitExceeded`) where a cancel in the same place is honoured.
    @Test("a pause pending on a last attempt that died is honoured: paused, the dead run's charge given back, resumed within max_attempts")
    func pausePendingOnTheLastAttempt() throws {
        var spec = JobSpec(kind: .uploadData, destination: "gs://b/x.txt", data: .init("x".utf8))
        spec.maxAttempts = 1
        var events = [event(1, .submitted(spec: spec))]
        for (payload, token) in [claim(1), (EventPayload.pauseRequested(reason: nil), nil)] {
            events.append(event(events.count + 1, payload, token: token))
        }
        let decided = try JobLifecycle(folding: events).decide(.expireLease(holder: "w1", expiredAtMs: 900), now: 1_000).get()
        #expect(decided.map(\.payload.type) == [.paused], "\(decided)")
        for decision in decided { events.append(event(events.count + 1, decision.payload)) }
        let paused = try #require(JobRecord.folding(events))
        #expect(paused.state == .paused && paused.attempts == 0 && !paused.pauseRequested, "\(paused)")
        // Resumed and claimed, it runs attempt 1 of 1 again.
        events.append(event(events.count + 1, .resumeRequested(reason: nil)))
        events.append(event(events.count + 1, claim(1).0, token: 9))
        let running = try #require(JobRecord.folding(events))
        #expect(running.state == .running && running.attempts == 1, "\(running)")
        // A cancel still wins over a pending pause; without either, the last attempt's death fails the job.
        events = [event(1, .submitted(spec: spec))]
        for (payload, token) in [claim(1), (EventPayload.pauseRequested(reason: nil), nil), (EventPayload.cancelRequested(reason: nil), nil)] {
            events.append(event(events.count + 1, payload, token: token))
        }
        let cancelled = try JobLifecycle(folding: events).decide(.expireLease(holder: "w1", expiredAtMs: nil), now: 1_000).get()
        #expect(cancelled.map(\.payload.type) == [.leaseExpired, .cancelled], "\(cancelled)")
    }
}
