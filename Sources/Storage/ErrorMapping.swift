import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

// MARK: - HTTP statuses

/// The server's own message from a JSON error body (`{"error": {"message": …}}`) or a short text body,
/// without the secrets the request carried (a server may quote its `Authorization` header, or the signed
/// target it was asked for), with every URL in it redacted, and with the credentials it quotes that the
/// request never carried (`redactCredentialWords`): as an error's message and cause it is stored in the
/// log and shown.
///
/// A text body is cut to `shownTextLength` characters only after that: cut first, a secret running
/// across the cut was printed up to it, as only whole secrets are matched.
func serverMessage(_ response: HTTPResponse) -> String? {
    guard let raw = rawServerMessage(response) else { return nil }
    let scrubbed = SecretRedaction.redactCredentialWords(in: SecretRedaction.redactURLs(in: SecretRedaction.scrub(
        raw.text, secrets: response.requestSecrets, cutShort: raw.cutShort)))
    guard raw.isText, scrubbed.unicodeScalars.count > shownTextLength else { return scrubbed }
    return String(String.UnicodeScalarView(scrubbed.unicodeScalars.prefix(shownTextLength)))
}

/// The most of a text error body `serverMessage` quotes, in characters (Unicode scalars).
let shownTextLength = 300

/// The message of a JSON error body, or the whole text of another (as much as the engine kept of it:
/// `cutShort` when that may not be all), trimmed.
private func rawServerMessage(_ response: HTTPResponse) -> (text: String, isText: Bool, cutShort: Bool)? {
    if let json = response.json {
        if let error = json["error"] as? [String: Any], let message = error["message"] as? String, !message.isEmpty {
            return (message, false, false)
        }
        if let message = json["message"] as? String, !message.isEmpty { return (message, false, false) }
    }
    let text = String(decoding: response.body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    if text.isEmpty || text.hasPrefix("<") { return nil }
    return (text, true, response.body.count >= HTTPResponse.errorBodyLimit)
}

/// Maps a non-success response to a storage error: 400 invalidArgument, 401 unauthenticated,
/// 402 quotaExceeded, 403 unauthorized, 404 objectNotFound, 407 the proxy's, 408/429/5xx retryable (with
/// Retry-After). `environment` names the proxy a 407 came from (the process's variables).
///
/// An answer from another server than the job's URL names (a redirect followed there) says so, as a
/// transport failure there does (`curlFailure`): "the server answered 500 for http://a/x" blamed the
/// server that had only redirected. Its origin is shown, never its path or query.
///
/// `unfollowed` is said after a redirect (3xx with a `Location`) of a request that does not follow
/// redirects (an upload, a delete): "unexpected HTTP 307 for the upload to …" named neither the
/// redirect nor where it led, nor that jobctl does not follow it.
func httpError(_ response: HTTPResponse, what: String, unfollowed: String? = nil,
               environment: [String: String] = ProcessInfo.processInfo.environment) -> StorageError {
    if let unfollowed, let target = unfollowedRedirectTarget(response) {
        return StorageError(.unknown, "the server redirected \(what) to \(target) (HTTP \(response.status)); \(unfollowed)",
                            httpStatus: response.status, url: redactedURL(response.url), cause: serverMessage(response))
    }
    var error = statusError(response, what: what, environment: environment)
    if let elsewhere = response.redirectedTo.flatMap({ redirectTarget($0, from: response.url) }) {
        error.message += "; the answer came from \(elsewhere.origin), where the server had redirected the request"
    }
    return error
}

/// Where a redirect that was not followed led, as shown: its `Location` read against the request's URL,
/// redacted as every URL is, control characters escaped and cut (the header is the server's, any text
/// at all); nil when the answer is no redirect or names no place (304 Not Modified is none).
func unfollowedRedirectTarget(_ response: HTTPResponse) -> String? {
    guard (300..<400).contains(response.status), response.status != 304,
          let location = response.headers["location"]?.trimmingCharacters(in: .whitespaces), !location.isEmpty else { return nil }
    let resolved = URL(string: location, relativeTo: URL(string: response.url))?.absoluteString ?? location
    return TerminalText.clipped(TerminalText.printable(redactedURL(resolved)), limit: 300)
}

/// What an upload's or a delete's redirect advises: jobctl follows redirects for downloads (up to 5), never
/// for a request that changes the destination — a server sending it elsewhere (another host, http after
/// https) would receive the bytes or the delete without the job ever naming it.
enum UnfollowedRedirect {
    static let upload = "uploads do not follow redirects: point the destination at the final URL"
    static let delete = "deletes do not follow redirects: point the job at the final URL"
}

/// `httpError` for the answer's status alone.
private func statusError(_ response: HTTPResponse, what: String, environment: [String: String]) -> StorageError {
    let status = response.status
    let message = serverMessage(response)
    let url = redactedURL(response.url)
    let suffix = message.map { ": \($0)" } ?? ""
    switch status {
    case 400:
        return StorageError(.invalidArgument, "the server rejected the request for \(what) as invalid\(suffix)",
                            httpStatus: status, url: url, cause: message)
    case 401:
        return StorageError(.unauthenticated, "the request for \(what) was not authenticated; provide a valid access token\(suffix)",
                            httpStatus: status, url: url, cause: message)
    case 402:
        return StorageError(.quotaExceeded, "the project's quota is exhausted; upgrade the plan or wait\(suffix)",
                            httpStatus: status, url: url, cause: message)
    case 403:
        return StorageError(.unauthorized, "permission denied for \(what); check the account's access\(suffix)",
                            httpStatus: status, url: url, cause: message)
    case 404:
        return StorageError(.objectNotFound, "\(what) does not exist\(suffix)", httpStatus: status, url: url, cause: message)
    case 407:
        // Proxy Authentication Required: a plain-http proxy's answer in the server's place (an https URL's
        // proxy refuses the tunnel instead: `curlFailure`). It read "unexpected HTTP 407", naming no proxy.
        let proxy = ProxyEnvironment.describedProxy(for: response.url, environment: environment)?.text ?? "the proxy"
        return StorageError(.unknown, "\(proxy) asked for credentials (HTTP 407) for \(what): give them in the variable's URL "
                                + "(\(SecretRedaction.credentialsPlaceholder(scheme: "http"))), or check them\(suffix)",
                            httpStatus: status, url: url, cause: message)
    case 408, 429, 500...599:
        let retryAfter = response.headers["retry-after"].flatMap { retryAfterSeconds($0) }
        return StorageError(.unknown, "the server answered \(status) for \(what)\(suffix)",
                            httpStatus: status, url: url, retryable: true, retryAfter: retryAfter, cause: message)
    default:
        return StorageError(.unknown, "unexpected HTTP \(status) for \(what)\(suffix)", httpStatus: status, url: url, cause: message)
    }
}

// MARK: - Local files

/// Maps an `errno` from a local file operation: missing or forbidden paths are `pathError`, a full
/// disk is `internalError`; none is retryable (another attempt would fail the same way).
func posixError(_ code: Int32, operation: String, path: String) -> StorageError {
    let text = String(cString: strerror(code))
    switch code {
    case ENOENT:
        return StorageError(.pathError, "\(operation) '\(path)': it does not exist", cause: text)
    case EACCES, EPERM:
        return StorageError(.pathError, "\(operation) '\(path)': permission denied", cause: text)
    case EISDIR, ENOTDIR:
        return StorageError(.pathError, "\(operation) '\(path)': not a regular file path", cause: text)
    case ENOSPC, EDQUOT:
        return StorageError(.internalError, "\(operation) '\(path)': the disk is full; free space and retry the job", cause: text)
    case EFBIG:
        return StorageError(.internalError, "\(operation): \(FileSizeLimit.exceeded(path)); then retry the job", cause: text)
    default:
        return StorageError(.internalError, "\(operation) '\(path)': \(text)", cause: text)
    }
}

/// `Retry-After` as seconds from now: either delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
func retryAfterSeconds(_ value: String, now: Date = Date()) -> Double? {
    let text = value.trimmingCharacters(in: .whitespaces)
    // delta-seconds is digits (RFC 9110 §10.2.3; a fraction is taken too): not `inf`, `1e400`, `nan` or
    // `0x10`, which Double() reads — an infinite wait could not even be written into the log's event.
    // More digits than any wait are read as the longest.
    let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
    if let whole = parts.first, !whole.isEmpty, parts.allSatisfy({ $0.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } }),
       parts.count == 1 || !parts[1].isEmpty {
        return whole.utf8.count > 9 ? 999_999_999 : Double(text)
    }
    return httpDate(text).map { max(0, $0.timeIntervalSince(now)) }
}

