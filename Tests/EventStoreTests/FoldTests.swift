import Foundation
import JobLifecycle
import JobModel
import Testing
@testable import EventStore
import TestSupport

/// The fold as a value: no SQL, one event at a time.
@Suite("Folding events into a JobRecord", .onTestThreads)
struct FoldTests {
    static let spec = JobSpec(kind: .downloadFile, source: "gs://b/o", destination: "/tmp/o", key: "k1",
                              priority: 7, maxAttempts: 4, queue: "bulk")
    static let upload = ResumePoint.upload(sessionURI: "http://127.0.0.1/session", confirmedOffset: 512, total: 1024)

    func event(_ type: EventType, version: Int, at: Int64, token: Int64? = nil, _ data: EventData = EventData()) -> JobEvent {
        // The fields a type needs and the test leaves out get placeholder values, so the helper never fails.
        var data = data
        switch type {
        case .claimed:
            data.leaseOwner = data.leaseOwner ?? "w"
            data.leaseExpiresAtMs = data.leaseExpiresAtMs ?? at + 1_000
            data.attempt = data.attempt ?? 1
        case .attemptFailed:
            data.error = data.error ?? StorageError(.unknown, "503", retryable: true)
            data.retryAtMs = data.retryAtMs ?? at
        case .failed:
            data.error = data.error ?? StorageError(.unknown, "failed")
        case .succeeded:
            data.result = data.result ?? JobResult()
        default:
            break
        }
        return try! JobEvent(seq: Int64(version * 10), jobID: "JOB", version: version, type: type, atMs: at, actor: "a",
                             leaseToken: token, data: data)
    }

    var submitted: JobEvent { event(.submitted, version: 1, at: 100, EventData(spec: Self.spec)) }

