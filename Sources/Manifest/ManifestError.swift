import JobModel

// MARK: - One error

/// One problem in a manifest, at the line and column of the node that is wrong.
///
/// Positions follow clang: the value for a wrong value, the key for an unknown or misplaced key, the
/// job's mapping for a missing field. `render()` prints `FILE:LINE:COL: error: MESSAGE`, the source line
/// and a caret under the column.
public struct ManifestError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of problem it is; stable, for tests and tools.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// The file is not valid UTF-8, or holds a byte-order mark past its start.
        case invalidEncoding
        /// libyaml refused the text (indentation, tabs, unclosed quotes, …).
        case syntax
        /// Valid YAML this reader refuses: several documents, unknown or recursive aliases, bad merges.
        case unsupportedYAML
        /// Past one of the `ManifestLimits`: file size, nesting depth, node count, alias expansion (alias
        /// bombs), scalar length or number of jobs.
        case limitExceeded
        /// The same key twice in one mapping.
        case duplicateKey
        /// No document, an empty document, or no jobs.
        case emptyManifest
        /// The top level is neither a mapping with `jobs:` nor a sequence of jobs.
        case invalidTopLevel
        /// A node of the wrong type: a mapping where a string belongs, a string for an integer, …
        case wrongType
        /// A key the manifest format does not know.
        case unknownKey
        /// A required field is absent.
        case missingField
        /// A known field that this kind of job (or `defaults:`) does not take.
        case fieldNotAllowed
        /// `kind` is none of the five job kinds.
        case unknownKind
        /// A storage reference that `StorageReference(parsing:)` refuses, or one of the wrong sort.
        case invalidReference
        /// An upload to (or download of) a bucket root, which names no object.
        case bucketRoot
        /// A local path that cannot be used.
        case invalidPath
        /// An upload's local source that is missing, not a regular file, or unreadable at submit.
        case sourceUnavailable
        /// An upload's local source that is a folder or a glob pattern (not supported yet).
        case unsupportedSource
        /// `max_size` is not a size, or not in 1 B ... 512 MiB.
        case invalidSize
        /// A value of the right type but out of range: `max_attempts: 0`, `priority: 1e400`, an empty key or queue.
        case invalidValue
        /// Two fields that exclude each other, such as `data` and `data_base64`.
        case conflictingFields
        /// `data_base64` is not base64.
        case invalidBase64
        /// Two jobs of the manifest share an idempotency key.
        case duplicateIdempotencyKey
        /// The manifest file could not be read.
        case unreadable
        /// A folder, glob or prefix that expands to no file.
        case emptyExpansion
        /// An `after:` entry that names no job, the job itself, or closes a cycle of dependencies.
        case invalidDependency
    }

    public var code: Code
    /// The manifest's path as the user named it.
    public var file: String
    /// 1-based line and column.
    public var line: Int
    public var column: Int
    /// What is wrong and what is expected instead, with any secret in a quoted URL redacted.
    public private(set) var message: String
    /// The text of the offending line, for the caret display, with secrets redacted; nil when unknown.
    public private(set) var sourceLine: String?
    /// The 1-based column of `sourceLine` the caret goes under: `column`, moved by any redaction before it.
    private var caretColumn: Int

    /// Creates an error; secrets in `message` and `sourceLine` (URL passwords, signature and token query
    /// parameters, values of keys such as `password:`) are redacted here, so no rendering can show them.
    public init(code: Code, file: String, line: Int, column: Int, message: String, sourceLine: String? = nil) {
        self.init(code: code, file: file, line: line, column: column, message: message,
                  redactedLine: sourceLine.map(SecretText.RedactedLine.init))
    }

    /// As the public initializer, with the source line already redacted (one line may carry many errors).
    init(code: Code, file: String, line: Int, column: Int, message: String, redactedLine: SecretText.RedactedLine?) {
        self.code = code
        self.file = file
        self.line = line
        self.column = column
        self.message = Self.clipped(SecretText.redacted(message))
        if let redactedLine {
            let shown = Self.window(redactedLine.scalars, column: redactedLine.column(for: column))
            self.sourceLine = shown.line
            self.caretColumn = shown.column
        } else {
            self.sourceLine = nil
            self.caretColumn = column
        }
    }

    /// The most characters of a source line shown under a diagnostic.
    static let maximumShownColumns = 160

    /// The most characters of a message: its start (what is wrong) and its end (what to do instead) are
    /// kept, and the middle — a value quoted from the manifest — is cut (a 16 MiB `kind:` was quoted whole,
    /// a 16 MiB error on standard error).
    static let maximumMessageLength = 1_000

    /// `message` at most `maximumMessageLength` characters long, cut in the middle with a note.
    static func clipped(_ message: String) -> String { TerminalText.clipped(message, limit: maximumMessageLength) }

    /// A long line cut to `maximumShownColumns` characters around the column, with `...` where text was
    /// left out (a 100 KB line of `[[[[` is not worth printing), and the column within what is shown.
    static func window(_ scalars: [Unicode.Scalar], column: Int) -> (line: String, column: Int) {
        guard scalars.count > maximumShownColumns else { return (String(String.UnicodeScalarView(scalars)), column) }
        let caret = min(max(0, column - 1), scalars.count)
        let end = min(scalars.count, max(caret + maximumShownColumns / 2, maximumShownColumns))
        let start = max(0, end - maximumShownColumns)
        var shown = String.UnicodeScalarView()
        if start > 0 { shown.append(contentsOf: "...".unicodeScalars) }
        shown.append(contentsOf: scalars[start..<end])
        if end < scalars.count { shown.append(contentsOf: "...".unicodeScalars) }
        return (String(shown), caret - start + (start > 0 ? 3 : 0) + 1)
    }

    /// `FILE:LINE:COL: error: MESSAGE`, the first line of `render()`. Control characters in the file name
    /// or the message (a value quoted from the manifest: `\e[31m` decodes to an escape sequence) are
    /// shown as `\u{1B}`, so no manifest can write terminal escapes through an error.
    public var description: String { "\(Self.printable(file)):\(line):\(column): error: \(Self.printable(message))" }

    /// `text` with every control character but the tab shown as `\u{…}`.
    static func printable(_ text: String) -> String { TerminalText.printableKeepingTabs(text) }

    /// `FILE:LINE:COL: note: TEXT`, one line whatever the file's name and the text hold: a note names
    /// files and objects a listing met, and a line break in one (`a\nm.yaml:9:9: error: …`) printed a
    /// line of its own, a diagnostic the manifest never had; it shows as `\u{A}`, as in an error.
    public static func note(file: String, line: Int, column: Int, _ text: String) -> String {
        "\(printable(file)):\(line):\(column): note: \(printable(text))"
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar != "\t" && TerminalText.isControl(scalar)
    }

    /// Clang-style text: the diagnostic line, then the source line and a caret under the column.
    ///
    /// The caret line repeats the source line's tabs so the caret lines up however tabs are shown.
    public func render() -> String {
        guard var sourceLine else { return description }
        // A control character in the line as written (a raw escape byte) shows as one U+FFFD, so the
        // caret stays under its column.
        if sourceLine.unicodeScalars.contains(where: Self.isControl) {
            sourceLine = String(String.UnicodeScalarView(sourceLine.unicodeScalars.map { Self.isControl($0) ? "\u{FFFD}" : $0 }))
        }
        var caret = ""
        for scalar in sourceLine.unicodeScalars.prefix(max(0, caretColumn - 1)) {
            caret.unicodeScalars.append(scalar == "\t" ? "\t" : " ")
        }
        return "\(description)\n\(sourceLine)\n\(caret)^"
    }
}

