import Foundation
import Testing
import TestSupport

/// Databases set up as they are outside tests: roles whose default `search_path` ("$user", public) can
/// find more than one schema, another role that may create functions in `public`, and a server whose
/// strings are not standard-conforming. jobctl keeps to the one schema that holds its log, calls the
/// server's own functions whatever another schema defines, and reads its log under either string syntax.
@Suite("PostgreSQL schema, functions and string syntax of a session", .onTestThreads)
struct PostgresSchemaChoiceTests {
    /// A fresh database owned by a fresh login role, whose URL sets no search_path (the server's
    /// default: a schema named after the role first, then `public`).
    struct OwnedDatabase {
        let server: PostgresServer
        let name: String
        let owner: String
        let ownerURL: String
        let directory: TemporaryDirectory

        init(_ label: String) throws {
            server = try PostgresServer.shared()
            let suffix = UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
            name = "\(label)_\(suffix)"
            owner = "\(label)_own_\(suffix)"
            let password = "owner-" + UUID().uuidString.lowercased()
            try server.psql(database: "postgres", "CREATE ROLE \(owner) LOGIN PASSWORD '\(password)'")
            try server.psql(database: "postgres", "CREATE DATABASE \(name) OWNER \(owner)")
            // PostgreSQL 15 and later: `public` is its database owner's; earlier, anyone's.
            try server.psql(database: name, "GRANT CREATE ON SCHEMA public TO \(owner)")
            ownerURL = server.url(database: name, password: password, user: owner)
            directory = try TemporaryDirectory(label)
        }

        /// Runs `jobctl --db URL ARGS` (the owner's URL unless another is given).
        func jobctl(_ arguments: [String], url: String? = nil) throws -> ProcessOutput {
            try runProcess(PackagePaths.jobctlBinary, ["--db", url ?? ownerURL] + arguments,
                           environment: ["NO_COLOR": "1", "JOBCTL_BUCKETS": directory.file("buckets")],
                           currentDirectory: directory.path)
        }

        /// `sql` run as the superuser in the database; its unaligned output.
        @discardableResult
        func sql(_ text: String) throws -> String { try server.psql(database: name, text) }

        /// A manifest of `count` upload-data jobs named `label-N`.
        func manifest(_ label: String, count: Int) throws -> String {
            let path = directory.file("\(label).yaml")
            let lines = (1...count).map { "  - {kind: upload-data, data: \"\(label) \($0)\", destination: file://docs/\(label)-\($0).txt}" }
            try (["jobs:"] + lines).joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        func remove() { directory.remove() }
    }

