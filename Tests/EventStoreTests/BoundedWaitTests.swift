import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore
import PostgresStore

/// `JobStore.isWaitingWithinBounds(forAtLeastMs:)`, on which a worker feeds its service manager's watchdog
/// while its loop waits on the store (see `ServiceNotifier`, and `WatchdogStoreWaitTests` for a worker's).
@Suite("a store says whether its thread is held within its limits", .onTestThreads)
struct BoundedWaitTests {
    /// What the pings stand on: a store tells a call held in a wait it bounds (another process's lock,
    /// within the busy timeout) from an idle thread, and from a call held past its limits — a hang, which
    /// must not feed a watchdog.
    @Test func theStoreSaysWhetherItsCallIsHeldWithinItsLimits() async throws {
        let directory = try TemporaryDirectory("bounded-wait")
        defer { directory.remove() }
        let database = directory.file("jobs.db")
        // A busy timeout of 1 s: a call waits for locks up to 2 s, and is within its limits for 7 s.
        let store = try EventStore(path: database, mode: .create, busyTimeoutMs: 1_000)
        #expect(!store.isWaitingWithinBounds(forAtLeastMs: 0))

        let lock = try SQLiteWriteLock(database: database)
        let write = Task { try await store.run { try $0.raiseSweepWatermark(host: "test", to: 1) } }
        try await Task.sleep(for: .milliseconds(600))
        #expect(store.isWaitingWithinBounds(forAtLeastMs: 500))
        #expect(!store.isWaitingWithinBounds(forAtLeastMs: 5_000))
        await #expect(throws: StoreError.self) { try await write.value }
        lock.release()
        #expect(!store.isWaitingWithinBounds(forAtLeastMs: 0))

        // A call that holds the store's thread past those limits (here a sleep: nothing bounds it).
        let hung = Task { try await store.run { _ in usleep(8_500_000) } }
        try await Task.sleep(for: .milliseconds(1_500))
        #expect(store.isWaitingWithinBounds(forAtLeastMs: 1_000))
        try await Task.sleep(for: .milliseconds(6_000))
        #expect(!store.isWaitingWithinBounds(forAtLeastMs: 1_000))
        try await hung.value
    }

    /// PostgreSQL: a call waiting for a server gone silent is held within the limits until the answer limit
    /// gives its connection up; then the thread is idle again.
    @Test func aPostgresCallWaitingForASilentServerIsHeldWithinItsLimits() async throws {
        let server = try PostgresServer.shared()
        let database = try server.makeSchema("boundedwait")
        _ = try PostgresStore(url: database, mode: .create)
        let proxy = try TCPFaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let url = database.replacingOccurrences(of: "@127.0.0.1:\(server.port)/", with: "@127.0.0.1:\(proxy.port)/")
        let store = try PostgresStore(url: url, mode: .readWrite, answerTimeoutMs: 2_000)
        #expect(!store.isWaitingWithinBounds(forAtLeastMs: 0))
        proxy.partition()
        let read = Task { try await store.run { try $0.dataVersion() } }
        try await Task.sleep(for: .milliseconds(1_200))
        #expect(store.isWaitingWithinBounds(forAtLeastMs: 1_000))
        await #expect(throws: StoreError.self) { try await read.value }
        // The caller resumes before the thread has put the call down.
        try await Task.sleep(for: .milliseconds(200))
        #expect(!store.isWaitingWithinBounds(forAtLeastMs: 0))
        proxy.heal()
    }
}