    /// A record that was submitted and claimed with token 9.
    func runningRecord() throws -> JobRecord {
        try #require(JobRecord.folding([
            submitted,
            event(.claimed, version: 2, at: 200, token: 9, EventData(leaseOwner: "w1", leaseExpiresAtMs: 900, attempt: 1)),
        ]))
    }

    @Test func submittedQueuesTheJob() throws {
        let record = try #require(JobRecord.folding([submitted]))
        #expect(record.state == .queued)
        #expect(record.runAfterMs == 100 && record.createdAtMs == 100 && record.updatedAtMs == 100)
        #expect(record.spec == Self.spec && record.key == "k1" && record.kind == .downloadFile)
        #expect(record.priority == 7 && record.queue == "bulk" && record.maxAttempts == 4)
        #expect(record.attempts == 0 && record.version == 1 && record.seq == 10)
        #expect(record.leaseOwner == nil && record.leaseToken == nil)
    }

    @Test func foldingNeedsSubmittedFirst() {
        #expect(JobRecord.folding([]) == nil)
        #expect(JobRecord.folding([event(.claimed, version: 1, at: 1)]) == nil)
        // A `submitted` without a spec cannot even be built.
        #expect(throws: EventPayloadError(type: .submitted, problem: "has no 'spec'")) {
            try JobEvent(jobID: "JOB", version: 1, type: .submitted, atMs: 1, actor: "a", data: EventData())
        }
    }

    @Test func claimedLeasesAndCountsTheAttempt() throws {
        var record = try #require(JobRecord.folding([submitted]))
        record.pauseRequested = true
        record.cancelRequested = true
        record.apply(event(.claimed, version: 2, at: 200, token: 9, EventData(leaseOwner: "w1")))
        #expect(record.state == .running && record.attempts == 1)
        #expect(record.leaseOwner == "w1" && record.leaseToken == 9)
        #expect(!record.pauseRequested && !record.cancelRequested)
        #expect(record.version == 2 && record.updatedAtMs == 200)
    }

    @Test func startedSetsStartTimeOnce() throws {
        var record = try runningRecord()
        record.apply(event(.started, version: 3, at: 300, token: 9))
        record.apply(event(.started, version: 4, at: 400, token: 9))
        #expect(record.startedAtMs == 300 && record.state == .running)
    }

    @Test func progressRecordsBytesAndResumePoint() throws {
        var record = try runningRecord()
        record.apply(event(.progress, version: 3, at: 300, token: 9,
                           EventData(bytesDone: 512, bytesTotal: 1024, resumePoint: Self.upload)))
        #expect(record.bytesDone == 512 && record.bytesTotal == 1024 && record.resumePoint == Self.upload)
        record.apply(event(.progress, version: 4, at: 310, token: 9, EventData(bytesDone: 600)))
        #expect(record.bytesDone == 600 && record.bytesTotal == 1024 && record.resumePoint == Self.upload)
    }

    @Test func pauseRequestedThenPaused() throws {
        var record = try runningRecord()
        record.apply(event(.progress, version: 3, at: 300, EventData(resumePoint: Self.upload)))
        record.apply(event(.pauseRequested, version: 4, at: 400))
        #expect(record.pauseRequested && record.state == .running)
        record.apply(event(.paused, version: 5, at: 500))
        #expect(record.state == .paused && !record.pauseRequested)
        #expect(record.leaseOwner == nil && record.leaseToken == nil && record.resumePoint == Self.upload)
    }

    @Test func resumeRequestedRequeuesAPausedJob() throws {
        var record = try runningRecord()
        record.apply(event(.paused, version: 3, at: 300))
        record.apply(event(.resumeRequested, version: 4, at: 450))
        #expect(record.state == .queued && record.runAfterMs == 450)
    }

    /// `pause` then `resume` of a job waiting for its retry dropped the wait (a server's Retry-After too).
    @Test("a job paused while its retry waits and resumed keeps the retry's time; one resumed after it runs at once")
    func resumeRequestedKeepsAPendingRetry() throws {
        var record = try runningRecord()
        record.apply(event(.attemptFailed, version: 3, at: 300, EventData(retryAtMs: 5_000)))
        record.apply(event(.pauseRequested, version: 4, at: 400))
        record.apply(event(.paused, version: 5, at: 400))
        var late = record
        record.apply(event(.resumeRequested, version: 6, at: 450))
        #expect(record.state == .queued && record.runAfterMs == 5_000)
        late.apply(event(.resumeRequested, version: 6, at: 7_000))
        #expect(late.state == .queued && late.runAfterMs == 7_000)
    }

    /// A job that succeeded on its second attempt kept the first one's error: `list` showed it in the
    /// ERROR column, `show` and the JSON views beside `succeeded`.
    @Test("a job that succeeds after a failed attempt has no error; a failed one keeps its own")
    func succeededClearsAnEarlierAttemptsError() throws {
        var record = try runningRecord()
        record.apply(event(.attemptFailed, version: 3, at: 300, EventData(retryAtMs: 400)))
        #expect(record.state == .queued && record.error?.message == "503", "the retry's wait keeps the attempt's error")
        record.apply(event(.claimed, version: 4, at: 400, token: 10, EventData(attempt: 2)))
        var failing = record
        record.apply(event(.succeeded, version: 5, at: 500))
        #expect(record.state == .succeeded && record.error == nil && record.attempts == 2)
        failing.apply(event(.failed, version: 5, at: 500))
        #expect(failing.state == .failed && failing.error?.message == "failed")
    }

    @Test func resumeRequestedWithdrawsAPauseRequestWhileRunning() throws {
        var record = try runningRecord()
        record.apply(event(.pauseRequested, version: 3, at: 300))
        record.apply(event(.resumeRequested, version: 4, at: 400))
        #expect(record.state == .running && !record.pauseRequested && record.leaseToken == 9)
    }

    @Test func cancelRequestedThenCancelled() throws {
        var record = try runningRecord()
        record.apply(event(.cancelRequested, version: 3, at: 300))
        #expect(record.cancelRequested && record.state == .running)
        record.apply(event(.cancelled, version: 4, at: 400, EventData(reason: "user")))
        #expect(record.state == .cancelled && record.finishedAtMs == 400 && record.leaseToken == nil)
        #expect(record.error?.code == .cancelled && !record.cancelRequested)
    }

    @Test func cancelledKeepsTheGivenError() throws {
        var record = try #require(JobRecord.folding([submitted]))
        record.apply(event(.cancelled, version: 2, at: 300, EventData(error: StorageError(.cancelled, "by bob"))))
        #expect(record.error == StorageError(.cancelled, "by bob"))
    }

    @Test func attemptFailedSchedulesARetryAtItsResumePoint() throws {
        var record = try runningRecord()
        record.apply(event(.progress, version: 3, at: 300, EventData(bytesDone: 512, resumePoint: Self.upload)))
        let failure = StorageError(.unknown, "503", httpStatus: 503, retryable: true)
        record.apply(event(.attemptFailed, version: 4, at: 400, EventData(error: failure, retryAtMs: 5_000)))
        #expect(record.state == .queued && record.runAfterMs == 5_000 && record.error == failure)
        #expect(record.leaseToken == nil && record.resumePoint == Self.upload && record.attempts == 1)
    }

    @Test(arguments: [EventType.leaseExpired, .released])
    func leaseExpiredAndReleasedRequeue(type: EventType) throws {
        var record = try runningRecord()
        record.apply(event(.progress, version: 3, at: 300, EventData(resumePoint: Self.upload)))
        record.apply(event(type, version: 4, at: 700))
        #expect(record.state == .queued && record.runAfterMs == 700)
        #expect(record.leaseOwner == nil && record.leaseToken == nil && record.resumePoint == Self.upload)
    }

    @Test func succeededStoresTheResult() throws {
        var record = try runningRecord()
        let result = JobResult(path: "/tmp/o", size: 3, blob: "abc")
        record.apply(event(.succeeded, version: 3, at: 800, EventData(result: result)))
        #expect(record.state == .succeeded && record.result == result && record.finishedAtMs == 800)
        #expect(record.leaseToken == nil)
    }

    @Test func failedStoresTheError() throws {
        var record = try runningRecord()
        let failure = StorageError(.objectNotFound, "gone", httpStatus: 404)
        record.apply(event(.failed, version: 3, at: 800, EventData(error: failure)))
        #expect(record.state == .failed && record.error == failure && record.finishedAtMs == 800)
        #expect(record.leaseOwner == nil)
    }

    @Test func retriedReopensAFailedJob() throws {
        var record = try runningRecord()
        record.apply(event(.failed, version: 3, at: 800, EventData(error: StorageError(.unknown, "x"))))
        record.apply(event(.retried, version: 4, at: 900))
        #expect(record.state == .queued && record.attempts == 0 && record.error == nil)
        #expect(record.finishedAtMs == nil && record.runAfterMs == 900 && record.version == 4)
    }

    /// A retry re-opens a job; it does not move its schedule (it used to run the job at once).
    @Test("a job retried before its scheduled time keeps it; one retried after it runs at once")
    func retriedKeepsTheSchedule() throws {
        var spec = Self.spec
        spec.runAfterMs = 5_000
        let submitted = event(.submitted, version: 1, at: 100, EventData(spec: spec))
        var early = try #require(JobRecord.folding([submitted, event(.cancelled, version: 2, at: 200)]))
        var late = early
        early.apply(event(.retried, version: 3, at: 900))
        #expect(early.state == .queued && early.runAfterMs == 5_000)
        late.apply(event(.retried, version: 3, at: 6_000))
        #expect(late.state == .queued && late.runAfterMs == 6_000)
    }

    @Test("attempts count failures and crashes; a pause or a graceful release gives its charge back")
    func attemptsCountOnlyFailuresAndCrashes() throws {
        var record = try #require(JobRecord.folding([submitted]))
        var version = 1
        func step(_ type: EventType, _ data: EventData = EventData()) -> Int {
            version += 1
            record.apply(event(type, version: version, at: Int64(version * 100), token: 9, data))
            return record.attempts
        }
        #expect(step(.claimed) == 1)
        #expect(step(.pauseRequested) == 1)
        #expect(step(.paused) == 0)           // stopped on request
        #expect(step(.resumeRequested) == 0)
        #expect(step(.claimed) == 1)
        #expect(step(.released) == 0)         // graceful shutdown
        #expect(step(.claimed) == 1)
        #expect(step(.attemptFailed, EventData(error: StorageError(.unknown, "503", retryable: true))) == 1)
        #expect(step(.paused) == 1)           // paused while queued: no run to give back
        #expect(step(.resumeRequested) == 1)
        #expect(step(.claimed) == 2)
        #expect(step(.leaseExpired) == 2)     // a crash keeps its charge
        #expect(step(.claimed) == 3)
        #expect(step(.succeeded) == 3)
        #expect(record.state == .succeeded)
    }

    @Test("a final outcome clears requests that came too late", arguments: [EventType.succeeded, .failed])
    func finalOutcomeClearsRequests(type: EventType) throws {
        var record = try runningRecord()
        record.apply(event(.pauseRequested, version: 3, at: 300))
        record.apply(event(.cancelRequested, version: 4, at: 400))
        record.apply(event(type, version: 5, at: 500))
        #expect(record.state == (type == .succeeded ? .succeeded : .failed))
        #expect(!record.pauseRequested && !record.cancelRequested)
        #expect(JobLifecycle(record: record).decide(.settle, now: 600) == .success([]))
    }

    @Test func aSecondSubmittedIsIgnored() throws {
        var record = try runningRecord()
        let before = record
        record.apply(event(.submitted, version: 3, at: 999, EventData(spec: uploadSpec())))
        #expect(record == before)
    }
}

