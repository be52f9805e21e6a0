import Foundation
import Testing
@testable import JobModel

/// `StorageReference(parsing:)` searches ASCII URLs on bytes; it must accept, refuse and build exactly
/// what the Character-wise parser it replaced did (`CharacterwiseReferenceParser`), for valid and
/// invalid inputs, ASCII or not: the same reference (every field and the description), or an error
/// with the same code and message.
struct ReferenceParserEquivalenceTests {
    /// Hand-picked awkward inputs: every accepted form, every refusal, and the Unicode cases where a
    /// Character search and a byte search part ways (a combining mark after `#`, `?`, `/` or `:`).
    static let handPicked: [String] = [
        "http://127.0.0.1:8080/small/f00001.bin", "https://example.com/a/b.txt?x=1&y=2#frag", "HTTP://Example.COM/A",
        "http://h", "http://h/", "http://h//a//b/", "http://h/a%2Fb", "http://h/a%zz", "http://h/a%C3", "http://h/%00",
        "http://h/a b", "http://h/a\"b", "http://h/a?q=1 2", "http://h/?", "http://h/#", "http://h?x", "http://h#x/y",
        "http://h:0/", "http://h:65535/", "http://h:65536/", "http://h:/", "http://h:8:9/", "http://:80/", "http:///x",
        "http://h:+80/", "http://h:0080/", "http://h:99999999999999999999999/", "http://h_x/", "http://h.-/",
        "http://[::1]:8080/x", "http://[::1]/x", "http://[::1", "http://[::1]x/", "http://[::1]:/", "http://[::1]:70000/",
        "http://user:pw@h/x", "http://h/x@y", "http://h/x?u=a@b", "http://a@/x",
        "http://h/./x", "http://h/a/../b", "http://h/a/%2e%2e/b", "http://h/a/.../b",
        "http://h/v0/b/bucket/o/a%2Fb.txt", "http://h/v0/b/bucket", "http://h/v0/b/", "http://h/v0/b//o/x",
        "http://h//v0/b/bk/o/x", "http://h/v0/b/bk/x/y", "http://h/v0/b/b%20k/o/x", "http://h/v0/b/bk/o",
        "https://firebasestorage.googleapis.com/v0/b/bucket/o/a%2Fb.txt", "https://firebasestorage.googleapis.com/v0/b//o/x",
        "https://firebasestorage.googleapis.com//v0/b/bk/o/x", "https://firebasestorage.googleapis.com/v0/b/bk/x/y",
        "https://storage.googleapis.com/bucket/a/b", "https://STORAGE.googleapis.com/bucket", "https://storage.googleapis.com/",
        "https://storage.googleapis.com/b%21/x", "https://storage.googleapis.com/bk/a%2Fb",
        " http://h/x ", "\thttp://h/x", "http://h/x\u{3000}", "\u{3000}http://h/x",
        "http://h/caf\u{E9}", "http://h/cafe\u{301}", "http://h/\u{65E5}\u{672C}?q=\u{8A9E}", "http://h/x#\u{301}a",
        "http://h/x?\u{301}a=1", "http://h/x/\u{301}y", "http://h\u{301}/x", "http://h:\u{301}80/", "http://h:8\u{301}0/",
        "http://h/\u{301}", "http://h\u{E9}/x", "http://h/a#\u{200D}b", "http://h/x?a#\u{301}", "http://h/\u{600}#x",
        "http://h/x\r\n/y", "http://h\r\n/x", "http://h/a\r\n#b", "http://h:80\r\n/",
        "gs://bucket/a/b", "gs://bucket", "gs:///x", "gs://b\u{E9}/x", "gs://bucket/a%2Fb", "gs://.../x",
        "file:///tmp/x", "file://localhost/tmp/x", "file://LOCALHOST/x", "file://named/x", "file://bad name/x",
        "ftp://h/x", "http:/h/x", "h/x", "", "://x", "http://", "https://", "gs://",
    ]

