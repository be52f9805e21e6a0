import Foundation

// MARK: - Secrets in URLs

/// The one list of what counts as a secret in a URL, and the functions that hide it.
///
/// Storage puts only redacted URLs into errors; the CLI redacts every URL it displays (a job's source
/// and destination, a result's download URL, an upload session URI, a database URL). The worker
/// itself needs the real URL, so the event log keeps it: redaction is for display only.
public enum SecretRedaction {
    /// What replaces a secret value.
    public static let marker = "REDACTED"

    /// Query and fragment parameter names (compared case-insensitively, after percent-decoding) whose
    /// values are credentials or capabilities.
    public static let secretNames: Set<String> = [
        "token", "access_token", "refresh_token", "id_token", "auth", "authorization", "bearer", "jwt",
        "key", "apikey", "api_key", "api-key", "access_key", "accesskey", "secret", "secret_key", "client_secret",
        "password", "passwd", "pwd", "pass",
        "sig", "signature", "x-goog-signature", "x-goog-credential", "googleaccessid",
        "upload_id", "uploadid", "code", "session", "sessionid", "session_id", "credential", "credentials",
        "jsessionid", "phpsessid", "sid",
        // Signed URLs of CDNs and clouds: Akamai's `hdnts` (its `__token__` names a token already),
        // CloudFront's `Policy` beside its `Signature`, an Azure SAS passed whole (`sas`; its own `sig` is
        // above), the `auth_key` and `hmac` of other CDNs, client keys and single-use tickets.
        "auth_key", "hmac", "hdnts", "policy", "client_key", "sas", "ticket",
    ]

    /// Name fragments that make any parameter secret (`auth_token`, `X-Upload-Token`, `db_password`, …).
    /// (`cookie`: a `Cookie:` header or a `cookie=` parameter carries a session.)
    public static let secretNameParts: [String] = ["token", "secret", "password", "passwd", "signature", "credential", "apikey", "api_key", "api-key",
                                                   "private_key", "cookie"]

    /// Name prefixes whose every parameter is treated as secret (the AWS SigV4 family: `X-Amz-*`).
    public static let secretNamePrefixes: [String] = ["x-amz-"]

    /// A URL with credentials as advice writes it, `scheme://<user>:<password>@<host>:<port>`: in angle
    /// brackets, which no URL holds raw, so the scrubbers (`redactURLs`, `redactURLLike`) end the URL
    /// before its `<password>` and leave the placeholder as written. Written `USER:PASSWORD@HOST:PORT`,
    /// it was a URL to them, printed `http://USER:REDACTED@HOST:PORT` — advice that hid what to write.
    public static func credentialsPlaceholder(scheme: String) -> String {
        "\(scheme)://<user>:<password>@<host>:<port>"
    }

    /// Whether a custom metadata key names a credential, whose value is shown `REDACTED`: Firebase's
    /// `firebaseStorageDownloadTokens` (capabilities to fetch the object) and keys named plainly as a
    /// password, secret, key or token. Narrower than `isSecretName`, which is for URL parameters: an
    /// object's metadata is the user's own description of it, and `tokens_used`, `policy`, `code` or
    /// `session` there are ordinary words (they read `REDACTED`).
    public static func isSecretMetadataKey(_ key: String) -> Bool {
        let name = key.lowercased()
        if name == "firebasestoragedownloadtokens" { return true }
        if ["token", "access_token", "refresh_token", "id_token", "auth_token", "bearer", "authorization", "jwt"].contains(name) { return true }
        return ["password", "passwd", "secret", "private_key", "privatekey", "api_key", "apikey", "api-key", "credential"]
            .contains { name.contains($0) }
    }

    /// Whether a query or fragment parameter with this (raw, possibly percent-encoded) name holds a secret.
    public static func isSecretName(_ rawName: Substring) -> Bool {
        let name = (percentDecoded(rawName) ?? String(rawName)).lowercased()
        if secretNames.contains(name) { return true }
        if secretNamePrefixes.contains(where: { name.hasPrefix($0) }) { return true }
        return secretNameParts.contains { name.contains($0) }
    }

    /// Whether a secret parameter's value is a credential by its name, not only by its family
    /// (`secretNamePrefixes`): `X-Amz-Signature`, `-Credential`, `-Security-Token` are; `X-Amz-Date` is not.
    static func isCredentialName(_ rawName: Substring) -> Bool {
        let name = (percentDecoded(rawName) ?? String(rawName)).lowercased()
        return secretNames.contains(name) || secretNameParts.contains { name.contains($0) }
    }

