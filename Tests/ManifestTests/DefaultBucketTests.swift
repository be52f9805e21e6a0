import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// `defaults: {bucket: ...}`: object paths written without a scheme resolve against it at submit, as
/// `reference(withPath:)` does, and the stored spec holds the full reference.
@Suite(.onTestThreads) struct DefaultBucketTests {
    @Test func relativeObjectPathsResolveAgainstTheDefaultBucket() throws {
        let jobs = try #require(parse("""
        defaults:
          bucket: gs://my-app.appspot.com
        jobs:
          - kind: upload-data
            data: hi
            destination: images/cat.jpg
          - kind: download-memory
            source: docs/a b.txt
          - kind: download-file
            source: images/cat.jpg
            destination: out/cat.jpg
          - kind: upload-file
            source: photos/dog.jpg
            destination: images/
          - kind: fetch-url
            source: images/cat.jpg
          - kind: upload-data
            data: hi
            destination: gs://other/kept.txt
        """).jobs)
        #expect(jobs.map(\.destination) == ["gs://my-app.appspot.com/images/cat.jpg", nil, "\(testBase)/out/cat.jpg",
                                            "gs://my-app.appspot.com/images/dog.jpg", nil, "gs://other/kept.txt"])
        #expect(jobs.map(\.source) == [nil, "gs://my-app.appspot.com/docs/a%20b.txt", "gs://my-app.appspot.com/images/cat.jpg",
                                       "\(testBase)/photos/dog.jpg", "gs://my-app.appspot.com/images/cat.jpg", nil])
    }

    @Test func aFileBucketIsADefaultToo() throws {
        let jobs = try #require(parse("""
        defaults: {bucket: "file://local-bucket/"}
        jobs:
          - {kind: download-memory, source: a/b.txt}
        """).jobs)
        #expect(jobs.map(\.source) == ["file://local-bucket/a/b.txt"])
    }

    @Test func withoutADefaultBucketARelativePathIsStillAnError() throws {
        let errors = try #require(parse("- kind: upload-data\n  data: x\n  destination: images/cat.jpg\n").errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["3:16 invalidReference"])
        #expect(errors.first?.message.contains("set 'bucket:' in 'defaults:'") == true, "\(errors)")
    }

    struct Bad: Sendable, CustomStringConvertible {
        let name: String
        let yaml: String
        let line: Int
        let column: Int
        let code: ManifestError.Code
        let message: String
        var description: String { name }
    }

    static let malformed: [Bad] = [
        Bad(name: "dot-dot in a relative path", yaml: "defaults:\n  bucket: gs://bkt\njobs:\n  - kind: download-memory\n    source: a/../etc\n",
            line: 5, column: 13, code: .invalidReference, message: "contains a '..' segment"),
        Bad(name: "bucket in a job", yaml: "- kind: download-memory\n  source: gs://bkt/x\n  bucket: gs://bkt\n",
            line: 3, column: 3, code: .fieldNotAllowed, message: "'bucket' belongs in 'defaults:'"),
        Bad(name: "an http bucket", yaml: "defaults:\n  bucket: https://example.com\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n",
            line: 2, column: 11, code: .invalidReference, message: "is not a gs:// or file:// bucket"),
        Bad(name: "a bucket with a path", yaml: "defaults:\n  bucket: gs://bkt/images\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n",
            line: 2, column: 11, code: .invalidReference, message: "write the bucket alone, such as gs://bkt/"),
        Bad(name: "a bucket without a scheme", yaml: "defaults:\n  bucket: my-app\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n",
            line: 2, column: 11, code: .invalidReference, message: "'bucket' is not a valid bucket"),
        Bad(name: "a plain local file URL", yaml: "defaults:\n  bucket: file:///tmp\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n",
            line: 2, column: 11, code: .invalidReference, message: "is not a gs:// or file:// bucket"),
        Bad(name: "a list for a bucket", yaml: "defaults:\n  bucket: [gs://bkt]\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n",
            line: 2, column: 11, code: .wrongType, message: "'bucket' must be a bucket such as gs://my-app.appspot.com"),
        Bad(name: "a bucket without a value", yaml: "defaults:\n  bucket:\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n",
            line: 2, column: 3, code: .invalidValue, message: "'bucket' has no value"),
    ]

    @Test(arguments: malformed)
    func malformedBucketsAndPaths(_ bad: Bad) throws {
        let errors = try #require(parse(bad.yaml).errors, "\(bad.name) parsed")
        let first = try #require(errors.first)
        #expect(errors.count == 1, "\(errors)")
        #expect("\(first.line):\(first.column) \(first.code)" == "\(bad.line):\(bad.column) \(bad.code)", "\(errors)")
        #expect(first.message.contains(bad.message), "\(first.message)")
    }
}
