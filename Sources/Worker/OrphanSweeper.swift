import CFileSystem
import Foundation
import JobModel
import Storage
import StorePort
import Synchronization

/// A hidden file a final job left on local disk, with the state the job ended in.
public struct Orphan: Sendable, Equatable {
    public var file: LeftoverFile
    public var jobState: JobState

    public init(file: LeftoverFile, jobState: JobState) {
        self.file = file
        self.jobState = jobState
    }
}

/// Finds the leftovers of final jobs: what `jobctl orphans` lists and the worker's sweep removes.
public enum Orphans {
    /// The leftover files of the final jobs in `candidates` that exist now, as `backend` finds them
    /// (`StorageBackend.leftovers(of:sparing:)`): provably the job's, never a path an unfinished job's
    /// resume point names.
    ///
    /// `readAtMs` is this host's clock read before `candidates` were: a file modified after it may be a
    /// later attempt's (the job retried since), and is left alone. Not the job's `finished_at_ms`: that is
    /// the clock of whoever wrote the final event (a `jobctl cancel` on another machine, 30 s behind),
    /// and a partial download written by this host's worker before it looked "modified after the job
    /// finished" and was never found, by the sweeps, `orphans` or `archive`.
    public static func find(_ candidates: LeftoverCandidates, backend: any StorageBackend, readAtMs: Int64) -> [Orphan] {
        let inUse = LeftoverFiles.pathsInUse(candidates.unfinishedResumePoints)
        return candidates.finished.flatMap { job in
            let files = JobLocalFiles(jobID: job.id, kind: job.kind, destination: job.destination,
                                      resumePoint: job.resumePoint, finishedAtMs: readAtMs, leaseTokens: job.leaseTokens)
            return backend.leftovers(of: files, sparing: inUse).map { Orphan(file: $0, jobState: job.state) }
        }
    }

    /// Finds the leftovers of jobs finished at or after `finishedSince` (nil: all) in `store`.
    public static func find(in store: any JobStore, backend: any StorageBackend, finishedSince: Int64? = nil) throws(StoreError) -> [Orphan] {
        let readAtMs = Clock.nowMs()
        return find(try store.leftoverCandidates(finishedSince: finishedSince), backend: backend, readAtMs: readAtMs)
    }
}

/// The worker's orphan sweep: at start it removes what final jobs left behind since the last sweep any
/// worker completed (a job cancelled or failed while no worker ran it, a worker killed before its first
/// checkpoint), then every `intervalMs` what the jobs finished since the previous sweep left, and once
/// more before a draining worker exits. Jobs this worker ends failed or cancelled clean up at once
/// (`TaskRunner`); the sweep catches the rest.
///
/// Each sweep reads the final jobs that changed since the position where the previous one stopped
/// (`JobStore.leftoversSince`: on SQLite an event seq, exactly; on PostgreSQL a finish time, less
/// `LeftoverSweep.overlapMs`), or since this host's sweep watermark when another worker on this host
/// swept further meanwhile; the first reads from the watermark, or every final job when no sweep on this
/// host has completed yet. A sweep that completes raises the watermark to where it stopped, so a
/// worker's start costs what finished since the last sweep, not what the log ever held (100,000 finished
/// downloads added ~1 s to every worker's start), and of several workers draining one log, the last to
/// finish reads only what finished after the others' last sweeps. The watermark is the host's own: a
/// sweep removes files from this machine's disk only, and a job's partial download on another machine
/// waits for a sweep there. A sweep that fails raises nothing, and the next one reads again from where it
/// began. A leftover a sweep found but could not remove (it changed meanwhile) is not looked for again;
/// `jobctl orphans` reads every final job and lists it.
///
/// A job whose first run this worker claimed straight after its submission (no earlier attempt, no
/// resume point) and ended `succeeded` left nothing: its partial download, upload session or sidecar
/// temporary was made by that run (an own leftover at the name replaced) and renamed into place by its
/// success. The worker
/// notes such jobs (`noteLeftNothing`) and its sweeps skip them without reading them
/// (`JobStore.leftoversSince(position:now:skipping:)`): a draining worker's last sweep over 2,000 downloads
/// of its own spent ~25 ms reading their rows and looking for their partial files, ~6 % of the drain.
/// Jobs that other workers finished, or that this one finished otherwise, are read as before.
final class OrphanSweeper: Sendable {
    private let store: any JobStore
    private let backend: any StorageBackend
    /// The machine whose disk this sweep looks at: the key of its watermark.
    private let host: String
    private let intervalMs: Int64
    /// Where removals and failures are reported (`orphan_removed`, `orphan_sweep_failed`).
    private let log: WorkerLog
    /// When the previous sweep began (nil before the first), and where the next one reads from.
    private let state = Mutex<(lastStart: Int64?, next: Position)>((nil, .watermark))
    /// Jobs noted by `noteLeftNothing` since the last sweep began: the next one skips them.
    private let leftNothing = Mutex<Set<String>>([])

