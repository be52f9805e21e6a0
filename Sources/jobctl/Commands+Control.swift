import Foundation
import JobLifecycle
import JobModel
import StorePort

extension Commands {
    static let pause = controlCommand(
        "pause", abstract: "Pause queued or running jobs at their resume point.",
        discussion: """
        A running transfer stops within about a second and keeps its upload session or downloaded bytes.
        Pausing a paused job (or one whose pause is pending) changes nothing and exits 0; a job being
        cancelled or already finished is refused (exit 1).
        """
    ) { store, id, context in try store.requestPause(id: id, actor: context.actor, now: Clock.nowMs()) }
        lifecycle: { _ in .pause }

    static let resume = controlCommand(
        "resume", abstract: "Re-queue paused jobs; they continue from their resume point.",
        discussion: """
        An upload continues from the offset the server confirmed; a download from the bytes already written.
        Resuming a running job whose pause is still pending withdraws the pause. Any job that is not paused
        (queued, running, being cancelled, finished) is refused (exit 1).
        """
    ) { store, id, context in try store.requestResume(id: id, actor: context.actor, now: Clock.nowMs()) }
        lifecycle: { _ in .resume }

    static let cancel = controlCommand(
        "cancel", abstract: "Cancel queued, running or paused jobs (they fail with code 'cancelled').",
        discussion: """
        Partial local files are removed. 'jobctl retry' re-opens a cancelled job. A running job whose worker
        stops it some other way first (a pause, a shutdown, a retry, a crash) is cancelled then. Cancelling a
        cancelled job (or one whose cancel is pending) changes nothing and exits 0; succeeded and failed jobs
        are refused (exit 1).
        """
    ) { store, id, context in try store.requestCancel(id: id, actor: context.actor, now: Clock.nowMs()) }
        lifecycle: { context in .cancel(by: context.actor) }

    static let retry = controlCommand(
        "retry", abstract: "Re-queue failed or cancelled jobs as a new attempt.",
        discussion: """
        The attempt budget starts again; the history keeps every earlier attempt. Other jobs are refused (exit 1).
        A job cancelled because a job it waits for (after:) failed or was cancelled stays cancelled when that
        job is retried: --with-dependants reopens it too, and the jobs cancelled because of it in turn, each
        with its own 'retried' event and in the same transaction as the retry (all or nothing); they wait for
        the job again. A dependant cancelled by hand stays cancelled, and so does one that still waits for
        another failed or cancelled job (retrying that one with --with-dependants reopens it). A job that
        waits for a job still failed or cancelled is refused, with or without --with-dependants: reopened, it
        could never run; the error names the job to retry with --with-dependants. Jobs given (or selected)
        together are taken in turn, and one refused goes once more after the others: its dependency retried
        after it in the same command opens it, whichever was named first.
        """,
        extraOptions: [Options.withDependants]
    ) { store, id, context in try store.retry(id: id, actor: context.actor, now: Clock.nowMs()) }
        lifecycle: { _ in .retry }

