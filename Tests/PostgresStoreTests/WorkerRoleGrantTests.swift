import Foundation
import Testing
import TestSupport
@testable import PostgresStore

/// `migrate --grant` as a library call, and what a later migration does for roles granted before.
@Suite("PostgreSQL worker role grants", .onTestThreads)
struct WorkerRoleGrantTests {
    /// The worker role's privileges on each table of the schema, as `table:PRIV,PRIV`.
    private static func privileges(_ server: PostgresServer, _ roles: PostgresServer.RoleSetup) throws -> [String] {
        try server.psql(database: "postgres", """
            SELECT table_name || ':' || string_agg(privilege_type, ',' ORDER BY privilege_type)
            FROM information_schema.role_table_grants
            WHERE grantee = '\(roles.worker)' AND table_schema = '\(roles.schema)' GROUP BY table_name ORDER BY table_name
            """).split(separator: "\n").map(String.init)
    }

    @Test("a table a later migration adds reaches the roles granted before; a second grant leaves the same set")
    func regrantCoversNewTables() throws {
        let server = try PostgresServer.shared()
        let roles = try server.makeRoles("regrant")
        let owner = try PostgresStore(url: roles.ownerURL, mode: .create)
        #expect(try owner.regrantWorkerRoles().isEmpty)
        try owner.grantWorkerRole(roles.worker)
        let granted = try Self.privileges(server, roles)
        #expect(granted.contains("events:INSERT,SELECT"), "\(granted)")

        // What a later migration does: a new table, then (on open) every granted role's share again.
        _ = try owner.withConnection { (connection) throws(StoreError) in try connection.store("CREATE TABLE later_state (x int)") }
        #expect(try Self.privileges(server, roles) == granted)
        #expect(try owner.regrantWorkerRoles() == [roles.worker])
        #expect(try Self.privileges(server, roles) == (granted + ["later_state:DELETE,INSERT,SELECT,UPDATE"]).sorted())
        try owner.grantWorkerRole(roles.worker)
        #expect(try Self.privileges(server, roles) == (granted + ["later_state:DELETE,INSERT,SELECT,UPDATE"]).sorted())

        // The worker role itself cannot grant, not even to itself.
        let worker = try PostgresStore(url: roles.workerURL, mode: .readWrite)
        #expect(throws: StoreError.self) { try worker.grantWorkerRole(roles.owner) }
    }
}
