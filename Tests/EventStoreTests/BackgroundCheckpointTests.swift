import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// A worker's store checkpoints its WAL on a thread of its own (`EventStore.checkpointInBackground`):
/// commits only ask for a checkpoint, unless the log has reached the automatic checkpoint's length, and
/// closing the store still leaves no WAL behind.
@Suite("background checkpoints", .onTestThreads) struct BackgroundCheckpointTests {
    /// The size of `path`'s WAL in pages (0 when there is none).
    static func walPages(_ path: String) -> Int {
        let size = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        return size / 4_096
    }

    @Test("commits past the length ask the checkpointer, which copies the log into the database; the close removes the WAL")
    func commitsAskTheCheckpointerAndTheCloseRemovesTheWAL() async throws {
        let directory = try TemporaryDirectory("background-checkpoint")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        do {
            let store = try EventStore(path: path, mode: .create)
            try store.checkpointInBackground(afterLogPages: 20)
            var submitted = 0
            let deadline = Date().addingTimeInterval(20)
            while store.backgroundCheckpoints == 0 && Date() < deadline {
                _ = try store.submit([JobSpec(kind: .uploadData, destination: "file:///tmp/o\(submitted).txt", data: Data("x".utf8))],
                                     actor: "cli:test", now: 1_000)
                submitted += 1
            }
            #expect(store.backgroundCheckpoints > 0, "\(submitted) commits")
            #expect(store.inlineCheckpoints == 0, "the log never reached the inline length")
            // Copied into the database: a connection that reads only the database file sees the jobs.
            #expect(try store.countJobs(filter: JobFilter()) == submitted)
        }
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"), "the last connection's close checkpointed and removed it")
        #expect(try EventStore(path: path, mode: .readOnly).countJobs(filter: JobFilter()) > 0)
    }

    @Test("a commit that finds the log at the inline length checkpoints itself, so the log stays short")
    func aLongLogIsCheckpointedByTheCommitAsBefore() throws {
        let directory = try TemporaryDirectory("inline-checkpoint")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        let store = try EventStore(path: path, mode: .create)
        // The checkpointer is never asked (its length is out of reach): only the inline checkpoint bounds the log.
        try store.checkpointInBackground(afterLogPages: 1_000_000, inlineAfterLogPages: 40)
        for index in 0..<300 {
            _ = try store.submit([JobSpec(kind: .uploadData, destination: "file:///tmp/o\(index).txt", data: Data("x".utf8))],
                                 actor: "cli:test", now: 1_000)
        }
        #expect(store.inlineCheckpoints > 0)
        #expect(store.backgroundCheckpoints == 0)
        // 300 commits of several pages each would make a WAL of well over a thousand pages; it starts over
        // after each inline checkpoint instead.
        #expect(Self.walPages(path) < 120, "\(Self.walPages(path)) pages")
    }

    @Test("the checkpointer is asked again only once as many more pages are in the log, counted anew after the log starts over")
    func aCheckpointIsAskedForOnlyAfterThatManyNewPages() async throws {
        let directory = try TemporaryDirectory("checkpoint-new-pages")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        // A log with frames in it: the store's commits stay below the automatic checkpoint's length.
        let store = try EventStore(path: path, mode: .create)
        for index in 0..<20 {
            _ = try store.submit([JobSpec(kind: .uploadData, destination: "file:///tmp/o\(index).txt", data: Data("x".utf8))],
                                 actor: "cli:test", now: 1_000)
        }
        // The file's size (it may hold frames of a log since started over: more than the log's length).
        let logPages = Int32(Self.walPages(path))
        try #require(logPages > 20)
        let checkpointer = try BackgroundCheckpointer(path: path, thresholdPages: 10)
        defer { checkpointer.stop() }
        func settled(_ checkpoints: Int) async {
            for _ in 0..<2_000 where checkpointer.checkpoints < checkpoints { try? await Task.sleep(nanoseconds: 1_000_000) }
        }
        checkpointer.committed(logPages: 9)
        #expect(checkpointer.requests == 0, "fewer pages than the length")
        checkpointer.committed(logPages: logPages)
        #expect(checkpointer.requests == 1)
        await settled(1)
        #expect(checkpointer.checkpoints == 1)
        // That checkpoint copied the whole log: asked again only after ten more pages.
        let copied = checkpointer.copied
        #expect(copied > 10 && copied <= logPages)
        checkpointer.committed(logPages: copied + 9)
        #expect(checkpointer.requests == 1, "nine pages since the last checkpoint")
        checkpointer.committed(logPages: copied + 10)
        #expect(checkpointer.requests == 2)
        await settled(2)
        // A log shorter than what was copied has started over: its pages count from the start.
        checkpointer.committed(logPages: 3)
        #expect(checkpointer.requests == 2)
        checkpointer.committed(logPages: 10)
        #expect(checkpointer.requests == 3)
        await settled(3)
    }

    @Test("a WAL that grew while a reader held an old snapshot is cut back once the reader is done, the writer still open")
    func aLogGrownBehindAReaderShrinksAfterIt() throws {
        let directory = try TemporaryDirectory("wal-size-limit")
        defer { directory.remove() }
        let path = directory.file("jobs.db")
        // A worker's store: open for as long as the test runs, so no close removes the WAL.
        let writer = try EventStore(path: path, mode: .create)
        try writer.checkpointInBackground()
        _ = try writer.submit([JobSpec(kind: .uploadData, destination: "file:///tmp/first.txt", data: Data("x".utf8))],
                              actor: "cli:test", now: 1_000)
        // A reader (another connection, a long read of another program or of an older jobctl) stops
        // inside its read transaction: no checkpoint can copy past its snapshot or start the log over.
        let reader = try EventStore(path: path, mode: .readOnly)
        let inside = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try? reader.readTransaction { (connection) throws(StoreError) -> Int in
                let jobs = try connection.first("SELECT count(*) FROM jobs") { row in row.int(0) } ?? 0
                inside.signal()
                release.wait()
                return jobs
            }
            done.signal()
        }
        inside.wait()
        let payload = Data(repeating: 0x61, count: 1 << 20)
        for index in 0..<(EventStore.walSizeLimitBytes >> 20) + 8 {
            _ = try writer.submit([JobSpec(kind: .uploadData, destination: "file:///tmp/big\(index).txt", data: payload)],
                                  actor: "cli:test", now: 1_000)
        }
        let grown = (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        try #require(grown > EventStore.walSizeLimitBytes, "the log grew behind the reader: \(grown) bytes")
        release.signal()
        done.wait()
        // The writer goes on: a checkpoint copies the whole log, the next commit starts it over and cuts the file.
        var size = grown
        let deadline = Date().addingTimeInterval(10)
        var commits = 0
        while size > EventStore.walSizeLimitBytes && Date() < deadline {
            _ = try writer.submit([JobSpec(kind: .uploadData, destination: "file:///tmp/small\(commits).txt", data: Data("x".utf8))],
                                  actor: "cli:test", now: 1_000)
            commits += 1
            usleep(2_000)
            size = (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        }
        #expect(size <= EventStore.walSizeLimitBytes, "grown to \(grown) bytes, \(size) after \(commits) more commits")
    }
}
