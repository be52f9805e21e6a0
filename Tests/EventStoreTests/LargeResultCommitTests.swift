import Foundation
import JobModel
import Testing
@testable import EventStore
@testable import PostgresStore
import TestSupport

/// Large download-memory results on PostgreSQL: a statement's values travel in one protocol message,
/// which the server takes up to 1 GB; a longer one ends the session. The limit is lowered here to 1 MiB
/// (`PostgresConnection.messageLimit`) so that it is met with results of a few hundred KiB.
@Suite("Large results in a PostgreSQL group commit", .onTestThreads)
struct LargeResultCommitTests {
    static let limit = 1 << 20

    /// Two download-memory jobs claimed on a store whose messages are limited to `limit`.
    private static func twoRunningJobs() throws -> (PostgresStore, [ClaimedJob]) {
        let store = try PostgresStore(url: try PostgresServer.shared().makeSchema("store-large-results"), mode: .create)
        try store.withConnection { (connection) in connection.messageLimit = limit }
        _ = try store.submit([memorySpec(), memorySpec()], actor: "cli:test", now: 1_000)
        let claimed = try store.claim(owner: workerName, queues: nil, limit: 2, leaseMs: 30_000, now: 2_000)
        try #require(claimed.count == 2)
        return (store, claimed)
    }

    private static func succeeded(_ job: ClaimedJob, _ bytes: Data) -> PendingEvent {
        PendingEvent(jobID: job.record.id, actor: workerName, leaseToken: job.token,
                     payload: .succeeded(TransferProgress(bytesDone: Int64(bytes.count), bytesTotal: Int64(bytes.count)),
                                         result: JobResult(size: Int64(bytes.count), data: bytes)))
    }

    /// Two results that fit one message each but not one together (as two of 512 MiB against 1 GB)
    /// commit in one group, each message under the limit.
    @Test("two results that together pass the message limit are stored in messages under it")
    func twoLargeResultsInOneGroupCommit() throws {
        let (store, jobs) = try Self.twoRunningJobs()
        let results = [Data(repeating: 0xA5, count: 600 << 10), Data(repeating: 0x5A, count: 600 << 10)]
        let outcomes = try store.append(zip(jobs, results).map { Self.succeeded($0, $1) }, now: 3_000)
        for outcome in outcomes {
            #expect(throws: Never.self, "a result was not stored") { try outcome.get() }
        }
        for (job, bytes) in zip(jobs, results) {
            let stored = try #require(try store.events(jobID: job.record.id).last?.payload.result?.blob)
            #expect(try store.blob(sha256: stored) == bytes)
        }
        let largest = try store.withConnection { (connection) in connection.largestMessageBytes }
        #expect(largest > 600 << 10 && largest <= Self.limit, "the largest message was \(largest) bytes")
    }

    /// A result no message can carry is refused with a typed error before anything is sent, and the
    /// session stays usable: the other job's result in the same group commit is stored on the retry
    /// the refusal leads to, not lost with a dropped connection.
    @Test("a result larger than any message is refused as tooLarge, and the session goes on")
    func aResultLargerThanAnyMessageIsRefused() throws {
        let (store, jobs) = try Self.twoRunningJobs()
        let refusal = #expect(throws: StoreError.self) {
            try store.append([Self.succeeded(jobs[0], Data(repeating: 1, count: Self.limit + 1))], now: 3_000)
        }
        guard case .tooLarge(let message)? = refusal else {
            Issue.record("refused as \(String(describing: refusal)), not tooLarge")
            return
        }
        #expect(message.contains("download-file"), "\(message)")
        #expect(try store.job(jobs[0].record.id)?.state == .running, "nothing of the refused write was stored")
        let small = try store.append([Self.succeeded(jobs[1], Data(repeating: 2, count: 1_000))], now: 4_000)
        #expect(throws: Never.self) { try small[0].get() }
    }
}
