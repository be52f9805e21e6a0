import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import PostgresStore

@Suite("PostgreSQL group-commit plans", .onTestThreads)
struct BatchPlanTests {
    /// The planner cannot see how many rows `unnest` of a parameter gives; left to itself it joins a
    /// batch of 200 rows to a big `jobs` table by hashing the whole table. The update of the projection
    /// must look each job up by its primary key, whatever the table's size, in the plan the prepared
    /// statement uses (custom or generic).
    @Test("the group commit's projection update reads jobs through the primary key, never the whole table")
    func projectionUpdateUsesThePrimaryKey() throws {
        let fixture = try PostgresFixture("batchplan")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        // Rows as wide as a real job's (schema 8 keeps the spec in the log only, so the row of a bare
        // test spec is narrow): a long queue name keeps the table as many pages as a big queue's.
        let queue = String(repeating: "q", count: 400)
        _ = try store.submit((0..<20_000).map { k in
            JobSpec(kind: .uploadData, destination: "file://p/\(k).txt", data: Data("x".utf8), queue: queue)
        }, actor: "cli:test", now: 1_000)
        let update = try PostgresBatchWriter.projectionUpdate(try store.jobs(filter: JobFilter(limit: 200)))
        let connection = try fixture.connect()
        for mode in ["auto", "force_generic_plan"] {
            try connection.run("SET plan_cache_mode = \(mode)")
            // A text of its own per mode, so each is prepared (and planned) under that mode.
            let plan = try connection.plan("EXPLAIN /* \(mode) */ " + update.sql, update.parameters)
            #expect(plan.contains("jobs_pkey"), "\(mode): \(plan.prefix(400))")
            #expect(!plan.contains("Seq Scan on jobs"), "\(mode): \(plan.prefix(400))")
        }
    }
}

/// Write transactions run every statement on its prepared statement's generic plan
/// (`PostgresStore.writeBegin`), so the server does not plan the group commit's statements again.
@Suite("PostgreSQL write transactions on generic plans", .onTestThreads)
struct GenericPlanTests {
    @Test("a write transaction runs with plan_cache_mode = force_generic_plan, in the same round trip as BEGIN; outside it the server chooses")
    func writeTransactionMode() throws {
        let fixture = try PostgresFixture("genericmode")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        func mode(_ connection: PostgresConnection) throws(StoreError) -> String? {
            try connection.rows("SELECT current_setting('plan_cache_mode')") { (row) throws(StoreError) in try row.string(0) }.first
        }
        let before = try store.withConnection { ($0.statementsSent, $0.roundTrips) }
        let inside = try store.writeTransaction { (connection) throws(StoreError) -> String? in try mode(connection) }
        // BEGIN, SET LOCAL and the read in one pipeline, COMMIT: four statements, two round trips.
        #expect(try store.withConnection { $0.statementsSent } - before.0 == 4)
        #expect(try store.withConnection { $0.roundTrips } - before.1 == 2)
        #expect(inside == "force_generic_plan")
        #expect(try store.withConnection { (connection) throws(StoreError) -> String? in try mode(connection) } == "auto")
        #expect(try store.readTransaction { (connection) throws(StoreError) -> String? in try mode(connection) } == "auto")
    }