/// An HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms), or nil.
func httpDate(_ value: String) -> Date? {
    let text = value.trimmingCharacters(in: .whitespaces)
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "GMT")
    for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
        formatter.dateFormat = format
        if let date = formatter.date(from: text) { return date }
    }
    return nil
}

/// A `Last-Modified` header as an object's `updated` time: RFC 3339 in UTC, as every other time jobctl
/// shows or stores (get-metadata over HTTP kept the header's `Mon, 01 Jan 2024 00:00:00 GMT`, which a
/// program reading `updated` from `result` or `show --json` could not compare with a `gs://` object's).
/// A value that is no HTTP-date is not a time: nil; nor is one past RFC 3339's years (`12345`, which
/// would print with five digits).
func updatedTime(lastModified value: String?) -> String? {
    guard let value, let date = httpDate(value) else { return nil }
    let ms = (date.timeIntervalSince1970 * 1000).rounded()
    guard ms >= -62_135_596_800_000, ms < 253_402_300_800_000 else { return nil }  // 0001-01-01 ..< 10000-01-01
    return RFC3339.string(Int64(ms))
}

// MARK: - Overwrite rules

extension StorageError {
    /// The error of a job with `if_exists: fail` whose destination exists: `invalidArgument` (the job's
    /// own rule refused the write — as Firebase reports a request that cannot succeed as sent), never retryable.
    static func destinationExists(_ destination: String, httpStatus: Int? = nil) -> StorageError {
        StorageError(.invalidArgument, "destination '\(redactedURL(destination))' already exists and the job says 'if_exists: fail'; "
                        + "remove it, or resubmit with 'if_exists: overwrite' or 'skip'",
                     httpStatus: httpStatus, retryable: false)
    }

    /// The error of a delete or update-metadata whose object is not the generation the job names
    /// (`if_generation:`; GCS answers 412): `invalidArgument`, never retryable — the object changed, so
    /// the same request would fail again.
    static func generationMismatch(_ reference: String, expected: Int64, actual: String?, httpStatus: Int? = nil) -> StorageError {
        let found = actual.map { "is generation \($0)" } ?? "is another generation"
        return StorageError(.invalidArgument, "precondition failed: '\(redactedURL(reference))' \(found), not \(expected) as the job's "
                                + "'if_generation' requires; read its metadata again (get-metadata) and resubmit with the current generation",
                            httpStatus: httpStatus, retryable: false, cause: "generation mismatch")
    }
}
