import Foundation
import JobLifecycle
import JobModel
import PostgresStore
import StorePort
import Tasks

extension Commands {
    /// Rows `list` prints as a table unless `--limit` says otherwise.
    static let defaultListLimit = 50

    static let list = CommandSpec(
        name: "list",
        abstract: "List jobs, newest first.",
        options: [Options.state, Options.kind, Options.queue, Options.batch, Options.limit, Options.json.help("Print the jobs as a JSON array.")],
        discussion: """
        The table shows at most 50 jobs unless --limit says otherwise and fits the terminal's width
        (COLUMNS, else the terminal's own); --json prints every matching job unless --limit is given.
        When jobs are left out, standard error says how many there are. URLs are printed with their
        secrets (tokens, signatures, passwords) redacted.
        """
    ) { arguments, context in
        let json = arguments[Options.json]
        let limit = try arguments.value(Options.limit) ?? (json ? 0 : defaultListLimit)
        let filter = JobFilter(states: try arguments.stateSet(), kinds: try arguments.kindSet(),
                               queue: try arguments.value(Options.queue), limit: limit == 0 ? nil : limit,
                               batch: try arguments.value(Options.batch), readsResults: json)
        let store = try context.openStore(readOnly: true)
        // The table shows no result (a succeeded job's progress is 100%): none is read.
        let passedOver = PassedOver()
        let jobs = try store.jobs(filter: filter, passingOver: passedOver)
        // Said first: it may explain a shorter page, or "no jobs".
        if let note = passedOver.sentence("not listed") { emitError(note) }
        if limit > 0, jobs.count == limit {
            let total = try store.countJobs(filter: filter)
            if total > jobs.count {
                emitError("showing \(jobs.count) of \(plural(total, "job")); --limit 0 for all")
            }
        }
        let display = Display.redacting
        var dependencies = DependencyStates(store: store)
        let waits = try jobs.map { (job) throws in try dependencies.waitingFor(job) }
        if json {
            emit(try jsonText(zip(jobs, waits).map { JobView($0, display: display, waitingFor: $1) }))
            return ExitCode.ok
        }
        if jobs.isEmpty {
            emit("no jobs")
            return ExitCode.ok
        }
        let now = Clock.nowMs()
        var rows = jobs.map { job in
            [job.id, job.spec.kind.rawValue, context.paint(state: job.state), "\(job.attempts)/\(job.maxAttempts)",
             job.movingProgressText, job.routeText(display), TimeText.age(job.createdAtMs, now: now)]
        }
        var columns = [
            TableColumn("ID"), TableColumn("KIND", dropRank: 3), TableColumn("STATE", painted: true), TableColumn("ATTEMPTS", dropRank: 1),
            TableColumn("PROGRESS", dropRank: 4), TableColumn("SOURCE → DESTINATION", fit: .elide(minimum: 30), elide: Elide.route),
            TableColumn("AGE", dropRank: 2),
        ]
        // Shown only when some listed job has one, so plain listings keep their shape.
        if jobs.contains(where: { $0.state == .queued && $0.runAfterMs > now && $0.attempts == 0 && $0.error == nil }) {
            columns.append(TableColumn("RUNS AT", dropRank: 5))
            for (index, job) in jobs.enumerated() {
                let scheduled = job.state == .queued && job.runAfterMs > now && job.attempts == 0 && job.error == nil
                rows[index].append(scheduled ? RFC3339.string(job.runAfterMs) : "-")
            }
        }
        if jobs.contains(where: { $0.batch != nil }) {
            columns.append(TableColumn("BATCH", dropRank: 6))
            for (index, job) in jobs.enumerated() { rows[index].append(job.batch ?? "-") }
        }
        if waits.contains(where: { !($0 ?? []).isEmpty }) {
            columns.append(TableColumn("WAITING FOR", dropRank: 7))
            for (index, wait) in waits.enumerated() { rows[index].append(dependencies.text(wait)) }
        }
        // Why a job failed (or its last attempt did, for one queued for a retry), by its error's name: a
        // `list --state failed` said only "failed", and each job's `show` said why.
        if jobs.contains(where: { $0.error != nil && $0.error?.code != .cancelled }) {
            columns.append(TableColumn("ERROR", fit: .elide(minimum: 12), dropRank: 8, elide: { Elide.end($0, to: $1) }))
            for (index, job) in jobs.enumerated() { rows[index].append(job.error.map { $0.code.name } ?? "-") }
        }
        let table = renderTable(columns, rows, width: context.width)
        emit(table.text)
        if !table.hidden.isEmpty {
            emitError("columns hidden to fit the terminal: \(table.hidden.joined(separator: ", ")); --json shows every field")
        }
        return ExitCode.ok
    }