    /// Left to `auto`, the server made a custom plan for each of a prepared statement's first five
    /// executions and for every execution of some (the lease read, always): this fails without
    /// `writeBegin`'s `SET LOCAL`.
    @Test("after a dozen claims and group commits, the store's prepared write statements have only generic plans")
    func groupCommitsUseGenericPlans() throws {
        let fixture = try PostgresFixture("genericplans")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let count = 12 * 4
        _ = try store.submit((0..<count).map { k in
            JobSpec(kind: .uploadData, destination: "file://generic/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000)
        for round in 0..<12 {
            let now = 2_000 + Int64(round) * 10
            let claimed = try store.claim(owner: "w", queues: nil, limit: 4, leaseMs: 60_000, now: now)
            try #require(claimed.count == 4)
            let started = try store.append(try claimed.map { job in
                try PendingEvent(jobID: job.record.id, type: .started, actor: "w", leaseToken: job.token, data: EventData(attempt: 1))
            }, now: now + 1)
            #expect(started.allSatisfy { (try? $0.get()) != nil })
            let succeeded = try store.append(try claimed.map { job in
                try PendingEvent(jobID: job.record.id, type: .succeeded, actor: "w", leaseToken: job.token,
                                 data: EventData(result: JobResult(size: 1)))
            }, now: now + 2)
            #expect(succeeded.allSatisfy { (try? $0.get()) != nil })
        }
        #expect(try store.counts() == [.succeeded: count])
        let plans = try store.withConnection { (connection) throws(StoreError) -> [(String, Int64, Int64)] in
            try connection.rows("""
                SELECT left(regexp_replace(statement, '\\s+', ' ', 'g'), 80), generic_plans, custom_plans FROM pg_prepared_statements
                WHERE statement LIKE '%FOR UPDATE%' OR statement LIKE '%INSERT INTO events%' OR statement LIKE '%generate_series%'
                """) { (row) throws(StoreError) in (try row.string(0), try row.integer(1), try row.integer(2)) }
        }
        // The row locks, the seqs' reservation, the claim and the group commit's writes: several kinds each.
        #expect(plans.count >= 4, "\(plans)")
        #expect(plans.reduce(0) { $0 + $1.1 } >= 12 * 3, "\(plans)")
        for (statement, generic, custom) in plans {
            #expect(custom == 0, "\(statement): \(generic) generic, \(custom) custom plans")
        }
        #expect(try store.replay(verify: true).isConsistent)
    }
}

/// A group commit's row locks read the stored columns only (`JobRecord.postgresLockColumns`): the
/// spec comes from the process's decoded specs, or from one more query for a job it has not read.
@Suite("PostgreSQL group-commit row locks without the spec", .onTestThreads)
struct LockColumnsTests {
    @Test("the row locks do not read the jobs' submitted events; the full row read does")
    func lockReadsNoSubmittedEvent() throws {
        let fixture = try PostgresFixture("lockcolumns")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let ids = try store.submit((0..<8).map { k in
            JobSpec(kind: .uploadData, destination: "file://lock/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000).map(\.id)
        let connection = try fixture.connect()
        func plan(_ columns: String) throws -> String {
            try connection.plan("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT \(columns) FROM jobs WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE",
                                [postgresTextArray(ids)])
        }
        // The spec is read from the `submitted` event through events' primary key (seq).
        #expect(try plan(JobRecord.postgresSelectColumns).contains("events_pkey"))
        #expect(!(try plan(JobRecord.postgresLockColumns).contains("events_pkey")))
    }

    @Test("appends to jobs this process never read get their specs from the log, and the records equal the full read")
    func unknownJobsGetTheirSpecs() throws {
        let fixture = try PostgresFixture("lockunknown")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let specs = (0..<3).map { k in
            JobSpec(kind: .uploadData, destination: "file://lock/u\(k).txt", data: Data("u\(k)".utf8), queue: "q\(k)")
        }
        let ids = try store.submit(specs, actor: "cli:test", now: 1_000).map(\.id)
        let cache = try store.withConnection { $0.specs }
        // Fresh ULIDs: no reader on this connection has decoded these jobs' specs.
        #expect(ids.allSatisfy { cache.cached(ofJob: $0) == nil })
        let outcomes = try store.append(try ids.map { id in
            try PendingEvent(jobID: id, type: .paused, actor: "cli:test", data: EventData())
        }, now: 2_000)
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil }, "\(outcomes)")
        #expect(ids.allSatisfy { cache.cached(ofJob: $0) != nil })
        for (id, spec) in zip(ids, specs) {
            let record = try #require(try store.job(id))
            #expect(record.spec.destination == spec.destination && record.spec.queue == spec.queue && record.spec.data == spec.data)
            #expect(cache.cached(ofJob: id)?.destination == spec.destination)
            #expect(record.state == .paused)
        }
        #expect(try store.replay(verify: true).isConsistent)
    }
}

/// The per-row work of the statements that take event seqs and send job ids.
@Suite("PostgreSQL group-commit parameters and seqs", .onTestThreads)
struct GroupCommitParameterTests {
    /// `pg_get_serial_sequence` is stable, so a generic plan called it for every seq taken; as an
    /// InitPlan it runs once per execution. The seqs taken are still the identity sequence's, in order.
    @Test("seqs are taken with the events sequence looked up once per statement, ascending, and the events get them")
    func seqSequenceLookedUpOnce() throws {
        let fixture = try PostgresFixture("seqinitplan")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let plan = try store.writeTransaction { (connection) throws(StoreError) -> String in
            try connection.rows("EXPLAIN (VERBOSE, COSTS OFF) SELECT nextval(\(PostgresBatchWriter.eventSeqSequence)) FROM generate_series(1, $1)",
                                [.int(5)]) { (row) throws(StoreError) in try row.string(0) }.joined(separator: "\n")
        }
        #expect(plan.contains("InitPlan"), "\(plan)")
        let perRow = plan.split(separator: "\n").filter { $0.contains("Output: nextval(") }
        #expect(perRow.count == 1 && !perRow[0].contains("pg_get_serial_sequence"), "\(plan)")

        let ids = try store.submit((0..<3).map { k in
            JobSpec(kind: .uploadData, destination: "file://seq/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000).map(\.id)
        let reserved = try store.writeTransaction { (connection) throws(StoreError) -> [Int64] in
            let writer = PostgresBatchWriter(connection)
            try writer.reserveSeqs(4)
            var seqs: [Int64] = []
            for id in ids {
                seqs.append(try writer.insertEvent(jobID: id, version: 2, type: .paused, atMs: 2_000, actor: "cli:test",
                                                   leaseToken: nil, data: "{}"))
            }
            #expect(writer.unusedReservedSeqs == 1)
            try writer.flush()
            return seqs
        }
        #expect(reserved == reserved.sorted() && Set(reserved).count == 3, "\(reserved)")
        let stored = try store.withConnection { (connection) throws(StoreError) -> [Int64] in
            try connection.rows("SELECT seq FROM events WHERE version = 2 ORDER BY seq") { (row) throws(StoreError) in try row.integer(0) }
        }
        #expect(stored == reserved)
        // The next seq the sequence gives is past the one reserved and not used.
        let next = try store.withConnection { (connection) throws(StoreError) -> Int64? in
            try connection.row("SELECT nextval(\(PostgresBatchWriter.eventSeqSequence))") { (row) throws(StoreError) in try row.integer(0) }
        }
        #expect(try #require(next) > (reserved.last ?? 0) + 1)
    }

    /// Job ids go as a binary `text[]`: prepared with that type (nothing for `array_in` to parse at each
    /// execution), and every id arrives byte for byte, whatever characters a text literal would quote.
    @Test("id lists are sent as binary text[]: prepared with that type, every character arriving unchanged")
    func idListsAreBinary() throws {
        let fixture = try PostgresFixture("binaryids")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let odd = ["plain", "with \"quotes\"", "back\\slash", "{braces},comma", "NULL", "", " spaced ", "e\u{301}", "é", "日本"]
        let echoed = try store.withConnection { (connection) throws(StoreError) -> [String] in
            try connection.rows("SELECT unnest($1::text[])", [postgresTextArray(odd)]) { (row) throws(StoreError) in try row.string(0) }
        }
        #expect(echoed.count == odd.count)
        #expect(zip(echoed, odd).allSatisfy { Array($0.utf8) == Array($1.utf8) }, "\(echoed)")
        #expect(try store.withConnection { (connection) throws(StoreError) -> [String] in
            try connection.rows("SELECT unnest($1::text[])", [postgresTextArray([])]) { (row) throws(StoreError) in try row.string(0) }
        }.isEmpty)

        // A group commit's row locks: prepared with a text[] parameter.
        let ids = try store.submit((0..<2).map { k in
            JobSpec(kind: .uploadData, destination: "file://bin/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000).map(\.id)
        let outcomes = try store.append(try ids.map { id in
            try PendingEvent(jobID: id, type: .paused, actor: "cli:test", data: EventData())
        }, now: 2_000)
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil }, "\(outcomes)")
        let types = try store.withConnection { (connection) throws(StoreError) -> [String] in
            try connection.rows("""
                SELECT parameter_types::text FROM pg_prepared_statements WHERE statement LIKE '%FROM jobs WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE%'
                """) { (row) throws(StoreError) in try row.string(0) }
        }
        #expect(types == ["{text[]}"], "\(types)")
        #expect(try store.replay(verify: true).isConsistent)
    }
}
