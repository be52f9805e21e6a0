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
}
