import Foundation
import JobLifecycle
import JobModel
import Manifest
import Storage
import StorePort

extension Commands {
    static let submit = CommandSpec(
        name: "submit",
        abstract: "Append the jobs of one or more YAML manifests to the event log.",
        arguments: [ArgumentSpec("manifest", variadic: true, completesFiles: true, help: "A manifest file, or - for standard input.")],
        options: [Options.json.help("Print an array of {id, key, kind, created, batch} instead of one id per line "
                                              + "(key and batch null when the job has none); with --dry-run, an array of the "
                                              + "job specs as they would be submitted, each as show --json prints a job's spec "
                                              + "(no id or created: nothing is)."), Options.dryRun,
                  Options.noCheckSources, Options.at, Options.wait],
        discussion: """
        Every manifest is validated before anything is stored: one bad job anywhere submits nothing and
        prints FILE:LINE:COL: error: lines (exit 65). Jobs whose idempotency key already exists are not
        created again; their existing id is printed. When submit returns 0 the jobs are on disk.

        An upload-file job whose source is a folder or a glob, and a download-file job whose source is a
        prefix (gs://b/photos/, file://bucket/photos/), expand here, at submit, into one job per file or
        object, all sharing a batch id; standard error says "batch ID: N jobs from SOURCE" (--json: the
        batch field), and list, audit, watch and the control commands take --batch ID. Listing a prefix
        uses the same storage settings as the worker (STORAGE_EMULATOR_HOST, credentials, JOBCTL_BUCKETS).

        --at TIME holds every job without a run_after: or delay: of its own until TIME (RFC 3339, or a
        duration from now: 15m, 2h); a time in the past runs at once.

        after: names (keys of jobs in these manifests or in the log, job ids, unique id prefixes) are
        resolved to job ids here; a name that means no job is an error at its line and column (exit 65).

        --wait then waits until every job it names has ended (a worker runs them): exit 0 when all
        succeeded, 1 when any failed or was cancelled. Standard output keeps the ids; on standard error a
        bar counts the jobs ended when it is a terminal, and a count by outcome ends the wait
        (`jobctl submit --wait nightly.yaml && publish`).

        --dry-run stores nothing and answers as the submit would: it reads the log (an empty one when the
        database does not exist yet) for after: names, keys already there and key conflicts.
        """
    ) { arguments, context in
        let now = Clock.nowMs()
        let runAt = try arguments.value(Options.at)
        if arguments[Options.wait] && arguments[Options.dryRun] { throw UsageError("--wait waits for submitted jobs: not with --dry-run") }
        var manifestJobs: [ManifestJob] = []
        // The manifest each of `manifestJobs` came from, as errors name it.
        var manifestPaths: [String] = []
        var failures: [String] = []
        var readStdin = false
        for path in arguments.positionals {
            let data: Data
            let displayPath: String
            let baseDirectory: String?
            if path == "-" {
                guard !readStdin else { throw UsageError("'-' (standard input) can be given only once") }
                readStdin = true
                // A standard input that cannot be read (a folder: `submit - < dir`, or closed: `0<&-`) is said
                // so, as a manifest file is; it was read as empty and refused as "the manifest has no jobs".
                switch StandardInput.readManifest(with: ManifestParser()) {
                case .success(let contents):
                    data = contents
                case .failure(let failure):
                    failures.append("<stdin>: error: \(failure)")
                    continue
                }
                displayPath = "<stdin>"
                baseDirectory = CurrentDirectory.path
            } else {
                guard let contents = ManifestParser().readContents(atPath: path) else {
                    failures.append("\(TerminalText.printable(path)): error: cannot read the manifest (\(String(cString: strerror(errno))))")
                    continue
                }
                data = contents
                displayPath = path
                // Made absolute from `CurrentDirectory` (not Foundation's, which decodes a folder's path that
                // is not UTF-8 with replacement characters, so relative paths named a look-alike folder).
                guard let absolute = path.hasPrefix("/") ? path : CurrentDirectory.path.map({ $0 + "/" + path }) else {
                    failures.append("\(TerminalText.printable(path)): error: the manifest's folder is unknown: \(CurrentDirectory.missingMessage)")
                    continue
                }
                // A manifest that is no file in a folder — a pipe such as bash's `<(…)` (`/dev/fd/63`), a
                // FIFO — is read as standard input is: its relative paths from the current folder. From
                // its own folder (`/dev/fd`, a link of /proc) they named the worker's descriptors and
                // were refused as such.
                var info = stat()
                if stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
                    baseDirectory = CurrentDirectory.path
                } else {
                    baseDirectory = SlashSeparatedPath.directory(of: LocalPath.resolve(absolute))
                }
            }
            var parser = ManifestParser(baseDirectory: baseDirectory, checksSources: !arguments[Options.noCheckSources])
            parser.nowMs = now
            parser.firebaseHosts = StorageConfiguration.firebaseHosts(in: context.environment)
            switch parser.parseJobs(data: data, path: displayPath) {
            case .success(let parsed):
                manifestJobs += parsed
                manifestPaths += Array(repeating: displayPath, count: parsed.count)
            case .failure(let errors): failures.append(errors.render())
            }
        }
        if failures.isEmpty {
            failures += try unwrittenSources(manifestJobs, context: context)
        }
        var specs: [JobSpec] = []
        var listingNotes: [String] = []
        // Where each spec's job was written: its manifest, line and column.
        var origins: [(path: String, line: Int, column: Int)] = []
        // Where each spec's key was written (its job's place when it has none).
        var keyOrigins: [(path: String, line: Int, column: Int)] = []
        if failures.isEmpty {
            let expanded = try expandPrefixes(manifestJobs, context: context)
            specs = expanded.specs
            listingNotes = expanded.notes
            failures += expanded.failures
            if failures.isEmpty {
                origins = expanded.origins.map { (path: manifestPaths[$0], line: manifestJobs[$0].line, column: manifestJobs[$0].column) }
                keyOrigins = expanded.origins.map { job in
                    (path: manifestPaths[job], line: manifestJobs[job].keyLine ?? manifestJobs[job].line,
                     column: manifestJobs[job].keyColumn ?? manifestJobs[job].column)
                }
                failures += repeatedKeys(specs, origins: origins)
                if failures.isEmpty { failures += repeatedDestinations(specs, origins: origins, localBuckets: context.localBucketsDirectory) }
            }
        }
        for note in manifestJobs.flatMap(\.notes) + listingNotes { emitError(note) }
        if let runAt {
            for index in specs.indices where specs[index].runAfterMs == nil { specs[index].runAfterMs = runAt }
        }
        if !failures.isEmpty {
            emitError(failures.joined(separator: "\n"))
            emitError("Error: nothing was submitted")
            return ExitCode.dataError
        }
        let display = Display.redacting
        // Where an `after:` name that means no job was written: the manifest's entry, with a caret under it.
        func unknownDependency(_ name: String) -> Int32 {
            var message = "'after' names '\(name)', which is neither the key of a job in the manifests nor a key, id or "
                + "unique id prefix of a job in the log; name a job that exists (`jobctl list` shows them; a job "
                + "`jobctl archive` moved out of the log is named by nothing)"
            // The key of a folder, glob or prefix job is its files' jobs' (`KEY/PATH`), not a job's own:
            // the user wrote it, and was told it was the key of no job in the manifests.
            if let file = specs.first(where: { $0.batch != nil && $0.key?.utf8.starts(with: (name + "/").utf8) == true })?.key {
                message = "'after' names '\(name)', the key of a folder, glob or prefix job, which is not one job: its key names each "
                    + "of its files' jobs as '\(name)/<relative path>' ('\(file)', …); list in 'after' the ones this job waits for"
            }
            let entry = manifestJobs.lazy.flatMap(\.dependencies).first { $0.name == name }
            emitError(entry.map { ManifestErrors([$0.error(message)]).render() } ?? "Error: \(message)")
            emitError("Error: nothing was submitted")
            return ExitCode.dataError
        }
        // An `after:` name that names several jobs (an id prefix several share; a key that is also
        // another job's id prefix): at its entry, as a name that means none.
        func ambiguousDependency(_ name: String, _ error: StoreError) -> Int32 {
            let message = "'after' names '\(TerminalText.printable(name))', which is not one job: \(error)"
            let entry = manifestJobs.lazy.flatMap(\.dependencies).first { $0.name == name }
            emitError(entry.map { ManifestErrors([$0.error(message)]).render() } ?? "Error: \(message)")
            emitError("Error: nothing was submitted")
            return ExitCode.dataError
        }
        // A cycle through jobs of several manifests (one manifest's own is refused as it is read): at the
        // first job's entry, each job named by its key (or its place) and where it was written.
        func dependencyCycle(_ indices: [Int]) -> Int32 {
            func name(_ index: Int) -> String {
                specs[index].key.map { "'\(TerminalText.printable($0))'" }
                    ?? "the job at \(TerminalText.printable(origins[index].path)):\(origins[index].line)"
            }
            guard let first = indices.first, first < origins.count else {
                emitError("Error: \(StoreError.dependencyCycle(specIndices: indices))")
                return ExitCode.dataError
            }
            let places = Set(indices.dropLast()).sorted().map { "\(TerminalText.printable(origins[$0].path)):\(origins[$0].line)" }
            let origin = origins[first]
            emitError("\(TerminalText.printable(origin.path)):\(origin.line):\(origin.column): error: 'after' makes a cycle: "
                      + indices.map(name).joined(separator: " → ") + " (written at \(places.joined(separator: ", "))): these jobs would "
                      + "wait for each other forever; remove one of the edges")
            emitError("Error: nothing was submitted")
            return ExitCode.dataError
        }
        // A key the log already holds for another spec: at the key, as the manifest's other errors are
        // (it was a bare "Error: idempotency key … already names job …", exit 1, naming no manifest).
        func keyConflict(_ key: String, existingID: String) -> Int32 {
            let message = "idempotency key '\(TerminalText.printable(key))' already names job \(existingID) in the log, submitted with a "
                + "different spec; give this job a new key, or submit the same spec to get \(existingID) back"
            if let index = specs.firstIndex(where: { $0.key?.hasSameUTF8(as: key) == true }), index < keyOrigins.count {
                let place = keyOrigins[index]
                emitError("\(TerminalText.printable(place.path)):\(place.line):\(place.column): error: \(message)")
            } else {
                emitError("Error: \(message)")
            }
            emitError("Error: nothing was submitted")
            return ExitCode.dataError
        }
        if arguments[Options.dryRun] {
            // Planned against the log as `submit` plans (its `after:` names, keys already there, cycles),
            // read only; with no log yet, against an empty one (which is what `submit` would create).
            let plan: SubmitPlan
            do {
                let store: (any JobStore)?
                do {
                    store = try context.openStore(readOnly: true)
                } catch StoreError.noDatabase {
                    store = nil
                }
                if let store {
                    plan = try store.planSubmit(specs, now: Clock.nowMs())
                } else {
                    plan = try SubmitPlan(specs, now: Clock.nowMs(), storedByKey: { _ in nil }, logJob: { _ in nil })
                }
            } catch StoreError.unknownDependency(let name) {
                return unknownDependency(name)
            } catch let error as StoreError where error.dependencyName != nil {
                return ambiguousDependency(error.dependencyName ?? "", error)
            } catch StoreError.dependencyCycle(let indices) {
                return dependencyCycle(indices)
            } catch StoreError.keyConflict(let key, let existingID) {
                return keyConflict(key, existingID: existingID)
            }
            if arguments[Options.json] {
                emit(try jsonText(specs.map { SpecView($0, display: display) }))
            } else {
                for (spec, entry) in zip(specs, plan.entries) {
                    let known = entry.creates ? "" : "  (already in the log as \(entry.id): not submitted again)"
                    emit("\(spec.kind.rawValue)  \(spec.source.map(display.location) ?? "-") → \(spec.destination.map(display.location) ?? "-")\(known)")
                }
                for line in batchLines(specs) { emit(line) }
                let existing = plan.entries.filter { !$0.creates }.count
                let note = existing == 0 ? "" : " (\(existing) already in the log under \(existing == 1 ? "its key" : "their keys"))"
                emit("\(plural(specs.count, "job")) valid\(note); nothing submitted (--dry-run)")
            }
            return ExitCode.ok
        }
        let store = try context.openStore(create: true)
        let outcomes: [SubmitOutcome]
        do {
            outcomes = try store.submit(specs, actor: context.actor, now: Clock.nowMs())
        } catch StoreError.unknownDependency(let name) {
            return unknownDependency(name)
        } catch let error as StoreError where error.dependencyName != nil {
            return ambiguousDependency(error.dependencyName ?? "", error)
        } catch StoreError.dependencyCycle(let indices) {
            return dependencyCycle(indices)
        } catch StoreError.keyConflict(let key, let existingID) {
            return keyConflict(key, existingID: existingID)
        } catch StoreError.commitUnconfirmed(let loss) {
            throw CommandFailure(LostCommit.submit(loss: loss))
        }
        if arguments[Options.json] {
            emit(try jsonText(zip(outcomes, specs).map { outcome, spec in
                SubmittedJobView(id: outcome.id, key: outcome.key, kind: outcome.kind.rawValue, created: outcome.created,
                                 batch: spec.batch?.id)
            }))
        } else {
            for line in batchLines(specs) { emitError(line) }
            for outcome in outcomes { emit(outcome.id) }
            let existing = outcomes.filter { !$0.created }.count
            if existing > 0 {
                emitError("note: \(plural(existing, "job")) already existed with the same key and \(existing == 1 ? "was" : "were") not submitted again")
            }
        }
        if arguments[Options.wait] {
            var seen: Set<String> = []
            let ids = outcomes.map(\.id).filter { seen.insert($0).inserted }
            return try Watcher(store: store, context: context, statuses: nil, json: false).waitForEnd(of: ids)
        }
        return ExitCode.ok
    }

    /// The rendered errors of the missing upload sources that the manifests left to the submit
    /// (`PendingSourceCheck`): those no download-file job their job waits for writes, looking through every
    /// manifest given and the log (read only; no log yet is an empty one).
    static func unwrittenSources(_ jobs: [ManifestJob], context: Context) throws -> [String] {
        guard jobs.contains(where: { $0.pendingSourceCheck != nil }) else { return [] }
        var store: (any JobStore)?
        var opened = false
        let errors = try PendingSourceCheck.unresolved(jobs) { (name) throws -> PendingSourceCheck.LoggedJob? in
            if !opened {
                opened = true
                do {
                    store = try context.openStore(readOnly: true)
                } catch StoreError.noDatabase {
                    store = nil
                }
            }
            guard let store else { return nil }
            let id: String
            do throws(StoreError) {
                id = try store.resolveID(name)
            } catch {
                switch error {
                case .notFound, .ambiguous, .invalidControl: return nil  // the submit says what is wrong with the name
                default: throw error
                }
            }
            guard let job = try store.job(id) else { return nil }
            let open = job.state == .queued || job.state == .running || job.state == .paused
            return PendingSourceCheck.LoggedJob(writes: open && job.spec.kind == .downloadFile ? job.spec.destination : nil,
                                                after: job.spec.after ?? [])
        }
        guard !errors.isEmpty else { return [] }
        var byFile: [String: [ManifestError]] = [:]
        var order: [String] = []
        for error in errors {
            if byFile[error.file] == nil { order.append(error.file) }
            byFile[error.file, default: []].append(error)
        }
        return order.map { ManifestErrors(byFile[$0] ?? []).render() }
    }

    /// One job of `submit --json`: `{id, key, kind, created, batch}`, every key always there (`key` and
    /// `batch` null when the job has none), as the help and README say. The synthesized encoding left
    /// out a nil key, so a caller reading `row["key"]` of a job without one found no such field.
    struct SubmittedJobView: Encodable {
        let id: String
        let key: String?
        let kind: String
        let created: Bool
        let batch: String?

        enum CodingKeys: String, CodingKey { case id, key, kind, created, batch }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(key, forKey: .key)
            try container.encode(kind, forKey: .kind)
            try container.encode(created, forKey: .created)
            try container.encode(batch, forKey: .batch)
        }
    }

    /// "batch ID: N jobs from SOURCE" for each batch among `specs`, in order of appearance.
    static func batchLines(_ specs: [JobSpec]) -> [String] {
        var order: [String] = []
        var counts: [String: (count: Int, source: String)] = [:]
        for spec in specs {
            guard let batch = spec.batch else { continue }
            if counts[batch.id] == nil { order.append(batch.id) }
            counts[batch.id, default: (0, batch.source)].count += 1
        }
        return order.compactMap { id in
            counts[id].map { "batch \(id): \(plural($0.count, "job")) from \(TerminalText.printable(Display.redacting.text($0.source)))" }
        }
    }

    /// The specs of `jobs`, with every prefix download listed and expanded; listing problems come back as
    /// rendered manifest errors at the job's `source`, and what a listing left out as notes there.
    /// `origins[i]` is the index in `jobs` of the job that made `specs[i]`.
    static func expandPrefixes(_ jobs: [ManifestJob],
                               context: Context) throws -> (specs: [JobSpec], origins: [Int], failures: [String], notes: [String]) {
        guard jobs.contains(where: { $0.prefixExpansion != nil }) else { return (jobs.map(\.spec), Array(jobs.indices), [], []) }
        let configuration = try context.storageConfiguration()
        let lister = ObjectLister(configuration: configuration)
        var specs: [JobSpec] = []
        var origins: [Int] = []
        var failures: [String] = []
        var notes: [String] = []
        for (index, job) in jobs.enumerated() {
            guard let expansion = job.prefixExpansion else {
                specs.append(job.spec)
                origins.append(index)
                continue
            }
            let listed: Result<ObjectLister.Listing, StorageError> = try blockingRun {
                do throws(StorageError) {
                    return .success(try await lister.listing(under: expansion.prefix, limit: expansion.limit))
                } catch {
                    return .failure(error)
                }
            }
            switch listed {
            case .failure(let error):
                failures.append(expansion.listingFailed(Display.redacting.text(error.message)).render())
            case .success(let listing):
                if let note = expansion.skippedNote(listing.skipped) { notes.append(note) }
                if let note = expansion.slashNamedNote(listing.slashNamed) { notes.append(note) }
                switch expansion.jobs(objectNames: listing.names) {
                case .success(let expanded):
                    specs += expanded
                    origins += Array(repeating: index, count: expanded.count)
                case .failure(let errors): failures.append(errors.render())
                }
            }
        }
        return (specs, origins, failures, notes)
    }

    /// A file or object that two of the jobs submitted together write (downloads to one local file, uploads
    /// to one object), once folders and prefixes are expanded, where neither waits for the other through
    /// `after:`: each an error at the second job's position. Three plain-URL downloads of `…/x/f.txt`,
    /// `…/y/f.txt` and `…/z/f.txt` into `out/` all succeeded, each reporting `out/f.txt`, which held one of
    /// them — which one depending on the order they happened to run. Jobs ordered by `after:` (directly
    /// or through other jobs of the submit) write in that order, so they may share a destination.
    /// Written as `repeatedKeys` writes its errors (at most `ManifestLimits.maximumShownErrors`).
    ///
    /// A local file is one whatever its spelling (`localFile`): `file://NAME/a.bin`, `file:///…/buckets/NAME/a.bin`
    /// and a download into `…/buckets/NAME/a.bin` are one file, and were taken as three.
    static func repeatedDestinations(_ specs: [JobSpec], origins: [(path: String, line: Int, column: Int)],
                                     localBuckets: String) -> [String] {
        var writer: [UTF8Key: Int] = [:]
        var keyed: [UTF8Key: Int] = [:]
        for (index, spec) in specs.enumerated() { if let key = spec.key { keyed[UTF8Key(key)] = keyed[UTF8Key(key)] ?? index } }
        // Whether `from` waits for `to`, through the `after:` names of jobs of this submit.
        func waits(_ from: Int, for to: Int) -> Bool {
            var seen: Set<Int> = [from]
            var pending = [from]
            while let index = pending.popLast() {
                for name in specs[index].after ?? [] {
                    guard let next = keyed[UTF8Key(name)], !seen.contains(next) else { continue }
                    if next == to { return true }
                    seen.insert(next)
                    pending.append(next)
                }
            }
            return false
        }
        var failures: [String] = []
        var notShown = 0
        var realFolders: [String: String] = [:]
        // Each local file written, by the first job writing it: a file one job writes where another's
        // folder must be is checked below.
        // Byte for byte, as the file system compares names: `String` keys took the precomposed and the
        // decomposed "é" for one name, and refused two distinct files.
        var localFiles: [UTF8Key: Int] = [:]
        for (index, spec) in specs.enumerated() where spec.kind.isUpload || spec.kind == .downloadFile {
            guard let destination = spec.destination else { continue }
            let file = localFile(spec, destination: destination, buckets: localBuckets, realFolders: &realFolders)
            if let file, localFiles[UTF8Key(file)] == nil { localFiles[UTF8Key(file)] = index }
            let written = UTF8Key(file.map { "file " + $0 } ?? "object " + destination)
            guard let earlier = writer[written] else {
                writer[written] = index
                continue
            }
            writer[written] = index
            if waits(index, for: earlier) || waits(earlier, for: index) { continue }
            guard failures.count < ManifestLimits.default.maximumShownErrors else {
                notShown += 1
                continue
            }
            let here = origins[index], there = origins[earlier]
            let place = there.path == here.path ? "line \(there.line)" : "\(TerminalText.printable(there.path)):\(there.line)"
            let what = spec.kind.isUpload ? "uploads to" : "downloads to"
            var expanded = specs[earlier].batch != nil || spec.batch != nil ? " (as the files of a folder, glob or prefix job map)" : ""
            if let other = specs[earlier].destination, !other.hasSameUTF8(as: destination) {
                expanded += " (written '\(Display.redacting.location(other))' there: the same file)"
            }
            failures.append("\(TerminalText.printable(here.path)):\(here.line):\(here.column): error: this job \(what) "
                            + "'\(Display.redacting.location(destination))', as the job at \(place) does\(expanded), and neither waits for the "
                            + "other ('after:'): what it ends up holding would depend on which ran last; give each job its own destination, "
                            + "or order them with 'after:'")
        }
        // A local file one job writes at a path another job's file is below (a prefix holding the objects
        // `a` and `a/b`, downloaded into `restore/`): one of them fails when it runs, and which one
        // depended on the order they ran in — `after:` cannot make both succeed.
        for (key, index) in localFiles.sorted(by: { $0.value < $1.value }) {
            let file = key.string
            var folder = SlashSeparatedPath.directory(of: file)
            while folder != "/", folder != "." {
                if let other = localFiles[UTF8Key(folder)] {
                    guard failures.count < ManifestLimits.default.maximumShownErrors else {
                        notShown += 1
                        break
                    }
                    let (later, earlier) = (max(index, other), min(index, other))
                    let here = origins[later], there = origins[earlier]
                    let place = there.path == here.path ? "line \(there.line)" : "\(TerminalText.printable(there.path)):\(there.line)"
                    let expanded = specs[earlier].batch != nil || specs[later].batch != nil ? " (as the files of a folder, glob or prefix job map)" : ""
                    failures.append("\(TerminalText.printable(here.path)):\(here.line):\(here.column): error: this job writes "
                                    + "'\(Display.redacting.location(later == index ? file : folder))', and the job at \(place) writes "
                                    + "'\(Display.redacting.location(later == index ? folder : file))'\(expanded): a file and a folder of one "
                                    + "name, which cannot both be; give one of them another destination, or 'exclude:' one")
                    break
                }
                folder = SlashSeparatedPath.directory(of: folder)
            }
        }
        if notShown > 0 {
            failures.append("\(plural(notShown, "more error")) not shown after the first \(failures.count); "
                            + "fix these and run it again to see the next")
        }
        return failures
    }

    /// The local file a job writes, the same text for every spelling of it: a `file://NAME/p` object is
    /// `p` in the bucket's folder, a `file:///p` object and a download's destination are `/p`, and the
    /// folder holding it is taken where its symbolic links lead. Nil for a job that writes no local file
    /// (gs:// and http(s) objects, compared as written).
    /// `realFolders` keeps each folder's resolution (by its text: a download's local folder, an upload's
    /// reference up to its last `/`): a folder of 100,000 files is parsed and resolved once, and each job
    /// adds its own name (parsing every upload's reference was a fifth of a 20,000-file submit).
    static func localFile(_ spec: JobSpec, destination: String, buckets: String, realFolders: inout [String: String]) -> String? {
        let path: String
        if spec.kind == .downloadFile {
            path = destination
        } else if spec.kind.isUpload, destination.utf8.prefix(7).map({ $0 | 0x20 }).elementsEqual("file://".utf8),
                  let slash = destination.utf8.lastIndex(of: UInt8(ascii: "/")) {
            let folderText = "u " + String(destination[..<slash])
            var name = String(destination[destination.index(after: slash)...])
            if name.utf8.contains(UInt8(ascii: "%")) { name = (try? StorageReference.percentDecode(name)) ?? name }
            if let known = realFolders[folderText] { return LocalPath.standardize(known + "/" + name) }
            guard let reference = try? StorageReference(parsing: destination), reference.scheme == .file else { return nil }
            let objectPath = LocalPath.standardize((reference.bucket.isEmpty ? "" : buckets + "/" + reference.bucket) + "/" + reference.fullPath)
            let real = realFolder(SlashSeparatedPath.directory(of: objectPath))
            realFolders[folderText] = real
            return LocalPath.standardize(real + "/" + name)
        } else {
            return nil
        }
        let folder = SlashSeparatedPath.directory(of: path)
        let real: String
        if let known = realFolders[folder] {
            real = known
        } else {
            real = realFolder(folder)
            realFolders[folder] = real
        }
        let name = SlashSeparatedPath.lastPart(of: path).map(String.init) ?? ""
        return LocalPath.standardize(real + "/" + name)
    }

    /// `folder` with its symbolic links followed: its deepest existing folder resolved (`realpath`) and
    /// the rest, not there yet (a download's folders, made when it runs), added as written — a link to a
    /// bucket's folder before a new subfolder still leads into the bucket.
    private static func realFolder(_ folder: String) -> String {
        var existing = folder
        var rest: [Substring] = []
        while true {
            if let resolved = LocalPath.realPath(existing) {
                return LocalPath.standardize(([Substring(resolved)] + rest.reversed()).joined(separator: "/"))
            }
            guard existing != "/", let last = SlashSeparatedPath.lastPart(of: existing) else { return folder }
            rest.append(last)
            existing = SlashSeparatedPath.directory(of: existing)
        }
    }

    /// An idempotency key given to two of the jobs submitted together, once folders and prefixes are
    /// expanded (a folder job's key `K` names its files' jobs `K/PATH`, which another job's key may be),
    /// or in two manifests: each an error at the second job's position. The log would otherwise take
    /// the second as a resubmission of the first — refused as a different spec, naming a job that was
    /// never submitted, or, for the same spec, merged into one job.
    /// As a manifest's errors, at most `ManifestLimits.maximumShownErrors` are written; the others are
    /// counted (two manifests repeating 200,000 keys printed 200,000 errors).
    static func repeatedKeys(_ specs: [JobSpec], origins: [(path: String, line: Int, column: Int)]) -> [String] {
        // By bytes, as the log keys jobs (`==` calls NFC and NFD spellings equal: a folder holding both
        // `café` and `cafe\u{301}` could not be submitted with a key).
        var first: [UTF8Key: Int] = [:]
        var failures: [String] = []
        var notShown = 0
        for (index, spec) in specs.enumerated() {
            guard let key = spec.key else { continue }
            guard let earlier = first[UTF8Key(key)] else {
                first[UTF8Key(key)] = index
                continue
            }
            guard failures.count < ManifestLimits.default.maximumShownErrors else {
                notShown += 1
                continue
            }
            let here = origins[index], there = origins[earlier]
            let place = there.path == here.path ? "line \(there.line)" : "\(TerminalText.printable(there.path)):\(there.line)"
            let expanded = specs[earlier].batch != nil || spec.batch != nil
            let made = expanded ? " (a folder's or a prefix's job with key KEY gives each of its files' jobs the key KEY/PATH)" : ""
            failures.append("\(TerminalText.printable(here.path)):\(here.line):\(here.column): error: idempotency key '\(TerminalText.printable(key))' "
                            + "is already given to the job at \(place)\(made); give each job its own key")
        }
        if notShown > 0 {
            failures.append("\(plural(notShown, "more error")) not shown after the first \(failures.count); "
                            + "fix these and run it again to see the next")
        }
        return failures
    }
}

extension StoreError {
    /// The name an `after:` lookup could not take as one job (`ambiguous`, `keyAndIDPrefix`), else nil.
    fileprivate var dependencyName: String? {
        switch self {
        case .ambiguous(let prefix, _): prefix
        case .keyAndIDPrefix(let name, _, _): name
        default: nil
        }
    }
}
