import Foundation
import JobModel

/// A job read from a manifest, with the position of its mapping (for messages such as "job at 4:5 submitted").
public struct ManifestJob: Sendable, Hashable {
    public var spec: JobSpec
    /// 1-based line and column of the job's first key.
    public var line: Int
    public var column: Int

    public init(spec: JobSpec, line: Int, column: Int) {
        self.spec = spec
        self.line = line
        self.column = column
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
/// Per kind: `upload-file` takes `source` (local path) and `destination` (reference); `upload-data` takes
/// `data` (text, or `!!binary`) or `data_base64`, and `destination`; `download-file` takes `source`
/// (reference) and `destination` (local path; ending in `/` means a folder, the object's name is added);
/// `download-memory` takes `source` and `max_size` (bytes or `512KiB`/`1MiB`/`2MB`; default 1 MiB);
/// `fetch-url` takes `source` in a bucket (gs://, a Firebase URL, or a named local bucket `file://NAME/`).
/// Every kind takes `key`, `priority`, `max_attempts` and `queue`; uploads take `metadata`.
/// Local paths are stored absolute and standardised; references as `StorageReference.description`.
/// `defaults:` may hold any field but `source`, `destination`, `data`, `data_base64` and `key`; fields
/// that do not apply to a job's kind (metadata on a download) are skipped for that job.
///
/// Validation goes on after the first problem wherever it can, so one run reports everything; a manifest
/// with any problem yields no jobs at all.
public struct ManifestParser: Sendable {
    /// The folder relative local paths are resolved against; nil means the manifest file's folder.
    public var baseDirectory: String?

    /// - Parameter baseDirectory: where relative `source`/`destination` paths start; nil for the manifest's
    ///   own folder. A relative base is taken from the current directory.
    public init(baseDirectory: String? = nil) {
        self.baseDirectory = baseDirectory
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
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = FileManager.default.fileExists(atPath: path) ? "cannot be read (check its permissions)" : "does not exist"
            return .failure(ManifestErrors([ManifestError(code: .unreadable, file: path, line: 1, column: 1,
                                                          message: "the manifest \(reason)")]))
        }
        return parseJobs(data: data, path: path)
    }

    /// As `parse(data:path:)`, keeping each job's position.
    public func parseJobs(data: Data, path: String) -> Result<[ManifestJob], ManifestErrors> {
        let bytes = [UInt8](data)
        if let offset = SourceText.firstInvalidUTF8Offset(bytes) {
            let mark = SourceText.mark(atByteOffset: offset, in: bytes[...])
            let isUTF16 = bytes.starts(with: [0xFF, 0xFE]) || bytes.starts(with: [0xFE, 0xFF])
            var message = "the manifest is not valid UTF-8 (byte 0x\(String(bytes[offset], radix: 16, uppercase: true)) at offset \(offset)); save it as UTF-8"
            if isUTF16 {
                message = "the manifest is UTF-16; save it as UTF-8"
            }
            let lineBytes = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            let sourceLine = !isUTF16 && lineBytes.indices.contains(mark.line - 1)
                ? String(decoding: lineBytes[mark.line - 1], as: UTF8.self) : nil
            return .failure(ManifestErrors([ManifestError(code: .invalidEncoding, file: path, line: mark.line,
                                                          column: mark.column, message: message, sourceLine: sourceLine)]))
        }
        return parseJobs(text: String(decoding: bytes, as: UTF8.self), path: path)
    }

    /// As `parse(text:path:)`, keeping each job's position.
    public func parseJobs(text: String, path: String) -> Result<[ManifestJob], ManifestErrors> {
        let source = SourceText(text)
        let document = YAMLParser(source: source).parseDocument()
        var reader = ManifestReader(file: path, source: source, baseDirectory: resolvedBaseDirectory(for: path))
        for problem in document.problems {
            let code: ManifestError.Code = switch problem.kind {
            case .syntax: .syntax
            case .duplicateKey: .duplicateKey
            case .unsupported: .unsupportedYAML
            }
            reader.report(code, problem.message, at: problem.mark)
        }
        // A syntax error leaves no tree to check; other YAML problems still let the jobs be checked.
        let jobs = document.root == nil && !document.problems.isEmpty ? [] : reader.read(document.root)
        if !reader.errors.isEmpty { return .failure(ManifestErrors(reader.sortedErrors)) }
        return .success(jobs)
    }

    // MARK: - Paths

    /// The absolute, standardised folder that relative paths in the manifest at `path` start from.
    func resolvedBaseDirectory(for path: String) -> String {
        let current = FileManager.default.currentDirectoryPath
        let base: String
        if let baseDirectory {
            base = baseDirectory
        } else if path == "-" || !path.contains("/") {
            base = "."
        } else {
            base = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        }
        let absolute = base.hasPrefix("/") ? base : current + "/" + base
        return LocalPath.standardize(absolute.isEmpty ? "/" : absolute)
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
enum LocalPath {
    /// Removes `.` segments, applies `..` segments and repeated `/` (never climbing above `/`).
    static func standardize(_ path: String) -> String {
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch part {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(part)
            }
        }
        return "/" + parts.joined(separator: "/")
    }
}
