import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// pause / resume / cancel / retry by filter, with `--dry-run`, on jobs the test wrote.
@Suite("bulk control", .onTestThreads) struct BulkControlTests {
    /// Queue `a` (submitted now): a1, a2 upload-data queued; a3 upload-data failed; a4 download-memory
    /// queued. Queue `b` (submitted two hours ago): b1, b2 upload-data queued.
    static func fabricate(in workspace: CLIWorkspace) throws -> [String: String] {
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let old = try store.submit([
            JobSpec(kind: .uploadData, destination: "file://x/b1", data: Data("b1".utf8), queue: "b"),
            JobSpec(kind: .uploadData, destination: "file://x/b2", data: Data("b2".utf8), queue: "b"),
        ], actor: "cli:test", now: now - 7_200_000).map(\.id)
        let new = try store.submit([
            JobSpec(kind: .uploadData, destination: "file://x/a1", data: Data("a1".utf8), queue: "a"),
            JobSpec(kind: .uploadData, destination: "file://x/a2", data: Data("a2".utf8), queue: "a"),
            JobSpec(kind: .uploadData, destination: "file://x/a3", data: Data("a3".utf8), priority: 9, maxAttempts: 1, queue: "a"),
            JobSpec(kind: .downloadMemory, source: "file://x/a4", queue: "a"),
        ], actor: "cli:test", now: now).map(\.id)
        let claim = try #require(try store.claim(owner: "worker:t", queues: ["a"], limit: 1, leaseMs: 60_000, now: now).first)
        #expect(claim.record.id == new[2])
        try store.append(PendingEvent(jobID: new[2], type: .started, actor: "worker:t", leaseToken: claim.token, data: EventData(attempt: 1)), now: now)
        try store.append(PendingEvent(jobID: new[2], type: .failed, actor: "worker:t", leaseToken: claim.token,
                                      data: EventData(attempt: 1, error: StorageError(.unauthorized, "403"))), now: now)
        return ["b1": old[0], "b2": old[1], "a1": new[0], "a2": new[1], "a3": new[2], "a4": new[3]]
    }

    private func states(_ workspace: CLIWorkspace, _ ids: [String: String]) throws -> [String: JobState] {
        let store = try EventStore(path: workspace.database, readOnly: true)
        var states: [String: JobState] = [:]
        for (name, id) in ids { states[name] = try store.job(id)?.state }
        return states
    }

    @Test func dryRunPrintsWhatWouldChangeAndChangesNothing() throws {
        let workspace = try CLIWorkspace("bulk-dry")
        defer { workspace.directory.remove() }
        let ids = try Self.fabricate(in: workspace)
        let before = try states(workspace, ids)
        let seqBefore = try EventStore(path: workspace.database, readOnly: true).lastSeq()

        let output = try workspace.jobctl(["cancel", "--queue", "a", "--dry-run", "--json"])
        #expect(output.status == 1, "a job that would be refused makes the dry run exit 1 too: \(output.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any])
        #expect(report["dry_run"] as? Bool == true)
        #expect(report["matched"] as? Int == 4)
        #expect(report["changed"] as? Int == 3)
        #expect(report["refused"] as? Int == 1)
        #expect(report["no_longer_selected"] as? Int == 0)
        let jobs = try #require(report["jobs"] as? [[String: Any]])
        let byID = Dictionary(uniqueKeysWithValues: jobs.compactMap { job in (job["id"] as? String).map { ($0, job) } })
        #expect(byID[ids["a1"] ?? ""]?["events"] as? [String] == ["cancelled"])
        #expect(byID[ids["a3"] ?? ""]?["outcome"] as? String == "refused")
        #expect((byID[ids["a3"] ?? ""]?["reason"] as? String)?.contains("failed") == true)
        #expect(byID[ids["b1"] ?? ""] == nil)

        let text = try workspace.jobctl(["pause", "--since", "1h", "--dry-run"])
        #expect(text.status == 1)
        #expect(text.stdout.contains("\(ids["a1"] ?? "-")  queued  would append paused"), "\(text.stdout)")
        #expect(!text.stdout.contains(ids["b1"] ?? "-"), "b1 was submitted two hours ago")
        #expect(text.stdout.hasSuffix("dry run: pause would change 3 of 4 jobs (0 already so, 1 refused); nothing was changed\n"), "\(text.stdout)")

        #expect(try states(workspace, ids) == before)
        #expect(try EventStore(path: workspace.database, readOnly: true).lastSeq() == seqBefore, "a dry run appended events")
    }

