import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// Schema 10: a running job's lease expiry is kept in its `jobs` row
/// (`migrations/sqlite/010_lease_in_the_job_row.sql`); the `leases` table is gone.
@Suite("SQLite leases in the job row", .onTestThreads)
struct SQLiteLeaseInRowTests {
    /// The job row's lease: state, owner, token and expiry.
    private func lease(_ store: EventStore, _ id: String) throws -> (state: String, owner: String?, token: Int64?, expiresAtMs: Int64?)? {
        try store.withConnection { (connection) throws(StoreError) in
            try connection.first("SELECT state, lease_owner, lease_token, lease_expires_at_ms FROM jobs WHERE id = ?", [.text(id)]) { row in
                (row.text(0), row.optionalText(1), row.optionalInt64(2), row.optionalInt64(3))
            }
        }
    }

    /// Whether the database still has a table named `name`.
    private func hasTable(_ store: EventStore, _ name: String) throws -> Bool {
        try store.withConnection { (connection) throws(StoreError) -> Bool in
            try connection.first("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(name)]) { row in
                row.int(0) > 0
            } ?? false
        }
    }

    private func started(_ job: ClaimedJob, by owner: String = "w1") throws -> PendingEvent {
        try PendingEvent(jobID: job.record.id, type: .started, actor: owner, leaseToken: job.token, data: EventData(attempt: 1))
    }

    private func succeeded(_ job: ClaimedJob, by owner: String = "w1") throws -> PendingEvent {
        try PendingEvent(jobID: job.record.id, type: .succeeded, actor: owner, leaseToken: job.token,
                         data: EventData(result: JobResult(size: 1)))
    }

