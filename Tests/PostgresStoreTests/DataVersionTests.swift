import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

@Suite("PostgreSQL data version", .onTestThreads)
struct DataVersionTests {
    // MARK: - Snapshots, as values

    @Test("a snapshot's text form is parsed; anything else is not a snapshot")
    func parsing() {
        #expect(PostgresSnapshot("100:105:") == PostgresSnapshot(xmax: 105, inProgress: []))
        #expect(PostgresSnapshot("100:105:100,103") == PostgresSnapshot(xmax: 105, inProgress: [100, 103]))
        #expect(PostgresSnapshot("") == nil)
        #expect(PostgresSnapshot("100:105") == nil)
        #expect(PostgresSnapshot("a:105:") == nil)
        #expect(PostgresSnapshot("100:105:1,x") == nil)
    }

    /// (earlier, later, own transactions, whether another transaction ended in between)
    static let endings: [(String, String, Set<Int64>, Bool)] = [
        ("100:100:", "100:100:", [], false),           // nothing happened
        ("100:100:", "100:101:", [100], false),        // only our own transaction ended
        ("100:100:", "100:101:", [], true),            // another's ended
        ("100:100:", "100:103:", [100, 102], true),    // 101 is another's
        ("100:100:", "100:103:101", [100, 102], false), // 101 began and still runs: nothing of it to see yet
        ("100:102:101", "100:103:", [102], true),      // 101, running before, has ended
        ("100:102:101", "100:103:101", [102], false),  // 101 still runs
        ("100:102:101", "102:105:", [101, 102, 103, 104], false), // all ours
        ("100:200:", "100:150:", [], true),            // went backwards: another server
    ]

    @Test("another transaction ended between two snapshots exactly when one not in `own` did", arguments: endings)
    func othersEnded(earlier: String, later: String, own: Set<Int64>, expected: Bool) throws {
        let first = try #require(PostgresSnapshot(earlier))
        let second = try #require(PostgresSnapshot(later))
        #expect(second.othersEnded(since: first, own: own) == expected)
    }

    @Test("the number changes only when another transaction ended, and always for a snapshot that cannot be read")
    func numbers() {
        var seen = SnapshotsSeen()
        let first = seen.next(PostgresSnapshot("10:10:"), text: "10:10:", own: [])
        #expect(seen.next(PostgresSnapshot("10:11:"), text: "10:11:", own: [10]) == first)
        let second = seen.next(PostgresSnapshot("10:12:"), text: "10:12:", own: [])
        #expect(second != first)
        #expect(seen.next(nil, text: "garbage", own: []) != second)
    }

    // MARK: - Against a server

    /// The worker's own group commits must not make it re-read its running jobs; another process's
    /// submit or control request must. A server of the test's own: commits of other tests' schemas would
    /// change the number too (correctly: the number cannot tell databases apart).
    @Test("the store's own appends and claims leave its data version alone; another store's submit and control change it")
    func ownWritesAreNotChanges() throws {
        let fixture = try PostgresFixture("dataversion", privateServer: true)
        defer { fixture.server.shutDown() }
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let other = try PostgresStore(url: fixture.url, mode: .readWrite)
        let ids = try other.submit((0..<12).map { k in
            JobSpec(kind: .uploadData, destination: "file://dv/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000).map(\.id)

        var version = try store.dataVersion()
        var unchanged = 0
        for round in 0..<4 {
            let claimed = try store.claim(owner: "w", queues: nil, limit: 2, leaseMs: 60_000, now: 2_000 + Int64(round))
            try #require(claimed.count == 2)
            let appended = try store.append(try claimed.map { job in
                try PendingEvent(jobID: job.record.id, type: .started, actor: "w", leaseToken: job.token, data: EventData(attempt: 1))
            }, now: 2_100, thenClaim: ClaimRequest(owner: "w", queues: nil, limit: 1, leaseMs: 60_000, now: 2_100))
            #expect(appended.appended.allSatisfy { (try? $0.get()) != nil })
            let next = try store.dataVersion()
            if next == version { unchanged += 1 }
            version = next
        }
        // Every round, unless the server's autovacuum happened to commit in one of them.
        #expect(unchanged >= 3, "the store's own writes changed its data version in \(4 - unchanged) of 4 rounds")

        // Another store's writes: every one is seen.
        _ = try other.submit([JobSpec(kind: .uploadData, destination: "file://dv/new.txt", data: Data("y".utf8))],
                             actor: "cli:test", now: 3_000)
        let afterSubmit = try store.dataVersion()
        #expect(afterSubmit != version)
        let running = try #require(try store.jobs(filter: JobFilter(states: [.running])).first)
        _ = try other.requestPause(id: running.id, actor: "cli:test", now: 3_100)
        let afterPause = try store.dataVersion()
        #expect(afterPause != afterSubmit)
        _ = try other.requestCancel(id: ids[11], actor: "cli:test", now: 3_200)
        #expect(try store.dataVersion() != afterPause)
    }
}
