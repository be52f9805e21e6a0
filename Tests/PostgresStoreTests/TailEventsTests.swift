import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

/// Following the log by seq on PostgreSQL (`watch --all`): seqs are taken in one order and committed in
/// another, and a rolled-back append leaves a gap for good.
@Suite("PostgreSQL log tail", .onTestThreads)
struct TailEventsTests {
    private static let spec = JobSpec(kind: .uploadData, destination: "file://tail/a.txt", data: Data("tail".utf8))

    /// Takes the next seq in a transaction left open on its own connection: an append that commits later.
    private static func openAppend(_ fixture: PostgresFixture, data: String,
                                   jobID: String = "01HELDBACK0000000000000000") throws -> PostgresConnection {
        let connection = try fixture.connect()
        try connection.execute("BEGIN")
        // As every jobctl writer does: a transaction id before the first seq.
        try connection.execute("SELECT pg_current_xact_id()")
        try connection.execute("""
            INSERT INTO events (job_id, version, type, at_ms, actor, lease, data)
            VALUES ($1, 1, 'submitted', 1000, 'test', NULL, $2)
            """, [.text(jobID), .text(data)])
        return connection
    }

    /// The stored JSON of the first event (a `submitted` event's data, to copy into the held-back append).
    private static func firstEventData(_ fixture: PostgresFixture) throws -> String {
        let connection = try fixture.connect()
        return try #require(try connection.execute("SELECT data FROM events WHERE seq = 1").rows.first?.text(0))
    }

    @Test("an event below a seq already read is delivered once it commits; a rolled-back seq is skipped")
    func outOfOrderCommitsAreNotSkipped() throws {
        let fixture = try PostgresFixture("tail", privateServer: true)
        defer { fixture.server.shutDown() }
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let first = try #require(try store.submit([Self.spec], actor: "test", now: 1_000).first?.id)
        _ = first
        let data = try Self.firstEventData(fixture)

        // seq 2 is taken by a transaction that is still open; seq 3 commits before it.
        let slow = try Self.openAppend(fixture, data: data)
        let third = try #require(try store.submit([Self.spec], actor: "test", now: 2_000).first?.id)
        // A plain read by seq sees 3 without 2: a reader continuing after 3 would never see 2.
        #expect(try store.events(afterSeq: 1, limit: 100).map(\.seq) == [3])
        // The tail holds 3 back while 2 may still commit.
        #expect(try store.tailEvents(afterSeq: 1, limit: 100).isEmpty)
        #expect(try store.tailEvents(afterSeq: 1, limit: 100).isEmpty)
        try slow.execute("COMMIT")
        let caughtUp = try store.tailEvents(afterSeq: 1, limit: 100)
        #expect(caughtUp.map(\.seq) == [2, 3])
        #expect(caughtUp.map(\.jobID) == ["01HELDBACK0000000000000000", third])

        // seq 4 is taken and rolled back; seq 5 commits. Once nothing that could hold 4 runs, 5 is delivered.
        let rolledBack = try Self.openAppend(fixture, data: data, jobID: "01R0LLEDBACK00000000000000")
        let fifth = try #require(try store.submit([Self.spec], actor: "test", now: 3_000).first?.id)
        #expect(try store.tailEvents(afterSeq: 3, limit: 100).isEmpty)
        try rolledBack.execute("ROLLBACK")
        // The server is this test's own: no other test's transaction holds the snapshot's xmin back.
        var delivered: [JobEvent] = []
        let deadline = Date().addingTimeInterval(30)
        while delivered.isEmpty && Date() < deadline {
            delivered = try store.tailEvents(afterSeq: 3, limit: 100)
            if delivered.isEmpty { usleep(10_000) }
        }
        #expect(delivered.map(\.jobID) == [fifth])
        // A gap with nothing running is skipped at once; the limit still applies.
        #expect(try store.tailEvents(afterSeq: 0, limit: 2).map(\.seq) == [1, 2])
        #expect(try store.tailEvents(afterSeq: 3, limit: 100).map(\.seq) == [5])
    }

    @Test("a watcher following every job sees every event, in the order its seqs allow")
    func watcherCursorMissesNothing() throws {
        let fixture = try PostgresFixture("tailcursor", privateServer: true)
        defer { fixture.server.shutDown() }
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit([Self.spec], actor: "test", now: 1_000)
        let data = try Self.firstEventData(fixture)
        var cursor: Int64 = 0
        var seen: [Int64] = []
        let follow = { () throws in
            for event in try store.tailEvents(afterSeq: cursor, limit: 500) {
                cursor = event.seq ?? cursor
                seen.append(cursor)
            }
        }
        try follow()
        let open = try Self.openAppend(fixture, data: data)
        for now in 2...4 { _ = try store.submit([Self.spec], actor: "test", now: Int64(now) * 1_000) }
        try follow()
        try open.execute("COMMIT")
        try follow()
        #expect(seen == [1, 2, 3, 4, 5])
    }
}
