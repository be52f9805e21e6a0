import Foundation
import StorePort

/// Everything the PostgreSQL store can fail with. Each description says what happened and what to do.
///
/// No case ever holds a password: connection targets are kept only as `redactedDatabaseURL(_:)` makes
/// them, and server messages are scrubbed of the connection's password before they are stored here.
public indirect enum PostgresError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The connection to `target` (redacted) could not be made; `message` is libpq's reason.
    case connectionFailed(target: String, message: String)
    /// libpq, which jobctl loads at the first PostgreSQL connection, could not be loaded; `reason` is the loader's.
    case libraryUnavailable(reason: String)
    /// The connection broke while running `sql`; `message` is libpq's reason.
    case connectionLost(message: String, sql: String?)
    /// The server refused or failed a statement: `sqlstate` is the five-character SQLSTATE
    /// (https://www.postgresql.org/docs/current/errcodes-appendix.html).
    case server(sqlstate: String, message: String, detail: String?, hint: String?, sql: String?)
    /// The server answered in a way the statement cannot have asked for (a COPY, nothing at all).
    case unexpectedResult(status: String, sql: String?)
    /// A transaction's COMMIT was turned into a ROLLBACK by the server, because a statement inside it
    /// had failed and the failure was not passed on.
    case rolledBack(sql: String?)
    /// A value could not be sent or read as the Swift type asked for; the message says which and why.
    case conversion(String)
    /// A statement's parameters (`bytes`, the message that carries them) are more than the server takes in
    /// one message (`limit`); nothing was sent.
    case messageTooLarge(bytes: Int, limit: Int, sql: String?)
    /// The wrapper was used in a way that cannot work (a transaction begun inside another); a bug in jobctl.
    case misuse(String)
    /// The database was migrated by a newer jobctl (`found`) than this binary knows (`known`); it was not touched.
    case newerSchema(found: Int, known: Int)
    /// The ledger lacks versions `missing` below `highest` (see `StoreError.damagedLedger`).
    case damagedLedger(missing: [Int], highest: Int)
    /// Migration `version`_`name` failed with `cause`; its transaction was rolled back.
    case migrationFailed(version: Int, name: String, cause: PostgresError)

    /// The SQLSTATE the server sent, when it sent one.
    public var sqlstate: String? {
        switch self {
        case .server(let sqlstate, _, _, _, _): sqlstate
        case .migrationFailed(_, _, let cause): cause.sqlstate
        default: nil
        }
    }

    /// Whether running the same transaction again may succeed: a serialization failure (40001) or a
    /// deadlock (40P01) under SERIALIZABLE or row locks. The caller retries the whole transaction.
    public var isSerializationFailure: Bool {
        sqlstate == "40001" || sqlstate == "40P01"
    }

    /// The SQLSTATE and the server's message when the server refused what a statement wrote for a reason
    /// of the rows themselves, which the same rows meet again whenever they are written and other rows
    /// need not: nil for any other failure.
    ///
    /// Those are the classes of the data, not of the session or the transaction: 22 (a value the column
    /// or type does not take), 23 (a constraint: NOT NULL, unique, foreign key, check, exclusion), 44 (a
    /// view's check option) and P0 (a PL/pgSQL function or trigger that raised: RAISE, ASSERT). Every
    /// other class is about the transaction or the session and stays so: 40 (a deadlock or serialization
    /// failure: the transaction runs again), 55 (a lock not had in time), 57 (a cancel, a statement
    /// timeout, a server shutting down), 53 (disk, memory, connections), 08 (the connection), 25 (the
    /// transaction's state, a read-only session), 58 and XX (the server's own failures); and 42 (a
    /// missing table, column or function, a privilege the role lacks), which every event of a group meets
    /// alike: a set-up to fix, during which a worker keeps trying its writes.
    ///
    /// The message is the server's primary message on one line, at most `rowRefusalMessageLimit`
    /// characters: not its detail, which may repeat the refused row's values (a check constraint's
    /// "Failing row contains (…)": a whole event with its data), nor the statement.
    ///
    /// See https://www.postgresql.org/docs/current/errcodes-appendix.html
    public var rowRefusal: (sqlstate: String, message: String)? {
        guard case .server(let sqlstate, let message, _, _, _) = self,
              Self.rowRefusalClasses.contains(String(sqlstate.prefix(2))) else { return nil }
        let line = Self.oneLine(message)
        return (sqlstate, line.count > Self.rowRefusalMessageLimit ? String(line.prefix(Self.rowRefusalMessageLimit - 3)) + "..." : line)
    }

    /// The SQLSTATE classes of `rowRefusal`.
    static let rowRefusalClasses: Set<String> = ["22", "23", "44", "P0"]

    /// The longest server message `rowRefusal` keeps.
    static let rowRefusalMessageLimit = 300

    public var description: String {
        switch self {
        case .connectionFailed(let target, let message):
            return Self.followed("cannot connect to PostgreSQL at \(target): \(Self.oneLine(message))", by: "check the host, port, "
                + "database and user in the URL, the password (in the URL, PGPASSWORD or ~/.pgpass), and that the server is running")
        case .libraryUnavailable(let reason):
            return "a PostgreSQL database needs libpq, which could not be loaded (\(Self.oneLine(reason))); install it "
                + "(Debian: libpq5), or use an SQLite database (a file path for --db)"
        case .connectionLost(let message, let sql):
            // Lost at COMMIT, the transaction may have been written before the session went: "try again"
            // made a rerun `submit` create its jobs a second time.
            if let sql, Self.isCommit(sql) { return Self.followed(Self.loss(message, sql: sql), by: StoreError.commitUnconfirmedAdvice) }
            return Self.followed(Self.loss(message, sql: sql), by: "check that the server is up and reachable, then try again")
        case .server(let sqlstate, let message, let detail, let hint, let sql):
            var text = "PostgreSQL error \(sqlstate): \(Self.oneLine(message))"
            if let detail, !detail.isEmpty { text += " (\(Self.oneLine(detail)))" }
            if let sql { text += " in `\(Self.abbreviate(sql))`" }
            if let hint, !hint.isEmpty { text += "; hint: \(Self.oneLine(hint))" }
            if sqlstate == "42501" {
                text += "; the role in the URL lacks this privilege: the tables' owner grants a worker role what "
                    + "workers and the CLI need with `jobctl migrate --grant ROLE`, and runs migrations itself"
            }
            if sqlstate == "40001" || sqlstate == "40P01" {
                text += "; another transaction changed the same rows first: run the whole transaction again"
            }
            return text
        case .unexpectedResult(let status, let sql):
            return "PostgreSQL answered \(status)" + (sql.map { " to `\(Self.abbreviate($0))`" } ?? "")
                + ", which jobctl never asks for; this is a bug in jobctl: please report it"
        case .rolledBack(let sql):
            return "the transaction was rolled back instead of committed"
                + (sql.map { " (`\(Self.abbreviate($0))`)" } ?? "")
                + " because a statement in it failed; nothing of it was written: run it again"
        case .conversion(let message):
            return "a PostgreSQL value could not be converted: \(message)"
        case .messageTooLarge(let bytes, let limit, let sql):
            return "a statement's values are \(bytes) bytes, more than PostgreSQL takes in one message (\(limit) bytes)"
                + (sql.map { " (`\(Self.abbreviate($0))`)" } ?? "")
                + "; nothing of it was sent: a download-memory result that large needs download-file (max_size is at most 512 MiB)"
        case .misuse(let message):
            return "\(message); this is a bug in jobctl: please report it"
        case .newerSchema(let found, let known):
            return "the database schema is version \(found) but this jobctl knows only up to \(known); "
                + "it was left untouched: upgrade jobctl to use it"
        case .damagedLedger(let missing, let highest):
            return StoreError.damagedLedger(missing: missing, highest: highest).description
        case .migrationFailed(let version, let name, let cause):
            return "migration \(version)_\(name) failed and was rolled back: \(cause)"
        }
    }

    /// What `connectionLost` says happened, without what to do.
    static func loss(_ message: String, sql: String?) -> String {
        var what = oneLine(message)
        // libpq ends this message with a full stop; the statement and the advice follow it in the sentence.
        if what.hasSuffix(".") { what.removeLast() }
        return "the connection to PostgreSQL was lost: \(what)" + (sql.map { " (while running `\(abbreviate($0))`)" } ?? "")
    }

    /// Whether `sql` is a transaction's COMMIT: a connection lost while it ran may have committed.
    static func isCommit(_ sql: String) -> Bool {
        sql.trimmingCharacters(in: .whitespacesAndNewlines).uppercased().hasPrefix("COMMIT")
    }

    /// libpq's message on one line. Its lines are joined as sentences: a line that starts a new sentence
    /// (a capital letter) after one that ended without punctuation gets a full stop ("Connection refused.
    /// Is the server running…?"; joined with a space it read "Connection refused Is the server running"),
    /// and a sentence libpq wrapped over two lines ("terminated abnormally / before or while …") is one.
    static func oneLine(_ text: String) -> String {
        var joined = ""
        for line in text.split(whereSeparator: \.isNewline).map({ $0.trimmingCharacters(in: .whitespaces) }) where !line.isEmpty {
            if let last = joined.last {
                let startsSentence = line.first?.isUppercase == true
                joined += startsSentence && !".:;,!?".contains(last) ? ". " : " "
            }
            joined += line
        }
        return joined
    }

    /// `message` followed by `advice` ("check the host, …"): after a question or an exclamation (libpq's
    /// "Is the server running …?") as a sentence of its own, else after a semicolon (a final full stop
    /// dropped: "….; check").
    static func followed(_ message: String, by advice: String) -> String {
        if message.hasSuffix("?") || message.hasSuffix("!") { return message + " " + advice.prefix(1).uppercased() + advice.dropFirst() }
        return (message.hasSuffix(".") ? String(message.dropLast()) : message) + "; " + advice
    }

    private static func abbreviate(_ sql: String) -> String {
        let flat = sql.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        return flat.count > 120 ? String(flat.prefix(117)) + "..." : flat
    }
}
