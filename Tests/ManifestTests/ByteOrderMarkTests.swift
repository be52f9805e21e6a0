import Foundation
import Testing
import TestSupport
@testable import Manifest

/// Two files joined, where the second one's byte-order mark lands, and the line an error quotes there.
struct JoinedFiles: Sendable, CustomTestStringConvertible {
    let name: String
    let bytes: [UInt8]
    let position: String
    let line: String
    var testDescription: String { name }
}

/// A byte-order mark opens a file; anywhere else it is what `cat a.yaml b.yaml` leaves where the second
/// file began. libyaml skips one at the start of a line and reads one inside a line as text, so such a
/// manifest was refused for what followed it ("did not find expected key" at the next line), or read
/// with the mark inside a value. It is an error at the mark itself.
@Suite(.onTestThreads) struct ByteOrderMarkTests {
    static let bom: [UInt8] = [0xEF, 0xBB, 0xBF]
    static let first = Array("jobs:\n  - kind: download-memory\n    source: gs://bkt/a\n".utf8)
    static let second = bom + Array("jobs:\n  - kind: download-memory\n    source: gs://bkt/c\n".utf8)

    /// Where each concatenation puts the second file's mark.
    @Test(arguments: [
        JoinedFiles(name: "two mappings: at the start of line 4", bytes: first + second, position: "4:1", line: "\u{FEFF}jobs:"),
        JoinedFiles(name: "two lists, the first without a mark",
                    bytes: Array("- kind: download-memory\n  source: gs://bkt/a\n".utf8) + bom + Array("- kind: download-memory\n  source: gs://bkt/c\n".utf8),
                    position: "3:1", line: "\u{FEFF}- kind: download-memory"),
        JoinedFiles(name: "the first without a final line break: inside line 3", bytes: first.dropLast() + second, position: "3:23",
                    line: "    source: gs://bkt/a\u{FEFF}jobs:"),
        JoinedFiles(name: "both with marks, CRLF lines: the first's is the file's own",
                    bytes: bom + Array("jobs:\r\n  - kind: download-memory\r\n    source: gs://bkt/a\r\n".utf8) + second, position: "4:1",
                    line: "\u{FEFF}jobs:"),
        JoinedFiles(name: "inside a quoted value, after a NEL (a YAML line break)",
                    bytes: Array("- kind: upload-data\n  destination: gs://bkt/x\n  data: \"a\u{85}".utf8) + bom + Array("b\"\n".utf8),
                    position: "4:1", line: "\u{FEFF}b\""),
    ])
    func aMarkPastTheStartIsAnErrorAtIt(_ joined: JoinedFiles) throws {
        let (bytes, position, line) = (joined.bytes, joined.position, joined.line)
        let result = ManifestParser(baseDirectory: testBase, checksSources: false).parse(data: Data(bytes), path: "joined.yaml")
        let errors = try #require(result.errors, "a manifest with a byte-order mark inside parsed")
        #expect(errors.count == 1, "\(errors)")
        let error = try #require(errors.first)
        #expect(error.code == .invalidEncoding)
        #expect("\(error.line):\(error.column)" == position)
        #expect(error.message.hasPrefix("a byte-order mark (U+FEFF, the bytes EF BB BF) in the middle of the file"), "\(error.message)")
        #expect(error.sourceLine == line)
    }

    /// Each mark is an error of its own; the file's opening mark is none.
    @Test func everyMarkIsReportedAndTheOpeningOneIsNot() throws {
        let text = "\u{FEFF}- {kind: download-memory, source: gs://bkt/a}\n\u{FEFF}- {kind: download-memory, source: gs://bkt/b}\n"
            + "- {kind: download-memory, source: \"gs://bkt/c\u{FEFF}\"}\n"
        let errors = try #require(parse(text).errors)
        #expect(errors.map { "\($0.line):\($0.column)" } == ["2:1", "3:46"])
        #expect(parse("\u{FEFF}- {kind: download-memory, source: gs://bkt/a}\n").jobs?.count == 1)
        // The character written as an escape is a value like any other.
        #expect(parse("- {kind: upload-data, destination: gs://bkt/x, data: \"\\uFEFFhi\"}\n").jobs?.first?.data == Data("\u{FEFF}hi".utf8))
    }

    /// A configuration file is read by the same reader, and refused the same way.
    @Test func aConfigurationFileIsHeldToTheSameRule() throws {
        guard case .failure(let errors) = SettingsFile.read(text: "concurrency: 4\n\u{FEFF}concurrency: 8\n", path: "config.yaml",
                                                            keys: ["concurrency"]) else {
            Issue.record("a configuration file with a byte-order mark inside was taken")
            return
        }
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["2:1 invalidEncoding"])
    }
}
