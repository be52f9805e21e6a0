@testable import Storage
import Testing
import TestSupport

/// `LocalFiles.lastComponent` and `directory(of:)` scan ASCII paths as bytes: they must answer exactly
/// what the `Character`-based split and search answered, for every kind of path.
@Suite("Path components", .onTestThreads)
struct PathComponentTests {
    private static let paths = [
        "", "/", "//", "///", "a", "a/", "/a", "/a/", "a//b", "/a/b/c.txt", "/a/b//", "dir/sub/.name.01ABC.jobctl-partial",
        "./x", "../y/z", "a\r\n/b", "/srv/a b/c d.bin",
        // Not ASCII: the `Character` path, where a combining mark joined to a `/` keeps it from splitting.
        "é/ü.txt", "/données/été.bin", "dir/\u{301}x", "a/\u{301}", "/\u{301}", "日本/語",
    ]

    @Test("the last component is what the Character split gave", arguments: paths)
    func lastComponent(path: String) {
        let before = path.split(separator: "/").last.map(String.init) ?? path
        #expect(LocalFiles.lastComponent(path) == before)
    }

    @Test("the folder is what the Character search gave", arguments: paths)
    func directory(path: String) {
        let before: String
        if let slash = path.lastIndex(of: "/") {
            let parent = String(path[..<slash])
            before = parent.isEmpty ? "/" : parent
        } else {
            before = "."
        }
        #expect(LocalFiles.directory(of: path) == before)
    }
}
