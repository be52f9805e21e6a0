import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import PostgresStore

/// A worker frozen inside a write transaction (stopped, descheduled, its machine paused) holds its rows'
/// locks; the rescue skips locked rows, so without a limit its jobs could never be rescued. The server
/// ends a write transaction idle for `PostgresStore.idleWriteTimeoutSeconds`.
@Suite("PostgreSQL: a frozen write transaction", .onTestThreads)
struct FrozenTransactionTests {
    /// The frozen transaction's result, set on its thread before `ended` is signalled and read after.
    private final class Outcome: @unchecked Sendable {
        var result: Result<Void, StoreError>?
    }

    @Test("a write transaction left idle holding a job's row is ended, and the job is rescued")
    func idleWriteTransactionIsEnded() throws {
        let fixture = try PostgresFixture("frozentx")
        let frozen = try PostgresStore(url: fixture.url, mode: .create)
        let rescuer = try PostgresStore(url: fixture.url, mode: .readWrite)
        let id = try frozen.submit([JobSpec(kind: .uploadData, destination: "file://frozen/x.txt", data: Data("x".utf8))],
                                   actor: "cli:test", now: 1_000)[0].id
        try #require(try frozen.claim(owner: "frozen", queues: nil, limit: 1, leaseMs: 1_000, now: 1_000).count == 1)
        let locked = DispatchSemaphore(value: 0)
        let ended = DispatchSemaphore(value: 0)
        let frozenOutcome = Outcome()
        startThread {
            frozenOutcome.result = Result { () throws(StoreError) in
                try frozen.writeTransaction { (connection) throws(StoreError) in
                    _ = try connection.lockJob(id)
                    locked.signal()
                    // Frozen with the row locked, past the server's limit for an idle write transaction.
                    sleep(UInt32(PostgresStore.idleWriteTimeoutSeconds + 5))
                    _ = try connection.lockJob(id)
                }
            }
            ended.signal()
        }
        locked.wait()
        let started = Date()
        var rescued: [String] = []
        while rescued.isEmpty, Date().timeIntervalSince(started) < Double(PostgresStore.idleWriteTimeoutSeconds + 30) {
            rescued = try rescuer.rescueExpired(now: Clock.nowMs(), actor: "worker:rescuer").map(\.id)
            if rescued.isEmpty { usleep(200_000) }
        }
        let stillFrozen = ended.wait(timeout: .now()) == .timedOut
        if !stillFrozen { ended.signal() }
        #expect(stillFrozen, "rescued while the transaction that locked the row was still frozen")
        #expect(rescued == [id], "the locked row was rescued once the frozen transaction was ended")
        #expect(try rescuer.job(id)?.state == .queued)
        // The frozen transaction, when it wakes, finds its session gone: nothing it did is kept.
        ended.wait()
        guard case .failure = frozenOutcome.result else {
            Issue.record("the frozen transaction committed after the server ended it")
            return
        }
        #expect(try rescuer.events(jobID: id).map(\.type) == [.submitted, .claimed, .leaseExpired])
    }
}
