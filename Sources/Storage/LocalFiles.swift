import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

// POSIX file helpers for the local backend and `PartialFile`. Every system call's result is checked here,
// and `errno` becomes a typed `StorageError` in one place (`LocalFiles.error(_:_:path:)`).

/// POSIX helpers: errno mapping, directories, symlink-aware containment.
enum LocalFiles {
    /// The buffer size for streaming copies; memory stays flat whatever the file size.
    static let bufferSize = 1 << 20

    /// What the failing call was doing, so that `ENOENT` can mean "no such source" or "no such object".
    enum Context {
        case source, object, destination, other
    }

    /// How every disk-full message starts, so callers can tell that case apart (`isDiskFull`).
    static let diskFullPrefix = "disk full"

    /// Whether `error` reports a full disk (ENOSPC/EDQUOT): the job cannot continue, so its temp file goes.
    static func isDiskFull(_ error: StorageError) -> Bool {
        error.code == .internalError && error.message.hasPrefix(diskFullPrefix)
    }

    /// Maps an errno to a typed error with a remedy.
    static func error(_ code: Int32, _ operation: String, path: String, context: Context = .other) -> StorageError {
        let cause = String(cString: strerror(code))
        switch code {
        case ENOSPC, EDQUOT:
            return StorageError(.internalError,
                                "\(diskFullPrefix) while \(operation) '\(path)': free space on that filesystem, then retry the job",
                                cause: cause)
        case EACCES, EPERM:
            return StorageError(.unauthorized,
                                "permission denied while \(operation) '\(path)': check the file's owner and mode", cause: cause)
        case EROFS:
            return StorageError(.unauthorized, "'\(path)' is on a read-only filesystem (\(operation))", cause: cause)
        case ENOENT:
            switch context {
            case .object: return StorageError(.objectNotFound, "object '\(path)' does not exist", cause: cause)
            case .source: return StorageError(.pathError, "source file '\(path)' does not exist", cause: cause)
            default: return StorageError(.pathError, "'\(path)' does not exist (\(operation))", cause: cause)
            }
        case ENOTDIR, ENAMETOOLONG, ELOOP:
            return StorageError(.pathError, "'\(path)' is not a usable path (\(operation))", cause: cause)
        case EISDIR:
            return StorageError(.invalidArgument, "'\(path)' is a directory, not a file (\(operation))", cause: cause)
        case EMFILE, ENFILE, ENOMEM, EAGAIN, EINTR, EBUSY, ETXTBSY:
            return StorageError(.internalError, "temporary failure while \(operation) '\(path)'",
                                retryable: true, cause: cause)
        case EIO:
            return StorageError(.internalError,
                                "I/O error while \(operation) '\(path)': the device reported a fault; check the disk",
                                cause: cause)
        default:
            return StorageError(.unknown, "\(operation) '\(path)' failed", cause: cause)
        }
    }

    /// The last path component.
    static func lastComponent(_ path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    /// Everything before the last `/` ("/" for top-level paths, "." for bare names).
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let parent = String(path[..<slash])
        return parent.isEmpty ? "/" : parent
    }

    /// Makes a path absolute against the current directory.
    static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let current = FileManager.default.currentDirectoryPath
        return current.hasSuffix("/") ? current + path : current + "/" + path
    }

    /// `mkdir -p`: creates the directory and its missing parents (mode 0777 less the umask).
    static func makeDirectories(_ path: String) throws(StorageError) {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw StorageError(.pathError, "'\(path)' exists and is not a directory")
            }
            return
        }
        let parent = directory(of: path)
        if parent != path && parent != "." { try makeDirectories(parent) }
        if mkdir(path, 0o777) != 0 && errno != EEXIST {
            throw error(errno, "creating directory", path: path)
        }
    }

    /// `fsync` on a directory, so that a rename inside it survives a crash.
    static func syncDirectory(_ path: String) throws(StorageError) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw error(errno, "opening directory", path: path) }
        defer { close(fd) }
        if fsync(fd) != 0 && errno != EINVAL { throw error(errno, "syncing directory", path: path) }
    }

    /// `realpath(3)`: nil when the path does not exist.
    static func resolved(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    /// The real path of `path`'s deepest existing ancestor (or itself) joined with the rest, so a symlink
    /// anywhere in the existing part is followed before containment is judged.
    static func resolvedAllowingMissingTail(_ path: String) -> String {
        var existing = path
        var tail: [String] = []
        while true {
            if let real = resolved(existing) {
                return ([real == "/" ? "" : real] + tail.reversed()).joined(separator: "/")
            }
            let parent = directory(of: existing)
            if parent == existing || parent == "." { return path }
            tail.append(lastComponent(existing))
            existing = parent
        }
    }

    /// Whether `path` equals `root` or lies below it (both already resolved).
    static func isContained(_ path: String, in root: String) -> Bool {
        root == "/" || path == root || path.hasPrefix(root + "/")
    }

    /// `rename(2)` with errors mapped.
    static func rename(_ from: String, to: String) throws(StorageError) {
        if Glibc.rename(from, to) != 0 { throw error(errno, "renaming onto", path: to, context: .destination) }
    }

    /// `unlink(2)`, ignoring a file that is already gone.
    static func remove(_ path: String) {
        _ = unlink(path)
    }

    /// The current time as RFC 3339 with milliseconds, UTC (`2026-11-29T13:42:23.824Z`).
    ///
    /// Formatted by hand from `gmtime_r`: an `ISO8601DateFormatter` built per call (it cannot be shared
    /// between threads here) cost ~80 µs, a large part of a tiny local upload. The output is the one
    /// `ISO8601DateFormatter` gives with `[.withInternetDateTime, .withFractionalSeconds]` in UTC,
    /// milliseconds rounded to nearest as it does.
    static func timestamp(_ date: Date = Date()) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1_000).rounded())
        var seconds = time_t(millis >= 0 ? millis / 1_000 : (millis - 999) / 1_000)
        let fraction = Int32(millis - Int64(seconds) * 1_000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(fraction, 3))Z"
    }
}

