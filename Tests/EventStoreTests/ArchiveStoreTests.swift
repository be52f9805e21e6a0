import Foundation
import JobLifecycle
import JobModel
import StorePort
import TestSupport
@testable import EventStore
@testable import PostgresStore
import Testing

/// The store side of `jobctl archive`: the one path that may delete from `events`.
@Suite("archive removal", .onTestThreads)
struct ArchiveStoreTests {
    static func record(_ selection: ArchiveSelection) -> ArchiveRecord {
        ArchiveRecord(file: "test.ndjson.gz", sha256: String(repeating: "a", count: 64), beforeMs: selection.beforeMs,
                      jobs: selection.jobs.count, events: selection.rows.count, blobs: selection.blobs.count, blobsRemoved: 0,
                      firstSeq: selection.rows.first?.seq ?? 0, lastSeq: selection.rows.last?.seq ?? 0)
    }

    /// Runs `sql` on the fixture's own connection and returns the error it raised, if any.
    static func refusal(_ sql: String, in fixture: StoreFixture) -> String? {
        do {
            switch fixture.engine {
            case .sqlite:
                try fixture.sqlite?.withConnection { (connection) throws(StoreError) in try connection.run(sql) }
            case .postgres:
                guard let store = fixture.store as? PostgresStore else { return "not a PostgreSQL store" }
                try store.withConnection { (connection) throws(StoreError) in _ = try connection.store(sql) }
            }
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test("a plain DELETE on events is still refused, before and after an archive", arguments: Engine.allCases)
    func plainDeleteRefused(engine: Engine) throws {
        let fixture = try StoreFixture("archivedelete", engine: engine)
        defer { fixture.remove() }
        let finished = try fixture.submit(now: 1_000)
        _ = try fixture.store.requestCancel(id: finished, actor: "cli:test", now: 2_000)
        let kept = try fixture.submit(now: 3_000)
        for sql in ["DELETE FROM events", "DELETE FROM events WHERE job_id = '\(finished)'"] {
            let error = try #require(Self.refusal(sql, in: fixture), "\(sql) was allowed")
            #expect(error.contains("append-only: DELETE is refused"), "\(error)")
        }
        let selection = try fixture.store.archiveSelection(finishedBefore: 10_000)
        #expect(selection.jobs.map(\.id) == [finished] && selection.rows.count == 2)
        let event = try fixture.store.removeArchived(selection, record: Self.record(selection), actor: "cli:test", now: 20_000) {}
        #expect(event.jobID == ArchiveRecord.logJobID && event.version == 1 && event.type == .archived)
        #expect(try fixture.store.job(finished) == nil && fixture.store.events(jobID: finished).isEmpty)
        // The authorisation does not outlive the archive's transaction.
        let error = try #require(Self.refusal("DELETE FROM events WHERE job_id = '\(kept)'", in: fixture))
        #expect(error.contains("append-only: DELETE is refused"), "\(error)")
        #expect(Self.refusal("UPDATE events SET actor = 'x'", in: fixture)?.contains("append-only") == true)
        #expect(try fixture.store.events(jobID: kept).count == 1)
        let replay = try fixture.store.replay(verify: true)
        #expect(replay.isConsistent && replay.problems.isEmpty, "\(replay.problems)")
    }

    @Test("a job retried after it was selected is not removed, and nothing else is either", arguments: Engine.allCases)
    func changedJobRefused(engine: Engine) throws {
        let fixture = try StoreFixture("archivechanged", engine: engine)
        defer { fixture.remove() }
        let first = try fixture.submit(now: 1_000)
        let second = try fixture.submit(now: 1_000)
        _ = try fixture.store.requestCancel(id: first, actor: "cli:test", now: 2_000)
        _ = try fixture.store.requestCancel(id: second, actor: "cli:test", now: 2_000)
        let selection = try fixture.store.archiveSelection(finishedBefore: 10_000)
        #expect(Set(selection.jobs.map(\.id)) == [first, second])
        _ = try fixture.store.retry(id: second, actor: "cli:test", now: 3_000)
        #expect {
            try fixture.store.removeArchived(selection, record: Self.record(selection), actor: "cli:test", now: 4_000) {}
        } throws: { error in
            "\(error)".contains("job \(second) changed after the archive file was written")
        }
        #expect(try fixture.store.job(first)?.state == .cancelled)
        #expect(try fixture.store.events(jobID: first).count == 2)
        #expect(try fixture.store.events(jobID: ArchiveRecord.logJobID).isEmpty)
    }

    @Test("the archived event takes a seq above every event ever written, so seq never repeats", arguments: Engine.allCases)
    func seqNeverRepeats(engine: Engine) throws {
        let fixture = try StoreFixture("archiveseq", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit(now: 1_000)
        _ = try fixture.store.requestCancel(id: id, actor: "cli:test", now: 2_000)
        let highest = try fixture.store.lastSeq()
        let selection = try fixture.store.archiveSelection(finishedBefore: 10_000)
        let event = try fixture.store.removeArchived(selection, record: Self.record(selection), actor: "cli:test", now: 3_000) {}
        #expect(try #require(event.seq) > highest)
        let next = try fixture.submit(now: 4_000)
        let submitted = try #require(try fixture.store.events(jobID: next).first?.seq)
        #expect(submitted > (event.seq ?? .max))
        // A second archive is the log's version 2.
        _ = try fixture.store.requestCancel(id: next, actor: "cli:test", now: 5_000)
        let again = try fixture.store.archiveSelection(finishedBefore: 10_000)
        let second = try fixture.store.removeArchived(again, record: Self.record(again), actor: "cli:test", now: 6_000) {}
        #expect(second.version == 2)
        let replay = try fixture.store.replay(verify: true)
        #expect(replay.isConsistent && replay.problems.isEmpty && replay.eventsRead == 2)
    }

    @Test("a failed or cancelled job that a job staying in the log waits for (after:) is not archived", arguments: Engine.allCases)
    func awaitedDependencyStays(engine: Engine) throws {
        let fixture = try StoreFixture("archiveawaited", engine: engine)
        defer { fixture.remove() }
        var dependantSpec = uploadSpec(key: "b")
        dependantSpec.after = ["a"]
        let ids = try fixture.store.submit([uploadSpec(key: "a"), dependantSpec], actor: "cli:test", now: 1_000).map(\.id)
        let (a, b) = (ids[0], ids[1])
        // The dependency is cancelled (and its dependant with it); the dependant is retried: it waits for `a`
        // again. `retry` refuses that now (it could never run); a release before that wrote the `retried`.
        _ = try fixture.store.requestCancel(id: a, actor: "cli:test", now: 2_000)
        #expect(try fixture.store.job(b)?.state == .cancelled)
        #expect(throws: StoreError.self) { try fixture.store.retry(id: b, actor: "cli:test", now: 3_000) }
        _ = try fixture.perform(.report(.retried(reason: nil)), jobID: b, leaseToken: nil, now: 3_000)
        #expect(try fixture.store.job(b)?.state == .queued)
        let selection = try fixture.store.archiveSelection(finishedBefore: 10_000)
        #expect(selection.jobs.isEmpty && selection.rows.isEmpty, "\(selection.jobs.map(\.id))")
        #expect(selection.keptForDependants == 1)
        // Nothing released the dependant: it is not claimed, and a retry of `a` can still let it run.
        #expect(try fixture.store.claim(owner: "w", queues: nil, limit: 10, leaseMs: 30_000, now: 11_000).isEmpty)
        #expect(try fixture.store.job(a)?.state == .cancelled)
        #expect(try fixture.scalar("SELECT count(*) FROM job_dependencies WHERE job = ? AND depends_on = ?", [.text(b), .text(a)]) == "1")

        // A job that comes to wait for a selected one after the selection (submitted `after:` it) refuses the removal.
        _ = try fixture.store.requestCancel(id: b, actor: "cli:test", now: 12_000)
        let both = try fixture.store.archiveSelection(finishedBefore: 20_000)
        #expect(Set(both.jobs.map(\.id)) == [a, b])
        var lateSpec = uploadSpec(key: "c")
        lateSpec.after = ["a"]
        let c = try #require(try fixture.store.submit([lateSpec], actor: "cli:test", now: 13_000).first?.id)
        #expect {
            try fixture.store.removeArchived(both, record: Self.record(both), actor: "cli:test", now: 14_000) {}
        } throws: { error in
            "\(error)".contains("job \(a) is waited for by job \(c)")
        }
        #expect(try fixture.store.job(a) != nil && fixture.store.job(b) != nil)
        #expect(try fixture.store.events(jobID: ArchiveRecord.logJobID).isEmpty)
        let replay = try fixture.store.replay(verify: true)
        #expect(replay.isConsistent && replay.problems.isEmpty, "\(replay.problems)")
    }

    /// The submit's outcome, set on its thread before `done` is signalled and read after.
    private final class SubmitResult: @unchecked Sendable {
        var result: Result<[SubmitOutcome], StoreError>?
    }

    /// PostgreSQL runs a submit and an archive at once (SQLite has one writer). A submit naming a job
    /// (`after:`) that an archive is removing waits for the archive's commit and is then refused, as
    /// for any job that is not in the log; it never records a wait on a job no longer there.
    @Test("PostgreSQL: a submit after a job an archive is removing waits for it and is refused")
    func submitAfterAJobBeingArchived() throws {
        let url = try PostgresServer.shared().makeSchema("archiveafter")
        let archiver = try PostgresStore(url: url, mode: .create)
        let submitter = try PostgresStore(url: url, mode: .readWrite)
        let dependency = try archiver.submit([uploadSpec()], actor: "cli:test", now: 1_000)[0].id
        _ = try archiver.requestCancel(id: dependency, actor: "cli:test", now: 2_000)
        let selection = try archiver.archiveSelection(finishedBefore: 10_000)
        #expect(selection.jobs.map(\.id) == [dependency])
        var waiting = uploadSpec()
        waiting.after = [dependency]
        let spec = waiting
        let outcome = SubmitResult()
        let done = DispatchSemaphore(value: 0)
        var endedBeforeTheArchive = false
        _ = try archiver.removeArchived(selection, record: Self.record(selection), actor: "cli:test", now: 3_000) {
            // The archive holds its rows: the submit starts now, and gets 1.5 s to end on its own.
            startThread {
                outcome.result = Result { () throws(StoreError) in try submitter.submit([spec], actor: "cli:test", now: 3_500) }
                done.signal()
            }
            endedBeforeTheArchive = done.wait(timeout: .now() + 1.5) == .success
        }
        if !endedBeforeTheArchive { done.wait() }
        #expect(!endedBeforeTheArchive, "the submit did not wait for the archive holding the job it names")
        switch outcome.result {
        case .failure(.unknownDependency(let name))?:
            #expect(name == dependency)
        default:
            Issue.record("the submit was not refused: \(String(describing: outcome.result))")
        }
        let dangling = try archiver.withConnection { (connection) throws(StoreError) -> Int64 in
            try connection.row("""
                SELECT count(*) FROM job_dependencies d WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = d.depends_on)
                """, []) { (row) throws(StoreError) in try row.integer(0) } ?? -1
        }
        #expect(dangling == 0, "a job waits for a job the archive removed")
    }

    /// What one thread of `blobRemovedBesideAWorkerStoringItAgain` got, set before its semaphore is
    /// signalled and read after.
    private final class Outcome<T>: @unchecked Sendable {
        var result: Result<T, StoreError>?
    }

    /// PostgreSQL runs a worker's group commit beside an `archive` or an `archive --blobs-before`
    /// (SQLite has one writer). A worker storing a download-memory result with the same bytes as an
    /// old job's (the same SHA-256, so the same blob) while the old job's blob is being removed: the
    /// new job keeps its blob whichever of the two comes first. A third transaction's key-share lock
    /// of the blob's row holds the removal at its first statement that touches the row, which makes
    /// the order certain: the expiry's look for the blob (which begins before the worker's commit),
    /// the archive's delete of it (after it looked for the blob's users).
    @Test("a blob removed (archive, --blobs-before) while a worker stores the same bytes for a new job stays for it",
          arguments: ["archive", "expiry"])
    func blobRemovedBesideAWorkerStoringItAgain(removal: String) throws {
        let url = try PostgresServer.shared().makeSchema("blobrace\(removal)")
        let remover = try PostgresStore(url: url, mode: .create)
        let worker = try PostgresStore(url: url, mode: .readWrite)
        let holder = try PostgresStore(url: url, mode: .readWrite)
        let observer = try PostgresStore(url: url, mode: .readWrite)
        let bytes = AppendTests.blobBytes
        func succeed(_ store: PostgresStore, at now: Int64) throws -> (id: String, pending: PendingEvent) {
            let id = try store.submit([memorySpec()], actor: "cli:test", now: now)[0].id
            let claim = try #require(try store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
            #expect(claim.record.id == id)
            return (id, try PendingEvent(jobID: id, type: .succeeded, actor: workerName, leaseToken: claim.token,
                                     data: EventData(result: JobResult(size: Int64(bytes.count), data: bytes))))
        }
        // An old job's result, then a new job running that will end with the same bytes.
        let old = try succeed(remover, at: 1_000)
        let digest = try #require(try remover.append(old.pending, now: 2_000).data.result?.blob)
        let new = try succeed(worker, at: 3_000)
        let selection = try remover.archiveSelection(finishedBefore: 2_500)
        #expect(selection.jobs.map(\.id) == [old.id] && selection.blobs.map(\.sha256) == [digest])

        let (holding, release, released) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let held = Outcome<Void>()
        startThread {
            held.result = Result { () throws(StoreError) in
                try holder.writeTransaction { (connection) throws(StoreError) in
                    _ = try connection.store("SELECT 1 FROM blobs WHERE sha256 = $1 FOR KEY SHARE", [.text(digest)])
                    holding.signal()
                    release.wait()
                }
            }
            if case .failure? = held.result { holding.signal() }
            released.signal()
        }
        holding.wait()
        if case .failure(let error)? = held.result { throw error }
        let removerPID = try remover.withConnection { (connection) throws(StoreError) -> Int64 in
            try connection.row("SELECT pg_backend_pid()") { (row) throws(StoreError) in try row.integer(0) } ?? -1
        }
        let removed = Outcome<[String]>()
        let removalDone = DispatchSemaphore(value: 0)
        startThread {
            removed.result = Result { () throws(StoreError) -> [String] in
                if removal == "archive" {
                    _ = try remover.removeArchived(selection, record: Self.record(selection), actor: "cli:test", now: 4_000) {}
                    return [digest]
                }
                return try remover.expireBlobs(finishedBefore: 2_500, now: 4_000, dryRun: false).digests
            }
            removalDone.signal()
        }
        // The removal waits for the key-share lock.
        var waiting = false
        for _ in 0..<500 where !waiting {
            waiting = try observer.withConnection { (connection) throws(StoreError) -> Bool in
                try connection.row("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
                                   [.integer(removerPID)]) { (row) throws(StoreError) in try row.integer(0) == 1 } ?? false
            }
            if !waiting { Thread.sleep(forTimeInterval: 0.02) }
        }
        #expect(waiting, "the removal never waited for the lock of the blob's row")
        // The worker stores the same bytes as the new job's result, and gets 2 s to end on its own.
        let stored = Outcome<JobEvent>()
        let storeDone = DispatchSemaphore(value: 0)
        startThread {
            stored.result = Result { () throws(StoreError) -> JobEvent in try worker.append(new.pending, now: 5_000) }
            storeDone.signal()
        }
        let storedAtOnce = storeDone.wait(timeout: .now() + 2) == .success
        release.signal()
        released.wait()
        #expect(removalDone.wait(timeout: .now() + 30) == .success, "the removal did not end")
        #expect(storedAtOnce || storeDone.wait(timeout: .now() + 30) == .success, "the worker's append did not end")

        if case .failure(let error)? = removed.result { Issue.record("the removal failed: \(error)") }
        let event = try #require(try stored.result?.get())
        #expect(event.data.result?.blob == digest)
        #expect(try worker.job(new.id)?.state == .succeeded)
        #expect(try worker.blob(sha256: digest) == bytes, "the new job's result lost its bytes")
        if removal == "expiry" {
            #expect(try removed.result?.get() == [], "the expiry removed a blob a job finished after the cut-off uses")
        } else {
            #expect(try worker.job(old.id) == nil)
        }
    }
}
