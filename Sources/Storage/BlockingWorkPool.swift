import Foundation
import JobModel

/// Threads for work that blocks in the kernel (file I/O, `fsync`): one thread for each piece of work
/// running at once, up to `limit`, started when work arrives and no thread is idle, ended after
/// `idleTime` without work. Work beyond `limit` waits its turn in arrival order.
///
/// Not a Dispatch queue: Linux's libdispatch keeps its global pool near one thread a core and adds a
/// thread for blocked ones only now and then, so sixteen concurrent `file://` uploads whose syncs
/// block ran a few at a time — the disk's syncs, which share a journal commit when they come together,
/// came one after another. Not the cooperative pool either: a blocked thread there holds back every
/// Swift task of the process.
final class BlockingWorkPool: @unchecked Sendable {
    // @unchecked: every stored var is read and written only with `condition` locked.
    private let condition = NSCondition()
    private var waiting: [@Sendable () -> Void] = []
    /// Index of the next item of `waiting` to run (run items are dropped in batches).
    private var next = 0
    private var threads = 0
    /// Threads waiting for work, and how many of them were signalled for work not yet taken.
    private var idle = 0
    private var signalled = 0
    /// The most threads at once.
    let limit: Int
    /// How long an idle thread waits for work before it ends.
    let idleTime: TimeInterval
    private let name: String

    init(name: String, limit: Int, idleTime: TimeInterval = 10) {
        self.name = name
        self.limit = max(1, limit)
        self.idleTime = idleTime
    }

    /// Runs `work` on a pool thread, as soon as one is free.
    func run(_ work: @escaping @Sendable () -> Void) {
        condition.lock()
        waiting.append(work)
        var start = false
        if idle > signalled {
            signalled += 1
            condition.signal()
        } else if threads < limit {
            threads += 1
            start = true
        }
        condition.unlock()
        guard start else { return }
        do throws(ThreadStartFailure) {
            try StartedThread.start(name: name, stackSize: 512 << 10) { [self] in
                while let work = nextWork() { work() }
            }
        } catch {
            // No thread to be had (a process limit): a thread the pool has takes the work; with none,
            // the caller runs what waits, blocking as it would without the pool, rather than wait for a
            // thread that never runs.
            condition.lock()
            threads -= 1
            var stranded: [@Sendable () -> Void] = []
            if threads == 0 { swap(&stranded, &waiting) }
            condition.unlock()
            for work in stranded { work() }
        }
    }

    /// How many threads the pool has now (tests).
    var threadCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return threads
    }

    /// The next piece of work, waiting up to `idleTime` for one; nil ends the thread. Whatever woke it,
    /// a thread looks at the queue before it ends: work added while it was waking is never left behind.
    private func nextWork() -> (@Sendable () -> Void)? {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(idleTime)
        while true {
            if next < waiting.count {
                let work = waiting[next]
                next += 1
                if next == waiting.count {
                    waiting.removeAll(keepingCapacity: true)
                    next = 0
                } else if next >= 1024 {
                    waiting.removeFirst(next)
                    next = 0
                }
                return work
            }
            if Date() >= deadline {
                threads -= 1
                return nil
            }
            idle += 1
            _ = condition.wait(until: deadline)
            idle -= 1
            if signalled > 0 { signalled -= 1 }
        }
    }
}
