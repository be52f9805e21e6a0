import Foundation
import Testing
import TestSupport
@testable import PostgresStore

@Suite("The PostgreSQL schema's guarantees", .onTestThreads)
struct PostgresSchemaTests {
    @Test("events refuse UPDATE, DELETE and TRUNCATE, and stay as appended",
          arguments: [
              "UPDATE events SET data = '{\"x\":1}' WHERE job_id = 'job-1'",
              "UPDATE events SET version = version",
              "DELETE FROM events WHERE job_id = 'job-1'",
              "DELETE FROM events",
              "TRUNCATE events",
          ])
    func eventsAreAppendOnly(sql: String) throws {
        let fixture = try PostgresFixture("appendonly")
        let connection = try fixture.migrated()
        try connection.insertEvent(jobID: "job-1", version: 1, data: "{\"a\":1}")
        try connection.insertEvent(jobID: "job-1", version: 2, type: "claimed")

        let error = try #require(postgresError { try connection.run(sql) })
        #expect(error.sqlstate == "23001")
        #expect(error.description.contains("events are append-only"))
        let rows = try connection.query("SELECT seq, job_id, version, type, data FROM events ORDER BY seq") {
            (row) throws(PostgresError) in "\(try row.int64(0)) \(try row.text(1)) \(try row.int(2)) \(try row.text(3)) \(try row.text(4))"
        }
        #expect(rows == ["1 job-1 1 submitted {\"a\":1}", "2 job-1 2 claimed {}"])
    }

