import CFileSystem
import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// A directory held open by its descriptor: every file the worker creates, opens for writing, renames or
/// removes is named relative to it (`openat`, `renameat`, `unlinkat`, `fstatat`), never through a path
/// that a third party could change under it, and never through a symbolic link.
///
/// - Files are created with `O_CREAT | O_EXCL | O_NOFOLLOW`: a link or file planted at the name makes
///   the create fail instead of being written through (`createExclusive`).
/// - Existing files are opened with `O_NOFOLLOW` (`openExisting`); a caller resuming one compares its
///   `FileIdentity` with the one it recorded before appending.
/// - A rename replaces whatever sits at the target name (a planted link is replaced, not followed), and
///   the final name is never opened for writing.
/// - Directories below a trusted root are opened one component at a time with `O_DIRECTORY |
///   O_NOFOLLOW` (`descend`), so a symbolic link anywhere below the root is refused.
/// - Nothing it makes is writable by other users, whatever the umask (`fileMode`, `folderMode`): under
///   umask 000 downloads, `file://` objects, sidecars and folders came out 0666 and 0777, so any local
///   user could rewrite a verified download or a sidecar's checksums, or plant files in a bucket.
///
/// Not `Sendable`: one transfer owns it.
final class SafeDirectory {
    /// The directory's path as it was reached: for messages and for the paths recorded in resume points.
    let path: String
    /// The mode every file is created with before the umask: 0666 less other users' write bit.
    static let fileMode: mode_t = 0o664
    /// The mode every folder is made with before the umask: 0777 less other users' write bit.
    static let folderMode: mode_t = 0o775
    private var descriptor: Int32

