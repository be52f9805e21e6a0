import Foundation
import Testing
import TestSupport

/// `jobctl backup FILE`: a consistent single-file copy of a SQLite log taken while a worker writes, with
/// the log's permission bits, that never replaces anything and leaves nothing behind when it fails.
@Suite("jobctl backup", .onTestThreads) struct BackupCommandTests {
    /// The hidden files a backup writes before naming its copy.
    static func leftovers(in folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { $0.hasSuffix(".jobctl-backup") }
    }

    static func mode(_ path: String) -> mode_t {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o777 : 0
    }

    @Test func copiesWhileAWorkerWritesEachCopyWholeAndConsistent() throws {
        let workspace = try CLIWorkspace("backup-live")
        defer { workspace.directory.remove() }
        let count = 1_000
        let manifest = try workspace.write("jobs.yaml", (0..<count).map {
            "- {kind: upload-data, data: \"payload \($0)\", destination: \"file://live/f\($0).txt\"}"
        }.joined(separator: "\n"))
        let submitted = try workspace.jobctl(["submit", manifest])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        #expect(Self.mode(workspace.database) == 0o600)

        // Slow enough that the copies land mid-drain: each job is a new, synced object.
        let worker = try LoggedWorker(workspace, ["--concurrency", "1", "--claim-ahead", "0"])
        defer { worker.kill() }
        var copies: [(path: String, events: Int)] = []
        // Until a copy lands mid-drain (neither the submitted events alone nor the whole history), at
        // least three copies, at most thirty.
        while copies.count < 30, copies.count < 3 || !copies.contains(where: { $0.events > count && $0.events < 4 * count }) {
            let copy = workspace.directory.file("copy-\(copies.count).db")
            let view = try #require(try workspace.json(["backup", "--json", copy]) as? [String: Any])
            #expect(view["path"] as? String == copy)
            #expect(view["jobs"] as? Int == count, "\(view)")
            let events = try #require(view["events"] as? Int)
            #expect(events >= count, "\(view)")
            #expect((view["size"] as? Int ?? 0) > 0 && view["schema_version"] as? Int ?? 0 > 0, "\(view)")
            copies.append((copy, events))
        }
        worker.stop()
        #expect(Self.leftovers(in: workspace.directory.path).isEmpty)
        // Taken while the worker wrote: later copies hold as much as earlier ones, and one mid-drain.
        #expect(zip(copies, copies.dropFirst()).allSatisfy { $0.events <= $1.events }, "\(copies.map(\.events))")
        #expect(copies.contains { $0.events > count && $0.events < 4 * count }, "\(copies.map(\.events))")

        for copy in copies {
            // One file: no -wal beside it, the log's bits, and a projection that its own events rebuild.
            #expect(!FileManager.default.fileExists(atPath: copy.path + "-wal"))
            #expect(Self.mode(copy.path) == 0o600, "\(String(Self.mode(copy.path), radix: 8))")
            let verified = try runProcess(PackagePaths.jobctlBinary, ["--db", copy.path, "replay", "--verify"], environment: ["NO_COLOR": "1"])
            #expect(verified.status == 0 && verified.stdout.contains("replayed \(copy.events) events into \(count) jobs: projection matches"),
                    "\(verified.stdout)\(verified.stderr)")
        }
        // The last copy, taken after the worker stopped, holds every event of the log.
        let last = workspace.directory.file("after.db")
        let after = try #require(try workspace.json(["backup", "--json", last]) as? [String: Any])
        let stats = try #require(try workspace.json(["replay", "--verify", "--json"]) as? [String: Any])
        #expect(after["events"] as? Int == stats["events"] as? Int, "\(after) \(stats)")
        // A copy is a log like any other: a worker writes into it.
        let resumed = try runProcess(PackagePaths.jobctlBinary, ["--db", last, "worker", "--drain"],
                                     environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let done = try runProcess(PackagePaths.jobctlBinary, ["--db", last, "list", "--state", "succeeded", "--limit", "0", "--json"],
                                  environment: ["NO_COLOR": "1"])
        let rows = try JSONSerialization.jsonObject(with: Data(done.stdout.utf8))
        #expect(((rows as? [Any]) ?? ((rows as? [String: Any])?["jobs"] as? [Any]) ?? []).count == count, "\(done.stdout.prefix(300))")
    }