    static let show = CommandSpec(
        name: "show",
        abstract: "Show one job: spec, state, attempts, bytes, error and result.",
        arguments: [ArgumentSpec("id", help: "A job id, a unique prefix of one (at least 6 characters), or the job's key.")],
        options: [Options.json.help("Print the job as JSON."), Options.showSecrets],
        discussion: """
        Progress counts the bytes the server confirmed for an upload (bytes sent but not confirmed are shown
        apart) and the bytes written for a download.
        """
    ) { arguments, context in
        let store = try context.openStore(readOnly: true)
        let job = try store.job(resolving: arguments.positionals[0])
        let display = arguments.display
        var dependencies = DependencyStates(store: store)
        let waiting = try dependencies.waitingFor(job)
        if arguments[Options.json] {
            emit(try jsonText(JobView(job, display: display, waitingFor: waiting)))
            return ExitCode.ok
        }
        var lines: [(String, String)] = [
            ("id", job.id), ("kind", job.spec.kind.rawValue), ("state", job.state.rawValue),
            ("queue", job.spec.queue), ("priority", "\(job.spec.priority)"),
            ("attempts", "\(job.attempts) of \(job.maxAttempts)"),
        ]
        if let source = job.spec.source { lines.append(("source", display.location(source))) }
        if let destination = job.spec.destination { lines.append(("destination", display.location(destination))) }
        if let data = job.spec.data { lines.append(("data", "\(plural(data.count, "byte")) inline")) }
        if job.spec.kind == .downloadMemory { lines.append(("max size", ByteSize.format(job.spec.maxSize ?? JobSpec.defaultMaxSize))) }
        if job.spec.kind == .updateMetadata {
            let set = job.spec.metadata
            var changes: [String] = [("content_type", set?.contentType), ("cache_control", set?.cacheControl),
                                     ("content_disposition", set?.contentDisposition), ("content_encoding", set?.contentEncoding),
                                     ("content_language", set?.contentLanguage)].compactMap { name, value in
                value.map { "\(name)=\(display.text($0))" }
            }
            changes += (set?.customMetadata ?? [:]).sorted { $0.key < $1.key }.map { "custom \(display.text($0.key))=\(display.metadataValue($0.value, key: $0.key))" }
            changes += (job.spec.removeCustomMetadata ?? []).map { "delete custom \(display.text($0))" }
            changes += (job.spec.clearMetadata ?? []).map { $0 == .customMetadata ? "delete every custom key" : "remove \($0.rawValue)" }
            lines.append(("changes", changes.joined(separator: ", ")))
        }
        if let timeout = job.spec.timeoutSeconds { lines.append(("timeout", DurationText.format(timeout))) }
        if let checksums = job.spec.checksums { lines.append(("checksums", checksums.map(\.rawValue).joined(separator: ", "))) }
        if let ifExists = job.spec.ifExists { lines.append(("if exists", ifExists.rawValue)) }
        if let rate = job.spec.maxRate { lines.append(("max rate", "\(ByteSize.format(rate))/s")) }
        if let generation = job.spec.ifGeneration { lines.append(("if generation", "\(generation)")) }
        if let key = job.spec.key { lines.append(("key", key)) }
        if let after = job.spec.after { lines.append(("after", DependencyStates.listed(after, atMost: DependencyStates.shownIDs))) }
        if let waiting, !waiting.isEmpty {
            lines.append(("waiting", "waiting for " + DependencyStates.listed(dependencies.shown(waiting), atMost: DependencyStates.shownIDs)))
        }
        if let batch = job.spec.batch {
            lines.append(("batch", batch.id))
            var origin = "\(display.text(batch.source)) → \(batch.path)"
            if let include = batch.include { origin += "; include \(include.joined(separator: ", "))" }
            if let exclude = batch.exclude { origin += "; exclude \(exclude.joined(separator: ", "))" }
            lines.append(("expanded from", origin))
        }
        if job.spec.kind.movesNoBytes {
            // A metadata operation, a delete or a download URL moves no object's bytes: `bytes: 0 B (100%)`
            // read as an empty object, beside an `object:` line saying `size unknown`.
        } else if job.state == .succeeded, job.result?.skipped == true {
            // Nothing of this job's was written: the bytes recorded are the destination's or a transfer's
            // that was dropped, and "9 B of 976.6 KiB (100%)" read as a short transfer that succeeded.
            lines.append(("bytes", "none written (skipped)" + (job.bytesTotal.map { "; the source has \(ByteSize.format($0))" } ?? "")))
        } else {
            let total = job.bytesTotal.map { " of \(ByteSize.format($0))" } ?? ""
            let confirmed = job.spec.kind.isUpload && job.state != .succeeded ? " confirmed" : ""
            var bytes = "\(ByteSize.format(job.confirmedBytes))\(total)\(confirmed) (\(job.progressText))"
            if let sent = job.unconfirmedBytes { bytes += "; \(ByteSize.format(sent)) sent" }
            lines.append(("bytes", bytes))
        }
        if let resume = job.displayedResumePoint { lines.append(("resume at", Describe.resumePoint(resume))) }
        if job.pauseRequested { lines.append(("pending", "pause requested")) }
        if job.cancelRequested { lines.append(("pending", "cancel requested")) }
        if let owner = job.leaseOwner { lines.append(("lease", "\(owner) (token \(job.leaseToken ?? 0))")) }
        lines.append(("created", RFC3339.string(job.createdAtMs)))
        if let started = job.startedAtMs { lines.append(("started", RFC3339.string(started))) }
        if let finished = job.finishedAtMs { lines.append(("finished", RFC3339.string(finished))) }
        if job.state == .queued || job.state == .paused, job.runAfterMs > Clock.nowMs() {
            // Before its first attempt a job held back is scheduled; after one, it waits for its next try.
            // A paused job keeps its time through `resume`: said so, or its wait only showed in --json.
            let scheduled = job.attempts == 0 && job.error == nil
            let once = job.state == .paused ? " (once resumed)" : ""
            lines.append((scheduled ? "runs at" : "next try", RFC3339.string(job.runAfterMs) + once))
        } else if let scheduled = job.spec.runAfterMs {
            lines.append(("scheduled", RFC3339.string(scheduled)))
        }
        if let error = job.error {
            var text = "\(error.code.name) (\(error.code.rawValue)): \(display.message(error))"
            if job.retryScheduled || job.pausedRetryWaits {
                let once = job.state == .paused ? " once resumed" : ""
                text += "; attempt \(job.attempts.saturatingAdding(1)) of \(job.maxAttempts) at \(RFC3339.string(job.runAfterMs))\(once)"
                if let cap = RetryPolicy.default.cappedRetryAfterMs(error.retryAfter), let asked = error.retryAfter {
                    let seconds = asked < 1e15 ? "\(Int64(asked.rounded(.up)))" : "\(asked)"
                    text += " (the server's Retry-After of \(seconds) s, capped at \(TimeText.duration(seconds: cap / 1000)))"
                }
            }
            lines.append(("error", text))
            if let status = error.httpStatus { lines.append(("http status", "\(status)")) }
            if let url = error.url { lines.append(("url", display.url(url))) }
            if let cause = display.cause(error) { lines.append(("cause", cause)) }
        }
        if let result = job.result {
            if result.skipped == true {
                // In place before the transfer, or written there while it ran (what it moved then was
                // discarded): "nothing was transferred" was not so in the second case.
                lines.append(("skipped", "the destination was in place (if_exists: \(job.spec.ifExists?.rawValue ?? "skip")): it was left as it "
                                  + "is, and nothing of this job's was written there"))
            }
            if let path = result.path { lines.append(("result path", display.location(path))) }
            if let size = result.size { lines.append(("result size", plural(size, "byte"))) }
            // A hash computed but not compared with the server's says so: alike, it read as a verified one.
            if let md5 = result.md5 {
                lines.append(("md5", md5 + (VerifiedHashes.isUnverified(.md5, in: result) ? VerifiedHashes.unverifiedNote : "")))
            }
            if let crc = result.crc32c {
                lines.append(("crc32c", crc + (VerifiedHashes.isUnverified(.crc32c, in: result) ? VerifiedHashes.unverifiedNote : "")))
            }
            if let url = result.url { lines.append(("url", display.url(url))) }
            if let blob = result.bytesSHA256 {
                // A blob `archive --blobs-before` removed is named as such: `jobctl result` would only say so.
                var expired: ExpiredBlob?
                if result.data == nil, result.blob != nil, try store.blobSize(sha256: blob) == nil {
                    expired = try store.expiredBlob(sha256: blob)
                }
                let remedy = expired.map { "expired \(RFC3339.string($0.expiredAtMs)) (jobctl archive --blobs-before)" }
                    ?? "jobctl result \(job.id)"
                lines.append(("blob", "sha256:\(blob) (\(remedy))"))
            }
            if let object = result.object {
                let name = Display.escapingControls("\(object.bucket)/\(display.objectName(object.name))")
                lines.append(("object", "\(name) (\(object.knownSize.map { plural($0, "byte") } ?? "size unknown"), \(object.contentType ?? "?"))"))
                if let generation = object.generation { lines.append(("generation", generation)) }
            }
        }
        let width = (lines.map(\.0.count).max() ?? 0) + 2
        let lineWidth = context.width
        emit(lines.map { label, raw in
            // Values quote server replies and manifest values: control characters shown, never sent.
            let value = label == "state" ? context.paint(state: job.state) : TerminalText.printable(raw)
            let head = (label + ":").padding(toLength: width, withPad: " ", startingAt: 0)
            guard let lineWidth, lineWidth - width >= 20, visibleWidth(value) > lineWidth - width else { return head + value }
            let indent = String(repeating: " ", count: width)
            return head + wrap(value, width: lineWidth - width).joined(separator: "\n" + indent)
        }.joined(separator: "\n"))
        return ExitCode.ok
    }

