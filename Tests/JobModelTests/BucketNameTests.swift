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

/// Cloud Storage's own naming rules, which `submit` holds `gs://` buckets to (parsing takes any name a
/// `file://` folder may have): https://cloud.google.com/storage/docs/buckets#naming
struct CloudStorageBucketNameTests {
    @Test("names Cloud Storage can have", arguments: [
        "abc", "my-bucket", "my_bucket", "0bucket9", "my-app.appspot.com", "test-bucket", String(repeating: "a", count: 63),
        String(repeating: String(repeating: "a", count: 63) + ".", count: 3) + String(repeating: "b", count: 30),  // 222
        "1.2.3.4x", "1.2.3",
    ])
    func accepted(_ name: String) {
        #expect(StorageReference.cloudStorageBucketProblem(name) == nil, "\(name)")
    }

    @Test("names Cloud Storage cannot have, and why", arguments: [
        ("BKT", "upper-case letters (write 'bkt')"), ("My-Bucket", "upper-case"), ("b", "1 character long"), ("ab", "2 characters long"),
        (String(repeating: "a", count: 64), "64 characters long"), ("-abc", "start and end with a letter or digit"),
        ("abc_", "start and end"), (".abc", "start and end"), (String(repeating: "a", count: 64) + ".com", "between its dots"),
        (String(repeating: String(repeating: "a", count: 63) + ".", count: 3) + String(repeating: "b", count: 31), "223 characters long"),
        ("192.168.5.4", "an IP address"),
    ])
    func refused(_ name: String, _ reason: String) throws {
        let problem = try #require(StorageReference.cloudStorageBucketProblem(name), "\(name)")
        #expect(problem.contains(reason), "\(name): \(problem)")
    }
}
