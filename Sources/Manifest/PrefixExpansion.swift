import Foundation
import JobModel

/// A `download-file` job whose `source` is a prefix (`gs://b/photos/`, `file://bucket/photos/`): it
/// becomes one job per object under the prefix once the objects are listed.
///
/// Listing needs the network, which the manifest reader does not touch: `submit` lists the prefix with
/// the storage backends and calls `jobs(objectNames:)`, which applies the same rules and reports
/// problems at the job's line and column, like every other manifest error.
public struct PrefixExpansion: Sendable, Hashable {
    /// The prefix to list: a bucket root or a folder-like path in a `gs://` or `file://` bucket.
    public var prefix: StorageReference
    /// The local folder the objects go under, absolute, standardised, without a trailing `/`.
    public var destinationFolder: String
    /// The `include:` / `exclude:` rules, matched against names relative to the prefix.
    public var filter: PathFilter
    /// The job as written: kind, queue, priority, checksums, … (`source` and `destination` are set per object).
    public var template: JobSpec
    /// The batch id every job of the expansion shares.
    public var batchID: String
    /// The most jobs the expansion may make.
    public var limit: Int
    /// Where the job and its `source` were written, for messages.
    let file: String
    let jobMark: SourceMark
    let sourceMark: SourceMark
    /// The manifest's text, shared by every prefix job: each kept a copy of its two lines, so 3,000
    /// prefix jobs on one 245 KB line (flow style) took 1.5 GB before any was listed.
    let source: SourceText?
    /// The lines of the job and of its `source`, for the caret under an error; made when asked for.
    var jobLine: String? { source?.quotedLine(jobMark.line) }
    var sourceLine: String? { source?.quotedLine(sourceMark.line) }

    init(prefix: StorageReference, destinationFolder: String, filter: PathFilter, template: JobSpec, batchID: String, limit: Int,
         file: String, jobMark: SourceMark, sourceMark: SourceMark, source: SourceText?) {
        self.prefix = prefix
        self.destinationFolder = destinationFolder
        self.filter = filter
        self.template = template
        self.batchID = batchID
        self.limit = limit
        self.file = file
        self.jobMark = jobMark
        self.sourceMark = sourceMark
        self.source = source
    }

    public static func == (left: PrefixExpansion, right: PrefixExpansion) -> Bool {
        left.prefix == right.prefix && left.destinationFolder == right.destinationFolder && left.filter == right.filter
            && left.template == right.template && left.batchID == right.batchID && left.limit == right.limit && left.file == right.file
            && left.jobMark == right.jobMark && left.sourceMark == right.sourceMark
            && left.jobLine == right.jobLine && left.sourceLine == right.sourceLine
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(prefix)
        hasher.combine(destinationFolder)
        hasher.combine(template)
        hasher.combine(batchID)
        hasher.combine(jobMark)
        hasher.combine(sourceMark)
    }

    /// The object names (full names in the bucket) relative to the prefix: what `include`/`exclude`
    /// patterns and destination paths see.
    ///
    /// Compared and cut on bytes, as the server listed them: `hasPrefix` compares Characters, so a name
    /// whose `/` after the prefix carries a combining mark was not under it, and a name canonically
    /// equivalent to the prefix (NFD for an NFC prefix) was, cut by a count of Characters.
    public func relativeName(_ objectName: String) -> String? {
        let base = prefix.fullPath
        if base.isEmpty { return objectName }
        let folder = base + "/"
        guard objectName.utf8.starts(with: folder.utf8) else { return nil }
        let start = objectName.utf8.index(objectName.utf8.startIndex, offsetBy: folder.utf8.count)
        return String(objectName.unicodeScalars[start...])
    }

