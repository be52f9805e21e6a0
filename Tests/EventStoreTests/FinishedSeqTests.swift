import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

/// `jobs.finished_seq` (schema 14): the seq of a final job's event at its version, which the leftover
/// sweep reads instead of the events after its position.
@Suite("The seq of a final job's last event in its row", .onTestThreads)
struct FinishedSeqTests {
    /// Each row's `finished_seq` (nil: NULL), by job id.
    static func finishedSeqs(_ store: EventStore) throws -> [String: Int64?] {
        let rows = try store.withConnection { (connection) throws(StoreError) in
            try connection.query("SELECT id, finished_seq FROM jobs") { row in (row.text(0), row.optionalInt64(1)) }
        }
        return Dictionary(uniqueKeysWithValues: rows)
    }

    /// The seq of the job's newest event.
    static func lastSeq(_ store: EventStore, _ jobID: String) throws -> Int64 {
        try #require(try store.events(jobID: jobID).last?.seq)
    }

    @Test("a final job's row holds its final event's seq; a retry clears it and the next final event sets it again")
    func setByTheFinalEventClearedByRetry() throws {
        let fixture = try StoreFixture("finished-seq-writes")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        // `started` and `succeeded` in one commit: the row's write is held back to the last of them.
        let job = try fixture.running()
        _ = try store.append([reportedStarted(job, at: 1_500), reportedSucceeded(job)], now: 2_000)
        let cancelled = try fixture.submit()
        let queued = try fixture.submit()
        #expect(try Self.finishedSeqs(store)[job.record.id] == .some(try Self.lastSeq(store, job.record.id)))
        #expect(try Self.finishedSeqs(store)[cancelled] == .some(nil))

        _ = try store.requestCancel(id: cancelled, actor: "cli:test", now: 3_000)
        let first = try Self.lastSeq(store, cancelled)
        #expect(try Self.finishedSeqs(store)[cancelled] == .some(first))
        _ = try store.retry(id: cancelled, actor: "cli:test", now: 3_100)
        #expect(try Self.finishedSeqs(store)[cancelled] == .some(nil))
        // Cancelled again with the first cancel's time: the seq, not the time, tells the two apart.
        _ = try store.requestCancel(id: cancelled, actor: "cli:test", now: 3_000)
        let second = try Self.lastSeq(store, cancelled)
        #expect(second > first)
        #expect(try Self.finishedSeqs(store)[cancelled] == .some(second))
        #expect(try Self.finishedSeqs(store)[queued] == .some(nil))
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("replay --verify reports a finished_seq the log does not give, and replay rewrites it")
    func verifiedAndRebuiltByReplay() throws {
        let fixture = try StoreFixture("finished-seq-replay")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let done = try fixture.submit()
        _ = try store.requestCancel(id: done, actor: "cli:test", now: 2_000)
        let open = try fixture.submit()
        let expected = try Self.lastSeq(store, done)
        try fixture.sql("UPDATE jobs SET finished_seq = 1 WHERE id = ?", [.text(done)])
        try fixture.sql("UPDATE jobs SET finished_seq = 7 WHERE id = ?", [.text(open)])

        let report = try store.replay(verify: true)
        let differences = Set(report.differences.filter { $0.column == "finished_seq" }.map { "\($0.jobID) \($0.stored ?? "-") \($0.rebuilt ?? "-")" })
        #expect(differences == ["\(done) 1 \(expected)", "\(open) 7 NULL"], "\(report.differences)")
        #expect(!report.isConsistent)

        let rewritten = try store.replay(verify: false)
        #expect(rewritten.differences.filter { $0.column == "finished_seq" }.count == 2, "\(rewritten.differences)")
        #expect(rewritten.differences == report.differences, "the whole-log fold reports what verify reports, in the same order")
        #expect(try Self.finishedSeqs(store) == [done: expected, open: nil])
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("migration 014 gives every final job of an older log its last event's seq, and only them")
    func migrationFillsItFromTheLog() throws {
        let (directory, path) = try ReleaseFixtureTests.copy("finished-seq-migration", migrated: true)
        defer { directory.remove() }
        let store = try EventStore(path: path, mode: .readOnly)
        let seqs = try Self.finishedSeqs(store)
        let jobs = try store.jobs()
        #expect(seqs.count == 16 && jobs.count == 16)
        for job in jobs {
            let found = try #require(seqs[job.id])
            if job.state.isFinal {
                #expect(found == (try Self.lastSeq(store, job.id)), "\(job.id) \(job.state)")
            } else {
                #expect(found == nil, "\(job.id) \(job.state)")
            }
        }
        #expect(seqs.values.compactMap { $0 }.count == 16, "the release's jobs all finished")
        #expect(try store.replay(verify: true).isConsistent)
    }
}
