import CFileSystem
import Foundation
import JobModel

/// The regular files under a local folder, found without following symbolic links.
///
/// A link inside the folder is not followed — neither to a file nor to a folder — so an expansion never
/// reaches outside the folder it names (rsync without `-L` does the same); it is skipped and named in a
/// note. FIFOs, sockets and devices are skipped the same way, and so are names that are not UTF-8
/// (`DirectoryEntries`: no String, so no job, can name them). The folder itself may be reached through
/// a link: the user named it.
///
/// Files the kernel makes as they are read (procfs, sysfs, cgroup2, …: `FileKind.generatedFilesystem`),
/// which upload-file refuses by themselves, are skipped too, and named: a folder of such a filesystem
/// mounted inside the tree is skipped whole, and a root folder on one refuses the walk (`generated`).
/// The filesystem is asked once a folder (`fstatfs` of its descriptor), and of a file only when its device
/// is not its folder's (a file mounted over one). With `checkingReadable`, a file the submitting user may
/// not read is listed in `unreadable` (a job of it fails when it runs, as a single such source is refused).
///
/// Each folder below it is opened from its parent's descriptor (`openat` with `O_NOFOLLOW`) and each entry
/// looked at from there (`fstatat`), so a walk goes as deep as the folders go: a path of PATH_MAX bytes
/// or more could not be looked up whole (ENAMETOOLONG), and the folder there was taken for "a FIFO, or
/// gone while listed", with every file below it left out. A file the walk takes at such a path is
/// returned in `tooLong` (no job could open it), and a lookup that fails for any reason but the entry
/// being gone stops the walk, saying why.
enum LocalTree {
    /// What a walk left out, and why.
    enum Skip: Hashable {
        case symbolicLink, device, socket, fifo, notRegular, undecodableName, changed
        /// A file, or a folder mounted in the tree, on a filesystem the kernel makes as it is read (its
        /// name, from `FileKind.generatedFilesystem`).
        case generated(String)

        /// As it is said of one entry: "a symbolic link".
        var what: String {
            switch self {
            case .symbolicLink: "a symbolic link"
            case .device: "a device"
            case .socket: "a socket"
            case .fifo: "a FIFO"
            case .notRegular: "not a regular file"
            case .undecodableName: "a name that is not valid UTF-8, which no job can name: rename it"
            case .changed: "removed, or replaced by a link or a file, while the folder was listed"
            case .generated(let filesystem): "on \(filesystem), whose files the kernel makes as they are read"
            }
        }

        /// `count` of them: "2 symbolic links".
        func counted(_ count: Int) -> String {
            let one = count == 1
            let noun = switch self {
            case .symbolicLink: one ? "symbolic link" : "symbolic links"
            case .device: one ? "device" : "devices"
            case .socket: one ? "socket" : "sockets"
            case .fifo: one ? "FIFO" : "FIFOs"
            case .notRegular: one ? "entry that is not a regular file" : "entries that are not regular files"
            case .undecodableName: one ? "name that is not valid UTF-8" : "names that are not valid UTF-8"
            case .changed: one ? "entry changed while listed" : "entries changed while listed"
            case .generated(let filesystem): one ? "entry on \(filesystem)" : "entries on \(filesystem)"
            }
            return "\(count) \(noun)"
        }

        /// Where its count stands in a note: the kinds in the order above, filesystems by name after them.
        fileprivate var order: (Int, String) {
            switch self {
            case .symbolicLink: (0, "")
            case .device: (1, "")
            case .socket: (2, "")
            case .fifo: (3, "")
            case .notRegular: (4, "")
            case .undecodableName: (5, "")
            case .changed: (6, "")
            case .generated(let filesystem): (7, filesystem)
            }
        }
    }

    /// What a walk found.
    struct Listing: Equatable {
        /// Regular files, relative to the root, `/`-separated, in byte order.
        var files: [String] = []
        /// Entries left out, relative to the root (a name that is not UTF-8 shown with `\xFF` for its
        /// bytes: `PathText.shown`), with what they are.
        var skipped: [(path: String, kind: Skip)] = []
        /// Files `accept` took whose absolute path the kernel refuses (PATH_MAX bytes or more), relative to
        /// the root, with `LocalPathBounds`'s words for why; in byte order.
        var tooLong: [(path: String, problem: String)] = []
        /// Files `accept` took that the submitting user may not read (when the walk checked), relative to
        /// the root, with why (from errno); in byte order. Also in `files`.
        var unreadable: [(path: String, reason: String)] = []

