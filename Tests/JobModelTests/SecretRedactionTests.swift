@testable import JobModel
import Testing

@Suite("secret redaction") struct SecretRedactionTests {
    @Test("redactedURL hides query, fragment and userinfo secrets", arguments: [
        ("http://h/p?token=abc", "http://h/p?token=REDACTED"),
        ("http://h/p?a=1&access_token=abc&b=2", "http://h/p?a=1&access_token=REDACTED&b=2"),
        ("http://user:pw@h:8/p?upload_id=x#frag", "http://user:REDACTED@h:8/p?upload_id=REDACTED#frag"),
        ("https://ghp_abc@h/p", "https://REDACTED@h/p"),
        ("https://h/p?X-Amz-Signature=s&X-Amz-Credential=c&X-Amz-Date=d",
         "https://h/p?X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED&X-Amz-Date=REDACTED"),
        ("https://h/p?X-Goog-Signature=s&X-Goog-Date=d", "https://h/p?X-Goog-Signature=REDACTED&X-Goog-Date=d"),
        ("http://h/p?APIKEY=a&Api_Key=b&key=c&secret=d&sig=e&signature=f&password=g",
         "http://h/p?APIKEY=REDACTED&Api_Key=REDACTED&key=REDACTED&secret=REDACTED&sig=REDACTED&signature=REDACTED&password=REDACTED"),
        ("http://h/p?client_secret=a&refresh_token=b&auth_token=c&alt=media",
         "http://h/p?client_secret=REDACTED&refresh_token=REDACTED&auth_token=REDACTED&alt=media"),
        ("http://h/cb#access_token=abc&token_type=bearer", "http://h/cb#access_token=REDACTED&token_type=REDACTED"),
        ("http://h/p?acc%65ss_token=abc", "http://h/p?acc%65ss_token=REDACTED"),
        ("http://h/p?a=1;sig=x", "http://h/p?a=1;sig=REDACTED"),
        ("postgres://jobs:hunter2@db.example:5432/jobctl", "postgres://jobs:REDACTED@db.example:5432/jobctl"),
        // A PostgreSQL URL's bare userinfo is a user name (as `migrate` prints it), an HTTP URL's a token.
        ("postgres://jobs@db.example/jobctl", "postgres://jobs@db.example/jobctl"),
        ("PostgreSQL://jobs@db.example/jobctl?password=x", "PostgreSQL://jobs@db.example/jobctl?password=REDACTED"),
        ("http://h/p", "http://h/p"),
        ("http://h/p?token=&key=REDACTED&sig=*****", "http://h/p?token=&key=REDACTED&sig=*****"),
        ("gs://bucket/a%20b.txt", "gs://bucket/a%20b.txt"),
        ("/local/path?token=x", "/local/path?token=x"),
        // Path parameters (RFC 3986 3.3), where servers put session ids.
        ("https://h/files;jsessionid=S1/a.bin;token=T1?x=1", "https://h/files;jsessionid=REDACTED/a.bin;token=REDACTED?x=1"),
        ("http://h/a;PHPSESSID=S2;v=2", "http://h/a;PHPSESSID=REDACTED;v=2"),
        ("http://h/a;b/c", "http://h/a;b/c"),
        // A password holding `/`, `?` or `#` raw (pasted proxy URLs): RFC 3986 would end the authority
        // there and leave the rest of the password in the path.
        ("http://u:pa/ssS3CRET@127.0.0.1:3128", "http://u:REDACTED@127.0.0.1:3128"),
        ("http://u:pa#ssS3CRET@127.0.0.1:3128/x?y=1", "http://u:REDACTED@127.0.0.1:3128/x?y=1"),
        ("http://u:pa?ss@S3CRET@proxy:3128", "http://u:REDACTED@proxy:3128"),
        // An `@` in a path after a real port, or without a colon before it, is a path's.
        ("https://h:8443/@scope/pkg", "https://h:8443/@scope/pkg"),
        ("https://registry.example/@scope/pkg", "https://registry.example/@scope/pkg"),
        ("http://[::1]:8080/a@b", "http://[::1]:8080/a@b"),
        ("http://h:/a@b", "http://h:/a@b"),
        // A URL inside a parameter's value (a redirect target) keeps no password or token: raw, redacted
        // in place; percent-encoded, hidden whole when its decoding holds one; past three levels, whole.
        ("http://h/nothere?next=http://u2:pw2secret@h2:81/x?token=TOK1&sig=S", "http://h/nothere?next=http://u2:REDACTED@h2:81/x?token=REDACTED&sig=REDACTED"),
        ("http://h/p?next=https://h2/x?a=1", "http://h/p?next=https://h2/x?a=1"),
        ("http://h/p?next=http%3A%2F%2Fh2%2Fx%3Ftoken%3DTOK2&a=1", "http://h/p?next=REDACTED&a=1"),
        ("http://h/p?next=http%3A%2F%2Fh2%2Fx%3Fa%3D1", "http://h/p?next=http%3A%2F%2Fh2%2Fx%3Fa%3D1"),
        ("http://h/p?a=http://h?b=http://h?c=http://h?d=http://h?e=1", "http://h/p?a=http://h?b=http://h?c=http://h?d=REDACTED"),
    ])
    func redaction(input: String, expected: String) {
        #expect(redactedURL(input) == expected)
    }

