import Foundation
import JobModel
import Synchronization
import Testing
import TestSupport
@testable import PostgresStore

/// What only the PostgreSQL adapter has to get right: several connections (machines) on one database.
@Suite("PostgreSQL adapter", .onTestThreads)
struct PostgresAdapterTests {
    /// Claims from four stores (four connections, as four machines) at once: every job once, tokens unique.
    @Test("concurrent claims from several connections take each job once, with unique growing tokens")
    func concurrentClaims() async throws {
        let url = try PostgresServer.shared().makeSchema("pgclaims")
        let stores = try (0..<4).map { _ in try PostgresStore(url: url, mode: .create) }
        let count = 120
        _ = try stores[0].submit((0..<count).map { _ in uploadSpec() }, actor: "cli:test", now: 1_000)
        let claims = try await withThrowingTaskGroup(of: [ClaimedJob].self) { group in
            for (index, store) in stores.enumerated() {
                group.addTask {
                    var mine: [ClaimedJob] = []
                    while true {
                        let batch = try await store.claimGrouped(
                            ClaimRequest(owner: "w\(index)", queues: nil, limit: 7, leaseMs: 60_000, now: 2_000))
                        if batch.isEmpty { return mine }
                        mine += batch
                    }
                }
            }
            return try await group.reduce(into: [ClaimedJob]()) { $0 += $1 }
        }
        #expect(claims.count == count)
        #expect(Set(claims.map(\.record.id)).count == count)
        #expect(Set(claims.map(\.token)).count == count)
        #expect(try stores[0].counts() == [.running: count])
        #expect(try stores[1].replay(verify: true).isConsistent)
    }