    @Test func filtersActOnEveryMatchingJobAndCount() throws {
        let workspace = try CLIWorkspace("bulk")
        defer { workspace.directory.remove() }
        let ids = try Self.fabricate(in: workspace)

        // Cancel upload-data jobs of queue a: two cancelled, the failed one refused (exit 1), a4 untouched.
        let cancel = try workspace.jobctl(["cancel", "--queue", "a", "--kind", "upload-data"])
        #expect(cancel.status == 1)
        #expect(cancel.stdout.hasSuffix("cancel: 2 of 3 jobs changed (0 already so, 1 refused)\n"), "\(cancel.stdout)")
        #expect(cancel.stdout.contains("\(ids["a1"] ?? "-")  queued → cancelled  (cancelled)"), "\(cancel.stdout)")
        #expect(cancel.stderr.contains("Error: \(ids["a3"] ?? "-"): "), "\(cancel.stderr)")
        var now = try states(workspace, ids)
        #expect(now == ["a1": .cancelled, "a2": .cancelled, "a3": .failed, "a4": .queued, "b1": .queued, "b2": .queued])

        // Repeats are harmless: exit 0.
        let again = try workspace.jobctl(["cancel", "--state", "cancelled"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.hasSuffix("cancel: 0 of 2 jobs changed (2 already so, 0 refused)\n"), "\(again.stdout)")

        // Retry every failed or cancelled job.
        let retry = try #require(try workspace.json(["retry", "--state", "failed,cancelled", "--json"]) as? [String: Any])
        #expect(retry["matched"] as? Int == 3)
        #expect(retry["changed"] as? Int == 3)
        #expect(retry["refused"] as? Int == 0)
        #expect((retry["jobs"] as? [[String: Any]])?.allSatisfy { $0["state"] as? String == "queued" && $0["events"] as? [String] == ["retried"] } == true, "\(retry)")

        // Pause queue b, then resume it.
        #expect(try workspace.jobctl(["pause", "--queue", "b"]).status == 0)
        now = try states(workspace, ids)
        #expect(now["b1"] == .paused && now["b2"] == .paused && now["a4"] == .queued)
        let resume = try workspace.jobctl(["resume", "--state", "paused"])
        #expect(resume.status == 0)
        #expect(resume.stdout.hasSuffix("resume: 2 of 2 jobs changed (0 already so, 0 refused)\n"), "\(resume.stdout)")
        #expect(try states(workspace, ids).values.allSatisfy { $0 == .queued })
        #expect(try EventStore(path: workspace.database, readOnly: true).replay(verify: true).isConsistent)
    }

    @Test func idsAndFiltersAreExclusive() throws {
        let workspace = try CLIWorkspace("bulk-usage")
        defer { workspace.directory.remove() }
        let ids = try Self.fabricate(in: workspace)
        let both = try workspace.jobctl(["pause", ids["a1"] ?? "-", "--queue", "a"])
        #expect(both.status == 64)
        #expect(both.stderr.contains("not both"))
        let neither = try workspace.jobctl(["pause"])
        #expect(neither.status == 64)
        #expect(neither.stderr.contains("select jobs with --state"))
        // Ids with --dry-run: predicted, not changed.
        let dry = try workspace.jobctl(["pause", ids["a1"] ?? "-", "--dry-run"])
        #expect(dry.status == 0)
        #expect(try states(workspace, ids)["a1"] == .queued)
    }
}
