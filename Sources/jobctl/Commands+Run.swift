import Foundation
import JobLifecycle
import JobModel
import Storage
import StorePort
import Worker

extension Commands {
    /// What the worker refuses in its metrics settings before it starts (a usage error, exit 64): an
    /// address that is not loopback without --metrics-allow-remote (or the file's `metrics_allow_remote`),
    /// since the endpoint has no authentication, and --metrics-allow-remote given without an address.
    /// `jobctl config` asks it of the configuration file's settings, so the two cannot disagree.
    static func metricsProblem(_ arguments: ParsedArguments, _ context: Context) throws -> UsageError? {
        let allowRemote = Options.metricsAllowRemote.spec.long
        guard let address = try arguments.value(Options.metrics) else {
            // The file's `metrics_allow_remote: true` asks nothing of a worker that serves no metrics.
            if arguments[Options.metricsAllowRemote], !arguments.filledFromFile.contains(allowRemote) {
                return UsageError("--metrics-allow-remote needs --metrics HOST:PORT")
            }
            return nil
        }
        guard !address.isLoopback, !arguments[Options.metricsAllowRemote] else { return nil }
        // Named as given: `metrics:` at its place in a configuration file, or --metrics.
        let named = context.configuration.name(of: Options.metrics.spec, given: arguments)
        let fromFile = arguments.filledFromFile.contains(Options.metrics.spec.long)
        return UsageError("\(named) \(address) is not a loopback address and the endpoint has no authentication; "
                          + "use 127.0.0.1, or add --metrics-allow-remote\(fromFile ? " (metrics_allow_remote: true in the file)" : "") "
                          + "to serve it on \(address.host) anyway")
    }