    /// Every scheme with every host and every path: a few thousand combinations.
    static var generated: [String] {
        let schemes = ["http://", "https://", "gs://", "file://"]
        let hosts = ["127.0.0.1:8080", "h", "H.example", "h:", "h:x", "[::1]:8", "u@h", "storage.googleapis.com", "h\u{E9}",
                     "", "localhost", "b_k"]
        let paths = ["", "/", "/a", "/a//b/", "/v0/b/bk/o/x%2Fy", "/a%20b?q=1", "/a#f?g", "/a?b#c", "/%", "/a/../b",
                     "/\u{E9}", "/e\u{301}", "/#\u{301}", "/?\u{301}", "/x\u{0}", "/x y", "/\u{1F600}/z"]
        return schemes.flatMap { scheme in hosts.flatMap { host in paths.map { scheme + host + $0 } } }
    }

    /// What a parse made, comparable: every field and the description, or the error's code and message.
    static func outcome(_ parse: (String) throws(StorageError) -> StorageReference, _ text: String) -> String {
        do {
            let r = try parse(text)
            return "\(r.scheme)|\(r.bucket)|\(r.fullPath)|\(r.query ?? "nil")|\(r.rawPath ?? "nil")|\(r.description)|\(r.encodedPath)"
        } catch {
            return "error \(error.code): \(error.message)"
        }
    }

    @Test func theByteParserAgreesWithTheCharacterwiseOne() {
        var differences: [String] = []
        var accepted = 0
        for text in Self.handPicked + Self.generated where !Self.joinsADelimiter(text) {
            let new = Self.outcome({ (t: String) throws(StorageError) in try StorageReference(parsing: t) }, text)
            let old = Self.outcome({ (t: String) throws(StorageError) in try CharacterwiseReferenceParser.parse(t) }, text)
            if new != old { differences.append("\(text.debugDescription): new \(new) / old \(old)") }
            if !new.hasPrefix("error") { accepted += 1 }
        }
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
        // Both sides of the table are exercised.
        #expect(accepted > 100)
        #expect(accepted < Self.handPicked.count + Self.generated.count - 100)
    }

    /// Whether a `/`, `#` or `?` in `text` shares a Character with a mark (`#\u{301}`, `\u{600}/`): there
    /// the Character-wise parser did not see it, and the byte parser does, as curl and servers do.
    static func joinsADelimiter(_ text: String) -> Bool {
        text.contains { $0.unicodeScalars.count > 1 && $0.unicodeScalars.contains { "/#?".unicodeScalars.contains($0) } }
    }

    /// A `#`, `?` or `/` is read where its byte is, whatever follows it: `#` followed by a combining mark
    /// was one Character that is not `#`, so the Character-wise parser kept the fragment in the path
    /// (curl cuts it there and asks for another object), and `/\u{301}` did not end a bucket's name.
    @Test func aCombiningMarkAfterADelimiterDoesNotHideIt() throws {
        #expect(try StorageReference(parsing: "http://h/x#\u{301}a").fullPath == "x")
        #expect(try StorageReference(parsing: "http://h/x?\u{301}a=1").query == "%CC%81a=1")
        let gs = try StorageReference(parsing: "gs://b/\u{301}x")
        #expect(gs.bucket == "b" && gs.fullPath == "\u{301}x" && gs.description == "gs://b/%CC%81x")
        let firebase = try StorageReference(parsing: "http://h/v0/b/bk/o/\u{301}y", firebaseHosts: ["h"])
        #expect(firebase.scheme == .gs && firebase.bucket == "bk" && firebase.fullPath == "\u{301}y")
        #expect(Self.handPicked.contains(where: Self.joinsADelimiter) && !Self.joinsADelimiter("http://h/\u{E9}#x"))
        #expect(StorageReference.isASCII("http://h/x") && !StorageReference.isASCII("http://h/\u{E9}"))
    }
}
