import Foundation
import JobModel
import Testing
@testable import PostgresStore
import TestSupport

@Suite("Database URLs with their passwords redacted", .onTestThreads)
struct RedactionTests {
    @Test("every password is replaced by REDACTED and nothing else of value is lost",
          arguments: [
              ("postgres://jobs:s3cret@db.example:5432/jobctl?sslmode=require",
               "postgres://jobs:REDACTED@db.example:5432/jobctl?sslmode=require"),
              ("postgresql://jobs:p%40ss%2Fword@db/jobctl", "postgresql://jobs:REDACTED@db/jobctl"),
              ("postgres://jobs:raw@pass/with/slash@db:5432/jobctl", "postgres://jobs:REDACTED@db:5432/jobctl"),
              ("postgres://jobs:@db/jobctl", "postgres://jobs:REDACTED@db/jobctl"),
              ("postgres://jobs@db:5432/jobctl?sslmode=verify-full", "postgres://jobs@db:5432/jobctl?sslmode=verify-full"),
              ("postgres://db/jobctl?user=jobs&password=s3cret&sslmode=require",
               "postgres://db/jobctl?user=jobs&password=REDACTED&sslmode=require"),
              ("postgres://db/jobctl?sslpassword=keypass", "postgres://db/jobctl?sslpassword=REDACTED"),
              ("host=db user=jobs password=s3cret dbname=jobctl", "host=db user=jobs password=REDACTED dbname=jobctl"),
              ("host=db password = 's3 cr\\'et' dbname=jobctl", "host=db password = REDACTED dbname=jobctl"),
              ("password=s3cret", "password=REDACTED"),
              ("PASSWORD=s3cret host=db", "PASSWORD=REDACTED host=db"),
              ("/var/lib/jobctl/jobs.db", "/var/lib/jobctl/jobs.db"),
              // libpq percent-decodes a URL's query keys: `pass%77ord` is its password.
              ("postgres://db/jobctl?user=jobs&pass%77ord=s3cret", "postgres://db/jobctl?user=jobs&pass%77ord=REDACTED"),
              ("postgres://db/jobctl?%70assword=s3cret&sslmode=require", "postgres://db/jobctl?%70assword=REDACTED&sslmode=require"),
          ])
    func redacts(input: String, expected: String) {
        let redacted = redactedDatabaseURL(input)
        #expect(redacted == expected)
        for secret in ["s3cret", "p%40ss", "raw@pass", "keypass", "s3 cr"] {
            #expect(!redacted.contains(secret))
        }
    }

    @Test("an @ in a query value makes redaction remove more, never leave a password")
    func ambiguousAt() {
        let redacted = redactedDatabaseURL("postgres://jobs:s3cret@db/jobctl?application_name=a@b")
        #expect(!redacted.contains("s3cret"))
        #expect(redacted.hasPrefix("postgres://jobs:REDACTED@"))
    }

    /// libpq's own message for a target it cannot parse quoted a piece of the password (one holding an
    /// unencoded `/`), which it never knew as a password, so the usual scrub missed it.
    @Test("a target libpq cannot parse shows no piece of its password", arguments: [
        "postgres://u:SECRET/123xyz@127.0.0.1:1/db", "postgres://u:SECRET:9999@127.0.0.1/db",
    ])
    func unparsableTargetScrubbed(target: String) {
        let error = #expect(throws: PostgresError.self) { _ = try PostgresConnection(target, connectTimeoutSeconds: 1) }
        let text = String(describing: error)
        #expect(!text.contains("SECRET") && !text.contains("123xyz"), "\(text)")
        #expect(PostgresConnection.writtenPasswordPieces(target).contains("SECRET"))
    }

