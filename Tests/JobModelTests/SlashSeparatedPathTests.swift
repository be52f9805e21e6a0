@testable import JobModel
import Testing

/// The byte-level split must give exactly the parts `split(separator: "/")` gives, for every text.
struct SlashSeparatedPathTests {
    static let texts = [
        "", "/", "//", "a", "/a", "a/", "/a/", "a/b", "a//b", "/tmp/q/obj/o-000001.bin", "dir/sub/file.tar.gz",
        "x\r\n/y", "\r\n", "/\r\n/", "a b/c%2Fd/ e ", ".hidden/..", "é/ü", "caf\u{65}\u{301}/x", "/\u{301}a/b",
        "a/\u{301}", "日本/語/", "emoji/👩‍👩‍👧/z", "mixed/ascii/and/ñ",
    ]

    @Test(arguments: texts)
    func partsMatchSplit(text: String) {
        let expected = text.split(separator: "/").map(String.init)
        #expect(SlashSeparatedPath.parts(of: text).map(String.init) == expected)
        let expectedAll = text.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        #expect(SlashSeparatedPath.parts(of: text, keepingEmpty: true).map(String.init) == expectedAll)
        #expect(SlashSeparatedPath.lastPart(of: text).map(String.init) == text.split(separator: "/").last.map(String.init))
    }

    @Test func referencesSplitTheirPathsAsBefore() throws {
        let reference = try StorageReference(parsing: "file:///tmp//bucket/dir/file.bin/")
        #expect(reference.fullPath == "tmp/bucket/dir/file.bin")
        #expect(reference.name == "file.bin")
        #expect(try StorageReference(parsing: "gs://b/caf\u{65}\u{301}/x\u{301}").name == "x\u{301}")
        #expect(throws: StorageError.self) { try StorageReference(parsing: "gs://b/a/../c") }
    }
}

/// `StorageReference.alreadyNormal`, the one-pass look at a path, answers only where the general
/// normalisation (split at `/`, check each part, join) gives the path back with one leading `/` dropped,
/// and gives exactly that answer.
struct AlreadyNormalPathTests {
    /// The general normalisation, as `normalise` does it without the fast path; nil where it throws.
    static func general(_ path: String) -> String? {
        let parts = SlashSeparatedPath.parts(of: path)
        if parts.contains(where: { $0 == "." || $0 == ".." }) || path.utf8.contains(0) { return nil }
        return parts.joined(separator: "/")
    }

    static let table = [
        "", "/", "//", "a", "/a", "//a", "a/", "/a/", "a/b", "/a/b", "a//b", "/a//b", "/a/b/", ".", "..", "...",
        "/.", "/..", "/...", "a/.", "a/..", "a/...", "./a", "../a", ".../a", "a/./b", "a/../b", "a/.../b", ".a/b.",
        "/tmp/q/obj/o-000001.bin", "a\u{0}b", "/\u{0}", "é", "/é/x", "caf\u{65}\u{301}/x", "/\u{301}a/b", "a b/ c ",
        "\r\n/x", "a/\t", "%2F/x", "a/.hidden", "..a/b..",
    ]

    @Test(arguments: table)
    func agreesWithTheGeneralWay(path: String) throws {
        try check(path)
    }

    @Test func agreesOnRandomPaths() throws {
        // Paths of 0–12 bytes from the characters that matter: `/`, `.`, a letter, NUL, a space, a
        // non-ASCII letter and a combining mark (which joins a `/` into another Character).
        let alphabet = ["/", "/", "/", ".", ".", ".", "a", "b", "\u{0}", " ", "é", "\u{301}"]
        var generator = SystemRandomNumberGenerator()
        var fastAnswers = 0
        for _ in 0..<20_000 {
            let length = Int.random(in: 0...12, using: &generator)
            let path = (0..<length).map { _ in alphabet.randomElement(using: &generator)! }.joined()
            if try check(path) { fastAnswers += 1 }
        }
        // The fast path must have answered for a good share of them, or this proves nothing about it.
        #expect(fastAnswers > 1_000)
    }

    /// Whether the fast path answered.
    @discardableResult
    func check(_ path: String) throws -> Bool {
        let general = Self.general(path)
        if let fast = StorageReference.alreadyNormal(path) {
            #expect(fast == general, "path \(path.debugDescription)")
            #expect(try StorageReference.normalise(path) == fast)
            return true
        }
        if let general {
            #expect(try StorageReference.normalise(path) == general, "path \(path.debugDescription)")
        } else {
            #expect(throws: StorageError.self, "path \(path.debugDescription)") { try StorageReference.normalise(path) }
        }
        return false
    }
}
