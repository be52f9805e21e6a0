import EventStore
import Foundation
import JobModel
import PostgresStore
import StorePort
import Testing
import TestSupport

/// `jobctl archive`, `archive verify` and `audit --from` on logs whose every event the test wrote,
/// against both store engines.
@Suite("archive command", .onTestThreads) struct ArchiveCommandTests {
    static let day: Int64 = 86_400_000
    /// Results of more than 256 bytes: the store keeps them in the blobs (smaller ones stay in their event).
    static let sharedBytes = String(repeating: "shared bytes ", count: 24)
    static let ownBytes = String(repeating: "own bytes ", count: 30)

    /// The jobs of a fabricated log, by role.
    struct Jobs {
        /// Finished 100 days ago: a download-memory whose blob a recent job shares, one whose blob is its
        /// own, and a cancelled upload.
        let oldShared: String, oldOwn: String, oldCancelled: String
        /// Finished a day ago (same bytes as `oldShared`), running for 100 days, queued for 100 days.
        let recent: String, running: String, queued: String
        var archived: Set<String> { [oldShared, oldOwn, oldCancelled] }
        var kept: Set<String> { [recent, running, queued] }
    }

    static func open(_ workspace: CLIWorkspace, engine: StoreEngine) throws -> any JobStore {
        switch engine {
        case .sqlite: try EventStore(path: workspace.database)
        case .postgres: try PostgresStore(url: workspace.database, mode: .create)
        }
    }

    static func fabricate(in workspace: CLIWorkspace, engine: StoreEngine) throws -> Jobs {
        let store = try open(workspace, engine: engine)
        let now = Clock.nowMs()
        let old = now - 100 * day
        // Priorities fix the claim order: the job with the highest goes first.
        let specs = [
            JobSpec(kind: .downloadMemory, source: "gs://bucket/shared.txt", maxSize: 1024, priority: 9),
            JobSpec(kind: .downloadMemory, source: "gs://bucket/own.txt", maxSize: 1024, priority: 8),
            JobSpec(kind: .uploadData, destination: "file://archive/cancelled.txt", data: Data("c".utf8), priority: 0),
            JobSpec(kind: .downloadMemory, source: "gs://bucket/shared-again.txt", maxSize: 1024, priority: 7),
            JobSpec(kind: .uploadData, destination: "file://archive/running.txt", data: Data("r".utf8), priority: 6),
            JobSpec(kind: .uploadData, destination: "file://archive/queued.txt", data: Data("q".utf8), priority: 0),
        ]
        let ids = try store.submit(specs, actor: "cli:test", now: old - 1_000).map(\.id)
        func succeed(_ id: String, bytes: String, at: Int64) throws {
            let claimed = try #require(try store.claim(owner: "worker:w1", queues: nil, limit: 1, leaseMs: 60_000, now: at).first)
            #expect(claimed.record.id == id)
            try store.append(PendingEvent(jobID: id, type: .succeeded, actor: "worker:w1", leaseToken: claimed.token,
                                          data: EventData(bytesDone: Int64(bytes.utf8.count),
                                                          result: JobResult(size: Int64(bytes.utf8.count), data: Data(bytes.utf8)))),
                             now: at + 10)
        }
        try succeed(ids[0], bytes: Self.sharedBytes, at: old)
        try succeed(ids[1], bytes: Self.ownBytes, at: old + 100)
        _ = try store.requestCancel(id: ids[2], actor: "cli:test", now: old + 200)
        try succeed(ids[3], bytes: Self.sharedBytes, at: now - day)
        let running = try #require(try store.claim(owner: "worker:w2", queues: nil, limit: 1, leaseMs: 60_000, now: old).first)
        #expect(running.record.id == ids[4])
        return Jobs(oldShared: ids[0], oldOwn: ids[1], oldCancelled: ids[2], recent: ids[3], running: ids[4], queued: ids[5])
    }

    static func sha256sum(_ path: String) throws -> String {
        let output = try runProcess("/usr/bin/sha256sum", [path])
        return String(output.stdout.prefix(64))
    }

    static func ids(_ value: Any) -> Set<String> {
        Set(((value as? [[String: Any]]) ?? []).compactMap { $0["id"] as? String })
    }

    @Test("archive → verify → replay: old finished jobs leave the log for the file, the rest stays", arguments: StoreEngine.allCases)
    func roundTrip(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("archive", engine: engine)
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: engine)
        let eventsBefore = try Self.open(workspace, engine: engine).lastSeq()

        let dry = try #require(try workspace.json(["archive", "--before", "90d", "--dry-run", "--json"]) as? [String: Any])
        #expect(dry["dry_run"] as? Bool == true && dry["jobs"] as? Int == 3 && dry["blobs"] as? Int == 2)
        #expect(Set(dry["job_ids"] as? [String] ?? []) == jobs.archived)
        #expect(dry["states"] as? [String: Int] == ["succeeded": 2, "cancelled": 1])
        #expect(Self.ids(try workspace.json(["list", "--json"])).count == 6, "a dry run removes nothing")

