import Foundation
import JobModel
import Storage
import Testing

@Suite("upload content types") struct ContentTypesTests {
    struct Case: Sendable, CustomStringConvertible {
        let spec: JobSpec
        let destination: String
        let expected: String
        var description: String { "\(spec.kind.rawValue) \(spec.source ?? "-") → \(destination)" }
    }

    /// One rule for every backend: explicit wins; upload-file infers from the local file (as putFile),
    /// then from the destination; upload-data from the destination.
    @Test(arguments: [
        Case(spec: JobSpec(kind: .uploadFile, source: "/in/photo.JPG", metadata: UploadMetadata(contentType: "image/x-custom")),
             destination: "gs://b/photo.jpg", expected: "image/x-custom"),
        Case(spec: JobSpec(kind: .uploadFile, source: "/in/photo.JPG"), destination: "gs://b/copy.txt", expected: "image/jpeg"),
        Case(spec: JobSpec(kind: .uploadFile, source: "/in/README"), destination: "gs://b/readme.md", expected: "text/markdown"),
        Case(spec: JobSpec(kind: .uploadFile, source: "/in/blob"), destination: "gs://b/blob", expected: "application/octet-stream"),
        Case(spec: JobSpec(kind: .uploadData, data: Data([1])), destination: "file://site/index.HTML", expected: "text/html"),
        Case(spec: JobSpec(kind: .uploadData, data: Data([1]), metadata: UploadMetadata(contentType: "text/plain")),
             destination: "gs://b/a.json", expected: "text/plain"),
    ])
    func forUpload(_ example: Case) throws {
        let destination = try StorageReference(parsing: example.destination)
        #expect(ContentTypes.forUpload(example.spec, destination: destination) == example.expected)
    }
}
