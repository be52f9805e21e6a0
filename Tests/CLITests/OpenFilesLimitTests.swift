import Foundation
import Testing
import TestSupport

/// A worker raises its soft open-files limit to the hard one at start, and warns when even the hard
/// limit is below what its concurrency may need (each transfer holds a socket or file, often more).
@Suite("worker open-files limit", .onTestThreads) struct OpenFilesLimitTests {
    /// "Max open files" of a running process: (soft, hard), from /proc.
    static func openFilesLimit(pid: Int32) -> (soft: String, hard: String)? {
        guard let limits = try? String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8),
              let line = limits.split(separator: "\n").first(where: { $0.hasPrefix("Max open files") }) else { return nil }
        let fields = line.dropFirst("Max open files".count).split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 2 else { return nil }
        return (String(fields[0]), String(fields[1]))
    }

    /// A shell that sets `ulimit` then becomes `jobctl --db DB ARGS` (same pid).
    static func workerUnderLimit(_ ulimit: String, _ workspace: CLIWorkspace, _ arguments: [String], log: String,
                                 environment: [String: String] = [:]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "ulimit \(ulimit) && exec \"$@\"", "sh", PackagePaths.jobctlBinary, "--db", workspace.database, "worker"]
            + arguments
        process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin"].merging(environment) { _, given in given }
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let handle = FileHandle(forWritingAtPath: log)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return process
    }

    @Test("a worker started with a soft limit below the hard one runs with the hard one")
    func raisesTheSoftLimit() throws {
        let workspace = try CLIWorkspace("nofile-raise")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let inherited = try #require(Self.openFilesLimit(pid: getpid()))
        let hard = try #require(UInt64(inherited.hard) ?? (inherited.hard == "unlimited" ? UInt64.max : nil))
        try #require(hard > 128, "this test needs a hard open-files limit above 128 (it is \(inherited.hard))")
        let log = workspace.directory.file("worker.log")
        let worker = try Self.workerUnderLimit("-Sn 64", workspace, ["--log-format", "json"], log: log)
        defer {
            worker.signalTree(SIGKILL)
            worker.waitForExit()
        }
        let deadline = Date().addingTimeInterval(30)
        while worker.isRunning, Date() < deadline,
              !((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("worker_started") {
            usleep(20_000)
        }
        let limit = try #require(Self.openFilesLimit(pid: worker.processIdentifier), "the worker ended: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        // Raised from 64 to the hard limit (capped at 2^20 when the hard limit is higher or unlimited).
        #expect(limit.soft == (hard > 1 << 20 ? "\(1 << 20)" : inherited.hard), "soft \(limit.soft), hard \(limit.hard)")
        #expect(limit.hard == inherited.hard)
        #expect(!((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("open_files_limit"))
        signalIfRunning(worker, SIGTERM)
        worker.waitForExit()
        #expect(worker.terminationStatus == 0)
    }

    @Test("a hard limit below what the concurrency needs is named in a warning, and the worker still runs its jobs")
    func warnsWhenTheHardLimitIsLow() throws {
        let workspace = try CLIWorkspace("nofile-low")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            - {kind: upload-data, data: one, destination: "file://limits/1.txt"}
            - {kind: upload-data, data: two, destination: "file://limits/2.txt"}
            - {kind: upload-data, data: three, destination: "file://limits/3.txt"}
            """)
        try #require(ids.count == 3)
        let log = workspace.directory.file("worker.log")
        // Soft and hard 100: 16 transfers may need 16 × 4 + 64 = 128.
        let worker = try Self.workerUnderLimit("-n 100", workspace, ["--drain", "--concurrency", "16", "--log-format", "json"], log: log)
        worker.waitForExit()
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(worker.terminationStatus == 0, "\(text)")
        let lines = text.split(separator: "\n")
        let warning = try #require(lines.first { $0.contains("\"open_files_limit\"") }, "\(text)")
        // Logged at start, but after `worker_started`, which opens the run's log.
        #expect(lines.first?.contains("\"worker_started\"") == true && lines.dropFirst().first == warning, "\(text)")
        let line = try #require(try JSONSerialization.jsonObject(with: Data(warning.utf8)) as? [String: Any])
        #expect(line["level"] as? String == "warning")
        let fields = try #require(line["fields"] as? [String: Any])
        #expect(fields["limit"] as? Int == 100 && fields["needed"] as? Int == 128 && fields["concurrency"] as? Int == 16)
        // (100 - 64) / 4 transfers fit.
        #expect(fields["running"] as? Int == 9)
        #expect((fields["action"] as? String)?.contains("ulimit -n") == true)
        let states = try workspace.json(["list", "--json"]) as? [[String: Any]]
        #expect(states?.compactMap { $0["state"] as? String } == ["succeeded", "succeeded", "succeeded"])
    }

    /// The start's warnings wait for `worker_started`; a worker that stops before it starts still writes
    /// them (before its error), since they may say why.
    @Test("a worker that stops before it starts still logs the open-files warning, before its error")
    func warningOfAWorkerThatNeverStarted() throws {
        let workspace = try CLIWorkspace("nofile-never")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let log = workspace.directory.file("worker.log")
        let missing = workspace.directory.file("no-such-bundle.pem")
        let worker = try Self.workerUnderLimit("-n 100", workspace, ["--drain", "--concurrency", "16"], log: log,
                                               environment: ["JOBCTL_CA_BUNDLE": missing])
        worker.waitForExit()
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(worker.terminationStatus == 1, "\(text)")
        let lines = text.split(separator: "\n")
        let warning = try #require(lines.firstIndex { $0.contains(" open_files_limit ") }, "\(text)")
        let error = try #require(lines.firstIndex { $0.contains("JOBCTL_CA_BUNDLE") && $0.contains("does not exist") }, "\(text)")
        #expect(warning < error, "\(text)")
        #expect(!text.contains("worker_started"), "\(text)")
    }

    /// Out of descriptors, libdispatch's thread monitor traps and a failed WAL open left the worker hanging
    /// (deaf to SIGTERM, its claimed jobs `running`): a limit that fits no transfer beside the store and the
    /// log stops the worker before it claims anything, with exit 1 saying what to raise.
    @Test("a hard limit that fits no transfer stops the worker at start with exit 1, no job claimed", arguments: [12, 16, 40])
    func refusesALimitThatFitsNoTransfer(limit: Int) throws {
        let workspace = try CLIWorkspace("nofile-tiny")
        defer { workspace.directory.remove() }
        try FileManager.default.createDirectory(atPath: workspace.directory.file("objects"), withIntermediateDirectories: true)
        var manifest = ""
        for index in 0..<200 {
            let path = workspace.directory.file("objects/o-\(index).bin")
            try Data(repeating: UInt8(index % 251), count: 64).write(to: URL(fileURLWithPath: path))
            manifest += "- {kind: download-memory, source: \"file://\(path)\"}\n"
        }
        _ = try workspace.submit(manifest)
        let log = workspace.directory.file("worker.log")
        let worker = try Self.workerUnderLimit("-n \(limit)", workspace, ["--drain", "--concurrency", "2"], log: log)
        let deadline = Date().addingTimeInterval(30)
        while worker.isRunning && Date() < deadline { usleep(50_000) }
        let exited = !worker.isRunning
        if !exited { worker.signalTree(SIGKILL) }
        worker.waitForExit()
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(exited, "still running after 30 s: \(text.suffix(600))")
        #expect(worker.terminationReason == .exit && worker.terminationStatus == 1, "\(worker.terminationReason) \(worker.terminationStatus) \(text.suffix(600))")
        #expect(text.contains("Error: the open-files limit \(limit) is below the 68 a worker needs to run one transfer"), "\(text.suffix(600))")
        let states = try #require(try workspace.json(["list", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(states.count == 200 && states.allSatisfy { $0["state"] as? String == "queued" })
    }
}
