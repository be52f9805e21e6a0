import Foundation
import JobModel
import Testing
@testable import Manifest

/// Every reference and local path a manifest names has a length bound, checked at its field: a 10 MB
/// http(s) URL was accepted (and stored, and sent), and a 4 MB local destination failed only in the
/// worker, with ENAMETOOLONG.
@Suite struct ReferenceLengthTests {
    @Test func referencesOver16KiBAreRefusedAtTheirField() throws {
        let room = 16_384
        func url(_ bytes: Int) -> String { "https://example.com/" + String(repeating: "a", count: bytes - "https://example.com/".utf8.count) }
        // Exactly the limit is fine, for a source and a destination.
        let fits = try #require(parse("""
        - {kind: download-file, source: "\(url(room))", destination: out/x}
        - {kind: upload-data, data: hi, destination: "\(url(room))"}
        """).jobs)
        #expect(fits.map { $0.source?.utf8.count ?? $0.destination?.utf8.count } == [room, room])
        for bytes in [room + 1, 10 << 20] {
            let errors = try #require(parse("""
            - {kind: download-file, source: "\(url(bytes))", destination: out/x}
            - {kind: upload-data, data: hi, destination: "\(url(bytes))"}
            - {kind: fetch-url, source: "gs://b/\(String(repeating: "%41", count: bytes / 3))"}
            - {kind: download-file, source: gs://b/x, destination: "file:///\(String(repeating: "d/", count: bytes / 2))"}
            """).errors)
            #expect(errors.map(\.code) == [.invalidReference, .invalidReference, .invalidReference, .invalidReference], "\(errors)")
            #expect(errors.map { "\($0.line):\($0.column)" } == ["1:33", "2:46", "3:29", "4:56"])
            for error in errors {
                #expect(error.message.contains("bytes long; jobctl takes at most 16384 bytes"), "\(error.message.prefix(300))")
                #expect(error.message.count < 1_000)
            }
        }
        #expect(throws: StorageError.self) { try StorageReference(parsing: url(room + 1)) }
        #expect(try StorageReference(parsing: url(room)).bucket == "example.com")
    }

    @Test func localPathsOverTheKernelsBoundsAreRefusedAtTheirField() throws {
        let longPath = "/tmp/" + String(repeating: "a/", count: 2_100) + "x"
        let longName = "/tmp/" + String(repeating: "n", count: 256)
        let errors = try #require(parse("""
        - {kind: download-file, source: gs://b/x, destination: "\(longPath)"}
        - {kind: download-file, source: gs://b/x, destination: "\(longName)"}
        - {kind: upload-file, source: "\(longPath)", destination: gs://b/x}
        """).errors)
        #expect(errors.map(\.code) == [.invalidPath, .invalidPath, .invalidPath], "\(errors)")
        #expect(errors[0].message.contains("is 4206 bytes long as an absolute path; Linux takes paths of at most 4095 bytes"), "\(errors[0].message)")
        #expect(errors[1].message.contains("has a name of 256 bytes"), "\(errors[1].message)")
        #expect(errors[2].message.contains("is 4206 bytes long as an absolute path"), "\(errors[2].message)")
        // 255 bytes a name and 4095 a path are fine.
        let fits = "/tmp/" + String(repeating: "n", count: 255)
        #expect(parse("- {kind: download-file, source: gs://b/x, destination: \"\(fits)\"}").jobs?.first?.destination == fits)
        let deep = "/tmp/" + String(repeating: "a/", count: 2_044) + "xy"
        #expect(deep.utf8.count == 4_095)
        #expect(parse("- {kind: download-file, source: gs://b/x, destination: \"\(deep)\"}").jobs?.first?.destination == deep)
    }
}
