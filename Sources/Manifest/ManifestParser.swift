import Foundation
import JobModel

/// A job read from a manifest, with the position of its mapping (for messages such as "job at 4:5 submitted").
public struct ManifestJob: Sendable, Hashable {
    public var spec: JobSpec
    /// 1-based line and column of the job's first key.
    public var line: Int
    public var column: Int
    /// 1-based line and column of the job's `key:` value, when it wrote one (each file's job of a folder
    /// or glob: the folder job's), for an error about the key that the submit finds in the log.
    public var keyLine: Int?
    public var keyColumn: Int?
    /// Things the reader left out on purpose (symbolic links in a folder), to tell the user.
    public var notes: [String] = []
    /// For a download-file job whose source is a prefix: what `submit` must list to make its jobs; `spec`
    /// is then only the template.
    public var prefixExpansion: PrefixExpansion?
    /// The job's `after:` entries, each with where it was written (the names are also in `spec.after`).
    public var dependencies: [ManifestDependency] = []
    /// An upload source missing now that a job outside this manifest, which the job waits for, may write:
    /// the submit decides, seeing the other manifests and the log (`PendingSourceCheck.unresolved`).
    public var pendingSourceCheck: PendingSourceCheck?

    public init(spec: JobSpec, line: Int, column: Int) {
        self.spec = spec
        self.line = line
        self.column = column
    }
}

/// One `after:` entry of a manifest job: the name it gives and where it was written.
public struct ManifestDependency: Sendable, Hashable {
    /// A key of a job in the manifest or the log, or a job id or unique id prefix.
    public var name: String
    /// The manifest's path as the user named it.
    public var file: String
    /// 1-based line and column of the entry.
    public var line: Int
    public var column: Int
    /// The manifest's text, for `sourceLine`: shared by every entry, where a copy of the line in each
    /// took the line's length times its entries (10,000 names on one line: 700 MB).
    let source: SourceText?

    /// The entry's source line (for the caret under an error), when known; made when asked for.
    public var sourceLine: String? { source?.quotedLine(line) }

    init(name: String, file: String, line: Int, column: Int, source: SourceText?) {
        self.name = name
        self.file = file
        self.line = line
        self.column = column
        self.source = source
    }

    public static func == (left: ManifestDependency, right: ManifestDependency) -> Bool {
        left.name == right.name && left.file == right.file && left.line == right.line && left.column == right.column
            && left.sourceLine == right.sourceLine
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(file)
        hasher.combine(line)
        hasher.combine(column)
    }

    /// An error at this entry.
    public func error(_ message: String) -> ManifestError {
        ManifestError(code: .invalidDependency, file: file, line: line, column: column, message: message, sourceLine: sourceLine)
    }
}

/// Reads a YAML job manifest into validated `JobSpec`s, or into every problem it has.
///
/// The format:
///
/// ```yaml
/// defaults:                  # optional; merged into every job, the job's own fields win
///   queue: nightly
///   max_attempts: 3
/// jobs:
///   - kind: upload-file      # upload-file | upload-data | download-file | download-memory | fetch-url
///     source: photos/a.jpg   # relative to the manifest's folder
///     destination: gs://my-bucket/photos/a.jpg
///     metadata: {content_type: image/jpeg, custom_metadata: {album: "2024"}}
///   - kind: download-memory
///     source: gs://my-bucket/config.json
///     max_size: 512KiB
/// ```
///
/// A bare top-level list of jobs is accepted too. Keys are snake_case; inside `metadata` the Firebase
/// camelCase spellings (`contentType`, `customMetadata`, …) are accepted as well. Top-level keys starting
/// with `x-` are ignored (a place for anchors); aliases and `<<` merge keys are resolved.
///
/// Per kind: `upload-file` takes `source` (local path, which must exist and be readable at submit unless
/// `check_source: false`) and `destination` (reference; ending in `/`, or a bucket root, means a folder and
/// the file's name is added); `upload-data` takes `data` (text, or `!!binary`) or `data_base64`, and
/// `destination` (an object, not a folder); `download-file` takes `source` (reference) and `destination`
/// (local path; ending in `/`, or an existing folder, means a folder and the object's name is added);
/// `download-memory` takes `source` and `max_size` (bytes or `512KiB`/`1MiB`/`2MB`; default 1 MiB);
/// `fetch-url` takes `source` in a bucket (gs://, a Firebase URL, or a named local bucket `file://NAME/`).
/// Every kind takes `key`, `priority`, `max_attempts`, `queue`, `run_after` and `delay`; uploads take
/// `metadata`. An upload-file folder or glob expands here into one job per file (`include`/`exclude`
/// filter them); a download-file prefix comes back as a `PrefixExpansion` for the caller to list.
/// Local paths are stored absolute and standardised; references as `StorageReference.description`.
/// `defaults:` may hold any field but `source`, `destination`, `data`, `data_base64` and `key`; fields
/// that do not apply to a job's kind (metadata on a download) are skipped for that job.
///
/// Validation goes on after the first problem wherever it can, so one run reports everything; a manifest
/// with any problem yields no jobs at all. The input is bounded by `ManifestLimits`, and messages and the
/// source lines quoted under them have their secrets redacted.
public struct ManifestParser: Sendable {
    /// The folder relative local paths are resolved against; nil means the manifest file's folder.
    public var baseDirectory: String?
    /// Whether upload-file sources are checked on disk (exist, a regular file, readable). A job opts out
    /// with `check_source: false`; false here turns the check off for every job (`--no-check-sources`).
    public var checksSources: Bool
    /// The bounds on the input: size, depth, nodes, aliases, scalar length, jobs.
    public var limits: ManifestLimits
    /// The submit's time (ms since the epoch), which `delay:` counts from; nil reads the clock.
    public var nowMs: Int64?
    /// The hosts whose Firebase-form URLs (`/v0/b/BUCKET/o/PATH`) name `gs://` objects: Firebase's own
    /// unless the submit's storage settings name an emulator (`StorageConfiguration.firebaseHosts(in:)`).
    public var firebaseHosts: FirebaseHosts = .firebase

