import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// A worker's store checkpoints its WAL on a thread of its own (`EventStore.checkpointInBackground`):
/// commits only ask for a checkpoint, unless the log has reached the automatic checkpoint's length, and
/// closing the store still leaves no WAL behind.
@Suite("background checkpoints") struct BackgroundCheckpointTests {
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
}