    /// `url` with the password of its userinfo (`user:REDACTED@`, or `REDACTED@` when the userinfo is a
    /// bare token) and the values of secret query and fragment parameters replaced by `REDACTED`. A
    /// PostgreSQL URL's bare userinfo is its user name (its password, if any, follows a colon): kept, as
    /// the database URL's own redaction keeps it, so one database is not named two ways.
    ///
    /// Text that is not a URL is returned unchanged.
    public static func redactURL(_ url: String) -> String {
        // Without `@`, `?`, `#` or `;` there is nothing to replace, and `redact` gives the text back byte
        // for byte: a byte scan says so at a fraction of its cost (its Character walks and Foundation
        // searches were ~130,000 instructions for a 50-byte URL, paid by every download's answer check).
        guard mayHoldSecret(url) else { return url }
        var hidden: [Substring] = []
        return redact(url, hidden: &hidden)
    }

    /// A URL, or a value read as one whose `http://` is left out (`user:password@proxy:3128` in a proxy
    /// variable, `host:port` in `STORAGE_EMULATOR_HOST`), redacted as `redactURL` redacts it; written
    /// back without the scheme it did not have.
    ///
    /// An endpoint has no path worth keeping, so its userinfo runs to its last `@` whatever it holds
    /// (`http://u:a/b@c@proxy:3128`).
    public static func redactEndpoint(_ value: String) -> String {
        guard mayHoldSecret(value) else { return value }
        var hidden: [Substring] = []
        guard !value.contains("://") else { return redact(value, hidden: &hidden, endpoint: true) }
        return String(redact("http://" + value, hidden: &hidden, endpoint: true).dropFirst("http://".count))
    }

