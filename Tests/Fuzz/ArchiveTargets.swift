import Foundation
@testable import jobctl
@testable import JobLifecycle
@testable import JobModel
@testable import Retention
@testable import Checksums
@testable import StorePort

// MARK: - archive: `jobctl archive verify FILE`, `jobctl audit --from FILE`

/// `ArchiveReader.read` of an archive file (gzip, then a header line, event lines, blob lines and a
/// trailer), as `audit --from` reads it (`Commands.archivedJobs`: each event decoded and folded by
/// replay), then the audit rows of the jobs rebuilt: the hand-written writers promise Foundation's bytes.
/// The input is gzip-compressed first, so the lines are what is fuzzed, unless it already starts with
/// gzip's magic bytes (1F 8B), when it is the file as it is. Lines without a trailer get the trailer
/// that fits them (line count and content SHA-256, as `jobctl archive` writes it; anyone can write
/// one), so the events of a changed file reach replay's fold and the audit rows.
let archiveTarget = FuzzTarget(
    name: "archive",
    summary: "ArchiveReader.read + Commands.archivedJobs (replay fold) on the input (gzipped unless it is gzip), audit rows",
    run: { input in
        var file = input.data
        if !input.bytes.starts(with: [0x1F, 0x8B]) {
            file = withTrailer(input.bytes)
            guard let compressor = try? GzipCompressor(level: 1), let compressed = try? compressor.compress(file, finish: true) else {
                fatalError("cannot gzip the input")
            }
            file = compressed
        }
        let path = Harness.scratchFile("archive.jsonl.gz", file)
        _ = try? ArchiveReader.read(path, blob: { _ in })
        guard let jobs = try? Commands.archivedJobs(path) else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        for job in jobs {
            let row = AuditRow(job, display: .redacting)
            let viaEncoder = (try? encoder.encode(row)).map { TerminalText.escapingJSONControls($0) }
            var bytes: [UInt8] = []
            if AuditRowWriter.appendJSON(job, display: .redacting, indent: 0, to: &bytes) {
                expect(viaEncoder.map { [UInt8]($0) } == bytes,
                       "audit --json row of job \(job.id): hand-written \(String(decoding: bytes, as: UTF8.self)), encoder \(viaEncoder.map { String(decoding: $0, as: UTF8.self) } ?? "nothing")")
            }
            var csv: [UInt8] = []
            if AuditRowWriter.appendCSV(job, display: .redacting, to: &csv) {
                expect(String(decoding: csv, as: UTF8.self) == row.csvLine,
                       "audit --csv row of job \(job.id): hand-written \(String(decoding: csv, as: UTF8.self)), AuditRow \(row.csvLine)")
            }
        }
    })

/// `bytes` (archive lines) ending with the trailer `jobctl archive` would write after them, unless a
/// line already looks like a trailer.
func withTrailer(_ bytes: [UInt8]) -> Data {
    var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
    if lines.last?.isEmpty == true { lines.removeLast() }
    let trailerStart = Array(#"{"lines":"#.utf8)
    if lines.contains(where: { $0.starts(with: trailerStart) }) { return Data(bytes) }
    var content = Data()
    for line in lines { content.append(contentsOf: line); content.append(0x0A) }
    let digest = Digest(.sha256)
    digest.update(content)
    content.append(contentsOf: #"{"lines":\#(lines.count),"record":"trailer","sha256":"\#(hex(digest.finalize()))"}"#.utf8)
    content.append(0x0A)
    return content
}
