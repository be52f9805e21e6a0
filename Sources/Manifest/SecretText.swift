import Foundation
import JobModel

/// Hides secrets in the text the manifest reader prints: its messages and the source lines under them.
///
/// A manifest may hold a presigned URL or, by mistake, a password; `submit` refuses the second but must
/// not print either back. Redacted are: the password of a URL's userinfo (`user:REDACTED@`, or
/// `REDACTED@` for a bare token), the values of secret query and fragment parameters (`token`,
/// `X-Goog-Signature`, every `X-Amz-*`, …), and in source lines the value of a YAML key named like a
/// secret (`password: …`). A source line keeps everything else, and the caret keeps pointing at the
/// same token: `redactedLine(_:column:)` moves the column by what was removed before it.
///
/// The names come from `SecretRedaction`, the one list the CLI and the storage errors use too.
enum SecretText {
    /// What replaces a secret.
    static let marker = SecretRedaction.marker

    /// YAML keys that are manifest fields, never secrets, although their names are on the list (`key`
    /// is the idempotency key).
    static let manifestKeys: Set<String> = ["key"]

    /// Whether a parameter or key with this (possibly percent-encoded) name holds a secret: the one
    /// list in `SecretRedaction`.
    static func isSecretName<Name: StringProtocol>(_ rawName: Name) -> Bool {
        SecretRedaction.isSecretName(Substring(rawName))
    }

    // MARK: - Entry points

    /// `text` with the secrets of every URL in it redacted (for messages, which quote values), and those
    /// of words that are no URL but hold a query or path parameters (`'https:/h/x?token=…' is not a storage
    /// URL`, a value quoted without its scheme): `SecretRedaction.redactURLLike`.
    static func redacted(_ text: String) -> String {
        var output = text
        if text.containsUTF8("://") {
            let scalars = Array(text.unicodeScalars)
            output = String(String.UnicodeScalarView(apply(urlSpans(in: scalars), to: scalars).scalars))
        }
        return SecretRedaction.redactURLLike(output)
    }

    /// A source line with its secrets redacted, and the 1-based column under which the caret for
    /// `column` now belongs (the start of a redaction when the column fell inside one).
    static func redactedLine(_ line: String, column: Int) -> (line: String, column: Int) {
        let redacted = RedactedLine(line)
        return (redacted.text, redacted.column(for: column))
    }

    /// A source line with its secrets redacted, kept as scalars with the map from original columns, so
    /// the many errors one long line can carry share one pass over it.
    struct RedactedLine: Sendable {
        /// The redacted line.
        let scalars: [Unicode.Scalar]
        /// For each 0-based scalar offset of the original line (and its end), the offset in `scalars`;
        /// nil when nothing was redacted (offsets are the same).
        private let map: [Int]?

        init(_ line: String) {
            let original = Array(line.unicodeScalars)
            // Each scan only where the bytes it looks for are: a line may be megabytes long.
            var colon = false, parameters = false, escape = false
            for byte in line.utf8 {
                switch byte {
                case UInt8(ascii: ":"): colon = true
                case UInt8(ascii: "?"), UInt8(ascii: ";"): parameters = true
                case UInt8(ascii: "\\"): escape = true
                default: continue
                }
            }
            var found: [Range<Int>] = []
            if colon { found += SecretText.urlSpans(in: original) + SecretText.keySpans(in: original) }
            if parameters { found += SecretText.parameterLikeSpans(in: original) }
            if escape { found += SecretText.escapedScalarSpans(in: original) }
            let spans = found.isEmpty ? [] : SecretText.merged(found)
            if spans.isEmpty {
                scalars = original
                map = nil
            } else {
                (scalars, map) = SecretText.apply(spans, to: original)
            }
        }

        var text: String { String(String.UnicodeScalarView(scalars)) }

        /// The 1-based column in the redacted line for a 1-based column of the original.
        func column(for column: Int) -> Int {
            guard let map else { return column }
            return map[min(max(0, column - 1), map.count - 1)] + 1
        }
    }

    // MARK: - Finding secrets

    /// Scalars that end a URL in YAML text: white space, quotes, angle brackets, back quotes.
    private static func endsURL(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isWhitespace || "\"'<>`".unicodeScalars.contains(scalar)
    }

