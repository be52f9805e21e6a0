import Checksums
import Foundation
import JobModel
import StorePort
#if canImport(Glibc)
import Glibc
#endif

/// What `ArchiveReader.read` found in an intact archive.
public struct ArchiveCheck: Sendable, Equatable {
    public var header: ArchiveHeader
    /// SHA-256 of the file's bytes (compressed), as `sha256sum` prints it: what the log's `archived`
    /// event records.
    public var fileSHA256: String
    /// What the file holds, counted while reading (equal to the header's counts, or `read` throws).
    public var jobs: Int
    public var events: Int
    public var blobs: Int
}

/// Reads an archive file and checks everything about it while streaming through it once: the gzip
/// stream (zlib checks its CRC-32 and length), the header, every line's shape, events in seq order with
/// each job's versions contiguous from 1, every blob's SHA-256 and size, the counts against the header,
/// the trailer's line count and content SHA-256, and that nothing follows the trailer.
public enum ArchiveReader {
    /// Reads `path`, handing each event row and blob to the closures as it goes; throws at the first problem.
    public static func read(_ path: String, event: (LogRow) throws(RetentionError) -> Void = { _ in },
                            blob: (ArchivedBlob) throws(RetentionError) -> Void = { _ in }) throws(RetentionError) -> ArchiveCheck {
        let descriptor = try openArchiveFile(path)
        defer { close(descriptor) }
        let decompressor = try GzipDecompressor()
        let fileDigest = Digest(.sha256)
        var parser = LineChecker()
        var lines = LineSplitter()
        while true {
            let chunk = try readChunk(descriptor, path: path)
            if chunk.isEmpty { break }
            fileDigest.update(chunk)
            // Fed to zlib a slice at a time, so one call yields at most ~1,000 times the slice (gzip's
            // best ratio): a crafted file cannot make a single call decompress gigabytes.
            var offset = chunk.startIndex
            while offset < chunk.endIndex {
                let end = min(offset + inputSliceBytes, chunk.endIndex)
                lines.append(try decompressor.decompress(chunk[offset..<end]))
                offset = end
                while let line = lines.next() {
                    try parser.take(line, event: event, blob: blob)
                }
                // A line still open past what any archive line can be: damaged, or not an archive (a
                // gzip "bomb" of one endless line would otherwise be held whole).
                let limit = parser.maximumNextLineBytes
                if lines.openLineBytes > limit {
                    throw RetentionError.invalidArchive("line \(parser.lineNumber + 1) runs past \(limit) bytes without ending, more than "
                                                        + "any archive line can hold; the file is damaged or not a jobctl archive")
                }
            }
        }
        guard decompressor.isFinished else {
            throw RetentionError.invalidArchive("the gzip stream ends early (the file is truncated)")
        }
        guard lines.openLineBytes == 0 else { throw RetentionError.invalidArchive("the last line has no newline (the file is truncated)") }
        return try parser.finish(fileSHA256: hex(fileDigest.finalize()))
    }
}

extension ArchiveReader {
    /// Opens `path` for reading if it is a regular file (after links). Opened without waiting, then
    /// checked: a FIFO there held `archive verify`, `audit --from` and `archive --to` (which reads an
    /// existing file before replacing it) in `open` until a writer came, for ever; a directory failed
    /// only at its first read, with Foundation's error text.
    private static func openArchiveFile(_ path: String) throws(RetentionError) -> Int32 {
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard descriptor >= 0 else {
            throw RetentionError.io("cannot open '\(path)': \(String(cString: strerror(errno))); check the path")
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw RetentionError.io("cannot open '\(path)': \(String(cString: strerror(code))); check the path")
        }
        let kind: String? = switch info.st_mode & S_IFMT {
        case S_IFREG: nil
        case S_IFDIR: "a directory"
        case S_IFIFO: "a FIFO"
        case S_IFSOCK: "a socket"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        default: "not a regular file"
        }
        if let kind {
            close(descriptor)
            throw RetentionError.io("'\(path)' is \(kind), not an archive file; give the path of a file `jobctl archive` wrote")
        }
        // Opened O_RDONLY | O_NONBLOCK: clearing every status flag clears O_NONBLOCK alone.
        _ = fcntl(descriptor, F_SETFL, 0)
        return descriptor
    }

