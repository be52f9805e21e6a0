import EventStore
import Foundation
import Testing
import TestSupport

/// The built binary on a database written by the release before typed event payloads
/// (`Tests/EventStoreTests/Fixtures/release-1.db`, see the README there).
@Suite("jobctl on a database of the previous release", .onTestThreads) struct ReleaseDatabaseTests {
    /// The download-to-memory job of the fixture and the job rescued after its worker was killed.
    static let memoryJob = "01M8P28CEV3HP5QAF3E72D31YQ"
    static let rescuedJob = "01M8P28Q0D80VZK1ZP7DN97QDH"

    /// A workspace whose database is a copy of the fixture, migrated as after an upgrade (`jobctl
    /// migrate`: schema 3 adds the batch column, which no job of that release has).
    static func workspace(_ label: String) throws -> CLIWorkspace {
        let workspace = try CLIWorkspace(label)
        try FileManager.default.copyItem(atPath: "\(PackagePaths.root)/Tests/EventStoreTests/Fixtures/release-1.db",
                                         toPath: workspace.database)
        let migrated = try workspace.jobctl(["migrate"])
        guard migrated.status == 0, migrated.stdout.contains("applied migrations 3, 4") else {
            throw CLITestError("migrate exited \(migrated.status): \(migrated.stdout)\(migrated.stderr)")
        }
        return workspace
    }

    /// A backup is what one takes before an upgrade: the release's log (schema 2) is copied as it is,
    /// without migrating it (read-only commands refused it for its older schema), and the copy is then
    /// migrated and read like the original.
    @Test("backup copies the release's log at its own schema, unmigrated; the copy then migrates and verifies")
    func backupBeforeAnUpgrade() throws {
        let workspace = try CLIWorkspace("cli-release-backup")
        defer { workspace.directory.remove() }
        let fixture = "\(PackagePaths.root)/Tests/EventStoreTests/Fixtures/release-1.db"
        try FileManager.default.copyItem(atPath: fixture, toPath: workspace.database)
        let before = try Data(contentsOf: URL(fileURLWithPath: workspace.database))
        let copy = workspace.directory.file("before-upgrade.db")
        let view = try #require(try workspace.json(["backup", "--json", copy]) as? [String: Any])
        #expect(view["schema_version"] as? Int == 2 && view["jobs"] as? Int == 16 && view["events"] as? Int == 111, "\(view)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: workspace.database)) == before, "the log itself was changed")
        let run = { (arguments: [String]) throws -> ProcessOutput in
            try runProcess(PackagePaths.jobctlBinary, ["--db", copy] + arguments, environment: ["NO_COLOR": "1"])
        }
        let migrated = try run(["migrate"])
        #expect(migrated.status == 0 && migrated.stdout.contains("applied migrations 3, 4"), "\(migrated.stdout)\(migrated.stderr)")
        let verify = try run(["replay", "--verify"])
        #expect(verify.status == 0 && verify.stdout.contains("replayed 111 events into 16 jobs: projection matches"),
                "\(verify.stdout)\(verify.stderr)")
    }

    @Test("replay --verify, list, history, audit and result read it as they read a new one")
    func reads() throws {
        let workspace = try Self.workspace("cli-release-db")
        defer { workspace.directory.remove() }
        // Read-only commands never migrate: bring the release's schema 2 up to date first.
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0 && verify.stdout.contains("replayed 111 events into 16 jobs: projection matches"),
                "\(verify.stdout)\(verify.stderr)")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [Any])
        #expect(jobs.count == 16)
        let history = try workspace.jobctl(["history", Self.rescuedJob])
        #expect(history.status == 0 && history.stdout.contains("lease_expired"), "\(history.stderr)")
        let audit = try workspace.jobctl(["audit"])
        #expect(audit.status == 0, "\(audit.stderr)")
        let result = try workspace.jobctl(["result", Self.memoryJob])
        #expect(result.status == 0 && result.stdout.utf8.count == 71, "\(result.stderr)")
    }

    /// `submit`, `cancel` or a worker that found the log at an older schema upgraded it without a word:
    /// from then on no jobctl that knows only the older schema could open it, and an older worker still
    /// running on it wrote rows the new schema reads otherwise. Each says so now — a command on standard
    /// error, a worker as `log_upgraded` — and `migrate`, which prints what it applied, says it once.
    @Test("an upgrade made on the way by a command or a worker is said")
    func anUpgradeOnTheWayIsSaid() throws {
        let fixture = "\(PackagePaths.root)/Tests/EventStoreTests/Fixtures/release-1.db"
        let workspace = try CLIWorkspace("cli-release-upgrade")
        defer { workspace.directory.remove() }
        for (index, arguments) in [["cancel", Self.memoryJob], ["worker", "--drain", "--queue", "none"], ["migrate"]].enumerated() {
            let database = workspace.directory.file("log-\(index).db")
            try FileManager.default.copyItem(atPath: fixture, toPath: database)
            let output = try runProcess(PackagePaths.jobctlBinary, ["--db", database] + arguments, environment: ["NO_COLOR": "1"])
            let said = "the event log was upgraded to schema \(EventStore.knownSchemaVersion) (migrations 3–\(EventStore.knownSchemaVersion) applied)"
            switch arguments[0] {
            case "worker":
                let line = output.stderr.split(separator: "\n").first { $0.contains(" log_upgraded ") }
                #expect(line.map { $0.contains("to_schema=\(EventStore.knownSchemaVersion)") && $0.contains("first_migration=3") } == true,
                        "\(output.stderr)")
            case "migrate":
                #expect(output.status == 0 && output.stdout.contains("applied migrations 3, 4"), "\(output.stdout)\(output.stderr)")
                #expect(!output.stderr.contains(said), "\(output.stderr)")
            default:
                #expect(output.stderr.contains("note: " + said) && output.stderr.contains("the schemas a jobctl knows are in its --version"),
                        "\(output.stderr)")
            }
            // Once: the log is at the newest schema now.
            let again = try runProcess(PackagePaths.jobctlBinary, ["--db", database] + arguments, environment: ["NO_COLOR": "1"])
            #expect(!again.stderr.contains(said) && !again.stderr.contains("log_upgraded"), "\(again.stderr)")
        }
    }
}
