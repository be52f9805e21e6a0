import Foundation
import JobModel
import Storage
import Testing
import TestSupport

@Suite("upload content types", .onTestThreads) struct ContentTypesTests {
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

    /// The inference as it read every path before ASCII paths were read as bytes: the oracle.
    private static func inferredByCharacters(_ path: String) -> String {
        let name = SlashSeparatedPath.lastPart(of: path).map(String.init) ?? path
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return ContentTypes.fallback }
        return ContentTypes.table[name[name.index(after: dot)...].lowercased()] ?? ContentTypes.fallback
    }

    @Test("paths read as bytes get the type the Character-wise reading gives")
    func bytewiseInferenceMatchesTheCharacters() {
        // Pieces that matter to the rule: slashes (trailing, doubled, alone), dots (leading, trailing,
        // doubled), known extensions in mixed case, one longer than any known, letters; and a few
        // non-ASCII pieces, which take the Character-wise path itself.
        let pieces = ["/", "//", ".", "..", "a", "Z", "jpg", "JPG", "JpEg", "tar", "gz", "woff2", "WOFF2",
                      "docx", "unknownext", "x-y", " ", "é", "\u{212A}", "\r\n"]
        var generator = SystemRandomNumberGenerator()
        var mismatches: [String] = []
        for length in 0...6 {
            for _ in 0..<3_000 {
                let path = (0..<length).map { _ in pieces.randomElement(using: &generator)! }.joined()
                if ContentTypes.infer(path: path) != Self.inferredByCharacters(path) { mismatches.append(path) }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
        for (path, type) in [("a.jpg/", "image/jpeg"), ("dir//f.PNG//", "image/png"), ("///", ContentTypes.fallback),
                             ("x/.png", ContentTypes.fallback), ("a.", ContentTypes.fallback), ("f.WoFf2", "font/woff2"),
                             ("a.unknownext", ContentTypes.fallback), ("é/b.TXT", "text/plain"), ("", ContentTypes.fallback)] {
            #expect(ContentTypes.infer(path: path) == type, "\(path)")
        }
    }
}
