import Glibc
import JobModel
import Synchronization

/// A download's checkpoint syncs, run on `FileIO`'s threads instead of the curl engine's.
///
/// Every HTTP and `gs://` transfer of a process is driven by one engine thread. A checkpoint's `fsync`
/// (every `FileSink.checkpointInterval` bytes of a download to disk) held that thread for as long as the
/// sync took — 2–4 ms on this machine's disk, far longer on one whose write-back is throttled — and every
/// other transfer with it: a 512 MiB download to disk held it ~135 ms in all (52 syncs) while 2,000 small
/// uploads waited their turn on the same thread. Here the engine hands the sync over and goes on. The
/// sync runs on a duplicate of the file's descriptor and makes durable every byte written before it
/// began, so the checkpoint it reports afterwards (taken when it was handed over) is as true as before.
///
/// At most one sync runs and one waits: a checkpoint due while another waits replaces it (the later
/// sync covers the earlier bytes), so a disk slower than the network costs checkpoints, never memory or
/// the engine's time. A checkpoint's report goes out from the sync's thread once its sync returned
/// (the runner keeps the larger of a late checkpoint's bytes and the progress reported meanwhile). After
/// a sync fails nothing more is reported — a later `fsync` may succeed without the lost bytes — and the
/// failure ends the download at its next write or when it settles (`FileSink`). `settle()` returns once
/// no sync runs or waits, so the download's last reports come after every checkpoint's.
final class BackgroundSyncs: Sendable {
    private struct Sync {
        let descriptor: Int32
        let deliver: @Sendable () -> Void
    }

    /// A sync that failed.
    struct Failure: Sendable {
        let error: StorageError
        let lackOfSpace: Bool
        /// Whether the download's partial file goes, as for a failed download no attempt will use: for
        /// lack of space, or a failure not worth retrying.
        var removesPartial: Bool { lackOfSpace || !error.retryable }
    }

    private struct State {
        var running = false
        var waiting: Sync?
        var failure: Failure?
        var settled: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())
    /// The file's path, for a failure's message.
    private let path: String

    init(path: String) {
        self.path = path
    }

    /// Syncs `descriptor` (a duplicate, which this closes) after the sync running now, if any, and then
    /// calls `deliver` when it succeeded. A sync still waiting is dropped: its descriptor closed, its
    /// report not made.
    func sync(_ descriptor: Int32, then deliver: @escaping @Sendable () -> Void) {
        let sync = Sync(descriptor: descriptor, deliver: deliver)
        let startNow = state.withLock { state in
            guard state.running else {
                state.running = true
                return true
            }
            if let dropped = state.waiting { _ = Glibc.close(dropped.descriptor) }
            state.waiting = sync
            return false
        }
        if startNow { FileIO.pool.run { [self] in run(sync) } }
    }

    /// The first sync that failed, and whether it failed for lack of space; nil while none did.
    var failure: Failure? {
        state.withLock { $0.failure }
    }

    /// Returns once no sync runs or waits.
    func settle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = state.withLock { state in
                if !state.running { return true }
                state.settled.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// A `FileIO` thread: `first`, then every sync that waits meanwhile.
    private func run(_ first: Sync) {
        var next: Sync? = first
        while let sync = next {
            let code: Int32? = fdatasync(sync.descriptor) == 0 ? nil : errno
            _ = Glibc.close(sync.descriptor)
            let deliver = state.withLock { state -> Bool in
                if let code, state.failure == nil {
                    state.failure = Failure(error: LocalFiles.error(code, "syncing", path: path, context: .destination),
                                            lackOfSpace: LocalFiles.isLackOfSpace(code))
                }
                return state.failure == nil
            }
            if deliver { sync.deliver() }
            let (following, waiters) = state.withLock { state -> (Sync?, [CheckedContinuation<Void, Never>]) in
                if let waiting = state.waiting {
                    state.waiting = nil
                    return (waiting, [])
                }
                state.running = false
                defer { state.settled = [] }
                return (nil, state.settled)
            }
            for waiter in waiters { waiter.resume() }
            next = following
        }
    }
}
