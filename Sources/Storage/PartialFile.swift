import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// A download-file target: bytes go to a hidden temporary file beside the destination
/// (`.<name>.jobctl-partial`), which is synced and atomically renamed over the destination on `commit()`.
///
/// The destination therefore never holds a half-written file: it is either absent, the previous
/// version, or the complete new one. A missing parent directory is created (like `gsutil cp`).
/// The temporary file survives `deinit` so that a paused or interrupted download can continue from
/// `bytesWritten` (persist `ResumePoint.download(bytesWritten:generation:etag:tempPath:)` after `sync()`).
/// A full disk removes the temporary file before the error is thrown, since the job cannot continue.
///
/// Not `Sendable`: one transfer owns it.
public final class PartialFile {
    /// The final path the file is renamed to.
    public let destination: String
    /// The hidden temporary file the bytes are written to.
    public var tempPath: String { file.path }
    /// Bytes in the temporary file (the resumed prefix plus everything written since).
    public private(set) var bytesWritten: Int64
    /// Whether `init` continued an earlier temporary file instead of starting at 0.
    public let resumed: Bool

    private let file: LocalFile
    private var finished = false

    /// The temporary path used for `destination`.
    public static func tempPath(for destination: String) -> String {
        let absolute = LocalFiles.absolute(destination)
        let directory = LocalFiles.directory(of: absolute)
        let name = LocalFiles.lastComponent(absolute)
        return (directory == "/" ? "" : directory) + "/.\(name).jobctl-partial"
    }

    /// Opens (or creates) the temporary file for `destination`.
    ///
    /// When `resume` is `.download` naming this destination's temporary file (or none), and that file
    /// exists with at least `bytesWritten` bytes, it is truncated to `bytesWritten` and writing continues
    /// there. Otherwise writing starts at 0. Any other resume point (an upload's) is ignored.
    public init(destination: String, resumeFrom resume: ResumePoint?) throws(StorageError) {
        let absolute = LocalFiles.absolute(destination)
        guard !absolute.hasSuffix("/"), !LocalFiles.lastComponent(absolute).isEmpty else {
            throw StorageError(.invalidArgument, "download destination '\(destination)' names a directory, not a file")
        }
        self.destination = absolute
        let temp = Self.tempPath(for: absolute)
        try LocalFiles.makeDirectories(LocalFiles.directory(of: absolute))
        file = try LocalFile(path: temp, flags: O_WRONLY | O_CREAT, context: .destination)

        var start: Int64 = 0
        if case .download(let written, _, _, let previousTemp)? = resume,
           written > 0, previousTemp == nil || previousTemp == temp {
            let size = try file.status().size
            if written <= size { start = written }
        }
        do {
            try file.truncate(to: start)
            try file.seek(to: start)
        } catch {
            LocalFiles.remove(temp)
            throw error
        }
        bytesWritten = start
        resumed = start > 0
    }

    deinit { file.close() }

    /// Appends `bytes`. A full disk throws `internalError` ("disk full …", not retryable) and removes the
    /// temporary file; other failures are typed from errno (EIO → internalError, EACCES → unauthorized).
    public func write(_ bytes: UnsafeRawBufferPointer) throws(StorageError) {
        precondition(!finished, "PartialFile used after commit or discard")
        do {
            try file.write(bytes)
        } catch {
            if LocalFiles.isDiskFull(error) { discard() }
            throw error
        }
        bytesWritten += Int64(bytes.count)
    }

    /// Appends `data`.
    public func write(_ data: Data) throws(StorageError) {
        // Data.withUnsafeBytes only rethrows untyped errors, so the typed one travels in a Result.
        let outcome = data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Result<Void, StorageError> in
            do throws(StorageError) { try write(bytes); return .success(()) } catch { return .failure(error) }
        }
        try outcome.get()
    }

    /// `fsync(2)` on the temporary file: everything up to `bytesWritten` survives a crash.
    public func sync() throws(StorageError) {
        do {
            try file.sync()
        } catch {
            if LocalFiles.isDiskFull(error) { discard() }
            throw error
        }
    }

    /// Syncs, renames the temporary file over the destination and syncs the directory, so the rename
    /// survives a crash. Returns the final (absolute) path.
    public func commit() throws(StorageError) -> String {
        precondition(!finished, "PartialFile committed twice or after discard")
        try sync()
        file.close()
        do {
            try LocalFiles.rename(tempPath, to: destination)
        } catch {
            discard()
            throw error
        }
        finished = true
        try LocalFiles.syncDirectory(LocalFiles.directory(of: destination))
        return destination
    }

    /// Closes and removes the temporary file (cancel, checksum mismatch, start over). Harmless to repeat.
    public func discard() {
        file.close()
        if !finished { LocalFiles.remove(tempPath) }
        finished = true
    }

    /// Re-reads the first `bytesWritten` bytes of the temporary file in chunks, to re-hash a resumed prefix.
    public func readBack(chunk: (UnsafeRawBufferPointer) -> Void) throws(StorageError) {
        let reader = try LocalFile(path: tempPath, flags: O_RDONLY, context: .destination)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: LocalFiles.bufferSize, alignment: 16)
        defer { buffer.deallocate() }
        var remaining = bytesWritten
        while remaining > 0 {
            let want = Int(min(Int64(buffer.count), remaining))
            let count = try reader.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard count > 0 else {
                throw StorageError(.internalError, "temporary file '\(tempPath)' is shorter than the \(bytesWritten) bytes recorded")
            }
            chunk(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            remaining -= Int64(count)
        }
    }
}