    static let history = CommandSpec(
        name: "history",
        abstract: "Show every event of a job, oldest first.",
        arguments: [ArgumentSpec("id", help: "A job id, a unique prefix of one, or the job's key; `log` for the log's own events (archives).")],
        options: [Options.json.help("Print the events as a JSON array (every event, --type applied)."), Options.showSecrets,
                  Options.eventType, Options.allEvents],
        discussion: """
        A run of consecutive progress events is shown as one line (how many, the bytes at its first and
        last, and the time it spans); --all shows each event. --type keeps only events of those types.
        """
    ) { arguments, context in
        let store = try context.openStore(readOnly: true)
        // `log` is the log's own pseudo job: its events record the archives (`jobctl archive`).
        let jobID = arguments.positionals[0] == ArchiveRecord.logJobID
            ? ArchiveRecord.logJobID : try store.job(resolving: arguments.positionals[0]).id
        let types = Set(try arguments.values(Options.eventType).flatMap { $0 })
        let events = try store.events(jobID: jobID).filter { types.isEmpty || types.contains($0.type) }
        let display = arguments.display
        if arguments[Options.json] {
            emit(try jsonText(events.map { EventView($0, display: display) }))
            return ExitCode.ok
        }
        let entries = arguments[Options.allEvents] ? events.map(HistoryEntry.event) : HistoryEntry.summarising(events)
        let rows = entries.map { entry -> [String] in
            switch entry {
            case .event(let event):
                return ["\(event.seq ?? 0)", "\(event.version)", RFC3339.string(event.atMs), event.type.rawValue, event.actor,
                        Describe.event(event, display: display)]
            case .progressRun(let first, let last, let count):
                return ["\(first.seq ?? 0)–\(last.seq ?? 0)", "\(first.version)–\(last.version)", RFC3339.string(first.atMs),
                        "progress ×\(count)", first.actor == last.actor ? first.actor : "\(first.actor), …",
                        HistoryEntry.describeRun(first, last, count)]
            }
        }
        let columns = [
            TableColumn("SEQ", dropRank: 1), TableColumn("VER", dropRank: 2), TableColumn("TIME"), TableColumn("TYPE"),
            TableColumn("ACTOR", fit: .elide(minimum: 12), dropRank: 3), TableColumn("DETAILS", fit: .wrap(minimum: 36)),
        ]
        emit(renderTable(columns, rows, width: context.width).text)
        return ExitCode.ok
    }

