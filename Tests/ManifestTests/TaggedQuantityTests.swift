import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// A size, a rate, a duration or a time is written as text, and a YAML tag on it must ask for text the
/// field reads: none or `!!str`, or `!!int` on a whole number where digits alone are a value (a size, a
/// rate). The text was read whatever the tag said: `max_size: !!int 5MiB`, `timeout: !!int 10m` and
/// `delay: !!bool 5m` were taken as if untagged.
@Suite(.onTestThreads) struct TaggedQuantityTests {
    @Test("a tag that asks for another type is refused at the value", arguments: [
        ("download-memory", "max_size: !!int 5MiB", "max_size", "tagged !!int, which is no whole number"),
        ("download-memory", "max_size: !!float 5", "max_size", "tagged !!float"),
        ("download-memory", "max_size: !!bool yes", "max_size", "tagged !!bool"),
        ("download-file", "max_rate: !!int 5M", "max_rate", "tagged !!int, which is no whole number"),
        ("download-file", "timeout: !!int 10m", "timeout", "tagged !!int"),
        ("download-file", "delay: !!bool 5m", "delay", "tagged !!bool"),
        ("download-file", "run_after: !!int 2026-12-01T02:00:00Z", "run_after", "tagged !!int"),
    ])
    func refused(kind: String, field: String, name: String, fragment: String) throws {
        let destination = kind == "download-file" ? ", destination: /tmp/out.bin" : ""
        let errors = try #require(parse("- {kind: \(kind), source: gs://bkt/x\(destination), \(field)}\n").errors)
        #expect(errors.count == 1, "\(errors)")
        let error = try #require(errors.first)
        #expect(error.code == .wrongType, "\(error)")
        #expect(error.message.contains("'\(name)'") && error.message.contains(fragment), "\(error.message)")
    }

    @Test func textTagsAndWholeNumbersAreRead() throws {
        let jobs = try #require(parse("""
        jobs:
          - {kind: download-memory, source: gs://bkt/a, max_size: !!int 4096}
          - {kind: download-memory, source: gs://bkt/b, max_size: !!str 5KiB}
          - {kind: download-file, source: gs://bkt/c, destination: /tmp/c.bin, max_rate: !!str 10M, timeout: !!str 90s, delay: !!str 1m}
        """).jobs)
        #expect(jobs.map(\.maxSize) == [4096, 5 * 1024, nil])
        #expect(jobs[2].timeoutSeconds == 90)
        #expect(jobs[2].maxRate == Int64(10 << 20))
    }
}
