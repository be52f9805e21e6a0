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

    /// The name of a filesystem whose files the kernel makes as they are read ("procfs", "sysfs",
    /// "cgroup2"), from its `statfs` `f_type` (`jobctl_filesystem_type`); nil for any other. Their `stat`
    /// size is not their content: `/proc/self/status` says 0 bytes and holds about 1.5 KB, a cgroup
    /// file such as `cgroup.max.depth` says 0 and holds `max`, a sysfs attribute says 4096 and holds a
    /// line, and a second read may say something else. An upload of one took the size first and stored
    /// an empty object (or failed as a source that changed), so upload-file refuses them, at submit and
    /// when the job runs, as it refuses a FIFO, and a folder upload skips them: a copy in a regular file
    /// is what can be uploaded.
    ///
    /// Every Linux pseudo filesystem whose files are made by the kernel, or stand for kernel objects,
    /// is here (linux/magic.h, and the few that only their own source defines), not only the ones a
    /// probe met: cgroup and cgroup2 were missing, and `/sys/fs/cgroup/…` uploaded as empty objects.
    public static func generatedFilesystem(type: Int) -> String? {
        switch type {
        case 0x9FA0: "procfs"                // PROC_SUPER_MAGIC
        case 0x6265_6572: "sysfs"            // SYSFS_MAGIC
        case 0x6462_6720: "debugfs"          // DEBUGFS_MAGIC
        case 0x7472_6163: "tracefs"          // TRACEFS_MAGIC
        case 0x7363_6673: "securityfs"       // SECURITYFS_MAGIC
        case 0x6265_6570: "configfs"         // CONFIGFS_MAGIC (fs/configfs/mount.c)
        case 0x0027_E0EB: "cgroup"           // CGROUP_SUPER_MAGIC
        case 0x6367_7270: "cgroup2"          // CGROUP2_SUPER_MAGIC
        case 0x0765_5821: "resctrl"          // RDTGROUP_SUPER_MAGIC
        case 0xCAFE_4A11: "bpf"              // BPF_FS_MAGIC
        case 0x6165_676C: "pstore"           // PSTOREFS_MAGIC
        case 0xDE5E_81E4: "efivarfs"         // EFIVARFS_MAGIC
        case 0x4249_4E4D: "binfmt_misc"      // BINFMTFS_MAGIC
        case 0x6573_5543: "fusectl"          // FUSE_CTL_SUPER_MAGIC (fs/fuse/control.c)
        case 0x1980_0202: "mqueue"           // MQUEUE_MAGIC (ipc/mqueue.c)
        case 0xF97C_FF8C: "selinuxfs"        // SELINUX_MAGIC
        case 0x4341_5D53: "smackfs"          // SMACK_MAGIC
        case 0x5A3C_69F0: "apparmorfs"       // AAFS_MAGIC
        case 0x6E73_6673: "nsfs"             // NSFS_MAGIC
        case 0x6759_6969: "rpc_pipefs"       // RPCAUTH_GSSMAGIC (net/sunrpc/rpc_pipe.c)
        case 0x6E66_7364: "nfsd"             // fs/nfsd/nfsctl.c (coreutils' S_MAGIC_NFSD)
        case 0x9FA1: "openpromfs"            // OPENPROM_SUPER_MAGIC
        case 0x9FA2: "usbdevfs"              // USBDEVICE_SUPER_MAGIC
        case 0xABBA_1974: "xenfs"            // XENFS_SUPER_MAGIC
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