    /// A rescue from another connection and the old holder's append: fencing across connections.
    @Test("a job rescued through another connection refuses the old holder's token")
    func fencingAcrossConnections() throws {
        let url = try PostgresServer.shared().makeSchema("pgfence")
        let (first, second) = (try PostgresStore(url: url, mode: .create), try PostgresStore(url: url, mode: .readWrite))
        let id = try first.submit([uploadSpec()], actor: "cli:test", now: 1_000)[0].id
        let old = try #require(try first.claim(owner: "w1", queues: nil, limit: 1, leaseMs: 1_000, now: 1_000).first)
        #expect(try second.rescueExpired(now: 2_000, actor: "w2").map(\.id) == [id])
        let new = try #require(try second.claim(owner: "w2", queues: nil, limit: 1, leaseMs: 1_000, now: 2_000).first)
        #expect(new.token > old.token)
        #expect(throws: StoreError.staleLease(jobID: id, token: old.token)) {
            try first.append(PendingEvent(jobID: id, type: .progress, actor: "w1", leaseToken: old.token,
                                          data: EventData(bytesDone: 1)), now: 2_100)
        }
        #expect(try first.heartbeat(owner: "w1", leases: [id: old.token], leaseMs: 1_000, now: 2_100) == [id])
        #expect(try first.heartbeat(owner: "w2", leases: [id: new.token], leaseMs: 1_000, now: 2_100).isEmpty)
    }

    /// Identity values are taken at insert and committed in any order. A commit of a smaller seq after
    /// a larger one must still change the data version, or an idle worker would never see that job.
    @Test("the data version changes for every commit, also one of a smaller seq after a larger one")
    func dataVersionSeesOutOfOrderCommits() throws {
        // A server of its own: the data version follows the cluster-wide snapshot, which other tests'
        // transactions on a shared server move at any moment.
        let server = try PostgresServer.makePrivate()
        defer { server.shutDown() }
        let url = try server.makeSchema("pgversion")
        let watcher = try PostgresStore(url: url, mode: .create)
        let writer = try PostgresStore(url: url, mode: .readWrite)
        let slow = try PostgresConnection(url)
        try slow.execute("BEGIN")
        // Takes seq 1 now, commits last.
        let smaller = try slow.first("INSERT INTO events (job_id, version, type, at_ms, actor, data) "
                                     + "VALUES ('SLOW', 1, 'submitted', 1, 'test', '{}') RETURNING seq") { (row) throws(PostgresError) in try row.int64(0) }
        let id = try writer.submit([uploadSpec()], actor: "cli:test", now: 1_000)[0].id
        #expect(try #require(try writer.events(jobID: id).first?.seq) > #require(smaller))
        let before = try watcher.dataVersion()
        #expect(try watcher.dataVersion() == before, "nothing committed in between")
        try slow.execute("COMMIT")
        #expect(try watcher.dataVersion() != before)
    }

    @Test("open modes: an empty database is created only by create; read-only refuses writes; the URL is redacted")
    func openModes() throws {
        let server = try PostgresServer.shared()
        let url = try server.makeSchema("pgmodes")
        #expect(throws: StoreError.self) { _ = try PostgresStore(url: url, mode: .readWrite) }
        #expect(throws: StoreError.self) { _ = try PostgresStore(url: url, mode: .readOnly) }
        let created = try PostgresStore(url: url, mode: .create)
        #expect(created.appliedMigrations == PostgresMigrator.all.map(\.version))
        // Versions need not be contiguous (each change numbers its own), but they end at the known one.
        #expect(created.appliedMigrations.last == PostgresStore.knownSchemaVersion)
        #expect(!created.location.contains(server.password))
        let id = try created.submit([uploadSpec()], actor: "cli:test", now: 1_000)[0].id
        let reader = try PostgresStore(url: url, mode: .readOnly)
        #expect(reader.appliedMigrations.isEmpty && reader.isReadOnly)
        #expect(try reader.job(id)?.state == .queued)
        #expect(try reader.replay(verify: true).isConsistent)
        #expect { try reader.requestPause(id: id, actor: "cli:test", now: 2_000) } throws: { error in
            guard case StoreError.readOnly = error else { return false }
            return true
        }
    }

    /// The server ends the store's session (as a restart or an administrator would): the store opens a
    /// new one for its next transaction, and a read-only store's new session is read-only too.
    @Test("a connection the server ended is opened again, keeping the read-only session setting")
    func reconnectsAfterTheServerEndsTheSession() throws {
        let server = try PostgresServer.shared()
        let url = try server.makeSchema("pgreconnect")
        let writer = try PostgresStore(url: url, mode: .create)
        let id = try writer.submit([uploadSpec()], actor: "cli:test", now: 1_000)[0].id
        let reader = try PostgresStore(url: url, mode: .readOnly)
        for store in [writer, reader] {
            let pid = try store.withConnection { (connection) throws(StoreError) in connection.backendPID }
            try server.psql(database: "postgres", "SELECT pg_terminate_backend(\(pid))")
            // Transactions begin by reconnecting; the job is read in a fresh session.
            #expect(try store.replay(verify: true).isConsistent)
            #expect(try store.withConnection { (connection) throws(StoreError) in connection.backendPID } != pid)
        }
        #expect(try reader.job(id)?.state == .queued)
        #expect {
            try reader.withConnection { (connection) throws(StoreError) in
                try connection.store("INSERT INTO blobs (sha256, size, data) VALUES ('x', 0, ''::bytea)")
            }
        } throws: { error in
            guard case StoreError.readOnly = error else { return false }
            return true
        }
        #expect(try writer.requestPause(id: id, actor: "cli:test", now: 2_000).record.state == .paused)
    }

    /// Connections submitting the same new key at once: one job, every submit gets its id, none fails.
    @Test("concurrent submits of one new idempotency key make one job and all return it")
    func concurrentSubmitsOfOneKey() async throws {
        let url = try PostgresServer.shared().makeSchema("pgkeys")
        let stores = try (0..<6).map { _ in try PostgresStore(url: url, mode: .create) }
        let outcomes = try await withThrowingTaskGroup(of: [SubmitOutcome].self) { group in
            for store in stores {
                group.addTask {
                    try await store.run { store in
                        try store.submit([uploadSpec(key: "other-\(UUID().uuidString)"), uploadSpec(key: "shared")],
                                         actor: "cli:test", now: 1_000)
                    }
                }
            }
            return try await group.reduce(into: [SubmitOutcome]()) { $0 += $1 }
        }
        let shared = outcomes.filter { $0.key == "shared" }
        #expect(shared.count == stores.count)
        #expect(Set(shared.map(\.id)).count == 1)
        #expect(shared.filter(\.created).count == 1)
        #expect(try stores[0].countJobs() == stores.count + 1)
    }

    /// A key's NFC and NFD spellings are two keys (the unique index compares bytes), so a submit of both
    /// takes both their turns. The keys to lock were a `Set` of `String`, whose `==` calls the two equal:
    /// one spelling's bucket went unlocked, and a submit beside it of that spelling alone inserted it too
    /// — one of the two failed with "duplicate key value violates unique constraint
    /// jobs_idempotency_key_set" instead of finding the other's job.
    @Test("a submit takes the turn of each key by its bytes: 'café' composed and decomposed both")
    func keysTakeTheirTurnsByTheirBytes() throws {
        let url = try PostgresServer.shared().makeSchema("pgnfdkeys")
        let store = try PostgresStore(url: url, mode: .create)
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        let other = try PostgresConnection(url)
        func bucket(_ key: String) throws -> Int64 {
            try other.first("SELECT (hashtextextended($1, \(PostgresStore.submitLockSeed)) & \(PostgresStore.submitLockBuckets - 1))::bigint",
                            [.text(key)]) { (row) throws(PostgresError) in try row.int64(0) } ?? -1
        }
        try #require(try bucket(composed) != bucket(decomposed), "the two spellings hash to one bucket")
        // Another submit of the decomposed key holds its turn.
        _ = try other.run(PostgresStore.submitTurnsSQL("pg_advisory_lock"), [postgresTextArray([decomposed])])
        let outcomes = Mutex<Result<[SubmitOutcome], any Error>?>(nil)
        let submitting = Thread {
            let result = Result { try store.submit([uploadSpec(key: composed), uploadSpec(key: decomposed)], actor: "cli:test", now: 1_000) }
            outcomes.withLock { $0 = result }
        }
        submitting.start()
        usleep(1_500_000)
        #expect(outcomes.withLock { $0 == nil }, "the submit went on while another held the turn of the decomposed key")
        _ = try other.run(PostgresStore.submitTurnsSQL("pg_advisory_unlock"), [postgresTextArray([decomposed])])
        // A minute: on a loaded machine (CI's suite, the server's fsync behind the disk's write-back) a
        // submit's commit has taken more than 20 s; a submit that never takes its turn still fails here.
        let deadline = Date().addingTimeInterval(60)
        while outcomes.withLock({ $0 == nil }) && Date() < deadline { usleep(20_000) }
        let submitted = try #require(try outcomes.withLock { $0 }?.get(), "the submit did not end within a minute of the turn's release")
        #expect(submitted.count == 2 && submitted.allSatisfy(\.created) && Set(submitted.map(\.id)).count == 2)
    }

    /// Advisory locks belong to the database: with one constant for every log, a submit in one schema
    /// waited for a transaction of another schema's log that held its key's bucket, and gave up after
    /// its answer limit (seen in a CI run: 30 s on `SELECT pg_advisory_xact_lock(…)`, another test's
    /// stalled session holding the bucket). Each log's locks are its schema's now; within a log a key's
    /// turn is still taken.
    @Test("a submit does not wait for a turn another schema's log holds, and still waits for its own log's")
    func turnsAreTheLogsOwn() throws {
        let server = try PostgresServer.shared()
        let first = try server.makeSchema("pgturnsa"), second = try server.makeSchema("pgturnsb")
        let firstStore = try PostgresStore(url: first, mode: .create)
        let secondStore = try PostgresStore(url: second, mode: .create)
        let holder = try PostgresConnection(first)
        _ = try holder.run(PostgresStore.submitTurnsSQL("pg_advisory_lock"), [postgresTextArray(["shared-key"])])
        var held = true
        defer { if held { _ = try? holder.run(PostgresStore.submitTurnsSQL("pg_advisory_unlock"), [postgresTextArray(["shared-key"])]) } }

        // Each submit on a thread of its own: one that waits for a turn waits without limit.
        final class Submitting: Sendable {
            let outcome = Mutex<Result<[SubmitOutcome], any Error>?>(nil)
            init(_ store: PostgresStore) {
                startThread { [self] in
                    let result = Result { try store.submit([uploadSpec(key: "shared-key")], actor: "cli:test", now: 1_000) }
                    outcome.withLock { $0 = result }
                }
            }
            func ended(within seconds: Double) -> Bool {
                let deadline = Date().addingTimeInterval(seconds)
                while outcome.withLock({ $0 == nil }) && Date() < deadline { usleep(20_000) }
                return outcome.withLock { $0 != nil }
            }
        }

        // The other schema's log: at once (10 s: a loaded machine's commit).
        let other = Submitting(secondStore)
        #expect(other.ended(within: 10), "the other schema's submit waited for this log's turn")
        // The holder's own log: waits for the turn.
        let own = Submitting(firstStore)
        #expect(!own.ended(within: 1.5), "the submit went on while its log's turn of the key was held")
        _ = try holder.run(PostgresStore.submitTurnsSQL("pg_advisory_unlock"), [postgresTextArray(["shared-key"])])
        held = false
        try #require(own.ended(within: 60) && other.ended(within: 60), "a submit did not end within a minute of the turn's release")
        for submit in [other, own] {
            let submitted = try #require(try submit.outcome.withLock { $0 }?.get())
            #expect(submitted.count == 1 && submitted[0].created)
        }
    }

    /// One lock a key used a lock-table entry per key: 20,000 keyed jobs in one submit failed ("out of
    /// shared memory", max_locks_per_transaction 64 on a default server). Keys now lock their buckets.
    @Test("one submit of 20,000 keyed jobs takes a bounded number of locks")
    func manyKeysInOneSubmit() throws {
        let url = try PostgresServer.shared().makeSchema("pgmanykeys")
        let store = try PostgresStore(url: url, mode: .create)
        let specs = (0..<20_000).map { uploadSpec(key: "k-\($0)") }
        let outcomes = try store.submit(specs, actor: "cli:test", now: 1_000)
        #expect(outcomes.count == 20_000 && outcomes.allSatisfy(\.created))
        // Submitted again: every key maps to its job, nothing new.
        let again = try store.submit(Array(specs.prefix(500)), actor: "cli:test", now: 2_000)
        #expect(again.map(\.id) == outcomes.prefix(500).map(\.id) && !again.contains(where: \.created))
        #expect(try store.countJobs() == 20_000)
    }

    /// Replay reads the log in pages; a page boundary inside a job's events changes nothing.
    @Test("replay in small pages folds exactly what one page folds")
    func replayInPages() throws {
        let url = try PostgresServer.shared().makeSchema("pgpages")
        let store = try PostgresStore(url: url, mode: .create)
        let ids = try store.submit((0..<4).map { _ in uploadSpec() }, actor: "cli:test", now: 1_000).map(\.id)
        _ = try store.requestPause(id: ids[0], actor: "cli:test", now: 1_100)
        _ = try store.claim(owner: "w", queues: nil, limit: 2, leaseMs: 1_000, now: 1_200)
        _ = try store.rescueExpired(now: 5_000, actor: "w2")
        let whole = try store.replay(verify: true)
        #expect(whole.isConsistent && whole.eventsRead == 9)
        for pageSize in [1, 2, 3, 8] {
            let paged = try store.withConnection { (connection) throws(StoreError) in
                try PostgresStore.replay(connection, rewrite: false, pageSize: pageSize)
            }
            #expect(paged == whole, "page size \(pageSize)")
        }
    }
}
