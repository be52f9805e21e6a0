import Foundation
import Testing
import JobModel
import TestSupport

/// A job that succeeds after an automatic retry reads as a success everywhere: it kept the failed
/// attempt's error — `list` showed `succeeded 2/3 … unknown` in its ERROR column, `show` an `error:` line
/// under `state: succeeded`, `audit --json` and `show --json` an `"error"` — while a job reopened with
/// `jobctl retry` that then succeeded had none. The earlier attempt's error stays in the history.
@Suite(.onTestThreads) struct RetriedSuccessTests {
    /// A download-file from nginx through a proxy answering its first GET 503: the job succeeds on attempt 2.
    static func succeedAfterOne503(_ workspace: CLIWorkspace) throws -> String {
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        try Data("payload".utf8).write(to: URL(fileURLWithPath: nginx.root + "/f.txt"))
        let proxy = try FaultProxy(upstreamPort: nginx.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .respond(.response(503, reason: "Service Unavailable",
                                                                      headers: [ProxyHeader("Retry-After", "0")],
                                                                      body: Data("busy".utf8)))),
        ])
        defer { proxy.stop() }
        let ids = try workspace.submit("""
            jobs:
              - {kind: download-file, source: "\(proxy.baseURL)/f.txt", destination: "\(workspace.directory.file("out.txt"))", max_attempts: 3}
            """)
        let id = try #require(ids.first)
        let worker = try workspace.jobctl(["worker", "--drain"])
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        #expect(proxy.firedCounts == [1])
        return id
    }

    /// Every view of the job: none names an error; the history still has the 503.
    static func expectNoError(_ workspace: CLIWorkspace, _ id: String) throws {
        let shown = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
        #expect(shown["state"] as? String == "succeeded" && (shown["attempts"] as? NSNumber)?.intValue == 2, "\(shown)")
        #expect(shown["error"] == nil || shown["error"] is NSNull, "\(shown)")
        let text = try workspace.jobctl(["show", id])
        #expect(text.stdout.contains("succeeded") && !text.stdout.contains("error:") && !text.stdout.contains("http status"), "\(text.stdout)")
        let listed = try workspace.jobctl(["list"], environment: ["COLUMNS": "400"])
        #expect(listed.stdout.contains("succeeded") && !listed.stdout.contains("ERROR"),
                "\(listed.stdout)")
        let list = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(list.allSatisfy { $0["error"] == nil || $0["error"] is NSNull }, "\(list)")
        let audit = try #require(try workspace.json(["audit", "--json"]) as? [[String: Any]])
        #expect(audit.count == 1 && audit.allSatisfy { $0["error"] == nil || $0["error"] is NSNull }, "\(audit)")
        let csv = try workspace.jobctl(["audit", "--csv"])
        #expect(csv.status == 0 && !csv.stdout.contains("unknown"), "\(csv.stdout)")
        let table = try workspace.jobctl(["audit"], environment: ["COLUMNS": "400"])
        #expect(table.status == 0 && !table.stdout.contains("unknown"), "\(table.stdout)")
        let result = try workspace.jobctl(["result", id, "--json"])
        #expect(result.status == 0 && !result.stdout.contains("\"error\""), "\(result.stdout)\(result.stderr)")
        // The failed attempt is history, said there.
        let history = try workspace.jobctl(["history", id])
        #expect(history.stdout.contains("attempt_failed") && history.stdout.contains("503"), "\(history.stdout)")
    }

    @Test("a job that succeeds after an automatic retry shows no error in list, show, audit or result; its history keeps it",
          arguments: StoreEngine.allCases)
    func succeededAfterARetryHasNoError(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("retried-success", engine: engine)
        defer { workspace.directory.remove() }
        let id = try Self.succeedAfterOne503(workspace)
        try Self.expectNoError(workspace, id)
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0 && verify.stdout.contains("projection matches"), "\(verify.stdout)\(verify.stderr)")
    }

    /// A log an older jobctl wrote: its projection kept the attempt's error on the succeeded job. The
    /// migration that ships the new fold rebuilds the projection; `replay --verify` agrees afterwards.
    @Test("after the upgrade, a job an older jobctl stored with its retried attempt's error has none", arguments: StoreEngine.allCases)
    func upgradeClearsTheStaleError(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("retried-success-upgrade", engine: engine)
        defer { workspace.directory.remove() }
        let id = try Self.succeedAfterOne503(workspace)
        // The row as the older fold left it (the attempt's error), and its ledger.
        let version = engine == .sqlite ? 18 : 20
        let attemptError = engine == .sqlite
            ? "(SELECT json_extract(data, '$.error') FROM events WHERE job_id = '\(id)' AND type = 'attempt_failed')"
            : "(SELECT (data::json -> 'error')::text FROM events WHERE job_id = '\(id)' AND type = 'attempt_failed')"
        try DamagedDatabaseTests.edit(workspace, engine, "UPDATE jobs SET error = \(attemptError) WHERE id = '\(id)'")
        let stale = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
        #expect(stale["error"] is [String: Any], "the edit put the old fold's error back: \(stale)")
        try DamagedDatabaseTests.rewindLedger(workspace, engine, toBefore: version)

        let migrated = try workspace.jobctl(["migrate"])
        #expect(migrated.status == 0 && migrated.stdout.contains("\(version)"), "\(migrated.stdout)\(migrated.stderr)")
        try Self.expectNoError(workspace, id)
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0 && verify.stdout.contains("projection matches"), "\(verify.stdout)\(verify.stderr)")
    }
}
