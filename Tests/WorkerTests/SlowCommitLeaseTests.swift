import Foundation
import JobModel
import PostgresStore
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// A worker's leases outlive one of its commits that takes longer than a lease: renewing them does not
/// wait behind the commit (PostgreSQL: the renewals have a connection of their own).
@Suite("slow commit and leases", .onTestThreads) struct SlowCommitLeaseTests {
    /// Worker 1 (4 s leases) runs jobs A and B, their transfers held open by the test. Another session
    /// then locks the `events` table for 10 s — as a server slow to answer a commit, or a long commit of
    /// another session, would hold it — and worker 1 writes (pauses a parked job), so that write waits
    /// those 10 s on worker 1's connection, and the worker's loop behind it. Worker 2 (same lease) runs
    /// meanwhile and rescues every lease that ran out. Worker 1 must keep A and B: no `lease_expired`, no
    /// second `claimed`, and both succeed under their first token once the transfers are let go.
    /// The lease: 4 s. With 2 s, a fully loaded CI run lost one all the same (renewals every ~0.7 s, and
    /// the machine did not run the worker's renewal for the 1.3 s left; the test took 58 s there, 8 s
    /// alone): the test is about a commit longer than the lease, not about the scheduler's gaps.
    static let leaseMs: Int64 = 4_000

    @Test func leasesAreRenewedWhileACommitWaitsLongerThanTheLease() async throws {
        let server = try PostgresServer.shared()
        let directory = try TemporaryDirectory("slow-commit-lease")
        defer { directory.remove() }
        let database = try server.makeSchema("slowcommit")
        let schema = try #require(database.components(separatedBy: "search_path%3D").last)
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        for index in 0..<3 {
            try Data(repeating: UInt8(index), count: 64).write(to: URL(fileURLWithPath: directory.file("buckets/b/o-\(index).bin")))
        }
        let ids = try submit("""
            - {kind: download-memory, source: "file://b/o-0.bin"}
            - {kind: download-memory, source: "file://b/o-1.bin"}
            - {kind: download-memory, source: "file://b/o-2.bin", queue: parked}
            """, database: database, directory: directory)
        try #require(ids.count == 3)
        let (running, parked) = (Array(ids.prefix(2)), ids[2])

        let backend = HeldBackend(SmallJobTests.localRouter(directory))
        let store1 = try PostgresStore(url: database, mode: .readWrite)
        let store2 = try PostgresStore(url: database, mode: .readWrite)
        let reader = try PostgresStore(url: database, mode: .readOnly)
        let pool1 = WorkerPool(store: store1, backend: backend,
                               configuration: WorkerConfiguration(owner: "worker-1", concurrency: 2, queues: [JobSpec.defaultQueue],
                                                                  leaseMs: Self.leaseMs, claimAhead: 0, startedHoldMs: nil))
        let pool2 = WorkerPool(store: store2, backend: backend,
                               configuration: WorkerConfiguration(owner: "worker-2", concurrency: 2, queues: [JobSpec.defaultQueue],
                                                                  leaseMs: Self.leaseMs, claimAhead: 0, startedHoldMs: nil))
        let run1 = Task { try await pool1.run() }
        defer { pool1.beginShutdown() }
        let started = try await eventually(seconds: 60) { backend.transfersStarted == 2 }
        try #require(started, "worker 1 did not start both transfers")
        let run2 = Task { try await pool2.run() }
        defer { pool2.beginShutdown() }

        // The lock, held by a session of its own until the test ends it two and a half leases after worker 1's next
        // commit began waiting for it. Held for a fixed time instead, a fully loaded CI run saw it granted only just
        // before it ended, and the commit waited 5 ms. The psql that holds it runs on a thread of its own (not one
        // of the tasks' few); ended by `pg_cancel_backend`, it fails, and the lock goes with its transaction.
        let lockHolder = Mutex<Result<String, Error>?>(nil)
        Thread.detachNewThread {
            let result = Result {
                try server.psql(database: "postgres", """
                    SET search_path TO \(schema); BEGIN; LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE; SELECT pg_sleep(600); COMMIT;
                    """)
            }
            lockHolder.withLock { $0 = result }
        }
        let holders = "FROM pg_locks WHERE granted AND mode = 'ShareRowExclusiveLock' AND relation = '\(schema).events'::regclass"
        let locked = try await eventually(seconds: 30) { try server.psql(database: "postgres", "SELECT count(*) \(holders)") == "1" }
        try #require(locked, "the events table was not locked")
        let slowCommitStarted = Clock.nowMs()
        // Cancelled again each second until the holder has ended: on a loaded CI machine one `psql` that failed
        // (its error dropped) left the lock held until the holder's own 300 s limit killed it.
        Thread.detachNewThread {
            usleep(UInt32(Self.leaseMs * 5 / 2) * 1_000)
            for _ in 0..<120 where lockHolder.withLock({ $0 == nil }) {
                _ = try? server.psql(database: "postgres", "SELECT pg_catalog.pg_cancel_backend(pid) \(holders)")
                usleep(1_000_000)
            }
        }
        let pause = try await store1.run { try $0.control(.pause, id: parked, actor: "test", now: Clock.nowMs()) }
        let slowCommitMs = Clock.nowMs() - slowCommitStarted
        let lockEnded = try await eventually(seconds: 60) { lockHolder.withLock { $0 != nil } }
        try #require(lockEnded)
        #expect(try reader.job(parked)?.state == .paused, "\(pause)")
        #expect(slowCommitMs >= Self.leaseMs * 2, "worker 1's commit took \(slowCommitMs) ms, not longer than the lease")

        // A lease more for a rescue of anything that expired meanwhile to land.
        try await Task.sleep(for: .milliseconds(Self.leaseMs))
        backend.releaseAll()
        let done = try await eventually(seconds: 60) {
            try running.allSatisfy { try reader.events(jobID: $0).last?.type == .succeeded }
        }
        pool1.beginShutdown()
        pool2.beginShutdown()
        let (summary1, summary2) = (try await run1.value, try await run2.value)
        for id in running {
            let events = try reader.events(jobID: id)
            let types = events.map(\.type.rawValue)
            // Each event with its time from the slow write's start and its actor.
            let timeline = events.map { "\($0.type.rawValue)@\($0.atMs - slowCommitStarted) by \($0.actor)" }.joined(separator: ", ")
            #expect(!types.contains(EventType.leaseExpired.rawValue), "\(id) lost its lease during worker 1's slow commit: \(timeline)")
            #expect(types.filter { $0 == EventType.claimed.rawValue }.count == 1, "\(id) was claimed again: \(timeline)")
            #expect(Set(events.dropFirst().map(\.leaseToken)).count == 1, "\(id) ran under more than one lease")
        }
        #expect(done, "the held jobs did not succeed")
        #expect(summary1.succeeded == 2 && summary2.claimed == 0, "worker 1: \(summary1); worker 2: \(summary2)")
    }
}

/// Real transfers that wait until the test lets them all go.
private final class HeldBackend: StorageBackend {
    private let inner: StorageRouter
    private let started = Mutex(0)
    private let released = Mutex(false)

    init(_ inner: StorageRouter) { self.inner = inner }

    var transfersStarted: Int { started.withLock { $0 } }

    func releaseAll() { released.withLock { $0 = true } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        started.withLock { $0 += 1 }
        // A safety net far beyond the test's own waits, not a limit on a starved test.
        let deadline = ContinuousClock.now + .seconds(600)
        while !released.withLock({ $0 }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        return try await inner.perform(spec, resumingFrom: resumePoint, control: control, report: report)
    }
}
