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

    /// The name of a filesystem whose files the kernel makes as they are read ("procfs", "sysfs"), from
    /// its `statfs` `f_type` (`jobctl_filesystem_type`); nil for any other. Their `stat` size is not their
    /// content: `/proc/self/status` says 0 bytes and holds about 1.5 KB, a sysfs attribute says 4096 and
    /// holds a line, and a second read may say something else. An upload of one took the size first and
    /// stored an empty object (or failed as a source that changed), so upload-file refuses them, at submit
    /// and when the job runs, as it refuses a FIFO: a copy in a regular file is what can be uploaded.
    public static func generatedFilesystem(type: Int) -> String? {
        switch type {
        case 0x9FA0: "procfs"                // PROC_SUPER_MAGIC
        case 0x6265_6572: "sysfs"            // SYSFS_MAGIC
        case 0x6462_6720: "debugfs"          // DEBUGFS_MAGIC
        case 0x7472_6163: "tracefs"          // TRACEFS_MAGIC
        case 0x7363_6673: "securityfs"       // SECURITYFS_MAGIC
        case 0x6265_6570: "configfs"         // CONFIGFS_MAGIC
        default: nil
        }
    }

    /// Why upload-file refuses a file on `filesystem` (`generatedFilesystem`), for messages that name it first.
    public static func generatedRefusal(_ filesystem: String, path: String) -> String {
        "is on \(filesystem), whose files the kernel makes as they are read: their size (0 bytes for most of /proc) is "
            + "not their content, so an upload would store an empty or cut object; copy it to a regular file first "
            + "(cat '\(path)' > copy) and upload the copy"
    }
}
