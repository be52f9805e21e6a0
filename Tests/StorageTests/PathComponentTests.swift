@testable import Storage
import Testing
import TestSupport

/// `LocalFiles.lastComponent` and `directory(of:)` scan paths as bytes: they must answer exactly what a
/// split and search at the `/` scalars answers (the kernel's parts), for every kind of path.
@Suite("Path components", .onTestThreads)
struct PathComponentTests {
    private static let paths = [
        "", "/", "//", "///", "a", "a/", "/a", "/a/", "a//b", "/a/b/c.txt", "/a/b//", "dir/sub/.name.01ABC.jobctl-partial",
        "./x", "../y/z", "a\r\n/b", "/srv/a b/c d.bin",
        // Not ASCII: a combining mark joined to a `/` must not keep it from splitting.
        "é/ü.txt", "/données/été.bin", "dir/\u{301}x", "a/\u{301}", "/\u{301}", "日本/語",
    ]

    @Test("the last component is what a split at the / scalars gives", arguments: paths)
    func lastComponent(path: String) {
        let before = path.unicodeScalars.split(separator: "/").last.map { String(String.UnicodeScalarView($0)) } ?? path
        #expect(Array(LocalFiles.lastComponent(path).utf8) == Array(before.utf8))
    }

    @Test("the folder is what a search for the last / scalar gives", arguments: paths)
    func directory(path: String) {
        let before: String
        if let slash = path.unicodeScalars.lastIndex(of: "/") {
            let parent = String(path.unicodeScalars[..<slash])
            before = parent.isEmpty ? "/" : parent
        } else {
            before = "."
        }
        #expect(LocalFiles.directory(of: path) == before)
    }
}
