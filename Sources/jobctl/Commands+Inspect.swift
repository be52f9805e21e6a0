import EventStore
import Foundation
import JobModel

extension Commands {
    static let list = CommandSpec(
        name: "list",
        abstract: "List jobs, newest first.",
        options: [
            OptionSpec("state", value: "state", repeatable: true, help: "Only jobs in this state (queued, running, paused, succeeded, failed, cancelled); repeatable or comma-separated."),
            OptionSpec("kind", value: "kind", repeatable: true, help: "Only jobs of this kind; repeatable or comma-separated."),
            OptionSpec("queue", value: "name", help: "Only jobs of this queue."),
            OptionSpec("limit", value: "n", help: "At most n jobs (default 50; 0 for all)."),
            OptionSpec("json", help: "Print the jobs as a JSON array."),
        ]
    ) { arguments, context in
        let limit = try arguments.integer("limit") ?? 50
        guard limit >= 0 else { throw UsageError("--limit must be 0 or more") }
        let filter = JobFilter(states: try arguments.stateSet(), kinds: try arguments.kindSet(),
                               queue: arguments.value("queue"), limit: limit == 0 ? nil : limit)
        let store = try context.openStore(readOnly: true)
        let jobs = try store.jobs(filter: filter)
        if arguments.flag("json") {
            emit(try jsonText(jobs.map(JobView.init)))
            return ExitCode.ok
        }
        if jobs.isEmpty {
            emit("no jobs")
            return ExitCode.ok
        }
        let now = Clock.nowMs()
        let rows = jobs.map { job in
            [job.id, job.spec.kind.rawValue, context.paint(state: job.state), "\(job.attempts)/\(job.maxAttempts)",
             job.progressText, job.routeText, TimeText.age(job.createdAtMs, now: now)]
        }
        emit(renderTable(["ID", "KIND", "STATE", "ATTEMPTS", "PROGRESS", "SOURCE → DESTINATION", "AGE"], rows,
                         maxWidths: [5: 80]))
        return ExitCode.ok
    }

    static let show = CommandSpec(
        name: "show",
        abstract: "Show one job: spec, state, attempts, bytes, error and result.",
        arguments: [ArgumentSpec("id", help: "A job id (or a unique prefix of at least 6 characters).")],
        options: [OptionSpec("json", help: "Print the job as JSON.")]
    ) { arguments, context in
        let store = try context.openStore(readOnly: true)
        let job = try store.job(resolving: arguments.positionals[0])
        if arguments.flag("json") {
            emit(try jsonText(JobView(job)))
            return ExitCode.ok
        }
        var lines: [(String, String)] = [
            ("id", job.id), ("kind", job.spec.kind.rawValue), ("state", context.paint(state: job.state)),
            ("queue", job.spec.queue), ("priority", "\(job.spec.priority)"),
            ("attempts", "\(job.attempts) of \(job.maxAttempts)"),
        ]
        if let source = job.spec.source { lines.append(("source", source)) }
        if let destination = job.spec.destination { lines.append(("destination", destination)) }
        if let data = job.spec.data { lines.append(("data", "\(data.count) bytes inline")) }
        if job.spec.kind == .downloadMemory { lines.append(("max size", ByteSize.format(job.spec.maxSize ?? JobSpec.defaultMaxSize))) }
        if let key = job.spec.key { lines.append(("key", key)) }
        let total = job.bytesTotal.map { " of \(ByteSize.format($0))" } ?? ""
        lines.append(("bytes", "\(ByteSize.format(job.bytesDone))\(total) (\(job.progressText))"))
        if let resume = job.resumePoint { lines.append(("resume at", describe(resume))) }
        if job.pauseRequested { lines.append(("pending", "pause requested")) }
        if job.cancelRequested { lines.append(("pending", "cancel requested")) }
        if let owner = job.leaseOwner { lines.append(("lease", "\(owner) (token \(job.leaseToken ?? 0))")) }
        lines.append(("created", TimeText.rfc3339(job.createdAtMs)))
        if let started = job.startedAtMs { lines.append(("started", TimeText.rfc3339(started))) }
        if let finished = job.finishedAtMs { lines.append(("finished", TimeText.rfc3339(finished))) }
        if job.state == .queued, job.runAfterMs > Clock.nowMs() { lines.append(("next try", TimeText.rfc3339(job.runAfterMs))) }
        if let error = job.error {
            lines.append(("error", "\(error.code.name) (\(error.code.rawValue)): \(error.message)"))
            if let status = error.httpStatus { lines.append(("http status", "\(status)")) }
            if let url = error.url { lines.append(("url", url)) }
            if let cause = error.cause { lines.append(("cause", cause)) }
        }
        if let result = job.result {
            if let path = result.path { lines.append(("result path", path)) }
            if let size = result.size { lines.append(("result size", "\(size) bytes")) }
            if let md5 = result.md5 { lines.append(("md5", md5)) }
            if let crc = result.crc32c { lines.append(("crc32c", crc)) }
            if let url = result.url { lines.append(("url", url)) }
            if let blob = result.blob { lines.append(("blob", "sha256:\(blob) (jobctl result \(job.id))")) }
            if let object = result.object {
                lines.append(("object", "\(object.bucket)/\(object.name) (\(object.size) bytes, \(object.contentType ?? "?"))"))
                if let generation = object.generation { lines.append(("generation", generation)) }
            }
        }
        let width = (lines.map(\.0.count).max() ?? 0) + 2
        emit(lines.map { ($0.0 + ":").padding(toLength: width, withPad: " ", startingAt: 0) + $0.1 }.joined(separator: "\n"))
        return ExitCode.ok
    }

