import Foundation
import Testing
import TestSupport

/// `audit` prints the same bytes whatever writes its rows: the outputs of the release-1 fixture's log
/// (16 jobs of every kind and outcome: errors, retries, cancellations, absent sizes and checksums) are
/// pinned to the files an earlier binary wrote (`Tests/EventStoreTests/Fixtures/release-1-audit.*`), on
/// both engines (PostgreSQL holds a copy made by `migrate --to`).
@Suite("audit's output, byte for byte", .onTestThreads) struct AuditOutputTests {
    static let fixtures = "\(PackagePaths.root)/Tests/EventStoreTests/Fixtures"

    @Test("audit --json, --csv and the table print the pinned bytes", arguments: StoreEngine.allCases)
    func pinnedBytes(engine: StoreEngine) throws {
        let workspace = try ReleaseDatabaseTests.workspace("audit-pinned")
        defer { workspace.directory.remove() }
        let database: String
        switch engine {
        case .sqlite:
            database = workspace.database
        case .postgres:
            database = try PostgresServer.shared().makeSchema("audit-pinned")
            let copied = try workspace.jobctl(["migrate", "--to", database])
            #expect(copied.status == 0, "\(copied.stdout)\(copied.stderr)")
        }
        for (arguments, file) in [(["--json"], "release-1-audit.json"), (["--csv"], "release-1-audit.csv"), ([], "release-1-audit.txt")] {
            let expected = try Data(contentsOf: URL(fileURLWithPath: "\(Self.fixtures)/\(file)"))
            for secrets in [[], ["--show-secrets"]] {
                let output = try runProcess(PackagePaths.jobctlBinary, ["--db", database, "audit"] + arguments + secrets,
                                            environment: ["NO_COLOR": "1", "COLUMNS": ""], currentDirectory: workspace.directory.path)
                #expect(output.status == 0, "\(output.stderr)")
                #expect(Array(output.stdout.utf8) == Array(expected), "audit \((arguments + secrets).joined(separator: " ")) differs from \(file):\n\(output.stdout)")
            }
        }
    }
}
