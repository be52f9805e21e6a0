import JobModel

/// A glob pattern over `/`-separated relative paths, as shells, rsync and rclone write them.
///
/// - `*` matches any run of characters within one path segment (never `/`);
/// - `?` matches one character other than `/`;
/// - `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) match one character of (or not of) a set, never `/`;
/// - `**` as a whole segment matches any number of segments, none included (`photos/**/*.jpg` takes
///   `photos/a.jpg` and `photos/2024/05/b.jpg`);
/// - `\` takes the next character literally (`\*` is a star).
///
/// Matching is on Unicode scalars, case-sensitive, with no special case for names starting with `.`.
public struct PathPattern: Sendable, Hashable, CustomStringConvertible {
    /// One piece of a segment.
    enum Token: Sendable, Hashable {
        case literal(Unicode.Scalar)
        case any
        case one
        case set([ClosedRange<Unicode.Scalar>], negated: Bool)
    }

    /// One segment of the pattern.
    enum Segment: Sendable, Hashable {
        /// `**`: any number of whole segments.
        case anyDepth
        case tokens([Token])
    }

    /// The pattern as written.
    public let text: String
    let segments: [Segment]

    /// Why a pattern cannot be used.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    /// Compiles `text`; throws when it is empty, absolute, climbs with `..`, or has an unclosed `[`.
    public init(_ text: String) throws(Problem) {
        self.text = text
        guard !text.isEmpty else { throw Problem(description: "a pattern cannot be empty") }
        guard !text.hasPrefix("/") else {
            throw Problem(description: "'\(text)' starts with '/'; patterns are relative to the folder, glob root or prefix")
        }
        var segments: [Segment] = []
        for part in SlashSeparatedPath.parts(of: text) {
            if part == "**" {
                if segments.last != .anyDepth { segments.append(.anyDepth) }
                continue
            }
            if part == ".." { throw Problem(description: "'\(text)' climbs out with '..'; patterns name paths inside the folder") }
            segments.append(.tokens(try Self.tokens(Array(part.unicodeScalars), in: text)))
        }
        guard !segments.isEmpty else { throw Problem(description: "'\(text)' names no path") }
        self.segments = segments
    }

    public var description: String { text }

    /// Whether the pattern holds more than one segment (a `/`): such a pattern is matched against the whole
    /// relative path; one without is matched against the file's name.
    public var hasSeparator: Bool { text.contains("/") }

    /// Whether `text` holds an unescaped `*`, `?` or `[`: a pattern rather than a plain name.
    public static func isPattern(_ text: String) -> Bool {
        var escaped = false
        for scalar in text.unicodeScalars {
            if escaped { escaped = false; continue }
            if scalar == "\\" { escaped = true; continue }
            if scalar == "*" || scalar == "?" || scalar == "[" { return true }
        }
        return false
    }

    /// Whether `text` holds a `\` before a `*`, `?` or `[`: a path written with its pattern characters
    /// escaped, to name a file whose name holds them.
    public static func escapesPatternCharacter(_ text: String) -> Bool {
        var escaped = false
        for scalar in text.unicodeScalars {
            if escaped {
                if scalar == "*" || scalar == "?" || scalar == "[" { return true }
                escaped = false
                continue
            }
            if scalar == "\\" { escaped = true }
        }
        return false
    }

    /// `text` with its escapes taken as the pattern takes them: each `\` dropped, the character after it
    /// kept (`br\[x\].txt` is `br[x].txt`, `a\\b` is `a\b`); a `\` at the end is kept.
    public static func unescaped(_ text: String) -> String {
        var result = String.UnicodeScalarView()
        var escaped = false
        for scalar in text.unicodeScalars {
            if !escaped && scalar == "\\" {
                escaped = true
                continue
            }
            escaped = false
            result.append(scalar)
        }
        if escaped { result.append("\\") }
        return String(result)
    }

    /// Whether the relative path `path` (segments separated by `/`) matches the whole pattern.
    public func matches(_ path: String) -> Bool {
        let parts = SlashSeparatedPath.parts(of: path).map { Array($0.unicodeScalars) }
        var failed = Set<Int>()
        return Self.match(segments[...], parts[...], failed: &failed)
    }

    /// Whether the file name (last segment) of `path` matches; for patterns without `/`.
    public func matchesName(of path: String) -> Bool {
        guard let name = SlashSeparatedPath.lastPart(of: path) else { return false }
        return matches(String(name))
    }

    // MARK: - Matching

    private static func match(_ pattern: ArraySlice<Segment>, _ path: ArraySlice<[Unicode.Scalar]>, failed: inout Set<Int>) -> Bool {
        // Memoised on (pattern position, path position): `**` runs try each depth once.
        let key = pattern.startIndex &* 1_000_003 &+ path.startIndex
        if failed.contains(key) { return false }
        let result: Bool
        if let first = pattern.first {
            switch first {
            case .anyDepth:
                var matched = false
                var rest = path
                while true {
                    if match(pattern.dropFirst(), rest, failed: &failed) { matched = true; break }
                    guard !rest.isEmpty else { break }
                    rest = rest.dropFirst()
                }
                result = matched
            case .tokens(let tokens):
                if let segment = path.first, matchSegment(tokens[...], segment[...]) {
                    result = match(pattern.dropFirst(), path.dropFirst(), failed: &failed)
                } else {
                    result = false
                }
            }
        } else {
            result = path.isEmpty
        }
        if !result { failed.insert(key) }
        return result
    }

