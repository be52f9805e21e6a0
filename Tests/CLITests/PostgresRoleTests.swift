import Foundation
import Testing
import TestSupport

/// An operator's PostgreSQL setup where the workers do not own the tables: the owner migrates and
/// grants (`jobctl migrate --grant ROLE`), every command runs as the worker role, and that role cannot
/// change the log even by hand.
@Suite("PostgreSQL worker role", .onTestThreads)
struct PostgresRoleTests {
    /// Runs `jobctl --db URL ARGS` in `directory`.
    private static func jobctl(_ url: String, _ arguments: [String], in directory: TemporaryDirectory) throws -> ProcessOutput {
        try runProcess(PackagePaths.jobctlBinary, ["--db", url] + arguments,
                       environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": directory.file("buckets")],
                       currentDirectory: directory.path)
    }

    @Test("the owner migrates and grants; the worker role submits, controls, drains and replays, and cannot change the log")
    func workerRoleRunsEverythingButCannotRewriteHistory() throws {
        let server = try PostgresServer.shared()
        let roles = try server.makeRoles("jobrole")
        let directory = try TemporaryDirectory("pg-role")
        defer { directory.remove() }
        var outputs: [ProcessOutput] = []
        defer {
            for output in outputs {
                #expect(!output.stdout.contains(roles.workerPassword) && !output.stderr.contains(roles.workerPassword))
            }
        }

        // The owner creates the schema; before the grant the worker role can read nothing.
        let migrated = try Self.jobctl(roles.ownerURL, ["migrate"], in: directory)
        outputs.append(migrated)
        #expect(migrated.status == 0, "\(migrated.stderr)")
        let refused = try Self.jobctl(roles.workerURL, ["list"], in: directory)
        outputs.append(refused)
        #expect(refused.status == 1, "\(refused.stdout)")

        // The grant: printed, idempotent, and as JSON.
        let granted = try Self.jobctl(roles.ownerURL, ["migrate", "--grant", roles.worker], in: directory)
        outputs.append(granted)
        #expect(granted.status == 0, "\(granted.stderr)")
        #expect(granted.stdout.contains("schema is up to date"))
        #expect(granted.stdout.contains("granted \(roles.worker): USAGE on the schema; SELECT, INSERT on events"), "\(granted.stdout)")
        let again = try Self.jobctl(roles.ownerURL, ["migrate", "--grant", roles.worker, "--json"], in: directory)
        #expect(again.status == 0, "\(again.stderr)")
        let view = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
        #expect(view["granted"] as? String == roles.worker)
        #expect((view["privileges"] as? [String])?.contains("SELECT on schema_migrations") == true, "\(view)")

        // Exactly the privileges the README lists, read back from the server's catalog.
        let privileges = try server.psql(database: "postgres", """
            SELECT table_name || ':' || string_agg(privilege_type, ',' ORDER BY privilege_type)
            FROM information_schema.role_table_grants
            WHERE grantee = '\(roles.worker)' AND table_schema = '\(roles.schema)' GROUP BY table_name ORDER BY table_name
            """)
        #expect(privileges.split(separator: "\n") == [
            "archive_authorisations:SELECT", "blobs:INSERT,SELECT", "events:INSERT,SELECT", "expired_blobs:SELECT",
            "job_dependencies:DELETE,INSERT,SELECT,UPDATE", "jobs:DELETE,INSERT,SELECT,UPDATE", "leases:DELETE,INSERT,SELECT,UPDATE",
            "schema_migrations:SELECT", "sweep_watermarks:INSERT,SELECT,UPDATE",
        ], "\(privileges)")

        // Everything a worker machine and an operator's CLI do, as the worker role.
        let manifest = directory.file("jobs.yaml")
        try """
            jobs:
              - {kind: upload-data, data: "one", destination: file://docs/one.txt}
              - {kind: upload-data, data: "two", destination: file://docs/two.txt}
              - {kind: upload-data, data: "three", destination: file://docs/three.txt}
              - {kind: download-memory, source: file://docs/one.txt, max_size: 1KiB, priority: -1}
            """.write(toFile: manifest, atomically: true, encoding: .utf8)
        let submitted = try Self.jobctl(roles.workerURL, ["submit", manifest], in: directory)
        outputs.append(submitted)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 4)
        for command in [["pause", ids[1]], ["cancel", ids[2]], ["resume", ids[1]]] {
            let control = try Self.jobctl(roles.workerURL, command, in: directory)
            outputs.append(control)
            #expect(control.status == 0, "\(command): \(control.stderr)")
        }
        let worker = try Self.jobctl(roles.workerURL, ["worker", "--drain", "--concurrency", "1"], in: directory)
        outputs.append(worker)
        #expect(worker.status == 0, "\(worker.stdout)\(worker.stderr)")
        let list = try Self.jobctl(roles.workerURL, ["list", "--json"], in: directory)
        outputs.append(list)
        let jobs = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]])
        let states = Dictionary(uniqueKeysWithValues: jobs.compactMap { job in
            (job["id"] as? String).map { ($0, job["state"] as? String ?? "") }
        })
        #expect(states == [ids[0]: "succeeded", ids[1]: "succeeded", ids[2]: "cancelled", ids[3]: "succeeded"], "\(states)")
        let result = try Self.jobctl(roles.workerURL, ["result", ids[3]], in: directory)
        outputs.append(result)
        #expect(result.status == 0 && result.stdout == "one", "\(result.stdout)\(result.stderr)")
        for command in [["replay", "--verify"], ["replay"], ["history", ids[1]], ["audit"], ["stats"]] {
            let output = try Self.jobctl(roles.workerURL, command, in: directory)
            outputs.append(output)
            #expect(output.status == 0, "\(command): \(output.stdout)\(output.stderr)")
        }

        // By hand, the worker role cannot rewrite history: each statement is refused by the privilege
        // system (SQLSTATE 42501) before any trigger runs, and the log is unchanged.
        let before = try server.psql(database: "postgres", "SELECT count(*) || ':' || max(seq) FROM \(roles.schema).events")
        let forbidden = [
            "DELETE FROM events",
            "UPDATE events SET actor = 'forged'",
            "TRUNCATE events",
            "ALTER TABLE events DISABLE TRIGGER ALL",
            "DROP TABLE events",
            "DROP TRIGGER events_refuse_delete ON events",
            "UPDATE blobs SET data = ''",
            "DELETE FROM blobs",
            "SELECT setval('lease_tokens', 1)",
        ]
        for statement in forbidden {
            let output = try server.psql(database: "postgres", user: roles.worker, schema: roles.schema, statement)
            #expect(output.status != 0, "\(statement) was allowed")
            #expect(output.stderr.contains("ERROR:  42501:"), "\(statement): \(output.stderr)")
        }
        // What it may do by hand it may do: read the log.
        let readable = try server.psql(database: "postgres", user: roles.worker, schema: roles.schema, "SELECT count(*) FROM events")
        #expect(readable.status == 0 && readable.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == before.split(separator: ":").first.map(String.init),
                "\(readable.stdout)\(readable.stderr)")
        #expect(try server.psql(database: "postgres", "SELECT count(*) || ':' || max(seq) FROM \(roles.schema).events") == before)
        // And it cannot migrate: a command that would is refused with the remedy.
        let notOwner = try Self.jobctl(roles.workerURL, ["migrate", "--grant", roles.owner], in: directory)
        outputs.append(notOwner)
        #expect(notOwner.status == 1)
        #expect(notOwner.stderr.contains("does not own jobctl's tables") && notOwner.stderr.contains("with the owner's URL"),
                "\(notOwner.stderr)")
    }

    /// `jobctl help migrate` said --grant gives "SELECT, INSERT, UPDATE and DELETE on the job projection,
    /// the leases and any other table": the archive's tables are read-only for the role and no watermark is
    /// ever deleted. Each table's privileges, as the server reports them after the grant, must be the ones
    /// the help names for it (or for "any other table").
    @Test("help migrate names, for every table, exactly the privileges --grant gives")
    func helpSaysWhatIsGranted() throws {
        let server = try PostgresServer.shared()
        let roles = try server.makeRoles("helprole")
        let directory = try TemporaryDirectory("pg-role-help")
        defer { directory.remove() }
        let granted = try Self.jobctl(roles.ownerURL, ["migrate", "--grant", roles.worker], in: directory)
        try #require(granted.status == 0, "\(granted.stderr)")
        let catalog = try server.psql(database: "postgres", """
            SELECT table_name || ':' || string_agg(privilege_type, ',' ORDER BY privilege_type)
            FROM information_schema.role_table_grants
            WHERE grantee = '\(roles.worker)' AND table_schema = '\(roles.schema)' GROUP BY table_name ORDER BY table_name
            """)
        let help = try runProcess(PackagePaths.jobctlBinary, ["help", "migrate"]).stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        let said = try #require(help.firstMatch(of: /what `jobctl worker` and every other command need and nothing else: (.+?)\. It cannot/)?.1,
                                "help migrate: \(help)")
        // "SELECT and INSERT on events and blobs; SELECT on schema_migrations, …": privileges by table.
        func names(_ list: Substring) -> [String] {
            list.replacingOccurrences(of: " and ", with: ", ").components(separatedBy: ", ")
        }
        var byTable: [String: Set<String>] = [:]
        for clause in said.split(separator: "; ") {
            let parts = clause.components(separatedBy: " on ")
            guard parts.count == 2 else { continue }
            for table in names(Substring(parts[1])) { byTable[table] = Set(names(Substring(parts[0]))) }
        }
        let rows = catalog.split(separator: "\n")
        #expect(rows.count >= 9, "\(catalog)")
        for row in rows {
            let fields = row.split(separator: ":")
            let table = String(fields[0]), privileges = Set(fields[1].split(separator: ",").map(String.init))
            #expect((byTable[table] ?? byTable["any other table"]) == privileges,
                    "\(table) has \(privileges.sorted()); help migrate says \(byTable[table].map { $0.sorted() } ?? []) (\(said))")
        }
    }

    @Test("migrate --grant names a role that exists, and only on PostgreSQL")
    func grantRefusals() throws {
        let server = try PostgresServer.shared()
        let roles = try server.makeRoles("jobroleno")
        let directory = try TemporaryDirectory("pg-role-refusals")
        defer { directory.remove() }
        let missing = try Self.jobctl(roles.ownerURL, ["migrate", "--grant", "no_such_role_x"], in: directory)
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("there is no role 'no_such_role_x'"), "\(missing.stderr)")
        let itself = try Self.jobctl(roles.ownerURL, ["migrate", "--grant", roles.owner], in: directory)
        #expect(itself.status == 1)
        #expect(itself.stderr.contains("grant a different role"), "\(itself.stderr)")
        let sqlite = try Self.jobctl(directory.file("jobctl.db"), ["migrate", "--grant", roles.worker], in: directory)
        #expect(sqlite.status == 64)
        #expect(sqlite.stderr.contains("--grant applies only to a PostgreSQL database"), "\(sqlite.stderr)")
        let empty = try Self.jobctl(roles.ownerURL, ["migrate", "--grant="], in: directory)
        #expect(empty.status == 64)
        #expect(empty.stderr.contains("--grant expects a PostgreSQL role name"), "\(empty.stderr)")
    }
}
