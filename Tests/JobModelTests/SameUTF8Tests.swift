import JobModel
import Testing

/// `hasSameUTF8(as:)` must answer exactly what comparing the UTF-8 views byte by byte answers.
struct SameUTF8Tests {
    static let texts: [String] = [
        "", "a", "01KB0ZQ4N6V5R3M2X1Y0W9T8S7", "01KB0ZQ4N6V5R3M2X1Y0W9T8S8", "01KB0ZQ4N6V5R3M2X1Y0W9T8S",
        "caf\u{E9}", "cafe\u{301}", "short", "shorT", "a longer text well past the small-string size",
        "a longer text well past the small-string size!", "日本語", "emoji 👩‍👩‍👧",
        String(repeating: "x", count: 15), String(repeating: "x", count: 16),
        String("prefix of a longer line".prefix(9)),
    ]

    @Test func agreesWithTheViewsOnEveryPair() {
        var wrong: [(String, String)] = []
        for a in Self.texts {
            for b in Self.texts where a.hasSameUTF8(as: b) != a.utf8.elementsEqual(b.utf8) {
                wrong.append((a, b))
            }
        }
        #expect(wrong.isEmpty, "\(wrong)")
        // Canonically equivalent, different bytes: `==` says equal, the bytes do not.
        #expect("caf\u{E9}" == "cafe\u{301}" && !"caf\u{E9}".hasSameUTF8(as: "cafe\u{301}"))
        #expect("01KB0ZQ4N6V5R3M2X1Y0W9T8S7".hasSameUTF8(as: String("x01KB0ZQ4N6V5R3M2X1Y0W9T8S7".dropFirst())))
    }

    @Test("UTF8Key: equal exactly when the bytes are, equal keys hash alike, and a dictionary keeps canonically equivalent ids apart")
    func keysByBytes() {
        var wrong: [(String, String)] = []
        for a in Self.texts {
            for b in Self.texts {
                let (x, y) = (UTF8Key(a), UTF8Key(String(decoding: Array(b.utf8), as: UTF8.self)))
                if (x == y) != a.utf8.elementsEqual(b.utf8) || (x == y && x.hashValue != y.hashValue) { wrong.append((a, b)) }
            }
        }
        #expect(wrong.isEmpty, "\(wrong)")
        var byKey: [UTF8Key: Int] = [:]
        for (index, text) in Self.texts.enumerated() { byKey[UTF8Key(text)] = index }
        #expect(byKey.count == Set(Self.texts.map { Array($0.utf8) }).count)
        #expect(byKey[UTF8Key("caf\u{E9}")] != byKey[UTF8Key("cafe\u{301}")])
        // A substring's copy (another storage) finds the same entry.
        #expect(byKey[UTF8Key(String("x01KB0ZQ4N6V5R3M2X1Y0W9T8S7".dropFirst()))] == 2)
    }
}
