import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// The get-metadata, update-metadata and delete kinds in manifests: the fields each takes, with exact
/// positions for the ones it does not.
@Suite(.onTestThreads) struct ObjectOperationFieldTests {
    @Test func objectOperationsRead() throws {
        let jobs = try #require(parse("""
        defaults:
          bucket: gs://app
          metadata: {cache_control: no-cache}
        jobs:
          - kind: get-metadata
            source: images/cat.jpg
          - kind: get-metadata
            source: https://example.com/a.txt
          - kind: update-metadata
            destination: images/cat.jpg
            metadata:
              content_type: image/jpeg
              customMetadata: {owner: ops, gone: null}
          - kind: update-metadata
            destination: file://local/x.txt
            metadata: {custom_metadata: {old: ~}}
          - kind: delete
            destination: images/cat.jpg
          - kind: delete
            destination: http://127.0.0.1:8080/d/x.txt
        """).jobs)
        #expect(jobs.map(\.kind) == [.getMetadata, .getMetadata, .updateMetadata, .updateMetadata, .delete, .delete])
        #expect(jobs.map(\.source) == ["gs://app/images/cat.jpg", "https://example.com/a.txt", nil, nil, nil, nil])
        #expect(jobs.map(\.destination) == [nil, nil, "gs://app/images/cat.jpg", "file://local/x.txt", "gs://app/images/cat.jpg",
                                            "http://127.0.0.1:8080/d/x.txt"])
        // The job's own metadata only: the defaults' cache_control is for uploads.
        #expect(jobs[2].metadata == UploadMetadata(contentType: "image/jpeg", customMetadata: ["owner": "ops"]))
        #expect(jobs[2].removeCustomMetadata == ["gone"])
        #expect(jobs[3].metadata == nil && jobs[3].removeCustomMetadata == ["old"])
        #expect(jobs.map(\.metadata).enumerated().allSatisfy { $0.offset == 2 || $0.element == nil })
    }

    /// A metadata field written null removes it (update-metadata only), as gcloud's `--clear-…` flags:
    /// `custom_metadata: null` every custom key. A null was refused as "must be a string".
    @Test func nullFieldsClearThem() throws {
        let jobs = try #require(parse("""
        - kind: update-metadata
          destination: gs://bkt/a
          metadata: {custom_metadata: null, content_type: ~, cacheControl: null, content_language: en}
        - kind: update-metadata
          destination: gs://bkt/a
          metadata: {content_encoding: null, content_disposition: null}
        """).jobs)
        #expect(jobs.map(\.clearMetadata) == [[.contentType, .cacheControl, .customMetadata], [.contentDisposition, .contentEncoding]])
        #expect(jobs[0].metadata == UploadMetadata(contentLanguage: "en") && jobs[1].metadata == nil)
        let text = String(decoding: try JSONEncoder().encode(jobs[1]), as: UTF8.self)
        #expect(text.contains(#""clearMetadata":["content_disposition","content_encoding"]"#), "\(text)")
    }

    @Test func specsWithoutRemovalsEncodeWithoutThem() throws {
        let job = try #require(parse("- {kind: upload-data, data: hi, destination: gs://bkt/x}\n").jobs?.first)
        let text = String(decoding: try JSONEncoder().encode(job), as: UTF8.self)
        #expect(!text.contains("removeCustomMetadata") && !text.contains("clearMetadata"), "\(text)")
    }

    struct Bad: Sendable, CustomStringConvertible {
        let name: String
        let yaml: String
        let position: String
        let code: ManifestError.Code
        let message: String
        var description: String { name }
    }

    static let malformed: [Bad] = [
        Bad(name: "an upload with a null field", yaml: "- kind: upload-data\n  data: x\n  destination: gs://bkt/a\n  metadata: {cache_control: null}\n",
            position: "4:14", code: .wrongType, message: "'cache_control' must be a string, not null (only update-metadata jobs remove fields with null)"),
        Bad(name: "defaults with a null field",
            yaml: "defaults:\n  metadata: {custom_metadata: null}\njobs:\n  - {kind: update-metadata, destination: gs://bkt/a, metadata: {content_type: null}}\n",
            position: "2:14", code: .wrongType, message: "'custom_metadata' must not be null in defaults (defaults remove no fields)"),
        Bad(name: "update-metadata over http", yaml: "- kind: update-metadata\n  destination: https://example.com/a\n  metadata: {cache_control: x}\n",
            position: "2:16", code: .invalidReference, message: "HTTP has no standard way to change a file's metadata"),
        Bad(name: "update-metadata without metadata", yaml: "- kind: update-metadata\n  destination: gs://bkt/a\n",
            position: "1:3", code: .missingField, message: "the update-metadata job has no 'metadata'"),
        Bad(name: "update-metadata with empty metadata", yaml: "- kind: update-metadata\n  destination: gs://bkt/a\n  metadata: {}\n",
            position: "3:13", code: .invalidValue, message: "'metadata' changes nothing"),
        Bad(name: "update-metadata with a source", yaml: "- kind: update-metadata\n  source: gs://bkt/a\n  destination: gs://bkt/a\n  metadata: {cache_control: x}\n",
            position: "2:3", code: .fieldNotAllowed, message: "a update-metadata job names its object with 'destination', not 'source'"),
        Bad(name: "update-metadata with a bad content type", yaml: "- kind: update-metadata\n  destination: gs://bkt/a\n  metadata: {content_type: plain}\n",
            position: "3:28", code: .invalidValue, message: "must be a media type"),
        Bad(name: "get-metadata with a destination", yaml: "- kind: get-metadata\n  source: gs://bkt/a\n  destination: /tmp/x\n",
            position: "3:3", code: .fieldNotAllowed, message: "a get-metadata job reads the object named by 'source'"),
        Bad(name: "get-metadata without a source", yaml: "- kind: get-metadata\n  queue: q\n",
            position: "1:3", code: .missingField, message: "the get-metadata job has no 'source'"),
        Bad(name: "get-metadata with metadata", yaml: "- kind: get-metadata\n  source: gs://bkt/a\n  metadata: {cache_control: x}\n",
            position: "3:3", code: .fieldNotAllowed, message: "'metadata' is only for uploads and update-metadata"),
        Bad(name: "get-metadata of a bucket root", yaml: "- kind: get-metadata\n  source: gs://bkt/\n",
            position: "2:11", code: .bucketRoot, message: "is a bucket root"),
        Bad(name: "delete without a destination", yaml: "- kind: delete\n  priority: 1\n",
            position: "1:3", code: .missingField, message: "the delete job has no 'destination'"),
        Bad(name: "delete with metadata", yaml: "- kind: delete\n  destination: gs://bkt/a\n  metadata: {cache_control: x}\n",
            position: "3:3", code: .fieldNotAllowed, message: "'metadata' is only for uploads and update-metadata"),
        Bad(name: "delete with a source", yaml: "- kind: delete\n  source: gs://bkt/a\n  destination: gs://bkt/a\n",
            position: "2:3", code: .fieldNotAllowed, message: "a delete job names its object with 'destination', not 'source'"),
        Bad(name: "delete with a dot-dot path", yaml: "- kind: delete\n  destination: gs://bkt/a/../b\n",
            position: "2:16", code: .invalidReference, message: "contains a '..' segment"),
        Bad(name: "delete of a relative path without a bucket", yaml: "- kind: delete\n  destination: a/b.txt\n",
            position: "2:16", code: .invalidReference, message: "set 'bucket:' in 'defaults:'"),
        Bad(name: "a null custom value in an upload", yaml: "- kind: upload-data\n  data: x\n  destination: gs://bkt/a\n  metadata:\n    custom_metadata: {gone: null}\n",
            position: "5:23", code: .wrongType, message: "custom metadata value for 'gone' must be a string, not null"),
        Bad(name: "a null custom value in defaults", yaml: "defaults:\n  metadata: {custom_metadata: {gone: null}}\njobs:\n  - {kind: delete, destination: gs://bkt/a}\n",
            position: "2:32", code: .wrongType, message: "defaults delete no keys"),
    ]

    @Test(arguments: malformed)
    func malformedObjectOperations(_ bad: Bad) throws {
        let errors = try #require(parse(bad.yaml).errors, "\(bad.name) parsed")
        let first = try #require(errors.first)
        #expect(errors.count == 1, "\(errors)")
        #expect("\(first.line):\(first.column) \(first.code)" == "\(bad.position) \(bad.code)", "\(errors)")
        #expect(first.message.contains(bad.message), "\(first.message)")
    }
}
