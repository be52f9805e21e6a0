import CFileSystem
#if canImport(Glibc)
import Glibc
#endif
import JobModel

/// Finds the link of `/proc` a local path leads through, if any: `/proc/self`, `/proc/PID/cwd`,
/// `/proc/PID/fd/N`, … — and every path that reaches one by ordinary links, such as `/dev/stdin`
/// (→ `/proc/self/fd/0`) and `/dev/fd/3`.
///
/// Such a link is made by the kernel for the process that follows it: `/proc/self` is whoever looks,
/// and the process's descriptors, working folder and root are what its links lead to. Submit and the
/// worker are different processes, so such a path names two files: `source: /dev/stdin` was checked
/// as the 100,000-byte file submit read from, and the worker uploaded its own standard input (3
/// bytes) and succeeded; `/proc/self/cwd/c.txt` uploaded the worker's working folder's file. The
/// procfs check of a source looks at the file it opened, past the link, so it never saw one.
///
/// The path is followed one component at a time (`lstat`, `readlink`), as the kernel would, up to the
/// first link that sits on procfs; what a folder resolves to is kept, so the jobs of one folder cost a
/// look at their own names only.
struct ProcessLinks {
    /// A link of /proc a path leads through.
    struct Link: Equatable {
        /// Its path, with the links before it followed: `/proc/self`, `/proc/1/root`.
        let path: String
        /// Whether it leads to whichever process follows it (`/proc/self`, `/proc/thread-self`, and
        /// `/proc/mounts` or `/proc/net`, which lead into `self/`), rather than to the process it names.
        let isSelf: Bool
    }

    /// What a path resolves to.
    enum Resolution: Equatable {
        /// The path with every link followed (no link, `.` or `..` left in it).
        case real(String)
        /// It leads through this link of /proc.
        case processLink(Link)
        /// Not followed to its end: a component missing, a loop, a folder that may not be searched.
        /// Other checks say what is wrong; nothing led through /proc as far as it was followed.
        case unresolved
    }

    /// The kernel's limit on links followed in one lookup (MAXSYMLINKS).
    static let maximumLinks = 40

    /// `PROC_SUPER_MAGIC`: the filesystem whose links are made per process.
    private static let procfs = 0x9FA0

    /// Folders resolved so far (absolute, standardised as written → what they resolve to).
    private var folders: [String: Resolution] = [:]

    /// The link of /proc that `path` (absolute, standardised) leads through, or nil when it leads
    /// through none.
    mutating func link(in path: String) -> Link? {
        if case .processLink(let link) = resolve(path) { return link }
        return nil
    }

    private mutating func resolve(_ path: String) -> Resolution {
        guard let name = SlashSeparatedPath.lastPart(of: path) else { return .real("/") }
        let folder = resolveFolder(SlashSeparatedPath.directory(of: path))
        guard case .real(let real) = folder else { return folder }
        var links = 0
        return Self.step(from: real, String(name), links: &links)
    }

    private mutating func resolveFolder(_ path: String) -> Resolution {
        if let known = folders[path] { return known }
        let resolution = resolve(path)
        folders[path] = resolution
        return resolution
    }

    /// `name` looked up in the real folder `folder`, its link (if it is one) followed; `links` counts
    /// the links followed in this lookup.
    private static func step(from folder: String, _ name: String, links: inout Int) -> Resolution {
        if name.isEmpty || name == "." { return .real(folder) }
        // `folder` has no link in it: its parent is the one before its last `/`.
        if name == ".." { return .real(SlashSeparatedPath.directory(of: folder)) }
        let path = folder == "/" ? "/" + name : folder + "/" + name
        var info = stat()
        guard lstat(path, &info) == 0 else { return .unresolved }
        guard info.st_mode & S_IFMT == S_IFLNK else { return .real(path) }
        let target = target(of: path)
        if jobctl_path_filesystem_type(folder) == procfs {
            let isSelf = ["self", "thread-self"].contains { name == $0 || target == $0 || target?.hasPrefix($0 + "/") == true }
            return .processLink(Link(path: path, isSelf: isSelf))
        }
        links += 1
        guard links <= maximumLinks, let target else { return .unresolved }
        var current = target.hasPrefix("/") ? "/" : folder
        for part in SlashSeparatedPath.parts(of: target) {
            let next = step(from: current, String(part), links: &links)
            guard case .real(let real) = next else { return next }
            current = real
        }
        return .real(current)
    }

    private static func target(of link: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(link, &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return PathText.decoded(buffer[..<count].map { UInt8(bitPattern: $0) })
    }

    /// Why a path that leads through `link` is refused, after "'FIELD' 'WRITTEN' ": for an upload's
    /// source (`reading`) or a download's destination.
    static func refusal(_ link: Link, reading: Bool) -> String {
        guard link.isSelf else {
            return "leads through '\(link.path)', a link the kernel's /proc makes for one process (to its descriptors, working "
                + "folder or root): what it leads to is that process's, as the process following it may see it, and may be "
                + "another file or gone when the job runs (the process ended, its number reused); name the file itself"
        }
        let consequence = reading
            ? "submit would check a file of its own and the worker read one of its own, not the same file"
            : "the worker would write where its own link leads (its standard output, its working folder), not where it leads here"
        return "leads through '\(link.path)', a link the kernel's /proc makes to whichever process follows it (to its descriptors, "
            + "working folder or root): it names a file of the submitting process, and \(consequence); name the file itself"
            + (reading ? " (for standard input, save it to a file first)" : "")
    }
}
