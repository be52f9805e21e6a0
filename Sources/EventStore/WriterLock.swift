import CSQLite
import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The one file that calls the POSIX process-shared mutex and `mmap` functions. Everything else speaks
// `WriterLock`; no unsafe pointer leaves this file.

/// The lock jobctl's writing processes take before `BEGIN IMMEDIATE` on one database: a process-shared,
/// robust pthread mutex in a small file next to it (`<database>-writer-lock`, the database's mode).
///
/// Why: SQLite's own write lock has no queue. A connection that finds it taken can only poll (our busy
/// handler sleeps and tries again, each try several `fcntl` calls), so with four worker processes most
/// of the CPU went into polling and into commits too small to be worth their fsync. Here a waiter sleeps
/// in the kernel (a futex) and wakes when the holder releases, after its `COMMIT`; meanwhile its group
/// commit gathers the events its tasks queued.
///
/// SQLite's locks stay the truth: this lock only orders jobctl's writers before they ask SQLite, so a
/// foreign `sqlite3` connection (or an older jobctl) is as safe as before, and a writer holding this lock
/// still waits for SQLite's lock through the busy handler. Every wait is bounded by the caller's timeout
/// (the busy timeout). A holder that dies (SIGKILL) frees the lock: the next taker gets `EOWNERDEAD` and
/// makes the mutex consistent — the transaction the dead holder left open was never committed, and
/// SQLite rolls it back on its own. A stopped holder (SIGSTOP) keeps it, and others wait at most their
/// timeout, as they wait for SQLite's lock.
///
/// A lock file copied while a writer held it (a backup of a live folder restored, a VM snapshot) names,
/// as its owner, a thread that no longer exists anywhere: no kernel ever marks such a mutex's owner dead,
/// and every writer waited its whole busy timeout and failed, for ever. So every process that has the file
/// open keeps a shared open-file-description lock on its first byte, and a writer kept waiting for a
/// second looks at the owner: when no thread of that id exists in this pid namespace and no other open
/// description of the file holds that lock (no process, in any namespace, has it open), the owner is
/// marked dead as the kernel marks a dead holder's (`markVanishedOwnerDead`), and the next take recovers
/// it as from any dead holder. A live owner is never so marked: in this namespace its thread exists, in
/// another one its process has the file open. (An older jobctl, which takes no such lock, in another pid
/// namespace is the one holder this could miss; SQLite's own lock still keeps its writes apart.)
///
/// The file is created never through a symbolic link, `O_CLOEXEC`, with the database's permission bits
/// whatever the umask, and its group where this user may give it (its owner too when root), as SQLite
/// makes its -wal and -shm files: every user who may write the database may take the lock, whichever of
/// them wrote first (a 0600 lock made by a worker left the members of its group to SQLite's locking
/// alone). It is made complete under a temporary name and linked into place, so no process can map a
/// half-made mutex. Only writable opens create it.
///
/// Not `Sendable`: used only on the store's executor thread (a robust mutex is owned by the thread that
/// locked it, and must be unlocked by it).
///
/// See https://man7.org/linux/man-pages/man3/pthread_mutexattr_setrobust.3.html and
/// https://man7.org/linux/man-pages/man3/pthread_mutex_lock.3p.html
final class WriterLock {
    /// What `lock(waitingAtMostNs:)` found.
    enum Outcome: Equatable {
        /// This thread holds the lock now.
        case acquired
        /// Another holder kept it for the whole wait.
        case timedOut
        /// The mutex can no longer be used (`ENOTRECOVERABLE`: a holder died and the next one did not
        /// repair it, which jobctl never does); the caller goes on with SQLite's locking alone.
        case unusable
    }

    /// The sidecar's path for the database at `databasePath`: beside the file itself, its symbolic links
    /// resolved, as SQLite keeps the `-wal` and `-shm` there — writers opening one database by its name
    /// and through a link take their turns at one lock (each had one of its own, and those through the
    /// link polled SQLite's lock instead of waiting in the queue).
    static func path(forDatabase databasePath: String) -> String { sqliteSidecarPath(databasePath, "-writer-lock") }

    /// The file's size: one page, the magic at offset 0 and the mutex at `mutexOffset`.
    static let fileSize = 4_096
    static let mutexOffset = 64
    /// Written last, after the mutex is initialised, identifying the layout (and its version).
    static let magic = Array("jobctl writer lock v1\n".utf8)

