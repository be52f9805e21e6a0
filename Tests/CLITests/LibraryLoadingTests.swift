import Foundation
import Testing
import TestSupport

/// libcurl and libpq are loaded when first needed, not when jobctl starts (see the CCurl and CPostgres
/// shims): a command on SQLite maps neither, and a host where one cannot be loaded gets a typed error
/// where it is needed, never a crash. glibc's loader reports what it maps with `LD_DEBUG=libs`.
@Suite("libcurl and libpq are loaded only when needed", .onTestThreads)
struct LibraryLoadingTests {
    /// The shared objects the dynamic loader mapped, as `LD_DEBUG=libs` printed them (their `calling init` lines).
    private static func initialised(_ output: ProcessOutput) -> [String] {
        output.stderr.split(separator: "\n").compactMap { line in
            guard let range = line.range(of: "calling init: ") else { return nil }
            return String(line[range.upperBound...])
        }
    }

    /// A directory holding a stand-in for `name`: a real shared object (the zlib jobctl links, as `ldd`
    /// finds it) that lacks every function jobctl looks up in it, found first through `LD_LIBRARY_PATH`.
    private static func standIn(named name: String, in workspace: CLIWorkspace) throws -> String {
        let linked = try runProcess("/usr/bin/ldd", [PackagePaths.jobctlBinary])
        let zlib = linked.stdout.split(separator: "\n").lazy.compactMap { line -> String? in
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 3, fields[0].hasPrefix("libz.so"), fields[1] == "=>" else { return nil }
            return String(fields[2])
        }.first
        let path = try #require(zlib, "ldd shows no zlib for jobctl: \(linked.stdout)")
        let directory = workspace.directory.file("stand-in")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // The file itself, not the symbolic link ldd names (copied as a link it would dangle).
        let file = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        try FileManager.default.copyItem(atPath: file, toPath: directory + "/" + name)
        return directory
    }

    @Test("a command on SQLite and a file:// worker map neither libcurl nor libpq")
    func sqliteCommandsLoadNeither() throws {
        let workspace = try CLIWorkspace("libs-sqlite")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: \"x\", destination: \"file://libs/o.txt\"}")
        for arguments in [["list"], ["worker", "--drain"]] {
            let output = try workspace.jobctl(arguments, environment: ["LD_DEBUG": "libs",
                                                                      "JOBCTL_BUCKETS": workspace.directory.file("buckets")])
            #expect(output.status == 0, "\(arguments): \(output.stderr.suffix(2_000))")
            let mapped = Self.initialised(output)
            #expect(!mapped.isEmpty, "LD_DEBUG=libs printed no `calling init` line: \(output.stderr.suffix(2_000))")
            #expect(!mapped.contains { $0.contains("libcurl") || $0.contains("libpq") }, "\(arguments) mapped: \(mapped)")
        }
    }

    @Test("an HTTP job loads libcurl, a PostgreSQL URL loads libpq")
    func loadedWhenNeeded() throws {
        let workspace = try CLIWorkspace("libs-needed")
        defer { workspace.directory.remove() }
        // Port 9 on loopback: nothing listens, so the job fails after libcurl has been loaded.
        _ = try workspace.submit("- {kind: download-memory, source: \"http://127.0.0.1:9/none\", max_attempts: 1}")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: ["LD_DEBUG": "libs"])
        #expect(Self.initialised(worker).contains { $0.contains("libcurl.so") }, "\(worker.stderr.suffix(2_000))")
        let postgres = try runProcess(PackagePaths.jobctlBinary, ["--db", "postgres://jobctl@127.0.0.1:9/none?connect_timeout=2", "list"],
                                      environment: ["LD_DEBUG": "libs", "NO_COLOR": "1"])
        #expect(postgres.status != 0, "\(postgres.stderr.suffix(2_000))")
        #expect(Self.initialised(postgres).contains { $0.contains("libpq.so") }, "\(postgres.stderr.suffix(2_000))")
    }

    /// Without a usable libcurl every HTTP job the worker claimed failed at its first attempt
    /// (`internalError`, for good), though any worker with libcurl could run it: a fault of this process
    /// is not the job's. The worker stops, saying why, and the job goes back to the queue with its
    /// attempt given back; a worker that can load libcurl then runs it.
    @Test("without a usable libcurl the worker stops and gives its HTTP job back, its attempt uncharged")
    func missingLibcurlStopsTheWorker() throws {
        let workspace = try CLIWorkspace("libs-no-curl")
        defer { workspace.directory.remove() }
        let directory = try Self.standIn(named: "libcurl.so.4", in: workspace)
        let ids = try workspace.submit("""
            - {kind: download-memory, source: "http://127.0.0.1:9/none", max_attempts: 1}
            """)
        let buckets = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let worker = try workspace.jobctl(["worker", "--drain"], environment: buckets.merging(["LD_LIBRARY_PATH": directory]) { a, _ in a })
        #expect(worker.status == 1, "\(worker.stderr)")
        #expect(worker.stderr.contains("the worker stopped: it cannot run transfers here (libcurl could not be loaded"), "\(worker.stderr)")
        #expect(worker.stderr.contains("libcurl.so.4 has no curl_"), "\(worker.stderr)")
        let job = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        #expect(job["state"] as? String == "queued" && job["attempts"] as? Int == 0, "\(job)")
        let history = try workspace.jobctl(["history", ids[0]])
        #expect(history.stdout.contains("released") && !history.stdout.contains("failed"), "\(history.stdout)")
        // With libcurl, the job runs: its one attempt meets the closed port, not a missing library.
        let again = try workspace.jobctl(["worker", "--drain"], environment: buckets)
        #expect(again.status == 2, "\(again.stderr)")
        let shown = try workspace.jobctl(["show", ids[0]])
        #expect(!shown.stdout.contains("libcurl could not be loaded") && shown.stdout.contains("failed"), "\(shown.stdout)")
    }

    @Test("without a usable libpq a PostgreSQL URL is refused with the reason")
    func missingLibpqRefusesTheURL() throws {
        let workspace = try CLIWorkspace("libs-no-pq")
        defer { workspace.directory.remove() }
        let directory = try Self.standIn(named: "libpq.so.5", in: workspace)
        let output = try runProcess(PackagePaths.jobctlBinary, ["--db", "postgres://jobctl:secret-word@127.0.0.1:9/none", "list"],
                                    environment: ["LD_LIBRARY_PATH": directory, "NO_COLOR": "1"])
        #expect(output.status != 0)
        #expect(output.stderr.contains("a PostgreSQL database needs libpq, which could not be loaded"), "\(output.stderr)")
        #expect(output.stderr.contains("libpq.so.5 has no PQ"), "\(output.stderr)")
        #expect(!output.stderr.contains("secret-word"), "\(output.stderr)")
        #expect(!output.stderr.contains("Fatal error"), "\(output.stderr)")
    }
}
