import Foundation
import JobModel
import StorePort
import Storage

/// The once-at-start check of a worker that would run `gs://` jobs without credentials: it says so in
/// one `no_credentials` warning naming what it looked for. Anonymous access is allowed (public
/// buckets), so this never stops the worker.
public enum MissingCredentials {
    /// Queued jobs looked at, newest first: the manifest submitted for this run, and a cost at start
    /// that does not grow with the queue. 10,000 took ~20 ms of the start of every worker process
    /// (SQLite matching 10,000 specs' text; four processes on one log paid it four times), 1,000 ~2 ms.
    public static let scanLimit = 1_000

    /// Logs the warning when `storage` sends `gs://` requests anonymously and a job in one of `queues`
    /// (every queue when nil), among the `scanLimit` newest queued jobs, is a `gs://` job. Reads the
    /// store only in that case, so a worker with credentials or an emulator pays nothing; a store error
    /// skips the warning (the pool reports store errors itself). Only specs whose text mentions `gs:`
    /// (in any case) are decoded: a `gs://` reference is stored as written, and its scheme is matched
    /// without case, so a spec without that text cannot name a GCS object.
    public static func warnIfNeeded(storage: StorageConfiguration, store: any JobStore, queues: [String]?,
                                    log: WorkerLog, now: Int64) {
        guard storage.sendsGCSRequestsAnonymously,
              let queued = try? store.queuedJobs(limit: scanLimit, specMentioning: "gs:") else { return }
        let waiting = queued.filter { job in
            (queues.map { $0.contains(job.queue) } ?? true) && job.spec.usesGCS
        }
        guard !waiting.isEmpty else { return }
        log.noCredentials(queuedJobs: waiting.count, lookedFor: StorageConfiguration.googleCredentialSources, now: now)
    }
}