    let path: String
    private let descriptor: Int32
    private let mapping: UnsafeMutableRawPointer
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Whether this object holds the lock now.
    private(set) var isHeld = false
    /// Times a holder's death was repaired (tests).
    private(set) var recoveredFromDeadOwner = 0
    /// Whether this open file description holds the shared lock on the file's first byte that says the
    /// file is in use (false where the filesystem has no such locks: then no owner is ever taken for gone).
    private var markedInUse = false
    /// Since when takes of the lock have been timing out (monotonic ns; nil: the last take succeeded), and
    /// when the owner was last looked at.
    private var contendedSinceNs: UInt64?
    private var ownerLookedAtNs: UInt64 = 0
    /// How long takes must have been timing out before the owner is looked at, and how often it is then.
    static let ownerCheckAfterNs: UInt64 = 1_000_000_000
    static let ownerCheckEveryNs: UInt64 = 100_000_000

    private init(path: String, descriptor: Int32, mapping: UnsafeMutableRawPointer) {
        self.path = path
        self.descriptor = descriptor
        self.mapping = mapping
        self.mutex = (mapping + Self.mutexOffset).bindMemory(to: pthread_mutex_t.self, capacity: 1)
        // Shared: conflicts only with a writer's momentary exclusive one (`markVanishedOwnerDead`), so retried briefly.
        for _ in 0..<100 {
            if jobctl_open_file_lock_first_byte(descriptor, Int16(F_RDLCK)) == 0 { markedInUse = true; break }
            guard errno == EAGAIN || errno == EACCES else { break }
            usleep(1_000)
        }
    }

    deinit {
        if isHeld { pthread_mutex_unlock(mutex) }
        munmap(mapping, Self.fileSize)
        close(descriptor)
    }

    // MARK: - Opening

