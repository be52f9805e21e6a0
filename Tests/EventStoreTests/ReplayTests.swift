import Foundation
import JobModel
import Testing
@testable import EventStore
import TestSupport

@Suite("Replaying the log", .onTestThreads)
struct ReplayTests {
    /// Jobs in every state, reached through every kind of event.
    static func populate(_ fixture: StoreFixture) throws -> [String: String] {
        let store = fixture.store
        var ids: [String: String] = [:]
        let specs = [uploadSpec(key: "a"), memorySpec(key: "b"), uploadSpec(priority: 3), uploadSpec(), uploadSpec(),
                     uploadSpec(), uploadSpec(maxAttempts: 1), uploadSpec()]
        let outcomes = try store.submit(specs, actor: "cli:test", now: 1_000)
        ids["queued"] = outcomes[7].id
        let claims = try store.claim(owner: "w1", queues: nil, limit: 7, leaseMs: 5_000, now: 2_000)
        let byID = Dictionary(uniqueKeysWithValues: claims.map { ($0.record.id, $0.token) })
        func token(_ index: Int) -> Int64 { byID[outcomes[index].id] ?? -1 }
        func pending(_ index: Int, _ type: EventType, _ data: EventData = EventData()) throws -> PendingEvent {
            try PendingEvent(jobID: outcomes[index].id, type: type, actor: "w1", leaseToken: token(index), data: data)
        }
        let point = ResumePoint.upload(sessionURI: "http://127.0.0.1:1/s", confirmedOffset: 256, total: 1024)
        let results = try store.append([
            pending(0, .started),
            pending(0, .progress, EventData(bytesDone: 256, bytesTotal: 1024, resumePoint: point)),
            pending(0, .succeeded, EventData(result: JobResult(object: StorageObject(bucket: "b", name: "o", size: 1024),
                                                               size: 1024, md5: "bWQ1"))),
            pending(1, .started),
            pending(1, .succeeded, EventData(result: JobResult(size: 5, data: Data("bytes".utf8)))),
            pending(2, .started),
            pending(2, .progress, EventData(bytesDone: 256, resumePoint: point)),
            pending(3, .attemptFailed, EventData(error: StorageError(.unknown, "HTTP 503", httpStatus: 503, retryable: true,
                                                                      retryAfter: 1.5), retryAtMs: 9_000)),
            pending(4, .failed, EventData(error: StorageError(.unauthorized, "403", httpStatus: 403))),
            pending(5, .progress, EventData(bytesDone: 100)),
        ], now: 3_000)
        for result in results { _ = try result.get() }
        ids["succeeded"] = outcomes[0].id
        ids["blob"] = outcomes[1].id
        ids["failed"] = outcomes[4].id
        ids["retrying"] = outcomes[3].id

        // Paused at its resume point, then resumed (queued), then claimed again (running).
        _ = try store.requestPause(id: outcomes[2].id, actor: "cli:test", now: 3_100)
        _ = try fixture.append(pending(2, .paused, EventData(resumePoint: point)), now: 3_200)
        _ = try store.requestResume(id: outcomes[2].id, actor: "cli:test", now: 3_300)
        ids["resumed"] = outcomes[2].id
        // Cancelled while running, then retried.
        _ = try store.requestCancel(id: outcomes[5].id, actor: "cli:test", now: 3_400)
        _ = try fixture.append(pending(5, .cancelled, EventData(reason: "cancel requested")), now: 3_500)
        _ = try store.retry(id: outcomes[5].id, actor: "cli:test", now: 3_600)
        ids["retried"] = outcomes[5].id
        // Rescued on its only attempt: failed retryLimitExceeded.
        _ = try store.heartbeat(owner: "w1", leases: [outcomes[2].id: token(2)], leaseMs: 1, now: 3_700)
        ids["exhausted"] = outcomes[6].id
        _ = try store.rescueExpired(now: 8_000, actor: "w2")
        let again = try store.claim(owner: "w3", queues: nil, limit: 10, leaseMs: 5_000, now: 10_000)
        #expect(!again.isEmpty)
        _ = try store.requestPause(id: outcomes[7].id, actor: "cli:test", now: 10_100)
        return ids
    }