    /// The values `redactURL` hides, for scrubbing a text that quotes them without their URL: each
    /// one it replaces, as written and decoded; nothing of a URL it leaves alone.
    @Test func secretValuesAreWhatRedactionHides() {
        #expect(SecretRedaction.secretValues(in: "http://u:p@ss@h/a;jsessionid=J1/b?x=1&sig=a%2Fb&token=#access_token=F1")
                == ["p@ss", "J1", "a%2Fb", "a/b", "F1"])
        #expect(SecretRedaction.secretValues(in: "https://ghp_abc@h/p?key=REDACTED") == ["ghp_abc"])
        #expect(SecretRedaction.secretValues(in: "postgres://jobs@db/x") == [])
        #expect(SecretRedaction.secretValues(in: "http://h/p?alt=media") == [])
        #expect(SecretRedaction.secretValues(in: "http://u:pa/ssS3CRET@proxy:3128") == ["pa/ssS3CRET"])
        #expect(SecretRedaction.redactEndpoint("u:pa?ssS3CRET@proxy:3128") == "u:REDACTED@proxy:3128")
        // An endpoint's userinfo runs to its last `@`: it has no path an `@` could belong to.
        #expect(SecretRedaction.redactEndpoint("http://u:a/b@c/d@proxy:3128") == "http://u:REDACTED@proxy:3128")
        #expect(SecretRedaction.endpointSecretValues(in: "u:a/b@c/d@proxy:3128") == ["a/b@c/d"])
        #expect(SecretRedaction.redactEndpoint("proxy:3128") == "proxy:3128")
        for url in ["http://u:p@ss@h/a;jsessionid=JSESS1/b?x=1&sig=a%2Fb#access_token=FRAG1", "https://ghp_abc@h/p?key=K3Y1&a=1"] {
            let scrubbed = SecretRedaction.scrub(url, secrets: SecretRedaction.secretValues(in: url))
            #expect(scrubbed == redactedURL(url), "\(scrubbed)")
        }
        // A secret too short to be told from ordinary text is left in it.
        #expect(SecretRedaction.scrub("a b abc abcd", secrets: ["a", "abc", "abcd"]) == "a b abc REDACTED")
    }

    @Test func urlsInsideTextAreRedacted() {
        let text = "the upload to http://h/u?upload_id=SESSION failed; see <https://u:pw@h/x?key=K>, then 'gs://b/o'."
        let redacted = SecretRedaction.redactURLs(in: text)
        #expect(redacted == "the upload to http://h/u?upload_id=REDACTED failed; see <https://u:REDACTED@h/x?key=REDACTED>, then 'gs://b/o'.")
        let json = #"{"sessionURI":"http:\/\/h\/u?upload_id=S1&x=2","other":"https://h/?token=T2"}"#
        let redactedJSON = SecretRedaction.redactURLs(in: json)
        #expect(!redactedJSON.contains("S1") && !redactedJSON.contains("T2"), "\(redactedJSON)")
        #expect(redactedJSON.contains("x=2"))
        #expect(SecretRedaction.redactURLs(in: "no urls here") == "no urls here")
        #expect(SecretRedaction.redactURLs(in: "fetched https://h/d;jsessionid=S3 ok;") == "fetched https://h/d;jsessionid=REDACTED ok;")
    }

    /// An apostrophe is legal in a query (`?a='`): the scan ended the URL there, and the worker's log
    /// printed the `token=` after it.
    @Test func aQuoteInTheQueryHidesNoParameter() {
        let line = "claimed source=http://127.0.0.1:1/e500?a='&token=SECRET123 kind=download-memory"
        let redacted = SecretRedaction.redactURLs(in: line)
        #expect(!redacted.contains("SECRET123") && redacted.hasSuffix(" kind=download-memory"), "\(redacted)")
        #expect(SecretRedaction.redactURLs(in: "see 'https://h/x?a=1&sig=S2'.") == "see 'https://h/x?a=1&sig=REDACTED'.")
        // A URL quoted with apostrophes keeps its closing one, whatever its query holds.
        #expect(SecretRedaction.redactURLs(in: "'http://h/e?a='&token=S3' is a plain http URL")
                == "'http://h/e?a='&token=REDACTED' is a plain http URL")
        #expect(SecretRedaction.redactURLs(in: "'http://h/?token=S4'X'") == "'http://h/?token=REDACTED'")
        // Before the query an apostrophe still ends a URL quoted in a sentence.
        #expect(SecretRedaction.redactURLs(in: "'gs://b/o' and 'https://h/p'") == "'gs://b/o' and 'https://h/p'")
    }
}