    /// Glob matching within one segment, with backtracking only to the last `*` (linear in practice).
    static func matchSegment(_ tokens: ArraySlice<Token>, _ name: ArraySlice<Unicode.Scalar>) -> Bool {
        var t = tokens.startIndex, n = name.startIndex
        var star: (token: Int, name: Int)?
        while n < name.endIndex {
            if t < tokens.endIndex {
                switch tokens[t] {
                case .any:
                    star = (t, n)
                    t += 1
                    continue
                case .one:
                    t += 1; n += 1
                    continue
                case .literal(let scalar) where scalar == name[n]:
                    t += 1; n += 1
                    continue
                case .set(let ranges, let negated) where ranges.contains(where: { $0.contains(name[n]) }) != negated:
                    t += 1; n += 1
                    continue
                default:
                    break
                }
            }
            guard let last = star else { return false }
            star = (last.token, last.name + 1)
            t = last.token + 1
            n = last.name + 1
        }
        while t < tokens.endIndex, tokens[t] == .any { t += 1 }
        return t == tokens.endIndex
    }

    // MARK: - Compiling

    private static func tokens(_ scalars: [Unicode.Scalar], in text: String) throws(Problem) -> [Token] {
        var tokens: [Token] = []
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            switch scalar {
            case "\\":
                guard index + 1 < scalars.count else { throw Problem(description: "'\(text)' ends in '\\', which escapes nothing") }
                tokens.append(.literal(scalars[index + 1]))
                index += 2
            case "*":
                if tokens.last != .any { tokens.append(.any) }
                index += 1
            case "?":
                tokens.append(.one)
                index += 1
            case "[":
                var cursor = index + 1
                var negated = false
                if cursor < scalars.count, scalars[cursor] == "!" || scalars[cursor] == "^" {
                    negated = true
                    cursor += 1
                }
                var ranges: [ClosedRange<Unicode.Scalar>] = []
                var first = true
                while cursor < scalars.count, scalars[cursor] != "]" || first {
                    first = false
                    var low = scalars[cursor]
                    if low == "\\", cursor + 1 < scalars.count {
                        cursor += 1
                        low = scalars[cursor]
                    }
                    if cursor + 2 < scalars.count, scalars[cursor + 1] == "-", scalars[cursor + 2] != "]" {
                        let high = scalars[cursor + 2]
                        guard low <= high else { throw Problem(description: "'\(text)' has the range '\(low)-\(high)', which is backwards") }
                        ranges.append(low...high)
                        cursor += 3
                    } else {
                        ranges.append(low...low)
                        cursor += 1
                    }
                }
                guard cursor < scalars.count else { throw Problem(description: "'\(text)' opens '[' without a closing ']'") }
                tokens.append(.set(ranges, negated: negated))
                index = cursor + 1
            default:
                tokens.append(.literal(scalar))
                index += 1
            }
        }
        return tokens
    }
}

/// The `include:` / `exclude:` rules of a folder, glob or prefix.
///
/// A path (relative to the folder, the glob's root or the prefix) is taken when it matches at least one
/// `include` pattern — every path, when there is none — and no `exclude` pattern: an exclude always
/// wins. A pattern without `/` is matched against the file's name at any depth (`*.tmp` also drops
/// `2024/x.tmp`), as in rsync and `.gitignore`; a pattern with `/` against the whole relative path
/// (`2024/**/*.raw`).
public struct PathFilter: Sendable, Hashable {
    public var include: [PathPattern]
    public var exclude: [PathPattern]

    public init(include: [PathPattern] = [], exclude: [PathPattern] = []) {
        self.include = include
        self.exclude = exclude
    }

    /// Whether the filter takes `path`.
    public func takes(_ path: String) -> Bool {
        func hit(_ pattern: PathPattern) -> Bool { pattern.hasSeparator ? pattern.matches(path) : pattern.matchesName(of: path) }
        if exclude.contains(where: hit) { return false }
        return include.isEmpty || include.contains(where: hit)
    }

    /// Whether nothing under the folder `path` (relative) can be taken: an `exclude:` pattern `X/**`
    /// whose `X` matches the folder. A walk does not go into such a folder — `exclude: ["locked/**"]`
    /// leaves out a folder the submitting user cannot read, as rclone's `--exclude` does, instead of the
    /// walk failing on it.
    public func excludesAll(under path: String) -> Bool {
        exclude.contains { pattern in
            guard pattern.text.hasSuffix("/**"), let folder = try? PathPattern(String(pattern.text.dropLast(3))) else { return false }
            // As `takes` reads `X/**` (it holds a `/`): against the whole relative path.
            return folder.matches(path)
        }
    }

    /// The patterns as written, nil when there are none (for `JobBatch`).
    var includeTexts: [String]? { include.isEmpty ? nil : include.map(\.text) }
    var excludeTexts: [String]? { exclude.isEmpty ? nil : exclude.map(\.text) }
}
