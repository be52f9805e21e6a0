import Foundation
import Synchronization
import Testing
import TestSupport
import Worker
import JobModel

/// A worker under a `Type=notify` unit speaks the service manager's notification protocol: one datagram
/// of `KEY=value` lines to the Unix socket `NOTIFY_SOCKET` names. The socket here is the test's own,
/// read as systemd reads it.
@Suite("worker notifies the service manager", .onTestThreads) struct ServiceNotifyTests {
    @Test("READY=1 after worker_started, STATUS= with its counts, the watchdog's pings, STOPPING=1 at SIGTERM")
    func readyStatusWatchdogStopping() throws {
        let workspace = try CLIWorkspace("notify")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let listener = try NotifySocket()
        let worker = try LoggedWorker(workspace, ["--concurrency", "2"],
                                      environment: ["NOTIFY_SOCKET": listener.name, "WATCHDOG_USEC": "200000"])
        defer { worker.kill() }
        let ready = try #require(listener.receive(within: 20), "no datagram:\n\(worker.log())")
        let lines = ready.split(separator: "\n").map(String.init)
        #expect(lines.contains("READY=1"), "\(ready)")
        #expect(lines.contains("MAINPID=\(worker.process.processIdentifier)"), "\(ready)")
        #expect(lines.contains("STATUS=started: 2 transfer slots, queues *"), "\(ready)")
        // Ready only once started: `worker_started` is logged first (by the log's own thread, so it may
        // reach the file a moment later).
        #expect(eventuallyTrue(seconds: 5) { worker.log().contains(" worker_started ") }, "\(worker.log())")

        // An interval of 0.2 s: a ping every 0.1 s.
        let pings = listener.receiveAll(for: 1.2).filter { $0.split(separator: "\n").contains("WATCHDOG=1") }
        #expect(pings.count >= 6 && pings.count <= 14, "\(pings.count) pings in 1.2 s")

        _ = try workspace.submit("""
            - {kind: upload-data, data: one, destination: "file://notify/1.txt"}
            - {kind: upload-data, data: two, destination: "file://notify/2.txt"}
            """)
        var status: String?
        let counted = eventuallyTrue(seconds: 20) {
            for message in listener.receiveAll(for: 0.2) {
                for line in message.split(separator: "\n") where line.hasPrefix("STATUS=") { status = String(line) }
            }
            return status?.contains("2 succeeded") == true
        }
        #expect(counted, "last status: \(status ?? "none")\n\(worker.log())")
        #expect(status == "STATUS=0 of 2 transfers running; since start 2 succeeded, 0 failed, 0 retried", "\(status ?? "none")")

        signalIfRunning(worker.process, SIGTERM)
        var stopping: String?
        _ = eventuallyTrue(seconds: 10) {
            stopping = listener.receiveAll(for: 0.2).first { $0.split(separator: "\n").contains("STOPPING=1") }
            return stopping != nil
        }
        #expect(stopping?.contains("STATUS=stopping") == true, "\(stopping ?? "no STOPPING=1")")
        worker.process.waitForExit()
        #expect(worker.process.terminationStatus == 0, "\(worker.log())")
    }

    /// A second after `STOPPING=1` the loop's next turn replaced the stop's status with the running one
    /// ("0 of 4 transfers running"), while the worker was still releasing a job: the stop's status
    /// stands now, and the watchdog is still fed.
    @Test("once stopping, the loop's turns feed the watchdog and leave the stop's status")
    func stoppingStatusStands() throws {
        let listener = try NotifySocket()
        let notifier = try #require(try ServiceNotifier.fromEnvironment(["NOTIFY_SOCKET": listener.name, "WATCHDOG_USEC": "200000"]))
        notifier.ready(status: "started")
        notifier.turned(status: { "1 of 4 transfers running" }, nowMs: Clock.monotonicMs() + 2_000)
        let running = listener.receiveAll(for: 0.3)
        #expect(running.contains { $0.contains("STATUS=1 of 4 transfers running") }, "\(running)")
        notifier.stopping(status: "stopping: releasing")
        notifier.turned(status: { "0 of 4 transfers running" }, nowMs: Clock.monotonicMs() + 5_000)
        let stopping = listener.receiveAll(for: 0.3)
        #expect(stopping.first?.contains("STOPPING=1\nSTATUS=stopping: releasing") == true, "\(stopping)")
        #expect(stopping.contains { $0.split(separator: "\n").contains("WATCHDOG=1") }, "\(stopping)")
        #expect(!stopping.contains { $0.contains("transfers running") }, "\(stopping)")
    }

