#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The largest file this process may write (`RLIMIT_FSIZE`: `ulimit -f`, systemd's `LimitFSIZE=`), for
/// the messages of writes that failed with `EFBIG`.
///
/// jobctl ignores SIGXFSZ (see `main.swift`), so a write past the limit fails with `EFBIG` instead of
/// killing the process; a file system's own largest file size (FAT's 4 GiB) fails the same way.
public enum FileSizeLimit {
    /// The soft limit in bytes; nil when there is none (`unlimited`) or it cannot be read.
    public static var bytes: UInt64? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
        return UInt64(limit.rlim_cur)
    }

    /// What to tell a user whose write to `path` failed with `EFBIG`: which limit, and how to raise it.
    public static func exceeded(_ path: String) -> String { exceeded(named: "'\(path)'") }

    /// As `exceeded(_:)`, for a file (or files) named by `name`, quoted as it should be shown.
    public static func exceeded(named name: String) -> String {
        let limit = bytes.map { "this process's file size limit (\($0) bytes, `ulimit -f`, systemd LimitFSIZE=)" }
            ?? "the file system's largest file size"
        return "\(name) reached \(limit): \(raiseIt)"
    }

    /// What `exceeded` says to do: a message that holds it needs no other advice.
    public static let raiseIt = "raise it, or write to where a file may be larger"
}