    /// libpq ends a URL's user information at the first `@`, so a password holding a raw `@` left its
    /// tail in "could not translate host name "Tail@127.0.0.1""; and it quotes a query password it
    /// cannot percent-decode whole ("invalid percent-encoded token"). The redaction of the target read
    /// the password to the last `@`, and knew nothing of the query's: both pieces were printed.
    @Test("a password libpq cuts at its first @, or cannot percent-decode in the query, shows no piece", arguments: [
        ("postgres://u:Hunter2Prefix@SecretTail@127.0.0.1:1/db", ["Hunter2Prefix", "SecretTail"]),
        ("postgres://u@127.0.0.1:1/db?password=Hunter2%G0secret", ["Hunter2", "G0secret"]),
        ("postgres://u@127.0.0.1:1/db?sslmode=disable&password=Tr0ub4dor%ZZ", ["Tr0ub4dor"]),
    ])
    func passwordPiecesLibpqQuotes(target: String, secrets: [String]) {
        let error = #expect(throws: PostgresError.self) { _ = try PostgresConnection(target, connectTimeoutSeconds: 1) }
        let text = String(describing: error)
        for secret in secrets { #expect(!text.contains(secret), "\(text)") }
    }

    @Test("postgres URLs are told apart from file paths and from key/value connection strings")
    func recognisesURLs() {
        #expect(isPostgresURL("postgres://db/jobctl"))
        #expect(isPostgresURL("PostgreSQL://db/jobctl"))
        #expect(!isPostgresURL("jobs.db"))
        #expect(!isPostgresURL("/tmp/postgres://x"))
        #expect(normalizedDatabaseURL("POSTGRES://U:Pw@Db/Jobs") == "postgres://U:Pw@Db/Jobs")
        #expect(normalizedDatabaseURL("PostgreSQL://db/jobctl") == "postgresql://db/jobctl")
        #expect(normalizedDatabaseURL("jobs.db") == "jobs.db")
        for keywords in ["host=db dbname=jobs", " dbname = jobs", "PASSWORD=x", "service=jobs", "sslmode=require host=db"] {
            #expect(isConnectionKeywords(keywords), "\(keywords)")
        }
        for path in ["jobs.db", "./host=db", "/srv/host=db", "a=b.db", "postgres://db/x?host=y", ""] {
            #expect(!isConnectionKeywords(path), "\(path)")
        }
    }

    /// The regular expressions `redactedDatabaseURL` once ran (through `NSRegularExpression`), kept here
    /// as the oracle its scanner is held to.
    static func redactedByExpressions(_ target: String) -> String {
        func replacing(_ pattern: String, in text: String) -> String {
            let expression = try! NSRegularExpression(pattern: pattern, options: [.caseInsensitive])
            return expression.stringByReplacingMatches(in: text, options: [], range: NSRange(text.startIndex..., in: text),
                                                       withTemplate: "$1REDACTED")
        }
        var text = target
        if let schemeEnd = text.range(of: "://") {
            let rest = text[schemeEnd.upperBound...]
            if let at = rest.lastIndex(of: "@"), let colon = rest[..<at].firstIndex(of: ":") {
                text = String(text[..<colon]) + ":REDACTED" + String(text[at...])
            }
            // Then the shared URL redaction, which reads query keys percent-decoded, as libpq does.
            return SecretRedaction.redactURL(replacing(#"([?&][A-Za-z_]*password=)[^&]*"#, in: text))
        }
        return replacing(#"((?:^|\s)[A-Za-z_]*password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)"#, in: text)
    }

    @Test("the scanner redacts exactly what the regular expressions did, over 40,000 made-up targets")
    func sameAsTheExpressions() {
        // Pieces that make and break the patterns: keywords in any case, separators, quotes and escapes,
        // Unicode white space and line breaks, characters that case-fold to ASCII letters.
        let pieces = ["password", "PassWord", "sslpassword", "pa\u{17F}\u{17F}word", "\u{212A}password", "x", "_", "=", " = ", " ",
                      "\t", "\n", "\r\n", "\u{A0}", "\u{2028}", "\u{85}", "'", "\\", "\\'", "\\\n", "&", "?", "@", ":", "/",
                      "postgres://", "host=db", "s3cret", "é", "e\u{301}", "👩‍👩‍👧", "İ", "ı"]
        var generator = SystemRandomNumberGenerator()
        var mismatches: [(String, String, String)] = []
        // The rare joins, each tried for sure: an exotic letter or space right before a keyword.
        for lead in ["", " ", "\u{A0}", "\u{2028}", "x", "İ", "ı", "\u{17F}", "\u{212A}", "é"] {
            for keyword in ["password", "pa\u{17F}\u{17F}word", "PASSWORD"] {
                for target in ["h=1 \(lead)\(keyword)=s3cret", "\(lead)\(keyword) = 'a\\'b' c", "postgres://h/d?\(lead)\(keyword)=s3cret&x=1",
                               "postgres://h/d?a=1&\(lead)\(keyword)=s3cret"] {
                    let (expected, got) = (Self.redactedByExpressions(target), redactedDatabaseURL(target))
                    if got != expected { mismatches.append((target, expected, got)) }
                }
            }
        }
        for round in 0..<40_000 {
            let count = 1 + round % 12
            var target = round % 3 == 0 ? "postgres://u:p@h/d?" : ""
            for _ in 0..<count { target += pieces[Int.random(in: 0..<pieces.count, using: &generator)] }
            let expected = Self.redactedByExpressions(target)
            let got = redactedDatabaseURL(target)
            if got != expected && mismatches.count < 10 { mismatches.append((target, expected, got)) }
        }
        #expect(mismatches.isEmpty, "\(mismatches.map { "\($0.0.debugDescription): expressions \($0.1.debugDescription), scanner \($0.2.debugDescription)" })")
    }
}