    @Test("events refuse a second event with the same job version, and versions below 1")
    func eventVersions() throws {
        let fixture = try PostgresFixture("versions")
        let connection = try fixture.migrated()
        try connection.insertEvent(jobID: "job-1", version: 1)
        #expect(postgresError { try connection.insertEvent(jobID: "job-1", version: 1) }?.sqlstate == "23505")
        #expect(postgresError { try connection.insertEvent(jobID: "job-2", version: 0) }?.sqlstate == "23514")
        // seq is the database's: an appender cannot choose it.
        #expect(postgresError {
            try connection.run("INSERT INTO events (seq, job_id, version, type, at_ms, actor, data) VALUES (100, 'j', 1, 't', 0, 'a', '{}')")
        }?.sqlstate == "428C9")
    }

    @Test("event data is kept byte for byte (text, not jsonb)")
    func eventDataExact() throws {
        let fixture = try PostgresFixture("eventdata")
        let connection = try fixture.migrated()
        let json = #"{"z":1,  "a":"ü\u0000 \ud83d\ude80","a":2}"#
        try connection.insertEvent(jobID: "job-1", version: 1, data: json)
        #expect(try connection.first("SELECT data FROM events") { (row) throws(PostgresError) in try row.text(0) } == json)
    }

    @Test("blobs are bytea, keep every byte, refuse UPDATE and a wrong size")
    func blobs() throws {
        let fixture = try PostgresFixture("blobs")
        let connection = try fixture.migrated()
        let bytes = Data([0, 1, 0, 0xFF]) + patternData(3 << 20) + Data([0])
        try connection.run("INSERT INTO blobs (sha256, size, data) VALUES ($1, $2, $3)",
                           [.text("abc"), .int(bytes.count), .bytea(bytes)])
        #expect(try connection.first("SELECT data FROM blobs WHERE sha256 = $1", [.text("abc")]) {
            (row) throws(PostgresError) in try row.bytea(0)
        } == bytes)
        let update = postgresError { try connection.run("UPDATE blobs SET data = $1", [.bytea(Data([1]))]) }
        #expect(update?.sqlstate == "23001")
        #expect(update?.description.contains("blobs are immutable") == true)
        let wrongSize = postgresError {
            try connection.run("INSERT INTO blobs (sha256, size, data) VALUES ('def', 5, $1)", [.bytea(Data([1, 2]))])
        }
        #expect(wrongSize?.sqlstate == "23514")
    }

    @Test("fencing tokens only grow: across connections, past rollbacks, and never wrap around")
    func tokensOnlyGrow() throws {
        let fixture = try PostgresFixture("tokens")
        let first = try fixture.migrated()
        let second = try fixture.connect()
        func next(_ connection: PostgresConnection) throws -> Int64 {
            try #require(try connection.first("SELECT nextval('lease_tokens')") { (row) throws(PostgresError) in try row.int64(0) })
        }
        var tokens: [Int64] = []
        for round in 0..<10 {
            tokens.append(try next(round.isMultiple(of: 2) ? first : second))
        }
        // A token taken in a transaction that rolls back is never handed out again.
        let error = postgresError {
            try first.transaction { () throws(PostgresError) in
                tokens.append(try first.first("SELECT nextval('lease_tokens')") { (row) throws(PostgresError) in try row.int64(0) } ?? 0)
                throw PostgresError.conversion("roll back")
            }
        }
        #expect(error != nil)
        tokens.append(try next(second))
        #expect(tokens == Array(1...12))

        // At the end of the range the sequence fails instead of starting again at 1.
        try first.execute("SELECT setval('lease_tokens', $1)", [.integer(Int64.max)])
        let exhausted = postgresError { _ = try next(second) }
        #expect(exhausted?.sqlstate == "2200H")
    }

    @Test("two connections claiming with FOR UPDATE SKIP LOCKED take disjoint jobs, best first")
    func skipLockedInterleaved() throws {
        let fixture = try PostgresFixture("skiplocked")
        let first = try fixture.migrated()
        let second = try fixture.connect()
        // Priorities 0…9; within a priority, earlier run_after first, then earlier seq.
        for seq in 1...20 {
            try first.insertQueuedJob(id: String(format: "job-%02d", seq), priority: Int64(seq % 10),
                                      runAfterMs: Int64(seq % 3), seq: Int64(seq))
        }
        let expectedOrder = try first.query("""
            SELECT id FROM jobs WHERE state = 'queued' ORDER BY priority DESC, run_after_ms, seq
            """) { (row) throws(PostgresError) in try row.text(0) }

        // Both transactions are open at once: the second skips the rows the first has locked.
        try first.execute("BEGIN")
        try second.execute("BEGIN")
        let firstClaim = try claim(first, limit: 4)
        let secondClaim = try claim(second, limit: 4)
        try first.execute("COMMIT")
        try second.execute("COMMIT")

        #expect(firstClaim.map(\.id) == Array(expectedOrder[0..<4]))
        #expect(secondClaim.map(\.id) == Array(expectedOrder[4..<8]))
        let tokens = (firstClaim + secondClaim).map(\.token)
        #expect(Set(tokens).count == 8)
        #expect(try first.first("SELECT count(*) FROM jobs WHERE state = 'running'") { (row) throws(PostgresError) in try row.int(0) } == 8)
    }

    @Test("claimers on several threads never claim the same job twice")
    func skipLockedConcurrent() throws {
        let fixture = try PostgresFixture("claimers")
        let setup = try fixture.migrated()
        let jobCount = 300
        try setup.transaction { () throws(PostgresError) in
            for seq in 1...jobCount {
                try setup.insertQueuedJob(id: "job-\(seq)", priority: Int64(seq % 5), seq: Int64(seq))
            }
        }
        let url = fixture.url
        let claims = ClaimsBox()
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            do {
                let connection = try PostgresConnection(url)
                while true {
                    let batch = try connection.transaction { () throws(PostgresError) in try claim(connection, limit: 7) }
                    if batch.isEmpty { break }
                    claims.append(batch.map { ClaimsBox.Claim(worker: worker, id: $0.id, token: $0.token) })
                }
            } catch {
                claims.fail("\(error)")
            }
        }
        #expect(claims.failures.isEmpty)
        let all = claims.all
        #expect(all.count == jobCount)
        #expect(Set(all.map(\.id)).count == jobCount)
        #expect(Set(all.map(\.token)).count == jobCount)
        #expect(try setup.first("SELECT count(*) FROM jobs WHERE state = 'queued'") { (row) throws(PostgresError) in try row.int(0) } == 0)
    }

    /// Claims up to `limit` queued jobs in claim order, giving each a fresh fencing token; the caller
    /// holds the transaction.
    private func claim(_ connection: PostgresConnection, limit: Int) throws(PostgresError) -> [(id: String, token: Int64)] {
        try connection.query("""
            WITH picked AS MATERIALIZED (
                SELECT id FROM jobs WHERE state = 'queued'
                ORDER BY priority DESC, run_after_ms, seq LIMIT $1 FOR UPDATE SKIP LOCKED)
            UPDATE jobs SET state = 'running', lease_token = nextval('lease_tokens')
            FROM picked WHERE jobs.id = picked.id
            RETURNING jobs.id, jobs.lease_token, jobs.priority, jobs.run_after_ms, jobs.seq
            """, [.int(limit)]) { (row) throws(PostgresError) in
            (id: try row.text(0), token: try row.int64(1), order: [try row.int64(2), try row.int64(3), try row.int64(4)])
        }
        // RETURNING comes in no particular order: put the batch back in claim order.
        .sorted { a, b in
            (-a.order[0], a.order[1], a.order[2]) < (-b.order[0], b.order[1], b.order[2])
        }
        .map { (id: $0.id, token: $0.token) }
    }
}

/// Claims gathered from several threads.
private final class ClaimsBox: @unchecked Sendable {
    struct Claim { let worker: Int; let id: String; let token: Int64 }
    // @unchecked: everything is only touched under `lock`.
    private let lock = NSLock()
    private var claims: [Claim] = []
    private var errors: [String] = []
    func append(_ batch: [Claim]) { lock.withLock { claims += batch } }
    func fail(_ error: String) { lock.withLock { errors.append(error) } }
    var all: [Claim] { lock.withLock { claims } }
    var failures: [String] { lock.withLock { errors } }
}
