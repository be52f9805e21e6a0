import Foundation
import JobModel

// MARK: - Folders, globs and prefixes

/// What an upload-file `source` names when it is more than one file.
enum UploadTree: Equatable {
    /// A folder (absolute, standardised): every regular file below it, at any depth.
    case folder(String)
    /// A glob: the folder before its first pattern segment, and the pattern for paths below it.
    case glob(root: String, pattern: String)
}

extension ManifestReader {
    /// Whether `path` (from `localPath`, a folder keeping its trailing `/`) is a folder or a glob; nil for
    /// one file (`literalSource` names it). An existing file whose name holds `*`, `?` or `[` is that file.
    static func uploadTree(_ path: String) -> UploadTree? {
        if path.hasSuffix("/") {
            return .folder(path == "/" ? "/" : literalSource(String(path.dropLast())))
        }
        let literal = literalSource(path)
        if LocalPath.isDirectory(literal) { return .folder(literal) }
        guard PathPattern.isPattern(path), !FileManager.default.fileExists(atPath: path) else { return nil }
        let parts = SlashSeparatedPath.parts(of: path).map(String.init)
        guard let first = parts.firstIndex(where: PathPattern.isPattern) else { return nil }
        // The folder before the pattern is written in the glob's syntax too: `photos\[1\]/*.jpg` walks `photos[1]`.
        let written = "/" + parts[..<first].joined(separator: "/")
        let root = LocalPath.exists(written) ? written : PathPattern.unescaped(written)
        return .glob(root: root, pattern: parts[first...].joined(separator: "/"))
    }

    /// The file (or folder) an upload-file `source` that is no glob names: a path whose `*`, `?` and `[`
    /// are all escaped (`src/br\[x\].txt`) names it without the escapes (`src/br[x].txt`), as a glob
    /// would take them; it was looked up with its backslashes, and "named no file". A path whose name as
    /// written exists names that, as an existing name holding `*` is that file and no glob.
    static func literalSource(_ path: String) -> String {
        guard !PathPattern.isPattern(path), PathPattern.escapesPatternCharacter(path), !LocalPath.exists(path) else { return path }
        return PathPattern.unescaped(path)
    }

    /// One spec per regular file of a folder or glob, destinations under the destination folder; nil specs
    /// after reporting a problem. With `checkingSources` (the job's source check is on), a file the
    /// submitting user may not read refuses the expansion, as such a single source is refused.
    mutating func expandUpload(_ tree: UploadTree, written: Located<String>, template: JobSpec, own: FieldSet,
                               mark: SourceMark, checkingSources: Bool = true) -> (specs: [JobSpec], notes: [String]) {
        let quoted = "'source' '\(written.value)'"
        let root: String
        let filter = PathFilter(include: own.include?.value ?? [], exclude: own.exclude?.value ?? [])
        var glob: PathPattern?
        switch tree {
        case .folder(let folder):
            root = folder
        case .glob(let globRoot, let pattern):
            root = globRoot
            do {
                glob = try PathPattern(pattern)
            } catch {
                report(.invalidValue, "\(quoted) is not a valid glob: \(error.description)", at: written.valueMark)
                return ([], [])
            }
        }
        if root == "/" {
            report(.unsupportedSource, "\(quoted) would expand the whole filesystem from '/'; name the folder to upload", at: written.valueMark)
            return ([], [])
        }
        guard LocalPath.isDirectory(root) else {
            let what = glob == nil ? "is a folder that does not exist (or is not a folder)"
                                   : "is a glob whose folder '\(root)' does not exist (or is not a folder)"
            report(.sourceUnavailable, "\(quoted) \(what); check the path (relative paths start at the manifest's folder)", at: written.valueMark)
            return ([], [])
        }
        guard let destination = folderDestination(own.destination, mark: mark) else { return ([], []) }
        let taken = filter
        if let glob {
            let listing = walk(root, written: written, checkingReadable: checkingSources, descend: { !taken.excludesAll(under: $0) }) { path in
                glob.matches(path) && taken.takes(path)
            }
            return finish(listing, root: root, source: root + "/" + glob.text, filter: taken, destination: destination,
                          template: template, quoted: quoted, mark: mark, sourceMark: written.valueMark)
        }
        let listing = walk(root, written: written, checkingReadable: checkingSources, descend: { !taken.excludesAll(under: $0) }) { taken.takes($0) }
        return finish(listing, root: root, source: root + "/", filter: taken, destination: destination, template: template,
                      quoted: quoted, mark: mark, sourceMark: written.valueMark)
    }

