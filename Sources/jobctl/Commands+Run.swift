import EventStore
import Foundation
import JobModel
import Storage
import Worker

extension Commands {
    static let worker = CommandSpec(
        name: "worker",
        abstract: "Run jobs: a long-running pool that claims jobs under leases.",
        options: [
            OptionSpec("concurrency", short: "c", value: "n", help: "Transfers at once (default 4)."),
            OptionSpec("queue", value: "name", repeatable: true, help: "Only take jobs from this queue; repeatable (default: all queues)."),
            OptionSpec("drain", help: "Exit 0 once no job is queued or running (paused jobs do not hold it)."),
            OptionSpec("lease", value: "seconds", help: "Lease length; a worker that stops heartbeating loses its jobs after this (default 30)."),
            OptionSpec("stall-timeout", value: "duration", help: "Retry a transfer that moves no data for this long, 1s to 1h (default $JOBCTL_STALL_TIMEOUT, else 60s)."),
            OptionSpec("json", help: "Print the exit summary as JSON."),
        ],
        discussion: """
        Run as many worker processes on one database as you like. SIGTERM or SIGINT stops claiming, pauses
        running transfers at their resume point, releases their leases and exits within 10 seconds; a second
        signal exits at once. Storage settings come from the environment: STORAGE_EMULATOR_HOST,
        GOOGLE_OAUTH_ACCESS_TOKEN or JOBCTL_TOKEN_COMMAND, JOBCTL_CHUNK_SIZE, JOBCTL_STALL_TIMEOUT,
        JOBCTL_BUCKETS, JOBCTL_REFUSE_EXECUTABLES, JOBCTL_CA_BUNDLE (else SSL_CERT_FILE / SSL_CERT_DIR);
        a bad value stops the worker before it starts.
        """
    ) { arguments, context in
        let concurrency = try arguments.integer("concurrency") ?? 4
        guard concurrency >= 1 else { throw UsageError("--concurrency must be at least 1") }
        let leaseSeconds = try arguments.value("lease").map { text -> Double in
            guard let seconds = Double(text), seconds >= 1 else { throw UsageError("--lease expects seconds ≥ 1, not '\(text)'") }
            return seconds
        } ?? 30
        let queues = arguments.all("queue")
        let configuration = WorkerConfiguration(concurrency: concurrency, queues: queues.isEmpty ? nil : queues,
                                                leaseMs: Int64(leaseSeconds * 1000), drain: arguments.flag("drain"))
        // Storage settings are checked before the event log is opened: a bad one stops the worker at once.
        var storage: StorageConfiguration
        do throws(StorageError) {
            storage = try StorageConfiguration.fromEnvironment(context.environment, localBucketsDirectory: context.localBucketsDirectory)
        } catch { throw CommandFailure(error.message) }
        if let text = arguments.value("stall-timeout") {
            do throws(StorageError) {
                storage.stallTimeout = try StorageConfiguration.stallTimeout(parsing: text, from: "--stall-timeout")
            } catch { throw UsageError(error.message) }
        }
        let store = try context.openStore()
        let pool = WorkerPool(store: store, backend: StorageRouter(configuration: storage), configuration: configuration)
        let signals = SignalHandling(pool: pool)
        signals.install()
        emitError("jobctl worker \(configuration.owner): concurrency \(concurrency), lease \(Int(leaseSeconds)) s\(configuration.drain ? ", draining" : "")")
        let summary = try blockingRun { try await pool.run() }
        if arguments.flag("json") {
            struct Summary: Encodable {
                let claimed, succeeded, failed, retried, paused, cancelled, released, abandoned: Int
                let events_written, group_commits: Int
            }
            emit(try jsonText(Summary(claimed: summary.claimed, succeeded: summary.succeeded, failed: summary.failed,
                                      retried: summary.retried, paused: summary.paused, cancelled: summary.cancelled,
                                      released: summary.released, abandoned: summary.abandoned,
                                      events_written: summary.eventsWritten, group_commits: summary.groupCommits)))
        } else {
            emitError("jobctl worker: \(summary.claimed) claimed, \(summary.succeeded) succeeded, \(summary.failed) failed, "
                      + "\(summary.retried) to retry, \(summary.paused) paused, \(summary.cancelled) cancelled, \(summary.released) released; "
                      + "\(summary.eventsWritten) events in \(summary.groupCommits) commits")
        }
        return ExitCode.ok
    }

