import Foundation
import Testing
import TestSupport

/// A worker whose standard streams are closed, or whose log reader goes away, keeps working: it
/// neither stops at its first log line nor writes a line into a file it opened.
@Suite("closed and broken standard streams", .onTestThreads)
struct StandardStreamTests {
    /// `count` upload-data jobs that write `bytes-<n>.txt`, and a download of each to `copies/` that
    /// waits for its upload (`after:`).
    static func manifest(_ count: Int) -> String {
        var text = ""
        for index in 0..<count {
            text += "- {kind: upload-data, data: \"\(String(repeating: "payload \(index) ", count: 40))\", "
                + "destination: \"file://b/bytes-\(index).txt\", key: up-\(index)}\n"
            text += "- {kind: download-file, source: \"file://b/bytes-\(index).txt\", destination: \"copies/bytes-\(index).txt\", "
                + "after: [up-\(index)]}\n"
        }
        return text
    }

    /// Runs `jobctl --db DB ARGS` through bash with `redirections` after it; the worker's exit status
    /// is the script's.
    static func run(_ workspace: CLIWorkspace, _ arguments: [String], redirections: String) throws -> ProcessOutput {
        let command = ([PackagePaths.jobctlBinary, "--db", workspace.database] + arguments).map { "'\($0)'" }.joined(separator: " ")
        return try runProcess("/bin/bash", ["-c", "\(command) \(redirections); exit ${PIPESTATUS[0]}"],
                              environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
    }

    static func expectEveryCopyExact(_ workspace: CLIWorkspace, count: Int) throws {
        for index in 0..<count {
            let copy = FileManager.default.contents(atPath: workspace.directory.file("copies/bytes-\(index).txt"))
            #expect(copy == Data(String(repeating: "payload \(index) ", count: 40).utf8), "copy \(index)")
        }
        let states = try #require(try workspace.json(["list", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(states.count == 2 * count && states.allSatisfy { $0["state"] as? String == "succeeded" })
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    /// Drains `count` uploads and as many downloads with `redirections` after the worker's command line;
    /// the worker exits 0 and every copy is exact.
    static func drain(_ label: String, engine: StoreEngine = .sqlite, count: Int, redirections: String) throws {
        let workspace = try CLIWorkspace(label, engine: engine)
        defer { workspace.directory.remove() }
        _ = try workspace.submit(Self.manifest(count))
        let worker = try Self.run(workspace, ["worker", "--drain", "--concurrency", "4"], redirections: redirections)
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        try Self.expectEveryCopyExact(workspace, count: count)
    }

    @Test("a worker started with standard output and error closed drains, every copy exact", arguments: StoreEngine.allCases)
    func closedStreams(engine: StoreEngine) throws {
        try Self.drain("closed-streams", engine: engine, count: 20, redirections: ">&- 2>&-")
    }

    @Test("a worker whose log reader goes away goes on with its jobs and exits 0")
    func brokenLogPipe() throws {
        // `head` reads one line and exits; every later line meets a pipe without a reader.
        try Self.drain("broken-log-pipe", count: 150, redirections: "2>&1 >/dev/null | head -n 1 >/dev/null")
    }

    @Test("a worker whose log reader stops reading, and stays, drains its jobs and exits: the log waits, the jobs do not")
    func stalledLogReader() throws {
        let workspace = try CLIWorkspace("stalled-log-reader")
        defer { workspace.directory.remove() }
        try FileManager.default.createDirectory(atPath: workspace.directory.file("objects"), withIntermediateDirectories: true)
        var manifest = ""
        for index in 0..<1_500 {
            let path = workspace.directory.file("objects/o-\(index).bin")
            try Data(repeating: UInt8(index % 251), count: 64).write(to: URL(fileURLWithPath: path))
            manifest += "- {kind: download-memory, source: \"file://\(path)\"}\n"
        }
        _ = try workspace.submit(manifest)
        // Three lines a job, ~600 KB of log into a pipe that is never read: full after its first 64 KiB.
        // Written by the tasks that log, that froze the worker with its leases running out.
        let stalled = Pipe()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        process.arguments = ["--db", workspace.database, "worker", "--drain", "--concurrency", "8", "--lease", "5s"]
        process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": workspace.directory.path]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = stalled
        try process.run()
        let deadline = Date().addingTimeInterval(120)
        while process.isRunning && Date() < deadline { usleep(50_000) }
        let exited = !process.isRunning
        if !exited { process.signalTree(SIGKILL) }
        process.waitForExit()
        #expect(exited, "the worker was still running after 120 s: it waited for its log's reader")
        #expect(process.terminationStatus == 0)
        let states = try #require(try workspace.json(["list", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(states.count == 1_500 && states.allSatisfy { $0["state"] as? String == "succeeded" })
        // Nothing was lost from the record: every job has its full history.
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
        // The pipe holds the first lines, in order.
        let start = String(decoding: stalled.fileHandleForReading.availableData, as: UTF8.self)
        #expect(start.hasPrefix("worker_started") || start.contains("worker_started"), "\(start.prefix(300))")
    }

    /// The closed descriptors are taken by /dev/null opened for writing before anything else runs:
    /// SQLite parks /dev/null on low descriptors too, but read-only and only when it opens a file, and a
    /// PostgreSQL socket or a file the worker writes would otherwise take the number.
    @Test("jobctl opens /dev/null for writing on a closed standard output and error before anything else", arguments: StoreEngine.allCases)
    func closedDescriptorsReopened(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("closed-descriptors", engine: engine)
        defer { workspace.directory.remove() }
        _ = try workspace.submit(Self.manifest(1))
        let command = [PackagePaths.jobctlBinary, "--db", workspace.database, "worker"].map { "'\($0)'" }.joined(separator: " ")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["-c", "exec \(command) >&- 2>&-"]
        process.currentDirectoryURL = URL(fileURLWithPath: workspace.directory.path)
        try process.run()
        defer {
            process.signalTree(SIGKILL)
            process.waitForExit()
        }
        // The worker is running once it has run both jobs (the download's copy is on disk).
        let copy = workspace.directory.file("copies/bytes-0.txt")
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: copy), Date() < deadline { usleep(20_000) }
        #expect(FileManager.default.fileExists(atPath: copy), "the worker ran no job")
        for descriptor in [1, 2] {
            let target = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.processIdentifier)/fd/\(descriptor)")
            #expect(target == "/dev/null", "descriptor \(descriptor): \(target)")
            let info = try String(contentsOfFile: "/proc/\(process.processIdentifier)/fdinfo/\(descriptor)", encoding: .utf8)
            let flags = info.split(separator: "\n").first { $0.hasPrefix("flags:") }.flatMap { Int($0.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8) }
            #expect(flags.map { Int32($0) & O_ACCMODE } == O_WRONLY, "descriptor \(descriptor): \(info)")
        }
    }

