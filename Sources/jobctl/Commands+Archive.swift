import Foundation
import JobLifecycle
import JobModel
import Retention
import Storage
import StorePort
import Worker

extension Commands {
    /// Set to a path, `jobctl archive` creates that file and then waits just before its removal
    /// transaction commits, until the file is removed (then it commits) or the process is killed: how the
    /// crash and race tests stop it at the worst moment. Never set it in production.
    static let archiveHoldEnvironment = "JOBCTL_TEST_ARCHIVE_HOLD_BEFORE_COMMIT"

    static let archive = CommandSpec(
        name: "archive",
        abstract: "Move finished jobs out of the log into a compressed, checksummed archive file; or check one.",
        arguments: [ArgumentSpec("verify", optional: true, choices: ["verify"], help: "`verify`: check the archive file given next instead of archiving."),
                    ArgumentSpec("file", optional: true, completesFiles: true, help: "With verify: the archive file to check.")],
        options: [Options.archiveBefore, Options.archiveTo, Options.blobsBefore,
                  Options.dryRun.help("Print what would be archived; write and remove nothing."),
                  Options.json.help("Print the outcome as JSON.")],
        discussion: """
        `jobctl archive --before 90d --to FILE` takes the succeeded, failed and cancelled jobs that finished
        before then and writes their events (byte for byte) and the blobs they produced to FILE:
        gzip-compressed NDJSON with a header line (format version, range, counts) and a trailer carrying
        the SHA-256 of the content. The file is written under a temporary name, synced, renamed and read
        back in full; only then does one transaction remove those jobs' events, rows and leases, and the
        blobs no remaining job references, and record the archive (file name, sha256, range and counts)
        as an `archived` event of the log itself. This is the only way anything leaves the log. Then the
        partial downloads, upload sessions and sidecar temporaries those jobs left on this machine are
        removed (as `jobctl orphans --remove` would): out of the log, nothing could tie them to a job again.

        If the command is interrupted before that transaction commits, the log is unchanged; running it
        again writes FILE anew (a file left by an interrupted run is replaced, an archive the log records
        never is); if that transaction fails, the file is removed again. Archives writing into one folder
        take turns (a lock on the folder), so two with one FILE never replace each other's file; FILE may
        not be a symbolic link. `jobctl archive verify FILE` checks a file: its gzip stream, the header, every line,
        each job's events contiguous from version 1, every blob's checksum, the counts and the trailer.
        `jobctl audit --from FILE` lists the jobs in a file.

        --blobs-before 7d removes the bytes of download-memory results whose jobs all finished before then
        (alone, or together with --before). Their history keeps each blob's hash, and `jobctl result` says
        the blob expired.
        """
    ) { arguments, context in
        if let action = arguments.positionals.first {
            guard action == "verify" else { throw UsageError("unknown action '\(action)'; did you mean `jobctl archive verify FILE`?") }
            guard arguments.positionals.count == 2 else { throw UsageError("archive verify needs the archive file: jobctl archive verify FILE") }
            if try arguments.value(Options.archiveBefore) != nil { throw UsageError("--before does not apply to `archive verify`") }
            if try arguments.value(Options.archiveTo) != nil { throw UsageError("--to does not apply to `archive verify`") }
            if try arguments.value(Options.blobsBefore) != nil { throw UsageError("--blobs-before does not apply to `archive verify`") }
            if arguments[Options.dryRun] { throw UsageError("--dry-run does not apply to `archive verify`") }
            return try verifyArchive(arguments.positionals[1], json: arguments[Options.json])
        }
        let before = try arguments.value(Options.archiveBefore)
        let blobsBefore = try arguments.value(Options.blobsBefore)
        guard before != nil || blobsBefore != nil else {
            throw UsageError("archive needs --before (e.g. --before 90d: jobs that finished before then are archived) "
                + "or --blobs-before (e.g. --blobs-before 7d: download-memory results older than that are removed)")
        }
        let dryRun = arguments[Options.dryRun]
        let target = try arguments.value(Options.archiveTo)
        if before != nil, target == nil, !dryRun { throw UsageError("archive needs --to FILE: where the archived jobs are written") }
        if before == nil, target != nil { throw UsageError("--to applies only with --before") }
        let json = arguments[Options.json]
        let store = try context.openStore(readOnly: dryRun, wholeLog: true)
        var views: [String: any Encodable] = [:]
        if let before {
            let selection = try store.archiveSelection(finishedBefore: before)
            // Every event read as `audit --from` will read it: a damaged one (an event whose data no longer
            // decodes) was moved out with the rest, the file said intact and then refused by `audit --from`
            // whole, and the only sign of the damage gone from the log.
            for row in selection.rows {
                if case .failure(let error) = row.decoded {
                    throw CommandFailure("job \(row.jobID)'s event \(row.seq) cannot be read (\(error)): the log is damaged there "
                                         + "(`jobctl replay --verify` lists what is); nothing was archived, since an archive of it "
                                         + "could not be read back")
                }
            }
            // What writing the file and reading it back would refuse, refused before either — by the dry
            // run as by the real one, which said "would archive" for a log the real run then refused.
            do throws(RetentionError) {
                try ArchiveWriter.check(selection)
            } catch {
                throw CommandFailure("\(error)")
            }
            if dryRun || selection.isEmpty {
                views["archive"] = try reportSelection(selection, dryRun: dryRun, json: json)
            } else if let target {
                views["archive"] = try moveToArchive(selection, to: target, store: store, context: context, json: json)
            }
        }
        if let blobsBefore {
            let expiry: BlobExpiry
            do {
                expiry = try store.expireBlobs(finishedBefore: blobsBefore, now: Clock.nowMs(), dryRun: dryRun)
            } catch {
                guard case StoreError.commitUnconfirmed(let loss) = error else { throw error }
                throw CommandFailure(LostCommit.expiredBlobs(loss: loss))
            }
            struct View: Encodable {
                let dry_run: Bool; let before: String; let before_ms: Int64; let blobs: Int; let bytes: Int64; let sha256: [String]
            }
            views["expired_blobs"] = View(dry_run: dryRun, before: RFC3339.string(blobsBefore), before_ms: blobsBefore,
                                          blobs: expiry.digests.count, bytes: expiry.bytes, sha256: expiry.digests)
            if !json {
                let what = "\(plural(expiry.digests.count, "download-memory result blob")) (\(ByteSize.format(expiry.bytes))) "
                    + "produced only by jobs that finished before \(RFC3339.string(blobsBefore))"
                emit(dryRun ? "would remove \(what); nothing was removed"
                            : "removed \(what); their jobs' history keeps each hash, and `jobctl result` says it expired")
            }
        }
        if json {
            // One operation prints its own object; both print them side by side.
            if views.count == 1, let only = views.values.first {
                emit(try jsonText(AnyEncodable(only)))
            } else {
                emit(try jsonText(views.mapValues(AnyEncodable.init)))
            }
        }
        return ExitCode.ok
    }

