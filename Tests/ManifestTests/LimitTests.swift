import Foundation
import JobModel
import Testing
import TestSupport
@testable import Manifest

/// A manifest nested far too deep, and where it must be refused.
struct DeepCase: Sendable, CustomTestStringConvertible {
    let name: String
    let text: String
    let position: String
    var testDescription: String { name }
}

/// 50,000 levels written each way YAML nests. The block mapping form (`a:` indented one more space per
/// level) needs n² bytes, so it is 2,000 levels deep here (2 MB); at 50,000 it would be 1.25 GB, far past
/// the file size limit.
private let deepCases: [DeepCase] = [
    DeepCase(name: "flow sequences [[[[", text: String(repeating: "[", count: 50_000) + String(repeating: "]", count: 50_000) + "\n",
             position: "1:65"),
    DeepCase(name: "flow mappings {a: {a:", text: String(repeating: "{a: ", count: 50_000) + String(repeating: "}", count: 50_000) + "\n",
             position: "1:257"),
    DeepCase(name: "block sequences - - -", text: String(repeating: "- ", count: 50_000) + "x\n", position: "1:129"),
    DeepCase(name: "block mappings a:\\n a:", text: (0..<2_000).map { String(repeating: " ", count: $0) + "a:\n" }.joined(),
             position: "65:65"),
    DeepCase(name: "jobs, then flow sequences", text: "jobs:\n  - kind: upload-data\n    data: " + String(repeating: "[", count: 50_000) + "\n",
             position: "3:72"),
]

@Suite(.onTestThreads) struct LimitTests {
    // MARK: - Depth