        static func == (lhs: Listing, rhs: Listing) -> Bool {
            lhs.files == rhs.files && lhs.skipped.map(\.path) == rhs.skipped.map(\.path) && lhs.tooLong.map(\.path) == rhs.tooLong.map(\.path)
                && lhs.unreadable.map(\.path) == rhs.unreadable.map(\.path)
        }

        /// What was left out, for a note after "skipped": the first entry and what it is, then how many
        /// more of each kind ("'a\xFF' (a name that is not valid UTF-8, …) and 3 more entries: 2 symbolic
        /// links, 1 FIFO"), then what to do; nil when nothing was.
        var skippedText: String? {
            guard let first = skipped.first else { return nil }
            var text = "'\(first.path)' (\(first.kind.what))"
            if skipped.count > 1 {
                let rest = skipped.dropFirst()
                let kinds = Set(rest.map(\.kind)).sorted { $0.order < $1.order }
                let counts = kinds.map { kind in kind.counted(rest.count { $0.kind == kind }) }
                text += " and \(rest.count) more \(rest.count == 1 ? "entry" : "entries"): " + counts.joined(separator: ", ")
            }
            var advice: [String] = []
            if skipped.contains(where: { $0.kind == .symbolicLink }) {
                advice.append("links are not followed out of the folder: name their targets in jobs of their own")
            }
            if skipped.contains(where: { $0.kind == .undecodableName }) {
                advice.append("a file whose name is not UTF-8 is uploaded once it is renamed")
            }
            if skipped.contains(where: { if case .generated = $0.kind { true } else { false } }) {
                advice.append("such a file's size is not its content, so its upload would store an empty or cut object: "
                              + "copy what you need to regular files and upload those")
            }
            return advice.isEmpty ? text : text + "; " + advice.joined(separator: "; ")
        }
    }

    /// Why a walk stopped.
    enum Failure: Error, Equatable {
        /// A folder could not be read, or an entry in it looked at (the path relative to the root, "" for
        /// the root; the reason).
        case unreadable(String, String)
        /// More than `limit` files.
        case tooMany(Int)
        /// Folders nested deeper than `maximumDepth`.
        case tooDeep(String)
        /// The root folder is on a filesystem the kernel makes as it is read (its name): nothing in it can
        /// be uploaded.
        case generated(String)
    }

    /// Folders deeper than this are refused (without links there are no loops; this bounds the walk, and
    /// the descriptors it holds open: at most one a level).
    static let maximumDepth = 256

    /// A folder of the walk, open; closed when nothing below it is left to open.
    private final class OpenFolder {
        let descriptor: Int32
        /// Its device (`st_dev`): a file on another one is mounted over one of the folder's, and its
        /// filesystem is asked.
        let device: UInt64
        init(_ descriptor: Int32) {
            self.descriptor = descriptor
            var info = stat()
            device = fstat(descriptor, &info) == 0 ? UInt64(info.st_dev) : UInt64.max
        }
        deinit { close(descriptor) }
    }