    /// At most this many noted jobs wait for a sweep (~100 bytes each); past it a job is not noted and its
    /// sweep reads it as any other.
    static let leftNothingLimit = 100_000

    /// Where a sweep reads from.
    private enum Position {
        /// The store's sweep watermark (every final job when there is none): a worker's first sweep.
        case watermark
        /// Where the previous complete sweep of this worker stopped.
        case stopped(Int64)
    }

    init(store: any JobStore, backend: any StorageBackend, host: String, intervalMs: Int64, log: WorkerLog) {
        self.store = store
        self.backend = backend
        self.host = host
        self.intervalMs = intervalMs
        self.log = log
    }

    /// Notes that `jobID`, of `kind`, ended `succeeded` in a run of this worker that was its first (see
    /// the type's documentation): the next sweep does not read it. Only kinds that make local files are
    /// noted.
    func noteLeftNothing(_ jobID: String, kind: JobKind) {
        switch kind {
        case .downloadFile, .uploadFile, .uploadData, .updateMetadata, .fetchURL:
            leftNothing.withLock { noted in
                if noted.count < Self.leftNothingLimit { noted.insert(jobID) }
            }
        case .downloadMemory, .getMetadata, .delete:
            break
        }
    }

    /// Sweeps when the first sweep has not run yet, `intervalMs` has passed since the last, or `force`.
    /// Removals and failures go to the worker's log. Returns the store's error when the sweep failed on
    /// one (nil otherwise): the pool stops on those no retry mends (a damaged database), as it does when
    /// a claim or a commit meets them; the others only wait for the next sweep. Called by the pool's
    /// loop, one sweep at a time.
    @discardableResult
    func sweepIfDue(now: Int64, force: Bool = false) async -> StoreError? {
        let due: (from: Position, periodic: Bool)? = state.withLock { state in
            let periodic = state.lastStart != nil && !force
            if let previous = state.lastStart {
                // As the pool's `isDue`: a clock stepped back is due now, not once it has caught up again.
                guard force || (intervalMs > 0 && (now - previous >= intervalMs || now < previous)) else { return nil }
            }
            state.lastStart = now
            return (state.next, periodic)
        }
        guard let (from, periodic) = due else { return nil }
        let (backend, host) = (backend, host)
        // Each of these became final before this sweep began, so its read finds them all: from then on
        // they are never read again, and a failed sweep only reads them next time.
        let skipping = leftNothing.withLock { noted in
            defer { noted.removeAll(keepingCapacity: false) }
            return noted
        }
        do {
            let (start, (candidates, reached)) = try await store.run { store in
                let watermark = try store.sweepWatermark(host: host)
                let start = switch from {
                case .watermark: watermark
                // Another worker on this host that swept further has looked at what lies between.
                case .stopped(let position): max(position, watermark ?? position)
                }
                return (start, try store.leftoversSince(position: start, now: now, skipping: skipping))
            }
            // A look at every job finished since the last sweep, and removals that sync folders: not on
            // the cooperative pool, where the worker's loop heartbeats the leases.
            let removed = await BlockingFileWork.run {
                let removed = Orphans.find(candidates, backend: backend, readAtMs: now).filter { backend.remove($0.file) }
                // Every periodic sweep (each `intervalMs`) also hands malloc's free pages back to the
                // kernel (see `FreedMemory`); not the first, at the worker's start, when there is nothing
                // to give back yet, nor a drain's last, as the process ends.
                if periodic { FreedMemory.release() }
                return removed
            }
            for orphan in removed { log.orphanRemoved(orphan.file, jobState: orphan.jobState, now: Clock.nowMs()) }
            // Nothing new since the last sweep (an idle worker every `intervalMs`): no write.
            if reached != start { try await store.run { store in try store.raiseSweepWatermark(host: host, to: reached) } }
            state.withLock { $0.next = .stopped(reached) }
            return nil
        } catch {
            log.orphanSweepFailed("\(error)", now: Clock.nowMs())
            return error as? StoreError
        }
    }
}

/// The memory malloc holds free, handed back to the kernel.
///
/// glibc gives each thread that allocates under contention an arena of its own (up to eight a core)
/// and keeps what an arena once held: a worker that ran for 16 minutes at concurrency 16 over a
/// mixed load settled near 70 MB resident for a live heap of 8–11 MB (the rest free inside the
/// arenas), and each sweep's list of jobs to skip raised the plateau once more. `malloc_trim(0)`
/// releases the free pages inside every arena, not only at their tops.
enum FreedMemory {
    /// Releases malloc's free pages; whether any were released.
    @discardableResult
    static func release() -> Bool { jobctl_release_free_memory() == 1 }
}
