import Foundation
import Testing
import TestSupport

/// jobctl under the resource limits an operator or a service manager sets (`ulimit`, systemd's `Limit*=`):
/// each is met with an error that names it, never a silent death.
@Suite("resource limits", .onTestThreads) struct ResourceLimitTests {
    /// Runs `jobctl --db DB ARGS` in the workspace with its file size limit (`RLIMIT_FSIZE`) at `bytes`
    /// and SIGXFSZ at its default action and unblocked, as a login shell or systemd starts it (the test
    /// runner's children inherit it blocked): a small python3 process sets both, then becomes jobctl.
    /// With `killedAfter`, `timeout` kills it with SIGKILL after that many seconds (status 9: `timeout`, in
    /// its process group, is killed with it).
    static func jobctl(fileSizeLimit bytes: Int, _ workspace: CLIWorkspace, _ arguments: [String],
                       killedAfter seconds: Int? = nil) throws -> ProcessOutput {
        let killer = seconds.map { ["-s", "KILL", String($0), "/usr/bin/python3"] } ?? []
        return try runProcess(seconds == nil ? "/usr/bin/python3" : "/usr/bin/timeout", killer + ["-c", """
            import os, resource, signal, sys
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGXFSZ])
            resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
            os.execv(sys.argv[2], sys.argv[2:])
            """, String(bytes), PackagePaths.jobctlBinary, "--db", workspace.database] + arguments,
                       environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets")],
                       currentDirectory: workspace.directory.path)
    }

    /// A manifest of `count` small upload-data jobs (its log is some hundreds of KiB).
    static func manyJobs(_ count: Int) -> String {
        (0..<count).map { "- {kind: upload-data, data: \"x\($0)\", destination: \"file://b/o\($0)\"}" }.joined(separator: "\n")
    }

    /// Runs `jobctl --db DB ARGS` in the workspace with its stack limit (`RLIMIT_STACK`, soft and hard)
    /// at `kibibytes`, as `ulimit -s` in a shell sets it.
    static func jobctl(stackLimitKiB kibibytes: Int, _ workspace: CLIWorkspace, _ arguments: [String]) throws -> ProcessOutput {
        try runProcess("/usr/bin/python3", ["-c", """
            import os, resource, sys
            resource.setrlimit(resource.RLIMIT_STACK, (int(sys.argv[1]) * 1024, int(sys.argv[1]) * 1024))
            os.execv(sys.argv[2], sys.argv[2:])
            """, String(kibibytes), PackagePaths.jobctlBinary, "--db", workspace.database] + arguments,
                       environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets")],
                       currentDirectory: workspace.directory.path)
    }

