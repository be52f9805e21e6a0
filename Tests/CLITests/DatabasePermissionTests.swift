import Foundation
import Testing
import TestSupport

/// jobctl run by a user who may not reach or read the database another user made: the error says so
/// (permission, owner, mode), not that there is no database or that one should be created.
@Suite("database permissions", .onTestThreads) struct DatabasePermissionTests {
    /// Root can become `nobody` for one command (`setpriv`); as any other user these tests cannot.
    static var canRunAsNobody: Bool {
        getuid() == 0 && getpwnam("nobody") != nil && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
    }

    /// Runs `jobctl --db DB ARGS` as the user `nobody` (no groups).
    static func jobctlAsNobody(_ database: String, _ arguments: [String], in directory: String) throws -> ProcessOutput {
        let nobody = try #require(getpwnam("nobody")).pointee
        return try runProcess("/usr/bin/setpriv", ["--reuid=\(nobody.pw_uid)", "--regid=\(nobody.pw_gid)", "--clear-groups", "--",
                                                   PackagePaths.jobctlBinary, "--db", database] + arguments,
                              environment: ["NO_COLOR": "1", "HOME": otherUsersHome], currentDirectory: directory)
    }

    /// The `HOME` a command run as another user gets, as `su` and `runuser` give one: `setpriv` keeps the
    /// tests' own (root's), whose `~/.config` that user may not search, and jobctl refuses to guess whether
    /// a configuration file is there (`Configuration.isPresent`).
    static let otherUsersHome = "/nonexistent"

    @Test("a database in a folder this user may not search, or a file it may not read, is named as a permission problem",
          .enabled(if: canRunAsNobody, "needs root (to run jobctl as the user nobody with setpriv)"))
    func unreachableOrUnreadable() throws {
        let workspace = try CLIWorkspace("db-permissions")
        defer { workspace.directory.remove() }
        let folder = workspace.directory.file("private")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let database = folder + "/jobctl.db"
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: \"x\", destination: \"file://b/x\"}\n")
        #expect(try runProcess(PackagePaths.jobctlBinary, ["--db", database, "migrate"]).status == 0)
        chmod(workspace.directory.path, 0o755)
        chmod(manifest, 0o644)

