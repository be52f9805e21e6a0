import Foundation
import Testing
import TestSupport
@testable import Manifest

/// A manifest with more errors than anyone reads: the first ones in source order are shown whole, the
/// others counted (as a compiler's error limit), and the manifest still yields nothing.
@Suite(.onTestThreads) struct ErrorLimitTests {
    /// 1,000 unknown kinds: the first 100 are shown, in order, then "900 more errors not shown", and the
    /// count still says 1,000. Every error used to be made, redacted, quoted and printed (200,000 took a
    /// minute, nearly all of it on the "did you mean" suggestions no one read).
    @Test func onlyTheFirstHundredErrorsAreShownAndEveryOneIsCounted() throws {
        let yaml = "jobs:\n" + String(repeating: "  - {kind: bogus, source: gs://bkt/x}\n", count: 1_000)
        guard case .failure(let errors) = parse(yaml) else {
            Issue.record("a manifest of unknown kinds parsed")
            return
        }
        #expect(errors.count == 100)
        #expect(errors.notShownCount == 900)
        #expect(errors.totalCount == 1_000)
        #expect(errors.map(\.line) == Array(2...101))
        #expect(errors.allSatisfy { $0.code == .unknownKind })
        let lines = errors.render().split(separator: "\n").map(String.init)
        #expect(lines.count == 100 * 3 + 2)
        #expect(lines[0] == "jobs/test.yaml:2:12: error: unknown kind 'bogus'; expected one of "
                + "upload-file, upload-data, download-file, download-memory, fetch-url, get-metadata, update-metadata, delete")
        #expect(lines.suffix(2) == ["900 more errors not shown after the first 100; fix these and run it again to see the next",
                                    "1000 errors generated."])
    }

    /// The errors shown are the first in source order, whenever the reader found them: a cycle of
    /// `after:` entries at line 2 is found once every job is read, and still shown; the last unknown
    /// kind shown before it is the one left out.
    @Test func errorsFoundLateStillShowInSourceOrder() throws {
        var parser = ManifestParser(baseDirectory: testBase, checksSources: false,
                                    limits: ManifestLimits(maximumShownErrors: 3))
        parser.nowMs = 0
        let yaml = """
            jobs:
              - {kind: download-memory, source: gs://bkt/a, key: a, after: [b]}
              - {kind: download-memory, source: gs://bkt/b, key: b, after: [a]}
              - {kind: bogus, source: gs://bkt/x}
              - {kind: bogus, source: gs://bkt/x}
              - {kind: bogus, source: gs://bkt/x}
              - {kind: bogus, source: gs://bkt/x}

            """
        guard case .failure(let errors) = parser.parse(text: yaml, path: "late.yaml") else {
            Issue.record("a manifest with a cycle parsed")
            return
        }
        #expect(errors.map(\.code) == [.invalidDependency, .unknownKind, .unknownKind])
        #expect(errors.map(\.line) == [3, 4, 5])
        #expect(errors.notShownCount == 2)
        #expect(errors.render().hasSuffix("\n2 more errors not shown after the first 3; fix these and run it again to see the next\n"
                                          + "5 errors generated."))
    }

    /// A node that aliases repeat is one error however often it is read, shown or only counted; and
    /// an unknown key meant for a required field still keeps that field from being reported missing as
    /// well (the suggestion is worked out only when asked for).
    @Test func aRepeatedNodeCountsOnceAndMisspelledFieldsAreNotMissing() throws {
        var parser = ManifestParser(baseDirectory: testBase, checksSources: false,
                                    limits: ManifestLimits(maximumShownErrors: 1))
        parser.nowMs = 0
        let yaml = """
            x-common: &common {kind: download-memory, sorce: gs://bkt/x, max_sise: 1KiB}
            jobs:
              - {<<: *common}
              - {<<: *common}
              - {<<: *common}

            """
        guard case .failure(let errors) = parser.parse(text: yaml, path: "alias.yaml") else {
            Issue.record("a manifest of unknown keys parsed")
            return
        }
        // `sorce` and `max_sise` at line 1, once each; no "has no 'source'" for any of the three jobs.
        #expect(errors.map(\.message) == ["unknown key 'sorce' (did you mean 'source'?)"])
        #expect(errors.totalCount == 2)
        #expect(errors.render().hasSuffix("\n1 more error not shown after the first 1; fix these and run it again to see the next\n"
                                          + "2 errors generated."))
    }

    /// A configuration file is held to the same limit.
    @Test func aConfigurationFileShowsTheFirstHundredErrors() throws {
        let text = (0..<250).map { "unknown_\($0): 1\n" }.joined()
        guard case .failure(let errors) = SettingsFile.read(text: text, path: "config.yaml", keys: ["concurrency"]) else {
            Issue.record("unknown settings were taken")
            return
        }
        #expect(errors.count == 100)
        #expect(errors.totalCount == 250)
        #expect(errors.map(\.line) == Array(1...100))
    }
}
