import Foundation
import JobModel
import Synchronization

/// What a running transfer reports.
public enum TransferEvent: Sendable, Equatable {
    /// Bytes moved so far (may be reported often; the caller coalesces).
    case progress(bytesDone: Int64, bytesTotal: Int64?)
    /// A point the transfer can resume from that the server confirmed (upload offset) or that is synced
    /// to disk (download bytes). The caller persists it before relying on it.
    case checkpoint(ResumePoint, bytesTotal: Int64?)
}

/// Why a transfer was asked to stop.
public enum StopReason: String, Sendable, Equatable, Codable {
    /// `jobctl pause`: keep the resume point.
    case pause
    /// `jobctl cancel`: remove partial local files; the job fails with `cancelled`.
    case cancel
    /// The worker is shutting down: keep the resume point and release the lease.
    case shutdown
    /// The worker lost its lease: another worker may own the job now; stop writing.
    case leaseLost
}

/// A thread-safe stop flag that the transfer checks from curl's progress callback (or between chunks),
/// and the job the transfer runs for.
///
/// A control may carry a deadline (`limited(toSeconds:)`): every exchange run under it is cut off when
/// the deadline passes, and none starts after it.
public final class TransferControl: Sendable {
    private let reason = Mutex<StopReason?>(nil)
    /// Stop requests go to, and are read from, the parent when there is one.
    private let parent: TransferControl?
    /// When the attempt must end (the job's `timeout:`), if it has a limit.
    let deadline: TransferDeadline?
    /// The job's own bandwidth limit (`max_rate:`), if it has one: one bucket for every exchange of the
    /// attempt, so the slices of a sliced download share the job's rate rather than each taking all of it.
    let rateLimit: SharedBandwidth?
    /// The job the transfer belongs to (nil for a transfer run outside the queue). The hidden files it
    /// creates carry this id in their names (`.NAME.<job id>.jobctl-partial`, `.NAME.<job id>.<lease token>.jobctl-upload`),
    /// which is what lets the orphan sweep prove whose a leftover is.
    public let jobID: String?
    /// The lease token of the attempt (nil outside the queue, or when the caller has none). A file that
    /// an attempt renames into place (a `file://` sidecar's temporary, a `file://` upload's session) carries it
    /// beside the job's id, so two live attempts of one job — a worker that lost the lease, frozen then
    /// woken, and the retry — never share the name.
    public let leaseToken: Int64?

    /// A control for the transfer of job `jobID`, attempt `leaseToken`.
    public init(jobID: String? = nil, leaseToken: Int64? = nil) {
        self.jobID = jobID
        self.leaseToken = leaseToken
        parent = nil
        deadline = nil
        rateLimit = nil
    }

    private init(parent: TransferControl, deadline: TransferDeadline?, maxRate: Int64?) {
        self.parent = parent
        self.deadline = deadline
        rateLimit = maxRate.map { SharedBandwidth(rate: $0) }
        jobID = parent.jobID
        leaseToken = parent.leaseToken
    }

    /// This control with a deadline `seconds` from now (the job's `timeout:`) and the job's `max_rate:`,
    /// or itself when neither is given. Stops requested on either are seen by both.
    func limited(toSeconds seconds: Int?, maxRate: Int64? = nil) -> TransferControl {
        guard seconds != nil || maxRate != nil else { return self }
        return TransferControl(parent: self, deadline: seconds.map { TransferDeadline(seconds: $0) }, maxRate: maxRate)
    }

    /// Waits until the job's own `max_rate:` bucket is out of debt (at once without one, or when a stop
    /// is asked for): a transfer takes each step before waiting for it, so one of a step or less —
    /// every transfer of 16 KiB at `max_rate: 1k` — finished at once, and a longer one a step early; an
    /// attempt ends when its bytes were due at the job's rate. `--bwlimit`'s shared debt is paid by the
    /// transfers after it instead.
    func waitOutOwnRate() async {
        while stopReason == nil, let rateLimit {
            let wait = rateLimit.millisecondsUntilReady(at: .now)
            guard wait > 0 else { return }
            try? await Task.sleep(for: .milliseconds(min(wait, 100)))
        }
    }

    /// `waitOutOwnRate` for a thread that may block (a `file://` copy's).
    func waitOutOwnRateBlocking() {
        while stopReason == nil, let rateLimit {
            let wait = rateLimit.millisecondsUntilReady(at: .now)
            guard wait > 0 else { return }
            usleep(useconds_t(min(wait, 100) * 1000))
        }
    }

    /// Asks the transfer to stop. The first reason wins; whoever waits on the transfer's behalf (the
    /// curl engine asleep in `curl_multi_poll`) is woken to see it at once.
    public func stop(_ newReason: StopReason) {
        if let parent { return parent.stop(newReason) }
        reason.withLock { current in
            if current == nil { current = newReason }
        }
        for wake in wakers.withLock({ Array($0.handlers.values) }) { wake() }
    }

    /// Who to wake when a stop is requested, by key.
    private let wakers = Mutex<(next: Int, handlers: [Int: @Sendable () -> Void])>((0, [:]))

