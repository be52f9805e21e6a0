import CSQLite
import Foundation
@testable import jobctl
#if canImport(Glibc)
import Glibc
#endif

// MARK: - database: the inspection commands on a log whose values someone else wrote

/// The commands that read the log (`list`, `show`, `history`, `stats`, `audit`, `result`, `replay
/// --verify`, text and `--json`), run in-process (`CommandRunner.run`) on a copy of a small SQLite log
/// in which one job's row and events hold the input's values: what a row edited by hand, or written by
/// another program, holds. They must print the values or refuse them, never trap (a `created_at_ms` of
/// -2⁶³ once trapped `list` and `stats`).
///
/// The input, split at NUL bytes: the first byte picks the command (low 4 bits) and the job (high 4),
/// then values for the job's columns in `DatabaseFuzz.columns` order (digits: an integer; `NULL`;
/// otherwise text; an empty value leaves the column as it is), then the `data` of its submitted event
/// and of one event appended now (its type next; `progress` when none is given).
let databaseTarget = FuzzTarget(
    name: "database",
    summary: "list/show/history/stats/audit/result/replay --verify in-process on a log whose job row and events hold the input",
    setUp: { DatabaseFuzz.setUp() },
    run: { input in DatabaseFuzz.run(input) })

enum DatabaseFuzz {
    static let columns = ["state", "bytes_done", "bytes_total", "attempts", "max_attempts", "run_after_ms", "created_at_ms",
                          "updated_at_ms", "started_at_ms", "finished_at_ms", "resume_point", "error", "result", "lease_token",
                          "lease_expires_at_ms", "priority", "version", "lease_owner", "spec", "batch"]
    nonisolated(unsafe) static var template = ""
    /// The template log's bytes, read once: each run writes them to a fresh file (no FileManager copy,
    /// which libFuzzer's timer signal could interrupt with EINTR).
    nonisolated(unsafe) static var templateBytes = Data()
    nonisolated(unsafe) static var ids: [String] = []
    nonisolated(unsafe) static var runs = 0

    static let commands: [[String]] = [
        ["list"], ["list", "--json"], ["show", "ID"], ["show", "--json", "ID"], ["history", "ID"], ["history", "--json", "ID"],
        ["stats"], ["stats", "--json"], ["audit"], ["audit", "--json"], ["audit", "--csv"], ["result", "ID"], ["result", "--json", "ID"],
        ["replay", "--verify"], ["history", "--all-events", "ID"], ["list", "--state", "running,queued,failed"],
    ]

    static func setUp() {
        let folder = Harness.scratch
        template = "\(folder)/template.db"
        let manifest = Harness.scratchFile("jobs.yaml", Data("""
            jobs:
              - kind: upload-data
                data: "hello"
                destination: file://bucket/notes/hello.txt
                key: hello
              - kind: download-file
                source: file://bucket/notes/hello.txt
                destination: \(folder)/out/hello.txt
                after: [hello]
              - kind: download-memory
                source: gs://bucket/dir/file.bin
              - kind: get-metadata
                source: https://127.0.0.1:9/file.txt?sig=SECRET
              - kind: upload-file
                source: \(folder)/jobs.yaml
                destination: gs://bucket/dir/
                metadata: {content_type: text/plain, custom_metadata: {k: v}}
            """.utf8))
        quiet {
            let status = CommandRunner.run(["submit", "--db", template, manifest, "--no-check-sources"])
            precondition(status == 0, "cannot make the template log (submit exited \(status))")
        }
        var db: OpaquePointer?
        precondition(sqlite3_open(template, &db) == SQLITE_OK)
        // As a hand edit would: the log's own guard against changed events is taken away first.
        exec(db, "DROP TRIGGER IF EXISTS events_refuse_update")
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, "SELECT id FROM jobs ORDER BY seq", -1, &statement, nil)
        while sqlite3_step(statement) == SQLITE_ROW { ids.append(String(cString: sqlite3_column_text(statement, 0))) }
        sqlite3_finalize(statement)
        // Everything in the main file, so that its bytes alone are the whole log.
        exec(db, "PRAGMA wal_checkpoint(TRUNCATE)")
        sqlite3_close(db)
        precondition(!ids.isEmpty)
        guard let bytes = FileManager.default.contents(atPath: template), !bytes.isEmpty else { fatalError("cannot read \(template)") }
        templateBytes = bytes
    }

    static func run(_ input: FuzzInput) {
        // A fresh name each run: a store's thread that outlives its command may still open the previous one.
        runs += 1
        for suffix in ["", "-wal", "-shm", "-writer-lock"] { unlink("\(Harness.scratch)/work-\(runs - 1).db" + suffix) }
        // (Harness.scratchFile tries a write that libFuzzer's timer signal interrupted again.)
        let work = Harness.scratchFile("work-\(runs).db", templateBytes)
        let id = ids[Int(input.selector >> 4) % ids.count]
        let values = input.bytes.count > 1 ? input.restParts : []
        var db: OpaquePointer?
        guard sqlite3_open(work, &db) == SQLITE_OK else { fatalError("cannot open the copy") }
        var sets: [String] = []
        for (column, value) in zip(columns, values) where !value.isEmpty { sets.append("\(column) = \(literal(value))") }
        var changed = true
        if !sets.isEmpty { changed = exec(db, "UPDATE jobs SET \(sets.joined(separator: ", ")) WHERE id = \(literal(id))") }
        if values.count > columns.count, !values[columns.count].isEmpty {
            changed = exec(db, "UPDATE events SET data = \(literal(values[columns.count])) WHERE job_id = \(literal(id)) AND version = 1") && changed
        }
        if values.count > columns.count + 1, !values[columns.count + 1].isEmpty {
            let type = values.count > columns.count + 2 && !values[columns.count + 2].isEmpty ? values[columns.count + 2] : "progress"
            changed = exec(db, """
                INSERT INTO events (job_id, version, type, at_ms, actor, lease, data)
                SELECT \(literal(id)), MAX(version) + 1, \(literal(type)), CAST(strftime('%s', 'now') AS INTEGER) * 1000, 'fuzz', 1,
                       \(literal(values[columns.count + 1]))
                FROM events WHERE job_id = \(literal(id))
                """) && changed
        }
        sqlite3_close(db)
        // A value the schema refuses (a NULL where one cannot be) leaves nothing to look at.
        guard changed else { return }
        let command = commands[Int(input.selector & 0x0F) % commands.count].map { $0 == "ID" ? id : $0 }
        quiet {
            let status = CommandRunner.run(command + ["--db", work])
            Harness.note("\(command.joined(separator: " ")): exit \(status)")
        }
    }

    /// An SQL literal: an integer as written, NULL, or quoted text.
    static func literal(_ value: String) -> String {
        if value == "NULL" { return "NULL" }
        if let integer = Int64(value) { return String(integer) }
        return "'" + value.replacingOccurrences(of: "'", with: "''") + "'"
    }

    @discardableResult
    static func exec(_ db: OpaquePointer?, _ sql: String) -> Bool {
        sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK
    }

    /// Runs `body` with standard output on /dev/null (unless JOBCTL_FUZZ_VERBOSE=1); standard error
    /// stays, for a trap's message.
    static func quiet(_ body: () -> Void) {
        guard !Harness.verbose else { return body() }
        fflush(nil)
        let saved = dup(1)
        let null = open("/dev/null", O_WRONLY)
        dup2(null, 1)
        close(null)
        body()
        fflush(nil)
        dup2(saved, 1)
        close(saved)
    }
}