    static let history = CommandSpec(
        name: "history",
        abstract: "Show every event of a job, oldest first.",
        arguments: [ArgumentSpec("id", help: "A job id (or a unique prefix).")],
        options: [OptionSpec("json", help: "Print the events as a JSON array.")]
    ) { arguments, context in
        let store = try context.openStore(readOnly: true)
        let job = try store.job(resolving: arguments.positionals[0])
        let events = try store.events(jobID: job.id)
        if arguments.flag("json") {
            emit(try jsonText(events.map(EventView.init)))
            return ExitCode.ok
        }
        let rows = events.map { event in
            ["\(event.seq ?? 0)", "\(event.version)", TimeText.rfc3339(event.atMs), event.type.rawValue, event.actor, details(event)]
        }
        emit(renderTable(["SEQ", "VER", "TIME", "TYPE", "ACTOR", "DETAILS"], rows))
        return ExitCode.ok
    }

    static let replay = CommandSpec(
        name: "replay",
        abstract: "Rebuild the job projection from the event log alone.",
        options: [
            OptionSpec("verify", help: "Compare the rebuilt projection with the stored one; print differences, change nothing, exit 1 if any."),
            OptionSpec("json", help: "Print the report as JSON."),
        ]
    ) { arguments, context in
        let verify = arguments.flag("verify")
        let store = try context.openStore(readOnly: verify)
        let report = try store.replay(verify: verify)
        if arguments.flag("json") {
            struct Difference: Encodable { let job_id: String; let column: String; let stored: String?; let rebuilt: String? }
            struct View: Encodable {
                let events: Int; let jobs: Int; let consistent: Bool; let rewritten: Bool
                let differences: [Difference]; let problems: [String]
            }
            emit(try jsonText(View(events: report.eventsRead, jobs: report.jobsRebuilt, consistent: report.isConsistent,
                                   rewritten: report.rewritten,
                                   differences: report.differences.map { Difference(job_id: $0.jobID, column: $0.column, stored: $0.stored, rebuilt: $0.rebuilt) },
                                   problems: report.problems)))
        } else if verify {
            for difference in report.differences {
                emit("\(difference.jobID)  \(difference.column): stored \(difference.stored ?? "null") ≠ rebuilt \(difference.rebuilt ?? "null")")
            }
            for problem in report.problems { emit("problem: \(problem)") }
            emit("replayed \(report.eventsRead) events into \(report.jobsRebuilt) jobs: \(report.differences.isEmpty ? "projection matches" : "\(report.differences.count) difference(s), \(report.problems.count) problem(s)")")
        } else {
            emit("replayed \(report.eventsRead) events; rebuilt \(report.jobsRebuilt) jobs")
        }
        return verify && !report.isConsistent ? ExitCode.failure : ExitCode.ok
    }

    static let migrate = CommandSpec(
        name: "migrate",
        abstract: "Apply pending schema migrations (every command also does this on open).",
        options: [OptionSpec("json", help: "Print the applied versions as JSON.")]
    ) { arguments, context in
        let applied = try EventStore.migrate(path: context.databasePath)
        if arguments.flag("json") {
            emit(try jsonText(["applied": applied]))
        } else if applied.isEmpty {
            emit("schema is up to date")
        } else {
            emit("applied migration(s) \(applied.map(String.init).joined(separator: ", "))")
        }
        return ExitCode.ok
    }

