import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import PostgresStore

/// A worker's heartbeat (`renewLeases`) runs on a connection of its own and waits for no other
/// transaction's row lock longer than `leaseWaitMs`: the leases whose rows nobody holds are extended at
/// once; a lease is said extended only when the server extended it.
@Suite("PostgreSQL lease renewals", .onTestThreads)
struct LeaseRenewalTests {
    /// Two jobs claimed by `w1` with 30 s leases at 2,000.
    private func twoRunningJobs(_ label: String) throws -> (PostgresFixture, PostgresStore, [ClaimedJob]) {
        let fixture = try PostgresFixture(label)
        let store = try PostgresStore(url: fixture.url, mode: .create)
        _ = try store.submit((0..<2).map { k in
            JobSpec(kind: .uploadData, destination: "file://renew/\(k).txt", data: Data("x".utf8))
        }, actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: "w1", queues: nil, limit: 2, leaseMs: 30_000, now: 2_000).sorted { $0.record.id < $1.record.id }
        try #require(claimed.count == 2)
        return (fixture, store, claimed)
    }

    private func expiry(_ connection: PostgresConnection, _ id: String) throws -> Int64? {
        try connection.execute("SELECT lease_expires_at_ms FROM jobs WHERE id = $1", [.text(id)]).rows.first?.optionalInt64(0)
    }

    /// Another session holds job A's row (as a commit of the worker's own holds it while it writes A's
    /// event). B's lease is extended at once; A's is waited for `leaseWaitMs` (166 ms for a 1 s lease),
    /// then reported neither extended nor lost, and its expiry is unchanged. A lease under a stale
    /// token is lost and unchanged.
    @Test func aRowHeldByAnotherTransactionDelaysOnlyItsOwnLease() async throws {
        let (fixture, store, claimed) = try twoRunningJobs("renewheld")
        let (a, b) = (claimed[0], claimed[1])
        let reader = try fixture.connect()
        let holder = try fixture.connect()
        _ = try holder.execute("BEGIN")
        _ = try holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", [.text(a.record.id)])
        let holderPID = holder.backendPID
        // The holder lets go once the renewal has returned, or after 3 s (a renewal that waits for it).
        let release = Task.detached {
            try? await Task.sleep(for: .seconds(3))
            _ = try holder.execute("COMMIT")
        }

        let started = ContinuousClock.now
        let renewal = try await store.renewLeases(owner: "w1", leases: [a.record.id: a.token, b.record.id: b.token], leaseMs: 1_000, now: 5_000)
        let took = ContinuousClock.now - started
        let stillHeld = try reader.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'idle in transaction'",
                                           [.int(Int(holderPID))]).rows.first?.int64(0)
        release.cancel()
        try await release.value
        #expect(renewal == LeaseRenewal(renewed: [b.record.id], lost: []), "\(renewal)")
        #expect(took < .seconds(2), "the renewal waited \(took) for the held row")
        #expect(stillHeld == 1, "the renewal returned only once A's row was let go")
        #expect(try expiry(reader, b.record.id) == 6_000)
        #expect(try expiry(reader, a.record.id) == 32_000)

        let stale = try await store.renewLeases(owner: "w1", leases: [b.record.id: b.token + 1], leaseMs: 1_000, now: 5_500)
        #expect(stale == LeaseRenewal(renewed: [], lost: [b.record.id]))
        #expect(try expiry(reader, b.record.id) == 6_000)
    }

    /// With a 30 s lease the renewal waits up to 5 s for A's row: the holder lets it go after 300 ms and
    /// A's lease is extended then, in the same call; had the holder ended A's run meanwhile, A is lost.
    @Test func aHeldRowIsRenewedTheMomentItsHolderCommits() async throws {
        let (fixture, store, claimed) = try twoRunningJobs("renewwait")
        let (a, b) = (claimed[0], claimed[1])
        let holder = try fixture.connect()
        _ = try holder.execute("BEGIN")
        _ = try holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", [.text(a.record.id)])
        let renewing = Task {
            try await store.renewLeases(owner: "w1", leases: [a.record.id: a.token, b.record.id: b.token], leaseMs: 30_000, now: 5_000)
        }
        try await Task.sleep(for: .milliseconds(300))
        _ = try holder.execute("COMMIT")
        #expect(try await renewing.value == LeaseRenewal(renewed: [a.record.id, b.record.id], lost: []))
        #expect(try expiry(holder, a.record.id) == 35_000 && expiry(holder, b.record.id) == 35_000)

        // The holder ends A's run (a rescue, say) while the renewal waits: A is lost, not renewed.
        _ = try holder.execute("BEGIN")
        _ = try holder.execute("UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_token = NULL, lease_expires_at_ms = NULL WHERE id = $1",
                               [.text(a.record.id)])
        let lostWhileWaiting = Task {
            try await store.renewLeases(owner: "w1", leases: [a.record.id: a.token, b.record.id: b.token], leaseMs: 30_000, now: 6_000)
        }
        try await Task.sleep(for: .milliseconds(300))
        _ = try holder.execute("COMMIT")
        #expect(try await lostWhileWaiting.value == LeaseRenewal(renewed: [b.record.id], lost: [a.record.id]))
        #expect(try expiry(holder, a.record.id) == nil && expiry(holder, b.record.id) == 36_000)
    }

    /// A read-only store renews nothing.
    @Test func aReadOnlyStoreRefusesToRenew() async throws {
        let (fixture, _, claimed) = try twoRunningJobs("renewro")
        let reader = try PostgresStore(url: fixture.url, mode: .readOnly)
        await #expect(throws: StoreError.self) {
            try await reader.renewLeases(owner: "w1", leases: [claimed[0].record.id: claimed[0].token], leaseMs: 1_000, now: 5_000)
        }
    }
}