    /// Writes `selection` to `target`, reads it back, then removes it from the log in one transaction.
    /// Returns the JSON view of what the log recorded (printed as text unless `json`).
    private static func moveToArchive(_ selection: ArchiveSelection, to target: String, store: any JobStore, context: Context,
                                json: Bool) throws -> any Encodable {
        // From the check of the name to the log's record of the file, one archive at a time in its folder
        // (see ArchiveFolderLock): a second archive to the same name replaced the file the first had
        // just recorded, losing jobs.
        let lock: ArchiveFolderLock?
        do throws(RetentionError) {
            lock = try ArchiveFolderLock.acquire(for: target) {
                emitError("note: waiting for another jobctl archive writing into the folder of \(Display.localPath(target))")
            }
        } catch {
            throw CommandFailure("\(error)")
        }
        defer { withExtendedLifetime(lock) {} }
        try refuseLink(target)
        try refuseToReplace(target, store: store)
        if lock != nil { ArchiveWriter.removeLeftTemporaries(of: target) }
        let written: WrittenArchive
        do throws(RetentionError) {
            written = try ArchiveWriter.write(selection, to: target, now: Clock.nowMs())
        } catch {
            throw CommandFailure("\(error); nothing was removed from the log")
        }
        // Until the log records it, the file written is a copy of jobs that stay in the log (or that another
        // archive took meanwhile): taken back when anything below fails, so that no second archive of the
        // same jobs is left to be mistaken for theirs. Kept only when the commit's answer was lost.
        var keep = false
        defer { if !keep { takeBack(written, target: target) } }
        do throws(RetentionError) {
            // Read it back before anything leaves the log: the file must be whole and say what was selected.
            let check = try ArchiveReader.read(target)
            guard check.fileSHA256 == written.sha256, check.events == selection.rows.count, check.blobs == selection.blobs.count else {
                throw RetentionError.invalidArchive("'\(target)' does not read back as it was written")
            }
        } catch {
            throw CommandFailure("\(error); nothing was removed from the log")
        }
        let record = ArchiveRecord(file: URL(fileURLWithPath: target).lastPathComponent, sha256: written.sha256,
                                   beforeMs: selection.beforeMs, jobs: selection.jobs.count, events: selection.rows.count,
                                   blobs: selection.blobs.count, blobsRemoved: 0, firstSeq: written.header.firstSeq,
                                   lastSeq: written.header.lastSeq)
        // What the archived jobs left on this machine (a download cancelled while paused): once they leave
        // the log no sweep, and no `jobctl orphans`, can tie those files to a final job again.
        let archivedIDs = Set(selection.jobs.map(\.id))
        let candidatesReadAtMs = Clock.nowMs()
        var candidates = try store.leftoverCandidates(finishedSince: selection.jobs.map(\.finishedAtMs).min())
        candidates.finished.removeAll { !archivedIDs.contains($0.id) }
        let hold = context.environment[archiveHoldEnvironment]
        let event: JobEvent
        do {
            event = try store.removeArchived(selection, record: record, actor: context.actor, now: Clock.nowMs()) {
                guard let hold, !hold.isEmpty else { return }
                _ = FileManager.default.createFile(atPath: hold, contents: Data())
                // Until the test removes the file (then the commit goes on) or kills the process.
                while FileManager.default.fileExists(atPath: hold) { usleep(10_000) }
            }
        } catch {
            guard case StoreError.commitUnconfirmed(let loss) = error else { throw error }
            keep = true
            throw CommandFailure(LostCommit.archive(loss: loss, file: Display.localPath(target)))
        }
        keep = true
        guard case .archived(let stored) = event.payload else {
            throw CommandFailure("the log recorded a '\(event.type.rawValue)' event for the archive; run `jobctl replay --verify`")
        }
        if !json {
            emit("archived \(plural(stored.jobs, "job")) that finished before \(RFC3339.string(stored.beforeMs)) to "
                 + "\(Display.localPath(target)): \(plural(stored.events, "event")) (seq \(stored.firstSeq)–\(stored.lastSeq)), "
                 + "\(plural(stored.blobs, "blob")) (\(stored.blobsRemoved) removed from the log); sha256 \(stored.sha256)")
            if selection.keptForDependants > 0 {
                emitError("note: \(plural(selection.keptForDependants, "job")) more that finished then \(Self.keptReason(selection))")
            }
        }
        removeLeftovers(candidates, readAtMs: candidatesReadAtMs, context: context)
        return ArchivedView(stored, selection: selection)
    }

