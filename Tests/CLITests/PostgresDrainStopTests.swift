import Foundation
import Testing
import TestSupport

/// A drain that stops because its PostgreSQL server went away says so, not that a disk is full.
@Suite("a drain stopped by an unreachable PostgreSQL server", .onTestThreads)
struct PostgresDrainStopTests {
    @Test("the drain's message names the unreachable server as the cause and suggests no disk space")
    func drainStopNamesTheServer() throws {
        let server = try PostgresServer.makePrivate()
        defer { server.shutDown() }
        let database = try server.makeDatabase("drainstop")
        let directory = try TemporaryDirectory("pg-drain-stop")
        defer { directory.remove() }
        let drain = try DrainWaiting.start(submittingTo: database, workerURL: database, in: directory)
        let worker = drain.worker
        defer { drain.stop() }
        #expect(worker.isRunning, "\(drain.text)")
        try server.stop()

        let stopped = Date()
        _ = worker.ended(within: 60 - Date().timeIntervalSince(stopped))
        let text = drain.text
        #expect(!worker.isRunning, "still running 60 s after the server stopped: \(text.suffix(2000))")
        if worker.isRunning { return }
        #expect(worker.terminationStatus == 1, "\(text.suffix(2000))")
        let final = text.split(separator: "\n").last { $0.contains("Error: the drain stopped") }.map(String.init) ?? ""
        #expect(final.contains("the drain stopped"), "\(text.suffix(2000))")
        #expect(final.contains("check that the database server is running and reachable"), "\(final)")
        #expect(!final.contains("free space"), "\(final)")
        #expect(!text.contains(server.password))
    }

    /// A drain stopped by a statement timeout (57014) or by jobctl's tables gone (42P01: the schema
    /// dropped) said "database I/O error: PostgreSQL error …" and to "free space on the database's disk
    /// or make it writable". Each names its own cause and remedy now.
    @Test("a drain stopped by a statement timeout or a dropped schema names that cause and its remedy, not a disk",
          arguments: ["57014", "42P01"])
    func drainStopNamesTheServersError(sqlstate: String) throws {
        let server = try PostgresServer.shared()
        let database = try server.makeSchema("drainstop\(sqlstate)")
        let schema = try #require(database.components(separatedBy: "search_path%3D").last)
        let directory = try TemporaryDirectory("pg-drain-stop-\(sqlstate)")
        defer { directory.remove() }
        // With a statement timeout of its own for the timeout's case: its statements on a table another
        // session holds locked wait for it, and are cancelled.
        let url = sqlstate == "57014" ? database + "%20-c%20statement_timeout%3D300" : database
        let drain = try DrainWaiting.start(submittingTo: database, workerURL: url, in: directory)
        let worker = drain.worker
        defer { drain.stop() }
        #expect(worker.isRunning, "\(drain.text)")

        let locker = Process()
        if sqlstate == "57014" {
            // Another session holds jobctl's table of jobs locked for longer than the drain takes to stop.
            locker.executableURL = URL(fileURLWithPath: "\(server.binaries)/psql")
            locker.arguments = ["-X", "-q", database, "-c", "BEGIN; LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(15); COMMIT;"]
            locker.standardOutput = FileHandle.nullDevice
            locker.standardError = FileHandle.nullDevice
            try locker.run()
        } else {
            try server.psql(database: "postgres", "DROP SCHEMA \(schema) CASCADE")
        }
        defer { if locker.isRunning { locker.signalTree(SIGKILL); locker.waitForExit() } }

        _ = worker.ended(within: 60)
        let text = drain.text
        #expect(!worker.isRunning, "still running 60 s after the fault: \(text.suffix(2000))")
        if worker.isRunning { return }
        #expect(worker.terminationStatus == 1, "\(text.suffix(2000))")
        let final = text.split(separator: "\n").last { $0.contains("Error: the drain stopped") }.map(String.init) ?? ""
        #expect(final.contains("PostgreSQL error \(sqlstate)"), "\(text.suffix(2000))")
        #expect(!final.contains("database I/O error") && !final.contains("free space"), "\(final)")
        if sqlstate == "57014" {
            #expect(final.contains("statement_timeout"), "\(final)")
        } else {
            #expect(final.contains("jobctl's tables are not in the database and schema the URL names"), "\(final)")
        }
        #expect(!text.contains(server.password))
    }