    @Test("replay rebuilds the projection byte for byte, reports a corrupted row, and repairs it", arguments: Engine.allCases)
    func rebuildVerifyRepair(engine: Engine) throws {
        let fixture = try StoreFixture("store-replay", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let ids = try Self.populate(fixture)
        let states = try store.counts()
        #expect(states[.succeeded] == 2 && states[.failed] == 2 && (states[.running] ?? 0) >= 1)
        #expect(try store.job(ids["exhausted"] ?? "")?.error?.code == .retryLimitExceeded)
        #expect(try store.job(ids["retried"] ?? "")?.state == .running)

        // The stored projection is exactly the fold of the log.
        let verified = try store.replay(verify: true)
        #expect(verified.differences == [])
        #expect(verified.problems == [])
        let lastSeq = try store.lastSeq()
        #expect(verified.jobsRebuilt == 8)
        #expect(Int64(verified.eventsRead) == lastSeq)
        #expect(!verified.rewritten)
        for id in ids.values {
            #expect(JobRecord.folding(try store.events(jobID: id)) == (try store.job(id)))
        }

        // Rebuilding from scratch gives the same bytes.
        let original = try fixture.allRows()
        let rebuilt = try store.replay(verify: false)
        #expect(rebuilt.rewritten && rebuilt.differences.isEmpty)
        #expect(try fixture.allRows() == original)

        // Corrupt one column of one row behind the store's back.
        let victim = try #require(ids["resumed"])
        let truth = try #require(try store.job(victim))
        try fixture.sql("UPDATE jobs SET bytes_done = 999999 WHERE id = ?", [.text(victim)])
        let report = try store.replay(verify: true)
        #expect(report.differences == [ReplayDifference(jobID: victim, column: "bytes_done", stored: "999999",
                                                        rebuilt: String(truth.bytesDone))])
        #expect(try store.job(victim)?.bytesDone == 999999)  // verify wrote nothing

        // Without verify, the projection is repaired from the log.
        let repair = try store.replay(verify: false)
        #expect(repair.differences.count == 1 && repair.rewritten)
        #expect(try store.job(victim) == truth)
        #expect(try store.replay(verify: true).isConsistent)
        #expect(try fixture.allRows() == original)
    }

    @Test("an error equal to the last one but spelt in other bytes is written: the row stays byte for byte", arguments: Engine.allCases)
    func canonicallyEquivalentText(engine: Engine) throws {
        let fixture = try StoreFixture("store-replay-bytes", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let id = try fixture.submit(uploadSpec(maxAttempts: 5))
        // "café" precomposed, then decomposed: Swift's == calls them equal; their UTF-8 differs.
        for (attempt, message) in ["caf\u{E9}", "cafe\u{301}"].enumerated() {
            let now = Int64(2_000 + attempt * 1_000)
            let claim = try #require(try store.claim(owner: "w", queues: nil, limit: 1, leaseMs: 500, now: now).first)
            try fixture.append(PendingEvent(jobID: id, type: .attemptFailed, actor: "w", leaseToken: claim.token,
                                            data: EventData(error: StorageError(.unknown, message), retryAtMs: now)),
                               now: now)
        }
        #expect(try store.job(id)?.error?.message.utf8.elementsEqual("cafe\u{301}".utf8) == true)
        #expect(try store.replay(verify: true).isConsistent)
    }

    @Test("specs that differ only in how a name is spelt in Unicode keep their own bytes", arguments: Engine.allCases)
    func canonicallyEquivalentSpecs(engine: Engine) throws {
        let fixture = try StoreFixture("store-spec-bytes", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let names = ["/tmp/caf\u{E9}.bin", "/tmp/cafe\u{301}.bin"]  // equal to Swift's ==, different files
        let ids = try store.submit(names.map { JobSpec(kind: .downloadFile, source: "gs://b/o", destination: $0) },
                                   actor: "cli:test", now: 1_000).map(\.id)
        for _ in 0..<2 {
            for (id, name) in zip(ids, names) {
                let destination = try #require(try store.job(id)?.spec.destination)
                #expect(destination.utf8.elementsEqual(name.utf8), "job \(id) read back another spelling")
            }
        }
    }

    @Test("replay notices missing and extra rows", arguments: Engine.allCases)
    func missingRows(engine: Engine) throws {
        let fixture = try StoreFixture("store-replay-rows", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit()
        try fixture.sql("DELETE FROM jobs WHERE id = ?", [.text(id)])
        #expect(try fixture.store.replay(verify: true).differences
            == [ReplayDifference(jobID: id, column: "(row)", stored: nil, rebuilt: "present")])
        _ = try fixture.store.replay(verify: false)
        #expect(try fixture.store.job(id)?.state == .queued)
    }

    @Test("a read-only store can verify")
    func readOnlyVerify() throws {
        let fixture = try StoreFixture("store-replay-readonly")
        defer { fixture.remove() }
        _ = try Self.populate(fixture)
        let reader = try EventStore(path: fixture.path, readOnly: true)
        #expect(try reader.replay(verify: true).isConsistent)
        #expect(throws: StoreError.self) { _ = try reader.replay(verify: false) }
    }

    @Test("an event without the fields its type needs is reported as a problem; the rest of the log still replays", arguments: Engine.allCases)
    func malformedEventIsAProblem(engine: Engine) throws {
        let fixture = try StoreFixture("store-replay-malformed", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit()
        // What a broken tool could have written: a `submitted` without a spec, and a `claimed` without a lease.
        try fixture.sql("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, 1, 'submitted', 5, 'x', NULL, '{\"v\":1}')",
                        [.text("01BROKENJOB000000000000000")])
        try fixture.sql("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, 2, 'claimed', 6, 'x', 1, '{\"v\":1}')",
                        [.text(id)])
        let report = try fixture.store.replay(verify: true)
        #expect(report.eventsRead == 3 && report.jobsRebuilt == 1)
        #expect(report.problems.count == 2)
        #expect(report.problems.first?.contains("a 'submitted' event has no 'spec'") == true, "\(report.problems)")
        #expect(report.problems.last?.contains("a 'claimed' event has no 'leaseOwner'") == true, "\(report.problems)")
    }

    @Test("a replay that meets an event it cannot apply (a newer jobctl's type) rewrites nothing and says so", arguments: Engine.allCases)
    func unknownEventRewritesNothing(engine: Engine) throws {
        let fixture = try StoreFixture("store-replay-unknown", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit()
        try fixture.sql("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, 2, 'frobnicated', 6, 'x', NULL, '{\"v\":1}')",
                        [.text(id)])
        // A row the fold would change: a rewrite shows as the difference gone.
        try fixture.sql("UPDATE jobs SET priority = 42 WHERE id = ?", [.text(id)])
        // Not damage: the job is named as not checked, neither a difference nor a problem of the log.
        let before = try fixture.store.replay(verify: true)
        #expect(before.differences.isEmpty && before.problems.isEmpty && before.unchecked == [id: "frobnicated"], "\(before)")

        var message = ""
        do {
            let report = try fixture.store.replay(verify: false)
            Issue.record("replay rewrote the projection past an event it could not apply: \(report)")
        } catch {
            message = "\(error)"
        }
        print("replay:", message)
        #expect(message.contains("type 'frobnicated'") && message.contains("nothing was rewritten"), "\(message)")
        #expect(try fixture.store.job(id)?.priority == 42, "the projection was left as it was")
    }
}
