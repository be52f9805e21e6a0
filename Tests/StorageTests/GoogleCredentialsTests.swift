import Checksums
import Foundation
import JobModel
@testable import Storage
import Synchronization
import TestSupport
import Testing

/// Google credentials end to end against a local token endpoint (`TokenServer`) that verifies the JWT's
/// RS256 signature with the key's public half, and serves a GCS-shaped object only to the tokens it issued.
@Suite("Google credentials against a local token endpoint", .onTestThreads)
struct GoogleCredentialsTests {
    private static let payload = Data("bytes behind a bearer token".utf8)

    /// A token server serving `payload` as gs://bkt/obj.txt.
    private func server(_ options: TokenServer.Options = TokenServer.Options(),
                        verifyingKey: TestRSAKey? = nil) throws -> TokenServer {
        let server = try TokenServer.start(options, verifyingKey: verifyingKey)
        let hash = hashes(Self.payload)
        try server.serve(Self.payload, metadata: """
            {"bucket":"bkt","name":"obj.txt","size":"\(Self.payload.count)","generation":"1","md5Hash":"\(hash.md5)","crc32c":"\(hash.crc32c)"}
            """)
        return server
    }

    /// The configuration the environment gives, talking to `server` as the GCS endpoint.
    private func configuration(_ environment: [String: String], server: TokenServer,
                               margin: Duration = StorageConfiguration.defaultTokenRefreshMargin) throws -> StorageConfiguration {
        var configuration = try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: "/nonexistent")
        configuration.gcsEndpoint = server.baseURL
        configuration.connectTimeout = 5
        configuration.stallTimeout = 10
        configuration.tokenRefreshMargin = margin
        return configuration
    }

    private func download(_ configuration: StorageConfiguration) async -> Result<TransferOutcome, StorageError> {
        await run(GCSBackend(configuration: configuration), JobSpec(kind: .downloadMemory, source: "gs://bkt/obj.txt"))
    }

    /// The Authorization header each resource request carried.
    private func resourceAuthorizations(_ server: TokenServer) -> [String?] {
        resourceRequests(server).map(\.authorization)
    }

    /// The resource requests (not token requests), in order.
    private func resourceRequests(_ server: TokenServer) -> [TokenServer.Request] {
        server.requests.filter { $0.path.hasPrefix("/storage/") || $0.path.hasPrefix("/download/") }
    }

    @Test("service account: a signed JWT is exchanged for a token that every request carries; the token is cached")
    func serviceAccountEndToEnd() async throws {
        let server = try server()
        defer { server.stop() }
        let keyFile = try server.serviceAccountKeyFile()
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": keyFile, "HOME": "/nonexistent"], server: server)
        guard case .serviceAccount(let key) = configuration.googleCredentials else {
            Issue.record("expected a service account, got \(String(describing: configuration.googleCredentials))")
            return
        }
        #expect(key.clientEmail == server.options.issuer)
        #expect(!"\(configuration)".contains("PRIVATE KEY"))
        let backend = GCSBackend(configuration: configuration)
        for _ in 0..<2 {
            let result = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://bkt/obj.txt")))
            #expect(result.data == Self.payload)
        }
        // One token for both downloads: every token request came before the first download's first
        // resource request, and all four resource requests carried the last token issued. Normally one
        // request; a token request cut on its way (a transport fault, which `GoogleTokenFetcher` tries
        // again at once, as Google's libraries do) adds one — seen once in a full test run under load.
        let tokenRequests = server.tokenRequests
        let resources = resourceRequests(server)
        #expect((1...GoogleTokenFetcher.transportAttempts).contains(tokenRequests.count), "\(server.log)")
        if let firstResource = resources.first?.at {
            #expect(tokenRequests.allSatisfy { ($0.at ?? .infinity) <= firstResource },
                    "the second download fetched no token: \(server.log)")
        }
        #expect(tokenRequests.allSatisfy { $0.grant == "urn:ietf:params:oauth:grant-type:jwt-bearer" })
        #expect(tokenRequests.allSatisfy { $0.contentType == "application/x-www-form-urlencoded" })
        #expect(tokenRequests.allSatisfy { $0.problem == nil }, "the server accepted the assertion: \(tokenRequests)")
        let authorizations = resources.map(\.authorization)
        #expect(authorizations.count == 4)
        #expect(authorizations.allSatisfy { $0 == "Bearer tok-\(tokenRequests.count)" }, "\(server.log)")
    }

    @Test("a token is replaced the configured margin before it expires, not before")
    func refreshBeforeExpiry() async throws {
        var options = TokenServer.Options()
        options.expiresIn = 600
        let server = try server(options)
        defer { server.stop() }
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": try server.serviceAccountKeyFile()],
                                              server: server, margin: .seconds(120))
        // A clock moved by hand: the test does not depend on how fast this machine is.
        let origin = ContinuousClock.now
        let elapsed = Mutex(Duration.zero)
        let tokens = GCSTokenSource(configuration: configuration, now: { origin + elapsed.withLock { $0 } })
        #expect(try await tokens.authorizationHeader() == "Authorization: Bearer tok-1")
        // Valid for 600 s, replaced 120 s early: kept until 480 s after it was received.
        elapsed.withLock { $0 = .seconds(479) }
        #expect(try await tokens.authorizationHeader() == "Authorization: Bearer tok-1")
        #expect(server.tokenRequests.count == 1)
        elapsed.withLock { $0 = .seconds(480) }
        #expect(try await tokens.authorizationHeader() == "Authorization: Bearer tok-2")
        elapsed.withLock { $0 = .seconds(481) }
        #expect(try await tokens.authorizationHeader() == "Authorization: Bearer tok-2")
        #expect(server.tokenRequests.count == 2)
    }

    @Test("concurrent callers share one refresh")
    func concurrentCallersShareOneRefresh() async throws {
        var options = TokenServer.Options()
        options.delay = 0.4
        let server = try server(options)
        defer { server.stop() }
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": try server.serviceAccountKeyFile()], server: server)
        let tokens = GCSTokenSource(configuration: configuration)
        let headers = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<8 { group.addTask { try await tokens.authorizationHeader() } }
            return try await group.reduce(into: [String?]()) { $0.append($1) }
        }
        #expect(headers == Array(repeating: "Authorization: Bearer tok-1", count: 8))
        #expect(server.tokenRequests.count == 1, "\(server.tokenRequests)")
    }

    @Test("a 401 fetches one new token and the request is sent again with it")
    func unauthorizedRefreshesOnce() async throws {
        var options = TokenServer.Options()
        options.revokeFirstResourceRequest = true
        let server = try server(options)
        defer { server.stop() }
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": try server.serviceAccountKeyFile()], server: server)
        let result = try finished(await download(configuration))
        #expect(result.data == Self.payload)
        // What the refusal caused: exactly one token request after it, and the refused request sent again
        // (then the media's) with the token that request brought. Counted from the refusal on, so that a
        // first token request that had to be sent again (a transport fault, covered below) is not taken
        // for a second refresh; the log with its times is in the message.
        let log = server.log
        let resources = resourceAuthorizations(server)
        let refused = try #require(server.requests.firstIndex { $0.path.hasPrefix("/storage/") }, "\(log)")
        let after = server.requests[refused...]
        #expect(after.filter { $0.method == "POST" }.count == 1, "\(log)")
        let lastIssued = log.compactMap(\.issued).last.map { "Bearer \($0)" }
        #expect(resources.count == 3 && resources[0] != lastIssued && resources[1...].allSatisfy { $0 == lastIssued },
                "\(log)")
    }

    @Test("a 401 after another request already replaced the token uses the replacement, without a second refresh")
    func rejectedOldTokenUsesReplacement() async throws {
        let server = try server()
        defer { server.stop() }
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": try server.serviceAccountKeyFile()], server: server)
        let tokens = GCSTokenSource(configuration: configuration)
        let first = try #require(try await tokens.authorizationHeader())
        #expect(try await tokens.refresh(replacing: first) == "tok-2")
        // A second request that was sent with tok-1 too comes back 401: tok-2 is already there.
        #expect(try await tokens.refresh(replacing: first) == "tok-2")
        #expect(server.tokenRequests.count == 2)
    }

    @Test("a token request cut by the network is sent again at once; a cut on every try fails typed and retryable")
    func tokenRequestCutIsSentAgain() async throws {
        let server = try server()
        defer { server.stop() }
        // The endpoint issues tok-1, but its answer never arrives (reset before the response reaches us).
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", pathContains: "/token"), .resetBeforeResponse, times: 1),
        ])
        defer { proxy.stop() }
        // An authorized user's refresh (a service account's assertion names the endpoint's own URL).
        func userFile(tokenURI: String, name: String) throws -> String {
            try server.writeJSON(["type": "authorized_user", "client_id": server.options.clientID,
                                  "client_secret": server.options.clientSecret, "refresh_token": server.options.refreshToken,
                                  "token_uri": tokenURI], name: name)
        }
        let key = try userFile(tokenURI: "\(proxy.baseURL)/token", name: "user-once.json")
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": key], server: server)
        let result = try finished(await download(configuration))
        #expect(result.data == Self.payload)
        #expect(proxy.firedCounts == [1])
        #expect(server.tokenRequests.count == 2, "\(server.tokenRequests)")
        #expect(resourceAuthorizations(server).allSatisfy { $0 == "Bearer tok-2" })

        // Every try cut: the transfer fails as unauthenticated, retryable (the job's next attempt may
        // succeed), after exactly the three sends.
        let always = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", pathContains: "/token"), .resetBeforeResponse, times: .max),
        ])
        defer { always.stop() }
        let cutKey = try userFile(tokenURI: "\(always.baseURL)/token", name: "user-always.json")
        let cutConfiguration = try self.configuration(["GOOGLE_APPLICATION_CREDENTIALS": cutKey], server: server)
        let error = try failure(await download(cutConfiguration))
        #expect(error.code == .unauthenticated && error.retryable, "\(error)")
        #expect(always.firedCounts == [GoogleTokenFetcher.transportAttempts])
    }

    /// A token endpoint that is busy (429, 503) says how long to wait in `Retry-After`, as the storage API
    /// does; the job's retry waits that long instead of its own backoff (seconds), which sent the next
    /// attempts into the endpoint's rate limit again. Both of RFC 9110's forms are read, as for GCS answers.
    @Test("a token endpoint's 429 or 503 with Retry-After: the job's error carries the wait", arguments: [
        (429, "120"), (503, "7.5"), (503, "HTTP-date"),
    ])
    func busyTokenEndpointCarriesRetryAfter(status: Int, retryAfter: String) async throws {
        let server = try server()
        defer { server.stop() }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        let header = retryAfter == "HTTP-date" ? formatter.string(from: Date().addingTimeInterval(600)) : retryAfter
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", pathContains: "/token"),
                      .respond(.response(status, reason: "Busy", headers: [ProxyHeader("Retry-After", header)],
                                         body: Data(#"{"error":"rate_limit_exceeded"}"#.utf8))), times: .max),
        ])
        defer { proxy.stop() }
        let key = try server.writeJSON(["type": "authorized_user", "client_id": server.options.clientID,
                                        "client_secret": server.options.clientSecret, "refresh_token": server.options.refreshToken,
                                        "token_uri": "\(proxy.baseURL)/token"], name: "user-busy.json")
        let error = try failure(await download(try configuration(["GOOGLE_APPLICATION_CREDENTIALS": key], server: server)))
        #expect(error.code == .unauthenticated && error.retryable && error.httpStatus == status, "\(error)")
        let wait = try #require(error.retryAfter, "\(error)")
        if retryAfter == "HTTP-date" {
            #expect(wait > 590 && wait <= 600, "\(wait)")
        } else {
            #expect(wait == Double(retryAfter))
        }
        #expect(proxy.firedCounts == [1], "a refusal is not sent again within the attempt")
    }

    /// A token answer cut short with nothing to mark its end (no Content-Length: the close ended it)
    /// reads as a complete answer that is not JSON. It is the network's fault, not the endpoint's: the
    /// request is sent again at once, as after a reset, and when every send is cut the transfer fails
    /// retryable (it failed for good, as an endpoint that is no token endpoint).
    @Test("a token answer cut short where nothing framed it is sent again; cut every time, it is retryable")
    func tokenAnswerCutShort() async throws {
        let server = try server()
        defer { server.stop() }
        let tokenPost = RequestMatch(method: "POST", pathContains: "/token")
        func cutting(times: Int) throws -> FaultProxy {
            try FaultProxy(upstreamPort: server.port, rules: [
                FaultRule(tokenPost, .unframedResponse, times: times),
                FaultRule(tokenPost, .rewriteResponse { _, response in response.body = response.body.prefix(response.body.count / 2) },
                          times: times),
            ])
        }
        let once = try cutting(times: 1)
        defer { once.stop() }
        let key = try server.authorizedUserFile(tokenURI: "\(once.baseURL)/token", name: "user-cut-once.json")
        let result = try finished(await download(try configuration(["GOOGLE_APPLICATION_CREDENTIALS": key], server: server)))
        #expect(result.data == Self.payload)
        #expect(once.firedCounts == [1, 1])
        #expect(server.tokenRequests.count == 2, "\(server.tokenRequests)")

        let always = try cutting(times: .max)
        defer { always.stop() }
        let cutKey = try server.authorizedUserFile(tokenURI: "\(always.baseURL)/token", name: "user-cut-always.json")
        let error = try failure(await download(try configuration(["GOOGLE_APPLICATION_CREDENTIALS": cutKey], server: server)))
        #expect(error.code == .unauthenticated && error.retryable && error.message.contains("breaks off"), "\(error)")
        #expect(!"\(error) \(error.cause ?? "")".contains("tok-"), "the token is never shown: \(error)")
        #expect(always.firedCounts == [GoogleTokenFetcher.transportAttempts, GoogleTokenFetcher.transportAttempts])
    }

    /// A token endpoint that trickles its answer (one byte a second) kept the stall limit from ever
    /// tripping: the job waited minutes, every gs:// transfer with it. One token now takes at most the
    /// fetch's time limit, resends included (60 s; 2 s here).
    @Test("a token endpoint that trickles its answer fails within the fetch's time limit, retryable")
    func tricklingTokenEndpointIsCutOff() async throws {
        let server = try server()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", pathContains: "/token"), .trickleResponse(bytes: 1, interval: 0.5), times: .max),
        ])
        defer { proxy.stop() }
        let key = try server.authorizedUserFile(tokenURI: "\(proxy.baseURL)/token", name: "user-trickle.json")
        var configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": key], server: server)
        configuration.tokenTimeLimit = 2
        let limited = configuration
        let (result, elapsed) = await timedOffTestThreads { await download(limited) }
        let error = try failure(result)
        #expect(error.code == .unauthenticated && error.retryable && error.message.contains("gave no token within 2s"), "\(error)")
        #expect(elapsed < .seconds(8), "\(elapsed)")
    }

    /// The refusal's words: a redirect is a wrong endpoint, not stale credentials; a 5xx promises no retry
    /// (the retry policy decides), it only says the refusal is temporary.
    @Test("a token endpoint's redirect and 503 are told apart from a refusal of the credentials", arguments: [302, 503])
    func redirectAndUnavailableWording(status: Int) async throws {
        let server = try server()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", pathContains: "/token"),
                      .respond(.response(status, headers: [ProxyHeader("Location", "https://127.0.0.1:1/elsewhere")])), times: .max),
        ])
        defer { proxy.stop() }
        let key = try server.authorizedUserFile(tokenURI: "\(proxy.baseURL)/token", name: "user-\(status).json")
        let error = try failure(await download(try configuration(["GOOGLE_APPLICATION_CREDENTIALS": key], server: server)))
        #expect(error.code == .unauthenticated && error.httpStatus == status, "\(error)")
        #expect(!error.message.contains("will be tried again") && !error.message.contains("credentials are current"), "\(error)")
        #expect(error.message.contains(status == 302 ? "does not redirect" : "retryable"), "\(error)")
        #expect(error.retryable == (status == 503))
    }

    /// A transfer waiting for a token being fetched could not be stopped: the worker's SIGTERM paused
    /// nothing, the job stayed held until its lease ran out (and, at its last attempt, failed). A stop
    /// now ends the wait; the fetch goes on for whoever else waits.
    @Test("a transfer waiting for a token stops at once when asked")
    func waitForATokenIsStoppable() async throws {
        let server = try server()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", pathContains: "/token"), .stallInResponse(afterBytes: 0, seconds: 20), times: .max),
        ])
        defer { proxy.stop() }
        let key = try server.authorizedUserFile(tokenURI: "\(proxy.baseURL)/token", name: "user-stall.json")
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": key], server: server)
        let control = TransferControl(jobID: "01TOKENWAIT")
        Task {
            try? await Task.sleep(for: .milliseconds(500))
            control.stop(.pause)
        }
        let (result, elapsed) = await timedOffTestThreads {
            await run(GCSBackend(configuration: configuration),
                      JobSpec(kind: .downloadFile, source: "gs://bkt/obj.txt", destination: "/tmp/jobctl-never-written"), control: control)
        }
        let outcome = try result.get()
        #expect(elapsed < .seconds(5), "stopped at once, not after the stalled fetch")
        guard case .stopped(.pause, _) = outcome else {
            Issue.record("expected a paused transfer, got \(outcome)")
            return
        }
        #expect(!FileManager.default.fileExists(atPath: "/tmp/jobctl-never-written"))
    }

    @Test("authorized user: the refresh token is exchanged at the file's token_uri")
    func authorizedUser() async throws {
        let server = try server()
        defer { server.stop() }
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": try server.authorizedUserFile()], server: server)
        #expect("\(configuration)".contains("authorized user"))
        #expect(!"\(configuration)".contains(server.options.refreshToken))
        #expect(!"\(configuration)".contains(server.options.clientSecret))
        let result = try finished(await download(configuration))
        #expect(result.data == Self.payload)
        #expect(server.tokenRequests.map(\.grant) == ["refresh_token"])
        #expect(server.tokenRequests.first?.problem == nil, "\(server.tokenRequests)")
        #expect(resourceAuthorizations(server).allSatisfy { $0 == "Bearer tok-1" })
    }

    @Test("the gcloud well-known file is used when the variable is unset, but not with an emulator")
    func wellKnownFile() async throws {
        let server = try server()
        defer { server.stop() }
        let home = try TemporaryDirectory("jobctl-home")
        defer { home.remove() }
        try FileManager.default.createDirectory(atPath: home.file(".config/gcloud"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: try server.authorizedUserFile(),
                                         toPath: home.file(StorageConfiguration.wellKnownCredentialsPath))
        let configuration = try configuration(["HOME": home.path], server: server)
        let result = try finished(await download(configuration))
        #expect(result.data == Self.payload)
        #expect(server.tokenRequests.map(\.grant) == ["refresh_token"])

        let emulated = try StorageConfiguration.fromEnvironment(["HOME": home.path, "STORAGE_EMULATOR_HOST": server.baseURL],
                                                                localBucketsDirectory: "/nonexistent")
        #expect(emulated.googleCredentials == nil, "an emulator with nothing configured stays anonymous")

        // The same folder named relative to the current one: a relative HOME is no home (it would take
        // the credentials of whatever folder the worker runs in).
        let depth = FileManager.default.currentDirectoryPath.split(separator: "/").count
        let relative = String(repeating: "../", count: depth) + home.path.drop { $0 == "/" }
        #expect(FileManager.default.fileExists(atPath: relative + "/" + StorageConfiguration.wellKnownCredentialsPath))
        let relativeHome = try StorageConfiguration.fromEnvironment(["HOME": relative], localBucketsDirectory: "/nonexistent",
                                                                    productNameFile: "/nonexistent")
        #expect(relativeHome.googleCredentials == nil, "HOME=\(relative)")
    }

    @Test("metadata server: GCE_METADATA_HOST is asked with Metadata-Flavor: Google")
    func metadataServer() async throws {
        let server = try server()
        defer { server.stop() }
        let configuration = try configuration(["GCE_METADATA_HOST": "127.0.0.1:\(server.port)", "HOME": "/nonexistent"],
                                              server: server)
        #expect(configuration.googleCredentials == .metadataServer(host: "127.0.0.1:\(server.port)"))
        let result = try finished(await download(configuration))
        #expect(result.data == Self.payload)
        let tokenRequests = server.tokenRequests
        #expect(tokenRequests.count == 1)
        #expect(tokenRequests.first?.metadataFlavor == "Google")
        #expect(resourceAuthorizations(server).allSatisfy { $0 == "Bearer tok-1" })
    }

    /// A product-name file as /sys/class/dmi/id/product_name holds it (with its line feed).
    private func productNameFile(_ name: String, in directory: TemporaryDirectory) throws -> String {
        let path = directory.file("product_name")
        try (name + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("GCE detection: a Google DMI product name selects the metadata server without GCE_METADATA_HOST",
          arguments: ["Google Compute Engine", "Google"])
    func gceDetected(productName: String) async throws {
        let directory = try TemporaryDirectory("gce-detection")
        defer { directory.remove() }
        let file = try productNameFile(productName, in: directory)
        // Without GCE_METADATA_HOST: the well-known host (no request is made here: only loopback in tests).
        let detected = try StorageConfiguration.fromEnvironment(["HOME": "/nonexistent"], localBucketsDirectory: "/nonexistent",
                                                                productNameFile: file)
        #expect(detected.googleCredentials == .metadataServer(host: "metadata.google.internal"))
        // An emulator needs no credentials: detection does not apply to it.
        let emulated = try StorageConfiguration.fromEnvironment(["HOME": "/nonexistent", "STORAGE_EMULATOR_HOST": "127.0.0.1:1"],
                                                                localBucketsDirectory: "/nonexistent", productNameFile: file)
        #expect(emulated.googleCredentials == nil)

        // With GCE_METADATA_HOST on loopback for the actual request: the token comes from that server.
        let server = try server()
        defer { server.stop() }
        var configuration = try StorageConfiguration.fromEnvironment(["HOME": "/nonexistent", "GCE_METADATA_HOST": "127.0.0.1:\(server.port)"],
                                                                     localBucketsDirectory: "/nonexistent", productNameFile: file)
        configuration.gcsEndpoint = server.baseURL
        #expect(configuration.googleCredentials == .metadataServer(host: "127.0.0.1:\(server.port)"))
        let result = try finished(await download(configuration))
        #expect(result.data == Self.payload)
        #expect(server.tokenRequests.map(\.metadataFlavor) == ["Google"])
        #expect(!resourceAuthorizations(server).isEmpty && resourceAuthorizations(server).allSatisfy { $0 == "Bearer tok-1" })
    }

    @Test("GCE detection: another product name, or no DMI file, never asks a metadata server",
          arguments: ["Standard PC (Q35 + ICH9, 2009)", "KVM", "", "NotGoogle", nil])
    func gceNotDetected(productName: String?) async throws {
        let directory = try TemporaryDirectory("gce-detection")
        defer { directory.remove() }
        let file = try productName.map { try productNameFile($0, in: directory) } ?? directory.file("missing")
        let server = try server()
        defer { server.stop() }
        var configuration = try StorageConfiguration.fromEnvironment(["HOME": "/nonexistent"], localBucketsDirectory: "/nonexistent",
                                                                     productNameFile: file)
        #expect(configuration.googleCredentials == nil)
        configuration.gcsEndpoint = server.baseURL
        // Anonymous: the object request goes out without a token, and no token is ever asked for.
        _ = await download(configuration)
        #expect(server.tokenRequests.isEmpty)
        #expect(resourceAuthorizations(server).allSatisfy { $0 == nil }, "\(resourceAuthorizations(server))")
        #expect(!resourceAuthorizations(server).isEmpty)
    }

    @Test("a metadata host where nothing listens fails retryably, naming the variable")
    func metadataServerDown() async throws {
        let closed = ClosedLoopbackPort()
        let tokens = GCSTokenSource(accessToken: nil, tokenCommand: nil, google: .metadataServer(host: closed.hostAndPort))
        defer { withExtendedLifetime(closed) {} }
        let thrown = await #expect(throws: TransferFailure.self) { try await tokens.authorizationHeader() }
        guard case .failed(let error)? = thrown else {
            Issue.record("expected a failure, got \(String(describing: thrown))")
            return
        }
        #expect(error.code == .unauthenticated)
        #expect(error.retryable == true)
        #expect(error.message.contains("GCE_METADATA_HOST") == true, "\(error)")
    }

    // MARK: - Failures name what to fix and never show a secret

    /// Whatever `error` says must not hold key material, an assertion, a refresh token or a token.
    private func expectNoSecret(_ error: StorageError?, server: TokenServer, sourceLocation: SourceLocation = #_sourceLocation) {
        let text = "\(String(describing: error)) \(error?.cause ?? "")"
        for secret in ["PRIVATE KEY", "eyJ", "tok-", "X-Injected", server.options.refreshToken, server.options.clientSecret] {
            #expect(!text.contains(secret), "'\(secret)' in \(text)", sourceLocation: sourceLocation)
        }
    }

    @Test("an assertion signed with another key is refused by the endpoint: unauthenticated, not retryable")
    func badSignature() async throws {
        let server = try server(verifyingKey: try TestRSAKey.first)
        defer { server.stop() }
        let keyFile = try server.serviceAccountKeyFile(key: try TestRSAKey.second)
        let error = try failure(await download(try configuration(["GOOGLE_APPLICATION_CREDENTIALS": keyFile], server: server)))
        #expect(server.tokenRequests.map(\.problem) == ["bad signature"])
        #expect(error.code == .unauthenticated)
        #expect(error.httpStatus == 400)
        #expect(!error.retryable)
        #expect(error.message.contains("invalid_grant"), "\(error)")
        #expect(error.message.contains(keyFile), "\(error)")
        expectNoSecret(error, server: server)
        #expect(resourceAuthorizations(server).isEmpty, "nothing was sent without a token")
    }

    @Test("malformed token responses are refused with a typed error that shows no token",
          arguments: ["notjson", "badtoken", "huge", "badexpiry"])
    func malformedResponse(answer: String) async throws {
        var options = TokenServer.Options()
        options.answer = answer
        let server = try server(options)
        defer { server.stop() }
        let configuration = try configuration(["GOOGLE_APPLICATION_CREDENTIALS": try server.serviceAccountKeyFile()], server: server)
        let error = try failure(await download(configuration))
        #expect(error.code == .unauthenticated)
        #expect(error.message.contains("token endpoint"), "\(error)")
        expectNoSecret(error, server: server)
        #expect(resourceAuthorizations(server).isEmpty)
    }

    @Test("bad credentials files fail at start naming the file and the field, never a value", arguments: [
        ("not json", "is not a JSON object"),
        (#"{"type":"service_account","client_email":"a@b","token_uri":"https://oauth2.googleapis.com/token"}"#, "'private_key'"),
        (#"{"type":"service_account","private_key":"-----BEGIN PRIVATE KEY-----\nSECRETGARBAGE\n-----END PRIVATE KEY-----\n","client_email":"a@b"}"#,
         "'private_key' that is not a readable PEM private key"),
        (#"{"type":"service_account","private_key":"PEM","client_email":"a@b","token_uri":"http://token.example.com/"}"#, "'token_uri'"),
        (#"{"type":"authorized_user","client_id":"x","client_secret":"SECRETGARBAGE"}"#, "'refresh_token'"),
        (#"{"type":"external_account","audience":"SECRETGARBAGE"}"#, "'type' (external_account)"),
        (#"{"client_secret":"SECRETGARBAGE"}"#, "'type'"),
    ])
    func badKeyFile(contents: String, fragment: String) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("key.json")
        try Data(contents.utf8).write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment(["GOOGLE_APPLICATION_CREDENTIALS": path], localBucketsDirectory: "/nonexistent")
        }
        #expect(error?.code == .unauthenticated)
        #expect(error?.message.contains(path) == true, "\(String(describing: error))")
        #expect(error?.message.contains("GOOGLE_APPLICATION_CREDENTIALS") == true)
        #expect(error?.message.contains(fragment) == true, "\(String(describing: error))")
        #expect(error?.message.contains("SECRETGARBAGE") == false)
    }

    /// A FIFO (or a directory) named as the key file or the CA bundle: the worker's start opened it and
    /// waited for a writer for ever, its signals blocked (only SIGKILL ended it). Refused at once now. A
    /// writer opens the FIFO after 5 s so that the old behaviour ends (late) rather than hangs the suite.
    @Test("a FIFO or a folder as the key file or the CA bundle is refused at once",
          arguments: ["GOOGLE_APPLICATION_CREDENTIALS", "JOBCTL_CA_BUNDLE"])
    func specialFilesRefused(variable: String) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let fifo = directory.file("special")
        #expect(mkfifo(fifo, 0o600) == 0)
        Thread {
            sleep(5)
            let descriptor = open(fifo, O_WRONLY | O_NONBLOCK)
            if descriptor >= 0 { close(descriptor) }
        }.start()
        let start = ContinuousClock.now
        let refused = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment([variable: fifo], localBucketsDirectory: "/nonexistent")
        }
        #expect(start.duration(to: .now) < .seconds(3), "not waited on")
        #expect(refused?.message.contains("a FIFO") == true, "\(String(describing: refused))")
        if variable == "GOOGLE_APPLICATION_CREDENTIALS" {
            let folder = #expect(throws: StorageError.self) {
                try StorageConfiguration.fromEnvironment([variable: directory.path], localBucketsDirectory: "/nonexistent")
            }
            #expect(folder?.message.contains("is a directory") == true, "\(String(describing: folder))")
        }
    }

    @Test("a missing key file, or an encrypted key, is refused without prompting")
    func missingOrEncryptedKey() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let missing = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment(["GOOGLE_APPLICATION_CREDENTIALS": directory.file("nope.json")],
                                                     localBucketsDirectory: "/nonexistent")
        }
        #expect(missing?.message.contains("cannot be read") == true)
        let encrypted = directory.file("encrypted.pem")
        let made = try runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024",
                                                       "-aes256", "-pass", "pass:secret", "-out", encrypted])
        try #require(made.status == 0, "\(made.stderr)")
        #expect(throws: RSASignerError.self) { try RSASigner(pem: try String(contentsOfFile: encrypted, encoding: .utf8)) }
        let plain = directory.file("ec.pem")
        try #require(try runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                                                         "-out", plain]).status == 0)
        let notRSA = #expect(throws: RSASignerError.self) { try RSASigner(pem: try String(contentsOfFile: plain, encoding: .utf8)) }
        #expect(notRSA?.reason.contains("not an RSA key") == true)
    }

    @Test("precedence: token > command > GOOGLE_APPLICATION_CREDENTIALS > well-known file > GCE_METADATA_HOST > anonymous")
    func precedence() throws {
        let server = try server()
        defer { server.stop() }
        let keyFile = try server.serviceAccountKeyFile()
        func credentials(_ environment: [String: String]) throws -> StorageConfiguration {
            try StorageConfiguration.fromEnvironment(environment.merging(["HOME": "/nonexistent"]) { a, _ in a },
                                                     localBucketsDirectory: "/nonexistent", productNameFile: "/nonexistent/product_name")
        }
        // A higher source means a lower one is not even read (this file does not exist).
        let unread = "/nonexistent/key.json"
        let token = try credentials(["GOOGLE_OAUTH_ACCESS_TOKEN": "abc", "GOOGLE_APPLICATION_CREDENTIALS": unread])
        #expect(token.accessToken == "abc" && token.googleCredentials == nil)
        let command = try credentials(["JOBCTL_TOKEN_COMMAND": "echo abc", "GOOGLE_APPLICATION_CREDENTIALS": unread])
        #expect(command.tokenCommand == "echo abc" && command.googleCredentials == nil)
        let file = try credentials(["GOOGLE_APPLICATION_CREDENTIALS": keyFile, "GCE_METADATA_HOST": "127.0.0.1:1"])
        if case .serviceAccount = file.googleCredentials {} else { Issue.record("\(file)") }
        let metadata = try credentials(["GCE_METADATA_HOST": "metadata.google.internal"])
        #expect(metadata.googleCredentials == .metadataServer(host: "metadata.google.internal"))
        #expect(try credentials([:]).googleCredentials == nil)
        #expect(try credentials(["STORAGE_EMULATOR_HOST": server.baseURL]).googleCredentials == nil)
        for bad in ["http://metadata", "host/path", "host name"] {
            #expect(throws: StorageError.self, "\(bad)") { try credentials(["GCE_METADATA_HOST": bad]) }
        }
    }
}