/// The append path writes only `JobRecord.changingColumns`; these prove no event can change the others.
@Suite("The columns an append writes", .onTestThreads)
struct ChangingColumnsTests {
    @Test("changing and fixed columns together are every column, once")
    func partition() {
        let changing = Set(JobRecord.changingColumns)
        #expect(changing.count == JobRecord.changingColumns.count)
        #expect(changing.isSubset(of: Set(JobRecord.columns)))
        #expect(!changing.contains("id") && !changing.contains("spec"))
    }

    @Test("no event changes a column the append UPDATE leaves out", arguments: EventType.allCases)
    func fixedColumnsStay(_ type: EventType) throws {
        let spec = JobSpec(kind: .uploadData, destination: "gs://b/o", data: Data("x".utf8), key: "k", priority: 3,
                           maxAttempts: 5, queue: "q")
        let submitted = try JobEvent(seq: 7, jobID: "JOB", version: 1, type: .submitted, atMs: 100, actor: "a",
                                 data: EventData(spec: spec))
        let before = try #require(JobRecord(submitted: submitted))
        // A payload with every field set, including a different spec, so any field an event copies shows up.
        let other = JobSpec(kind: .downloadFile, source: "gs://c/p", destination: "/tmp/p", key: "other",
                            priority: 9, maxAttempts: 1, queue: "elsewhere")
        let data = EventData(spec: other, leaseOwner: "w", leaseExpiresAtMs: 999, attempt: 2, bytesDone: 5, bytesTotal: 10,
                             resumePoint: .download(bytesWritten: 5, generation: "g", etag: nil, tempPath: nil),
                             error: StorageError(.unknown, "boom"), retryAtMs: 500,
                             result: JobResult(size: 10), reason: "why",
                             archive: ArchiveRecord(file: "f", sha256: "s", beforeMs: 1, jobs: 1, events: 1, blobs: 0,
                                                    blobsRemoved: 0, firstSeq: 1, lastSeq: 1))
        var after = before
        after.apply(try JobEvent(seq: 8, jobID: "JOB", version: 2, type: type, atMs: 300, actor: "b", leaseToken: 4, data: data))
        let (old, new) = (try before.rowValues(), try after.rowValues())
        for (index, column) in JobRecord.columns.enumerated() where !JobRecord.changingColumns.contains(column) {
            #expect(old[index] == new[index], "\(type.rawValue) changed \(column)")
        }
        // The UPDATE sets exactly the changed columns, each to its rowValues() value, the id last.
        let update = try after.update(from: before)
        let set = update.sql.dropFirst("UPDATE jobs SET ".count).prefix { $0 != "W" }
            .split(separator: ",").map { $0.split(separator: "=")[0].trimmingCharacters(in: .whitespaces) }
        // The version is always set: every appended event bumps it (a second `submitted` is never appended).
        let differing = Set(JobRecord.columns.indices.filter { old[$0] != new[$0] }.map { JobRecord.columns[$0] })
            .union(["version"])
        #expect(Set(set) == differing && set.count == differing.count)
        #expect(update.sql.hasSuffix(" WHERE id = ?") && update.values.last == .text("JOB"))
        for (offset, column) in set.enumerated() {
            let index = try #require(JobRecord.columns.firstIndex(of: column))
            #expect(update.values[offset] == new[index], "the UPDATE disagrees with rowValues() on \(column)")
        }
    }
}

