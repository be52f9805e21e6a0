import Foundation
import Testing
import StorePort
import TestSupport
@testable import PostgresStore

@Suite("libpq wrapper against a real PostgreSQL", .onTestThreads)
struct PostgreSQLTests {
    static let values: [(PostgresValue, String)] = [
        (.text(""), "text"),
        (.text("plain"), "text"),
        (.text("quotes ' \" \\ and $1 and ünïcödé 🚀"), "text"),
        (.text(String(repeating: "long text ", count: 100_000)), "text"),
        (.integer(0), "bigint"),
        (.integer(-1), "bigint"),
        (.integer(Int64.min), "bigint"),
        (.integer(Int64.max), "bigint"),
        (.integer(1 << 40), "bigint"),
        (.bytea(Data()), "bytea"),
        (.bytea(Data([0, 0, 0])), "bytea"),
        (.bytea(Data([0x61, 0, 0x62, 0xFF, 0x00])), "bytea"),
        (.bytea(Data((0...255).map { UInt8($0) })), "bytea"),
        (.bytea(patternData(5 << 20)), "bytea"),
        (.bool(true), "boolean"),
        (.bool(false), "boolean"),
        (.null, "text"),
        (.null, "bytea"),
        (.null, "bigint"),
    ]

    @Test("every parameter type round-trips through a SELECT and through a table", arguments: values)
    func roundTrip(value: PostgresValue, type: String) throws {
        let fixture = try PostgresFixture("roundtrip")
        let connection = try fixture.connect()
        let selected = try #require(try connection.first("SELECT $1::\(type)", [value]) { (row) throws(PostgresError) in
            try row.value(0)
        })
        #expect(selected == value)

        try connection.run("CREATE TABLE t (v \(type))")
        #expect(try connection.run("INSERT INTO t (v) VALUES ($1)", [value]) == 1)
        let stored = try connection.query("SELECT v FROM t") { (row) throws(PostgresError) in
            try row.value(0)
        }
        #expect(stored == [value])
    }

    static let arrays: [(PostgresArray, String)] = [
        (PostgresArray(elementType: PostgresType.int8, elements: []), "bigint"),
        (PostgresArray(elementType: PostgresType.int8, elements: [.integer(1), .null, .integer(Int64.min), .integer(Int64.max)]), "bigint"),
        (PostgresArray(elementType: PostgresType.int8, elements: [.null, .null]), "bigint"),
        (PostgresArray(elementType: PostgresType.text, elements: [.text(""), .text("quotes ' \" \\ {a,b} NULL ünï 🚀"), .null]), "text"),
        (PostgresArray(elementType: PostgresType.bytea, elements: [.bytea(Data()), .bytea(Data([0, 0xFF, 0x5C, 0x22])), .null]), "bytea"),
        (PostgresArray(elementType: PostgresType.bool, elements: [.bool(true), .bool(false), .null]), "boolean"),
    ]

    @Test("an array parameter is sent in binary and unnests to exactly its elements, in order", arguments: arrays)
    func arrayRoundTrip(array: PostgresArray, type: String) throws {
        let fixture = try PostgresFixture("arrays")
        let connection = try fixture.connect()
        let unnested = try connection.query("SELECT v FROM unnest($1::\(type)[]) WITH ORDINALITY AS u(v, n) ORDER BY n",
                                            [.array(array)]) { (row) throws(PostgresError) in try row.value(0) }
        #expect(unnested == array.elements)
        let length = try connection.first("SELECT cardinality($1::\(type)[])", [.array(array)]) { (row) throws(PostgresError) in
            try row.int64(0)
        }
        #expect(length == Int64(array.elements.count))
    }

    @Test("an array's binary form is array_send's layout, appended after whatever the buffer holds")
    func arrayBinaryLayout() throws {
        func be32(_ value: Int32) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }
        func be64(_ value: Int64) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }
        let texts = PostgresArray(elementType: PostgresType.text, elements: [.text("ab"), .null, .text("é")])
        let integers = PostgresArray(elementType: PostgresType.int8, elements: [.integer(-2), .integer(Int64.max)])
        let empty = PostgresArray(elementType: PostgresType.bool, elements: [])
        var buffer: [UInt8] = [7, 7, 7]  // what an earlier parameter left
        try texts.appendBinary(to: &buffer)
        try integers.appendBinary(to: &buffer)
        try empty.appendBinary(to: &buffer)
        var expected: [UInt8] = [7, 7, 7]
        expected += be32(1) + be32(1) + be32(25) + be32(3) + be32(1)
        expected += be32(2) + Array("ab".utf8) + be32(-1) + be32(2) + Array("é".utf8)
        expected += be32(1) + be32(0) + be32(20) + be32(2) + be32(1)
        expected += be32(8) + be64(-2) + be32(8) + be64(Int64.max)
        expected += be32(0) + be32(0) + be32(16)
        #expect(buffer == expected)
        #expect(try texts.binary() == Array(expected[3..<(3 + 20 + 6 + 4 + 6)]))
    }

    @Test("several array parameters of one statement each arrive whole")
    func arraysInOneStatement() throws {
        let fixture = try PostgresFixture("arrays2")
        let connection = try fixture.connect()
        let count = 300
        let ids = PostgresArray(elementType: PostgresType.int8, elements: (0..<count).map { .integer(Int64($0) * 1_000_003) })
        let names = PostgresArray(elementType: PostgresType.text, elements: (0..<count).map { $0 % 7 == 0 ? .null : .text(String(repeating: "x", count: $0 % 50)) })
        let rows = try connection.query("SELECT a, b FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(a, b, n) ORDER BY n",
                                        [.array(ids), .array(names)]) { (row) throws(PostgresError) in
            (try row.value(0), try row.value(1))
        }
        #expect(rows.map(\.0) == ids.elements)
        #expect(rows.map(\.1) == names.elements)
    }

    @Test("an array element of another type than the array's is refused before anything is sent")
    func arrayElementTypeChecked() throws {
        let mixed = PostgresArray(elementType: PostgresType.int8, elements: [.integer(1), .text("2")])
        #expect(throws: PostgresError.self) { try mixed.binary() }
        #expect(throws: PostgresError.self) { try PostgresArray(elementType: PostgresType.json, elements: []).arrayType() }
    }

    @Test("typed accessors read what they are asked for and refuse other types and NULL")
    func typedAccess() throws {
        let fixture = try PostgresFixture("typed")
        let connection = try fixture.connect()
        let result = try connection.execute(
            "SELECT 7::smallint, 8::integer, 9::bigint, 'x'::text, 'y'::varchar, '\\x00ff'::bytea, true, NULL::text, '{\"a\": 1}'::jsonb")
        let row = try #require(result.rows.first)
        #expect(try row.int64(0) == 7)
        #expect(try row.int64(1) == 8)
        #expect(try row.int64(2) == 9)
        #expect(try row.text(3) == "x")
        #expect(try row.text(4) == "y")
        #expect(try row.bytea(5) == Data([0x00, 0xFF]))
        #expect(try row.bool(6))
        #expect(try row.optionalText(7) == nil)
        #expect(try row.text(8) == "{\"a\": 1}")

        let asInteger = postgresError { _ = try row.int64(3) }
        #expect(asInteger?.description.contains("cannot be read as an integer") == true)
        let asText = postgresError { _ = try row.text(2) }
        #expect(asText?.description.contains("cannot be read as text") == true)
        let nullText = postgresError { _ = try row.text(7) }
        #expect(nullText?.description.contains("is NULL") == true)
        let missing = postgresError { _ = try row.int64(42) }
        #expect(missing?.description.contains("does not exist") == true)
    }

    @Test("a NUL byte in text is refused by the server, never silently cut off")
    func nulInText() throws {
        let fixture = try PostgresFixture("nul")
        let connection = try fixture.connect()
        let error = postgresError { try connection.execute("SELECT $1::text", [.text("before\u{0}after")]) }
        #expect(error?.sqlstate == "22021")
    }

    @Test("server errors carry their SQLSTATE, message, detail and statement",
          arguments: [
              ("SELEC 1", "42601"),
              ("SELECT * FROM no_such_table", "42P01"),
              ("SELECT 1 / 0", "22012"),
          ])
    func serverErrors(sql: String, sqlstate: String) throws {
        let fixture = try PostgresFixture("errors")
        let connection = try fixture.connect()
        let error = try #require(postgresError { try connection.execute(sql) })
        #expect(error.sqlstate == sqlstate)
        #expect(error.description.contains("PostgreSQL error \(sqlstate)"))
        #expect(error.description.contains(sql))
        // A refused statement leaves the connection usable.
        #expect(try connection.first("SELECT 1") { (row) throws(PostgresError) in try row.int(0) } == 1)
    }

    /// A connection lost while COMMIT ran may have committed: the message said "try again", and a
    /// `submit` run again created its jobs a second time. Lost anywhere else, nothing was written.
    @Test("a connection lost at COMMIT says the transaction may have been written; lost before, to try again")
    func lostAtCommitMayHaveLanded() {
        let atCommit = PostgresError.connectionLost(message: "server closed the connection unexpectedly", sql: "COMMIT").description
        #expect(atCommit.contains("may have committed") && atCommit.contains("`jobctl list`") && !atCommit.contains("try again"),
                "\(atCommit)")
        let before = PostgresError.connectionLost(message: "server closed the connection unexpectedly", sql: "SELECT 1").description
        #expect(before.hasSuffix("then try again"), "\(before)")
    }

    /// libpq's message lines were joined with a space: "… failed: Connection refused Is the server running
    /// on that host and accepting TCP/IP connections?; check the host, …". Joined as sentences now.
    @Test("a refused connection's message reads as sentences: a full stop where libpq's lines meet")
    func refusedConnectionReadsAsSentences() throws {
        let port = freeLoopbackPort()
        let error = try #require(postgresError { _ = try PostgresConnection("postgres://jobctl@127.0.0.1:\(port)/jobctl?connect_timeout=10") })
        let text = error.description
        #expect(text.contains("failed: Connection refused. Is the server running on that host and accepting TCP/IP connections? "
                              + "Check the host, port, database and user in the URL"), "\(text)")
        #expect(!text.contains("?;") && !text.contains("refused Is"), "\(text)")
        // A sentence libpq wraps over two lines stays one; the next starts after a full stop.
        let lost = PostgresError.connectionLost(message: "server closed the connection unexpectedly\n\tThis probably means the server "
                                                + "terminated abnormally\n\tbefore or while processing the request.\n", sql: "SELECT 1").description
        #expect(lost == "the connection to PostgreSQL was lost: server closed the connection unexpectedly. This probably means the "
                + "server terminated abnormally before or while processing the request (while running `SELECT 1`); check that the "
                + "server is up and reachable, then try again", "\(lost)")
    }

    @Test("a unique violation says which key, in its detail")
    func uniqueViolation() throws {
        let fixture = try PostgresFixture("unique")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (k text PRIMARY KEY)")
        try connection.run("INSERT INTO t VALUES ($1)", [.text("same")])
        let error = try #require(postgresError { try connection.run("INSERT INTO t VALUES ($1)", [.text("same")]) })
        guard case .server(let sqlstate, _, let detail, _, _) = error else {
            Issue.record("expected a server error, got \(error)")
            return
        }
        #expect(sqlstate == "23505")
        #expect(detail?.contains("(k)=(same)") == true)
    }

    @Test("a failed login names the target with the password redacted and never shows a password")
    func badPassword() throws {
        let server = try PostgresServer.shared()
        let wrong = "wrong-secret-" + UUID().uuidString
        let badURL = server.url(database: "postgres", password: wrong)
        let error = try #require(postgresError { _ = try PostgresConnection(badURL) })
        guard case .connectionFailed(let target, let message) = error else {
            Issue.record("expected connectionFailed, got \(error)")
            return
        }
        #expect(message.contains("password authentication failed"))
        #expect(target.contains(":REDACTED@127.0.0.1"))
        for text in [error.description, String(describing: error), target, message] {
            #expect(!text.contains(wrong))
            #expect(!text.contains(server.password))
        }
        // The right password to a database that does not exist: refused, and the password still hidden.
        let noDatabase = try #require(postgresError {
            _ = try PostgresConnection(server.url(database: "no_such_database", password: server.password))
        })
        #expect(noDatabase.description.contains("no_such_database"))
        #expect(!noDatabase.description.contains(server.password))
    }

    @Test("a key/value connection string connects, and its password is redacted wherever the target is shown")
    func keyValueTarget() throws {
        let server = try PostgresServer.shared()
        let target = "host=127.0.0.1 port=\(server.port) dbname=postgres user=\(server.user) password=\(server.password) sslmode=disable"
        let connection = try PostgresConnection(target)
        #expect(try connection.first("SELECT current_database()") { (row) throws(PostgresError) in try row.text(0) } == "postgres")
        #expect(connection.redactedTarget.contains("password=REDACTED"))
        #expect(!connection.redactedTarget.contains(server.password))

        let wrong = "wrong-secret-" + UUID().uuidString
        let refused = try #require(postgresError {
            _ = try PostgresConnection(target.replacingOccurrences(of: server.password, with: wrong))
        })
        #expect(refused.description.contains("password authentication failed"))
        #expect(!refused.description.contains(wrong))
        #expect(!refused.description.contains(server.password))
    }

    @Test("a password from a password file is used when the URL has none (libpq's ~/.pgpass mechanism)")
    func passwordFile() throws {
        let fixture = try PostgresFixture("passfile", wholeDatabase: true)
        let directory = try TemporaryDirectory("pg-passfile")
        defer { directory.remove() }
        let database = String(fixture.url.split(separator: "/").last?.split(separator: "?").first ?? "")
        let file = directory.file("pgpass")
        try Data("127.0.0.1:\(fixture.server.port):\(database):\(fixture.server.user):\(fixture.server.password)\n".utf8)
            .write(to: URL(fileURLWithPath: file))
        chmod(file, 0o600)
        let withoutPassword = fixture.server.url(database: database)

        let connection = try PostgresConnection(withoutPassword + "&passfile=\(file)")
        #expect(try connection.first("SELECT current_user") { (row) throws(PostgresError) in try row.text(0) }
                == fixture.server.user)

        let emptyFile = directory.file("empty")
        try Data().write(to: URL(fileURLWithPath: emptyFile))
        chmod(emptyFile, 0o600)
        let refused = try #require(postgresError { _ = try PostgresConnection(withoutPassword + "&passfile=\(emptyFile)") })
        #expect(refused.description.contains("no password supplied"))
        #expect(!refused.description.contains(fixture.server.password))
    }

    @Test("a transaction whose body throws is rolled back")
    func rollbackOnThrow() throws {
        let fixture = try PostgresFixture("rollback")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (v bigint)")
        let error = postgresError {
            try connection.transaction { () throws(PostgresError) in
                try connection.run("INSERT INTO t VALUES (1)")
                throw PostgresError.conversion("stop here")
            }
        }
        #expect(error == .conversion("stop here"))
        #expect(!connection.isInTransaction)
        #expect(try connection.first("SELECT count(*) FROM t") { (row) throws(PostgresError) in try row.int(0) } == 0)

        // Committed work is visible to another connection.
        try connection.transaction { () throws(PostgresError) in try connection.run("INSERT INTO t VALUES (2)") }
        let other = try fixture.connect()
        #expect(try other.query("SELECT v FROM t") { (row) throws(PostgresError) in try row.int64(0) } == [2])
    }

    @Test("a COMMIT the server turns into a ROLLBACK (a failed statement was swallowed) is an error")
    func swallowedFailureIsNotCommitted() throws {
        let fixture = try PostgresFixture("swallowed")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (v bigint PRIMARY KEY)")
        let error = postgresError {
            try connection.transaction { () throws(PostgresError) in
                try connection.run("INSERT INTO t VALUES (1)")
                _ = try? connection.run("INSERT INTO t VALUES (1)")  // fails: the transaction is now aborted
            }
        }
        #expect(error == .rolledBack(sql: nil))
        #expect(!connection.isInTransaction)
        #expect(try connection.first("SELECT count(*) FROM t") { (row) throws(PostgresError) in try row.int(0) } == 0)
    }

    @Test("a transaction inside another is refused, and the outer one still rolls back as a whole")
    func noNesting() throws {
        let fixture = try PostgresFixture("nesting")
        let connection = try fixture.connect()
        try connection.run("CREATE TABLE t (v bigint)")
        let error = postgresError {
            try connection.transaction { () throws(PostgresError) in
                try connection.run("INSERT INTO t VALUES (1)")
                try connection.transaction { () throws(PostgresError) in try connection.run("INSERT INTO t VALUES (2)") }
            }
        }
        guard case .misuse = error else {
            Issue.record("expected misuse, got \(String(describing: error))")
            return
        }
        #expect(try connection.first("SELECT count(*) FROM t") { (row) throws(PostgresError) in try row.int(0) } == 0)
    }

    @Test("two SERIALIZABLE transactions updating one row: the second fails as a serialization failure")
    func serializationFailure() throws {
        let fixture = try PostgresFixture("serializable")
        let first = try fixture.connect()
        let second = try fixture.connect()
        try first.run("CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL)")
        try first.run("INSERT INTO counter VALUES (1, 0)")

        try first.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        try second.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        _ = try first.first("SELECT n FROM counter WHERE id = 1") { (row) throws(PostgresError) in try row.int64(0) }
        _ = try second.first("SELECT n FROM counter WHERE id = 1") { (row) throws(PostgresError) in try row.int64(0) }
        try first.run("UPDATE counter SET n = n + 1 WHERE id = 1")
        try first.execute("COMMIT")
        let error = try #require(postgresError { try second.run("UPDATE counter SET n = n + 1 WHERE id = 1") })
        #expect(error.sqlstate == "40001")
        #expect(error.isSerializationFailure)
        #expect(error.description.contains("run the whole transaction again"))
        try second.execute("ROLLBACK")

        // Run again, the transaction goes through.
        try second.transaction(.serializable) { () throws(PostgresError) in
            try second.run("UPDATE counter SET n = n + 1 WHERE id = 1")
        }
        #expect(try first.first("SELECT n FROM counter") { (row) throws(PostgresError) in try row.int64(0) } == 2)
    }

    @Test("a connection the server ends reports it lost, and reconnects")
    func connectionLost() throws {
        let fixture = try PostgresFixture("lost")
        let victim = try fixture.connect()
        let admin = try fixture.connect()
        #expect(try admin.first("SELECT pg_terminate_backend($1::int)", [.integer(Int64(victim.backendPID))]) {
            (row) throws(PostgresError) in try row.bool(0)
        } == true)
        let error = try #require(postgresError { try victim.execute("SELECT 1") })
        guard case .connectionLost = error else {
            Issue.record("expected connectionLost, got \(error)")
            return
        }
        #expect(!victim.isConnected)
        #expect(!error.description.contains(fixture.server.password))
        try victim.reconnect()
        #expect(try victim.first("SELECT 41 + 1") { (row) throws(PostgresError) in try row.int(0) } == 42)
    }

    @Test("a store with an answer timeout gives up a call the server leaves unanswered, then goes on in a new session")
    func answerTimeout() throws {
        let fixture = try PostgresFixture("answer")
        let store = try PostgresStore(url: fixture.url, mode: .create, answerTimeoutMs: 3_000)
        let pid = try store.withConnection { Int64($0.backendPID) }
        // The server keeps the call waiting for 30 s: to libpq, a stalled proxy or a vanished host looks
        // the same. Without the timeout the call would wait for it (for ever, on a dead network).
        let outcome = CallOutcome()
        let started = Date()
        Thread.detachNewThread {
            do throws(StoreError) {
                try store.withConnection { (connection) throws(StoreError) in _ = try connection.store("SELECT pg_sleep(30)") }
                outcome.finish(nil, after: Date().timeIntervalSince(started))
            } catch {
                outcome.finish(error, after: Date().timeIntervalSince(started))
            }
        }
        let (error, seconds) = try #require(outcome.wait(seconds: 20), "the call still waited for the server after 20 s")
        #expect(seconds < 15, "the call took \(seconds) s")
        let failure = try #require(error, "the call returned after \(seconds) s instead of failing")
        let message = "\(failure)"
        #expect(message.contains("connection to PostgreSQL was lost") && message.contains("no answer for 3 s"), "\(message)")
        #expect(message.contains("pg_sleep"), "\(message)")
        #expect(!message.contains(fixture.server.password))
        // The next call opens a new session and is answered.
        #expect(try store.counts().isEmpty)
        #expect(try store.withConnection { Int64($0.backendPID) } != pid)
    }

    @Test("a script of several statements runs as one, and the server version is known")
    func script() throws {
        let fixture = try PostgresFixture("script")
        let connection = try fixture.connect()
        try connection.executeScript("CREATE TABLE a (v int); CREATE TABLE IF NOT EXISTS a (v int); CREATE TABLE b (v int)")
        let tables = try connection.query("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1") {
            (row) throws(PostgresError) in try row.text(0)
        }
        #expect(tables == ["a", "b"])
        #expect(connection.serverVersion >= 100_000)
    }
}

/// What a call run on another thread ended with (nil: it returned) and how long it took.
private final class CallOutcome: @unchecked Sendable {
    private let lock = NSLock()
    private var result: (StoreError?, Double)?
    private let done = DispatchSemaphore(value: 0)

    func finish(_ error: StoreError?, after seconds: Double) {
        lock.withLock { result = (error, seconds) }
        done.signal()
    }

    /// The outcome, or nil when the call has not ended within `seconds`.
    func wait(seconds: Double) -> (StoreError?, Double)? {
        guard done.wait(timeout: .now() + seconds) == .success else { return nil }
        return lock.withLock { result }
    }
}