    @Test("a schema named after the role, created after the log in public, gets no second log when a migration is pending")
    func userSchemaAfterTheLog() throws {
        let database = try OwnedDatabase("pgdollar")
        defer { database.remove() }
        let migrated = try database.jobctl(["migrate"])
        #expect(migrated.status == 0, "\(migrated.stderr)")
        let first = try database.jobctl(["submit", try database.manifest("first", count: 2)])
        #expect(first.status == 0, "\(first.stderr)")

        // The role gets a schema of its own, which its search path names first, and an upgrade is pending.
        try database.sql("CREATE SCHEMA \(database.owner) AUTHORIZATION \(database.owner)")
        // The newest: a ledger without a version below its newest is damaged, and refused.
        let latest = try database.sql("SELECT max(version) FROM public.schema_migrations")
        try database.sql("DELETE FROM public.schema_migrations WHERE version = \(latest)")

        let remigrated = try database.jobctl(["migrate"])
        print("migrate with a pending migration:", remigrated.status, remigrated.stdout, remigrated.stderr)
        #expect(remigrated.status == 0, "\(remigrated.stderr)")
        let second = try database.jobctl(["submit", try database.manifest("second", count: 1)])
        #expect(second.status == 0, "\(second.stderr)")
        let again = try database.jobctl(["migrate"])
        #expect(again.status == 0, "\(again.stderr)")

        let strayTables = try database.sql("SELECT count(*) FROM pg_class WHERE relnamespace = '\(database.owner)'::regnamespace")
        let ledger = try database.sql("SELECT count(*), bool_or(version = \(latest)) FROM public.schema_migrations")
        let known = try database.sql("SELECT count(*) FROM public.schema_migrations")
        print("tables in the role's schema:", strayTables, "public ledger (rows, has \(latest)):", ledger)
        #expect(strayTables == "0")
        #expect(ledger.hasSuffix("|t"), "\(ledger)")
        #expect(Int(known) ?? 0 >= 15)
        #expect(try database.sql("SELECT count(*) FROM public.jobs") == "3")

        let listed = try database.jobctl(["list", "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let jobs = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [Any]
        print("list shows", jobs?.count ?? -1, "jobs")
        #expect(jobs?.count == 3, "\(listed.stdout)")
        // The size `stats` reports is the log's tables', not the empty schema's.
        let stats = try database.jobctl(["stats", "--json"])
        let view = try JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any]
        print("stats database_bytes:", view?["database_bytes"] ?? "none")
        #expect((view?["database_bytes"] as? Int ?? 0) > 0, "\(stats.stdout)\(stats.stderr)")
    }

    @Test("a ledger alone in a schema the search path names first, as an earlier jobctl left it, is refused and nothing is built there")
    func strayLedgerRefused() throws {
        let database = try OwnedDatabase("pgstray")
        defer { database.remove() }
        #expect(try database.jobctl(["migrate"]).status == 0)
        #expect(try database.jobctl(["submit", try database.manifest("stray", count: 1)]).status == 0)
        try database.sql("""
            CREATE SCHEMA \(database.owner) AUTHORIZATION \(database.owner);
            CREATE TABLE \(database.owner).schema_migrations (LIKE public.schema_migrations INCLUDING ALL);
            INSERT INTO \(database.owner).schema_migrations SELECT * FROM public.schema_migrations WHERE version = 14;
            ALTER TABLE \(database.owner).schema_migrations OWNER TO \(database.owner)
            """)
        var outputs: [String] = []
        for command in [["migrate"], ["submit", try database.manifest("stray2", count: 1)], ["list"]] {
            let output = try database.jobctl(command)
            outputs.append("\(command[0]): \(output.status) \(output.stderr)")
            #expect(output.status != 0, "\(command): \(output.stdout)")
            #expect(output.stderr.contains("holds none of the log's tables") && output.stderr.contains("\"public\""), "\(output.stderr)")
        }
        print("with a stray ledger:", outputs)
        #expect(try database.sql("SELECT count(*) FROM pg_class WHERE relnamespace = '\(database.owner)'::regnamespace AND relkind = 'r'") == "1")
        #expect(try database.sql("SELECT count(*) FROM public.jobs") == "1")
    }

    @Test("migrate --grant with a schema named after the role grants on the log's tables and on nothing of that schema")
    func grantWithUserSchema() throws {
        let database = try OwnedDatabase("pggrant")
        defer { database.remove() }
        let worker = "\(database.name)_worker"
        let workerPassword = "worker-" + UUID().uuidString.lowercased()
        try database.server.psql(database: "postgres", "CREATE ROLE \(worker) LOGIN PASSWORD '\(workerPassword)'")
        let workerURL = database.server.url(database: database.name, password: workerPassword, user: worker)
        #expect(try database.jobctl(["migrate"]).status == 0)
        // The owner's own schema, with a table of its own that is nothing of jobctl's.
        try database.sql("""
            CREATE SCHEMA \(database.owner) AUTHORIZATION \(database.owner);
            CREATE TABLE \(database.owner).payroll (name text);
            ALTER TABLE \(database.owner).payroll OWNER TO \(database.owner)
            """)

        let granted = try database.jobctl(["migrate", "--grant", worker])
        print("migrate --grant:", granted.status, granted.stdout, granted.stderr)
        #expect(granted.status == 0, "\(granted.stderr)")
        let grants = try database.sql("""
            SELECT table_schema || '.' || table_name || ':' || string_agg(privilege_type, ',' ORDER BY privilege_type)
            FROM information_schema.role_table_grants WHERE grantee = '\(worker)' GROUP BY table_schema, table_name ORDER BY 1
            """).split(separator: "\n").map(String.init)
        print("the worker role's grants:", grants)
        #expect(!grants.contains { $0.hasPrefix("\(database.owner).") }, "\(grants)")
        #expect(grants.contains("public.events:INSERT,SELECT"), "\(grants)")
        #expect(grants.contains("public.jobs:DELETE,INSERT,SELECT,UPDATE"), "\(grants)")
        #expect(try database.sql("SELECT has_schema_privilege('\(worker)', '\(database.owner)', 'USAGE')") == "f")

        let submitted = try database.jobctl(["submit", try database.manifest("granted", count: 1)], url: workerURL)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let listed = try database.jobctl(["list"], url: workerURL)
        #expect(listed.status == 0, "\(listed.stderr)")
    }

    @Test("a worker role with a schema of its own meets a pending migration: refused twice, nothing built in its schema")
    func workerRoleSchemaWithPendingMigration() throws {
        let database = try OwnedDatabase("pgwrkschema")
        defer { database.remove() }
        let worker = "\(database.name)_worker"
        let workerPassword = "worker-" + UUID().uuidString.lowercased()
        try database.server.psql(database: "postgres", "CREATE ROLE \(worker) LOGIN PASSWORD '\(workerPassword)'")
        let workerURL = database.server.url(database: database.name, password: workerPassword, user: worker)
        #expect(try database.jobctl(["migrate", "--grant", worker]).status == 0)
        try database.sql("CREATE SCHEMA \(worker) AUTHORIZATION \(worker)")
        try database.sql("DELETE FROM public.schema_migrations WHERE version = (SELECT max(version) FROM public.schema_migrations)")

        var refusals: [String] = []
        for label in ["w1", "w2"] {
            let submitted = try database.jobctl(["submit", try database.manifest(label, count: 1)], url: workerURL)
            refusals.append("\(submitted.status) \(submitted.stderr)")
            #expect(submitted.status != 0, "\(submitted.stdout)")
            #expect(submitted.stderr.contains("42501"), "\(submitted.stderr)")
        }
        print("worker role with a pending migration:", refusals)
        #expect(try database.sql("SELECT count(*) FROM pg_class WHERE relnamespace = '\(worker)'::regnamespace") == "0")

        #expect(try database.jobctl(["migrate"]).status == 0)
        let submitted = try database.jobctl(["submit", try database.manifest("w3", count: 1)], url: workerURL)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        #expect(try database.sql("SELECT count(*) FROM public.jobs") == "1")
        #expect(try database.sql("SELECT count(*) FROM pg_class WHERE relnamespace = '\(worker)'::regnamespace") == "0")
    }

    @Test("a nextval(text) and setval(text, bigint) another role put in public are never called: tokens come from the sequence")
    func plantedFunctionsAreNotCalled() throws {
        let database = try OwnedDatabase("pgplant")
        defer { database.remove() }
        let planter = "\(database.name)_planter"
        try database.server.psql(database: "postgres", "CREATE ROLE \(planter) LOGIN")
        try database.sql("GRANT CREATE ON SCHEMA public TO \(planter)")
        // Each records its call and hands out a token of its own.
        try database.server.psql(database: database.name, user: planter, schema: "public", """
            CREATE TABLE public.planted_calls (fn text, arg text);
            GRANT INSERT, SELECT ON public.planted_calls TO PUBLIC;
            CREATE FUNCTION public.nextval(text) RETURNS bigint LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO public.planted_calls VALUES ('nextval', $1); RETURN 424242; END $$;
            CREATE FUNCTION public.setval(text, bigint) RETURNS bigint LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO public.planted_calls VALUES ('setval', $1); RETURN $2; END $$;
            CREATE FUNCTION public.currval(text) RETURNS bigint LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO public.planted_calls VALUES ('currval', $1); RETURN 424242; END $$
            """).checked()

        // An SQLite log with leases taken, copied in (which sets the sequences), then more work drained there.
        let lite = try CLIWorkspace("pgplant-lite")
        defer { lite.directory.remove() }
        let bucketEnvironment = ["JOBCTL_BUCKETS": database.directory.file("buckets")]
        #expect(try lite.jobctl(["submit", try database.manifest("lite", count: 2)], environment: bucketEnvironment).status == 0)
        let liteDrain = try lite.jobctl(["worker", "--drain", "--concurrency", "1"], environment: bucketEnvironment)
        #expect(liteDrain.status == 0, "\(liteDrain.stderr)")
        let copied = try lite.jobctl(["migrate", "--to", database.ownerURL])
        print("migrate --to:", copied.status, copied.stderr)
        #expect(copied.status == 0, "\(copied.stdout)\(copied.stderr)")

        #expect(try database.jobctl(["submit", try database.manifest("pg", count: 3)]).status == 0)
        let drained = try database.jobctl(["worker", "--drain", "--concurrency", "1"])
        #expect(drained.status == 0, "\(drained.stderr)")

        let calls = try database.sql("SELECT count(*) FROM public.planted_calls")
        let tokens = try database.sql("SELECT coalesce(max(lease), 0) FROM public.events")
        let sequence = try database.sql("SELECT last_value FROM public.lease_tokens")
        let succeeded = try database.sql("SELECT count(*) FROM public.jobs WHERE state = 'succeeded'")
        print("planted calls:", calls, "highest token in the log:", tokens, "sequence at:", sequence, "succeeded:", succeeded)
        #expect(calls == "0")
        #expect(tokens != "424242")
        #expect((Int(tokens) ?? 0) > 0 && (Int(tokens) ?? 0) <= (Int(sequence) ?? 0), "\(tokens) \(sequence)")
        #expect(succeeded == "5")
    }

    @Test("with standard_conforming_strings off, list, show, stats and a drain work")
    func nonStandardStrings() throws {
        let database = try OwnedDatabase("pgescape")
        defer { database.remove() }
        try database.server.psql(database: "postgres", "ALTER DATABASE \(database.name) SET standard_conforming_strings = off")
        #expect(try database.jobctl(["migrate"]).status == 0)
        let submitted = try database.jobctl(["submit", try database.manifest("escape", count: 2)])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 2)

        var failures: [String] = []
        for command in [["list"], ["show", ids[0]], ["stats"]] {
            let output = try database.jobctl(command)
            if output.status != 0 { failures.append("\(command[0]): \(output.stderr)") }
        }
        let drained = try database.jobctl(["worker", "--drain", "--concurrency", "1"])
        if drained.status != 0 { failures.append("worker --drain: \(drained.stderr)") }
        let listed = try database.jobctl(["list", "--json"])
        if listed.status != 0 { failures.append("list --json: \(listed.stderr)") }
        print("failures with standard_conforming_strings off:", failures)
        #expect(failures.isEmpty, "\(failures)")
        #expect(try database.sql("SELECT count(*) FROM public.jobs WHERE state = 'succeeded'") == "2")
    }
}

private extension ProcessOutput {
    /// Throws when the process failed.
    func checked() throws {
        guard status == 0 else { throw CLITestError("exit \(status): \(stderr)") }
    }
}