    /// Calls `wake` whenever a stop is requested from now on (and at once if one already was), until
    /// `removeWaker` is called with the returned key.
    func addWaker(_ wake: @escaping @Sendable () -> Void) -> Int {
        if let parent { return parent.addWaker(wake) }
        let key = wakers.withLock { state in
            state.next += 1
            state.handlers[state.next] = wake
            return state.next
        }
        if stopReason != nil { wake() }
        return key
    }

    /// Stops calling the waker added under `key`.
    func removeWaker(_ key: Int) {
        if let parent { return parent.removeWaker(key) }
        _ = wakers.withLock { $0.handlers.removeValue(forKey: key) }
    }

    /// The reason a stop was requested, if one was.
    public var stopReason: StopReason? {
        if let parent { return parent.stopReason }
        return reason.withLock { $0 }
    }
}

/// The moment an attempt must end: the job's `timeout:` counted from the start of the attempt.
struct TransferDeadline: Sendable {
    /// The limit as the job wrote it, in seconds (for messages).
    let seconds: Int
    let end: ContinuousClock.Instant

    init(seconds: Int, from start: ContinuousClock.Instant = .now) {
        self.seconds = seconds
        end = start.advanced(by: .seconds(seconds))
    }

    func hasPassed(at now: ContinuousClock.Instant = .now) -> Bool { now >= end }

    /// Whole milliseconds left (0 once passed).
    var remainingMilliseconds: Int64 {
        let left = ContinuousClock.now.duration(to: end)
        guard left > .zero else { return 0 }
        let (seconds, attoseconds) = left.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// The retryable error of an attempt that ran past the deadline.
    func error(url: String) -> StorageError {
        StorageError(.unknown, "the job's \(DurationText.format(seconds)) timeout passed before the transfer finished; "
                        + "raise the job's 'timeout' if the transfer needs longer",
                     url: redactedURL(url), retryable: true)
    }
}

/// How a transfer ended when it did not throw.
public indirect enum TransferOutcome: Sendable, Equatable {
    case finished(JobResult)
    /// Stopped on request; the resume point (if any) is where the next attempt continues.
    case stopped(StopReason, ResumePoint?)
}

/// The one interface the task runner uses to run any of the five job kinds.
public protocol StorageBackend: Sendable {
    /// Runs `spec`, continuing from `resumePoint` when given. Failures throw a typed `StorageError`
    /// (its `retryable` flag says whether another attempt may help).
    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome

    /// Runs `spec` as the `async` form does and hands its outcome to `completion`, called exactly once,
    /// from whichever thread the transfer ends on (at once, before returning, when it cannot start). It
    /// returns without waiting for the transfer. A backend that does its work on threads of its own
    /// (the local backend's I/O queue) calls `completion` there: a task runner then gets the outcome
    /// without a task of its own to await the transfer, two thread hops fewer per transfer. The
    /// default runs the `async` form in a detached task.
    func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void,
                 completion: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void)

    /// The hidden temporary files a final job left on local disk: a download's partial file, a `file://`
    /// upload's session file, a `file://` sidecar's temporary. Only files whose name carries the job's id,
    /// or that are the very file its resume point recorded (by identity), are listed — never a file merely named like ours — and never
    /// one in `inUse` (paths that unfinished jobs' resume points name) or modified after the job finished.
    /// The default finds downloads' partials and `file:///` sessions and sidecar temporaries; backends
    /// that know where named local buckets live find those too.
    func leftovers(of job: JobLocalFiles, sparing inUse: Set<String>) -> [LeftoverFile]

    /// Removes `leftover` while it is still the file that was found (same path, same identity); returns
    /// whether it was removed.
    func remove(_ leftover: LeftoverFile) -> Bool
}

extension StorageBackend {
    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void,
                        completion: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void) {
        completing(completion) { () async throws(StorageError) in
            try await perform(spec, resumingFrom: resumePoint, control: control, report: report)
        }
    }

    public func leftovers(of job: JobLocalFiles, sparing inUse: Set<String>) -> [LeftoverFile] {
        LeftoverFiles(localBucketsDirectory: nil).find(job, sparing: inUse)
    }

    public func remove(_ leftover: LeftoverFile) -> Bool {
        LeftoverFiles.remove(leftover)
    }

    /// Removes what a job that ended failed or cancelled left on local disk (its partial download or
    /// upload session, recorded or not, or a killed attempt's sidecar temporary): such a job never resumes
    /// from them. Returns what was removed.
    @discardableResult
    public func discardResumePoint(of job: JobLocalFiles) -> [LeftoverFile] {
        leftovers(of: job, sparing: []).filter { remove($0) }
    }
}

/// Runs `transfer` in a detached task and hands its outcome to `completion`: the completion form of
/// `perform` for work that only has an `async` form.
func completing(_ completion: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void,
                _ transfer: @escaping @Sendable () async throws(StorageError) -> TransferOutcome) {
    Task.detached(priority: WorkPriority.task) {
        do throws(StorageError) {
            completion(.success(try await transfer()))
        } catch {
            completion(.failure(error))
        }
    }
}
