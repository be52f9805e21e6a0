import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// `jobctl help manifest` documents exactly what the reader accepts.
@Suite("Manifest reference", .onTestThreads)
struct ManifestReferenceTests {
    @Test("Every field the reader knows is documented once, and nothing else")
    func fieldsMatchTheReader() {
        let documented = ManifestReference.documentedFields
        #expect(Set(documented).count == documented.count, "a field is documented twice")
        #expect(Set(documented) == Set(JobField.allCases.map(\.rawValue)))
    }

    @Test("Each kind's line lists the fields the reader accepts for it", arguments: JobKind.allCases)
    func kindLines(kind: JobKind) throws {
        let section = try #require(ManifestReference.text.components(separatedBy: "FIELDS BY KIND:\n").last?
            .components(separatedBy: "\n\n").first)
        // Wrapped lines continue the kind above them.
        var entries: [String: String] = [:]
        var current: String?
        for line in section.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if let name = JobKind.allCases.map(\.rawValue).first(where: { line.hasPrefix("\($0): ") }) {
                current = name
                entries[name] = String(line.dropFirst(name.count + 2))
            } else if let current {
                entries[current, default: ""] += " " + line
            }
        }
        let listed = try #require(entries[kind.rawValue]).components(separatedBy: ", ")
        #expect(Set(listed) == Set((JobField.allowed[kind] ?? []).map(\.rawValue)))
        #expect(listed.count == Set(listed).count)
    }

    @Test("Every documented field is accepted by a manifest of a kind the reference names")
    func documentedFieldsParse() throws {
        // A field the reference documents but the reader refuses would fail here, whatever the tables say.
        let manifest = """
        defaults: {bucket: "gs://bkt"}
        jobs:
          - {kind: upload-data, data: hi, destination: "gs://bkt/o", metadata: {content_type: text/plain}, key: k1,
             priority: 1, max_attempts: 2, queue: q, timeout: 1m, checksums: [md5]}
          - {kind: upload-data, data_base64: aGk=, destination: "gs://bkt/p"}
          - {kind: upload-file, source: a.txt, destination: "gs://bkt/a", check_source: false, if_exists: skip, max_rate: 10M}
          - {kind: download-memory, source: "gs://bkt/o", max_size: 1MiB, run_after: "2026-12-01T02:00:00Z"}
          - {kind: download-file, source: "gs://bkt/photos/", destination: out/, include: ["*.jpg"], exclude: ["x/**"], delay: 15m}
          - {kind: update-metadata, destination: o, metadata: {custom_metadata: {gone: null}}, if_generation: 5}
        """
        for field in ManifestReference.documentedFields {
            #expect(manifest.contains("\(field): "), "the manifest below does not use \(field)")
        }
        let result = parse(manifest)
        #expect(result.errors == nil, "\(result.errors ?? [])")
    }
}
