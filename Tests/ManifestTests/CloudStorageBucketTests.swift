import Foundation
import JobModel
@testable import Manifest
import Testing

/// A `gs://` bucket Cloud Storage cannot have (upper case, one or two characters, …) was taken at submit
/// and failed only when the job ran. The reader now refuses it at the value, naming the rule, however the
/// reference is written; `file://` buckets are folders' names and keep their own rules.
@Suite struct CloudStorageBucketTests {
    @Test func gsBucketsAreHeldToCloudStoragesRulesAtTheirValue() throws {
        let errors = try #require(parse("""
        - {kind: download-memory, source: gs://BKT/x}
        - {kind: upload-data, data: x, destination: gs://b/x}
        - {kind: fetch-url, source: "https://firebasestorage.googleapis.com/v0/b/My-App/o/x"}
        - {kind: get-metadata, source: "https://storage.googleapis.com/ab/x"}
        - {kind: download-file, source: gs://b/photos/, destination: out/}
        - {kind: upload-data, data: x, destination: gs://abc_/x}
        """).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" }
                    == ["1:35 invalidReference", "2:45 invalidReference", "3:29 invalidReference", "4:32 invalidReference",
                        "5:33 invalidReference", "6:45 invalidReference"], "\(errors)")
        #expect(errors[0].message == "'source' is not a valid storage reference: the bucket name 'BKT' cannot be a Cloud Storage bucket's: "
                    + "it has upper-case letters (write 'bkt'); " + StorageReference.cloudStorageBucketRule, "\(errors[0].message)")
        #expect(errors[1].message.contains("the bucket name 'b' cannot be a Cloud Storage bucket's: it is 1 character long; "
                                           + "Cloud Storage bucket names are 3 to 63 characters"), "\(errors[1].message)")
        #expect(errors[5].message.contains("does not start and end with a letter or digit"), "\(errors[5].message)")

        let bucket = try #require(parse("defaults: {bucket: gs://Photos}\njobs:\n  - {kind: fetch-url, source: a.jpg}\n").errors)
        #expect(bucket.first.map { "\($0.line):\($0.column)" } == "1:20" && bucket.first?.message.contains("upper-case") == true, "\(bucket)")
    }

    @Test func localBucketsAndValidNamesAreTaken() throws {
        let jobs = try #require(parse("""
        - {kind: upload-data, data: x, destination: file://B/x}
        - {kind: upload-data, data: x, destination: file://b/x}
        - {kind: upload-data, data: x, destination: gs://my-app.appspot.com/x}
        - {kind: download-memory, source: "https://firebasestorage.googleapis.com/v0/b/my-app.appspot.com/o/a%2Fb"}
        """).jobs)
        #expect(jobs.map { $0.destination ?? $0.source } == ["file://B/x", "file://b/x", "gs://my-app.appspot.com/x", "gs://my-app.appspot.com/a/b"])
    }
}
