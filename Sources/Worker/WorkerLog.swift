import Foundation
import JobLifecycle
import JobModel
import Storage
import StorePort
import Synchronization
import Tasks

/// The worker's log: one line per job transition the pool makes, plus warnings about the worker
/// itself. The pool calls one method per transition; what the line says is decided here and how it
/// looks by `WorkerLogFormatter`, so neither leaks into the pool's logic.
public final class WorkerLog: Sendable {
    /// Lines below this level are dropped (`-q`: warning, default: info, `-v`: debug).
    public let minimumLevel: WorkerLogLevel
    public let formatter: WorkerLogFormatter
    /// A commit (a group commit of the task's events) slower than this is reported as `slow_commit`.
    public let slowCommitMs: Int64
    private let write: @Sendable (String) -> Void
    private let lock = Mutex(())
    /// Lines recorded before `worker_started`, written right after it (see `init`'s `holdingUntilStarted`);
    /// nil once they were (or when nothing is held).
    private let held: Mutex<String?>
    /// Whether `held` is nil: the check on every line, without the lock.
    private let holding: Atomic<Bool>
    /// Set when `worker_stopped` is recorded: it closes the log, and a line recorded after it (a run the
    /// stop left behind, whose commit gave up on a lock another process held: `slow_commit` 2 ms after
    /// the summary, in a CI run) is dropped.
    private let closed = Atomic<Bool>(false)
    /// Lines being recorded now: `worker_stopped` waits for them, so none is written after it.
    private let recording = Atomic<Int>(0)

    /// A log writing each line (with its line feed) through `write`, by default to standard error from
    /// a thread of its own (`LogLineWriter`: a reader that stops reading cannot stop the worker). The
    /// lines of one claim come in one call, each with its line feed.
    ///
    /// With `holdingUntilStarted`, what is logged before `worker_started` (the warnings of a worker's start:
    /// `open_files_limit`, `clock_skew`, `no_credentials`) is written just after that line, so that
    /// `worker_started` opens each run's log; should the worker stop before it starts, `flush` writes them.
    public init(minimumLevel: WorkerLogLevel = .info, formatter: WorkerLogFormatter = WorkerLogFormatter(),
                slowCommitMs: Int64 = 1_000, holdingUntilStarted: Bool = false, write: (@Sendable (String) -> Void)? = nil) {
        held = Mutex(holdingUntilStarted ? "" : nil)
        holding = Atomic(holdingUntilStarted)
        self.minimumLevel = minimumLevel
        self.formatter = formatter
        self.slowCommitMs = slowCommitMs
        self.write = write ?? { line in LogLineWriter.standardError.write(line) }
        flushes = write == nil
        if write == nil {
            LogLineWriter.standardError.setDroppedNotice { [formatter] count, reason in
                Self.droppedNotice(count, reason: reason, formatter: formatter)
            }
        }
    }