    /// Refused at the first collection deeper than 64 levels, before any node of it is built: the parse
    /// neither crashes (it used to, from about 40,000 levels) nor reads further.
    @Test(arguments: deepCases)
    func nestingDeeperThanTheLimitIsRefusedWhereItStarts(_ row: DeepCase) throws {
        let errors = try #require(parse(row.text, path: "deep.yaml").errors)
        #expect(errors.count == 1)
        let error = try #require(errors.first)
        #expect(error.code == .limitExceeded)
        #expect("\(error.line):\(error.column)" == row.position)
        #expect(error.message.contains("collections nest more than 64 levels deep here"))
        // The rendered line is cut around the caret; the caret still points at the collection that opens there.
        let lines = error.render().split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.count == 3)
        #expect(lines[1].unicodeScalars.count <= ManifestError.maximumShownColumns + 6)
        let caret = lines[2].unicodeScalars.count - 1
        let shown = Array(lines[1].unicodeScalars)
        #expect(shown.indices.contains(caret) && "[{-a".unicodeScalars.contains(shown[caret]), "\(error.render())")
    }

    @Test func sixtyFourLevelsAreTheLimit() throws {
        // Five levels before the value: the top mapping, the jobs list, the job, metadata, custom_metadata.
        func yaml(_ levels: Int) -> String {
            let nested = String(repeating: "[", count: levels) + String(repeating: "]", count: levels)
            return "jobs:\n  - {kind: upload-data, data: x, destination: gs://bkt/x, metadata: {custom_metadata: {a: \(nested)}}}\n"
        }
        // 64 levels: read, and refused only because a custom metadata value must be a string.
        #expect(parse(yaml(59)).errors?.map(\.code) == [.wrongType])
        #expect(parse(yaml(60)).errors?.map(\.code) == [.limitExceeded])
        #expect(parse(yaml(60)).errors?.map(\.column) == [91 + 59])
    }

    /// An alias puts its anchor's whole subtree where it stands: the depth counts it.
    @Test func aliasesCannotNestDeeperThanTheLimit() throws {
        let inner = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        let yaml = """
        x-a: &a \(inner)
        x-b: \(String(repeating: "[", count: 30))*a\(String(repeating: "]", count: 30))
        jobs: [{kind: fetch-url, source: gs://bkt/x}]
        """
        let errors = try #require(parse(yaml).errors)
        #expect(errors.map(\.code) == [.limitExceeded])
        #expect(errors.map { "\($0.line):\($0.column)" } == ["2:36"])
        #expect(errors.first?.message.contains("alias '*a' nests collections more than 64 levels deep here") == true)
    }

    // MARK: - Nodes and aliases

    /// The alias guard counts what aliases add, not every node: 100,000 plain jobs (700,000 nodes) pass.
    @Test func aHundredThousandPlainJobsParse() throws {
        var yaml = "defaults: {queue: nightly}\njobs:\n"
        yaml.reserveCapacity(5_000_000)
        for index in 0..<100_000 {
            yaml += "  - {kind: fetch-url, source: gs://nightly/f\(index).csv}\n"
        }
        let jobs = try #require(parse(yaml).jobs)
        #expect(jobs.count == 100_000)
        #expect(jobs.last?.source == "gs://nightly/f99999.csv")
        #expect(jobs.allSatisfy { $0.queue == "nightly" })
    }

    /// `<<: *common` in every job expands the document in proportion to what is written: allowed, even
    /// past the fixed 100,000-node allowance.
    @Test func mergingACommonAnchorIntoEveryJobIsFine() throws {
        var yaml = "x-common: &common {kind: fetch-url, queue: media, priority: 3, max_attempts: 2}\njobs:\n"
        for index in 0..<15_000 {
            yaml += "  - {<<: *common, source: gs://bkt/\(index)}\n"
        }
        let jobs = try #require(parse(yaml).jobs, "\(parse(yaml).errors ?? [])")
        #expect(jobs.count == 15_000)
        #expect(jobs.allSatisfy { $0.queue == "media" && $0.priority == 3 && $0.maxAttempts == 2 })
    }

    /// The classic "billion laughs": nine levels of ten aliases each. Refused at once, at the alias that
    /// crosses the allowance (line 6: each `*lol4` adds 11,111 nodes to the 12,340 of lines 2-5, so the
    /// eighth, at column 65, passes 100,000).
    @Test func billionLaughsIsRefusedWithAPosition() throws {
        var yaml = "x-lol: &lol lol\n"
        yaml += "x-lol1: &lol1 [*lol, *lol, *lol, *lol, *lol, *lol, *lol, *lol, *lol, *lol]\n"
        for level in 2...9 {
            yaml += "x-lol\(level): &lol\(level) [" + Array(repeating: "*lol\(level - 1)", count: 10).joined(separator: ", ") + "]\n"
        }
        yaml += "jobs: *lol9\n"
        let errors = try #require(parse(yaml).errors)
        #expect(errors.count == 1)
        let error = try #require(errors.first)
        #expect(error.code == .limitExceeded)
        #expect("\(error.line):\(error.column)" == "6:65")
        #expect(error.message.contains("aliases expand the document by more than 100000 nodes"))
        #expect(error.render().hasSuffix("\n" + String(repeating: " ", count: 64) + "^"))
    }

    /// Few nodes, many bytes: an alias to a long scalar in every job repeats its text each time.
    @Test func theTextAliasesRepeatIsLimited() throws {
        let parser = ManifestParser(baseDirectory: testBase, limits: ManifestLimits(maximumBytes: 100_000))
        var yaml = "x-blob: &blob \(String(repeating: "z", count: 10_000))\njobs:\n"
        for index in 0..<12 {
            yaml += "  - {kind: upload-data, data: *blob, destination: gs://bkt/\(index)}\n"
        }
        let errors = try #require(parser.parse(text: yaml, path: "a.yaml").errors)
        #expect(errors.map(\.code) == [.limitExceeded])
        // The eleventh alias repeats 110,000 bytes: line 13, at `*blob`.
        #expect(errors.map { "\($0.line):\($0.column)" } == ["13:31"])
        #expect(errors.first?.message.contains("aliases repeat more than 100000 bytes of text in all (this one 10000)") == true)
        #expect(parser.parse(text: yaml.split(separator: "\n").prefix(12).joined(separator: "\n"), path: "a.yaml").jobs?.count == 10)
    }

    @Test func nodeCountIsLimitedWhereItIsCrossed() throws {
        var yaml = "jobs:\n"
        for index in 0..<300 {
            yaml += "  - {kind: fetch-url, source: gs://bkt/\(index)}\n"
        }
        let parser = ManifestParser(baseDirectory: testBase, limits: ManifestLimits(maximumNodes: 1_000))
        let errors = try #require(parser.parse(text: yaml, path: "n.yaml").errors)
        #expect(errors.map(\.code) == [.limitExceeded])
        // Nodes: the top mapping, `jobs`, the list, then five a job; node 1,001 is job 199's `fetch-url`.
        #expect(errors.map { "\($0.line):\($0.column)" } == ["201:12"])
        #expect(errors.first?.message.contains("more than 1000 YAML nodes") == true)
    }

    /// A one-line manifest with an error in every job: the line is read and redacted once, not once per
    /// error (which made this quadratic), and each error shows the window around its own column. (Every
    /// error is shown here, past the 100 `submit` shows.)
    @Test func manyErrorsOnOneLongLineShareOneReadingOfIt() throws {
        let jobs = (0..<5_000).map { "{kind: fetch-url, source: \"https://h/\($0)?token=t0k3n\", priority: x\($0)}" }
        let yaml = "[" + jobs.joined(separator: ", ") + "]\n"
        let started = Date()
        let parser = ManifestParser(baseDirectory: testBase, checksSources: false, limits: ManifestLimits(maximumShownErrors: 20_000))
        let errors = try #require(parser.parse(text: yaml, path: "jobs/test.yaml").errors)
        // Generous: linear takes well under a second; once per error took minutes.
        #expect(Date().timeIntervalSince(started) < 60)
        let priorities = errors.filter { $0.code == .wrongType }
        #expect(priorities.count == 5_000)
        for (index, error) in priorities.enumerated() where index % 997 == 0 {
            let lines = error.render().split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            #expect(!lines[1].contains("t0k3n"))
            let shown = Array(lines[1].unicodeScalars)
            let caret = lines[2].unicodeScalars.count - 1
            #expect(String(String.UnicodeScalarView(shown[caret...].prefix(1 + "\(index)".count))) == "x\(index)", "\(error.render())")
        }
    }

    /// A long misspelt name is near no field, kind or value: it is refused with no suggestion, without
    /// being compared letter by letter with each candidate (which took minutes for one 16 MiB `kind:`).
    @Test func longUnknownNamesGetNoSuggestionAndCostLinearTime() throws {
        let long = String(repeating: "q", count: 2 << 20)
        let yaml = """
            jobs:
              - kind: \(long)
                source: gs://bkt/x
              - kind: upload-data
                data: hi
                destination: gs://bkt/x
                if_exists: \(long)
                checksums: [\(long)]
                metadata:
                  ? \(long)
                  : v
                ? \(long)
                : 1

            """
        let started = Date()
        let errors = try #require(parse(yaml).errors)
        let settings = SettingsFile.read(text: "? \(long)\n: 1\n", path: "config.yaml", keys: ["concurrency", "lease"])
        // Generous: linear takes about a second; compared letter by letter, minutes.
        #expect(Date().timeIntervalSince(started) < 30)
        #expect(errors.map(\.code) == [.unknownKind, .invalidValue, .invalidValue, .unknownKey, .unknownKey])
        #expect(errors.map { "\($0.line):\($0.column)" } == ["2:11", "7:16", "8:17", "10:9", "12:7"])
        #expect(errors.allSatisfy { !$0.message.contains("did you mean") })
        // The value is cut out of the middle of each message (quoted whole, each was 2 MiB long): what is
        // wrong and what is expected instead are kept.
        #expect(errors.allSatisfy { $0.message.unicodeScalars.count <= 1_100 && $0.message.contains("characters left out") },
                "\(errors.map(\.message.count))")
        #expect(errors.first?.message.hasPrefix("unknown kind 'qqq") == true)
        #expect(errors.first?.message.hasSuffix("expected one of \(ManifestReader.kindList)") == true, "\(errors.first?.message.suffix(200) ?? "")")
        guard case .failure(let refused) = settings else {
            Issue.record("an unknown setting was accepted")
            return
        }
        #expect(refused.errors.map(\.code) == [.unknownKey])
        #expect(refused.errors.first?.message.contains("did you mean") == false)
    }

    // MARK: - Scalars, jobs, bytes

    @Test func scalarLengthIsLimited() throws {
        let parser = ManifestParser(baseDirectory: testBase, limits: ManifestLimits(maximumScalarBytes: 100))
        let fits = "- {kind: upload-data, data: \"\(String(repeating: "x", count: 100))\", destination: gs://bkt/x}\n"
        #expect(parser.parse(text: fits, path: "s.yaml").jobs?.first?.data?.count == 100)
        let long = "- kind: upload-data\n  destination: gs://bkt/x\n  data: \(String(repeating: "x", count: 101))\n"
        let errors = try #require(parser.parse(text: long, path: "s.yaml").errors)
        #expect(errors.map(\.code) == [.limitExceeded])
        #expect(errors.map { "\($0.line):\($0.column)" } == ["3:9"])
        #expect(errors.first?.message.contains("this scalar is 101 bytes long, more than the limit of 100") == true)
    }

    @Test func numberOfJobsIsLimited() throws {
        let parser = ManifestParser(baseDirectory: testBase, limits: ManifestLimits(maximumJobs: 3))
        let yaml = (0..<5).map { "- {kind: fetch-url, source: gs://bkt/\($0)}\n" }.joined()
        let errors = try #require(parser.parse(text: yaml, path: "j.yaml").errors)
        #expect(errors.map(\.code) == [.limitExceeded])
        // At the first job over the limit: the fourth.
        #expect(errors.map { "\($0.line):\($0.column)" } == ["4:3"])
        #expect(errors.first?.message.contains("lists 5 jobs, more than the limit of 3") == true)
        #expect(parser.parse(text: String(yaml.split(separator: "\n").prefix(3).joined(separator: "\n")), path: "j.yaml").jobs?.count == 3)
    }

    @Test func fileSizeIsLimitedWhereItIsCrossed() throws {
        let parser = ManifestParser(baseDirectory: testBase, limits: ManifestLimits(maximumBytes: 50))
        let yaml = "- {kind: fetch-url, source: gs://bkt/a}\n- {kind: fetch-url, source: gs://bkt/b}\n"
        for result in [parser.parse(text: yaml, path: "big.yaml"), parser.parse(data: Data(yaml.utf8), path: "big.yaml")] {
            let errors = try #require(result.errors)
            #expect(errors.map(\.code) == [.limitExceeded])
            // Byte 50 is on line 2 (which starts at byte 40), column 11.
            #expect(errors.map { "\($0.line):\($0.column)" } == ["2:11"])
            #expect(errors.first?.message.contains("larger than the limit of 50 bytes") == true)
        }
        #expect(parser.parse(text: String(yaml.prefix(40)), path: "small.yaml").jobs?.count == 1)
    }

    /// Reading stops one byte past the limit, so a huge file is refused without being read whole.
    @Test func readingStopsPastTheLimit() throws {
        let directory = try TemporaryDirectory("manifest-read")
        defer { directory.remove() }
        let path = directory.file("huge.yaml")
        try Data(repeating: UInt8(ascii: "#"), count: 10_000).write(to: URL(fileURLWithPath: path))
        let parser = ManifestParser(limits: ManifestLimits(maximumBytes: 1_000))
        #expect(parser.readContents(atPath: path)?.count == 1_001)
        #expect(ManifestParser().readContents(atPath: path)?.count == 10_000)
        #expect(parser.readContents(atPath: directory.file("absent.yaml")) == nil)
        #expect(parser.readContents(atPath: directory.path) == nil)
    }
}

