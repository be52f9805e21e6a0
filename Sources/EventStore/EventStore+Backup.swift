import CFileSystem
import Foundation
import JobModel
import StorePort
#if canImport(Glibc)
import Glibc
#endif

/// What `EventStore.backup(to:)` wrote.
public struct BackupSummary: Sendable, Equatable {
    /// The copy's path, as given.
    public let path: String
    /// Its size in bytes.
    public let size: Int64
    /// The jobs and events it holds.
    public let jobs: Int
    public let events: Int
    /// The newest schema migration it carries.
    public let schemaVersion: Int
}

extension EventStore {
    /// Writes a consistent copy of the whole database to `destination`, a path where nothing exists yet,
    /// while workers and other commands go on writing.
    ///
    /// Why not `cp`: a WAL database is two files written at different times, and a copy of the main file
    /// alone (or of both, taken a moment apart) lacks or tears the transactions not yet checkpointed. Here
    /// SQLite's `VACUUM INTO` writes every page of one read snapshot (every commit before it, none after)
    /// into a new, compacted single file in rollback-journal mode, so the copy needs no `-wal` beside it
    /// and any jobctl (or `sqlite3`) opens it as it is.
    ///
    /// The copy is written under a hidden name beside `destination`, created first with the database's
    /// own permission bits and group (the log holds the URLs the jobs name, tokens included, so a copy
    /// must not be readable by more people than the log; `VACUUM INTO` would create it 0644), synced, checked
    /// (`PRAGMA quick_check` and its counts, through a connection of its own), linked to `destination`
    /// (which fails if anything appeared there meanwhile: nothing is ever replaced) and its folder synced.
    /// Any failure removes the hidden file (and the journal SQLite wrote beside it); `destination` then
    /// does not exist. A run killed part way leaves them: the next backup of that name removes them (a
    /// dead process's, by the process id in the name). A log whose group this user may not give the copy
    /// gets no group bits on it.
    ///
    /// See https://www.sqlite.org/lang_vacuum.html#vacuuminto
    public func backup(to destination: String) throws(StoreError) -> BackupSummary {
        let shown = TerminalText.printable(destination)
        guard let name = SlashSeparatedPath.lastPart(of: destination), !destination.hasSuffix("/"), name != ".", name != ".." else {
            throw StoreError.unusablePath("'\(shown)' names a folder: give the path of the new backup file")
        }
        // The log's own names even where no file is yet: a copy named `DB-wal` would be read as the log's
        // write-ahead log by its next open.
        if let own = sqliteLogFiles(path).first(where: { Self.sameEntry($0, destination) }) {
            throw StoreError.unusablePath("'\(shown)' is this log's own '\(TerminalText.printable(own))': give the backup another name")
        }
        var found = stat()
        if lstat(destination, &found) == 0 {
            let what = found.st_mode & S_IFMT == S_IFDIR ? "a folder" : found.st_mode & S_IFMT == S_IFLNK ? "a symbolic link" : "a file"
            throw StoreError.unusablePath("'\(shown)' already exists (\(what)): a backup never replaces anything; "
                                          + "give a new name or remove it first")
        }
        let folder = SlashSeparatedPath.directory(of: destination)
        // `VACUUM INTO` takes a file name as SQLite does: a relative `file:x` would be read as a URI.
        let prefix = folder.hasPrefix("/") ? folder : folder.hasPrefix("./") || folder == "." ? folder : "./" + folder
        // Made as if it ended in SQLite's `-journal`, so that the journal's name fits NAME_MAX too.
        let hidden = HiddenName.make(String(name), suffix: ".\(getpid())\(Self.temporarySuffix)\(Self.journalSuffix)").dropLast(Self.journalSuffix.count)
        let temporary = (prefix == "/" ? "" : prefix) + "/" + hidden
        Self.removeDeadRunsCopies(of: String(name), in: prefix, exactly: temporary)
        var source = stat()
        guard stat(path, &source) == 0 else {
            throw StoreError.io("cannot read '\(TerminalText.printable(path))': \(String(cString: strerror(errno)))")
        }
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let code = errno
            let reason = "cannot create '\(shown)': \(String(cString: strerror(code)))"
            switch code {
            case EEXIST: throw StoreError.unusablePath("cannot create the backup's hidden copy '\(TerminalText.printable(temporary))': "
                                                       + "something else is there; remove it, or give the backup another name")
            case ENOENT, ENOTDIR: throw StoreError.unusablePath(reason + "; the folder '\(TerminalText.printable(folder))' does not exist")
            case EACCES, EPERM, EROFS: throw StoreError.unusablePath(reason + "; choose a folder this user may write")
            default: throw StoreError.io(reason + "; check the folder and free space")
            }
        }
        var linked = false
        defer {
            if !linked { unlink(temporary) }
            // The journal SQLite keeps while it writes the copy (left behind when that failed part way).
            unlink(temporary + "-journal")
        }
        defer { close(descriptor) }
        // The database's group where this user may give it (a group-shared log), then its bits: never
        // wider than the log's, and never executable.
        _ = fchown(descriptor, uid_t.max, source.st_gid)
        var made = stat()
        // A group this user may not give the copy: the log's group bits would open it to another group.
        let sameGroup = fstat(descriptor, &made) == 0 && made.st_gid == source.st_gid
        let bits = source.st_mode & (sameGroup ? 0o666 : 0o606)
        // Writable by its owner until the copy is written: a read-only log (0444, a snapshot kept so)
        // would otherwise give the copy bits `VACUUM INTO` cannot write through ("attempt to write a
        // readonly database", as if the log were written). Its own bits once written, before its name.
        _ = fchmod(descriptor, bits | 0o600)

