import Foundation
import Testing
import TestSupport

/// A worker whose store answers reads but refuses every write (its disk full, a PostgreSQL server made
/// read-only) answered `/readyz` 200 `ready` with `jobctl_store_up 1` while it could claim, start or
/// finish no job. It is not ready now, saying why, and `jobctl_store_writable` is 0 — until a write goes
/// through again, when it is ready and every job runs (nothing lost).
@Suite("readiness while the store refuses writes", .onTestThreads)
struct WritableStoreReadinessTests {
    /// What a supervisor and a scrape see: `/readyz`'s status and line, and the store's gauges and
    /// failure counts.
    struct Seen: CustomStringConvertible {
        var status: Int
        var body: String
        var writable: Double?
        var up: Double?
        var failures: [String: Double]

        var description: String { "/readyz \(status) \(body.debugDescription), writable \(writable.map { "\($0)" } ?? "-"), up \(up.map { "\($0)" } ?? "-"), failures \(failures)" }
    }

    static func readyz(_ port: Int) -> (status: Int, body: String)? {
        (try? WorkerMetricsTests.curl(["http://127.0.0.1:\(port)/readyz"])).map { ($0.status, $0.body) }
    }

    static func see(_ port: Int, _ workspace: CLIWorkspace) throws -> Seen {
        let ready = try WorkerMetricsTests.curl(["http://127.0.0.1:\(port)/readyz"])
        let families = try WorkerMetricsTests.parse(try WorkerMetricsTests.curl(["http://127.0.0.1:\(port)/metrics"]).body, in: workspace)
        var failures: [String: Double] = [:]
        for sample in families["jobctl_store_write_failures"]?.samples ?? [] where sample.value > 0 {
            failures[sample.labels["reason"] ?? ""] = sample.value
        }
        return Seen(status: ready.status, body: ready.body,
                    writable: WorkerMetricsTests.value(families, "jobctl_store_writable", "jobctl_store_writable", [:]),
                    up: WorkerMetricsTests.value(families, "jobctl_store_up", "jobctl_store_up", [:]), failures: failures)
    }

    /// Jobs due in 3 s (time enough to make the store refuse writes before the worker claims them).
    static let manifest = (0..<12).map { "- {kind: upload-data, data: \"job \($0)\", destination: \"file://out/\($0).txt\", delay: 3s}" }
        .joined(separator: "\n")

    /// Creates the log, starts a worker serving its metrics, waits until it is ready, submits `manifest`, then has `refuse`
    /// make the store refuse writes; sees the worker not ready, has `allow` undo it, and sees it ready
    /// again and every job succeed.
    static func notReadyWhileRefused(_ workspace: CLIWorkspace, reason: String, refuse: () throws -> Void, allow: () throws -> Void) throws {
        let migrated = try workspace.jobctl(["migrate"])
        try #require(migrated.status == 0, "\(migrated.stderr)")
        let port = freeLoopbackPort()
        let worker = try LoggedWorker(workspace, ["--metrics", "127.0.0.1:\(port)", "--lease", "2s", "--concurrency", "2"])
        defer { worker.kill() }
        try #require(eventuallyTrue(seconds: 15) { readyz(port)?.status == 200 }, "\(worker.log())")
        let ids = try workspace.submit(manifest)
        try #require(ids.count == 12)
        try refuse()

        // Its claims fail once the jobs are due, again and again: not ready, the reason said.
        let refused = eventuallyTrue(seconds: 15) { readyz(port)?.status == 503 }
        let during = try see(port, workspace)
        #expect(refused, "still ready while the store refuses writes: \(during)\n\(worker.log().suffix(3000))")
        #expect(during.status == 503 && during.body.hasPrefix("not ready: store refuses writes: \(reason) ("), "\(during)")
        #expect(during.writable == 0, "\(during)")
        // Reads still work: the store is up, which is all the probe asked before.
        #expect(during.up == 1, "\(during)")
        #expect((during.failures[reason] ?? 0) >= 2, "\(during)")
        #expect(!during.body.contains(workspace.directory.path) && !during.body.contains("password"), "\(during)")

        // Writable again: ready at the next write that goes through, and every job runs.
        try allow()
        let ready = eventuallyTrue(seconds: 15) { readyz(port)?.status == 200 }
        let after = try see(port, workspace)
        #expect(ready && after.body == "ready\n" && after.writable == 1, "\(after)\n\(worker.log().suffix(3000))")
        let finished = try eventuallyTrue(seconds: 20) {
            let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
            return jobs.count == 12 && jobs.allSatisfy { $0["state"] as? String == "succeeded" }
        }
        #expect(finished, "\(worker.log().suffix(3000))")
        let written = (try? FileManager.default.contentsOfDirectory(atPath: workspace.directory.file("buckets/out"))) ?? []
        #expect(written.filter { !$0.hasPrefix(".") }.count == 12)
        worker.stop()
        #expect(worker.process.terminationStatus == 0, "\(worker.log().suffix(3000))")
    }

    @Test("an SQLite log whose disk fills makes the worker not ready (disk_full) until space is freed",
          .enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func fullDisk() throws {
        let directory = try TemporaryDirectory("readyz-full-disk")
        defer { directory.remove() }
        let filesystem = try SmallFilesystem(at: directory.file("small"), size: "8m")
        defer { filesystem.unmount() }
        let workspace = CLIWorkspace(directory: directory, database: filesystem.path + "/jobctl.db")
        let filler = filesystem.path + "/filler"
        try Self.notReadyWhileRefused(workspace, reason: "disk_full", refuse: {
            // Every block taken: a commit that grows the write-ahead log fails (dd stops at the end, exit 1).
            _ = try runProcess("/bin/dd", ["if=/dev/zero", "of=\(filler)", "bs=64k", "count=1000"])
        }, allow: {
            try FileManager.default.removeItem(atPath: filler)
        })
    }

    @Test("a PostgreSQL server made read-only makes the worker not ready (read_only) until it takes writes again")
    func readOnlyServer() throws {
        let server = try PostgresServer.makePrivate()
        defer { server.shutDown() }
        let directory = try TemporaryDirectory("readyz-pg-read-only")
        defer { directory.remove() }
        let workspace = CLIWorkspace(directory: directory, database: try server.makeSchema("readyzro"))
        try Self.notReadyWhileRefused(workspace, reason: "read_only", refuse: {
            // Every session, the worker's included, is read-only from its next statement on (as a primary
            // demoted to a standby).
            try server.psql(database: "postgres", "ALTER SYSTEM SET default_transaction_read_only = on")
            try server.psql(database: "postgres", "SELECT pg_reload_conf()")
        }, allow: {
            // From a session that is not read-only itself.
            let writable = server.url(database: "postgres", password: server.password) + "&options=-c%20default_transaction_read_only%3Doff"
            for sql in ["ALTER SYSTEM RESET default_transaction_read_only", "SELECT pg_reload_conf()"] {
                let undone = try runProcess("\(server.binaries)/psql", ["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", writable, "-c", sql])
                try #require(undone.status == 0, "\(undone.stderr)")
            }
        })
    }
}

extension CLIWorkspace {
    /// A workspace in `directory` whose database is `database` (a file elsewhere, a PostgreSQL URL).
    init(directory: TemporaryDirectory, database: String) {
        self.directory = directory
        self.database = database
    }
}