    /// Half-open ranges of scalar offsets holding URL secrets: userinfo passwords and secret parameter values.
    fileprivate static func urlSpans(in scalars: [Unicode.Scalar]) -> [Range<Int>] {
        var spans: [Range<Int>] = []
        var index = 0
        while index + 2 < scalars.count {
            guard scalars[index] == ":", scalars[index + 1] == "/", scalars[index + 2] == "/" else {
                index += 1
                continue
            }
            let start = index + 3
            var end = start
            while end < scalars.count, !endsURL(scalars[end]) { end += 1 }
            let authorityEnd = (start..<end).first { "/?#".unicodeScalars.contains(scalars[$0]) } ?? end
            if let at = (start..<authorityEnd).last(where: { scalars[$0] == "@" }) {
                if let colon = (start..<at).first(where: { scalars[$0] == ":" }) {
                    if colon + 1 < at { spans.append((colon + 1)..<at) }
                } else if start < at {
                    spans.append(start..<at)
                }
            }
            // The query (after the first `?`) and the fragment (after `#`) hold `name=value` parameters.
            var cursor = authorityEnd
            while cursor < end {
                if scalars[cursor] == "?" || scalars[cursor] == "#" {
                    spans += parameterSpans(in: scalars, from: cursor + 1, to: end)
                    break
                }
                cursor += 1
            }
            index = max(end, index + 3)
        }
        return spans
    }

    /// Spans of secret values among `name=value` parameters separated by `&`, `;` or `#` in `from..<to`.
    private static func parameterSpans(in scalars: [Unicode.Scalar], from: Int, to end: Int) -> [Range<Int>] {
        var spans: [Range<Int>] = []
        var partStart = from
        while partStart < end {
            var partEnd = partStart
            while partEnd < end, !"&;#".unicodeScalars.contains(scalars[partEnd]) { partEnd += 1 }
            if let equals = (partStart..<partEnd).first(where: { scalars[$0] == "=" }),
               isSecretName(String(String.UnicodeScalarView(scalars[partStart..<equals]))), equals + 1 < partEnd {
                spans.append((equals + 1)..<partEnd)
            }
            partStart = partEnd + 1
        }
        return spans
    }

    /// Spans of secret parameter values in words that are no URL: after the first `?` or `;` of a run of
    /// non-blank scalars (quotes and flow brackets end it), as in a URL's query and path parameters. A
    /// malformed scheme (`https:/h/x?token=…`, one slash) had no `://` for `urlSpans` to find, and its
    /// refused value was quoted whole.
    fileprivate static func parameterLikeSpans(in scalars: [Unicode.Scalar]) -> [Range<Int>] {
        var spans: [Range<Int>] = []
        var index = 0
        while index < scalars.count {
            guard !endsWord(scalars[index]) else {
                index += 1
                continue
            }
            var end = index
            while end < scalars.count, !endsWord(scalars[end]) { end += 1 }
            if let mark = (index..<end).first(where: { scalars[$0] == "?" || scalars[$0] == ";" }) {
                spans += parameterSpans(in: scalars, from: mark + 1, to: end)
            }
            index = end
        }
        return spans
    }

    private static func endsWord(_ scalar: Unicode.Scalar) -> Bool {
        endsURL(scalar) || "{}[]".unicodeScalars.contains(scalar)
    }