    /// What `archive --json` prints once the jobs are archived: the log's record of the file and, as the
    /// dry run says them, the jobs' states and ids and how many finished jobs stayed for the jobs that
    /// wait for them. Only the dry run said `kept_for_dependants`, and the note the text prints was not
    /// printed under --json: a caller never learnt that jobs were kept back.
    struct ArchivedView: Encodable {
        /// The record, as `history --json` shows the `archived` event's.
        let record: ArchiveView
        let dry_run: Bool, states: [String: Int], job_ids: [String], kept_for_dependants: Int

        init(_ record: ArchiveRecord, selection: ArchiveSelection) {
            self.record = ArchiveView(record)
            dry_run = false
            states = Commands.stateCounts(selection)
            job_ids = selection.jobs.map(\.id)
            kept_for_dependants = selection.keptForDependants
        }

        enum CodingKeys: String, CodingKey { case dry_run, states, job_ids, kept_for_dependants }

        /// One object: the record's keys beside the selection's.
        func encode(to encoder: any Encoder) throws {
            try record.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(dry_run, forKey: .dry_run)
            try container.encode(states, forKey: .states)
            try container.encode(job_ids, forKey: .job_ids)
            try container.encode(kept_for_dependants, forKey: .kept_for_dependants)
        }
    }