    /// Text that may hold URLs, or values read as URLs without their scheme (a setting's path
    /// `/b?token=…`, a proxy's `user:password@host`), with each one's secrets redacted: every URL as
    /// `redactURLs` does, and each word (between spaces, quotes and brackets trimmed) that is no URL as
    /// `redactURL` reads it after a scheme — a path's query and path parameters, a host's userinfo
    /// password. For what shows a value jobctl does not read as a URL (a `config` row, a message quoting
    /// what it refused): such a value, written with a secret, printed it whole.
    public static func redactURLLike(_ text: String) -> String {
        let urls = redactURLs(in: text)
        guard mayHoldSecret(urls) else { return urls }
        // Word by word over the bytes (a message may quote megabytes of a value): only a word holding one
        // of `mayHoldSecret`'s bytes is looked at as a URL.
        var output = ""
        var last = urls.startIndex
        var wordStart = urls.startIndex
        var flagged = false
        var index = urls.utf8.startIndex
        while true {
            let atEnd = index == urls.utf8.endIndex
            let byte = atEnd ? UInt8(ascii: " ") : urls.utf8[index]
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                if flagged {
                    let word = urls[wordStart..<index]
                    let shown = redactWord(word)
                    if shown != word {
                        output += urls[last..<wordStart]
                        output += shown
                        last = index
                    }
                }
                flagged = false
                if !atEnd { wordStart = urls.utf8.index(after: index) }
            case UInt8(ascii: "@"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: ";"):
                flagged = true
            default:
                break
            }
            if atEnd { break }
            index = urls.utf8.index(after: index)
        }
        return last == urls.startIndex ? urls : output + urls[last...]
    }

    /// One word of `redactURLLike`: redacted as a URL after `file://` (a path) or `http://` (anything
    /// else) when it is none already, its enclosing quotes and brackets kept as they are.
    private static func redactWord(_ word: Substring) -> String {
        guard mayHoldSecret(String(word)), !word.contains("://") else { return String(word) }
        let opening: Set<Character> = ["'", "\"", "(", "[", "<", "`"]
        let closing: Set<Character> = ["'", "\"", ")", "]", ">", "`", ",", "."]
        var core = word
        while let first = core.first, opening.contains(first) { core = core.dropFirst() }
        while let last = core.last, closing.contains(last) { core = core.dropLast() }
        // A bare `name@` is no password outside a URL (`'@'` in a message, an e-mail address, an
        // `@scope`): kept, as only `user:password@` is read as credentials here.
        let authorityEnd = core.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? core.endIndex
        if let at = core[..<authorityEnd].lastIndex(of: "@"), !core[..<at].contains(":") {
            core = core[core.index(after: at)...]
        }
        guard !core.isEmpty else { return String(word) }
        let scheme = core.hasPrefix("/") ? "file://" : "http://"
        var hidden: [Substring] = []
        let redacted = redact(scheme + core, hidden: &hidden)
        guard !hidden.isEmpty, redacted.hasPrefix(scheme) else { return String(word) }
        return String(word[..<core.startIndex]) + redacted.dropFirst(scheme.count) + word[core.endIndex...]
    }

    /// The secret values `redactEndpoint` hides in `value`, as `secretValues(in:)` gives them.
    public static func endpointSecretValues(in value: String) -> [String] {
        var values: [Substring] = []
        _ = redact(value.contains("://") ? value : "http://" + value, hidden: &values, endpoint: true)
        return shownForms(of: values)
    }

    /// `redactURL`, adding each value it replaced to `hidden`. An `endpoint`'s userinfo runs to its
    /// last `@` (see `redactEndpoint`).
    private static func redact(_ url: String, hidden: inout [Substring], endpoint: Bool = false, depth: Int = 0) -> String {
        guard let schemeEnd = url.range(of: "://") else { return url }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        let bareUserinfoIsAName = scheme == "postgres" || scheme == "postgresql"
        var output = String(url[..<schemeEnd.upperBound])
        var rest = url[schemeEnd.upperBound...]
        var authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        if endpoint, let lastAt = rest.lastIndex(of: "@"), lastAt >= authorityEnd {
            authorityEnd = rest[lastAt...].firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        } else if let end = passwordWithDelimitersEnd(rest, authorityEnd: authorityEnd) {
            authorityEnd = end
        }
        let authority = rest[..<authorityEnd]
        if let at = authority.lastIndex(of: "@") {
            let userinfo = authority[..<at]
            if let colon = userinfo.firstIndex(of: ":") {
                output += userinfo[..<colon] + ":" + marker + "@"
                hidden.append(userinfo[userinfo.index(after: colon)...])
            } else if bareUserinfoIsAName {
                output += userinfo + "@"
            } else {
                output += marker + "@"
                hidden.append(userinfo)
            }
            output += authority[authority.index(after: at)...]
        } else {
            output += authority
        }
        rest = rest[authorityEnd...]
        var fragment: Substring?
        if let hash = rest.firstIndex(of: "#") {
            fragment = rest[rest.index(after: hash)...]
            rest = rest[..<hash]
        }
        if let mark = rest.firstIndex(of: "?") {
            output += redactPathParameters(rest[..<mark], hidden: &hidden, depth: depth) + "?"
                + redactParameters(rest[rest.index(after: mark)...], hidden: &hidden, depth: depth)
        } else {
            output += redactPathParameters(rest, hidden: &hidden, depth: depth)
        }
        if let fragment {
            output += "#" + redactParameters(fragment, hidden: &hidden, depth: depth)
        }
        return output
    }

    /// The secret values `redactURL` hides in `url`: the password of its userinfo (or a bare token
    /// userinfo that is not a PostgreSQL user name) and the values of secret query, fragment and path
    /// parameters, each as written and percent-decoded. For `scrub`: a server's or libcurl's text may
    /// quote them without the URL around them (a request target `/a?sig=…`, a header).
    public static func secretValues(in url: String) -> [String] {
        var values: [Substring] = []
        _ = redact(url, hidden: &values)
        return shownForms(of: values)
    }

    /// Each hidden value as written and percent-decoded, those already masked left out.
    private static func shownForms(of values: [Substring]) -> [String] {
        var all: [String] = []
        for value in values where !isMasked(value) {
            all.append(String(value))
            if let decoded = percentDecoded(value), decoded != String(value) { all.append(decoded) }
        }
        return all
    }

    /// `text` with every occurrence of each of `secrets` replaced by `REDACTED`, longest first; a
    /// secret shorter than 4 characters is left alone (replacing it would mangle ordinary words). For
    /// what a server, libcurl or libpq says back, which may quote a secret the request carried.
    ///
    /// An occurrence may have any of its bytes percent-encoded (`%33` for `3`, `%20` or `+` for a space):
    /// a server that re-encodes what it quotes (a JSON message with `Bearer%20AT%73…`) would otherwise pass
    /// the secret through, as exact comparison never matched it.
    ///
    /// `cutShort` says `text` was cut from a longer one (an answer read up to a limit): a secret whose
    /// first bytes (4 or more) end it is replaced too, as the rest of it was never read to match.
    public static func scrub(_ text: String, secrets: some Sequence<String>, cutShort: Bool = false) -> String {
        let long = Set(secrets.filter { $0.utf8.count >= 4 && $0 != marker }).sorted { $0.utf8.count > $1.utf8.count }
        guard !long.isEmpty, !text.isEmpty else { return text }
        var bytes = Array(text.utf8)
        var changed = false
        for secret in long {
            let pattern = Array(secret.utf8)
            var output: [UInt8] = []
            var index = 0
            var start = 0
            while index < bytes.count {
                switch SecretMatch.match(pattern, in: bytes, at: index) {
                case .whole(let end):
                    output += bytes[start..<index]
                    output += marker.utf8
                    index = end
                    start = end
                case .cutShort(let matched) where cutShort && matched >= 4:
                    output += bytes[start..<index]
                    output += marker.utf8
                    index = bytes.count
                    start = bytes.count
                default:
                    index += 1
                }
            }
            guard start > 0 else { continue }
            output += bytes[start...]
            bytes = output
            changed = true
        }
        return changed ? String(decoding: bytes, as: UTF8.self) : text
    }

    /// `text` with every URL in it (anything from `scheme://` to the next space, quote or angle
    /// bracket) passed through `redactURL`. For messages, causes and reasons that may quote a URL.
    public static func redactURLs(in text: String) -> String {
        // Every worker log line passes through here: a byte scan keeps Foundation's string search off
        // the common path (text without a URL). It finds whatever that search finds, and more only in
        // odd Unicode (a combining mark on the `:`), where the search below then finds nothing.
        guard mayHoldSchemeSeparator(text), mayHoldSecret(text) else { return text }
        // Line by line when long: each search for the next URL ran to the end of the text, so the
        // 5,000 errors of 5,000 duplicate keys (15,000 URLs in 1 MB) took 37 s to print, 10,000 six
        // minutes. A URL ends at a line break, so the lines give the same text.
        if text.utf8.count > 4_096, text.utf8.contains(UInt8(ascii: "\n")) {
            return text.split(separator: "\n", omittingEmptySubsequences: false).map { redactURLs(in: String($0)) }.joined(separator: "\n")
        }
        return redactURLsScanning(in: text)
    }

    /// `redactURLs` without the byte checks in front: every URL found and passed through `redactURL`.
    /// Internal for the tests that prove the checks skip only texts this returns unchanged.
    static func redactURLsScanning(in text: String) -> String {
        var output = ""
        var index = text.startIndex
        let stops: Set<Character> = [" ", "\t", "\n", "\r", "\"", "'", "<", ">", "`", "\\"]
        // In the query and the fragment an apostrophe is part of a value (`?a='&token=…`, a sub-delimiter
        // RFC 3986 allows there), so no parameter after one goes unseen. A double quote (never raw in a
        // URL) still ends it: JSON strings close with one.
        let queryStops = stops.subtracting(["'"])
        while index < text.endIndex {
            guard let separator = nextSchemeSeparator(in: text, from: index) else {
                output += text[index...]
                break
            }
            // Back up over the scheme's characters (letters, digits, + - .).
            var start = separator.lowerBound
            while start > index {
                let previous = text.index(before: start)
                let character = text[previous]
                guard character.isASCII, character.isLetter || character.isNumber || "+-.".contains(character) else { break }
                start = previous
            }
            output += text[index..<start]
            let escaped = text[separator].hasPrefix(":\\/\\/")
            var end = separator.upperBound
            var inQuery = false
            while end < text.endIndex, !(inQuery ? queryStops : stops).contains(text[end])
                    || (escaped && text[end] == "\\" && text[text.index(after: end)...].hasPrefix("/")) {
                if text[end] == "?" || text[end] == "#" { inQuery = true }
                end = text.index(after: end)
            }
            // Sentence punctuation after a URL is not part of it.
            while end > separator.upperBound, ".,;:)]}!".contains(text[text.index(before: end)]) {
                end = text.index(before: end)
            }
            // A URL quoted with apostrophes whose query ran on to the closing one: that one is the
            // quote's, not the last value's (a value that truly ends in one shows only that apostrophe).
            if inQuery, start > index, text[text.index(before: start)] == "'",
               end > separator.upperBound, text[text.index(before: end)] == "'" {
                end = text.index(before: end)
            }
            let candidate = String(text[start..<end])
            if escaped {
                let plain = candidate.replacingOccurrences(of: "\\/", with: "/")
                output += redactURL(plain).replacingOccurrences(of: "/", with: "\\/")
            } else {
                output += redactURL(candidate)
            }
            index = end
        }
        return output
    }

    // MARK: - Helpers

    /// Where the authority of `rest` (a URL after its `://`) ends when its password holds a `/`, `?` or
    /// `#` written raw (`http://u:pa/ss@proxy:3128`, as people paste proxy and database URLs): the
    /// index after the host and port that follow its `@`; nil when the URL reads as one without such a
    /// password. RFC 3986 ends the authority at the first of those three, which would leave the password
    /// in the path, shown. Read as a password when what precedes the first delimiter is `name:value`
    /// with a value that is not a port number (and not an IPv6 literal's colons), and an `@` follows the
    /// delimiter before the next `/`; the last `@` before that `/` ends the userinfo (a password may
    /// hold `@` too). A path with an `@` after a real port (`https://h:8443/@scope/p`) is left alone;
    /// one that reads either way is redacted rather than shown.
    private static func passwordWithDelimitersEnd(_ rest: Substring, authorityEnd: Substring.Index) -> Substring.Index? {
        guard authorityEnd < rest.endIndex, !rest.hasPrefix("["),
              let colon = rest[..<authorityEnd].firstIndex(of: ":"), !rest[..<authorityEnd].contains("@") else { return nil }
        let afterColon = rest[rest.index(after: colon)..<authorityEnd]
        guard !afterColon.allSatisfy({ $0.isASCII && $0.isNumber }), let firstAt = rest[authorityEnd...].firstIndex(of: "@") else { return nil }
        let hostStart = rest.index(after: firstAt)
        let hostEnd = rest[hostStart...].firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        // The last `@` before the host's end; the host and port after it.
        let lastAt = rest[..<hostEnd].lastIndex(of: "@") ?? firstAt
        return rest[rest.index(after: lastAt)...].firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
    }

    /// Whether a URL in `text` may have anything `redactURL` replaces: a userinfo (`@`), a query (`?`),
    /// a fragment (`#`) or path parameters (`;`); or a backslash (a JSON-escaped separator `:\/\/`, whose URL is re-escaped
    /// on the way out). Without any of these bytes `redactURL` returns each URL as it is (it keeps the
    /// scheme, the authority and the path byte for byte), so `redactURLs` returns `text` itself — the
    /// worker's `claimed` line names a plain `file://` or `gs://` source for every job.
    public static func mayHoldSecret(_ text: String) -> Bool {
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "@"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: ";"), UInt8(ascii: "\\"): return true
            default: continue
            }
        }
        return false
    }

    /// Whether the UTF-8 bytes of `text` hold `://` or `:\/\/` (a JSON-escaped URL).
    static func mayHoldSchemeSeparator(_ text: String) -> Bool {
        var utf8 = text.utf8[...]
        while let colon = utf8.firstIndex(of: UInt8(ascii: ":")) {
            let rest = utf8[utf8.index(after: colon)...]
            if rest.starts(with: "//".utf8) || rest.starts(with: "\\/\\/".utf8) { return true }
            utf8 = rest
        }
        return false
    }

    private static func nextSchemeSeparator(in text: String, from index: String.Index) -> Range<String.Index>? {
        let plain = text.range(of: "://", range: index..<text.endIndex)
        let escaped = text.range(of: ":\\/\\/", range: index..<text.endIndex)
        switch (plain, escaped) {
        case let (plain?, escaped?): return plain.lowerBound < escaped.lowerBound ? plain : escaped
        case let (plain?, nil): return plain
        case let (nil, escaped?): return escaped
        case (nil, nil): return nil
        }
    }

    /// `/files;jsessionid=x/a.bin;token=y` → `/files;jsessionid=REDACTED/a.bin;token=REDACTED`: the
    /// parameters a path segment carries after its `;` (RFC 3986 3.3), where servers put session ids.
    private static func redactPathParameters(_ path: Substring, hidden: inout [Substring], depth: Int) -> String {
        guard path.contains(";") else { return String(path) }
        var output = ""
        var segmentStart = path.startIndex
        while true {
            let end = path[segmentStart...].firstIndex(of: "/") ?? path.endIndex
            let segment = path[segmentStart..<end]
            if let semicolon = segment.firstIndex(of: ";") {
                output += segment[...semicolon] + redactParameters(segment[segment.index(after: semicolon)...], hidden: &hidden, depth: depth)
            } else {
                output += segment
            }
            guard end < path.endIndex else { break }
            output += "/"
            segmentStart = path.index(after: end)
        }
        return output
    }

    /// `a=1&token=x;b` → `a=1&token=REDACTED;b` (both `&` and `;` separate parameters).
    private static func redactParameters(_ parameters: Substring, hidden: inout [Substring], depth: Int) -> String {
        var output = ""
        var current = parameters.startIndex
        while current <= parameters.endIndex {
            let end = parameters[current...].firstIndex(where: { $0 == "&" || $0 == ";" }) ?? parameters.endIndex
            let part = parameters[current..<end]
            if let equals = part.firstIndex(of: "="), isSecretName(part[..<equals]),
               !isMasked(part[part.index(after: equals)...]) {
                output += part[...equals] + marker
                // Hidden in the URL shown, but scrubbed from what a server says back only when it is a
                // credential: a SigV4 URL's `X-Amz-Algorithm`, `-Expires`, `-SignedHeaders` (`host`, `3600`)
                // are hidden with the rest of their family, and scrubbing them turned a stored
                // `max-age=3600` into `max-age=REDACTED` and jobctl's own word "host" into "REDACTED".
                if isCredentialName(part[..<equals]) { hidden.append(part[part.index(after: equals)...]) }
            } else if let equals = part.firstIndex(of: "="), let nested = redactNested(part[part.index(after: equals)...],
                                                                                        hidden: &hidden, depth: depth) {
                output += part[...equals] + nested
            } else {
                output += part
            }
            guard end < parameters.endIndex else { break }
            output.append(parameters[end])
            current = parameters.index(after: end)
        }
        return output
    }

    /// A parameter's value that is itself a URL (a redirect target, `next=http://u:pw@h/x?token=…`),
    /// redacted as one; nil when it is none or holds nothing to hide. Written raw, it is redacted in place
    /// (the outer URL's `&` already ended it); percent-encoded (`next=http%3A%2F%2F…`), a value whose
    /// decoding holds a secret is hidden whole. Past three URLs deep a value holding one is hidden whole,
    /// so a crafted chain costs no more than that.
    private static func redactNested(_ value: Substring, hidden: inout [Substring], depth: Int) -> String? {
        let raw = value.contains("://")
        guard raw || value.range(of: "%3A%2F%2F", options: .caseInsensitive) != nil else { return nil }
        if depth >= 3 {
            hidden.append(value)
            return marker
        }
        if raw {
            var found: [Substring] = []
            let redacted = redact(String(value), hidden: &found, depth: depth + 1)
            guard !found.isEmpty else { return nil }
            hidden += found
            return redacted
        }
        guard let decoded = percentDecoded(value), decoded.contains("://") else { return nil }
        var found: [Substring] = []
        _ = redact(decoded, hidden: &found, depth: depth + 1)
        guard !found.isEmpty else { return nil }
        hidden.append(value)
        hidden += found
        return marker
    }

    /// A value with nothing left to hide: empty, already `REDACTED`, or masked with `*` (as a caller
    /// that must keep a line's columns, such as a manifest error's caret line, may mask it).
    private static func isMasked(_ value: Substring) -> Bool {
        value.isEmpty || value == marker || value.allSatisfy { $0 == "*" }
    }

    private static func percentDecoded(_ text: Substring) -> String? {
        guard text.contains("%") || text.contains("+") else { return String(text) }
        return String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}