    static let replay = CommandSpec(
        name: "replay",
        abstract: "Rebuild the job projection from the event log alone.",
        options: [Options.verify, Options.json.help("Print the report as JSON.")],
        discussion: """
        The jobs table (what list, show, stats and the workers read) is a projection: every job's row
        is the fold of its events. replay folds the whole log again and writes the rows it gets, in one
        transaction; with --verify it writes nothing, compares job by job (each compared, then
        forgotten, so memory does not grow with the log) and exits 1 on any difference. A log holding an
        event this jobctl cannot apply (a type a newer jobctl wrote, a damaged payload) is refused (exit
        1) and nothing is rewritten; --verify names on standard error the jobs with an event of a type a
        newer jobctl wrote, which it cannot check, and compares the others. Run `jobctl replay --verify` after restoring a backup, after a disk
        error, or to audit that the table says what the log says.
        """
    ) { arguments, context in
        let verify = arguments[Options.verify]
        let store = try context.openStore(readOnly: verify, wholeLog: true)
        let report = try store.replay(verify: verify)
        // Stored columns hold specs, errors and session URIs: their URLs are redacted like any other.
        let display = Display.redacting
        if arguments[Options.json] {
            struct Difference: Encodable { let job_id: String; let column: String; let stored: String?; let rebuilt: String? }
            struct View: Encodable {
                let events: Int; let jobs: Int; let consistent: Bool; let rewritten: Bool
                let differences: [Difference]; let problems: [String]; let unchecked: [Unchecked]
            }
            struct Unchecked: Encodable { let job_id: String; let event_type: String }
            emit(try jsonText(View(events: report.eventsRead, jobs: report.jobsRebuilt, consistent: report.isConsistent,
                                   rewritten: report.rewritten,
                                   differences: report.differences.map {
                                       Difference(job_id: $0.jobID, column: $0.column, stored: $0.stored.map(display.text),
                                                  rebuilt: $0.rebuilt.map(display.text))
                                   },
                                   problems: report.problems.map(display.text),
                                   unchecked: report.unchecked.sorted { $0.key < $1.key }.map { Unchecked(job_id: $0.key, event_type: $0.value) })))
        } else if verify {
            for difference in report.differences {
                emit(TerminalText.printable("\(difference.jobID)  \(difference.column): stored \(difference.stored.map(display.text) ?? "null") ≠ rebuilt \(difference.rebuilt.map(display.text) ?? "null")"))
            }
            for problem in report.problems { emit("problem: \(TerminalText.printable(display.text(problem)))") }
            // Not a fault of the log: said on standard error, and the exit status is the rest's.
            for (id, type) in report.unchecked.sorted(by: { $0.key < $1.key }) {
                emitError("not checked: job \(id) has an event of type '\(TerminalText.storedName(type))', which this jobctl does not know: "
                          + "a newer jobctl wrote it; upgrade this jobctl to check that job")
            }
            let outcome = report.isConsistent
                ? "projection matches"
                : "\(plural(report.differences.count, "difference")), \(plural(report.problems.count, "problem"))"
            let unchecked = report.unchecked.isEmpty ? "" : " (\(plural(report.unchecked.count, "job")) not checked)"
            emit("replayed \(plural(report.eventsRead, "event")) into \(plural(report.jobsRebuilt, "job")): \(outcome)\(unchecked)")
        } else {
            emit("replayed \(plural(report.eventsRead, "event")); rebuilt \(plural(report.jobsRebuilt, "job"))")
        }
        return verify && !report.isConsistent ? ExitCode.failure : ExitCode.ok
    }