// MARK: - The byte-level guard against the Foundation search it replaced

/// Texts around the guard's edges: URLs plain and JSON-escaped, near-misses, a combining mark on the
/// colon, non-ASCII text, empty text.
private let guardInputs: [String] = [
    "", "plain text", "path=/tmp/a b", "https://h/x?token=1", "see \"https:\\/\\/h\\/x?sig=2\"", ":/", ":\\/",
    "a:/b", "a:\\/b", "::://", "x:\u{301}//y?token=1", "é://h?token=1", "日本 https://h/x", ":", "/ /", "http:/\\/x",
]

@Suite struct SecretRedactionGuardTests {
    /// The fast path is taken only where Foundation's `contains` found no separator, so it returns the
    /// text unchanged exactly where the old code did; elsewhere the result is what the search gives.
    @Test(arguments: guardInputs)
    func theGuardMissesNoSeparatorFoundationFinds(_ text: String) {
        let foundationFinds = text.contains("://") || text.contains(":\\/\\/")
        if foundationFinds {
            #expect(SecretRedaction.mayHoldSchemeSeparator(text), "'\(text)'")
        }
        if !SecretRedaction.mayHoldSchemeSeparator(text) {
            #expect(SecretRedaction.redactURLs(in: text) == text)
        }
    }

    @Test func urlsAreStillRedactedPlainAndEscaped() {
        #expect(!SecretRedaction.redactURLs(in: "GET https://h/x?token=secret1 failed").contains("secret1"))
        #expect(!SecretRedaction.redactURLs(in: #"{"u":"https:\/\/h\/x?sig=secret2"}"#).contains("secret2"))
    }
}

// MARK: - Texts without a secret's bytes skip the scan

/// URLs with and without userinfo, query, fragment and JSON escapes; schemes in odd places; non-ASCII.
private let secretGuardInputs: [String] = guardInputs + [
    "file:///tmp/jobs/objects/o-000001.bin", "gs://bucket/a/b c.txt", "https://user:pw@h/x", "https://tok@h/x",
    "https://h/x#access_token=1", "https://h/x?a=1", "http://h:8080/x y https://g/z", "see <https://h/x>, then",
    "https:\\/\\/h\\/x", "http:\\/\\/a\\/b/c", "\\", "x@y", "x?y", "x#y", "file://héllo/wörld", "a://b://c",
    "https://h/x). Next", "s3+x.y-z://h/p", "http://h/%41%40", "ftp://h/x\u{301}@y",
]

@Suite struct SecretRedactionSkipTests {
    /// The byte check in front of the scan skips only texts the scan returns unchanged, and the scan's
    /// answer is `redactURLs`'s everywhere else.
    @Test(arguments: secretGuardInputs)
    func skippedTextsAreThoseTheScanLeavesAlone(_ text: String) {
        let scanned = SecretRedaction.redactURLsScanning(in: text)
        if !SecretRedaction.mayHoldSecret(text) {
            #expect(scanned.utf8.elementsEqual(text.utf8), "'\(text)' → '\(scanned)'")
        }
        #expect(SecretRedaction.redactURLs(in: text).utf8.elementsEqual(scanned.utf8), "'\(text)'")
    }

    @Test func aTextWithASecretIsStillScanned() {
        #expect(SecretRedaction.mayHoldSecret("https://h/x?token=1"))
        #expect(SecretRedaction.mayHoldSecret("https://u:p@h/x"))
        #expect(SecretRedaction.mayHoldSecret("https://h/x#sig=1"))
        #expect(SecretRedaction.mayHoldSecret(#"https:\/\/h\/x"#))
        #expect(!SecretRedaction.mayHoldSecret("file:///tmp/a.bin"))
        #expect(SecretRedaction.redactURLs(in: "https://u:secret3@h/x") == "https://u:REDACTED@h/x")
    }
}

