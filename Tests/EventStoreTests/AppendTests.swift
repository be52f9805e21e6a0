import Foundation
import JobModel
import Testing
@testable import EventStore
import TestSupport

@Suite("Appending events", .onTestThreads)
struct AppendTests {
    @Test("UPDATE and DELETE on events are refused by triggers", arguments: Engine.allCases)
    func appendOnly(engine: Engine) throws {
        let fixture = try StoreFixture("store-appendonly", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit()
        #expect {
            try fixture.sql("UPDATE events SET actor = 'mallory' WHERE job_id = ?", [.text(id)])
        } throws: { error in
            "\(error)".contains("append-only")
        }
        #expect {
            try fixture.sql("DELETE FROM events WHERE job_id = ?", [.text(id)])
        } throws: { error in
            "\(error)".contains("append-only")
        }
        #expect(throws: StoreError.self) { try fixture.sql("DELETE FROM events") }
        #expect(try fixture.store.events(jobID: id).map(\.actor) == ["cli:test"])
    }

    @Test("an expected version that is not current is a version conflict", arguments: Engine.allCases)
    func versionConflict(engine: Engine) throws {
        let fixture = try StoreFixture("store-version", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit()
        let outcomes = try fixture.store.append([
            PendingEvent(jobID: id, type: .paused, actor: "cli:a", expectedVersion: 1),
            PendingEvent(jobID: id, type: .resumeRequested, actor: "cli:b", expectedVersion: 1),
            PendingEvent(jobID: id, type: .resumeRequested, actor: "cli:c", expectedVersion: 2),
        ], now: 2_000)
        #expect(try outcomes[0].get().version == 2)
        #expect(throws: StoreError.versionConflict(expected: 1, actual: 2)) { try outcomes[1].get() }
        #expect(try outcomes[2].get().version == 3)
        let events = try fixture.store.events(jobID: id)
        #expect(events.map(\.version) == [1, 2, 3])
        #expect(events.map(\.type) == [.submitted, .paused, .resumeRequested])
        #expect(try fixture.store.job(id)?.state == .queued)
    }

    @Test("impossible transitions are refused without sinking the rest of the batch", arguments: Engine.allCases)
    func invalidTransition(engine: Engine) throws {
        let fixture = try StoreFixture("store-transition", engine: engine)
        defer { fixture.remove() }
        let cancelledID = try fixture.submit()
        _ = try fixture.store.requestCancel(id: cancelledID, actor: "cli:test", now: 1_500)
        let other = try fixture.submit()
        let outcomes = try fixture.store.append([
            PendingEvent(jobID: cancelledID, type: .succeeded, actor: "w", data: EventData(result: JobResult(size: 1))),
            PendingEvent(jobID: other, type: .paused, actor: "cli:test"),
            PendingEvent(jobID: "01NOSUCHJOB000000000000000", type: .paused, actor: "cli:test"),
            PendingEvent(jobID: other, actor: "w", payload: .claimed(leaseOwner: "w", leaseExpiresAtMs: 9_000, attempt: 1)),
        ], now: 2_000)
        #expect(throws: StoreError.invalidTransition(jobID: cancelledID, state: .cancelled, event: .succeeded)) {
            try outcomes[0].get()
        }
        #expect(try outcomes[1].get().type == .paused)
        #expect(throws: StoreError.notFound("01NOSUCHJOB000000000000000")) { try outcomes[2].get() }
        #expect(throws: StoreError.invalidControl("'claimed' events are written by submit and claim, not reported")) {
            try outcomes[3].get()
        }
        #expect(try fixture.store.job(cancelledID)?.state == .cancelled)
        #expect(try fixture.store.job(other)?.state == .paused)
        #expect(try fixture.store.lastSeq() == 4)
    }

    @Test("a worker whose lease was rescued cannot write; the new holder can", arguments: Engine.allCases)
    func staleLeaseFencing(engine: Engine) throws {
        let fixture = try StoreFixture("store-fencing", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let first = try fixture.running(now: 1_000, leaseMs: 1_000)
        let id = first.record.id
        // The lease holder can write while it holds the lease.
        try fixture.append(PendingEvent(jobID: id, type: .progress, actor: workerName, leaseToken: first.token,
                                        data: EventData(bytesDone: 10)), now: 1_500)
        // Its lease expires and someone rescues the job; another worker claims it.
        #expect(try store.rescueExpired(now: 2_500, actor: "worker:rescuer").map(\.id) == [id])
        let second = try #require(try store.claim(owner: "worker:two", queues: nil, limit: 1, leaseMs: 10_000, now: 3_000).first)
        #expect(second.record.id == id && second.token > first.token)

        let outcomes = try store.append([
            PendingEvent(jobID: id, type: .succeeded, actor: workerName, leaseToken: first.token,
                         data: EventData(result: JobResult())),
            PendingEvent(jobID: id, type: .progress, actor: "worker:two", leaseToken: second.token,
                         data: EventData(bytesDone: 20)),
        ], now: 3_100)
        #expect(throws: StoreError.staleLease(jobID: id, token: first.token)) { try outcomes[0].get() }
        #expect(try outcomes[1].get().leaseToken == second.token)
        let record = try #require(try store.job(id))
        #expect(record.state == .running && record.bytesDone == 20 && record.leaseToken == second.token)
        #expect(record.attempts == 2)
    }

    @Test("a lease token is refused once the job has left the running state", arguments: Engine.allCases)
    func staleLeaseAfterPause(engine: Engine) throws {
        let fixture = try StoreFixture("store-fencing-paused", engine: engine)
        defer { fixture.remove() }
        let claim = try fixture.running()
        _ = try fixture.store.requestPause(id: claim.record.id, actor: "cli:test", now: 1_100)
        try fixture.append(PendingEvent(jobID: claim.record.id, type: .paused, actor: workerName, leaseToken: claim.token),
                           now: 1_200)
        #expect(throws: StoreError.staleLease(jobID: claim.record.id, token: claim.token)) {
            try fixture.append(PendingEvent(jobID: claim.record.id, type: .progress, actor: workerName,
                                            leaseToken: claim.token), now: 1_300)
        }
    }

    /// 390 bytes: more than a result keeps in its event.
    static let blobBytes = Data(String(repeating: "hello, blobs ", count: 30).utf8)

    @Test("download-memory bytes over 256 go to blobs once per content and are referenced by hash", arguments: Engine.allCases)
    func blobs(engine: Engine) throws {
        let fixture = try StoreFixture("store-blobs", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        let bytes = Self.blobBytes
        var hashes: [String] = []
        for _ in 0..<2 {
            let claim = try fixture.running(memorySpec())
            let event = try fixture.append(PendingEvent(
                jobID: claim.record.id, type: .succeeded, actor: workerName, leaseToken: claim.token,
                data: EventData(result: JobResult(size: Int64(bytes.count), data: bytes))))
            let result = try #require(event.data.result)
            #expect(result.data == nil)
            let hash = try #require(result.blob)
            hashes.append(hash)
            #expect(try store.job(claim.record.id)?.result == result)
            // The log holds the reference, never the bytes.
            let stored = try #require(try store.events(jobID: claim.record.id).last)
            #expect(stored.data.result?.data == nil && stored.data.result?.blob == hash)
        }
        #expect(hashes[0] == hashes[1])
        #expect(hashes[0] == "35811bec9fb0f1f69c05278a3f82f9ac72b8f6723f5eba55c9be3c266eb9b82b")  // sha256sum of the bytes
        #expect(try store.blob(sha256: hashes[0]) == bytes)
        #expect(try store.blob(sha256: hashes[0].uppercased()) == bytes)
        #expect(try store.blob(sha256: String(repeating: "0", count: 64)) == nil)
        #expect(try fixture.scalar("SELECT count(*) FROM blobs") == "1")
        #expect(throws: StoreError.self) { try fixture.sql("UPDATE blobs SET size = 0") }
    }

    @Test("download-memory results of at most 256 bytes stay in their event; 257 go to the blobs", arguments: Engine.allCases)
    func smallResultsInTheEvent(engine: Engine) throws {
        let fixture = try StoreFixture("store-inline-result", engine: engine)
        defer { fixture.remove() }
        let store = fixture.store
        for size in [0, 1, 256, 257] {
            let bytes = Data((0..<size).map { UInt8(($0 * 31) & 0xFF) })
            let claim = try fixture.running(memorySpec())
            let event = try fixture.append(PendingEvent(
                jobID: claim.record.id, type: .succeeded, actor: workerName, leaseToken: claim.token,
                data: EventData(result: JobResult(size: Int64(size), data: bytes))))
            let result = try #require(event.data.result)
            let stored = try #require(try store.events(jobID: claim.record.id).last?.data.result)
            #expect(stored == result)
            #expect(try store.job(claim.record.id)?.result == result)
            #expect(result.bytesSHA256 == HashedBytes(bytes).sha256)
            if size <= PreparedPayload.inlineResultLimit {
                #expect(result.data == bytes && result.blob == nil, "\(size) bytes")
                #expect(try store.blob(sha256: HashedBytes(bytes).sha256) == nil)
            } else {
                #expect(result.data == nil && result.blob == HashedBytes(bytes).sha256, "\(size) bytes")
                #expect(try store.blob(sha256: HashedBytes(bytes).sha256) == bytes)
            }
        }
        #expect(try fixture.scalar("SELECT count(*) FROM blobs") == "1")
        #expect(PreparedPayload.inlineResultLimit == 256)
    }

    /// A worker's event carries its payload readied for the store (`PendingEvent.prepared`): a
    /// `succeeded`'s bytes hashed, the payload as the log keeps it and its JSON, so the store's thread
    /// neither hashes nor encodes it.
    @Test("a payload is readied where the event is made, and follows the payload")
    func preparedWhereMade() throws {
        let bytes = Self.blobBytes
        let sha256 = "35811bec9fb0f1f69c05278a3f82f9ac72b8f6723f5eba55c9be3c266eb9b82b"  // sha256sum of the bytes
        let progress = TransferProgress(bytesDone: 390, bytesTotal: 390)
        var pending = PendingEvent(jobID: "j", actor: workerName, leaseToken: 1,
                                   payload: .succeeded(progress, result: JobResult(size: 390, data: bytes)))
        #expect(pending.hashedResult == HashedBytes(bytes))
        #expect(pending.hashedResult?.sha256 == sha256)
        let stored = EventPayload.succeeded(progress, result: JobResult(size: 390, blob: sha256))
        #expect(pending.prepared.stored == stored, "the log keeps the hash, not the bytes")
        #expect(pending.prepared.storedJSON == (try PayloadJSON.encode(stored)))
        let other = Data(String(repeating: "other bytes ", count: 30).utf8)
        pending.payload = .succeeded(TransferProgress(bytesDone: 360, bytesTotal: 360), result: JobResult(size: 360, data: other))
        #expect(pending.hashedResult?.bytes == other && pending.hashedResult?.sha256 == HashedBytes(other).sha256)
        #expect(pending.hashedResult?.sha256 != sha256)
        pending.payload = .succeeded(TransferProgress(bytesDone: 1, bytesTotal: 1), result: JobResult(size: 1))
        #expect(pending.hashedResult == nil, "no bytes, no hash")
        #expect(pending.prepared.stored == pending.payload)
        pending.payload = .succeeded(TransferProgress(bytesDone: 5, bytesTotal: 5), result: JobResult(size: 5, data: Data("small".utf8)))
        #expect(pending.hashedResult == nil, "at most 256 bytes stay in the event")
        #expect(pending.prepared.stored == pending.payload)
        #expect(pending.prepared.storedJSON == (try PayloadJSON.encode(pending.payload)))
        let started = PendingEvent(jobID: "j", actor: workerName, payload: .started(TransferProgress(bytesDone: 0)))
        #expect(started.hashedResult == nil)
        #expect(started.prepared.storedJSON == (try PayloadJSON.encode(started.payload)))
    }

    @Test("a decided payload other than the one readied is readied by the store: bytes under their own hash",
          arguments: Engine.allCases)
    func storedUnderTheirOwnHash(engine: Engine) throws {
        let fixture = try StoreFixture("store-blob-hash", engine: engine)
        defer { fixture.remove() }
        let bytes = Self.blobBytes
        let claim = try fixture.running(memorySpec())
        let payload = EventPayload.succeeded(TransferProgress(bytesDone: 390, bytesTotal: 390), result: JobResult(size: 390, data: bytes))
        // Another payload readied, handed with this one: the store readies what it stores itself.
        let other = Data(String(repeating: "other bytes ", count: 30).utf8)
        let stranger = PreparedPayload(.succeeded(TransferProgress(bytesDone: 360, bytesTotal: 360),
                                                  result: JobResult(size: 360, data: other)))
        let result = try fixture.perform(.report(payload), jobID: claim.record.id, leaseToken: claim.token, prepared: stranger, now: 2_000)
        let event = try #require(result.events.first)
        let blob = try #require(event.data.result?.blob)
        #expect(blob == HashedBytes(bytes).sha256)
        #expect(event.data.result?.size == 390 && event.data.result?.data == nil)
        #expect(try fixture.store.blob(sha256: blob) == bytes)
        #expect(try fixture.store.blob(sha256: try #require(stranger.hashedResult).sha256) == nil)
        #expect(try fixture.scalar("SELECT data FROM events WHERE job_id = ? AND type = 'succeeded'", [.text(claim.record.id)])
                == (try PayloadJSON.encode(event.payload)))
    }

    @Test("payloads are stored as JSON with sorted keys", arguments: Engine.allCases)
    func sortedKeys(engine: Engine) throws {
        let fixture = try StoreFixture("store-json", engine: engine)
        defer { fixture.remove() }
        let id = try fixture.submit()
        let data = try fixture.scalar("SELECT data FROM events WHERE job_id = ?", [.text(id)])
        let text = try #require(data)
        let spec = try #require(text.range(of: "\"spec\""))
        let version = try #require(text.range(of: "\"v\""))
        #expect(spec.lowerBound < version.lowerBound)
    }

    @Test("an event without the fields its type needs cannot even be queued", arguments: [
        (EventType.succeeded, "result"), (.failed, "error"), (.attemptFailed, "error"), (.claimed, "leaseOwner"),
    ])
    func malformedPendingEvent(type: EventType, field: String) {
        #expect(throws: StoreError.invalidControl(
            "cannot append to job J: \(EventPayloadError(type: type, problem: "has no '\(field)'"))")) {
            try PendingEvent(jobID: "J", type: type, actor: "w")
        }
    }
}

@Suite("file modes in messages")
struct OctalModeTests {
    @Test("a file's mode reads as chmod takes it, four digits at least", arguments: [
        (mode_t(0), "0000"), (mode_t(0o600), "0600"), (mode_t(0o644), "0644"), (mode_t(0o4755), "04755"),
        (mode_t(0o100444), "0444"), (mode_t(0o7), "0007"),
    ])
    func octal(mode: mode_t, shown: String) {
        #expect(EventStore.octalMode(mode) == shown)
    }
}