    /// A turn waiting on its store within the store's limits past the interval is fed from another thread
    /// (see `WatchdogStoreWaitTests` for a worker's); a loop not waiting so (hung elsewhere, or on a call past
    /// those limits) is not, and the watchdog finds it.
    @Test("the feeder's thread pings only while the loop waits within its store's limits, asking for half the ping period's wait")
    func feederPingsOnlyWhileWaiting() throws {
        let listener = try NotifySocket()
        // An interval of 1 s: a ping due every 0.5 s, asked for at least every 0.125 s.
        let notifier = try #require(try ServiceNotifier.fromEnvironment(["NOTIFY_SOCKET": listener.name, "WATCHDOG_USEC": "1000000"]))
        let waiting = Mutex(false)
        let asked = Mutex<Set<Int64>>([])
        let feeder = try #require(try notifier.feedWhileWaiting { minimumMs in
            asked.withLock { _ = $0.insert(minimumMs) }
            return waiting.withLock { $0 }
        })
        defer { feeder.stop() }
        func pings(for seconds: Double) -> Int {
            listener.receiveAll(for: seconds).filter { $0.split(separator: "\n").contains("WATCHDOG=1") }.count
        }
        #expect(pings(for: 1.2) == 0)
        waiting.withLock { $0 = true }
        let fed = pings(for: 2.6)
        #expect(fed >= 3 && fed <= 6, "\(fed) pings in 2.6 s")
        // A store call counts once it has lasted half the pings' period (at most a second).
        #expect(asked.withLock { $0 } == [250])
        waiting.withLock { $0 = false }
        _ = listener.receiveAll(for: 0.2)
        #expect(pings(for: 1.2) == 0)
        #expect(try ServiceNotifier.fromEnvironment(["NOTIFY_SOCKET": listener.name])?.feedWhileWaiting { _ in true } == nil)
    }

    @Test("a socket path works as the abstract name does; a watchdog meant for another process is not fed")
    func socketPathAndAnotherProcessWatchdog() throws {
        let workspace = try CLIWorkspace("notify-path")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        // Short: a Unix socket's path holds 107 bytes.
        let path = "/tmp/jobctl-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        defer { unlink(path) }
        let listener = try NotifySocket(path: path)
        let worker = try LoggedWorker(workspace, [], environment: ["NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000",
                                                                   "WATCHDOG_PID": "\(getpid())"])
        defer { worker.kill() }
        let ready = try #require(listener.receive(within: 20), "no datagram:\n\(worker.log())")
        #expect(ready.split(separator: "\n").contains("READY=1"), "\(ready)")
        let later = listener.receiveAll(for: 1)
        #expect(!later.contains { $0.split(separator: "\n").contains("WATCHDOG=1") }, "\(later)")
        worker.stop()
        #expect(worker.process.terminationStatus == 0, "\(worker.log())")
    }

    /// A Type=notify unit whose worker cannot say it is ready is killed at its start timeout with
    /// nothing said: a variable set but unusable stops the worker at once, saying which and why.
    @Test("an unusable NOTIFY_SOCKET, WATCHDOG_USEC or WATCHDOG_PID stops the worker at start, exit 1, naming it",
          arguments: [
              (["NOTIFY_SOCKET": "run/notify"], "NOTIFY_SOCKET='run/notify' is neither an absolute path nor an abstract socket name"),
              // Nothing there: READY=1 went nowhere, and a Type=notify unit waited 15 minutes.
              (["NOTIFY_SOCKET": "/nonexistent/notify"], "NOTIFY_SOCKET='/nonexistent/notify' names no socket the service manager listens on"),
              (["NOTIFY_SOCKET": "/" + String(repeating: "d", count: 120)], "is longer than a Unix socket address holds (107 bytes)"),
              (["NOTIFY_SOCKET": "@", ], "NOTIFY_SOCKET='@' is not a socket name"),
              (["NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "30s"], "WATCHDOG_USEC='30s' is not a number of microseconds"),
              (["NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "500"], "WATCHDOG_USEC='500' is below 2 ms"),
              (["NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "-1"], "WATCHDOG_PID='-1' is not a process id"),
          ])
    func unusableVariables(environment: [String: String], message: String) throws {
        let workspace = try CLIWorkspace("notify-bad")
        defer { workspace.directory.remove() }
        let result = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(!result.stderr.contains("worker_started"), "\(result.stderr)")
    }

    /// With `--log-format json` a worker that cannot start wrote its error as a plain `Error:` line, the one
    /// line a JSON-only log shipper could not read, at the moment that mattered. It is a `worker_failed`
    /// line of the log now, with the exit status; the text format keeps the `Error:` line.
    @Test("a worker that cannot start says why in its log's format: a worker_failed JSON line with --log-format json")
    func startFailureInTheLogsFormat() throws {
        let workspace = try CLIWorkspace("log-format-failure")
        defer { workspace.directory.remove() }
        let missing = workspace.directory.file("none.db")
        for (arguments, environment, status, said) in [
            (["--db", missing, "worker", "--log-format", "json"], [String: String](), Int32(1), "no database at"),
            (["--db", missing, "worker", "--log-format", "json"], ["JOBCTL_STALL_TIMEOUT": "banana"], Int32(1), "JOBCTL_STALL_TIMEOUT"),
        ] {
            let output = try runProcess(PackagePaths.jobctlBinary, arguments, environment: environment.merging(["NO_COLOR": "1"]) { a, _ in a })
            #expect(output.status == status, "\(output.stderr)")
            let lines = output.stderr.split(separator: "\n")
            #expect(!lines.isEmpty && lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) is [String: Any] },
                    "\(output.stderr)")
            let failure = lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
                .first { $0["event"] as? String == "worker_failed" }
            let fields = failure?["fields"] as? [String: Any]
            #expect(failure?["level"] as? String == "error" && (fields?["error"] as? String)?.contains(said) == true
                    && fields?["exit_code"] as? Int == Int(status), "\(output.stderr)")
        }
        let text = try runProcess(PackagePaths.jobctlBinary, ["--db", missing, "worker"], environment: ["NO_COLOR": "1"])
        #expect(text.status == 1 && text.stderr.hasPrefix("Error: no database at"), "\(text.stderr)")
    }

    /// `systemctl start` of a Type=notify unit fails when the worker exits before READY=1, and waits for
    /// it otherwise: a worker that stops at start (here a CA bundle that is not there) never says it.
    @Test("a worker that stops at start never says READY=1")
    func noReadyWhenTheStartFails() throws {
        let workspace = try CLIWorkspace("notify-fail")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let listener = try NotifySocket()
        let result = try workspace.jobctl(["worker"], environment: ["NOTIFY_SOCKET": listener.name, "WATCHDOG_USEC": "200000",
                                                                    "JOBCTL_CA_BUNDLE": workspace.directory.file("none.pem")])
        #expect(result.status == 1 && result.stderr.contains("JOBCTL_CA_BUNDLE"), "\(result.stderr)")
        let sent = listener.receiveAll(for: 0.3)
        #expect(!sent.contains { $0.split(separator: "\n").contains("READY=1") }, "\(sent)")
    }

    /// The protocol's variables are the worker's alone: a token command it runs (here one that writes
    /// what it sees, for a gs:// job against a port nothing listens on) must not be able to speak for it.
    @Test("a token command the worker runs does not inherit NOTIFY_SOCKET, WATCHDOG_USEC or WATCHDOG_PID")
    func tokenCommandDoesNotInheritThem() throws {
        let workspace = try CLIWorkspace("notify-child")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("""
            - {kind: download-memory, source: "gs://bkt/o.txt", max_attempts: 1}
            """)
        let listener = try NotifySocket()
        let seen = workspace.directory.file("seen.txt")
        let command = "printf '%s %s %s' \"${NOTIFY_SOCKET-unset}\" \"${WATCHDOG_USEC-unset}\" \"${WATCHDOG_PID-unset}\" > '\(seen)'; echo token"
        let result = try workspace.jobctl(["worker", "--drain"], environment: [
            "NOTIFY_SOCKET": listener.name, "WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "\(getpid())",
            "STORAGE_EMULATOR_HOST": "127.0.0.1:9", "JOBCTL_TOKEN_COMMAND": command,
        ])
        #expect(result.status == 2, "the job fails (nothing listens): \(result.stderr)")
        let text = try String(contentsOfFile: seen, encoding: .utf8)
        #expect(text == "unset unset unset", "the token command saw: \(text)")
    }

    @Test("without NOTIFY_SOCKET (or with it empty) nothing is sent and WATCHDOG_USEC alone changes nothing")
    func unsetMeansSilent() throws {
        let workspace = try CLIWorkspace("notify-none")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        for environment in [["WATCHDOG_USEC": "junk"], ["NOTIFY_SOCKET": "", "WATCHDOG_USEC": "junk"]] {
            let result = try workspace.jobctl(["worker", "--drain"], environment: environment)
            #expect(result.status == 0, "\(environment): \(result.stderr)")
        }
    }
}
