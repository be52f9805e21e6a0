import Foundation
import Glibc
import JobModel

/// Reports a test that runs far longer than any test should, while it still runs.
///
/// Why: a test that waits for ever (a child that never exits, a pipe a grandchild holds open, a lock
/// never released) stopped a CI run only at the CI's own time limit, an hour and a half later, and its
/// output said nothing of which test it was — the test process's last lines were still in its buffers.
/// Every test under `OnTestThreads` is registered here while it runs; a thread of its own looks every
/// few seconds, and a test running longer than `JOBCTL_TEST_STUCK_SECONDS` (600 by default) is named on
/// standard error, written at once, with what the test process and its children are doing (each
/// process's state, kernel wait channel and command line; each thread of the test process). Still
/// running at twice that, the report is written again and the test process aborts: the Swift runtime's
/// backtracer then prints every thread's stack, and the run fails in minutes, saying where it waited.
public final class StuckTests: @unchecked Sendable {
    public static let shared = StuckTests()

    private let lock = NSLock()
    // Guarded by `lock`.
    private var running: [Int: Entry] = [:]
    private var nextKey = 0
    private var watching = false
    private let limit: Double

    private struct Entry {
        let name: String
        let since: Double
        var limit: Double
        var reported = false
    }

    /// The running test's key (set by `OnTestThreads`), for `allow(seconds:)`.
    @TaskLocal public static var current: Int?

    /// Lets the running test take up to `seconds` before it is reported (and twice that before the
    /// process aborts): a soak told to run for 30 minutes is not stuck at 10.
    public static func allow(seconds: Double) {
        guard let key = current else { return }
        shared.lock.lock()
        if let entry = shared.running[key] { shared.running[key]?.limit = max(entry.limit, seconds) }
        shared.lock.unlock()
    }

    init() {
        let text = ProcessInfo.processInfo.environment["JOBCTL_TEST_STUCK_SECONDS"] ?? ""
        limit = Double(text).flatMap { $0 > 0 ? $0 : nil } ?? 600
    }

    /// Registers a running test; `finished(_:)` with the key ends it.
    public func started(_ name: String) -> Int {
        lock.lock()
        defer { lock.unlock() }
        nextKey += 1
        running[nextKey] = Entry(name: name, since: Self.now(), limit: limit)
        if !watching {
            watching = true
            let thread = Thread { [self] in watch() }
            thread.start()
        }
        return nextKey
    }

    public func finished(_ key: Int) {
        lock.lock()
        running[key] = nil
        lock.unlock()
    }

    private static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    private func watch() {
        ThreadName.setCurrent("stuck-tests")
        while true {
            sleep(5)
            let now = Self.now()
            lock.lock()
            var first: [String] = []
            var abortNow: [String] = []
            for (key, entry) in running {
                let age = now - entry.since
                if age >= 2 * entry.limit {
                    abortNow.append("\(entry.name) (\(Int(age)) s)")
                } else if age >= entry.limit && !entry.reported {
                    running[key]?.reported = true
                    first.append("\(entry.name) (\(Int(age)) s)")
                }
            }
            lock.unlock()
            if !first.isEmpty {
                report("=== tests running longer than their limit (JOBCTL_TEST_STUCK_SECONDS, \(Int(limit)) s unless the test allows more):", first)
            }
            if !abortNow.isEmpty {
                report("=== tests still running after twice their limit: aborting the test process for its threads' stacks", abortNow)
                abort()
            }
        }
    }

    private func report(_ heading: String, _ names: [String]) {
        var text = heading + "\n"
        for name in names { text += "  \(name)\n" }
        text += Self.processes()
        // Also to a file `make test` prints when the run fails: `swift test` relays the test process's
        // output through buffers of its own, lost if it is killed.
        let file = ProcessInfo.processInfo.environment["JOBCTL_TEST_STUCK_REPORT"]
            ?? "\(PackagePaths.root)/.build/stuck-tests.txt"
        if let handle = FileHandle(forWritingAtPath: file) ?? {
            FileManager.default.createFile(atPath: file, contents: nil)
            return FileHandle(forWritingAtPath: file)
        }() {
            handle.seekToEndOfFile()
            handle.write(Data(text.utf8))
            try? handle.close()
        }
        // Straight to the descriptor: the test process's standard error may sit behind buffers.
        text.utf8CString.withUnsafeBufferPointer { buffer in
            var offset = 0
            let count = buffer.count - 1
            while offset < count {
                let written = Glibc.write(2, buffer.baseAddress! + offset, count - offset)
                if written <= 0 { break }
                offset += written
            }
        }
    }

    /// The test process's threads and every process descending from it: pid, state, wait channel,
    /// command line.
    public static func processes() -> String {
        let me = getpid()
        var text = "  processes under the test process \(me):\n"
        for (pid, parent) in processTree(under: me) {
            text += "    \(describe("/proc/\(pid)", pid: pid, ppid: parent))\n"
        }
        text += "  threads of the test process:\n"
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        for task in tasks.compactMap({ Int32($0) }).sorted() {
            text += "    \(describe("/proc/self/task/\(task)", pid: task, ppid: me, command: false))\n"
        }
        return text
    }

    /// The threads of process `pid` (one of the test's children): each one's name, state, wait channel
    /// and the system call it is in (`/proc/PID/task/TID/syscall`: its number, then its arguments), for
    /// the message of a test whose child did not end: which of a worker's threads waits, and on what.
    public static func threads(of pid: Int32) -> String {
        var text = "  threads of process \(pid):\n"
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        for task in tasks.compactMap({ Int32($0) }).sorted() {
            let call = (read("/proc/\(pid)/task/\(task)/syscall") ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            text += "    \(describe("/proc/\(pid)/task/\(task)", pid: task, ppid: pid, command: false)) syscall=\(call.isEmpty ? "-" : call)\n"
        }
        return text
    }

    private static func describe(_ path: String, pid: Int32, ppid: Int32, command: Bool = true) -> String {
        let stat = read("\(path)/stat") ?? ""
        var state = "?"
        if let close = stat.lastIndex(of: ")") {
            state = stat[stat.index(after: close)...].split(separator: " ").first.map(String.init) ?? "?"
        }
        let comm = (read("\(path)/comm") ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        let wchan = read("\(path)/wchan") ?? ""
        let line = command ? (read("\(path)/cmdline") ?? "").split(separator: "\0").joined(separator: " ") : ""
        // A URL's password (the tests' PostgreSQL roles) is not printed.
        let shown = line.replacingOccurrences(of: "(://[^:/@ ]+:)[^@ ]+@", with: "$1***@", options: .regularExpression)
        return "\(pid) ppid \(ppid) \(state) \(comm) wchan=\(wchan.isEmpty ? "-" : wchan) \(shown.prefix(300))"
    }

    private static func read(_ path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