    /// pause/resume/cancel/retry share their shape: ids (or a filter) in, one line per job out, exit 1
    /// if any was refused. A harmless repeat (pausing a paused job, cancelling a cancelled one) exits 0
    /// and says so. `lifecycle` names the command `--dry-run` asks the lifecycle about.
    private static func controlCommand(
        _ name: String, abstract: String, discussion: String, extraOptions: [any OptionDeclaration] = [],
        action: @escaping @Sendable (any JobStore, String, Context) throws -> ControlResult,
        lifecycle: @escaping @Sendable (Context) -> JobCommand
    ) -> CommandSpec {
        CommandSpec(
            name: name, abstract: abstract,
            arguments: [ArgumentSpec("id", optional: true, variadic: true, help: "Job ids, unique id prefixes or job keys; or select jobs with the filters below.")],
            options: [Options.json.help("Print the resulting jobs as JSON (with a filter: a report object)."),
                      Options.state.help("Act on jobs in this state; repeatable or comma-separated."),
                      Options.queue.help("Act on jobs of this queue."), Options.kind.help("Act on jobs of this kind; repeatable or comma-separated."),
                      Options.since.help("Act on jobs submitted at or after this time (RFC 3339, a date, or relative: 90s, 15m, 1h, 7d)."),
                      Options.batch.help("Act on the jobs of this batch (the id submit printed for a folder, glob or prefix)."),
                      Options.dryRun.help("Print what would change for each job and the counts; change nothing.")] + extraOptions,
            discussion: discussion + "\n\n" + BulkControl.discussion(name)
        ) { arguments, context in
            if let bulk = try BulkControl(name: name, arguments: arguments) {
                return try bulk.run(context: context, lifecycle: lifecycle(context))
            }
            let store = try context.openStore()
            let json = arguments[Options.json]
            if name == "retry" && arguments[Options.withDependants] {
                return try retryWithDependants(arguments.positionals, store: store, context: context, json: json)
            }
            var views: [JobView] = []
            var refused = 0
            // A retry refused goes once more after the others (see `BulkControl`'s `take`): a retry after
            // it may open the job it waits for. Not one whose COMMIT went unanswered: it may have been made
            // (a retry run twice re-ran the job, or was refused for the state the first left it in).
            var waitingTurn: [String] = []
            func take(_ given: String, mayWait: Bool) {
                var resolved: String?
                do {
                    let id = try store.resolveID(given)
                    resolved = id
                    let outcome = try action(store, id, context)
                    let record = outcome.record
                    views.append(JobView(record, display: .redacting))
                    if !json {
                        var note = record.pauseRequested ? " (pause requested)" : record.cancelRequested ? " (cancel requested)" : ""
                        if outcome.isRepeat { note += " (already so; nothing changed)" }
                        emit("\(TerminalText.printable(record.id))  \(context.paint(state: record.state))\(note)")
                    }
                } catch {
                    if case StoreError.commitUnconfirmed(let loss) = error {
                        refused += 1
                        emitError("Error: \(given): \(LostCommit.control(name, id: resolved ?? given, loss: loss))")
                        return
                    }
                    if mayWait && name == "retry" {
                        waitingTurn.append(given)
                        return
                    }
                    refused += 1
                    emitError("Error: \(given): \(error)")
                }
            }
            for given in arguments.positionals { take(given, mayWait: true) }
            for given in waitingTurn { take(given, mayWait: false) }
            if json { emit(try jsonText(views)) }
            return refused == 0 ? ExitCode.ok : ExitCode.failure
        }
    }

    /// `retry ID... --with-dependants`: each job and the dependants it reopens, one transaction per job
    /// given; one line per job changed (`--json`: every job reopened, the ones given and their
    /// dependants), then a line per dependant left cancelled, saying why — once, and not for one that a
    /// later job's retry reopened.
    private static func retryWithDependants(_ given: [String], store: any JobStore, context: Context, json: Bool) throws -> Int32 {
        var views: [JobView] = []
        var refused = 0
        var opened: Set<String> = []
        var kept: [DependantsRetryPlan.Kept] = []
        // A job refused goes once more after the others: a later job's retry may reopen it (its line says
        // so) or open the job it waits for. Not one whose COMMIT went unanswered: it may have been made.
        var waitingTurn: [String] = []
        func take(_ text: String, mayWait: Bool) {
            var resolved: String?
            do {
                let id = try store.resolveID(text)
                resolved = id
                if !mayWait && opened.contains(id) { return }
                let answer = try store.retryWithDependants(id: id, actor: context.actor, now: Clock.nowMs(), ifStateIn: nil, dryRun: false)
                guard let outcome = answer.result else { throw StoreError.notFound(text) }  // no state condition: never nil
                views.append(JobView(outcome.job.record, display: .redacting))
                views += outcome.reopened.map { JobView($0, display: .redacting) }
                opened.insert(outcome.job.record.id)
                opened.formUnion(outcome.reopened.map(\.id))
                kept += outcome.kept
                if !json {
                    emit("\(TerminalText.printable(outcome.job.record.id))  \(context.paint(state: outcome.job.record.state))")
                    for dependant in outcome.reopened {
                        emit(TerminalText.printable(dependant.id) + "  \(context.paint(state: dependant.state))  "
                             + TerminalText.printable("(reopened with \(outcome.job.record.id))"))
                    }
                }
            } catch {
                if case StoreError.commitUnconfirmed(let loss) = error {
                    refused += 1
                    emitError("Error: \(text): \(LostCommit.control("retry", id: resolved ?? text, loss: loss, withDependants: true))")
                    return
                }
                if mayWait {
                    waitingTurn.append(text)
                    return
                }
                refused += 1
                emitError("Error: \(text): \(error)")
            }
        }
        for text in given { take(text, mayWait: true) }
        for text in waitingTurn { take(text, mayWait: false) }
        // The last reason each is left for, in the order first left.
        var reasons: [String: String] = [:]
        for dependant in kept { reasons[dependant.record.id] = dependant.reason }
        var shown: Set<String> = []
        for dependant in kept where !opened.contains(dependant.record.id) && shown.insert(dependant.record.id).inserted {
            let line = "\(dependant.record.id)  \(context.paint(state: dependant.record.state))  (left cancelled: \(reasons[dependant.record.id] ?? dependant.reason))"
            if json { emitError(line) } else { emit(line) }
        }
        if json { emit(try jsonText(views)) }
        return refused == 0 ? ExitCode.ok : ExitCode.failure
    }