    static let worker = CommandSpec(
        name: "worker",
        abstract: "Run jobs: a long-running pool that claims jobs under leases.",
        options: [Options.concurrency, Options.claimAhead, Options.workerQueue, Options.drain, Options.lease, Options.stallTimeout,
                  Options.minRate, Options.logFormat, Options.quiet, Options.verbose, Options.metrics, Options.metricsAllowRemote,
                  Options.bandwidthLimit, Options.slicedThreshold, Options.slices, Options.json.help("Print the exit summary as JSON.")],
        discussion: """
        Run as many worker processes on one database as you like. SIGTERM, SIGINT or SIGHUP (SIGINT and SIGHUP not when started ignoring them: `worker &` in a script, nohup) stops claiming, pauses
        running transfers at their resume point, releases their leases and exits 0 within 10 seconds — also
        when the signal arrives while the worker is still starting; a second signal exits at once (130).
        With --drain the worker exits once no job is queued or running: 0 when every job it ran ended
        well, 2 when any of them failed — or when its rescue failed a job whose last attempt died with
        another worker — so `jobctl submit jobs.yaml && jobctl worker --drain` works in scripts. Jobs of its
        queues left queued waiting (after:) for a job that cannot finish in the drain (paused, or in a queue
        it does not take) do not hold it and do not change its exit status: a drain_left_waiting warning
        counts them and names one and the job that holds it, and worker_stopped adds left_waiting=N. When the event log refuses writes (its disk full, its file read-only), a worker retries;
        a drain with nothing running stops after a lease's length of refusals and exits 1 saying so (the
        jobs it held return to the queue when their leases expire). Storage settings come from the environment: STORAGE_EMULATOR_HOST,
        GOOGLE_OAUTH_ACCESS_TOKEN or JOBCTL_TOKEN_COMMAND, else GOOGLE_APPLICATION_CREDENTIALS (a
        service-account key or authorized-user file; else gcloud's application-default file), else
        GCE_METADATA_HOST, else the metadata server on a Google Compute Engine machine (its DMI product
        name); with none of these and gs:// jobs queued, one no_credentials warning at start (public
        buckets work anonymously); JOBCTL_CHUNK_SIZE, JOBCTL_RESUMABLE_THRESHOLD, JOBCTL_STALL_TIMEOUT,
        JOBCTL_MIN_RATE, JOBCTL_BUCKETS, JOBCTL_REFUSE_EXECUTABLES, JOBCTL_CA_BUNDLE (else SSL_CERT_FILE / SSL_CERT_DIR),
        JOBCTL_SLICED_THRESHOLD, JOBCTL_SLICES; a bad value stops the worker before it starts.

        Claiming ahead: besides the jobs it runs (--concurrency), a worker holds up to --claim-ahead more,
        claimed and leased, and starts one the moment a transfer returns, so claims share commits with other
        jobs' outcomes. While jobs finish fast the buffer grows to what finished in the last 100 ms (up to
        sixteen times --claim-ahead, at most 256: held jobs cost memory); it claims ahead only while every
        running transfer started less than a second ago, and gives a held job back after a third of the
        lease. --claim-ahead 0 claims only for free slots: for long transfers shared by many workers.

        Sliced downloads: a download-file job of a gs:// object of at least --sliced-threshold (default
        150MiB, as gcloud storage) fetches the object's generation in --slices parallel Range requests
        (default 4) into one partial file, checks each slice's CRC32C combined against the object's, and
        checkpoints every slice's offset, so a restart fetches only what each slice still lacks. A job
        asking for MD5 (checksums: [md5]) downloads in one stream, since MD5 cannot be combined.

        Logs go to standard error, one line per job transition: claimed, started or resumed (restarted
        when a resumed attempt drops bytes it resumed from: found unusable, or dropped as it ends), paused,
        retry_scheduled (with the delay and error code), succeeded (bytes, duration, rate), failed,
        cancelled, lease_lost, released, abandoned, rescued (a dead worker's job taken back: outcome queued, or failed on its
        last attempt, cancelled or paused); and warnings: store_error, write_landed, slow_commit,
        signal_received, drain_left_waiting, log_upgraded (at start: opening the log upgraded its schema, which older jobctls cannot open),
        clock_skew, no_credentials, newer_events (jobs with events of types a newer jobctl wrote
        are left alone), tls_key_log (SSLKEYLOGFILE is set), open_files_limit (the soft open-files limit is raised to the hard one at
        start; this says when that is below what --concurrency may need, and the worker runs only the transfers that fit; below 68 it does not start),
        log_lines_dropped, orphan_sweep_failed; orphan_removed names a file the sweep of final jobs' leftovers removed, and
        worker_started and worker_stopped (the summary) open and close the log. --log-format json prints one JSON object per line: time, time_ms, level, event,
        job, kind, fields; a worker that cannot start or go on then says why in one more, worker_failed (error, exit_code). -q keeps only warnings and errors, -v adds progress. Text lines are coloured
        only on a terminal (never with NO_COLOR or --no-color) and carry no time when standard error is the
        journal (JOURNAL_STREAM names it: run by systemd, journald stamps each line). URLs in log lines are redacted.

        --metrics 127.0.0.1:9464 serves Prometheus metrics (text format 0.0.4) at /metrics: job counts by
        queue and state, transfers and bytes by kind and outcome, durations, retries, lease losses and
        rescues, store commit latency and events per commit, whether the store answers. It has no authentication, so only a loopback address is accepted
        unless --metrics-allow-remote is given; a port already in use stops the worker before it starts.
        """
    ) { arguments, context in
        let requested = try arguments.value(Options.concurrency) ?? 4
        let leaseMs = try arguments.value(Options.lease) ?? 30_000
        let queues = try arguments.values(Options.workerQueue)
        let drain = arguments[Options.drain]
        let claimAhead = try arguments.value(Options.claimAhead)
        let log = try workerLog(arguments, context)
        // The log's lines (written from a thread of their own) before anything this command or `main`
        // writes to standard error itself, and before the process exits.
        defer { log.flush() }
        // A failure from here on (a bad setting, no database, a metrics port taken) is a line of the log's
        // own format: in JSON lines, one more of them.
        if log.formatter.format == .json {
            FailureReport.set { message, exitCode in
                log.workerFailed(message, exitCode: exitCode, now: Clock.nowMs())
                log.flush()
            }
        }
        // Before the store opens, so that nothing is sized by the old limit. A limit below what the
        // concurrency needs runs as many transfers as fit: out of descriptors, libdispatch's thread
        // monitor traps (a worker at `ulimit -n 16` crashed with SIGILL) and a failed WAL open left it
        // hanging, deaf to SIGTERM. One that fits no transfer at all stops the worker before it starts.
        var concurrency = requested
        if let limit = OpenFilesLimit.raiseSoftLimit(), limit.soft < OpenFilesLimit.needed(concurrency: requested) {
            let fitting = OpenFilesLimit.fittingConcurrency(limit.soft)
            guard fitting >= 1 else {
                throw CommandFailure("the open-files limit \(limit.soft) is below the \(OpenFilesLimit.needed(concurrency: 1)) a worker needs "
                                     + "to run one transfer beside its store and log, and this process may not raise it; raise it "
                                     + "(`ulimit -n`, LimitNOFILE= in a systemd unit)")
            }
            concurrency = fitting
            log.openFilesLimitLow(limit, concurrency: requested, running: fitting, now: Clock.nowMs())
        }
        if let keyLog = context.environment["SSLKEYLOGFILE"], !keyLog.isEmpty {
            log.tlsKeyLog(path: keyLog, now: Clock.nowMs())
        }
        var configuration = WorkerConfiguration(concurrency: concurrency, queues: queues.isEmpty ? nil : queues,
                                                leaseMs: leaseMs, drain: drain, claimAhead: claimAhead)
        let textLog = log.formatter.format == .text
        // Storage settings are checked before the event log is opened: a bad one stops the worker at once.
        var storage: StorageConfiguration
        do throws(StorageError) {
            storage = try context.storageConfiguration()
        } catch { throw CommandFailure(error.message) }
        // A flag wins over the variable (and the file); a job's message about the limit names it then.
        if let stall = try arguments.value(Options.stallTimeout) {
            storage.stallTimeout = stall
            storage.origins["JOBCTL_STALL_TIMEOUT"] = .flag("--stall-timeout")
        }
        if let rate = try arguments.value(Options.minRate) {
            storage.minRate = rate
            storage.origins["JOBCTL_MIN_RATE"] = .flag("--min-rate")
        }
        if let rate = try arguments.value(Options.bandwidthLimit) { storage.bandwidth = SharedBandwidth(rate: rate) }
        if let threshold = try arguments.value(Options.slicedThreshold) { storage.slicedThreshold = threshold }
        if let count = try arguments.value(Options.slices) { storage.sliceCount = count }
        // Under a Type=notify unit: READY=1 once started, STOPPING=1, STATUS=, the watchdog's pings.
        let notifier: ServiceNotifier?
        do throws(WorkerError) {
            notifier = try ServiceNotifier.fromEnvironment(ServiceEnvironment.taken)
        } catch { throw CommandFailure(error.message) }
        // The loop's rest after a store error (up to 5 s) is no wait on the store: under a watchdog of a few
        // seconds it is kept to a quarter of the interval, so that the turns it separates still feed it.
        if let pingEveryMs = notifier?.watchdogEveryMs { configuration.errorRestLimitMs = min(configuration.errorRestLimitMs, max(1, pingEveryMs / 2)) }
        let metricsAddress = try arguments.value(Options.metrics)
        if let problem = try metricsProblem(arguments, context) { throw problem }
        // A worker outlives the reader of its log: when that pipe breaks (a log shipper restarted, `| head`)
        // its lines are dropped and its jobs go on, instead of SIGPIPE ending the process mid-transfer
        // with leases held. The event log is the record; the log lines only tell about it.
        signal(SIGPIPE, SIG_IGN)
        // Before any credential is read (a token command runs at the first gs:// job): no core dump holds them.
        CoreDumps.refuseIfHoldingSecrets(storage, postgres: context.usesPostgres, environment: context.environment)
        // Its summary's output failing (the last thing it writes) makes its exit status say so, nothing more.
        StandardOutput.keepRunningOnFailure()
        // A statement left unanswered for a lease's length (at least 10 s) has cost the worker its leases
        // anyway: the session is given up and opened again rather than waited on for ever.
        let answerTimeoutMs = max(Int64(leaseMs), 10_000)
        let store = try context.openStore(worker: true, answerTimeoutMs: answerTimeoutMs)
        if let upgrade = Context.upgrade(by: store) { log.logUpgraded(firstMigration: upgrade.first, to: upgrade.to, Context.upgradeText(upgrade), now: Clock.nowMs()) }
        let before = Clock.nowMs()
        if let reading = try? store.clockReading() {
            let after = Clock.nowMs()
            if let skew = ClockSkew.check(reading, nowMs: before + (after - before) / 2) { log.clockSkew(skew, now: after) }
        }
        MissingCredentials.warnIfNeeded(storage: storage, store: store, queues: configuration.queues, log: log, now: Clock.nowMs())
        let metrics = WorkerMetrics()
        let pool = WorkerPool(store: store, backend: StorageRouter(configuration: storage), configuration: configuration,
                              log: log, metrics: metrics)
        // SQLite's busy timeout is 30 s; a PostgreSQL call waits at most the answer timeout.
        // Kept only for the probes `--metrics` serves: the loop's turns are thousands a second in a drain.
        let health = metricsAddress == nil ? nil : WorkerHealth(storeWaitMs: context.usesPostgres ? answerTimeoutMs : 30_000)
        var metricsServer: MetricsServer?
        if let metricsAddress {
            let exporter = MetricsExporter(metrics: metrics, store: store)
            // A turn may wait on the store longer than the stall limit, each of its calls within the
            // store's limits (see `WorkerPool.isWaitingOnItsStore`): alive, not ready.
            let waitingOnStore: @Sendable () -> Bool = { [weak pool] in pool?.isWaitingOnItsStore(forAtLeastMs: 1_000) ?? false }
            do throws(WorkerError) {
                metricsServer = try MetricsServer(address: metricsAddress, body: { exporter.render() }, probe: { probe in
                    guard let health else { return (true, "ok\n") }
                    switch probe {
                    case .live: return health.live(waitingOnStore: waitingOnStore)
                    case .ready: return health.ready(storeUp: exporter.storeUp(), writesRefused: metrics.storeWrites.refusal(),
                                                     waitingOnStore: waitingOnStore)
                    }
                })
            } catch { throw CommandFailure(error.message) }
        }
        // A fault of this process (libcurl that does not load, a thread refused) stops the worker and
        // gives its jobs back, attempts uncharged, rather than failing each job it meets.
        LocalFaults.onFault { [weak pool] reason in pool?.stopForLocalFault(reason) }
        defer { LocalFaults.onFault(nil) }
        // While a turn of the loop waits on the store within the limits the store sets, past the
        // watchdog's interval (a silent PostgreSQL server, a lock another process holds), the watchdog is
        // fed from a thread of its own (see `ServiceNotifier`).
        var feeder: WatchdogFeeder?
        do throws(ThreadStartFailure) {
            try ThreadHeadroom.check()
            try metricsServer?.start()
            feeder = try notifier?.feedWhileWaiting { [weak pool] minimumMs in pool?.isWaitingOnItsStore(forAtLeastMs: minimumMs) ?? false }
        } catch { throw CommandFailure(error.description) }
        defer { metricsServer?.stop() }
        defer { feeder?.stop() }
        // SIGTERM/SIGINT have been blocked since main started; one that came early is pending and is
        // handled as soon as the handlers exist. They exist only between `worker_started` and
        // `worker_stopped`: installed before the run, a pending signal was logged before `worker_started`,
        // and one that came as the run ended after `worker_stopped`. A signal after the run stays pending
        // (blocked) while the process closes its database and exits.
        let signals = SignalHandling(pool: pool, notifier: notifier, health: health)
        let slots = concurrency
        // Kept alive through the run (its handlers hold it weakly); released with the pool and the store
        // when this returns, which closes the database (a checkpoint, the WAL removed).
        let summary = try withExtendedLifetime(signals) {
            try blockingRun {
                try await pool.run(opened: {
                    signals.install()
                    notifier?.ready(status: "started: \(slots) transfer slots, queues \(queues.isEmpty ? "*" : queues.joined(separator: ","))")
                }, closing: { signals.uninstall() }, turned: { running, summary in
                    health?.loopTurned()
                    notifier?.turned(status: { serviceStatus(running: running, of: slots, summary) })
                })
            }
        }
        log.flush()
        if let fault = pool.localFault {
            throw CommandFailure("the worker stopped: it cannot run transfers here (\(fault)); the jobs it held went back to the queue, "
                                 + "their attempts given back: fix that, then start it again")
        }
        if arguments[Options.json] {
            struct Summary: Encodable {
                let claimed, succeeded, failed, retried, paused, cancelled, released, abandoned: Int
                let rescued, rescued_failed: Int
                let events_written, group_commits: Int
            }
            emit(try jsonText(Summary(claimed: summary.claimed, succeeded: summary.succeeded, failed: summary.failed,
                                      retried: summary.retried, paused: summary.paused, cancelled: summary.cancelled,
                                      released: summary.released, abandoned: summary.abandoned,
                                      rescued: summary.rescued, rescued_failed: summary.rescuedFailed,
                                      events_written: summary.eventsWritten, group_commits: summary.groupCommits)))
            if let failure = StandardOutput.failure {
                throw CommandFailure("\(failure): the summary was not printed (the jobs' outcomes are in the log)")
            }
        }
        // A job whose last attempt died with another worker, failed by this drain's rescue, ended failed
        // under the drain as surely as one it ran: `submit && worker --drain` must not report success.
        let failed = summary.failed + summary.rescuedFailed
        if drain, failed > 0 {
            if textLog {
                let rescued = summary.rescuedFailed == 0 ? ""
                    : summary.rescuedFailed == failed ? (failed == 1 ? ", its last attempt lost with its worker" : ", their last attempts lost with their workers")
                    : " (\(summary.rescuedFailed) of them on a last attempt lost with its worker)"
                emitError("jobctl worker: \(plural(failed, "job")) ended failed\(rescued) (exit \(ExitCode.jobsFailed)); `jobctl list --state failed` shows them")
            }
            return ExitCode.jobsFailed
        }
        return ExitCode.ok
    }

