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
    public static func find(_ candidates: LeftoverCandidates, backend: any StorageBackend) -> [Orphan] {
        let inUse = LeftoverFiles.pathsInUse(candidates.unfinishedResumePoints)
        return candidates.finished.flatMap { job in
            let files = JobLocalFiles(jobID: job.id, kind: job.kind, destination: job.destination,
                                      resumePoint: job.resumePoint, finishedAtMs: job.finishedAtMs)
            return backend.leftovers(of: files, sparing: inUse).map { Orphan(file: $0, jobState: job.state) }
        }
    }

    /// Finds the leftovers of jobs finished at or after `finishedSince` (nil: all) in `store`.
    public static func find(in store: any JobStore, backend: any StorageBackend, finishedSince: Int64? = nil) throws(StoreError) -> [Orphan] {
        find(try store.leftoverCandidates(finishedSince: finishedSince), backend: backend)
    }
}

/// The worker's orphan sweep: at start it removes what final jobs left behind since the last sweep any
/// worker completed (a job cancelled or failed while no worker ran it, a worker killed before its first
/// checkpoint), then every `intervalMs` what the jobs finished since the previous sweep left, and once
/// more before a draining worker exits. Jobs this worker ends failed or cancelled clean up at once
/// (`TaskRunner`); the sweep catches the rest.
///
/// Each sweep looks at the final jobs finished since the previous one began, less `overlapMs`; the
/// first at those finished since the store's sweep watermark (`JobStore.sweepWatermark`), or at every
/// final job when no sweep has completed yet. A sweep that completes raises the watermark to its own
/// start less `overlapMs`, so a worker's start costs what finished since the last sweep, not what the
/// log ever held (20,000 finished downloads added ~170 ms to every worker's start). A sweep that fails
/// raises nothing, and the next one looks again from where it began. A leftover a sweep found but could
/// not remove (it changed meanwhile) is not looked for again; `jobctl orphans` lists every one.
final class OrphanSweeper: Sendable {
    private let store: any JobStore
    private let backend: any StorageBackend
    private let intervalMs: Int64
    /// Where removals and failures are reported (`orphan_removed`, `orphan_sweep_failed`).
    private let log: WorkerLog
    /// When the previous sweep began (nil before the first), and where the next one's window begins.
    private let state = Mutex<(lastStart: Int64?, nextSince: Since)>((nil, .watermark))

    /// The finish time from which a sweep looks at final jobs.
    private enum Since {
        /// The store's sweep watermark (every final job when there is none): a worker's first sweep.
        case watermark
        /// Jobs finished at or after this time (ms since 1970).
        case time(Int64)
    }

    /// Jobs finished this long before the previous sweep began are looked at again, so a job whose final
    /// event was written (by another process) while that sweep ran is not missed. The watermark a sweep
    /// leaves is as far before its start, for the same reason.
    static let overlapMs: Int64 = 60_000

    init(store: any JobStore, backend: any StorageBackend, intervalMs: Int64, log: WorkerLog) {
        self.store = store
        self.backend = backend
        self.intervalMs = intervalMs
        self.log = log
    }

    /// Sweeps when the first sweep has not run yet, `intervalMs` has passed since the last, or `force`.
    /// Removals and failures go to the worker's log; a failure never stops the worker. Called by the
    /// pool's loop, one sweep at a time.
    func sweepIfDue(now: Int64, force: Bool = false) async {
        let due: Since? = state.withLock { state in
            if let previous = state.lastStart {
                guard force || (intervalMs > 0 && now - previous >= intervalMs) else { return nil }
            }
            state.lastStart = now
            return state.nextSince
        }
        guard let since = due else { return }
        let backend = backend
        do {
            let candidates = try await store.run { store in
                switch since {
                case .watermark: try store.leftoverCandidates(finishedSince: try store.sweepWatermark())
                case .time(let time): try store.leftoverCandidates(finishedSince: time)
                }
            }
            // A look at every job finished since the last sweep, and removals that sync folders: not on
            // the cooperative pool, where the worker's loop heartbeats the leases.
            let removed = await BlockingFileWork.run {
                Orphans.find(candidates, backend: backend).filter { backend.remove($0.file) }
            }
            for orphan in removed { log.orphanRemoved(orphan.file, jobState: orphan.jobState, now: Clock.nowMs()) }
            let covered = now - Self.overlapMs
            try await store.run { store in try store.raiseSweepWatermark(to: covered) }
            state.withLock { $0.nextSince = .time(covered) }
        } catch {
            log.orphanSweepFailed("\(error)", now: Clock.nowMs())
        }
    }
}
