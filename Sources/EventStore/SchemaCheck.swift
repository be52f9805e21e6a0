import Foundation
import JobModel
import StorePort
import Synchronization

/// What a log's schema lacks, or holds against the log, compared with the schema this jobctl's
/// migrations make: a table, column, index or trigger dropped or renamed by hand (or by another
/// program), a trigger someone added or rewrote.
///
/// Why: such damage read as the log being fine. `replay --verify` said "projection matches" with an
/// index gone (which `audit` then failed on, "no such index"), and `migrate` said "schema is up to
/// date" with `job_dependencies` gone, since the ledger still listed every migration; a trigger added
/// on `events` could delete projection rows behind every command's back. The expected schema is made
/// by running every migration's SQL on an empty database in memory (a few milliseconds), so there is
/// no second list of objects to keep in step with the migrations.
///
/// Compared: each table, index, view and trigger by name and type; each table's columns by name; each
/// trigger's SQL (its text, spaces aside), since the triggers keep the log append-only. Not compared:
/// index and table SQL (their text depends on the renames a migration made), and objects another
/// program added that only read or speed up reading (an extra table or index) — only an extra
/// trigger, which runs on jobctl's own writes, is a problem.
enum SchemaCheck {
    struct Object: Hashable, Comparable, Sendable {
        let type: String
        let name: String
        static func < (a: Object, b: Object) -> Bool { (a.type, a.name) < (b.type, b.name) }
    }

    struct Schema: Sendable {
        var objects: [Object: String] = [:]
        var columns: [String: [String]] = [:]
        /// The table each index and trigger belongs to.
        var tables: [Object: String] = [:]
    }

    /// The schema every migration makes, built once a process.
    private static let built = Mutex<Schema?>(nil)

    static func expected() throws(StoreError) -> Schema {
        if let schema = built.withLock({ $0 }) { return schema }
        let connection = try SQLiteConnection.inMemory()
        for migration in Migrator.all { try connection.execute(migration.sql) }
        let schema = try read(connection)
        built.withLock { $0 = schema }
        return schema
    }

    /// The objects and columns of `connection`'s main database; SQLite's own (`sqlite_…`) left out.
    static func read(_ connection: SQLiteConnection) throws(StoreError) -> Schema {
        var schema = Schema()
        let rows = try connection.query("""
            SELECT type, name, coalesce(sql, ''), tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
            """) { row in (Object(type: row.text(0), name: row.text(1)), row.text(2), row.text(3)) }
        for (object, sql, table) in rows {
            schema.objects[object] = sql
            schema.tables[object] = table
            if object.type == "table" {
                schema.columns[object.name] = try connection.query("SELECT name FROM pragma_table_info(?) ORDER BY cid",
                                                                   [.text(object.name)]) { row in row.text(0) }
            }
        }
        return schema
    }

    /// Each difference as a sentence that says what to do; empty when the schema is as the migrations
    /// make it. Only for a log whose ledger is at this jobctl's newest version (an older one lacks what
    /// later migrations add, and is migrated on its first write).
    static func problems(_ connection: SQLiteConnection) throws(StoreError) -> [String] {
        guard try Migrator.appliedVersions(connection).max() == Migrator.latestVersion else { return [] }
        let expected = try expected()
        let found = try read(connection)
        let restore = "restore the log from a backup (`jobctl backup` makes one), or recreate what is missing with the SQL of "
            + "the migration that made it (`sqlite3 FILE .schema` of a new log shows it); `jobctl migrate` does not, since its "
            + "ledger says every migration was applied"
        var problems: [String] = []
        for object in expected.objects.keys.sorted() {
            guard let sql = found.objects[object] else {
                // An index or trigger of a table that is gone goes with it: the table is the problem.
                if object.type != "table", let table = expected.tables[object],
                   found.objects[Object(type: "table", name: table)] == nil { continue }
                let remedy = object.type == "index" ? "recreate it: `sqlite3 FILE \"\(oneLine(expected.objects[object] ?? ""))\"`" : restore
                problems.append("the log's schema lacks the \(object.type) '\(object.name)' its migrations made: \(remedy)")
                continue
            }
            if object.type == "trigger", oneLine(sql) != oneLine(expected.objects[object] ?? "") {
                problems.append("the log's trigger '\(object.name)' is not the one its migrations made (it was rewritten): "
                                + "it guards what the log keeps; \(restore)")
            }
            if object.type == "table", let columns = expected.columns[object.name] {
                let have = Set(found.columns[object.name] ?? [])
                let missing = columns.filter { !have.contains($0) }
                if !missing.isEmpty {
                    problems.append("the log's table '\(object.name)' lacks the column\(missing.count == 1 ? "" : "s") "
                                    + missing.map { "'\($0)'" }.joined(separator: ", ") + " its migrations made: \(restore)")
                }
            }
        }
        for object in found.objects.keys.sorted() where object.type == "trigger" && expected.objects[object] == nil {
            problems.append("the log has a trigger jobctl does not make, '\(TerminalText.printable(object.name))': it runs on "
                            + "jobctl's own writes and can change or remove what the log keeps; drop it "
                            + "(`sqlite3 FILE 'DROP TRIGGER \"\(TerminalText.printable(object.name))\"'`) unless you know what it does")
        }
        return problems
    }

    /// SQL text with every run of white space as one space, for comparing.
    private static func oneLine(_ sql: String) -> String {
        sql.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }).joined(separator: " ")
    }
}

extension EventStore {
    /// See `JobStore.schemaProblems` and `SchemaCheck`.
    public func schemaProblems() throws(StoreError) -> [String] {
        try readTransaction { (connection) throws(StoreError) -> [String] in try SchemaCheck.problems(connection) }
    }
}
