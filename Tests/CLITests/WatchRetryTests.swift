import Foundation
import Testing
import TestSupport

/// `watch` shows the attempts that failed before a job's end: a flaky job read `resume`, `resume`,
/// `failure` (or `success`) with no word of why the earlier attempts ended, and a job waiting out a
/// retry's delay showed nothing at all.
@Suite("watch shows failed attempts", .onTestThreads) struct WatchRetryTests {
    @Test("each failed attempt is a line with its error and the time of the next, on a terminal and in JSON lines")
    func failedAttemptsAreShown() throws {
        let server = try NginxServer.start(extraServerConfig: #"location /busy { return 503 "busy"; }"#)
        defer { server.stop() }
        let workspace = try CLIWorkspace("watch-retry")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("- {kind: download-memory, source: \"\(server.baseURL)/busy\", max_attempts: 2}\n")
        let drained = try workspace.jobctl(["worker", "--drain"])
        #expect(drained.status == 2, "\(drained.stderr)")

        let lines = try workspace.jobctl(["watch", ids[0], "--json"]).stdout.split(separator: "\n")
        let events = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(events.count == lines.count)
        #expect(events.map { $0["type"] as? String } == ["started", "attempt_failed", "started", "failed"], "\(lines)")
        let failedAttempt = try #require(events.first { $0["type"] as? String == "attempt_failed" })
        let data = failedAttempt["data"] as? [String: Any]
        #expect((data?["error"] as? [String: Any])?["http_status"] as? Int == 503 && data?["retry_at"] is String, "\(failedAttempt)")

        let shown = try workspace.jobctlOnTerminal(["watch", ids[0]], columns: 300)
        let retry = try #require(shown.stdout.split(separator: "\n").first { $0.contains("  attempt_failed  ") }, "\(shown.stdout)")
        #expect(retry.contains("attempt 1; ") && retry.contains("the server answered 503") && retry.contains("; retry at "), "\(retry)")

        // `--on` chooses observer statuses, of which a failed attempt is none.
        let chosen = try workspace.jobctl(["watch", ids[0], "--json", "--on", "failure"]).stdout.split(separator: "\n")
        #expect(chosen.count == 1 && chosen[0].contains("\"type\":\"failed\""), "\(chosen)")
    }
}