    /// The next bytes of the file (empty at its end).
    private static func readChunk(_ descriptor: Int32, path: String) throws(RetentionError) -> Data {
        var chunk = Data(count: readChunkBytes)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw RetentionError.io("cannot read '\(path)': \(String(cString: strerror(errno)))") }
            chunk.count = count
            return chunk
        }
    }

    /// The file's bytes read per call.
    static let readChunkBytes = 256 * 1024
    /// The compressed bytes handed to zlib per call.
    static let inputSliceBytes = 16 * 1024
    /// The longest header line accepted: a header is a few hundred bytes.
    static let maximumHeaderLineBytes = 1 << 20
    /// The longest line accepted: a blob's, the largest download-memory result (512 MiB) in base64,
    /// with room for its JSON.
    static let maximumLineBytes = 4 * (((512 << 20) + 2) / 3) + (1 << 20)
}

/// The checks, line by line.
private struct LineChecker {
    private enum Section: Int { case header, events, blobs, done }
    private var section = Section.header
    private var number = 0

    /// Lines taken so far.
    var lineNumber: Int { number }

    /// How long the next line may grow: a header's is small, any other up to a blob's.
    var maximumNextLineBytes: Int {
        section == .header ? ArchiveReader.maximumHeaderLineBytes : ArchiveReader.maximumLineBytes
    }
    private var header: ArchiveHeader?
    private let contentDigest = Digest(.sha256)
    private var lastSeq: Int64 = 0
    private var versions: [String: Int] = [:]
    private var events = 0
    private var blobs = 0

    mutating func take(_ line: Data, event: (LogRow) throws(RetentionError) -> Void,
                       blob: (ArchivedBlob) throws(RetentionError) -> Void) throws(RetentionError) {
        number += 1
        guard section != .done else { throw RetentionError.invalidArchive("line \(number) follows the trailer") }
        let kind = try ArchiveJSON.decode(ArchiveRecordKind.self, line, number: number, what: "archive line").record
        if kind != "trailer" {
            contentDigest.update(line)
            contentDigest.update(Data([0x0A]))
        }
        switch (section, kind) {
        case (.header, "header"):
            let found = try ArchiveJSON.decode(ArchiveHeader.self, line, number: number, what: "header")
            guard found.format == ArchiveHeader.formatName else {
                throw RetentionError.invalidArchive("line 1 names format '\(found.format)', not '\(ArchiveHeader.formatName)'")
            }
            guard found.version == ArchiveHeader.currentVersion else {
                throw RetentionError.invalidArchive("the file has format version \(found.version) and this jobctl reads only "
                    + "version \(ArchiveHeader.currentVersion); use the jobctl that wrote it, or a newer one")
            }
            header = found
            section = .events
        case (.header, _):
            throw RetentionError.invalidArchive("line 1 is a '\(kind)' record, not the header")
        case (.events, "event"):
            let found = try ArchiveJSON.decode(ArchiveEventLine.self, line, number: number, what: "event line")
            guard found.seq > lastSeq else {
                throw RetentionError.invalidArchive("line \(number): event seq \(found.seq) does not follow seq \(lastSeq)")
            }
            let expected = (versions[found.jobId] ?? 0) + 1
            guard found.version == expected else {
                throw RetentionError.invalidArchive("line \(number): job \(found.jobId) goes to version \(found.version) where "
                    + "\(expected) was expected (each job's events must run from version 1 without a gap)")
            }
            guard EventType(rawValue: found.type) != nil else {
                throw RetentionError.invalidArchive("line \(number): unknown event type '\(found.type)'")
            }
            versions[found.jobId] = found.version
            lastSeq = found.seq
            events += 1
            try event(found.row)
        case (.events, "blob"), (.blobs, "blob"):
            section = .blobs
            let found = try ArchiveJSON.decode(ArchiveBlobLine.self, line, number: number, what: "blob line")
            guard let bytes = Data(base64Encoded: found.base64) else {
                throw RetentionError.invalidArchive("line \(number): blob \(found.sha256) is not valid base64")
            }
            guard bytes.count == found.size, Digest.sha256Hex(bytes) == found.sha256 else {
                throw RetentionError.invalidArchive("line \(number): blob \(found.sha256) does not match its bytes "
                    + "(\(bytes.count) bytes, sha256 \(Digest.sha256Hex(bytes)))")
            }
            blobs += 1
            try blob(ArchivedBlob(sha256: found.sha256, data: bytes))
        case (.events, "trailer"), (.blobs, "trailer"):
            let found = try ArchiveJSON.decode(ArchiveTrailer.self, line, number: number, what: "trailer")
            let content = hex(contentDigest.finalize())
            guard found.lines == number - 1 else {
                throw RetentionError.invalidArchive("the trailer counts \(found.lines) lines but \(number - 1) precede it")
            }
            guard found.sha256 == content else {
                throw RetentionError.invalidArchive("the content's sha256 is \(content) but the trailer records \(found.sha256) "
                    + "(the file was changed after it was written)")
            }
            section = .done
        default:
            throw RetentionError.invalidArchive("line \(number): a '\(kind)' record is out of place (expected header, "
                + "events, blobs, then the trailer)")
        }
    }