    /// Walks `root` (absolute). `accept` sees each regular file's relative path; only accepted files are
    /// kept and counted against `limit`. With `checkingReadable`, accepted files the submitting user may
    /// not read are also listed in `unreadable`.
    /// `descend` sees each folder's relative path before the walk goes into it: a folder it refuses
    /// (one that `exclude:` leaves out whole) is neither opened nor listed.
    static func walk(_ root: String, limit: Int, checkingReadable: Bool = false, descend: (String) -> Bool = { _ in true },
                     accept: (String) -> Bool) throws(Failure) -> Listing {
        var listing = Listing()
        let rootDescriptor = root.withCString { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard rootDescriptor >= 0 else { throw .unreadable("", reason(errno)) }
        if let filesystem = FileKind.generatedFilesystem(type: jobctl_filesystem_type(rootDescriptor)) {
            close(rootDescriptor)
            throw .generated(filesystem)
        }
        // Folders still to list: each opened from its parent (kept open until then) by its name.
        var pending: [(parent: OpenFolder, name: String, relative: String, depth: Int)] = []
        var next: (folder: OpenFolder, relative: String, depth: Int)? = (OpenFolder(rootDescriptor), "", 0)
        while true {
            if next == nil {
                guard let (parent, name, relative, depth) = pending.popLast() else { break }
                let descriptor = name.withCString { openat(parent.descriptor, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                guard descriptor >= 0 else {
                    let code = errno
                    // Gone, or a link or a file put at its name, since it was seen as a folder.
                    guard code == ENOENT || code == ELOOP || code == ENOTDIR else { throw .unreadable(relative, reason(code)) }
                    listing.skipped.append((relative, .changed))
                    continue
                }
                // A folder of procfs, sysfs, cgroup2, … mounted in the tree (one `fstatfs` a folder):
                // skipped whole, and named, as a device is.
                if let filesystem = FileKind.generatedFilesystem(type: jobctl_filesystem_type(descriptor)) {
                    close(descriptor)
                    listing.skipped.append((relative, .generated(filesystem)))
                    continue
                }
                next = (OpenFolder(descriptor), relative, depth)
            }
            guard let (folder, relative, depth) = next else { break }
            next = nil
            let entries: DirectoryEntries
            do {
                entries = try DirectoryEntries.read(descriptor: folder.descriptor)
            } catch {
                throw .unreadable(relative, error.reason)
            }
            // A name that is not UTF-8 reaches no file by a String, and no job could name it: skipped, and
            // said so. (Read with U+FFFD for its bytes, it was "a FIFO, or gone"; beside a file named that
            // way, that file was taken a second time, and a folder's files with it.)
            for bytes in entries.undecodable {
                let name = PathText.shown(bytes)
                listing.skipped.append((relative.isEmpty ? name : relative + "/" + name, .undecodableName))
            }
            for name in entries.names {
                let path = relative.isEmpty ? name : relative + "/" + name
                // The entry itself (a link is seen as a link), from the folder's descriptor: whatever the
                // length of the path. Every failure but "gone" is said, not taken for what the entry is.
                var info = stat()
                guard name.withCString({ fstatat(folder.descriptor, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else {
                    let code = errno
                    guard code == ENOENT else { throw .unreadable(path, reason(code)) }
                    listing.skipped.append((path, .changed))
                    continue
                }
                switch info.st_mode & S_IFMT {
                case S_IFREG:
                    // A file mounted over one of the folder's (a bind mount) is on a filesystem of its
                    // own: asked only then, as the folder's was asked when it was opened.
                    if UInt64(info.st_dev) != folder.device,
                       let filesystem = FileKind.generatedFilesystem(type: name.withCString { jobctl_filesystem_type_at(folder.descriptor, $0) }) {
                        listing.skipped.append((path, .generated(filesystem)))
                        continue
                    }
                    guard accept(path) else { continue }
                    if let problem = LocalPathBounds.problem(root + "/" + path) {
                        listing.tooLong.append((path, problem))
                    } else {
                        listing.files.append(path)
                        // As a single source is checked: may this user read it (`AT_EACCESS`: as open would)?
                        if checkingReadable, name.withCString({ faccessat(folder.descriptor, $0, R_OK, AT_EACCESS) }) != 0 {
                            let code = errno
                            if code == EACCES || code == EPERM { listing.unreadable.append((path, reason(code))) }
                        }
                    }
                    if listing.files.count + listing.tooLong.count > limit { throw .tooMany(limit) }
                case S_IFDIR:
                    guard descend(path) else { continue }
                    guard depth + 1 <= maximumDepth else { throw .tooDeep(path) }
                    pending.append((folder, name, path, depth + 1))
                case S_IFLNK:
                    listing.skipped.append((path, .symbolicLink))
                case S_IFCHR, S_IFBLK:
                    listing.skipped.append((path, .device))
                case S_IFSOCK:
                    listing.skipped.append((path, .socket))
                case S_IFIFO:
                    listing.skipped.append((path, .fifo))
                default:
                    listing.skipped.append((path, .notRegular))
                }
            }
        }
        listing.files.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        listing.skipped.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
        listing.tooLong.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
        listing.unreadable.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
        return listing
    }

    private static func reason(_ code: Int32) -> String {
        String(cString: strerror(code)).lowercased()
    }
}