/// `url` with secrets replaced by `REDACTED` (see `SecretRedaction.redactURL`). Every URL placed in a
/// `StorageError` and every URL the CLI displays goes through this one function.
public func redactedURL(_ url: String) -> String {
    SecretRedaction.redactURL(url)
}

/// Matching a secret's bytes in a text that may percent-encode any of them (`SecretRedaction.scrub`).
enum SecretMatch: Equatable {
    /// The secret ends at this index of the text.
    case whole(end: Int)
    /// The text ended after this many of the secret's bytes, all matching.
    case cutShort(matched: Int)
    case none

    /// Whether `pattern` starts at `start` of `text`, each of its bytes written as it is or as `%XX`
    /// (either case), a space also as `+`.
    static func match(_ pattern: [UInt8], in text: [UInt8], at start: Int) -> SecretMatch {
        var position = start
        for (matched, wanted) in pattern.enumerated() {
            guard position < text.count else { return .cutShort(matched: matched) }
            let byte = text[position]
            if byte == wanted {
                position += 1
            } else if byte == UInt8(ascii: "+"), wanted == UInt8(ascii: " ") {
                position += 1
            } else if byte == UInt8(ascii: "%") {
                guard position + 2 < text.count else {
                    // `%` or `%X` at the very end: the encoded byte was cut, which may be this one.
                    return position + 1 < text.count && HexDigit.value(text[position + 1]) == nil ? .none : .cutShort(matched: matched)
                }
                guard let high = HexDigit.value(text[position + 1]), let low = HexDigit.value(text[position + 2]),
                      high << 4 | low == wanted else { return .none }
                position += 3
            } else {
                return .none
            }
        }
        return .whole(end: position)
    }
}

