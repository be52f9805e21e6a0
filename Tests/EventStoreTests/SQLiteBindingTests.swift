@testable import EventStore
import Foundation
import Testing
import TestSupport

/// Texts and blobs are lent to SQLite (`SQLITE_STATIC`) for as long as a statement runs, not copied:
/// every kind of value must still arrive whole and as its own type, whatever comes before or after it.
@Suite("SQLite bindings", .onTestThreads) struct SQLiteBindingTests {
    /// Each value read back through `SELECT ?, typeof(?)`, with integers, NULLs and texts interleaved.
    @Test func everyValueArrivesWholeAndTyped() throws {
        let directory = try TemporaryDirectory("sqlite-bindings")
        defer { directory.remove() }
        let connection = try SQLiteConnection(path: directory.file("b.db"), readOnly: false, create: true)
        let large = String(repeating: "ü0123456789", count: 100_000)
        let values: [SQLiteValue] = [
            .text(""), .integer(-7), .text("é"), .null, .text("a\u{0}b"), .real(2.5), .text(large),
            .blob(Data()), .blob(Data([0, 1, 2, 255])), .text("e\u{301}"),
        ]
        let sql = "SELECT " + values.indices.map { "?\($0 + 1), typeof(?\($0 + 1))" }.joined(separator: ", ")
        let row = try #require(try connection.first(sql, values) { row in (0..<row.count).map { row.value($0) } })
        let expectedTypes = ["text", "integer", "text", "null", "text", "real", "text", "blob", "blob", "text"]
        for (index, value) in values.enumerated() {
            let read = row[2 * index]
            // An empty blob reads back as an empty blob (or SQLite's zero-length value), never as NULL.
            if case .blob(let data) = value, data.isEmpty {
                #expect(read == .blob(Data()) || read == .text(""), "value \(index): \(read)")
            } else {
                #expect(read == value, "value \(index)")
            }
            #expect(row[2 * index + 1] == .text(expectedTypes[index]), "type of value \(index)")
        }
        // The text with a NUL inside keeps its length: SQLite was given the byte count, not a C string.
        #expect(try connection.first("SELECT length(CAST(? AS BLOB))", [.text("a\u{0}b")]) { $0.int(0) } == 3)
    }

    /// A statement is reused with other values: nothing of the lent bytes of one run is read by the next,
    /// and a statement that fails while values are lent leaves the next run unaffected.
    @Test func reusedStatementsSeeOnlyTheirOwnValues() throws {
        let directory = try TemporaryDirectory("sqlite-bindings-reuse")
        defer { directory.remove() }
        let connection = try SQLiteConnection(path: directory.file("b.db"), readOnly: false, create: true)
        try connection.run("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        for index in 0..<200 {
            try connection.run("INSERT INTO t (k, v) VALUES (?, ?)", [.text("key-\(index)"), .text(String(repeating: "v", count: index))])
        }
        // A duplicate key fails inside the statement; the next run still binds its own values.
        #expect(throws: StoreError.self) { try connection.run("INSERT INTO t (k, v) VALUES (?, ?)", [.text("key-3"), .text("x")]) }
        try connection.run("INSERT INTO t (k, v) VALUES (?, ?)", [.text("after"), .text("y")])
        let rows = try connection.query("SELECT k, v FROM t ORDER BY rowid", []) { row in (row.text(0), row.text(1)) }
        #expect(rows.count == 201)
        for (index, row) in rows.prefix(200).enumerated() {
            #expect(row.0 == "key-\(index)" && row.1 == String(repeating: "v", count: index))
        }
        #expect(rows.last.map { $0.0 == "after" && $0.1 == "y" } == true)
        // Process-wide settings (statement-journal spill, memory statistics off) took effect.
        #expect(SQLiteConnection.isProcessConfigured)
    }

    /// A statement inside a savepoint whose undo journal outgrows the spill size writes it to a
    /// temporary file and succeeds. With the 4 MiB spill this process used to set, SQLite 3.40 wrote
    /// each 4 MiB chunk short and failed such a statement as "database or disk is full": deleting or
    /// rewriting one row of 8 MiB, as an archive deletes a large `upload-data` job's event.
    @Test func statementsWhoseJournalSpillsSucceed() throws {
        #expect(SQLiteConnection.isProcessConfigured)
        let directory = try TemporaryDirectory("sqlite-journal-spill")
        defer { directory.remove() }
        let connection = try SQLiteConnection(path: directory.file("spill.db"), readOnly: false, create: true)
        try connection.execute("PRAGMA journal_mode = WAL")
        try connection.run("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        let large = String(repeating: "0123456789abcdef", count: 512 << 10)  // 8 MiB
        for key in 1...3 { try connection.run("INSERT INTO t (k, v) VALUES (?, ?)", [.int(key), .text(large)]) }
        for statement in ["DELETE FROM t WHERE k = 1", "UPDATE t SET v = 'short' WHERE k = 2", "DELETE FROM t"] {
            try connection.run("BEGIN IMMEDIATE")
            try connection.run("SAVEPOINT s")
            do throws(StoreError) {
                try connection.run(statement)
            } catch {
                Issue.record("\(statement): \(error)")
            }
            try connection.run("RELEASE s")
            try connection.run("COMMIT")
        }
        #expect(try connection.first("SELECT count(*) FROM t") { row in row.int(0) } == 0)
    }
}