    static let watch = CommandSpec(
        name: "watch",
        abstract: "Follow a job until it ends: a progress bar on a terminal, JSON lines otherwise.",
        arguments: [ArgumentSpec("id", optional: true, help: "A job id, a unique prefix of one, or the job's key; omit with --all or --batch.")],
        options: [Options.all, Options.batch.help("Follow every job of this batch (the id submit printed) until all of them end."),
                  Options.on, Options.json.help("Print one JSON object per event even on a terminal."), Options.exitWhenIdle],
        discussion: """
        Statuses follow the Firebase task observers: started → resume, progress → progress, paused → pause,
        succeeded → success, failed/cancelled → failure. An attempt that failed (attempt_failed: its error
        and when the next attempt may start) or whose worker died (lease_expired) is a line too, under
        its event's name, in JSON lines without a status; --on leaves them out. On a terminal the progress bar shows the bytes
        (for uploads: sent, the part the server confirmed drawn solid), the rate over the last few seconds
        and the time left, and every line fits the terminal's width. Exit status: 0 when the job
        succeeded, 1 when it failed or was cancelled. With --batch: every event of the batch's jobs from
        their submission, below them on a terminal one bar for the whole batch (jobs ended and failed,
        bytes moved, the rate, the time left at the pace jobs end), and a count by outcome once all of
        them have ended (JSON lines hold only events: each job's last one is its outcome); 0 when all
        succeeded, 1 otherwise.
        """
    ) { arguments, context in
        let all = arguments[Options.all]
        // As --metrics-allow-remote without --metrics and --force without --to: a flag that would change
        // nothing is a mistake said, not ignored (`watch ID --exit-when-idle` followed the job as if unsaid).
        if arguments[Options.exitWhenIdle] && !all { throw UsageError("--exit-when-idle applies only with --all") }
        if let batch = try arguments.value(Options.batch) {
            if all || arguments.positionals.first != nil { throw UsageError("--batch follows a batch: give no job id and no --all") }
            let store = try context.openStore(readOnly: true)
            let json = arguments[Options.json] || !context.stdoutIsTerminal
            return try Watcher(store: store, context: context, statuses: try arguments.value(Options.on), json: json).follow(batch: batch)
        }
        if all == (arguments.positionals.first != nil) {
            throw UsageError(all ? "give a job id or --all, not both" : "give a job id, or --all to follow every job")
        }
        let statuses = try arguments.value(Options.on)
        let store = try context.openStore(readOnly: true)
        let json = arguments[Options.json] || !context.stdoutIsTerminal
        let watcher = Watcher(store: store, context: context, statuses: statuses, json: json)
        if all {
            return try watcher.followAll(exitWhenIdle: arguments[Options.exitWhenIdle])
        }
        let job = try watcher.read { try $0.job(resolving: arguments.positionals[0]) }
        return try watcher.follow(jobID: job.id)
    }
}

