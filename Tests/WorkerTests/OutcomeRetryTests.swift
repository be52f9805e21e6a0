import Foundation
import JobModel
import PostgresStore
import Testing
import TestSupport

/// A worker whose write failed because the store was down tries it again while its lease holds.
@Suite("writes retried across an outage", .onTestThreads) struct OutcomeRetryTests {
    /// PostgreSQL stopped (`pg_ctl stop -m fast`) while four slow downloads run under a 60 s lease: the
    /// downloads end during the outage, their `succeeded` cannot be written, and the worker retries it
    /// (logged) instead of abandoning the jobs. Once the server is back every job succeeds, claimed
    /// once, with no `lease_expired`, well before the lease could have expired and been rescued.
    @Test func outcomeWrittenAfterAPostgreSQLRestartWithoutARescue() throws {
        let server = try PostgresServer.makePrivate()
        defer { server.shutDown() }
        let nginx = try startWorkerNginx(slowRate: "1m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("pg-outcome-retry")
        defer { directory.remove() }
        let database = try server.makeSchema("outcomeretry")
        var manifest = "jobs:\n"
        for index in 0..<4 {
            try writePatternFile("\(nginx.root)/slow/r\(index).bin", size: 3 << 20, seed: UInt8(index))
            manifest += "  - {kind: download-file, source: \"\(nginx.baseURL)/slow/r\(index).bin\", destination: \"\(directory.file("r\(index).bin"))\"}\n"
        }
        let ids = try submit(manifest, database: database, directory: directory)
        try #require(ids.count == 4)
        let worker = try JobctlProcess.worker(database: database, ["--concurrency", "4", "--lease", "60", "--log-format", "json"],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let early = try PostgresStore(url: database, mode: .readOnly)
        let allStarted = try eventually(seconds: 20) {
            try ids.allSatisfy { id in try early.events(jobID: id).contains { $0.type == .started } }
        }
        try #require(allStarted, "the downloads did not start: \(worker.log)")

        let outage = Date()
        try server.stop()
        // The downloads (3 MiB at 1 MB/s) end while the server is down; their outcome writes fail and are retried.
        let retried = eventually(seconds: 30) { worker.log.contains("retrying the write while the lease holds") }
        try server.start()
        print("PostgreSQL was down for \(String(format: "%.1f", Date().timeIntervalSince(outage))) s")
        try #require(retried, "no write was retried during the outage: \(worker.log)")

        let store = try PostgresStore(url: database, mode: .readOnly)
        let done = try eventually(seconds: 30) { (try store.counts()[.succeeded] ?? 0) == ids.count }
        print("all jobs succeeded \(String(format: "%.1f", Date().timeIntervalSince(outage))) s after the outage began")
        worker.signal(SIGTERM)
        #expect(worker.wait(seconds: 30) == 0, "\(worker.log)")
        let counts = try store.counts()
        #expect(done, "\(counts) \(worker.log)")
        // The exit summary: nothing given up, all four written by this worker.
        #expect(worker.log.contains("\"abandoned\":0,") && worker.log.contains("\"succeeded\":4"), "\(worker.log)")
        for (index, id) in ids.enumerated() {
            let types = try store.events(jobID: id).map(\.type)
            #expect(types.filter { $0 == .claimed }.count == 1, "job \(id): \(types)")
            #expect(!types.contains(.leaseExpired), "job \(id): \(types)")
            #expect(types.last == .succeeded, "job \(id): \(types)")
            let expected = try Data(contentsOf: URL(fileURLWithPath: "\(nginx.root)/slow/r\(index).bin"))
            #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("r\(index).bin"))) == expected)
        }
        #expect(try store.replay(verify: true).isConsistent)
    }
}
