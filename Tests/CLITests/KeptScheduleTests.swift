import Foundation
import Testing
import JobModel
import TestSupport

/// A job's run time survives the controls that re-open it: `retry` (one job, with its dependants, or
/// by filter) keeps its `run_after:` / `delay:` schedule, as `resume` does.
@Suite(.onTestThreads) struct KeptScheduleTests {
    /// 2030-01-01T00:00:00Z in ms.
    static let runAfter2030: Int64 = 1_893_456_000_000

    /// Submits `s1` (run_after 2030), `s2` (after s1, delay 2h) and `s3` (run_after 2030, on its own);
    /// returns their ids and the submit's time (s2's `created_at_ms`).
    static func submitScheduled(_ workspace: CLIWorkspace) throws -> (s1: String, s2: String, s3: String, createdMs: Int64) {
        let manifest = try workspace.write("r.yaml", """
            jobs:
              - {kind: upload-data, data: one, destination: file://b/s1.txt, key: s1, run_after: "2030-01-01T00:00:00Z"}
              - {kind: upload-data, data: two, destination: file://b/s2.txt, key: s2, after: [s1], delay: 2h}
              - {kind: upload-data, data: three, destination: file://b/s3.txt, key: s3, run_after: "2030-01-01T00:00:00Z"}
            """)
        let submitted = try workspace.jobctl(["submit", manifest])
        guard submitted.status == 0 else { throw CLITestError("submit exited \(submitted.status): \(submitted.stderr)") }
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 3)
        let jobs = try Self.jobs(workspace)
        let created = try #require((jobs[ids[1]]?["created_at_ms"] as? NSNumber)?.int64Value)
        return (ids[0], ids[1], ids[2], created)
    }

    /// `list --json`, by id.
    static func jobs(_ workspace: CLIWorkspace) throws -> [String: [String: Any]] {
        let list = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        return Dictionary(uniqueKeysWithValues: list.compactMap { job in (job["id"] as? String).map { ($0, job) } })
    }

    static func runAfter(_ jobs: [String: [String: Any]], _ id: String) -> Int64? {
        (jobs[id]?["run_after_ms"] as? NSNumber)?.int64Value
    }

    /// `retry` set a job's run time to the retry's: a job scheduled for 2030, cancelled and retried, was
    /// listed with no RUNS AT and a worker ran it at once — its `delay:` dependant too.
    @Test("retry, with its dependants and by filter, keeps the jobs' run_after and delay, and a worker leaves them",
          arguments: StoreEngine.allCases)
    func retryKeepsTheSchedule(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("retry-keeps-schedule", engine: engine)
        defer { workspace.directory.remove() }
        let (s1, s2, s3, createdMs) = try Self.submitScheduled(workspace)
        for id in [s1, s3] {
            let cancelled = try workspace.jobctl(["cancel", id])
            #expect(cancelled.status == 0, "\(cancelled.stderr)")
        }
        #expect(try Self.jobs(workspace)[s2]?["state"] as? String == "cancelled", "the dependant's cancel came with s1's")
        let retried = try workspace.jobctl(["retry", s1, "--with-dependants"])
        #expect(retried.status == 0, "\(retried.stderr)")
        let bulk = try workspace.jobctl(["retry", "--state", "cancelled"])
        #expect(bulk.status == 0, "\(bulk.stderr)")

        let jobs = try Self.jobs(workspace)
        #expect([s1, s2, s3].allSatisfy { jobs[$0]?["state"] as? String == "queued" }, "\(jobs)")
        #expect(Self.runAfter(jobs, s1) == Self.runAfter2030)
        // `delay:` counts from the submit (the time the manifest was read, a few ms before the job's creation).
        #expect(Self.runAfter(jobs, s2).map { abs($0 - (createdMs + 7_200_000)) < 10_000 } == true, "\(jobs)")
        #expect(Self.runAfter(jobs, s3) == Self.runAfter2030)
        let listed = try workspace.jobctl(["list"], environment: ["COLUMNS": "400"])
        #expect(listed.stdout.contains("2030-01-01T00:00:00"), "\(listed.stdout)")

        // A worker finds nothing it may run yet.
        let worker = try LoggedWorker(workspace, [])
        Thread.sleep(forTimeInterval: 2)
        worker.stop()
        #expect(!worker.log().contains(" claimed "), "\(worker.log())")
        #expect(try Self.jobs(workspace).values.allSatisfy { $0["state"] as? String == "queued" })
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("buckets/b/s1.txt")))
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }

    /// A log an older jobctl wrote holds retried jobs whose row says "now": the migration that ships the
    /// new fold rebuilds the projection, so they wait for their time again and `replay --verify` agrees.
    @Test("after the upgrade, a job an older jobctl retried early waits for its time again", arguments: StoreEngine.allCases)
    func upgradeRebuildsRetriedSchedules(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("retry-schedule-upgrade", engine: engine)
        defer { workspace.directory.remove() }
        let (s1, s2, _, createdMs) = try Self.submitScheduled(workspace)
        #expect(try workspace.jobctl(["cancel", s1]).status == 0)
        #expect(try workspace.jobctl(["retry", s1, "--with-dependants"]).status == 0)
        // The rows as the older fold left them (run at the retry's time), and its ledger.
        let version = engine == .sqlite ? 16 : 18
        try DamagedDatabaseTests.edit(workspace, engine, "UPDATE jobs SET run_after_ms = updated_at_ms WHERE id IN ('\(s1)', '\(s2)')")
        try DamagedDatabaseTests.rewindLedger(workspace, engine, toBefore: version)

        let migrated = try workspace.jobctl(["migrate"])
        #expect(migrated.status == 0 && migrated.stdout.contains("\(version)"), "\(migrated.stdout)\(migrated.stderr)")
        let jobs = try Self.jobs(workspace)
        #expect(Self.runAfter(jobs, s1) == Self.runAfter2030)
        #expect(Self.runAfter(jobs, s2).map { abs($0 - (createdMs + 7_200_000)) < 10_000 } == true, "\(jobs)")
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0 && verify.stdout.contains("projection matches"), "\(verify.stdout)\(verify.stderr)")
    }
}

