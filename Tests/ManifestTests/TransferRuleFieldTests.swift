import Foundation
import JobModel
import Testing
@testable import Manifest
import TestSupport

/// `if_exists:` and `max_rate:` on a job or in `defaults:`, with exact positions for bad values.
@Suite(.onTestThreads) struct TransferRuleFieldTests {
    @Test func ifExistsReadOnJobsAndFromDefaults() throws {
        let jobs = try #require(parse("""
        defaults:
          if_exists: skip
        jobs:
          - kind: upload-data
            data: hi
            destination: gs://bkt/x.txt
          - kind: upload-data
            data: hi
            destination: gs://bkt/y.txt
            if_exists: skip-identical
          - kind: download-file
            source: gs://bkt/x.txt
            destination: /tmp/x.txt
            if_exists: fail
          - kind: upload-data
            data: hi
            destination: gs://bkt/z.txt
            if_exists: overwrite
          - kind: fetch-url
            source: gs://bkt/x.txt
        """).jobs)
        #expect(jobs.map(\.ifExists) == [.skip, .skipIdentical, .fail, nil, nil])
    }

    @Test func specsWithoutTheFieldsEncodeWithoutThem() throws {
        let job = try #require(parse("- {kind: upload-data, data: hi, destination: gs://bkt/x, if_exists: overwrite}\n").jobs?.first)
        let text = String(decoding: try JSONEncoder().encode(job), as: UTF8.self)
        #expect(!text.contains("ifExists") && !text.contains("maxRate"), "\(text)")
        let limited = try #require(parse("- {kind: upload-data, data: hi, destination: gs://bkt/x, if_exists: fail, max_rate: 1M}\n").jobs?.first)
        let decoded = try JSONDecoder().decode(JobSpec.self, from: try JSONEncoder().encode(limited))
        #expect(decoded == limited && decoded.ifExists == .fail && decoded.maxRate == 1_048_576)
    }

    @Test("bad if_exists values are refused at the value", arguments: [
        ("skipp", "did you mean 'skip'"), ("replace", "expected one of overwrite, skip, fail, skip-identical"),
        ("[skip]", "must be one of"),
    ])
    func ifExistsRefused(value: String, fragment: String) throws {
        let errors = try #require(parse("- {kind: upload-data, data: hi, destination: gs://bkt/x, if_exists: \(value)}\n").errors)
        #expect(errors.count == 1)
        let error = try #require(errors.first)
        #expect(error.line == 1 && error.column == 69, "\(error)")
        #expect(error.message.contains(fragment), "\(error.message)")
    }

    @Test func skipIdenticalAppliesToDownloadFiles() throws {
        let jobs = try #require(parse("""
        defaults: {if_exists: skip-identical}
        jobs:
          - {kind: download-file, source: gs://bkt/x, destination: /tmp/x}
          - {kind: download-file, source: file://b/y, destination: /tmp/y, if_exists: skip}
        """).jobs)
        #expect(jobs.map(\.ifExists) == [.skipIdentical, .skip])
    }

    @Test func skipIdenticalIsRefusedWhereNothingIsCompared() throws {
        let errors = try #require(parse("- {kind: download-memory, source: gs://bkt/x, if_exists: skip-identical}\n").errors)
        #expect(errors.map(\.line) == [1] && errors.map(\.column) == [47])
        #expect(errors.first?.code == .fieldNotAllowed)
        let misspelled = try #require(parse("- {kind: download-file, source: gs://bkt/x, destination: /tmp/x, if_exists: skip-identicl}\n").errors)
        #expect(misspelled.map(\.line) == [1] && misspelled.map(\.column) == [77])
        #expect(misspelled.first?.message.contains("did you mean 'skip-identical'") == true, "\(misspelled)")
    }

    @Test func ifGenerationOnDeleteAndUpdateMetadata() throws {
        let jobs = try #require(parse("""
        jobs:
          - {kind: delete, destination: gs://bkt/x, if_generation: 1700000000123456}
          - kind: update-metadata
            destination: file://bucket/y
            metadata: {content_type: text/plain}
            if_generation: 3
          - {kind: delete, destination: gs://bkt/z}
        """).jobs)
        #expect(jobs.map(\.ifGeneration) == [1_700_000_000_123_456, 3, nil])
        let text = String(decoding: try JSONEncoder().encode(jobs[2]), as: UTF8.self)
        #expect(!text.contains("ifGeneration"), "\(text)")
        let decoded = try JSONDecoder().decode(JobSpec.self, from: try JSONEncoder().encode(jobs[0]))
        #expect(decoded == jobs[0])
    }

    @Test("bad if_generation values are refused at the value", arguments: [
        ("0", "must be at least 1"), ("-3", "must be at least 1"), ("abc", "must be the object's generation"),
    ])
    func ifGenerationRefused(value: String, fragment: String) throws {
        let errors = try #require(parse("- {kind: delete, destination: gs://bkt/x, if_generation: \(value)}\n").errors)
        #expect(errors.map(\.line) == [1] && errors.map(\.column) == [58], "\(errors)")
        #expect(errors.first?.message.contains(fragment) == true, "\(errors)")
    }

    @Test func ifGenerationIsRefusedWhereThereIsNoGeneration() throws {
        let http = try #require(parse("- {kind: delete, destination: http://h/x, if_generation: 5}\n").errors)
        #expect(http.map(\.column) == [43] && http.first?.message.contains("no generation") == true, "\(http)")
        let download = try #require(parse("- {kind: download-file, source: gs://bkt/x, destination: /tmp/x, if_generation: 5}\n").errors)
        #expect(download.map(\.column) == [66] && download.first?.code == .fieldNotAllowed, "\(download)")
        let shared = try #require(parse("defaults: {if_generation: 5}\njobs:\n  - {kind: delete, destination: gs://bkt/x}\n").errors)
        #expect(shared.map(\.line) == [1] && shared.map(\.column) == [12], "\(shared)")
        #expect(shared.first?.message.contains("cannot be a default") == true)
    }

    @Test func ifExistsIsRefusedWhereNothingIsWritten() throws {
        let errors = try #require(parse("- {kind: fetch-url, source: gs://bkt/x, if_exists: skip}\n").errors)
        #expect(errors.map(\.column) == [41])
        #expect(errors.first?.code == .fieldNotAllowed)
    }

    @Test("rates in rclone's syntax", arguments: [
        ("512k", Int64(524_288)), ("10M", Int64(10_485_760)), ("1.5M", Int64(1_572_864)), ("2048", Int64(2048)),
        ("1MiB", Int64(1_048_576)), ("1MB", Int64(1_000_000)), ("4m/s", Int64(4_194_304)), ("1G", Int64(1_073_741_824)),
        ("1t", Int64(1) << 40), ("0.5T", Int64(1) << 39), ("1.5 k", Int64(1_536)),
    ])
    func rates(text: String, bytes: Int64) throws {
        let job = try #require(parse("- {kind: download-memory, source: gs://bkt/x, max_rate: \(text)}\n").jobs?.first)
        #expect(job.maxRate == bytes)
        #expect(TransferRate.parse(text) == bytes)
    }

    @Test func maxRateFromDefaults() throws {
        let jobs = try #require(parse("""
        defaults: {max_rate: 1M}
        jobs:
          - {kind: download-memory, source: gs://bkt/x}
          - {kind: download-memory, source: gs://bkt/y, max_rate: 64k}
          - {kind: fetch-url, source: gs://bkt/x}
        """).jobs)
        #expect(jobs.map(\.maxRate) == [1_048_576, 65_536, nil])
    }

    @Test("bad rates are refused at the value", arguments: [
        ("fast", "a rate like 512k"), ("1000", "at least 1k"), ("2T", "at most 1T"), ("-1M", "a rate like"),
        ("10Q", "a rate like"), ("[1M]", "must be a rate"),
        // Not rounded: 1023.5 was taken as 1024, over the minimum, and 1.1M as 1153434.
        ("1023.5", "not '1023.5' (without a unit the number is a whole number of bytes"), ("1.1M", "a whole number of bytes per second"),
        // A point has digits on both sides: `.5M` and `5.M` were 512 KiB/s and 5 MiB/s.
        (".5M", "digits on both sides of its point"), ("5.M", "digits on both sides of its point"), ("1.0", "without a point"),
        ("99999999999999999999999k", "at most 1T"),
    ])
    func ratesRefused(value: String, fragment: String) throws {
        let errors = try #require(parse("- {kind: download-memory, source: gs://bkt/x, max_rate: \(value)}\n").errors)
        #expect(errors.count == 1)
        let error = try #require(errors.first)
        #expect(error.line == 1 && error.column == 57, "\(error)")
        #expect(error.message.contains("'max_rate'") && error.message.contains(fragment), "\(error.message)")
    }

    @Test func nullRateIsReportedAtTheKey() throws {
        let errors = try #require(parse("defaults:\n  max_rate:\njobs:\n  - {kind: fetch-url, source: gs://bkt/x}\n").errors)
        #expect(errors.map(\.line) == [2] && errors.map(\.column) == [3])
    }
}