/// The text libyaml reads for one value is bounded while it reads (`maximumScalarTextBytes`): it hands a
/// scalar over only whole, so the length check on the value came after libyaml held all of it.
@Suite(.onTestThreads) struct ScalarTextLimitTests {
    @Test func aScalarFarPastTheLimitIsRefusedBeforeLibyamlHoldsIt() throws {
        let limits = ManifestLimits(maximumScalarBytes: 100)
        let parser = ManifestParser(baseDirectory: testBase, limits: limits)
        for (open, close) in [("", ""), ("\"", "\""), ("'", "'"), ("|\n    ", "")] {
            let long = "- kind: upload-data\n  destination: gs://bkt/x\n  data: \(open)\(String(repeating: "x", count: 1 << 20))\(close)\n"
            let errors = try #require(parser.parse(text: long, path: "s.yaml").errors)
            #expect(errors.map(\.code) == [.limitExceeded])
            // Where the text after the last value (`data`) begins.
            #expect(errors.map { "\($0.line):\($0.column)" } == ["3:7"])
            #expect(errors.first?.message.contains("more than 65736 bytes of text follow here") == true, "\(errors)")
            // A line over a megabyte is not quoted under the error.
            if !open.hasPrefix("|") { #expect(errors.first?.sourceLine == nil) }
        }
        // Comments and blank lines count as well (libyaml may have read up to 64 KiB ahead of the last value).
        let blank = "- {kind: fetch-url, source: gs://bkt/a}\n" + String(repeating: "\n", count: 200_000) + "- {kind: fetch-url, source: gs://bkt/b}\n"
        let errors = try #require(parser.parse(text: blank, path: "b.yaml").errors)
        #expect(errors.map { "\($0.line):\($0.column)" } == ["1:40"])
        // Under it, with escapes and indentation, the value limit alone applies.
        let escaped = "- kind: upload-data\n  destination: gs://bkt/x\n  data: \"\(String(repeating: "\\x41", count: 100))\"\n"
        #expect(parser.parse(text: escaped, path: "e.yaml").jobs?.first?.data?.count == 100)
    }

    /// Lines are found from an index of every 64th line: each kind of line break, on both sides of the
    /// index's steps, gives the line a split gives.
    @Test func linesAreFoundAcrossTheIndexSteps() throws {
        let breaks = ["\n", "\r\n", "\r", "\u{85}", "\u{2028}", "\u{2029}"]
        var text = "\u{FEFF}"
        var expected: [String] = []
        for number in 0..<300 {
            let line = "line \(number) é"
            expected.append(line)
            text += line + breaks[number % breaks.count]
        }
        expected.append("")
        let source = SourceText(text)
        #expect(source.lineCount == expected.count)
        for (index, line) in expected.enumerated() {
            #expect(source.line(index + 1) == line, "line \(index + 1)")
        }
        #expect(source.line(0) == nil && source.line(expected.count + 1) == nil)
    }
}