    /// The orphan sweep removed `file`, left by a job that ended `jobState`.
    public func orphanRemoved(_ file: LeftoverFile, jobState: JobState, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .info, event: .orphanRemoved, jobID: file.jobID, fields: [
            ("file", .text(file.kind.rawValue)), ("path", .text(file.path)), ("bytes", .integer(file.size)),
            ("job_state", .text(jobState.rawValue)),
        ]))
    }

    /// The orphan sweep failed (it runs again at its next turn).
    public func orphanSweepFailed(_ error: String, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .orphanSweepFailed, fields: [
            ("error", .text(error)), ("action", .text("the sweep runs again later")),
        ]))
    }

    /// The `log_lines_dropped` line for `count` lines, as `formatter` writes it.
    static func droppedNotice(_ count: Int, reason: String = LogLineWriter.notReadReason, formatter: WorkerLogFormatter,
                              atMs: Int64 = Clock.nowMs()) -> String {
        var line = ""
        formatter.appendLine(WorkerLogEntry(atMs: atMs, level: .warning, event: .logLinesDropped, fields: [
            ("lines", .integer(Int64(count))), ("reason", .text(reason)),
        ]), to: &line)
        return line
    }

    /// Whether the writer is the default one: `flush` has it to wait for, and it takes lines whole under a
    /// lock of its own (see `emit`).
    private let flushes: Bool

    /// Waits (up to `seconds`) until the lines logged so far are written: before the process exits, or
    /// writes to standard error of its own.
    public func flush(waitingAtMost seconds: Double = 2) {
        releaseHeld()
        if flushes { LogLineWriter.standardError.flush(waitingAtMost: seconds) }
    }

    /// A log that writes nothing.
    public static let silent = WorkerLog(minimumLevel: .error, write: { _ in })

    /// Whether lines of `level` are written.
    public func isEnabled(_ level: WorkerLogLevel) -> Bool { level >= minimumLevel }

    /// Formats and writes `entry` when its level is enabled; lines from concurrent tasks never interleave.
    /// Nothing is written after `worker_stopped`.
    public func record(_ entry: WorkerLogEntry) {
        switch entry.event {
        case .workerStopped:
            // Closed first, then the lines already past the check below are let out: the summary is last.
            closed.store(true, ordering: .sequentiallyConsistent)
            while recording.load(ordering: .sequentiallyConsistent) > 0 { sched_yield() }
            recordOpen(entry)
            return
        case .workerStarted:
            // A log opens again with the next run's `worker_started` (tests run pools one after another on one log).
            closed.store(false, ordering: .sequentiallyConsistent)
        default:
            break
        }
        recording.wrappingAdd(1, ordering: .sequentiallyConsistent)
        defer { recording.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
        guard !closed.load(ordering: .sequentiallyConsistent) else { return }
        recordOpen(entry)
    }

    private func recordOpen(_ entry: WorkerLogEntry) {
        guard isEnabled(entry.level) || entry.event == .workerStarted else { return }
        var line = ""
        if isEnabled(entry.level) { formatter.appendLine(entry, to: &line) }
        if holding.load(ordering: .acquiring) {
            let kept = held.withLock { held -> Bool in
                guard held != nil else { return false }
                if entry.event == .workerStarted {
                    line += held ?? ""
                    held = nil
                    holding.store(false, ordering: .releasing)
                    return false
                }
                held? += line
                return true
            }
            if kept { return }
        }
        if !line.isEmpty { emit(line) }
    }

    /// Writes the lines held for `worker_started` (see `init`) now, and holds no more.
    private func releaseHeld() {
        guard holding.load(ordering: .acquiring) else { return }
        let lines = held.withLock { held -> String in
            defer { held = nil; holding.store(false, ordering: .releasing) }
            return held ?? ""
        }
        if !lines.isEmpty { emit(lines) }
    }

    /// Hands whole lines to the writer, so that no other line comes between them. The default writer
    /// takes them whole under a lock of its own; a `write` given to `init` is called under this log's
    /// lock. (One lock a line, not two: the tasks that finish together after a group commit all log at
    /// once, and contended for both.)
    private func emit(_ lines: String) {
        if flushes {
            write(lines)
        } else {
            lock.withLock { _ in write(lines) }
        }
    }

    // MARK: - The worker

    func workerStarted(owner: String, concurrency: Int, leaseMs: Int64, queues: [String]?, drain: Bool, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .info, event: .workerStarted, fields: [
            ("owner", .text(owner)), ("concurrency", .integer(Int64(concurrency))), ("lease_ms", .integer(leaseMs)),
            ("queues", .text(queues?.joined(separator: ",") ?? "*")), ("drain", .text(drain ? "yes" : "no")),
        ]))
    }

    /// The worker exits with an error (`message`, exit status `exitCode`) instead of running or finishing.
    public func workerFailed(_ message: String, exitCode: Int32, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .error, event: .workerFailed, fields: [
            ("error", .text(message)), ("exit_code", .integer(Int64(exitCode))),
        ]))
    }

    func workerStopped(_ summary: WorkerSummary, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .info, event: .workerStopped, fields: [
            ("claimed", .integer(Int64(summary.claimed))), ("succeeded", .integer(Int64(summary.succeeded))),
            ("failed", .integer(Int64(summary.failed))), ("retried", .integer(Int64(summary.retried))),
            ("paused", .integer(Int64(summary.paused))), ("cancelled", .integer(Int64(summary.cancelled))),
            ("released", .integer(Int64(summary.released))), ("abandoned", .integer(Int64(summary.abandoned))),
            ("rescued", .integer(Int64(summary.rescued))), ("rescued_failed", .integer(Int64(summary.rescuedFailed))),
            ("events_written", .integer(Int64(summary.eventsWritten))), ("group_commits", .integer(Int64(summary.groupCommits))),
        ] + (summary.leftWaiting > 0 ? [("left_waiting", .integer(Int64(summary.leftWaiting)))] : [])))
    }

    /// A drain ended with jobs of its queues still queued, waiting for a job that does not finish in it.
    func drainLeftWaiting(_ left: LeftWaiting, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .drainLeftWaiting, fields: [
            ("jobs", .integer(Int64(left.count))), ("first", .text(left.first)), ("held_by", .text(left.holder)),
            ("reason", .text(left.reason)),
            ("action", .text("the drain ran every job it could; these wait for that job to succeed")),
        ]))
    }

    /// A shutdown signal arrived: the first pauses transfers and releases leases, a second exits at once.
    public func signalReceived(_ number: Int32, exitingNow: Bool, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .signalReceived, fields: [
            ("signal", .integer(Int64(number))),
            ("action", .text(exitingNow ? "exiting now" : "pausing transfers and releasing leases (again to exit at once)")),
        ]))
    }

    /// The worker's clock is off from the database's (see `ClockSkew`).
    /// At start: opening the log upgraded its schema to `to` (migrations `firstMigration` to `to`), which
    /// older jobctls cannot open.
    public func logUpgraded(firstMigration: Int, to: Int, _ meaning: String, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .logUpgraded, fields: [
            ("to_schema", .integer(Int64(to))), ("first_migration", .integer(Int64(firstMigration))), ("action", .text(meaning)),
        ]))
    }

    public func clockSkew(_ skew: ClockSkew, now: Int64) {
        let direction = skew.aheadMs > 0 ? "ahead of" : "behind"
        let what = skew.source == .databaseClock ? "the database server's clock is" : "the newest event in the log is dated"
        record(WorkerLogEntry(atMs: now, level: .warning, event: .clockSkew, fields: [
            ("source", .text(skew.source.rawValue)), ("skew_ms", .integer(skew.aheadMs)),
            ("action", .text("\(what) \(abs(skew.aheadMs) / 1000)s \(direction) this worker's clock: leases, retry times and "
                             + "event times depend on it; synchronise the clocks (NTP)")),
        ]))
    }

    /// At start: the open-files limit (already raised to its hard ceiling) is below what `concurrency`
    /// transfers may need; transfers beyond it would fail with "too many open files".
    public func openFilesLimitLow(_ limit: OpenFilesLimit, concurrency: Int, running: Int, now: Int64) {
        let needed = OpenFilesLimit.needed(concurrency: concurrency)
        record(WorkerLogEntry(atMs: now, level: .warning, event: .openFilesLimit, fields: [
            ("limit", .integer(Int64(clamping: limit.soft))), ("concurrency", .integer(Int64(concurrency))),
            ("needed", .integer(Int64(clamping: needed))), ("running", .integer(Int64(running))),
            ("action", .text("the open-files limit \(limit.soft) is below the \(needed) that --concurrency \(concurrency) may need, "
                             + "and this process may not raise it: it runs \(running == 1 ? "one transfer" : "\(running) transfers") at a time; raise it (`ulimit -n`, "
                             + "LimitNOFILE= in a systemd unit) or lower --concurrency")),
        ]))
    }

    /// At start: `SSLKEYLOGFILE` names `path`. libcurl (with OpenSSL) appends every TLS session's secrets
    /// there, as browsers do for debugging: whoever can read the file can decrypt the worker's traffic,
    /// the bearer tokens sent to Cloud Storage included. Honoured, as by the curl tool, and said.
    public func tlsKeyLog(path: String, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .tlsKeyLog, fields: [
            ("path", .text(path)),
            ("action", .text("SSLKEYLOGFILE is set: every TLS session's keys are written to this file, and whoever can read it can "
                             + "decrypt this worker's traffic, tokens included; unset it unless you are debugging TLS")),
        ]))
    }

    /// At start: `queuedJobs` `gs://` jobs wait and none of `lookedFor` gave credentials; they run
    /// anonymously, which only public buckets allow.
    func noCredentials(queuedJobs: Int, lookedFor: [String], now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .noCredentials, fields: [
            ("queued_gs_jobs", .integer(Int64(queuedJobs))),
            ("looked_for", .text(lookedFor.joined(separator: ", "))),
            ("action", .text("no Google credentials found: gs:// requests go out anonymously, which only public buckets "
                             + "allow; set one of these for private buckets")),
        ]))
    }

    /// Unfinished jobs (`jobs`, by id, with the type of one event of each this jobctl does not know)
    /// that claims and rescues leave alone: a newer jobctl wrote events to them, which may mean "hold this
    /// job", and running them as if those events were not there could do what they forbid.
    func newerEventsLeftAlone(_ jobs: [String: String], now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .newerEvents, fields: [
            ("jobs", .integer(Int64(jobs.count))),
            ("types", .text(PassedOver.quotedNames(jobs.values))),
            ("first", .text(jobs.keys.sorted().first ?? "")),
            ("action", .text("left alone: a newer jobctl wrote events of types this jobctl does not know to these jobs; "
                             + "upgrade this worker to run them")),
        ]))
    }

    /// A running job got an event of a type this jobctl does not know (a newer jobctl wrote it): its run
    /// stops without an outcome, as on a lost lease, and its lease is left to run out for a newer worker.
    func newerEventStoppedRun(jobID: String, type: String, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .newerEvents, jobID: jobID, fields: [
            ("jobs", .integer(1)),
            ("types", .text(PassedOver.quotedNames([type]))),
            ("action", .text("stopped without an outcome: a newer jobctl wrote an event of a type this jobctl does not know "
                             + "to this running job; its lease is left to run out for a newer worker: upgrade this worker")),
        ]))
    }

    func storeError(_ error: any Error, consecutive: Int, stopping: Bool = false, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: stopping ? .error : .warning, event: .storeError, fields: [
            ("error", .text(Self.describe(error))), ("consecutive", .integer(Int64(consecutive))),
            ("action", .text(stopping ? "stopping" : "retrying")),
        ]))
    }

    /// `error` as a worker's log says it. A write whose COMMIT went unanswered says what the worker does
    /// about it: its description's advice (check `jobctl list` before running the command again) is for
    /// a command's user, and a worker finds out itself (a job's write is looked for in the log before it
    /// is written again, a claim's jobs are taken up, a renewal is made again).
    static func describe(_ error: any Error) -> String {
        guard case .commitUnconfirmed(let message)? = error as? StoreError else { return String(describing: error) }
        return message + "; the server may have committed the transaction before the connection went: this worker finds "
            + "out for itself before writing again (`write_landed` says a job's write had landed)"
    }

    /// A heartbeat could not renew the leases of the `leases` jobs held (the first failure of a streak;
    /// the next renewal comes `everyMs` later); the first of them runs out in `leaseLeftMs`.
    func leasesNotRenewed(_ error: any Error, leases: Int, leaseLeftMs: Int64, everyMs: Int64, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .storeError, fields: [
            ("error", .text(Self.describe(error))), ("leases", .integer(Int64(leases))),
            ("lease_left_ms", .integer(max(0, leaseLeftMs))),
            ("action", .text("the running jobs' leases were not renewed: trying again every \(everyMs) ms (said again only after one "
                             + "succeeds); should they run out first, the rescue takes the jobs back")),
        ]))
    }

    /// A task's event could not be written (the store failed, not refused it) and is tried again while
    /// the lease holds.
    func writeRetrying(_ error: StoreError, jobID: String, kind: JobKind, event: EventType, attempt: Int, delayMs: Int64,
                       leaseExpiresAtMs: Int64, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .storeError, jobID: jobID, kind: kind, fields: [
            ("error", .text(Self.describe(error))), ("event", .text(event.rawValue)),
            ("consecutive", .integer(Int64(attempt))), ("retry_in_ms", .integer(delayMs)),
            ("lease_left_ms", .integer(max(0, leaseExpiresAtMs - now))),
            ("action", .text("retrying the write while the lease holds")),
        ]))
    }

    /// A write that failed (`failure`) is in the log after all, as this worker's event under this lease:
    /// the try committed and only its answer was lost. The job goes on as written, not abandoned.
    func writeLanded(jobID: String, kind: JobKind, event: EventType, seq: Int64?, failure: StoreError, now: Int64) {
        var fields: [(String, WorkerLogValue)] = [("event", .text(event.rawValue))]
        if let seq { fields.append(("seq", .integer(seq))) }
        fields += [("failure", .text(Self.describe(failure))),
                   ("action", .text("the earlier try had committed; carrying on as written"))]
        record(WorkerLogEntry(atMs: now, level: .warning, event: .writeLanded, jobID: jobID, kind: kind, fields: fields))
    }

    /// Reports a commit that took `elapsedMs` when that is over the threshold.
    func commitTook(_ elapsedMs: Int64, jobID: String, kind: JobKind, event: EventType, now: Int64) {
        guard elapsedMs >= slowCommitMs else { return }
        record(WorkerLogEntry(atMs: now, level: .warning, event: .slowCommit, jobID: jobID, kind: kind, fields: [
            ("event", .text(event.rawValue)), ("commit_ms", .integer(elapsedMs)), ("threshold_ms", .integer(slowCommitMs)),
        ]))
    }

    // MARK: - Job transitions

    /// The jobs one claim took, a `claimed` line each in claim order, handed to `write` in one call (one
    /// system call for the batch instead of one a job); no other line comes between them.
    func claimed(_ jobs: [ClaimedJob], leaseMs: Int64, now: Int64) {
        guard isEnabled(.info), !jobs.isEmpty else { return }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(jobs.count * 256)
        for job in jobs {
            formatter.appendLine(Self.claimedEntry(job.record, token: job.token, leaseMs: leaseMs, now: now), toBytes: &bytes)
        }
        emit(String(decoding: bytes, as: UTF8.self))
    }

    private static func claimedEntry(_ record: JobRecord, token: Int64, leaseMs: Int64, now: Int64) -> WorkerLogEntry {
        // Room for all seven fields at once: growing the array a field at a time copied it twice a line.
        var fields: [(String, WorkerLogValue)] = []
        fields.reserveCapacity(7)
        fields.append(("attempt", .integer(Int64(record.attempts))))
        fields.append(("max_attempts", .integer(Int64(record.maxAttempts))))
        fields.append(("queue", .text(record.queue)))
        fields.append(("lease_token", .integer(token)))
        fields.append(("lease_ms", .integer(leaseMs)))
        if let source = record.spec.source { fields.append(("source", .text(source))) }
        if let destination = record.spec.destination { fields.append(("destination", .text(destination))) }
        return WorkerLogEntry(atMs: now, level: .info, event: .claimed, jobID: record.id, kind: record.kind, fields: fields)
    }

    /// The task's `started` event was written: `resumed` when it continues from a resume point (not one
    /// of a download whose bytes were dropped: that attempt starts at byte 0). Returns the `from_bytes`
    /// logged (nil: `started`), which a later checkpoint holding fewer contradicts (`restarted`).
    @discardableResult
    func started(jobID: String, kind: JobKind, progress: TransferProgress, now: Int64) -> Int64? {
        let resumed = progress.resumePoint.map { !$0.holdsNoDownloadedBytes } ?? false || (progress.bytesDone ?? 0) > 0
        var fields: [(String, WorkerLogValue)] = []
        if let attempt = progress.attempt { fields.append(("attempt", .integer(Int64(attempt)))) }
        if resumed { fields.append(("from_bytes", .integer(progress.bytesDone ?? 0))) }
        if let total = progress.bytesTotal { fields.append(("bytes_total", .integer(total))) }
        record(WorkerLogEntry(atMs: now, level: .info, event: resumed ? .resumed : .started, jobID: jobID, kind: kind, fields: fields))
        return resumed ? progress.bytesDone ?? 0 : nil
    }

    /// An attempt logged `resumed … from_bytes=loggedFrom` wrote a checkpoint holding fewer bytes: the
    /// transfer found the earlier bytes unusable only once it ran (its partial file replaced, truncated
    /// or another inode, the object changed, the server ignoring the range, an upload session lost) and
    /// goes on from `point`'s — byte 0 for a dropped download. Said at once, so that no reader of the
    /// log takes the `resumed` line for a resume that did not happen (the success's `moved_bytes` and
    /// rate already count from the checkpoint).
    func restarted(jobID: String, kind: JobKind, loggedFrom: Int64, point: ResumePoint, bytesTotal: Int64?, now: Int64) {
        var fields: [(String, WorkerLogValue)] = [("from_bytes", .integer(point.bytesDone)),
                                                  ("dropped_bytes", .integer(loggedFrom - point.bytesDone))]
        if let bytesTotal { fields.append(("bytes_total", .integer(bytesTotal))) }
        record(WorkerLogEntry(atMs: now, level: .info, event: .restarted, jobID: jobID, kind: kind, fields: fields))
    }

    func progress(jobID: String, kind: JobKind, progress: TransferProgress, now: Int64) {
        var fields: [(String, WorkerLogValue)] = [("bytes", .integer(progress.bytesDone ?? 0))]
        if let total = progress.bytesTotal { fields.append(("bytes_total", .integer(total))) }
        record(WorkerLogEntry(atMs: now, level: .debug, event: .progress, jobID: jobID, kind: kind, fields: fields))
    }

    /// The outcome of a run the pool started at `startedAtMs`, continuing from `resumedFrom` bytes that
    /// an earlier attempt moved: the rate is of the bytes this run moved (a 5 MB upload under `max_rate:
    /// 2M` that resumed at 4.3 MB read "15 MiB/s"), `bytes` the whole object's.
    func finished(jobID: String, kind: JobKind, outcome: TaskRunOutcome, startedAtMs: Int64, resumedFrom: Int64 = 0, now: Int64) {
        let durationMs = max(0, now - startedAtMs)
        var fields: [(String, WorkerLogValue)] = []
        fields.reserveCapacity(6)  // the most any outcome below adds but a failure's error fields
        let event: WorkerLogEvent
        var level = WorkerLogLevel.info
        switch outcome {
        case .succeeded(let result) where kind.movesNoBytes:
            // get-metadata, update-metadata, delete and fetch-url move no bytes: no size or rate to report
            // (fetch-url's "bytes=10 rate=714 B/s" were its object's size over the time a URL took).
            event = .succeeded
            fields.append(("duration_ms", .integer(durationMs)))
            if let deleted = result.deleted { fields.append(("deleted", .text(deleted))) }
        case .succeeded(let result) where result.skipped == true:
            // `if_exists: skip` (or skip-identical) found the destination in place: nothing moved, and the
            // line says so — it read `bytes=13399 rate="12.8 MiB/s"`, as if the file had been sent.
            event = .succeeded
            fields.append(("skipped", .text("yes")))
            fields.append(("bytes", .integer(result.size ?? result.object?.knownSize ?? 0)))
            fields.append(("moved_bytes", .integer(0)))
            fields.append(("duration_ms", .integer(durationMs)))
            if let path = result.path { fields.append(("path", .text(path))) }
        case .succeeded(let result):
            event = .succeeded
            let bytes = result.size ?? result.object?.knownSize ?? 0
            fields.append(("bytes", .integer(bytes)))
            let moved = bytes - min(bytes, max(0, resumedFrom))
            if moved < bytes { fields.append(("moved_bytes", .integer(moved))) }
            fields.append(("duration_ms", .integer(durationMs)))
            let seconds = Double(max(1, durationMs)) / 1000
            // The size may be the server's word (a transfer skipped for the object found in place): a
            // rate past Int64 ended the worker.
            let perSecond = (Double(moved) / seconds).clampedInt64
            fields.append(("rate", .text(ByteSize.format(perSecond) + "/s")))
            fields.append(("bytes_per_second", .integer(perSecond)))
            if let path = result.path { fields.append(("path", .text(path))) }
        case .failed(let error):
            event = .failed
            level = .error
            fields += Self.errorFields(error)
            fields.append(("duration_ms", .integer(durationMs)))
        case .retryScheduled(let atMs, let error):
            event = .retryScheduled
            level = .warning
            fields.append(("delay_ms", .integer(max(0, atMs - now))))
            fields.append(("retry_at", .text(RFC3339.string(atMs))))
            // A Retry-After longer than the policy honours: the wait above is the cap, not the server's.
            if let cap = RetryPolicy.default.cappedRetryAfterMs(error.retryAfter), let asked = error.retryAfter {
                fields.append(("retry_after_s", .integer(Int64(min(asked.rounded(.up), Double(Int64.max / 2))))))
                fields.append(("retry_after_capped_ms", .integer(cap)))
            }
            fields += Self.errorFields(error)
        case .paused(let point):
            event = .paused
            fields.append(("duration_ms", .integer(durationMs)))
            if let point { fields.append(("resume_at_bytes", .integer(point.bytesDone))) }
        case .cancelled:
            event = .cancelled
            fields.append(("duration_ms", .integer(durationMs)))
        case .released(let point):
            event = .released
            fields.append(("duration_ms", .integer(durationMs)))
            if let point { fields.append(("resume_at_bytes", .integer(point.bytesDone))) }
        case .abandoned(let reason):
            event = .abandoned
            level = .warning
            fields.append(("reason", .text(reason)))
        }
        record(WorkerLogEntry(atMs: now, level: level, event: event, jobID: jobID, kind: kind, fields: fields))
    }

    /// A job whose lease had expired (its worker died or stalled), taken back by this worker's rescue:
    /// `outcome` is where the rescue left it — `queued` for another attempt, or ended (`failed` on its last
    /// attempt, an error line; `cancelled` or `paused` for a request pending on it).
    func rescued(_ job: RescuedJob, now: Int64) {
        let record = job.record
        var fields: [(String, WorkerLogValue)] = [
            ("holder", .text(job.holder)), ("outcome", .text(record.state.rawValue)),
            ("attempt", .integer(Int64(record.attempts))), ("max_attempts", .integer(Int64(record.maxAttempts))),
        ]
        let level: WorkerLogLevel
        if record.state == .failed {
            level = .error
            if let error = record.error { fields += Self.errorFields(error) }
        } else {
            level = .warning
        }
        self.record(WorkerLogEntry(atMs: now, level: level, event: .rescued, jobID: record.id, kind: record.kind, fields: fields))
    }

    func leaseLost(jobID: String, kind: JobKind?, token: Int64, now: Int64) {
        record(WorkerLogEntry(atMs: now, level: .warning, event: .leaseLost, jobID: jobID, kind: kind, fields: [
            ("lease_token", .integer(token)), ("action", .text("stopping the transfer")),
        ]))
    }

    private static func errorFields(_ error: StorageError) -> [(String, WorkerLogValue)] {
        var fields: [(String, WorkerLogValue)] = [("error", .text(error.code.name)), ("error_code", .integer(Int64(error.code.rawValue)))]
        if let status = error.httpStatus { fields.append(("http_status", .integer(Int64(status)))) }
        fields.append(("message", .text(error.message)))
        return fields
    }
}