    @Test("a claim sets the row's expiry (the claimed event's), started keeps it, a heartbeat extends it, the outcome clears it")
    func leaseFollowsTheRun() throws {
        let fixture = try StoreFixture("sqlite-leaserow")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let ids = try store.submit([uploadSpec(), uploadSpec()], actor: "cli:test", now: 1_000).map(\.id)
        #expect(try lease(store, ids[0])?.expiresAtMs == nil)
        let claimed = try store.claim(owner: "w1", queues: nil, limit: 2, leaseMs: 30_000, now: 2_000)
        try #require(claimed.count == 2)
        for job in claimed {
            let row = try #require(try lease(store, job.record.id))
            #expect(row.state == "running" && row.owner == "w1" && row.token == job.token && row.expiresAtMs == 32_000)
            guard case .claimed(_, let expiresAt, _)? = try store.events(jobID: job.record.id).last?.payload else {
                Issue.record("no claimed event for \(job.record.id)")
                continue
            }
            #expect(row.expiresAtMs == expiresAt, "the row's expiry is the one the claimed event states")
        }
        #expect(try !hasTable(store, "leases"))

        let started = try store.append(try claimed.map { try self.started($0) }, now: 3_000)
        #expect(started.allSatisfy { (try? $0.get()) != nil }, "\(started)")
        #expect(try lease(store, claimed[0].record.id)?.expiresAtMs == 32_000)
        #expect(try store.heartbeat(owner: "w1", leases: [claimed[0].record.id: claimed[0].token], leaseMs: 30_000, now: 10_000).isEmpty)
        #expect(try lease(store, claimed[0].record.id)?.expiresAtMs == 40_000)
        #expect(try lease(store, claimed[1].record.id)?.expiresAtMs == 32_000)
        // A wrong owner or token holds nothing and changes nothing.
        #expect(try store.heartbeat(owner: "w2", leases: [claimed[1].record.id: claimed[1].token], leaseMs: 30_000, now: 11_000)
            == [claimed[1].record.id])
        #expect(try store.heartbeat(owner: "w1", leases: [claimed[1].record.id: claimed[1].token + 1], leaseMs: 30_000, now: 11_000)
            == [claimed[1].record.id])
        #expect(try lease(store, claimed[1].record.id)?.expiresAtMs == 32_000)
        // `stats` reads the expiry from the row.
        let running = try store.stats(queue: nil, now: 11_000).running
        #expect(Dictionary(uniqueKeysWithValues: running.map { ($0.jobID, $0.expiresAtMs) })
            == [claimed[0].record.id: 40_000, claimed[1].record.id: 32_000])

        let finished = try store.append([try succeeded(claimed[0])], now: 12_000)
        #expect((try? finished[0].get()) != nil, "\(finished)")
        let ended = try #require(try lease(store, claimed[0].record.id))
        #expect(ended.state == "succeeded" && ended.expiresAtMs == nil)
        // A job no longer running holds no lease: its heartbeat reports it lost.
        #expect(try store.heartbeat(owner: "w1", leases: [claimed[0].record.id: claimed[0].token], leaseMs: 30_000, now: 13_000)
            == [claimed[0].record.id])
        #expect(try lease(store, claimed[0].record.id)?.expiresAtMs == nil)
        // Heartbeats write no event, so replay --verify does not compare the expiry.
        let report = try store.replay(verify: true)
        #expect(report.isConsistent, "\(report.differences) \(report.problems)")
    }

    @Test("the rescue reads the expiries in the rows: a heartbeat keeps a job, a lapsed one is requeued with none")
    func rescueReadsTheRows() throws {
        let fixture = try StoreFixture("sqlite-leaserow-rescue")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        _ = try store.submit([uploadSpec(), uploadSpec()], actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w1", queues: nil, limit: 2, leaseMs: 1_000, now: 1_000)
        try #require(claimed.count == 2)
        let (kept, lapsed) = (claimed[0], claimed[1])
        #expect(try store.heartbeat(owner: "w1", leases: [kept.record.id: kept.token], leaseMs: 1_000, now: 1_900).isEmpty)
        #expect(try store.rescueExpired(now: 1_999, actor: "w2").isEmpty)
        #expect(try store.rescueExpired(now: 2_000, actor: "w2").map(\.id) == [lapsed.record.id])
        let requeued = try #require(try lease(store, lapsed.record.id))
        #expect(requeued.state == "queued" && requeued.owner == nil && requeued.token == nil && requeued.expiresAtMs == nil)
        guard case .leaseExpired(_, let reason)? = try store.events(jobID: lapsed.record.id).last?.payload else {
            Issue.record("no lease_expired event")
            return
        }
        // The reason names the holder and the expiry, both read from the row.
        #expect(reason == "lease held by w1 expired at 2000")
        #expect(try lease(store, kept.record.id)?.expiresAtMs == 2_900)
        #expect(try store.rescueExpired(now: 2_900, actor: "w2").map(\.id) == [kept.record.id])
    }

    @Test("a group commit fences each event against its row: the one with a stale token fails, the others are written")
    func staleTokenFailsOnlyItsEvent() throws {
        let fixture = try StoreFixture("sqlite-leaserow-fence")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        _ = try store.submit((0..<3).map { _ in uploadSpec() }, actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w1", queues: nil, limit: 3, leaseMs: 1_000, now: 1_000)
        try #require(claimed.count == 3)
        let started = try store.append(try claimed.map { try self.started($0) }, now: 1_100)
        #expect(started.allSatisfy { (try? $0.get()) != nil }, "\(started)")

        // Another process rescues the middle job once its lease lapsed and claims it under a new token;
        // the first worker's records of it are now stale (its cache holds the row it committed).
        let other = try EventStore(path: fixture.path)
        for job in claimed where job.record.id != claimed[1].record.id {
            #expect(try store.heartbeat(owner: "w1", leases: [job.record.id: job.token], leaseMs: 10_000, now: 1_500).isEmpty)
        }
        #expect(try other.rescueExpired(now: 2_000, actor: "w2").map(\.id) == [claimed[1].record.id])
        let retaken = try #require(try other.claim(owner: "w2", queues: nil, limit: 1, leaseMs: 30_000, now: 2_001).first)
        #expect(retaken.record.id == claimed[1].record.id && retaken.token > claimed[1].token)

        // The same job twice in one batch too: its second event starts from the record the first wrote.
        let progress = try PendingEvent(jobID: claimed[0].record.id, type: .progress, actor: "w1", leaseToken: claimed[0].token,
                                        data: EventData(bytesDone: 1, bytesTotal: 1))
        let outcomes = try store.append([progress] + (try claimed.map { try succeeded($0) }), now: 2_100)
        #expect(outcomes.count == 4)
        #expect((try? outcomes[0].get()) != nil && (try? outcomes[1].get()) != nil && (try? outcomes[3].get()) != nil, "\(outcomes)")
        #expect(throws: StoreError.staleLease(jobID: claimed[1].record.id, token: claimed[1].token)) { try outcomes[2].get() }
        #expect(try lease(store, claimed[0].record.id)?.state == "succeeded")
        #expect(try lease(store, claimed[2].record.id)?.state == "succeeded")
        let taken = try #require(try lease(store, claimed[1].record.id))
        #expect(taken.state == "running" && taken.owner == "w2" && taken.token == retaken.token && taken.expiresAtMs == 32_001)

        // The new holder's reports pass the fence; a report under the new token by a process that
        // never saw the row (no cached record) is fenced by the row too.
        let fresh = try EventStore(path: fixture.path)
        let wrongToken = try PendingEvent(jobID: retaken.record.id, type: .started, actor: "w1", leaseToken: claimed[1].token,
                                          data: EventData(attempt: 2))
        #expect(throws: StoreError.staleLease(jobID: retaken.record.id, token: claimed[1].token)) {
            try fresh.append([wrongToken], now: 2_200)[0].get()
        }
        let rightToken = try PendingEvent(jobID: retaken.record.id, type: .started, actor: "w2", leaseToken: retaken.token,
                                          data: EventData(attempt: 2))
        #expect((try? fresh.append([rightToken], now: 2_300)[0].get()) != nil)
        let report = try store.replay(verify: true)
        #expect(report.isConsistent, "\(report.differences) \(report.problems)")
    }

    @Test("replay (rewrite) keeps the expiry of each job still running under the same token")
    func replayKeepsExpiries() throws {
        let fixture = try StoreFixture("sqlite-leaserow-replay")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        let claim = try fixture.running(now: 1_000, leaseMs: 1_000)
        #expect(try store.heartbeat(owner: workerName, leases: [claim.record.id: claim.token], leaseMs: 60_000, now: 1_500).isEmpty)
        let before = try fixture.allRows()
        let report = try store.replay(verify: false)
        #expect(report.isConsistent, "\(report.differences) \(report.problems)")
        #expect(try lease(store, claim.record.id)?.expiresAtMs == 61_500)
        #expect(try fixture.allRows() == before)
        #expect(try store.rescueExpired(now: 60_000, actor: "w2").isEmpty)
    }

    /// A database at schema 9 with live leases, made from a current one: the claims are taken by the
    /// current code, then the expiry goes back into a `leases` table as schema 9 kept it.
    @Test("migration 10 moves the expiry of each running job's lease with the row's token into the row, and drops leases")
    func migrationMovesLiveLeases() throws {
        let directory = try TemporaryDirectory("sqlite-leaserow-migration")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        var ids: [String] = []
        var tokens: [Int64] = []
        do {
            let store = try EventStore(path: path)
            ids = try store.submit((0..<4).map { _ in uploadSpec() }, actor: "cli:test", now: 1_000).map(\.id)
            let claimed = try store.claim(owner: "w1", queues: nil, limit: 3, leaseMs: 1_000, now: 1_000)
            try #require(claimed.map(\.record.id) == Array(ids[0..<3]))
            tokens = claimed.map(\.token)
            try store.withConnection { (connection) throws(StoreError) in
                try connection.execute("""
                    ALTER TABLE jobs DROP COLUMN lease_expires_at_ms;
                    CREATE TABLE leases (
                        job_id        TEXT    PRIMARY KEY,
                        owner         TEXT    NOT NULL,
                        token         INTEGER NOT NULL,
                        expires_at_ms INTEGER NOT NULL
                    );
                    CREATE INDEX leases_expiry ON leases (expires_at_ms);
                    DROP INDEX jobs_finished_seq_by_kind;
                    ALTER TABLE jobs DROP COLUMN finished_seq;
                    DELETE FROM schema_migrations WHERE version >= 10;
                    """)
                try connection.execute(OlderSQLiteSchema.beforeWaitFlag)
                // Job 0: a live lease with the row's token. Job 1: a lease row of an older token (the
                // row's own is gone). Job 2: no lease row at all. Job 3 (queued): a lease row left behind.
                try connection.run("INSERT INTO leases (job_id, owner, token, expires_at_ms) VALUES (?, 'w1', ?, 50000)",
                                   [.text(ids[0]), .integer(tokens[0])])
                try connection.run("INSERT INTO leases (job_id, owner, token, expires_at_ms) VALUES (?, 'w1', ?, 50000)",
                                   [.text(ids[1]), .integer(tokens[1] - 100)])
                try connection.run("INSERT INTO leases (job_id, owner, token, expires_at_ms) VALUES (?, 'w0', 1, 50000)",
                                   [.text(ids[3])])
            }
        }
        let store = try EventStore(path: path)
        #expect(store.appliedMigrations == Array(10...Migrator.latestVersion))
        #expect(try !hasTable(store, "leases"))
        #expect(try lease(store, ids[0])?.expiresAtMs == 50_000)
        #expect(try lease(store, ids[1])?.expiresAtMs == nil)
        #expect(try lease(store, ids[2])?.expiresAtMs == nil)
        let queued = try #require(try lease(store, ids[3]))
        #expect(queued.state == "queued" && queued.expiresAtMs == nil)
        let report = try store.replay(verify: true)
        #expect(report.isConsistent, "\(report.differences) \(report.problems)")

        // The jobs left without an expiry are rescued at once; the live lease holds until it lapses.
        #expect(try store.rescueExpired(now: 2_000, actor: "w2").map(\.id) == [ids[1], ids[2]])
        #expect(try store.heartbeat(owner: "w1", leases: [ids[0]: tokens[0]], leaseMs: 1_000, now: 3_000).isEmpty)
        #expect(try lease(store, ids[0])?.expiresAtMs == 4_000)
        #expect(try store.rescueExpired(now: 4_000, actor: "w2").map(\.id) == [ids[0]])
    }
}
