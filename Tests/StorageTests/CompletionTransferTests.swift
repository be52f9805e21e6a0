import Foundation
import JobModel
@testable import Storage
import Synchronization
import Testing
import TestSupport

/// The completion form of `perform`: the outcome handed over once, from the thread the transfer ended
/// on, the same outcome the `async` form returns.
@Suite("transfers handing their outcome to a completion", .onTestThreads)
struct CompletionTransferTests {
    /// Calls the completion form and waits (up to 30 s) for its outcome; counts the calls.
    static func outcome(_ backend: any StorageBackend, _ spec: JobSpec) async -> (Result<TransferOutcome, StorageError>?, Int) {
        let calls = Mutex<[Result<TransferOutcome, StorageError>]>([])
        let done = DispatchSemaphore(value: 0)
        backend.perform(spec, resumingFrom: nil, control: TransferControl(), report: { _ in }) { result in
            calls.withLock { $0.append(result) }
            done.signal()
        }
        let arrived = await offPool { done.wait(timeout: .now() + 30) == .success }
        // A second call would come at once after the first: give it a moment to show.
        try? await Task.sleep(for: .milliseconds(50))
        let all = calls.withLock { $0 }
        return (arrived ? all.first : nil, all.count)
    }

    @Test func localAndRoutedDownloadsHandOverTheBytesOnce() async throws {
        let directory = try TemporaryDirectory("completion")
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        let bytes = Data("sixty-four bytes or so, read by the local backend's I/O queue".utf8)
        try bytes.write(to: URL(fileURLWithPath: directory.file("buckets/b/o.bin")))
        let configuration = StorageConfiguration(localBucketsDirectory: directory.file("buckets"))
        let spec = JobSpec(kind: .downloadMemory, source: "file://b/o.bin", maxSize: 1024)
        for backend in [LocalBackend(configuration: configuration) as any StorageBackend, StorageRouter(configuration: configuration)] {
            let (result, calls) = await Self.outcome(backend, spec)
            #expect(calls == 1)
            let value = try finished(try #require(result))
            #expect(value.data == bytes && value.size == Int64(bytes.count))
        }
    }

    @Test func failuresArriveThroughTheCompletionToo() async throws {
        let directory = try TemporaryDirectory("completion-fail")
        defer { directory.remove() }
        let configuration = StorageConfiguration(localBucketsDirectory: directory.file("buckets"))
        let router = StorageRouter(configuration: configuration)
        // A source no backend serves fails before any transfer; a missing local object in the I/O queue.
        for (spec, code) in [(JobSpec(kind: .downloadMemory, source: "ftp://host/x"), StorageErrorCode.invalidArgument),
                             (JobSpec(kind: .downloadMemory, source: "file://b/missing.bin"), .bucketNotFound)] {
            let (result, calls) = await Self.outcome(router, spec)
            #expect(calls == 1)
            guard case .failure(let error)? = result else {
                Issue.record("\(spec.source ?? ""): expected a failure, got \(String(describing: result))")
                continue
            }
            #expect(error.code == code, "\(error)")
        }
    }
}