/// The errors of a manifest are printed through `redactURLs` as one text: its time grows with the text,
/// not with the text times its URLs.
@Suite("secret redaction of long texts") struct LongTextRedactionTests {
    @Test("5,000 error lines with 15,000 URLs redact in well under 5 s, as each line alone would")
    func manyLinesOfURLsRedactInLinearTime() {
        let lines = (0..<5_000).map { index in
            "m.yaml:\(index + 4):5: error: duplicate key 'source' (first written at line 3, column 5); write each key once\n"
                + "    source: \"https://u:p@h/y?X-Goog-Signature=s\(index)&a=1\" # gs://b/\(index) file:///x\n    ^"
        }
        let text = lines.joined(separator: "\n")
        let clock = ContinuousClock()
        var redacted = ""
        let elapsed = clock.measure { redacted = SecretRedaction.redactURLs(in: text) }
        #expect(elapsed < .seconds(5), "\(elapsed) for \(text.utf8.count) bytes")
        #expect(redacted == lines.map { SecretRedaction.redactURLs(in: $0) }.joined(separator: "\n"))
        #expect(redacted.contains("https://u:REDACTED@h/y?X-Goog-Signature=REDACTED&a=1") && !redacted.contains("Signature=s1&"))
    }

    /// A URL without `@`, `?`, `#` or `;` holds nothing to hide: it comes back byte for byte (by a byte
    /// scan, without the parse), whatever its scheme, case or script; one with them still goes through
    /// the parse.
    @Test func aURLWithNothingToHideComesBackAsItIs() {
        for url in ["http://127.0.0.1:8080/small/f00001.bin", "gs://bucket/a/b c.txt", "file:///tmp/caf\u{e9}/x",
                    "HTTPS://Host/%41%2F/token=x", "s3://b/k\u{301}e\u{301}", "not a url", ""] {
            #expect(SecretRedaction.redactURL(url) == url)
            #expect(Array(SecretRedaction.redactURL(url).utf8) == Array(url.utf8))
        }
        #expect(SecretRedaction.redactURL("https://h/a;token=x") == "https://h/a;token=REDACTED")
        #expect(SecretRedaction.redactURL("https://u:p@h/a") == "https://u:REDACTED@h/a")
        #expect(SecretRedaction.redactURL("https://h/a#access_token=x") == "https://h/a#access_token=REDACTED")
    }
}

/// Credentials a server's text quotes in the shapes servers write them, replaced; its ordinary words kept.
@Suite("credentials in a server's text") struct CredentialWordsTests {
    @Test("each shape of a quoted credential is replaced", arguments: [
        (#""private_key": "-----BEGIN PRIVATE KEY-----\nMIIEs3cret\n-----END PRIVATE KEY-----""#, #""private_key": "REDACTED""#),
        (#"{"access_token" : "ya29.s3cret"}"#, #"{"access_token" : "REDACTED"}"#),
        ("{'password': 's3cret'}", "{'password': 'REDACTED'}"),
        ("password = s3cret and more", "password = REDACTED and more"),
        ("password='s3cret'", "password='REDACTED'"),
        (#"{\"access_token\": \"s3cret\"}"#, #"{\"access_token\": \"REDACTED\"}"#),
        ("Cookie: theme=dark; sessionid=s3cret\nnext line", "Cookie: REDACTED\nnext line"),
        (#""password": "ab\"s3cret""#, #""password": "REDACTED""#),
        ("Authorization:Bearer s3cretTOKEN99", "Authorization:Bearer REDACTED"),
        ("refused Bearer ya29.A0s3cret here", "refused Bearer REDACTED here"),
        ("db_password=s3cret X-Upload-Token: AbCs3cret42", "db_password=REDACTED X-Upload-Token: REDACTED"),
    ])
    func replaced(_ text: String, _ expected: String) {
        #expect(SecretRedaction.redactCredentialWords(in: text) == expected)
    }

    @Test("a server's ordinary words are kept", arguments: [
        "Bearer token expired", "Basic authentication is disabled; use Bearer tokens", "Invalid token: expired",
        "SignatureDoesNotMatch: The request signature we calculated does not match", "tokens=0 remaining; max_tokens: 4096",
        "password: must be 12 characters", "signature: does not match", "key: photos/a.jpg", "credentials: missing",
    ])
    func kept(_ text: String) {
        #expect(SecretRedaction.redactCredentialWords(in: text) == text)
    }
}
