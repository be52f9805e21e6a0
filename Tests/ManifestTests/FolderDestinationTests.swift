import Foundation
import JobModel
import Testing
import TestSupport
@testable import Manifest

/// A destination ending in `/` means "into this folder", as in gsutil, rclone and cp: the name is added at
/// submit, so the spec (and the log) says exactly where the bytes go.
@Suite(.onTestThreads) struct FolderDestinationTests {
    /// upload-file `t.csv` (or `a b.csv`) to each destination, and where it must go.
    @Test(arguments: [
        ("gs://bkt/folder/", "gs://bkt/folder/t.csv"),
        ("gs://bkt/deep/er/", "gs://bkt/deep/er/t.csv"),
        ("gs://bkt/", "gs://bkt/t.csv"),
        ("gs://bkt", "gs://bkt/t.csv"),
        ("gs://bkt/folder%2F", "gs://bkt/folder/t.csv"),
        ("https://firebasestorage.googleapis.com/v0/b/bkt/o/folder%2F", "gs://bkt/folder/t.csv"),
        ("https://firebasestorage.googleapis.com/v0/b/bkt/o/folder%2F?alt=media", "gs://bkt/folder/t.csv"),
        ("https://storage.googleapis.com/bkt/folder/", "gs://bkt/folder/t.csv"),
        ("file://demo/inbox/", "file://demo/inbox/t.csv"),
        ("file://demo/", "file://demo/t.csv"),
        ("file:///srv/exports/", "file:///srv/exports/t.csv"),
        ("http://127.0.0.1:8080/put/", "http://127.0.0.1:8080/put/t.csv"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/t.csv"),
        ("'http://127.0.0.1:8080/put/?X-Goog-Signature=abc'", "http://127.0.0.1:8080/put/t.csv?X-Goog-Signature=abc"),
        // No trailing slash: the name as written.
        ("gs://bkt/folder", "gs://bkt/folder"),
        ("gs://bkt/folder/renamed.csv", "gs://bkt/folder/renamed.csv"),
        ("http://127.0.0.1:8080/put/x?a=b/", "http://127.0.0.1:8080/put/x?a=b/"),
    ])
    func uploadFileIntoAFolderKeepsTheFilesName(_ destination: String, _ expected: String) throws {
        let jobs = try #require(parse("- {kind: upload-file, source: in/t.csv, destination: \(destination)}\n").jobs)
        #expect(jobs.first?.destination == expected)
        #expect(jobs.first?.source == testBase + "/in/t.csv")
    }

    /// A plain http(s) URL keeps its path as written (escapes and all) with the name after it; `%2F` at its
    /// end is part of a name there, not a folder.
    @Test func aPlainHTTPFolderKeepsItsPathAsWritten() throws {
        let jobs = try #require(parse("""
        - {kind: upload-file, source: in/t.csv, destination: "http://127.0.0.1:8080/a%2Fb/?sig=x"}
        - {kind: upload-file, source: in/t.csv, destination: "http://127.0.0.1:8080/a%2F"}
        """).jobs)
        #expect(jobs.map(\.destination) == [
            try StorageReference(parsing: "http://127.0.0.1:8080/a%2Fb/t.csv?sig=x").description,
            try StorageReference(parsing: "http://127.0.0.1:8080/a%2F").description,
        ])
    }

    @Test func theNameIsEncodedAsAnObjectName() throws {
        let jobs = try #require(parse("- {kind: upload-file, source: 'in/a b%.csv', destination: gs://bkt/folder/}\n").jobs)
        #expect(jobs.first?.destination == "gs://bkt/folder/a%20b%25.csv")
        #expect(try StorageReference(parsing: jobs.first?.destination ?? "").fullPath == "folder/a b%.csv")
    }

    /// upload-data has no file name to add: a folder destination is an error at its position.
    @Test func uploadDataIntoAFolderIsRefused() throws {
        let errors = try #require(parse("""
        - kind: upload-data
          data: hello
          destination: file://demo/inbox/
        - kind: upload-data
          data: hello
          destination: "http://127.0.0.1:8080/put/?sig=x"
        """).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["3:16 invalidReference", "6:16 invalidReference"])
        #expect(errors.first?.message.contains("ends in '/', so it names a folder, and an upload-data job has no file name") == true)
        #expect(errors.first?.message.contains("file://demo/inbox/data.bin") == true)
    }

    /// download-file into a folder: written with `/`, or a folder that exists, gets the object's name.
    @Test func downloadFileIntoAFolderKeepsTheObjectsName() throws {
        let directory = try TemporaryDirectory("folder-destination")
        defer { directory.remove() }
        let base = LocalPath.standardize(directory.path)
        try FileManager.default.createDirectory(atPath: directory.file("out"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: directory.file("linked"), withDestinationPath: "out")
        let yaml = """
        - {kind: download-file, source: gs://bkt/reports/r.json, destination: out/}
        - {kind: download-file, source: gs://bkt/reports/r.json, destination: out}
        - {kind: download-file, source: gs://bkt/reports/r.json, destination: linked}
        - {kind: download-file, source: gs://bkt/reports/r.json, destination: .}
        - {kind: download-file, source: gs://bkt/reports/r.json, destination: "file://\(base)/out/"}
        - {kind: download-file, source: gs://bkt/reports/r.json, destination: not-yet/}
        - {kind: download-file, source: gs://bkt/reports/r.json, destination: out/copy.json}
        - {kind: download-file, source: gs://bkt/reports/r.json, destination: new-name}
        - {kind: download-file, source: "http://127.0.0.1:8080/files/x.bin?sig=abc", destination: out/}
        - {kind: download-file, source: "https://firebasestorage.googleapis.com/v0/b/bkt/o/a%2Fb%20c.txt", destination: out/}
        """
        let jobs = try #require(ManifestParser(baseDirectory: base).parse(text: yaml, path: "m.yaml").jobs)
        #expect(jobs.map(\.destination) == [
            base + "/out/r.json", base + "/out/r.json", base + "/linked/r.json", base + "/r.json", base + "/out/r.json",
            base + "/not-yet/r.json", base + "/out/copy.json", base + "/new-name", base + "/out/x.bin", base + "/out/b c.txt",
        ])
    }

    /// A plain URL's file name is its last segment as written, decoded: `…/ok/a%2Fb` and `…/ok/c%2Fb`
    /// both went to `out/b` (the path's decoded, collapsed name), each reporting success there, and
    /// `%0A` or `%1B` made a file name holding a line break or an escape. Refused at the destination;
    /// the file's own name written works, and an escape that makes a name (`a%20b`) is decoded.
    @Test func aURLsLastSegmentThatMakesNoFileNameIsRefused() throws {
        let directory = try TemporaryDirectory("folder-destination-url")
        defer { directory.remove() }
        let base = LocalPath.standardize(directory.path)
        let yaml = """
        - {kind: download-file, source: "http://127.0.0.1:8080/ok/a%2Fb", destination: out/}
        - {kind: download-file, source: "http://127.0.0.1:8080/ok/evil%0Aname%1B[31m", destination: out/}
        - {kind: download-file, source: "http://127.0.0.1:8080/ok/a%2Fb", destination: out/ab.bin}
        - {kind: download-file, source: "http://127.0.0.1:8080/ok/a%20b?x=1", destination: out/}
        """
        let result = ManifestParser(baseDirectory: base).parse(text: yaml, path: "m.yaml")
        let errors = try #require(result.errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["1:80 invalidPath", "2:93 invalidPath"], "\(errors)")
        #expect(errors.first?.message.contains("the source's name, decoded, is 'a/b', which holds a '/'") == true, "\(errors)")
        let fine = try #require(ManifestParser(baseDirectory: base).parse(text: """
        - {kind: download-file, source: "http://127.0.0.1:8080/ok/a%2Fb", destination: out/ab.bin}
        - {kind: download-file, source: "http://127.0.0.1:8080/ok/a%20b?x=1", destination: out/}
        """, path: "m.yaml").jobs)
        #expect(fine.map(\.destination) == [base + "/out/ab.bin", base + "/out/a b"])
    }

    /// A source ending in `/` names a folder: only download-file expands it (a prefix); the other kinds
    /// refuse it rather than silently turn it into the object `folder`.
    @Test func onlyDownloadFileTakesAFolder() throws {
        let errors = try #require(parse("""
        - {kind: download-memory, source: file://demo/folder/}
        - {kind: fetch-url, source: "https://firebasestorage.googleapis.com/v0/b/bkt/o/folder%2F"}
        """).errors)
        #expect(errors.map { "\($0.line):\($0.column) \($0.code)" } == ["1:35 invalidReference", "2:29 invalidReference"])
        #expect(errors.allSatisfy { $0.message.contains("ends in '/', so it names a folder; only download-file jobs expand a prefix") })
        let prefix = ManifestParser(baseDirectory: testBase).parseJobs(text: "- {kind: download-file, source: gs://bkt/folder/, destination: out/}\n",
                                                                       path: "m.yaml")
        let jobs = try #require(prefix.jobs)
        let job = try #require(jobs.first)
        #expect(job.prefixExpansion?.prefixText == "gs://bkt/folder/")
        #expect(job.prefixExpansion?.destinationFolder == testBase + "/out")
    }
}
