import EventStore
import Foundation
import JobModel
import StorePort
import Testing
import TestSupport

/// `jobctl history`: runs of progress events on one line by default, `--all` and `--type`.
@Suite("history command", .onTestThreads) struct HistoryCommandTests {
    /// A job claimed, started, with five progress events, a pause request between the third and the
    /// fourth, then succeeded: two runs of progress (3 and 2).
    static func fabricate(_ workspace: CLIWorkspace) throws -> String {
        let store = try EventStore(path: workspace.database)
        let id = try store.submit([JobSpec(kind: .uploadData, destination: "file://h/x", data: Data("x".utf8))],
                                  actor: "cli:test", now: 1_000)[0].id
        let claim = try #require(try store.claim(owner: "worker:w", queues: nil, limit: 1, leaseMs: 60_000, now: 2_000).first)
        func report(_ type: EventType, _ data: EventData = EventData(), at: Int64) throws {
            try store.append(PendingEvent(jobID: id, type: type, actor: "worker:w", leaseToken: claim.token, data: data), now: at)
        }
        try report(.started, EventData(attempt: 1), at: 2_100)
        for (index, done) in [100, 200, 300].enumerated() {
            try report(.progress, EventData(bytesDone: Int64(done), bytesTotal: 500), at: 3_000 + Int64(index) * 10_000)
        }
        _ = try store.requestPause(id: id, actor: "cli:test", now: 40_000)
        _ = try store.requestResume(id: id, actor: "cli:test", now: 41_000)
        for (index, done) in [400, 500].enumerated() {
            try report(.progress, EventData(bytesDone: Int64(done), bytesTotal: 500), at: 50_000 + Int64(index) * 1_000)
        }
        try report(.succeeded, EventData(bytesDone: 500, result: JobResult(size: 500)), at: 60_000)
        return id
    }

    static func types(_ output: ProcessOutput) -> [String] {
        output.stdout.split(separator: "\n").dropFirst().compactMap { line in
            line.split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first.map(String.init)
        }
    }

    @Test("progress runs are one line each by default; --all shows every event; --type filters")
    func summarisesAndFilters() throws {
        let workspace = try CLIWorkspace("history")
        defer { workspace.directory.remove() }
        let id = try Self.fabricate(workspace)

        let summary = try workspace.jobctl(["history", id])
        #expect(summary.status == 0, "\(summary.stderr)")
        #expect(Self.types(summary) == ["submitted", "claimed", "started", "progress", "pause_requested", "resume_requested",
                                        "progress", "succeeded"], "\(summary.stdout)")
        #expect(summary.stdout.contains("3 progress events over 20s: 100 B → 300 B of 500 B"), "\(summary.stdout)")
        #expect(summary.stdout.contains("2 progress events over 1s: 400 B → 500 B of 500 B"), "\(summary.stdout)")
        #expect(summary.stdout.contains("progress ×3") && summary.stdout.contains("4–6"), "\(summary.stdout)")

        let all = try workspace.jobctl(["history", id, "--all"])
        #expect(Self.types(all).filter { $0 == "progress" }.count == 5 && Self.types(all).count == 11, "\(all.stdout)")
        #expect(!all.stdout.contains("progress events over"))

        let onlyProgress = try workspace.jobctl(["history", id, "--type", "progress"])
        // Filtering first joins the two runs into one.
        #expect(Self.types(onlyProgress) == ["progress"] && onlyProgress.stdout.contains("5 progress events"), "\(onlyProgress.stdout)")
        let some = try workspace.jobctl(["history", id, "--type", "claimed,succeeded", "--type", "submitted"])
        #expect(Self.types(some) == ["submitted", "claimed", "succeeded"], "\(some.stdout)")

        let json = try #require(try workspace.json(["history", id, "--json", "--type", "progress"]) as? [[String: Any]])
        #expect(json.count == 5 && json.allSatisfy { $0["type"] as? String == "progress" })

        let bad = try workspace.jobctl(["history", id, "--type", "progres"])
        #expect(bad.status == 64 && bad.stderr.contains("unknown event type 'progres'"), "\(bad.stderr)")
    }
}