    @Test("under a 64 KiB stack limit (ulimit -s 64, soft and hard) submit, a worker and list run; submit died of SIGSEGV")
    func smallStackLimit() throws {
        let workspace = try CLIWorkspace("stack-limit")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", Self.manyJobs(20))
        let submit = try Self.jobctl(stackLimitKiB: 64, workspace, ["submit", manifest])
        #expect(submit.status == 0, "exit \(submit.status) (SIGSEGV is -11 or 139): \(submit.stderr.suffix(2_000))")
        #expect(submit.stdout.split(separator: "\n").count == 20)
        let drain = try Self.jobctl(stackLimitKiB: 64, workspace, ["worker", "--drain", "--concurrency", "4"])
        #expect(drain.status == 0, "exit \(drain.status): \(drain.stderr.suffix(2_000))")
        let listed = try Self.jobctl(stackLimitKiB: 64, workspace, ["list", "--state", "succeeded", "--limit", "0", "--json"])
        #expect(listed.status == 0, "exit \(listed.status): \(listed.stderr.suffix(2_000))")
        let jobs = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]]
        #expect(jobs?.count == 20)
    }

    @Test("a file size limit (ulimit -f) the event log outgrows fails submit and stops a worker with an error naming it; SIGXFSZ killed them")
    func fileSizeLimitOnTheLog() throws {
        let workspace = try CLIWorkspace("fsize-log")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let manifest = try workspace.write("jobs.yaml", Self.manyJobs(2_000))
        // The log is ~130 KiB; 2,000 jobs make its -wal grow past 256 KiB within the submit's transaction.
        let submit = try Self.jobctl(fileSizeLimit: 262_144, workspace, ["submit", manifest])
        #expect(submit.status == 1, "exit \(submit.status) (SIGXFSZ is 25): \(submit.stderr)")
        #expect(submit.stderr.contains("file size limit (262144 bytes"), "\(submit.stderr)")
        #expect(submit.stderr.contains("jobctl.db"), "\(submit.stderr)")
        // Nothing of the refused transaction is in the log.
        let listed = try #require(try workspace.json(["list", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(listed.isEmpty)

        // Submitted without the limit, a drain under it fills the -wal with the jobs' events and stops.
        #expect(try workspace.jobctl(["submit", manifest]).status == 0)
        #expect(try workspace.jobctl(["migrate"]).status == 0)   // checkpoints: the -wal starts empty
        let drain = try Self.jobctl(fileSizeLimit: 262_144, workspace, ["worker", "--drain", "--lease", "2s"])
        #expect(drain.status == 1, "exit \(drain.status) (SIGXFSZ is 25): \(drain.stderr.suffix(2_000))")
        #expect(drain.stderr.contains("file size limit (262144 bytes"), "\(drain.stderr.suffix(2_000))")
        // What to do names the limit: it said to free space on the disk or make the database writable.
        let advice = drain.stderr.split(separator: "\n").last { $0.contains("the drain stopped") }.map(String.init) ?? ""
        #expect(advice.contains("raise the worker's file size limit (`ulimit -f`") && !advice.contains("free space"), "\(advice)")
        // Without the limit, another worker finishes every job (the stopped one's leases expire).
        let rest = try workspace.jobctl(["worker", "--drain", "--lease", "2s"])
        #expect(rest.status == 0, "\(rest.stderr.suffix(2_000))")
        let succeeded = try #require(try workspace.json(["list", "--state", "succeeded", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(succeeded.count == 2_000)
    }

    /// A job whose outcome the event log can never take under the limit (a download-memory job's 3 MiB
    /// result, past a 1 MiB limit), while the worker's small writes (claims, lease renewals) go through:
    /// the outcome was retried while the lease held, the renewals kept the lease, and the drain never
    /// ended (`store_error` every second, the job `running`). The drain stops now, saying why, the run
    /// logged `abandoned` (its outcome was never written) and the job left `running` for the rescue; a
    /// worker without `--drain` keeps retrying as it did; without the limit, a later drain finishes it.
    @Test("a drain whose job's outcome outgrows the file size limit stops, saying so, and leaves the job to a later worker")
    func fileSizeLimitOnAnOutcome() throws {
        let workspace = try CLIWorkspace("fsize-outcome")
        defer { workspace.directory.remove() }
        let bucket = workspace.directory.file("buckets/b")
        try FileManager.default.createDirectory(atPath: bucket, withIntermediateDirectories: true)
        let bytes = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: URL(fileURLWithPath: bucket + "/big.bin"))
        let ids = try workspace.submit("""
        - {kind: download-memory, source: "file://b/big.bin", max_size: 10MiB, max_attempts: 3}
        \(Self.manyJobs(5))
        """)
        try #require(ids.count == 6)
        let big = ids[0]

        let started = Date()
        let drain = try Self.jobctl(fileSizeLimit: 1 << 20, workspace, ["worker", "--drain", "--lease", "2s"], killedAfter: 60)
        let tookSeconds = Date().timeIntervalSince(started)
        #expect(drain.status == 1, "exit \(drain.status) (9: still draining after 60 s): \(drain.stderr.suffix(2_000))")
        #expect(tookSeconds < 30, "\(tookSeconds) s")
        let final = drain.stderr.split(separator: "\n").last { $0.contains("the drain stopped") }.map(String.init) ?? ""
        #expect(final.contains("Error: the drain stopped: the event log kept failing for") && final.contains("file size limit (1048576 bytes")
                && final.contains("raise the worker's file size limit (`ulimit -f`"), "\(drain.stderr.suffix(2_000))")
        // The run is said abandoned, never succeeded: its outcome is not in the log.
        let lines = drain.stderr.split(separator: "\n")
        #expect(lines.contains { $0.contains("abandoned \(big)") && $0.contains("file size limit") }, "\(drain.stderr.suffix(2_000))")
        #expect(!lines.contains { $0.contains("succeeded \(big)") }, "\(drain.stderr.suffix(2_000))")
        let left = try #require(try workspace.json(["show", big, "--json"]) as? [String: Any])
        #expect(left["state"] as? String == "running", "\(left)")
        let small = try #require(try workspace.json(["list", "--state", "succeeded", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(small.count == 5)

        // A worker without --drain is a service: it retries the outcome for as long as it runs (past its
        // lease, which its renewals keep), and does not stop.
        let service = try Self.jobctl(fileSizeLimit: 1 << 20, workspace, ["worker", "--lease", "2s"], killedAfter: 9)
        #expect(service.status == SIGKILL, "exit \(service.status): \(service.stderr.suffix(2_000))")
        #expect(service.stderr.contains("retrying the write while the lease holds") && !service.stderr.contains("the drain stopped"),
                "\(service.stderr.suffix(2_000))")

        // Without the limit, a later drain takes the job back once its lease has expired and finishes it.
        let rest = try workspace.jobctl(["worker", "--drain", "--lease", "2s"])
        #expect(rest.status == 0, "exit \(rest.status): \(rest.stderr.suffix(2_000))")
        let done = try #require(try workspace.json(["show", big, "--json"]) as? [String: Any])
        #expect(done["state"] as? String == "succeeded", "\(done)")
        let copy = workspace.directory.file("result.bin")
        let result = try workspace.jobctl(["result", big, "-o", copy])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(FileManager.default.contents(atPath: copy) == bytes)
    }

    /// A file size limit met by another file than the log: a backup's copy, and SQLite's temporary file
    /// of a read-only `stats` (its grouping of ~7,000 outcomes no longer fits in memory). Each error said
    /// the database had reached the limit — it was past it, but neither command writes it. Each names the
    /// file that reached it now; and a `TMPDIR` that cannot hold a file is named, not "unable to open
    /// database file" alone.
    @Test("a file size limit met by a backup's copy or by SQLite's temporary file names that file, not the database")
    func fileSizeLimitOnOtherFiles() throws {
        let workspace = try CLIWorkspace("fsize-other")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", Self.manyJobs(8_000))
        #expect(try workspace.jobctl(["submit", manifest]).status == 0)
        let drained = try workspace.jobctl(["worker", "--drain", "--concurrency", "8"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        try #require(drained.status == 0, "\(drained.stderr.suffix(2_000))")
        var size = stat()
        try #require(stat(workspace.database, &size) == 0 && size.st_size > 4 << 20, "\(size.st_size)")
        let limit = 1 << 20

        let backup = try Self.jobctl(fileSizeLimit: limit, workspace, ["backup", "copy.db"])
        #expect(backup.status == 1, "exit \(backup.status): \(backup.stderr)")
        #expect(backup.stderr.contains("'copy.db' reached this process's file size limit (1048576 bytes"), "\(backup.stderr)")
        #expect(!backup.stderr.contains("jobctl.db") && !backup.stderr.contains("free space"), "\(backup.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("copy.db")))

        let temporary = workspace.directory.file("tmp")
        try FileManager.default.createDirectory(atPath: temporary, withIntermediateDirectories: true)
        let stats = try runProcess("/usr/bin/env", ["TMPDIR=\(temporary)", "/usr/bin/python3", "-c", """
            import os, resource, sys
            resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
            os.execv(sys.argv[2], sys.argv[2:])
            """, String(limit), PackagePaths.jobctlBinary, "--db", workspace.database, "stats"], environment: ["NO_COLOR": "1"])
        #expect(stats.status == 1, "exit \(stats.status): \(stats.stderr)")
        #expect(stats.stderr.contains("a temporary file of SQLite's in '\(temporary)' (TMPDIR) reached this process's file size limit (1048576 bytes"),
                "\(stats.stderr)")
        #expect(!stats.stderr.contains("jobctl.db"), "\(stats.stderr)")

        // A TMPDIR the process may write by its permissions (root may write /proc) where no file can be made.
        if access("/proc", W_OK | X_OK) == 0 {
            let refused = try workspace.jobctl(["stats"], environment: ["TMPDIR": "/proc"])
            #expect(refused.status == 1, "exit \(refused.status): \(refused.stderr)")
            #expect(refused.stderr.contains("SQLite's folder for temporary files '/proc' (TMPDIR) cannot hold a file"), "\(refused.stderr)")
        }
    }

    @Test("a download or upload past the file size limit fails as its job's error naming the limit, its temporary file removed")
    func fileSizeLimitOnATransfer() throws {
        let workspace = try CLIWorkspace("fsize-transfer")
        defer { workspace.directory.remove() }
        let bucket = workspace.directory.file("buckets/b")
        try FileManager.default.createDirectory(atPath: bucket, withIntermediateDirectories: true)
        let bytes = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: URL(fileURLWithPath: bucket + "/big.bin"))
        try bytes.write(to: URL(fileURLWithPath: workspace.directory.file("big.bin")))
        let ids = try workspace.submit("""
        - {kind: download-file, source: "file://b/big.bin", destination: out/big.bin, max_attempts: 1}
        - {kind: upload-file, source: big.bin, destination: "file://b/copy.bin", max_attempts: 1}
        """)
        try #require(ids.count == 2)
        let drain = try Self.jobctl(fileSizeLimit: 1 << 20, workspace, ["worker", "--drain"])
        #expect(drain.status == 2, "exit \(drain.status): \(drain.stderr.suffix(2_000))")
        for id in ids {
            let job = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
            let error = try #require(job["error"] as? [String: Any], "\(job)")
            #expect(job["state"] as? String == "failed")
            #expect((error["message"] as? String)?.contains("file size limit (1048576 bytes") == true, "\(error)")
        }
        let left = try FileManager.default.subpathsOfDirectory(atPath: workspace.directory.path)
            .filter { $0.contains("jobctl-partial") || $0.contains("jobctl-upload") || $0.hasSuffix("copy.bin") || $0.hasSuffix("out/big.bin") }
        #expect(left.isEmpty, "\(left)")
    }

    /// Runs `jobctl --db DATABASE ARGS` in the workspace as `nobody` (root is exempt from a process limit)
    /// under `ulimit -u LIMIT`, killed by `timeout` after 20 s (status 124): a hang fails, not holds, the run.
    static func jobctlAsNobody(processLimit limit: Int, _ workspace: CLIWorkspace, database: String,
                               _ arguments: [String]) throws -> ProcessOutput {
        let nobody = try #require(getpwnam("nobody")).pointee
        let command = ([PackagePaths.jobctlBinary, "--db", database] + arguments).map { "'\($0)'" }.joined(separator: " ")
        return try runProcess("/usr/bin/timeout", ["-k", "5", "20", "/usr/bin/setpriv", "--reuid=\(nobody.pw_uid)", "--regid=\(nobody.pw_gid)",
                                                   "--clear-groups", "--", "/bin/bash", "-c", "ulimit -u \(limit) && exec \(command)"],
                              environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets"),
                                            "HOME": DatabasePermissionTests.otherUsersHome],
                              currentDirectory: workspace.directory.path)
    }

    /// A process and thread limit (`ulimit -u`, systemd's TasksMax=) that leaves jobctl no thread of its
    /// own: each command says which thread the system refused and why. Foundation's `Thread.start()`
    /// drops a failed `pthread_create`, and `list`, `submit` and the worker waited for ever for a store
    /// thread that never ran. Run as `nobody` (root is exempt from the limit), under `timeout`.
    @Test("a process limit that leaves no thread is an error naming it, not a hang",
          .enabled(if: DatabasePermissionTests.canRunAsNobody, "needs root (to run jobctl as the user nobody with setpriv; a process limit binds only other users)"))
    func processLimitWithoutAThread() throws {
        let workspace = try CLIWorkspace("nproc")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", Self.manyJobs(2))
        #expect(try workspace.jobctl(["submit", manifest]).status == 0)
        let nobody = try #require(getpwnam("nobody")).pointee
        for path in [workspace.directory.path, workspace.database, manifest] { chown(path, nobody.pw_uid, nobody.pw_gid) }
        for arguments in [["list"], ["submit", manifest], ["worker", "--drain"]] {
            let output = try Self.jobctlAsNobody(processLimit: 1, workspace, database: workspace.database, arguments)
            print("\(arguments) under ulimit -u 1: exit \(output.status): \(output.stderr)")
            #expect(output.status == 1, "\(arguments): exit \(output.status) (124: still waiting after 20 s): \(output.stderr)")
            // glibc answers EAGAIN for an address-space limit too (the stack's mmap refused): both are named.
            #expect(output.stderr.contains("cannot start the thread 'jobctl-") && output.stderr.contains("`ulimit -u`")
                    && output.stderr.contains("`ulimit -v`"), "\(arguments): \(output.stderr)")
        }
        // Nothing was written meanwhile: the two jobs are queued, once.
        let listed = try #require(try workspace.json(["list", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(listed.count == 2 && listed.allSatisfy { $0["state"] as? String == "queued" }, "\(listed)")
    }

    /// A process limit with room for jobctl's own threads but not for the runtime's (`ulimit -u 6`):
    /// libdispatch, refused a thread for the first task, sleeps and asks again for ever, so the worker
    /// hung at its start with an empty log, deaf to SIGTERM (its handler is installed from a task).
    /// Under each limit it now drains or stops with the thread it could not start, within moments.
    @Test("a process limit that leaves too few threads for the runtime stops the worker, saying so, instead of hanging",
          .enabled(if: DatabasePermissionTests.canRunAsNobody, "needs root (to run jobctl as the user nobody with setpriv; a process limit binds only other users)"))
    func processLimitBelowThePool() throws {
        let workspace = try CLIWorkspace("nproc-pool")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", Self.manyJobs(4))
        #expect(try workspace.jobctl(["submit", manifest]).status == 0)
        let nobody = try #require(getpwnam("nobody")).pointee
        var refusedForThePool = false
        for limit in [4, 6, 8, 10] {
            let database = workspace.directory.file("jobs-\(limit).db")
            try FileManager.default.copyItem(atPath: workspace.database, toPath: database)
            for path in [workspace.directory.path, database] { chown(path, nobody.pw_uid, nobody.pw_gid) }
            let output = try Self.jobctlAsNobody(processLimit: limit, workspace, database: database, ["worker", "--drain", "--concurrency", "4"])
            #expect(output.status == 0 || output.status == 1, "ulimit -u \(limit): exit \(output.status) (124: still waiting after 20 s): \(output.stderr)")
            if output.status == 1 {
                #expect(output.stderr.contains("cannot start the thread") && output.stderr.contains("`ulimit -u`"), "ulimit -u \(limit): \(output.stderr)")
                refusedForThePool = refusedForThePool || output.stderr.contains("threads the worker needs at once")
            }
        }
        #expect(refusedForThePool, "no limit tried left room for jobctl's threads and not the runtime's")
    }

    /// An address-space limit (`ulimit -v`) too small for the worker's threads' stacks: glibc refuses the
    /// thread with EAGAIN, as at a process limit, and the error named only `ulimit -u` and TasksMax=. It
    /// names the address-space limit too. Which limits refuse a thread depends on the build; at least one
    /// of these does (a debug build's worker was refused from 100,000 to 250,000 KiB).
    @Test("an address-space limit that refuses the worker a thread is named in the error, beside the process limit")
    func addressSpaceLimitRefusesAThread() throws {
        let workspace = try CLIWorkspace("address-space")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["submit", try workspace.write("jobs.yaml", Self.manyJobs(4))]).status == 0)
        var refused = 0
        for limit in [100_000, 150_000, 200_000, 250_000] {
            let database = workspace.directory.file("jobs-\(limit).db")
            try FileManager.default.copyItem(atPath: workspace.database, toPath: database)
            let output = try runProcess("/usr/bin/timeout", ["-k", "5", "20", "/bin/bash", "-c", "ulimit -v \(limit) && exec \"$0\" --db \"$1\" worker --drain --concurrency 4",
                                                             PackagePaths.jobctlBinary, database],
                                        environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets")],
                                        currentDirectory: workspace.directory.path)
            #expect(output.status == 0 || output.status == 1, "ulimit -v \(limit): exit \(output.status) (124: still running after 20 s): \(output.stderr.suffix(2_000))")
            if output.stderr.contains("cannot start the thread") {
                refused += 1
                #expect(output.stderr.contains("`ulimit -v`") && output.stderr.contains("`ulimit -u`"), "ulimit -v \(limit): \(output.stderr.suffix(2_000))")
            }
        }
        #expect(refused > 0, "no address-space limit tried refused the worker a thread")
    }

    /// Out of file descriptors (`ulimit -n 5`), `list` and `stats` said the database could not be opened
    /// and to "check that the file exists and is readable" — it does, and is: the limit is named now.
    @Test("a command out of file descriptors names the limit, not a missing file")
    func outOfDescriptorsAtOpen() throws {
        let workspace = try CLIWorkspace("nofile-open")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["submit", try workspace.write("jobs.yaml", Self.manyJobs(1))]).status == 0)
        var refused = 0
        for limit in 3...8 {
            for command in ["list", "stats"] {
                let output = try runProcess("/bin/bash", ["-c", "ulimit -n \(limit) && exec \"$0\" --db \"$1\" \(command)",
                                                          PackagePaths.jobctlBinary, workspace.database],
                                            environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
                #expect(!output.stderr.contains("check that the file exists"), "ulimit -n \(limit) \(command): \(output.stderr)")
                if output.stderr.contains("cannot open database") {
                    refused += 1
                    #expect(output.stderr.contains("may open no more files") && output.stderr.contains("`ulimit -n`"),
                            "ulimit -n \(limit) \(command): \(output.stderr)")
                }
            }
        }
        #expect(refused > 0, "no limit from 3 to 8 kept the database from opening")
    }
}
