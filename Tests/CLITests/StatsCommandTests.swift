import EventStore
import PostgresStore
import StorePort
import Foundation
import JobModel
import Testing
import TestSupport

/// `jobctl stats` on a database whose every job and event the test wrote: exact counts.
@Suite("stats command", .onTestThreads) struct StatsCommandTests {
    struct Jobs {
        let ids: [String: String]
        let claimedAtMs: Int64
    }

    /// Queue `a`: a1 succeeded (1000 bytes, now), a2 running (worker W1), a3 failed (objectNotFound, now),
    /// a4 queued. Queue `b`: b1 queued again after a retry (unavailable, now), b2 succeeded 30 minutes ago (500 bytes).
    static func fabricate(in workspace: CLIWorkspace, engine: StoreEngine) throws -> Jobs {
        let store: any JobStore = switch engine {
        case .sqlite: try EventStore(path: workspace.database)
        case .postgres: try PostgresStore(url: workspace.database, mode: .create)
        }
        let now = Clock.nowMs()
        let plan: [(String, String, Int)] = [("a1", "a", 9), ("a2", "a", 8), ("a3", "a", 7), ("b1", "b", 6), ("b2", "b", 5), ("a4", "a", 0)]
        let specs = plan.map { name, queue, priority in
            JobSpec(kind: .uploadData, destination: "file://stats/\(name).txt", data: Data(name.utf8), priority: priority, queue: queue)
        }
        let submitted = try store.submit(specs, actor: "cli:test", now: now - 3_000_000).map(\.id)
        var ids: [String: String] = [:]
        for (index, entry) in plan.enumerated() { ids[entry.0] = submitted[index] }
        func claim(_ name: String, _ owner: String, at: Int64) throws -> Int64 {
            let claimed = try #require(try store.claim(owner: owner, queues: nil, limit: 1, leaseMs: 60_000, now: at).first)
            #expect(claimed.record.id == ids[name])
            try store.append(PendingEvent(jobID: claimed.record.id, type: .started, actor: owner, leaseToken: claimed.token,
                                          data: EventData(attempt: 1)), now: at)
            return claimed.token
        }
        var token = try claim("a1", "worker:w1", at: now - 2_000)
        try store.append(PendingEvent(jobID: ids["a1"] ?? "", type: .succeeded, actor: "worker:w1", leaseToken: token,
                                      data: EventData(result: JobResult(size: 1000))), now: now - 1_000)
        _ = try claim("a2", "worker:w1", at: now)
        token = try claim("a3", "worker:w2", at: now - 2_000)
        try store.append(PendingEvent(jobID: ids["a3"] ?? "", type: .failed, actor: "worker:w2", leaseToken: token,
                                      data: EventData(attempt: 1, error: StorageError(.objectNotFound, "no such object"))), now: now - 1_000)
        token = try claim("b1", "worker:w2", at: now - 2_000)
        let unavailable = StorageError(.unknown, "503 from server", httpStatus: 503, retryable: true)
        try store.append(PendingEvent(jobID: ids["b1"] ?? "", type: .attemptFailed, actor: "worker:w2", leaseToken: token,
                                      data: EventData(attempt: 1, error: unavailable, retryAtMs: now + 600_000)), now: now - 1_000)
        token = try claim("b2", "worker:w2", at: now - 1_800_000)
        try store.append(PendingEvent(jobID: ids["b2"] ?? "", type: .succeeded, actor: "worker:w2", leaseToken: token,
                                      data: EventData(result: JobResult(size: 500))), now: now - 1_800_000)
        return Jobs(ids: ids, claimedAtMs: now)
    }

    @Test(arguments: StoreEngine.allCases)
    func jsonCountsEveryQueueStateAndWindow(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("stats", engine: engine)
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: engine)
        let stats = try #require(try workspace.json(["stats", "--json"]) as? [String: Any])
        let byQueue = try #require(stats["jobs"] as? [String: [String: Int]])
        #expect(byQueue["a"] == ["queued": 1, "running": 1, "paused": 0, "succeeded": 1, "failed": 1, "cancelled": 0, "total": 4])
        #expect(byQueue["b"] == ["queued": 1, "running": 0, "paused": 0, "succeeded": 1, "failed": 0, "cancelled": 0, "total": 2])
        #expect(stats["totals"] as? [String: Int] == ["queued": 2, "running": 1, "paused": 0, "succeeded": 2, "failed": 1, "cancelled": 0, "total": 6])