        do {
            try withConnection { (connection) throws(StoreError) in
                try connection.writing(temporary, shownAs: shown) { () throws(StoreError) in
                    try connection.run("VACUUM INTO ?", [.text(temporary)])
                }
            }
            _ = fchmod(descriptor, bits)
        } catch {
            // Said as the backup's failure: "database or disk is full" alone read as the log's own disk.
            let reason: String
            switch error {
            case .io(let message): reason = message
            case .sqlite(_, let message, _): reason = message
            default: throw error
            }
            // A copy past the file size limit says what to do itself (free space would not help).
            let advice = reason.contains(FileSizeLimit.raiseIt) ? "" : ": check the free space and permissions of '\(TerminalText.printable(folder))'"
            throw StoreError.unusablePath("cannot write the backup '\(shown)': \(reason); nothing was kept\(advice)")
        }
        try Self.sync(temporary)
        let summary = try Self.checkCopy(temporary, shownAs: destination)
        // A filesystem without hard links (FAT, exFAT, some network mounts) refuses `link`: there the copy
        // takes the name by a rename that refuses to replace (`RENAME_NOREPLACE`), as safe where it exists.
        var named = link(temporary, destination) == 0
        if !named, [EPERM, EOPNOTSUPP, EMLINK].contains(errno) {
            named = jobctl_rename_noreplace(AT_FDCWD, temporary, destination) == 0
        }
        guard named else {
            let code = errno
            if code == EEXIST {
                throw StoreError.unusablePath("'\(shown)' appeared while the backup was written: a backup never replaces anything; "
                                              + "give a new name")
            }
            throw StoreError.io("cannot name the backup '\(shown)': \(String(cString: strerror(code)))")
        }
        linked = true
        unlink(temporary)   // a no-op after a rename
        try Self.sync(folder, folder: true)
        return BackupSummary(path: destination, size: summary.size, jobs: summary.jobs, events: summary.events,
                             schemaVersion: summary.schemaVersion)
    }

    /// What a backup's hidden copy is named with, after `.NAME.PID`; SQLite's journal of it adds `-journal`.
    static let temporarySuffix = ".jobctl-backup"
    static let journalSuffix = "-journal"

    /// Removes the hidden copies (and their journals) of `name` in `folder` that runs killed part way
    /// left (a backup's own `SIGINT`, `SIGTERM` or `SIGKILL`): those of processes no longer alive on this
    /// machine, and `exactly`, this run's own name, which only a dead earlier run of this process's id can
    /// have left. A name shortened to fit (a digest in place of its end) is found only as `exactly`.
    static func removeDeadRunsCopies(of name: String, in folder: String, exactly: String) {
        unlink(exactly)
        unlink(exactly + journalSuffix)
        for copy in HiddenName.processTemporaries(of: name, in: folder, suffixes: [temporarySuffix + journalSuffix, temporarySuffix])
        where copy.pid > 0 && kill(copy.pid, 0) != 0 && errno == ESRCH {
            unlink(copy.path)
        }
    }

    /// Reads the finished copy back through its own connection: the file must pass `quick_check`, and
    /// its counts say what it holds.
    private static func checkCopy(_ temporary: String, shownAs destination: String) throws(StoreError) -> BackupSummary {
        let copy = try SQLiteConnection(path: temporary, readOnly: true, create: false)
        let damage = try quickCheck(copy)
        if let first = damage.first {
            throw StoreError.io("the backup written for '\(TerminalText.printable(destination))' does not read back whole "
                                + "(SQLite quick_check: \(first)); nothing was kept: check the disk and try again")
        }
        let jobs = try copy.first("SELECT count(*) FROM jobs") { row in row.int(0) } ?? 0
        let events = try copy.first("SELECT count(*) FROM events") { row in row.int(0) } ?? 0
        let schema = try copy.first("SELECT max(version) FROM schema_migrations") { row in row.int(0) } ?? 0
        var info = stat()
        let size = stat(temporary, &info) == 0 ? Int64(info.st_size) : 0
        return BackupSummary(path: destination, size: size, jobs: jobs, events: events, schemaVersion: schema)
    }

    /// Whether `a` and `b` name the same entry: the same last part in the same folder (by device and
    /// inode, so `./x` and `/abs/x` or a linked folder are seen as one), whether or not the entry exists.
    private static func sameEntry(_ a: String, _ b: String) -> Bool {
        guard let first = SlashSeparatedPath.lastPart(of: a), let second = SlashSeparatedPath.lastPart(of: b),
              first.utf8.elementsEqual(second.utf8) else { return false }
        var one = stat(), two = stat()
        guard stat(SlashSeparatedPath.directory(of: a), &one) == 0, stat(SlashSeparatedPath.directory(of: b), &two) == 0 else { return false }
        return one.st_dev == two.st_dev && one.st_ino == two.st_ino
    }

    /// Syncs the copy (`O_NOFOLLOW`: the hidden file made above) or, with `folder`, the directory that
    /// names it: see fsync(2), syncing a file does not sync its directory entry.
    private static func sync(_ path: String, folder: Bool = false) throws(StoreError) {
        let descriptor = open(path, (folder ? O_DIRECTORY : O_NOFOLLOW) | O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw StoreError.io("cannot open '\(TerminalText.printable(path))' to sync it: \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else {
            throw StoreError.io("cannot sync '\(TerminalText.printable(path))' to disk: \(String(cString: strerror(errno))); check the disk and free space")
        }
    }
}