// MARK: - Credentials in a server's prose

extension SecretRedaction {
    /// The authentication schemes whose next word is a credential (`Bearer ya29…`, `Basic dXNlcj…`).
    static let credentialSchemes: Set<String> = ["bearer", "basic", "negotiate"]

    /// Header names whose whole value, to the end of its line, is a credential or carries one.
    static let credentialHeaders: Set<String> = ["authorization", "proxy-authorization", "cookie", "set-cookie"]

    /// Names (lower-cased) whose value is a credential where a server writes `NAME: value`, `NAME=value`
    /// or a JSON `"NAME": "value"`.
    static let credentialNames: Set<String> = [
        "password", "passwd", "pwd", "secret", "client_secret", "token", "access_token", "refresh_token", "id_token",
        "auth_token", "session_token", "api_key", "apikey", "api-key", "x-api-key", "private_key", "privatekey",
        "sessionid", "session_id", "jsessionid", "sig", "signature", "x-goog-signature", "x-amz-signature",
        "x-amz-security-token", "credential", "x-goog-credential",
    ]

    /// Whether `name` (as written) names a credential: one of `credentialNames`, or a name ending in one
    /// of them after `_`, `-` or `.` (`db_password`, `X-Upload-Token`). Whole words only: `max_tokens`,
    /// `credentials` or `SignatureDoesNotMatch` are a server's ordinary words.
    static func isCredentialName(word name: String) -> Bool {
        let name = name.lowercased()
        if credentialNames.contains(name) || credentialHeaders.contains(name) { return true }
        guard let cut = name.lastIndex(where: { $0 == "_" || $0 == "-" || $0 == "." }) else { return false }
        let last = name[name.index(after: cut)...]
        return ["password", "passwd", "secret", "token", "apikey", "signature", "credential"].contains(last)
            || name.hasSuffix("api_key") || name.hasSuffix("api-key") || name.hasSuffix("private_key")
    }

