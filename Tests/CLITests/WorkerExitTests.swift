import Foundation
import Testing
import TestSupport

/// A worker that ends closes its database: SQLite copies the WAL into the database file and removes it,
/// so the next process to open the log does not read the whole WAL again to rebuild its index.
@Suite("A worker closes its database when it ends", .onTestThreads)
struct WorkerExitTests {
    /// The names of a running process's threads (Linux: `/proc/PID/task/*/comm`).
    private static func threadNames(_ pid: Int32) -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.compactMap { task in
            (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// The WAL's size, or nil when there is none.
    private static func walSize(_ workspace: CLIWorkspace) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: workspace.database + "-wal"))?[.size] as? Int
    }

    /// Eight drains in a row: the last job's task could still hold the pool (and the store) when the
    /// worker returned, and then the process exited before the database was closed — in about one
    /// drain of six, so one drain alone often passed.
    @Test("`worker --drain` leaves no WAL behind")
    func drainRemovesTheWAL() throws {
        let workspace = try CLIWorkspace("worker-exit-drain")
        defer { workspace.directory.remove() }
        for round in 0..<8 {
            let jobs = (0..<300).map { "- {kind: upload-data, data: \"job \(round) \($0)\", destination: \"file://exit/r\(round)-\($0).txt\"}" }
            _ = try workspace.submit(jobs.joined(separator: "\n"))
            let drained = try workspace.jobctl(["worker", "--drain", "--concurrency", "8"])
            #expect(drained.status == 0, "\(drained.stderr)")
            #expect(drained.stderr.contains("worker_stopped claimed=300 succeeded=300"), "\(drained.stderr)")
            #expect(Self.walSize(workspace) == nil,
                    "drain \(round + 1): the worker's database was not closed: a WAL of \(Self.walSize(workspace) ?? 0) bytes is left")
        }
        let replay = try workspace.jobctl(["replay", "--verify"])
        #expect(replay.status == 0, "\(replay.stdout)\(replay.stderr)")
    }

    /// Five stops in a row, for the same reason as the drains above (one stop alone left its WAL in
    /// about one run of three).
    @Test("a worker stopped with SIGTERM leaves no WAL behind")
    func sigtermRemovesTheWAL() throws {
        let workspace = try CLIWorkspace("worker-exit-term")
        defer { workspace.directory.remove() }
        for round in 0..<5 {
            let jobs = (0..<100).map { "- {kind: upload-data, data: \"job \(round) \($0)\", destination: \"file://exit/t\(round)-\($0).txt\"}" }
            _ = try workspace.submit(jobs.joined(separator: "\n"))
            let worker = try LoggedWorker(workspace, ["--concurrency", "4"], logName: "worker-\(round).log")
            defer { worker.kill() }
            try #require(eventuallyTrue(seconds: 20) { worker.log().contains(" started ") },
                         "stop \(round + 1): no job started:\n\(worker.log())")
            #expect(Self.walSize(workspace) != nil, "a running worker has a WAL")
            // A worker checkpoints its WAL on a thread of its own (`Context.openStore(worker:)`).
            if round == 0 {
                let threads = Self.threadNames(worker.process.processIdentifier)
                #expect(threads.contains("jobctl-ckpt"), "\(threads)")
            }
            worker.stop()
            #expect(worker.process.terminationStatus == 0, "\(worker.log())")
            #expect(worker.log().contains(" signal_received "), "\(worker.log())")
            #expect(Self.walSize(workspace) == nil,
                    "stop \(round + 1): the worker's database was not closed: a WAL of \(Self.walSize(workspace) ?? 0) bytes is left")
        }
        let replay = try workspace.jobctl(["replay", "--verify"])
        #expect(replay.status == 0, "\(replay.stdout)\(replay.stderr)")
    }

    /// Whether `pid` blocks `signal` (Linux: the `SigBlk` mask of `/proc/PID/status`).
    private static func blocks(_ pid: Int32, _ signal: Int32) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }),
              let mask = UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16) else { return false }
        return mask & (1 << UInt64(signal - 1)) != 0
    }

    /// A SIGTERM that came while the worker was starting (blocked, so pending) was read as soon as the
    /// handlers were installed, before the pool's run began: `signal_received` came before
    /// `worker_started`. The handlers now exist only between the two lines that open and close the log.
    @Test("a signal that comes while the worker starts is logged after worker_started")
    func earlySignalIsLoggedInOrder() throws {
        let workspace = try CLIWorkspace("worker-exit-early-signal")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: \"x\", destination: \"file://exit/x.txt\", queue: elsewhere}")
        for round in 0..<3 {
            let worker = try LoggedWorker(workspace, ["--queue", "default"], logName: "worker-\(round).log")
            defer { worker.kill() }
            let pid = worker.process.processIdentifier
            try #require(eventuallyTrue(seconds: 20) { Self.blocks(pid, SIGTERM) || !worker.process.isRunning }, "\(worker.log())")
            kill(pid, SIGTERM)
            #expect(eventuallyTrue(seconds: 20) { !worker.process.isRunning }, "\(worker.log())")
            worker.process.waitForExit()
            let events = worker.log().split(separator: "\n").compactMap { line in
                ["worker_started", "signal_received", "worker_stopped"].first { line.contains(" \($0) ") }
            }
            #expect(events == ["worker_started", "signal_received", "worker_stopped"], "round \(round + 1):\n\(worker.log())")
            #expect(worker.process.terminationStatus == 0, "\(worker.log())")
        }
    }

    /// A drain whose rescue failed a job — its last attempt had died with another worker (SIGKILL) —
    /// logged nothing for it and exited 0 (`failed=0`): `submit && worker --drain` reported success with a
    /// job failed for good. The rescue's outcome is logged (`rescued … outcome=failed`), counted in the
    /// summary and the drain exits 2; a job the rescue only puts back in the queue is logged too.
    @Test("a drain whose rescue fails a dead worker's last attempt exits 2 and names the job", arguments: StoreEngine.allCases)
    func rescueFailureFailsTheDrain(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("worker-exit-rescue-failed", engine: engine)
        defer { workspace.directory.remove() }
        let server = try TrickleServer(.trickle(interval: 0.05))
        defer { server.stop() }
        let ids = try workspace.submit("""
            - {kind: download-file, source: "\(server.baseURL)/last.bin", destination: out/last.bin, max_attempts: 1}
            - {kind: download-file, source: "\(server.baseURL)/again.bin", destination: out/again.bin, max_attempts: 2, queue: later}
            """)
        try #require(ids.count == 2)
        // The first worker runs both (one queue each, so each has a lease of its own) and dies mid-transfer.
        let crashed = try LoggedWorker(workspace, ["--lease", "2s", "--concurrency", "2", "--queue", "default", "--queue", "later"], logName: "crashed.log")
        defer { crashed.kill() }
        try #require(eventuallyTrue(seconds: 30) { crashed.log().components(separatedBy: " started ").count == 3 }, "\(crashed.log())")
        crashed.stop(SIGKILL)
        // The drain takes the default queue only: the job with an attempt left goes back to `later` and
        // stays there, the other's last attempt is lost.
        let drained = try workspace.jobctl(["worker", "--drain", "--json", "--lease", "2s", "--queue", "default"])
        #expect(drained.status == 2, "\(drained.stdout)\(drained.stderr)")
        let rescued = drained.stderr.split(separator: "\n").filter { $0.contains(" rescued ") }
        #expect(rescued.contains { $0.contains("Z error ") && $0.contains(" rescued \(ids[0]) ") && $0.contains("outcome=failed")
                    && $0.contains("error=retryLimitExceeded") && $0.contains("attempt=1 max_attempts=1") }, "\(drained.stderr)")
        #expect(rescued.contains { $0.contains("Z warning ") && $0.contains(" rescued \(ids[1]) ") && $0.contains("outcome=queued") },
                "\(drained.stderr)")
        let summary = try JSONSerialization.jsonObject(with: Data(drained.stdout.utf8)) as? [String: Any]
        #expect(summary?["rescued"] as? Int == 2 && summary?["rescued_failed"] as? Int == 1 && summary?["failed"] as? Int == 0,
                "\(drained.stdout)")
        #expect(drained.stderr.contains("worker_stopped claimed=0") && drained.stderr.contains("rescued=2 rescued_failed=1"),
                "\(drained.stderr)")
        let shown = try workspace.jobctl(["show", ids[1]])
        #expect(shown.stdout.contains("queued"), "\(shown.stdout)")
        // The text log's last line says why the exit status is 2.
        #expect(drained.stderr.contains("jobctl worker: 1 job ended failed, its last attempt lost with its worker (exit 2)"),
                "\(drained.stderr)")
    }
}
