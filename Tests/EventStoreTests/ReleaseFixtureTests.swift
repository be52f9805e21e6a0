import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

/// A database written by the release before the typed payloads (schema 2), committed as
/// `Fixtures/release-1.db`: all five job kinds and all fifteen event types — pauses of queued and
/// running jobs, resumes, cancels of queued and running jobs, retries, retryable and final failures, a
/// graceful release, a crash rescued after its lease expired, and a download-to-memory blob.
/// `Fixtures/README.md` says how it was made.
@Suite("A database written by the previous release", .onTestThreads)
struct ReleaseFixtureTests {
    /// A private copy of the fixture (opening it read-write would change the committed file); with
    /// `migrated`, brought to the current schema as `jobctl migrate` would (schema 3 adds `jobs.batch`,
    /// NULL for every job of that release; schema 4 the archive tables).
    static func copy(_ label: String, migrated: Bool = false) throws -> (TemporaryDirectory, String) {
        let directory = try TemporaryDirectory(label)
        let path = directory.file("release-1.db")
        try FileManager.default.copyItem(atPath: "\(PackagePaths.root)/Tests/EventStoreTests/Fixtures/release-1.db",
                                         toPath: path)
        if migrated { _ = try EventStore(path: path, mode: .readWrite) }
        return (directory, path)
    }

    @Test("opens read-only, and replay --verify finds the projection equal to the fold of the log")
    func replaysAndVerifies() throws {
        let (directory, path) = try Self.copy("release-fixture-verify", migrated: true)
        defer { directory.remove() }
        let store = try EventStore(path: path, mode: .readOnly)
        let report = try store.replay(verify: true)
        #expect(report.isConsistent, "\(report.differences) \(report.problems)")
        #expect(report.eventsRead == 111 && report.jobsRebuilt == 16)
        // The release holds every transfer kind; the object operations came after it.
        #expect(Set(try store.jobs().map(\.kind)) == Set(JobKind.allCases.filter { !$0.isObjectOperation }))
        #expect(try store.counts() == [.succeeded: 11, .failed: 3, .cancelled: 2])
        // Every event decodes into its typed payload (a missing field would have thrown above).
        let events = try store.events(afterSeq: 0, limit: 1_000)
        #expect(Set(events.map(\.type)) == Set(EventType.allCases).subtracting([.archived]), "every type of a job; `archived` came later")
        // The download-to-memory result is in the blobs table.
        let memory = try #require(try store.jobs().first { $0.kind == .downloadMemory && $0.state == .succeeded })
        let hash = try #require(memory.result?.blob)
        #expect(try store.blob(sha256: hash)?.count == 71)
    }

    @Test("every stored payload re-encodes through the typed enum to the very same bytes")
    func payloadsReencodeByteForByte() throws {
        let (directory, path) = try Self.copy("release-fixture-bytes", migrated: true)
        defer { directory.remove() }
        let store = try EventStore(path: path, mode: .readOnly)
        let rows = try store.withConnection { (connection) throws(StoreError) in
            try connection.query("SELECT seq, type, data FROM events ORDER BY seq") { row in
                (row.int64(0), row.text(1), row.text(2))
            }
        }
        #expect(rows.count == 111)
        for (seq, type, stored) in rows {
            let eventType = try #require(EventType(rawValue: type))
            let wire = try StoreJSON.decode(EventData.self, stored, what: "event \(seq)")
            let payload = try EventPayload(type: eventType, wire: wire)
            let again = try StoreJSON.encode(payload.wire)
            #expect(again.utf8.elementsEqual(stored.utf8), "event \(seq) (\(type)): stored \(stored), re-encoded \(again)")
        }
    }

    @Test("schema 8 drops the projection's spec and result; every job reads the very ones the release stored")
    func specAndResultReadFromTheLog() throws {
        let (directory, path) = try Self.copy("release-fixture-once")
        defer { directory.remove() }
        // What the release stored in its projection, read before the migration drops it.
        let before = try SQLiteConnection(path: path, readOnly: true, create: false)
        let stored = try before.query("SELECT id, spec, result FROM jobs ORDER BY id") { row in
            (row.text(0), row.text(1), row.optionalText(2))
        }
        #expect(stored.count == 16 && stored.contains { $0.2 != nil })
        let store = try EventStore(path: path, mode: .readWrite)
        let columns = try store.withConnection { (connection) throws(StoreError) in
            try connection.query("SELECT name FROM pragma_table_info('jobs')") { row in row.text(0) }
        }
        #expect(!columns.contains("spec") && !columns.contains("result") && columns.contains("idempotency_key"))
        let jobs = try store.jobs().sorted { $0.id < $1.id }
        #expect(jobs.map(\.id) == stored.map(\.0))
        for (job, (id, spec, result)) in zip(jobs, stored) {
            #expect(job.spec == (try StoreJSON.decode(JobSpec.self, spec, what: id)), "job \(id)")
            #expect(job.result == (try StoreJSON.decodeOptional(JobResult.self, result, what: id)), "job \(id)")
        }
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("opens read-write: only the batch column to add, a rebuild changes nothing, and new work appends and verifies")
    func takesNewWork() throws {
        let (directory, path) = try Self.copy("release-fixture-write")
        defer { directory.remove() }
        let store = try EventStore(path: path, mode: .readWrite)
        // The release was at schema 2; later migrations apply now.
        #expect(store.appliedMigrations == Migrator.all.map(\.version).filter { $0 > 2 })
        #expect(try store.jobs(filter: JobFilter(batch: JobID.generate())).isEmpty)
        let rebuilt = try store.replay(verify: false)
        #expect(rebuilt.isConsistent, "\(rebuilt.differences)")
        // Re-open a failed job of the old release and run it to success under the new code.
        let failed = try #require(try store.jobs(filter: JobFilter(states: [.failed])).first)
        _ = try store.retry(id: failed.id, actor: "cli:test", now: Clock.nowMs())
        let claim = try #require(try store.claim(owner: workerName, queues: [failed.queue], limit: 1, leaseMs: 10_000,
                                                 now: Clock.nowMs()).first)
        #expect(claim.record.id == failed.id && claim.record.attempts == 1)
        try store.append(PendingEvent(jobID: failed.id, actor: workerName, leaseToken: claim.token,
                                      payload: .succeeded(.none, result: JobResult(size: 0))), now: Clock.nowMs())
        let report = try store.replay(verify: true)
        #expect(report.isConsistent, "\(report.differences) \(report.problems)")
        #expect(report.eventsRead == 114)
    }
}
