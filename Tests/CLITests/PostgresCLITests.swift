import Foundation
import Testing
import TestSupport

/// The built binary against the tests' PostgreSQL server: `--db postgres://…` or `JOBCTL_DB=postgres://…`.
@Suite("jobctl on PostgreSQL", .onTestThreads)
struct PostgresCLITests {
    static let manifest = """
    jobs:
      - kind: upload-data
        data: "hello, postgres"
        destination: file://docs/greeting.txt
        key: greeting
      - kind: upload-data
        data: "second"
        destination: file://docs/second.txt
      - kind: download-memory
        source: file://docs/greeting.txt
        max_size: 1KiB
        priority: -1
    """

    /// A PostgreSQL session lost under `watch` (a server restarted, an administrator's
    /// `pg_terminate_backend`) ended it with exit 1 at once — read by `submit --wait x && publish` as a
    /// failed job — though the job then succeeded. The watcher rides it out now, as workers do.
    @Test("watch rides out its PostgreSQL session ended under it and reports how the job ended")
    func watchRidesOutALostSession() throws {
        let workspace = try CLIWorkspace("pg-watch-lost", engine: .postgres)
        defer { workspace.directory.remove() }
        let server = try PostgresServer.shared()
        let ids = try workspace.submit("- {kind: upload-data, data: x, destination: file://b/x.txt, key: lost}\n")
        let command = try TaggedCommand.start(workspace, ["watch", try #require(ids.first)], outputToo: false)
        let (watch, tag) = (command.process, command.tag)
        defer { command.stop() }
        // Ended by the server as an administrator would end it, once the watcher's session is past its open
        // (a session ended while it opens is opened again at once: `sessionEndedWhileOpening`).
        var ended = false
        for _ in 0..<100 where !ended {
            ended = try server.psql(database: "postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                        + "WHERE application_name = '\(tag)' AND query NOT ILIKE '%schema_migrations%' "
                                        + "AND query NOT ILIKE 'SET %' AND query <> ''").contains("t")
            if !ended { usleep(100_000) }
        }
        #expect(ended, "the watcher's session was never seen")
        // The job runs after the loss; the watcher sees it end.
        usleep(1_500_000)
        let worker = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(worker.status == 0, "\(worker.stderr)")
        #expect(watch.waitForExit(seconds: 60), "watch did not end")
        let said = command.text
        #expect(watch.terminationStatus == 0, "\(said)")
        #expect(said.contains("trying again for up to 60 s") && said.contains("the event log answers again"), "\(said)")
    }

    /// A session the server ended while the store was being opened failed the command (`watch` exit 1,
    /// "the connection to PostgreSQL was lost … while running `SET default_transaction_read_only = on`"),
    /// as a CI run under load found. The open is tried once more when a session that had connected is lost.
    @Test("a session ended while a command opens the store is opened again, and the command goes on")
    func sessionEndedWhileOpening() throws {
        let workspace = try CLIWorkspace("pg-open-lost", engine: .postgres)
        defer { workspace.directory.remove() }
        let server = try PostgresServer.shared()
        let ids = try workspace.submit("- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        let schema = try #require(workspace.database.components(separatedBy: "search_path%3D").last)
        // Another session holds the migration ledger: the command's open waits on it, and is ended there.
        let holder = try server.holdingLock(on: "\(schema).schema_migrations", seconds: 2)
        defer { if holder.isRunning { holder.signalTree(SIGKILL); holder.waitForExit(seconds: 10) } }
        let command = try TaggedCommand.start(workspace, ["show", try #require(ids.first)], outputToo: true)
        let (show, tag) = (command.process, command.tag)
        defer { command.stop() }
        var ended = false
        for _ in 0..<100 where !ended {
            ended = try server.psql(database: "postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                        + "WHERE application_name = '\(tag)' AND wait_event_type = 'Lock'").contains("t")
            if !ended { usleep(50_000) }
        }
        #expect(ended, "the command's session was never seen waiting on the ledger")
        #expect(show.waitForExit(seconds: 30), "show did not end")
        let said = command.text
        #expect(show.terminationStatus == 0, "\(said)")
        #expect(said.contains("queued"), "\(said)")
    }

    /// jobctl tells a PostgreSQL URL by its scheme without case, libpq only in lower case: it took
    /// `POSTGRES://…` whole for a database name on the default host, and failed with a confusing message
    /// (or, with `PGHOST` and a database of that name, used another database).
    @Test("an upper-case POSTGRES:// scheme reaches the database the URL names")
    func upperCaseScheme() throws {
        let workspace = try CLIWorkspace("pg-upper-scheme", engine: .postgres)
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", "- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        let submitted = try workspace.jobctl(["submit", path])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let upper = "POSTGRES" + workspace.database.drop { $0 != ":" }
        let listed = try runProcess(PackagePaths.jobctlBinary, ["--db", upper, "list"], environment: ["NO_COLOR": "1"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.contains(submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(listed.stdout)")
    }

    /// A libpq key/value string given as the database was taken for an SQLite file name: `list` said
    /// "no database at host=… password=Hunter2Secret …", `submit` created a local file of that name and
    /// put the jobs in it, away from the PostgreSQL database meant. It is refused, its password redacted.
    @Test("a key/value connection string as the database is refused, with its password redacted and no file made")
    func keywordConnectionStringRefused() throws {
        let workspace = try CLIWorkspace("pg-keywords")
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", "- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        let target = "host=127.0.0.1 port=1 user=jobs password=Hunter2Secret dbname=jobs"
        for (arguments, environment) in [(["--db", target, "submit", path], [:]), (["list"], ["JOBCTL_DB": target])] {
            let run = try runProcess(PackagePaths.jobctlBinary, arguments, environment: environment.merging(["NO_COLOR": "1"]) { a, _ in a },
                                     currentDirectory: workspace.directory.path)
            #expect(run.status == 64, "\(arguments): \(run.stdout)\(run.stderr)")
            #expect(run.stderr.contains("is a libpq key/value connection string") && run.stderr.contains("postgresql://"), "\(run.stderr)")
            #expect(!run.stderr.contains("Hunter2Secret") && !run.stdout.contains("Hunter2Secret"), "\(run.stderr)")
        }
        let made = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path)
        #expect(!made.contains { $0.hasPrefix("host=") }, "\(made)")
    }

    /// A password with a raw `@` (or `/`): libpq ends the user information at the first `@`, so the
    /// password's tail became the host name it quoted in its error — `could not translate host name
    /// "dor&REDACTED@127.0.0.1"` printed `dor&`, pieces under four characters being left unscrubbed, and
    /// `p@ss` printed `ss@127.0.0.1`. Such a URL is refused before anything is sent, asking for
    /// percent-encoding, as `--db`, `JOBCTL_DB` and `migrate --to`.
    @Test("a PostgreSQL URL whose password holds a raw '@' or '/' is refused unread, printing no piece of it")
    func rawAtInPasswordRefused() throws {
        let workspace = try CLIWorkspace("pg-raw-at")
        defer { workspace.directory.remove() }
        let targets = [("postgres://jobs:Tr0ub@dor&3xyz@127.0.0.1:1/jobs", ["Tr0ub", "dor&", "3xyz"]),
                       ("postgresql://jobs:p@ss@127.0.0.1:1/jobs", ["p@ss", "ss@"]),
                       ("postgres://jobs:xQ7/Zk9@127.0.0.1:1/jobs", ["xQ7", "Zk9"])]
        for (target, pieces) in targets {
            let runs: [([String], [String: String])] = [(["--db", target, "list"], [:]), (["list", "--json"], ["JOBCTL_DB": target]),
                                                        (["migrate", "--to", target], [:])]
            for (arguments, environment) in runs {
                let run = try runProcess(PackagePaths.jobctlBinary, arguments, environment: environment.merging(["NO_COLOR": "1"]) { a, _ in a },
                                         currentDirectory: workspace.directory.path)
                #expect(run.status == 64, "\(arguments): \(run.stdout)\(run.stderr)")
                #expect(run.stderr.contains("percent-encode"), "\(run.stderr)")
                for piece in pieces {
                    #expect(!run.stderr.contains(piece) && !run.stdout.contains(piece), "\(piece) printed: \(run.stderr)")
                }
            }
        }
        // Encoded, the same password reaches the server (refused there: nothing listens on port 1).
        let encoded = try runProcess(PackagePaths.jobctlBinary, ["--db", "postgres://jobs:Tr0ub%40dor%263xyz@127.0.0.1:1/jobs", "list"],
                                     environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
        #expect(encoded.status == 1 && !encoded.stderr.contains("percent-encode") && !encoded.stderr.contains("3xyz"), "\(encoded.stderr)")
    }

    @Test("migrate, submit, worker --drain, list, result and replay --verify; the password is never printed")
    func happyPath() throws {
        let workspace = try CLIWorkspace("pg-cli", engine: .postgres)
        defer { workspace.directory.remove() }
        let server = try PostgresServer.shared()
        let path = try workspace.write("jobs.yaml", Self.manifest)
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        var outputs: [ProcessOutput] = []

        let migrated = try workspace.jobctl(["migrate"])
        outputs.append(migrated)
        #expect(migrated.status == 0 && migrated.stdout.contains("applied migrations 1, 2, 3, 4"), "\(migrated.stdout)\(migrated.stderr)")
        #expect(try workspace.jobctl(["migrate"]).stdout.contains("schema is up to date"))

        let submitted = try workspace.jobctl(["submit", path])
        outputs.append(submitted)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 3)

        let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "1"], environment: environment)
        outputs.append(worker)
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        #expect(try String(contentsOfFile: workspace.directory.file("buckets/docs/greeting.txt"), encoding: .utf8)
            == "hello, postgres")

        let list = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(list.count == 3)
        #expect(list.allSatisfy { $0["state"] as? String == "succeeded" }, "\(list)")
        // download-memory's bytes went through the blobs table (bytea) and come back out.
        let result = try workspace.jobctl(["result", ids[2]])
        outputs.append(result)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("hello, postgres"))

        // JOBCTL_DB selects the same database.
        let viaEnvironment = try runProcess(PackagePaths.jobctlBinary, ["replay", "--verify"],
                                            environment: ["NO_COLOR": "1", "JOBCTL_DB": workspace.database])
        outputs.append(viaEnvironment)
        #expect(viaEnvironment.status == 0, "\(viaEnvironment.stdout)\(viaEnvironment.stderr)")
        #expect(viaEnvironment.stdout.contains("projection matches"))

        // A wrong database name is refused with the URL redacted.
        let wrong = try runProcess(PackagePaths.jobctlBinary,
                                   ["--db", server.url(database: "no_such_db", password: server.password), "list"],
                                   environment: ["NO_COLOR": "1"])
        outputs.append(wrong)
        #expect(wrong.status != 0)
        #expect(wrong.stderr.contains("no_such_db"))
        for output in outputs {
            #expect(!output.stdout.contains(server.password) && !output.stderr.contains(server.password))
        }
    }

    @Test("an outcome whose error message holds a NUL (a server's error body) leaves list, show, stats, archive and workers working",
          arguments: StoreEngine.allCases)
    func nulInOutcome(engine: StoreEngine) throws {
        let nginx = try NginxServer.start(extraServerConfig: "error_page 404 /nul-error.txt;")
        defer { nginx.stop() }
        try Data("gone\u{0}for good".utf8).write(to: URL(fileURLWithPath: nginx.root + "/nul-error.txt"))
        let workspace = try CLIWorkspace("pg-nul-outcome", engine: engine)
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", """
            jobs:
              - kind: download-file
                source: \(nginx.baseURL)/missing.bin
                destination: \(workspace.directory.file("missing.bin"))
                max_attempts: 1
            """)
        let submitted = try workspace.jobctl(["submit", path])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let id = submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "1"])
        #expect(worker.status == 2, "\(worker.stdout)\(worker.stderr)")
        let history = try workspace.jobctl(["history", id, "--json"])
        #expect(history.stdout.contains("\\u0000"), "the server's message is kept with its NUL: \(history.stdout)\(history.stderr)")

        #expect(try workspace.jobctl(["list", "--json"]).status == 0)
        let shown = try workspace.jobctl(["show", id, "--json"])
        #expect(shown.status == 0 && shown.stdout.contains("gone\\u0000for good"), "\(shown.stdout)\(shown.stderr)")
        // The last hour's failures by error code: the server reads each outcome's JSON.
        let stats = try workspace.jobctl(["stats", "--json"])
        print("stats:", stats.stderr)
        #expect(stats.status == 0 && stats.stdout.contains("objectNotFound"), "\(stats.stdout)\(stats.stderr)")
        let archived = try workspace.jobctl(["archive", "--before", "2999-01-01", "--to", workspace.directory.file("a.gz")])
        #expect(archived.status == 0, "\(archived.stdout)\(archived.stderr)")
        let again = try workspace.jobctl(["worker", "--drain", "--concurrency", "1"])
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }
}

/// A jobctl command on a PostgreSQL workspace whose session carries a unique `application_name` (`tag`),
/// by which the server's sessions are found and ended; its standard error (and, `outputToo`, its
/// output) goes to a file.
private struct TaggedCommand {
    let process: Process
    let tag: String
    let outputPath: String
    let file: FileHandle

    static func start(_ workspace: CLIWorkspace, _ arguments: [String], outputToo: Bool) throws -> TaggedCommand {
        let tag = "cmd_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        process.arguments = ["--db", workspace.database + "&application_name=\(tag)"] + arguments
        process.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin"]
        let outputPath = workspace.directory.file("\(tag).out")
        try #require(FileManager.default.createFile(atPath: outputPath, contents: nil))
        let file = try #require(FileHandle(forWritingAtPath: outputPath))
        process.standardOutput = outputToo ? file : FileHandle.nullDevice
        process.standardError = file
        do { try process.run() } catch {
            try? file.close()
            throw error
        }
        return TaggedCommand(process: process, tag: tag, outputPath: outputPath, file: file)
    }

    /// What the command has written to its file so far.
    var text: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    func stop() {
        if process.isRunning { process.signalTree(SIGKILL); process.waitForExit(seconds: 30) }
        try? file.close()
    }
}
