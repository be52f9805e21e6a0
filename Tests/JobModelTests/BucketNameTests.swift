import Foundation
@testable import JobModel
import Testing

/// The byte-level bucket-name check accepts exactly what the `CharacterSet` rule it replaced accepted:
/// ASCII alphanumerics (as `CharacterSet.alphanumerics` has them), `-`, `_` and `.`, not dots only.
struct BucketNameTests {
    /// The rule as it was written before (Foundation's character sets).
    static func previousRule(_ bucket: String) -> Bool {
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-_."))
        return !bucket.isEmpty && !bucket.allSatisfy({ $0 == "." })
            && bucket.unicodeScalars.allSatisfy({ allowed.contains($0) && $0.isASCII })
    }

    @Test("every ASCII character alone, inside a name and doubled, is judged as before")
    func everyASCIICharacter() {
        for value in UInt8(0)...UInt8(127) {
            let character = String(UnicodeScalar(value))
            for name in [character, "a\(character)b", "\(character)\(character)", "bucket-\(character)"] {
                #expect(StorageReference.isValidBucketName(name) == Self.previousRule(name), "\(Array(name.utf8))")
            }
        }
    }

    @Test("names with non-ASCII letters, digits and marks, and the dot-only names, are judged as before", arguments: [
        "", ".", "..", "...", ".a", "a.", "my-bucket_01.example", "café", "cafe\u{301}", ".\u{301}", "日本", "٣", "²", "ª",
        "a\u{0}b", "A-Z_0.9", "UPPER", "with space", "tab\tname", "emoji👍", "ﬁ", "Ⅻ",
    ])
    func otherNames(name: String) {
        #expect(StorageReference.isValidBucketName(name) == Self.previousRule(name))
    }

    @Test("a bad bucket is still refused with the same message")
    func refusedAsBefore() {
        #expect(throws: StorageError(.invalidArgument, "'gs://café/x' has an invalid bucket name 'café': use letters, digits, '-', '_' and '.'")) {
            try StorageReference(parsing: "gs://café/x")
        }
        #expect((try? StorageReference(parsing: "file://my_bucket.1/x"))?.bucket == "my_bucket.1")
    }
}
