import Foundation
import JobLifecycle
import JobModel
import StorePort
#if canImport(Glibc)
import Glibc
#endif

/// The command table: one static `CommandSpec` per command, defined in `Commands+*.swift`.
enum Commands {}

// MARK: - Shared option reading

extension ParsedArguments {
    /// `--state` as a filter set (nil when not given).
    func stateSet() throws -> Set<JobState>? {
        let states = try values(Options.state).flatMap { $0 }
        return states.isEmpty ? nil : Set(states)
    }

    /// `--kind` as a filter set (nil when not given).
    func kindSet() throws -> Set<JobKind>? {
        let kinds = try values(Options.kind).flatMap { $0 }
        return kinds.isEmpty ? nil : Set(kinds)
    }

    /// How URLs are shown: redacted unless the command accepts `--show-secrets` and it was given.
    var display: Display { Display(showSecrets: self[Options.showSecrets]) }
}

// MARK: - Writing results

/// Writes `data` to `path` (`-o FILE`), or a failure naming the path.
///
/// A regular file (or nothing) at `path` is replaced whole: the bytes go to a new hidden file beside it
/// (`O_EXCL | O_NOFOLLOW`), synced and renamed over the name, so a link or a hard-linked file there is
/// replaced, never written through, and a failure leaves the old file as it was. The new file has the
/// old one's permission bits (0666 less the umask for a new one); with `secret` it is 0600 whatever
/// was there, since it holds a credential (a fetched URL's token).
///
/// Anything else at `path` is written into, never replaced, as `curl -o` does: a device (`/dev/null`,
/// which a rename made as root replaced with a regular file), a terminal or a pipe (`/dev/stdout`,
/// `/dev/fd/3`, a shell's `>(…)`, which failed "No such file or directory"), a FIFO (opened without
/// waiting: with no reader it is refused at once). A folder is refused, and so is any of `protected`
/// (the command's own SQLite log: `result -o jobctl.db` replaced the event log with a job's bytes).
func write(_ data: Data, toFile path: String, secret: Bool = false, protected: [String] = []) throws {
    func failure(_ code: Int32, _ doing: String = "write") -> CommandFailure {
        CommandFailure("cannot \(doing) '\(Display.localPath(path))': \(String(cString: strerror(code))); "
            + "check the directory exists and is writable")
    }
    func writeAll(_ descriptor: Int32) throws {
        try data.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) in
            var offset = 0
            while offset < buffer.count {
                let count = Glibc.write(descriptor, buffer.baseAddress.map { $0 + offset }, buffer.count - offset)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { throw failure(count == 0 ? ENOSPC : errno) }
                offset += count
            }
        }
    }
    var found = stat()
    let exists = stat(path, &found) == 0
    for file in protected {
        var info = stat()
        if exists, stat(file, &info) == 0, info.st_dev == found.st_dev, info.st_ino == found.st_ino {
            throw CommandFailure("'\(Display.localPath(path))' is this command's event log ('\(Display.localPath(file))'): "
                                 + "-o never writes over it; choose another file")
        }
    }
    if exists && found.st_mode & S_IFMT == S_IFDIR {
        throw CommandFailure("'\(Display.localPath(path))' is a folder: give -o the path of a file")
    }
    if exists && found.st_mode & S_IFMT != S_IFREG {
        let descriptor = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENXIO {
                throw CommandFailure("'\(Display.localPath(path))' is a FIFO that nothing reads: start its reader first")
            }
            throw failure(errno, "open")
        }
        defer { close(descriptor) }
        // Blocking again for the writes: a pipe's reader may take its time.
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        try writeAll(descriptor)
        return
    }
    let name = SlashSeparatedPath.lastPart(of: path).map(String.init) ?? path
    let folder = SlashSeparatedPath.directory(of: path)
    let temporary = (folder == "/" ? "" : folder + "/") + HiddenName.make(name, suffix: ".\(getpid()).jobctl-output")
    let mode: mode_t = secret ? 0o600 : 0o666
    let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
    guard descriptor >= 0 else { throw failure(errno) }
    var renamed = false
    defer {
        close(descriptor)
        if !renamed { unlink(temporary) }
    }
    if secret {
        _ = fchmod(descriptor, 0o600)
    } else if exists {
        _ = fchmod(descriptor, found.st_mode & 0o777)
    }
    try writeAll(descriptor)
    guard fsync(descriptor) == 0 else { throw failure(errno) }
    guard rename(temporary, path) == 0 else { throw failure(errno) }
    renamed = true
}
