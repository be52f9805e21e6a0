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

    /// A cycle inside one manifest is an error at its entry (65); one through two manifests of a submit
    /// was found only by the store, and said with the new jobs' ids and exit 1: no file, line or key to fix.
    @Test("an 'after' cycle through two manifests is an error at its first job, naming the keys and where they were written",
          arguments: StoreEngine.allCases)
    func aCycleAcrossManifests(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("dependency-cycle", engine: engine)
        defer { workspace.directory.remove() }
        let first = try workspace.write("cy1.yaml", "jobs:\n  - {kind: upload-data, data: a, destination: file://b/a, key: ca, after: [cb]}\n")
        let second = try workspace.write("cy2.yaml", """
        jobs:
          - {kind: upload-data, data: c, destination: file://b/c}
          - {kind: upload-data, data: b, destination: file://b/b, key: cb, after: [ca]}
        """)
        for dryRun in [true, false] {
            let output = try workspace.jobctl(["submit"] + (dryRun ? ["--dry-run"] : []) + [first, second])
            #expect(output.status == 65, "\(output.stderr)")
            #expect(output.stderr.contains("cy1.yaml:2:5: error: 'after' makes a cycle: 'ca' → 'cb' → 'ca' (written at \(first):2, \(second):3)"),
                    "\(output.stderr)")
        }
        #expect(try workspace.jobctl(["list"]).stdout.split(separator: "\n").count <= 1, "nothing was submitted")
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

    /// A chain whose head fails for good (its object is missing) ends with its dependants cancelled;
    /// once the object exists, `retry HEAD --with-dependants` reopens the chain — not the dependant a
    /// user cancelled by hand — and a worker runs it to the end, in order.
    @Test("retry --with-dependants reopens a failed chain and a worker runs it", arguments: StoreEngine.allCases)
    func retryWithDependantsReopensAFailedChain(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("deps-retry", engine: engine)
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let manifest = try workspace.write("chain.yaml", """
            jobs:
              - kind: download-file
                source: file://deps/one.txt
                destination: out/one.txt
                max_attempts: 1
                key: first
              - kind: upload-file
                source: out/one.txt
                destination: file://deps/two.txt
                check_source: false
                key: second
                after: [first]
              - kind: download-file
                source: file://deps/two.txt
                destination: out/three.txt
                key: third
                after: [second]
              - kind: upload-data
                data: by hand
                destination: file://deps/hand.txt
                key: hand
                after: [first]
            """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 4)
        let (first, second, third, hand) = (ids[0], ids[1], ids[2], ids[3])
        #expect(try workspace.jobctl(["cancel", hand], environment: environment).status == 0)

        // The object is missing: the head fails for good (exit 2), its dependants end cancelled.
        let failing = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(failing.status == 2, "\(failing.stderr)")
        func states() throws -> [String?] {
            let jobs = try jsonArray(workspace, ["list", "--json"], environment: environment)
            let byID = Dictionary(uniqueKeysWithValues: jobs.compactMap { job in (job["id"] as? String).map { ($0, job["state"] as? String) } })
            return ids.map { byID[$0] ?? nil }
        }
        #expect(try states() == ["failed", "cancelled", "cancelled", "cancelled"])
        // The cancel names its dependency in a field of its own.
        let history = try jsonArray(workspace, ["history", second, "--json"], environment: environment)
        #expect((history.last?["data"] as? [String: Any])?["dependency"] as? String == first, "\(history)")

        // A dry run of the bulk form says what would happen and changes nothing.
        let dry = try workspace.jobctl(["retry", "--state", "failed", "--with-dependants", "--dry-run", "--json"], environment: environment)
        #expect(dry.status == 0, "\(dry.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(dry.stdout.utf8)) as? [String: Any])
        #expect(report["dependants_reopened"] as? Int == 2 && report["dependants_kept"] as? Int == 1, "\(report)")
        let planned = try #require(report["jobs"] as? [[String: Any]])
        #expect(planned.map { $0["id"] as? String } == [first, second, third, hand])
        #expect(planned.map { $0["outcome"] as? String } == ["changed", "changed", "changed", "kept"])
        #expect(planned.dropFirst().allSatisfy { $0["dependant_of"] as? String == first }, "\(planned)")
        #expect(try states() == ["failed", "cancelled", "cancelled", "cancelled"])

        try FileManager.default.createDirectory(atPath: workspace.directory.file("buckets/deps"), withIntermediateDirectories: true)
        try "chained".write(toFile: workspace.directory.file("buckets/deps/one.txt"), atomically: true, encoding: .utf8)
        let output = try workspace.jobctl(["retry", first, "--with-dependants", "--json"], environment: environment)
        #expect(output.status == 0 && output.stderr.contains("\(hand)  cancelled  (left cancelled: "), "\(output.stderr)")
        let retried = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [[String: Any]])
        #expect(retried.map { $0["id"] as? String } == [first, second, third])
        #expect(retried.allSatisfy { $0["state"] as? String == "queued" }, "\(retried)")
        #expect(try states() == ["queued", "queued", "queued", "cancelled"])

        let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "4"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        #expect(try states() == ["succeeded", "succeeded", "succeeded", "cancelled"])
        #expect(try String(contentsOfFile: workspace.directory.file("out/three.txt"), encoding: .utf8) == "chained")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("buckets/deps/hand.txt")))
        let verified = try workspace.jobctl(["replay", "--verify"], environment: environment)
        #expect(verified.status == 0, "\(verified.stdout)\(verified.stderr)")
    }

    @Test("retry --with-dependants leaves a dependant cancelled by hand, and says so; other commands refuse the flag")
    func retryWithDependantsSaysWhatItLeft() throws {
        let workspace = try CLIWorkspace("deps-retry-text")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            - {kind: upload-data, data: x, destination: 'file://b/a', key: a}
            - {kind: upload-data, data: y, destination: 'file://b/b', key: b, after: [a]}
            - {kind: upload-data, data: z, destination: 'file://b/c', key: c, after: [a]}
            """)
        try #require(ids.count == 3)
        #expect(try workspace.jobctl(["cancel", ids[2]]).status == 0)
        #expect(try workspace.jobctl(["cancel", ids[0]]).status == 0)
        let retried = try workspace.jobctl(["retry", ids[0], "--with-dependants"])
        #expect(retried.status == 0, "\(retried.stderr)")
        #expect(retried.stdout == """
            \(ids[0])  queued
            \(ids[1])  queued  (reopened with \(ids[0]))
            \(ids[2])  cancelled  (left cancelled: job \(ids[2]) was not cancelled by a dependency's end (cancelled by hand, \
            or by a jobctl that did not record why); it stays cancelled: `jobctl retry \(ids[2])` opens it again)

            """, "\(retried.stdout)")
        let help = try workspace.jobctl(["retry", "--help"])
        #expect(help.status == 0 && help.stdout.contains("--with-dependants"), "\(help.stdout)")
        #expect(try workspace.jobctl(["pause", ids[0], "--with-dependants"]).status == 64)
    }

    /// `retry` of a job whose dependency is still failed or cancelled is refused (exit 1, with and without
    /// `--json`), naming the dependency and the retry that opens the job with it: it re-queued the job,
    /// which waited for ever. The bulk form refuses it at its turn — taken once a retry before it in the
    /// same run opened the dependency — and its dry run says the same, job by job.
    @Test("retry refuses a dependant whose dependency has ended; the bulk form and its dry run agree", arguments: StoreEngine.allCases)
    func retryRefusesADependantThatCouldNeverRun(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("deps-retry-refused", engine: engine)
        defer { workspace.directory.remove() }
        // y is listed (so submitted, and selected) before x, the job it waits for.
        let ids = try workspace.submit("""
            - {kind: upload-data, data: a, destination: 'file://b/a', key: a}
            - {kind: upload-data, data: b, destination: 'file://b/b', key: b, after: [a], queue: second}
            - {kind: upload-data, data: y, destination: 'file://b/y', key: y, after: [x]}
            - {kind: upload-data, data: x, destination: 'file://b/x', key: x}
            """)
        try #require(ids.count == 4)
        let (a, b, y, x) = (ids[0], ids[1], ids[2], ids[3])
        #expect(try workspace.jobctl(["cancel", a, x]).status == 0)
        let refusal = "job \(b) still waits for \(a) (key a), which was cancelled; retried alone, it could never run: "
            + "`jobctl retry \(a) --with-dependants` opens it again with \(a)"

        let plain = try workspace.jobctl(["retry", b])
        #expect(plain.status == 1 && plain.stdout.isEmpty, "\(plain.stdout)\(plain.stderr)")
        #expect(plain.stderr == "Error: \(b): \(refusal)\n", "\(plain.stderr)")
        let json = try workspace.jobctl(["retry", b, "--json"])
        let printed = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [Any]
        #expect(json.status == 1 && printed?.isEmpty == true, "\(json.stdout)")
        #expect(json.stderr == "Error: \(b): \(refusal)\n", "\(json.stderr)")
        let withDependants = try workspace.jobctl(["retry", b, "--with-dependants"])
        #expect(withDependants.status == 1 && withDependants.stderr == "Error: \(b): \(refusal)\n", "\(withDependants.stderr)")

        func outcomes(_ arguments: [String]) throws -> (status: Int32, jobs: [String]) {
            let output = try workspace.jobctl(["retry"] + arguments + ["--json"])
            let report = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any], "\(output.stderr)")
            let jobs = try #require(report["jobs"] as? [[String: Any]])
            return (output.status, jobs.map { "\($0["id"] as? String ?? "?") \($0["outcome"] as? String ?? "?") \($0["reason"] as? String ?? "-")" })
        }
        // b alone, by a filter: refused, in the dry run as in the run.
        for dryRun in [true, false] {
            let alone = try outcomes(["--state", "cancelled", "--queue", "second"] + (dryRun ? ["--dry-run"] : []))
            #expect(alone.status == 1 && alone.jobs == ["\(b) refused \(refusal)"], "dry run \(dryRun): \(alone)")
        }
        // Every cancelled job, oldest first: b after a is taken (a opened first); y, refused before x is
        // opened, goes once more after the others and is taken then — as it would be were it the younger.
        let expected = ["\(a) changed -", "\(b) changed -", "\(x) changed -", "\(y) changed -"]
        let dry = try outcomes(["--state", "cancelled", "--dry-run"])
        #expect(dry.status == 0 && dry.jobs == expected, "\(dry.jobs)")
        let states = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(states.allSatisfy { $0["state"] as? String == "cancelled" }, "the dry run changed nothing")
        let run = try outcomes(["--state", "cancelled"])
        #expect(run.status == 0 && run.jobs == expected, "\(run.jobs)")
        let after = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(after.allSatisfy { $0["state"] as? String == "queued" }, "\(after.map { $0["state"] ?? "?" })")
    }

    /// `retry Y X` and `retry Y X --with-dependants`, Y waiting for X and named first: Y's retry is refused
    /// at its turn (X still cancelled) and goes once more after X's. Before, Y was reported refused (exit
    /// 1) and, without --with-dependants, left cancelled.
    @Test("a retry of listed jobs does not depend on whether a dependant is named before its dependency",
          arguments: StoreEngine.allCases)
    func retryOfListedJobsInEitherOrder(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("deps-retry-listed", engine: engine)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            - {kind: upload-data, data: y, destination: 'file://b/y', key: y, after: [x]}
            - {kind: upload-data, data: x, destination: 'file://b/x', key: x}
            """)
        try #require(ids.count == 2)
        let (y, x) = (ids[0], ids[1])
        for extra in [[], ["--with-dependants"]] {
            #expect(try workspace.jobctl(["cancel", x, y]).status == 0)
            let retried = try workspace.jobctl(["retry", y, x] + extra)
            #expect(retried.status == 0 && retried.stderr.isEmpty, "\(extra): \(retried.stdout)\(retried.stderr)")
            let states = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
            #expect(states.allSatisfy { $0["state"] as? String == "queued" }, "\(extra): \(states.map { $0["state"] ?? "?" })")
        }
    }

    /// `retry --with-dependants` of every cancelled job, a dependant older than the job it waits for: the
    /// dependant's own retry is refused at its turn (its dependency still cancelled), then the dependency's
    /// reopens it. Before, the run reported it refused and exited 1 though it ended queued.
    @Test("a bulk retry --with-dependants does not depend on whether a dependant is older than its dependency",
          arguments: StoreEngine.allCases)
    func bulkRetryWithDependantsInEitherOrder(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("deps-retry-order", engine: engine)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            - {kind: upload-data, data: y, destination: 'file://b/y', key: y, after: [x]}
            - {kind: upload-data, data: x, destination: 'file://b/x', key: x}
            """)
        try #require(ids.count == 2)
        let (y, x) = (ids[0], ids[1])
        #expect(try workspace.jobctl(["cancel", x]).status == 0)
        for dryRun in [true, false] {
            let output = try workspace.jobctl(["retry", "--state", "cancelled", "--with-dependants", "--json"] + (dryRun ? ["--dry-run"] : []))
            let report = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any], "\(output.stderr)")
            let jobs = try #require(report["jobs"] as? [[String: Any]])
            let seen = jobs.map { "\($0["id"] as? String ?? "?") \($0["outcome"] as? String ?? "?")" }
            #expect(output.status == 0 && report["refused"] as? Int == 0, "dry run \(dryRun): \(seen) \(output.stderr)")
            #expect(seen == ["\(x) changed", "\(y) changed", "\(y) repeat"], "dry run \(dryRun): \(seen)")
        }
        let states = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(states.allSatisfy { $0["state"] as? String == "queued" }, "\(states.map { $0["state"] ?? "?" })")
    }

    /// A job waiting for two selected jobs (c after a and b, both cancelled) is left cancelled at the
    /// first one's retry and reopened by the second's: a dry run says so as the real run does it, and
    /// neither reports it left cancelled. The dry run planned each retry against the log as it stands,
    /// so it said c stays cancelled (twice); the real run counted it as left cancelled and reopened.
    @Test("a dependant of two selected jobs opens with the second, in a dry run too", arguments: StoreEngine.allCases)
    func aDependantOfTwoSelectedJobsOpensWithTheSecond(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("deps-retry-two", engine: engine)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            - {kind: upload-data, data: x, destination: 'file://b/a', key: a, queue: first}
            - {kind: upload-data, data: y, destination: 'file://b/b', key: b, queue: first}
            - {kind: upload-data, data: z, destination: 'file://b/c', key: c, queue: second, after: [a, b]}
            """)
        try #require(ids.count == 3)
        for id in ids.prefix(2) { #expect(try workspace.jobctl(["cancel", id]).status == 0) }
        let empty: [String: String] = [:]
        #expect(try jsonArray(workspace, ["list", "--json"], environment: empty).allSatisfy { $0["state"] as? String == "cancelled" })

        for dryRun in [true, false] {
            let output = try workspace.jobctl(["retry", "--state", "cancelled", "--queue", "first", "--with-dependants", "--json"]
                                              + (dryRun ? ["--dry-run"] : []))
            #expect(output.status == 0, "\(output.stderr)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
            #expect(report["dependants_reopened"] as? Int == 1 && report["dependants_kept"] as? Int == 0,
                    "dry run \(dryRun): \(report)")
            let jobs = try #require(report["jobs"] as? [[String: Any]])
            #expect(jobs.map { "\($0["id"] as? String ?? "?") \($0["outcome"] as? String ?? "?") \($0["dependant_of"] as? String ?? "-")" }
                    == ["\(ids[0]) changed -", "\(ids[1]) changed -", "\(ids[2]) changed \(ids[1])"], "dry run \(dryRun): \(jobs)")
        }
        #expect(try jsonArray(workspace, ["list", "--json"], environment: empty).allSatisfy { $0["state"] as? String == "queued" })

        // Retried by id, one after the other: c is reopened with the second, and not said to be left cancelled.
        for id in ids { #expect(try workspace.jobctl(["cancel", id]).status == 0) }
        let byID = try workspace.jobctl(["retry", ids[0], ids[1], "--with-dependants"])
        #expect(byID.status == 0, "\(byID.stderr)")
        #expect(byID.stdout == """
            \(ids[0])  queued
            \(ids[1])  queued
            \(ids[2])  queued  (reopened with \(ids[1]))

            """, "\(byID.stdout)")
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
        process.waitForExit()
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

    @Test("an upload's missing source that a download in another manifest or in the log writes is left to it",
          arguments: StoreEngine.allCases)
    func aSourceWrittenByAnotherManifestsOrTheLogsDownload(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("deps-source", engine: engine)
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        func submit(_ paths: [String]) throws -> ProcessOutput { try workspace.jobctl(["submit"] + paths, environment: environment) }
        let put = try workspace.write("put.yaml", "- {kind: upload-data, data: fetched, destination: file://deps/src.txt, key: put}\n")
        let fetch = try workspace.write("fetch.yaml", """
            - {kind: download-file, source: file://deps/src.txt, destination: out/a.txt, key: fetch, after: [put]}

            """)
        let publish = try workspace.write("publish.yaml", """
            - {kind: upload-file, source: out/a.txt, destination: file://deps/published.txt, key: publish, after: [fetch]}

            """)
        let wrong = try workspace.write("wrong.yaml", """
            - {kind: upload-file, source: out/b.txt, destination: file://deps/b.txt, after: [fetch]}

            """)
        // Alone, before the download is anywhere: refused at the source, naming the remedy.
        let alone = try submit([publish])
        #expect(alone.status == 65 && alone.stderr.contains("publish.yaml:1:31: error: 'source' 'out/a.txt' does not exist")
                && alone.stderr.contains("not yet finished in the log) can be named in the job's 'after:'"), "\(alone.stderr)")
        // Beside the manifest of the download that writes it (dry run: validated the same way).
        let together = try submit(["--dry-run", put, fetch, publish])
        #expect(together.status == 0 && together.stdout.contains("3 jobs valid"), "\(together.stdout)\(together.stderr)")
        // After it, with the download queued in the log: taken; a source it does not write still refused.
        #expect(try submit([put, fetch]).status == 0)
        let later = try submit([publish])
        #expect(later.status == 0, "\(later.stderr)")
        let refused = try submit([wrong])
        #expect(refused.status == 65 && refused.stderr.contains("wrong.yaml:1:31: error: 'source' 'out/b.txt' does not exist"),
                "\(refused.stderr)")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        #expect(try String(contentsOfFile: workspace.directory.file("buckets/deps/published.txt"), encoding: .utf8) == "fetched")
        // The download finished: a new upload waiting for it needs its file now.
        try FileManager.default.removeItem(atPath: workspace.directory.file("out/a.txt"))
        let again = try workspace.write("again.yaml", """
            - {kind: upload-file, source: out/a.txt, destination: file://deps/again.txt, after: [fetch]}

            """)
        let finished = try submit([again])
        #expect(finished.status == 65 && finished.stderr.contains("again.yaml:1:31: error: 'source' 'out/a.txt' does not exist"),
                "\(finished.stderr)")
    }

    @Test("submit --wait returns when every job has ended: 0 when all succeeded, 1 otherwise; the ids on standard output",
          arguments: StoreEngine.allCases)
    func submitWaitsForItsJobs(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("submit-wait", engine: engine)
        defer { workspace.directory.remove() }
        try workspace.write("buckets/deps/a.txt", "a")
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let worker = try LoggedWorker(workspace, [])
        defer { worker.kill() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        // A chain: the second waits for the first, so the wait spans two runs.
        let good = try workspace.write("good.yaml", """
            - {kind: download-file, source: file://deps/a.txt, destination: out/a.txt, key: fetch}
            - {kind: upload-file, source: out/a.txt, destination: file://deps/b.txt, after: [fetch], key: publish}

            """)
        let waited = try workspace.jobctl(["submit", "--wait", good], environment: environment)
        #expect(waited.status == 0 && waited.stdout.split(separator: "\n").count == 2, "\(waited.stdout)\(waited.stderr)")
        #expect(waited.stderr.contains("2 jobs: 2 succeeded"), "\(waited.stderr)")
        #expect(try String(contentsOfFile: workspace.directory.file("buckets/deps/b.txt"), encoding: .utf8) == "a")
        // One that fails: exit 1, counted.
        let bad = try workspace.write("bad.yaml", """
            - {kind: download-file, source: file://deps/missing.txt, destination: out/m.txt, max_attempts: 1}
            - {kind: upload-data, data: c, destination: file://deps/c.txt}

            """)
        let failed = try workspace.jobctl(["submit", "--wait", bad], environment: environment)
        #expect(failed.status == 1 && failed.stderr.contains("2 jobs: 1 failed, 1 succeeded"), "\(failed.stderr)")
        // list says why a job failed, by its error's name.
        let listed = try workspace.jobctl(["list", "--state", "failed"])
        let lines = listed.stdout.split(separator: "\n")
        #expect(lines.first?.hasSuffix("ERROR") == true && lines.count == 2 && lines[1].hasSuffix("objectNotFound"), "\(listed.stdout)")
        // Jobs already in the log under their keys are waited for too (ended already: at once).
        let again = try workspace.jobctl(["submit", "--wait", good], environment: environment)
        #expect(again.status == 0 && again.stdout == waited.stdout, "\(again.stdout)\(again.stderr)")
        let dry = try workspace.jobctl(["submit", "--wait", "--dry-run", good])
        #expect(dry.status == 64 && dry.stderr.contains("not with --dry-run"), "\(dry.stderr)")
    }

    /// `submit --wait` counted a job by its first end: one cancelled, then retried and run to success,
    /// still counted as cancelled, and a wait whose jobs all succeeded exited 1 ("1 cancelled, 1 succeeded").
    @Test("submit --wait counts a job retried after it ended by how it ends at last")
    func submitWaitFollowsARetry() throws {
        let workspace = try CLIWorkspace("submit-wait-retry")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let manifest = try workspace.write("jobs.yaml", """
            - {kind: upload-data, data: a, destination: file://w/a.txt}
            - {kind: upload-data, data: b, destination: file://w/b.txt}

            """)
        let outputPath = workspace.directory.file("wait.out"), errorPath = workspace.directory.file("wait.err")
        for path in [outputPath, errorPath] { try #require(FileManager.default.createFile(atPath: path, contents: nil)) }
        let waiter = Process()
        waiter.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        waiter.arguments = ["--db", workspace.database, "submit", "--wait", manifest]
        waiter.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": workspace.directory.path]
        waiter.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        waiter.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errorPath))
        try waiter.run()
        defer { if waiter.isRunning { waiter.signalTree(SIGKILL); waiter.waitForExit(seconds: 10) } }
        let ids = { ((try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init) }
        try #require(eventuallyTrue(seconds: 20) { ids().count == 2 }, "submit printed no ids")
        #expect(try workspace.jobctl(["cancel", ids()[0]]).status == 0)
        // The wait reads the jobs again once the log changed (at most every 200 ms): it sees the cancel.
        Thread.sleep(forTimeInterval: 1)
        #expect(try workspace.jobctl(["retry", ids()[0]]).status == 0)
        let drained = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(drained.status == 0, "\(drained.stderr)")
        #expect(waiter.waitForExit(seconds: 30), "the wait did not end")
        let said = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        #expect(waiter.terminationStatus == 0 && said.contains("2 jobs: 2 succeeded"), "exit \(waiter.terminationStatus): \(said)")
    }
}