@Suite("The decoded-spec cache", .onTestThreads)
struct DecodedSpecCacheTests {
    static func text(_ spec: JobSpec) throws -> String { try StoreJSON.encode(spec) }

    @Test("stays within its entries and bytes, and never keeps a spec larger than its limit")
    func bounded() throws {
        let cache = DecodedSpecCache(capacity: 4, byteBudget: 1_000, largestText: 400)
        for index in 0..<10 {
            let spec = JobSpec(kind: .uploadData, destination: "gs://b/o\(index)", data: Data("x".utf8))
            #expect(try cache.spec(try Self.text(spec), jobID: "J") == spec)
            #expect(cache.usage.count <= 4 && cache.usage.bytes <= 1_000)
        }
        let large = JobSpec(kind: .uploadData, destination: "gs://b/big", data: Data(repeating: 7, count: 1_000))
        let before = cache.usage
        #expect(try cache.spec(try Self.text(large), jobID: "J") == large)
        #expect(cache.usage == before)
        // Within the byte budget but not the entry count, and the other way round: both stay bounded.
        let medium = (0..<3).map { JobSpec(kind: .uploadData, destination: "gs://b/m\($0)", data: Data(repeating: 1, count: 200)) }
        for spec in medium {
            #expect(try cache.spec(try Self.text(spec), jobID: "J") == spec)
            #expect(cache.usage.count <= 4 && cache.usage.bytes <= 1_000)
        }
        // A hit returns the cached spec; the same text again adds nothing.
        let again = cache.usage
        #expect(try cache.spec(try Self.text(medium[2]), jobID: "J") == medium[2])
        #expect(cache.usage == again)
    }

    @Test("an uncached reader decodes every spec and keeps none")
    func uncached() throws {
        let cache = DecodedSpecCache.uncached()
        for index in 0..<3 {
            let spec = JobSpec(kind: .downloadMemory, source: "gs://b/o\(index)")
            #expect(try cache.spec(try Self.text(spec), jobID: "J") == spec)
            #expect(cache.usage == (0, 0))
        }
        #expect(throws: StoreError.self) { try cache.spec("{", jobID: "J") }
    }
}
