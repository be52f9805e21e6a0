import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An exclusive lock on the folder an archive is written into, held from the check of the target's
/// name until the log records the archive (or the file written is taken back): archives writing into
/// one folder take turns.
///
/// Why: `archive` checks that it may replace its `--to` file, writes beside it, renames over it, reads
/// it back and only then removes the jobs from the log. Two runs with the same `--to` each passed the
/// check, and the second's rename replaced the file the first had just recorded: the log then named a
/// file whose jobs were partly gone from both (found by SIGKILL/concurrency probing: 18 jobs of 1,807
/// lost while a worker drained). Taking turns, the second run's check finds the file the log records and
/// refuses, having written nothing.
///
/// `flock(2)` on the folder itself: no file is left behind, and whatever path names the folder (a link,
/// a bind mount) locks its one inode. A filesystem that cannot lock a folder this way (some network
/// filesystems), or a folder this user may write into but not read, gives no lock: `acquire` then
/// returns nil and the archive runs as before.
public final class ArchiveFolderLock {
    private let descriptor: Int32

    private init(descriptor: Int32) { self.descriptor = descriptor }

    deinit {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }

    /// How long `acquire` waits for another archive's turn before it gives up.
    public static let longestWaitSeconds: Double = 600

    /// Takes the lock on the folder of `target`, waiting while another archive holds it (`waiting` is
    /// called once, when the wait begins); nil when the folder cannot be locked this way. Throws when the
    /// folder cannot be opened or the wait outlasts `longestWaitSeconds`.
    public static func acquire(for target: String, waiting: () -> Void) throws(RetentionError) -> ArchiveFolderLock? {
        let folder = URL(fileURLWithPath: target).deletingLastPathComponent().path
        let descriptor = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        // A folder this user may write into but not read (mode 0333) cannot be opened to lock: the archive
        // runs unlocked there, as before, rather than not at all.
        if descriptor < 0, errno == EACCES { return nil }
        guard descriptor >= 0 else {
            throw RetentionError.io("cannot open the folder '\(folder)' of the archive file: \(String(cString: strerror(errno))); "
                + "check that it exists and may be searched")
        }
        var announced = false
        let deadline = Date().addingTimeInterval(longestWaitSeconds)
        while true {
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return ArchiveFolderLock(descriptor: descriptor) }
            let number = errno
            switch number {
            case EINTR:
                continue
            case EWOULDBLOCK:
                if !announced { announced = true; waiting() }
                guard Date() < deadline else {
                    close(descriptor)
                    throw RetentionError.io("another jobctl archive has been writing into '\(folder)' for \(Int(longestWaitSeconds)) "
                        + "seconds; nothing was archived: let it finish (or stop it), then run this one again")
                }
                usleep(20_000)
            default:
                // ENOLCK, EINVAL, EOPNOTSUPP: no such lock here. The archive runs unlocked, as before.
                close(descriptor)
                return nil
            }
        }
    }
}