    static let migrate = CommandSpec(
        name: "migrate",
        abstract: "Create the database if needed and apply pending schema migrations (writing commands also migrate on open).",
        options: [Options.json.help("Print the applied versions (with --to: what was copied) as JSON."), Options.migrateTo, Options.force, Options.grant],
        discussion: """
        With --to postgres://…, copies the log of --db (an SQLite file) into an empty PostgreSQL database:
        the schema is created there, every event is copied in seq order byte for byte (versions, times,
        actors, lease tokens), every blob too (and the records of those `archive --blobs-before`
        removed), the fencing-token sequence is set past the highest token,
        and the job projection is rebuilt by replay's fold; then the target is checked as by
        `jobctl replay --verify`, and the command fails (exit 1) if it does not match. A target that
        already holds events, jobs, blobs, expired blobs or leases is refused and left unchanged.
        Leases are not copied. While any job is running the copy is refused (stop the workers first:
        what they do after the copy would be lost); with --force it goes ahead, and on the target those
        jobs have no lease, so the first worker's rescue expires them and they are retried (or fail
        when out of attempts).

        With --grant ROLE (PostgreSQL, run as the role that owns the tables): after migrating, gives the
        existing ROLE what `jobctl worker` and every other command need and nothing else: \(WorkerRoleGrants.prose).
        It cannot change or delete events, truncate, disable the triggers, drop tables or
        reset the fencing-token sequence. Run it again after an upgrade; later migrations also re-grant
        the roles that hold INSERT on the log.
        """
    ) { arguments, context in
        if let target = try arguments.value(Options.migrateTo) {
            return try copyLog(to: target, force: arguments[Options.force], json: arguments[Options.json], context: context)
        }
        if arguments[Options.force] { throw UsageError("--force applies only with --to") }
        let grant = try arguments.value(Options.grant)
        if grant != nil && !isPostgresURL(context.databasePath) {
            throw UsageError("--grant applies only to a PostgreSQL database (--db postgres://…): an SQLite file has no roles")
        }
        let store = try context.openStore(create: true, wholeLog: true, announcesUpgrade: false)
        let applied = store.appliedMigrations
        if let grant, let postgres = store as? PostgresStore {
            try postgres.grantWorkerRole(grant)
        }
        // A ledger that lists every migration says nothing of a table or index since dropped by hand.
        let damage = try store.schemaProblems()
        guard damage.isEmpty else {
            for problem in damage { emitError("problem: \(problem)") }
            throw CommandFailure("the log's schema is not what its migrations made (\(plural(damage.count, "problem")) above)")
        }
        if arguments[Options.json] {
            struct View: Encodable { let applied: [Int]; let granted: String?; let privileges: [String]? }
            emit(try jsonText(View(applied: applied, granted: grant, privileges: grant.map { _ in WorkerRoleGrants.summary })))
        } else {
            if applied.isEmpty {
                emit("schema is up to date")
            } else {
                emit("applied \(applied.count == 1 ? "migration" : "migrations") \(applied.map(String.init).joined(separator: ", "))")
            }
            if let grant {
                emit("granted \(grant): " + WorkerRoleGrants.summary.joined(separator: "; "))
            }
        }
        return ExitCode.ok
    }

