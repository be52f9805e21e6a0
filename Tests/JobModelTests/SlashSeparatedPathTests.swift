import JobModel
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
