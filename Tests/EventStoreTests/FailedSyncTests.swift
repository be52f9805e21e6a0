import Foundation
import JobModel
import StorePort
import Testing
import TestSupport
@testable import EventStore

/// A failed sync of the write-ahead log is final for the process: Linux may drop the pages it could not
/// write and report the error once, so a later sync that succeeds says nothing about them, and a store
/// that went on reporting commits written reported lost ones.
@Suite("A failed WAL sync", .onTestThreads)
struct FailedSyncTests {
    /// The WAL's path is made to name `/dev/null` (whose `fdatasync` fails with EINVAL) for one write,
    /// then the real WAL is put back: that first write fails, and so does every later one, through the
    /// executor and through a command's direct write — they used to succeed once the file was back.
    @Test func aFailedSyncFailsEveryLaterWrite() async throws {
        let directory = try TemporaryDirectory("failed-sync")
        defer { directory.remove() }
        let path = directory.file("jobctl.db")
        let store = try EventStore(path: path)
        let spec = JobSpec(kind: .uploadData, destination: "file://m/x.txt", data: Data("x".utf8))
        _ = try store.submit([spec], actor: "test", now: Clock.nowMs())
        let wal = sqliteSidecarPath(path, "-wal")
        let aside = directory.file("wal-aside")
        #expect(rename(wal, aside) == 0)
        #expect(symlink("/dev/null", wal) == 0)
        #expect {
            try store.submit([spec], actor: "test", now: Clock.nowMs())
        } throws: { error in
            if case .syncFailed = error as? StoreError { return true }
            return false
        }
        #expect(unlink(wal) == 0)
        #expect(rename(aside, wal) == 0)

        do {
            _ = try store.submit([spec], actor: "test", now: Clock.nowMs())
            Issue.record("a write after a failed sync was reported written")
        } catch {
            guard case .syncFailed(let message) = error else {
                Issue.record("expected syncFailed, got \(error)")
                return
            }
            #expect(message.contains("cannot sync"))
            #expect(error.description.contains("`jobctl replay --verify`"))
        }
        do {
            _ = try await store.run { store in try store.submit([spec], actor: "test", now: Clock.nowMs()) }
            Issue.record("a write through the executor after a failed sync was reported written")
        } catch let error as StoreError {
            if case .syncFailed = error {} else { Issue.record("expected syncFailed, got \(error)") }
        }
    }
}
