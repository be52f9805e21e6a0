import Foundation
import JobModel

/// What a role that does not own jobctl's tables is granted so that workers and the CLI can run as it,
/// and nothing more: the log and the blobs are insert-only for it, the ledger read-only, the
/// projection and the leases read-write, the sequences usable but not settable.
///
/// The owner (the role that ran `jobctl migrate`) keeps everything else: only it can change or drop
/// tables, disable or drop the append-only triggers, truncate, or reset the fencing-token sequence
/// (`setval` needs UPDATE on a sequence, which is not granted). So a worker's session cannot rewrite
/// history even if it tried: `UPDATE`/`DELETE`/`TRUNCATE` on `events` fail with "permission denied"
/// before the triggers are reached.
///
/// See https://www.postgresql.org/docs/current/ddl-priv.html
public enum WorkerRoleGrants {
    /// The privileges of each table the worker role may touch. Tables a later migration adds that are
    /// not named here get `projectionPrivileges` (they are state derived from the log, like `jobs`).
    static let tablePrivileges: [(table: String, privileges: String)] = [
        ("events", "SELECT, INSERT"),
        ("blobs", "SELECT, INSERT"),
        ("schema_migrations", "SELECT"),
        ("jobs", projectionPrivileges),
        ("leases", projectionPrivileges),
        // `jobctl archive` is the owner's: the authorisations that let its one transaction delete from
        // `events` are not the worker's to write, and blob expiry is recorded by the archive only
        // (`result` reads it).
        ("archive_authorisations", "SELECT"),
        ("expired_blobs", "SELECT"),
        // The orphan sweep raises its host's watermark (an upsert of that host's row); nothing deletes one.
        ("sweep_watermarks", "SELECT, INSERT, UPDATE"),
    ]

    /// What the worker role gets on the projection, the leases and any other table but the log, the
    /// blobs and the ledger: `replay` rebuilds the projection (DELETE), a release removes a lease.
    static let projectionPrivileges = "SELECT, INSERT, UPDATE, DELETE"

    /// What the worker role gets on every sequence of the schema: `nextval` (fencing tokens, event seqs)
    /// and reading, never `setval`.
    static let sequencePrivileges = "USAGE, SELECT"

    /// The grants in words, for `jobctl help migrate`, from the same table as the grants themselves:
    /// "USAGE on the schema; SELECT and INSERT on events and blobs; SELECT on schema_migrations, …; USAGE
    /// and SELECT on every sequence" — tables with the same privileges named together. Written by hand,
    /// the help gave every table but the log, the blobs and the ledger all four privileges, where the
    /// archive's tables are read-only for the role and no watermark is ever deleted.
    public static var prose: String {
        var groups: [(privileges: String, tables: [String])] = []
        for (table, privileges) in tablePrivileges + [("any other table", projectionPrivileges)] {
            if let index = groups.firstIndex(where: { $0.privileges == privileges }) {
                groups[index].tables.append(table)
            } else {
                groups.append((privileges, [table]))
            }
        }
        let clauses = ["USAGE on the schema"]
            + groups.map { "\(Self.list($0.privileges.components(separatedBy: ", "))) on \(Self.list($0.tables))" }
            + ["\(Self.list(sequencePrivileges.components(separatedBy: ", "))) on every sequence"]
        return clauses.joined(separator: "; ")
    }

    /// `a`, `a and b`, `a, b and c`.
    private static func list(_ items: [String]) -> String {
        guard let last = items.last, items.count > 1 else { return items.joined() }
        return items.dropLast().joined(separator: ", ") + " and " + last
    }

    /// One line per grant, as `jobctl migrate --grant` prints them.
    public static var summary: [String] {
        ["USAGE on the schema"]
            + tablePrivileges.map { "\($0.privileges) on \($0.table)" }
            + ["\(projectionPrivileges) on any other table", "\(sequencePrivileges) on every sequence"]
    }
}

extension PostgresStore {
    /// Gives `role` (an existing role, not the owner) exactly what `WorkerRoleGrants` lists on every
    /// table and sequence of the log's schema, in one transaction. Whatever the role held there before
    /// is revoked first, so running it again (after an upgrade added tables) leaves exactly that set.
    ///
    /// Run by the tables' owner; any other role is refused by the server (`permission denied`, or
    /// "no privileges were granted" as a warning that leaves nothing granted).
    public func grantWorkerRole(_ role: String) throws(StoreError) {
        try writeTransaction { (connection) throws(StoreError) in
            try Self.grant(role, on: connection)
        }
    }

