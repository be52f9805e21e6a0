import Checksums
import Foundation
import JobModel
import StorePort
import Testing
@testable import Retention

/// The archive file on its own: what is written reads back byte for byte, and gzip round-trips.
@Suite("archive file") struct ArchiveFileTests {
    static func directory() throws -> String {
        let path = NSTemporaryDirectory() + "jobctl-archive-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func row(_ seq: Int64, _ job: String, _ version: Int, _ type: EventType) -> LogRow {
        LogRow(seq: seq, jobID: job, version: version, type: type.rawValue, atMs: 1_000 + seq, actor: "cli:test",
               leaseToken: type == .claimed ? 7 : nil, data: "{\"v\":1,\"x\":\"\\u00e9 \\\\ \\n\"}")
    }

    @Test("rows and blobs read back exactly as written; the header counts them")
    func roundTrip() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let rows = [Self.row(3, "A", 1, .submitted), Self.row(4, "B", 1, .submitted), Self.row(9, "A", 2, .claimed)]
        let payload = Data((0..<300_000).map { UInt8($0 % 251) })
        let selection = ArchiveSelection(beforeMs: 5_000, jobs: [ArchivedJob(id: "A", version: 2, state: .failed, finishedAtMs: 10),
                                                                 ArchivedJob(id: "B", version: 1, state: .cancelled, finishedAtMs: 11)],
                                         rows: rows, blobs: [ArchivedBlob(sha256: Digest.sha256Hex(payload), data: payload)])
        let path = directory + "/a.ndjson.gz"
        let written = try ArchiveWriter.write(selection, to: path, now: 6_000)
        var read: [LogRow] = []
        var blobs: [ArchivedBlob] = []
        let check = try ArchiveReader.read(path, event: { read.append($0) }, blob: { blobs.append($0) })
        #expect(read == rows)
        #expect(blobs == selection.blobs)
        #expect(check.fileSHA256 == written.sha256 && check.jobs == 2 && check.events == 3 && check.blobs == 1)
        #expect(check.header.firstSeq == 3 && check.header.lastSeq == 9 && check.header.beforeMs == 5_000)
        #expect(written.size < Int64(payload.base64EncodedString().count), "the file is compressed")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["a.ndjson.gz"], "no temporary file is left")
    }

    /// A header line as the writer writes it (keys sorted), promising `events` events and `blobs` blobs.
    static func headerLine(jobs: Int = 1, events: Int = 1, blobs: Int = 0) -> Data {
        Data((#"{"before_ms":1,"blobs":\#(blobs),"created_at_ms":1,"events":\#(events),"first_seq":1,"format":"jobctl-archive","#
              + #""jobs":\#(jobs),"last_seq":1,"record":"header","version":1}"#).utf8)
    }

    /// `lines` as an archive file: each with its newline, then a trailer that counts and hashes them.
    static func archive(_ lines: [Data], at path: String) throws {
        var content = Data()
        for line in lines { content += line + Data([0x0A]) }
        let trailer = #"{"lines":\#(lines.count),"record":"trailer","sha256":"\#(Digest.sha256Hex(content))"}"#
        let compressor = try GzipCompressor()
        var file = try compressor.compress(content)
        file += try compressor.compress(Data((trailer + "\n").utf8), finish: true)
        try file.write(to: URL(fileURLWithPath: path))
    }

    /// `first` then `count` bytes of `filler` and no newline, gzip-compressed to `path` after a header.
    static func writeEndlessLine(_ first: String, filler: UInt8, count: Int, header: Bool = true, at path: String) throws {
        let compressor = try GzipCompressor()
        var file = try compressor.compress((header ? headerLine(blobs: 1) + Data([0x0A]) : Data()) + Data(first.utf8))
        let slice = Data(repeating: filler, count: 1 << 20)
        for _ in 0..<(count >> 20) { file += try compressor.compress(slice) }
        file += try compressor.compress(Data(), finish: true)
        try file.write(to: URL(fileURLWithPath: path))
    }

    /// The reader refuses an event line past 64 MiB; the writer wrote one anyway and only the read-back
    /// of the finished file refused it, as "damaged or not a jobctl archive".
    @Test("an event line too long for the reader is refused when written, naming the job")
    func eventTooLongRefusedWhenWritten() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let data = "{\"v\":\"" + String(repeating: "x", count: 64 << 20) + "\"}"
        let row = LogRow(seq: 1, jobID: "A", version: 1, type: EventType.submitted.rawValue, atMs: 1, actor: "cli:test",
                         leaseToken: nil, data: data)
        let selection = ArchiveSelection(beforeMs: 5_000, jobs: [ArchivedJob(id: "A", version: 1, state: .cancelled, finishedAtMs: 10)],
                                         rows: [row], blobs: [])
        let path = directory + "/long.ndjson.gz"
        do {
            _ = try ArchiveWriter.write(selection, to: path, now: 6_000)
            Issue.record("an event line the reader refuses was written")
        } catch {
            #expect(error.description.contains("job A's event 1 (seq 1) takes"), "\(error)")
            #expect(error.description.contains("more than the 67108864 an archive's event line may hold"), "\(error)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty, "nothing is left behind")
    }

    /// A damaged line was named by the reader's Swift type ("line 2 is not a valid ArchiveEventLine
    /// record (not JSON)"), and a line of valid JSON with a number no Int64 holds was "not JSON".
    @Test("a damaged line is named by its line number and its kind of record, not by a Swift type")
    func damagedLineNamed() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cases: [(Data, String)] = [
            (Data(#"{"actor":"a","seq":1,"#.utf8) + Data([0xFF]) + Data("}".utf8),
             "line 2 is not a valid event line (not JSON in UTF-8, or a number out of range)"),
            (Data(#"{"actor":"a","at_ms":1,"data":"{}","job_id":"A","record":"event","seq":1e300,"type":"submitted","version":1}"#.utf8),
             "line 2 is not a valid event line (not JSON in UTF-8, or a number out of range)"),
            (Data(#"{"actor":"a","record":"event","seq":"1"}"#.utf8), "line 2 is not a valid event line (wrong type at 'seq')"),
            (Data(#"{"actor":"a","at_ms":1,"data":"{}","job_id":"A","record":"blob","seq":1,"type":"submitted","version":1}"#.utf8),
             "line 2 is not a valid event line (it begins as one, but its record is 'blob')"),
            (Self.headerLine(), "line 2: a 'header' record is out of place"),
            (Data(#"{"record":"event","seq":1}"#.utf8), "line 2 does not begin as any record of a jobctl archive does"),
        ]
        for (index, (line, message)) in cases.enumerated() {
            let path = directory + "/damaged-\(index).ndjson.gz"
            let compressor = try GzipCompressor()
            try (try compressor.compress(Self.headerLine() + Data("\n".utf8) + line + Data("\n".utf8), finish: true))
                .write(to: URL(fileURLWithPath: path))
            do {
                _ = try ArchiveReader.read(path)
                Issue.record("case \(index) was read")
            } catch {
                #expect(error.description.contains(message) && !error.description.contains("Archive"), "\(error)")
            }
        }
    }

    /// A crafted file of one line that never ends — hundreds of megabytes of one byte in under a
    /// megabyte of gzip — was held until it passed the one limit every line had, a 512 MiB blob's
    /// base64 (683 MiB): ~39 s and ~750 MB before `archive verify` refused it. A line's kind is known
    /// from its first bytes now: one that names no kind is refused there, a header, event or trailer
    /// line past its own kind's limit (64 KiB, 64 MiB, 64 KiB) at that limit, and a blob line whose
    /// base64 breaks at the first bad piece. Each file here is shorter than the old limit, so the old
    /// reader read it to its end ("the last line has no newline").
    @Test("a line that never ends (a gzip bomb) is refused at its kind's limit, or at its first bytes",
          arguments: [
            ("", UInt8(0), 96 << 20, false, "line 1 does not begin as any record of a jobctl archive does"),
            (#"{"before_ms":"#, UInt8(0x31), 2 << 20, false, "line 1 runs past 65536 bytes without ending, more than any header can hold"),
            (#"{"actor":""#, UInt8(0x41), 96 << 20, true, "line 2 runs past 67108864 bytes without ending, more than any event line can hold"),
            (#"{"lines":"#, UInt8(0x31), 2 << 20, true, "line 2 runs past 65536 bytes without ending, more than any trailer can hold"),
            (#"{"events":"#, UInt8(0x41), 96 << 20, true, "line 2 does not begin as any record of a jobctl archive does"),
            (#"{"base64":"!"#, UInt8(0x41), 96 << 20, true, "line 2: the blob's base64 is not valid"),
          ])
    func endlessLine(first: String, filler: UInt8, count: Int, header: Bool, message: String) throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/bomb.ndjson.gz"
        try Self.writeEndlessLine(first, filler: filler, count: count, header: header, at: path)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? .max < 1 << 20)
        do {
            _ = try ArchiveReader.read(path)
            Issue.record("the bomb was read")
        } catch {
            #expect(error.description.contains(message), "\(error)")
        }
    }

    /// Blobs of several MiB, each length modulo 3 (so each padding), read back exactly: streamed through
    /// the base64 decoder piece by piece, the pieces cut wherever zlib's output ends.
    @Test("an archive with blobs of several MiB verifies and reads back byte for byte")
    func largeBlobsReadBack() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var generator = SystemRandomNumberGenerator()
        let blobs = (0..<3).map { extra in
            let bytes = Data((0..<((6 << 20) + extra)).map { _ in UInt8.random(in: 0...255, using: &generator) })
            return ArchivedBlob(sha256: Digest.sha256Hex(bytes), data: bytes)
        }
        let rows = [Self.row(1, "A", 1, .submitted)]
        let selection = ArchiveSelection(beforeMs: 5_000, jobs: [ArchivedJob(id: "A", version: 1, state: .cancelled, finishedAtMs: 10)],
                                         rows: rows, blobs: blobs)
        let path = directory + "/large.ndjson.gz"
        let written = try ArchiveWriter.write(selection, to: path, now: 6_000)
        var read: [ArchivedBlob] = []
        let check = try ArchiveReader.read(path, blob: { read.append($0) })
        #expect(read == blobs)
        #expect(check.blobs == 3 && check.fileSHA256 == written.sha256)
        #expect(try ArchiveReader.read(path).blobs == 3, "verified without keeping the bytes")
    }

    /// A blob line whose bytes are not what it says is refused, however its base64 is cut into pieces.
    @Test("a blob line with a wrong hash, a wrong size, bad base64 or padding inside is refused")
    func damagedBlobRefused() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 7) })
        let base64 = bytes.base64EncodedString()
        let sha = Digest.sha256Hex(bytes)
        func blobLine(_ base64: String, sha256: String = sha, size: Int = bytes.count) -> Data {
            Data(#"{"base64":"\#(base64)","record":"blob","sha256":"\#(sha256)","size":\#(size)}"#.utf8)
        }
        var middle = Array(base64.utf8)
        middle[middle.count / 2] = UInt8(ascii: "!")
        var padded = Array(base64.utf8)
        padded[padded.count / 2 / 4 * 4 + 3] = UInt8(ascii: "=")
        let cases: [(Data, String)] = [
            (blobLine(base64, sha256: String(repeating: "0", count: 64)), "does not match its bytes (\(bytes.count) bytes, sha256 \(sha))"),
            (blobLine(base64, size: bytes.count + 1), "does not match its bytes"),
            (blobLine(String(decoding: middle, as: UTF8.self)), "line 2: the blob's base64 is not valid"),
            (blobLine(String(decoding: padded, as: UTF8.self)), "line 2: the blob's base64 is not valid"),
            (blobLine(base64 + "A"), "line 2: the blob's base64 is not valid"),
            (Data(#"{"base64":"\#(base64)","record":"event","sha256":"\#(sha)","size":\#(bytes.count)}"#.utf8),
             "line 2 is not a valid blob line (it begins as one, but its record is 'event')"),
        ]
        for (index, (line, message)) in cases.enumerated() {
            let path = directory + "/blob-\(index).ndjson.gz"
            try Self.archive([Self.headerLine(jobs: 0, events: 0, blobs: 1), line], at: path)
            do {
                _ = try ArchiveReader.read(path)
                Issue.record("case \(index) was read")
            } catch {
                #expect(error.description.contains(message), "case \(index): \(error)")
            }
        }
        // The intact line in the same file verifies, and a blob the header does not promise is refused.
        let intact = directory + "/intact.ndjson.gz"
        try Self.archive([Self.headerLine(jobs: 0, events: 0, blobs: 1), blobLine(base64)], at: intact)
        #expect(try ArchiveReader.read(intact).blobs == 1)
        let unpromised = directory + "/unpromised.ndjson.gz"
        try Self.archive([Self.headerLine(jobs: 0, events: 0, blobs: 0), blobLine(base64)], at: unpromised)
        do {
            _ = try ArchiveReader.read(unpromised)
            Issue.record("a blob the header does not promise was read")
        } catch {
            #expect(error.description.contains("the header promises 0 blobs but"), "\(error)")
        }
    }

    @Test("gzip round-trips empty, small and large inputs fed in pieces")
    func gzipRoundTrip() throws {
        for size in [0, 1, 70_000, 1_000_000] {
            let input = Data((0..<size).map { UInt8(($0 * 7) % 256) })
            let compressor = try GzipCompressor()
            var compressed = try compressor.compress(input.prefix(size / 2))
            compressed += try compressor.compress(input.suffix(from: size / 2), finish: true)
            let decompressor = try GzipDecompressor()
            var output = Data()
            var offset = 0
            while offset < compressed.count {
                let end = min(offset + 4_096, compressed.count)
                output += try decompressor.decompress(compressed.subdata(in: offset..<end))
                offset = end
            }
            #expect(output == input && decompressor.isFinished, "size \(size)")
        }
        #expect(throws: RetentionError.self) { _ = try GzipDecompressor().decompress(Data("not gzip".utf8)) }
    }
}

/// The archive reader's line splitting: whole lines out, in order, however the bytes are cut; each byte
/// searched once (a long line arriving in slices was searched again from its start at every slice: a
/// 100 MiB line took 14 s); and a blob line streamed, not held (a 680 MB blob line was held as the line,
/// a copy, a String and the decoded bytes: ~2.6 GB).
@Suite struct LineSplitterTests {
    /// An archive's uncompressed bytes: a few events and a blob of `blobBytes`.
    static func content(blobBytes: Int) throws -> (Data, [LogRow], ArchivedBlob) {
        let directory = try ArchiveFileTests.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let rows = [ArchiveFileTests.row(3, "A", 1, .submitted), ArchiveFileTests.row(4, "B", 1, .submitted),
                    ArchiveFileTests.row(9, "A", 2, .claimed)]
        let bytes = Data((0..<blobBytes).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 9) })
        let blob = ArchivedBlob(sha256: Digest.sha256Hex(bytes), data: bytes)
        let selection = ArchiveSelection(beforeMs: 5_000, jobs: [ArchivedJob(id: "A", version: 2, state: .failed, finishedAtMs: 10),
                                                                 ArchivedJob(id: "B", version: 1, state: .cancelled, finishedAtMs: 11)],
                                         rows: rows, blobs: [blob])
        let path = directory + "/a.ndjson.gz"
        _ = try ArchiveWriter.write(selection, to: path, now: 6_000)
        let decompressor = try GzipDecompressor()
        return (try decompressor.decompress(try Data(contentsOf: URL(fileURLWithPath: path))), rows, blob)
    }

    @Test("lines come out whole and in order whatever the slices; a blob line is never held",
          arguments: [(3_000, 1), (3_000, 2), (3_000, 3), (3_000, 7), (2 << 20, 16 * 1024), (2 << 20, 64 * 1024 + 1), (2 << 20, Int.max)])
    func wholeLines(blobBytes: Int, size: Int) throws {
        let (content, rows, blob) = try Self.content(blobBytes: blobBytes)
        var splitter = LineSplitter()
        var checker = LineChecker(keepsBlobBytes: true)
        var events: [LogRow] = []
        var blobs: [ArchivedBlob] = []
        var offset = 0
        while offset < content.count {
            let end = content.count - offset > size ? offset + size : content.count
            try splitter.take(content[offset..<end], into: &checker, event: { events.append($0) }, blob: { blobs.append($0) })
            offset = end
        }
        #expect(events == rows && blobs == [blob])
        #expect(splitter.openLineBytes == 0)
        #expect(splitter.searchedBytes == content.count, "each byte searched once")
        #expect(splitter.mostHeldBytes < 4 << 10, "the blob line was not held: \(splitter.mostHeldBytes) bytes held")
        #expect(try checker.finish(fileSHA256: "").blobs == 1)
    }
}
