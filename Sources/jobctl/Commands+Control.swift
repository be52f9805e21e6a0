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

    static let resume = controlCommand(
        "resume", abstract: "Re-queue paused jobs; they continue from their resume point.",
        discussion: """
        An upload continues from the offset the server confirmed; a download from the bytes already written.
        Resuming a running job whose pause is still pending withdraws the pause. Any job that is not paused
        (queued, running, being cancelled, finished) is refused (exit 1).
        """
    ) { store, id, context in try store.requestResume(id: id, actor: context.actor, now: Clock.nowMs()) }

    static let cancel = controlCommand(
        "cancel", abstract: "Cancel queued, running or paused jobs (they fail with code 'cancelled').",
        discussion: """
        Partial local files are removed. 'jobctl retry' re-opens a cancelled job. A running job whose worker
        stops it some other way first (a pause, a shutdown, a retry, a crash) is cancelled then. Cancelling a
        cancelled job (or one whose cancel is pending) changes nothing and exits 0; succeeded and failed jobs
        are refused (exit 1).
        """
    ) { store, id, context in try store.requestCancel(id: id, actor: context.actor, now: Clock.nowMs()) }

    static let retry = controlCommand(
        "retry", abstract: "Re-queue failed or cancelled jobs as a new attempt.",
        discussion: "The attempt budget starts again; the history keeps every earlier attempt. Other jobs are refused (exit 1)."
    ) { store, id, context in try store.retry(id: id, actor: context.actor, now: Clock.nowMs()) }

    /// pause/resume/cancel/retry share their shape: ids in, one line per job out, exit 1 if any was refused.
    /// A harmless repeat (pausing a paused job, cancelling a cancelled one) exits 0 and says so.
    private static func controlCommand(
        _ name: String, abstract: String, discussion: String,
        action: @escaping @Sendable (any JobStore, String, Context) throws -> ControlResult
    ) -> CommandSpec {
        CommandSpec(
            name: name, abstract: abstract,
            arguments: [ArgumentSpec("id", variadic: true, help: "Job ids (or unique prefixes).")],
            options: [OptionSpec("json", help: "Print the resulting jobs as JSON.")],
            discussion: discussion
        ) { arguments, context in
            let store = try context.openStore()
            var views: [JobView] = []
            var refused = 0
            for given in arguments.positionals {
                do {
                    let id = try store.resolveID(given)
                    let outcome = try action(store, id, context)
                    let record = outcome.record
                    views.append(JobView(record))
                    if !arguments.flag("json") {
                        var note = record.pauseRequested ? " (pause requested)" : record.cancelRequested ? " (cancel requested)" : ""
                        if outcome.isRepeat { note += " (already so; nothing changed)" }
                        emit("\(record.id)  \(context.paint(state: record.state))\(note)")
                    }
                } catch {
                    refused += 1
                    emitError("Error: \(given): \(error)")
                }
            }
            if arguments.flag("json") { emit(try jsonText(views)) }
            return refused == 0 ? ExitCode.ok : ExitCode.failure
        }
    }

    static let result = CommandSpec(
        name: "result",
        abstract: "Print what a finished job produced.",
        arguments: [ArgumentSpec("id", help: "A job id (or a unique prefix).")],
        options: [
            OptionSpec("output", short: "o", value: "file", help: "Write a memory download's bytes to this file instead of standard output."),
            OptionSpec("json", help: "Print the result record as JSON."),
        ],
        discussion: """
        download-memory: the bytes; fetch-url: the download URL; uploads: the object's metadata as JSON;
        download-file: the local path.
        """
    ) { arguments, context in
        let store = try context.openStore(readOnly: true)
        let job = try store.job(resolving: arguments.positionals[0])
        guard job.state == .succeeded, let result = job.result else {
            let why = job.error.map { ": \($0.code.name): \($0.message)" } ?? ""
            throw CommandFailure("job \(job.id) is \(job.state.rawValue)\(why); only succeeded jobs have a result")
        }
        if arguments.flag("json") {
            emit(try jsonText(result))
            return ExitCode.ok
        }
        switch job.spec.kind {
        case .downloadMemory:
            guard let hash = result.blob, let bytes = try store.blob(sha256: hash) else {
                throw CommandFailure("job \(job.id): the result blob is missing from the log")
            }
            if let output = arguments.value("output") {
                guard FileManager.default.createFile(atPath: output, contents: bytes) else {
                    throw CommandFailure("cannot write '\(output)': \(String(cString: strerror(errno)))")
                }
            } else {
                FileHandle.standardOutput.write(bytes)
            }
        case .fetchURL:
            emit(result.url ?? "")
        case .downloadFile:
            emit(result.path ?? job.spec.destination ?? "")
        case .uploadFile, .uploadData:
            emit(try jsonText(result.object))
        }
        return ExitCode.ok
    }

    static let audit = CommandSpec(
        name: "audit",
        abstract: "One row per job: outcome, sizes, checksums, attempts, start and end times.",
        options: [
            OptionSpec("since", value: "time", help: "Jobs submitted at or after this time (RFC 3339, a date, or relative: 90s, 15m, 1h, 7d)."),
            OptionSpec("until", value: "time", help: "Jobs submitted before this time."),
            OptionSpec("state", value: "state", repeatable: true, help: "Only jobs in this state; repeatable or comma-separated."),
            OptionSpec("kind", value: "kind", repeatable: true, help: "Only jobs of this kind; repeatable or comma-separated."),
            OptionSpec("json", help: "Print a JSON array."),
            OptionSpec("csv", help: "Print CSV (RFC 4180) with a header row."),
        ]
    ) { arguments, context in
        if arguments.flag("json") && arguments.flag("csv") { throw UsageError("--json and --csv cannot be combined") }
        let now = Clock.nowMs()
        let filter = JobFilter(states: try arguments.stateSet(), kinds: try arguments.kindSet(), queue: nil, limit: nil,
                               createdSince: try arguments.time("since", now: now), createdUntil: try arguments.time("until", now: now))
        let store = try context.openStore(readOnly: true)
        let rows = try store.jobs(filter: filter).reversed().map(AuditRow.init)
        if arguments.flag("json") {
            emit(try jsonText(Array(rows)))
        } else if arguments.flag("csv") {
            emit(([AuditRow.csvHeader] + rows.map(\.csvLine)).joined(separator: "\n"))
        } else if rows.isEmpty {
            emit("no jobs")
        } else {
            let table = rows.map { row in
                [row.id, row.kind, context.paint(state: JobState(rawValue: row.state) ?? .queued), "\(row.attempts)",
                 row.size.map { ByteSize.format($0) } ?? "-", row.md5 ?? "-", row.crc32c ?? "-",
                 row.startedAt ?? "-", row.finishedAt ?? "-", row.errorName ?? ""]
            }
            emit(renderTable(["ID", "KIND", "OUTCOME", "ATTEMPTS", "SIZE", "MD5", "CRC32C", "STARTED", "FINISHED", "ERROR"], table))
            var counts: [String: Int] = [:]
            for row in rows { counts[row.state, default: 0] += 1 }
            emit("\(rows.count) job(s): " + counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", "))
        }
        return ExitCode.ok
    }
}