/// The worker's log as the command line asks: format, level, colour (a terminal only, never with
/// NO_COLOR or --no-color) and timestamps (none into systemd's journal, which stamps each line itself).
private func workerLog(_ arguments: ParsedArguments, _ context: Context) throws -> WorkerLog {
    if arguments[Options.quiet] && arguments[Options.verbose] { throw UsageError("-q and -v cannot be combined") }
    let format = try arguments.value(Options.logFormat) ?? .text
    let environment = context.environment
    let underSystemd = standardErrorIsJournal(environment["JOURNAL_STREAM"])
    let noColor = !(environment["NO_COLOR"] ?? "").isEmpty || arguments[Options.noColor] || environment["TERM"] == "dumb"
    let color = format == .text && isatty(STDERR_FILENO) == 1 && !noColor && !underSystemd
    let level: WorkerLogLevel = arguments[Options.quiet] ? .warning : arguments[Options.verbose] ? .debug : .info
    return WorkerLog(minimumLevel: level, formatter: WorkerLogFormatter(format: format, timestamps: !underSystemd, color: color),
                     holdingUntilStarted: true)
}

/// Whether standard error is the journal stream systemd connected it to: `JOURNAL_STREAM` names that
/// stream's `device:inode` (systemd.exec(5)), and is inherited by whatever the service starts. Trusted
/// for being set, it took the times off a log a service's shell sent to a file (`2>>worker.log`), or one
/// a terminal's shell started under a user service showed: lines no one could place in time.
func standardErrorIsJournal(_ value: String?) -> Bool {
    guard let value, let colon = value.firstIndex(of: ":"), let device = UInt64(value[..<colon]),
          let inode = UInt64(value[value.index(after: colon)...]) else { return false }
    var status = stat()
    guard fstat(STDERR_FILENO, &status) == 0 else { return false }
    return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
}

