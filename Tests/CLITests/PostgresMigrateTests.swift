import EventStore
import Foundation
import JobModel
import PostgresStore
import Testing
import TestSupport

/// `jobctl migrate --to postgres://…`: an SQLite log copied into an empty PostgreSQL database, checked
/// there with the built binary exactly as a user would.
@Suite("jobctl migrate --to PostgreSQL", .onTestThreads)
struct PostgresMigrateTests {
    /// Runs `jobctl ARGS` against `database` (no workspace default).
    static func jobctl(_ database: String, _ arguments: [String], in workspace: CLIWorkspace,
                       environment: [String: String] = [:]) throws -> ProcessOutput {
        try runProcess(PackagePaths.jobctlBinary, ["--db", database] + arguments,
                       environment: environment.merging(["NO_COLOR": "1"]) { a, _ in a }, currentDirectory: workspace.directory.path)
    }

    /// `list --json` of `database`, parsed, ordered by id.
    static func listing(_ database: String, in workspace: CLIWorkspace) throws -> [NSDictionary] {
        let output = try jobctl(database, ["list", "--json"], in: workspace)
        guard output.status == 0 else { throw CLITestError("list --json on \(database): \(output.stderr)") }
        let jobs = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [NSDictionary])
        return jobs.sorted { ($0["id"] as? String ?? "") < ($1["id"] as? String ?? "") }
    }

    /// Every event of `database` as `history --json` prints it, job by job: seq, version, time, actor, lease and data.
    static func histories(_ database: String, ids: [String], in workspace: CLIWorkspace) throws -> [String] {
        try ids.map { id in
            let output = try jobctl(database, ["history", id, "--json"], in: workspace)
            guard output.status == 0 else { throw CLITestError("history \(id): \(output.stderr)") }
            return output.stdout
        }
    }

    /// Migrates the workspace's SQLite log into a fresh schema and proves the copy: verified, the same
    /// jobs and events, blobs readable, a second copy refused, and new work that keeps tokens growing.
    func migrateAndCheck(_ workspace: CLIWorkspace, memoryJob: String, expectedMemory: (String) -> Bool) throws {
        let server = try PostgresServer.shared()
        let target = try server.makeSchema("migrate")
        var outputs: [ProcessOutput] = []

        let migrated = try workspace.jobctl(["migrate", "--to", target])
        outputs.append(migrated)
        print("migrate --to:", migrated.stdout, migrated.stderr)
        #expect(migrated.status == 0, "\(migrated.stdout)\(migrated.stderr)")
        #expect(migrated.stdout.contains("verified: replaying"), "\(migrated.stdout)")

        let verify = try Self.jobctl(target, ["replay", "--verify"], in: workspace)
        outputs.append(verify)
        #expect(verify.status == 0 && verify.stdout.contains("projection matches"), "\(verify.stdout)\(verify.stderr)")

        let before = try Self.listing(workspace.database, in: workspace)
        let after = try Self.listing(target, in: workspace)
        #expect(!before.isEmpty)
        #expect(before == after)
        let ids = before.compactMap { $0["id"] as? String }
        #expect(try Self.histories(workspace.database, ids: ids, in: workspace) == Self.histories(target, ids: ids, in: workspace))

        let result = try Self.jobctl(target, ["result", memoryJob], in: workspace)
        outputs.append(result)
        #expect(result.status == 0 && expectedMemory(result.stdout), "\(result.stdout)\(result.stderr)")

        // A second copy into the same (now non-empty) target is refused and writes nothing.
        let eventsBefore = try Self.jobctl(target, ["audit"], in: workspace).stdout
        let again = try workspace.jobctl(["migrate", "--to", target])
        outputs.append(again)
        #expect(again.status == 1, "\(again.stdout)\(again.stderr)")
        #expect(again.stderr.contains("is not empty") && again.stderr.contains("nothing was copied"), "\(again.stderr)")
        #expect(try Self.jobctl(target, ["audit"], in: workspace).stdout == eventsBefore)
        #expect(try Self.listing(target, in: workspace) == after)

        // New work on the target: its fencing token lies above every token copied.
        let highest = try Self.highestLeaseToken(target, ids: ids, in: workspace)
        let manifest = try workspace.write("after.yaml", """
            jobs:
              - kind: upload-data
                data: "after the move"
                destination: file://docs/after.txt
            """)
        let submitted = try Self.jobctl(target, ["submit", manifest], in: workspace)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let newID = submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let worker = try Self.jobctl(target, ["worker", "--drain", "--concurrency", "1"], in: workspace,
                                     environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets-pg")])
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        let newToken = try Self.highestLeaseToken(target, ids: [newID], in: workspace)
        print("highest copied lease token \(highest); token of the job run after the move \(newToken)")
        #expect(highest > 0 && newToken > highest)
        #expect(try Self.listing(target, in: workspace).first { $0["id"] as? String == newID }?["state"] as? String == "succeeded")
        let reverify = try Self.jobctl(target, ["replay", "--verify"], in: workspace)
        #expect(reverify.status == 0, "\(reverify.stdout)\(reverify.stderr)")

        for output in outputs {
            #expect(!output.stdout.contains(server.password) && !output.stderr.contains(server.password))
        }
    }

    /// The highest `lease` of the events of `ids`, from `history --json`.
    static func highestLeaseToken(_ database: String, ids: [String], in workspace: CLIWorkspace) throws -> Int64 {
        var highest: Int64 = 0
        for text in try histories(database, ids: ids, in: workspace) {
            let events = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]])
            for event in events { highest = max(highest, (event["lease"] as? NSNumber)?.int64Value ?? 0) }
        }
        return highest
    }

    @Test("the previous release's log moves to PostgreSQL: verified, same jobs and events, blobs, refused twice, new work")
    func releaseFixture() throws {
        let workspace = try ReleaseDatabaseTests.workspace("pg-migrate-release")
        defer { workspace.directory.remove() }
        try migrateAndCheck(workspace, memoryJob: ReleaseDatabaseTests.memoryJob) { $0.utf8.count == 71 }
    }

    @Test("a log made by running real jobs moves to PostgreSQL")
    func ranJobs() throws {
        let workspace = try CLIWorkspace("pg-migrate-ran")
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", PostgresCLITests.manifest)
        let submitted = try workspace.jobctl(["submit", path])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "1"],
                                          environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        try migrateAndCheck(workspace, memoryJob: try #require(ids.last)) { $0.contains("hello, postgres") }
    }

    @Test("a target that is not a postgres:// URL is a usage error")
    func notPostgres() throws {
        let workspace = try CLIWorkspace("pg-migrate-usage")
        defer { workspace.directory.remove() }
        let output = try workspace.jobctl(["migrate", "--to", workspace.directory.file("other.db")])
        #expect(output.status == 64, "\(output.stderr)")
    }

    @Test("a running job refuses the copy; with --force it is copied without a lease and a worker on the target rescues and runs it")
    func runningJob() throws {
        let workspace = try CLIWorkspace("pg-migrate-running")
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", """
            jobs:
              - kind: upload-data
                data: "was running"
                destination: file://docs/running.txt
            """)
        let id = try #require(try workspace.submit(try String(contentsOfFile: path, encoding: .utf8)).first)
        // A worker that claimed the job under a long lease and is still (as far as the log knows) at it.
        let claimed = try EventStore(path: workspace.database).claim(owner: "worker:elsewhere", queues: nil, limit: 1,
                                                                    leaseMs: 3_600_000, now: Clock.nowMs())
        #expect(claimed.count == 1)
        let target = try PostgresServer.shared().makeSchema("migraterun")

        let refused = try workspace.jobctl(["migrate", "--to", target])
        #expect(refused.status == 1 && refused.stderr.contains("1 job is running"), "\(refused.stdout)\(refused.stderr)")
        #expect(refused.stderr.contains("--force"))
        // Refused before the target was touched: it has no schema yet.
        let untouched = try Self.jobctl(target, ["list"], in: workspace)
        #expect(untouched.status == 1 && untouched.stderr.contains("no database"), "\(untouched.stdout)\(untouched.stderr)")

        let forced = try workspace.jobctl(["migrate", "--to", target, "--force"])
        #expect(forced.status == 0, "\(forced.stdout)\(forced.stderr)")
        #expect(forced.stdout.contains("1 running job copied without a lease"), "\(forced.stdout)")
        #expect(try Self.listing(target, in: workspace).first?["state"] as? String == "running")

        let worker = try Self.jobctl(target, ["worker", "--drain", "--concurrency", "1"], in: workspace,
                                     environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets-pg")])
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        let history = try Self.jobctl(target, ["history", id], in: workspace).stdout
        #expect(history.contains("lease_expired"), "\(history)")
        #expect(try Self.listing(target, in: workspace).first?["state"] as? String == "succeeded")
        #expect(try String(contentsOfFile: workspace.directory.file("buckets-pg/docs/running.txt"), encoding: .utf8) == "was running")
    }

    @Test("a log with a NUL in an idempotency key (accepted before 2026-12-04) moves to PostgreSQL with every key exact")
    func nulInKey() throws {
        let workspace = try CLIWorkspace("pg-migrate-nul-key")
        defer { workspace.directory.remove() }
        // Keys as an old submit stored them. "a\u{1}0" is what a NUL escaped naively would become, and
        // "b\u{1}" and "b\u{1}\u{1}" are two keys a U+0001 doubled in place would make meet.
        let keys = ["old\u{0}key", "a\u{0}", "a\u{1}0", "b\u{1}", "b\u{1}\u{1}", "plain"]
        let outcomes = try EventStore(path: workspace.database, mode: .create).submit(
            keys.enumerated().map { index, key in
                JobSpec(kind: .uploadData, destination: "file://docs/\(index).txt", data: Data("job \(index)".utf8), key: key)
            }, actor: "cli:old-release", now: Clock.nowMs())
        var ids = outcomes.map(\.id)
        let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "2"],
                                          environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        // One still queued, to be run on the target.
        let queuedKey = "queued\u{0}"
        ids += try EventStore(path: workspace.database).submit(
            [JobSpec(kind: .uploadData, destination: "file://docs/queued.txt", data: Data("queued".utf8), key: queuedKey)],
            actor: "cli:old-release", now: Clock.nowMs()).map(\.id)
        let target = try PostgresServer.shared().makeSchema("migratenul")

        let migrated = try workspace.jobctl(["migrate", "--to", target])
        print("migrate --to:", migrated.stdout, migrated.stderr)
        #expect(migrated.status == 0, "\(migrated.stdout)\(migrated.stderr)")
        #expect(migrated.stdout.contains("verified: replaying"), "\(migrated.stdout)")
        let verify = try Self.jobctl(target, ["replay", "--verify"], in: workspace)
        #expect(verify.status == 0 && verify.stdout.contains("projection matches"), "\(verify.stdout)\(verify.stderr)")

        // The same jobs, keys and events on both stores, byte for byte.
        let before = try Self.listing(workspace.database, in: workspace)
        #expect(before.count == keys.count + 1)
        #expect(try Self.listing(target, in: workspace) == before)
        #expect(try Self.histories(workspace.database, ids: ids, in: workspace) == Self.histories(target, ids: ids, in: workspace))
        for (id, key) in zip(ids, keys + [queuedKey]) {
            let shown = try Self.jobctl(target, ["show", id, "--json"], in: workspace)
            #expect(shown.status == 0, "\(shown.stderr)")
            let job = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
            #expect(job["key"] as? String == key, "\(shown.stdout)")
            #expect((job["spec"] as? [String: Any])?["key"] as? String == key, "\(shown.stdout)")
            #expect(try Self.jobctl(workspace.database, ["show", id, "--json"], in: workspace).stdout == shown.stdout)
        }
        // A key in use still finds its job on the target.
        let again = try workspace.write("again.yaml", """
            jobs:
              - kind: upload-data
                data: "job 5"
                destination: file://docs/5.txt
                key: plain
            """)
        let resubmitted = try Self.jobctl(target, ["submit", again], in: workspace)
        #expect(resubmitted.status == 0, "\(resubmitted.stderr)")
        #expect(resubmitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == ids[5], "\(resubmitted.stdout)")
        // A worker on the target claims and runs the queued job, and its sweep reads the finished ones.
        let targetWorker = try Self.jobctl(target, ["worker", "--drain", "--concurrency", "1"], in: workspace,
                                           environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets-pg")])
        #expect(targetWorker.status == 0, "\(targetWorker.stdout)\(targetWorker.stderr)")
        let after = try Self.listing(target, in: workspace)
        #expect(after.count == keys.count + 1 && after.allSatisfy { $0["state"] as? String == "succeeded" }, "\(after)")
        #expect(try String(contentsOfFile: workspace.directory.file("buckets-pg/docs/queued.txt"), encoding: .utf8) == "queued")
        let reverify = try Self.jobctl(target, ["replay", "--verify"], in: workspace)
        #expect(reverify.status == 0, "\(reverify.stdout)\(reverify.stderr)")
        let stats = try Self.jobctl(target, ["stats"], in: workspace)
        #expect(stats.status == 0, "\(stats.stderr)")
    }

    @Test("schema 15 doubles the U+0001 of keys stored before it, so they read back as they were and verify")
    func keyEscapeMigration() throws {
        let server = try PostgresServer.shared()
        let target = try server.makeSchema("keyescape")
        let schema = try #require(target.components(separatedBy: "search_path%3D").last)
        let workspace = try CLIWorkspace("pg-key-escape")
        defer { workspace.directory.remove() }
        // Keys a submit on schema 14 stored as they were (it refused only a NUL).
        let keys = ["x\u{1}y", "x\u{1}\u{1}y", "z\u{1}"]
        let ids = try PostgresStore(url: target, mode: .create).submit(
            keys.enumerated().map { index, key in
                JobSpec(kind: .uploadData, destination: "file://docs/\(index).txt", data: Data("job \(index)".utf8), key: key)
            }, actor: "cli:schema-14", now: Clock.nowMs()).map(\.id)
        for (id, key) in zip(ids, keys) {
            let text = key.unicodeScalars.map { $0.value == 1 ? "' || chr(1) || '" : String($0) }.joined()
            try server.psql(database: "postgres", "SET search_path TO \(schema); UPDATE jobs SET idempotency_key = '\(text)' WHERE id = '\(id)'")
        }
        try server.psql(database: "postgres", "SET search_path TO \(schema); DELETE FROM schema_migrations WHERE version >= 15")

        let migrated = try Self.jobctl(target, ["migrate"], in: workspace)
        #expect(migrated.status == 0 && migrated.stdout.contains("applied migrations 15, 16"), "\(migrated.stdout)\(migrated.stderr)")
        let verify = try Self.jobctl(target, ["replay", "--verify"], in: workspace)
        #expect(verify.status == 0 && verify.stdout.contains("projection matches"), "\(verify.stdout)\(verify.stderr)")
        for (id, key) in zip(ids, keys) {
            let shown = try Self.jobctl(target, ["show", id, "--json"], in: workspace)
            let job = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
            #expect(job["key"] as? String == key, "\(shown.stdout)\(shown.stderr)")
        }
    }

    @Test("a result archive --blobs-before removed is still reported expired after the move, not missing from the log")
    func expiredBlobs() throws {
        let workspace = try CLIWorkspace("pg-migrate-expired")
        defer { workspace.directory.remove() }
        let jobs = try ArchiveCommandTests.fabricate(in: workspace, engine: .sqlite)
        let expired = try workspace.jobctl(["archive", "--blobs-before", "50d"])
        #expect(expired.status == 0, "\(expired.stdout)\(expired.stderr)")
        let onSource = try workspace.jobctl(["result", jobs.oldOwn, "-o", "-"])
        #expect(onSource.status == 1 && onSource.stderr.contains("expired on"), "\(onSource.stderr)")
        let target = try PostgresServer.shared().makeSchema("migrateexpired")

        // --force: the fabricated log has a running job.
        let migrated = try workspace.jobctl(["migrate", "--to", target, "--force", "--json"])
        #expect(migrated.status == 0, "\(migrated.stdout)\(migrated.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(migrated.stdout.utf8)) as? [String: Any])
        #expect(report["expired_blobs"] as? Int == 1, "\(migrated.stdout)")
        let onTarget = try Self.jobctl(target, ["result", jobs.oldOwn, "-o", "-"], in: workspace)
        print("result on the target:", onTarget.stderr)
        #expect(onTarget.status == 1 && onTarget.stderr == onSource.stderr, "\(onTarget.stderr)")
        #expect(try Self.jobctl(target, ["result", jobs.recent, "-o", "-"], in: workspace).stdout == ArchiveCommandTests.sharedBytes)
    }

    /// The CLI looks for running jobs before the copy, but a worker can claim one between that look
    /// and the copy's read: the copy itself refuses a projection with a running job (unless --force),
    /// inside its transaction, so nothing of it is committed.
    @Test("a job running in what the copy read is refused inside the copy's transaction, unless forced")
    func runningJobRefusedInsideTheCopy() throws {
        let directory = try TemporaryDirectory("migraterunning")
        defer { directory.remove() }
        let source = try EventStore(path: directory.file("jobs.db"))
        _ = try source.submit([JobSpec(kind: .uploadData, destination: "file://b/x.txt", data: Data("x".utf8))], actor: "cli:test", now: 1_000)
        #expect(try source.claim(owner: "worker:a", queues: nil, limit: 1, leaseMs: 60_000, now: 2_000).count == 1)
        let server = try PostgresServer.shared()
        let refusedTarget = try PostgresStore(url: try server.makeSchema("migraterunning"), mode: .create)
        #expect {
            try refusedTarget.importLog(from: source, allowingRunning: false)
        } throws: { error in
            "\(error)".contains("1 job was running in the source when it was read; nothing was copied")
        }
        #expect(try refusedTarget.lastSeq() == 0 && refusedTarget.counts().isEmpty)
        let forcedTarget = try PostgresStore(url: try server.makeSchema("migrateforced"), mode: .create)
        let copied = try forcedTarget.importLog(from: source, allowingRunning: true)
        #expect(copied.runningJobs == 1 && copied.events == 2)
    }
}
