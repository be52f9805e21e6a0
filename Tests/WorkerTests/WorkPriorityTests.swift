import EventStore
import Foundation
import JobModel
import Storage
import Synchronization
import Testing
import TestSupport
@testable import Worker

/// Records the priority of the task that starts each transfer (the completion form runs on the job's
/// task, inside its runner), then hands the job to the real backend. `StorageBackend` is our own
/// protocol; the real backend does the work.
private final class PriorityRecordingBackend: StorageBackend {
    private let inner: StorageRouter
    private let seen = Mutex<[TaskPriority]>([])

    init(_ inner: StorageRouter) { self.inner = inner }

    var priorities: [TaskPriority] { seen.withLock { $0 } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        try await inner.perform(spec, resumingFrom: resumePoint, control: control, report: report)
    }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void,
                 completion: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void) {
        let priority = Task.currentPriority
        seen.withLock { $0.append(priority) }
        inner.perform(spec, resumingFrom: resumePoint, control: control, report: report, completion: completion)
    }
}

/// Everything a worker runs concurrently runs at one priority (`WorkPriority`), whatever the priority of
/// the task that runs the pool.
@Suite("work priority", .onTestThreads) struct WorkPriorityTests {
    /// A pool run from a high-priority task: the jobs it launches from its loop (the first claim) and
    /// those launched when a returning transfer turns a slot over (outside any task) all run at the
    /// worker's one priority. Inheriting, the first ones ran at high, and the test fails.
    @Test func jobTasksRunAtTheOnePriority() async throws {
        let directory = try TemporaryDirectory("work-priority")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let ids = try submit((0..<12).map { "- {kind: upload-data, data: \"\($0)\", destination: \"file://b/\($0).txt\"}\n" }
            .joined(), database: database, directory: directory)
        try #require(ids.count == 12)
        let store = try EventStore(path: database, mode: .readWrite)
        let backend = PriorityRecordingBackend(SmallJobTests.localRouter(directory))
        let pool = WorkerPool(store: store, backend: backend,
                              configuration: WorkerConfiguration(concurrency: 2, drain: true, claimAhead: 4))
        let summary = try await Task.detached(priority: .high) { try await pool.run() }.value
        #expect(summary.succeeded == 12, "\(summary)")
        #expect(backend.priorities.count == 12)
        #expect(backend.priorities.allSatisfy { $0 == WorkPriority.task }, "\(backend.priorities)")
    }

    /// An `async`-only backend's completion form runs its transfer at the one priority, whether asked from a
    /// high-priority task or from a thread outside any task (a task that inherited ran it at high).
    @Test func completionFormTransfersRunAtTheOnePriority() async throws {
        let probe = AsyncOnlyProbe()
        await Task.detached(priority: .high) {
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                probe.start { done.resume() }
            }
        }.value
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread { probe.start { done.resume() } }
        }
        #expect(probe.priorities == [WorkPriority.task, WorkPriority.task])
    }
}

/// A backend with only the `async` form: the protocol's completion form runs it in a task of its own.
private final class AsyncOnlyProbe: StorageBackend {
    private let seen = Mutex<[TaskPriority]>([])

    var priorities: [TaskPriority] { seen.withLock { $0 } }

    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let priority = Task.currentPriority
        seen.withLock { $0.append(priority) }
        throw StorageError(.cancelled, "probe")
    }

    func start(_ done: @escaping @Sendable () -> Void) {
        let spec = JobSpec(kind: .uploadData, destination: "file://b/x.txt", data: Data("x".utf8))
        perform(spec, resumingFrom: nil, control: TransferControl(), report: { _ in }, completion: { _ in done() })
    }
}