/// The token cache's decisions as values: no clock, no I/O.
@Suite("Access token state", .onTestThreads)
struct AccessTokenStateTests {
    private let start = ContinuousClock.now

    @Test("first use refreshes; callers meanwhile wait; the token is used until margin before expiry")
    func lifecycle() {
        var state = AccessTokenState(margin: .seconds(300))
        #expect(state.tokenRequested(at: start) == .startRefresh)
        #expect(state.tokenRequested(at: start) == .awaitRefresh)
        state.refreshFinished(FetchedToken(value: "a", lifetime: .seconds(3600)), at: start)
        #expect(state.tokenRequested(at: start + .seconds(3299)) == .use("a"))
        #expect(state.tokenRequested(at: start + .seconds(3300)) == .startRefresh)
        #expect(state.tokenRequested(at: start + .seconds(3301)) == .awaitRefresh)
        state.refreshFailed()
        #expect(state.tokenRequested(at: start + .seconds(3302)) == .startRefresh)
    }

    @Test("a short-lived token is kept for half its lifetime; a command's token until it is refused")
    func shortAndUnboundedLifetimes() {
        var state = AccessTokenState(margin: .seconds(300))
        _ = state.tokenRequested(at: start)
        state.refreshFinished(FetchedToken(value: "short", lifetime: .seconds(60)), at: start)
        #expect(state.tokenRequested(at: start + .seconds(29)) == .use("short"))
        #expect(state.tokenRequested(at: start + .seconds(30)) == .startRefresh)
        state.refreshFinished(FetchedToken(value: "forever", lifetime: nil), at: start + .seconds(30))
        #expect(state.tokenRequested(at: start + .seconds(1_000_000)) == .use("forever"))
    }

    @Test("a 401 refreshes only the token that was refused")
    func rejection() {
        var state = AccessTokenState(margin: .seconds(300))
        _ = state.tokenRequested(at: start)
        state.refreshFinished(FetchedToken(value: "a", lifetime: .seconds(3600)), at: start)
        #expect(state.tokenRejected("a") == .startRefresh)
        #expect(state.tokenRejected("a") == .awaitRefresh)
        state.refreshFinished(FetchedToken(value: "b", lifetime: .seconds(3600)), at: start)
        #expect(state.tokenRejected("a") == .use("b"))
        #expect(state.tokenRejected("b") == .startRefresh)
    }
}
