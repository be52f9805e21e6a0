import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

/// `SafeDirectory` accepts exactly the one-component names it accepted before its check scanned bytes.
@Suite("safe directory names", .onTestThreads) struct SafeDirectoryNameTests {
    /// The check as it was written before (Foundation's substring search).
    private static func acceptedBefore(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
    }

    static let names = [
        "", ".", "..", "...", "a", ".f.bin.01JOB.jobctl-partial", "a/b", "/", "a/", "/a", "a\0b", "\0", "日本/語", "日本語",
        "é", "e\u{301}", "\u{301}/", "a b", "..a", "a..", "./", "\u{2215}", "\u{FF0F}", "tab\tname", "x\u{0}",
        ".\u{301}", "..\u{301}", "\u{301}.", "....", String(repeating: "n", count: 300),
    ]

    @Test(arguments: names)
    func acceptsTheSameNames(_ name: String) {
        let accepted = (try? SafeDirectory.checkName(name)) != nil
        #expect(accepted == Self.acceptedBefore(name), "\(Array(name.utf8))")
    }

    @Test func refusesSeparatorsAndNULs() {
        for name in ["a/b", "/", "a\0b", "", ".", ".."] {
            #expect(throws: StorageError.self) { try SafeDirectory.checkName(name) }
        }
        #expect((try? SafeDirectory.checkName(".x.jobctl-partial")) != nil)
    }
}
