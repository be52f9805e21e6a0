import Foundation
import Testing
import TestSupport

/// One-shot commands on PostgreSQL behind a connection that goes silent mid-session (a proxy that stops
/// forwarding, a stopped server process): they fail after `JOBCTL_DB_ANSWER_TIMEOUT` instead of
/// hanging, and a submit is never half-written.
@Suite("PostgreSQL answer limit of one-shot commands", .onTestThreads)
struct PostgresAnswerLimitTests {
    static let manifest = """
    jobs:
      - kind: upload-data
        data: "one"
        destination: file://docs/one.txt
      - kind: upload-data
        data: "two"
        destination: file://docs/two.txt
    """

    /// The workspace's database URL, reached through `proxy` instead.
    static func proxied(_ workspace: CLIWorkspace, _ proxy: StallingTCPProxy) throws -> String {
        let server = try PostgresServer.shared()
        let direct = "@127.0.0.1:\(server.port)/"
        #expect(workspace.database.contains(direct))
        return workspace.database.replacingOccurrences(of: direct, with: "@127.0.0.1:\(proxy.port)/")
    }

    /// Runs jobctl with `arguments`, killing it when it still runs after `seconds` (then `status` is
    /// nil): a hang fails the test instead of holding the whole run.
    static func run(_ arguments: [String], environment: [String: String], within seconds: Double,
                    in directory: String) throws -> (status: Int32?, stdout: String, stderr: String, elapsed: Double) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        process.arguments = arguments
        process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": directory].merging(environment) { _, new in new }
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let errorPath = "\(directory)/stderr-\(UUID().uuidString)", outputPath = "\(directory)/stdout-\(UUID().uuidString)"
        guard FileManager.default.createFile(atPath: errorPath, contents: nil), FileManager.default.createFile(atPath: outputPath, contents: nil),
              let errorFile = FileHandle(forWritingAtPath: errorPath), let outputFile = FileHandle(forWritingAtPath: outputPath) else {
            throw CLITestError("could not create \(errorPath) and \(outputPath), files the test needs")
        }
        defer {
            try? errorFile.close()
            try? outputFile.close()
        }
        process.standardOutput = outputFile
        process.standardError = errorFile
        let start = Date()
        try process.run()
        while process.isRunning && Date().timeIntervalSince(start) < seconds { usleep(50_000) }
        let hung = process.isRunning
        if hung { process.signalTree(SIGKILL) }
        process.waitForExit()
        let stderr = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        let stdout = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        return (hung ? nil : process.terminationStatus, stdout, stderr, Date().timeIntervalSince(start))
    }

    @Test("list behind a proxy that stops forwarding at its query fails after the limit, naming it, exit 1")
    func listStalled() throws {
        let workspace = try CLIWorkspace("pg-stall-list", engine: .postgres)
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let proxy = try StallingTCPProxy(upstreamPort: try PostgresServer.shared().port, stallWhenClientSends: "FROM jobs")
        defer { proxy.stop() }
        let url = try Self.proxied(workspace, proxy)

        let listed = try Self.run(["--db", url, "list"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "2s"],
                                  within: 40, in: workspace.directory.path)
        #expect(proxy.stalledConnections == 1)
        #expect(listed.status == 1, "still running after \(Int(listed.elapsed)) s (nil: killed): \(listed.stderr)")
        #expect(listed.stderr.contains("the server sent no answer for 2 s"), "\(listed.stderr)")
        #expect(listed.stderr.contains("JOBCTL_DB_ANSWER_TIMEOUT"), "\(listed.stderr)")
        #expect(listed.elapsed < 20, "took \(listed.elapsed) s")
        #expect(!listed.stderr.contains(try PostgresServer.shared().password))
    }

    /// The server took the connection and answered its start-up, then went silent at the session's first
    /// statement (the one that finds the log's schema): the limit held only from after the session's
    /// set-up, and the command waited for ever. It fails after the limit now, and asks the server once.
    @Test("list stalled at its session's first statement fails after the limit, naming it, exit 1; one connection")
    func listStalledAtSessionSetUp() throws {
        let workspace = try CLIWorkspace("pg-stall-open", engine: .postgres)
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let proxy = try StallingTCPProxy(upstreamPort: try PostgresServer.shared().port, stallWhenClientSends: "to_regclass('schema_migrations'")
        defer { proxy.stop() }
        let url = try Self.proxied(workspace, proxy)

        let listed = try Self.run(["--db", url, "list"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "2s"],
                                  within: 30, in: workspace.directory.path)
        #expect(listed.status == 1, "still running after \(Int(listed.elapsed)) s (nil: killed): \(listed.stderr)")
        #expect(proxy.stalledConnections == 1)
        #expect(listed.stderr.contains("the server sent no answer for 2 s"), "\(listed.stderr)")
        #expect(listed.elapsed < 15, "took \(listed.elapsed) s")
        #expect(!listed.stderr.contains(try PostgresServer.shared().password))
    }

    @Test("submit stalled at its COMMIT fails after the limit saying the outcome is unknown; nothing was half-written")
    func submitStalledAtCommit() throws {
        let workspace = try CLIWorkspace("pg-stall-submit", engine: .postgres)
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let path = try workspace.write("jobs.yaml", Self.manifest)
        let proxy = try StallingTCPProxy(upstreamPort: try PostgresServer.shared().port, stallWhenClientSends: "COMMIT\u{0}")
        defer { proxy.stop() }
        // The statement's text ends with a NUL in the protocol (`READ COMMITTED` in BEGIN is not it).
        let url = try Self.proxied(workspace, proxy)

        let submitted = try Self.run(["--db", url, "submit", path], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "2s"],
                                     within: 40, in: workspace.directory.path)
        #expect(proxy.stalledConnections == 1)
        #expect(submitted.status == 1, "still running after \(Int(submitted.elapsed)) s (nil: killed): \(submitted.stderr)")
        #expect(submitted.stderr.contains("the server sent no answer for 2 s"), "\(submitted.stderr)")
        #expect(submitted.stderr.contains("the server may have committed the transaction"), "\(submitted.stderr)")
        #expect(submitted.elapsed < 20, "took \(submitted.elapsed) s")
        // The COMMIT never reached the server: not one of the jobs is there (read directly).
        let list = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(list.isEmpty, "\(list)")
    }

    /// A read transaction's COMMIT left unanswered was reported as a write's: "the server may have
    /// committed the transaction … check what it wrote", for an `audit` that writes nothing.
    @Test("audit stalled at its read transaction's COMMIT fails after the limit as a lost connection, not an unconfirmed commit")
    func auditStalledAtCommit() throws {
        let workspace = try CLIWorkspace("pg-stall-audit", engine: .postgres)
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        let proxy = try StallingTCPProxy(upstreamPort: try PostgresServer.shared().port, stallWhenClientSends: "COMMIT\u{0}")
        defer { proxy.stop() }
        let audited = try Self.run(["--db", try Self.proxied(workspace, proxy), "audit"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "2s"],
                                   within: 40, in: workspace.directory.path)
        #expect(proxy.stalledConnections == 1)
        #expect(audited.status == 1, "still running after \(Int(audited.elapsed)) s (nil: killed): \(audited.stderr)")
        #expect(audited.stderr.contains("the server sent no answer for 2 s"), "\(audited.stderr)")
        #expect(!audited.stderr.contains("may have committed") && !audited.stderr.contains("check what it wrote"), "\(audited.stderr)")
    }

    /// A call given up at the answer limit was taken, when it was a transaction's first, for a connection
    /// the server had dropped while idle, and the transaction ran again on a new one: the command waited
    /// the whole limit twice (`stats` behind a table lock, with a 3 s limit, failed after 6.3 s).
    @Test("stats behind a table lock gives up once at the answer limit, not twice")
    func lockedOutOnce() throws {
        let workspace = try CLIWorkspace("pg-lock-once", engine: .postgres)
        defer { workspace.directory.remove() }
        let server = try PostgresServer.shared()
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        let schema = try #require(workspace.database.components(separatedBy: "search_path%3D").last)
        let holder = try server.holdingLock(on: "\(schema).jobs", seconds: 30)
        defer { if holder.isRunning { holder.signalTree(SIGKILL); holder.waitForExit(seconds: 10) } }
        let stats = try Self.run(["--db", workspace.database, "stats"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "4s"],
                                 within: 40, in: workspace.directory.path)
        #expect(stats.status == 1, "still running after \(Int(stats.elapsed)) s (nil: killed): \(stats.stderr)")
        #expect(stats.stderr.contains("the server sent no answer for 4 s"), "\(stats.stderr)")
        #expect(stats.elapsed < 7.5, "took \(stats.elapsed) s: the limit was waited twice")
    }

    /// A role (or database, or URL) whose `idle_in_transaction_session_timeout` is shorter than jobctl's
    /// pause between two statements of a read ended every `replay --verify` and `audit`: read
    /// transactions set their own idle limit, as write transactions do.
    @Test("a session idle limit of a few milliseconds ends no read transaction")
    func shortIdleLimitForReads() throws {
        let workspace = try CLIWorkspace("pg-idle-reads", engine: .postgres)
        defer { workspace.directory.remove() }
        _ = try workspace.submit((0..<50).map { "- {kind: upload-data, data: x\($0), destination: file://b/x\($0).txt}" }.joined(separator: "\n"))
        let url = workspace.database + "%20-c%20idle_in_transaction_session_timeout%3D1ms"
        for arguments in [["replay", "--verify"], ["audit"], ["stats"], ["audit", "--json"]] {
            let read = try Self.run(["--db", url] + arguments, environment: [:], within: 40, in: workspace.directory.path)
            #expect(read.status == 0, "\(arguments): exit \(String(describing: read.status)): \(read.stderr)")
        }
    }

    /// The group commit's last write travels with its COMMIT in one pipeline. A connection reset once
    /// the server had answered both was reported against the write ("check that the server is up and
    /// reachable, then try again"), though every job was written: a `submit` run again made them twice.
    @Test("submit whose COMMIT answer is lost to a reset says the jobs may be written; they are, and a resubmit adds none")
    func submitAnswerLostAfterCommit() throws {
        let workspace = try CLIWorkspace("pg-lost-commit", engine: .postgres)
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let numbered = """
        jobs:
          - {kind: upload-data, data: "one", destination: file://docs/one.txt, key: lost-commit-1}
          - {kind: upload-data, data: "two", destination: file://docs/two.txt, key: lost-commit-2}
        """
        let path = try workspace.write("jobs.yaml", numbered)
        let server = try PostgresServer.shared()
        let proxy = try TCPFaultProxy(upstreamPort: server.port, rules: [
            TCPFaultProxy.Rule(marker: "COMMIT\u{0}", after: ["INSERT INTO events"], action: .resetAfterAnswer),
        ])
        defer { proxy.stop() }
        let url = workspace.database.replacingOccurrences(of: "@127.0.0.1:\(server.port)/", with: "@127.0.0.1:\(proxy.port)/")
        #expect(url != workspace.database)

        let submitted = try Self.run(["--db", url, "submit", path], environment: [:], within: 40, in: workspace.directory.path)
        #expect(proxy.firedRules.count == 1)
        #expect(submitted.status == 1, "\(submitted.stderr)")
        #expect(submitted.stderr.contains("the server may have committed the transaction"), "\(submitted.stderr)")
        #expect(!submitted.stderr.contains("then try again"), "\(submitted.stderr)")
        #expect(submitted.stderr.contains("check what it wrote (`jobctl list`) before running the command again"), "\(submitted.stderr)")
        #expect(!submitted.stderr.contains(server.password))
        // The server had committed: both jobs are there, and submitting again (as told) adds none.
        let list = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(list.count == 2, "\(list)")
        let again = try workspace.jobctl(["submit", path])
        #expect(again.status == 0, "\(again.stderr)")
        let after = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(after.count == 2, "\(after)")
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    /// A server that takes the connection and never answers it (a silent path: a black hole, a hung
    /// host): the attempt waited libpq's 10 s whatever JOBCTL_DB_ANSWER_TIMEOUT said. It bounds
    /// connecting too now.
    @Test("list against a server that never answers its connection fails after JOBCTL_DB_ANSWER_TIMEOUT, not 10 s")
    func connectingIsBoundedByTheLimit() throws {
        let workspace = try CLIWorkspace("pg-silent-connect", engine: .postgres)
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let server = try PostgresServer.shared()
        let proxy = try TCPFaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        proxy.goSilent()
        let url = workspace.database.replacingOccurrences(of: "@127.0.0.1:\(server.port)/", with: "@127.0.0.1:\(proxy.port)/")
        let listed = try Self.run(["--db", url, "list"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "2s"],
                                  within: 40, in: workspace.directory.path)
        #expect(proxy.acceptedConnections == 1)
        #expect(listed.status == 1, "\(listed.stderr)")
        #expect(listed.stderr.contains("cannot connect to PostgreSQL") && listed.stderr.contains("timeout expired"), "\(listed.stderr)")
        #expect(listed.elapsed < 6, "took \(listed.elapsed) s")
        #expect(!listed.stderr.contains(server.password))
    }

    @Test("list whose answer is cut mid-message fails saying so, exit 1")
    func listAnswerCut() throws {
        let workspace = try CLIWorkspace("pg-cut-list", engine: .postgres)
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", Self.manifest)
        #expect(try workspace.jobctl(["submit", path]).status == 0)
        let server = try PostgresServer.shared()
        let proxy = try TCPFaultProxy(upstreamPort: server.port, rules: [TCPFaultProxy.Rule(marker: "FROM jobs", action: .cutAnswer(bytes: 200))])
        defer { proxy.stop() }
        let url = workspace.database.replacingOccurrences(of: "@127.0.0.1:\(server.port)/", with: "@127.0.0.1:\(proxy.port)/")
        let listed = try Self.run(["--db", url, "list", "--json"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "2s"],
                                  within: 40, in: workspace.directory.path)
        #expect(proxy.firedRules.count == 1)
        #expect(listed.status == 1, "\(listed.stderr)")
        #expect(listed.stderr.contains("the connection to PostgreSQL was lost"), "\(listed.stderr)")
        #expect(listed.elapsed < 20, "took \(listed.elapsed) s")
        #expect(!listed.stderr.contains(server.password))
    }

    /// The limit was on the whole call: `list --json` over many jobs through a slow link was cut at
    /// 2 s while its answer was still arriving, and failed ("the server sent no answer for 2 s").
    @Test("list --json whose large answer trickles in for longer than the limit prints every job; silent part way, it fails at about the limit")
    func listAnswerTrickledOrSilentPartWay() throws {
        let workspace = try CLIWorkspace("pg-trickle-list", engine: .postgres)
        defer { workspace.directory.remove() }
        let count = 300
        let manifest = "jobs:\n" + (0..<count).map { "  - {kind: upload-data, data: \"job \($0)\", destination: file://docs/\($0).txt}\n" }.joined()
        let path = try workspace.write("jobs.yaml", manifest)
        #expect(try workspace.jobctl(["submit", path]).status == 0)
        let server = try PostgresServer.shared()
        // 4 KiB every 0.1 s (the answer is over 100 KiB): seconds of answer, never 2 s without a byte.
        for silentAfter in [nil, 65_536] as [Int?] {
            let proxy = try TCPFaultProxy(upstreamPort: server.port, rules: [
                TCPFaultProxy.Rule(marker: "FROM jobs", action: .trickleAnswer(bytes: 4_096, intervalMs: 100, silentAfter: silentAfter)),
            ])
            defer { proxy.stop() }
            let url = workspace.database.replacingOccurrences(of: "@127.0.0.1:\(server.port)/", with: "@127.0.0.1:\(proxy.port)/")
            let listed = try Self.run(["--db", url, "list", "--json"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "2s"],
                                      within: 60, in: workspace.directory.path)
            let ended = Date()
            #expect(proxy.firedRules.count == 1)
            #expect(!listed.stderr.contains(server.password))
            if silentAfter == nil {
                #expect(listed.status == 0, "after \(listed.elapsed) s: \(listed.stderr)")
                let jobs = (try? JSONSerialization.jsonObject(with: Data(listed.stdout.utf8))) as? [[String: Any]]
                #expect(jobs?.count == count, "\(listed.stdout.prefix(300))")
                #expect(listed.elapsed > 2.5, "the answer took only \(listed.elapsed) s, not longer than the limit")
            } else {
                #expect(listed.status == 1, "after \(listed.elapsed) s: \(listed.stderr)")
                #expect(listed.stderr.contains("the server sent no more of its answer for 2 s"), "\(listed.stderr)")
                let silence = proxy.wentSilentAt.map { ended.timeIntervalSince($0) } ?? -1
                #expect(silence >= 1.9 && silence < 5, "it ended \(silence) s after the last byte")
            }
        }
    }

    @Test("a JOBCTL_DB_ANSWER_TIMEOUT that is not a duration is a usage error")
    func badValue() throws {
        let workspace = try CLIWorkspace("pg-stall-bad", engine: .postgres)
        defer { workspace.directory.remove() }
        let output = try workspace.jobctl(["list"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "soon"])
        #expect(output.status == 64, "\(output.stderr)")
        #expect(output.stderr.contains("JOBCTL_DB_ANSWER_TIMEOUT=soon is not a duration"), "\(output.stderr)")
        let config = try workspace.jobctl(["config"], environment: ["JOBCTL_DB_ANSWER_TIMEOUT": "soon"])
        #expect(config.status == 1 && config.stderr.contains("$JOBCTL_DB_ANSWER_TIMEOUT"), "\(config.stderr)")
    }
}
