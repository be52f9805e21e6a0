import Foundation
import JobModel

/// Fetches one access token from Google credentials: the JWT bearer grant (RFC 7523) for a service
/// account, the refresh-token grant (RFC 6749 §6) for an authorized user, or a GET from the metadata
/// server. The answer is checked by `AccessTokenResponse`.
///
/// Nothing secret is put in an error: not the assertion, the client secret, the refresh token, the
/// answer's body, nor the token. An OAuth error code (`invalid_grant`) is shown when it is a plain word.
struct GoogleTokenFetcher: Sendable {
    let credentials: GoogleCredentials
    let options: CurlOptions
    /// The most one token takes, its resends included, in seconds: the stall limit alone let an endpoint
    /// that trickles a byte a second (or a metadata server that accepts and never answers, three sends
    /// of a stall limit each) hold every `gs://` transfer of the worker for minutes.
    var timeLimit = GoogleTokenFetcher.defaultTimeLimit
    static let defaultTimeLimit = 60

    /// The metadata server is asked with a short connect limit: off GCE nothing answers, and a worker must
    /// not hang on it.
    static let metadataConnectTimeout = 2

    /// A token and its lifetime.
    func fetch() async throws(StorageError) -> FetchedToken {
        let request: HTTPRequest
        let what: String
        var options = options
        switch credentials {
        case .serviceAccount(let key):
            let assertion = try key.assertion(issuedAt: Int(Date().timeIntervalSince1970))
            request = Self.formPost(key.tokenURI, [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                                                   ("assertion", assertion)])
            what = "the token endpoint of \(key) (token_uri \(redactedURL(key.tokenURI)))"
        case .authorizedUser(let user):
            request = Self.formPost(user.tokenURI, [("grant_type", "refresh_token"), ("client_id", user.clientID),
                                                    ("client_secret", user.clientSecret),
                                                    ("refresh_token", user.refreshToken)])
            what = "the token endpoint of the \(user) (\(redactedURL(user.tokenURI)))"
        case .metadataServer(let host):
            request = HTTPRequest(method: "GET",
                                  url: "http://\(host)/computeMetadata/v1/instance/service-accounts/default/token",
                                  headers: ["Metadata-Flavor: Google"])
            // The well-known host comes from GCE detection unless GCE_METADATA_HOST names it too.
            what = host == GoogleCredentials.gceMetadataHost
                ? "the metadata server \(host) (a Google Compute Engine machine, or GCE_METADATA_HOST)"
                : "the metadata server \(host) (GCE_METADATA_HOST)"
            options.connectTimeout = min(options.connectTimeout, Self.metadataConnectTimeout)
            // Never through a proxy (`http_proxy` and the like), as Google's auth libraries ask it: the
            // server is the machine's own, and its tokens are not to be handed to anything between.
            options.bypassesProxies = true
        }
        var sink = MemorySink(limit: Int64(AccessTokenResponse.sizeLimit), url: request.url, progress: { _ in })
        let answer: AccessTokenResponse
        var attempt = 1
        let limit = TransferControl().limited(toSeconds: timeLimit)
        while true {
            let response: HTTPResponse
            do {
                response = try await CurlEngine.shared.perform(request, sink: sink, control: limit, options: options)
            } catch {
                if limit.deadline?.hasPassed() == true {
                    throw StorageError(.unauthenticated, "\(what) gave no token within \(DurationText.format(timeLimit)) "
                                           + "(the request and its resends); check that the endpoint answers",
                                       url: redactedURL(request.url), retryable: true)
                }
                // A transport fault on the way to the endpoint (a reset keep-alive connection, an answer cut
                // short) is tried again at once, twice, as Google's auth libraries do: the job itself should
                // not fail, nor wait for its next attempt, because one token request was cut.
                guard case .failed(let cause) = error, cause.retryable, cause.httpStatus == nil,
                      attempt < Self.transportAttempts else {
                    throw Self.failure(error, what: what)
                }
                attempt += 1
                try? await Task.sleep(for: .milliseconds(100 * attempt))
                sink = MemorySink(limit: Int64(AccessTokenResponse.sizeLimit), url: request.url, progress: { _ in })
                continue
            }
            guard response.isSuccess else {
                throw Self.refusal(response, what: what)
            }
            do {
                answer = try AccessTokenResponse(parsing: sink.data, from: what)
                break
            } catch where error.retryable && attempt < Self.transportAttempts {
                // An answer cut short where nothing framed it (no Content-Length): sent again, as a reset one is.
                attempt += 1
                try? await Task.sleep(for: .milliseconds(100 * attempt))
                sink = MemorySink(limit: Int64(AccessTokenResponse.sizeLimit), url: request.url, progress: { _ in })
            }
        }
        return FetchedToken(value: answer.token, lifetime: .seconds(answer.lifetime))
    }

    /// How many times one token request is sent when the transport fails (not when the endpoint answers).
    static let transportAttempts = 3

    /// The error for an exchange that got no answer.
    private static func failure(_ error: TransferFailure, what: String) -> StorageError {
        switch error {
        case .stopped:
            return StorageError(.cancelled, "fetching an access token from \(what) was cancelled")
        case .failed(let cause) where cause.code == .downloadSizeExceeded:
            return StorageError(.unauthenticated, "\(what) answered with more than 16 KiB, too much for a token; "
                                    + "check that the endpoint is a Google OAuth 2.0 token endpoint")
        case .failed(let cause):
            return StorageError(.unauthenticated, "could not get an access token from \(what): \(cause.message)",
                                url: cause.url, retryable: cause.retryable, cause: cause.cause)
        }
    }

    /// An `application/x-www-form-urlencoded` POST.
    private static func formPost(_ url: String, _ fields: [(String, String)]) -> HTTPRequest {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let body = fields.map { name, value in
            "\(name)=\(value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")"
        }.joined(separator: "&")
        return HTTPRequest(method: "POST", url: url, headers: ["Content-Type: application/x-www-form-urlencoded"],
                           body: Data(body.utf8))
    }

    /// The error for a non-2xx answer: retryable for 408, 429 and 5xx (with its Retry-After); otherwise the credentials were
    /// refused, which trying again does not change.
    private static func refusal(_ response: HTTPResponse, what: String) -> StorageError {
        let retryable = response.status == 408 || response.status == 429 || (500...599).contains(response.status)
        var code = ""
        if let error = response.json?["error"] as? String, error.count <= 40,
           error.allSatisfy({ $0 == "_" || ("a"..."z").contains($0) }) {
            code = ", \(error)"
        }
        // Whether the job is tried again is the retry policy's to say, so the message promises nothing.
        let remedy = retryable
            ? "a refusal the endpoint may not repeat (retryable)"
            : (300..<400).contains(response.status)
            ? "a token endpoint does not redirect: check the token_uri (or GCE_METADATA_HOST) names the endpoint itself"
            : "check that the credentials are current (a deleted key, a revoked refresh token or a wrong token_uri is refused)"
        // A busy endpoint's wait (429, 503), as for the storage API's answers (`httpError`): the job's retry
        // waits that long rather than its own backoff of seconds, which sent it into the rate limit again.
        let retryAfter = retryable ? response.headers["retry-after"].flatMap { retryAfterSeconds($0) } : nil
        return StorageError(.unauthenticated, "\(what) refused to issue an access token (HTTP \(response.status)\(code)); \(remedy)",
                            httpStatus: response.status, url: redactedURL(response.url), retryable: retryable, retryAfter: retryAfter)
    }
}
