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
            - {kind: fetch-url, source: "gs://bkt/\(String(repeating: "%41", count: bytes / 3))"}
            - {kind: download-file, source: gs://bkt/x, destination: "file:///\(String(repeating: "d/", count: bytes / 2))"}
            """).errors)
            #expect(errors.map(\.code) == [.invalidReference, .invalidReference, .invalidReference, .invalidReference], "\(errors)")
            #expect(errors.map { "\($0.line):\($0.column)" } == ["1:33", "2:46", "3:29", "4:58"])
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
        - {kind: download-file, source: gs://bkt/x, destination: "\(longPath)"}
        - {kind: download-file, source: gs://bkt/x, destination: "\(longName)"}
        - {kind: upload-file, source: "\(longPath)", destination: gs://bkt/x}
        """).errors)
        #expect(errors.map(\.code) == [.invalidPath, .invalidPath, .invalidPath], "\(errors)")
        #expect(errors[0].message.contains("is 4206 bytes long as an absolute path; Linux takes paths of at most 4095 bytes"), "\(errors[0].message)")
        #expect(errors[1].message.contains("has a name of 256 bytes"), "\(errors[1].message)")
        #expect(errors[2].message.contains("is 4206 bytes long as an absolute path"), "\(errors[2].message)")
        // 255 bytes a name and 4095 a path are fine.
        let fits = "/tmp/" + String(repeating: "n", count: 255)
        #expect(parse("- {kind: download-file, source: gs://bkt/x, destination: \"\(fits)\"}").jobs?.first?.destination == fits)
        let deep = "/tmp/" + String(repeating: "a/", count: 2_044) + "xy"
        #expect(deep.utf8.count == 4_095)
        #expect(parse("- {kind: download-file, source: gs://bkt/x, destination: \"\(deep)\"}").jobs?.first?.destination == deep)
    }

    /// A download into a folder takes the object's own name (as `cp` does): that name, and the path it
    /// makes, are held to the same bounds, at the field. A GCS name may have a 1,024-byte segment; as a
    /// file name it failed only in the worker, with ENAMETOOLONG.
    @Test func aFolderDestinationWithTheObjectsNameIsHeldToTheKernelsBounds() throws {
        let longName = String(repeating: "n", count: 256)
        let deepFolder = "/tmp/" + String(repeating: "a/", count: 2_000)
        let lines = ["- {kind: download-file, source: \"gs://bkt/dir/\(longName)\", destination: out/}",
                     "- {kind: download-file, source: \"gs://bkt/\(String(repeating: "m", count: 200))\", destination: \"\(deepFolder)\"}"]
        let errors = try #require(parse(lines.joined(separator: "\n")).errors)
        #expect(errors.map(\.code) == [.invalidPath, .invalidPath], "\(errors)")
        // At the destination each job wrote.
        #expect(errors.map { "\($0.line):\($0.column)" } == ["1:\(lines[0].utf8.count - 4)", "2:\(lines[1].utf8.count - deepFolder.utf8.count - 2)"],
                "\(errors)")
        #expect(errors.first?.message.contains("the object's name '\(longName.prefix(40))...' is 256 bytes; file names are at most 255 bytes") == true,
                "\(errors.first?.message ?? "")")
        #expect(errors.last?.message.contains("is 4205 bytes long as an absolute path") == true, "\(errors.last?.message ?? "")")
        // A 255-byte name, and a path of 4095 bytes, are fine.
        let fits = String(repeating: "n", count: 255)
        #expect(parse("- {kind: download-file, source: \"gs://bkt/\(fits)\", destination: out/}").jobs?.first?.destination
                == testBase + "/out/" + fits)
        let deep = "/tmp/" + String(repeating: "a/", count: 1_920)
        let exact = String(repeating: "m", count: 4_095 - deep.utf8.count)
        #expect(parse("- {kind: download-file, source: \"gs://bkt/\(exact)\", destination: \"\(deep)\"}").jobs?.first?.destination
                == deep + exact)
    }
    /// A `file://` object is a file: its name's parts are file names, and a reference without a bucket
    /// (`file:///abs/path`) is an absolute path. An upload to `file://b/dir/<300 bytes>` was "1 job
    /// valid" and failed in the worker with "File name too long"; it is refused at its field, as a
    /// local path is.
    @Test func fileReferencesAreHeldToTheKernelsBounds() throws {
        let long = String(repeating: "n", count: 256)
        let deep = String(repeating: "d/", count: 2_048)
        let errors = try #require(parse("""
        - {kind: upload-data, data: hi, destination: "file://b/dir/\(long)"}
        - {kind: upload-data, data: hi, destination: "file:///tmp/\(long)/x"}
        - {kind: download-file, source: "file://b/\(long)", destination: out/x}
        - {kind: upload-data, data: hi, destination: "file:///\(deep)x"}
        - {kind: upload-data, data: hi, destination: "file://\(long)/x"}
        - {kind: upload-data, data: hi, destination: "file://b/\(deep)x"}
        """).errors)
        #expect(errors.map(\.code) == [.invalidReference, .invalidReference, .invalidReference, .invalidReference, .invalidReference,
                                       .invalidReference], "\(errors)")
        #expect(errors.map(\.line) == [1, 2, 3, 4, 5, 6])
        #expect(errors[5].message.contains("the bucket and object name are 4099 bytes as a path, and the buckets' folder comes before them"),
                "\(errors[5].message)")
        for error in errors.prefix(3) {
            #expect(error.message.contains("has a name of 256 bytes ('\(long.prefix(40))...'); file names are at most 255 bytes"),
                    "\(error.message)")
        }
        #expect(errors[3].message.contains("is 4098 bytes long as an absolute path"), "\(errors[3].message)")
        #expect(errors[4].message.contains("the local bucket's name is 256 bytes"), "\(errors[4].message)")
        // 255 bytes a name is fine, and so is a path of 4,095.
        let fits = String(repeating: "n", count: 255)
        let deepest = "/" + String(repeating: "d/", count: 2_046) + "xy"
        #expect(deepest.utf8.count == 4_095)
        let jobs = try #require(parse("""
        - {kind: upload-data, data: hi, destination: "file://b/dir/\(fits)"}
        - {kind: upload-data, data: hi, destination: "file://\(deepest)"}
        """).jobs)
        #expect(jobs.map(\.destination) == ["file://b/dir/\(fits)", "file://\(deepest)"])
    }
}
