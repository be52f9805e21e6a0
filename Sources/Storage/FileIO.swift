import JobModel

/// Where work that blocks on the disk runs: the `file://` backend's writes, and the sync and rename
/// that end every download to a file. Not the cooperative pool: its threads (one a core) run every
/// Swift task of the process, and one held in `fsync` holds back the store's answers and every other
/// transfer — sixteen downloads to a disk that takes a millisecond to sync kept both threads there.
enum FileIO {
    /// (A thread's name is at most 15 bytes on Linux.)
    static let pool = BlockingWorkPool(name: "jobctl-file-io", limit: threadLimit)

    /// The most pieces of such work at once in a process: a worker's largest `--concurrency`.
    static let threadLimit = 256

    /// Runs `body` on a pool thread and returns what it returns.
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws(StorageError) -> T) async throws(StorageError) -> T {
        let result: Result<T, StorageError> = await withCheckedContinuation { continuation in
            pool.run {
                do throws(StorageError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}

extension PartialFile {
    /// `commit(replacing:)` on the file-I/O threads (`FileIO`): it syncs the file and its folder. On a
    /// filesystem kept in memory (tmpfs), where a sync returns at once, it runs here instead: the hand-off
    /// to a pool thread and back cost 2,000 small downloads there a fifth more time and CPU.
    func commitOffPool(replacing: Bool = true) async throws(StorageError) -> String {
        if onMemoryFilesystem { return try commit(replacing: replacing) }
        // The caller waits for the result and touches the file only afterwards: one thread at a time.
        nonisolated(unsafe) let file = self
        return try await FileIO.run { () throws(StorageError) -> String in try file.commit(replacing: replacing) }
    }
}
