import Foundation
import TestSupport
@testable import PostgresStore

/// A fresh schema (or, with `wholeDatabase`, a fresh database) on the test process's shared
/// PostgreSQL server.
struct PostgresFixture {
    let server: PostgresServer
    /// `postgres://…` with the password.
    let url: String

    /// `wholeDatabase` for tests about the database itself (what a migration leaves in it, logins to it);
    /// otherwise a schema of the shared database, which is made in milliseconds instead of half a second.
    /// `privateServer`: a server of the test's own, for tests whose outcome depends on what other
    /// transactions on the server do (a snapshot's xmin is cluster-wide); stop it with `server.shutDown()`.
    init(_ label: String = "test", wholeDatabase: Bool = false, privateServer: Bool = false) throws {
        server = try privateServer ? PostgresServer.makePrivate() : PostgresServer.shared()
        url = try wholeDatabase ? server.makeDatabase(label) : server.makeSchema(label)
    }

    /// A new connection to the database.
    func connect() throws -> PostgresConnection {
        try PostgresConnection(url)
    }

    /// A new connection to a database that has the jobctl schema.
    func migrated() throws -> PostgresConnection {
        let connection = try connect()
        _ = try PostgresMigrator.migrate(connection, now: 1_000)
        return connection
    }
}

extension PostgresConnection {
    /// The plan `explain` (an `EXPLAIN …` statement) prints, its lines joined by line feeds.
    func plan(_ explain: String, _ parameters: [PostgresValue] = []) throws(PostgresError) -> String {
        try query(explain, parameters) { (row) throws(PostgresError) in try row.text(0) }.joined(separator: "\n")
    }

    /// Inserts a queued job row into the projection with everything but its ordering fields defaulted.
    func insertQueuedJob(id: String, priority: Int64 = 0, runAfterMs: Int64 = 0, seq: Int64) throws(PostgresError) {
        try run("""
            INSERT INTO jobs (id, seq, kind, state, queue, priority, run_after_ms, attempts, max_attempts,
                              bytes_done, pause_requested, cancel_requested, version, created_at_ms, updated_at_ms)
            VALUES ($1, $2, 'upload-data', 'queued', 'default', $3, $4, 0, 3, 0, false, false, 1, 0, 0)
            """, [.text(id), .integer(seq), .integer(priority), .integer(runAfterMs)])
    }

    /// Appends one event row (the adapter will do this with its checks; the schema tests need only rows).
    func insertEvent(jobID: String, version: Int, type: String = "submitted", data: String = "{}") throws(PostgresError) {
        try run("INSERT INTO events (job_id, version, type, at_ms, actor, data) VALUES ($1, $2, $3, 0, 'test', $4)",
                [.text(jobID), .int(version), .text(type), .text(data)])
    }
}

/// The error `body` throws as a `PostgresError`, or nil when it does not throw (or throws another type).
func postgresError(_ body: () throws -> Void) -> PostgresError? {
    do {
        try body()
        return nil
    } catch let error as PostgresError {
        return error
    } catch {
        return nil
    }
}