    /// Spans of the content of double-quoted scalars written with an escape whose decoded value holds a
    /// secret (`SecretRedaction.redactURLLike` would change it, or it reads `name=value` with a secret's name): `"http://u:pw\x40h/x"` or `"?tok\x65n=…"`
    /// hid the `@` or the name from the scans of the raw text, which quoted the line with the password
    /// in it while the value itself was refused for it. Such a scalar is shown as `REDACTED` whole.
    fileprivate static func escapedScalarSpans(in scalars: [Unicode.Scalar]) -> [Range<Int>] {
        var spans: [Range<Int>] = []
        var previous: Unicode.Scalar?
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            if scalar == "#", index == 0 || scalars[index - 1].properties.isWhitespace { break }
            guard scalar == "\"", previous.map({ ":-{[,?".unicodeScalars.contains($0) }) ?? true else {
                if scalar == "'" , previous.map({ ":-{[,?".unicodeScalars.contains($0) }) ?? true {
                    // A single-quoted scalar has no escapes: skipped whole (`''` is its quote).
                    var end = index + 1
                    while end < scalars.count {
                        if scalars[end] == "'" {
                            if end + 1 < scalars.count, scalars[end + 1] == "'" { end += 2; continue }
                            break
                        }
                        end += 1
                    }
                    index = end + 1
                    previous = "'"
                    continue
                }
                if !scalar.properties.isWhitespace { previous = scalar }
                index += 1
                continue
            }
            var end = index + 1
            var escaped = false
            while end < scalars.count, scalars[end] != "\"" {
                if scalars[end] == "\\" {
                    escaped = true
                    end += 1
                }
                end += 1
            }
            let content = (index + 1)..<min(end, scalars.count)
            // One whose escapes do not decode (libyaml refuses it) is elided too: what it holds is unknown.
            if escaped, !content.isEmpty {
                let decoded = decodedDoubleQuoted(scalars[content])
                if decoded.map({ SecretRedaction.redactURLLike($0) != $0 || keyValueHoldsSecret($0) }) ?? true {
                    spans.append(content)
                }
            }
            index = end + 1
            previous = "\""
        }
        return spans
    }

    /// Whether a decoded scalar reads `name: value` or `name=value` with a name like a secret's.
    private static func keyValueHoldsSecret(_ text: String) -> Bool {
        guard let separator = text.firstIndex(where: { $0 == ":" || $0 == "=" }) else { return false }
        let name = text[..<separator].trimmingCharacters(in: .whitespaces)
        return !name.isEmpty && isSecretName(name)
    }

    /// A double-quoted YAML scalar's content (one line of it) decoded: its escapes (`\xXX`, `\uXXXX`,
    /// `\UXXXXXXXX`, `\n`, `\"`, …) as libyaml reads them; nil when one is not an escape YAML has.
    static func decodedDoubleQuoted(_ content: ArraySlice<Unicode.Scalar>) -> String? {
        var output = String.UnicodeScalarView()
        var index = content.startIndex
        while index < content.endIndex {
            let scalar = content[index]
            index += 1
            guard scalar == "\\" else {
                output.append(scalar)
                continue
            }
            guard index < content.endIndex else { return nil }
            let code = content[index]
            index += 1
            let simple: [Unicode.Scalar: Unicode.Scalar] = [
                "0": "\u{0}", "a": "\u{7}", "b": "\u{8}", "t": "\t", "\t": "\t", "n": "\n", "v": "\u{B}", "f": "\u{C}",
                "r": "\r", "e": "\u{1B}", " ": " ", "\"": "\"", "/": "/", "\\": "\\", "N": "\u{85}", "_": "\u{A0}",
                "L": "\u{2028}", "P": "\u{2029}",
            ]
            if let plain = simple[code] {
                output.append(plain)
                continue
            }
            let width: Int
            switch code {
            case "x": width = 2
            case "u": width = 4
            case "U": width = 8
            default: return nil
            }
            guard content.endIndex - index >= width else { return nil }
            let digits = String(String.UnicodeScalarView(content[index..<(index + width)]))
            guard let value = UInt32(digits, radix: 16), let decoded = Unicode.Scalar(value) else { return nil }
            output.append(decoded)
            index += width
        }
        return String(output)
    }

    /// Spans of values of YAML keys named like secrets: `password: x`, `{token: "x", a: b}`, `- api_key: 'x'`.
    fileprivate static func keySpans(in scalars: [Unicode.Scalar]) -> [Range<Int>] {
        var spans: [Range<Int>] = []
        // A line may repeat one key thousands of times (`{a: {a: ...`): decide each name once.
        var decided: [String: Bool] = [:]
        var flowDepth = 0
        var index = 0
        var keyStart = 0
        var quote: Unicode.Scalar?
        // The last non-blank scalar before `index`: a quote opens a quoted scalar only where one may start.
        var previous: Unicode.Scalar?
        while index < scalars.count {
            let scalar = scalars[index]
            defer { if !scalar.properties.isWhitespace { previous = scalar } }
            if let open = quote {
                if scalar == open { quote = nil }
                index += 1
                continue
            }
            switch scalar {
            case "\"", "'":
                if previous.map({ ":-{[,?".unicodeScalars.contains($0) }) ?? true { quote = scalar }
            case "{", "[":
                flowDepth += 1
                keyStart = index + 1
            case "}", "]":
                flowDepth = max(0, flowDepth - 1)
                keyStart = index + 1
            case ",":
                if flowDepth > 0 { keyStart = index + 1 }
            case "#" where index == 0 || scalars[index - 1].properties.isWhitespace:
                // A comment: nothing after it is a key.
                return spans
            case ":" where index + 1 == scalars.count || scalars[index + 1].properties.isWhitespace:
                let name = keyName(scalars[keyStart..<index])
                let secret = decided[name] ?? (isSecretName(name) && !manifestKeys.contains(name.lowercased()))
                decided[name] = secret
                if secret {
                    let value = valueSpan(in: scalars, after: index + 1, inFlow: flowDepth > 0)
                    if !value.isEmpty { spans.append(value) }
                    index = value.upperBound
                    keyStart = index
                    continue
                }
                keyStart = index + 1
            default:
                break
            }
            index += 1
        }
        return spans
    }

    /// The key written in `scalars`: without indentation, `- ` and `? ` indicators and quotes.
    private static func keyName(_ scalars: ArraySlice<Unicode.Scalar>) -> String {
        var text = String(String.UnicodeScalarView(scalars)).trimmingCharacters(in: .whitespaces)
        while let first = text.first, first == "-" || first == "?", text.dropFirst().first?.isWhitespace ?? true {
            text = String(text.dropFirst()).trimmingCharacters(in: .whitespaces)
        }
        if text.count >= 2, let first = text.first, first == "\"" || first == "'", text.last == first {
            text = String(text.dropFirst().dropLast())
        }
        return text
    }

    /// The value after a key's `:`: a quoted scalar's content, or plain text up to the end of the line
    /// (in a flow collection, up to the next `,`, `}` or `]`), without trailing blanks or a comment.
    private static func valueSpan(in scalars: [Unicode.Scalar], after colon: Int, inFlow: Bool) -> Range<Int> {
        var start = colon
        while start < scalars.count, scalars[start].properties.isWhitespace { start += 1 }
        guard start < scalars.count else { return start..<start }
        if scalars[start] == "\"" || scalars[start] == "'" {
            let open = scalars[start]
            var end = start + 1
            while end < scalars.count, scalars[end] != open { end += 1 }
            return (start + 1)..<end
        }
        var end = start
        while end < scalars.count {
            let scalar = scalars[end]
            if inFlow, ",}]".unicodeScalars.contains(scalar) { break }
            if scalar == "#", end > start, scalars[end - 1].properties.isWhitespace { break }
            end += 1
        }
        while end > start, scalars[end - 1].properties.isWhitespace { end -= 1 }
        return start..<end
    }

    // MARK: - Rewriting

    /// Sorted spans with overlapping or touching ones joined.
    fileprivate static func merged(_ spans: [Range<Int>]) -> [Range<Int>] {
        var result: [Range<Int>] = []
        for span in spans.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = result.last, span.lowerBound <= last.upperBound {
                result[result.count - 1] = last.lowerBound..<max(last.upperBound, span.upperBound)
            } else {
                result.append(span)
            }
        }
        return result
    }

    /// The text with each span replaced by `marker`, and for each original offset (0...count) its offset
    /// in the result (offsets inside a span map to the marker's start).
    fileprivate static func apply(_ spans: [Range<Int>], to scalars: [Unicode.Scalar]) -> (scalars: [Unicode.Scalar], map: [Int]) {
        var output: [Unicode.Scalar] = []
        output.reserveCapacity(scalars.count)
        var map = [Int](repeating: 0, count: scalars.count + 1)
        var index = 0
        var outputCount = 0
        for span in merged(spans) {
            while index < span.lowerBound {
                map[index] = outputCount
                output.append(scalars[index])
                outputCount += 1
                index += 1
            }
            while index < span.upperBound {
                map[index] = outputCount
                index += 1
            }
            output.append(contentsOf: marker.unicodeScalars)
            outputCount += marker.unicodeScalars.count
        }
        while index < scalars.count {
            map[index] = outputCount
            output.append(scalars[index])
            outputCount += 1
            index += 1
        }
        map[scalars.count] = outputCount
        return (output, map)
    }
}
