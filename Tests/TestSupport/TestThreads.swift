import Foundation
import JobModel
import Testing

/// Runs each test on `TestThreads.shared` instead of Swift's cooperative pool: `@Suite(.onTestThreads)`.
///
/// Why: many tests block the thread they run on — they wait for a child process (`runProcess`), sleep
/// between polls, or wait for a store's executor — and on Linux the cooperative pool that runs every
/// task of the test process is as wide as the machine (two threads on this two-core machine) and does
/// not grow when its threads block. Two such tests stopped every other test's tasks, the in-process
/// workers' included: in full runs a 2 MiB download paced at 1 MiB/s waited 117–199 s for its turn, a
/// parsing test that takes milliseconds "passed after 228 s", and `CommitSpacingTests`' appends, queued
/// by tasks that ran only after the test's later steps, waited out an hour-long commit spacing — the
/// suite hung, in every full run (four) on a freshly booted machine (thread dumps: the pool's two
/// threads in `runProcess` and a synchronous store call, every other thread of the process idle).
///
/// Under this trait a test's body, and the child tasks it awaits (`async let`, task groups), run on
/// threads that may block. Unstructured tasks do not inherit an executor preference, so the tasks the
/// product starts (a worker's job tasks, transfers, store calls) still run on the cooperative pool, as
/// they do in a worker; the tests no longer hold its threads.
public struct OnTestThreads: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?,
                             performing function: @Sendable () async throws -> Void) async throws {
        guard testCase != nil else { return try await function() }
        let key = StuckTests.shared.started("\(test.id)")
        defer { StuckTests.shared.finished(key) }
        try await StuckTests.$current.withValue(key) {
            try await withTaskExecutorPreference(TestThreads.shared) { try await function() }
        }
    }
}

extension Trait where Self == OnTestThreads {
    /// See `OnTestThreads`.
    public static var onTestThreads: Self { OnTestThreads() }
}

/// A task executor whose jobs run on threads it starts whenever every thread it has is busy, up to
/// `limit`: a job that blocks its thread holds up no other.
public final class TestThreads: TaskExecutor, @unchecked Sendable {
    /// The executor of `OnTestThreads`.
    public static let shared = TestThreads(limit: 64)

    /// The most threads; beyond them jobs wait for one to come free.
    public let limit: Int
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var jobs: [UnownedJob] = []
    private var next = 0
    private var idle = 0
    private var threads = 0

    init(limit: Int) {
        self.limit = limit
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        defer { condition.unlock() }
        jobs.append(job)
        if jobs.count - next > idle && threads < limit {
            threads += 1
            let thread = Thread { [self] in work() }
            thread.start()
        } else {
            condition.signal()
        }
    }

    /// Threads started so far (tests).
    public var threadCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return threads
    }

    private func work() {
        ThreadName.setCurrent("test-thread")
        let executor = asUnownedTaskExecutor()
        while true {
            condition.lock()
            while next == jobs.count {
                idle += 1
                condition.wait()
                idle -= 1
            }
            let job = jobs[next]
            next += 1
            if next == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                next = 0
            }
            condition.unlock()
            job.runSynchronously(on: executor)
        }
    }
}