/// One row of `jobctl audit`.
struct AuditRow: Encodable {
    let id: String
    let kind: String
    let state: String
    let attempts: Int
    let source: String?
    let destination: String?
    let size: Int64?
    let md5: String?
    let crc32c: String?
    let submittedAt: String
    let startedAt: String?
    let finishedAt: String?
    let errorCode: Int?
    let errorName: String?
    let errorMessage: String?

    init(_ job: JobRecord) {
        id = job.id
        kind = job.spec.kind.rawValue
        state = job.state.rawValue
        attempts = job.attempts
        source = job.spec.source
        destination = job.spec.destination
        size = job.result?.size ?? job.result?.object?.size ?? job.bytesTotal
        md5 = job.result?.md5 ?? job.result?.object?.md5Hash
        crc32c = job.result?.crc32c ?? job.result?.object?.crc32c
        submittedAt = TimeText.rfc3339(job.createdAtMs)
        startedAt = job.startedAtMs.map(TimeText.rfc3339)
        finishedAt = job.finishedAtMs.map(TimeText.rfc3339)
        errorCode = job.error?.code.rawValue
        errorName = job.error?.code.name
        errorMessage = job.error?.message
    }

    static let csvHeader = "id,kind,state,attempts,source,destination,size,md5,crc32c,submitted_at,started_at,finished_at,error_code,error_name,error_message"

    var csvLine: String {
        let fields: [String?] = [id, kind, state, "\(attempts)", source, destination, size.map(String.init), md5, crc32c,
                                 submittedAt, startedAt, finishedAt, errorCode.map(String.init), errorName, errorMessage]
        return fields.map { field in
            let text = field ?? ""
            guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
            return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
        }.joined(separator: ",")
    }

    enum CodingKeys: String, CodingKey {
        case id, kind, state, attempts, source, destination, size, md5, crc32c
        case submittedAt = "submitted_at", startedAt = "started_at", finishedAt = "finished_at"
        case errorCode = "error_code", errorName = "error_name", errorMessage = "error_message"
    }
}
