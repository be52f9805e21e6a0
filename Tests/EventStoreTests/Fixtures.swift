import Foundation
import JobModel
import TestSupport
@testable import EventStore

/// A store in a fresh temporary directory; `remove()` deletes it.
struct StoreFixture {
    let directory: TemporaryDirectory
    let store: EventStore
    var path: String { directory.file("jobs.db") }

    init(_ label: String = "eventstore") throws {
        directory = try TemporaryDirectory(label)
        store = try EventStore(path: directory.file("jobs.db"))
    }

    func remove() { directory.remove() }

    /// Submits one job and returns its id.
    @discardableResult
    func submit(_ spec: JobSpec = uploadSpec(), now: Int64 = 1_000) throws -> String {
        try store.submit([spec], actor: "cli:test", now: now)[0].id
    }

    /// Submits and claims one job; returns the claim.
    func running(_ spec: JobSpec = uploadSpec(), now: Int64 = 1_000, leaseMs: Int64 = 30_000) throws -> ClaimedJob {
        let id = try submit(spec, now: now)
        let claims = try store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: leaseMs, now: now)
        guard let claim = claims.first, claim.record.id == id else {
            throw StoreError.invalidControl("expected to claim \(id), got \(claims.map(\.record.id))")
        }
        return claim
    }

    /// Appends one event and returns it, throwing its refusal.
    @discardableResult
    func append(_ pending: PendingEvent, now: Int64 = 2_000) throws -> JobEvent {
        try store.append(pending, now: now)
    }

    /// Runs raw SQL on the store's own connection (tests only).
    func sql(_ text: String, _ values: [SQLiteValue] = []) throws {
        try store.withConnection { (connection) throws(StoreError) in try connection.run(text, values) }
    }
}

let workerName = "worker:test"

func uploadSpec(key: String? = nil, priority: Int = 0, queue: String = "default", maxAttempts: Int = 3) -> JobSpec {
    JobSpec(kind: .uploadFile, source: "/tmp/source.bin", destination: "gs://bucket/object.bin", key: key,
            priority: priority, maxAttempts: maxAttempts, queue: queue)
}

func memorySpec(key: String? = nil) -> JobSpec {
    JobSpec(kind: .downloadMemory, source: "gs://bucket/small.txt", maxSize: 1024, key: key)
}
