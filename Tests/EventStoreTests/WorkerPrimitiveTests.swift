import Foundation
import JobModel
import Testing
@testable import EventStore
import TestSupport

@Suite("Claiming, heartbeats and rescue", .onTestThreads)
struct WorkerPrimitiveTests {
    @Test("claims follow priority, then run_after, then submission order, and skip future and other queues", arguments: Engine.allCases)
    func claimOrder(engine: Engine) throws {
        let fixture = try StoreFixture("store-claim-order", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let a = try fixture.submit(uploadSpec(priority: 0), now: 1_000)
        let b = try fixture.submit(uploadSpec(priority: 5), now: 1_100)
        let c = try fixture.submit(uploadSpec(priority: 5), now: 1_050)
        let d = try fixture.submit(uploadSpec(priority: 0), now: 900)
        let e = try fixture.submit(uploadSpec(priority: 0), now: 900)  // same run_after as d, submitted later
        let future = try fixture.submit(uploadSpec(priority: 9), now: 5_000)
        let other = try fixture.submit(uploadSpec(priority: 9, queue: "other"), now: 100)

        #expect(try store.nextRunAfter(queues: ["default"]) == 900)
        #expect(try store.nextRunAfter(queues: nil) == 100)
        #expect(try store.nextRunAfter(queues: ["none"]) == nil)

        let claims = try store.claim(owner: "w1", queues: ["default"], limit: 10, leaseMs: 30_000, now: 2_000)
        #expect(claims.map(\.record.id) == [c, b, d, e, a])
        let tokens = claims.map(\.token)
        #expect(zip(tokens, tokens.dropFirst()).allSatisfy { $0 < $1 })
        #expect(claims.allSatisfy { $0.record.state == .running && $0.record.attempts == 1 && $0.record.leaseOwner == "w1" })
        #expect(claims.allSatisfy { $0.record.leaseToken == $0.token })
        #expect(try store.job(future)?.state == .queued)
        #expect(try store.job(other)?.state == .queued)
        #expect(try store.nextRunAfter(queues: ["default"]) == 5_000)

        let event = try #require(try store.events(jobID: c).last)
        #expect(event.type == .claimed && event.leaseToken == claims[0].token)
        #expect(event.data.leaseOwner == "w1" && event.data.leaseExpiresAtMs == 32_000 && event.data.attempt == 1)

        // Tokens keep growing across batches and queues.
        let later = try store.claim(owner: "w2", queues: nil, limit: 10, leaseMs: 30_000, now: 6_000)
        #expect(later.map(\.record.id) == [other, future])  // equal priority: earlier run_after first
        #expect(later.map(\.token).allSatisfy { $0 > tokens.max() ?? 0 })
        #expect(try store.claim(owner: "w2", queues: nil, limit: 10, leaseMs: 30_000, now: 7_000).isEmpty)
        #expect(try store.claim(owner: "w2", queues: [], limit: 10, leaseMs: 30_000, now: 7_000).isEmpty)
    }

    @Test("the next due time skips jobs waiting for a dependency, at every priority, in the queues asked for", arguments: Engine.allCases)
    func nextRunAfterAcrossPriorities(engine: Engine) throws {
        let fixture = try StoreFixture("store-next-due", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        func spec(_ key: String, priority: Int, queue: String = "default", after: [String]? = nil) -> JobSpec {
            var spec = uploadSpec(key: key, priority: priority, queue: queue)
            spec.after = after
            return spec
        }
        #expect(try store.nextRunAfter(queues: nil) == nil)
        _ = try fixture.submit(spec("blocker", priority: -2), now: 7_000)
        // The earliest of each level waits for `blocker`; the level at 8 has nothing else.
        _ = try fixture.submit(spec("waits-3", priority: 3, after: ["blocker"]), now: 4_000)
        _ = try fixture.submit(spec("waits-8", priority: 8, after: ["blocker"]), now: 1_000)
        _ = try fixture.submit(spec("runs-3", priority: 3), now: 6_000)
        _ = try fixture.submit(spec("runs-1", priority: 1), now: 6_500)
        _ = try fixture.submit(spec("other", priority: 0, queue: "other"), now: 2_000)
        #expect(try store.nextRunAfter(queues: ["default"]) == 6_000)
        #expect(try store.nextRunAfter(queues: nil) == 2_000)
        #expect(try store.nextRunAfter(queues: ["other", "none"]) == 2_000)
        #expect(try store.nextRunAfter(queues: ["none"]) == nil)
        // Take the runnable ones: only the blocker (and the waiting jobs) stay queued.
        let taken = try store.claim(owner: "w1", queues: nil, limit: 3, leaseMs: 30_000, now: 6_600)
        #expect(taken.count == 3)
        #expect(try store.nextRunAfter(queues: ["default"]) == 7_000)
        #expect(try store.claim(owner: "w1", queues: nil, limit: 1, leaseMs: 30_000, now: 7_000).count == 1)
        #expect(try store.nextRunAfter(queues: nil) == nil)
    }

    @Test("a claim across every queue reads the partial index of queued jobs in claim order, without sorting the queue")
    func claimAcrossQueuesReadsTheQueuedIndex() throws {
        let fixture = try StoreFixture("store-claim-plan")
        defer { fixture.remove() }
        let sqlite = try #require(fixture.sqlite)
        let plan = { (queues: [String]?) throws -> String in
            try sqlite.withConnection { (connection) throws(StoreError) -> String in
                let values: [SQLiteValue] = [.integer(0)] + (queues ?? []).map(SQLiteValue.text) + [.integer(10)]
                return try connection.query("EXPLAIN QUERY PLAN " + SQLiteConnection.claimSQL(queues: queues), values) { row in
                    row.text(3)
                }.joined(separator: "; ")
            }
        }
        let everyQueue = try plan(nil)
        #expect(everyQueue.contains("jobs_queued_claim_order") && !everyQueue.contains("TEMP B-TREE"), "\(everyQueue)")
        #expect(try plan(["default"]).contains("jobs_claim"))
        // The order is the same as through `jobs_claim`: priority, run_after, submission.
        let low = try fixture.submit(uploadSpec(priority: 0), now: 1_000)
        let high = try fixture.submit(uploadSpec(priority: 5, queue: "other"), now: 1_100)
        let early = try fixture.submit(uploadSpec(priority: 0), now: 900)
        let claims = try fixture.store.claim(owner: "w1", queues: nil, limit: 10, leaseMs: 30_000, now: 2_000)
        #expect(claims.map(\.record.id) == [high, early, low])
    }

    @Test("a batch claim stops at its limit", arguments: Engine.allCases)
    func claimLimit(engine: Engine) throws {
        let fixture = try StoreFixture("store-claim-limit", engine: engine)
        defer { fixture.remove() }
        _ = try fixture.store.submit((0..<5).map { _ in uploadSpec() }, actor: "cli:test", now: 1)
        #expect(try fixture.store.claim(owner: "w", queues: nil, limit: 3, leaseMs: 10, now: 2).count == 3)
        #expect(try fixture.store.counts() == [.running: 3, .queued: 2])
    }

    @Test("heartbeats extend held leases and report lost ones", arguments: Engine.allCases)
    func heartbeat(engine: Engine) throws {
        let fixture = try StoreFixture("store-heartbeat", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        _ = try store.submit([uploadSpec(), uploadSpec()], actor: "cli:test", now: 1_000)
        let claims = try store.claim(owner: "w1", queues: nil, limit: 2, leaseMs: 1_000, now: 1_000)
        let (kept, dropped) = (claims[0], claims[1])

        // Only `kept` heartbeats; `dropped` expires and is rescued.
        #expect(try store.heartbeat(owner: "w1", leases: [kept.record.id: kept.token], leaseMs: 1_000, now: 1_800).isEmpty)
        #expect(try store.rescueExpired(now: 2_100, actor: "w2").map(\.id) == [dropped.record.id])
        let leases = [kept.record.id: kept.token, dropped.record.id: dropped.token]
        #expect(try store.heartbeat(owner: "w1", leases: leases, leaseMs: 1_000, now: 2_200) == [dropped.record.id])
        // Another owner's heartbeat, or a wrong token, does not hold the lease.
        #expect(try store.heartbeat(owner: "w9", leases: [kept.record.id: kept.token], leaseMs: 1_000, now: 2_300)
            == [kept.record.id])
        #expect(try store.heartbeat(owner: "w1", leases: [kept.record.id: kept.token + 100], leaseMs: 1_000, now: 2_300)
            == [kept.record.id])
        // Both engines keep the expiry in the job row (PostgreSQL's schema 11, SQLite's schema 10).
        #expect(try fixture.scalar("SELECT lease_expires_at_ms FROM jobs WHERE id = ?", [.text(kept.record.id)]) == "3200")
        #expect(try store.job(kept.record.id)?.state == .running)
    }

    @Test("an expired lease is rescued back to the queue with its resume point", arguments: Engine.allCases)
    func rescue(engine: Engine) throws {
        let fixture = try StoreFixture("store-rescue", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let claim = try fixture.running(now: 1_000, leaseMs: 1_000)
        let id = claim.record.id
        let point = ResumePoint.download(bytesWritten: 4096, generation: "7", etag: nil, tempPath: "/tmp/x.part")
        try fixture.append(PendingEvent(jobID: id, type: .progress, actor: workerName, leaseToken: claim.token,
                                        data: EventData(bytesDone: 4096, bytesTotal: 8192, resumePoint: point)), now: 1_500)
        #expect(try store.rescueExpired(now: 1_999, actor: "w2").isEmpty)
        #expect(try store.rescueExpired(now: 2_000, actor: "w2").map(\.id) == [id])
        let record = try #require(try store.job(id))
        #expect(record.state == .queued && record.runAfterMs == 2_000)
        #expect(record.resumePoint == point && record.bytesDone == 4096)
        #expect(record.leaseOwner == nil && record.leaseToken == nil && record.attempts == 1)
        #expect(try store.events(jobID: id).last?.type == .leaseExpired)
        #expect(try fixture.scalar("SELECT lease_expires_at_ms FROM jobs WHERE id = ?", [.text(id)]) == nil)
        // Rescuing again finds nothing.
        #expect(try store.rescueExpired(now: 9_000, actor: "w2").isEmpty)
    }

    @Test("a job whose worker keeps dying fails with retryLimitExceeded once its attempts are used up", arguments: Engine.allCases)
    func rescueExhausted(engine: Engine) throws {
        let fixture = try StoreFixture("store-rescue-exhausted", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let id = try fixture.submit(uploadSpec(maxAttempts: 2), now: 0)
        for attempt in 1...2 {
            let now = Int64(attempt) * 10_000
            let claims = try store.claim(owner: "w\(attempt)", queues: nil, limit: 1, leaseMs: 1_000, now: now)
            #expect(claims.first?.record.attempts == attempt)
            #expect(try store.rescueExpired(now: now + 1_000, actor: "rescuer").map(\.id) == [id])
        }
        let record = try #require(try store.job(id))
        #expect(record.state == .failed && record.error?.code == .retryLimitExceeded)
        #expect(record.error?.message.contains("lost its lease") == true)
        #expect(record.finishedAtMs == 21_000)
        #expect(try store.events(jobID: id).map(\.type)
            == [.submitted, .claimed, .leaseExpired, .claimed, .failed])
    }

    @Test("a pause or cancel requested before a rescue is honoured by the rescue itself", arguments: Engine.allCases)
    func requestsSurviveRescue(engine: Engine) throws {
        let fixture = try StoreFixture("store-rescue-requests", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let pausing = try fixture.running(now: 1_000, leaseMs: 100).record.id
        let cancelling = try fixture.running(now: 1_000, leaseMs: 100).record.id
        _ = try store.requestPause(id: pausing, actor: "cli:test", now: 1_050)
        _ = try store.requestCancel(id: cancelling, actor: "cli:test", now: 1_050)
        #expect(Set(try store.rescueExpired(now: 2_000, actor: "w2").map(\.id)) == [pausing, cancelling])
        #expect(try store.job(pausing)?.state == .paused)
        #expect(try store.job(cancelling)?.state == .cancelled)
        #expect(try store.claim(owner: "w2", queues: nil, limit: 5, leaseMs: 100, now: 3_000).isEmpty)
        #expect(try store.job(pausing)?.state == .paused)
        #expect(try store.job(cancelling)?.state == .cancelled)
        #expect(try store.job(cancelling)?.error?.code == .cancelled)
    }

    @Test("data_version changes when another connection commits")
    func dataVersion() throws {
        let fixture = try StoreFixture("store-data-version")
        defer { fixture.remove() }
        let watcher = try EventStore(path: fixture.path, readOnly: true)
        let before = try watcher.dataVersion()
        #expect(try watcher.dataVersion() == before)
        try fixture.submit()
        #expect(try watcher.dataVersion() != before)
    }

    @Test("appends and a claim share one transaction: the claim sees the appends, a refusal sinks neither", arguments: Engine.allCases)
    func appendThenClaim(engine: Engine) throws {
        let fixture = try StoreFixture("store-append-claim", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let running = try fixture.running(now: 1_000)
        let next = try fixture.submit(now: 1_100)
        let id = running.record.id
        let outcome = try store.append([
            PendingEvent(jobID: id, type: .started, actor: workerName, leaseToken: running.token),
            PendingEvent(jobID: id, type: .progress, actor: workerName, leaseToken: running.token,
                         data: EventData(bytesDone: 3, bytesTotal: 3)),
            PendingEvent(jobID: id, type: .succeeded, actor: workerName, leaseToken: running.token + 99,
                         data: EventData(result: JobResult())),
            PendingEvent(jobID: id, type: .succeeded, actor: workerName, leaseToken: running.token,
                         data: EventData(result: JobResult(size: 3))),
        ], now: 2_000, thenClaim: ClaimRequest(owner: workerName, queues: nil, limit: 4, leaseMs: 1_000, now: 2_000))

        #expect(outcome.appended.map { (try? $0.get())?.version } == [3, 4, nil, 5])
        guard case .failure(.staleLease) = outcome.appended[2] else {
            Issue.record("a stale token must be refused, got \(outcome.appended[2])")
            return
        }
        let claimed = try outcome.claimed.get()
        #expect(claimed.map(\.record.id) == [next])
        #expect(claimed.first.map { $0.token > running.token } == true)
        #expect(try store.job(id)?.state == .succeeded)
        #expect(try store.job(id)?.bytesDone == 3)
        #expect(try store.job(next)?.state == .running)
        #expect(try store.replay(verify: true).isConsistent)

        // Nothing to claim (or an empty request): the appends still commit.
        let again = try store.append([
            PendingEvent(jobID: next, type: .started, actor: workerName, leaseToken: claimed[0].token),
        ], now: 3_000, thenClaim: ClaimRequest(owner: workerName, queues: [], limit: 4, leaseMs: 1_000, now: 3_000))
        #expect(try again.claimed.get().isEmpty)
        #expect(try again.appended[0].get().version == 3)
    }
    @Test("group commits far larger than SQLite's default statement-journal spill keep each savepoint's rollback exact")
    func largeGroupCommits() throws {
        // Every event runs in its own savepoint; its undo pages stay in memory up to 4 MiB instead of
        // spilling to a temporary file after 64 KiB. A claim of 150 jobs and a batch of 450 events go far
        // past 64 KiB, and the refused events in between must still leave nothing behind.
        #expect(SQLiteConnection.isProcessConfigured)
        let fixture = try StoreFixture("store-large-group-commit")
        defer { fixture.remove() }
        let store = fixture.store
        let count = 150
        let ids = try (0..<count).map { index in try fixture.submit(now: 1_000 + Int64(index)) }
        let claimed = try store.append([], now: 2_000,
                                       thenClaim: ClaimRequest(owner: workerName, queues: nil, limit: count, leaseMs: 60_000, now: 2_000))
        let claims = try claimed.claimed.get()
        #expect(claims.map(\.record.id) == ids)
        var events: [PendingEvent] = []
        for claim in claims {
            let id = claim.record.id
            events += try [
                PendingEvent(jobID: id, type: .started, actor: workerName, leaseToken: claim.token,
                             data: EventData(attempt: 1, bytesDone: 0)),
                PendingEvent(jobID: id, type: .succeeded, actor: workerName, leaseToken: claim.token + 1_000_000,
                             data: EventData(bytesDone: 3, bytesTotal: 3, result: JobResult(size: 3))),
                PendingEvent(jobID: id, type: .succeeded, actor: workerName, leaseToken: claim.token,
                             data: EventData(bytesDone: 3, bytesTotal: 3, result: JobResult(size: 3, data: Data("abc".utf8)))),
            ]
        }
        let outcomes = try store.append(events, now: 3_000)
        #expect(outcomes.count == 3 * count)
        for (index, outcome) in outcomes.enumerated() {
            switch (index % 3, outcome) {
            case (0, .success(let event)): #expect(event.version == 3)
            case (1, .failure(.staleLease)): break
            case (2, .success(let event)): #expect(event.version == 4)
            default: Issue.record("event \(index): unexpected \(outcome)")
            }
        }
        for id in ids {
            let job = try #require(try store.job(id))
            #expect(job.state == .succeeded && job.version == 4 && job.bytesDone == 3)
            #expect(try store.events(jobID: id).map(\.payload.type) == [.submitted, .claimed, .started, .succeeded])
        }
        #expect(try store.replay(verify: true).isConsistent)
    }
    static func walAutocheckpoint(_ store: EventStore) throws -> Int? {
        try store.withConnection { (connection) throws(StoreError) -> Int? in
            try connection.first("PRAGMA wal_autocheckpoint") { row in row.int(0) }
        }
    }

    @Test("a writable store checkpoints its WAL every 4,000 pages; a read-only one leaves the setting alone")
    func walCheckpointInterval() throws {
        let fixture = try StoreFixture("store-wal-checkpoint")
        defer { fixture.remove() }
        let store = try #require(fixture.sqlite)
        #expect(try Self.walAutocheckpoint(store) == 4_000)
        _ = try fixture.submit()
        let reader = try EventStore(path: fixture.path, readOnly: true)
        #expect(try Self.walAutocheckpoint(reader) == 1_000)
        // Commits past a checkpoint still read back whole.
        let ids = try (0..<50).map { index in try fixture.submit(now: 2_000 + Int64(index)) }
        #expect(try ids.allSatisfy { try store.job($0)?.state == .queued })
        #expect(try store.replay(verify: true).isConsistent)
    }
}