    /// The selected jobs by state (`{"succeeded": 2, "cancelled": 1}`).
    static func stateCounts(_ selection: ArchiveSelection) -> [String: Int] {
        var states: [String: Int] = [:]
        for job in selection.jobs { states[job.state.rawValue, default: 0] += 1 }
        return states
    }

    /// Removes the leftover files of archived jobs (`Orphans`), saying so on standard error; the archive
    /// stands whatever happens here (a file that changed meanwhile, storage settings that do not parse).
    private static func removeLeftovers(_ candidates: LeftoverCandidates, readAtMs: Int64, context: Context) {
        guard !candidates.finished.isEmpty else { return }
        let backend: StorageRouter
        do throws(StorageError) {
            backend = StorageRouter(configuration: try context.storageConfiguration())
        } catch {
            emitError("warning: the archived jobs' leftover files were not looked for: \(error.message)")
            return
        }
        for orphan in Orphans.find(candidates, backend: backend, readAtMs: readAtMs) {
            let path = Display.localPath(orphan.file.path)
            if backend.remove(orphan.file) {
                emitError("removed \(path), left by archived job \(orphan.file.jobID)")
            } else {
                emitError("warning: \(path), left by archived job \(orphan.file.jobID), changed meanwhile and was not removed")
            }
        }
    }

    /// `--dry-run`, or nothing to archive: says what would be (or is not) archived.
    private static func reportSelection(_ selection: ArchiveSelection, dryRun: Bool, json: Bool) throws -> any Encodable {
        let states = stateCounts(selection)
        struct View: Encodable {
            let dry_run: Bool; let before: String; let before_ms: Int64; let jobs: Int; let events: Int; let blobs: Int
            let states: [String: Int]; let first_seq: Int64; let last_seq: Int64; let job_ids: [String]
            let kept_for_dependants: Int
        }
        let view = View(dry_run: dryRun, before: RFC3339.string(selection.beforeMs), before_ms: selection.beforeMs,
                        jobs: selection.jobs.count, events: selection.rows.count, blobs: selection.blobs.count,
                        states: states, first_seq: selection.rows.first?.seq ?? 0, last_seq: selection.rows.last?.seq ?? 0,
                        job_ids: selection.jobs.map(\.id), kept_for_dependants: selection.keptForDependants)
        guard !json else { return view }
        let when = RFC3339.string(selection.beforeMs)
        if selection.isEmpty {
            // Jobs that finished then but are kept are not "no job": said so, with why.
            let none = selection.keptForDependants == 0 ? "no job finished before \(when)"
                : "the \(plural(selection.keptForDependants, "job")) that finished before \(when) \(Self.keptReason(selection))"
            emit("nothing to archive: \(none)" + (dryRun ? "" : "; no file was written"))
        } else {
            let breakdown = states.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
            emit("would archive \(plural(selection.jobs.count, "job")) that finished before \(when) (\(breakdown)): "
                 + "\(plural(selection.rows.count, "event")) (seq \(selection.rows.first?.seq ?? 0)–\(selection.rows.last?.seq ?? 0)), "
                 + "\(plural(selection.blobs.count, "blob")); nothing was written or removed"
                 + (selection.keptForDependants == 0 ? "" : "; \(plural(selection.keptForDependants, "job")) more \(Self.keptReason(selection))"))
        }
        return view
    }

