import EventStore
import Foundation
import JobModel
import PostgresStore
import StorePort
import Testing
import TestSupport

/// A reading command whose standard output is read slowly (a pager, a stalled pipe) holds no snapshot of
/// the log while it waits to write: beside writers, SQLite's WAL is still checkpointed and started over,
/// and PostgreSQL's vacuum is not held back by an open transaction.
@Suite("readers blocked on their output", .onTestThreads) struct ReaderSnapshotTests {
    /// The workspace's log opened in this process, as a worker's store (created when needed).
    static func store(_ workspace: CLIWorkspace, _ engine: StoreEngine) throws -> any JobStore {
        engine == .sqlite ? try EventStore(path: workspace.database, mode: .create)
                          : try PostgresStore(url: workspace.database, mode: .create)
    }

    @Test("audit --csv into a pipe nobody reads holds no snapshot; read at last, it prints every job once",
          arguments: StoreEngine.allCases)
    func auditIntoAStalledPipe(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("audit-stalled-pipe", engine: engine)
        defer { workspace.directory.remove() }
        // A worker's store: open throughout (on SQLite, so no close removes the WAL).
        let writer = try Self.store(workspace, engine)
        let jobs = 3_000
        _ = try writer.submit((0..<jobs).map { JobSpec(kind: .uploadData, destination: "file:///tmp/o\($0).txt", data: Data("x".utf8)) },
                              actor: "cli:test", now: 1_000)

        let audit = Process()
        audit.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        // Named on PostgreSQL, so the check below finds this session only (the suite's tests run side by side).
        let name = "audit_stalled_\(getpid())"
        audit.arguments = ["--db", engine == .sqlite ? workspace.database : workspace.database + "&application_name=\(name)", "audit", "--csv"]
        audit.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin"]
        let output = Pipe(), errors = Pipe()
        audit.standardOutput = output
        audit.standardError = errors
        try audit.run()
        defer { if audit.isRunning { audit.terminate() } }
        // Blocked on the full pipe: one of its threads waits inside write(1, …).
        func blockedWriting() -> Bool {
            let tasks = "/proc/\(audit.processIdentifier)/task"
            for task in (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? [] {
                let wchan = (try? String(contentsOfFile: "\(tasks)/\(task)/wchan", encoding: .utf8)) ?? ""
                let call = (try? String(contentsOfFile: "\(tasks)/\(task)/syscall", encoding: .utf8)) ?? ""
                if wchan.contains("pipe_write") || call.hasPrefix("1 0x1 ") { return true }
            }
            return false
        }
        let deadline = Date().addingTimeInterval(30)
        while audit.isRunning && !blockedWriting() && Date() < deadline { usleep(20_000) }
        usleep(100_000)
        try #require(audit.isRunning && blockedWriting(), "audit blocked on its output")

        switch engine {
        case .sqlite:
            // 40 commits of 1 MiB: SQLite's automatic checkpoint (every 4,000 pages, 16 MiB) can start
            // the log over only when no reader holds a snapshot from before.
            let payload = Data(repeating: 0x61, count: 1 << 20)
            for index in 0..<40 {
                _ = try writer.submit([JobSpec(kind: .uploadData, destination: "file:///tmp/big\(index).txt", data: payload)],
                                      actor: "cli:test", now: 2_000)
            }
            let wal = (try FileManager.default.attributesOfItem(atPath: workspace.database + "-wal")[.size] as? Int) ?? 0
            #expect(wal < 24 << 20, "the WAL grew to \(wal) bytes behind the blocked audit")
        case .postgres:
            _ = try writer.submit((0..<40).map { JobSpec(kind: .uploadData, destination: "file:///tmp/big\($0).txt", data: Data("y".utf8)) },
                                  actor: "cli:test", now: 2_000)
            let open = try PostgresServer.shared().psql(database: "postgres", """
                SELECT count(*) FROM pg_stat_activity WHERE application_name = '\(name)' AND state LIKE 'idle in transaction%'
                """)
            let present = try PostgresServer.shared().psql(database: "postgres", """
                SELECT count(*) FROM pg_stat_activity WHERE application_name = '\(name)'
                """)
            try #require(present == "1", "the audit's session is named \(name)")
            #expect(open == "0", "audit's session stays in its transaction while it waits to write")
        }

        let printed = output.fileHandleForReading.readDataToEndOfFile()
        audit.waitForExit()
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(audit.terminationStatus == 0, "\(stderr)")
        let lines = String(decoding: printed, as: UTF8.self).split(separator: "\n")
        // The header and every job, each once (the ones submitted while it waited included, being newer).
        let ids = lines.dropFirst().map { $0.split(separator: ",").first.map(String.init) ?? "" }
        #expect(ids.count == jobs + 40 && Set(ids).count == ids.count, "\(ids.count) rows, \(Set(ids).count) ids")
    }

    @Test("audit's table reads the jobs twice, page by page, and prints each once", arguments: StoreEngine.allCases)
    func auditTableAcrossPages(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("audit-pages", engine: engine)
        defer { workspace.directory.remove() }
        let writer = try Self.store(workspace, engine)
        let jobs = 2_345
        let submitted = try writer.submit((0..<jobs).map { JobSpec(kind: .uploadData, destination: "file:///tmp/o\($0).txt", data: Data("x".utf8)) },
                                          actor: "cli:test", now: 1_000).map(\.id)
        for filter in [[], ["--state", "queued"]] {
            let table = try workspace.jobctl(["audit"] + filter)
            #expect(table.status == 0, "\(table.stderr)")
            let lines = table.stdout.split(separator: "\n")
            let rows = lines.dropFirst().dropLast().map { $0.split(separator: " ").first.map(String.init) ?? "" }
            #expect(rows.count == jobs && rows == submitted, "\(filter): \(rows.count) rows")
            #expect(lines.last == "\(jobs) jobs: \(jobs) queued", "\(filter): \(lines.last ?? "")")
        }
    }
}
