import EventStore
import Foundation
import JobModel
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// A `file://` copy held to its `max_rate:` and cut by its `timeout:` keeps what each attempt moved:
/// the next attempt resumes there, so a copy longer than its timeout still ends (it restarted at byte 0
/// each time, as no checkpoint came before 64 MiB), and the `succeeded` line's rate is of the bytes the
/// last run moved, not of the whole file (it read ~15 MiB/s for a `max_rate: 2M` job).
@Suite(.onTestThreads) struct LocalTimeoutResumeTests {
    @Test func aTimedOutCopyResumesAndItsRateIsOfWhatItMoved() async throws {
        let directory = try TemporaryDirectory("local-timeout-resume")
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        let size = 2 * 1_048_576, limit = 1_048_576
        let source = directory.file("source.bin")
        let bytes = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ $0 >> 9) })
        try bytes.write(to: URL(fileURLWithPath: source))
        let database = directory.file("jobctl.db")
        let ids = try submit("""
        - {kind: upload-file, source: "\(source)", destination: "file://b/o.bin", max_rate: 1M, timeout: 1s, max_attempts: 12}
        """, database: database, directory: directory)
        let id = try #require(ids.first)
        let store = try EventStore(path: database, mode: .readWrite)
        let lines = Mutex<[String]>([])
        let log = WorkerLog(minimumLevel: .info, formatter: WorkerLogFormatter(format: .json), write: { text in
            lines.withLock { $0 += text.split(separator: "\n").map(String.init) }
        })
        let pool = WorkerPool(store: store, backend: StorageRouter(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets"))),
                              configuration: WorkerConfiguration(concurrency: 1, leaseMs: 3_600_000, drain: true), log: log)
        let summary = try await pool.run()
        #expect(summary.succeeded == 1, "\(summary) \(lines.withLock { $0 })")
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("buckets/b/o.bin"))) == bytes)

        let events = try store.events(jobID: id)
        let failures = events.filter { $0.type == .attemptFailed }
        #expect(!failures.isEmpty, "the copy never ran into its timeout: \(events.map(\.type))")
        // Each attempt after the first started where the one before stopped, never at 0.
        let starts = events.filter { $0.type == .started }.dropFirst()
        for started in starts {
            guard case .started(let progress) = started.payload else { continue }
            #expect((progress.bytesDone ?? 0) > 0, "an attempt started over: \(started)")
        }

        let logged = lines.withLock { $0 }
        let succeeded = try #require(logged.first { $0.contains("\"event\":\"succeeded\"") }, "\(logged)")
        let fields = try #require((try JSONSerialization.jsonObject(with: Data(succeeded.utf8)) as? [String: Any])?["fields"] as? [String: Any])
        #expect(fields["bytes"] as? Int == size)
        let moved = try #require(fields["moved_bytes"] as? Int, "\(succeeded)")
        #expect(moved > 0 && moved < size)
        let rate = try #require(fields["bytes_per_second"] as? Int)
        #expect(Double(rate) <= Double(limit) * 1.15, "\(succeeded)")
        // No attempt's session is left beside the object.
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.file("buckets/b")).filter { $0.contains("jobctl-upload") }
        #expect(left.isEmpty, "\(left)")
    }
}