/// The service manager's notification variables, taken out of the environment before any thread started
/// (see `main` and `ServiceNotifier.takeEnvironment`).
enum ServiceEnvironment {
    static let taken = ServiceNotifier.takeEnvironment()
}

/// What `systemctl status` shows of a worker (`STATUS=`).
private func serviceStatus(running: Int, of slots: Int, _ summary: WorkerSummary) -> String {
    "\(running) of \(slots) transfers running; since start \(summary.succeeded) succeeded, \(summary.failed) failed, "
        + "\(summary.retried) retried"
}

/// Runs an async body to completion from synchronous command code.
func blockingRun<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let box = ResultBox<T>()
    let semaphore = DispatchSemaphore(value: 0)
    let work = Task(priority: WorkPriority.task) {
        do { box.result = .success(try await body()) } catch { box.result = .failure(error) }
    }
    // Signalled once the work's task has ended, not from inside it: a task releases what it captured
    // (`body`, and through it a worker's pool and store) only after its last statement, so a signal
    // from inside let the caller return, and the process exit, while the store was still held — its
    // database then never closed.
    Task {
        await work.value
        semaphore.signal()
    }
    semaphore.wait()
    guard let result = box.result else { throw CommandFailure("internal error: the task ended without a result") }
    return try result.get()
}

