import Foundation
import JobModel
import Testing
import TestSupport
@testable import PostgresStore

/// The adapter's statement budget (each statement is a round trip to the server) and the prepared
/// statements that keep each one cheap: see BENCHMARKS.md, PostgreSQL.
@Suite("PostgreSQL round trips and prepared statements", .onTestThreads)
struct RoundTripTests {
    @Test("a statement with parameters is prepared once per session and per parameter types, and again after a reconnect")
    func preparedOncePerSession() throws {
        let fixture = try PostgresFixture("prepared")
        let connection = try fixture.connect()
        let admin = try fixture.connect()
        func serverPrepared(_ on: PostgresConnection) throws -> Int64 {
            // No parameters: this query itself is not prepared.
            try #require(try on.first("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'jobctl\\_%'") {
                (row) throws(PostgresError) in try row.int64(0)
            })
        }
        for k in Int64(0)..<3 {
            #expect(try connection.first("SELECT $1::bigint + 1", [.integer(k)]) { (row) throws(PostgresError) in try row.int64(0) } == k + 1)
        }
        #expect(connection.preparedStatementCount == 1)
        #expect(try serverPrepared(connection) == 1)
        // The same text with a NULL (a parameter of no stated type) is another prepared statement.
        #expect(try connection.first("SELECT $1::bigint + 1", [.null]) { (row) throws(PostgresError) in try row.optionalInt64(0) } == .some(nil))
        #expect(connection.preparedStatementCount == 2)
        #expect(try serverPrepared(connection) == 2)

        // The server ends the session: its prepared statements are gone, and so is the cache.
        #expect(try admin.first("SELECT pg_terminate_backend($1::int)", [.integer(Int64(connection.backendPID))]) {
            (row) throws(PostgresError) in try row.bool(0)
        } == true)
        #expect(postgresError { try connection.execute("SELECT $1::bigint + 1", [.integer(1)]) } != nil)
        try connection.reconnect()
        #expect(connection.preparedStatementCount == 0)
        #expect(try serverPrepared(connection) == 0)
        #expect(try connection.first("SELECT $1::bigint + 1", [.integer(41)]) { (row) throws(PostgresError) in try row.int64(0) } == 42)
        #expect(connection.preparedStatementCount == 1)
        #expect(try serverPrepared(connection) == 1)
    }

    @Test("the store goes on after the server ends its session: claims and appends prepare their statements again")
    func storeAfterTerminatedSession() throws {
        let fixture = try PostgresFixture("prepreconnect")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let admin = try fixture.connect()
        let ids = try store.submit((0..<4).map { k in uploadData(k) }, actor: "cli:test", now: 1_000).map(\.id)
        let first = try store.claim(owner: "w", queues: nil, limit: 2, leaseMs: 60_000, now: 2_000)
        #expect(first.count == 2)
        #expect(try store.withConnection { $0.preparedStatementCount } > 0)

        let pid = try store.withConnection { Int64($0.backendPID) }
        #expect(try admin.first("SELECT pg_terminate_backend($1::int)", [.integer(pid)]) { (row) throws(PostgresError) in try row.bool(0) } == true)

        let second = try store.claim(owner: "w", queues: nil, limit: 2, leaseMs: 60_000, now: 3_000)
        #expect(second.count == 2)
        #expect(try store.withConnection { Int64($0.backendPID) } != pid)
        let outcomes = try store.append(try (first + second).map { claimed in try started(claimed) }, now: 4_000)
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil }, "\(outcomes)")
        #expect(Set((first + second).map(\.record.id)) == Set(ids))
        #expect(try store.counts() == [.running: 4])
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("a group commit of N events sends 6 statements in 2 round trips whatever N; a claim of N jobs 5 in 2; both in one transaction 8 in 3")
    func statementBudget() throws {
        let fixture = try PostgresFixture("budget")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let count = 12
        _ = try store.submit((0..<(3 * count)).map { k in uploadData(k) }, actor: "cli:test", now: 1_000)
        func sent() throws -> Int { try store.withConnection { $0.statementsSent } }
        func trips() throws -> Int { try store.withConnection { $0.roundTrips } }
        // Once, so that every statement is prepared (a first use prepares it: one more round trip).
        let warm = try store.claim(owner: "w", queues: nil, limit: count, leaseMs: 60_000, now: 2_000)
        _ = try store.append(try warm.map { try started($0) }, now: 2_500)

        var before = try sent()
        var tripsBefore = try trips()
        let claimed = try store.claim(owner: "w", queues: nil, limit: count, leaseMs: 60_000, now: 3_000)
        #expect(claimed.count == count)
        // BEGIN, SET LOCAL, the claim (jobs, tokens and seqs) in one pipeline; one statement of all its
        // writes and COMMIT in another.
        let claimCost = try sent() - before
        #expect(claimCost == 5, "claim of \(count): \(claimCost) statements")
        #expect(try trips() - tripsBefore == 2, "claim of \(count)")

        // One stale event in the middle: it is refused, the others are appended.
        var events = try claimed.map { try started($0) }
        let stale = try PendingEvent(jobID: claimed[3].record.id, type: .progress, actor: "w", leaseToken: claimed[3].token,
                                     expectedVersion: 1, data: EventData(bytesDone: 1))
        events.insert(stale, at: 4)
        before = try sent()
        tripsBefore = try trips()
        let outcomes = try store.append(events, now: 4_000)
        let used = try sent() - before
        // BEGIN, SET LOCAL, lock the rows, read the leases and take the seqs in one pipeline; one
        // statement of all writes and COMMIT in another.
        #expect(used == 6, "append of \(events.count) events: \(used) statements")
        #expect(try trips() - tripsBefore == 2, "append of \(events.count) events")
        #expect(outcomes.count == events.count)
        #expect(throws: StoreError.versionConflict(expected: 1, actual: 3)) { try outcomes[4].get() }
        #expect(outcomes.enumerated().allSatisfy { index, outcome in index == 4 || (try? outcome.get()) != nil })
        let types = try store.events(jobID: claimed[3].record.id).map(\.type)
        #expect(types == [.submitted, .claimed, .started])

        // The worker's group commit: outcomes, then a claim of the next jobs, in one transaction.
        let outcomesThenClaim = try claimed.map { job in
            try PendingEvent(jobID: job.record.id, type: .succeeded, actor: "w", leaseToken: job.token,
                             data: EventData(result: JobResult(size: 1)))
        }
        before = try sent()
        tripsBefore = try trips()
        let both = try store.append(outcomesThenClaim, now: 5_000,
                                    thenClaim: ClaimRequest(owner: "w", queues: nil, limit: count, leaseMs: 60_000, now: 5_000))
        let bothCost = try sent() - before
        #expect(both.appended.allSatisfy { (try? $0.get()) != nil })
        #expect(try both.claimed.get().count == count)
        // BEGIN, SET LOCAL, lock, leases and seqs; the outcomes' writes and the claim; the claim's
        // writes and COMMIT: three pipelines.
        #expect(bothCost == 8, "\(count) outcomes and a claim: \(bothCost) statements")
        #expect(try trips() - tripsBefore == 3, "\(count) outcomes and a claim")
        #expect(try store.counts() == [.succeeded: count, .running: 2 * count])
        #expect(try store.replay(verify: true).isConsistent)

        // Every job's events have growing seqs in version order, the log holds every event the calls
        // returned, and no event was written twice.
        let returned = Set((outcomes + both.appended).compactMap { try? $0.get().seq })
        #expect(returned.count == 2 * count)
        let log = try store.events(afterSeq: 0, limit: 10_000)
        #expect(Set(log.compactMap(\.seq)).isSuperset(of: returned))
        #expect(Set(log.compactMap(\.seq)).count == log.count)
        for id in Set(log.map(\.jobID)) {
            let ofJob = log.filter { $0.jobID == id }
            #expect(ofJob.map(\.version) == Array(1...ofJob.count), "job \(id): \(ofJob.map(\.version))")
            #expect(ofJob.compactMap(\.seq) == ofJob.compactMap(\.seq).sorted(), "job \(id)")
        }
    }

    /// The writer takes seqs ahead; a seq taken before a job's row was locked may be smaller than one
    /// another transaction gave that job meanwhile, so such seqs must never be the job's.
    @Test("seqs reserved before a job's row is locked are not given to its events: every job's log stays in seq order")
    func reservedSeqsFollowLocks() throws {
        let fixture = try PostgresFixture("seqorder")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let other = try PostgresStore(url: fixture.url, mode: .readWrite)
        let ids = try store.submit([uploadData(0), uploadData(1)], actor: "cli:test", now: 1_000).map(\.id)
        let (cancelled, pausedSeq) = try store.writeTransaction { (connection) throws(StoreError) -> (JobEvent?, Int64) in
            let writer = PostgresBatchWriter(connection)
            let locked = try connection.lockJob(ids[0])
            writer.knowLeases(locked.map { [$0] } ?? [])
            try writer.reserveSeqs(3)
            #expect(writer.unusedReservedSeqs == 3)
            // Another process changes job 1, whose row this transaction has not locked, and commits.
            _ = try other.requestPause(id: ids[1], actor: "cli:other", now: 2_000)
            let pausedSeq = try other.lastSeq()
            // Now this transaction locks job 1 and writes its next event.
            let job = try writer.dependencyRecord(ids[1])
            #expect(writer.unusedReservedSeqs == 0)
            let (events, _) = try writer.perform(.cancel(by: "cli:test"), jobID: ids[1], on: job, actor: "cli:test",
                                                 expectedVersion: job?.version, now: 3_000)
            try writer.flush()
            return (events.first, pausedSeq)
        }
        let event = try #require(cancelled)
        #expect(event.type == .cancelled)
        #expect((event.seq ?? 0) > pausedSeq)
        let log = try store.events(jobID: ids[1])
        #expect(log.map(\.type) == [.submitted, .paused, .cancelled])
        #expect(log.compactMap(\.seq) == log.compactMap(\.seq).sorted())
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("another store in the process reading more jobs than a cache keeps costs a store's group commit nothing")
    func specsAreTheConnections() throws {
        let fixture = try PostgresFixture("ownspecs")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let other = try PostgresStore(url: fixture.url, mode: .readWrite)
        let count = 12
        _ = try store.submit((0..<count).map { k in uploadData(k) }, actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w", queues: nil, limit: count, leaseMs: 60_000, now: 2_000)
        #expect(claimed.count == count)
        // The other store reads more jobs than one cache keeps (each row's spec decoded and kept).
        _ = try other.submit((0..<(PostgresSpecCache.capacity + 8)).map { k in uploadData(100 + k) }, actor: "cli:test", now: 2_500)
        #expect(try other.jobs(filter: JobFilter(states: [.queued])).count == PostgresSpecCache.capacity + 8)
        // Every claimed job's spec is still known to the store that claimed it: its group commit locks
        // the rows, reads the leases and takes the seqs in one pipeline, and writes with the COMMIT in
        // another (with a process-wide cache, one more statement read the specs again).
        let before = try store.withConnection { ($0.statementsSent, $0.roundTrips) }
        let outcomes = try store.append(try claimed.map { try started($0) }, now: 3_000)
        let after = try store.withConnection { ($0.statementsSent, $0.roundTrips) }
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil }, "\(outcomes)")
        #expect(after.0 - before.0 == 6, "append of \(count) events: \(after.0 - before.0) statements")
        #expect(after.1 - before.1 == 2, "append of \(count) events")
        #expect(try store.counts() == [.running: count, .queued: PostgresSpecCache.capacity + 8])
    }

    @Test("a decoded spec is reused only for the same job and byte-identical stored text; rows read back are unchanged")
    func specCache() throws {
        let cache = PostgresSpecCache()
        let first = try StoreJSON.encode(uploadData(1))
        let second = try StoreJSON.encode(uploadData(2))
        #expect(try cache.spec(ofJob: "a", stored: first) == uploadData(1))
        #expect(try cache.spec(ofJob: "a", stored: first) == uploadData(1))
        // Other text under the same id (a database rebuilt under the worker, say) is decoded again.
        #expect(try cache.spec(ofJob: "a", stored: second) == uploadData(2))
        #expect(try cache.spec(ofJob: "b", stored: first) == uploadData(1))
        #expect(cache.count == 2)
        #expect(throws: StoreError.self) { try cache.spec(ofJob: "a", stored: "{not json") }

        // Through the store: every read gives what was submitted, and the projection what the log folds to.
        let fixture = try PostgresFixture("speccache")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let specs = (0..<3).map { k in uploadData(k) }
        let ids = try store.submit(specs, actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try store.claim(owner: "w", queues: nil, limit: 3, leaseMs: 60_000, now: 2_000)
        #expect(claimed.map(\.record.spec) == specs)
        _ = try store.append(try claimed.map { try started($0) }, now: 3_000)
        #expect(try ids.map { try store.job($0)?.spec } == specs)
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// The batch path with a savepoint per event is what runs when an event fails after it wrote; it
    /// must give what the path without savepoints gives.
    @Test("a batch with refused events gives the same outcomes and log with and without savepoints")
    func batchPathsAgree() throws {
        func run(_ label: String, savepoints: Bool) throws -> (outcomes: [String], log: [[EventType]]) {
            let fixture = try PostgresFixture(label)
            let store = try PostgresStore(url: fixture.url, mode: .create)
            let ids = try store.submit((0..<3).map { k in uploadData(k) }, actor: "cli:test", now: 1_000).map(\.id)
            let claimed = try store.claim(owner: "w", queues: nil, limit: 3, leaseMs: 60_000, now: 2_000)
            try #require(claimed.map(\.record.id) == ids)
            let events = [
                try started(claimed[0]),
                // A stale version, a token that was never handed out, a report the lifecycle refuses.
                try PendingEvent(jobID: ids[0], type: .progress, actor: "w", leaseToken: claimed[0].token, expectedVersion: 2,
                                 data: EventData(bytesDone: 1)),
                try PendingEvent(jobID: ids[1], type: .started, actor: "w", leaseToken: claimed[1].token + 100, data: EventData(attempt: 1)),
                try PendingEvent(jobID: ids[2], type: .succeeded, actor: "w", leaseToken: claimed[2].token,
                                 data: EventData(result: JobResult(size: 1))),
                try PendingEvent(jobID: ids[2], type: .started, actor: "w", leaseToken: claimed[2].token, data: EventData(attempt: 1)),
                try started(claimed[1]),
                try PendingEvent(jobID: ids[0], type: .succeeded, actor: "w", leaseToken: claimed[0].token,
                                 data: EventData(result: JobResult(size: 1))),
            ]
            let outcomes = try store.writeTransaction { (connection) throws(StoreError) -> [Result<JobEvent, StoreError>] in
                if savepoints { return try connection.appendBatch(events, now: 3_000) }
                return try connection.appendBatchWithoutSavepoints(events, now: 3_000, abandoned: FastPathAbandoned())
            }
            #expect(try store.replay(verify: true).isConsistent)
            let described = outcomes.map { outcome in
                switch outcome {
                case .success(let event): "\(event.type.rawValue) v\(event.version)"
                case .failure(let error): "\(error)".replacingOccurrences(of: ids[0], with: "A").replacingOccurrences(of: ids[1], with: "B")
                    .replacingOccurrences(of: ids[2], with: "C")
                }
            }
            return (described, try ids.map { id in try store.events(jobID: id).map(\.type) })
        }
        let without = try run("batchfast", savepoints: false)
        let with = try run("batchsavepoints", savepoints: true)
        #expect(without.outcomes == with.outcomes)
        #expect(without.log == with.log)
        #expect(without.log == [[.submitted, .claimed, .started, .succeeded], [.submitted, .claimed, .started], [.submitted, .claimed, .succeeded]])
        #expect(without.outcomes.filter { $0.hasPrefix("started") || $0.hasPrefix("succeeded") }.count == 4, "\(without.outcomes)")
    }

    @Test("held-back writes become WITH clauses in front of the next statement, their parameters renumbered after each other")
    func heldWritesStatement() {
        let writes = [
            PostgresBatchWriter.HeldWrite(table: "jobs", sql: "UPDATE jobs SET state = $1 WHERE id = $2", parameters: [.text("running"), .text("a")]),
            PostgresBatchWriter.HeldWrite(table: "leases", sql: "DELETE FROM leases WHERE job_id = $1", parameters: [.text("b")]),
        ]
        let (sql, parameters) = PostgresBatchWriter.statement(writes, then: "INSERT INTO events (job_id, data) VALUES ($1, $2::text[]) RETURNING seq",
                                                              [.text("c"), .text("{}")])
        #expect(sql == "WITH w0 AS (UPDATE jobs SET state = $1 WHERE id = $2), w1 AS (DELETE FROM leases WHERE job_id = $3) "
                     + "INSERT INTO events (job_id, data) VALUES ($4, $5::text[]) RETURNING seq")
        #expect(parameters == [.text("running"), .text("a"), .text("b"), .text("c"), .text("{}")])
        #expect(PostgresBatchWriter.renumbered("VALUES ($1, $10, $2)", by: 9) == "VALUES ($10, $19, $11)")
        #expect(PostgresBatchWriter.statement([], then: "SELECT $1", [.integer(1)]).0 == "SELECT $1")
    }

    /// `renumbered` walks UTF-8 bytes instead of characters (a speed change): it must give what the
    /// character walk gave, for the writes the batch writer really holds back and for odd texts.
    @Test("renumbering parameters over UTF-8 bytes gives what the character walk gave",
          arguments: [0, 1, 9, 10, 99, 1_000])
    func renumberedAsBefore(offset: Int) throws {
        let fixture = try PostgresFixture("renumber")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit([JobSpec(kind: .uploadData, destination: "file://b/ü.txt", data: Data("x".utf8))], actor: "cli:test", now: 1_000)
        let record = try #require(try store.jobs().first)
        var texts = [
            try PostgresBatchWriter.projectionUpdate([record]).sql, try PostgresBatchWriter.projectionInsert([record]).sql,
            "VALUES ($1, $10, $2)", "$", "$$", "$1$2", "$0", "a$", "é$1ü$22€", "$123abc", "$" + String(repeating: "9", count: 25), "$1000000000000000000", "",
            "no references at all", "x = $7 AND y = $70 AND z = $700",
        ]
        texts.append(texts.joined(separator: " "))
        for text in texts {
            #expect(PostgresBatchWriter.renumbered(text, by: offset) == characterWalkRenumbered(text, by: offset), "\(text)")
        }
    }
}

/// The character walk `renumbered` had before it worked on bytes: the reference for its test.
private func characterWalkRenumbered(_ sql: String, by offset: Int) -> String {
    guard offset > 0 else { return sql }
    var out = ""
    var digits = ""
    var inReference = false
    func finish() {
        if inReference {
            out += "$" + (Int(digits).map { String($0 + offset) } ?? digits)
            digits = ""
            inReference = false
        }
    }
    for character in sql {
        if inReference, let ascii = character.asciiValue, (48...57).contains(ascii) {
            digits.append(character)
            continue
        }
        finish()
        if character == "$" {
            inReference = true
        } else {
            out.append(character)
        }
    }
    finish()
    return out
}

private func uploadData(_ k: Int) -> JobSpec {
    JobSpec(kind: .uploadData, destination: "file://budget/\(k).txt", data: Data("x".utf8))
}

/// `started` of attempt 1 under the claim's token.
private func started(_ claimed: ClaimedJob) throws -> PendingEvent {
    try PendingEvent(jobID: claimed.record.id, type: .started, actor: "w", leaseToken: claimed.token, data: EventData(attempt: 1))
}