/// A retry's wait survives `pause` and `resume`, and a server's `Retry-After` longer than the hour
/// jobctl honours is said to be capped where the wait is shown.
@Suite(.onTestThreads) struct KeptRetryTimeTests {
    @Test("pause then resume keeps a pending retry's time; a Retry-After of a day is said to be capped at 1 h",
          arguments: StoreEngine.allCases)
    func resumeKeepsTheRetryTime(engine: StoreEngine) throws {
        let nginx = try NginxServer.start(extraServerConfig: """
            location /busy/ {
                add_header Retry-After 86400 always;
                return 503;
            }
            """)
        defer { nginx.stop() }
        let workspace = try CLIWorkspace("resume-keeps-retry", engine: engine)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            jobs:
              - {kind: download-memory, source: "\(nginx.baseURL)/busy/x", max_attempts: 3}
            """)
        let id = try #require(ids.first)
        func job() throws -> [String: Any] { try #require(try workspace.json(["show", id, "--json"]) as? [String: Any]) }

        let first = try LoggedWorker(workspace, [])
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, try job()["error"] as? [String: Any] == nil { Thread.sleep(forTimeInterval: 0.1) }
        first.stop()
        let failed = try job()
        #expect(failed["state"] as? String == "queued", "\(failed)\n\(first.log())")
        let retryAt = try #require((failed["run_after_ms"] as? NSNumber)?.int64Value)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(retryAt > now + 3_500_000 && retryAt <= now + 3_600_000, "the wait is the cap, 1 h")
        #expect(first.log().contains("retry_after_s=86400") && first.log().contains("retry_after_capped_ms=3600000"), "\(first.log())")
        let shown = try workspace.jobctl(["show", id])
        #expect(shown.stdout.contains("the server's Retry-After of 86400 s, capped at 1h00m"), "\(shown.stdout)")

        #expect(try workspace.jobctl(["pause", id]).status == 0)
        // While paused, the kept wait is said, not only in --json.
        let paused = try workspace.jobctl(["show", id])
        let retryText = RFC3339.string(retryAt)
        #expect(paused.stdout.contains("next try") && paused.stdout.contains("\(retryText) (once resumed)"), "\(paused.stdout)")
        #expect(paused.stdout.contains("attempt 2 of 3 at \(retryText) once resumed"), "\(paused.stdout)")
        #expect(try workspace.jobctl(["resume", id]).status == 0)
        let resumed = try job()
        #expect(resumed["state"] as? String == "queued" && (resumed["run_after_ms"] as? NSNumber)?.int64Value == retryAt, "\(resumed)")

        // A worker started now leaves the job to its time.
        let second = try LoggedWorker(workspace, [], logName: "second.log")
        Thread.sleep(forTimeInterval: 2)
        second.stop()
        #expect(!second.log().contains(" claimed "), "\(second.log())")
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }
}