    private mutating func walk(_ root: String, written: Located<String>, checkingReadable: Bool,
                               descend: (String) -> Bool, accept: (String) -> Bool) -> LocalTree.Listing? {
        let room = max(0, limits.maximumJobs - jobCount)
        do {
            return try LocalTree.walk(root, limit: room, checkingReadable: checkingReadable, descend: descend, accept: accept)
        } catch {
            switch error {
            case .unreadable(let folder, let reason):
                report(.sourceUnavailable, "'source' '\(written.value)': the folder '\(folder.isEmpty ? root : root + "/" + folder)' cannot be read: \(reason)",
                       at: written.valueMark)
            case .tooMany(let limit):
                let manifestLimit = limits.maximumJobs
                report(.limitExceeded, "'source' '\(written.value)' holds more files than the \(limit) jobs the manifest may still make "
                           + "(the limit is \(manifestLimit)); narrow it with a glob or 'include'/'exclude', or split the manifest",
                       at: written.valueMark)
            case .tooDeep(let path):
                report(.limitExceeded, "'source' '\(written.value)' nests folders more than \(LocalTree.maximumDepth) deep (at '\(path)')",
                       at: written.valueMark)
            case .generated(let filesystem):
                // As a single file there is refused: each of its jobs failed when it ran.
                report(.sourceUnavailable, "'source' '\(written.value)': the folder '\(root)' is on \(filesystem), whose files the kernel "
                           + "makes as they are read: their size (0 bytes for most of /proc) is not their content, so their uploads "
                           + "would store empty or cut objects; copy what you need to a folder of regular files (cp -r) and upload that",
                       at: written.valueMark)
            }
            return nil
        }
    }

    private mutating func finish(_ listing: LocalTree.Listing?, root: String, source: String, filter: PathFilter,
                                 destination: FolderDestination, template: JobSpec, quoted: String,
                                 mark: SourceMark, sourceMark: SourceMark) -> (specs: [JobSpec], notes: [String]) {
        guard let listing else { return ([], []) }
        var notes: [String] = []
        if let skipped = listing.skippedText {
            notes.append(ManifestError.note(file: file, line: mark.line, column: mark.column, "\(quoted): skipped \(skipped)"))
        }
        // A file the walk reached (from its folder's descriptor) at a path the kernel refuses: no job could
        // open it. It was left out with the whole folder as "a FIFO, or gone while listed".
        if let first = listing.tooLong.first {
            let more = listing.tooLong.count > 1 ? " (and \(listing.tooLong.count - 1) more)" : ""
            report(.invalidPath, "\(quoted): its file '\(TerminalText.printable(LocalPathBounds.shortened(first.path)))'\(more) \(first.problem), "
                       + "so no job could open it; move it to a shorter path, or 'exclude:' it", at: sourceMark)
            return ([], notes)
        }
        // A file the worker could not read, as submit's user: refused as a single such source is (rsync,
        // rclone and gsutil report such a file as an error, and end in failure, not in a quiet skip).
        if let first = listing.unreadable.first {
            let more = listing.unreadable.count > 1 ? " (and \(listing.unreadable.count - 1) more)" : ""
            report(.sourceUnavailable, "\(quoted): its file '\(TerminalText.printable(first.path))'\(more) cannot be read: \(first.reason); "
                       + "the worker must be able to read every file it uploads: make it readable, or leave it out with 'exclude:' "
                       + "(if the worker runs as a user who can read it, add 'check_source: false' to the job)", at: sourceMark)
            return ([], notes)
        }
        guard !listing.files.isEmpty else {
            let filtered = filter.include.isEmpty && filter.exclude.isEmpty ? "" : " that 'include'/'exclude' take"
            // What it skipped, if anything: the note is not printed with an error, and "no regular file"
            // under /sys/fs/cgroup or /dev said nothing of why.
            let skipped = listing.skippedText.map { "; skipped \($0)" } ?? ""
            report(.emptyExpansion, "\(quoted) holds no regular file\(filtered); nothing would be uploaded\(skipped)", at: mark)
            return ([], notes)
        }
        let batch = Self.batchID(key: template.key, nowMs: nowMs)
        var specs: [JobSpec] = []
        specs.reserveCapacity(listing.files.count)
        // Files whose object the destination cannot name (a gs:// name past 1,024 bytes or with a line
        // break, a file:// path past the kernel's bounds): the expansion is refused, naming the first.
        var unnamed: (relative: String, error: StorageError)?
        var unnamedCount = 0
        for relative in listing.files {
            var spec = template
            spec.source = root + "/" + relative
            let target: String
            switch destination.reference(relative) {
            case .success(let reference):
                target = reference
            case .failure(let error):
                if unnamed == nil { unnamed = (relative, error) }
                unnamedCount += 1
                continue
            }
            spec.destination = target
            spec.key = template.key.map { $0 + "/" + relative }
            spec.batch = JobBatch(id: batch, source: source, include: filter.includeTexts, exclude: filter.excludeTexts, path: relative)
            specs.append(spec)
        }
        if let unnamed {
            let more = unnamedCount > 1 ? " (and \(unnamedCount - 1) more)" : ""
            report(.invalidReference, "\(quoted): its file '\(TerminalText.printable(unnamed.relative))'\(more) has no valid storage "
                       + "reference under 'destination': \(unnamed.error.message); rename it, 'exclude:' it, or upload it with a job "
                       + "of its own (or into a shorter destination)", at: destination.mark)
            return ([], notes)
        }
        jobCount += specs.count
        return (specs, notes)
    }

