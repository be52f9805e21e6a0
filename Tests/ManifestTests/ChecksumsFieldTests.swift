import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// `checksums:` — the hashes a transfer computes and compares — on a job or in `defaults:`.
@Suite(.onTestThreads) struct ChecksumsFieldTests {
    @Test func readOnJobsAndFromDefaults() throws {
        let jobs = try #require(parse("""
        defaults:
          checksums: [md5]
        jobs:
          - kind: download-memory
            source: http://example.com/a.bin
          - kind: upload-data
            data: hi
            destination: gs://bkt/x.txt
            checksums: [crc32c, MD5, crc32c]
          - kind: download-file
            source: gs://bkt/x.txt
            destination: out/x.txt
            checksums: []
          - kind: fetch-url
            source: gs://bkt/x.txt
        """).jobs)
        // Kept in one order without repeats; an empty list is the default (CRC32C); fetch-url moves no
        // bytes, so a default does not apply to it.
        #expect(jobs.map(\.checksums) == [[.md5], [.md5, .crc32c], [], nil])
        #expect(jobs.map(\.wantsMD5) == [true, true, false, false])
        let none = try #require(parse("- {kind: download-memory, source: gs://bkt/x}\n").jobs)
        #expect(none.first?.checksums == nil)
    }

    @Test("unknown names and non-lists are refused where they were written", arguments: [
        ("[md5, sha1]", 1, 64, "unknown checksum 'sha1'"),
        ("[crc32]", 1, 59, "did you mean 'crc32c'?"),
        ("md5", 1, 58, "must be a list of hash names"),
        ("[md5, [crc32c]]", 1, 64, "must be a hash name"),
    ])
    func refused(value: String, line: Int, column: Int, fragment: String) throws {
        let errors = try #require(parse("- {kind: download-memory, source: gs://bkt/x, checksums: \(value)}\n").errors)
        #expect(errors.count == 1)
        let error = try #require(errors.first)
        #expect(error.line == line && error.column == column, "\(error)")
        #expect(error.message.contains(fragment), "\(error.message)")
        #expect(error.message.contains("md5, crc32c"), "the message names the choices: \(error.message)")
    }

    @Test func refusedInDefaults() throws {
        let errors = try #require(parse("defaults: {checksums: [sha256]}\njobs:\n  - {kind: download-memory, source: gs://bkt/x}\n").errors)
        #expect(errors.count == 1)
        #expect(errors.first?.line == 1)
    }

    @Test func notAllowedOnFetchURL() throws {
        let errors = try #require(parse("- {kind: fetch-url, source: gs://bkt/x, checksums: [md5]}\n").errors)
        #expect(errors.count == 1)
        #expect(errors.first?.code == .fieldNotAllowed)
    }
}