    static let result = CommandSpec(
        name: "result",
        abstract: "Print what a finished job produced.",
        arguments: [ArgumentSpec("id", help: "A job id, a unique prefix of one, or the job's key.")],
        options: [Options.output, Options.json.help("Print the result record as JSON."), Options.showSecrets],
        discussion: """
        download-memory: the bytes (refused on a terminal when they are not text: use -o FILE, a pipe, or
        -o - to print them anyway); fetch-url: the download URL, token included (that is what the command
        is for); uploads, get-metadata and update-metadata: the object's metadata as JSON (download tokens
        redacted unless --show-secrets); download-file: the local path; delete: the object deleted. -o FILE
        writes any of these to FILE instead.
        """
    ) { arguments, context in
        let store = try context.openStore(readOnly: true)
        let job = try store.job(resolving: arguments.positionals[0])
        let display = arguments.display
        guard job.state == .succeeded, let result = job.result else {
            // The store refuses a succeeded job whose log holds no result; a job read without one is a bug
            // or a store that does not check, and "it is succeeded; only succeeded jobs have one" said nothing.
            if job.state == .succeeded {
                throw CommandFailure("job \(job.id) is succeeded, but the log holds no result for it: run `jobctl replay --verify`")
            }
            let state = display.stateLine(job.state, job.error) { $0.rawValue }
            throw CommandFailure("job \(job.id) is \(state); only succeeded jobs have a result")
        }
        let output = try arguments.value(Options.output)
        let bytes: Data
        if arguments[Options.json] {
            bytes = Data((try jsonText(ResultView(result, display: display, revealURL: true)) + "\n").utf8)
        } else {
            switch job.spec.kind {
            case .downloadMemory:
                if let inline = result.data {
                    bytes = inline
                    break
                }
                guard let hash = result.blob, let storedSize = try store.blobSize(sha256: hash) else {
                    if let hash = result.blob, let expired = try store.expiredBlob(sha256: hash) {
                        throw CommandFailure("job \(job.id): its result (\(plural(expired.size, "byte")), sha256 \(hash)) expired on "
                            + "\(RFC3339.string(expired.expiredAtMs)) (jobctl archive --blobs-before) and is no longer stored; "
                            + "`jobctl history \(job.id)` keeps its hash: run the job's download again to get the bytes")
                    }
                    throw CommandFailure("job \(job.id): the result blob is missing from the log")
                }
                // The size first, from the blob's header: a damaged log's blob of another size (gigabytes,
                // say) is refused before its bytes are read into memory.
                if let recorded = result.size, storedSize != recorded {
                    throw CommandFailure("job \(job.id): the stored result blob does not match its record (\(plural(storedSize, "byte")), "
                        + "where the job recorded \(plural(recorded, "byte")), sha256 \(hash)); "
                        + "the log is damaged: nothing was written — run the job's download again")
                }
                guard let blob = try store.blob(sha256: hash) else {
                    throw CommandFailure("job \(job.id): the result blob is missing from the log")
                }
                // The log's bytes are checked before they are handed out: a damaged or edited log must not
                // pass other bytes off as the job's result.
                let stored = HashedBytes(blob)
                guard stored.sha256 == hash.lowercased(), result.size.map({ $0 == Int64(blob.count) }) ?? true else {
                    throw CommandFailure("job \(job.id): the stored result blob does not match its record (\(plural(Int64(blob.count), "byte")), "
                        + "sha256 \(stored.sha256), where the job recorded \(result.size.map { plural($0, "byte") } ?? "no size"), sha256 \(hash)); "
                        + "the log is damaged: nothing was written — run the job's download again")
                }
                bytes = blob
            case .fetchURL:
                // The URL's token is the result itself: printed as it is.
                bytes = Data(((result.url ?? "") + "\n").utf8)
            case .downloadFile:
                // The path as it is, for a program; for a person at a terminal with its control characters
                // shown escaped, as every command shows a path (it was refused as binary output).
                let path = result.path ?? job.spec.destination ?? ""
                bytes = Data(((output == nil && context.stdoutIsTerminal ? Display.localPath(path) : path) + "\n").utf8)
            case .delete:
                bytes = Data(("deleted " + display.location(result.deleted ?? job.spec.destination ?? "") + "\n").utf8)
            case .uploadFile, .uploadData, .getMetadata, .updateMetadata:
                let object = result.object.map { ObjectView($0, display: display) }
                bytes = Data((try jsonText(object) + "\n").utf8)
            }
        }
        if let output, output != "-" {
            // A fetched URL carries its token, and --show-secrets puts download tokens in the metadata.
            try write(bytes, toFile: output, secret: job.spec.kind == .fetchURL || display.showSecrets,
                      protected: context.localLogFiles)
            return ExitCode.ok
        }
        if output == nil, context.stdoutIsTerminal, !Self.isTerminalText(bytes) {
            throw CommandFailure("binary output can mess up your terminal; use -o FILE or pipe it (-o - prints it anyway)")
        }
        StandardOutput.write(bytes)
        return ExitCode.ok
    }

