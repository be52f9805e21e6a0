@testable import JobModel
import Testing

/// The split must give exactly the parts a split at every `/` scalar gives (the kernel's and every
/// server's parts), for every text: not `split(separator: "/")`, where a combining mark joins a `/`.
struct SlashSeparatedPathTests {
    static let texts = [
        "", "/", "//", "a", "/a", "a/", "/a/", "a/b", "a//b", "/tmp/q/obj/o-000001.bin", "dir/sub/file.tar.gz",
        "x\r\n/y", "\r\n", "/\r\n/", "a b/c%2Fd/ e ", ".hidden/..", "é/ü", "caf\u{65}\u{301}/x", "/\u{301}a/b",
        "a/\u{301}", "日本/語/", "emoji/👩‍👩‍👧/z", "mixed/ascii/and/ñ",
    ]

    /// `text` cut at every `/` scalar, each part as its own string.
    static func scalarParts(_ text: String, keepingEmpty: Bool = false) -> [String] {
        text.unicodeScalars.split(separator: "/", maxSplits: .max, omittingEmptySubsequences: !keepingEmpty).map { String(String.UnicodeScalarView($0)) }
    }

    @Test(arguments: texts)
    func partsMatchSplit(text: String) {
        let expected = Self.scalarParts(text)
        // Compared as bytes: `==` on strings would call canonically equivalent parts equal.
        #expect(SlashSeparatedPath.parts(of: text).map { Array($0.utf8) } == expected.map { Array($0.utf8) })
        let expectedAll = Self.scalarParts(text, keepingEmpty: true)
        #expect(SlashSeparatedPath.parts(of: text, keepingEmpty: true).map { Array($0.utf8) } == expectedAll.map { Array($0.utf8) })
        #expect(SlashSeparatedPath.lastPart(of: text).map { Array($0.utf8) } == expected.last.map { Array($0.utf8) })
        let directory = text.utf8.lastIndex(of: UInt8(ascii: "/")).map { String(text.unicodeScalars[..<$0]) }
        #expect(Array(SlashSeparatedPath.directory(of: text).utf8) == Array((directory.map { $0.isEmpty ? "/" : $0 } ?? ".").utf8))
    }

    /// A combining mark after a `/` joins it into another Character; the `..` before it is still a part,
    /// so no reference can hide one (`a/../\u{301}x` named `\u{301}x` beside `a`'s folder).
    @Test func aMarkAfterASlashHidesNoPart() throws {
        #expect(SlashSeparatedPath.parts(of: "a/../\u{301}x").map(String.init) == ["a", "..", "\u{301}x"])
        #expect(SlashSeparatedPath.lastPart(of: "d/\u{301}") == "\u{301}")
        #expect(SlashSeparatedPath.directory(of: "/o/\u{301}x") == "/o")
        for text in ["gs://b/a/../\u{301}x", "gs://b/a/../%CC%81x", "file://b/../%CC%81x", "file://b/..\u{600}/../\u{301}x",
                     "file:///srv/./\u{301}", "http://h/v0/b/bk/o/a%2F..%2F%CC%81x", "https://storage.googleapis.com/bk/../\u{301}x",
                     "http://h/a/../\u{301}x"] {
            #expect(throws: StorageError.self, "\(text)") { try StorageReference(parsing: text) }
        }
        // A leading `/` before a mark is dropped, not kept in the name (`gs://b//\u{301}x` asked for `/\u{301}x`).
        #expect(try StorageReference(parsing: "gs://b/%CC%81x").fullPath == "\u{301}x")
        #expect(try StorageReference(parsing: "gs://b/d/%CC%81x").parent?.fullPath == "d")
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
