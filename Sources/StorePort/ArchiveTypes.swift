import Foundation
import JobModel

// MARK: - Archiving finished jobs

/// What `jobctl archive` would move out of the log, read in one snapshot: the finished jobs, every
/// event of theirs exactly as stored, and the blobs their results reference.
public struct ArchiveSelection: Sendable, Equatable {
    /// Jobs that finished before this time (ms) were selected.
    public var beforeMs: Int64
    /// The jobs, oldest finish first.
    public var jobs: [ArchivedJob]
    /// Their events in seq order, `data` byte for byte.
    public var rows: [LogRow]
    /// The blobs their results reference, by ascending SHA-256.
    public var blobs: [ArchivedBlob]
    /// Jobs that finished before then but stay in the log, since jobs staying there wait for them
    /// (`ArchiveRemovalRules.withoutAwaited`).
    public var keptForDependants: Int

    /// Creates a selection.
    public init(beforeMs: Int64, jobs: [ArchivedJob], rows: [LogRow], blobs: [ArchivedBlob], keptForDependants: Int = 0) {
        self.beforeMs = beforeMs
        self.jobs = jobs
        self.rows = rows
        self.blobs = blobs
        self.keptForDependants = keptForDependants
    }

    /// Whether there is nothing to archive.
    public var isEmpty: Bool { jobs.isEmpty }

    /// The SHA-256 digests the `succeeded` events among `rows` reference (sorted, without repeats).
    public static func referencedBlobs(in rows: [LogRow]) throws(StoreError) -> [String] {
        var digests = Set<String>()
        for row in rows where row.type == EventType.succeeded.rawValue {
            let data = try StoreJSON.decode(EventData.self, row.data, what: "event \(row.seq) data")
            if let blob = data.result?.blob { digests.insert(blob.lowercased()) }
        }
        return digests.sorted()
    }
}

/// One job of an archive selection, as it was when selected: removal refuses a job that changed since.
public struct ArchivedJob: Sendable, Equatable {
    public var id: String
    /// The job's version (its last event's) when selected.
    public var version: Int
    public var state: JobState
    public var finishedAtMs: Int64

    /// Creates a job entry.
    public init(id: String, version: Int, state: JobState, finishedAtMs: Int64) {
        self.id = id
        self.version = version
        self.state = state
        self.finishedAtMs = finishedAtMs
    }
}

/// One blob of an archive selection.
public struct ArchivedBlob: Sendable, Equatable {
    /// SHA-256, lowercase hex.
    public var sha256: String
    public var data: Data

    /// Creates a blob entry.
    public init(sha256: String, data: Data) {
        self.sha256 = sha256
        self.data = data
    }
}

/// The SQL-free rules both adapters apply when they remove an archived selection.
public enum ArchiveRemovalRules {
    /// The refusal for a job that is no longer as it was selected (retried, or already removed).
    public static func changed(_ job: ArchivedJob, now found: (version: Int, state: String)?) -> StoreError? {
        guard let found else {
            return .invalidControl("job \(job.id) is no longer in the log (another archive removed it); nothing was removed: "
                + "run `jobctl archive` again to write a new file")
        }
        guard found.version == job.version, found.state == job.state.rawValue else {
            return .invalidControl("job \(job.id) changed after the archive file was written (now \(found.state), version "
                + "\(found.version)); nothing was removed: run `jobctl archive` again to write a new file")
        }
        return nil
    }

    /// `jobs` less every job a job staying in the log waits for (`after:`, a row of `job_dependencies`
    /// in `waits`), and in turn what those wait for. Such a job failed or was cancelled (a dependency
    /// that succeeds drops its waits): its waiting dependants were cancelled with it, but one retried
    /// since waits for it again, and only a `retry` of the dependency can still let it run. Archived
    /// with its wait removed, the dependant would run though its dependency never succeeded; with its
    /// wait kept, it would wait for a job no longer in the log.
    ///
    /// One walk from the waits of the jobs staying, through each wait once: a chain of N waits takes N
    /// steps (sweeping all the waits until nothing changed took N sweeps of N, minutes for 20,000).
    public static func withoutAwaited(_ jobs: [ArchivedJob], waits: [DependencyRow]) -> [ArchivedJob] {
        var selected = Set(jobs.map(\.id))
        var waitedForBy: [String: [String]] = [:]
        for wait in waits { waitedForBy[wait.job, default: []].append(wait.dependsOn) }
        var staying = waits.compactMap { selected.contains($0.job) ? nil : $0.job }
        while let job = staying.popLast() {
            for dependency in waitedForBy.removeValue(forKey: job) ?? [] where selected.remove(dependency) != nil {
                staying.append(dependency)
            }
        }
        return selected.count == jobs.count ? jobs : jobs.filter { selected.contains($0.id) }
    }

    /// The refusal for a selected job that a job staying in the log has come to wait for since the
    /// selection (a dependant retried, a job submitted `after:` it).
    public static func awaited(_ wait: DependencyRow) -> StoreError {
        .invalidControl("job \(wait.dependsOn) is waited for by job \(wait.job), which stays in the log (retried or submitted "
            + "after the archive file was written); nothing was removed: run `jobctl archive` again to write a new file")
    }
}

extension LogRow {
    /// The row as a typed event, or why it is not one (`corrupt`): how a fold reads rows that did not
    /// come from a store (an archive file).
    public var decoded: Result<JobEvent, StoreError> {
        guard let eventType = EventType(rawValue: type) else {
            return .failure(.corrupt("event \(seq) has unknown type '\(type)'"))
        }
        do throws(StoreError) {
            let wire = try StoreJSON.decode(EventData.self, data, what: "event \(seq) data")
            do {
                return .success(try JobEvent(seq: seq, jobID: jobID, version: version, type: eventType, atMs: atMs, actor: actor,
                                             leaseToken: leaseToken, data: wire))
            } catch {
                return .failure(.corrupt("event \(seq): \(error)"))
            }
        } catch {
            return .failure(error)
        }
    }
}

// MARK: - Expiring blobs

/// What `expireBlobs` removed (or, in a dry run, would remove).
public struct BlobExpiry: Sendable, Equatable {
    /// The SHA-256 of each blob, ascending.
    public var digests: [String]
    /// Their total size in bytes.
    public var bytes: Int64

    /// Creates a report.
    public init(digests: [String], bytes: Int64) {
        self.digests = digests
        self.bytes = bytes
    }
}

/// A blob removed by `jobctl archive --blobs-before`: the events that produced it keep its hash.
public struct ExpiredBlob: Sendable, Equatable {
    public var sha256: String
    public var size: Int64
    public var expiredAtMs: Int64

    /// Creates a record.
    public init(sha256: String, size: Int64, expiredAtMs: Int64) {
        self.sha256 = sha256
        self.size = size
        self.expiredAtMs = expiredAtMs
    }
}

// MARK: - Clocks

/// What a store can tell about clocks other than this process's: for the worker's clock-skew warning.
public struct StoreClockReading: Sendable, Equatable {
    /// The database server's own clock (ms), when it has one apart from this machine's (PostgreSQL).
    public var databaseNowMs: Int64?
    /// The time of the newest event in the log (ms), written by whichever process's clock appended it.
    public var newestEventAtMs: Int64?

    /// Creates a reading.
    public init(databaseNowMs: Int64?, newestEventAtMs: Int64?) {
        self.databaseNowMs = databaseNowMs
        self.newestEventAtMs = newestEventAtMs
    }
}