    /// Whether bytes can go to a terminal as they are: UTF-8 text without control characters other
    /// than tab, line feed and carriage return (no NUL, no escape sequences).
    static func isTerminalText(_ bytes: Data) -> Bool {
        guard let text = String(validating: bytes, as: UTF8.self) else { return false }
        return text.unicodeScalars.allSatisfy { scalar in
            scalar == "\t" || scalar == "\n" || scalar == "\r" || !TerminalText.isControl(scalar)
        }
    }

    static let audit = CommandSpec(
        name: "audit",
        abstract: "One row per job: outcome, sizes, checksums, attempts, start and end times.",
        options: [Options.since, Options.until, Options.state.help("Only jobs in this state; repeatable or comma-separated."),
                  Options.kind, Options.batch, Options.json.help("Print a JSON array."), Options.csv, Options.showSecrets, Options.archiveFrom],
        discussion: """
        Times: RFC 3339 (2026-11-29T10:00:00Z), a date (2026-11-29), or relative back from now (90s, 15m,
        1h, 7d, at most 36500d); absolute times between 1970-01-01 and 9999-12-31. On a terminal the table
        fits its width by hiding columns (standard error names them); --json and --csv carry every field.
        """
    ) { arguments, context in
        if arguments[Options.json] && arguments[Options.csv] { throw UsageError("--json and --csv cannot be combined") }
        let since = try arguments.value(Options.since), until = try arguments.value(Options.until)
        if let since, let until, since >= until {
            // An empty window printed "no jobs", as if the log held none in it.
            throw UsageError("--since (\(RFC3339.string(since))) is not before --until (\(RFC3339.string(until))): no job can be in "
                                 + "between; relative times count back from now, so --since 2h --until 1h is the hour before the last")
        }
        let filter = JobFilter(states: try arguments.stateSet(), kinds: try arguments.kindSet(), queue: nil, limit: nil,
                               createdSince: since, createdUntil: until, batch: try arguments.value(Options.batch))
        let display = arguments.display
        // Jobs are handed over one at a time and printed as they come (a table reads them twice: once
        // to measure its columns), so memory stays flat whatever the number of jobs.
        let eachJob: (Int, @escaping (Int, JobRecord) throws(StoreError) -> Void) throws -> Void
        let passedOver = PassedOver()
        if let file = try arguments.value(Options.archiveFrom) {
            let jobs = try archivedJobs(file).filter(filter.matchesArchived)
            eachJob = { (passes, body) in
                for pass in 1...passes { for job in jobs { try body(pass, job) } }
            }
        } else {
            let store = try context.openStore(readOnly: true)
            eachJob = { (passes, body) in try store.forEachJob(filter: filter, passes: passes, passingOver: passedOver, body) }
        }
        let output = BufferedOutput()
        if arguments[Options.json] {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            var count = 0
            try eachJob(1) { (_, job) throws(StoreError) in
                // The array `jsonText` prints, element by element: each object indented by two spaces.
                output.write(count == 0 ? "[\n  " : ",\n  ")
                count += 1
                if output.append({ AuditRowWriter.appendJSON(job, display: display, indent: 2, to: &$0) }) { return }
                let object: Data
                do { object = try encoder.encode(AuditRow(job, display: display)) } catch {
                    throw StoreError.corrupt("job \(job.id) could not be encoded as JSON: \(error)")
                }
                output.write(indented: TerminalText.escapingJSONControls(object))
            }
            output.write(count == 0 ? try jsonText([AuditRow]()) + "\n" : "\n]\n")
        } else if arguments[Options.csv] {
            output.write(AuditRow.csvHeader + "\n")
            try eachJob(1) { (_, job) throws(StoreError) in
                if !output.append({ AuditRowWriter.appendCSV(job, display: display, to: &$0) }) {
                    output.write(AuditRow(job, display: display).csvLine)
                }
                output.write("\n")
            }
        } else {
            func cells(_ job: JobRecord) -> [String] {
                let size: String = (job.result?.size ?? job.result?.object?.knownSize ?? job.bytesTotal).map { ByteSize.format($0) } ?? "-"
                // A hash computed but not compared with the server's is marked (`VerifiedHashes`).
                func mark(_ algorithm: ChecksumAlgorithm) -> String {
                    job.result.map { VerifiedHashes.isUnverified(algorithm, in: $0) } == true ? VerifiedHashes.unverifiedMark : ""
                }
                let md5: String = job.result?.md5.map { $0 + mark(.md5) } ?? job.result?.object?.md5Hash ?? "-"
                let crc32c: String = job.result?.crc32c.map { $0 + mark(.crc32c) } ?? job.result?.object?.crc32c ?? "-"
                let started: String = job.startedAtMs.map(RFC3339.string) ?? "-"
                let finished: String = job.finishedAtMs.map(RFC3339.string) ?? "-"
                return [job.id, job.spec.kind.rawValue, context.paint(state: job.state), "\(job.attempts)",
                        size, md5, crc32c, started, finished, job.error?.code.name ?? ""]
            }
            let columns = [
                TableColumn("ID"), TableColumn("KIND", dropRank: 6), TableColumn("OUTCOME", painted: true), TableColumn("ATTEMPTS", dropRank: 3),
                TableColumn("SIZE", dropRank: 5), TableColumn("MD5", dropRank: 1), TableColumn("CRC32C", dropRank: 2),
                TableColumn("STARTED", dropRank: 4), TableColumn("FINISHED", dropRank: 7),
                TableColumn("ERROR", fit: .elide(minimum: 8), elide: { Elide.end($0, to: $1) }),
            ]
            var natural = columns.map(\.header.count)
            var counts: [String: Int] = [:]
            var rows = 0
            var layout: TableLayout?
            try eachJob(2) { (pass, job) throws(StoreError) in
                let row = printableRow(cells(job), columns)
                if pass == 1 {
                    for (index, cell) in row.enumerated() { natural[index] = max(natural[index], visibleWidth(cell)) }
                    counts[job.state.rawValue, default: 0] += 1
                    rows += 1
                    return
                }
                if layout == nil {
                    let fitted = TableLayout(columns, natural: natural, width: context.width)
                    layout = fitted
                    for line in fitted.lines(for: columns.map(\.header)) { output.write(line + "\n") }
                }
                for line in layout?.lines(for: row) ?? [] { output.write(line + "\n") }
            }
            if rows == 0 {
                output.write("no jobs\n")
            } else {
                output.flush()
                if let hidden = layout?.hidden, !hidden.isEmpty {
                    emitError("columns hidden to fit the terminal: \(hidden.joined(separator: ", ")); --json or --csv shows every field")
                }
                output.write("\(plural(rows, "job")): " + counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ") + "\n")
            }
        }
        output.flush()
        // After the rows, where it is seen: an audit that leaves jobs out says so.
        if let note = passedOver.sentence("left out of this audit") { emitError(note) }
        return ExitCode.ok
    }
}
