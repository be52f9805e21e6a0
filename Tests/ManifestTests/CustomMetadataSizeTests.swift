import Foundation
import JobModel
import Testing
import TestSupport
@testable import Manifest

/// Cloud Storage keeps at most 8 KiB of custom metadata an object (keys and values): more is refused at
/// submit, at the job's `metadata`, for a single upload, for a folder's or a glob's files (one job each,
/// all carrying it: these were submitted, one failing upload per file), with defaults merged, and for an
/// update-metadata job.
@Suite(.onTestThreads) struct CustomMetadataSizeTests {
    /// `count` bytes of custom metadata: one key `k` and a value of `count - 1` bytes.
    static func custom(_ count: Int) -> String { "{k: \"\(String(repeating: "v", count: count - 1))\"}" }

    @Test func aFolderExpansionIsRefusedAtItsMetadata() throws {
        let directory = try TemporaryDirectory("metadata-size")
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.file("photos"), withIntermediateDirectories: true)
        for name in ["a.jpg", "b.jpg", "c.jpg"] {
            try "x".write(toFile: directory.file("photos/\(name)"), atomically: true, encoding: .utf8)
        }
        let parser = ManifestParser(baseDirectory: directory.path)
        for source in ["photos/", "photos/*.jpg"] {
            let over = """
                - kind: upload-file
                  source: \(source)
                  destination: gs://bkt/up/
                  metadata: {custom_metadata: \(Self.custom(8_193))}

                """
            let errors = try #require(parser.parse(text: over, path: "folder.yaml").errors, "\(source) expanded")
            #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["4:13 invalidValue"], "\(errors)")
            #expect(errors.first?.message.hasPrefix("the custom metadata is 8193 bytes (its keys and values, UTF-8), more than the 8192 "
                                                    + "(8 KiB) Cloud Storage allows an object") == true, "\(errors)")
            // At the limit, every file is a job.
            let fits = over.replacingOccurrences(of: Self.custom(8_193), with: Self.custom(8_192))
            #expect(parser.parse(text: fits, path: "folder.yaml").jobs?.count == 3)
        }
    }

    /// Defaults and the job's own keys count together; multi-byte characters count as their UTF-8 bytes.
    @Test func singleJobsDefaultsAndUpdatesAreHeldToIt() throws {
        let merged = """
            defaults:
              metadata: {custom_metadata: {shared: "\(String(repeating: "d", count: 5_000))"}}
            jobs:
              - kind: upload-data
                data: hi
                destination: gs://bkt/x
                metadata: {custom_metadata: {own: "\(String(repeating: "é", count: 1_600))"}}

            """
        // shared (6) + 5,000 + own (3) + 3,200 = 8,209.
        let errors = try #require(parse(merged).errors)
        #expect(errors.map { "\($0.line):\($0.column)" } == ["7:15"])
        #expect(errors.first?.message.contains("8209 bytes") == true, "\(errors)")

        let update = "- {kind: update-metadata, destination: gs://bkt/x, metadata: {custom_metadata: \(Self.custom(9_000))}}\n"
        #expect(try #require(parse(update).errors).map(\.code) == [.invalidValue])
        let small = "- {kind: update-metadata, destination: gs://bkt/x, metadata: {custom_metadata: \(Self.custom(100))}}\n"
        #expect(parse(small).jobs?.count == 1)
    }
}
