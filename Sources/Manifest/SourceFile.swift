#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CFileSystem
import JobModel

/// What `submit` finds wrong with an upload-file source on disk, before any job is stored.
///
/// The checks match what the worker does when the job runs: it opens the path for reading, following
/// symbolic links, and takes only a regular file, not one on procfs or sysfs. So here: `stat` (following
/// links), a regular file, and an `open(O_RDONLY)` that succeeds, on no such filesystem.
enum SourceFile {
    enum Problem: Equatable {
        /// Nothing at that path.
        case missing
        /// A symbolic link whose target does not exist.
        case danglingLink(target: String)
        /// Nothing at that path, and its name holds `*`, `?` or `[`: a pattern, not a file.
        case glob
        /// A directory.
        case folder
        /// A FIFO, socket or device: "a FIFO", "a socket", "a device".
        case notRegular(String)
        /// A regular file that cannot be opened for reading (the reason, from errno).
        case unreadable(String)
        /// A file on a filesystem the kernel fills as it is read ("procfs": `FileKind.generatedFilesystem`).
        case generated(String)
        /// A folder on the way cannot be searched, is a file, or links loop (the reason, from errno).
        case unreachable(String)

        /// Nothing there to read yet — no file, or a link to none: what a download the job waits for
        /// may write (it replaces a link by a file).
        var isAbsence: Bool {
            switch self {
            case .missing, .danglingLink: true
            default: false
            }
        }
    }

    /// The problem with reading `path` as an upload source, or nil when the worker could read it now.
    static func problem(at path: String) -> Problem? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            let code = errno
            switch code {
            case ENOENT:
                var link = stat()
                if lstat(path, &link) == 0, (link.st_mode & S_IFMT) == S_IFLNK {
                    return .danglingLink(target: linkTarget(path) ?? "?")
                }
                let name = SlashSeparatedPath.lastPart(of: path) ?? ""
                return name.contains(where: { "*?[".contains($0) }) ? .glob : .missing
            case ENOTDIR:
                return .unreachable("a folder on its path is a file")
            default:
                return .unreachable(reason(code))
            }
        }
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            break
        case S_IFDIR:
            return .folder
        case S_IFIFO:
            return .notRegular("a FIFO")
        case S_IFSOCK:
            return .notRegular("a socket")
        default:
            return .notRegular("a device")
        }
        // O_NONBLOCK: opening never waits, whatever the file turns into between stat and open.
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { return .unreadable(reason(errno)) }
        defer { close(descriptor) }
        if let filesystem = FileKind.generatedFilesystem(type: jobctl_filesystem_type(descriptor)) {
            return .generated(filesystem)
        }
        return nil
    }

    private static func reason(_ code: Int32) -> String {
        String(cString: strerror(code)).lowercased()
    }

    private static func linkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4097)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { return nil }
        return PathText.decoded(buffer[..<count].map { UInt8(bitPattern: $0) })
    }
}

extension LocalPath {
    /// Whether `path` is a directory now (symbolic links followed, as the worker follows them).
    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Whether anything is at `path` (`lstat`: a link is something, wherever it points).
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// The last component of an absolute, standardised path; nil for `/`.
    static func lastComponent(_ path: String) -> String? {
        SlashSeparatedPath.lastPart(of: path).map(String.init)
    }
}