    /// - Parameters:
    ///   - baseDirectory: where relative `source`/`destination` paths start; nil for the manifest's own
    ///     folder. A relative base is taken from the current directory.
    ///   - checksSources: whether upload-file sources must exist and be readable now.
    ///   - limits: the input limits (`ManifestLimits.default` unless a test needs smaller ones).
    public init(baseDirectory: String? = nil, checksSources: Bool = true, limits: ManifestLimits = .default) {
        self.baseDirectory = baseDirectory
        self.checksSources = checksSources
        self.limits = limits
    }

    // MARK: - Entry points

    /// Reads and parses the manifest at `path` (as the user wrote it; messages quote it unchanged).
    public func parse(contentsOf path: String) -> Result<[JobSpec], ManifestErrors> {
        parseJobs(contentsOf: path).map { $0.map(\.spec) }
    }

    /// Parses manifest bytes, refusing anything that is not UTF-8. `path` names the manifest in messages.
    public func parse(data: Data, path: String) -> Result<[JobSpec], ManifestErrors> {
        parseJobs(data: data, path: path).map { $0.map(\.spec) }
    }

    /// Parses manifest text. `path` names the manifest in messages and, without `baseDirectory`, locates it.
    public func parse(text: String, path: String) -> Result<[JobSpec], ManifestErrors> {
        parseJobs(text: text, path: path).map { $0.map(\.spec) }
    }

    /// As `parse(contentsOf:)`, keeping each job's position.
    public func parseJobs(contentsOf path: String) -> Result<[ManifestJob], ManifestErrors> {
        guard let data = readContents(atPath: path) else {
            let reason = FileManager.default.fileExists(atPath: path) ? "cannot be read (check its permissions)" : "does not exist"
            return .failure(ManifestErrors([ManifestError(code: .unreadable, file: path, line: 1, column: 1,
                                                          message: "the manifest \(reason)")]))
        }
        return parseJobs(data: data, path: path)
    }

    /// As `parse(data:path:)`, keeping each job's position.
    ///
    /// The text is held once, as the bytes libyaml reads (see `YAMLParser`): it was copied four times
    /// (bytes, a String, the String's bytes, libyaml's input), which took five times the manifest's size.
    public func parseJobs(data: Data, path: String) -> Result<[ManifestJob], ManifestErrors> {
        if data.count > limits.maximumBytes {
            return .failure(tooLarge([UInt8](data), path: path))
        }
        let bytes = [UInt8](data)
        if let errors = Self.encodingErrors(data, bytes, path: path, document: "the manifest") { return .failure(errors) }
        return parseJobs(source: SourceText(bytes: bytes), path: path)
    }

