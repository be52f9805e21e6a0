import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// Schema 8: a job's spec and result are stored once, in its `submitted` and `succeeded` events, and
/// every read of a job takes them from there.
@Suite("The spec and the result stored once", .onTestThreads)
struct SpecResultOnceTests {
    /// The `jobs` table's columns, comma-separated in table order.
    private static func columns(_ fixture: StoreFixture) throws -> [String] {
        let list = switch fixture.engine {
        case .sqlite: try fixture.scalar("SELECT group_concat(name, ',') FROM pragma_table_info('jobs')")
        case .postgres: try fixture.scalar("""
            SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name = 'jobs'
            """)
        }
        return (list ?? "").split(separator: ",").map(String.init)
    }

    @Test("the projection has no spec or result column; reads take both from the log", arguments: Engine.allCases)
    func readFromTheLog(engine: Engine) throws {
        let fixture = try StoreFixture("store-spec-once", engine: engine)
        defer { fixture.remove() }
        let columns = try Self.columns(fixture)
        #expect(columns.contains("idempotency_key") && columns.contains("resume_point"))
        #expect(!columns.contains("spec") && !columns.contains("result"), "\(columns)")

        let spec = memorySpec(key: "nightly")
        let claim = try fixture.running(spec)
        let id = claim.record.id
        #expect(claim.record.spec == spec && claim.record.result == nil)
        let result = JobResult(size: 3, md5: "rL0Y20zC+Fzt72VPzMSk2A==", blob: String(repeating: "ab", count: 32))
        try fixture.append(PendingEvent(jobID: id, actor: workerName, leaseToken: claim.token,
                                        payload: .succeeded(.none, result: result)))
        // Each read path: one job, the list, the walk over all jobs.
        let job = try #require(try fixture.store.job(id))
        #expect(job.state == .succeeded && job.spec == spec && job.result == result)
        #expect(try fixture.store.jobs().map(\.result) == [result])
        var walked: [JobRecord] = []
        try fixture.store.forEachJob(filter: JobFilter(), passes: 1) { _, record in walked.append(record) }
        #expect(walked.map(\.spec) == [spec] && walked.map(\.result) == [result])
        // The idempotency key finds the spec in the submitted event: the same spec maps to the job,
        // another one with the key is refused.
        #expect(try fixture.store.submit([spec], actor: "cli:test", now: 3_000).map(\.id) == [id])
        var other = spec
        other.source = "gs://bucket/other.txt"
        #expect(throws: StoreError.self) { try fixture.store.submit([other], actor: "cli:test", now: 3_000) }
        let report = try fixture.store.replay(verify: true)
        #expect(report.isConsistent, "\(report.differences) \(report.problems)")
    }

    @Test("a job that did not succeed reads no result, whatever its last event holds", arguments: Engine.allCases)
    func noResultUnlessSucceeded(engine: Engine) throws {
        let fixture = try StoreFixture("store-result-once", engine: engine)
        defer { fixture.remove() }
        let claim = try fixture.running(memorySpec())
        try fixture.append(PendingEvent(jobID: claim.record.id, actor: workerName, leaseToken: claim.token,
                                        payload: .failed(.none, error: StorageError(.unauthorized, "denied"), reason: nil)))
        let job = try #require(try fixture.store.job(claim.record.id))
        #expect(job.state == .failed && job.result == nil && job.spec == memorySpec())
    }
}
