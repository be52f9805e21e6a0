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
                              environment: ["NO_COLOR": "1"], currentDirectory: directory)
    }

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
}
