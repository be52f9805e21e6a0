import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// `timeout:` — how long one attempt of a job may take — on a job or in `defaults:`, range-checked.
@Suite(.onTestThreads) struct TimeoutFieldTests {
    @Test func readOnJobsAndFromDefaults() throws {
        let jobs = try #require(parse("""
        defaults:
          timeout: 30m
        jobs:
          - kind: download-memory
            source: http://example.com/a.bin
          - kind: upload-data
            data: hi
            destination: gs://bkt/x.txt
            timeout: 90s
          - kind: fetch-url
            source: gs://bkt/x.txt
            timeout: 1h30m
        """).jobs)
        #expect(jobs.map(\.timeoutSeconds) == [1800, 90, 5400])
        let none = try #require(parse("- {kind: fetch-url, source: gs://bkt/x}\n").jobs)
        #expect(none.first?.timeoutSeconds == nil)
    }

    @Test("bad timeouts are refused at the value", arguments: [
        ("0s", "at least 1s"), ("-5m", "a duration"), ("90", "a duration"), ("soon", "a duration"),
        ("8d", "at most 7d"), ("99999999999999999d", "at most 7d"), ("1.5h", "a duration"),
    ])
    func refused(value: String, fragment: String) throws {
        let errors = try #require(parse("- {kind: fetch-url, source: gs://bkt/x, timeout: \(value)}\n").errors)
        #expect(errors.count == 1)
        let error = try #require(errors.first)
        #expect(error.code == .invalidValue || error.code == .wrongType)
        #expect(error.line == 1 && error.column == 50, "\(error)")
        #expect(error.message.contains("'timeout'") && error.message.contains(fragment), "\(error.message)")
    }

    @Test func refusedInDefaults() throws {
        let errors = try #require(parse("defaults: {timeout: 0s}\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n").errors)
        #expect(errors.count == 1)
        #expect(errors.first?.line == 1)
    }
}