    /// Why finished jobs stay in the log: jobs staying there wait for them.
    private static func keptReason(_ selection: ArchiveSelection) -> String {
        (selection.keptForDependants == 1 ? "stays" : "stay") + " in the log: jobs there wait for "
            + (selection.keptForDependants == 1 ? "it" : "them") + " (after:); retry or cancel those first"
    }

    /// Removes the archive file `written` from `target` when it is still that file (same inode), saying
    /// so: the log never recorded it.
    private static func takeBack(_ written: WrittenArchive, target: String) {
        var info = stat()
        guard lstat(target, &info) == 0, UInt64(info.st_dev) == written.device, UInt64(info.st_ino) == written.inode else { return }
        if unlink(target) == 0 {
            emitError("note: the file written, \(Display.localPath(target)), was removed: the log does not record it")
        }
    }

    /// Refuses a `--to` that is a symbolic link (dangling or not): the archive is renamed over its name,
    /// which replaced the link with a file and left its target as it was.
    private static func refuseLink(_ target: String) throws {
        var info = stat()
        guard lstat(target, &info) == 0, (info.st_mode & S_IFMT) == S_IFLNK else { return }
        throw CommandFailure("'\(Display.localPath(target))' is a symbolic link; nothing was archived: give --to the path of "
            + "the file itself (the archive is written beside its name and renamed over it, which would replace the link)")
    }

    /// Refuses to overwrite an existing file unless it is an archive an interrupted run left behind:
    /// an intact archive the log does not record, every job of which is still in the log. Anything
    /// else — an archive the log records (the only copy of those jobs), another log's archive (the only
    /// copy of its jobs: it was replaced, as unrecorded here, by a second database archiving to the same
    /// name), or some other file — stays.
    private static func refuseToReplace(_ target: String, store: any JobStore) throws {
        guard FileManager.default.fileExists(atPath: target) else { return }
        let check: ArchiveCheck
        var jobIDs = Set<String>()
        do throws(RetentionError) { check = try ArchiveReader.read(target, event: { row in jobIDs.insert(row.jobID) }) } catch {
            throw CommandFailure("'\(target)' already exists and is not an intact jobctl archive (\(error)); nothing was archived: "
                + "choose another --to file")
        }
        let recorded = try store.events(jobID: ArchiveRecord.logJobID).compactMap { event -> ArchiveRecord? in
            if case .archived(let record) = event.payload { return record }
            return nil
        }
        if recorded.contains(where: { $0.sha256 == check.fileSHA256 }) {
            throw CommandFailure("'\(target)' is an archive the log records (sha256 \(check.fileSHA256)) and may be the only copy of "
                + "its jobs; nothing was archived: choose another --to file")
        }
        // An intact archive the log never recorded, every job of which is still in the log: written by a
        // run interrupted before its removal committed. It is replaced.
        let ids = Array(jobIDs)
        var found = 0
        for start in stride(from: 0, to: ids.count, by: 1_000) {
            found += try store.controlStates(ids: Array(ids[start..<min(start + 1_000, ids.count)])).count
        }
        if found < ids.count {
            throw CommandFailure("'\(target)' is an archive of \(plural(ids.count - found, "job")) not in this log (another log's "
                + "archive, or one this log no longer records) and may be the only copy of them; nothing was archived: "
                + "choose another --to file")
        }
    }