// MARK: - All errors of a manifest

/// Every problem found in one manifest, in source order. A manifest with any problem yields no jobs.
///
/// At most `ManifestLimits.maximumShownErrors` are held whole (the first in source order);
/// `notShownCount` counts the others, which `render()` says are not shown.
public struct ManifestErrors: Error, Sendable, Hashable, CustomStringConvertible, RandomAccessCollection {
    /// The errors shown, in source order.
    public var errors: [ManifestError]
    /// How many more errors the manifest has, past those in `errors` (counted once per code and position).
    public var notShownCount: Int

    public init(_ errors: [ManifestError], notShownCount: Int = 0) {
        self.errors = errors
        self.notShownCount = notShownCount
    }

    public var startIndex: Int { errors.startIndex }
    public var endIndex: Int { errors.endIndex }
    public subscript(position: Int) -> ManifestError { errors[position] }

    /// Every error found, shown or not.
    public var totalCount: Int { errors.count + notShownCount }

    /// Each error rendered (`render()`), then how many more were not shown (if any), then a count line as
    /// clang prints: `2 errors generated.`
    public func render() -> String {
        (errors.map { $0.render() } + notShownLine + [summary]).joined(separator: "\n")
    }

    /// `1 error generated.` / `N errors generated.`, counting those not shown.
    public var summary: String {
        totalCount == 1 ? "1 error generated." : "\(totalCount) errors generated."
    }

    /// `N more errors not shown (...)` when some were left out.
    private var notShownLine: [String] {
        guard notShownCount > 0 else { return [] }
        let what = notShownCount == 1 ? "1 more error" : "\(notShownCount) more errors"
        return ["\(what) not shown after the first \(errors.count); fix these and run it again to see the next"]
    }

    /// One `FILE:LINE:COL: error: MESSAGE` line per error shown, then how many more were not shown.
    public var description: String {
        (errors.map(\.description) + notShownLine).joined(separator: "\n")
    }
}