    /// The error for a `document` ("the manifest", "the configuration file") whose bytes are not UTF-8, at
    /// the first byte that is not, or nil when they are. `data` and `bytes` hold the same bytes.
    static func encodingErrors(_ data: Data, _ bytes: [UInt8], path: String, document: String) -> ManifestErrors? {
        // Checked on the Data's own bytes, so no copy is alive beside the one kept.
        let isValid = data.withUnsafeBytes { String(validating: $0.bindMemory(to: UInt8.self), as: UTF8.self) != nil }
        guard !isValid, let offset = SourceText.firstInvalidUTF8Offset(bytes) else { return nil }
        let mark = SourceText.mark(atByteOffset: offset, in: bytes[...])
        let isUTF16 = bytes.starts(with: [0xFF, 0xFE]) || bytes.starts(with: [0xFE, 0xFF])
        var message = "\(document) is not valid UTF-8 (byte 0x\(String(bytes[offset], radix: 16, uppercase: true)) at offset \(offset)); save it as UTF-8"
        if isUTF16 {
            message = "\(document) is UTF-16; save it as UTF-8"
        }
        // The line as any error quotes it (found through the text's sparse index, a long one left out).
        let sourceLine = isUTF16 ? nil : SourceText(bytes: bytes).quotedLine(mark.line)
        return ManifestErrors([ManifestError(code: .invalidEncoding, file: path, line: mark.line,
                                             column: mark.column, message: message, sourceLine: sourceLine)])
    }

    /// As `parse(text:path:)`, keeping each job's position.
    public func parseJobs(text: String, path: String) -> Result<[ManifestJob], ManifestErrors> {
        if text.utf8.count > limits.maximumBytes {
            return .failure(tooLarge(Array(text.utf8), path: path))
        }
        return parseJobs(source: SourceText(text), path: path)
    }

    private func parseJobs(source: SourceText, path: String) -> Result<[ManifestJob], ManifestErrors> {
        if let errors = Self.byteOrderMarkErrors(in: source, path: path, limits: limits) { return .failure(errors) }
        let document = YAMLParser(source: source, limits: limits).parseDocument()
        var reader = ManifestReader(file: path, source: source, baseDirectory: resolvedBaseDirectory(for: path),
                                    checksSources: checksSources, limits: limits, nowMs: nowMs ?? Clock.nowMs(),
                                    firebaseHosts: firebaseHosts)
        for problem in document.problems {
            let code: ManifestError.Code = switch problem.kind {
            case .syntax: .syntax
            case .duplicateKey: .duplicateKey
            case .unsupported: .unsupportedYAML
            case .limitExceeded: .limitExceeded
            }
            reader.report(code, problem.message, at: problem.mark)
        }
        // A syntax error leaves no tree to check; other YAML problems still let the jobs be checked.
        let jobs = document.root == nil && !document.problems.isEmpty ? [] : reader.read(document.root)
        if let errors = reader.errors.errors { return .failure(errors) }
        return .success(jobs)
    }

    /// An error at every byte-order mark past the start of `source`, or nil when there is none. Only
    /// these are reported: what libyaml makes of the text after one (a BOM at the start of a line is
    /// skipped, inside a line it is text) is not the problem.
    static func byteOrderMarkErrors(in source: SourceText, path: String, limits: ManifestLimits) -> ManifestErrors? {
        var errors = ManifestErrorCollector(limit: limits.maximumShownErrors)
        source.forEachByteOrderMarkPastStart { mark in
            errors.report(.invalidEncoding, at: mark) {
                ManifestError(code: .invalidEncoding, file: path, line: mark.line, column: mark.column,
                              message: "a byte-order mark (U+FEFF, the bytes EF BB BF) in the middle of the file, where only its first "
                                + "bytes may hold one (files joined with `cat`?); remove it, or write \"\\uFEFF\" in a double-quoted "
                                + "value if the character is meant",
                              sourceLine: source.quotedLine(mark.line))
            }
        }
        return errors.errors
    }

    // MARK: - Reading

    /// The manifest at `path`, read up to one byte past `limits.maximumBytes` (enough to refuse one that
    /// is too large without reading all of it); nil when it cannot be read, with `errno` saying why.
    public func readContents(atPath path: String) -> Data? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        return readContents(ofDescriptor: descriptor)
    }

    /// Reads an open descriptor (standard input, say) to its end, or to one byte past
    /// `limits.maximumBytes`; nil on a read error (a folder, say), with `errno` saying why.
    public func readContents(ofDescriptor descriptor: Int32) -> Data? {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while data.count <= limits.maximumBytes {
            let wanted = min(buffer.count, limits.maximumBytes + 1 - data.count)
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, wanted) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[..<count])
        }
        return data
    }

    /// The error for a manifest over `limits.maximumBytes`, at the line and column where it crosses it.
    private func tooLarge(_ bytes: [UInt8], path: String) -> ManifestErrors {
        let mark = SourceText.mark(atByteOffset: limits.maximumBytes, in: bytes[...])
        let message = "the manifest is larger than the limit of \(limits.maximumBytes) bytes (it crosses it here); "
            + "split it into several manifests (jobctl submit takes them all in one transaction)"
        return ManifestErrors([ManifestError(code: .limitExceeded, file: path, line: mark.line, column: mark.column, message: message)])
    }

    // MARK: - Paths

    /// The absolute, standardised folder that relative paths in the manifest at `path` start from.
    /// Nil when that folder is relative and the current directory cannot be read (see `CurrentDirectory`).
    func resolvedBaseDirectory(for path: String) -> String? {
        let base: String
        if let baseDirectory {
            base = baseDirectory
        } else if path == "-" || !path.utf8.contains(UInt8(ascii: "/")) {
            base = "."
        } else {
            base = SlashSeparatedPath.directory(of: path)
        }
        if base.hasPrefix("/") { return LocalPath.resolve(base) }
        guard let current = CurrentDirectory.path else { return nil }
        return LocalPath.resolve(current + "/" + base)
    }
}