    /// `jobctl archive verify FILE`.
    private static func verifyArchive(_ path: String, json: Bool) throws -> Int32 {
        let check: ArchiveCheck
        do throws(RetentionError) { check = try ArchiveReader.read(path) } catch {
            throw CommandFailure("\(Display.localPath(path)): \(error)")
        }
        // Every event read as `audit --from` reads it, folded into its job: a file whose lines were whole
        // but whose event data did not decode was called intact, and then refused by `audit --from`.
        _ = try archivedJobs(path)
        if json {
            struct View: Encodable {
                let file: String; let intact: Bool; let format_version: Int; let sha256: String; let before: String
                let before_ms: Int64; let created_at: String; let created_at_ms: Int64; let jobs: Int; let events: Int; let blobs: Int
                let first_seq: Int64; let last_seq: Int64
            }
            emit(try jsonText(View(file: path, intact: true, format_version: check.header.version, sha256: check.fileSHA256,
                                   before: RFC3339.string(check.header.beforeMs), before_ms: check.header.beforeMs,
                                   created_at: RFC3339.string(check.header.createdAtMs), created_at_ms: check.header.createdAtMs,
                                   jobs: check.jobs, events: check.events,
                                   blobs: check.blobs, first_seq: check.header.firstSeq, last_seq: check.header.lastSeq)))
        } else {
            emit("\(Display.localPath(path)): intact — \(plural(check.jobs, "job")) that finished before "
                 + "\(RFC3339.string(check.header.beforeMs)), \(plural(check.events, "event")) (seq \(check.header.firstSeq)–"
                 + "\(check.header.lastSeq)), \(plural(check.blobs, "blob")); format version \(check.header.version); sha256 \(check.fileSHA256)")
        }
        return ExitCode.ok
    }

    /// The jobs of an archive file, rebuilt by replay's fold, for `jobctl audit --from FILE` (oldest first).
    static func archivedJobs(_ path: String) throws -> [JobRecord] {
        var fold = ReplayFold()
        var failure: (row: LogRow, error: StoreError)?
        do throws(RetentionError) {
            _ = try ArchiveReader.read(path, event: { row in
                guard failure == nil else { return }
                let decoded = row.decoded
                // An event that does not decode ends the reading here (the fold would only note it).
                if case .failure(let error) = decoded { failure = (row, error); return }
                do throws(StoreError) { try fold.fold(decoded) } catch { failure = (row, error) }
            })
        } catch {
            throw CommandFailure("\(Display.localPath(path)): \(error)")
        }
        if let (row, error) = failure {
            // Not the decoder's own words (a Swift `DecodingError` dump): which event, and what that means.
            // (An event of a type this jobctl does not know is refused by the reader, at its line.)
            let why: String = switch error {
            case .corrupt: "its data is not an event's as jobctl writes it"
            default: "\(error)"
            }
            throw CommandFailure("\(Display.localPath(path)): event \(row.seq) (job \(row.jobID), version \(row.version)) "
                + "cannot be read: \(why); the file was changed after jobctl wrote it, or by another program")
        }
        if let problem = fold.problems.first {
            throw CommandFailure("\(Display.localPath(path)): \(problem)")
        }
        return fold.recordsInLogOrder
    }
}

extension JobFilter {
    /// Whether a job read from an archive file passes the filters `audit` takes (states, kinds, queue,
    /// submission time), as the store's query would apply them.
    func matchesArchived(_ job: JobRecord) -> Bool {
        if let states, !states.contains(job.state) { return false }
        if let kinds, !kinds.contains(job.spec.kind) { return false }
        if let queue, job.spec.queue != queue { return false }
        if let createdSince, job.createdAtMs < createdSince { return false }
        if let createdUntil, job.createdAtMs >= createdUntil { return false }
        if let batch, job.batch != batch { return false }
        return true
    }
}

/// Any encodable value, for printing views of different types together.
struct AnyEncodable: Encodable {
    let value: any Encodable
    init(_ value: any Encodable) { self.value = value }
    func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
}