        let oldest = try #require(stats["oldest_queued"] as? [String: Any])
        #expect(oldest["id"] as? String == jobs.ids["b1"], "b1 was submitted before a4")
        #expect((oldest["age_ms"] as? Int).map { $0 >= 3_000_000 && $0 < 3_600_000 } == true, "\(oldest)")

        let running = try #require(stats["running"] as? [[String: Any]])
        #expect(running.count == 1)
        #expect(running.first?["worker"] as? String == "worker:w1")
        let lease = try #require((running.first?["jobs"] as? [[String: Any]])?.first)
        #expect(lease["id"] as? String == jobs.ids["a2"])
        #expect(lease["lease_expires_at_ms"] as? Int == Int(jobs.claimedAtMs + 60_000))

        let minute = try #require(stats["last_minute"] as? [String: Any])
        #expect(minute["succeeded"] as? Int == 1)
        #expect(minute["bytes"] as? Int == 1000)
        #expect(minute["failed"] as? Int == 1)
        #expect(minute["failures_by_code"] as? [String: Int] == ["objectNotFound": 1])
        #expect(minute["retries_by_code"] as? [String: Int] == ["unknown": 1])
        let hour = try #require(stats["last_hour"] as? [String: Any])
        #expect(hour["succeeded"] as? Int == 2)
        #expect(hour["bytes"] as? Int == 1500)
        #expect(hour["failed"] as? Int == 1)
        #expect(hour["retried"] as? Int == 1)

        // One queue: its counts, its oldest job, its outcomes only.
        let b = try #require(try workspace.json(["stats", "--json", "--queue", "b"]) as? [String: Any])
        #expect((b["jobs"] as? [String: [String: Int]])?.keys.sorted() == ["b"])
        #expect((b["oldest_queued"] as? [String: Any])?["id"] as? String == jobs.ids["b1"])
        #expect((b["running"] as? [Any])?.isEmpty == true)
        #expect((b["last_minute"] as? [String: Any])?["succeeded"] as? Int == 0)
        #expect((b["last_hour"] as? [String: Any])?["bytes"] as? Int == 500)
        #expect((b["last_hour"] as? [String: Any])?["failed"] as? Int == 0)
    }

    @Test(arguments: StoreEngine.allCases)
    func textShowsTheSameFigures(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("stats-text", engine: engine)
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: engine)
        let output = try workspace.jobctl(["stats"])
        #expect(output.status == 0, "\(output.stderr)")
        let lines = output.stdout.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }
        #expect(lines.contains("QUEUE QUEUED RUNNING PAUSED SUCCEEDED FAILED CANCELLED TOTAL"), "\(output.stdout)")
        #expect(lines.contains("a 1 1 0 1 1 0 4"), "\(output.stdout)")
        #expect(lines.contains("b 1 0 0 1 0 0 2"), "\(output.stdout)")
        #expect(lines.contains { $0.hasPrefix("oldest queued: \(jobs.ids["b1"] ?? "-") (b), submitted 5") }, "\(output.stdout)")
        #expect(lines.contains("worker:w1: 1 job"), "\(output.stdout)")
        #expect(lines.contains { $0.hasPrefix("\(jobs.ids["a2"] ?? "-") upload-data a lease expires in ") }, "\(output.stdout)")
        #expect(lines.contains { $0.hasPrefix("last minute: 1 succeeded (1000 B") && $0.hasSuffix("1 failed (objectNotFound 1), 1 retry (unknown 1)") }, "\(output.stdout)")
        #expect(lines.contains { $0.hasPrefix("last hour: 2 succeeded (1.5 KiB") }, "\(output.stdout)")

        let empty = try CLIWorkspace("stats-empty")
        defer { empty.directory.remove() }
        #expect(try empty.jobctl(["migrate"]).status == 0)
        #expect(try empty.jobctl(["stats"]).stdout.hasPrefix("no jobs\n"))
    }
}
