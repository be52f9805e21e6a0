import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

/// Runs `body(index)` on `count` threads at once and waits for all; returns the errors thrown.
///
/// Each thread opens its own `EventStore`, so its own SQLite connection: SQLite's file locks keep
/// connections apart exactly as they keep processes apart. (Real multi-process runs go through the
/// built `jobctl` binary in the CLI tests.)
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) throws -> Void) -> [String] {
    let failures = LockedList<String>()
    let done = DispatchSemaphore(value: 0)
    let start = DispatchSemaphore(value: 0)
    for index in 0..<count {
        let thread = Thread {
            defer { done.signal() }
            start.wait()
            do { try body(index) } catch { failures.append("thread \(index): \(error)") }
        }
        thread.start()
    }
    for _ in 0..<count { start.signal() }
    for _ in 0..<count { done.wait() }
    return failures.items
}

final class LockedList<Element>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [Element] = []
    func append(_ element: Element) { lock.withLock { storage.append(element) } }
    func append(contentsOf elements: [Element]) { lock.withLock { storage += elements } }
    var items: [Element] { lock.withLock { storage } }
}

@Suite("Concurrent connections", .onTestThreads)
struct ConcurrencyTests {
    @Test("connections opening a new file at once migrate it exactly once")
    func concurrentFirstOpen() throws {
        let directory = try TemporaryDirectory("store-first-open")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        let applied = LockedList<Int>()
        let failures = onThreads(4) { _ in
            let store = try EventStore(path: path)
            applied.append(contentsOf: store.appliedMigrations)
        }
        #expect(failures == [])
        #expect(applied.items.sorted() == Migrator.all.map(\.version))
    }

    @Test("concurrent claimers never claim a job twice and tokens stay unique")
    func concurrentClaims() throws {
        let fixture = try StoreFixture("store-concurrent-claims")
        defer { fixture.remove() }
        let path = fixture.path
        let total = 60
        _ = try fixture.store.submit((0..<total).map { _ in uploadSpec() }, actor: "cli:test", now: 1)
        let claims = LockedList<ClaimedJob>()
        let failures = onThreads(4) { index in
            let store = try EventStore(path: path)
            while true {
                let batch = try store.claim(owner: "w\(index)", queues: nil, limit: 3, leaseMs: 60_000, now: 10)
                if batch.isEmpty { break }
                claims.append(contentsOf: batch)
            }
        }
        #expect(failures == [])
        let claimed = claims.items
        #expect(claimed.count == total)
        #expect(Set(claimed.map(\.record.id)).count == total)
        #expect(Set(claimed.map(\.token)).count == total)
        #expect(try fixture.store.counts() == [.running: total])
        for claim in claimed {
            #expect(try fixture.store.job(claim.record.id)?.leaseToken == claim.token)
        }
    }
}