    /// `jobctl migrate --to`: copies the --db log into an empty PostgreSQL database and verifies it.
    private static func copyLog(to target: String, force: Bool, json: Bool, context: Context) throws -> Int32 {
        let source = try context.openStore(wholeLog: true)
        let runningBefore = try source.counts()[.running] ?? 0
        if runningBefore > 0 && !force {
            throw CommandFailure("\(plural(runningBefore, "job")) \(runningBefore == 1 ? "is" : "are") running in \(context.databaseDisplay); nothing was copied: "
                + "stop its workers first (what they do after the copy would be lost), or pass --force to copy anyway "
                + "(on the target those jobs have no lease, and the first worker's rescue expires them)")
        }
        let destination = try PostgresStore(url: target, mode: .create)
        // Looked at again inside the copy's transaction: a job claimed since this look is refused there too.
        let copied: LogImport
        do {
            copied = try destination.importLog(from: source, allowingRunning: force)
        } catch {
            guard case .commitUnconfirmed(let loss) = error else { throw error }
            throw CommandFailure(LostCommit.copy(loss: loss))
        }
        let running = copied.runningJobs
        let check = try destination.replay(verify: true)
        if json {
            struct View: Encodable {
                let target: String; let events: Int; let blobs: Int; let expired_blobs: Int; let jobs: Int; let highest_lease_token: Int64
                let running_without_lease: Int; let verified: Bool; let differences: Int; let problems: [String]
            }
            emit(try jsonText(View(target: destination.location, events: copied.events, blobs: copied.blobs,
                                   expired_blobs: copied.expiredBlobs, jobs: copied.jobs,
                                   highest_lease_token: copied.highestLeaseToken, running_without_lease: running,
                                   verified: check.isConsistent, differences: check.differences.count,
                                   problems: check.problems.map(Display.redacting.text))))
        } else {
            emit("copied \(plural(copied.events, "event")) of \(plural(copied.jobs, "job")) and \(plural(copied.blobs, "blob")) "
                 + "from \(context.databaseDisplay) to \(destination.location)")
            if copied.expiredBlobs > 0 {
                emit("\(plural(copied.expiredBlobs, "expired blob")) recorded as expired on the target too "
                     + "(their bytes were removed by `jobctl archive --blobs-before`)")
            }
            if running > 0 {
                emit("\(plural(running, "running job")) copied without a lease: the first worker on the target rescues \(running == 1 ? "it" : "them")")
            }
        }
        guard check.isConsistent else {
            for problem in check.problems { emitError("problem: \(Display.redacting.text(problem))") }
            throw CommandFailure("verification failed on \(destination.location): \(plural(check.differences.count, "difference")), "
                + "\(plural(check.problems.count, "problem")) between the copied log and its projection; "
                + "run `jobctl replay --verify --db <target>` for the details")
        }
        if !json { emit("verified: replaying \(plural(check.eventsRead, "event")) on the target matches the projection") }
        return ExitCode.ok
    }
}