    /// A server that takes a worker's small writes (claims, lease renewals) and refuses every job's
    /// outcome — here a trigger raising disk_full (53100) for `succeeded` events, as a server whose disk
    /// has room for a renewal and not for a result. The outcome was retried while the lease held, the
    /// renewals kept it, and the drain never ended. It stops now, naming the server's error, the run
    /// logged `abandoned` and the job left `running`; once the server takes it, a later drain finishes it.
    @Test("a drain whose job's outcome the server keeps refusing stops, naming the server's error, and leaves the job to a later worker")
    func drainStopsOnARefusedOutcome() throws {
        let server = try PostgresServer.shared()
        let workspace = try CLIWorkspace("pg-refused-outcome", engine: .postgres)
        defer { workspace.directory.remove() }
        let schema = try #require(workspace.database.components(separatedBy: "search_path%3D").last)
        let environment = ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let submitted = try workspace.jobctl(["submit", try workspace.write("jobs.yaml",
            "- {kind: upload-data, data: hello, destination: \"file://out/a.txt\", max_attempts: 3}\n")], environment: environment)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let id = submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try server.psql(database: "postgres", """
            CREATE FUNCTION \(schema).refuse_outcomes() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.type = 'succeeded' THEN
                    RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full';
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER refuse_outcomes BEFORE INSERT ON \(schema).events FOR EACH ROW EXECUTE FUNCTION \(schema).refuse_outcomes();
            """)

        // Killed after 60 s (status 9: `timeout` goes with it) should it still be draining.
        let drain = try runProcess("/usr/bin/timeout", ["-s", "KILL", "60", PackagePaths.jobctlBinary, "--db", workspace.database,
                                                        "worker", "--drain", "--lease", "2s"],
                                   environment: environment, currentDirectory: workspace.directory.path)
        #expect(drain.status == 1, "exit \(drain.status) (9: still draining after 60 s): \(drain.stderr.suffix(2_000))")
        let final = drain.stderr.split(separator: "\n").last { $0.contains("Error: the drain stopped") }.map(String.init) ?? ""
        #expect(final.contains("PostgreSQL error 53100") && final.contains("free space on the database server's disk"),
                "\(drain.stderr.suffix(2_000))")
        let lines = drain.stderr.split(separator: "\n")
        #expect(lines.contains { $0.contains("abandoned \(id)") }, "\(drain.stderr.suffix(2_000))")
        #expect(!lines.contains { $0.contains("succeeded \(id)") }, "\(drain.stderr.suffix(2_000))")
        let left = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
        #expect(left["state"] as? String == "running", "\(left)")
        #expect(!drain.stderr.contains(server.password))

        // The server takes outcomes again: a later drain rescues the job once its lease has expired and finishes it.
        try server.psql(database: "postgres", "DROP TRIGGER refuse_outcomes ON \(schema).events")
        let rest = try workspace.jobctl(["worker", "--drain", "--lease", "2s"], environment: environment)
        #expect(rest.status == 0, "exit \(rest.status): \(rest.stderr.suffix(2_000))")
        let done = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
        #expect(done["state"] as? String == "succeeded", "\(done)")
        #expect(FileManager.default.contents(atPath: workspace.directory.file("buckets/out/a.txt")) == Data("hello".utf8))
    }
}

/// A `worker --drain` held by a job due in an hour (queued anywhere holds a drain) with nothing running,
/// its log in a file, started and seen to be up (`worker_started`).
private struct DrainWaiting {
    let worker: Process
    let logPath: String
    let log: FileHandle

    static func start(submittingTo database: String, workerURL: String, in directory: TemporaryDirectory) throws -> DrainWaiting {
        let manifest = directory.file("jobs.yaml")
        try "- {kind: upload-data, data: later, destination: \"file://later/a.txt\", delay: 1h}\n"
            .write(toFile: manifest, atomically: true, encoding: .utf8)
        let environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": directory.path, "JOBCTL_BUCKETS": directory.file("buckets")]
        let submitted = try runProcess(PackagePaths.jobctlBinary, ["--db", database, "submit", manifest],
                                       environment: environment, currentDirectory: directory.path)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let logPath = directory.file("worker.log")
        try #require(FileManager.default.createFile(atPath: logPath, contents: nil))
        let log = try #require(FileHandle(forWritingAtPath: logPath))
        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        worker.arguments = ["--db", workerURL, "worker", "--drain", "--lease", "1s", "--concurrency", "1"]
        worker.environment = environment
        worker.currentDirectoryURL = URL(fileURLWithPath: directory.path)
        worker.standardOutput = FileHandle.nullDevice
        worker.standardError = log
        let drain = DrainWaiting(worker: worker, logPath: logPath, log: log)
        do { try worker.run() } catch {
            try? log.close()
            throw error
        }
        let started = Date()
        while Date().timeIntervalSince(started) < 30, !drain.text.contains("worker_started") {
            usleep(50_000)
        }
        usleep(300_000)
        return drain
    }

    /// What the worker has logged so far.
    var text: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func stop() {
        if worker.isRunning { worker.signalTree(SIGKILL); worker.waitForExit() }
        try? log.close()
    }
}
