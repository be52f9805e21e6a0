import Checksums
import Foundation
import JobModel
import StorePort
#if canImport(Glibc)
import Glibc
#endif

/// What was written: the file's final path, its size and its SHA-256 (of the compressed bytes, as
/// `sha256sum` computes it).
public struct WrittenArchive: Sendable, Equatable {
    public var path: String
    public var size: Int64
    public var sha256: String
    public var header: ArchiveHeader
    /// The written file's device and inode: whoever takes it back removes only that file.
    public var device: UInt64
    public var inode: UInt64
}

/// Writes an archive selection to a file durably: to a temporary name beside it (created exclusively,
/// mode 0600: the log's specs are in it), fsynced, renamed over the final name, and the directory
/// fsynced — so the final name holds either nothing new or the whole, synced file.
public enum ArchiveWriter {
    /// Writes `selection` to `path`; `now` dates the header.
    public static func write(_ selection: ArchiveSelection, to path: String, now: Int64) throws(RetentionError) -> WrittenArchive {
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        let temporary = "\(directory)/" + HiddenName.make(url.lastPathComponent, suffix: ".\(getpid()).partial")
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw RetentionError.io("cannot create '\(temporary)': \(String(cString: strerror(errno))); "
                + "check that the directory exists and is writable")
        }
        var renamed = false
        // Closed once: before the rename, or on the way out when something failed first. A second close
        // would close whatever file the process (another thread) has opened under that number since.
        var closed = false
        defer {
            if !renamed { unlink(temporary) }
        }
        do throws(RetentionError) {
            let header = ArchiveHeader(selection: selection, now: now)
            let fileDigest = Digest(.sha256)
            var size: Int64 = 0
            let sink = LineSink(compressor: try GzipCompressor()) { (bytes) throws(RetentionError) in
                fileDigest.update(bytes)
                size += Int64(bytes.count)
                try Self.writeAll(bytes, to: descriptor, path: temporary)
            }
            try sink.line(try ArchiveJSON.encode(header))
            for row in selection.rows {
                try sink.line(try eventLine(row))
            }
            for blob in selection.blobs {
                try sink.line(try ArchiveJSON.encode(ArchiveBlobLine(sha256: blob.sha256, size: blob.data.count,
                                                                     base64: blob.data.base64EncodedString())))
            }
            try sink.finish()
            guard fsync(descriptor) == 0 else {
                throw RetentionError.io("cannot sync '\(temporary)' to disk: \(String(cString: strerror(errno)))")
            }
            var info = stat()
            guard fstat(descriptor, &info) == 0 else {
                throw RetentionError.io("cannot read back '\(temporary)': \(String(cString: strerror(errno)))")
            }
            closed = true
            close(descriptor)
            guard rename(temporary, path) == 0 else {
                throw RetentionError.io("cannot rename '\(temporary)' to '\(path)': \(String(cString: strerror(errno)))")
            }
            renamed = true
            try syncDirectory(directory)
            return WrittenArchive(path: path, size: size, sha256: hex(fileDigest.finalize()), header: header,
                                  device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        } catch {
            if !closed { close(descriptor) }
            throw error
        }
    }

    /// `row` as an archive's event line. The reader refuses an event line past its limit (a crafted
    /// file's endless line): one written past it would be read back as damaged after the whole file was
    /// written.
    private static func eventLine(_ row: LogRow) throws(RetentionError) -> Data {
        let line = try ArchiveJSON.encode(ArchiveEventLine(row))
        let limit = ArchiveRecordKind.event.maximumLineBytes
        guard line.count <= limit else {
            throw RetentionError.io("job \(row.jobID)'s event \(row.version) (seq \(row.seq)) takes \(line.count) bytes as "
                + "an archive line, more than the \(limit) an archive's event line may hold; nothing was archived: "
                + "archive with an earlier --before to leave that job in the log")
        }
        return line
    }

    /// What writing `selection` and reading the file back (`ArchiveReader.read`) would refuse about its
    /// contents, found without writing anything: each event line's size, the events' order (each job's
    /// versions from 1 without a gap: `ArchiveEventOrder`), every job with its events, every blob's
    /// bytes against its hash. `archive --dry-run` said "would archive" for a log the real archive then
    /// refused (an event missing from a job's history); both run this first, so both refuse alike.
    /// Throws `unarchivable` with what is wrong.
    public static func check(_ selection: ArchiveSelection) throws(RetentionError) {
        var order = ArchiveEventOrder()
        for row in selection.rows {
            _ = try eventLine(row)
            if let problem = order.problem(seq: row.seq, jobID: row.jobID, version: row.version, type: row.type) {
                throw RetentionError.unarchivable("event \(row.seq): \(problem)")
            }
        }
        if let missing = selection.jobs.first(where: { order.versions[$0.id] == nil }) {
            throw RetentionError.unarchivable("job \(missing.id) has no events in the log")
        }
        for blob in selection.blobs {
            let digest = Digest.sha256Hex(blob.data)
            guard digest == blob.sha256 else {
                throw RetentionError.unarchivable("blob \(blob.sha256) does not match its bytes (\(blob.data.count) bytes, sha256 \(digest))")
            }
        }
    }

    /// Removes the temporaries (`.NAME.<pid>.partial`) that runs killed while writing `path` left beside
    /// it. Call only while holding the folder's `ArchiveFolderLock`: every writer holds it while its
    /// temporary exists, so any found then is a dead run's.
    public static func removeLeftTemporaries(of path: String) {
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        for temporary in HiddenName.processTemporaries(of: url.lastPathComponent, in: directory, suffixes: [".partial"]) {
            unlink(temporary.path)
        }
    }

    private static func writeAll(_ bytes: Data, to descriptor: Int32, path: String) throws(RetentionError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                Glibc.write(descriptor, buffer.baseAddress.map { $0 + offset }, buffer.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                throw RetentionError.io("cannot write '\(path)': \(String(cString: strerror(errno))); check free space")
            }
            offset += written
        }
    }

    /// Makes the rename durable. See fsync(2): syncing a file does not sync its directory entry.
    private static func syncDirectory(_ directory: String) throws(RetentionError) {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw RetentionError.io("cannot open '\(directory)' to sync it: \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw RetentionError.io("cannot sync '\(directory)': \(String(cString: strerror(errno)))") }
    }
}

/// Lines in, compressed bytes out, hashing the uncompressed content for the trailer.
private final class LineSink {
    private let compressor: GzipCompressor
    private let contentDigest = Digest(.sha256)
    private let output: (Data) throws(RetentionError) -> Void
    private var lines = 0
    private var pending = Data()

    init(compressor: GzipCompressor, output: @escaping (Data) throws(RetentionError) -> Void) {
        self.compressor = compressor
        self.output = output
    }

    func line(_ json: Data) throws(RetentionError) {
        var bytes = json
        bytes.append(0x0A)
        contentDigest.update(bytes)
        lines += 1
        pending.append(bytes)
        if pending.count >= 256 * 1024 { try flush(finish: false) }
    }

    func finish() throws(RetentionError) {
        let trailer = ArchiveTrailer(lines: lines, sha256: hex(contentDigest.finalize()))
        pending.append(try ArchiveJSON.encode(trailer))
        pending.append(0x0A)
        try flush(finish: true)
    }

    private func flush(finish: Bool) throws(RetentionError) {
        let compressed = try compressor.compress(pending, finish: finish)
        pending.removeAll(keepingCapacity: true)
        if !compressed.isEmpty { try output(compressed) }
    }
}
