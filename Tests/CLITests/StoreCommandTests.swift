import Foundation
import Testing
import TestSupport

/// How the CLI opens the event log: which commands may create it, read-only media, reused keys, and
/// the control commands' refusals — through the built binary.
@Suite("jobctl and its database", .onTestThreads) struct StoreCommandTests {
    static let someID = "01JZZZZZZZZZZZZZZZZZZZZZZZ"

    /// Every command but `submit` and `migrate`, with the arguments it needs to get as far as opening.
    static let nonCreating: [[String]] = [
        ["worker"], ["worker", "--drain"], ["list"], ["show", someID], ["history", someID], ["audit"],
        ["watch", someID], ["watch", "--all", "--exit-when-idle"], ["result", someID], ["pause", someID],
        ["resume", someID], ["cancel", someID], ["retry", someID], ["replay"], ["replay", "--verify"],
    ]

    @Test("only submit and migrate create a database; every other command refuses a missing one",
          arguments: nonCreating)
    func missingDatabaseIsRefused(arguments: [String]) throws {
        let workspace = try CLIWorkspace("cli-no-db")
        defer { workspace.directory.remove() }
        // A mistyped path in a directory that exists.
        let typo = workspace.directory.file("jobctl-typo.db")
        // Under `timeout`: a worker that opened (created) the database would otherwise wait for work forever.
        let output = try runProcess("/usr/bin/timeout", ["20", PackagePaths.jobctlBinary, "--db", typo] + arguments,
                                    environment: ["NO_COLOR": "1"])
        #expect(output.status == 1, "\(arguments): \(output.stdout)\(output.stderr)")
        #expect(output.stderr.contains("Error: no database at \(typo): run `jobctl submit` or `jobctl migrate` to create one"),
                "\(arguments): \(output.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path).isEmpty,
                "\(arguments) created files")
    }

    /// A database path naming a FIFO, a directory or a device: every command refuses it at once with what
    /// it is, creating nothing (a FIFO used to block the open for ever), and an empty path says so.
    @Test("a database path that is a FIFO, a directory or a device is refused at once", arguments: [["list"], ["migrate"], ["worker", "--drain"]])
    func nonFileDatabaseIsRefused(arguments: [String]) throws {
        let workspace = try CLIWorkspace("cli-db-kind")
        defer { workspace.directory.remove() }
        let fifo = workspace.directory.file("queue.db")
        #expect(mkfifo(fifo, 0o600) == 0)
        let folder = workspace.directory.file("folder.db")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        for (path, kind) in [(fifo, "a FIFO"), (folder, "a directory"), ("/dev/null", "a character device")] {
            let output = try runProcess("/usr/bin/timeout", ["20", PackagePaths.jobctlBinary, "--db", path] + arguments,
                                        environment: ["NO_COLOR": "1"])
            #expect(output.status == 1, "\(path) \(arguments): \(output.status) \(output.stderr)")
            #expect(output.stderr.contains("'\(path)' is \(kind), not a database file"), "\(output.stderr)")
            // What it is, not a failing disk's words ("database I/O error: 'folder.db' is a directory…").
            #expect(!output.stderr.contains("I/O error"), "\(output.stderr)")
        }
        let empty = try runProcess("/usr/bin/timeout", ["20", PackagePaths.jobctlBinary, "--db", ""] + arguments, environment: ["NO_COLOR": "1"])
        // An empty --db is a usage error, refused while the command line is read (64).
        #expect(empty.status == 64 && empty.stderr.contains("--db expects a database file's path"), "\(empty.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path).sorted() == ["folder.db", "queue.db"])
    }

    /// A relative `--db` that SQLite would read as a URI (`file:NAME`) or as no file (`:memory:`) names
    /// the file written, as for every other path: `--db file:real.db` committed into `real.db`, then
    /// failed (exit 1, no id printed) for want of `file:real.db-wal`, and took its writer lock on the
    /// wrong file.
    @Test("a relative --db reading like an SQLite URI or :memory: is the file of that name")
    func uriLikeNamesAreFiles() throws {
        let workspace = try CLIWorkspace("cli-db-uri")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        let plain = try runProcess(PackagePaths.jobctlBinary, ["--db", "real.db", "submit", manifest], currentDirectory: workspace.directory.path)
        #expect(plain.status == 0, "\(plain.stderr)")
        for name in ["file:real.db", ":memory:"] {
            let submitted = try runProcess(PackagePaths.jobctlBinary, ["--db", name, "submit", manifest], currentDirectory: workspace.directory.path)
            #expect(submitted.status == 0 && submitted.stdout.count == 27, "\(name): \(submitted.stdout)\(submitted.stderr)")
            let listed = try runProcess(PackagePaths.jobctlBinary, ["--db", name, "list", "--json"], currentDirectory: workspace.directory.path)
            #expect(listed.status == 0 && listed.stdout.contains(submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)),
                    "\(name): \(listed.stdout)\(listed.stderr)")
            #expect(FileManager.default.fileExists(atPath: workspace.directory.file(name)))
        }
        let real = try runProcess(PackagePaths.jobctlBinary, ["--db", "real.db", "list", "--json"], currentDirectory: workspace.directory.path)
        let jobs = try #require(try JSONSerialization.jsonObject(with: Data(real.stdout.utf8)) as? [Any])
        #expect(jobs.count == 1, "\(real.stdout)")
    }

    @Test("submit and migrate create the database")
    func creatingCommands() throws {
        let workspace = try CLIWorkspace("cli-create")
        defer { workspace.directory.remove() }
        let migrated = try workspace.jobctl(["migrate"])
        #expect(migrated.status == 0, "\(migrated.stderr)")
        #expect(FileManager.default.fileExists(atPath: workspace.database))
        let other = workspace.directory.file("other.db")
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: x, destination: gs://bkt/x.txt}\n")
        let submitted = try runProcess(PackagePaths.jobctlBinary, ["--db", other, "submit", manifest])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        #expect(FileManager.default.fileExists(atPath: other))
        // And now the other commands open them.
        #expect(try workspace.jobctl(["list"]).status == 0)
        #expect(try workspace.jobctl(["worker", "--drain"]).status == 0)
    }

    @Test("a reused idempotency key with another spec is refused, naming the key and the job; nothing is stored")
    func reusedKeyWithAnotherSpec() throws {
        let workspace = try CLIWorkspace("cli-key")
        defer { workspace.directory.remove() }
        let first = try workspace.write("first.yaml", """
        - {kind: upload-data, data: "one", destination: gs://bkt/report.txt, key: nightly}
        """)
        let id = try workspace.jobctl(["submit", first]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(id.count == 26)
        let again = try workspace.jobctl(["submit", first])
        #expect(again.status == 0)
        #expect(again.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == id)

        let changed = try workspace.write("changed.yaml", """
        - {kind: upload-data, data: "new", destination: gs://bkt/new.txt}
        - {kind: upload-data, data: "two", destination: gs://bkt/report.txt, key: nightly}
        """)
        let refused = try workspace.jobctl(["submit", changed])
        #expect(refused.status == 65, "a refused manifest: \(refused.stderr)")
        #expect(refused.stderr.contains("idempotency key 'nightly'"), "\(refused.stderr)")
        #expect(refused.stderr.contains(id))
        #expect(refused.stdout.isEmpty)
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(jobs.count == 1)
    }

    /// Control commands on jobs no worker runs: refusals exit 1 and say why; harmless repeats exit 0.
    @Test("control refusals and repeats")
    func controlRefusalsAndRepeats() throws {
        let workspace = try CLIWorkspace("cli-control")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: upload-data, data: a, destination: gs://bkt/a.txt}
        - {kind: upload-data, data: b, destination: gs://bkt/b.txt}
        """)
        let ids = try workspace.jobctl(["submit", manifest]).stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 2)
        func run(_ command: String, _ id: String) throws -> ProcessOutput { try workspace.jobctl([command, id]) }

        // resume and retry act only on a job they can change.
        let resumeQueued = try run("resume", ids[0])
        #expect(resumeQueued.status == 1)
        #expect(resumeQueued.stderr.contains("is queued, not paused; nothing to resume"), "\(resumeQueued.stderr)")
        #expect(try run("retry", ids[0]).status == 1)
        // pause and cancel are idempotent: a repeat exits 0 and says nothing changed.
        #expect(try run("pause", ids[0]).status == 0)
        let pauseAgain = try run("pause", ids[0])
        #expect(pauseAgain.status == 0)
        #expect(pauseAgain.stdout.contains("paused (already so; nothing changed)"), "\(pauseAgain.stdout)")
        #expect(try run("resume", ids[0]).stdout.contains("queued"))
        #expect(try run("resume", ids[0]).status == 1)
        #expect(try run("cancel", ids[1]).status == 0)
        let cancelAgain = try run("cancel", ids[1])
        #expect(cancelAgain.status == 0)
        #expect(cancelAgain.stdout.contains("cancelled (already so; nothing changed)"))
        for command in ["pause", "resume"] {
            let refused = try run(command, ids[1])
            #expect(refused.status == 1, "\(command) on a cancelled job")
            #expect(refused.stderr.hasPrefix("Error: \(ids[1])"))
        }
        // Several ids: one refusal makes the exit status 1, the others are still done.
        let mixed = try workspace.jobctl(["pause", ids[0], ids[1]])
        #expect(mixed.status == 1)
        #expect(mixed.stdout.contains("\(ids[0])  paused"))
        // Every change is in the log, and nothing else.
        let history = try #require(try workspace.json(["history", ids[0], "--json"]) as? [[String: Any]])
        #expect(history.compactMap { $0["type"] as? String } == ["submitted", "paused", "resume_requested", "paused"])
    }

    // MARK: - Read-only media

    /// Runs `jobctl ARGS` with `directory` made read-only for the child alone: a private mount namespace
    /// (`unshare`) in which the directory is bind-mounted onto itself and remounted read-only. Needs
    /// root (the suite runs as root in CI); nil when the mount cannot be made here.
    static func jobctlOnReadOnlyMedia(_ directory: String, _ arguments: [String]) throws -> ProcessOutput? {
        let script = #"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99; shift; exec "$@""#
        let output = try runProcess("/usr/bin/unshare", ["--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh",
                                                        directory, PackagePaths.jobctlBinary] + arguments,
                                    environment: ["NO_COLOR": "1"])
        return output.status == 99 ? nil : output
    }

    static var canMountReadOnly: Bool {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"),
              let probe = try? TemporaryDirectory("ro-probe") else { return false }
        defer { probe.remove() }
        guard let output = try? runProcess("/usr/bin/unshare", ["--mount", "--propagation", "private", "/bin/sh", "-c",
                                                                #"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && ! touch "$1/x" 2>/dev/null"#,
                                                                "sh", probe.path]) else { return false }
        return output.status == 0
    }

    @Test("on a read-only filesystem, list/show/history/audit/replay --verify read the log; writes say read-only",
          .enabled(if: canMountReadOnly, "needs root and mount namespaces to make a read-only filesystem"))
    func readOnlyMedia() throws {
        let workspace = try CLIWorkspace("cli-ro")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: upload-data, data: "hello", destination: "file://ro/a.txt", key: a, priority: 1}
        - {kind: download-memory, source: "file://ro/a.txt"}
        """)
        let ids = try workspace.jobctl(["submit", manifest]).stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 2)
        let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "1"])
        #expect(worker.status == 0, "\(worker.stderr)")
        // A writer that closes last checkpoints and removes the -wal and -shm files (the worker exits
        // without closing; `migrate` opens and closes). A reader on read-only media then cannot create
        // the -shm a WAL reader needs, which is what this test is about.
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let files = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path)
        #expect(!files.contains { $0.hasSuffix("-shm") || $0.hasSuffix("-wal") }, "\(files)")
        let before = try Data(contentsOf: URL(fileURLWithPath: workspace.database))
        let database = workspace.database

        func readOnly(_ arguments: [String]) throws -> ProcessOutput {
            try #require(try Self.jobctlOnReadOnlyMedia(workspace.directory.path, ["--db", database] + arguments))
        }
        let list = try readOnly(["list", "--json"])
        #expect(list.status == 0, "\(list.stderr)")
        let jobs = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
        #expect(jobs.count == 2 && jobs.allSatisfy { $0["state"] as? String == "succeeded" })
        let show = try readOnly(["show", ids[0]])
        #expect(show.status == 0, "\(show.stderr)")
        #expect(show.stdout.contains("succeeded"))
        let history = try readOnly(["history", ids[1]])
        #expect(history.status == 0 && history.stdout.contains("succeeded"), "\(history.stderr)")
        let audit = try readOnly(["audit", "--csv"])
        #expect(audit.status == 0, "\(audit.stderr)")
        #expect(audit.stdout.split(separator: "\n").count == 3)
        let verify = try readOnly(["replay", "--verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        let result = try readOnly(["result", ids[1]])
        #expect(result.status == 0 && result.stdout == "hello", "\(result.stderr)")

        // Writes are refused, saying why, and touch nothing.
        let otherManifest = try workspace.write("more.yaml", "- {kind: upload-data, data: x, destination: gs://bkt/x.txt}\n")
        for arguments in [["submit", otherManifest], ["worker", "--drain"], ["cancel", ids[0]], ["replay"], ["migrate"]] {
            let refused = try readOnly(arguments)
            #expect(refused.status == 1, "\(arguments): \(refused.stdout)\(refused.stderr)")
            #expect(refused.stderr.contains("read-only"), "\(arguments): \(refused.stderr)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: workspace.database)) == before)
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    @Test("on read-only media a database whose writer died is read through its -wal, or refused clearly without one",
          .enabled(if: canMountReadOnly, "needs root and mount namespaces to make a read-only filesystem"))
    func readOnlyMediaWithAWriteAheadLog() throws {
        let workspace = try CLIWorkspace("cli-ro-wal")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: x, destination: \"file://ro/x.txt\"}\n")
        let id = try workspace.jobctl(["submit", manifest]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // A worker killed with SIGKILL leaves the -wal and -shm behind, its transactions in the -wal.
        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        worker.arguments = ["--db", workspace.database, "worker"]
        worker.standardOutput = FileHandle.nullDevice
        worker.standardError = FileHandle.nullDevice
        try worker.run()
        let done = try eventuallyTrue(seconds: 20) {
            try workspace.jobctl(["show", id]).stdout.contains("succeeded")
        }
        worker.signalTree(SIGKILL)
        worker.waitForExit()
        try #require(done)
        let wal = workspace.database + "-wal"
        let walSize = try #require(try FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int)
        try #require(walSize > 0 && FileManager.default.fileExists(atPath: workspace.database + "-shm"))

        // With its -shm there, SQLite reads the -wal read-only: the same jobs as a writable reader sees.
        let expected = try workspace.jobctl(["list", "--json"])
        let read = try #require(try Self.jobctlOnReadOnlyMedia(workspace.directory.path,
                                                              ["--db", workspace.database, "list", "--json"]))
        #expect(read.status == 0, "\(read.stderr)")
        #expect(read.stdout == expected.stdout)
        #expect(read.stdout.contains("succeeded"))
        // Without the -shm (copied without it), the -wal cannot be read there, and the main file alone
        // may be stale: refused, saying what to do, rather than showing old states.
        try FileManager.default.removeItem(atPath: workspace.database + "-shm")
        let refused = try #require(try Self.jobctlOnReadOnlyMedia(workspace.directory.path,
                                                                 ["--db", workspace.database, "list", "--json"]))
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("-wal") && refused.stderr.contains("read-only"), "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
        #expect(try workspace.jobctl(["list", "--json"]).stdout == expected.stdout)
    }

    /// Another program switched the file to a rollback journal and died mid-transaction, leaving a hot
    /// `-journal`: SQLite refuses a read-only open until a writable one rolls it back, and the readers took
    /// that for "the -shm cannot be created" and read the file as immutable — the dead transaction's
    /// uncommitted pages with it (`stats` and `list` showed its rows, exit 0, or called the file damaged).
    /// Refused now, saying what rolls it back; a writing command does, and the readers see the log as it was.
    @Test("a hot rollback journal is never read past by the readers: refused, saying a writing command rolls it back")
    func hotRollbackJournal() throws {
        let workspace = try CLIWorkspace("cli-hot-journal")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: upload-data, data: a, destination: file://b/a}
        - {kind: upload-data, data: b, destination: file://b/b}
        """)
        try #require(ids.count == 2)
        let before = try workspace.jobctl(["list", "--json"])
        try #require(before.status == 0, "\(before.stderr)")
        let died = try runProcess("/usr/bin/python3", ["-c", """
            import os, signal, sqlite3, sys
            c = sqlite3.connect(sys.argv[1], isolation_level=None)
            c.execute("PRAGMA journal_mode = DELETE")
            c.execute("PRAGMA cache_size = 1")
            c.execute("BEGIN IMMEDIATE")
            c.execute("UPDATE jobs SET queue = queue || '-UNCOMMITTED'")
            for i in range(50): c.execute("UPDATE jobs SET updated_at_ms = updated_at_ms + 1")
            c.execute("CREATE INDEX uncommitted ON jobs (queue, updated_at_ms)")
            os.kill(os.getpid(), signal.SIGKILL)
            """, workspace.database])
        #expect(died.status != 0)
        let journal = workspace.database + "-journal"
        let journalSize = try FileManager.default.attributesOfItem(atPath: journal)[.size] as? Int ?? 0
        try #require(journalSize > 0, "no hot journal was left")
        for arguments in [["list"], ["list", "--json"], ["stats"], ["show", ids[0]]] {
            let read = try workspace.jobctl(arguments)
            #expect(read.status == 1, "\(arguments): \(read.stdout)\(read.stderr)")
            #expect(read.stderr.contains("hot rollback journal") && read.stderr.contains("`jobctl migrate`"), "\(arguments): \(read.stderr)")
            #expect(!read.stdout.contains("UNCOMMITTED"), "\(arguments): \(read.stdout)")
        }
        // A writable open rolls the journal back; the log is as it was before the other program.
        let migrate = try workspace.jobctl(["migrate"])
        #expect(migrate.status == 0, "\(migrate.stderr)")
        #expect(try workspace.jobctl(["list", "--json"]).stdout == before.stdout)
    }
}

/// Polls `condition` every 20 ms until it holds or `seconds` pass.
func eventuallyTrue(seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(20_000)
    }
    return try condition()
}

/// A database file that is damaged, or is no database at all: every command says so and what to do,
/// and a worker stops at once instead of retrying for ever (a drain that never ends).
@Suite("a damaged database", .onTestThreads) struct DamagedDatabaseTests {
    /// Rows edited by hand with numbers no run leaves: `attempts = 2⁶³ − 1` trapped every worker start
    /// (an overflow in the claim, SIGILL), with the healthy job behind it never run; `created_at_ms` and
    /// `lease_expires_at_ms = −2⁶³` trapped `list` and `stats`. The job is set aside (paused, saying why),
    /// the others run, and the readers show what the rows hold.
    /// A finished job whose event no longer decodes was archived with the rest: the file said intact,
    /// `audit --from` then refused it whole, and the damage's only sign left the log. Refused now.
    @Test("archive refuses jobs whose events do not decode, naming the event, and leaves the log as it was")
    func archiveRefusesDamagedEvents() throws {
        let workspace = try CLIWorkspace("db-archive-damaged")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: upload-data, data: a, destination: file://b/a}
        - {kind: upload-data, data: b, destination: file://b/b}
        """)
        try #require(ids.count == 2)
        #expect(try workspace.jobctl(["worker", "--drain"]).status == 0)
        let edit = try runProcess("\(PackagePaths.venv)/bin/python", ["-c", """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("DROP TRIGGER events_refuse_update")
            db.execute("UPDATE events SET data = '{\\"spec\\":' WHERE job_id = ? AND version = 1", (sys.argv[2],))
            db.commit()
            """, workspace.database, ids[1]])
        #expect(edit.status == 0, "\(edit.stderr)")
        let archived = try workspace.jobctl(["archive", "--before", "0s", "--to", workspace.directory.file("a.gz")])
        #expect(archived.status == 1, "\(archived.stdout)\(archived.stderr)")
        #expect(archived.stderr.contains("job \(ids[1])'s event") && archived.stderr.contains("nothing was archived"), "\(archived.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("a.gz")))
        let events = try runProcess("\(PackagePaths.venv)/bin/python", ["-c", """
            import sqlite3, sys
            print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM events WHERE job_id IN (?, ?)", (sys.argv[2], sys.argv[3])).fetchone()[0])
            """, workspace.database, ids[0], ids[1]])
        #expect(Int(events.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 >= 8, "\(events.stdout)\(events.stderr)")
    }

    /// An event deleted from the middle of a finished job's history: `archive --dry-run` said "would
    /// archive 3 jobs" (exit 0) and the real archive then refused the file it had written ("goes to version
    /// 4 where 3 was expected"). Both refuse now, alike, before anything is written.
    @Test("archive --dry-run refuses a job whose history has a gap, as the real archive does", arguments: StoreEngine.allCases)
    func archiveDryRunRefusesWhatTheRunRefuses(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("db-archive-gap", engine: engine)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: upload-data, data: a, destination: file://b/a}
        - {kind: upload-data, data: b, destination: file://b/b}
        - {kind: upload-data, data: c, destination: file://b/c}
        """)
        try #require(ids.count == 3)
        #expect(try workspace.jobctl(["worker", "--drain"]).status == 0)
        switch engine {
        case .sqlite: try Self.edit(workspace, engine, "DROP TRIGGER events_refuse_delete")
        case .postgres: try Self.edit(workspace, engine, "ALTER TABLE events DISABLE TRIGGER USER")
        }
        try Self.edit(workspace, engine, "DELETE FROM events WHERE job_id = '\(ids[1])' AND version = 3")
        let gap = "job \(ids[1]) goes to version 4 where 3 was expected"
        let dry = try workspace.jobctl(["archive", "--before", "0s", "--dry-run"])
        print("archive --dry-run:", dry.status, dry.stdout, dry.stderr)
        #expect(dry.status == 1 && dry.stderr.contains(gap) && dry.stderr.contains("nothing was archived"), "\(dry.stdout)\(dry.stderr)")
        let target = workspace.directory.file("a.gz")
        let real = try workspace.jobctl(["archive", "--before", "0s", "--to", target])
        print("archive:", real.status, real.stdout, real.stderr)
        #expect(real.status == 1 && real.stderr.contains(gap) && real.stderr.contains("replay --verify"), "\(real.stdout)\(real.stderr)")
        #expect(!FileManager.default.fileExists(atPath: target))
        #expect(try workspace.jobctl(["show", ids[0]]).status == 0)
    }

    @Test("a row with numbers out of range traps no command: the worker sets its job aside and runs the others")
    func outOfRangeNumbersTrapNothing() throws {
        let workspace = try CLIWorkspace("db-out-of-range")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: upload-data, data: a, destination: file://b/a, priority: 9}
        - {kind: upload-data, data: b, destination: file://b/b}
        - {kind: upload-data, data: c, destination: file://b/c, queue: later}
        """)
        try #require(ids.count == 3)
        let edit = try runProcess("\(PackagePaths.venv)/bin/python", ["-c", """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("UPDATE jobs SET attempts = 9223372036854775807 WHERE id = ?", (sys.argv[2],))
            db.execute("UPDATE jobs SET created_at_ms = -9223372036854775808 WHERE id = ?", (sys.argv[3],))
            db.commit()
            """, workspace.database, ids[0], ids[2]])
        #expect(edit.status == 0, "\(edit.stderr)")
        let worker = try workspace.jobctl(["worker", "--drain", "--queue", "default"])
        #expect(worker.status == 0, "\(worker.stderr)")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        let state = { (id: String) in jobs.first { $0["id"] as? String == id }?["state"] as? String }
        #expect(state(ids[0]) == "paused" && state(ids[1]) == "succeeded" && state(ids[2]) == "queued", "\(jobs)")
        let history = try workspace.jobctl(["history", ids[0]])
        #expect(history.stdout.contains("paused") && history.stdout.contains("out of range"), "\(history.stdout)")
        for arguments in [["list"], ["stats"], ["stats", "--json"], ["history", ids[0]]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 0, "\(arguments): \(output.stderr)")
        }
    }

    /// Found by fuzzing the inspection commands over a log holding the input's values: each of these
    /// ended its command with a trap (SIGILL, exit 132), and the sliced resume point ended the worker
    /// that claimed the job too (again at every start: the job stayed claimable).
    @Test("values no worker writes trap no command: bytes past the total, the top attempt count, a size past any rate, slices past Int64")
    func extremeValuesTrapNothing() throws {
        let workspace = try CLIWorkspace("db-extreme-values")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: upload-data, data: a, destination: file://b/a}
        - {kind: upload-data, data: b, destination: gs://bucket/b}
        - {kind: upload-data, data: c, destination: gs://bucket/c}
        - {kind: download-file, source: gs://bucket/object, destination: out.bin, max_attempts: 1, queue: sliced}
        """)
        try #require(ids.count == 4)
        let sliced = #"{"slicedDownload":{"file":{"device":1,"inode":2},"generation":"1","slices":[{"confirmed":9223372036854775807,"length":1,"start":0},{"confirmed":1,"length":1,"start":1}],"tempPath":"/nonexistent/x"}}"#
        let edit = try runProcess("\(PackagePaths.venv)/bin/python", ["-c", """
            import sqlite3, sys, time
            db = sqlite3.connect(sys.argv[1])
            a, b, c, d = sys.argv[2:6]
            db.execute("UPDATE jobs SET state = 'running', bytes_done = 9223372036854775807, bytes_total = 1 WHERE id = ?", (a,))
            db.execute("UPDATE jobs SET attempts = 9223372036854775807, run_after_ms = 9999999999999, "
                       "error = '{\\"code\\":-13000,\\"message\\":\\"x\\",\\"retryable\\":true}' WHERE id = ?", (b,))
            db.execute("INSERT INTO events (job_id, version, type, at_ms, actor, lease, data) VALUES (?, 2, 'succeeded', ?, 'x', 1, "
                       "'{\\"attempt\\":1,\\"result\\":{\\"size\\":10000000000000000},\\"v\\":1}')", (c, int(time.time() * 1000)))
            db.execute("UPDATE jobs SET resume_point = ? WHERE id = ?", (sys.argv[6], d))
            db.commit()
            """, workspace.database] + ids + [sliced])
        #expect(edit.status == 0, "\(edit.stderr)")
        for arguments in [["list"], ["list", "--json"], ["show", ids[0]], ["show", ids[1]], ["show", "--json", ids[1]], ["show", ids[3]],
                          ["stats"], ["stats", "--json"], ["history", ids[2]], ["audit"]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 0, "\(arguments): exit \(output.status) \(output.stderr.prefix(600))")
        }
        let list = try workspace.jobctl(["list"])
        #expect(list.stdout.split(separator: "\n").contains { $0.contains(ids[0]) && $0.contains("100%") }, "\(list.stdout)")
        #expect(try workspace.jobctl(["show", ids[1]]).stdout.contains("attempt 9223372036854775807 of"))
        let stats = try #require(try workspace.json(["stats", "--json"]) as? [String: Any])
        let hour = try #require(stats["last_hour"] as? [String: Any], "\(stats)")
        #expect(hour["bytes"] as? Int == 10_000_000_000_000_000, "\(hour)")
        #expect(hour["bytes_per_second"] as? Int == 2_777_777_777_777, "\(hour)")
        // The worker: the resume point's slices are not the plan's, so the download starts over (and
        // fails here, its server gone), where summing them ended the worker.
        let worker = try workspace.jobctl(["worker", "--drain", "--queue", "sliced"], environment: ["STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"])
        #expect(worker.status == 2, "exit \(worker.status): \(worker.stderr.prefix(2_000))")
        #expect(try workspace.jobctl(["show", "--json", ids[3]]).stdout.contains("\"failed\""))
    }

    /// A row at the largest version trapped the worker that claimed it (its next event's version), at
    /// every start, and `cancel` of it too. Workers pass over it now, controls refuse it saying why, and
    /// `replay` rebuilds it from the log, after which it runs.
    @Test("a row at the largest version traps nothing: left by workers, refused by controls, rebuilt by replay")
    func largestVersionTrapsNothing() throws {
        let workspace = try CLIWorkspace("db-largest-version")
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let ids = try workspace.submit("""
        - {kind: upload-data, data: a, destination: file://b/a, priority: 9}
        - {kind: upload-data, data: b, destination: file://b/b}
        """)
        try #require(ids.count == 2)
        let edit = try runProcess("\(PackagePaths.venv)/bin/python", ["-c", """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("UPDATE jobs SET version = 9223372036854775807 WHERE id = ?", (sys.argv[2],))
            db.commit()
            """, workspace.database, ids[0]])
        #expect(edit.status == 0, "\(edit.stderr)")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "exit \(worker.status): \(worker.stderr.prefix(2_000))")
        let cancel = try workspace.jobctl(["cancel", ids[0]])
        #expect(cancel.status == 1, "exit \(cancel.status): \(cancel.stderr)")
        #expect(cancel.stderr.contains("is at its largest"), "\(cancel.stderr)")
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 1, "exit \(verify.status): \(verify.stdout)\(verify.stderr)")
        #expect(try workspace.jobctl(["replay"]).status == 0)
        let again = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(again.status == 0, "exit \(again.status): \(again.stderr.prefix(2_000))")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(jobs.count == 2 && jobs.allSatisfy { $0["state"] as? String == "succeeded" }, "\(jobs)")
    }

    /// Submits three upload-data jobs to `file://b`: `first` (claimed first, priority 9), then `b`
    /// (priority 5), then `a`; returns their ids in manifest order.
    private static func threeUploads(_ workspace: CLIWorkspace, first: String, environment: [String: String]) throws -> [String] {
        let manifest = try workspace.write("m.yaml", """
            jobs:
              - {kind: upload-data, data: \(first), destination: file://b/\(first).txt, priority: 9}
              - {kind: upload-data, data: a, destination: file://b/a.txt}
              - {kind: upload-data, data: b, destination: file://b/b.txt, priority: 5}
            """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 3)
        return ids
    }

    /// A job a newer jobctl submitted, of a kind this one does not know, was first in claim order: every
    /// claim of an older worker read its row, failed to decode it and logged `store_error` every 5 s,
    /// claiming nothing at all (a rolling upgrade stalled every older worker). Claims, rescues and the
    /// drain's look for due work pass over such jobs now, left for a newer worker; reading one says so.
    @Test("a job of a kind this jobctl does not know is left for a newer worker, and the others run", arguments: StoreEngine.allCases)
    func unknownKindIsLeftAlone(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("unknown-kind", engine: engine)
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        let environment = ["JOBCTL_BUCKETS": buckets]
        let ids = try Self.threeUploads(workspace, first: "newer", environment: environment)
        try Self.edit(workspace, engine, "UPDATE jobs SET kind = 'transcode-video' WHERE id = '\(ids[0])'")
        let worker = try workspace.jobctl(["worker", "--drain", "--log-format", "json"], environment: environment)
        #expect(worker.status == 0, "exit \(worker.status): \(worker.stderr.prefix(2_000))")
        #expect(!worker.stderr.contains("store_error"), "\(worker.stderr.prefix(2_000))")
        #expect(FileManager.default.fileExists(atPath: buckets + "/b/a.txt") && FileManager.default.fileExists(atPath: buckets + "/b/b.txt"))
        #expect(!FileManager.default.fileExists(atPath: buckets + "/b/newer.txt"))
        let counts = try workspace.jobctl(["stats", "--json"])
        #expect(counts.status == 0, "\(counts.stderr)")
        let shown = try workspace.jobctl(["show", ids[0]])
        #expect(shown.status != 0)
        #expect(shown.stderr.contains("kind 'transcode-video', which this jobctl does not know"), "\(shown.stderr)")
        #expect(try workspace.jobctl(["show", ids[1]]).stdout.contains("succeeded"))
    }

    /// Takes the log back to what an older jobctl made of it up to `version` − 1: the ledger's rows from
    /// `version` on go, and on SQLite what migration 19 added (its flag column, triggers and indexes),
    /// which it cannot add twice when the upgrade applies it again.
    static func rewindLedger(_ workspace: CLIWorkspace, _ engine: StoreEngine, toBefore version: Int) throws {
        try edit(workspace, engine, "DELETE FROM schema_migrations WHERE version >= \(version)")
        if engine == .sqlite && version <= 19 { try edit(workspace, engine, OlderSQLiteSchema.beforeWaitFlag) }
    }

    /// Runs `sql` (one statement or several) on the workspace's database, behind jobctl's back (a newer
    /// jobctl's rows, say).
    static func edit(_ workspace: CLIWorkspace, _ engine: StoreEngine, _ sql: String) throws {
        switch engine {
        case .sqlite:
            let edit = try runProcess("\(PackagePaths.venv)/bin/python", ["-c", """
                import sqlite3, sys
                db = sqlite3.connect(sys.argv[1]); db.executescript(sys.argv[2]); db.commit()
                """, workspace.database, sql])
            #expect(edit.status == 0, "\(edit.stderr)")
        case .postgres:
            let schema = try #require(workspace.database.components(separatedBy: "search_path%3D").last)
            try PostgresServer.shared().psql(database: "postgres", "SET search_path TO \(schema); \(sql)")
        }
    }

    /// During a rolling upgrade a newer jobctl's job, of a kind this one does not know, made `list`,
    /// `audit` and a bulk control by filter fail whole ("stored data could not be read … `jobctl replay
    /// --verify` checks the log", as if the log were damaged), and `stats` too while a newer worker ran
    /// such a job. They read the other jobs now and say on standard error what they left out; reading
    /// the job itself says a newer jobctl submitted it, without calling the log damaged.
    @Test("list, audit, stats and bulk controls read the others past a job of a newer kind, and say so", arguments: StoreEngine.allCases)
    func unknownKindIsPassedOver(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("unknown-kind-read", engine: engine)
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("m.yaml", """
            jobs:
              - {kind: upload-data, data: newer, destination: file://b/newer.txt}
              - {kind: upload-data, data: a, destination: file://b/a.txt}
              - {kind: upload-data, data: running, destination: file://b/running.txt}
              - {kind: upload-data, data: b, destination: file://b/b.txt}
            """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 4)
        try Self.edit(workspace, engine, "UPDATE jobs SET kind = 'transcode-video' WHERE id = '\(ids[0])'")
        try Self.edit(workspace, engine, "UPDATE jobs SET kind = 'sync-folder', state = 'running', lease_owner = 'worker:newer:1' "
                                         + "WHERE id = '\(ids[2])'")
        let known = [ids[1], ids[3]]

        let listed = try workspace.jobctl(["list"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(known.allSatisfy(listed.stdout.contains) && !listed.stdout.contains(ids[0]) && !listed.stdout.contains(ids[2]), "\(listed.stdout)")
        #expect(listed.stderr.contains("2 jobs of kinds 'sync-folder', 'transcode-video', which this jobctl does not know, were not listed: "
                                       + "a newer jobctl submitted them"), "\(listed.stderr)")
        let json = try workspace.jobctl(["list", "--json", "--kind", "upload-data,download-file"])
        #expect(json.status == 0 && json.stderr.isEmpty, "\(json.stderr)")   // a --kind filter never reads them
        let records = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]]
        #expect(Set(records?.compactMap { $0["id"] as? String } ?? []) == Set(known), "\(json.stdout)")

        for format in ["--csv", "--json", "--no-color"] {
            let audit = try workspace.jobctl(["audit", format])
            #expect(audit.status == 0, "\(audit.stderr)")
            #expect(known.allSatisfy(audit.stdout.contains) && !audit.stdout.contains(ids[0]), "\(format): \(audit.stdout)")
            #expect(audit.stderr.contains("which this jobctl does not know, were left out of this audit"), "\(format): \(audit.stderr)")
        }

        let stats = try workspace.jobctl(["stats"])
        #expect(stats.status == 0, "\(stats.stderr)")
        #expect(stats.stdout.contains("\(ids[2])  sync-folder"), "\(stats.stdout)")

        let cancelled = try workspace.jobctl(["cancel", "--state", "queued"])
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        #expect(cancelled.stderr.contains("1 job of kind 'transcode-video', which this jobctl does not know, was left alone"), "\(cancelled.stderr)")
        #expect(cancelled.stdout.contains("2 of 2 jobs"), "\(cancelled.stdout)")
        let after = try workspace.jobctl(["list", "--state", "queued"])
        #expect(after.stdout.contains("no jobs"), "\(after.stdout)")
        #expect(after.stderr.contains("1 job of kind 'transcode-video'"), "\(after.stderr)")   // still queued, untouched

        for command in [["show", ids[0]], ["history", ids[2]], ["cancel", ids[0]]] {
            let read = try workspace.jobctl(command)
            #expect(read.status == 1, "\(command): \(read.stdout)")
            #expect(read.stderr.contains("which this jobctl does not know: a newer jobctl submitted it"), "\(command): \(read.stderr)")
            #expect(!read.stderr.contains("replay --verify"), "\(command): \(read.stderr)")
        }
    }

    /// A job waiting (`after:`) for a job a newer jobctl wrote — of a kind, or with an event of a type,
    /// this one does not know — made `list` and `show` of the waiting job fail whole ("job … is of kind
    /// 'new-kind' … upgrade this one", exit 1): each read its dependencies whole. They read the
    /// dependency's stored state now, and name it as a newer jobctl's job that is waited for. (A job
    /// with a newer event is read as stored, as `stats` counts it: waited for, and no failure.)
    @Test("list and show name a dependency a newer jobctl wrote as waited for, and do not fail", arguments: StoreEngine.allCases)
    func dependencyOfANewerKindIsShownAsWaitedFor(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("unknown-kind-dependency", engine: engine)
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("m.yaml", """
            jobs:
              - {kind: upload-data, data: q, destination: file://b/q.txt, key: q}
              - {kind: upload-data, data: dq, destination: file://b/dq.txt, key: dq, after: [q]}
              - {kind: upload-data, data: r, destination: file://b/r.txt, key: r}
              - {kind: upload-data, data: dr, destination: file://b/dr.txt, key: dr, after: [r]}
            """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 4)
        try Self.edit(workspace, engine, "UPDATE jobs SET kind = 'new-kind' WHERE id = '\(ids[0])'")
        try Self.appendNewerEvent(workspace, engine, jobID: ids[2])

        let listed = try workspace.jobctl(["list"], environment: ["COLUMNS": "400"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let rows = listed.stdout.split(separator: "\n")
        let waiting = try #require(rows.first { $0.hasPrefix(ids[1]) }, "\(listed.stdout)")
        #expect(waiting.contains("waiting for \(ids[0].prefix(10))… (a newer jobctl's)"), "\(listed.stdout)")
        let waitingForEvent = try #require(rows.first { $0.hasPrefix(ids[3]) }, "\(listed.stdout)")
        #expect(waitingForEvent.contains("waiting for \(ids[2].prefix(10))…"), "\(listed.stdout)")
        #expect(listed.stderr.contains("1 job of kind 'new-kind', which this jobctl does not know, was not listed"), "\(listed.stderr)")

        let shown = try workspace.jobctl(["show", "dq"])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stdout.contains("waiting for \(ids[0]) (a job of kind 'new-kind', which only a newer jobctl runs)"), "\(shown.stdout)")
        let shownForEvent = try workspace.jobctl(["show", "dr"])
        #expect(shownForEvent.status == 0, "\(shownForEvent.stderr)")
        #expect(shownForEvent.stdout.contains("waiting for \(ids[2])"), "\(shownForEvent.stdout)")
        let json = try #require(try workspace.json(["show", "dq", "--json"]) as? [String: Any])
        #expect(json["waiting_for"] as? [String] == [ids[0]], "\(json)")
    }

    /// Appends, behind jobctl's back, what a newer jobctl would to job `id`: an event of a type this one
    /// does not know (`hold_requested`, as a newer "hold this job" might be), its version the job's next,
    /// with the job's row at that version.
    static func appendNewerEvent(_ workspace: CLIWorkspace, _ engine: StoreEngine, jobID id: String) throws {
        try edit(workspace, engine, """
            INSERT INTO events (job_id, version, type, at_ms, actor, data)
                SELECT id, version + 1, 'hold_requested', updated_at_ms + 1, 'cli:newer', '{"reason":"maintenance","v":1}'
                FROM jobs WHERE id = '\(id)'
            """)
        try edit(workspace, engine, "UPDATE jobs SET version = version + 1, updated_at_ms = updated_at_ms + 1 WHERE id = '\(id)'")
    }

    /// During a rolling upgrade a newer jobctl appended an event of a type this one does not know (a
    /// "hold this job", say) to a queued job: an older worker claimed and ran the job as if the event were
    /// not there. Claims and rescues pass over such a job now, leaving it for a newer worker, and the
    /// worker says once that it left it alone.
    @Test("a worker leaves a job with an event of a type it does not know alone, runs the others, and says so", arguments: StoreEngine.allCases)
    func unknownEventTypeIsNotRun(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("unknown-event-run", engine: engine)
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        let environment = ["JOBCTL_BUCKETS": buckets]
        let ids = try Self.threeUploads(workspace, first: "held", environment: environment)
        try Self.appendNewerEvent(workspace, engine, jobID: ids[0])

        let worker = try workspace.jobctl(["worker", "--drain", "--log-format", "json"], environment: environment)
        #expect(worker.status == 0, "exit \(worker.status): \(worker.stderr.prefix(2_000))")
        #expect(!worker.stderr.contains("store_error"), "\(worker.stderr.prefix(2_000))")
        #expect(!worker.stderr.split(separator: "\n").contains { $0.contains(ids[0]) && $0.contains("\"claimed\"") }, "\(worker.stderr.prefix(2_000))")
        #expect(FileManager.default.fileExists(atPath: buckets + "/b/a.txt") && FileManager.default.fileExists(atPath: buckets + "/b/b.txt"))
        #expect(!FileManager.default.fileExists(atPath: buckets + "/b/held.txt"))
        let notes = worker.stderr.split(separator: "\n").filter { $0.contains("\"newer_events\"") }
        #expect(notes.count == 1, "\(worker.stderr.prefix(2_000))")
        #expect(notes.first?.contains("'hold_requested'") == true && notes.first?.contains("upgrade this worker") == true, "\(notes)")
        #expect(try workspace.jobctl(["show", ids[1]]).stdout.contains("succeeded"))
    }

    /// `submit --wait` on a job that then got a newer jobctl's event waited without a word: no worker as
    /// old as it runs the job. It says so once, and goes on waiting (a newer worker may end the job).
    @Test("submit --wait says once that a job it waits for holds a newer jobctl's event")
    func waitSaysWhyANewerJobDoesNotRun() async throws {
        let workspace = try CLIWorkspace("unknown-event-wait")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("m.yaml", "- {kind: upload-data, data: held, destination: file://b/held.txt}\n")
        let errors = workspace.directory.file("wait.err")
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        let waiting = Process()
        waiting.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        waiting.arguments = ["--db", workspace.database, "submit", "--wait", manifest]
        waiting.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": workspace.directory.path]
        waiting.currentDirectoryURL = URL(fileURLWithPath: workspace.directory.path)
        let output = workspace.directory.file("wait.out")
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        waiting.standardOutput = FileHandle(forWritingAtPath: output)
        waiting.standardError = FileHandle(forWritingAtPath: errors)
        try waiting.run()
        defer { if waiting.isRunning { waiting.signalTree(SIGKILL); waiting.waitForExit() } }
        func read(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        let deadline = Date().addingTimeInterval(60)
        while read(output).isEmpty, waiting.isRunning, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let id = read(output).trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(!id.isEmpty && waiting.isRunning, "\(read(errors))")
        try Self.appendNewerEvent(workspace, .sqlite, jobID: id)
        let noted = "note: job \(id) has an event of type 'hold_requested', which this jobctl does not know"
        while !read(errors).contains(noted), waiting.isRunning, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(read(errors).contains(noted) && waiting.isRunning, "\(read(errors))")
        try await Task.sleep(for: .milliseconds(600))   // three more reads: said once
        #expect(read(errors).components(separatedBy: noted).count == 2, "\(read(errors))")
    }

    /// A newer jobctl's event appended while an older worker ran the job went unseen: the run went on to
    /// its outcome. The worker's look for control requests on its runs finds it now, and the run stops
    /// without an outcome, as on a lost lease, leaving the job to a newer worker.
    @Test("a run whose job gets an event of a type the worker does not know stops without an outcome", arguments: StoreEngine.allCases)
    func unknownEventTypeStopsTheRun(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("unknown-event-stop", engine: engine)
        defer { workspace.directory.remove() }
        try workspace.write("buckets/src/big.bin", String(repeating: "x", count: 3 << 20))
        // About 12 s at its rate: still running when the event comes.
        let manifest = try workspace.write("m.yaml", "- {kind: download-file, source: file://src/big.bin, destination: out/big.bin, max_rate: 256K}\n")
        let submitted = try workspace.jobctl(["submit", manifest])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let id = submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let worker = try LoggedWorker(workspace, ["--log-format", "json"])
        defer { worker.kill() }
        let deadline = Date().addingTimeInterval(20)
        while !worker.log().contains("{\"event\":\"started\""), Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        try #require(worker.log().contains("{\"event\":\"started\""), "\(worker.log())")
        try Self.appendNewerEvent(workspace, engine, jobID: id)
        while !worker.log().contains("{\"event\":\"abandoned\""), Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        worker.stop()
        let log = worker.log()
        let stopped = log.split(separator: "\n").filter { $0.contains("\"newer_events\"") && $0.contains(id) && $0.contains("stopped without an outcome") }
        #expect(stopped.count == 1, "\(log)")
        #expect(log.contains("{\"event\":\"abandoned\"") && !log.contains("{\"event\":\"succeeded\""), "\(log)")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("out/big.bin")))
    }

    /// The same newer event made `history` and `replay --verify` call the log damaged ("stored data
    /// could not be read … `jobctl replay --verify` checks the log"; "problem: event 4 has unknown type",
    /// exit 1), while `list`, `show`, `audit` and `stats` showed the job as if the event were not there,
    /// and `pause`, `cancel --state queued` and `retry` changed it. Listings and bulk controls pass over
    /// it now and say so on standard error (`stats` counts it, and says so); reading or changing the job
    /// itself says a newer jobctl wrote an event this one does not know (exit 1); `replay --verify` says
    /// which job it could not check.
    @Test("list, audit, stats, show, history, controls and replay --verify say a job has a newer jobctl's event, and leave it alone", arguments: StoreEngine.allCases)
    func unknownEventTypeIsPassedOver(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("unknown-event-read", engine: engine)
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("m.yaml", """
            jobs:
              - {kind: upload-data, data: held, destination: file://b/held.txt}
              - {kind: upload-data, data: a, destination: file://b/a.txt}
              - {kind: upload-data, data: b, destination: file://b/b.txt}
              - {kind: upload-data, data: c, destination: file://b/c.txt}
            """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 4)
        try #require(try workspace.jobctl(["cancel", ids[3]]).status == 0)
        try Self.appendNewerEvent(workspace, engine, jobID: ids[0])
        try Self.appendNewerEvent(workspace, engine, jobID: ids[3])
        let known = [ids[1], ids[2]]
        let said = "which this jobctl does not know"

        let listed = try workspace.jobctl(["list"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(known.allSatisfy(listed.stdout.contains) && !listed.stdout.contains(ids[0]) && !listed.stdout.contains(ids[3]), "\(listed.stdout)")
        #expect(listed.stderr.contains("2 jobs with events of type 'hold_requested', \(said), were not listed: a newer jobctl wrote them"),
                "\(listed.stderr)")
        for format in ["--csv", "--json", "--no-color"] {
            let audit = try workspace.jobctl(["audit", format])
            #expect(audit.status == 0, "\(audit.stderr)")
            #expect(known.allSatisfy(audit.stdout.contains) && !audit.stdout.contains(ids[0]), "\(format): \(audit.stdout)")
            #expect(audit.stderr.contains("\(said), were left out of this audit"), "\(format): \(audit.stderr)")
        }

        let stats = try workspace.jobctl(["stats"])
        #expect(stats.status == 0, "\(stats.stderr)")
        #expect(stats.stderr.contains("1 job with an event of type 'hold_requested', \(said), was counted as stored, and left alone "
                                      + "by this jobctl's workers"), "\(stats.stderr)")

        let commands: [(arguments: [String], job: String)] = [
            (["show", ids[0]], ids[0]), (["history", ids[0]], ids[0]), (["result", ids[0]], ids[0]), (["pause", ids[0]], ids[0]),
            (["cancel", ids[0]], ids[0]), (["retry", ids[3]], ids[3]), (["retry", "--dry-run", ids[3]], ids[3]),
        ]
        for (arguments, job) in commands {
            let read = try workspace.jobctl(arguments)
            #expect(read.status == 1, "\(arguments): \(read.stdout)")
            #expect(read.stderr.contains("job \(job) has an event of type 'hold_requested', \(said): a newer jobctl wrote it"),
                    "\(arguments): \(read.stderr)")
            #expect(!read.stderr.contains("replay --verify"), "\(arguments): \(read.stderr)")
        }

        let cancelled = try workspace.jobctl(["cancel", "--state", "queued"])
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        #expect(cancelled.stderr.contains("1 job with an event of type 'hold_requested', \(said), was left alone"), "\(cancelled.stderr)")
        #expect(cancelled.stdout.contains("2 of 2 jobs"), "\(cancelled.stdout)")

        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stdout.contains("projection matches (2 jobs not checked)") && !verify.stdout.contains("problem"), "\(verify.stdout)")
        #expect(verify.stderr.contains("not checked: job \(ids[0]) has an event of type 'hold_requested', \(said): a newer jobctl wrote it"),
                "\(verify.stderr)")
        let rewrite = try workspace.jobctl(["replay"])
        #expect(rewrite.status == 1 && rewrite.stderr.contains("nothing was rewritten"), "\(rewrite.stdout)\(rewrite.stderr)")
        // Still queued, as the newer jobctl left it.
        let held = try workspace.jobctl(["list", "--state", "queued"])
        #expect(held.stdout.contains("no jobs") && held.stderr.contains("1 job with an event of type 'hold_requested'"), "\(held.stdout)\(held.stderr)")
    }

    /// A file's time went into nanoseconds as `Int64(tv_sec) * 1_000_000_000`, past Int64 after 2262:
    /// anyone who can write a file may set its time (ext4 to 2446, tmpfs to any second), and a worker
    /// reading such a file — an object in a `file://` bucket, an upload's source — ended (exit 132).
    @Test("files dated after 2262 are read and written like any other")
    func filesFromTheFarFuture() throws {
        let workspace = try CLIWorkspace("far-future-files")
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        let object = try workspace.write("buckets/b/f.txt", "from the future\n")
        let source = try workspace.write("src.txt", "also from the future\n")
        let year2300 = Date(timeIntervalSince1970: 10_413_792_000)
        for path in [object, source] { try FileManager.default.setAttributes([.modificationDate: year2300], ofItemAtPath: path) }
        let environment = ["JOBCTL_BUCKETS": buckets]
        let manifest = try workspace.write("m.yaml", """
            jobs:
              - {kind: download-memory, source: file://b/f.txt}
              - {kind: upload-file, source: src.txt, destination: file://b/up.txt}
              - {kind: get-metadata, source: file://b/f.txt}
            """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "exit \(worker.status): \(worker.stderr.prefix(2_000))")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(jobs.count == 3 && jobs.allSatisfy { $0["state"] as? String == "succeeded" }, "\(jobs)")
        #expect(try String(contentsOfFile: buckets + "/b/up.txt", encoding: .utf8) == "also from the future\n")
        #expect(try workspace.jobctl(["list"], environment: environment).status == 0)
    }

    /// The damage is found as the worker opens the log (the pool's own stop on a file damaged while it
    /// runs is `DamagedStoreTests` in the worker suite).
    /// `replay --verify` compared the projection with the log and nothing else: an index whose page
    /// was garbage went unseen (exit 0). It runs SQLite's `quick_check` first now, and what that finds
    /// is a problem of the log: exit 1, the finding and the remedy.
    @Test("replay --verify runs SQLite's quick_check: a garbage index page is a problem of the log")
    func verifyFindsABrokenIndex() throws {
        let workspace = try CLIWorkspace("cli-broken-index")
        defer { workspace.directory.remove() }
        let manifest = (0..<20).map { "- {kind: upload-data, data: \"job \($0)\", destination: \"file://out/\($0).txt\"}" }
            .joined(separator: "\n") + "\n"
        _ = try workspace.submit(manifest)
        #expect(try workspace.jobctl(["worker", "--drain"]).status == 0)
        let before = try workspace.jobctl(["replay", "--verify"])
        try #require(before.status == 0, "\(before.stdout)\(before.stderr)")
        let log = workspace.database + "-wal"
        let logSize = FileManager.default.fileExists(atPath: log) ? try FileManager.default.attributesOfItem(atPath: log)[.size] as? Int : 0
        #expect(logSize == 0, "the WAL was folded into the file, which is edited below")
        // The root page of an index on the log (one page for 20 jobs' outcomes), found in the schema.
        let found = try runProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            (root,) = c.execute("SELECT rootpage FROM sqlite_master WHERE type = 'index' AND name = 'events_outcomes_at'").fetchone()
            (size,) = c.execute("PRAGMA page_size").fetchone()
            print(root, size)
            """, workspace.database])
        let numbers = found.stdout.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        try #require(found.status == 0 && numbers.count == 2 && numbers[0] > 1, "\(found.stdout)\(found.stderr)")
        let handle = try #require(FileHandle(forUpdatingAtPath: workspace.database))
        try handle.seek(toOffset: UInt64((numbers[0] - 1) * numbers[1]))
        try handle.write(contentsOf: Data(repeating: 0xA5, count: numbers[1]))
        try handle.close()

        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 1, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stdout.contains("problem: the database file is damaged (SQLite quick_check: ")
                && verify.stdout.contains("REINDEX"), "\(verify.stdout)\(verify.stderr)")
        let json = try workspace.jobctl(["replay", "--verify", "--json"])
        let report = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any], "\(json.stdout)\(json.stderr)")
        #expect(json.status == 1 && report["consistent"] as? Bool == false)
        #expect((report["problems"] as? [String])?.contains { $0.contains("quick_check") } == true, "\(report)")
    }

    @Test("a worker on a damaged database stops with status 1 and the remedy; so does list")
    func workerStopsAtOnce() throws {
        let workspace = try CLIWorkspace("cli-damaged")
        defer { workspace.directory.remove() }
        let manifest = (0..<200).map { "- {kind: upload-data, data: \"job \($0)\", destination: \"file://out/\($0).txt\"}" }
            .joined(separator: "\n") + "\n"
        _ = try workspace.submit(manifest)
        // The submit's connection closed and folded its WAL into the file; every page after the first
        // (the header and the schema's root) becomes garbage.
        #expect(!FileManager.default.fileExists(atPath: workspace.database + "-wal"))
        let handle = try #require(FileHandle(forUpdatingAtPath: workspace.database))
        let size = try handle.seekToEnd()
        try #require(size > 8_192)
        try handle.seek(toOffset: 4_096)
        try handle.write(contentsOf: Data(repeating: 0xA5, count: Int(size) - 4_096))
        try handle.close()

        let worker = try runProcess("/usr/bin/timeout", ["30", PackagePaths.jobctlBinary, "--db", workspace.database, "worker", "--drain"],
                                    environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(worker.status == 1, "not stopped by the damage (124: still retrying at the timeout): \(worker.stderr)")
        #expect(worker.stderr.contains("Error: the database file is damaged or is not a jobctl database (SQLite: "), "\(worker.stderr)")
        #expect(worker.stderr.contains("PRAGMA integrity_check"))
        let list = try workspace.jobctl(["list"])
        #expect(list.status == 1 && list.stderr.contains("is damaged or is not a jobctl database"), "\(list.stderr)")
    }

    /// `submit` and `migrate` (the creating commands) took another program's SQLite database for a new
    /// one: they added jobctl's tables to it and switched its journal to WAL. Refused now, as the
    /// other commands refuse it, and the file is left byte for byte as it was.
    @Test("another application's SQLite database is refused by submit and migrate too, and left unchanged")
    func foreignDatabaseUntouched() throws {
        let workspace = try CLIWorkspace("cli-foreign-db")
        defer { workspace.directory.remove() }
        let made = try runProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            connection = sqlite3.connect(sys.argv[1])
            connection.execute("CREATE TABLE notes (body TEXT)")
            connection.execute("INSERT INTO notes VALUES ('keep me')")
            connection.commit()
            """, workspace.database])
        try #require(made.status == 0, "\(made.stderr)")
        let before = try Data(contentsOf: URL(fileURLWithPath: workspace.database))
        let manifest = try workspace.write("jobs.yaml", "jobs:\n  - kind: upload-data\n    data: x\n    destination: file://b/x\n")
        for arguments in [["migrate"], ["submit", manifest], ["list"]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 1 && output.stderr.contains("is an SQLite database but not jobctl's"),
                    "\(arguments): \(output.status) \(output.stderr)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: workspace.database)) == before, "the other program's database was changed")
        let left = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path).filter { $0.hasPrefix("jobctl.db") }
        #expect(left == ["jobctl.db"], "\(left)")
    }

    /// Another application's migration ledger of jobctl's ledger's name was taken for jobctl's: golang-migrate's
    /// `version 3` made `list` say "run jobctl migrate", and `migrate` and `submit` switched the file to WAL
    /// before failing on a raw SQL error; dbmate's timestamps read as a newer jobctl's schema. Told apart by
    /// its columns now, and refused untouched, as any other program's database.
    @Test("another application's schema_migrations table is not taken for jobctl's ledger: refused, the file unchanged",
          arguments: [
              "CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL); INSERT INTO schema_migrations VALUES (3, 0)",
              "CREATE TABLE schema_migrations (version varchar(128) NOT NULL PRIMARY KEY); INSERT INTO schema_migrations VALUES ('20240101120000')",
              "CREATE TABLE schema_migrations (version varchar NOT NULL PRIMARY KEY); INSERT INTO schema_migrations VALUES ('3')",
          ])
    func foreignMigrationLedger(ledger: String) throws {
        let workspace = try CLIWorkspace("cli-foreign-ledger")
        defer { workspace.directory.remove() }
        let made = try runProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            connection = sqlite3.connect(sys.argv[1])
            connection.executescript(sys.argv[2] + "; CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('keep me');")
            connection.commit()
            """, workspace.database, ledger])
        try #require(made.status == 0, "\(made.stderr)")
        let before = try Data(contentsOf: URL(fileURLWithPath: workspace.database))
        let manifest = try workspace.write("jobs.yaml", "jobs:\n  - kind: upload-data\n    data: x\n    destination: file://b/x\n")
        for arguments in [["migrate"], ["submit", manifest], ["list"], ["stats"]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 1 && output.stderr.contains("is an SQLite database but not jobctl's")
                        && output.stderr.contains("schema_migrations"), "\(arguments): \(output.status) \(output.stderr)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: workspace.database)) == before, "the other program's database was changed")
        let left = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path).filter { $0.hasPrefix("jobctl.db") }
        #expect(left == ["jobctl.db"], "\(left)")
    }

    @Test("a file that is not a database is named as such")
    func notADatabase() throws {
        let workspace = try CLIWorkspace("cli-not-a-db")
        defer { workspace.directory.remove() }
        try Data((0..<8_192).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }).write(to: URL(fileURLWithPath: workspace.database))
        let output = try workspace.jobctl(["list"])
        #expect(output.status == 1)
        #expect(output.stderr.contains("Error: the database file is damaged or is not a jobctl database (SQLite: file is not a database, code 26)"),
                "\(output.stderr)")
    }
}
