import Foundation
import JobModel
import StorePort
import Storage

/// The once-at-start check of a worker that would run `gs://` jobs without credentials: it says so in
/// one `no_credentials` warning naming what it looked for. Anonymous access is allowed (public
/// buckets), so this never stops the worker.
public enum MissingCredentials {
    /// Queued jobs looked at, in claim order: the jobs this worker takes first, and a cost at start that
    /// does not grow with the queue. 10,000 took ~20 ms of the start of every worker process (SQLite
    /// matching 10,000 specs' text; four processes on one log paid it four times), 1,000 ~1 ms. (The
    /// window was the newest queued jobs until SQLite was found sorting every queued row to find them:
    /// ~12 ms a start with 10,000 queued, BENCHMARKS.md.)
    public static let scanLimit = 1_000

    /// Logs the warning when `storage` sends `gs://` requests anonymously and a job in one of `queues`
    /// (every queue when nil), among the `scanLimit` next queued jobs in claim order, is a `gs://` job.
    /// Reads the store only in that case, so a worker with credentials or an emulator pays nothing; a
    /// store error skips the warning (the pool reports store errors itself). Only specs whose text
    /// mentions `gs:` (in any case) are decoded: a `gs://` reference is stored as written, and its scheme
    /// is matched without case, so a spec without that text cannot name a GCS object.
    public static func warnIfNeeded(storage: StorageConfiguration, store: any JobStore, queues: [String]?,
                                    log: WorkerLog, now: Int64) {
        guard storage.sendsGCSRequestsAnonymously,
              let queued = try? store.nextQueuedJobs(limit: scanLimit, specMentioning: "gs:") else { return }
        let waiting = queued.filter { job in
            (queues.map { $0.contains(job.queue) } ?? true) && job.spec.usesGCS(under: storage)
        }
        guard !waiting.isEmpty else { return }
        log.noCredentials(queuedJobs: waiting.count, lookedFor: StorageConfiguration.googleCredentialSources, now: now)
    }
}
