import Foundation
import Testing
@testable import JobModel

@Suite struct DurationTextTests {
    @Test(arguments: [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86_400), ("1h30m", 5400), ("1m30s", 90),
                      ("0s", 0), (" 45s ", 45), ("10M", 600)])
    func parses(text: String, seconds: Int) {
        #expect(DurationText.parse(text) == seconds)
    }

    @Test(arguments: ["", "90", "s", "1.5h", "-5m", "5 m", "1x", "forever", "30m1h", "1h1h", "99999999999999999999d", "1s30"])
    func refuses(text: String) {
        #expect(DurationText.parse(text) == nil)
    }

    @Test func formats() {
        #expect(DurationText.format(90) == "90s")
        #expect(DurationText.format(1800) == "30m")
        #expect(DurationText.format(5400) == "1h30m")
        #expect(DurationText.format(86_400) == "1d")
        #expect(DurationText.format(3661) == "3661s")
        #expect(DurationText.format(3720) == "1h2m")
    }
}

@Suite struct JobSpecTimeoutTests {
    @Test("a spec without a timeout (stored by earlier versions) decodes, and encodes byte for byte as before")
    func oldSpecs() throws {
        let old = #"{"kind":"download-memory","maxAttempts":5,"priority":0,"queue":"default","source":"http:\/\/h\/x"}"#
        let spec = try JSONDecoder().decode(JobSpec.self, from: Data(old.utf8))
        #expect(spec.timeoutSeconds == nil)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        #expect(String(decoding: try encoder.encode(spec), as: UTF8.self) == old)
    }

    @Test func roundTrip() throws {
        var spec = JobSpec(kind: .downloadFile, source: "gs://b/x", destination: "/tmp/x")
        spec.timeoutSeconds = 1800
        let decoded = try JSONDecoder().decode(JobSpec.self, from: try JSONEncoder().encode(spec))
        #expect(decoded.timeoutSeconds == 1800)
        #expect(JobSpec.timeoutRange.contains(1) && !JobSpec.timeoutRange.contains(0))
    }
}

/// The grammar every duration shares, in milliseconds: option defaults, `ms` and `w`, checked overflow.
@Suite struct DurationReadingTests {
    @Test(arguments: [("1500ms", nil, Int64(1_500)), ("1w", nil, 604_800_000), ("1h30m", nil, 5_400_000),
                      ("30", 1_000, 30_000), ("2m500ms", nil, 120_500), ("7D", nil, 604_800_000)] as [(String, Int64?, Int64)])
    func reads(text: String, defaultUnitMs: Int64?, ms: Int64) {
        #expect(DurationText.read(text, defaultUnitMs: defaultUnitMs) == .milliseconds(ms))
    }

    @Test(arguments: ["99999999999999d", "9223372036854775807s", "15251000000w", "106751991167d8h"])
    func overflowIsTooLargeNeverATrap(text: String) {
        #expect(DurationText.read(text) == .tooLarge)
    }

    @Test(arguments: ["30", "inf", "nan", "1e300", "-5s", "1.5h", "s", "5x", "1ms1s", "2026-11-29"])
    func refuses(text: String) {
        #expect(DurationText.read(text) == .invalid)
    }

    @Test func secondsMustBeWhole() {
        #expect(DurationText.parse("1500ms") == nil)
        #expect(DurationText.parse("2000ms") == 2)
    }
}