    func finish(fileSHA256: String) throws(RetentionError) -> ArchiveCheck {
        guard let header else { throw RetentionError.invalidArchive("the file is empty") }
        guard section == .done else { throw RetentionError.invalidArchive("there is no trailer (the file is truncated)") }
        let jobs = versions.count
        let counted = [("jobs", header.jobs, jobs), ("events", header.events, events), ("blobs", header.blobs, blobs)]
        for (what, promised, found) in counted where promised != found {
            throw RetentionError.invalidArchive("the header promises \(promised) \(what) but the file holds \(found)")
        }
        return ArchiveCheck(header: header, fileSHA256: fileSHA256, jobs: jobs, events: events, blobs: blobs)
    }
}

/// Splits a stream of bytes into lines (without their newline), as they arrive. The open line's bytes
/// are searched for a newline once: a line of hundreds of megabytes arriving in 16 KiB slices was
/// searched again from its start at every slice — quadratic (100 MiB took 14 s, 400 MiB minutes).
struct LineSplitter {
    private var buffer = Data()
    /// Where the next line starts in `buffer`.
    private var start = 0
    /// Where the search for the next newline goes on (before it: no newline).
    private var searchFrom = 0
    /// The bytes searched for a newline so far, all lines together (tests: about the bytes fed, once).
    private(set) var searchedBytes = 0

    /// Adds the next bytes of the stream.
    mutating func append(_ bytes: Data) {
        // What earlier lines used is dropped before the buffer grows (once a line is taken, not per byte).
        if start > 0 {
            buffer.removeSubrange(buffer.startIndex..<buffer.startIndex + start)
            searchFrom -= start
            start = 0
        }
        buffer.append(bytes)
    }

    /// The next complete line, or nil until its newline arrives.
    mutating func next() -> Data? {
        let from = buffer.startIndex + searchFrom
        guard let newline = buffer[from...].firstIndex(of: 0x0A) else {
            searchedBytes += buffer.endIndex - from
            searchFrom = buffer.count
            return nil
        }
        searchedBytes += newline + 1 - from
        let line = Data(buffer[(buffer.startIndex + start)..<newline])
        start = newline + 1 - buffer.startIndex
        searchFrom = start
        return line
    }

    /// The bytes of the line not yet ended.
    var openLineBytes: Int { buffer.count - start }
}
