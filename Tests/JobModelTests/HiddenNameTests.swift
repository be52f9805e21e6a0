import Checksums
import Foundation
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

    /// The suffixes jobctl names its hidden files with (partial downloads, a `file://` object's sidecar,
    /// upload session and sidecar temporary).
    static let suffixes = [".jobctl-meta.json", ".jobctl-partial", ".01M90NSCMGARQK7RN1TE34X5YH.jobctl-partial",
                           ".01M90NSCMGARQK7RN1TE34X5YH.9223372036854775807.jobctl-partial",
                           ".01M90NSCMGARQK7RN1TE34X5YH.12.jobctl-upload",
                           ".jobctl-meta.json.01M90NSCMGARQK7RN1TE34X5YH.12.jobctl-meta.tmp"]

    /// The hidden name older jobctls gave `name`: cut, `~` and eight hexadecimal digits of its FNV-1a-32.
    static func olderForm(_ name: String, suffix: String) -> String {
        let room = HiddenName.maximumBytes - 1 - suffix.utf8.count
        guard name.utf8.count > room else { return "." + name + suffix }
        var hash: UInt32 = 0x811C_9DC5
        for byte in name.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        let digits = String(hash, radix: 16)
        let tag = "~" + String(repeating: "0", count: 8 - digits.count) + digits
        var kept = ""
        for scalar in name.unicodeScalars {
            guard kept.utf8.count + String(scalar).utf8.count <= room - tag.utf8.count else { break }
            kept.unicodeScalars.append(scalar)
        }
        return "." + kept + tag + suffix
    }

    /// A name's shortened hidden name is no other name's: not that of the name it was cut to (older
    /// jobctls gave `<first 228 bytes>~<hash>`, 237 bytes, the very sidecar of the 255-byte name it was
    /// cut from), for every suffix.
    @Test(arguments: suffixes)
    func aShortenedNameIsNotTheCutFormsOwn(suffix: String) {
        let names = [String(repeating: "a", count: 255), String(repeating: "é", count: 127) + "z", "x" + String(repeating: "日", count: 84)]
        for name in names {
            let hidden = HiddenName.make(name, suffix: suffix)
            #expect(hidden.utf8.count <= HiddenName.maximumBytes)
            let cut = String(Self.olderForm(name, suffix: suffix).dropFirst().dropLast(suffix.utf8.count))
            #expect(cut != name && cut.utf8.count < name.utf8.count)
            #expect(HiddenName.make(cut, suffix: suffix) != hidden, "\(cut.utf8.count) bytes: \(cut.suffix(12))")
            // What the shortened name keeps of the name ends in a reserved suffix, which no object may
            // take: no object's own hidden name is ever a shortened one.
            let part = String(hidden.dropFirst().dropLast(suffix.utf8.count))
            #expect(HiddenName.isReserved(part), "\(part.suffix(40))")
        }
    }

    /// Two 255-byte names with one 228-byte prefix whose FNV-1a-32 hashes are equal: older jobctls gave
    /// both one hidden name.
    @Test(arguments: suffixes)
    func namesWithOnePrefixAndOneOlderHashStayDistinct(suffix: String) {
        let prefix = String(repeating: "p", count: 228)
        let first = prefix + "000000000000000000000329599"
        let second = prefix + "000000000000000000000532382"
        #expect(Self.olderForm(first, suffix: ".jobctl-meta.json") == Self.olderForm(second, suffix: ".jobctl-meta.json"))
        #expect(HiddenName.make(first, suffix: suffix) != HiddenName.make(second, suffix: suffix))
    }

    /// A shortened name keeps the name's start, then `~`, the SHA-256 of the whole name and the marker.
    @Test func aShortenedNameCarriesTheWholeNamesDigest() {
        let name = String(repeating: "a", count: 254) + "z"
        let hidden = HiddenName.make(name, suffix: ".jobctl-meta.json")
        let digest = Digest.sha256Hex(Data(name.utf8))
        #expect(hidden.hasSuffix("~" + digest + ".jobctl-cut.jobctl-meta.json") && hidden.hasPrefix(".aaaa"), "\(hidden)")
        #expect(hidden.utf8.count == HiddenName.maximumBytes)
        #expect(HiddenName.reservedSuffixes.contains(HiddenName.shortenedMarker))
    }

    /// What older jobctls named a long name's hidden file is still known, so that it is read, resumed and
    /// swept; a name that fits has one name only.
    @Test(arguments: suffixes)
    func olderNamesAreStillKnown(suffix: String) {
        let long = String(repeating: "a", count: 255)
        let older = Self.olderForm(long, suffix: suffix)
        #expect(HiddenName.olderName(long, suffix: suffix) == older)
        #expect(HiddenName.forms(long, suffix: suffix) == [HiddenName.make(long, suffix: suffix), older])
        #expect(HiddenName.isName(older, of: long, suffix: suffix))
        #expect(HiddenName.isName(HiddenName.make(long, suffix: suffix), of: long, suffix: suffix))
        #expect(!HiddenName.isName(older, of: String(repeating: "a", count: 254) + "b", suffix: suffix))
        #expect(HiddenName.olderName("report.csv", suffix: suffix) == nil)
        #expect(HiddenName.forms("report.csv", suffix: suffix) == [".report.csv" + suffix])
    }

    /// Names are compared as bytes, as they are on disk: `é` composed and decomposed are two files, and
    /// the hidden name of one is not the other's.
    @Test func namesAreComparedAsBytes() {
        let composed = String(repeating: "\u{E9}", count: 120)
        let decomposed = String(repeating: "e\u{301}", count: 120)
        #expect(composed == decomposed && composed.utf8.count != decomposed.utf8.count)
        let suffix = ".jobctl-meta.json"
        #expect(!HiddenName.isName(HiddenName.make(composed, suffix: suffix), of: decomposed, suffix: suffix))
        #expect(!HiddenName.isName(HiddenName.make(decomposed, suffix: suffix), of: composed, suffix: suffix))
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