    // MARK: - Helpers

    static func describe(_ resume: ResumePoint) -> String {
        switch resume {
        case .upload(_, let offset, let total):
            "upload session, \(ByteSize.format(offset)) confirmed" + (total.map { " of \(ByteSize.format($0))" } ?? "")
        case .download(let written, let generation, _, _, _):
            "\(ByteSize.format(written)) written" + (generation.map { " (generation \($0))" } ?? "")
        }
    }

    static func details(_ event: JobEvent) -> String {
        let data = event.data
        var parts: [String] = []
        if let spec = data.spec { parts.append(spec.kind.rawValue) }
        if let owner = data.leaseOwner { parts.append("lease \(event.leaseToken ?? 0) → \(owner)") }
        if let attempt = data.attempt { parts.append("attempt \(attempt)") }
        if let done = data.bytesDone {
            parts.append(ByteSize.format(done) + (data.bytesTotal.map { "/\(ByteSize.format($0))" } ?? ""))
        }
        if let resume = data.resumePoint { parts.append("resume: \(describe(resume))") }
        if let error = data.error { parts.append("\(error.code.name): \(error.message)") }
        if let retry = data.retryAtMs { parts.append("retry at \(TimeText.rfc3339(retry))") }
        if let result = data.result {
            if let size = result.size { parts.append("\(size) bytes") }
            if let url = result.url { parts.append(url) }
            if let path = result.path { parts.append(path) }
        }
        if let reason = data.reason { parts.append(reason) }
        return parts.joined(separator: "; ")
    }
}

// MARK: - JSON views

/// A job as `list --json` and `show --json` print it (snake_case, error with code and name).
struct JobView: Encodable {
    let id: String
    let kind: String
    let state: String
    let queue: String
    let priority: Int
    let attempts: Int
    let maxAttempts: Int
    let source: String?
    let destination: String?
    let key: String?
    let bytesDone: Int64
    let bytesTotal: Int64?
    let resumePoint: ResumePoint?
    let pauseRequested: Bool
    let cancelRequested: Bool
    let error: ErrorSummary?
    let result: JobResult?
    let spec: JobSpec
    let createdAt: String
    let startedAt: String?
    let finishedAt: String?
    let runAfter: String

    init(_ job: JobRecord) {
        id = job.id
        kind = job.spec.kind.rawValue
        state = job.state.rawValue
        queue = job.spec.queue
        priority = job.spec.priority
        attempts = job.attempts
        maxAttempts = job.maxAttempts
        source = job.spec.source
        destination = job.spec.destination
        key = job.spec.key
        bytesDone = job.bytesDone
        bytesTotal = job.bytesTotal
        resumePoint = job.resumePoint
        pauseRequested = job.pauseRequested
        cancelRequested = job.cancelRequested
        error = job.error?.summary
        result = job.result
        spec = job.spec
        createdAt = TimeText.rfc3339(job.createdAtMs)
        startedAt = job.startedAtMs.map(TimeText.rfc3339)
        finishedAt = job.finishedAtMs.map(TimeText.rfc3339)
        runAfter = TimeText.rfc3339(job.runAfterMs)
    }

    enum CodingKeys: String, CodingKey {
        case id, kind, state, queue, priority, attempts, source, destination, key, error, result, spec
        case maxAttempts = "max_attempts", bytesDone = "bytes_done", bytesTotal = "bytes_total"
        case resumePoint = "resume_point", pauseRequested = "pause_requested", cancelRequested = "cancel_requested"
        case createdAt = "created_at", startedAt = "started_at", finishedAt = "finished_at", runAfter = "run_after"
    }
}

/// An event as `history --json` and `watch --json` print it.
struct EventView: Encodable {
    let seq: Int64?
    let jobID: String
    let version: Int
    let time: String
    let type: String
    let status: String?
    let actor: String
    let lease: Int64?
    let data: EventData

    init(_ event: JobEvent) {
        seq = event.seq
        jobID = event.jobID
        version = event.version
        time = TimeText.rfc3339(event.atMs)
        type = event.type.rawValue
        status = ObserverStatus(event.type)?.rawValue
        actor = event.actor
        lease = event.leaseToken
        data = event.data
    }

    enum CodingKeys: String, CodingKey {
        case seq, version, time, type, status, actor, lease, data
        case jobID = "job_id"
    }
}
