#if canImport(Glibc)
import Glibc
#endif

/// What a path names when it is not a regular file, for messages that refuse it ("'P' is a FIFO, not an
/// archive file"): read from `stat`'s mode, so the message says what is there instead of failing on it.
public enum FileKind {
    /// "a directory", "a FIFO", "a socket", "a character device", "a block device" or "not a regular
    /// file" for what `mode` (a `stat`'s `st_mode`) says is not a regular file; nil for a regular file.
    public static func notRegular(mode: mode_t) -> String? {
        switch mode & S_IFMT {
        case S_IFREG: nil
        case S_IFDIR: "a directory"
        case S_IFIFO: "a FIFO"
        case S_IFSOCK: "a socket"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        default: "not a regular file"
        }
    }
}