private final class ResultBox<T>: @unchecked Sendable {
    var result: Result<T, Error>?
}

/// SIGTERM/SIGINT/SIGHUP: the first starts a graceful shutdown, the second exits at once.
final class SignalHandling: @unchecked Sendable {
    private let pool: WorkerPool
    private let notifier: ServiceNotifier?
    private let health: WorkerHealth?
    private var sources: [DispatchSourceSignal] = []
    private var received = 0
    /// Set by `uninstall`: the worker has stopped, and a signal read since changes nothing.
    private var stopped = false
    private let queue = DispatchQueue(label: "jobctl.signals")

    init(pool: WorkerPool, notifier: ServiceNotifier? = nil, health: WorkerHealth? = nil) {
        self.pool = pool
        self.notifier = notifier
        self.health = health
    }

    /// Starts reading SIGTERM, SIGINT and SIGHUP. They are blocked in every thread (since `main` began), so
    /// they stay pending until a signal source reads them; the disposition is left alone, because
    /// setting SIG_IGN would discard a signal that is already pending.
    func install() {
        queue.sync { installOnQueue() }
    }

    private func installOnQueue() {
        guard !stopped, sources.isEmpty else { return }
        for number in ShutdownSignals.numbers {
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            // Weak: a handler holding this object (and through it the pool and the store) kept the store
            // open until the process exited, so its database was never closed — SQLite neither
            // checkpointed nor removed the WAL (up to ~16 MiB), and the next process to open the log
            // read all of it again to rebuild the WAL index.
            source.setEventHandler { [weak self] in
                guard let self, !stopped else { return }
                received += 1
                if received == 1 {
                    pool.log.signalReceived(number, exitingNow: false, now: Clock.nowMs())
                    notifier?.stopping(status: "stopping: finishing or pausing the transfers, releasing their leases")
                    health?.stopping()
                    pool.beginShutdown()
                } else {
                    pool.log.signalReceived(number, exitingNow: true, now: Clock.nowMs())
                    pool.log.flush(waitingAtMost: 0.5)
                    // _exit, not exit: atexit handlers and static destructors would run while the curl and
                    // store threads still use what they tear down (a crash, not an exit).
                    _exit(ExitCode.interrupted)
                }
            }
            source.resume()
            sources.append(source)
        }
    }

    /// Stops reading the signals (they stay blocked, so one that comes later waits, unhandled, until the
    /// process exits). On the handlers' queue, so no handler is running once this returns, and none runs
    /// after: a signal read meanwhile is dropped, not logged after `worker_stopped`.
    func uninstall() {
        queue.sync {
            stopped = true
            for source in sources { source.cancel() }
            sources = []
        }
    }

    deinit {
        for source in sources { source.cancel() }
    }
}
