import Foundation
import Testing
@testable import JobModel

/// Plain http(s) references keep the path and query exactly as written (what is requested), while
/// `fullPath` stays the decoded, normalised form (for names and display).
@Suite struct ExactHTTPReferenceTests {
    @Test("the request form is the text as written; fullPath is decoded", arguments: [
        // (input, description = what is requested, fullPath, name)
        ("http://h/a%2Fb", "http://h/a%2Fb", "a/b", "b"),
        ("http://h/%7Ex", "http://h/%7Ex", "~x", "~x"),
        ("http://h/~x", "http://h/~x", "~x", "~x"),
        ("http://h/%61.txt", "http://h/%61.txt", "a.txt", "a.txt"),
        ("http://h/caf%c3%a9", "http://h/caf%c3%a9", "café", "café"),
        ("http://h/a//b/", "http://h/a//b/", "a/b", "b"),
        ("https://h:8443/p?X-Amz-Signature=ab%2Fcd&b=%7E", "https://h:8443/p?X-Amz-Signature=ab%2Fcd&b=%7E", "p", "p"),
        ("http://h", "http://h/", "", ""),
        ("http://h?q=1", "http://h/?q=1", "", ""),
        // Only what a URL cannot hold is escaped (as a browser does); nothing else changes.
        ("http://h/a b.txt?q=x y", "http://h/a%20b.txt?q=x%20y", "a b.txt", "a b.txt"),
        ("http://h/café|\"x\"", "http://h/caf%C3%A9%7C%22x%22", "café|\"x\"", "café|\"x\""),
        ("http://h/p?a=%zz", "http://h/p?a=%zz", "p", "p"),
    ])
    func requestForm(input: String, description: String, fullPath: String, name: String) throws {
        let reference = try StorageReference(parsing: input)
        #expect(reference.description == description)
        #expect(reference.fullPath == fullPath)
        #expect(reference.name == name)
        // The stored text (JSON specs hold `description`) parses back to the same request.
        let again = try StorageReference(parsing: reference.description)
        #expect(again == reference)
        #expect(again.description == description)
    }

    @Test("forms that differ only in escapes are different references (they are different requests)")
    func escapesDistinguish() throws {
        #expect(try StorageReference(parsing: "http://h/%61") != StorageReference(parsing: "http://h/a"))
        #expect(try StorageReference(parsing: "http://h/a%2Fb") != StorageReference(parsing: "http://h/a/b"))
        #expect(try StorageReference(parsing: "http://h/a") == StorageReference(parsing: "http://h/a#fragment"))
    }

    @Test("dot segments stay refused, written plainly or escaped", arguments: [
        "http://h/a/../b", "http://h/a/%2E%2E/b", "http://h/a%2F..%2Fb", "http://h/./a", "http://h/%2e/a",
    ])
    func dotSegments(input: String) {
        let error = #expect(throws: StorageError.self) { try StorageReference(parsing: input) }
        #expect(error?.code == .pathError)
    }

    /// Before exact paths, a spec stored `description` built from the decoded path re-encoded. Those texts
    /// must still produce exactly the request they produced then (the stored text itself).
    @Test("texts stored by earlier versions still decode to the same request", arguments: [
        "http://127.0.0.1:8080/a/b", "https://h/images%20stars.jpg", "http://h/caf%C3%A9", "http://h/~x",
        "http://h/what%3F.txt?sig=1&x=2", "http://[::1]:8080/x", "https://example.com/?to=me@example.org", "http://h/",
        "http://h/a%25b", "http://h/%23hash",
    ])
    func oldStoredTexts(stored: String) throws {
        let reference = try StorageReference(parsing: stored)
        #expect(reference.description == stored)
        let spec = try JSONDecoder().decode(JobSpec.self, from: Data(#"{"kind":"download-memory","source":"\#(stored)","priority":0,"maxAttempts":5,"queue":"default"}"#.utf8))
        #expect(try StorageReference(parsing: try #require(spec.source)).description == stored)
    }

    @Test("derived references (child, parent, root) use the canonical form of their path")
    func navigation() throws {
        let reference = try StorageReference(parsing: "http://h/dir%2Fsub/%61.txt")
        #expect(reference.parent?.description == "http://h/dir/sub")
        #expect(reference.root.description == "http://h/")
        #expect(try reference.root.child("x y").description == "http://h/x%20y")
    }
}
