import JobModel

/// Checks on text that ends up in an HTTP header, so no value from the environment, a token command or
/// a manifest can end a header line early and add headers of its own (CR LF injection).
///
/// Messages never quote the value (it may be a token); they name where it came from and the position and
/// code point of the first bad character, which is enough to find it.
enum HeaderValues {
    /// The first character that may not appear in a header value — a control character other than
    /// horizontal tab, or DEL (RFC 9110 §5.5) — as its 1-based position and a readable name.
    static func firstControlCharacter(in value: String) -> (position: Int, name: String)? {
        for (index, scalar) in value.unicodeScalars.enumerated() where isControl(scalar) && scalar != "\t" {
            return (index + 1, describe(scalar))
        }
        return nil
    }

    /// Throws `invalidArgument` when `value` (named by `what`, e.g. "the content type") holds a control
    /// character; `remedy` says where to fix it.
    static func check(_ value: String, what: String, remedy: String) throws(StorageError) {
        guard let bad = firstControlCharacter(in: value) else { return }
        throw StorageError(.invalidArgument,
                           "\(what) holds a control character (\(bad.name) at character \(bad.position)), which would "
                               + "break the request's headers; \(remedy)")
    }

    /// The longest value a server sent that is sent back to it (an ETag in `If-Match`), in bytes: the
    /// header line must fit the 8 KiB common servers take (nginx's `large_client_header_buffers`, Apache's
    /// `LimitRequestFieldSize`); a longer one is refused (400, 431) instead of compared.
    static let longestSentBack = 8_000

    /// Why `value`, a header value a server sent, cannot be sent back to it in a request's header — it
    /// holds a control character, or is longer than `longestSentBack` — as words to follow "the value";
    /// nil when it can. The value itself is not quoted.
    static func whyNotSendableBack(_ value: String) -> String? {
        if let bad = firstControlCharacter(in: value) {
            return "holds a control character (\(bad.name) at character \(bad.position))"
        }
        if value.utf8.count > longestSentBack {
            return "is \(value.utf8.count) bytes long (more than the \(longestSentBack) a header may carry)"
        }
        return nil
    }

    /// Whether `line` is a header line curl may send as it is: `Name: value` with a token name and a value
    /// free of control characters (horizontal tab allowed).
    static func isSafeLine(_ line: String) -> Bool {
        guard let colon = line.firstIndex(of: ":") else { return false }
        let name = line[..<colon]
        return !name.isEmpty && name.unicodeScalars.allSatisfy(isTokenCharacter)
            && firstControlCharacter(in: String(line[line.index(after: colon)...])) == nil
    }

    /// A header line's name when it is a plain token (safe to print), else nil.
    static func printableName(of line: String) -> String? {
        guard let colon = line.firstIndex(of: ":") else { return nil }
        let name = line[..<colon]
        return !name.isEmpty && name.unicodeScalars.allSatisfy(isTokenCharacter) ? String(name) : nil
    }

    // MARK: - Characters

    /// RFC 9110 `tchar`: the characters of a header name.
    static func isTokenCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9": true
        case "!", "#", "$", "%", "&", "'", "*", "+", "-", ".", "^", "_", "`", "|", "~": true
        default: false
        }
    }

    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || scalar.value == 0x7F
    }

    /// `a carriage return (U+000D)`, `a space (U+0020)`, `U+00E9`.
    static func describe(_ scalar: Unicode.Scalar) -> String {
        let hex = String(scalar.value, radix: 16, uppercase: true)
        let code = "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        let name: String? = switch scalar {
        case "\r": "a carriage return"
        case "\n": "a line feed"
        case "\0": "a NUL byte"
        case "\t": "a tab"
        case " ": "a space"
        default: isControl(scalar) ? "a control character" : nil
        }
        return name.map { "\($0) (\(code))" } ?? code
    }
}

/// Bearer tokens as RFC 6750 §2.1 allows them (`b64token`: letters, digits, `- . _ ~ + /`, then `=`
/// padding), checked before a token goes into an `Authorization` header.
enum BearerToken {
    /// Throws `unauthenticated` (not retryable) naming `source` when `token` is empty or holds a character a
    /// bearer token cannot; the token itself is never printed.
    static func validate(_ token: String, source: String) throws(StorageError) {
        guard !token.isEmpty else {
            throw StorageError(.unauthenticated, "\(source) is empty; it must be a bearer token")
        }
        var padding = false
        for (index, scalar) in token.unicodeScalars.enumerated() {
            let allowed: Bool
            switch scalar {
            case "=":
                padding = true
                allowed = index > 0
            case "a"..."z", "A"..."Z", "0"..."9", "-", ".", "_", "~", "+", "/":
                allowed = !padding
            default:
                allowed = false
            }
            guard allowed else {
                let what = scalar == "=" || padding ? "'=' may only pad the end" : "\(HeaderValues.describe(scalar)) is not allowed"
                throw StorageError(.unauthenticated,
                                   "\(source) is not a usable bearer token: at character \(index + 1), \(what) "
                                       + "(a token holds only letters, digits and - . _ ~ + /, then = padding). "
                                       + "The value is not shown; check how it is set")
            }
        }
    }
}