    /// Whether a bare word (no quotes around it) looks like a credential rather than prose: at least 8
    /// characters of a token's alphabet (letters, digits, `- . _ ~ + / =`), with a digit, a symbol of
    /// that alphabet, or a capital past its first character (`ya29.a0Af…`, `dXNlcjpwYXNz`, a JWT) — not
    /// `expired`, `authentication` or `Authentication`.
    static func looksLikeCredential(_ word: ArraySlice<UInt8>) -> Bool {
        guard word.count >= 8 else { return false }
        var mixed = false
        for (offset, byte) in word.enumerated() {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"): continue
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): if offset > 0 { mixed = true }
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"),
                 UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="): mixed = true
            default: return false
            }
        }
        return mixed
    }

    /// A server's text (an error's message, the body it answered with) with the credentials it quotes
    /// replaced by `REDACTED`. The request's own secrets are scrubbed wherever they appear (`scrub`);
    /// these are the ones a server sends back that jobctl never sent — a proxy or gateway quoting another
    /// client's headers, a service echoing its own keys — stored in the log and shown by every command
    /// like the rest of the message. Replaced:
    /// - a credential header's value to the end of its line (`Authorization: Bearer …`, `Cookie: a=1;
    ///   sid=…`), its scheme's word kept;
    /// - a quoted value after a credential's name and `:` or `=` (`"access_token" : "…"`, `'password':
    ///   '…'`, `\"token\": \"…\"`), to its closing quote, escapes heeded;
    /// - a bare value after a credential's name and `=` (`password=…`, a word), or after `:` when it looks
    ///   like a credential (`token: ya29…`, not `Invalid token: expired`);
    /// - the word after `Bearer`, `Basic` or `Negotiate` when it looks like a credential (`Bearer ya29…`,
    ///   not `Bearer token expired` or `Basic authentication is disabled`).
    /// A heuristic for text jobctl did not write: a password of several words or one split over lines
    /// is kept in part.
    public static func redactCredentialWords(in text: String) -> String {
        let bytes = Array(text.utf8)
        guard bytes.contains(where: { $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: " ") }) else { return text }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        var changed = false
        func skippingSpaces(_ start: Int) -> Int {
            var at = start
            while at < bytes.count, bytes[at] == UInt8(ascii: " ") || bytes[at] == UInt8(ascii: "\t") { at += 1 }
            return at
        }
        func wordEnd(_ start: Int) -> Int {
            var end = start
            while end < bytes.count, !endsCredential(bytes[end]) { end += 1 }
            return end
        }
        /// Replaces `bytes[start..<end]` (after copying what lies between `index` and `start`).
        func replace(_ start: Int, _ end: Int) {
            output += bytes[index..<start]
            output += marker.utf8
            changed = true
            index = end
        }
        while index < bytes.count {
            guard isNameByte(bytes[index]), index == 0 || !isNameByte(bytes[index - 1]) else {
                output.append(bytes[index])
                index += 1
                continue
            }
            var nameEnd = index
            while nameEnd < bytes.count, isNameByte(bytes[nameEnd]) { nameEnd += 1 }
            // No scheme or credential name is as short as two bytes or longer than 64: such a word is
            // copied without making a string of it (a body of megabytes of words is scanned, not parsed).
            guard (3...64).contains(nameEnd - index) else {
                output += bytes[index..<nameEnd]
                index = nameEnd
                continue
            }
            let word = String(decoding: bytes[index..<nameEnd], as: UTF8.self).lowercased()
            if credentialSchemes.contains(word) {
                // `Bearer TOKEN`: the scheme's word is kept; a credential after it goes.
                let start = skippingSpaces(nameEnd)
                let end = wordEnd(start)
                output += bytes[index..<nameEnd]
                index = nameEnd
                if start > nameEnd, looksLikeCredential(bytes[start..<end]) { replace(start, end) }
                continue
            }
            guard isCredentialName(word: word) else {
                output += bytes[index..<nameEnd]
                index = nameEnd
                continue
            }
            // The name's closing quote (`"`, `'`, or a JSON-escaped `\"`), spaces, `:` or `=`, spaces.
            var at = nameEnd
            if at + 1 < bytes.count, bytes[at] == UInt8(ascii: "\\"), bytes[at + 1] == UInt8(ascii: "\"") { at += 2 }
            else if at < bytes.count, bytes[at] == UInt8(ascii: "\"") || bytes[at] == UInt8(ascii: "'") { at += 1 }
            at = skippingSpaces(at)
            guard at < bytes.count, bytes[at] == UInt8(ascii: ":") || bytes[at] == UInt8(ascii: "=") else {
                output += bytes[index..<nameEnd]
                index = nameEnd
                continue
            }
            let separator = bytes[at]
            let start = skippingSpaces(at + 1)
            output += bytes[index..<start]
            index = start
            guard start < bytes.count else { continue }
            if credentialHeaders.contains(word), separator == UInt8(ascii: ":") {
                // A header's value, to the end of its line; an authentication scheme's word stays readable.
                var from = start
                let first = wordEnd(start)
                if credentialSchemes.contains(String(decoding: bytes[start..<first], as: UTF8.self).lowercased()) {
                    from = skippingSpaces(first)
                    output += bytes[start..<from]
                    index = from
                }
                var end = from
                while end < bytes.count, bytes[end] != UInt8(ascii: "\n"), bytes[end] != UInt8(ascii: "\r") { end += 1 }
                if end > from { replace(from, end) }
                continue
            }
            if let (open, close) = quote(at: start, in: bytes) {
                // A quoted value, to the quote that closes it (one a backslash escapes does not).
                var end = start + open
                while end < bytes.count, !(closes(at: end, close, in: bytes)) {
                    end += bytes[end] == UInt8(ascii: "\\") && close.count == 1 ? 2 : 1
                }
                end = min(end, bytes.count)
                output += bytes[start..<(start + open)]
                index = start + open
                if end > index { replace(index, end) }
                continue
            }
            let end = wordEnd(start)
            if end > start, separator == UInt8(ascii: "=") || looksLikeCredential(bytes[start..<end]) { replace(start, end) }
        }
        return changed ? String(decoding: output, as: UTF8.self) : text
    }

    /// The quote that opens a value at `start` (`"`, `'` or a JSON-escaped `\"`): its length and the
    /// bytes that close it; nil when the value is bare.
    private static func quote(at start: Int, in bytes: [UInt8]) -> (open: Int, close: [UInt8])? {
        if bytes[start] == UInt8(ascii: "\"") || bytes[start] == UInt8(ascii: "'") { return (1, [bytes[start]]) }
        if start + 1 < bytes.count, bytes[start] == UInt8(ascii: "\\"), bytes[start + 1] == UInt8(ascii: "\"") {
            return (2, [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
        }
        return nil
    }

    /// Whether `close` starts at `at`.
    private static func closes(at: Int, _ close: [UInt8], in bytes: [UInt8]) -> Bool {
        guard at + close.count <= bytes.count else { return false }
        return bytes[at..<(at + close.count)].elementsEqual(close)
    }

    /// Letters, digits and `_ - .`: a name's bytes (a header's, a parameter's, a JSON key's).
    private static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."): true
        default: false
        }
    }

    /// What ends a bare value in prose.
    private static func endsCredential(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\""), UInt8(ascii: "'"),
             UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "&"), UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: ")"),
             UInt8(ascii: "]"), UInt8(ascii: "}"), UInt8(ascii: "\\"): true
        default: false
        }
    }
}
