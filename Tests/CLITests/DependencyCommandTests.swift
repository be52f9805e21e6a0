import Foundation
import Testing
import TestSupport

/// `after:` through the built binary: names resolved at submit (or refused at the entry's line and
/// column), `list`/`show` saying what a job waits for, and a real worker running a chain in order.
@Suite(.onTestThreads) struct DependencyCommandTests {
    private func jsonArray(_ workspace: CLIWorkspace, _ arguments: [String], environment: [String: String]) throws -> [[String: Any]] {
        let output = try workspace.jobctl(arguments, environment: environment)
        guard output.status == 0 else { throw CLITestError("jobctl \(arguments) exited \(output.status): \(output.stderr)") }
        return try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [[String: Any]])
    }

    @Test("a worker with concurrency 4 runs a chain of three jobs in order", arguments: StoreEngine.allCases)
    func aWorkerRunsAChainInOrder(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("deps-chain", engine: engine)
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        // Each job reads what the one before it wrote: run out of order, the second finds no object and
        // the third no file. The last is listed first and all share one priority: only `after:` orders them.
        let manifest = try workspace.write("chain.yaml", """
            jobs:
              - kind: upload-file
                source: out/one.txt
                destination: file://deps/two.txt
                check_source: false
                key: third
                after: [second]
              - kind: download-file
                source: file://deps/one.txt
                destination: out/one.txt
                key: second
                after: [first]
              - kind: upload-data
                data: chained
                destination: file://deps/one.txt
                key: first
            """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 3)
        let (third, second, first) = (ids[0], ids[1], ids[2])

        let waiting = try workspace.jobctl(["show", third], environment: environment)
        #expect(waiting.stdout.contains("waiting for \(second)\n"), "\(waiting.stdout)")
        let listed = try workspace.jobctl(["list"], environment: environment.merging(["COLUMNS": "400"]) { a, _ in a })
        #expect(listed.stdout.contains("WAITING FOR") && listed.stdout.contains("waiting for \(second.prefix(10))…"), "\(listed.stdout)")
        let shown = try #require(try workspace.json(["show", third, "--json"]) as? [String: Any])
        #expect(shown["after"] as? [String] == [second] && shown["waiting_for"] as? [String] == [second], "\(shown)")

        let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "4"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        let jobs = Dictionary(uniqueKeysWithValues: try jsonArray(workspace, ["list", "--json"], environment: environment).compactMap { job in
            (job["id"] as? String).map { ($0, job) }
        })
        #expect(jobs.values.allSatisfy { $0["state"] as? String == "succeeded" }, "\(jobs)")
        // Each job started only after the one it waits for finished (event times, in ms).
        func time(_ id: String, _ field: String) throws -> Int64 { try #require((jobs[id]?[field] as? NSNumber)?.int64Value) }
        #expect(try time(second, "started_at_ms") >= (try time(first, "finished_at_ms")))
        #expect(try time(third, "started_at_ms") >= (try time(second, "finished_at_ms")))
        #expect(try String(contentsOfFile: workspace.directory.file("buckets/deps/two.txt"), encoding: .utf8) == "chained")
        #expect(try workspace.jobctl(["replay", "--verify"], environment: environment).status == 0)
    }

    @Test("an unknown name is refused at its line and column, and nothing is submitted", arguments: StoreEngine.allCases)
    func anUnknownNameIsRefusedAtItsPosition(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("deps-unknown", engine: engine)
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: 'file://b/x', key: known}\n")
        let manifest = try workspace.write("bad.yaml", """
            - kind: upload-data
              data: y
              destination: file://b/y
              after: [known, nobody]
            """)
        let refused = try workspace.jobctl(["submit", manifest])
        #expect(refused.status == 65)
        #expect(refused.stderr.contains("bad.yaml:4:18: error: 'after' names 'nobody', which is neither the key of a job"),
                "\(refused.stderr)")
        #expect(refused.stderr.contains("  after: [known, nobody]\n                 ^"), "\(refused.stderr)")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(jobs.count == 1)
    }

    /// `count` keyed upload-data jobs (each with `held` added to its fields) and a last one after all of
    /// them, its names on one line.
    static func fanIn(_ count: Int, held: String = "") -> String {
        var text = "jobs:\n"
        for index in 0..<count {
            text += "  - {kind: upload-data, data: x, destination: file://deps/i\(index), key: i\(index)\(held)}\n"
        }
        return text + "  - {kind: upload-data, data: x, destination: file://deps/z, key: z, after: ["
            + (0..<count).map { "i\($0)" }.joined(separator: ", ") + "]}\n"
    }

    /// One job after 8,000 others, its names on one line: each entry kept its own copy of that 56 KB
    /// line for a caret it might never need, 450 MB for the dry run (the line's length times its
    /// entries). Under a 200 MB data limit the dry run succeeds; without the limit it stays small.
    @Test("a job after thousands of names on one line is read in memory proportional to the manifest")
    func manyNamesOnOneLineAreReadInLinearMemory() throws {
        let workspace = try CLIWorkspace("deps-fan-in")
        defer { workspace.directory.remove() }
        let count = 8_000
        let manifest = try workspace.write("fan-in.yaml", Self.fanIn(count))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "ulimit -d 200000 && exec \"$@\"", "sh", PackagePaths.jobctlBinary, "--db", workspace.database,
                             "submit", "--dry-run", manifest]
        process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let log = workspace.directory.file("dry-run.log")
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let handle = try #require(FileHandle(forWritingAtPath: log))
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "\(output.suffix(2_000))")
        #expect(output.contains("\(count + 1) jobs valid; nothing submitted (--dry-run)"), "\(output.suffix(2_000))")
    }

    /// A job after many others: `list` names three of them in its cell and `show` twenty, each followed
    /// by how many more; `show --json` keeps them all. Every id was printed: a job after 10,000 others
    /// made `list --limit 3` print 150 KB and `show` 560 KB.
    @Test("list and show name a few of many dependencies and say how many more")
    func manyDependenciesAreCounted() throws {
        let workspace = try CLIWorkspace("deps-many")
        defer { workspace.directory.remove() }
        let count = 30
        let manifest = try workspace.write("many.yaml", Self.fanIn(count, held: ", run_after: \"2099-01-01T00:00:00Z\""))
        let submitted = try workspace.jobctl(["submit", manifest])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let last = try #require(submitted.stdout.split(separator: "\n").last.map(String.init))

        let listed = try workspace.jobctl(["list", "--limit", "1"], environment: ["COLUMNS": "400"])
        print(listed.stdout)
        #expect(listed.status == 0 && listed.stdout.contains("… and 27 more"), "\(listed.stdout)")
        #expect(listed.stdout.components(separatedBy: "…, ").count == 3, "\(listed.stdout)")

        let shown = try workspace.jobctl(["show", last])
        #expect(shown.status == 0, "\(shown.stderr)")
        let lines = shown.stdout.split(separator: "\n").filter { $0.hasPrefix("after:") || $0.hasPrefix("waiting:") }
        #expect(lines.count == 2 && lines.allSatisfy { $0.hasSuffix(" and 10 more") && $0.components(separatedBy: ", ").count == 20 },
                "\(shown.stdout)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(try workspace.jobctl(["show", last, "--json"]).stdout.utf8))
                                    as? [String: Any])
        #expect((json["after"] as? [String])?.count == count, "\(json)")
    }
}
