import Foundation
import JobModel

/// One setting of a configuration file: a key and its value(s), with where they were written.
public struct SettingsEntry: Sendable, Equatable {
    /// The key as written.
    public var key: String
    /// The value: one scalar, or each scalar of a list.
    public var values: [String]
    /// Whether the value was written as a list.
    public var isList: Bool
    /// Where the value (the key, for an empty list) is: 1-based line and column.
    public var line: Int
    public var column: Int
}

/// Reads a configuration file (`/etc/jobctl/config.yaml` and the like) with the manifest's YAML reader:
/// a mapping of known keys to scalars (or, for keys that take several, lists of scalars). Every problem
/// — a YAML error, an unknown key, a nested mapping — is an error at its file, line and column, in the
/// manifest's format (`FILE:LINE:COL: error: …`, the line and a caret).
public enum SettingsFile {
    /// Reads the file's bytes `data` (from `path`, for messages), refusing anything that is not UTF-8 at
    /// the first byte that is not: decoded with replacement characters, `db: /srv/caf\u{E9}.db` written in
    /// Latin-1 named another file (`caf\u{FFFD}.db`), which `migrate` and `submit` then created.
    public static func read(data: Data, path: String, keys: [String], listKeys: Set<String> = [],
                            limits: ManifestLimits = .default) -> Result<[SettingsEntry], ManifestErrors> {
        guard data.count <= limits.maximumBytes else {
            return .failure(ManifestErrors([ManifestError(code: .limitExceeded, file: path, line: 1, column: 1,
                                                          message: "the configuration file is larger than \(limits.maximumBytes) bytes")]))
        }
        let bytes = [UInt8](data)
        if let errors = ManifestParser.encodingErrors(data, bytes, path: path, document: "the configuration file") {
            return .failure(errors)
        }
        return read(text: String(decoding: bytes, as: UTF8.self), path: path, keys: keys, listKeys: listKeys, limits: limits)
    }

    /// Reads `text` (from `path`, for messages); `keys` are the known keys, `listKeys` those that may be lists.
    public static func read(text: String, path: String, keys: [String], listKeys: Set<String> = [],
                            limits: ManifestLimits = .default) -> Result<[SettingsEntry], ManifestErrors> {
        let source = SourceText(text)
        // As a manifest's: the first errors whole, the others only counted (their messages never made).
        var errors = ManifestErrorCollector(limit: limits.maximumShownErrors)
        func report(_ code: ManifestError.Code, _ message: @autoclosure () -> String, at mark: SourceMark) {
            errors.report(code, at: mark) {
                ManifestError(code: code, file: path, line: mark.line, column: mark.column, message: message(),
                              sourceLine: source.quotedLine(mark.line))
            }
        }
        guard text.utf8.count <= limits.maximumBytes else {
            return .failure(ManifestErrors([ManifestError(code: .limitExceeded, file: path, line: 1, column: 1,
                                                          message: "the configuration file is larger than \(limits.maximumBytes) bytes")]))
        }
        if let errors = ManifestParser.byteOrderMarkErrors(in: source, path: path, limits: limits) { return .failure(errors) }
        let document = YAMLParser(source: source, limits: limits,
                                  secondDocumentMessage: "a configuration file is one YAML document, but a second one starts here; "
                                      + "put every setting in the one mapping").parseDocument()
        for problem in document.problems {
            report(problem.kind == .duplicateKey ? .duplicateKey : .syntax, problem.message, at: problem.mark)
        }
        var entries: [SettingsEntry] = []
        switch document.root {
        case nil where document.problems.isEmpty:
            break  // An empty file sets nothing.
        case nil:
            break
        case .scalar(let scalar)? where scalar.style == .plain && (scalar.value.isEmpty || scalar.value == "~" || scalar.value == "null"):
            break
        case .mapping(let pairs, _)?:
            for pair in pairs {
                guard case .scalar(let key) = pair.key else {
                    report(.wrongType, "a setting's name must be text, not \(pair.key.summary)", at: pair.key.mark)
                    continue
                }
                guard keys.contains(key.value) else {
                    // Made only when the error is shown (see `ManifestErrorCollector`).
                    func hint() -> String {
                        NearestName.nearest(to: key.value, among: keys, within: 3).map { " (did you mean '\($0)'?)" } ?? ""
                    }
                    report(.unknownKey, "unknown setting '\(key.value)'\(hint()); `jobctl help config` lists the settings there are",
                           at: key.mark)
                    continue
                }
                // YAML's null (`~`, `null`, nothing) sets no value, as `db:` does: taken as text, `db: ~` made a
                // database named `~` and `queue: null` a worker of a queue named `null`. A setting left null (or
                // an empty list) is left to its default, as the reference says: kept as an empty value, `config`
                // showed it set to nothing by the file, and `concurrency: ~` was refused as "not ''".
                func text(_ scalar: YAMLScalar) -> String { scalar.isNull ? "" : scalar.value }
                switch pair.value {
                case .scalar(let value) where value.isNull:
                    continue
                case .sequence(let items, _) where items.isEmpty:
                    continue
                case .scalar(let value):
                    entries.append(SettingsEntry(key: key.value, values: [text(value)], isList: false,
                                                 line: value.mark.line, column: value.mark.column))
                case .sequence(let items, let mark):
                    guard listKeys.contains(key.value) else {
                        report(.wrongType, "'\(key.value)' takes one value, not a list", at: mark)
                        continue
                    }
                    var values: [String] = []
                    for item in items {
                        guard case .scalar(let scalar) = item else {
                            report(.wrongType, "each '\(key.value)' entry must be text, not \(item.summary)", at: item.mark)
                            continue
                        }
                        values.append(text(scalar))
                    }
                    entries.append(SettingsEntry(key: key.value, values: values, isList: true, line: mark.line, column: mark.column))
                case .mapping(_, let mark):
                    report(.wrongType, "'\(key.value)' takes \(listKeys.contains(key.value) ? "a value or a list" : "one value"), not a mapping",
                           at: mark)
                }
            }
        case let root?:
            report(.invalidTopLevel, "a configuration file is a mapping of settings ('concurrency: 8'), not \(root.summary)",
                   at: root.mark)
        }
        if let errors = errors.errors { return .failure(errors) }
        return .success(entries)
    }
}