    static let watch = CommandSpec(
        name: "watch",
        abstract: "Follow a job until it ends: a progress bar on a terminal, JSON lines otherwise.",
        arguments: [ArgumentSpec("id", optional: true, help: "A job id (or a unique prefix); omit with --all.")],
        options: [
            OptionSpec("all", help: "Follow every job's events (until interrupted, or until idle with --exit-when-idle)."),
            OptionSpec("on", value: "statuses", help: "Only these observer statuses: resume, progress, pause, success, failure (comma-separated)."),
            OptionSpec("json", help: "Print one JSON object per event even on a terminal."),
            OptionSpec("exit-when-idle", help: "With --all: exit once no job is queued or running."),
        ],
        discussion: """
        Statuses follow the Firebase task observers: started → resume, progress → progress, paused → pause,
        succeeded → success, failed/cancelled → failure. Exit status: 0 when the job succeeded, 1 when it
        failed or was cancelled.
        """
    ) { arguments, context in
        let all = arguments.flag("all")
        if all == (arguments.positionals.first != nil) {
            throw UsageError(all ? "give a job id or --all, not both" : "give a job id, or --all to follow every job")
        }
        var statuses: Set<ObserverStatus>? = nil
        if let text = arguments.value("on") {
            statuses = Set(try text.split(separator: ",").map { part in
                guard let status = ObserverStatus(rawValue: part.trimmingCharacters(in: .whitespaces)) else {
                    throw UsageError("unknown status '\(part)'; expected resume, progress, pause, success or failure")
                }
                return status
            })
        }
        let store = try context.openStore(readOnly: true)
        let json = arguments.flag("json") || !context.stdoutIsTerminal
        let watcher = Watcher(store: store, context: context, statuses: statuses, json: json)
        if all {
            return try watcher.followAll(exitWhenIdle: arguments.flag("exit-when-idle"))
        }
        let job = try store.job(resolving: arguments.positionals[0])
        return try watcher.follow(jobID: job.id)
    }
}

/// Runs an async body to completion from synchronous command code.
func blockingRun<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let box = ResultBox<T>()
    let semaphore = DispatchSemaphore(value: 0)
    Task {
        do { box.result = .success(try await body()) } catch { box.result = .failure(error) }
        semaphore.signal()
    }
    semaphore.wait()
    guard let result = box.result else { throw CommandFailure("internal error: the task ended without a result") }
    return try result.get()
}

private final class ResultBox<T>: @unchecked Sendable {
    var result: Result<T, Error>?
}

/// SIGTERM/SIGINT: the first starts a graceful shutdown, the second exits at once.
final class SignalHandling: @unchecked Sendable {
    private let pool: WorkerPool
    private var sources: [DispatchSourceSignal] = []
    private var received = 0
    private let queue = DispatchQueue(label: "jobctl.signals")

    init(pool: WorkerPool) { self.pool = pool }

    func install() {
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in
                received += 1
                if received == 1 {
                    emitError("jobctl worker: signal \(number), pausing transfers and releasing leases (again to exit at once)")
                    pool.beginShutdown()
                } else {
                    emitError("jobctl worker: second signal, exiting now")
                    // _exit, not exit: atexit handlers and static destructors would run while the curl and
                    // store threads still use what they tear down (a crash, not an exit).
                    _exit(ExitCode.interrupted)
                }
            }
            source.resume()
            sources.append(source)
        }
    }
}
