import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import PostgresStore

/// Schema 11: a running job's lease expiry is kept in its `jobs` row
/// (`migrations/postgres/011_lease_in_the_job_row.sql`); the `leases` table is no longer written.
@Suite("PostgreSQL leases in the job row", .onTestThreads)
struct LeaseInRowTests {
    /// The job row's lease: owner, token and expiry.
    private func lease(_ store: PostgresStore, _ id: String) throws -> (state: String, owner: String?, token: Int64?, expiresAtMs: Int64?)? {
        try store.withConnection { (connection) throws(StoreError) in
            try connection.row("SELECT state, lease_owner, lease_token, lease_expires_at_ms FROM jobs WHERE id = $1", [.text(id)]) {
                (row) throws(StoreError) in (try row.string(0), try row.optionalString(1), try row.optionalInteger(2), try row.optionalInteger(3))
            }
        }
    }

    private func leaseRows(_ store: PostgresStore) throws -> Int64 {
        try store.withConnection { (connection) throws(StoreError) -> Int64 in
            try connection.row("SELECT count(*) FROM leases") { (row) throws(StoreError) in try row.integer(0) } ?? -1
        }
    }

    @Test("a claim sets the row's expiry, started keeps it, a heartbeat extends it, the outcome clears it; no lease rows")
    func leaseFollowsTheRun() throws {
        let fixture = try PostgresFixture("leaserow")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let ids = try store.submit((0..<2).map { k in
            JobSpec(kind: .uploadData, destination: "file://lease/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000).map(\.id)
        #expect(try lease(store, ids[0])?.expiresAtMs == nil)
        let claimed = try store.claim(owner: "w1", queues: nil, limit: 2, leaseMs: 30_000, now: 2_000)
        try #require(claimed.count == 2)
        for job in claimed {
            let row = try #require(try lease(store, job.record.id))
            #expect(row.state == "running" && row.owner == "w1" && row.token == job.token && row.expiresAtMs == 32_000)
        }
        #expect(try leaseRows(store) == 0)

        let started = try store.append(try claimed.map { job in
            try PendingEvent(jobID: job.record.id, type: .started, actor: "w1", leaseToken: job.token, data: EventData(attempt: 1))
        }, now: 3_000)
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

        let finished = try store.append([
            try PendingEvent(jobID: claimed[0].record.id, type: .succeeded, actor: "w1", leaseToken: claimed[0].token,
                             data: EventData(result: JobResult(size: 1))),
            try PendingEvent(jobID: claimed[1].record.id, type: .attemptFailed, actor: "w1", leaseToken: claimed[1].token,
                             data: EventData(error: StorageError(.unknown, "503", httpStatus: 503, retryable: true), retryAtMs: 20_000)),
        ], now: 12_000)
        #expect(finished.allSatisfy { (try? $0.get()) != nil }, "\(finished)")
        #expect(try lease(store, claimed[0].record.id)?.expiresAtMs == nil)
        #expect(try lease(store, claimed[1].record.id)?.expiresAtMs == nil)
        #expect(try store.heartbeat(owner: "w1", leases: [claimed[0].record.id: claimed[0].token], leaseMs: 30_000, now: 13_000)
            == [claimed[0].record.id])
        #expect(try leaseRows(store) == 0)
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// The fence reads the token from the locked rows: an event under another token is refused alone,
    /// before it writes; the events around it commit.
    @Test("a group commit whose third event has a stale token fails only that event; the others commit")
    func staleTokenFailsOnlyItsEvent() throws {
        let fixture = try PostgresFixture("leasestale")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit((0..<5).map { k in
            JobSpec(kind: .uploadData, destination: "file://stale/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w1", queues: nil, limit: 5, leaseMs: 30_000, now: 2_000)
        try #require(claimed.count == 5)
        let outcomes = try store.append(try claimed.enumerated().map { (index, job) in
            try PendingEvent(jobID: job.record.id, type: .started, actor: "w1", leaseToken: index == 2 ? job.token + 1_000 : job.token,
                             data: EventData(attempt: 1))
        }, now: 3_000)
        try #require(outcomes.count == 5)
        for (index, outcome) in outcomes.enumerated() {
            switch outcome {
            case .success(let event):
                #expect(index != 2 && event.type == .started)
            case .failure(let error):
                #expect(index == 2)
                guard case .staleLease = error else {
                    Issue.record("event 2 failed with \(error), not staleLease")
                    continue
                }
            }
        }
        #expect(try store.events(jobID: claimed[2].record.id).map(\.type) == [.submitted, .claimed])
        #expect(try store.events(jobID: claimed[3].record.id).map(\.type) == [.submitted, .claimed, .started])
        #expect(try lease(store, claimed[2].record.id)?.expiresAtMs == 32_000)
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("the rescue finds expired leases in the job rows: a heartbeat keeps a job, a lapsed one is requeued")
    func rescueReadsTheRow() throws {
        let fixture = try PostgresFixture("leaserescue")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit((0..<2).map { k in
            JobSpec(kind: .uploadData, destination: "file://rescue/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w1", queues: nil, limit: 2, leaseMs: 1_000, now: 2_000)
        try #require(claimed.count == 2)
        #expect(try store.heartbeat(owner: "w1", leases: [claimed[0].record.id: claimed[0].token], leaseMs: 1_000, now: 2_900).isEmpty)
        #expect(try store.rescueExpired(now: 2_999, actor: "rescuer").isEmpty)
        #expect(try store.rescueExpired(now: 3_000, actor: "rescuer").map(\.id) == [claimed[1].record.id])
        let rescued = try #require(try lease(store, claimed[1].record.id))
        #expect(rescued.state == "queued" && rescued.expiresAtMs == nil && rescued.token == nil)
        let expired = try #require(try store.events(jobID: claimed[1].record.id).last)
        #expect(expired.type == .leaseExpired)
        #expect(try lease(store, claimed[0].record.id)?.state == "running")
        #expect(try store.rescueExpired(now: 3_899, actor: "rescuer").isEmpty)
        #expect(try store.rescueExpired(now: 3_900, actor: "rescuer").map(\.id) == [claimed[0].record.id])
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// A claim writes its lease right after the job's row, so the expiry rides on that row's update;
    /// should the row have been sent already, the expiry still reaches it, in an update of its own.
    @Test("a lease written after its job's row was sent still sets the row's expiry")
    func leaseAfterTheRowWasSent() throws {
        let fixture = try PostgresFixture("leaselate")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        let id = try #require(try store.submit([JobSpec(kind: .uploadData, destination: "file://late/0.txt", data: Data("x".utf8))],
                                               actor: "cli:test", now: 1_000).first?.id)
        let claimedState = try store.writeTransaction { (connection) throws(StoreError) -> JobState? in
            let writer = PostgresBatchWriter(connection)
            guard let job = try connection.lockJob(id) else { return nil }
            let seqs = try connection.rows("SELECT nextval(\(PostgresBatchWriter.eventSeqSequence))") {
                (row) throws(StoreError) in try row.integer(0)
            }
            writer.addReservedSeqs(seqs)
            let (_, record) = try writer.perform(.claim(owner: "w1", token: 41, leaseMs: 5_000), jobID: id, on: job,
                                                 actor: "w1", expectedVersion: job.version, now: 2_000)
            try writer.flush()
            try writer.writeLease(jobID: id, owner: "w1", token: 41, expiresAtMs: 7_000)
            try writer.flush()
            return record?.state
        }
        #expect(claimedState == .running)
        let row = try #require(try lease(store, id))
        #expect(row.state == "running" && row.token == 41 && row.expiresAtMs == 7_000)
    }

    @Test("replay's rewrite of the projection keeps a running job's heartbeat-extended expiry")
    func rewriteKeepsExpiry() throws {
        let fixture = try PostgresFixture("leasereplay")
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit([JobSpec(kind: .uploadData, destination: "file://replay/0.txt", data: Data("x".utf8))],
                             actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w1", queues: nil, limit: 1, leaseMs: 1_000, now: 2_000)
        let job = try #require(claimed.first)
        #expect(try store.heartbeat(owner: "w1", leases: [job.record.id: job.token], leaseMs: 60_000, now: 2_500).isEmpty)
        _ = try store.replay(verify: false)
        #expect(try lease(store, job.record.id)?.expiresAtMs == 62_500)
        #expect(try store.rescueExpired(now: 10_000, actor: "rescuer").isEmpty)
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// A database at schema 10 keeps its leases through the migration: a running job's expiry moves
    /// into its row when its lease row has the row's token; the lease rows go.
    @Test("migration 11 moves the expiry of each running job's lease into its row and empties leases")
    func migrationMovesExpiries() throws {
        let fixture = try PostgresFixture("lease011", wholeDatabase: true)
        let connection = try fixture.connect()
        _ = try PostgresMigrator.migrate(connection, now: 1_000, migrations: PostgresMigrator.all.filter { $0.version <= 10 })
        try connection.insertQueuedJob(id: "running-leased", seq: 1)
        try connection.insertQueuedJob(id: "running-unleased", seq: 2)
        try connection.insertQueuedJob(id: "running-other-token", seq: 3)
        try connection.insertQueuedJob(id: "queued", seq: 4)
        try connection.run("UPDATE jobs SET state = 'running', lease_owner = 'w', lease_token = 7 WHERE id LIKE 'running-%'")
        try connection.run("""
            INSERT INTO leases (job_id, owner, token, expires_at_ms)
            VALUES ('running-leased', 'w', 7, 5000), ('running-other-token', 'w', 8, 6000), ('queued', 'w', 9, 7000)
            """)
        // Up to 11 only: these rows have no events, and a later migration rebuilds the projection from the log.
        #expect(try PostgresMigrator.migrate(connection, now: 2_000, migrations: PostgresMigrator.all.filter { $0.version <= 11 }).contains(11))
        let expiries = try connection.query("SELECT id, coalesce(lease_expires_at_ms, -1) FROM jobs ORDER BY id") {
            (row) throws(PostgresError) in "\(try row.text(0))=\(try row.int64(1))"
        }
        #expect(expiries == ["queued=-1", "running-leased=5000", "running-other-token=-1", "running-unleased=-1"])
        #expect(try connection.query("SELECT count(*) FROM leases") { (row) throws(PostgresError) in try row.int64(0) } == [0])
    }
}