    /// Opens the lock of the database at `databasePath`, creating it when missing. Returns nil when the
    /// file cannot be created or opened for lack of permission (a database shared by group, a read-only
    /// directory next to a writable database): the store then relies on SQLite's locking alone.
    ///
    /// Throws when the path is a symbolic link or not a regular file, or holds something other than a
    /// jobctl writer lock: those are refused rather than followed or overwritten.
    static func openOrCreate(forDatabase databasePath: String) throws(StoreError) -> WriterLock? {
        let path = Self.path(forDatabase: databasePath)
        var descriptor = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC)
        if descriptor < 0 && errno == ENOENT {
            switch try create(path, forDatabase: databasePath) {
            case .made, .alreadyThere: break
            case .notPermitted: return nil
            }
            descriptor = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC)
        }
        guard descriptor >= 0 else {
            let number = errno
            if number == EACCES || number == EROFS || number == EPERM { return nil }
            throw openError(path, errno: number)
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int(info.st_size) >= fileSize else {
            close(descriptor)
            throw StoreError.io("'\(path)' is not a jobctl writer lock (not a regular file of \(fileSize) bytes); "
                                + "stop every jobctl process using '\(databasePath)', then remove it")
        }
        guard let mapping = map(descriptor) else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            throw StoreError.io("cannot map the writer lock '\(path)': \(reason)")
        }
        guard UnsafeRawBufferPointer(start: mapping, count: magic.count).elementsEqual(magic) else {
            munmap(mapping, fileSize)
            close(descriptor)
            throw StoreError.io("'\(path)' is not a jobctl writer lock (unknown content); "
                                + "stop every jobctl process using '\(databasePath)', then remove it")
        }
        removeAbandonedTemporaries(of: path)
        return WriterLock(path: path, descriptor: descriptor, mapping: mapping)
    }

    /// Temporary files older than this, of a process that is gone, were abandoned mid-creation.
    static let abandonedAfterSeconds = 60

    /// Removes what a process killed between creating its temporary lock file and linking it into place
    /// left (`<lock>.<pid>.<n>.tmp`): only regular files of this user, named exactly so, whose process
    /// no longer exists and which are older than `abandonedAfterSeconds` (a process in another pid
    /// namespace may be creating one right now: creation takes microseconds). Anything else, and every
    /// error, is left alone.
    static func removeAbandonedTemporaries(of path: String) {
        let directory = SlashSeparatedPath.directory(of: path)
        guard let name = SlashSeparatedPath.lastPart(of: path) else { return }
        let prefix = name + "."
        // Read strictly: a name that is not UTF-8, decoded with U+FFFD, named another file (the one spelled so).
        guard let names = try? DirectoryEntries.read(path: directory).names else { return }
        let now = time(nil)
        for name in names where name.hasPrefix(prefix) && name.hasSuffix(".tmp") {
            let middle = name.dropFirst(prefix.count).dropLast(".tmp".count).split(separator: ".", omittingEmptySubsequences: false)
            guard middle.count == 2, middle.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { (0x30...0x39).contains($0) } }),
                  let pid = Int32(middle[0]), pid > 0, pid != getpid() else { continue }
            let candidate = directory == "/" ? "/" + name : directory + "/" + name
            var info = stat()
            guard lstat(candidate, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(),
                  Int64(now).saturatingSubtracting(Int64(info.st_mtim.tv_sec)) > abandonedAfterSeconds else { continue }
            guard kill(pid, 0) != 0, errno == ESRCH else { continue }
            unlink(candidate)
        }
    }

    private enum Creation { case made, alreadyThere, notPermitted }

    /// Makes a complete lock file under a unique temporary name and links it into place, so the name
    /// only ever shows a fully initialised mutex. `link` fails when the name exists (another process was
    /// first, or something was planted there), and never follows a symbolic link.
    private static func create(_ path: String, forDatabase databasePath: String) throws(StoreError) -> Creation {
        let temporary = "\(path).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let descriptor = open(temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let number = errno
            if number == EACCES || number == EROFS || number == EPERM { return .notPermitted }
            throw openError(temporary, errno: number)
        }
        defer {
            close(descriptor)
            unlink(temporary)
        }
        shareLikeDatabase(descriptor, databasePath)
        guard ftruncate(descriptor, off_t(fileSize)) == 0, let mapping = map(descriptor) else {
            throw StoreError.io("cannot create the writer lock '\(path)': \(String(cString: strerror(errno))); "
                                + "check the directory is writable and the disk not full")
        }
        defer { munmap(mapping, fileSize) }
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        defer { pthread_mutexattr_destroy(&attributes) }
        let mutex = (mapping + mutexOffset).bindMemory(to: pthread_mutex_t.self, capacity: 1)
        guard pthread_mutexattr_setpshared(&attributes, Int32(PTHREAD_PROCESS_SHARED)) == 0,
              pthread_mutexattr_setrobust(&attributes, Int32(PTHREAD_MUTEX_ROBUST)) == 0,
              pthread_mutex_init(mutex, &attributes) == 0 else {
            throw StoreError.io("cannot initialise the writer lock '\(path)': this system lacks process-shared robust mutexes")
        }
        mapping.copyMemory(from: magic, byteCount: magic.count)
        if link(temporary, path) == 0 { return .made }
        let number = errno
        if number == EEXIST { return .alreadyThere }
        if number == EACCES || number == EROFS || number == EPERM { return .notPermitted }
        throw openError(path, errno: number)
    }

    /// Gives the new lock file the database's permission bits (less any execute bit) and group, and its
    /// owner when root, as SQLite does for its -wal and -shm files (`robust_open`, `robustFchown`).
    /// Best effort: where this user may not (not a member of the database's group), the file stays as
    /// made, and a user who cannot open it uses SQLite's locking alone.
    private static func shareLikeDatabase(_ descriptor: Int32, _ databasePath: String) {
        var database = stat()
        guard stat(databasePath, &database) == 0 else { return }
        if geteuid() == 0 {
            _ = fchown(descriptor, database.st_uid, database.st_gid)
        } else if database.st_gid != getegid() {
            _ = fchown(descriptor, uid_t.max, database.st_gid)  // uid -1: the owner stays
        }
        _ = fchmod(descriptor, database.st_mode & 0o666)
    }

    private static func map(_ descriptor: Int32) -> UnsafeMutableRawPointer? {
        let mapping = mmap(nil, fileSize, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0)
        guard let mapping, mapping != MAP_FAILED else { return nil }
        return mapping
    }

    private static func openError(_ path: String, errno number: Int32) -> StoreError {
        if number == ELOOP {
            return .io("'\(path)' is a symbolic link; jobctl does not follow links next to its database: "
                       + "remove it (jobctl creates the writer lock itself)")
        }
        return .io("cannot open the writer lock '\(path)': \(String(cString: strerror(number))); "
                   + "check the directory is writable")
    }

    // MARK: - Locking

    /// Takes the lock, sleeping in the kernel for at most `waitNs` while another thread or process
    /// holds it. A holder that died is recovered from (`EOWNERDEAD`, then `pthread_mutex_consistent`).
    func lock(waitingAtMostNs waitNs: UInt64) -> Outcome {
        precondition(!isHeld, "the writer lock is not recursive")
        var code = pthread_mutex_trylock(mutex)
        if code == EBUSY {
            // An absolute deadline on the realtime clock, what pthread_mutex_timedlock takes (the
            // monotonic pthread_mutex_clocklock is a GNU extension Swift's Glibc module does not
            // export); a wait too long to add up is capped at ~30 years.
            var deadline = timespec()
            clock_gettime(CLOCK_REALTIME, &deadline)
            let total = UInt64(deadline.tv_nsec) + min(waitNs, 1_000_000_000 * 1_000_000_000)
            deadline.tv_sec += Int(total / 1_000_000_000)
            deadline.tv_nsec = Int(total % 1_000_000_000)
            code = pthread_mutex_timedlock(mutex, &deadline)
        }
        switch code {
        case 0:
            isHeld = true
            contendedSinceNs = nil
            return .acquired
        case EOWNERDEAD:
            // The holder died holding it. Nothing is protected by the mutex itself (SQLite's journal
            // protects the data), so mark it consistent and go on as its owner.
            pthread_mutex_consistent(mutex)
            recoveredFromDeadOwner += 1
            isHeld = true
            contendedSinceNs = nil
            return .acquired
        case ETIMEDOUT, EBUSY:
            let now = DispatchTime.now().uptimeNanoseconds
            let since = contendedSinceNs ?? now
            contendedSinceNs = since
            if now - since >= Self.ownerCheckAfterNs, now - ownerLookedAtNs >= Self.ownerCheckEveryNs {
                ownerLookedAtNs = now
                // Marked dead, the mutex is this thread's at the next take (`EOWNERDEAD`), unless another
                // waiter takes it first.
                if markVanishedOwnerDead() { return lock(waitingAtMostNs: 0) }
            }
            return .timedOut
        default:
            return .unusable
        }
    }

    /// glibc's robust mutex keeps its owner's thread id in its first word, with these flags
    /// (https://man7.org/linux/man-pages/man2/get_robust_list.2.html, the kernel's futex.h).
    static let futexWaiters = Int32(bitPattern: 0x8000_0000)
    static let futexOwnerDied: Int32 = 0x4000_0000
    static let futexThreadIDMask: Int32 = 0x3FFF_FFFF

    /// When the mutex's owner cannot exist — no thread of its id in this pid namespace, and no other open
    /// file description of the lock file marked in use, so no process anywhere has the file open — marks
    /// it dead as the kernel marks a holder's that died (the id cleared, `FUTEX_OWNER_DIED` set, the
    /// waiters bit kept), in one compare-and-swap, so that nothing changed meanwhile is overwritten.
    /// Whether it did.
    func markVanishedOwnerDead() -> Bool {
        let word = (mapping + Self.mutexOffset).assumingMemoryBound(to: Int32.self)
        let observed = jobctl_atomic_load_int32(word)
        let owner = observed & Self.futexThreadIDMask
        // Free, or already marked dead (the next take recovers it).
        guard owner != 0, observed & Self.futexOwnerDied == 0 else { return false }
        // A live thread of that id (EPERM: one of another user) is no vanished owner.
        guard kill(owner, 0) != 0, errno == ESRCH else { return false }
        // The owner may live in another pid namespace: its process has the file open, marked in use.
        guard markedInUse, jobctl_open_file_lock_first_byte(descriptor, Int16(F_WRLCK)) == 0 else { return false }
        defer { _ = jobctl_open_file_lock_first_byte(descriptor, Int16(F_RDLCK)) }
        let dead = (observed & Self.futexWaiters) | Self.futexOwnerDied
        return jobctl_atomic_compare_exchange_int32(word, observed, dead) == 1
    }

    /// Releases the lock (nothing when this object does not hold it).
    func unlock() {
        guard isHeld else { return }
        isHeld = false
        pthread_mutex_unlock(mutex)
    }
}