    /// Grants every worker role granted before (the roles other than the owner that may INSERT into
    /// `events`) its share again, so tables a migration added reach them; returns those roles.
    @discardableResult
    public func regrantWorkerRoles() throws(StoreError) -> [String] {
        let roles = try withConnection { (connection) throws(StoreError) in try Self.grantedWorkerRoles(connection) }
        for role in roles { try grantWorkerRole(role) }
        return roles
    }

    /// The schema of the log's `events` table (the one the session keeps to, `PostgresMigrator.keepToLogSchema`):
    /// what is granted, and nothing of any other schema.
    static let logNamespaceSQL = "(SELECT relnamespace FROM pg_catalog.pg_class WHERE oid = pg_catalog.to_regclass('events'::text))"

    /// The grants of `grantWorkerRole`, inside the caller's transaction.
    static func grant(_ role: String, on connection: PostgresConnection) throws(StoreError) {
        guard let names = try connection.row(
            "SELECT pg_catalog.quote_ident($1::text), coalesce((SELECT pg_catalog.quote_ident(n.nspname::text) FROM pg_catalog.pg_namespace n "
                + "WHERE n.oid = \(Self.logNamespaceSQL)), ''), current_user = $1::text, "
                + "EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1::text), "
                + "coalesce((SELECT pg_catalog.pg_has_role(current_user, relowner, 'USAGE'::text) FROM pg_catalog.pg_class "
                + "WHERE oid = pg_catalog.to_regclass('events'::text)), false)",
            [.text(role)], { (row) throws(StoreError) in
                (role: try row.string(0), schema: try row.string(1), isSelf: try row.flag(2), exists: try row.flag(3),
                 isOwner: try row.flag(4))
            }) else {
            throw StoreError.io("PostgreSQL returned no row for the role lookup")
        }
        // A role that does not own the tables would only get warnings ("no privileges were granted").
        guard names.isOwner else {
            throw StoreError.invalidControl("the role this command runs as does not own jobctl's tables, so it cannot grant "
                + "anything on them (SQLSTATE 42501): run `jobctl migrate --grant ROLE` with the owner's URL")
        }
        guard names.exists else {
            throw StoreError.invalidControl("there is no role '\(role)' on this server: create it first "
                + "(CREATE ROLE \(names.role) LOGIN PASSWORD '…'), then run `jobctl migrate --grant \(role)` again")
        }
        guard !names.isSelf else {
            throw StoreError.invalidControl("'\(role)' is the role this command runs as, which owns the tables: "
                + "grant a different role, the one the workers log in as (an owner needs no grant)")
        }
        let tables = try connection.rows(
            "SELECT c.relname::text, pg_catalog.quote_ident(c.relname::text), c.relkind::text FROM pg_catalog.pg_class c "
                + "WHERE c.relnamespace = \(Self.logNamespaceSQL) AND c.relkind IN ('r', 'p', 'S') ORDER BY c.relname",
            [], { (row) throws(StoreError) in (name: try row.string(0), quoted: try row.string(1), kind: try row.string(2)) })
        try connection.store("GRANT USAGE ON SCHEMA \(names.schema) TO \(names.role)")
        for table in tables {
            let qualified = "\(names.schema).\(table.quoted)"
            if table.kind == "S" {
                try connection.store("REVOKE ALL ON SEQUENCE \(qualified) FROM \(names.role)")
                try connection.store("GRANT \(WorkerRoleGrants.sequencePrivileges) ON SEQUENCE \(qualified) TO \(names.role)")
            } else {
                let privileges = WorkerRoleGrants.tablePrivileges.first { $0.table == table.name }?.privileges
                    ?? WorkerRoleGrants.projectionPrivileges
                try connection.store("REVOKE ALL ON TABLE \(qualified) FROM \(names.role)")
                try connection.store("GRANT \(privileges) ON TABLE \(qualified) TO \(names.role)")
            }
        }
    }

    /// The roles other than the owner that may INSERT into `events`: the worker roles granted before.
    static func grantedWorkerRoles(_ connection: PostgresConnection) throws(StoreError) -> [String] {
        try connection.rows(
            "SELECT DISTINCT r.rolname::text FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a "
                + "JOIN pg_catalog.pg_roles r ON r.oid = a.grantee WHERE c.oid = pg_catalog.to_regclass('events'::text) "
                + "AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner ORDER BY 1",
            [], { (row) throws(StoreError) in try row.string(0) })
    }
}
