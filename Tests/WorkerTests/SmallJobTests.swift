import EventStore
import Foundation
import JobModel
import PostgresStore
import Storage
import StorePort
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// Many tiny `download-memory` jobs through an in-process pool (the queue benchmark's job): the
/// history each keeps, the bytes it returns, and how the log writes a claim's lines.
@Suite("small jobs", .onTestThreads) struct SmallJobTests {
    /// `count` objects of 64 bytes in a local bucket and their jobs, submitted; returns the ids and bytes.
    static func tinyJobs(_ count: Int, database: String, directory: TemporaryDirectory) throws -> [(id: String, bytes: Data)] {
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        var manifest = ""
        var objects: [Data] = []
        for index in 0..<count {
            let bytes = Data((0..<64).map { UInt8(truncatingIfNeeded: $0 * 7 + index) })
            try bytes.write(to: URL(fileURLWithPath: directory.file("buckets/b/o-\(index).bin")))
            manifest += "- {kind: download-memory, source: \"file://b/o-\(index).bin\"}\n"
            objects.append(bytes)
        }
        let ids = try submit(manifest, database: database, directory: directory)
        try #require(ids.count == count)
        return Array(zip(ids, objects)).map { (id: $0.0, bytes: $0.1) }
    }

    /// A temporary directory holding a log of `engine` with `count` tiny jobs (`tinyJobs`) and their
    /// objects; the caller removes the directory.
    static func tinyJobLog(_ label: String, _ engine: WorkerEngine, count: Int) throws
        -> (directory: TemporaryDirectory, database: String, jobs: [(id: String, bytes: Data)]) {
        let directory = try TemporaryDirectory(label)
        do {
            let database = try engine.database(in: directory)
            return (directory, database, try tinyJobs(count, database: database, directory: directory))
        } catch {
            directory.remove()
            throw error
        }
    }

    /// The storage of `tinyJobs`' objects: `file://` buckets under `directory`'s `buckets`.
    static func localRouter(_ directory: TemporaryDirectory) -> StorageRouter {
        StorageRouter(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")))
    }

    static func store(_ engine: WorkerEngine, _ database: String) throws -> any JobStore {
        switch engine {
        case .sqlite: try EventStore(path: database, mode: .readWrite)
        case .postgres: try PostgresStore(url: database, mode: .readWrite)
        }
    }

    /// Each tiny job keeps exactly submitted, claimed, started, succeeded at versions 1…4 — no
    /// `progress` (the transfer ends before any progress tick), `started` only after `claimed` under
    /// the same lease — and its result is the object's bytes; the log folds to the projection.
    @Test(arguments: WorkerEngine.allCases)
    func tinyDownloadsKeepTheirWholeHistoryAndNoProgress(engine: WorkerEngine) async throws {
        let (directory, database, jobs) = try Self.tinyJobLog("small-jobs", engine, count: 40)
        defer { directory.remove() }
        let store = try Self.store(engine, database)
        let pool = WorkerPool(store: store, backend: SmallJobTests.localRouter(directory),
                              configuration: WorkerConfiguration(concurrency: 4, leaseMs: 3_600_000, drain: true))
        let summary = try await pool.run()
        #expect(summary.succeeded == jobs.count && summary.claimed == jobs.count, "\(summary)")
        for job in jobs {
            let events = try store.events(jobID: job.id)
            #expect(events.map(\.type) == [.submitted, .claimed, .started, .succeeded], "\(job.id): \(events.map(\.type))")
            #expect(events.map(\.version) == [1, 2, 3, 4])
            #expect(Set(events.dropFirst().map(\.leaseToken)).count == 1 && events[1].leaseToken != nil)
            guard case .succeeded(let progress, let result)? = events.last?.payload else {
                Issue.record("\(job.id) did not end with succeeded")
                continue
            }
            #expect(progress.bytesDone == 64 && result.size == 64)
            // 64 bytes: kept in the event itself, no blob.
            #expect(result.data == job.bytes && result.blob == nil)
        }
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// One claim's `claimed` lines reach the log's writer in one call, in claim order, each a whole
    /// line; every other line comes alone.
    @Test(arguments: WorkerEngine.allCases)
    func aClaimsLinesAreWrittenTogether(engine: WorkerEngine) async throws {
        let (directory, database, jobs) = try Self.tinyJobLog("small-jobs-log", engine, count: 6)
        defer { directory.remove() }
        let store = try Self.store(engine, database)
        let writes = Mutex<[String]>([])
        let log = WorkerLog(minimumLevel: .info, formatter: WorkerLogFormatter(format: .json), write: { text in
            writes.withLock { $0.append(text) }
        })
        let pool = WorkerPool(store: store, backend: SmallJobTests.localRouter(directory),
                              configuration: WorkerConfiguration(concurrency: 8, leaseMs: 3_600_000, drain: true), log: log)
        let summary = try await pool.run()
        #expect(summary.succeeded == jobs.count, "\(summary)")
        let calls = writes.withLock { $0 }
        #expect(calls.allSatisfy { $0.hasSuffix("\n") })
        let claims = calls.filter { $0.contains("\"event\":\"claimed\"") }
        try #require(claims.count == 1, "\(calls)")
        let lines = claims[0].split(separator: "\n")
        #expect(lines.count == jobs.count && lines.allSatisfy { $0.contains("\"event\":\"claimed\"") }, "\(claims[0])")
        #expect(lines.map { line in jobs.firstIndex { line.contains("\"job\":\"\($0.id)\"") } } == jobs.indices.map { Optional($0) })
        for call in calls where !call.contains("\"event\":\"claimed\"") {
            #expect(call.split(separator: "\n").count == 1, "\(call)")
        }
    }
}
