import CFileSystem
import Foundation
import JobModel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// POSIX file helpers for the local backend, `PartialFile` and `SafeDirectory`. Every system call's result is
// checked where it is made, and `errno` becomes a typed `StorageError` in one place
// (`LocalFiles.error(_:_:path:context:)`); callers that must tell a full disk apart ask the errno
// (`LocalFile.failedForLackOfSpace`), never the message.

/// POSIX helpers: errno mapping and path arithmetic.
enum LocalFiles {
    /// The buffer size for streaming copies; memory stays flat whatever the file size.
    static let bufferSize = 1 << 20

    /// What the failing call was doing, so that `ENOENT` can mean "no such source" or "no such object".
    enum Context {
        case source, object, destination, other
    }

    /// Whether `code` means the filesystem has no room left (ENOSPC, EDQUOT): the job cannot continue.
    /// `copy_file_range(2)` as the C library exports it (Swift's Glibc module leaves the GNU extension
    /// out, so it is looked up once by name); nil when the C library has none.
    static var copyFileRange: CopyFileRange? {
        copyFileRangeAddress.flatMap { UnsafeRawPointer(bitPattern: $0) }.map { unsafeBitCast($0, to: CopyFileRange.self) }
    }

    /// `ssize_t copy_file_range(int fd_in, off64_t *off_in, int fd_out, off64_t *off_out, size_t len, unsigned flags)`.
    typealias CopyFileRange = @convention(c) (Int32, UnsafeMutablePointer<Int64>?, Int32, UnsafeMutablePointer<Int64>?, Int, UInt32) -> Int

    private static let copyFileRangeAddress: Int? = {
        guard let program = dlopen(nil, RTLD_NOW), let symbol = dlsym(program, "copy_file_range") else { return nil }
        return Int(bitPattern: symbol)
    }()

    /// `sync_file_range(2)` as the C library exports it (a GNU extension, looked up once by name like
    /// `copy_file_range`); nil when the C library has none.
    static var syncFileRange: SyncFileRange? {
        syncFileRangeAddress.flatMap { UnsafeRawPointer(bitPattern: $0) }.map { unsafeBitCast($0, to: SyncFileRange.self) }
    }

    /// `int sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags)`.
    typealias SyncFileRange = @convention(c) (Int32, Int64, Int64, UInt32) -> Int32

    private static let syncFileRangeAddress: Int? = {
        guard let program = dlopen(nil, RTLD_NOW), let symbol = dlsym(program, "sync_file_range") else { return nil }
        return Int(bitPattern: symbol)
    }()

    /// `SYNC_FILE_RANGE_WRITE`: start write-out of dirty pages in the range, without waiting for it.
    static let syncFileRangeWrite: UInt32 = 2

    static func isLackOfSpace(_ code: Int32) -> Bool {
        code == ENOSPC || code == EDQUOT
    }