/// Parses manifest text into jobs, or into every problem found.
///
/// - Parameters:
///   - text: the YAML text.
///   - path: the manifest's name in messages (`jobs/nightly.yaml`).
///   - baseDirectory: the folder relative local paths are resolved against, normally the manifest's own.
public func parseManifest(text: String, path: String, baseDirectory: String) -> Result<[JobSpec], ManifestErrors> {
    ManifestParser(baseDirectory: baseDirectory).parse(text: text, path: path)
}

// MARK: - Local paths

/// Lexical path handling: no file system access, no symlink resolution.
public enum LocalPath {
    /// Removes `.` segments, applies `..` segments and repeated `/` (never climbing above `/`).
    public static func standardize(_ path: String) -> String {
        // On UTF-8 bytes: every submit standardises each job's path, and `/`, `.` are ASCII.
        let slash = UInt8(ascii: "/"), dot = UInt8(ascii: ".")
        var parts: [Substring.UTF8View] = []
        for part in Substring(path).utf8.split(separator: slash, omittingEmptySubsequences: true) {
            if part.count == 1, part.first == dot { continue }
            if part.count == 2, part.allSatisfy({ $0 == dot }) {
                if !parts.isEmpty { parts.removeLast() }
                continue
            }
            parts.append(part)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(path.utf8.count + 1)
        for part in parts {
            bytes.append(slash)
            bytes.append(contentsOf: part)
        }
        if bytes.isEmpty { bytes.append(slash) }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension LocalPath {
    /// An absolute path as the kernel resolves it where it differs from `standardize`: a `..` after a
    /// folder reached through a symbolic link climbs from where the link leads, not back over the link's
    /// name. (`jobs/../t.txt` with `jobs` a link to `../data/jobs` is `data/t.txt` to `cat`; taken by
    /// its text it named another file, uploaded in its place.) Paths without `..` are only standardized;
    /// a folder before a `..` that does not exist (yet) is climbed by its text, as nothing can be followed.
    public static func resolve(_ path: String) -> String {
        let parent = Substring("..").utf8
        guard path.hasPrefix("/"), Substring(path).utf8.split(separator: UInt8(ascii: "/")).contains(where: { $0.elementsEqual(parent) }) else {
            return standardize(path)
        }
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == ".." {
                if !parts.isEmpty, let real = realPath("/" + parts.joined(separator: "/")) {
                    parts = real.split(separator: "/", omittingEmptySubsequences: true)
                }
                if !parts.isEmpty { parts.removeLast() }
                continue
            }
            parts.append(part)
        }
        return "/" + parts.joined(separator: "/")
    }

    /// `realpath(3)` of `path`, nil when any part of it does not exist or cannot be read, or when what it
    /// resolves to is not UTF-8 (`PathText`: decoded with U+FFFD it would name another file).
    public static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return PathText.decoded(cString: resolved)
    }
}

// MARK: - Byte-level text helpers

extension StringProtocol {
    /// Whether the UTF-8 bytes hold `needle`'s bytes: an exact search, without Foundation's bridging
    /// (it runs for every reference of every job).
    func containsUTF8(_ needle: String) -> Bool {
        let pattern = Array(needle.utf8)
        guard let first = pattern.first else { return true }
        let bytes = Array(utf8)
        guard bytes.count >= pattern.count else { return false }
        for start in 0...(bytes.count - pattern.count) where bytes[start] == first {
            if bytes[start..<(start + pattern.count)].elementsEqual(pattern) { return true }
        }
        return false
    }

    /// Whether the text starts with an ASCII `prefix`, ignoring ASCII case (`HTTP://`, `File://`).
    func hasASCIIPrefix(_ prefix: String) -> Bool {
        var own = utf8.makeIterator()
        for expected in prefix.utf8 {
            guard let byte = own.next() else { return false }
            let folded = (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
            guard folded == expected else { return false }
        }
        return true
    }
}