        let file = workspace.directory.file("old.ndjson.gz")
        let archived = try #require(try workspace.json(["archive", "--before", "90d", "--to", file, "--json"]) as? [String: Any])
        // shared: submitted, claimed, succeeded; own: the same; cancelled: submitted, cancelled.
        #expect(archived["jobs"] as? Int == 3 && archived["events"] as? Int == 8)
        #expect(archived["blobs"] as? Int == 2 && archived["blobs_removed"] as? Int == 1, "the shared blob stays for the recent job")
        #expect(archived["file"] as? String == "old.ndjson.gz")
        let digest = try Self.sha256sum(file)
        #expect(archived["sha256"] as? String == digest)
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file(".old.ndjson.gz.partial")))

        let verified = try #require(try workspace.json(["archive", "verify", file, "--json"]) as? [String: Any])
        #expect(verified["intact"] as? Bool == true && verified["jobs"] as? Int == 3 && verified["events"] as? Int == 8)
        #expect(verified["blobs"] as? Int == 2 && verified["sha256"] as? String == digest)

        let replay = try workspace.jobctl(["replay", "--verify"])
        #expect(replay.status == 0 && replay.stdout.contains("projection matches"), "\(replay.stdout)\(replay.stderr)")
        #expect(Self.ids(try workspace.json(["list", "--json"])) == jobs.kept)
        let result = try workspace.jobctl(["result", jobs.recent, "-o", "-"])
        #expect(result.status == 0 && result.stdout == Self.sharedBytes, "\(result.stderr)")

        // The log records the archive as an event of its own, after every event it had.
        let store = try Self.open(workspace, engine: engine)
        let records = try store.events(jobID: ArchiveRecord.logJobID)
        #expect(records.count == 1)
        let record = try #require(records.first)
        #expect(record.seq.map { $0 > eventsBefore } == true, "seq keeps growing: \(String(describing: record.seq)) after \(eventsBefore)")
        guard case .archived(let stored) = record.payload else {
            Issue.record("expected an archived event, got \(record.type)")
            return
        }
        #expect(stored.sha256 == digest && stored.jobs == 3 && stored.events == 8 && stored.blobsRemoved == 1)
        #expect(try store.blob(sha256: Digest256.hex(Self.ownBytes)) == nil)
        #expect(try store.blob(sha256: Digest256.hex(Self.sharedBytes)) == Data(Self.sharedBytes.utf8))

        let logHistory = try workspace.jobctl(["history", "log"])
        #expect(logHistory.status == 0 && logHistory.stdout.contains("archived") && logHistory.stdout.contains(digest),
                "\(logHistory.stdout)\(logHistory.stderr)")

        // audit reads the file: the archived jobs, rebuilt from their events.
        let fromFile = try workspace.json(["audit", "--from", file, "--json"])
        #expect(Self.ids(fromFile) == jobs.archived)
        let cancelled = try workspace.json(["audit", "--from", file, "--state", "cancelled", "--json"])
        #expect(Self.ids(cancelled) == [jobs.oldCancelled])

        // Running it again finds nothing more, writes nothing, and the recorded file is never replaced.
        let again = try workspace.jobctl(["archive", "--before", "90d", "--to", workspace.directory.file("again.gz")])
        #expect(again.status == 0 && again.stdout.contains("nothing to archive"))
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("again.gz")))
        _ = try workspace.jobctl(["cancel", jobs.queued])
        let overwrite = try workspace.jobctl(["archive", "--before", "0s", "--to", file])
        #expect(overwrite.status == 1 && overwrite.stderr.contains("is an archive the log records"), "\(overwrite.stderr)")
        #expect(try Self.sha256sum(file) == digest)
    }

    @Test("SIGKILL just before the removal commits loses nothing; archiving again works", arguments: StoreEngine.allCases)
    func crashBeforeCommit(engine: StoreEngine) async throws {
        let workspace = try CLIWorkspace("archivecrash", engine: engine)
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: engine)
        let lastSeq = try Self.open(workspace, engine: engine).lastSeq()
        let file = workspace.directory.file("crash.ndjson.gz")
        let hold = workspace.directory.file("holding")

        let child = Process()
        child.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        child.arguments = ["--db", workspace.database, "archive", "--before", "90d", "--to", file]
        var environment = ProcessInfo.processInfo.environment
        environment["JOBCTL_TEST_ARCHIVE_HOLD_BEFORE_COMMIT"] = hold
        child.environment = environment
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try child.run()
        // The child creates `hold` once the file is written and its transaction has removed the jobs
        // (uncommitted), then waits to be killed. Generous: the machine may be busy.
        let deadline = Date().addingTimeInterval(120)
        while !FileManager.default.fileExists(atPath: hold), child.isRunning, Date() < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(FileManager.default.fileExists(atPath: hold), "the child never reached the point before its commit")
        child.signalTree(SIGKILL)
        child.waitForExit()
        #expect(child.terminationReason == .uncaughtSignal)

        // The log is as it was: every job, every event, no archive recorded, and it verifies.
        #expect(Self.ids(try workspace.json(["list", "--json"])) == jobs.archived.union(jobs.kept))
        let store = try Self.open(workspace, engine: engine)
        #expect(try store.events(jobID: ArchiveRecord.logJobID).isEmpty)
        #expect(try store.logRows(afterSeq: 0, limit: 1_000).count == Int(lastSeq) || engine == .postgres)
        #expect(try store.lastSeq() == lastSeq)
        let replay = try workspace.jobctl(["replay", "--verify"])
        #expect(replay.status == 0 && replay.stdout.contains("projection matches"), "\(replay.stdout)\(replay.stderr)")
        // The file the killed run wrote is whole (it was renamed into place before the transaction).
        let verify = try workspace.jobctl(["archive", "verify", file])
        #expect(verify.status == 0, "\(verify.stderr)")

        // Running the same command again replaces that unrecorded file and completes.
        let again = try #require(try workspace.json(["archive", "--before", "90d", "--to", file, "--json"]) as? [String: Any])
        let rewritten = try Self.sha256sum(file)
        #expect(again["jobs"] as? Int == 3 && again["sha256"] as? String == rewritten)
        #expect(Self.ids(try workspace.json(["list", "--json"])) == jobs.kept)
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    /// `jobctl archive --before 90d --to file` started in the background, its standard error going to
    /// `errors`; with `hold`, it stops just before its removal commits (see `archiveHoldEnvironment`) until
    /// that file is removed.
    private static func archiveInBackground(_ workspace: CLIWorkspace, to file: String, hold: String?, errors: String) throws -> Process {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        child.arguments = ["--db", workspace.database, "archive", "--before", "90d", "--to", file]
        var environment = ProcessInfo.processInfo.environment
        if let hold { environment["JOBCTL_TEST_ARCHIVE_HOLD_BEFORE_COMMIT"] = hold }
        child.environment = environment
        child.standardOutput = FileHandle.nullDevice
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        child.standardError = FileHandle(forWritingAtPath: errors)
        try child.run()
        return child
    }

    /// Waits (at most `seconds`) until `condition` holds.
    private static func waitUntil(seconds: Double, _ condition: () -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            guard Date() < deadline else { return false }
            try await Task.sleep(for: .milliseconds(20))
        }
        return true
    }

    /// Two archives to one `--to` each passed the check that the name may be replaced; the second's
    /// rename then replaced the file the first recorded (a probe lost 18 jobs of 1,807 this way while a
    /// worker drained, and 100 of 7,170 every time with the second stopped mid-write). Here the first
    /// stops just before its commit, the file written; the second starts. Before, the second renamed its
    /// file over the first's, and the first then committed the record of a file no longer there: the
    /// recorded sha256 was not the file's. The second now waits its turn, then refuses the recorded file.
    @Test("two archives to one file take turns: the log's record is the file's, and the second writes nothing", arguments: StoreEngine.allCases)
    func sameFileTakesTurns(engine: StoreEngine) async throws {
        let workspace = try CLIWorkspace("archivesamefile", engine: engine)
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: engine)
        let file = workspace.directory.file("same.ndjson.gz")
        let hold = workspace.directory.file("holding")
        let first = try Self.archiveInBackground(workspace, to: file, hold: hold, errors: workspace.directory.file("first.err"))
        defer { if first.isRunning { first.signalTree(SIGKILL); first.waitForExit() } }
        try #require(try await Self.waitUntil(seconds: 120) { FileManager.default.fileExists(atPath: hold) || !first.isRunning },
                     "the first archive never reached its commit")
        let secondErrors = workspace.directory.file("second.err")
        let second = try Self.archiveInBackground(workspace, to: file, hold: nil, errors: secondErrors)
        defer { if second.isRunning { second.signalTree(SIGKILL); second.waitForExit() } }
        let waited = try await Self.waitUntil(seconds: 5) {
            ((try? String(contentsOfFile: secondErrors, encoding: .utf8)) ?? "").contains("waiting for another jobctl archive")
        }
        #expect(waited && second.isRunning, "the second archive did not wait for the first's turn")
        try FileManager.default.removeItem(atPath: hold)
        first.waitForExit()
        second.waitForExit()
        #expect(first.terminationStatus == 0, "\((try? String(contentsOfFile: workspace.directory.file("first.err"), encoding: .utf8)) ?? "")")
        let secondMessage = (try? String(contentsOfFile: secondErrors, encoding: .utf8)) ?? ""
        #expect(second.terminationStatus == 1 && secondMessage.contains("is an archive the log records"), "\(secondMessage)")

        let recorded = try Self.open(workspace, engine: engine).events(jobID: ArchiveRecord.logJobID).compactMap { event -> String? in
            if case .archived(let record) = event.payload { return record.sha256 }
            return nil
        }
        #expect(recorded == [try Self.sha256sum(file)], "the log records a file that is not the one at its name")
        let audit = try workspace.jobctl(["audit", "--from", file, "--json"])
        #expect(Self.ids(try JSONSerialization.jsonObject(with: Data(audit.stdout.utf8))) == jobs.archived, "\(audit.stderr)")
        #expect(Self.ids(try workspace.json(["list", "--json"])) == jobs.kept)
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    /// Two archives of the same jobs to files in two folders: the one whose removal found the jobs gone
    /// (the other had archived them) said "nothing was removed" and left its file, an intact second
    /// archive of jobs the log records in the other — `audit --from` over both listed each job twice.
    /// The file is taken back now.
    @Test("an archive whose jobs another archive took meanwhile removes the file it wrote", arguments: StoreEngine.allCases)
    func loserTakesItsFileBack(engine: StoreEngine) async throws {
        let workspace = try CLIWorkspace("archiveloser", engine: engine)
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: engine)
        for folder in ["a", "b"] { try FileManager.default.createDirectory(atPath: workspace.directory.file(folder), withIntermediateDirectories: false) }
        let winnerFile = workspace.directory.file("a/first.ndjson.gz"), loserFile = workspace.directory.file("b/second.ndjson.gz")
        let hold = workspace.directory.file("holding")
        let winner = try Self.archiveInBackground(workspace, to: winnerFile, hold: hold, errors: workspace.directory.file("winner.err"))
        defer { if winner.isRunning { winner.signalTree(SIGKILL); winner.waitForExit() } }
        try #require(try await Self.waitUntil(seconds: 120) { FileManager.default.fileExists(atPath: hold) || !winner.isRunning },
                     "the first archive never reached its commit")
        let loserErrors = workspace.directory.file("loser.err")
        let loser = try Self.archiveInBackground(workspace, to: loserFile, hold: nil, errors: loserErrors)
        defer { if loser.isRunning { loser.signalTree(SIGKILL); loser.waitForExit() } }
        // Its file is written (renamed into place) before its removal, which waits for the first's.
        try #require(try await Self.waitUntil(seconds: 60) { FileManager.default.fileExists(atPath: loserFile) || !loser.isRunning })
        try FileManager.default.removeItem(atPath: hold)
        winner.waitForExit()
        loser.waitForExit()
        #expect(winner.terminationStatus == 0)
        let message = (try? String(contentsOfFile: loserErrors, encoding: .utf8)) ?? ""
        #expect(loser.terminationStatus == 1 && message.contains("no longer in the log") && message.contains("was removed"), "\(message)")
        #expect(!FileManager.default.fileExists(atPath: loserFile), "a second archive of the same jobs was left")
        let audit = try workspace.jobctl(["audit", "--from", winnerFile, "--json"])
        #expect(Self.ids(try JSONSerialization.jsonObject(with: Data(audit.stdout.utf8))) == jobs.archived)
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    /// `--to` a symbolic link: the archive was renamed over the link, replacing it with a file, and the
    /// file it pointed to (a dangling link: a backup folder not mounted) got nothing, exit 0. `--to -`
    /// wrote a file named `-`. A temporary a killed run left beside the file stayed for ever.
    @Test("archive --to refuses a symbolic link and '-', and removes a killed run's temporary")
    func linkDashAndLeftTemporary() throws {
        let workspace = try CLIWorkspace("archivelinkdash")
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: .sqlite)
        try FileManager.default.createDirectory(atPath: workspace.directory.file("backup"), withIntermediateDirectories: false)
        let link = workspace.directory.file("latest.ndjson.gz")
        for destination in ["backup/q3.ndjson.gz", "unmounted/q3.ndjson.gz"] {
            try? FileManager.default.removeItem(atPath: link)
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: destination)
            let output = try workspace.jobctl(["archive", "--before", "90d", "--to", link])
            #expect(output.status == 1 && output.stderr.contains("is a symbolic link; nothing was archived"), "\(output.stderr)")
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == destination, "the link was replaced")
        }
        let dash = try workspace.jobctl(["archive", "--before", "90d", "--to", "-"])
        #expect(dash.status == 64 && dash.stderr.contains("--to -"), "\(dash.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("-")))
        #expect(Self.ids(try workspace.json(["list", "--json"])).isSuperset(of: jobs.archived), "nothing left the log")

        let file = workspace.directory.file("backup/q3.ndjson.gz")
        let left = workspace.directory.file("backup/.q3.ndjson.gz.4242.partial")
        try Data("a killed run's half-written archive".utf8).write(to: URL(fileURLWithPath: left))
        let archived = try workspace.jobctl(["archive", "--before", "90d", "--to", file])
        #expect(archived.status == 0, "\(archived.stderr)")
        #expect(!FileManager.default.fileExists(atPath: left), "the killed run's temporary is still there")
        #expect(try workspace.jobctl(["archive", "verify", file]).status == 0)
    }

    @Test("--blobs-before removes blobs only old jobs produced; result says so; the history keeps the hash", arguments: StoreEngine.allCases)
    func blobsExpire(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("blobexpiry", engine: engine)
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: engine)
        let own = Digest256.hex(Self.ownBytes)

        let dry = try #require(try workspace.json(["archive", "--blobs-before", "50d", "--dry-run", "--json"]) as? [String: Any])
        #expect(dry["dry_run"] as? Bool == true && dry["blobs"] as? Int == 1 && dry["sha256"] as? [String] == [own])
        #expect(try workspace.jobctl(["result", jobs.oldOwn, "-o", "-"]).stdout == Self.ownBytes, "a dry run removes nothing")

        let expired = try #require(try workspace.json(["archive", "--blobs-before", "50d", "--json"]) as? [String: Any])
        #expect(expired["blobs"] as? Int == 1 && expired["bytes"] as? Int == Self.ownBytes.utf8.count, "\(expired)")
        let result = try workspace.jobctl(["result", jobs.oldOwn, "-o", "-"])
        #expect(result.status == 1 && result.stderr.contains("expired on") && result.stderr.contains(own), "\(result.stderr)")
        // The blob the recent job also produced stays, for both jobs.
        #expect(try workspace.jobctl(["result", jobs.oldShared, "-o", "-"]).stdout == Self.sharedBytes)
        #expect(try workspace.jobctl(["result", jobs.recent, "-o", "-"]).stdout == Self.sharedBytes)
        // The error's remedy — `jobctl history ID` keeps its hash — holds in the history's text too, and
        // `show` no longer points at `jobctl result` for bytes that are gone.
        let remedy = try #require(result.stderr.firstMatch(of: /`jobctl (history [0-9A-Z]+)`/), "\(result.stderr)")
        let historyText = try workspace.jobctl(remedy.1.split(separator: " ").map(String.init))
        #expect(historyText.status == 0 && historyText.stdout.contains(own), "`jobctl \(remedy.1)` does not show \(own): \(historyText.stdout)")
        let show = try workspace.jobctl(["show", jobs.oldOwn])
        let blobLine = try #require(show.stdout.split(separator: "\n").first { $0.hasPrefix("blob:") }, "\(show.stdout)")
        #expect(blobLine.contains(own) && blobLine.contains("expired") && !blobLine.contains("jobctl result"), "\(blobLine)")
        let kept = try workspace.jobctl(["show", jobs.recent])
        #expect(kept.stdout.contains("(jobctl result \(jobs.recent))"), "\(kept.stdout)")
        // The history still names the hash; the log and its projection agree.
        let history = try #require(try workspace.json(["history", jobs.oldOwn, "--json"]) as? [[String: Any]])
        let succeeded = try #require(history.last?["data"] as? [String: Any])
        #expect((succeeded["result"] as? [String: Any])?["blob"] as? String == own, "\(succeeded)")
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
        let again = try #require(try workspace.json(["archive", "--blobs-before", "50d", "--json"]) as? [String: Any])
        #expect(again["blobs"] as? Int == 0)

        // Archiving afterwards keeps the expired blob's hash in the events; the file holds only the stored blob.
        let both = try #require(try workspace.json(["archive", "--before", "90d", "--to", workspace.directory.file("a.gz"),
                                                    "--blobs-before", "50d", "--json"]) as? [String: Any])
        #expect((both["archive"] as? [String: Any])?["blobs"] as? Int == 1, "\(both)")
        #expect((both["expired_blobs"] as? [String: Any])?["blobs"] as? Int == 0, "\(both)")
        #expect(try workspace.jobctl(["archive", "verify", workspace.directory.file("a.gz")]).status == 0)
    }

    @Test("a worker warns when the newest event is dated far in its future", arguments: StoreEngine.allCases)
    func clockSkewWarning(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("clockskew", engine: engine)
        defer { workspace.directory.remove() }
        let store = try Self.open(workspace, engine: engine)
        // Submitted by a process whose clock is an hour ahead (into another queue, so the worker idles).
        _ = try store.submit([JobSpec(kind: .uploadData, destination: "file://b/x", data: Data("x".utf8), queue: "elsewhere")],
                             actor: "cli:test", now: Clock.nowMs() + 3_600_000)
        let worker = try workspace.jobctl(["worker", "--drain", "--queue", "default", "--log-format", "json", "-q"])
        #expect(worker.status == 0, "\(worker.stderr)")
        let warning = try #require(worker.stderr.split(separator: "\n").first { $0.contains("clock_skew") }, "\(worker.stderr)")
        #expect(warning.contains("\"newest_event\"") && warning.contains("\"warning\""), "\(warning)")
        // Clocks in step: no warning.
        let fresh = try CLIWorkspace("clockskewok", engine: engine)
        defer { fresh.directory.remove() }
        _ = try Self.open(fresh, engine: engine).submit([JobSpec(kind: .uploadData, destination: "file://b/x", data: Data("x".utf8),
                                                                 queue: "elsewhere")], actor: "cli:test", now: Clock.nowMs())
        let quiet = try fresh.jobctl(["worker", "--drain", "--queue", "default", "--log-format", "json", "-q"])
        #expect(quiet.status == 0 && !quiet.stderr.contains("clock_skew"), "\(quiet.stderr)")
    }

    @Test("archive verify refuses a changed, truncated or foreign file")
    func verifyRefusesDamage() throws {
        let workspace = try CLIWorkspace("archiveverify")
        defer { workspace.directory.remove() }
        _ = try Self.fabricate(in: workspace, engine: .sqlite)
        let file = workspace.directory.file("a.ndjson.gz")
        #expect(try workspace.jobctl(["archive", "--before", "90d", "--to", file]).status == 0)
        let original = try Data(contentsOf: URL(fileURLWithPath: file))

        func verify(_ bytes: Data) throws -> ProcessOutput {
            let damaged = workspace.directory.file("damaged-\(UUID().uuidString.prefix(6)).gz")
            try bytes.write(to: URL(fileURLWithPath: damaged))
            return try workspace.jobctl(["archive", "verify", damaged])
        }
        // Truncated.
        let truncated = try verify(original.prefix(original.count / 2))
        #expect(truncated.status == 1 && truncated.stderr.contains("truncated"), "\(truncated.stderr)")
        // Trailing bytes.
        let trailing = try verify(original + Data("x".utf8))
        #expect(trailing.status == 1 && trailing.stderr.contains("after the end of the gzip stream"), "\(trailing.stderr)")
        // Content changed and compressed again (the gzip CRC is right, the trailer's sha256 is not).
        let text = try #require(String(data: try gunzip(file), encoding: .utf8))
        let changed = try #require(text.range(of: "cli:test"))
        let tampered = text.replacingCharacters(in: changed, with: "cli:evil")
        let rezipped = try gzip(Data(tampered.utf8), in: workspace)
        let checksum = try verify(rezipped)
        #expect(checksum.status == 1 && checksum.stderr.contains("the file was changed after it was written"), "\(checksum.stderr)")
        // A job's events with a gap: the second event line dropped (its trailer recomputed would not help either).
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let firstJobSecondEvent = try #require(lines.firstIndex { $0.contains("\"type\":\"claimed\"") })
        lines.remove(at: firstJobSecondEvent)
        let gap = try verify(try gzip(Data(lines.joined(separator: "\n").utf8), in: workspace))
        #expect(gap.status == 1 && gap.stderr.contains("where 2 was expected"), "\(gap.stderr)")
        // An event whose data is not an event's, the trailer's checksum made to match: every line whole,
        // so verify called it intact while `audit --from` refused it with a Swift decoding dump.
        var edited = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let claimedLine = try #require(edited.firstIndex { $0.contains("\"type\":\"claimed\"") })
        let dataStart = try #require(edited[claimedLine].range(of: "\"data\":\""))
        let dataEnd = try #require(edited[claimedLine].range(of: "\",\"job_id\"", range: dataStart.upperBound..<edited[claimedLine].endIndex))
        edited[claimedLine].replaceSubrange(dataStart.upperBound..<dataEnd.lowerBound, with: "{\\\"x\\\":1}")
        /// `lines` with the trailer's checksum made to match what precedes it, compressed: a file whose
        /// every check but the one under test passes.
        func resealed(_ lines: [String]) throws -> Data {
            var lines = lines
            let trailerLine = try #require(lines.lastIndex { $0.contains("\"record\":\"trailer\"") })
            let content = workspace.directory.file("content.ndjson")
            try Data(lines[..<trailerLine].map { $0 + "\n" }.joined().utf8).write(to: URL(fileURLWithPath: content))
            let contentSHA = try Self.sha256sum(content)
            lines[trailerLine] = lines[trailerLine].replacingOccurrences(
                of: "\"sha256\":\"[0-9a-f]{64}\"", with: "\"sha256\":\"\(contentSHA)\"", options: .regularExpression)
            return try gzip(Data(lines.joined(separator: "\n").utf8), in: workspace)
        }
        let undecodable = workspace.directory.file("undecodable.ndjson.gz")
        try resealed(edited).write(to: URL(fileURLWithPath: undecodable))
        for arguments in [["archive", "verify", undecodable], ["audit", "--from", undecodable, "--json"]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 1 && output.stderr.contains("cannot be read: its data is not an event's")
                        && !output.stderr.contains("DecodingError"), "\(arguments): \(output.stderr)")
        }
        // A header whose seq range is not its events' (verify printed the header's range as the file's).
        var header = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        header[0] = header[0].replacingOccurrences(of: "\"first_seq\":[0-9]+", with: "\"first_seq\":9999", options: .regularExpression)
        let range = try verify(try resealed(header))
        #expect(range.status == 1 && range.stderr.contains("the header gives seq 9999"), "\(range.stderr)")
        // Not an archive at all; an archive decompressed.
        let foreign = try verify(Data("hello\n".utf8))
        #expect(foreign.status == 1 && foreign.stderr.contains("not a valid jobctl archive"), "\(foreign.stderr)")
        let plain = try verify(Data(text.utf8))
        #expect(plain.status == 1 && plain.stderr.contains("not gzip-compressed"), "\(plain.stderr)")
        // The intact file still verifies.
        #expect(try workspace.jobctl(["archive", "verify", file]).status == 0)
    }

    /// A crafted file is hostile input: one event line that never ends (80 MiB of one byte, ~80 KB of
    /// gzip) was held until it passed the one limit every line had, a 512 MiB blob's base64 (683 MiB;
    /// one of 800 MB took ~39 s and ~750 MB); it is refused at an event line's 64 MiB now. A fake blob
    /// line was held four times over (the line, a copy, a String, the bytes); now its base64 streams
    /// through the SHA-256 check and the mismatch is named as before.
    @Test("archive verify and audit --from refuse an endless line at its kind's limit, and a fake blob by its hash")
    func craftedLinesRefused() throws {
        let workspace = try CLIWorkspace("archivecrafted")
        defer { workspace.directory.remove() }
        let header = #"{"before_ms":1,"blobs":1,"created_at_ms":1,"events":1,"first_seq":1,"format":"jobctl-archive","jobs":1,"#
            + #""last_seq":1,"record":"header","version":1}"# + "\n"
        var endless = Data((header + #"{"actor":""#).utf8)
        endless.append(Data(repeating: 0x41, count: 80 << 20))
        let endlessFile = workspace.directory.file("endless.gz")
        try gzip(endless, in: workspace).write(to: URL(fileURLWithPath: endlessFile))
        for command in [["archive", "verify", endlessFile], ["audit", "--from", endlessFile]] {
            let refused = try workspace.jobctl(command)
            #expect(refused.status == 1 && refused.stderr.contains("line 2 runs past 67108864 bytes without ending, more than any "
                                                                   + "event line can hold"), "\(command): \(refused.stderr)")
        }
        var fake = Data((header.replacingOccurrences(of: #""events":1"#, with: #""events":0"#)
                            .replacingOccurrences(of: #""jobs":1"#, with: #""jobs":0"#) + #"{"base64":""#).utf8)
        fake.append(Data(repeating: 0x41, count: 4 * (20 << 20)))
        fake.append(Data((#"","record":"blob","sha256":""# + String(repeating: "0", count: 64) + #"","size":\#(3 * (20 << 20))}"# + "\n").utf8))
        let fakeFile = workspace.directory.file("fake-blob.gz")
        try gzip(fake, in: workspace).write(to: URL(fileURLWithPath: fakeFile))
        let refused = try workspace.jobctl(["archive", "verify", fakeFile])
        #expect(refused.status == 1 && refused.stderr.contains("line 2: blob \(String(repeating: "0", count: 64)) does not match its bytes "
                                                               + "(\(3 * (20 << 20)) bytes, sha256 "), "\(refused.stderr)")
    }

    /// An intact archive this log does not record was replaced as "what an interrupted run leaves" — but
    /// another database's archive written to the same name is that too: the second log's `archive`
    /// replaced the only copy of the first log's archived jobs. It is replaced now only when every job
    /// in it is still in this log.
    /// The archive's temporary file was closed before its rename and, when the rename failed, closed
    /// again on the way out: a second close of a number the process may have given to another file since
    /// (another thread's database or transfer file), which it would close under that file's owner. strace
    /// makes the rename fail (EIO) and records every open and close: the temporary's descriptor must be
    /// closed once.
    @Test("a failed rename of the archive closes its temporary file once, never a descriptor reused since")
    func failedRenameClosesOnce() throws {
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is not installed (Debian package strace; make test-deps installs it)")
        let workspace = try CLIWorkspace("archiverename")
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: .sqlite)
        let file = workspace.directory.file("backup.ndjson.gz")
        let trace = workspace.directory.file("archive.strace")
        let output = try runProcess(strace, ["-f", "-qq", "-o", trace, "-e", "trace=open,openat,close,rename,renameat,renameat2",
                                             "-e", "inject=rename,renameat,renameat2:error=EIO",
                                             PackagePaths.jobctlBinary, "--db", workspace.database,
                                             "archive", "--before", "90d", "--to", file],
                                    environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
        #expect(output.status == 1 && output.stderr.contains("cannot rename") && output.stderr.contains("nothing was removed from the log"),
                "\(output.status) \(output.stderr)")
        // Each line: "PID call(args) = result" (a call another thread interrupted comes in two lines,
        // "close(5 <unfinished ...>" then "<... close resumed>) = 0": its first names the descriptor).
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").map(String.init)
        let opened = try #require(lines.firstIndex { $0.contains(".partial\"") && $0.contains("O_CREAT") },
                                  "the temporary's open is in the trace: \(lines.suffix(20))")
        let descriptor = try #require(lines[opened].split(separator: "=").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) },
                                      "\(lines[opened])")
        // From its open to the next open that returns the same number: its closes.
        var closes: [String] = []
        for line in lines[(opened + 1)...] {
            if line.contains("open"), line.hasSuffix("= \(descriptor)") { break }
            if line.contains("close(\(descriptor))") || line.contains("close(\(descriptor) ") { closes.append(line) }
        }
        #expect(closes.count == 1, "the temporary's descriptor \(descriptor) closed \(closes.count) times: \(closes)")
        #expect(!FileManager.default.fileExists(atPath: file))
        #expect(try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path).allSatisfy { !$0.hasSuffix(".partial") },
                "the temporary is removed")
        let listed = try workspace.jobctl(["list", "--json"])
        #expect(Self.ids(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8))).isSuperset(of: jobs.archived),
                "the log kept its jobs: \(listed.stdout)")
    }

    @Test("archive --to refuses to replace another log's archive, the only copy of its jobs")
    func anotherLogsArchiveKept() throws {
        let first = try CLIWorkspace("archiveownerone")
        defer { first.directory.remove() }
        let second = try CLIWorkspace("archiveownertwo")
        defer { second.directory.remove() }
        let firstJobs = try Self.fabricate(in: first, engine: .sqlite)
        let secondJobs = try Self.fabricate(in: second, engine: .sqlite)
        let file = first.directory.file("backup.ndjson.gz")
        let archived = try first.jobctl(["archive", "--before", "90d", "--to", file])
        try #require(archived.status == 0, "\(archived.stderr)")
        let before = try Self.sha256sum(file)
        let output = try second.jobctl(["archive", "--before", "90d", "--to", file])
        #expect(output.status == 1 && output.stderr.contains("'\(file)' is an archive of 3 jobs not in this log")
                    && output.stderr.contains("nothing was archived"), "\(output.status) \(output.stderr)")
        #expect(try Self.sha256sum(file) == before, "the first log's archive was replaced")
        let audit = try first.jobctl(["audit", "--from", file, "--json"])
        #expect(Self.ids(try JSONSerialization.jsonObject(with: Data(audit.stdout.utf8))) == firstJobs.archived, "\(audit.stderr)")
        let listed = try second.jobctl(["list", "--json"])
        #expect(Self.ids(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8))).isSuperset(of: secondJobs.archived),
                "the second log kept its jobs: \(listed.stdout)")
    }

    /// A FIFO named as the file: `archive verify`, `audit --from` and `archive --to` (which reads an
    /// existing file before replacing it) waited in `open` for a writer for ever. A directory failed at
    /// its first read with Foundation's error text, a device as damaged gzip. Each is refused at once
    /// now, named for what it is, and the log keeps its jobs. A writer opens each FIFO after 5 s so
    /// that the old behaviour ends (late) rather than hangs the suite.
    @Test("archive verify, audit --from and archive --to refuse a FIFO, a folder or a device at once, naming it")
    func specialFilesRefused() throws {
        let workspace = try CLIWorkspace("archivespecial")
        defer { workspace.directory.remove() }
        let jobs = try Self.fabricate(in: workspace, engine: .sqlite)
        let folder = workspace.directory.file("folder")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        let commands: [(arguments: (String) -> [String], status: Int32)] = [
            ({ ["archive", "verify", $0] }, 1),
            ({ ["audit", "--from", $0, "--json"] }, 1),
            ({ ["archive", "--before", "90d", "--to", $0] }, 1),
        ]
        for (index, command) in commands.enumerated() {
            let fifo = workspace.directory.file("fifo-\(index).ndjson.gz")
            #expect(mkfifo(fifo, 0o600) == 0)
            Thread {
                sleep(5)
                let descriptor = Glibc.open(fifo, O_WRONLY | O_NONBLOCK)
                if descriptor >= 0 { close(descriptor) }
            }.start()
            let start = ContinuousClock.now
            let output = try workspace.jobctl(command.arguments(fifo))
            #expect(start.duration(to: .now) < .seconds(3), "\(command.arguments(fifo)) waited for a writer")
            #expect(output.status == command.status && output.stderr.contains("'\(fifo)' is a FIFO, not an archive file"),
                    "\(command.arguments(fifo)): \(output.status) \(output.stderr)")
            var info = stat()
            #expect(lstat(fifo, &info) == 0 && info.st_mode & S_IFMT == S_IFIFO, "the FIFO is left as it was")
        }
        for (path, kind) in [(folder, "a directory"), ("/dev/zero", "a character device")] {
            for command in commands.prefix(2) {
                let output = try workspace.jobctl(command.arguments(path))
                #expect(output.status == command.status && output.stderr.contains("'\(path)' is \(kind), not an archive file"),
                        "\(command.arguments(path)): \(output.status) \(output.stderr)")
            }
        }
        // Nothing left the log.
        let listed = try workspace.jobctl(["list", "--json"])
        let ids = Self.ids(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)))
        #expect(ids.isSuperset(of: jobs.archived), "\(listed.stdout)")
    }

    @Test("archive removes what its jobs left on disk: once they leave the log no sweep can tie the files to them")
    func leftoversGoWithTheirJobs() throws {
        let workspace = try CLIWorkspace("archiveleftovers")
        defer { workspace.directory.remove() }
        let out = workspace.directory.file("out")
        let ids = try workspace.submit("""
        - {kind: download-file, source: "file://docs/a.bin", destination: "\(out)/a.bin"}
        - {kind: download-file, source: "file://docs/b.bin", destination: "\(out)/b.bin"}
        """)
        try #require(ids.count == 2)
        // A partial download each, as a paused transfer keeps it; the first job is then cancelled while no worker runs it.
        let partial = "\(out)/.a.bin.\(ids[0]).jobctl-partial"
        let resumable = "\(out)/.b.bin.\(ids[1]).jobctl-partial"
        for path in [partial, resumable] { _ = try workspace.write(String(path.dropFirst(workspace.directory.path.count + 1)), "bytes") }
        #expect(try workspace.jobctl(["cancel", ids[0]]).status == 0)
        #expect(try workspace.jobctl(["orphans"]).stdout.contains(partial))

        let archived = try workspace.jobctl(["archive", "--before", "0s", "--to", workspace.directory.file("old.ndjson.gz")])
        #expect(archived.status == 0, "\(archived.stderr)")
        #expect(archived.stdout.contains("archived 1 job"), "\(archived.stdout)")
        #expect(archived.stderr.contains("removed \(partial), left by archived job \(ids[0])"), "\(archived.stderr)")
        #expect(!FileManager.default.fileExists(atPath: partial))
        // The queued job's file stays: it resumes from it.
        #expect(FileManager.default.fileExists(atPath: resumable))
    }

    /// A job whose event or result is a few MiB could never be archived from a SQLite log: deleting its
    /// rows outgrew the statement journal's 4 MiB in memory, and SQLite 3.40 cannot write a chunk that
    /// size when it spills ("database or disk is full", exit 1, on an empty disk). A 6 MiB `upload-data`
    /// and a 6 MiB `download-memory` result now leave the log like any other job.
    @Test("jobs with an event or a result of several MiB are archived", arguments: StoreEngine.allCases)
    func largeJobsArchived(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("archivelarge", engine: engine)
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        try FileManager.default.createDirectory(atPath: buckets + "/b", withIntermediateDirectories: true)
        let data = String(repeating: "six mebibytes of upload-data, ", count: (6 << 20) / 30)
        let ids = try workspace.submit("""
        - {kind: upload-data, destination: "file://b/large.txt", key: up, data: "\(data)"}
        - {kind: download-memory, source: "file://b/large.txt", max_size: 8388608, after: [up]}
        """)
        try #require(ids.count == 2)
        let drain = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": buckets])
        #expect(drain.status == 0, "\(drain.stderr)")
        let archive = try workspace.jobctl(["archive", "--before", "0s", "--to", workspace.directory.file("large.ndjson.gz")])
        #expect(archive.status == 0, "\(archive.stdout)\(archive.stderr)")
        #expect(Self.ids(try workspace.json(["list", "--json"])).isEmpty)
        let fromFile = try workspace.json(["audit", "--from", workspace.directory.file("large.ndjson.gz"), "--json"])
        #expect(Self.ids(fromFile) == Set(ids))
    }

    /// A finished job kept in the log because a job there waits for it: "no job finished before then"
    /// was not true; the archive says which were kept and why.
    @Test("archive says which finished jobs it keeps for the jobs that wait for them")
    func keptForDependantsSaid() throws {
        let workspace = try CLIWorkspace("archivekept")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: download-memory, source: "file://docs/missing.bin", key: a}
        - {kind: download-memory, source: "file://docs/missing.bin", after: [a]}
        """)
        try #require(ids.count == 2)
        _ = try workspace.jobctl(["worker", "--drain"])
        // The dependency failed (and its dependant was cancelled); the dependant retried waits for it again.
        // `retry` refuses that now (it could never run): the `retried` goes in as a release before that wrote it.
        #expect(try workspace.jobctl(["retry", ids[1]]).status == 1)
        let store = try Self.open(workspace, engine: .sqlite)
        _ = try store.append(PendingEvent(jobID: ids[1], type: .retried, actor: "cli:an-earlier-release", leaseToken: nil),
                             now: Clock.nowMs())
        let dry = try workspace.jobctl(["archive", "--before", "0s", "--dry-run"])
        #expect(dry.status == 0 && dry.stdout.contains("nothing to archive: the 1 job that finished before")
                && dry.stdout.contains("stays in the log: jobs there wait for it (after:)"), "\(dry.stdout)\(dry.stderr)")
        let json = try #require(try workspace.json(["archive", "--before", "0s", "--dry-run", "--json"]) as? [String: Any])
        #expect(json["kept_for_dependants"] as? Int == 1 && json["jobs"] as? Int == 0, "\(json)")
    }

    /// The real archive's JSON had no `kept_for_dependants` (README says it is there): only the dry run's
    /// had, and the text's note of the jobs kept back is not printed under --json, so a caller never
    /// learnt that jobs stayed. It now has the dry run's fields too.
    @Test("archive --json says how many finished jobs it kept for the jobs that wait for them, as its dry run does",
          arguments: StoreEngine.allCases)
    func keptForDependantsInTheArchivesJSON(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("archivekeptjson", engine: engine)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: download-memory, source: "file://docs/missing.bin", key: a}
        - {kind: download-memory, source: "file://docs/missing.bin", after: [a]}
        - {kind: download-memory, source: "file://docs/other-missing.bin"}
        """)
        try #require(ids.count == 3)
        _ = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        // The dependant retried waits for its failed dependency again (written as a release before `retry`
        // refused that did it): the dependency stays; the third job, failed on its own, is archived.
        let store = try Self.open(workspace, engine: engine)
        _ = try store.append(PendingEvent(jobID: ids[1], type: .retried, actor: "cli:an-earlier-release", leaseToken: nil),
                             now: Clock.nowMs())
        let dry = try #require(try workspace.json(["archive", "--before", "0s", "--dry-run", "--json"]) as? [String: Any])
        #expect(dry["kept_for_dependants"] as? Int == 1 && dry["jobs"] as? Int == 1, "\(dry)")
        let file = workspace.directory.file("kept.ndjson.gz")
        let archived = try #require(try workspace.json(["archive", "--before", "0s", "--to", file, "--json"]) as? [String: Any])
        #expect(archived["kept_for_dependants"] as? Int == 1, "\(archived)")
        #expect(archived["jobs"] as? Int == 1 && archived["job_ids"] as? [String] == [ids[2]], "\(archived)")
        #expect(archived["states"] as? [String: Int] == ["failed": 1] && archived["dry_run"] as? Bool == false, "\(archived)")
        // Every field of the dry run is there, with the file's own.
        #expect(Set(dry.keys).isSubset(of: Set(archived.keys)), "missing \(Set(dry.keys).subtracting(archived.keys))")
        for key in ["file", "sha256", "blobs_removed"] { #expect(archived[key] != nil, "no \(key)") }
        #expect(Self.ids(try workspace.json(["list", "--json"])) == Set(ids.prefix(2)))
    }

    @Test("a key lasts while its job is in the log: after archive the same key makes a new job, and after: refuses it saying why",
          arguments: StoreEngine.allCases)
    func keysEndWithTheArchivedJob(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("archivekeys", engine: engine)
        defer { workspace.directory.remove() }
        let manifest = "- {kind: upload-data, data: x, destination: \"file://b/x\", key: nightly}\n"
        let first = try workspace.submit(manifest)
        #expect(try workspace.submit(manifest) == first, "the key maps to its job while it is in the log")
        let drained = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(drained.status == 0, "\(drained.stderr)")
        let archived = try workspace.jobctl(["archive", "--before", "0s", "--to", workspace.directory.file("a.gz")])
        #expect(archived.status == 0 && archived.stdout.contains("archived 1 job"), "\(archived.stdout)\(archived.stderr)")
        let waiting = try workspace.write("waiting.yaml", "- {kind: download-memory, source: \"file://b/x\", after: [nightly]}\n")
        let refused = try workspace.jobctl(["submit", waiting])
        #expect(refused.status == 65 && refused.stderr.contains("'after' names 'nightly'")
                && refused.stderr.contains("a job `jobctl archive` moved out of the log is named by nothing"), "\(refused.stderr)")
        let again = try workspace.submit(manifest)
        #expect(again.count == 1 && again != first, "the archived job's key names nothing: a new job")
        #expect(try workspace.jobctl(["show", "nightly"]).stdout.contains(again[0]))
    }
    @Test("archive's usage errors name the option and exit 64")
    func usageErrors() throws {
        let workspace = try CLIWorkspace("archiveusage")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("jobs:\n  - kind: upload-data\n    data: x\n    destination: file://b/x\n")
        let cases: [([String], String)] = [
            (["archive", "--to", "x.gz"], "needs --before"),
            (["archive", "--blobs-before", "7d", "--to", "x.gz"], "--to applies only with --before"),
            (["archive", "--blobs-before", "7 days"], "--blobs-before expects"),
            (["archive", "--before", "90d"], "needs --to"),
            (["archive", "--before", "99999d", "--to", "x.gz"], "--before 99999d is out of range"),
            (["archive", "--before", "soon", "--to", "x.gz"], "--before expects"),
            (["archive", "check", "x.gz"], "unknown action 'check'"),
            (["archive", "verify"], "needs the archive file"),
            (["archive", "verify", "x.gz", "--before", "1d"], "--before does not apply"),
        ]
        for (arguments, message) in cases {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 64 && output.stderr.contains(message), "\(arguments): \(output.status) \(output.stderr)")
        }
        // An existing file that is not an archive is never replaced.
        #expect(try workspace.jobctl(["cancel", ids[0]]).status == 0)
        let precious = try workspace.write("precious.txt", "keep me")
        let refused = try workspace.jobctl(["archive", "--before", "0s", "--to", precious])
        #expect(refused.status == 1 && refused.stderr.contains("not an intact jobctl archive"), "\(refused.stderr)")
        #expect(try String(contentsOfFile: precious, encoding: .utf8) == "keep me")
    }
}

/// SHA-256 through the system's `sha256sum`, for expected blob names.
enum Digest256 {
    static func hex(_ text: String) -> String {
        let output = try? runProcess("/usr/bin/sha256sum", ["-"], stdin: text)
        return String((output?.stdout ?? "").prefix(64))
    }
}

/// The uncompressed bytes of a gzip file, through the system's gzip.
func gunzip(_ path: String) throws -> Data {
    Data(try runProcess("/bin/gzip", ["-dc", path]).stdout.utf8)
}

/// `bytes` compressed by the system's gzip.
func gzip(_ bytes: Data, in workspace: CLIWorkspace) throws -> Data {
    let path = workspace.directory.file("plain-\(UUID().uuidString.prefix(6))")
    try bytes.write(to: URL(fileURLWithPath: path))
    _ = try runProcess("/bin/gzip", ["-n", path])
    return try Data(contentsOf: URL(fileURLWithPath: path + ".gz"))
}
