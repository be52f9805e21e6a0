import Foundation
import Testing
import TestSupport

/// The event log's disk fills: a worker says so plainly, a drain ends (it used to retry for ever), and
/// nothing is lost — once space is freed, the next drain finishes every job.
@Suite("the event log's disk is full", .onTestThreads)
struct FullDatabaseDiskTests {
    /// `jobctl --db DB ARGS` in the workspace, its buckets there too (not on the small disk).
    private static func jobctl(_ database: String, _ workspace: CLIWorkspace, _ arguments: [String]) throws -> ProcessOutput {
        try runProcess(PackagePaths.jobctlBinary, ["--db", database] + arguments,
                       environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets")],
                       currentDirectory: workspace.directory.path)
    }

    /// Fills the file system of `folder` with a file `name`, leaving about `leftKiB` (0: every block).
    private static func fill(_ folder: String, _ name: String, leavingKiB leftKiB: Int) throws {
        var stats = statvfs()
        try #require(statvfs(folder, &stats) == 0)
        let free = Int(stats.f_bavail) * Int(stats.f_frsize) / 1024
        // dd stops at the end of the space (and says so, exiting 1) when `count` asks for more.
        let count = leftKiB == 0 ? free + 1024 : max(0, free - leftKiB)
        _ = try runProcess("/bin/dd", ["if=/dev/zero", "of=\(folder)/\(name)", "bs=1k", "count=\(count)"])
    }

    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func aDrainStopsSayingSoAndTheNextFinishes() throws {
        let workspace = try CLIWorkspace("full-db-disk")
        defer { workspace.directory.remove() }
        let filesystem = try SmallFilesystem(at: workspace.directory.file("small"), size: "8m")
        defer { filesystem.unmount() }
        let small = filesystem.path
        let database = small + "/jobctl.db"
        let manifest = try workspace.write("jobs.yaml", (0..<120).map {
            "- {kind: upload-data, data: \"\(String(repeating: "x", count: 100)) \($0)\", destination: \"file://full/f\($0).txt\"}"
        }.joined(separator: "\n"))
        let submitted = try Self.jobctl(database, workspace, ["submit", manifest])
        try #require(submitted.status == 0, "\(submitted.stderr)")

        // Space for the worker to open the log, not for its commits: the drain stops on its own.
        try Self.fill(small, "filler-1", leavingKiB: 120)
        let started = Date()
        let stopped = try Self.jobctl(database, workspace, ["worker", "--drain", "--lease", "1s", "--concurrency", "4"])
        #expect(stopped.status == 1, "\(stopped.stderr)")
        #expect(Date().timeIntervalSince(started) < 60)
        #expect(stopped.stderr.contains("Error: the drain stopped: the event log kept failing for"), "\(stopped.stderr)")
        #expect(stopped.stderr.contains("full"), "\(stopped.stderr)")

        // No room even to open it: the system's own word, not only "disk I/O error".
        try Self.fill(small, "filler-2", leavingKiB: 0)
        let refused = try Self.jobctl(database, workspace, ["worker", "--drain", "--lease", "1s"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("No space left on device") || refused.stderr.contains("full"), "\(refused.stderr)")

        // Space freed: the leases of the first drain's jobs expire and the next drain runs every job once.
        for name in (try FileManager.default.contentsOfDirectory(atPath: small)) where name.hasPrefix("filler") {
            try FileManager.default.removeItem(atPath: small + "/" + name)
        }
        Thread.sleep(forTimeInterval: 1.2)
        let drained = try Self.jobctl(database, workspace, ["worker", "--drain", "--lease", "5s", "--concurrency", "4"])
        #expect(drained.status == 0, "\(drained.stderr)")
        let listed = try Self.jobctl(database, workspace, ["list", "--state", "succeeded", "--json"])
        let jobs = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [Any])
        #expect(jobs.count == 120, "\(listed.stdout.prefix(300))")
        let verified = try Self.jobctl(database, workspace, ["replay", "--verify"])
        #expect(verified.status == 0 && verified.stdout.contains("projection matches"), "\(verified.stdout)\(verified.stderr)")
        let stored = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.file("buckets/full"))
        #expect(stored.filter { !$0.hasPrefix(".") }.count == 120)
    }
}