        // The folder holding it may not be searched by nobody: the database exists but cannot be reached.
        chmod(folder, 0o700)
        for arguments in [["list"], ["submit", manifest], ["worker", "--drain"]] {
            let output = try Self.jobctlAsNobody(database, arguments, in: workspace.directory.path)
            #expect(output.status == 1, "\(arguments): \(output.stderr)")
            #expect(output.stderr.contains("cannot reach the database") && output.stderr.contains("Permission denied"),
                    "\(arguments): \(output.stderr)")
            #expect(!output.stderr.contains("no database at") && !output.stderr.contains("cannot create"), "\(arguments): \(output.stderr)")
        }

        // The folder is open, the file (root's, 0600) is not: its owner and mode are named.
        chmod(folder, 0o755)
        chmod(database, 0o600)
        for arguments in [["list"], ["show", "01ABCDEF"], ["worker", "--drain"]] {
            let output = try Self.jobctlAsNobody(database, arguments, in: workspace.directory.path)
            #expect(output.status == 1, "\(arguments): \(output.stderr)")
            #expect(output.stderr.contains("permission denied") && output.stderr.contains("owned by root")
                        && output.stderr.contains("mode 0600") && output.stderr.contains("nobody"), "\(arguments): \(output.stderr)")
        }
    }

    /// `backup` only reads the log, yet one of a read-only log (0444, its owner running it, not root) failed
    /// "the database is read-only … this command writes to it": the copy was made with the log's bits before
    /// SQLite wrote it, so SQLite could not write the copy. The copy is written first and then given the
    /// log's bits (read-only too).
    @Test("backup of a read-only log by its owner writes a read-only copy",
          .enabled(if: canRunAsNobody, "needs root (to run jobctl as the user nobody with setpriv)"))
    func backupOfAReadOnlyLog() throws {
        let workspace = try CLIWorkspace("db-readonly-backup")
        defer { workspace.directory.remove() }
        let nobody = try #require(getpwnam("nobody")).pointee
        let folder = workspace.directory.file("state")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        chmod(workspace.directory.path, 0o755)
        chown(folder, nobody.pw_uid, nobody.pw_gid)
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: \"x\", destination: \"file://b/x\"}\n")
        chmod(manifest, 0o644)
        let database = folder + "/jobctl.db"
        #expect(try Self.jobctlAsNobody(database, ["submit", manifest], in: workspace.directory.path).status == 0)
        chmod(database, 0o444)
        let copy = folder + "/copy.db"
        let backup = try Self.jobctlAsNobody(database, ["backup", copy], in: workspace.directory.path)
        #expect(backup.status == 0, "\(backup.stdout)\(backup.stderr)")
        var info = stat()
        #expect(stat(copy, &info) == 0 && info.st_mode & 0o777 == 0o444 && info.st_uid == nobody.pw_uid, "mode \(String(info.st_mode & 0o777, radix: 8))")
        let listed = try Self.jobctlAsNobody(copy, ["list", "--json"], in: workspace.directory.path)
        #expect(listed.status == 0 && listed.stdout.contains("upload-data"), "\(listed.stderr)")
    }

    /// SQLite gives the `-wal` and `-shm` files a reader creates the database's mode: a `list` while the
    /// owner had made the database read-only left them 0444, and after `chmod 644` every write failed
    /// "the database is read-only" (a worker retried for 30 s and exited 1), naming neither file. The
    /// owner's writer now gives its own such files the database's mode; one another user left is named.
    @Test("a -shm and -wal a reader left while the database was read-only do not keep its owner's writes out",
          .enabled(if: canRunAsNobody, "needs root (to run jobctl as the user nobody with setpriv)"))
    func sidecarsLeftReadOnlyByAReader() throws {
        let workspace = try CLIWorkspace("db-sidecar-modes")
        defer { workspace.directory.remove() }
        let nobody = try #require(getpwnam("nobody")).pointee
        let folder = workspace.directory.file("state")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        chmod(workspace.directory.path, 0o755)
        chown(folder, nobody.pw_uid, nobody.pw_gid)
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: \"x\", destination: \"file://b/x\"}\n")
        chmod(manifest, 0o644)
        let database = folder + "/jobctl.db"
        #expect(try Self.jobctlAsNobody(database, ["submit", manifest], in: workspace.directory.path).status == 0)
        chmod(database, 0o444)
        let read = try Self.jobctlAsNobody(database, ["list"], in: workspace.directory.path)
        #expect(read.status == 0, "\(read.stderr)")
        chmod(database, 0o644)
        let submitted = try Self.jobctlAsNobody(database, ["submit", manifest], in: workspace.directory.path)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        for suffix in ["-wal", "-shm"] {
            guard let mode = Self.ownership(database + suffix)?.mode else { continue }
            #expect(mode & 0o777 == 0o644, "\(suffix): \(String(mode, radix: 8))")
        }

        // Another user's -shm that this user may not write: named, with what to do.
        let shm = database + "-shm"
        _ = unlink(shm)
        #expect(FileManager.default.createFile(atPath: shm, contents: Data(count: 32_768)))
        chmod(shm, 0o444)
        chown(shm, 61_999, 61_999)
        let refused = try Self.jobctlAsNobody(database, ["submit", manifest], in: workspace.directory.path)
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("may not by this user (mode 0444, owner uid 61999)") && refused.stderr.contains("-shm"),
                "\(refused.stderr)")
    }

    // MARK: - A database shared by group (the service setup)

    /// Two unprivileged users sharing a group, as the worker unit sets them up: `worker` (its primary
    /// group the shared one, as `User=jobctl`, `Group=jobctl`) and `operator` (a group of its own, the
    /// shared one added: `usermod -aG jobctl`). Ids no user or group has, so nothing is added to the system.
    struct SharedGroup {
        let group: gid_t
        let worker: uid_t
        let operatorUser: uid_t
        let operatorGroup: gid_t

        init() throws {
            var free: [UInt32] = []
            var id: UInt32 = 61_000
            while free.count < 4 && id < 65_000 {
                if getpwuid(id) == nil && getgrgid(id) == nil { free.append(id) }
                id += 1
            }
            try #require(free.count == 4, "no free uid/gid numbers between 61000 and 65000")
            (group, worker, operatorUser, operatorGroup) = (free[0], free[1], free[2], free[3])
        }

        /// `setpriv` arguments that become the worker or the operator.
        func identity(operator isOperator: Bool) -> [String] {
            isOperator ? ["--reuid=\(operatorUser)", "--regid=\(operatorGroup)", "--groups=\(group)"]
                : ["--reuid=\(worker)", "--regid=\(group)", "--clear-groups"]
        }

        /// Runs `jobctl --db DB ARGS` as the worker or the operator, under `umask`.
        func jobctl(operator isOperator: Bool, umask: String, _ database: String, _ arguments: [String],
                    in directory: String) throws -> ProcessOutput {
            try runProcess("/bin/sh", ["-c", "umask \(umask) && exec \"$@\"", "sh", "/usr/bin/setpriv"]
                               + identity(operator: isOperator) + ["--", PackagePaths.jobctlBinary, "--db", database] + arguments,
                           environment: ["NO_COLOR": "1", "HOME": DatabasePermissionTests.otherUsersHome], currentDirectory: directory)
        }
    }

    /// The state folder as `StateDirectory=jobctl` with `StateDirectoryMode=2770` makes it: the worker's,
    /// the shared group's, setgid (what is created in it takes that group, whoever creates it).
    static func stateFolder(_ workspace: CLIWorkspace, _ users: SharedGroup) throws -> String {
        chmod(workspace.directory.path, 0o755)
        let folder = workspace.directory.file("state")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try #require(chown(folder, users.worker, users.group) == 0 && chmod(folder, 0o2770) == 0)
        return folder
    }

    /// Owner, group and permission bits of `path`.
    static func ownership(_ path: String) -> (uid: uid_t, gid: gid_t, mode: mode_t)? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return (info.st_uid, info.st_gid, info.st_mode & 0o7777)
    }

    @Test("the worker creates the database under UMask=0007 (0660), a member of its group submits while it runs, and it runs the job",
          .enabled(if: canRunAsNobody, "needs root (to run jobctl as two unprivileged users with setpriv)"))
    func groupMemberSubmitsToTheWorkersDatabase() throws {
        let users = try SharedGroup()
        let workspace = try CLIWorkspace("db-shared-worker-first")
        defer { workspace.directory.remove() }
        let folder = try Self.stateFolder(workspace, users)
        let database = folder + "/jobctl.db"
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: \"shared\", destination: \"file://b/x\"}\n")
        chmod(manifest, 0o644)

        let migrate = try users.jobctl(operator: false, umask: "0007", database, ["migrate"], in: folder)
        try #require(migrate.status == 0, "\(migrate.stderr)")
        for path in [database, database + "-writer-lock"] {
            let made = try #require(Self.ownership(path))
            #expect(made.uid == users.worker && made.gid == users.group && made.mode == 0o660, "\(path): \(made)")
        }

        // The worker keeps the database open (its -wal and -shm, with the database's mode) while the
        // operator, under the common umask 022, submits.
        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: "/bin/sh")
        worker.arguments = ["-c", "umask 0007 && exec \"$@\"", "sh", "/usr/bin/setpriv"] + users.identity(operator: false)
            + ["--", PackagePaths.jobctlBinary, "--db", database, "worker"]
        worker.environment = ProcessInfo.processInfo.environment.merging(["NO_COLOR": "1", "HOME": Self.otherUsersHome]) { _, new in new }
        worker.currentDirectoryURL = URL(fileURLWithPath: folder)
        worker.standardOutput = FileHandle.nullDevice
        worker.standardError = FileHandle.nullDevice
        try worker.run()
        defer {
            _ = signalIfRunning(worker, SIGTERM)
            worker.waitForExit()
        }
        #expect(eventuallyTrue(seconds: 20) { FileManager.default.fileExists(atPath: database + "-shm") })

        let submit = try users.jobctl(operator: true, umask: "0022", database, ["submit", manifest], in: folder)
        #expect(submit.status == 0, "\(submit.stderr)")
        let id = submit.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(id.count == 26, "\(submit.stdout)")
        let done = try eventuallyTrue(seconds: 20) {
            try users.jobctl(operator: true, umask: "0022", database, ["show", id], in: folder).stdout.contains("succeeded")
        }
        #expect(done, "the worker did not run the operator's job")
        #expect((try? String(contentsOfFile: folder + "/buckets/b/x", encoding: .utf8)) == "shared")
        // Nothing the operator's commands left beside it belongs to its own group.
        for name in try FileManager.default.contentsOfDirectory(atPath: folder) where name.hasPrefix("jobctl.db") {
            let file = try #require(Self.ownership(folder + "/" + name))
            #expect(file.gid == users.group && file.mode & 0o007 == 0, "\(name): \(file)")
        }
    }

    @Test("a member of the group creates the database under umask 0007 by submitting, and the worker runs its job",
          .enabled(if: canRunAsNobody, "needs root (to run jobctl as two unprivileged users with setpriv)"))
    func workerRunsWhatAGroupMemberCreated() throws {
        let users = try SharedGroup()
        let workspace = try CLIWorkspace("db-shared-operator-first")
        defer { workspace.directory.remove() }
        let folder = try Self.stateFolder(workspace, users)
        let database = folder + "/jobctl.db"
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: \"first\", destination: \"file://b/y\"}\n")
        chmod(manifest, 0o644)

        let submit = try users.jobctl(operator: true, umask: "0007", database, ["submit", manifest], in: folder)
        try #require(submit.status == 0, "\(submit.stderr)")
        for path in [database, database + "-writer-lock"] {
            let made = try #require(Self.ownership(path))
            #expect(made.uid == users.operatorUser && made.gid == users.group && made.mode == 0o660, "\(path): \(made)")
        }

        let drain = try users.jobctl(operator: false, umask: "0007", database, ["worker", "--drain"], in: folder)
        #expect(drain.status == 0, "\(drain.stderr)")
        let show = try users.jobctl(operator: true, umask: "0007", database, ["show", submit.stdout.trimmingCharacters(in: .whitespacesAndNewlines)],
                                    in: folder)
        #expect(show.stdout.contains("succeeded"), "\(show.stdout)\(show.stderr)")
        #expect((try? String(contentsOfFile: folder + "/buckets/b/y", encoding: .utf8)) == "first")
    }

    @Test("a new database and its writer lock get mode 0660 when the umask lets the group write, else 0600: never any access for others",
          .enabled(if: canRunAsNobody, "needs root (to run jobctl as two unprivileged users with setpriv)"),
          arguments: [("0077", 0o600), ("0027", 0o600), ("0022", 0o600), ("0007", 0o660), ("0002", 0o660), ("0000", 0o660)] as [(String, mode_t)])
    func modeFollowsTheUmask(umask: String, expected: mode_t) throws {
        let users = try SharedGroup()
        let workspace = try CLIWorkspace("db-umask")
        defer { workspace.directory.remove() }
        let folder = try Self.stateFolder(workspace, users)
        let database = folder + "/jobctl.db"
        let migrate = try users.jobctl(operator: false, umask: umask, database, ["migrate"], in: folder)
        try #require(migrate.status == 0, "\(migrate.stderr)")
        #expect(Self.ownership(database)?.mode == expected, "umask \(umask)")
        #expect(Self.ownership(database + "-writer-lock")?.mode == expected, "umask \(umask)")

        // Group members may read and write it, or nothing (a group that may only read would leave, in
        // this folder it may write, -wal and -shm files of its own that lock the owner out of writing).
        let list = try users.jobctl(operator: true, umask: "0022", database, ["list"], in: folder)
        #expect((list.status == 0) == (expected == 0o660), "umask \(umask): \(list.stderr)")
        let wrote = try users.jobctl(operator: true, umask: "0022", database, ["migrate"], in: folder)
        #expect((wrote.status == 0) == (expected == 0o660), "umask \(umask): \(wrote.stderr)")
        // Whatever a group member's reading left beside it, the owner still writes.
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: \"x\", destination: \"file://b/x\"}\n")
        chmod(manifest, 0o644)
        let submit = try users.jobctl(operator: false, umask: umask, database, ["submit", manifest], in: folder)
        #expect(submit.status == 0, "umask \(umask): \(submit.stderr)")
    }

    @Test("a group member who makes the writer lock in a folder that is not setgid gives it the database's group and mode",
          .enabled(if: canRunAsNobody, "needs root (to run jobctl as two unprivileged users with setpriv)"))
    func writerLockTakesTheDatabasesGroup() throws {
        let users = try SharedGroup()
        let workspace = try CLIWorkspace("db-shared-lock-group")
        defer { workspace.directory.remove() }
        let folder = try Self.stateFolder(workspace, users)
        try #require(chmod(folder, 0o770) == 0)
        let database = folder + "/jobctl.db"
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-data, data: \"x\", destination: \"file://b/x\"}\n")
        chmod(manifest, 0o644)
        try #require(try users.jobctl(operator: false, umask: "0007", database, ["migrate"], in: folder).status == 0)
        try #require(unlink(database + "-writer-lock") == 0)

        // The operator's own group is not the database's: the lock it makes would be of no use to the worker.
        let submit = try users.jobctl(operator: true, umask: "0077", database, ["submit", manifest], in: folder)
        #expect(submit.status == 0, "\(submit.stderr)")
        let lock = try #require(Self.ownership(database + "-writer-lock"))
        #expect(lock.uid == users.operatorUser && lock.gid == users.group && lock.mode == 0o660, "\(lock)")
    }
}
