import Foundation
import Testing
import TestSupport

/// A log damaged by hand or by a disk: what the commands that read payloads inside the database say.
@Suite("damaged payloads", .onTestThreads) struct MalformedPayloadTests {
    /// One event whose payload is not JSON made `stats` and `orphans` fail with SQLite's words ("SQLite
    /// error 1: malformed JSON in `SELECT type, code, …`"; PostgreSQL: "the database server refused the
    /// write (SQLSTATE 22P02 …)" for a read), naming no job and saying nothing of what to do. They say
    /// the log is damaged now, name the event and its job where SQLite can find it, and point at
    /// `jobctl replay --verify`.
    @Test("stats and orphans call an event whose payload is not JSON damage, and say what to run", arguments: StoreEngine.allCases)
    func aPayloadThatIsNotJSONIsCalledDamage(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("malformed-payload", engine: engine)
        defer { workspace.directory.remove() }
        let buckets = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let manifest = try workspace.write("m.yaml", """
            - {kind: upload-data, data: a, destination: file://b/a}
            - {kind: upload-data, data: b, destination: file://b/b}
            """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: buckets)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 2)
        #expect(try workspace.jobctl(["worker", "--drain"], environment: buckets).status == 0)
        switch engine {
        case .sqlite: try DamagedDatabaseTests.edit(workspace, engine, "DROP TRIGGER events_refuse_update")
        case .postgres: try DamagedDatabaseTests.edit(workspace, engine, "ALTER TABLE events DISABLE TRIGGER events_refuse_update")
        }
        try DamagedDatabaseTests.edit(workspace, engine, "UPDATE events SET data = '{\"spec\":' WHERE job_id = '\(ids[1])'")

        for command in [["stats"], ["orphans"]] {
            let output = try workspace.jobctl(command, environment: buckets)
            #expect(output.status == 1, "\(command): \(output.stdout)")
            #expect(output.stderr.contains("is not JSON") && output.stderr.contains("`jobctl replay --verify` checks the log"),
                    "\(command): \(output.stderr)")
            #expect(!output.stderr.contains("SQLite error") && !output.stderr.contains("refused the write"), "\(command): \(output.stderr)")
            if engine == .sqlite {
                #expect(output.stderr.contains("(job \(ids[1])) has a payload that is not JSON"), "\(command): \(output.stderr)")
            }
        }
    }
}
