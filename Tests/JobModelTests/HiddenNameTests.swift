import JobModel
import Testing

@Suite("hidden names beside a file") struct HiddenNameTests {
    @Test func shortNamesKeepTheirForm() {
        #expect(HiddenName.make("report.csv", suffix: ".01ABC.jobctl-partial") == ".report.csv.01ABC.jobctl-partial")
    }

    /// Every name up to the longest a file may have gets a hidden name that fits too, the same each
    /// time, and two long names that differ only past the cut get different hidden names.
    @Test(arguments: [200, 212, 213, 230, 254, 255])
    func longNamesFitAndStayDistinct(length: Int) {
        let suffix = ".01M90NSCMGARQK7RN1TE34X5YH.jobctl-partial"
        let name = String(repeating: "a", count: length - 1) + "x"
        let other = String(repeating: "a", count: length - 1) + "y"
        let hidden = HiddenName.make(name, suffix: suffix)
        #expect(hidden.utf8.count <= HiddenName.maximumBytes, "\(hidden.utf8.count)")
        #expect(hidden.hasPrefix(".aaaa") && hidden.hasSuffix(suffix))
        #expect(hidden == HiddenName.make(name, suffix: suffix))
        #expect(hidden != HiddenName.make(other, suffix: suffix))
    }

    /// The cut never splits a character: the hidden name stays valid UTF-8 of whole characters.
    @Test func theCutKeepsWholeCharacters() {
        let name = String(repeating: "日", count: 85)   // 255 bytes
        let hidden = HiddenName.make(name, suffix: ".jobctl-meta.json")
        #expect(hidden.utf8.count <= 255)
        #expect(hidden.dropFirst().hasPrefix("日日日"))
        #expect(hidden.unicodeScalars.allSatisfy { $0 == "." || $0 == "~" || $0 == "日" || $0.properties.isASCIIHexDigit || $0.isASCII })
    }
}
