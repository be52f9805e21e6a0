@testable import Worker
import EventStore
import Foundation
import PostgresStore
import Testing
import TestSupport

/// A newer jobctl upgrades the log while a worker of this one runs on it (a rolling upgrade). The worker
/// never looked at the log's ledger again after it opened it, and went on writing rows in the older
/// schema's terms — a job it ran read otherwise in the newer one (`replay --verify` found a difference).
/// It stops now, a few seconds after the upgrade's commit, saying which schema it found and which it
/// knows; its jobs go back to the queue when their leases expire, for the newer workers.
@Suite("a worker on a log a newer jobctl upgraded", .onTestThreads) struct UpgradedLogTests {
    @Test(arguments: [false, true])
    func aWorkerStopsWhenANewerJobctlUpgradesItsLog(onPostgres: Bool) throws {
        let directory = try TemporaryDirectory("upgraded-log")
        defer { directory.remove() }
        let database: String
        let future: Int
        if onPostgres {
            database = try PostgresServer.shared().makeSchema("upgradedlog")
            future = PostgresStore.knownSchemaVersion + 1
        } else {
            database = directory.file("jobctl.db")
            future = EventStore.knownSchemaVersion + 1
        }
        let migrated = try jobctl(["migrate"], database: database)
        try #require(migrated.status == 0, "\(migrated.stderr)")
        let worker = try JobctlProcess.worker(database: database, [], logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        try #require(eventually(seconds: 20) { worker.log.contains("worker_started") }, "\(worker.log)")
        // What a newer jobctl's migration leaves in the ledger, committed by another connection.
        let insert = "INSERT INTO schema_migrations (version, name, applied_at_ms, checksum) VALUES (\(future), 'from_a_newer_jobctl', 0, 'x')"
        if onPostgres {
            let schema = try #require(database.range(of: "search_path%3D").map { String(database[$0.upperBound...]) })
            _ = try PostgresServer.shared().psql(database: "postgres", "SET search_path TO \(schema); \(insert)")
        } else {
            // Waiting its turn at the write lock, as a migrating jobctl does (the worker's start-up writes hold it
            // briefly; the shell's default is to fail at once, "database is locked").
            let output = try runProcess("/usr/bin/sqlite3", ["-cmd", ".timeout 10000", database, insert])
            try #require(output.status == 0, "\(output.stderr)")
        }
        let upgraded = Date()
        let status = worker.wait(seconds: 30)
        #expect(status != nil && status != 0, "\(worker.log)")
        #expect(Date().timeIntervalSince(upgraded) < 15, "\(worker.log)")
        let known = onPostgres ? PostgresStore.knownSchemaVersion : EventStore.knownSchemaVersion
        #expect(worker.log.contains("the database schema is version \(future) but this jobctl knows only up to \(known)"), "\(worker.log)")
    }
}