    /// One job per listed object under the prefix that the filter takes, in name order; an error at the
    /// job's position when none is left, or at `source` when a name the filter takes cannot become a
    /// local path (`..`, `.`, empty segments — an absolute name — or a NUL) or a reference (a `gs://`
    /// name over 1,024 bytes), each with its own reason.
    ///
    /// The filter comes first: a name it leaves out is never downloaded, so `exclude:` — which the
    /// errors offer — leaves such a name out too (it was refused before the filters were asked).
    ///
    /// Names ending in `/` are skipped: the zero-byte "folder" placeholders consoles create, and objects
    /// holding data that no local file can be named after (`slashNamedNote` says which).
    public func jobs(objectNames: [String]) -> Result<[JobSpec], ManifestErrors> {
        var specs: [JobSpec] = []
        // Names the filter takes that no job can download, by why: not a safe relative path, a NUL, no reference.
        var unsafe: [String] = []
        var reserved: [String] = []
        var controlled: [String] = []
        var withNUL: [String] = []
        var unnamed: [(name: String, reason: String)] = []
        // Objects whose path under the folder the kernel would refuse (ENAMETOOLONG), and why, for the first.
        var tooLong: [String] = []
        var tooLongProblem = ""
        for name in objectNames.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            guard let relative = relativeName(name), !relative.isEmpty, relative.utf8.last != UInt8(ascii: "/") else { continue }
            guard filter.takes(relative) else { continue }
            if relative.utf8.contains(0) {
                withNUL.append(name)
                continue
            }
            // Cut at the `/` bytes, as the kernel walks the destination (see `SlashSeparatedPath`).
            let parts = SlashSeparatedPath.parts(of: relative, keepingEmpty: true)
            if parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) {
                unsafe.append(name)
                continue
            }
            // A name jobctl keeps for its own files (`.x.jobctl-meta.json`: a `file://` bucket's metadata
            // sidecar): downloaded into a bucket's folder, the object would stand in for one.
            if parts.contains(where: { HiddenName.isReserved($0) }) {
                reserved.append(name)
                continue
            }
            // A control character (a line break, a tab, an escape) in a file's name, as a single download
            // into a folder refuses it: names such as `a\nb` break every line-based tool that lists them.
            if relative.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
                controlled.append(name)
                continue
            }
            var spec = template
            do {
                spec.source = try StorageReference(scheme: prefix.scheme, bucket: prefix.bucket, path: name, query: prefix.query).description
            } catch {
                unnamed.append((name, error.message))
                continue
            }
            let destination = destinationFolder + "/" + relative
            if let problem = LocalPathBounds.problem(destination) {
                if tooLong.isEmpty { tooLongProblem = problem }
                tooLong.append(name)
                continue
            }
            spec.destination = destination
            spec.key = template.key.map { $0 + "/" + relative }
            spec.batch = JobBatch(id: batchID, source: prefix.description + (prefix.isRoot ? "" : "/"),
                                  include: filter.includeTexts, exclude: filter.excludeTexts, path: relative)
            specs.append(spec)
        }
        // No job can download these (a reference naming one is refused, or names another object), so the
        // advice is to leave them out.
        var refusals: [ManifestError] = []
        let more = { (count: Int) in count > 1 ? " (and \(count - 1) more)" : "" }
        let shown = { (name: String) in LocalPathBounds.shortened(name) }
        if let first = unsafe.first {
            refusals.append(error(.invalidPath, "the object '\(shown(first))'\(more(unsafe.count)) under '\(prefixText)' has a name that is not a "
                + "safe relative path ('..', '.', an empty segment or a leading '/'): it cannot be written under '\(destinationFolder)/', "
                + "and no reference names it as it is; 'exclude:' it or narrow the prefix", at: sourceMark, line: sourceLine))
        }
        if let first = reserved.first {
            refusals.append(error(.invalidPath, "the object '\(shown(first))'\(more(reserved.count)) under '\(prefixText)' has a name jobctl "
                + "keeps for its own temporary and metadata files (ending in \(HiddenName.reservedSuffixes.joined(separator: ", "))): "
                + "it is not written under '\(destinationFolder)/'; 'exclude:' it or narrow the prefix", at: sourceMark, line: sourceLine))
        }
        if let first = controlled.first {
            refusals.append(error(.invalidPath, "the object '\(TerminalText.printable(shown(first)))'\(more(controlled.count)) under '\(prefixText)' "
                + "has a control character in its name, which no file name should hold: it is not written under '\(destinationFolder)/'; "
                + "'exclude:' it or narrow the prefix", at: sourceMark, line: sourceLine))
        }
        if let first = withNUL.first {
            refusals.append(error(.invalidPath, "the object '\(shown(first))'\(more(withNUL.count)) under '\(prefixText)' has a NUL character in "
                + "its name, which no file name and no reference can hold; 'exclude:' it or narrow the prefix", at: sourceMark, line: sourceLine))
        }
        if let first = unnamed.first {
            refusals.append(error(.invalidPath, "the object '\(shown(first.name))'\(more(unnamed.count)) under '\(prefixText)' cannot be named "
                + "by a reference: \(first.reason); 'exclude:' it or narrow the prefix", at: sourceMark, line: sourceLine))
        }
        if !refusals.isEmpty { return .failure(ManifestErrors(refusals)) }
        if let first = tooLong.first {
            let more = tooLong.count > 1 ? " (and \(tooLong.count - 1) more)" : ""
            return .failure(ManifestErrors([error(.invalidPath, "the object '\(first.prefix(40))...'\(more) under '\(prefixText)' would be "
                + "written under '\(destinationFolder)/' as a path that \(tooLongProblem): download it with a job of its own that names "
                + "a shorter destination, or narrow the prefix or 'exclude:' it", at: sourceMark, line: sourceLine)]))
        }
        if specs.isEmpty {
            let filtered = filter.include.isEmpty && filter.exclude.isEmpty ? "" : " that 'include'/'exclude' take"
            return .failure(ManifestErrors([error(.emptyExpansion, "the prefix '\(prefixText)' holds no object\(filtered); "
                + "nothing would be downloaded: check the prefix and the filters", at: jobMark, line: jobLine)]))
        }
        if specs.count > limit {
            return .failure(ManifestErrors([error(.limitExceeded, "the prefix '\(prefixText)' holds \(specs.count) objects, more than the "
                + "limit of \(limit) jobs; narrow the prefix or filter with 'include'/'exclude'", at: jobMark, line: jobLine)]))
        }
        return .success(specs)
    }

    /// The prefix as a user reads it, ending in `/` unless it is a bucket root.
    public var prefixText: String { prefix.description + (prefix.isRoot || prefix.description.hasSuffix("/") ? "" : "/") }

    /// The note saying what the listing left out (entries of a `file://` bucket that are no objects:
    /// links, FIFOs, devices), at the job's `source`, as a folder upload names what it skips; nil for none.
    public func skippedNote(_ skipped: [(path: String, what: String)]) -> String? {
        guard let first = skipped.first else { return nil }
        let more = skipped.count > 1 ? " and \(skipped.count - 1) more entries that are no objects" : ""
        return ManifestError.note(file: file, line: sourceMark.line, column: sourceMark.column,
                                  "'source' '\(prefixText)': skipped '\(first.path)' "
                                      + "(\(first.what))\(more); a link in a bucket is never followed: name its target in a job of its own")
    }

    /// The note saying which objects holding data were skipped because their names end in `/` (listed by
    /// `ObjectLister` with their sizes), at the job's `source`; nil for none the filters take. Only the
    /// zero-byte "folder" placeholders are skipped without a word: such an object with content was left
    /// out silently too, and alone under its prefix made it "hold no object".
    public func slashNamedNote(_ objects: [(name: String, size: Int64)]) -> String? {
        let taken = objects.filter { object in
            guard let relative = relativeName(object.name) else { return false }
            return relative.isEmpty || filter.takes(relative)
        }.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        guard let first = taken.first else { return nil }
        let more = taken.count > 1 ? " and \(taken.count - 1) more such \(taken.count == 2 ? "object" : "objects")" : ""
        return ManifestError.note(file: file, line: sourceMark.line, column: sourceMark.column,
                                  "'source' '\(prefixText)': skipped the object "
                                      + "'\(LocalPathBounds.shortened(first.name))' (\(first.size) \(first.size == 1 ? "byte" : "bytes"))\(more): "
                                      + "its name ends in '/', which no local file's can, and it holds data, so it is no empty folder "
                                      + "placeholder; copy it to a name without the trailing '/' to download it")
    }

    /// The error for a prefix that could not be listed (`cause` says why and what to do), at `source`.
    public func listingFailed(_ cause: String) -> ManifestErrors {
        ManifestErrors([error(.sourceUnavailable, "cannot list the prefix '\(prefixText)': \(cause)", at: sourceMark, line: sourceLine)])
    }

    /// An error at `mark`, quoting `line`.
    func error(_ code: ManifestError.Code, _ message: String, at mark: SourceMark? = nil, line: String? = nil) -> ManifestError {
        let mark = mark ?? jobMark
        return ManifestError(code: code, file: file, line: mark.line, column: mark.column, message: message,
                             redactedLine: (line ?? jobLine).map(SecretText.RedactedLine.init))
    }
}
