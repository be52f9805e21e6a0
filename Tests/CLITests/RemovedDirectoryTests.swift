import Foundation
import Testing
import TestSupport

/// jobctl run in a directory that was removed under it (`cd d; rmdir ../d`): `getcwd` fails, and
/// Foundation's current directory is "", which made relative paths start at the root of the file system.
@Suite("a current directory removed under jobctl", .onTestThreads)
struct RemovedDirectoryTests {
    /// Runs `script` through bash in a folder of the workspace that the script removes first.
    static func inRemovedDirectory(_ workspace: CLIWorkspace, _ script: String, environment: [String: String] = [:]) throws -> ProcessOutput {
        try FileManager.default.createDirectory(atPath: workspace.directory.file("gone"), withIntermediateDirectories: true)
        return try runProcess("/bin/bash", ["-c", "cd gone && rmdir ../gone && \(script)"],
                              environment: environment.merging(["NO_COLOR": "1", "JOBCTL": PackagePaths.jobctlBinary, "DB": workspace.database]) { a, _ in a },
                              currentDirectory: workspace.directory.path)
    }

    @Test("a manifest's relative path read from standard input is refused (exit 65), not taken from the root; absolute paths still submit")
    func relativePathRefused() throws {
        let workspace = try CLIWorkspace("removed-cwd")
        defer { workspace.directory.remove() }
        let relative = try Self.inRemovedDirectory(workspace, """
            printf -- '- {kind: download-file, source: "file:///etc/hostname", destination: "rel/out.txt"}\\n' | "$JOBCTL" --db "$DB" submit -
            """)
        #expect(relative.status == 65, "\(relative.status) \(relative.stdout) \(relative.stderr)")
        #expect(relative.stderr.contains("'destination' 'rel/out.txt' is relative, and the current directory cannot be read"), "\(relative.stderr)")
        let absolute = try Self.inRemovedDirectory(workspace, """
            printf -- '- {kind: download-file, source: "file:///etc/hostname", destination: "\(workspace.directory.file("out.txt"))"}\\n' | "$JOBCTL" --db "$DB" submit -
            """)
        #expect(absolute.status == 0, "\(absolute.stderr)")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(jobs.map { $0["destination"] as? String } == [workspace.directory.file("out.txt")])
    }

    /// A relative JOBCTL_BUCKETS names a folder of the current directory. Removed, that folder is gone: the
    /// job fails saying so, instead of writing into the folder of that name at the root (here the
    /// workspace's own `buckets`, written relative to the root).
    @Test("a relative JOBCTL_BUCKETS is not looked up at the root when the current directory was removed")
    func relativeBucketsNotAtTheRoot() throws {
        let workspace = try CLIWorkspace("removed-cwd-buckets")
        defer { workspace.directory.remove() }
        let atRoot = workspace.directory.file("buckets")
        try FileManager.default.createDirectory(atPath: atRoot + "/b", withIntermediateDirectories: true)
        _ = try workspace.submit("- {kind: upload-data, data: payload, destination: \"file://b/x.txt\"}\n")
        let worker = try Self.inRemovedDirectory(workspace, "\"$JOBCTL\" --db \"$DB\" worker --drain",
                                                 environment: ["JOBCTL_BUCKETS": String(atRoot.dropFirst())])
        #expect(worker.status == 2, "\(worker.status) \(worker.stderr)")
        #expect(worker.stderr.contains("bucketNotFound"), "\(worker.stderr)")
        #expect(!FileManager.default.fileExists(atPath: atRoot + "/b/x.txt"), "the upload went to the root's \(atRoot.dropFirst())")
    }
}
