import Foundation
import Testing
import TestSupport

/// `migrate` and `replay --verify` on a log whose schema was changed by hand: `migrate` said "schema is
/// up to date" and `replay --verify` "projection matches" (exit 0) with an index or a table gone, as
/// long as the ledger listed every migration; `audit` then failed "no such index".
@Suite("schema damage commands", .onTestThreads) struct SchemaDamageCommandTests {
    @Test func migrateAndVerifySayWhatIsMissing() throws {
        let workspace = try CLIWorkspace("schema-damage")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let clean = try workspace.jobctl(["migrate"])
        #expect(clean.status == 0 && clean.stdout.contains("schema is up to date"), "\(clean.stdout)\(clean.stderr)")
        let dropped = try runProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1]); c.execute('DROP INDEX jobs_created'); c.commit()
            """, workspace.database])
        try #require(dropped.status == 0, "\(dropped.stderr)")
        let migrate = try workspace.jobctl(["migrate"])
        #expect(migrate.status == 1, "\(migrate.stdout)\(migrate.stderr)")
        #expect(migrate.stderr.contains("problem: the log's schema lacks the index 'jobs_created'")
                && migrate.stderr.contains("CREATE INDEX jobs_created ON jobs (created_at_ms, seq)")
                && !migrate.stdout.contains("up to date"), "\(migrate.stdout)\(migrate.stderr)")
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 1 && verify.stdout.contains("lacks the index 'jobs_created'"), "\(verify.stdout)\(verify.stderr)")
    }
}