/// One line of `history`: an event, or a run of consecutive `progress` events shown together.
enum HistoryEntry: Equatable {
    case event(JobEvent)
    case progressRun(first: JobEvent, last: JobEvent, count: Int)

    /// `events` with every run of two or more consecutive `progress` events folded into one entry.
    static func summarising(_ events: [JobEvent]) -> [HistoryEntry] {
        var entries: [HistoryEntry] = []
        var run: [JobEvent] = []
        func closeRun() {
            if run.count == 1, let only = run.first { entries.append(.event(only)) }
            if run.count > 1, let first = run.first, let last = run.last {
                entries.append(.progressRun(first: first, last: last, count: run.count))
            }
            run = []
        }
        for event in events {
            if event.type == .progress {
                run.append(event)
            } else {
                closeRun()
                entries.append(.event(event))
            }
        }
        closeRun()
        return entries
    }

    /// "12 progress events over 9s: 1.0 MB → 10.0 MB of 10.0 MB".
    static func describeRun(_ first: JobEvent, _ last: JobEvent, _ count: Int) -> String {
        var text = "\(count) progress events over \(TimeText.duration(seconds: max(0, TimeText.between(first.atMs, last.atMs)) / 1_000))"
        if let from = first.data.bytesDone, let to = last.data.bytesDone {
            text += ": \(ByteSize.format(from)) → \(ByteSize.format(to))"
            if let total = last.data.bytesTotal { text += " of \(ByteSize.format(total))" }
        }
        return text + " (--all shows each)"
    }
}

