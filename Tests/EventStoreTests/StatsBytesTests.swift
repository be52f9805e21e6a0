import Foundation
import JobModel
import Testing
@testable import EventStore
@testable import PostgresStore
import TestSupport

/// `jobctl stats` counts the bytes jobs moved: a metadata read or change, a download URL and a skipped
/// transfer move none, whatever size the object they name has.
@Suite("The bytes stats counts", .onTestThreads)
struct StatsBytesTests {
    /// A succeeded job of each kind that moves nothing, beside two transfers that moved 100 and 20 bytes.
    @Test("only bytes transferred count: metadata, URLs and skipped transfers count none", arguments: Engine.allCases)
    func onlyTransfersCount(engine: Engine) throws {
        let fixture = try StoreFixture("store-stats-bytes", engine: engine)
        defer { fixture.remove() }
        let object = StorageObject(bucket: "bucket", name: "big.bin", size: 5_000_000, crc32c: "AAAAAA==")
        let unknownSize = StorageObject(bucket: "bucket", name: "unknown.bin", size: -1)
        let finished: [(JobSpec, TransferProgress, JobResult)] = [
            (uploadSpec(), TransferProgress(bytesDone: 100, bytesTotal: 100), JobResult(object: object, size: 100, crc32c: "AAAAAA==")),
            (memorySpec(), TransferProgress(bytesDone: 20, bytesTotal: 20), JobResult(object: object, size: 20, data: Data(count: 20))),
            (JobSpec(kind: .getMetadata, source: "gs://bucket/big.bin"), TransferProgress(bytesDone: 0), JobResult(object: object)),
            (JobSpec(kind: .updateMetadata, destination: "gs://bucket/big.bin", metadata: UploadMetadata(contentType: "text/plain")),
             TransferProgress(bytesDone: 0), JobResult(object: object)),
            (JobSpec(kind: .fetchURL, source: "gs://bucket/big.bin"), TransferProgress(bytesDone: 0),
             JobResult(object: object, url: "https://example.test/big.bin")),
            // An upload skipped (`if_exists: skip`): the object as it is, its size and hash.
            (uploadSpec(), TransferProgress(bytesDone: 0, bytesTotal: 5_000_000),
             JobResult(object: object, size: object.size, crc32c: object.crc32c, skipped: true)),
            // A download skipped by `skip-identical`: the local file's size, none of it moved.
            (JobSpec(kind: .downloadFile, source: "gs://bucket/big.bin", destination: "/tmp/big.bin"),
             TransferProgress(bytesDone: 0, bytesTotal: 5_000_000),
             JobResult(object: object, path: "/tmp/big.bin", size: object.size, crc32c: object.crc32c, verified: [.crc32c], skipped: true)),
            (JobSpec(kind: .getMetadata, source: "gs://bucket/unknown.bin"), TransferProgress(bytesDone: 0), JobResult(object: unknownSize)),
        ]
        let ids = try fixture.store.submit(finished.map(\.0), actor: "cli:test", now: 1_000).map(\.id)
        let claimed = try fixture.store.claim(owner: workerName, queues: nil, limit: finished.count, leaseMs: 30_000, now: 2_000)
        try #require(claimed.count == finished.count)
        let tokens = Dictionary(uniqueKeysWithValues: claimed.map { ($0.record.id, $0.token) })
        for (id, (_, progress, result)) in zip(ids, finished) {
            let token = try #require(tokens[id])
            try fixture.append(PendingEvent(jobID: id, actor: workerName, leaseToken: token,
                                            payload: .succeeded(progress, result: result)), now: 3_000)
        }
        let stats = try fixture.store.stats(queue: nil, now: 4_000)
        #expect(stats.lastHour.succeeded == finished.count)
        #expect(stats.lastMinute.succeeded == finished.count)
        #expect(stats.lastHour.bytes == 120, "the hour counted \(stats.lastHour.bytes) bytes")
        #expect(stats.lastMinute.bytes == 120, "the minute counted \(stats.lastMinute.bytes) bytes")
        // The same by queue (the query's other form).
        #expect(try fixture.store.stats(queue: "default", now: 4_000).lastHour.bytes == 120)
    }
}