    /// Where an expanding upload's files go: each relative path's reference, or why there is none.
    struct FolderDestination {
        /// Where the destination was written.
        let mark: SourceMark
        let reference: (String) -> Result<String, StorageError>
    }

    /// The destination of an expanding upload: a folder reference (ending in `/`) or a bucket root; the
    /// function gives each relative path's reference. Nil after reporting.
    private mutating func folderDestination(_ text: Located<String>?, mark: SourceMark) -> FolderDestination? {
        guard let text else {
            report(.missingField, "the upload-file job has no 'destination' (the storage folder to upload into, ending in '/')", at: mark)
            return nil
        }
        let reference: StorageReference
        do {
            reference = try submittedReference(text.value)
        } catch {
            report(.invalidReference, "'destination' is not a valid storage reference: \(error.message)", at: text.valueMark)
            return nil
        }
        let plainHTTP = reference.scheme == .http || reference.scheme == .https
        guard reference.isRoot || Self.namesFolder(text.value, plainHTTP: plainHTTP) else {
            report(.invalidReference, "'destination' '\(text.value)' names one object, but 'source' is a folder or glob; end it in '/' "
                       + "to upload into that folder ('\(text.value)/'), where each file keeps its path relative to the source",
                   at: text.valueMark)
            return nil
        }
        let written = text.value
        let hosts = firebaseHosts
        return FolderDestination(mark: text.valueMark) { relative in
            do throws(StorageError) {
                if plainHTTP {
                    let (path, rest) = Self.splitPath(written)
                    return .success(try StorageReference(parsing: path + StorageReference.percentEncode(relative, keepSlash: true) + rest,
                                                          firebaseHosts: hosts).description)
                }
                let base = reference.fullPath.isEmpty ? "" : reference.fullPath + "/"
                if reference.scheme == .file, let reserved = HiddenName.reservedComponent(in: relative) {
                    throw StorageError(.invalidArgument, HiddenName.reservedMessage(reserved))
                }
                return .success(try StorageReference(scheme: reference.scheme, bucket: reference.bucket, path: base + relative,
                                                     query: reference.query).description)
            } catch {
                return .failure(error)
            }
        }
    }

    /// A new batch id, or for a keyed job one derived from its key: the same manifest submitted again maps
    /// to the same jobs, and so to the same batch.
    static func batchID(key: String?, nowMs: Int64) -> String {
        key.map { JobID.derived(from: "batch:" + $0) } ?? JobID.generate(atMs: nowMs)
    }

    /// `include`/`exclude` on a job that names one file or object are a mistake: reported at the key.
    mutating func reportFiltersWithoutExpansion(_ own: FieldSet) {
        for field in [JobField.include, .exclude] {
            guard let keyMark = own.written[field] else { continue }
            report(.fieldNotAllowed, "'\(field.rawValue)' applies only when 'source' is a folder, a glob or a prefix (ending in '/'); "
                       + "this job names one file", at: keyMark)
        }
    }

    /// A download-file `source` that names a prefix to list: a `gs://` or `file://` reference ending in
    /// `/`, or a bucket root. Nil for anything else (the usual checks then run).
    func listablePrefix(_ text: Located<String>) -> StorageReference? {
        guard let reference = try? submittedReference(text.value), reference.scheme == .gs || reference.scheme == .file else {
            return nil
        }
        guard reference.isRoot || Self.namesFolder(text.value, plainHTTP: false) else { return nil }
        return reference
    }