    @Test("a reading command whose output pipe closes ends as filters do (SIGPIPE), with nothing on its error stream")
    func readerClosesThePipe() throws {
        let workspace = try CLIWorkspace("closed-reader")
        defer { workspace.directory.remove() }
        _ = try workspace.submit(Self.manifest(300))
        let list = try Self.run(workspace, ["list", "--limit", "0"], redirections: "| head -n 1 >/dev/null")
        #expect(list.status == 128 + 13 || list.status == 0, "\(list.status) \(list.stderr)")
        #expect(list.stderr.isEmpty, "\(list.stderr)")
    }

    /// Every command whose output goes to a full device (`/dev/full`) or to a closed descriptor ends with
    /// exit 1 and says so on standard error; a submit's jobs are in the log all the same.
    @Test("a command whose standard output fails (a full device, a closed descriptor) exits 1 and says so", arguments: [">/dev/full", ">&-"])
    func failedOutput(redirection: String) throws {
        let workspace = try CLIWorkspace("failed-output")
        defer { workspace.directory.remove() }
        // 600 jobs: more than one 64 KiB block of CSV or JSON.
        let ids = try workspace.submit(Self.manifest(300))
        let commands: [[String]] = [
            ["list", "--limit", "0", "--json"], ["list", "--limit", "0"], ["audit", "--csv"], ["audit", "--json"], ["audit"],
            ["show", ids[0]], ["history", ids[0]], ["stats"], ["pause", ids[0]], ["resume", ids[0]], ["--version"], ["help", "submit"],
        ]
        for command in commands {
            let run = try Self.run(workspace, command, redirections: redirection)
            #expect(run.status == 1, "\(command) \(redirection): \(run.status) \(run.stderr)")
            #expect(run.stderr.contains("Error: writing to standard output failed: "), "\(command) \(redirection): \(run.stderr)")
        }
        try FileManager.default.createDirectory(atPath: workspace.directory.file("more"), withIntermediateDirectories: true)
        let manifest = workspace.directory.file("more/m.yaml")
        try Data("- {kind: upload-data, data: x, destination: \"file://b/extra.txt\"}\n".utf8).write(to: URL(fileURLWithPath: manifest))
        let submit = try Self.run(workspace, ["submit", manifest], redirections: redirection)
        #expect(submit.status == 1 && submit.stderr.contains("what the command changed in the log stays changed"), "\(submit.stderr)")
        #expect(try workspace.jobctl(["list", "--limit", "0"]).stdout.contains("extra.txt"))
        // The worker runs its jobs whatever its output; a summary it could not print makes it exit 1.
        let worker = try Self.run(workspace, ["worker", "--drain", "--json"], redirections: redirection)
        #expect(worker.status == 1 && worker.stderr.contains("the summary was not printed"), "\(worker.status) \(worker.stderr.suffix(400))")
        let states = try #require(try workspace.json(["list", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(states.count == 601 && states.allSatisfy { $0["state"] as? String == "succeeded" })
    }
}