    private init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
    }

    deinit {
        if descriptor >= 0 { _ = Glibc.close(descriptor) }
    }

    /// The path of `name` in this directory.
    func childPath(_ name: String) -> String {
        Self.childPath(name, in: path)
    }

    /// The path of `name` in the folder at `folder`.
    static func childPath(_ name: String, in folder: String) -> String {
        folder == "/" ? "/" + name : folder + "/" + name
    }

    /// The path of `components` below the folder at `folder`: `childPath` applied for each in turn, its
    /// bytes copied once into one string (each `String` append cost ~500 instructions).
    static func path(of components: ArraySlice<String>, in folder: String) -> String {
        guard !components.isEmpty else { return folder }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(components.reduce(folder.utf8.count) { $0 + 1 + $1.utf8.count })
        if folder != "/" { LocalFiles.appendBytes(of: folder, to: &bytes) }
        for component in components {
            bytes.append(UInt8(ascii: "/"))
            LocalFiles.appendBytes(of: component, to: &bytes)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: - Opening directories

    /// Opens the absolute directory `path` as a user or the configuration named it: symbolic links among
    /// its existing components are followed, since they are part of the path that was chosen. With
    /// `create`, the missing components are made one at a time (`mkdirat`) and each is opened without
    /// following links, so a link raced into the place of one is refused, never followed.
    static func open(trusted path: String, create: Bool, context: LocalFiles.Context = .destination) throws(StorageError) -> SafeDirectory {
        let fd = path.withCString { Glibc.open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        if fd >= 0 { return SafeDirectory(descriptor: fd, path: path) }
        let code = errno
        if code == ENOTDIR {
            throw StorageError(.pathError, "'\(path)' is not a directory (a file sits on the path): choose another folder")
        }
        let parent = LocalFiles.directory(of: path)
        guard code == ENOENT, create, parent != path, parent != "." else {
            throw LocalFiles.error(code, "opening directory", path: path, context: context)
        }
        let base = try open(trusted: parent, create: true, context: context)
        return try base.descend([LocalFiles.lastComponent(path)], create: true, context: context)
    }

    /// This directory named by its real path (the symbolic links on the way resolved), read in one call
    /// from its descriptor (`/proc/self/fd`) rather than by `realpath`, which reads every component of
    /// the path as a link. Itself when the names agree; nil when `/proc` cannot tell (not mounted, the
    /// directory was removed).
    ///
    /// The link is read into stack memory and decoded from there: a zeroed array of `PATH_MAX` characters
    /// and its copy as bytes cost ~9,000 instructions per named-bucket job.
    func namedByRealPath() -> SafeDirectory? {
        let link = "/proc/self/fd/" + String(descriptor)
        // Most paths fit a buffer small enough for the stack; a longer one is read again at full size.
        guard let read = Self.readLink(link, capacity: 1024) ?? Self.readLink(link, capacity: Int(PATH_MAX) + 1),
              let real = read, real.hasPrefix("/"), !real.hasSuffix(" (deleted)") else { return nil }
        if real == path { return self }
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { return nil }
        return SafeDirectory(descriptor: copy, path: real)
    }

    /// The target of the symbolic link at `link`, read into a buffer of `capacity` bytes: nil when it may
    /// not have fitted (so a larger buffer can try), `.some(nil)` when it cannot be read (or is empty) —
    /// as `readlink(2)` with `capacity - 1` bytes, its result counted complete only below that.
    private static func readLink(_ link: String, capacity: Int) -> String?? {
        link.withCString { path in
            withUnsafeTemporaryAllocation(of: CChar.self, capacity: capacity) { buffer -> String?? in
                guard let base = buffer.baseAddress else { return .some(nil) }
                let count = readlink(path, base, capacity - 1)
                if count >= capacity - 1 { return nil }
                guard count > 0 else { return .some(nil) }
                // Not UTF-8: no String names it (decoded, it would name another folder).
                return .some(PathText.decoded(UnsafeRawBufferPointer(start: base, count: count)))
            }
        }
    }

    /// Opens `components` below this directory one at a time with `O_DIRECTORY | O_NOFOLLOW`, making the
    /// missing ones when `create` is set. A symbolic link (or anything but a directory) at any component is
    /// refused with `pathError`; a missing one without `create` is mapped through `context` (so a
    /// missing folder of a `file://` object reads as `objectNotFound`).
    ///
    /// Only the last folder's path is built (once, at the end); a folder's path on the way is made only
    /// for a message. Joining each one as it was opened cost ~1,200 instructions per component.
    /// `linkRefused` makes the error for a link found at a component (by its path), when the caller
    /// has more to say than that jobctl does not write through links.
    func descend(_ components: [String], create: Bool, context: LocalFiles.Context = .destination,
                 linkRefused: ((String) -> StorageError)? = nil) throws(StorageError) -> SafeDirectory {
        var current = self
        for (index, name) in components.enumerated() {
            try Self.checkName(name)
            let child = { Self.path(of: components[...index], in: self.path) }
            var fd = name.withCString { openat(current.descriptor, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            if fd < 0 && errno == ENOENT && create {
                if name.withCString({ mkdirat(current.descriptor, $0, Self.folderMode) }) != 0 && errno != EEXIST {
                    let code = errno
                    throw LocalFiles.error(code, "creating directory", path: child(), context: context)
                }
                fd = name.withCString { openat(current.descriptor, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            }
            guard fd >= 0 else {
                let code = errno
                if code == ELOOP || code == ENOTDIR, let found = current.entry(name) {
                    if found.kind == .symbolicLink {
                        throw linkRefused?(child()) ?? LocalFiles.symbolicLinkRefused(child(), operation: "opening directory")
                    }
                    if !found.isDirectory {
                        throw StorageError(.pathError, "'\(child())' is not a directory (a file sits on the path): choose another path")
                    }
                }
                throw LocalFiles.error(code, "opening directory", path: child(), context: context)
            }
            // A folder on the way is only walked through, never handed out: it needs no path of its own.
            current = SafeDirectory(descriptor: fd, path: index == components.count - 1 ? Self.path(of: components[...], in: path) : "")
        }
        return current
    }

    /// A name of one component: no `/` or NUL, not `.` or `..`, not empty.
    static func checkName(_ name: String) throws(StorageError) {
        guard isUsableName(name) else {
            throw StorageError(.pathError, "'\(name)' is not a usable file name")
        }
    }

    /// `checkName`'s test, in one pass over the UTF-8 bytes. `contains("/")` on a `String` went through a
    /// substring search (about 1 % of a small-file download drain's CPU), and the `String` comparisons
    /// with "." and ".." cost more than the scan: no other text is canonically equivalent to either, so
    /// comparing bytes answers the same.
    static func isUsableName(_ name: String) -> Bool {
        name.utf8.withContiguousStorageIfAvailable(isUsableName) ?? Array(name.utf8).withUnsafeBufferPointer(isUsableName)
    }

    private static func isUsableName(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var dots = 0
        for byte in bytes {
            if byte == UInt8(ascii: "/") || byte == 0 { return false }
            if byte == UInt8(ascii: ".") { dots += 1 }
        }
        return !bytes.isEmpty && !(bytes.count <= 2 && dots == bytes.count)
    }

    // MARK: - Identity

    /// How the directory left `path`, or nil while `path` still names it (the same device and inode; links
    /// on the way followed, as when it was opened by that path) or when that cannot be told (the rename
    /// then decides): removed (`rm -rf`: no name leads to it any more, whatever is at the path now), moved
    /// away (nothing at the path), or moved away or replaced with something else at the path now.
    ///
    /// Asked before a rename puts a finished file in place: a folder moved away (`mv dl dl.old`) and
    /// another made at its name while a transfer ran left the descriptor on the moved one, so the file was
    /// renamed into `dl.old` while the job reported it at `dl/…`. A folder moved between this check and
    /// the rename still takes the file: the check narrows the window to those few microseconds, it cannot
    /// close it. A file of the transfer found gone or changed in a folder that left is the folder's doing,
    /// and the error says so: a folder removed under a download was reported as its temporary file
    /// "replaced by another file".
    var departure: Departure? {
        var opened = stat()
        guard fstat(descriptor, &opened) == 0 else { return nil }
        if opened.st_nlink == 0 { return .removed }
        var named = stat()
        guard path.withCString({ fstatat(AT_FDCWD, $0, &named, 0) }) == 0 else {
            return errno == ENOENT || errno == ENOTDIR ? .movedAway : nil
        }
        return named.st_dev == opened.st_dev && named.st_ino == opened.st_ino ? nil : .replaced
    }

    /// How a directory left its path (`departure`), as messages say it after "the folder '…'".
    enum Departure: Sendable, Equatable {
        case removed, movedAway, replaced

        var phrase: String {
            switch self {
            case .removed: "was removed"
            case .movedAway: "was moved away"
            case .replaced: "was moved away or replaced (another is at its path now)"
            }
        }
    }

    // MARK: - Files

    /// What is at `name` now, without following a link (`fstatat` with `AT_SYMLINK_NOFOLLOW`); nil when
    /// nothing is (or it cannot be inspected).
    func entry(_ name: String) -> FileStatus? {
        var info = stat()
        guard name.withCString({ fstatat(descriptor, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return nil }
        return FileStatus(info)
    }

    /// Refuses `name` as the target of a replacing rename when what sits there is a folder (a rename
    /// cannot replace it) or a device, socket or pipe (a rename would: `/dev/null` as a download's
    /// destination became a regular file for every other program). Nothing there, a regular file or a
    /// symbolic link (replaced, never followed) passes, unless it is one of `ProtectedFiles` (the event
    /// log's own). `what` names the write in the message.
    func refuseUnreplaceable(_ name: String, for what: String) throws(StorageError) {
        guard let found = entry(name) else { return }
        try ProtectedFiles.refuse(found.identity, at: childPath(name), what)
        guard found.isDirectory || found.kind == .other else { return }
        let advice = found.isDirectory ? "move the folder away or choose a file's path" : "choose a file's path"
        throw StorageError(.invalidArgument, "'\(childPath(name))' is \(found.kindDescription): \(what) replaces only "
                               + "a file or a symbolic link, so nothing was written there — \(advice)",
                           retryable: false)
    }

    /// Creates `name` (read-write) with `O_CREAT | O_EXCL | O_NOFOLLOW`.
    ///
    /// When something already sits at the name: a symbolic link is refused (`pathError`, not followed);
    /// with `replacingOwnLeftover`, a regular file that can only be jobctl's own leftover (one link, our
    /// owner — see `FileStatus.couldBeOurLeftover`) is removed and the create tried once more; anything
    /// else is refused and left alone.
    func createExclusive(_ name: String, replacingOwnLeftover: Bool = false, mode: mode_t = SafeDirectory.fileMode) throws(StorageError) -> LocalFile {
        try Self.checkName(name)
        for attempt in 0..<3 {
            let fd = name.withCString { openat(descriptor, $0, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }
            if fd >= 0 { return LocalFile(adopting: fd, name: name, in: path, context: .destination) }
            let code = errno
            let target = childPath(name)
            guard code == EEXIST else { throw LocalFiles.error(code, "creating", path: target, context: .destination) }
            guard let found = entry(name) else { continue }   // removed meanwhile: try again
            if found.kind == .symbolicLink { throw LocalFiles.symbolicLinkRefused(target, operation: "creating") }
            guard replacingOwnLeftover, found.couldBeOurLeftover, attempt == 0 else {
                throw LocalFiles.unexpectedFileRefused(target, what: found.kindDescription, operation: "creating")
            }
            _ = unlinkat(descriptor, name, 0)
        }
        throw LocalFiles.unexpectedFileRefused(childPath(name), what: "a file that keeps reappearing", operation: "creating")
    }

    /// Creates `name` (read-write, `O_CREAT | O_EXCL | O_NOFOLLOW`) when nothing is at the name; nil
    /// when something is (a file, a link, anything: the caller looks), one `openat` either way.
    func createIfAbsent(_ name: String, mode: mode_t = SafeDirectory.fileMode) throws(StorageError) -> LocalFile? {
        try Self.checkName(name)
        let fd = name.withCString { openat(descriptor, $0, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }
        if fd >= 0 { return LocalFile(adopting: fd, name: name, in: path, context: .destination) }
        let code = errno
        if code == EEXIST { return nil }
        throw LocalFiles.error(code, "creating", path: childPath(name), context: .destination)
    }

    /// Opens the existing `name` without following a link; nil when nothing is there. A link there is
    /// refused with `pathError`. `O_NONBLOCK` keeps a pipe planted at the name from hanging the open (it
    /// changes nothing for regular files); callers check `status().isRegular` before using the file.
    func openExisting(_ name: String, writable: Bool, context: LocalFiles.Context) throws(StorageError) -> LocalFile? {
        try Self.checkName(name)
        let fd = name.withCString { openat(descriptor, $0, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            if code == ELOOP { throw LocalFiles.symbolicLinkRefused(childPath(name), operation: "opening") }
            throw LocalFiles.error(code, "opening", path: childPath(name), context: context)
        }
        return LocalFile(adopting: fd, name: name, in: path, context: context)
    }

    /// Opens the existing `name` read-only without following a link, as `LocalFiles.openRegularForReading`
    /// opens a path: anything but a regular file is refused (`notRegular`), a link with `pathError`
    /// (`linkRefused`), and a negative descriptor with `notRegular` nil leaves `errno` saying why.
    func openRegularForReading(_ name: String, linkRefused: (String) -> StorageError) throws(StorageError)
        -> (descriptor: Int32, info: stat, notRegular: String?) {
        try Self.checkName(name)
        let fd = name.withCString { openat(descriptor, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        if fd < 0 && errno == ELOOP { throw linkRefused(childPath(name)) }
        return LocalFiles.regularOnly(fd, allowingDirectories: false) { info in
            name.withCString { fstatat(descriptor, $0, &info, AT_SYMLINK_NOFOLLOW) }
        }
    }

    /// `renameat(2)` within this directory: `to` is replaced atomically by `from`, whatever it was (a
    /// symbolic link at `to` is itself replaced, never followed).
    func rename(_ from: String, to: String) throws(StorageError) {
        try Self.checkName(from)
        try Self.checkName(to)
        guard from.withCString({ source in to.withCString { renameat(descriptor, source, descriptor, $0) } }) == 0 else {
            throw LocalFiles.error(errno, "renaming into place", path: childPath(to), context: .destination)
        }
    }

    /// What a rename that never replaces (`renameExclusive`) did.
    enum ExclusiveRename: Equatable {
        /// `from` now has the name `to`.
        case renamed
        /// Nothing was at `from` any more: nothing changed.
        case sourceGone
        /// Something was at `to`: nothing changed.
        case targetTaken
    }

    /// `renameat2(2)` with `RENAME_NOREPLACE` within this directory: `from` takes the name `to` only
    /// while nothing is at `to`, in one step, and keeps its one link (never a second name, as `linkat`
    /// would give it until the first is removed). Where the filesystem cannot refuse a replacement
    /// (EINVAL) or the kernel has no such call (ENOSYS), `to` is looked at first and `renameat` used.
    func renameExclusive(_ from: String, to: String) throws(StorageError) -> ExclusiveRename {
        try Self.checkName(from)
        try Self.checkName(to)
        var result = from.withCString { source in to.withCString { jobctl_rename_noreplace(descriptor, source, $0) } }
        if result != 0, errno == EINVAL || errno == ENOSYS {
            if entry(to) != nil { return .targetTaken }
            result = from.withCString { source in to.withCString { renameat(descriptor, source, descriptor, $0) } }
        }
        guard result == 0 else {
            switch errno {
            case ENOENT: return .sourceGone
            case EEXIST: return .targetTaken
            default: throw LocalFiles.error(errno, "renaming", path: childPath(from), context: .destination)
            }
        }
        return .renamed
    }

    /// The names in this directory that `matching` accepts (`.` and `..` never offered). Reads the whole
    /// directory: for what is rarely needed (finding a session file a killed attempt renamed). A name
    /// that is not UTF-8 is never offered: decoded with U+FFFD, it named another file, the one spelled so.
    func names(matching: (String) -> Bool) -> [String] {
        ((try? DirectoryEntries.read(descriptor: descriptor))?.names ?? []).filter(matching)
    }

    /// `linkat(2)` within this directory: `to` becomes a second name of `from` only when nothing is at
    /// `to` — the check and the write are one step (`if_exists: fail` and `skip`). Returns false when `to`
    /// exists. A filesystem without hard links (FAT, exFAT, many FUSE mounts: EPERM, EOPNOTSUPP) takes
    /// `from` to `to` by a rename that refuses to replace (`renameExclusive`) instead: `from` is then gone,
    /// which the callers' removal of it after a link takes in its stride. Without that, such a transfer
    /// moved every byte and then failed at its last step.
    func linkExclusive(_ from: String, to: String) throws(StorageError) -> Bool {
        try Self.checkName(from)
        try Self.checkName(to)
        guard from.withCString({ source in to.withCString { linkat(descriptor, source, descriptor, $0, 0) } }) == 0 else {
            let code = errno
            if code == EEXIST { return false }
            if code == EPERM || code == EOPNOTSUPP || code == ENOSYS {
                switch try renameExclusive(from, to: to) {
                case .renamed: return true
                case .targetTaken: return false
                case .sourceGone: throw LocalFiles.error(ENOENT, "linking into place", path: childPath(from), context: .destination)
                }
            }
            throw LocalFiles.error(code, "linking into place", path: childPath(to), context: .destination)
        }
        return true
    }

    /// `unlinkat(2)`, ignoring a name that is already gone. Removing a link removes the link only.
    func remove(_ name: String) {
        guard (try? Self.checkName(name)) != nil else { return }
        _ = name.withCString { unlinkat(descriptor, $0, 0) }
    }

    /// Removes `name` only while it is still the regular file `identity` names; returns whether it did.
    @discardableResult
    func remove(_ name: String, ifStill identity: FileIdentity) -> Bool {
        guard let found = entry(name), found.isRegular, found.identity == identity else { return false }
        guard (try? Self.checkName(name)) != nil else { return false }
        return name.withCString { unlinkat(descriptor, $0, 0) } == 0
    }

    /// `fsync(2)` on the directory, so renames and removals in it survive a crash.
    func sync() throws(StorageError) {
        if fsync(descriptor) != 0 && errno != EINVAL {
            throw LocalFiles.error(errno, "syncing directory", path: path)
        }
    }
}