    /// The template of a prefix download, or nil after reporting.
    mutating func prefixExpansion(_ prefix: StorageReference, template: JobSpec, own: FieldSet, mark: SourceMark) -> PrefixExpansion? {
        if prefix.scheme == .file, prefix.bucket.isEmpty, prefix.isRoot, let source = own.source {
            report(.unsupportedSource, "'source' '\(source.value)' would list the whole filesystem; name a folder", at: source.valueMark)
            return nil
        }
        guard let destinationText = own.destination else {
            report(.missingField, "the download-file job has no 'destination' (the local folder to download into, ending in '/')", at: mark)
            return nil
        }
        guard let folder = localPath(destinationText, field: .destination, kind: .downloadFile, folderOnly: true) else { return nil }
        let filter = PathFilter(include: own.include?.value ?? [], exclude: own.exclude?.value ?? [])
        let sourceMark = own.source?.valueMark ?? mark
        return PrefixExpansion(prefix: prefix, destinationFolder: folder, filter: filter, template: template,
                               batchID: Self.batchID(key: template.key, nowMs: nowMs), limit: max(0, limits.maximumJobs - jobCount), file: file,
                               jobMark: mark, sourceMark: sourceMark, source: source)
    }

    // MARK: - Field values

    /// `include:` / `exclude:` — a list of patterns (a single pattern is taken as a list of one).
    mutating func readPatterns(_ pair: YAMLPair) -> [PathPattern]? {
        let name = if case .scalar(let scalar) = pair.key { scalar.value } else { JobField.include.rawValue }
        let items: [YAMLNode]
        switch pair.value {
        case .sequence(let list, _): items = list
        case .scalar(let scalar) where !scalar.isNull: items = [pair.value]
        default:
            report(Self.isNull(pair.value) ? .invalidValue : .wrongType,
                   "'\(name)' must be a list of patterns like [\"*.jpg\", \"2024/**\"], not \(pair.value.summary)",
                   at: Self.isNull(pair.value) ? pair.key.mark : pair.value.mark)
            return nil
        }
        guard !items.isEmpty else {
            report(.invalidValue, "'\(name)' is an empty list; leave it out or give at least one pattern", at: pair.value.mark)
            return nil
        }
        var patterns: [PathPattern] = []
        var valid = true
        for item in items {
            guard case .scalar(let scalar) = item, !scalar.isNull else {
                report(.wrongType, "each of '\(name)' must be a pattern, not \(item.summary)", at: item.mark)
                valid = false
                continue
            }
            do {
                patterns.append(try PathPattern(scalar.value))
            } catch {
                report(.invalidValue, "'\(name)': \(error.description)", at: item.mark)
                valid = false
            }
        }
        return valid ? patterns : nil
    }

    /// `run_after:` — an RFC 3339 time (`2026-12-01T02:00:00Z`, an offset or fractional seconds allowed)
    /// between 1970-01-01 and 9999-12-31, as ms.
    mutating func readRunAfter(_ pair: YAMLPair) -> Int64? {
        let expected = "an RFC 3339 time like 2026-12-01T02:00:00Z (or with an offset, +01:00)"
        guard let scalar = quantity(pair, name: "run_after", expected: expected) else { return nil }
        // Spaces and tabs around ignored, as around every value a user types (DecimalText); a no-break
        // space is not (Foundation's .whitespaces trimmed every Unicode space).
        let text = String(DecimalText.trimmed(scalar.value))
        guard let ms = RFC3339.parse(text) else {
            if RFC3339.isMisplacedLeapSecond(text) {
                report(.invalidValue, "'run_after' '\(scalar.value)' has second 60, a leap second, which only 23:59:60 UTC on the last "
                           + "day of a month can be; write :59 or the next minute", at: scalar.mark)
            } else {
                report(.invalidValue, "'run_after' must be \(expected), not '\(scalar.value)'", at: scalar.mark)
            }
            return nil
        }
        guard ms >= ManifestValueRange.earliestRunAfterMs, ms <= ManifestValueRange.latestRunAfterMs else {
            let hint = ms < ManifestValueRange.earliestRunAfterMs ? " (a past time since 1970 runs at once)" : ""
            report(.invalidValue, "'run_after' must be between 1970-01-01 and 9999-12-31, not '\(scalar.value)'\(hint)",
                   at: scalar.mark)
            return nil
        }
        return ms
    }

    /// `delay:` — a duration (`90s`, `15m`, `2h`, `1d`; the DurationText grammar) of at most
    /// `ManifestValueRange.maximumDelayMs`, as ms.
    mutating func readDelay(_ pair: YAMLPair) -> Int64? {
        let expected = "a duration like 90s, 15m, 2h or 1d"
        guard let scalar = quantity(pair, name: "delay", expected: expected) else { return nil }
        switch DurationText.read(scalar.value, defaultUnitMs: nil) {
        case .milliseconds(let ms) where ms <= ManifestValueRange.maximumDelayMs:
            return ms
        case .milliseconds, .tooLarge:
            report(.invalidValue, "'delay' must be at most 3650d (ten years), not '\(scalar.value)'", at: scalar.mark)
        case .invalid:
            report(.invalidValue, "'delay' must be \(expected) (a unit is required), not '\(scalar.value)'", at: scalar.mark)
        }
        return nil
    }
}
