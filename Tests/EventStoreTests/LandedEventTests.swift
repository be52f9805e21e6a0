import Foundation
import JobModel
import Synchronization
import Testing
@testable import EventStore
@testable import PostgresStore
import TestSupport

/// A worker whose write's answer was lost asks whether the write landed. On PostgreSQL the session it
/// gave up may still be running that write on the server (a commit of a large download-memory result
/// that outlasted the answer timeout), and commits it a moment later: the answer must wait for it.
@Suite("Whether a write landed", .onTestThreads)
struct LandedEventTests {
    @Test("PostgreSQL: a write still running in another session is waited for, not missed")
    func aWriteStillRunningIsWaitedFor() throws {
        let url = try PostgresServer.shared().makeSchema("store-landed")
        let store = try PostgresStore(url: url, mode: .create)
        let id = try store.submit([memorySpec()], actor: "cli:test", now: 1_000)[0].id
        let job = try #require(try store.claim(owner: workerName, queues: nil, limit: 1, leaseMs: 30_000, now: 2_000).first)
        try #require(job.record.id == id)
        let succeeded = PendingEvent(jobID: id, actor: workerName, leaseToken: job.token,
                                     payload: .succeeded(TransferProgress(bytesDone: 3, bytesTotal: 3),
                                                         result: JobResult(size: 3, data: Data("abc".utf8))))
        // The given-up session: another connection that writes the event and holds its transaction open
        // for a while before it commits.
        let locked = Mutex(false)
        let written = Mutex<Result<Bool, StoreError>?>(nil)
        let writer = try PostgresStore(url: url, mode: .readWrite)
        startThread {
            do throws(StoreError) {
                let ok = try writer.writeTransaction { (connection) throws(StoreError) -> Bool in
                    let outcomes = try connection.appendBatch([succeeded], now: 3_000)
                    locked.withLock { $0 = true }
                    usleep(700_000)
                    return outcomes.allSatisfy { (try? $0.get()) != nil }
                }
                written.withLock { $0 = .success(ok) }
            } catch {
                written.withLock { $0 = .failure(error) }
            }
        }
        let deadline = Date().addingTimeInterval(30)
        while !locked.withLock({ $0 }) && Date() < deadline { usleep(10_000) }
        try #require(locked.withLock { $0 }, "the other session never wrote")
        let landed = try store.landedEvent(succeeded)
        #expect(landed?.type == .succeeded, "landedEvent answered \(String(describing: landed)) before the other session's commit")
        while written.withLock({ $0 }) == nil && Date() < deadline { usleep(10_000) }
        #expect(try written.withLock({ $0 })?.get() == true)
    }
}
