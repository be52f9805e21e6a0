import Foundation
import JobModel
@testable import Storage
import Synchronization
import TestSupport
import Testing

/// The threads `file://` writes run on: as many at once as there is blocked work (up to the limit),
/// whatever Dispatch's global pool is doing, and none left once idle.
@Suite("blocking work pool", .onTestThreads)
struct BlockingWorkPoolTests {
    /// Waits until `condition` holds (at most `seconds`). These tests are synchronous on purpose: once
    /// started they need no cooperative thread back, which the full suite's load can withhold for tens
    /// of seconds — long enough for work waiting on a semaphore to give up.
    private func eventually(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            if Date() > deadline { return false }
            usleep(1_000)
        }
        return true
    }

    /// How long held work waits for the test to release it: only a broken test gets there.
    private static var held: DispatchTime { .now() + 600 }

    @Test("sixteen pieces of work that block all run at once, each on a thread of its own")
    func blockedWorkRunsAtOnce() {
        let pool = BlockingWorkPool(name: "test-pool", limit: 64, idleTime: 600)
        let running = Atomic<Int>(0)
        let release = DispatchSemaphore(value: 0)
        let finished = Atomic<Int>(0)
        for _ in 0..<16 {
            pool.run {
                running.add(1, ordering: .relaxed)
                _ = release.wait(timeout: Self.held)
                finished.add(1, ordering: .relaxed)
            }
        }
        // At once: Dispatch's global pool, which adds a thread for blocked ones only now and then, would
        // have a few running after 5 s.
        #expect(eventually(5) { running.load(ordering: .relaxed) == 16 }, "\(running.load(ordering: .relaxed)) running")
        #expect(pool.threadCount == 16)
        for _ in 0..<16 { release.signal() }
        #expect(eventually(60) { finished.load(ordering: .relaxed) == 16 })
    }

    /// The order is watched on one thread: the first piece stays held on the other until the end. (With
    /// both threads free, two pieces taken in order can finish, or even begin, the other way round: the
    /// pool promises the order they are taken in, not how the two threads are scheduled.)
    @Test("beyond the limit, work waits for a free thread and runs in the order it came")
    func workBeyondTheLimitWaitsInOrder() {
        let pool = BlockingWorkPool(name: "test-pool", limit: 2, idleTime: 600)
        let gates = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
        let order = Mutex<[Int]>([])
        let running = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        for index in 0..<10 {
            pool.run {
                let now = running.add(1, ordering: .relaxed).newValue
                most.max(now, ordering: .relaxed)
                if index < 2 { _ = gates[index].wait(timeout: Self.held) }
                order.withLock { $0.append(index) }
                running.subtract(1, ordering: .relaxed)
            }
        }
        #expect(eventually(60) { running.load(ordering: .relaxed) == 2 })
        // Both threads are held: nothing else has run.
        usleep(50_000)
        #expect(order.withLock { $0 }.isEmpty)
        // One thread freed: the eight waiting pieces run on it, one after another, in the order they came.
        gates[1].signal()
        #expect(eventually(60) { order.withLock { $0.count } == 9 })
        #expect(order.withLock { $0 } == Array(1..<10))
        gates[0].signal()
        #expect(eventually(60) { order.withLock { $0.count } == 10 })
        #expect(order.withLock { $0 } == Array(1..<10) + [0])
        #expect(most.load(ordering: .relaxed) == 2)
        #expect(pool.threadCount == 2)
    }

    @Test("threads end after the idle time; later work starts new ones")
    func idleThreadsEnd() {
        let pool = BlockingWorkPool(name: "test-pool", limit: 8, idleTime: 0.2)
        let done = Atomic<Int>(0)
        let release = DispatchSemaphore(value: 0)
        for _ in 0..<4 { pool.run { _ = release.wait(timeout: Self.held); done.add(1, ordering: .relaxed) } }
        #expect(eventually(60) { pool.threadCount == 4 })
        for _ in 0..<4 { release.signal() }
        #expect(eventually(60) { done.load(ordering: .relaxed) == 4 })
        #expect(eventually(60) { pool.threadCount == 0 })
        pool.run { done.add(1, ordering: .relaxed) }
        #expect(eventually(60) { done.load(ordering: .relaxed) == 5 })
    }

    @Test("many short pieces of work from many threads all run, on no more threads than the limit")
    func manyShortPieces() {
        let pool = BlockingWorkPool(name: "test-pool", limit: 4, idleTime: 0.05)
        let done = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<2_000 {
                pool.run {
                    most.max(pool.threadCount, ordering: .relaxed)
                    done.add(1, ordering: .relaxed)
                }
            }
        }
        #expect(eventually(60) { done.load(ordering: .relaxed) == 16_000 }, "\(done.load(ordering: .relaxed)) of 16,000")
        #expect(most.load(ordering: .relaxed) <= 4)
        // Idle threads that end as work arrives never strand it: every piece ran, and then all ended.
        #expect(eventually(60) { pool.threadCount == 0 })
    }

    @Test("every pool thread carries the pool's name in the system, cut to 15 bytes, however many start at once")
    func threadsAreNamed() {
        for (name, shown) in [("named-pool", "named-pool"), ("a-pool-named-at-length", "a-pool-named-at")] {
            let pool = BlockingWorkPool(name: name, limit: 48, idleTime: 0.05)
            let names = Mutex<[String]>([])
            let release = DispatchSemaphore(value: 0)
            // Each piece holds its thread until all have started: 48 threads start at once, each naming
            // itself while the others are being created.
            for _ in 0..<48 {
                pool.run {
                    names.withLock { $0.append(Thread.current.name ?? "?") }
                    release.wait()
                }
            }
            #expect(eventually(60) { names.withLock { $0.count } == 48 })
            for _ in 0..<48 { release.signal() }
            #expect(names.withLock { $0 } == Array(repeating: shown, count: 48))
            #expect(eventually(60) { pool.threadCount == 0 })
        }
    }

    @Test("FileIO runs a download's commit on its own threads and hands back the result or the typed error")
    func fileIORunsOffThePool() async throws {
        let name = try await FileIO.run(.other) { () throws(StorageError) -> String in Thread.current.name ?? "" }
        #expect(name == "jobctl-file-io")
        await #expect(throws: StorageError.self) {
            try await FileIO.run(.other) { () throws(StorageError) -> Int in throw StorageError(.unknown, "disk gone", retryable: true) }
        }
        let directory = try TemporaryDirectory("file-io")
        defer { directory.remove() }
        let destination = directory.file("out.bin")
        let partial = try PartialFile(destination: destination, jobID: JobID.generate(), resumeFrom: nil)
        try partial.write(Data("committed".utf8))
        let path = try await partial.commitOffPool()
        #expect(path == destination)
        #expect(try String(contentsOfFile: destination, encoding: .utf8) == "committed")
    }

    @Test("a download's file knows whether its filesystem is kept in memory, as stat -f names it")
    func memoryFilesystemIsRecognised() throws {
        let temporary = try TemporaryDirectory("fs-type")
        defer { temporary.remove() }
        var folders = [temporary.path, PackagePaths.root]
        if FileManager.default.fileExists(atPath: "/dev/shm") { folders.append("/dev/shm") }
        var sawMemory = false
        for folder in folders {
            let destination = "\(folder)/fs-type-\(JobID.generate()).bin"
            let partial = try PartialFile(destination: destination, jobID: nil, resumeFrom: nil)
            defer { partial.discard() }
            let named = try runProcess("/usr/bin/stat", ["-f", "--format=%T", folder]).stdout
                .trimmingCharacters(in: .whitespacesAndNewlines)
            let memory = named == "tmpfs" || named == "ramfs"
            sawMemory = sawMemory || memory
            #expect(partial.onMemoryFilesystem == memory, "\(folder) is \(named)")
        }
        if FileManager.default.fileExists(atPath: "/dev/shm") { #expect(sawMemory, "/dev/shm is not tmpfs here") }
    }
}

/// Every thread jobctl starts names itself in the system, as `top -H` and `perf` show it.
@Suite("thread names", .onTestThreads)
struct ThreadNameTests {
    @Test("a name is cut to 15 bytes on a character boundary and read back")
    func cutAndReadBack() {
        let cases = [("short", "short"), ("exactly-15-byte", "exactly-15-byte"), ("sixteen-bytes-xx", "sixteen-bytes-x"),
                     ("naïve-threads-é", "naïve-threads-"), ("fourteen-bytesé", "fourteen-bytes")]
        for (name, shown) in cases {
            let read = Mutex<String?>(nil)
            let done = DispatchSemaphore(value: 0)
            let thread = Thread {
                ThreadName.setCurrent(name)
                read.withLock { $0 = Thread.current.name }  // Foundation reads the OS name
                done.signal()
            }
            thread.start()
            done.wait()
            #expect(read.withLock { $0 } == shown, "\(name)")
        }
    }

}