    /// Maps an errno to a typed error with a remedy.
    /// Opens a file jobctl only reads (an upload's source, a destination compared before a download)
    /// without waiting: `O_NONBLOCK`, so a FIFO with no writer (or a device) planted there cannot hold
    /// the open — and the job, unanswerable to cancel — for ever. Anything but a regular file is refused
    /// (a negative descriptor, and what it is); a regular file's descriptor is blocking again (plain
    /// reads), and its `fstat` comes with it (callers need its size or kind: no second call). A negative
    /// descriptor with `notRegular` nil: the open failed, `errno` says why (ELOOP for a symbolic link
    /// when `followingLinks` is false).
    /// `allowingDirectories`: a directory is opened too (for callers that report one themselves).
    static func openRegularForReading(_ path: String, followingLinks: Bool = true, allowingDirectories: Bool = true)
        -> (descriptor: Int32, info: stat, notRegular: String?) {
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (followingLinks ? 0 : O_NOFOLLOW))
        return regularOnly(descriptor, allowingDirectories: allowingDirectories) { info in
            followingLinks ? stat(path, &info) : lstat(path, &info)
        }
    }

    /// `descriptor` (opened `O_RDONLY | O_NONBLOCK`, or negative with `errno` set) as
    /// `openRegularForReading` answers: with its `fstat`, blocking again when it is a regular file (or an
    /// allowed directory), else closed, with what it is.
    ///
    /// An open that failed with ENXIO was refused for what is there: the kernel will not open a socket
    /// (nor a device with no driver behind it). `lookUp` (a `stat` of what was opened, filling its
    /// argument, 0 on success) then says what that is, answered as a FIFO is: a swapped-in socket was
    /// "No such device or address" (`internalError` over HTTP and gs://, `unknown` on file://), and the
    /// socket case below it unreachable.
    static func regularOnly(_ descriptor: Int32, allowingDirectories: Bool, lookUp: (inout stat) -> Int32)
        -> (descriptor: Int32, info: stat, notRegular: String?) {
        var info = stat()
        guard descriptor >= 0 else {
            let code = errno
            if code == ENXIO, lookUp(&info) == 0, let kind = notRegularKind(info.st_mode) { return (-1, info, kind) }
            errno = code
            return (-1, stat(), nil)
        }
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            Glibc.close(descriptor)
            errno = code
            return (-1, info, nil)
        }
        let kind = info.st_mode & S_IFMT
        guard kind == S_IFREG || (kind == S_IFDIR && allowingDirectories) else {
            Glibc.close(descriptor)
            return (-1, info, notRegularKind(info.st_mode) ?? "a device")
        }
        // The file status flags opened were O_RDONLY | O_NONBLOCK: clearing them all clears O_NONBLOCK alone.
        _ = fcntl(descriptor, F_SETFL, 0)
        return (descriptor, info, nil)
    }

    /// What `regularOnly` calls a file of `mode` that is not a regular file: "a FIFO", "a socket", "a
    /// directory" or "a device"; nil for a regular file.
    private static func notRegularKind(_ mode: mode_t) -> String? {
        switch mode & S_IFMT {
        case S_IFREG: nil
        case S_IFIFO: "a FIFO"
        case S_IFSOCK: "a socket"
        case S_IFDIR: "a directory"
        default: "a device"
        }
    }

    /// Opens an upload's source for reading, as `openRegularForReading` does. A file a folder or glob
    /// expansion listed (its `batch`, local) is reached from the folder that was named, one component at
    /// a time without following a link (`SafeDirectory.descend`, then `O_NOFOLLOW`): submit listed the
    /// folder without its links, and a link placed there since — a file or a subfolder swapped for one
    /// pointing at `/etc/shadow` by whoever may write to the folder being backed up — is refused, not
    /// uploaded. The named folder itself is opened as written (its own links followed), as every path a
    /// user writes is. A source named by itself is opened as written too.
    static func openUploadSource(_ path: String, batch: JobBatch?) throws(StorageError)
        -> (descriptor: Int32, info: stat, notRegular: String?) {
        guard let batch, batch.source.hasPrefix("/"), !batch.path.isEmpty,
              path.utf8.count > batch.path.utf8.count + 1, path.utf8.reversed().starts(with: ("/" + batch.path).utf8.reversed()) else {
            return openRegularForReading(path, allowingDirectories: false)
        }
        let root = String(decoding: path.utf8.dropLast(batch.path.utf8.count + 1), as: UTF8.self)
        let components = batch.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        let refused = { (found: String) in
            StorageError(.pathError, "a symbolic link was found at '\(found)', below the folder '\(root)' this job's file was "
                         + "listed from, and was not followed: submit listed the folder without its links, and one placed "
                         + "since is not uploaded (check who placed it); name a link's target in a job of its own")
        }
        let folder = try SafeDirectory.open(trusted: root, create: false, context: .source)
            .descend(Array(components.dropLast()), create: false, context: .source, linkRefused: refused)
        return try folder.openRegularForReading(components[components.count - 1], linkRefused: refused)
    }

    /// Refuses an upload's source on a filesystem the kernel fills as it is read (procfs, sysfs:
    /// `FileKind.generatedFilesystem`), closing `descriptor`: its `stat` size is not its content, and the
    /// upload of `/proc/self/status` stored an empty object. `pathError`, not retryable: it never reads
    /// otherwise. Submit refuses the same source at its line; this is for a job submitted without the check.
    static func refuseGeneratedSource(_ descriptor: Int32, path: String) throws(StorageError) {
        guard let filesystem = FileKind.generatedFilesystem(type: jobctl_filesystem_type(descriptor)) else { return }
        Glibc.close(descriptor)
        throw StorageError(.pathError, "the source '\(path)' \(FileKind.generatedRefusal(filesystem, path: path)): nothing was uploaded")
    }

    static func error(_ code: Int32, _ operation: String, path: String, context: Context = .other) -> StorageError {
        let cause = String(cString: strerror(code))
        switch code {
        case ENOSPC, EDQUOT:
            return StorageError(.internalError,
                                "disk full while \(operation) '\(path)': free space on that filesystem, then retry the job",
                                cause: cause)
        case EACCES where context == .source, EPERM where context == .source:
            // An upload's local source the worker may not read is a path problem, as HTTP and gs:// say
            // (`posixError`); `unauthorized` is the bucket's answer (a file:// bucket folder not writable).
            return StorageError(.pathError,
                                "permission denied while \(operation) the source '\(path)': check the file's owner and mode, "
                                    + "and that the worker's user can read it", cause: cause)
        case EACCES, EPERM:
            return StorageError(.unauthorized,
                                "permission denied while \(operation) '\(path)': check the file's owner and mode", cause: cause)
        case EROFS:
            return StorageError(.unauthorized, "'\(path)' is on a read-only filesystem (\(operation))", cause: cause)
        case EFBIG:
            return StorageError(.internalError, "\(FileSizeLimit.exceeded(path)) (\(operation)); then retry the job", cause: cause)
        case ENOENT:
            switch context {
            case .object: return StorageError(.objectNotFound, "object '\(path)' does not exist", cause: cause)
            case .source: return StorageError(.pathError, "source file '\(path)' does not exist", cause: cause)
            default: return StorageError(.pathError, "'\(path)' does not exist (\(operation))", cause: cause)
            }
        case ELOOP:
            return symbolicLinkRefused(path, operation: operation)
        case ENOTDIR, ENAMETOOLONG:
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

    /// A symbolic link sits where jobctl expected a file or directory of its own: it is never followed.
    static func symbolicLinkRefused(_ path: String, operation: String) -> StorageError {
        StorageError(.pathError,
                     "a symbolic link was found at '\(path)' and was not followed (\(operation)); jobctl never writes "
                         + "or reads through a link there that it did not make: remove the link (and check who planted it), then retry the job")
    }

    /// Something other than the file jobctl made sits at `path` (a directory, a device, a file with other
    /// links or another owner): it is left alone.
    static func unexpectedFileRefused(_ path: String, what: String, operation: String) -> StorageError {
        StorageError(.pathError,
                     "an unexpected file (\(what)) was found at '\(path)' and was left alone (\(operation)); "
                         + "jobctl only replaces files it made: move it away, then retry the job")
    }

    /// Appends the UTF-8 of `text`, copied from its storage at once: appending a `String.UTF8View`
    /// went byte by byte through a generic path, and a `String` append cost ~500 instructions.
    static func appendBytes(of text: String, to bytes: inout [UInt8]) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    /// Appends the UTF-8 of a literal.
    static func appendBytes(of text: StaticString, to bytes: inout [UInt8]) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// The last path component.
    static func lastComponent(_ path: String) -> String {
        SlashSeparatedPath.lastPart(of: path).map(String.init) ?? path
    }

    /// Everything before the last `/` ("/" for top-level paths, "." for bare names).
    static func directory(of path: String) -> String {
        SlashSeparatedPath.directory(of: path)
    }

    /// Makes a path absolute against the current directory; left relative when that directory cannot
    /// be read (removed while the process ran in it), so that using it fails with ENOENT instead of
    /// reaching a folder of the same name at the root (Foundation's answer there is "").
    static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        guard let current = CurrentDirectory.path else { return path }
        return current.hasSuffix("/") ? current + path : current + "/" + path
    }

    /// `realpath(3)`: nil when the path does not exist. For display only (a bucket's root in URLs).
    static func resolved(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return PathText.decoded(cString: pointer)
    }

    /// The current time as RFC 3339 with milliseconds, UTC (`2026-11-29T13:42:23.824Z`).
    ///
    /// Formatted by hand from `gmtime_r`: an `ISO8601DateFormatter` built per call (it cannot be shared
    /// between threads here) cost ~80 µs, a large part of a tiny local upload. The output is the one
    /// `ISO8601DateFormatter` gives with `[.withInternetDateTime, .withFractionalSeconds]` in UTC,
    /// milliseconds rounded to nearest as it does.
    static func timestamp(_ date: Date = Date()) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1_000).rounded())
        // The same text for times in 1970…9999 (every object a worker reads), written without an
        // interpolation per field: every read of a `file://` object without a sidecar makes one.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        if RFC3339.append(millis, to: &bytes) { return String(decoding: bytes, as: UTF8.self) }
        return calendarTimestamp(millis)
    }

    /// `timestamp`'s text from the C calendar: any time, years padded to four digits.
    static func calendarTimestamp(_ millis: Int64) -> String {
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

/// What `fstat(2)` / `fstatat(2)` says about a file.
struct FileStatus: Equatable {
    enum Kind: Equatable {
        case regular, directory, symbolicLink, other
    }

    let kind: Kind
    let size: Int64
    /// Modification time, nanoseconds since 1970.
    let modifiedNanos: Int64
    /// Modification time, microseconds since 1970 (rounded down, before 1970 too).
    var modifiedMicros: Int64 { modifiedNanos >= 0 ? modifiedNanos / 1000 : (modifiedNanos - 999) / 1000 }
    /// Change time (of the inode), nanoseconds since 1970.
    let changedNanos: Int64
    let identity: FileIdentity
    /// Hard links to the inode (`st_nlink`).
    let links: UInt64
    /// The owner's uid.
    let owner: UInt32
    /// The group's gid.
    let group: UInt32
    /// The permission bits (`st_mode & 0o777`: no setuid, setgid or sticky bit).
    let permissions: mode_t

    init(_ info: stat) {
        switch info.st_mode & S_IFMT {
        case S_IFREG: kind = .regular
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symbolicLink
        default: kind = .other
        }
        size = Int64(info.st_size)
        // Held within Int64 (years 1677…2262): anyone who can write the file sets its time, ext4 to 2446
        // and tmpfs to any second, and a file of the year 2300 in a bucket ended the worker that read it.
        modifiedNanos = Int64(info.st_mtim.tv_sec).saturatingMultiplied(by: 1_000_000_000).saturatingAdding(Int64(info.st_mtim.tv_nsec))
        changedNanos = Int64(info.st_ctim.tv_sec).saturatingMultiplied(by: 1_000_000_000).saturatingAdding(Int64(info.st_ctim.tv_nsec))
        identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        links = UInt64(info.st_nlink)
        owner = UInt32(info.st_uid)
        group = UInt32(info.st_gid)
        permissions = info.st_mode & 0o777
    }

    var isRegular: Bool { kind == .regular }
    var isDirectory: Bool { kind == .directory }
    /// The file's size, modification time and identity, as an upload records its source.
    var stamp: SourceStamp { SourceStamp(size: size, modifiedNanos: modifiedNanos, file: identity, changedNanos: changedNanos) }

    /// Whether a file found at one of jobctl's own temporary names may be one jobctl left there itself: a
    /// regular file, with no other hard link, owned by this process's user. Anything else (a link, a
    /// hard link to another file, another user's file) is never written to or replaced.
    var couldBeOurLeftover: Bool {
        kind == .regular && links == 1 && owner == UInt32(geteuid())
    }

    /// Words for messages: "a symbolic link", "a directory", "a file with 2 hard links", …
    var kindDescription: String {
        switch kind {
        case .symbolicLink: "a symbolic link"
        case .directory: "a directory"
        case .other: "a device, socket or pipe"
        case .regular where links != 1: "a file with \(links) hard links"
        case .regular where owner != UInt32(geteuid()): "a file owned by uid \(owner)"
        case .regular: "a file jobctl did not make"
        }
    }
}

/// An open file descriptor, closed in `deinit`. Not `Sendable`: one transfer owns it.
///
/// Remembers the errno of its last failed call (`lastErrno`), so a caller can tell a full disk from
/// other failures by the errno rather than by a message's text.
final class LocalFile {
    /// The folder `name` is in, for a file opened relative to one; nil when `name` is the whole path.
    private let folder: String?
    private let name: String
    private(set) var descriptor: Int32
    private let context: LocalFiles.Context
    /// The errno of the last call on this descriptor that failed (0 when none has).
    private(set) var lastErrno: Int32 = 0

    /// The file's path, for messages. Joined when asked for: nearly every file is read or written
    /// without one, and joining it at every open cost a small download ~500 instructions per file.
    var path: String {
        folder.map { SafeDirectory.childPath(name, in: $0) } ?? name
    }

    /// Opens `path` read-only, as the user named it: for files jobctl only reads (an upload's source).
    /// Every file it creates or writes goes through `SafeDirectory` instead. Returns its status too.
    /// A folder or glob expansion's file (`batch`) is reached without following links below the folder
    /// (`LocalFiles.openUploadSource`).
    static func reading(_ path: String, batch: JobBatch? = nil, context: LocalFiles.Context) throws(StorageError) -> (LocalFile, FileStatus) {
        let (fd, info, notRegular) = batch == nil ? LocalFiles.openRegularForReading(path)
                                                  : try LocalFiles.openUploadSource(path, batch: batch)
        if let notRegular {
            throw StorageError(.pathError, "'\(path)' is \(notRegular), not a regular file: nothing was read from it")
        }
        guard fd >= 0 else { throw LocalFiles.error(errno, "opening", path: path, context: context) }
        if context == .source { try LocalFiles.refuseGeneratedSource(fd, path: path) }
        return (LocalFile(opened: fd, path: path, context: context), FileStatus(info))
    }

    private init(opened descriptor: Int32, path: String, context: LocalFiles.Context) {
        folder = nil
        name = path
        self.context = context
        self.descriptor = descriptor
    }

    /// Adopts a descriptor `SafeDirectory` opened for `name` in the folder at `folder` (for messages).
    init(adopting descriptor: Int32, name: String, in folder: String, context: LocalFiles.Context) {
        self.folder = folder
        self.name = name
        self.context = context
        self.descriptor = descriptor
    }

    deinit { close() }

    func close() {
        if descriptor >= 0 {
            // The writer lock is let go before the close, not by it: a close ends the lock only with its
            // open file description's last descriptor, and a child that any thread of this process was
            // starting meanwhile (between its fork and its exec) holds a copy of every descriptor — a
            // next attempt here would find the lock held and start over.
            if heldWriterLock != nil { _ = jobctl_unlock_open_file(descriptor) }
            _ = Glibc.close(descriptor)
            descriptor = -1
        }
        if let held = heldWriterLock {
            heldWriterLock = nil
            // Forgotten only while it is still this file's entry: another open file may have taken the
            // lock between the close and here.
            let key = ObjectIdentifier(self)
            Self.writerLocksHere.withLock { if $0[held] == key { $0[held] = nil } }
        }
    }

    /// Whether the last failed call failed for lack of space (ENOSPC, EDQUOT).
    var failedForLackOfSpace: Bool { LocalFiles.isLackOfSpace(lastErrno) }

    private func failure(_ code: Int32, _ operation: String) -> StorageError {
        lastErrno = code
        return LocalFiles.error(code, operation, path: path, context: context)
    }

    /// Whether the file lives on a filesystem kept in memory (tmpfs, ramfs), where `fsync` returns at
    /// once; false when `fstatfs` fails.
    var onMemoryFilesystem: Bool {
        let type = jobctl_filesystem_type(descriptor)
        return type == 0x0102_1994 || type == 0x8584_58f6   // TMPFS_MAGIC, RAMFS_MAGIC
    }

    /// `fstat`: kind, size, mtime, identity, links and owner.
    func status() throws(StorageError) -> FileStatus {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw failure(errno, "inspecting") }
        return FileStatus(info)
    }

    /// Reads up to `buffer.count` bytes; 0 at end of file. Retries on EINTR.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(StorageError) -> Int {
        while true {
            let count = Glibc.read(descriptor, buffer.baseAddress, buffer.count)
            if count >= 0 { return count }
            if errno == EINTR { continue }
            throw failure(errno, "reading")
        }
    }

    /// Reads up to `range.count` bytes into `data[range]`; 0 at end of file. Retries on EINTR.
    func read(into data: inout Data, _ range: Range<Int>) throws(StorageError) -> Int {
        // Data.withUnsafeMutableBytes only rethrows untyped errors, so the typed one travels in a Result.
        let outcome = data.withUnsafeMutableBytes { (bytes: UnsafeMutableRawBufferPointer) -> Result<Int, StorageError> in
            do throws(StorageError) {
                return .success(try read(into: UnsafeMutableRawBufferPointer(rebasing: bytes[range])))
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    /// Reads up to `buffer.count` bytes at `offset` without moving the file position; 0 at end of file.
    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws(StorageError) -> Int {
        while true {
            let count = pread(descriptor, buffer.baseAddress, buffer.count, off_t(offset))
            if count >= 0 { return count }
            if errno == EINTR { continue }
            throw failure(errno, "reading")
        }
    }

    /// Copies up to `count` bytes from `source`'s file position to this file's inside the kernel
    /// (`copy_file_range`: no trip through user space, extents shared where the file system can), moving
    /// both positions. Nil when the kernel cannot copy between these two files (no such call, another
    /// file system on an older kernel, a file system without it) or copied nothing: the caller reads and
    /// writes instead, which also tells a source that shrank from one the kernel would not copy.
    func copyInKernel(from source: LocalFile, count: Int) throws(StorageError) -> Int? {
        guard count > 0, let copy = LocalFiles.copyFileRange else { return nil }
        while true {
            let copied = copy(source.descriptor, nil, descriptor, nil, count, 0)
            if copied > 0 { return copied }
            if copied == 0 { return nil }
            switch errno {
            case EINTR: continue
            case ENOSYS, EXDEV, EINVAL, EOPNOTSUPP: return nil
            default: throw failure(errno, "writing")
            }
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
                throw failure(count == 0 ? ENOSPC : errno, "writing")
            }
        }
    }

    /// Writes all of `bytes` at `offset` without moving the file position (`pwrite(2)`), looping over
    /// short writes and EINTR: the writes of a sliced download, each at its slice's place.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StorageError) {
        var done = 0
        while done < bytes.count {
            let count = pwrite(descriptor, bytes.baseAddress.map { $0 + done }, bytes.count - done, off_t(offset + Int64(done)))
            if count > 0 {
                done += count
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                throw failure(count == 0 ? ENOSPC : errno, "writing")
            }
        }
    }

    /// Writes all of `data`.
    func write(_ data: Data) throws(StorageError) {
        // Data.withUnsafeBytes only rethrows untyped errors, so the typed one travels in a Result.
        let outcome = data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Result<Void, StorageError> in
            do throws(StorageError) { try write(bytes); return .success(()) } catch { return .failure(error) }
        }
        try outcome.get()
    }

    func seek(to offset: Int64) throws(StorageError) {
        guard lseek(descriptor, off_t(offset), SEEK_SET) >= 0 else { throw failure(errno, "seeking in") }
    }

    func truncate(to size: Int64) throws(StorageError) {
        guard ftruncate(descriptor, off_t(size)) == 0 else { throw failure(errno, "truncating") }
    }

    func sync() throws(StorageError) {
        guard fsync(descriptor) == 0 else { throw failure(errno, "syncing") }
    }

    /// Gives this file — a temporary about to be renamed over the regular file `replaced` — that file's
    /// permission bits and, where this process may (root, or its own file), its owner and group, through
    /// the open descriptor and before the rename: `cp` and `curl -o` write into an existing file and keep
    /// both, while the rename put a new file of the worker's mode and user in its place (a 0600 file of
    /// `nobody` overwritten by a worker running as root came out 0644, root's, readable by everyone).
    /// A group it may not give (not root, not a member) takes the group's bits away, so the file is never
    /// readable by more than the one it replaces was. Setuid, setgid and sticky bits are never copied.
    func takeAccess(of replaced: FileStatus) throws(StorageError) {
        let mine = try status()
        // Never writable by others, whatever the file replaced allowed (a 0666 file comes out 0664), as
        // nothing else the worker makes is: a sidecar so left open could be forged. (The group's bits are
        // the replaced file's, as a new file's are the umask's.)
        var permissions = replaced.permissions & ~mode_t(0o002)
        if replaced.owner != mine.owner || replaced.group != mine.group,
           fchown(descriptor, uid_t(replaced.owner), gid_t(replaced.group)) != 0 {
            // Not root: the owner stays ours; the group is given where we belong to it.
            let grouped = replaced.group == mine.group || fchown(descriptor, uid_t.max, gid_t(replaced.group)) == 0
            if !grouped { permissions &= ~mode_t(0o070) }
        }
        guard fchmod(descriptor, permissions) == 0 else { throw failure(errno, "setting the mode of") }
    }

    /// A duplicate of the descriptor (close-on-exec), which the caller closes: for a sync on another
    /// thread (`BackgroundSyncs`), which must not share this object.
    func duplicateDescriptor() throws(StorageError) -> Int32 {
        let duplicate = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard duplicate >= 0 else { throw failure(errno, "duplicating the descriptor of") }
        return duplicate
    }

    /// Asks the kernel to start writing `count` bytes at `offset` to disk now, without waiting
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that the next `sync()` finds them written instead of
    /// writing them all while the caller waits. Best effort: no error is reported (the `sync()` that makes
    /// the bytes durable reports any), and nothing happens where the call is missing.
    func startWriteBack(at offset: Int64, count: Int64) {
        guard count > 0, let syncFileRange = LocalFiles.syncFileRange else { return }
        _ = syncFileRange(descriptor, offset, count, LocalFiles.syncFileRangeWrite)
    }

    /// `flock(LOCK_EX)`: serialises read-modify-write of an object's sidecar across processes. Never waits
    /// for ever: any process that may read the object can hold its lock (another user's `flock`), and a
    /// blocking `flock` held the job there — deaf to cancel, pause and the worker's SIGTERM, rescued after
    /// its lease only to wait again. The lock is tried without blocking, backing off from 1 to 20 ms
    /// (jobctl's own holders keep it for one sidecar write); false as soon as `stopped()` says the job
    /// was stopped; after `waitingAtMostMs` a retryable error naming the holder's lock.
    func lockExclusive(waitingAtMostMs: Int, stopped: () -> Bool) throws(StorageError) -> Bool {
        let start = ContinuousClock.now
        var pauseMs = 1
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            guard code == EWOULDBLOCK else { throw failure(code, "locking") }
            if stopped() { return false }
            guard start.duration(to: .now) < .milliseconds(waitingAtMostMs) else {
                throw StorageError(.internalError,
                                   "'\(path)' stayed locked by another process for \(waitingAtMostMs / 1_000) s (flock): "
                                       + "find who holds it (`fuser \(path)`); the job is tried again",
                                   retryable: true)
            }
            usleep(useconds_t(pauseMs * 1_000))
            pauseMs = min(pauseMs * 2, 20)
        }
        return true
    }

    /// What `lockWhileWriting(_:)` found.
    enum WriterLock: Equatable {
        /// This open file holds the lock now.
        case taken
        /// Another open file holds it: an attempt in another process that writes the file, or one in
        /// this process that did not let it go in time.
        case heldElsewhere
        /// The filesystem keeps no such locks (the errno): nothing can be known about other writers.
        case unavailable(Int32)
    }

    /// The files whose writer lock an open file of this process holds, and which one (`writerLockKey`).
    private static let writerLocksHere = Mutex<[FileIdentity: ObjectIdentifier]>([:])
    /// The file this one holds the writer lock of, if it does: let go (and forgotten) at `close()`.
    private var heldWriterLock: FileIdentity?

    /// How long a writer lock another open file of this process holds is waited for: an attempt whose
    /// transfer ended (paused, failed) lets its file go when the objects holding it are freed, which can
    /// come a moment after the next attempt starts (an HTTP exchange is freed on the transfer engine's
    /// thread, once it notices the stop).
    static let writerLockWaitHere: Duration = .seconds(2)

    /// Takes, without waiting, the lock that marks a file an attempt writes and a later attempt may take
    /// over and continue (an upload session, a download's partial file; `identity` is this file's):
    /// exclusive, on the whole file, held by this open file description (`F_OFD_SETLK`) until it is
    /// closed. A worker that dies, however (SIGKILL included), lets it go; one frozen (SIGSTOP, a stalled
    /// VM) past its lease keeps it, and its descriptor keeps writing. So the writer takes it as soon as it
    /// has the file open, and a later attempt adopts the file only when it takes the lock itself
    /// (`.heldElsewhere`: it leaves the file alone). A lock another open file of this process holds is
    /// waited for, up to `writerLockWaitHere`, in steps of 10 ms: a process frozen stops all its threads,
    /// so such a holder is an attempt that ended and has yet to close the file. Unlike `flock`, which
    /// serialises the sidecar's rewrites on the object, an OFD lock is not the process's: two descriptors
    /// it opened conflict.
    func lockWhileWriting(_ identity: FileIdentity) -> WriterLock {
        let deadline = ContinuousClock.now + Self.writerLockWaitHere
        while true {
            switch jobctl_lock_open_file(descriptor) {
            case 0:
                Self.writerLocksHere.withLock { $0[identity] = ObjectIdentifier(self) }
                heldWriterLock = identity
                return .taken
            case 1:
                let here = Self.writerLocksHere.withLock { $0[identity] != nil }
                guard here, ContinuousClock.now < deadline else { return .heldElsewhere }
                usleep(10_000)
            default:
                return .unavailable(errno)
            }
        }
    }

    /// Reads the whole file from offset 0, refusing files larger than `limit` bytes.
    func readAll(limit: Int) throws(StorageError) -> Data {
        var data = Data()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while true {
            let count = try read(at: offset, into: buffer)
            if count == 0 { return data }
            data.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            offset += Int64(count)
            if data.count > limit {
                throw StorageError(.internalError, "'\(path)' is larger than the \(limit) bytes expected: remove it and try again")
            }
        }
    }
}

extension SourceStamp {
    /// The stamp of a file from its `stat`.
    init(_ info: stat) {
        self = FileStatus(info).stamp
    }
}
