import Foundation
import JobModel

/// Whether `target` names a PostgreSQL database rather than an SQLite file: a `postgres://` or
/// `postgresql://` URL (libpq's URI form). Key/value connection strings are accepted by
/// `PostgresConnection` but are not told apart from file paths here.
public func isPostgresURL(_ target: String) -> Bool {
    let lower = target.lowercased()
    return lower.hasPrefix("postgres://") || lower.hasPrefix("postgresql://")
}

/// Whether `target` reads as a libpq key/value connection string (`host=db1 dbname=jobs …`): its first
/// word is one of libpq's connection keywords followed by `=`. Such a target is not a PostgreSQL URL,
/// and taken for an SQLite file name it made `submit` create a local file named after it, password and
/// all; the CLI refuses it. A file whose name really starts so is still reached as `./host=…`.
///
/// See https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS
public func isConnectionKeywords(_ target: String) -> Bool {
    let text = target.drop { $0 == " " || $0 == "\t" || $0 == "\n" }
    guard let equals = text.firstIndex(of: "=") else { return false }
    let keyword = text[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
    return connectionKeywords.contains(keyword)
}

/// libpq's connection keywords (PostgreSQL 16).
private let connectionKeywords: Set<String> = [
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication", "gssencmode",
    "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslrootcert",
    "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version",
    "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
]

/// Why libpq would read `target`'s user information (`USER:PASSWORD@`) otherwise than jobctl does, or
/// nil: a raw `@` or `/` before the URL's last `@` (ahead of its query). libpq ends the user information
/// at the first `@`, and takes a `/` before any `@` for the start of the path (no user information at
/// all); jobctl's redaction ends it at the last `@`. A password written with a raw `@` or `/` was cut
/// there, and libpq quoted its tail as the host name it could not find (`could not translate host name
/// "dor&3xyz@127.0.0.1"`) — pieces too short to scrub reached the terminal. Such a URL is refused,
/// unread: it is ambiguous (the same text could put the `@` in the database's name), and the fix is to
/// percent-encode.
public func userInformationProblem(_ target: String) -> String? {
    guard isPostgresURL(target), let schemeEnd = target.range(of: "://") else { return nil }
    let rest = target[schemeEnd.upperBound...]
    let beforeQuery = rest[..<(rest.firstIndex(of: "?") ?? rest.endIndex)]
    guard let at = beforeQuery.lastIndex(of: "@") else { return nil }
    let userInformation = beforeQuery[..<at]
    guard userInformation.contains("@") || userInformation.contains("/") else { return nil }
    return "the PostgreSQL URL holds a raw '@' or '/' before its last '@': libpq ends USER:PASSWORD at the first '@' "
        + "(and a '/' before it starts the path), so it would read part of the password as the host; percent-encode "
        + "them in the password (@ as %40, / as %2F), or an '@' in the database name as %40"
}

/// `target` with a `POSTGRES://` or `PostgreSQL://` scheme written in lower case: jobctl tells URLs by
/// their scheme without case (RFC 3986 says a scheme has none), libpq only in lower case — it took an
/// upper-case URL whole for a database name, on the default host (`PGHOST`, the local socket).
public func normalizedDatabaseURL(_ target: String) -> String {
    guard isPostgresURL(target), let schemeEnd = target.range(of: "://") else { return target }
    return target[..<schemeEnd.lowerBound].lowercased() + target[schemeEnd.lowerBound...]
}

/// `target` — a `postgres://user:password@host:port/db?…` URL or a libpq key/value string
/// (`host=… password=…`) — with every password replaced by `REDACTED`, for messages, logs and events.
///
/// Redacts the password in the URL's user information, every query parameter and every key/value
/// keyword ending in `password` (`password`, `sslpassword`). Where the text is ambiguous (an `@` in a
/// query value), it removes more than the password, never less.
///
/// See https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING
public func redactedDatabaseURL(_ target: String) -> String {
    var text = target
    if let schemeEnd = text.range(of: "://") {
        let rest = text[schemeEnd.upperBound...]
        // The host cannot contain "@", so the user information ends at the last one; a password may
        // itself contain "@" or "/" when the user did not percent-encode it.
        if let at = rest.lastIndex(of: "@"), let colon = rest[..<at].firstIndex(of: ":") {
            text = String(text[..<colon]) + ":REDACTED" + String(text[at...])
        }
        // libpq percent-decodes a URL's query keys (`pass%77ord=` is its password), as the shared URL
        // redaction reads them: what the scanner's literal match leaves, that catches.
        return SecretRedaction.redactURL(PasswordScanner(text).redactingQueryParameters())
    }
    return PasswordScanner(text).redactingKeywords()
}

/// Finds the values of password parameters in a connection target and replaces them with `REDACTED`.
///
/// It does what these case-insensitive regular expressions (ICU's syntax) do, replacing each match's
/// second part, by hand: compiling them with `NSRegularExpression` cost ~8.7 million instructions
/// (~2.5 ms) each time a process opened a PostgreSQL store. The tests hold it to the expressions.
/// - a URL's query: `([?&][A-Za-z_]*password=)[^&]*`
/// - a key/value string: `((?:^|\s)[A-Za-z_]*password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`
///
/// Both work on Unicode scalars, as ICU does. Letters are ASCII letters and `_`, compared without
/// case, plus the two characters whose case folding is an ASCII letter (U+017F LONG S, a `s`, and
/// U+212A KELVIN SIGN, a `k`); white space is Unicode's `White_Space`.
private struct PasswordScanner {
    private let scalars: [Unicode.Scalar]

    init(_ text: String) {
        scalars = Array(text.unicodeScalars)
    }

    private static let keyword: [Unicode.Scalar] = Array("password".unicodeScalars)

    /// An ASCII letter, `_`, or a character that case-folds to an ASCII letter: `[A-Za-z_]` without case.
    private static func isLetter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x41...0x5A, 0x61...0x7A, 0x5F, 0x17F, 0x212A: return true
        default: return false
        }
    }

    /// `scalar` as the lowercase ASCII letter it matches without case (itself otherwise).
    private static func folded(_ scalar: Unicode.Scalar) -> Unicode.Scalar {
        switch scalar.value {
        case 0x41...0x5A: return Unicode.Scalar(scalar.value + 0x20)!
        case 0x17F: return "s"
        case 0x212A: return "k"
        default: return scalar
        }
    }

    private static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isWhitespace
    }

    /// A line terminator, which ICU's `.` does not match.
    private static func isLineTerminator(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0A...0x0D, 0x85, 0x2028, 0x2029: return true
        default: return false
        }
    }

    /// Where the run of letters from `start` ends, when that run ends in `password`; nil otherwise.
    private func keywordEnd(from start: Int) -> Int? {
        var end = start
        while end < scalars.count, Self.isLetter(scalars[end]) { end += 1 }
        guard end - start >= Self.keyword.count else { return nil }
        for (offset, letter) in Self.keyword.enumerated() where Self.folded(scalars[end - Self.keyword.count + offset]) != letter {
            return nil
        }
        return end
    }

    /// `[?&][A-Za-z_]*password=` then the value up to the next `&`.
    func redactingQueryParameters() -> String {
        var out = String.UnicodeScalarView()
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            out.append(scalar)
            index += 1
            guard scalar == "?" || scalar == "&", let end = keywordEnd(from: index), end < scalars.count, scalars[end] == "=" else {
                continue
            }
            out.append(contentsOf: scalars[index...end])
            index = end + 1
            while index < scalars.count, scalars[index] != "&" { index += 1 }
            out.append(contentsOf: "REDACTED".unicodeScalars)
        }
        return String(out)
    }

    /// At the start or after white space, `[A-Za-z_]*password`, white space, `=`, white space, then the
    /// value: a quoted string (backslash escapes, the closing quote optional) or everything up to white space.
    func redactingKeywords() -> String {
        var out = String.UnicodeScalarView()
        var index = 0
        while index <= scalars.count {
            // The keyword starts here (at the very start) or after one white space character.
            var start: Int?
            if index == 0, keywordValueStart(from: 0) != nil {
                start = 0
            } else if index < scalars.count, Self.isWhitespace(scalars[index]), keywordValueStart(from: index + 1) != nil {
                start = index + 1
            }
            guard let start, let valueStart = keywordValueStart(from: start) else {
                if index < scalars.count { out.append(scalars[index]) }
                index += 1
                continue
            }
            out.append(contentsOf: scalars[index..<valueStart])
            index = valueEnd(from: valueStart)
            out.append(contentsOf: "REDACTED".unicodeScalars)
            if index == scalars.count { break }
        }
        return String(out)
    }

    /// Where the value begins after `[A-Za-z_]*password\s*=\s*` starting at `start`; nil when that is not there.
    private func keywordValueStart(from start: Int) -> Int? {
        guard var index = keywordEnd(from: start) else { return nil }
        while index < scalars.count, Self.isWhitespace(scalars[index]) { index += 1 }
        guard index < scalars.count, scalars[index] == "=" else { return nil }
        index += 1
        while index < scalars.count, Self.isWhitespace(scalars[index]) { index += 1 }
        return index
    }

    /// Where the value that begins at `start` ends: `'(?:[^'\\]|\\.)*'?` or `\S*`.
    private func valueEnd(from start: Int) -> Int {
        var index = start
        guard index < scalars.count, scalars[index] == "'" else {
            while index < scalars.count, !Self.isWhitespace(scalars[index]) { index += 1 }
            return index
        }
        index += 1
        while index < scalars.count {
            let scalar = scalars[index]
            if scalar == "'" { return index + 1 }
            if scalar == "\\" {
                guard index + 1 < scalars.count, !Self.isLineTerminator(scalars[index + 1]) else { return index }
                index += 2
                continue
            }
            index += 1
        }
        return index
    }
}