    @Test func neverReplacesAnythingAndLeavesNothingWhenRefused() throws {
        let workspace = try CLIWorkspace("backup-refusals")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file://b/x.txt\"}")
        let existing = try workspace.write("existing.db", "keep me")
        let target = try workspace.write("target.txt", "target")
        let link = workspace.directory.file("link.db")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        try FileManager.default.createDirectory(atPath: workspace.directory.file("folder"), withIntermediateDirectories: false)

        for (path, says) in [(existing, "already exists (a file)"), (link, "already exists (a symbolic link)"),
                             (workspace.directory.file("folder"), "already exists (a folder)"),
                             (workspace.directory.file("folder/"), "names a folder"), (".", "names a folder"),
                             (workspace.directory.file("missing/b.db"), "does not exist"),
                             ("jobctl.db-wal", "is this log's own"), ("./jobctl.db-shm", "is this log's own"),
                             (workspace.directory.file("jobctl.db-journal"), "is this log's own")] {
            let refused = try workspace.jobctl(["backup", path])
            #expect(refused.status == 1, "\(path): \(refused.stderr)")
            #expect(refused.stderr.contains(says), "\(path): \(refused.stderr)")
            #expect(!refused.stderr.contains("database I/O error"), "\(refused.stderr)")
        }
        #expect(try String(contentsOfFile: existing, encoding: .utf8) == "keep me")
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "target")
        #expect(Self.leftovers(in: workspace.directory.path).isEmpty)
        // Readers leave an empty -wal and a -shm: neither may be a copy of the database.
        #expect(!FileManager.default.fileExists(atPath: workspace.database + "-journal"))
        for suffix in ["-wal", "-shm"] {
            let head = FileManager.default.contents(atPath: workspace.database + suffix)?.prefix(16) ?? Data()
            #expect(head != Data("SQLite format 3\u{0}".utf8), "\(suffix) holds a database")
        }
        // A name SQLite would read as a URI is a file name like any other.
        let odd = try workspace.jobctl(["backup", "file:odd.db?mode=memory"])
        #expect(odd.status == 0, "\(odd.stderr)")
        #expect(FileManager.default.fileExists(atPath: workspace.directory.file("file:odd.db?mode=memory")))
        #expect(odd.stdout.contains("backed up 1 jobs and 1 events"), "\(odd.stdout)")
    }

    /// A backup killed part way (its own SIGINT, SIGTERM or SIGKILL) left a whole hidden copy behind —
    /// the log's URLs in it — that nothing removed; one left by a dead process of this process's id made
    /// the next backup fail "cannot create 'FILE': File exists". The next backup of that name removes the
    /// copies of processes no longer alive, and keeps a live one's. A name of up to 255 bytes is taken
    /// (the hidden copy's journal was past NAME_MAX from 228 bytes on).
    @Test func theNextBackupRemovesWhatKilledRunsLeftAndLongNamesWork() throws {
        let workspace = try CLIWorkspace("backup-leftovers")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file://b/x.txt\"}")
        // The id of a process that has exited.
        let exited = Process()
        exited.executableURL = URL(fileURLWithPath: "/bin/true")
        try exited.run()
        exited.waitUntilExit()
        let dead = exited.processIdentifier
        let left = [".nightly.db.\(dead).jobctl-backup", ".nightly.db.\(dead).jobctl-backup-journal"]
        let live = ".nightly.db.1.jobctl-backup"
        for name in left + [live] { try workspace.write(name, "a copy with the log's URLs") }
        let done = try workspace.jobctl(["backup", "nightly.db"])
        #expect(done.status == 0, "\(done.stderr)")
        for name in left { #expect(!FileManager.default.fileExists(atPath: workspace.directory.file(name)), "\(name) is still there") }
        #expect(FileManager.default.fileExists(atPath: workspace.directory.file(live)), "a live process's copy was removed")

        let long = String(repeating: "b", count: 250) + ".db"
        let named = try workspace.jobctl(["backup", long])
        #expect(named.status == 0, "\(named.stderr)")
        #expect(FileManager.default.fileExists(atPath: workspace.directory.file(long)))
        #expect(Self.leftovers(in: workspace.directory.path) == [live], "\(Self.leftovers(in: workspace.directory.path))")
    }

    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func aFullDiskIsTheBackupsFailureAndKeepsNothing() throws {
        let workspace = try CLIWorkspace("backup-full")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", (0..<3_000).map {
            "- {kind: upload-data, data: \"\(String(repeating: "y", count: 200)) \($0)\", destination: \"file://full/f\($0).txt\"}"
        }.joined(separator: "\n"))
        let submitted = try workspace.jobctl(["submit", manifest])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let filesystem = try SmallFilesystem(at: workspace.directory.file("small"), size: "256k")
        defer { filesystem.unmount() }
        let failed = try workspace.jobctl(["backup", filesystem.path + "/b.db"])
        #expect(failed.status == 1)
        #expect(failed.stderr.contains("cannot write the backup") && failed.stderr.contains("full"), "\(failed.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: filesystem.path).isEmpty)
        // The log itself is untouched.
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    @Test func postgresIsPointedToItsOwnTools() throws {
        let workspace = try CLIWorkspace("backup-pg", engine: .postgres)
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file://b/x.txt\"}")
        let refused = try workspace.jobctl(["backup", workspace.directory.file("b.db")])
        #expect(refused.status == 1 && refused.stderr.contains("pg_dump"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("b.db")))
    }
}
