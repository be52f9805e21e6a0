import Foundation

/// Whether `target` names a PostgreSQL database rather than an SQLite file: a `postgres://` or
/// `postgresql://` URL (libpq's URI form). Key/value connection strings are accepted by
/// `PostgresConnection` but are not told apart from file paths here.
public func isPostgresURL(_ target: String) -> Bool {
    let lower = target.lowercased()
    return lower.hasPrefix("postgres://") || lower.hasPrefix("postgresql://")
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
        text = replacing(#"([?&][A-Za-z_]*password=)[^&]*"#, in: text)
    } else {
        text = replacing(#"((?:^|\s)[A-Za-z_]*password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)"#, in: text)
    }
    return text
}

/// Keeps group 1 of every match of `pattern` and replaces the rest of the match with `REDACTED`,
/// case-insensitively.
private func replacing(_ pattern: String, in text: String) -> String {
    // The patterns are constants of this file and the tests run them; should one ever fail to compile,
    // hide the whole target rather than risk showing a password.
    guard let expression = try? NSRegularExpression(pattern: pattern, options: [.caseInsensitive]) else {
        return "<database URL hidden>"
    }
    let range = NSRange(text.startIndex..., in: text)
    return expression.stringByReplacingMatches(in: text, options: [], range: range, withTemplate: "$1REDACTED")
}
