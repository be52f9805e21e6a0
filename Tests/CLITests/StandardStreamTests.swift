import Foundation
import Testing
import TestSupport

/// A worker whose standard streams are closed, or whose log reader goes away, keeps working: it
/// neither stops at its first log line nor writes a line into a file it opened.
@Suite("closed and broken standard streams")
struct StandardStreamTests {
    /// `count` upload-data jobs that write `bytes-<n>.txt`, then as many downloads of them to
    /// `copies/`, in that order (by priority).
    static func manifest(_ count: Int) -> String {
        var text = ""
        for index in 0..<count {
            text += "- {kind: upload-data, data: \"\(String(repeating: "payload \(index) ", count: 40))\", "
                + "destination: \"file://b/bytes-\(index).txt\", priority: 2}\n"
        }
        for index in 0..<count {
            text += "- {kind: download-file, source: \"file://b/bytes-\(index).txt\", destination: \"copies/bytes-\(index).txt\", priority: 1}\n"
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

    /// SQLite never keeps a database on descriptors 0–2 (it parks /dev/null there), but a PostgreSQL
    /// connection's socket or a file the worker writes would take the lowest free number.
    @Test("a worker started with standard output and error closed drains, and no line lands in a file or socket it opened",
          arguments: StoreEngine.allCases)
    func closedStreams(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("closed-streams", engine: engine)
        defer { workspace.directory.remove() }
        _ = try workspace.submit(Self.manifest(20))
        let worker = try Self.run(workspace, ["worker", "--drain", "--concurrency", "4"], redirections: ">&- 2>&-")
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        try Self.expectEveryCopyExact(workspace, count: 20)
    }

    @Test("a worker whose log reader goes away goes on with its jobs and exits 0")
    func brokenLogPipe() throws {
        let workspace = try CLIWorkspace("broken-log-pipe")
        defer { workspace.directory.remove() }
        _ = try workspace.submit(Self.manifest(150))
        // `head` reads one line and exits; every later line meets a pipe without a reader.
        let worker = try Self.run(workspace, ["worker", "--drain", "--concurrency", "4"],
                                  redirections: "2>&1 >/dev/null | head -n 1 >/dev/null")
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        try Self.expectEveryCopyExact(workspace, count: 150)
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
}
