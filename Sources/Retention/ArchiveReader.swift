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
///
/// The file is hostile input until it is checked: each line's kind is known from its first bytes, a
/// line that names no kind is refused there, a header, event or trailer line is held only up to what
/// its kind can be, and a blob's base64 is decoded and hashed as it streams by, not held.
public enum ArchiveReader {
    /// Reads `path`, handing each event row to `event` as it goes; throws at the first problem. With
    /// `blob`, each blob's bytes are gathered and handed to it; without, they are only checked, so no
    /// blob is held in memory.
    public static func read(_ path: String, event: (LogRow) throws(RetentionError) -> Void = { _ in },
                            blob: ((ArchivedBlob) throws(RetentionError) -> Void)? = nil) throws(RetentionError) -> ArchiveCheck {
        let descriptor = try openArchiveFile(path)
        defer { close(descriptor) }
        let decompressor = try GzipDecompressor()
        let fileDigest = Digest(.sha256)
        var parser = LineChecker(keepsBlobBytes: blob != nil)
        var lines = LineSplitter()
        let blob = blob ?? { _ in }
        var first = true
        while true {
            let chunk = try readChunk(descriptor, path: path)
            if chunk.isEmpty { break }
            // Not gzip at all (a plain NDJSON file, a decompressed copy): said so, not "damaged gzip data".
            if first, chunk.count >= 2, chunk[chunk.startIndex] != 0x1F || chunk[chunk.startIndex + 1] != 0x8B {
                throw RetentionError.invalidArchive("the file is not gzip-compressed (it does not begin with gzip's bytes 1f 8b); "
                    + "an archive is gzip-compressed NDJSON — was it decompressed, or is it another file?")
            }
            first = false
            fileDigest.update(chunk)
            // Fed to zlib a slice at a time, so one call yields at most ~1,000 times the slice (gzip's
            // best ratio): a crafted file cannot make a single call decompress gigabytes.
            var offset = chunk.startIndex
            while offset < chunk.endIndex {
                let end = min(offset + inputSliceBytes, chunk.endIndex)
                try lines.take(try decompressor.decompress(chunk[offset..<end]), into: &parser, event: event, blob: blob)
                offset = end
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
        let kind = FileKind.notRegular(mode: info.st_mode)
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
}

/// The checks, line by line: `begin` as soon as a line's first bytes name its kind, then `take` with
/// the whole line, or for a blob line `blobBase64` with each piece of its base64 and `blobEnded` with
/// what follows it.
struct LineChecker {
    private enum Section: Int { case header, events, blobs, done }
    private var section = Section.header
    private var number = 0
    /// The kind of the line begun last.
    private var kind = ArchiveRecordKind.header
    private let keepsBlobBytes: Bool

    init(keepsBlobBytes: Bool) {
        self.keepsBlobBytes = keepsBlobBytes
    }

    /// Lines begun so far.
    var lineNumber: Int { number }
    private var header: ArchiveHeader?
    private let contentDigest = Digest(.sha256)
    private var order = ArchiveEventOrder()
    private var lastSeq: Int64 { order.lastSeq }
    private var firstSeq: Int64?
    private var versions: [String: Int] { order.versions }
    private var events = 0
    private var blobs = 0
    /// The blob line being read: its base64 decoded, hashed and counted as it comes.
    private var blobBytes = Base64Stream()
    private var blobDigest = Digest(.sha256)
    private var blobSize = 0
    private var blobKept = Data()

    /// A line of `kind` begins: refused at once where such a line cannot be (before the header, after
    /// the trailer, an event after a blob, more events or blobs than the header promises).
    mutating func begin(_ kind: ArchiveRecordKind) throws(RetentionError) {
        number += 1
        self.kind = kind
        guard section != .done else { throw RetentionError.invalidArchive("line \(number) follows the trailer") }
        switch (section, kind) {
        case (.header, .header), (.events, .event), (.events, .blob), (.blobs, .blob), (.events, .trailer), (.blobs, .trailer):
            break
        case (.header, _):
            throw RetentionError.invalidArchive("line 1 is a '\(kind.rawValue)' record, not the header")
        default:
            throw RetentionError.invalidArchive("line \(number): a '\(kind.rawValue)' record is out of place (expected header, "
                + "events, blobs, then the trailer)")
        }
        if let header, kind == .event || kind == .blob {
            let (promised, found, what) = kind == .event ? (header.events, events, "events") : (header.blobs, blobs, "blobs")
            guard found < promised else {
                throw RetentionError.invalidArchive("the header promises \(promised) \(what) but line \(number) is one more")
            }
        }
        if kind == .blob {
            section = .blobs
            contentDigest.update(Data(ArchiveRecordKind.blob.firstBytes))
            blobBytes = Base64Stream()
            blobDigest = Digest(.sha256)
            blobSize = 0
            blobKept = Data()
        }
    }

    /// The next characters of the blob line's base64: decoded, hashed and counted (kept only when the
    /// caller wants the bytes).
    mutating func blobBase64(_ characters: Data) throws(RetentionError) {
        contentDigest.update(characters)
        guard let bytes = blobBytes.append(characters) else { throw notBase64() }
        blobTook(bytes)
    }

    /// What follows the blob line's base64 (its closing quote excluded, up to the newline): the rest of
    /// its fields, checked as JSON, then the blob's size and SHA-256.
    mutating func blobEnded(tail: Data, blob: (ArchivedBlob) throws(RetentionError) -> Void) throws(RetentionError) {
        guard let bytes = blobBytes.finish() else { throw notBase64() }
        blobTook(bytes)
        contentDigest.update(Data([UInt8(ascii: "\"")]))
        contentDigest.update(tail)
        contentDigest.update(Data([0x0A]))
        // The fields after the base64, with an empty one before them so the line's shape is checked as
        // a whole line's would be.
        let found = try ArchiveJSON.decode(ArchiveBlobLine.self, Data(ArchiveRecordKind.blob.firstBytes) + Data([UInt8(ascii: "\"")]) + tail,
                                           number: number, what: "blob line")
        try checkRecord(found.record)
        let sha256 = hex(blobDigest.finalize())
        guard blobSize == found.size, sha256 == found.sha256 else {
            throw RetentionError.invalidArchive("line \(number): blob \(found.sha256) does not match its bytes "
                + "(\(blobSize) bytes, sha256 \(sha256))")
        }
        blobs += 1
        let kept = blobKept
        blobKept = Data()
        if keepsBlobBytes { try blob(ArchivedBlob(sha256: found.sha256, data: kept)) }
    }

    private mutating func blobTook(_ bytes: Data) {
        blobDigest.update(bytes)
        blobSize += bytes.count
        if keepsBlobBytes { blobKept.append(bytes) }
    }

    private func notBase64() -> RetentionError {
        .invalidArchive("line \(number): the blob's base64 is not valid (after \(blobSize) bytes of it decoded)")
    }

    /// A line's `record` must be the kind its first bytes named.
    private func checkRecord(_ record: String) throws(RetentionError) {
        guard record == kind.rawValue else {
            throw RetentionError.invalidArchive("line \(number) is not a valid \(kind.lineName) (it begins as one, but its "
                + "record is '\(record)')")
        }
    }

    /// The whole line begun last (a header, an event or the trailer), without its newline.
    mutating func take(_ line: Data, event: (LogRow) throws(RetentionError) -> Void) throws(RetentionError) {
        if kind != .trailer {
            contentDigest.update(line)
            contentDigest.update(Data([0x0A]))
        }
        switch kind {
        case .header:
            let found = try ArchiveJSON.decode(ArchiveHeader.self, line, number: number, what: kind.lineName)
            try checkRecord(found.record)
            guard found.format == ArchiveHeader.formatName else {
                throw RetentionError.invalidArchive("line 1 names format '\(found.format)', not '\(ArchiveHeader.formatName)'")
            }
            guard found.version == ArchiveHeader.currentVersion else {
                throw RetentionError.invalidArchive("the file has format version \(found.version) and this jobctl reads only "
                    + "version \(ArchiveHeader.currentVersion); use the jobctl that wrote it, or a newer one")
            }
            header = found
            section = .events
        case .event:
            let found = try ArchiveJSON.decode(ArchiveEventLine.self, line, number: number, what: kind.lineName)
            try checkRecord(found.record)
            if let problem = order.problem(seq: found.seq, jobID: found.jobId, version: found.version, type: found.type) {
                throw RetentionError.invalidArchive("line \(number): \(problem)")
            }
            if firstSeq == nil { firstSeq = found.seq }
            events += 1
            try event(found.row)
        case .trailer:
            let found = try ArchiveJSON.decode(ArchiveTrailer.self, line, number: number, what: kind.lineName)
            try checkRecord(found.record)
            let content = hex(contentDigest.finalize())
            guard found.lines == number - 1 else {
                throw RetentionError.invalidArchive("the trailer counts \(found.lines) lines but \(number - 1) precede it")
            }
            guard found.sha256 == content else {
                throw RetentionError.invalidArchive("the content's sha256 is \(content) but the trailer records \(found.sha256) "
                    + "(the file was changed after it was written)")
            }
            section = .done
        case .blob:
            // A blob line is streamed (`blobBase64`, `blobEnded`), never taken whole.
            throw RetentionError.invalidArchive("line \(number): a blob line was read whole; this is a bug in jobctl")
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
        // The range the header gives (and `verify` prints, and the log's record repeats) is the events'.
        if let firstSeq, header.firstSeq != firstSeq || header.lastSeq != lastSeq {
            throw RetentionError.invalidArchive("the header gives seq \(header.firstSeq)–\(header.lastSeq) but the file's events "
                + "run from seq \(firstSeq) to \(lastSeq)")
        }
        return ArchiveCheck(header: header, fileSHA256: fileSHA256, jobs: jobs, events: events, blobs: blobs)
    }
}

/// Splits the decompressed stream into lines as the bytes arrive and hands them to a `LineChecker`.
/// A line's first bytes name its kind (`ArchiveRecordKind`); bytes that name none are refused there.
/// A header, event or trailer line is held until its newline, and refused as soon as it passes its
/// kind's limit; a blob line's base64 goes to the checker piece by piece as it arrives, so only its
/// short tail is held. Each byte is searched (for a newline or a blob's closing quote) once: a line of
/// hundreds of megabytes arriving in 16 KiB slices was searched again from its start at every slice —
/// quadratic (100 MiB took 14 s, 400 MiB minutes).
struct LineSplitter {
    private enum Open {
        /// Its first bytes, until they name its kind.
        case opening
        /// A header, event or trailer line, held whole.
        case whole
        /// A blob line's base64, streamed.
        case base64
        /// What follows a blob line's base64, held.
        case blobTail
    }
    private var open = Open.opening
    private var kind = ArchiveRecordKind.header
    /// The open line's bytes held (see `Open`).
    private var held = Data()
    /// The bytes of the line not yet ended, a blob's streamed base64 included.
    private(set) var openLineBytes = 0
    /// The bytes searched for a newline or a quote so far, all lines together (tests: about the bytes fed, once).
    private(set) var searchedBytes = 0
    /// The most bytes held at once (tests: a blob line is not held).
    private(set) var mostHeldBytes = 0

    /// Takes the next bytes of the stream, handing every line completed in them to `checker`.
    mutating func take(_ bytes: Data, into checker: inout LineChecker, event: (LogRow) throws(RetentionError) -> Void,
                       blob: (ArchivedBlob) throws(RetentionError) -> Void) throws(RetentionError) {
        var position = bytes.startIndex
        while position < bytes.endIndex {
            if open == .base64 {
                let quote = firstIndex(of: UInt8(ascii: "\""), in: bytes, from: position)
                let end = quote ?? bytes.endIndex
                searchedBytes += end - position + (quote == nil ? 0 : 1)
                try grow(by: end - position + (quote == nil ? 0 : 1), checker)
                try checker.blobBase64(bytes[position..<end])
                position = end
                if quote != nil {
                    open = .blobTail
                    position += 1
                }
                continue
            }
            let newline = firstIndex(of: 0x0A, in: bytes, from: position)
            var end = newline ?? bytes.endIndex
            if open == .opening {
                // Only as many bytes as it takes to tell the kind: the rest of the line follows by its kind's rules.
                end = min(end, position + ArchiveRecordKind.longestFirstBytes - held.count)
            }
            searchedBytes += end - position
            try grow(by: end - position, checker)
            held.append(bytes[position..<end])
            mostHeldBytes = max(mostHeldBytes, held.count)
            position = end
            if open == .opening {
                switch ArchiveRecordKind.of(firstBytes: held) {
                case .kind(let found):
                    kind = found
                    try checker.begin(found)
                    if found == .blob {
                        // Bytes past the blob's first bytes are base64: back to them, to be streamed.
                        let extra = held.count - found.firstBytes.count
                        position -= extra
                        searchedBytes -= extra
                        openLineBytes -= extra
                        held = Data()
                        open = .base64
                        continue
                    }
                    open = .whole
                case .undecided where position != newline:
                    continue
                case .undecided, .none:
                    throw RetentionError.invalidArchive("line \(checker.lineNumber + 1) does not begin as any record of a jobctl "
                        + "archive does (a header with {\"before_ms\":, an event with {\"actor\":, a blob with {\"base64\":\", the "
                        + "trailer with {\"lines\":); the file is damaged or not a jobctl archive")
                }
            }
            guard position == newline else { continue }
            searchedBytes += 1
            position += 1
            let line = held
            held = Data()
            openLineBytes = 0
            let ended = open
            open = .opening
            if ended == .blobTail {
                try checker.blobEnded(tail: line, blob: blob)
            } else {
                try checker.take(line, event: event)
            }
        }
    }

    /// Counts `count` more bytes of the open line; refuses it, before they are held, once it passes its
    /// kind's limit (a blob line's tail: the tail's). Its first bytes are fewer than any limit.
    private mutating func grow(by count: Int, _ checker: LineChecker) throws(RetentionError) {
        openLineBytes += count
        switch open {
        case .opening:
            break
        case .whole, .base64:
            guard openLineBytes <= kind.maximumLineBytes else {
                throw RetentionError.invalidArchive("line \(checker.lineNumber) runs past \(kind.maximumLineBytes) bytes without "
                    + "ending, more than any \(kind.lineName) can hold; the file is damaged or not a jobctl archive")
            }
        case .blobTail:
            guard held.count + count <= ArchiveRecordKind.maximumBlobTailBytes else {
                throw RetentionError.invalidArchive("line \(checker.lineNumber) runs past \(ArchiveRecordKind.maximumBlobTailBytes) "
                    + "bytes after its blob's base64 without ending, more than a blob line's other fields can hold; the file "
                    + "is damaged or not a jobctl archive")
            }
        }
    }
}

/// The index of the first `byte` at or after `from` in `bytes`, found with `memchr` (a loop over a
/// line of hundreds of megabytes a byte at a time is slow, in a debug build above all).
private func firstIndex(of byte: UInt8, in bytes: Data, from: Int) -> Int? {
    bytes.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) -> Int? in
        let offset = from - bytes.startIndex
        guard let base = buffer.baseAddress, offset >= 0, offset < buffer.count,
              let found = memchr(base + offset, Int32(byte), buffer.count - offset) else { return nil }
        return bytes.startIndex + base.distance(to: UnsafeRawPointer(found))
    }
}

/// Base64 decoded as it arrives in pieces of any length. All but the last quantum (four characters)
/// seen so far is decoded at once with Foundation's decoder; only the last may end in padding, and
/// only the end says which one is last, so it waits for `finish`.
struct Base64Stream {
    private var pending = Data()

    /// Decodes what `characters` complete; nil when they are not base64 (or padding came before the end).
    mutating func append(_ characters: Data) -> Data? {
        pending.append(characters)
        let kept = pending.count % 4 == 0 ? min(4, pending.count) : pending.count % 4
        let ready = pending.count - kept
        guard ready > 0 else { return Data() }
        let quanta = pending.prefix(ready)
        guard firstIndex(of: UInt8(ascii: "="), in: quanta, from: quanta.startIndex) == nil, let decoded = Data(base64Encoded: quanta) else { return nil }
        pending = Data(pending.suffix(kept))
        return decoded
    }

    /// Decodes the last quantum; nil when it is not base64.
    mutating func finish() -> Data? {
        defer { pending = Data() }
        return Data(base64Encoded: pending)
    }
}

/// The order an archive's events must keep, as the reader checks it line by line and as
/// `ArchiveWriter.check` checks a selection before anything is written: seqs increasing, each job's
/// versions contiguous from 1, every type one jobctl knows.
struct ArchiveEventOrder {
    private(set) var lastSeq: Int64 = 0
    /// Each job's last version taken.
    private(set) var versions: [String: Int] = [:]

    /// Takes the next event; what is wrong with it (nothing taken then), or nil.
    mutating func problem(seq: Int64, jobID: String, version: Int, type: String) -> String? {
        guard seq > lastSeq else { return "event seq \(seq) does not follow seq \(lastSeq)" }
        let expected = (versions[jobID] ?? 0) + 1
        guard version == expected else {
            return "job \(jobID) goes to version \(version) where \(expected) was expected (each job's events must run from "
                + "version 1 without a gap)"
        }
        guard EventType(rawValue: type) != nil else { return "unknown event type '\(type)'" }
        versions[jobID] = version
        lastSeq = seq
        return nil
    }
}
