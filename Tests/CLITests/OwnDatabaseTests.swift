import Foundation
import Testing
import TestSupport

/// A job whose destination is the worker's own database (a typo: `destination: jobctl.db`) renamed the
/// download over the event log: every job's history gone, the worker stopping on its next write with
/// "the database file was replaced". Now the job fails (`invalidArgument`) and the log is whole.
@Suite("a worker's jobs never write over its own event log", .onTestThreads)
struct OwnDatabaseTests {
    @Test("a download onto the worker's database fails and the log keeps every job")
    func downloadOntoTheDatabaseFails() throws {
        let workspace = try CLIWorkspace("own-db")
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let uploaded = try workspace.submit("""
            jobs:
              - kind: upload-data
                data: "not a database"
                destination: file://b/obj.txt
            """)
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)
        let ids = try workspace.submit("""
            jobs:
              - kind: download-file
                source: file://b/obj.txt
                destination: \(workspace.database)
            """)
        let drain = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(drain.status == 2, "\(drain.stderr)")
        #expect(drain.stderr.contains("this worker's event log"), "\(drain.stderr)")
        #expect(!drain.stderr.contains("was replaced by another file"), "\(drain.stderr)")
        let shown = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        #expect(shown["state"] as? String == "failed", "\(shown)")
        let listed = try workspace.jobctl(["list", "--state", "succeeded"])
        #expect(listed.status == 0 && listed.stdout.contains(uploaded[0]), "the log lost its history: \(listed.stdout) \(listed.stderr)")
    }

    /// `result -o FILE` replaces a regular file at FILE; given the database (or a link to it), it wrote
    /// the job's result over the event log.
    @Test("result -o onto the command's own database is refused and the log keeps every job")
    func resultOntoTheDatabaseIsRefused() throws {
        let workspace = try CLIWorkspace("own-db-result")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("jobs:\n  - kind: upload-data\n    data: \"x\"\n    destination: file://b/obj.txt\n")
        #expect(try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]).status == 0)
        let linked = workspace.directory.file("linked.db")
        #expect(symlink(workspace.database, linked) == 0)
        for target in [workspace.database, linked] {
            let output = try workspace.jobctl(["result", ids[0], "-o", target])
            #expect(output.status != 0 && output.stderr.contains("event log"), "\(target): \(output.status) \(output.stderr)")
            let listed = try workspace.jobctl(["list", "--state", "succeeded"])
            #expect(listed.status == 0 && listed.stdout.contains(ids[0]), "-o \(target) lost the log: \(listed.stderr)")
        }
        let elsewhere = try workspace.jobctl(["result", ids[0], "-o", workspace.directory.file("result.json")])
        #expect(elsewhere.status == 0, "\(elsewhere.stderr)")
    }
}
