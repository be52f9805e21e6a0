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

    /// A damaged line was named by the reader's Swift type ("line 2 is not a valid ArchiveEventLine
    /// record (not JSON)"), and a line of valid JSON with a number no Int64 holds was "not JSON".
    @Test("a damaged line is named by its line number and its kind of record, not by a Swift type")
    func damagedLineNamed() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let header = #"{"record":"header","format":"jobctl-archive","version":1,"before_ms":1,"created_at_ms":1,"jobs":1,"#
            + #""events":1,"blobs":0,"first_seq":1,"last_seq":1}"#
        let cases: [(Data, String)] = [
            (Data(#"{"record":"event","seq":1,"#.utf8) + Data([0xFF]) + Data("}".utf8),
             "line 2 is not a valid archive line (not JSON in UTF-8, or a number out of range)"),
            (Data(#"{"record":"event","seq":1e300,"job_id":"A","version":1,"type":"submitted","at_ms":1,"actor":"a","data":"{}"}"#.utf8),
             "line 2 is not a valid event line (not JSON in UTF-8, or a number out of range)"),
            (Data(#"{"record":"event","seq":"1"}"#.utf8), "line 2 is not a valid event line (wrong type at 'seq')"),
            (Data(#"{"record":"header"}"#.utf8), "line 2: a 'header' record is out of place"),
        ]
        for (index, (line, message)) in cases.enumerated() {
            let path = directory + "/damaged-\(index).ndjson.gz"
            let compressor = try GzipCompressor()
            try (try compressor.compress(Data((header + "\n").utf8) + line + Data("\n".utf8), finish: true))
                .write(to: URL(fileURLWithPath: path))
            do {
                _ = try ArchiveReader.read(path)
                Issue.record("case \(index) was read")
            } catch {
                #expect(error.description.contains(message) && !error.description.contains("Archive"), "\(error)")
            }
        }
    }

    /// A crafted file whose first line never ends — 256 MiB of zeros in ~250 KB of gzip — is refused as
    /// soon as the line outgrows any header, not held whole (before: every byte of it kept in memory,
    /// ~900 MB resident for a 2 GB one before it was stopped); so is one past every line's limit later.
    @Test("a line that never ends (a gzip bomb) is refused early, not held")
    func endlessLine() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/bomb.ndjson.gz"
        let compressor = try GzipCompressor()
        var file = Data()
        let zeros = Data(count: 16 << 20)
        for _ in 0..<16 { file += try compressor.compress(zeros) }
        file += try compressor.compress(Data(), finish: true)
        try file.write(to: URL(fileURLWithPath: path))
        #expect(file.count < 1 << 20)
        do {
            _ = try ArchiveReader.read(path)
            Issue.record("the bomb was read")
        } catch {
            #expect(error.description.contains("line 1 runs past \(ArchiveReader.maximumHeaderLineBytes) bytes without ending"), "\(error)")
        }
        #expect(ArchiveReader.maximumLineBytes > 4 * ((512 << 20) / 3), "a blob of the largest download-memory result fits a line")
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

/// The archive reader's line splitting: whole lines out, in order, however the bytes are cut, and each
/// byte searched for a newline once — a long line arriving in slices was searched again from its start
/// at every slice (a 100 MiB line took 14 s, one just under the 683 MiB limit minutes and gigabytes).
@Suite struct LineSplitterTests {
    @Test("lines come out whole and in order whatever the slices")
    func wholeLines() {
        let text = Data("first\n\nthird line\nfourth".utf8)
        for size in [1, 2, 3, 7, text.count] {
            var splitter = LineSplitter()
            var lines: [String] = []
            var offset = 0
            while offset < text.count {
                splitter.append(text[offset..<min(offset + size, text.count)])
                offset += size
                while let line = splitter.next() { lines.append(String(decoding: line, as: UTF8.self)) }
            }
            #expect(lines == ["first", "", "third line"], "slices of \(size)")
            #expect(splitter.openLineBytes == "fourth".utf8.count)
        }
    }

    @Test("a 64 MiB line in 16 KiB slices is searched once")
    func longLineSearchedOnce() {
        var splitter = LineSplitter()
        let slice = Data(repeating: 0x41, count: 16 * 1024)
        let slices = 4 * 1024
        for _ in 0..<slices {
            splitter.append(slice)
            #expect(splitter.next() == nil)
        }
        splitter.append(Data("\nnext".utf8))
        let line = splitter.next()
        #expect(line?.count == slices * slice.count)
        #expect(splitter.searchedBytes == slices * slice.count + 1, "\(splitter.searchedBytes)")
        #expect(splitter.openLineBytes == 4)
    }
}