// MARK: - Dependencies

/// What queued and paused jobs still wait for, reading each dependency once.
struct DependencyStates {
    let store: any JobStore
    private var succeeded: [String: Bool] = [:]
    /// The dependencies this jobctl cannot read — of a kind, or with an event of a type, a newer jobctl
    /// wrote — by id, with what it does not know (`of kind 'K'`): waited for all the same, and named so.
    private(set) var newer: [String: String] = [:]

    init(store: any JobStore) {
        self.store = store
    }

    /// The ids among `job`'s `after:` that have not succeeded, for a queued or paused job (a dependency no
    /// longer in the log, archived, no longer holds it back); nil for any other job or one without `after:`.
    ///
    /// A dependency a newer jobctl wrote is taken by its stored state (as `stats` counts it), read without
    /// its spec: reading the whole job threw, and one such dependency made `list` and `show` of every
    /// job waiting for it fail ("upgrade this one"), where those commands read around such jobs.
    mutating func waitingFor(_ job: JobRecord) throws -> [String]? {
        guard let after = job.spec.after, job.state == .queued || job.state == .paused else { return nil }
        var waiting: [String] = []
        for id in after {
            if succeeded[id] == nil {
                let state: JobState?
                do throws(StoreError) {
                    state = try store.job(id)?.state
                } catch {
                    guard let unknown = Self.newerNote(error) else { throw error }
                    newer[id] = unknown
                    state = try store.controlStates(ids: [id]).first?.state
                }
                succeeded[id] = state == nil || state == .succeeded
            }
            if succeeded[id] == false { waiting.append(id) }
        }
        return waiting
    }

    /// What this jobctl does not know of a job it could not read because a newer jobctl wrote it, or nil
    /// for any other error.
    private static func newerNote(_ error: StoreError) -> String? {
        switch error {
        case .unknownKind(_, let kind): "of kind '\(TerminalText.storedName(kind))'"
        case .unknownEventType(_, let type): "with an event of type '\(TerminalText.storedName(type))'"
        default: nil
        }
    }

    /// `ids` for people: each dependency a newer jobctl wrote followed by what this one does not know of it.
    func shown(_ ids: [String]) -> [String] {
        ids.map { id in newer[id].map { "\(id) (a job \($0), which only a newer jobctl runs)" } ?? id }
    }

    /// "waiting for 01ABCDEFGH…, 01DEFGHJKM…" for a table cell (at most `cellIDs` ids, then "and N
    /// more"), "-" for none.
    func text(_ waiting: [String]?) -> String {
        guard let waiting, !waiting.isEmpty else { return "-" }
        return "waiting for " + Self.listed(waiting.map { id in
            (id.count > 10 ? id.prefix(10) + "…" : id) + (newer[id] == nil ? "" : " (a newer jobctl's)")
        }, atMost: Self.cellIDs)
    }

    /// Ids a `list` cell names; `show` names up to `shownIDs`. A job after 10,000 others printed every id:
    /// 150 KB for `list --limit 3`, 560 KB for `show` (`--json` keeps them all).
    static let cellIDs = 3
    static let shownIDs = 20

    /// `ids` joined by commas, the first `limit` of them, then "and N more".
    static func listed(_ ids: [String], atMost limit: Int) -> String {
        guard ids.count > limit else { return ids.joined(separator: ", ") }
        return ids.prefix(limit).joined(separator: ", ") + " and \(plural(ids.count - limit, "more", "more"))"
    }
}
