import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Bounded waits for the tests' child processes.
///
/// Foundation's `Process` on Linux learns that its child ended when a socket it handed the child closes,
/// and every process the child starts inherits that socket (swift-corelibs-foundation issue 4795): a
/// child that ended while something it started runs on (strace's tracee, a worker's `sleep`, a server's
/// own children) is "running" for as long as they live, and `waitUntilExit()` waits with it — with no
/// limit. A CI run hung that way until its own time limit, an hour and a half later, saying nothing of
/// where. These waits end: a child is signalled with everything it started, and a wait that outlives
/// its limit kills what it can, records an issue naming the program, and returns.
extension Process {
    /// The processes this child started that still descend from it (not those whose parent already
    /// ended: the kernel gives them to another), parents before their children.
    public var descendants: [pid_t] {
        guard isRunning else { return [] }
        return processTree(under: processIdentifier).map(\.pid)
    }

    /// Sends `signal` to this child (only while Foundation has not reaped it; see `signalIfRunning`), to
    /// every process it started that still descends from it, the deepest first, and to the child's
    /// process group — Foundation starts each child as the leader of a group of its own, which what it
    /// starts stays in even once orphaned (strace's tracee after strace died, a shell's `sleep &`):
    /// SIGKILL then leaves nothing behind holding Foundation's socket or the child's pipes. The group's
    /// id cannot name another group meanwhile: the kernel does not reuse an id while a process or a
    /// group holds it, and an unreaped child holds its own.
    /// Returns the descendants it signalled.
    @discardableResult
    public func signalTree(_ signal: Int32) -> [pid_t] {
        guard isRunning else { return [] }
        let signalled = descendants
        for pid in signalled.reversed() { kill(pid, signal) }
        let pid = processIdentifier
        if getpgid(pid) == pid { kill(-pid, signal) }
        signalIfRunning(self, signal)
        return signalled
    }

    /// `signal` to this child alone (SIGTERM, SIGSTOP: what the child itself answers), SIGKILL to its
    /// tree (`signalTree`): the rule of every test helper that stops a child.
    public func send(_ signal: Int32) {
        if signal == SIGKILL { signalTree(SIGKILL) } else { signalIfRunning(self, signal) }
    }

    /// Waits up to `seconds` for this child to be seen ended. Past that, SIGKILLs it and what it started,
    /// gives that 10 s, and records an issue when it still is not seen ended. Returns whether it ended
    /// within `seconds`.
    @discardableResult
    public func waitForExit(seconds: Double = 120, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        if Self.poll(self, seconds: seconds) { return true }
        let name = executableURL?.lastPathComponent ?? "a child"
        let leftovers = signalTree(SIGKILL)
        if !Self.poll(self, seconds: 10) {
            Issue.record("\(name) (pid \(processIdentifier)) is not seen ended \(Int(seconds)) s on and 10 s after SIGKILL: something it started holds Foundation's exit socket",
                         sourceLocation: sourceLocation)
        } else {
            Issue.record("\(name) (pid \(processIdentifier), \(arguments ?? [])) did not end within \(Int(seconds)) s; killed with what it started (\(leftovers))",
                         sourceLocation: sourceLocation)
        }
        return false
    }

    /// Whether this child is seen ended within `seconds`: polled, nothing signalled, no issue recorded
    /// (for a test that expects a child to stay); once ended, Foundation lets it go (see `poll`).
    public func ended(within seconds: Double) -> Bool { Self.poll(self, seconds: seconds) }

    private static func poll(_ process: Process, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning {
            if Date() >= deadline { return false }
            usleep(10_000)
        }
        // Returns at once now, and lets the Process go: on Linux its run-loop source holds it (and so its
        // pipes) until `waitUntilExit` drops the source. Polled alone, every child kept its standard
        // output and error pipes open in the test process: 6,000 descriptors a run, enough for
        // Foundation's spawn to crash reading past its /proc/self/fd buffer (corelibs-foundation #5472).
        process.waitUntilExit()
        return true
    }
}

/// Every process descending from `root` (the children each of its threads started, theirs, and so on),
/// each with its parent, parents before their children.
public func processTree(under root: pid_t) -> [(pid: pid_t, parent: pid_t)] {
    var found: [(pid: pid_t, parent: pid_t)] = []
    var seen: Set<pid_t> = []
    var queue: [pid_t] = [root]
    while !queue.isEmpty, found.count < 4096 {
        let parent = queue.removeFirst()
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(parent)/task")) ?? []
        for task in tasks {
            let text = (try? String(contentsOfFile: "/proc/\(parent)/task/\(task)/children", encoding: .utf8)) ?? ""
            for child in text.split(separator: " ").compactMap({ pid_t($0) }) where seen.insert(child).inserted {
                found.append((child, parent))
                queue.append(child)
            }
        }
    }
    return found
}
