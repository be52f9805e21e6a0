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

/// The worker's orphan sweep: at start it removes what every final job left behind (a job cancelled
/// or failed while no worker ran it, a worker killed before its first checkpoint), then every
/// `intervalMs` what the jobs finished since the previous sweep left, and once more before a draining
/// worker exits. Jobs this worker ends failed or cancelled clean up at once (`TaskRunner`); the sweep
/// catches the rest.
final class OrphanSweeper: Sendable {
    private let store: any JobStore
    private let backend: any StorageBackend
    private let intervalMs: Int64
    /// Where removals and failures are reported (`orphan_removed`, `orphan_sweep_failed`).
    private let log: WorkerLog
    /// When the previous sweep began; nil before the first.
    private let lastSweepStart = Mutex<Int64?>(nil)

    /// Jobs finished this long before the previous sweep began are looked at again, so a job whose final
    /// event was written (by another process) while that sweep ran is not missed.
    static let overlapMs: Int64 = 60_000

    init(store: any JobStore, backend: any StorageBackend, intervalMs: Int64, log: WorkerLog) {
        self.store = store
        self.backend = backend
        self.intervalMs = intervalMs
        self.log = log
    }

    /// Sweeps when the first sweep has not run yet, `intervalMs` has passed since the last, or `force`.
    /// Removals and failures go to the worker's log; a failure never stops the worker.
    func sweepIfDue(now: Int64, force: Bool = false) async {
        let since: Int64?? = lastSweepStart.withLock { last in
            guard let previous = last else {
                last = now
                return .some(nil)
            }
            guard force || (intervalMs > 0 && now - previous >= intervalMs) else { return nil }
            last = now
            return .some(previous - Self.overlapMs)
        }
        guard case .some(let finishedSince) = since else { return }
        let backend = backend
        do {
            let candidates = try await store.run { store in try store.leftoverCandidates(finishedSince: finishedSince) }
            // A look at every job finished since the last sweep, and removals that sync folders: not on
            // the cooperative pool, where the worker's loop heartbeats the leases.
            let removed = await BlockingFileWork.run {
                Orphans.find(candidates, backend: backend).filter { backend.remove($0.file) }
            }
            for orphan in removed { log.orphanRemoved(orphan.file, jobState: orphan.jobState, now: Clock.nowMs()) }
        } catch {
            log.orphanSweepFailed("\(error)", now: Clock.nowMs())
        }
    }
}
