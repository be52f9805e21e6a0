import Dispatch
import Foundation
import Synchronization
import Testing
import TestSupport

/// The tests' own executor (`TestSupport.OnTestThreads`): a test's body and the child tasks it awaits run
/// on threads that may block without holding up each other or the cooperative pool.
@Suite(.onTestThreads) struct TestThreadsTests {
    /// The calling thread's name in the operating system (Foundation reads it back on Linux).
    private static func threadName() -> String { Thread.current.name ?? "" }

    @Test func aTestsBodyRunsOnATestThread() async {
        #expect(Self.threadName() == "test-thread")
        await Task.yield()
        #expect(Self.threadName() == "test-thread", "after a suspension")
    }

    /// An unstructured task — what the product starts for a job or a transfer — does not inherit the
    /// preference: it runs on the cooperative pool, as in a worker.
    @Test func anUnstructuredTaskRunsOnTheCooperativePool() async {
        let name = await Task { Self.threadName() }.value
        #expect(name != "test-thread")
        #expect(!name.isEmpty)
    }

    /// Four child tasks that each block until all four have started all finish. On the cooperative pool
    /// (as wide as the machine: two threads here) the first two would block it and the last two never
    /// start: each wait would run out.
    @Test func blockingChildTasksDoNotHoldUpEachOther() async {
        let count = 4
        let arrived = Arrivals()
        let allArrived = DispatchSemaphore(value: 0)
        let waits = await withTaskGroup(of: Bool.self) { group -> [Bool] in
            for _ in 0..<count {
                group.addTask {
                    let here = arrived.count.withLock { count in
                        count += 1
                        return count
                    }
                    if here == count { for _ in 0..<count { allArrived.signal() } }
                    return allArrived.wait(timeout: .now() + 20) == .success
                }
            }
            var waits: [Bool] = []
            for await finished in group { waits.append(finished) }
            return waits
        }
        #expect(waits == Array(repeating: true, count: count))
        #expect(TestThreads.shared.threadCount >= count)
    }
}

private final class Arrivals: Sendable {
    let count = Mutex(0)
}
