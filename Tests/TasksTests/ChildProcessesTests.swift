import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The tests' bounded waits for their child processes (`TestSupport/ChildProcesses.swift`) and the stuck
/// test report (`StuckTests`).
@Suite(.onTestThreads) struct ChildProcessesTests {
    /// A shell that starts `sleep 60` (in a session of its own with `setsid`), writes its pid to
    /// `pidFile` and then runs `then`.
    private static func shellWithSleep(_ pidFile: String, setsid: Bool = false, then: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "\(setsid ? "setsid " : "")sleep 60 & echo $! > '\(pidFile)'; \(then)"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    private static func pid(in file: String) -> pid_t? {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if let text = try? String(contentsOfFile: file, encoding: .utf8),
               let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)) { return pid }
            usleep(10_000)
        }
        return nil
    }

    /// Whether `pid` is gone or a zombie (ended, not yet reaped by its new parent).
    private static func ended(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(after: close)...].split(separator: " ").first == "Z"
    }

    /// Why the helpers exist: a child SIGKILLed alone leaves what it started holding Foundation's exit
    /// socket, and Foundation still calls it running. `signalTree` ends both, and the wait returns.
    @Test func signallingTheTreeEndsWhatTheChildStartedAndTheWaitReturns() throws {
        let directory = try TemporaryDirectory("jobctl-children")
        defer { directory.remove() }

        let alone = try Self.shellWithSleep(directory.file("alone.pid"), then: "wait")
        let aloneSleep = try #require(Self.pid(in: directory.file("alone.pid")))
        defer { kill(aloneSleep, SIGKILL) }
        signalIfRunning(alone, SIGKILL)
        usleep(1_000_000)
        #expect(alone.isRunning, "Foundation saw the shell end though its sleep (pid \(aloneSleep)) lives on")
        kill(aloneSleep, SIGKILL)
        #expect(alone.waitForExit(seconds: 20))

        let tree = try Self.shellWithSleep(directory.file("tree.pid"), then: "wait")
        let treeSleep = try #require(Self.pid(in: directory.file("tree.pid")))
        defer { kill(treeSleep, SIGKILL) }
        #expect(tree.descendants.contains(treeSleep))
        tree.signalTree(SIGKILL)
        #expect(tree.waitForExit(seconds: 20))
        #expect(tree.terminationReason == .uncaughtSignal)
        let deadline = Date().addingTimeInterval(20)
        while !Self.ended(treeSleep) && Date() < deadline { usleep(10_000) }
        #expect(Self.ended(treeSleep), "the sleep the shell started still runs")
    }

    /// A child that ended while something it started lives on, orphaned (no longer its descendant) but
    /// in the child's process group: the wait, at its limit, kills the orphan through the group, and
    /// records an issue that the child did not end in time.
    @Test func aWaitForAChildWhoseOrphanHoldsItsSocketKillsTheOrphanThroughTheGroup() throws {
        let directory = try TemporaryDirectory("jobctl-children")
        defer { directory.remove() }
        let process = try Self.shellWithSleep(directory.file("orphan.pid"), then: "exit 0")
        let orphan = try #require(Self.pid(in: directory.file("orphan.pid")))
        defer { kill(orphan, SIGKILL) }
        let started = Date()
        var ended = true
        withKnownIssue("the child is seen ended only once its orphan is killed") {
            ended = process.waitForExit(seconds: 1)
        }
        #expect(!ended)
        #expect(!process.isRunning)
        let waited = Date().timeIntervalSince(started)
        #expect(waited >= 1 && waited < 10, "waited \(waited) s")
        let deadline = Date().addingTimeInterval(20)
        while !Self.ended(orphan) && Date() < deadline { usleep(10_000) }
        #expect(Self.ended(orphan), "the orphan still runs")
    }

    /// An orphan that left the child's group (a session of its own): nothing finds it, and the wait
    /// still ends — at its limit and 10 s after its SIGKILLs — with an issue recorded, not when the
    /// orphan does.
    @Test func aWaitForAChildWhoseOrphanLeftItsGroupEndsAtItsLimit() throws {
        let directory = try TemporaryDirectory("jobctl-children")
        defer { directory.remove() }
        let process = try Self.shellWithSleep(directory.file("away.pid"), setsid: true, then: "exit 0")
        let orphan = try #require(Self.pid(in: directory.file("away.pid")))
        defer { kill(orphan, SIGKILL) }
        let started = Date()
        var ended = true
        withKnownIssue("the orphan holds Foundation's socket out of reach") {
            ended = process.waitForExit(seconds: 1)
        }
        #expect(!ended)
        let waited = Date().timeIntervalSince(started)
        #expect(waited >= 11 && waited < 30, "waited \(waited) s")
    }

    /// `runProcess` with a program that does not end: killed at its limit, an issue recorded, and
    /// `ProcessTimeout` thrown.
    @Test func runProcessEndsAProgramThatOutlivesItsLimit() throws {
        let started = Date()
        withKnownIssue("sleep 60 does not end within 1 s") {
            _ = try runProcess("/bin/sh", ["-c", "sleep 60; echo never"], seconds: 1)
        }
        let waited = Date().timeIntervalSince(started)
        #expect(waited >= 1 && waited < 20, "waited \(waited) s")
        // Within its limit, the output and status as ever.
        let output = try runProcess("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"], seconds: 20)
        #expect(output.status == 3 && output.stdout == "out\n" && output.stderr == "err\n")
    }

    /// A child waited for with `waitForExit` lets go of its pipes. Before, the Process (held by its
    /// run-loop source until `waitUntilExit`) kept its standard output's and error's read ends open for
    /// the rest of the run: 6,000 descriptors in a full run, and Foundation's spawn crashed reading its
    /// /proc/self/fd listing.
    @Test func aChildWaitedForLetsGoOfItsPipes() throws {
        var links: [(descriptor: Int32, link: String)] = []
        do {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/echo")
            process.arguments = ["hello"]
            let output = Pipe(), errors = Pipe()
            process.standardOutput = output
            process.standardError = errors
            try process.run()
            for handle in [output.fileHandleForReading, errors.fileHandleForReading] {
                links.append((handle.fileDescriptor, Self.link(of: handle.fileDescriptor)))
            }
            #expect(String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) == "hello\n")
            #expect(process.waitForExit(seconds: 30))
        }
        #expect(links.allSatisfy { $0.link.hasPrefix("pipe:") }, "\(links)")
        // A descriptor number may be reused meanwhile, never for the same pipe (its inode is in the link).
        for (descriptor, link) in links {
            #expect(Self.link(of: descriptor) != link, "descriptor \(descriptor) still holds \(link)")
        }
    }

    private static func link(of descriptor: Int32) -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)")) ?? ""
    }

    /// A private PostgreSQL server's `shutDown` reaps its supervising shell. Left a zombie, it kept Swift
    /// Testing's exit-test monitor (`waitid(P_ALL, WNOWAIT)` in a loop) spinning on a core for the rest
    /// of the run, and the exit tests waiting behind it.
    @Test func aPrivateServersShutDownReapsItsSupervisor() throws {
        let server = try PostgresServer.makePrivate()
        let supervisor = try #require(server.supervisorProcessID)
        #expect(kill(supervisor, 0) == 0)
        server.shutDown()
        #expect(kill(supervisor, 0) == -1 && errno == ESRCH, "the supervisor \(supervisor) is still there (a zombie: \(Self.ended(supervisor)))")
    }

    /// The stuck test report names each process under the test process with its command line, a URL's
    /// password hidden (the tests' PostgreSQL roles have passwords in their URLs).
    @Test func theStuckTestReportListsTheTestProcessesChildren() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "sleep 37; :", "postgres://role:secret-pw@127.0.0.1/db"]
        try process.run()
        defer {
            process.signalTree(SIGKILL)
            process.waitForExit(seconds: 20)
        }
        // Until the child has exec'd the shell, its command line is not there yet (a loaded CI run once
        // took the report between the two).
        var report = StuckTests.processes()
        let deadline = Date().addingTimeInterval(20)
        while !report.contains("sleep 37") && Date() < deadline {
            usleep(20_000)
            report = StuckTests.processes()
        }
        #expect(report.contains("\(process.processIdentifier) ppid \(getpid()) "), "\(report)")
        #expect(report.contains("sleep 37"), "\(report)")
        #expect(report.contains("postgres://role:***@127.0.0.1/db") && !report.contains("secret-pw"),
                "a URL's password is not printed: \(report)")
        #expect(report.contains("test-thread"), "the test process's threads: \(report)")
    }
}
