import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// update-metadata, fetch-url and a delete with `if_generation:` take a `file://` object's lock
/// (`flock`) to serialise their sidecar writes. Any process that can open the object may hold that lock
/// (another user's `flock FILE sleep …`): a blocking `flock` held the job for ever, deaf to cancel and
/// pause (and so to the worker's SIGTERM), and its retry after the lease waited again. The lock is now
/// waited for while the job runs, up to `Self.limitMs`, then the attempt fails retryable.
@Suite("file:// object lock held by another process", .onTestThreads)
struct ObjectLockTests {
    /// A bucket holding `file://b/s.txt`, the object's path, and a descriptor of the object holding its lock
    /// (an open file description of its own, as another process's would be).
    private static func lockedObject(_ directory: TemporaryDirectory) throws -> (LocalBackend, Int32) {
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")))
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        try Data("hello".utf8).write(to: URL(fileURLWithPath: directory.file("buckets/b/s.txt")))
        let holder = open(directory.file("buckets/b/s.txt"), O_RDONLY | O_CLOEXEC)
        try #require(holder >= 0)
        try #require(flock(holder, LOCK_EX) == 0)
        return (backend, holder)
    }

    /// `LocalBackend.objectLockWaitMs`.
    private static let limitMs = 10_000

    private static var specs: [JobSpec] {
        var delete = JobSpec(kind: .delete, destination: "file://b/s.txt")
        delete.ifGeneration = 1
        return [JobSpec(kind: .updateMetadata, destination: "file://b/s.txt", metadata: UploadMetadata(cacheControl: "no-store")),
                JobSpec(kind: .fetchURL, source: "file://b/s.txt"), delete]
    }

    @Test("a cancel or a pause reaches a job waiting for the object's lock", arguments: [StopReason.cancel, .pause])
    func stopReachesWaiter(reason: StopReason) async throws {
        let directory = try TemporaryDirectory("object-lock")
        defer { directory.remove() }
        let (backend, holder) = try Self.lockedObject(directory)
        defer { close(holder) }
        flock(holder, LOCK_UN)
        for spec in Self.specs {
            try #require(flock(holder, LOCK_EX) == 0)
            let control = TransferControl(jobID: "01JOBLOCKTEST0000000000000", leaseToken: 1)
            // The stop comes at 300 ms; the lock is let go at 5 s, so that a wait deaf to the stop ends (late).
            let stopper = Task.detached {
                try await Task.sleep(for: .milliseconds(300))
                control.stop(reason)
                try await Task.sleep(for: .milliseconds(4_700))
                flock(holder, LOCK_UN)
            }
            let start = ContinuousClock.now
            let outcome = await Task.detached { () -> Result<TransferOutcome, StorageError> in
                do throws(StorageError) {
                    return .success(try await backend.perform(spec, resumingFrom: nil, control: control, report: { _ in }))
                } catch {
                    return .failure(error)
                }
            }.value
            let waited = start.duration(to: .now)
            stopper.cancel()
            _ = await stopper.result
            #expect(outcome == .success(.stopped(reason, nil)), "\(spec.kind)")
            #expect(waited < .seconds(3), "\(spec.kind)")
            flock(holder, LOCK_UN)
        }
    }

    @Test("a lock held past the limit fails the attempt retryable, naming the object")
    func heldPastLimit() async throws {
        let directory = try TemporaryDirectory("object-lock")
        defer { directory.remove() }
        let (backend, holder) = try Self.lockedObject(directory)
        // Released late enough that the old blocking flock would have waited for it, then succeeded.
        let releaser = Task.detached {
            try await Task.sleep(for: .milliseconds(Self.limitMs + 5_000))
            flock(holder, LOCK_UN)
        }
        defer { releaser.cancel(); close(holder) }
        let start = ContinuousClock.now
        do {
            let outcome = try await Task.detached { () throws(StorageError) -> TransferOutcome in
                try await backend.perform(Self.specs[0], resumingFrom: nil,
                                          control: TransferControl(jobID: "01JOBLOCKTEST0000000000001", leaseToken: 1), report: { _ in })
            }.value
            Issue.record("expected a retryable failure, got \(outcome)")
        } catch let error as StorageError {
            #expect(error.retryable)
            #expect(error.message.contains("stayed locked by another process"), "\(error.message)")
        }
        #expect(start.duration(to: .now) < .milliseconds(Self.limitMs + 3_000))
    }
}
