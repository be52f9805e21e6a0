import JobModel
import Synchronization

/// Where work that blocks on the disk runs: the `file://` backend's writes, and the sync and rename
/// that end every download to a file. Not the cooperative pool: its threads (one a core) run every
/// Swift task of the process, and one held in `fsync` holds back the store's answers and every other
/// transfer — sixteen downloads to a disk that takes a millisecond to sync kept both threads there.
enum FileIO {
    /// (A thread's name is at most 15 bytes on Linux.)
    static let pool = BlockingWorkPool(name: "jobctl-file-io", limit: threadLimit)

    /// The most pieces of such work at once in a process: a worker's largest `--concurrency`.
    static let threadLimit = 256

    /// What a piece of work is (for the tests that check where it ran).
    enum Work: String, Sendable {
        /// A download's final sync and rename.
        case commit
        /// A stopped download's sync (its bytes kept for the next attempt).
        case sync
        /// Reading back a partial download (a resumed prefix, hashes the stream could not give).
        case readBack
        /// Reading an upload's source again to hash it.
        case rehashSource
        /// Reading a local file to compare it with an object (`skip-identical`).
        case compare
        case other
    }

    /// The work run by the task that binds a journal here, and by its child tasks (tests).
    @TaskLocal static var journal: Journal?

    /// What `journal` collects.
    final class Journal: Sendable {
        private let entries = Mutex<[Work]>([])
        init() {}
        func record(_ work: Work) { entries.withLock { $0.append(work) } }
        var recorded: [Work] { entries.withLock { $0 } }
    }

    /// Runs `body` on a pool thread and returns what it returns.
    static func perform<T: Sendable>(_ work: Work, _ body: @escaping @Sendable () -> T) async -> T {
        journal?.record(work)
        return await withCheckedContinuation { continuation in
            pool.run { continuation.resume(returning: body()) }
        }
    }

    /// `perform` for work that fails with a `StorageError`.
    static func run<T: Sendable>(_ work: Work, _ body: @escaping @Sendable () throws(StorageError) -> T) async throws(StorageError) -> T {
        try await perform(work) { () -> Result<T, StorageError> in
            do throws(StorageError) { return .success(try body()) } catch { return .failure(error) }
        }.get()
    }
}

extension FileIO {
    /// `run` for work on values that are not `Sendable` but are the caller's alone: it waits for the
    /// work and touches them again only after it returns, so one thread uses them at a time.
    static func run<Value, T: Sendable>(_ work: Work, on value: Value,
                                        _ body: @escaping @Sendable (Value) throws(StorageError) -> T) async throws(StorageError) -> T {
        nonisolated(unsafe) let value = value
        return try await run(work) { () throws(StorageError) -> T in try body(value) }
    }
}

extension PartialFile {
    /// `commitUnlessTaken(replacing:)` on the file-I/O threads (`FileIO`): it syncs the file and its folder
    /// (nil: the destination was found taken under `replacing: false`, the file removed). On a
    /// filesystem kept in memory (tmpfs), where a sync returns at once, it runs here instead: the hand-off
    /// to a pool thread and back cost 2,000 small downloads there a fifth more time and CPU. Nor does it
    /// sync there: what such a filesystem holds does not outlive the machine's crash, the one thing a
    /// sync is for, and its `fsync` does nothing (a full filesystem fails the write itself) — two system
    /// calls a download saved.
    func commitOffPool(replacing: Bool = true) async throws(StorageError) -> String? {
        if onMemoryFilesystem { return try commitUnlessTaken(replacing: replacing, syncing: false) }
        return try await FileIO.run(.commit, on: self) { file throws(StorageError) -> String? in
            try file.commitUnlessTaken(replacing: replacing)
        }
    }

    /// `restartUnlessPrefixUnchanged(feeding:)` on the file-I/O threads (the prefix read back may be
    /// gigabytes), feeding the kept bytes to a stream of the whole file's hashes (of MD5 too when `md5`),
    /// returned when it hashed every kept byte; nil when nothing was checked or the file started over
    /// (the caller hashes what is kept itself). Made only for a checked prefix: most downloads keep none.
    func restartUnlessPrefixUnchangedOffPool(md5: Bool) async throws(StorageError) -> StreamChecksums? {
        guard checksPrefix else { return nil }
        let checksums = StreamChecksums(md5: md5)
        let check = try await FileIO.run(.readBack, on: (self, checksums)) { work throws(StorageError) -> PrefixCheck in
            let (file, checksums) = work
            var position: Int64 = 0
            let check = try file.restartUnlessPrefixUnchanged { bytes in
                checksums.feed(bytes, at: position)
                position += Int64(bytes.count)
            }
            if check != .unchanged { _ = checksums.finish() }  // its hashing, if any went off the thread, ends
            return check
        }
        return check == .unchanged ? checksums : nil
    }

    /// `sync()` on the file-I/O threads, or here on a filesystem kept in memory (see `commitOffPool`):
    /// a download stopped part-way keeps its bytes for the next attempt.
    func syncOffPool() async throws(StorageError) {
        if onMemoryFilesystem { return try sync() }
        try await FileIO.run(.sync, on: self) { file throws(StorageError) in try file.sync() }
    }
}

/// Local-file work outside the transfers that may block on the disk — finding and removing what final
/// jobs left behind (lookups, unlinks, folder syncs) — run off the cooperative pool, on `FileIO`'s
/// threads: the worker's loop, which heartbeats the leases, and every runner are tasks on that pool.
public enum BlockingFileWork {
    /// Runs `body` on a `FileIO` thread and returns what it returns.
    public static func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await FileIO.perform(.other, body)
    }
}
