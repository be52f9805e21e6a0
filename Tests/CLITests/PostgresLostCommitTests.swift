import Foundation
import Testing
import TestSupport

/// Control commands on PostgreSQL whose transaction's COMMIT reaches the server while its answer is lost
/// (a `TCPFaultProxy` resets the connection once the server has answered): the change may have been
/// made, and the command must say so rather than act as if it had failed.
@Suite("PostgreSQL controls whose COMMIT answer is lost", .onTestThreads)
struct PostgresLostCommitTests {
    /// The workspace's database URL, reached through `proxy` instead.
    static func proxied(_ workspace: CLIWorkspace, _ proxy: TCPFaultProxy) throws -> String {
        let server = try PostgresServer.shared()
        let direct = "@127.0.0.1:\(server.port)/"
        #expect(workspace.database.contains(direct))
        return workspace.database.replacingOccurrences(of: direct, with: "@127.0.0.1:\(proxy.port)/")
    }

    /// Runs `jobctl ARGS` through a proxy that lets the first transaction writing an event commit on the
    /// server and resets the connection instead of passing on the COMMIT's answer.
    static func withLostCommit(_ workspace: CLIWorkspace, _ arguments: [String]) throws -> ProcessOutput {
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port, rules: [
            TCPFaultProxy.Rule(marker: "COMMIT\u{0}", after: ["INSERT INTO events"], action: .resetAfterAnswer),
        ])
        defer { proxy.stop() }
        let output = try runProcess(PackagePaths.jobctlBinary, ["--db", try proxied(workspace, proxy)] + arguments,
                                    environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path, seconds: 60)
        #expect(proxy.firedRules.count == 1, "\(arguments): the COMMIT's answer was never lost: \(output.stderr)")
        #expect(!output.stderr.contains(try PostgresServer.shared().password))
        return output
    }

    /// How many `retried` events job `key` has.
    static func retries(_ workspace: CLIWorkspace, _ key: String) throws -> Int {
        try #require(try workspace.json(["history", key, "--json", "--type", "retried"]) as? [[String: Any]]).count
    }

    /// `retry`'s refusals go once more after the other jobs given (a job retried after them may open the
    /// one they wait for), and a refusal was any error: a retry whose COMMIT answer was lost ran again. With
    /// a worker about, the job ran twice (`retried` twice in its history); without one, the second try was
    /// refused ("job … is queued, not failed or cancelled", exit 1), or, selected by --state, said "it is
    /// queued now, no longer failed; left alone" (exit 0) of the job its own first try had retried.
    @Test("retry, single or bulk, with or without --with-dependants, whose COMMIT answer is lost is not tried again and says it may have been made")
    func retryIsNotRunAgain() throws {
        let workspace = try CLIWorkspace("pg-lost-retry", engine: .postgres)
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        _ = try workspace.submit("""
            jobs:
              - {kind: upload-data, data: x, destination: file://b/dep.txt, key: dep}
              - {kind: download-memory, source: file://src/missing.bin, max_attempts: 1, key: plain}
              - {kind: download-memory, source: file://src/missing.bin, max_attempts: 1, key: withdeps}
              - {kind: download-memory, source: file://src/missing.bin, max_attempts: 1, after: [dep], queue: bulk1, key: bulk}
              - {kind: download-memory, source: file://src/missing.bin, max_attempts: 1, after: [dep], queue: bulk2, key: bulkdeps}
            """)
        let drained = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": buckets])
        try #require(drained.status == 2, "\(drained.stderr)")

        for (key, arguments) in [("plain", ["retry", "plain"]), ("withdeps", ["retry", "withdeps", "--with-dependants"]),
                                 ("bulk", ["retry", "--state", "failed", "--queue", "bulk1"]),
                                 ("bulkdeps", ["retry", "--state", "failed", "--queue", "bulk2", "--with-dependants"])] {
            let retried = try Self.withLostCommit(workspace, arguments)
            let said = retried.stdout + retried.stderr
            #expect(retried.status == 1, "\(arguments): \(said)")
            #expect(retried.stderr.contains("the server may have committed the transaction"), "\(arguments): \(said)")
            // What to check is the job's history, not submit's keys.
            #expect(retried.stderr.contains("may be retried now") && retried.stderr.contains("`jobctl history "), "\(arguments): \(said)")
            #expect(!retried.stderr.contains("never created twice"), "\(arguments): \(said)")
            #expect(!said.contains("not failed or cancelled") && !said.contains("left alone"), "\(arguments): \(said)")
            // The server had committed the one retry: the job is queued again, retried once.
            #expect(try Self.retries(workspace, key) == 1, "\(arguments): \(said)")
            let job = try #require(try workspace.json(["show", key, "--json"]) as? [String: Any])
            #expect(job["state"] as? String == "queued", "\(arguments): \(job)")
        }
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    /// A bulk control whose transaction's COMMIT answer was lost reported every job of it `refused`, in
    /// the state it had before (`pause --state queued --json`: `changed: 0, refused: 6`, each `queued`),
    /// though the server had paused all six.
    @Test("a bulk control whose COMMIT answer is lost reports each job's outcome unknown, in --json and in text, and how to tell; exit 1")
    func bulkOutcomeIsUnknown() throws {
        let workspace = try CLIWorkspace("pg-lost-bulk", engine: .postgres)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("jobs:\n" + (0..<6).map { "  - {kind: upload-data, data: x\($0), destination: file://b/\($0).txt, delay: 1h}\n" }.joined())

        let paused = try Self.withLostCommit(workspace, ["pause", "--state", "queued", "--json"])
        #expect(paused.status == 1, "\(paused.stdout) \(paused.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(paused.stdout.utf8)) as? [String: Any], "\(paused.stdout)")
        #expect(report["unknown"] as? Int == 6 && report["refused"] as? Int == 0 && report["changed"] as? Int == 0, "\(report)")
        let jobs = try #require(report["jobs"] as? [[String: Any]])
        #expect(jobs.count == 6)
        for job in jobs {
            #expect(job["outcome"] as? String == "unknown" && job["state"] as? String == "unknown", "\(job)")
            let reason = job["reason"] as? String ?? ""
            #expect(reason.contains("the server may have committed the transaction") && reason.contains("may be paused now")
                        && reason.contains("`jobctl show \(job["id"] as? String ?? "?")`"), "\(reason)")
        }
        // The server had paused them all.
        let listed = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(listed.count == 6 && listed.allSatisfy { $0["state"] as? String == "paused" }, "\(listed)")

        let cancelled = try Self.withLostCommit(workspace, ["cancel", "--state", "paused"])
        #expect(cancelled.status == 1, "\(cancelled.stdout) \(cancelled.stderr)")
        let lines = cancelled.stderr.split(separator: "\n")
        for id in ids {
            #expect(lines.contains { $0.hasPrefix("Error: \(id): outcome unknown: ") && $0.contains("may be cancelled now") }, "\(cancelled.stderr)")
        }
        #expect(cancelled.stdout.contains("cancel: 0 of 6 jobs changed (0 already so, 0 refused, 6 of unknown outcome"), "\(cancelled.stdout)")
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    /// Every lost COMMIT's advice was submit's ("check what it wrote (`jobctl list`) … (jobs with a `key:`
    /// are never created twice)"), whatever the command: a pause, an archive, a copy to another database.
    @Test("pause, cancel, archive and migrate --to whose COMMIT answer is lost each say what to check and what running them again does")
    func eachCommandSaysWhatToCheck() throws {
        let workspace = try CLIWorkspace("pg-lost-advice", engine: .postgres)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            jobs:
              - {kind: upload-data, data: a, destination: file://b/a.txt, delay: 1h, key: later}
              - {kind: upload-data, data: b, destination: file://b/b.txt, key: now}
            """)
        for (command, said) in [("pause", "may be paused now"), ("cancel", "may be cancelled now")] {
            let output = try Self.withLostCommit(workspace, [command, "later"])
            #expect(output.status == 1, "\(command): \(output.stderr)")
            #expect(output.stderr.hasPrefix("Error: later: ") && output.stderr.contains("the server may have committed the transaction")
                        && output.stderr.contains(said) && output.stderr.contains("`jobctl show \(ids[0])` says")
                        && output.stderr.contains("\(command == "pause" ? "pausing" : "cancelling") it again changes nothing"),
                    "\(command): \(output.stderr)")
            #expect(!output.stderr.contains("never created twice"), "\(command): \(output.stderr)")
        }

        // The job that ran is archived; the removal's COMMIT answer is lost.
        let drained = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(drained.status == 0, "\(drained.stderr)")
        let file = workspace.directory.file("finished.ndjson.gz")
        let archived = try Self.withLostCommit(workspace, ["archive", "--before", "0s", "--to", file])
        #expect(archived.status == 1, "\(archived.stderr)")
        #expect(archived.stderr.contains("the server may have committed the transaction") && archived.stderr.contains(file)
                    && archived.stderr.contains("keep it") && archived.stderr.contains("`jobctl history log`"), "\(archived.stderr)")
        #expect(!archived.stderr.contains("never created twice") && !archived.stderr.contains("`jobctl list`"), "\(archived.stderr)")
        // The server had removed both finished jobs (the cancelled one and the one that ran): the log records
        // the archive, and the same command run again changes nothing.
        let records = { try #require(try workspace.json(["history", "log", "--json", "--type", "archived"]) as? [[String: Any]]) }
        #expect(try records().count == 1)
        #expect(FileManager.default.fileExists(atPath: file))
        let again = try workspace.jobctl(["archive", "--before", "0s", "--to", file])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try records().count == 1)

        // An SQLite log copied to PostgreSQL: the copy's COMMIT answer is lost.
        let source = workspace.directory.file("source.db")
        let manifest = try workspace.write("copy.yaml", "- {kind: upload-data, data: c, destination: file://b/c.txt, key: copied}\n")
        let submitted = try runProcess(PackagePaths.jobctlBinary, ["--db", source, "submit", manifest], environment: ["NO_COLOR": "1"],
                                       currentDirectory: workspace.directory.path)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let server = try PostgresServer.shared()
        let target = try server.makeSchema("pglostcopy")
        let proxy = try TCPFaultProxy(upstreamPort: server.port, rules: [
            TCPFaultProxy.Rule(marker: "COMMIT\u{0}", after: ["INSERT INTO events"], action: .resetAfterAnswer),
        ])
        defer { proxy.stop() }
        let proxiedTarget = target.replacingOccurrences(of: "@127.0.0.1:\(server.port)/", with: "@127.0.0.1:\(proxy.port)/")
        let copied = try runProcess(PackagePaths.jobctlBinary, ["--db", source, "migrate", "--to", proxiedTarget],
                                    environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path, seconds: 60)
        #expect(proxy.firedRules.count == 1, "\(copied.stderr)")
        #expect(copied.status == 1, "\(copied.stdout) \(copied.stderr)")
        #expect(copied.stderr.contains("the server may have committed the transaction") && copied.stderr.contains("replay --verify --db <target>")
                    && copied.stderr.contains("copies only into an empty target"), "\(copied.stderr)")
        #expect(!copied.stderr.contains("never created twice") && !copied.stderr.contains(server.password), "\(copied.stderr)")
        // It had been copied; run again, the copy is refused and left as it is.
        let onTarget = { try runProcess(PackagePaths.jobctlBinary, ["--db", target, "list", "--json"], environment: ["NO_COLOR": "1"]) }
        let listed = try onTarget()
        #expect(listed.stdout.contains("\"copied\""), "\(listed.stdout) \(listed.stderr)")
        let copiedAgain = try runProcess(PackagePaths.jobctlBinary, ["--db", source, "migrate", "--to", target], environment: ["NO_COLOR": "1"],
                                         currentDirectory: workspace.directory.path)
        #expect(copiedAgain.status == 1 && copiedAgain.stderr.contains("is not empty"), "\(copiedAgain.stderr)")
        #expect(try runProcess(PackagePaths.jobctlBinary, ["--db", target, "replay", "--verify"], environment: ["NO_COLOR": "1"]).status == 0)
    }
}