// MARK: - File descriptor

/// An open file descriptor, closed in `deinit`. Not `Sendable`: one transfer owns it.
final class LocalFile {
    let path: String
    private(set) var descriptor: Int32
    private let context: LocalFiles.Context

    /// Opens `path` with `flags` (O_CLOEXEC is added); `mode` applies when creating.
    init(path: String, flags: Int32, mode: mode_t = 0o666, context: LocalFiles.Context) throws(StorageError) {
        self.path = path
        self.context = context
        let fd = open(path, flags | O_CLOEXEC, mode)
        guard fd >= 0 else { throw LocalFiles.error(errno, "opening", path: path, context: context) }
        descriptor = fd
    }

    deinit { close() }

    func close() {
        if descriptor >= 0 {
            _ = Glibc.close(descriptor)
            descriptor = -1
        }
    }

    /// `fstat`: size and whether it is a regular file, a directory, and the mtime in microseconds.
    func status() throws(StorageError) -> (size: Int64, isDirectory: Bool, isRegular: Bool, modifiedMicros: Int64) {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw LocalFiles.error(errno, "inspecting", path: path, context: context) }
        let kind = info.st_mode & S_IFMT
        let micros = Int64(info.st_mtim.tv_sec) * 1_000_000 + Int64(info.st_mtim.tv_nsec) / 1000
        return (Int64(info.st_size), kind == S_IFDIR, kind == S_IFREG, micros)
    }

    /// Reads up to `buffer.count` bytes; 0 at end of file. Retries on EINTR.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(StorageError) -> Int {
        while true {
            let count = Glibc.read(descriptor, buffer.baseAddress, buffer.count)
            if count >= 0 { return count }
            if errno == EINTR { continue }
            throw LocalFiles.error(errno, "reading", path: path, context: context)
        }
    }

    /// Writes all of `bytes`, looping over short writes and EINTR.
    func write(_ bytes: UnsafeRawBufferPointer) throws(StorageError) {
        var offset = 0
        while offset < bytes.count {
            let count = Glibc.write(descriptor, bytes.baseAddress.map { $0 + offset }, bytes.count - offset)
            if count > 0 {
                offset += count
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                // write(2) returning 0 for a non-empty buffer means no space was found.
                throw LocalFiles.error(count == 0 ? ENOSPC : errno, "writing", path: path, context: context)
            }
        }
    }

    func seek(to offset: Int64) throws(StorageError) {
        guard lseek(descriptor, off_t(offset), SEEK_SET) >= 0 else {
            throw LocalFiles.error(errno, "seeking in", path: path, context: context)
        }
    }

    func truncate(to size: Int64) throws(StorageError) {
        guard ftruncate(descriptor, off_t(size)) == 0 else {
            throw LocalFiles.error(errno, "truncating", path: path, context: context)
        }
    }

    func sync() throws(StorageError) {
        guard fsync(descriptor) == 0 else { throw LocalFiles.error(errno, "syncing", path: path, context: context) }
    }

    /// `flock(LOCK_EX)`: serialises read-modify-write of an object's sidecar across processes.
    func lockExclusive() throws(StorageError) {
        while flock(descriptor, LOCK_EX) != 0 {
            if errno == EINTR { continue }
            throw LocalFiles.error(errno, "locking", path: path, context: context)
        }
    }
}
