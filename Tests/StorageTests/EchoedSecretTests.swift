import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

/// A server that sends back what it was asked with — its request line in an error's text, the
/// `Authorization` header re-encoded in a JSON message, its query in the headers of its answer — gets
/// none of the request's secrets into what a job stores (its error, its result, its resume points),
/// whole or in part.
@Suite("secrets a server sends back", .onTestThreads) struct EchoedSecretTests {
    /// A signature long enough to run across the 300 characters of a server's text that are quoted.
    static let signature = "SIGs3cr3t" + String(repeating: "ab", count: 252)
    static let token = "ATs3cr3tTOKEN"

    /// Whether `text` holds the secret or a piece of it 8 characters long.
    static func holdsPiece(of secret: String, _ text: String) -> Bool {
        let characters = Array(secret)
        return stride(from: 0, through: characters.count - 8, by: 1).contains { text.contains(String(characters[$0..<($0 + 8)])) }
    }

    static func shown(_ error: StorageError) -> String {
        "\(error.message) \(error.cause ?? "") \(error.url ?? "")"
    }

    @Test("a text error body quoting the signed request line shows no piece of the signature, cut or not")
    func signatureCutInTheServersText() async throws {
        let server = try NginxServer.start(extraServerConfig: #"location /x { return 403 "request $request and more"; }"#)
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory,
                                                           source: "\(server.baseURL)/x?a=1&X-Goog-Signature=\(Self.signature)")))
        #expect(error.code == .unauthorized)
        #expect(error.cause?.hasPrefix("request GET /x?a=1&X-Goog-Signature=REDACTED") == true, "\(error.cause ?? "")")
        #expect(!Self.holdsPiece(of: Self.signature, Self.shown(error)), "\(Self.shown(error))")
    }

    @Test("a GCS 401 quoting the bearer token after 270 bytes, or re-encoded in its JSON message, shows none of it",
          arguments: [
              #"location ~ ^/(download/)?storage/ { return 401 "\#(String(repeating: "p", count: 270)) Authorization: $http_authorization"; }"#,
              #"location ~ ^/(download/)?storage/ { default_type application/json; return 401 '{"error": {"message": "Bearer%20ATs%33cr3tTOKEN refused"}}'; }"#,
          ])
    func bearerTokenInTheServersText(_ location: String) async throws {
        let server = try NginxServer.start(extraServerConfig: location)
        defer { server.stop() }
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: server.baseURL, usesEmulator: true, accessToken: Self.token,
                                                                     connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://bkt/o.txt")))
        #expect(error.code == .unauthenticated)
        #expect(Self.shown(error).contains("Bearer RED") || Self.shown(error).contains("Bearer%20RED"), "the quote is there, its token replaced: \(Self.shown(error))")
        #expect(!Self.shown(error).contains("s3cr3") && !Self.shown(error).contains("s%33cr3"), "\(Self.shown(error))")
    }

    /// Credentials a server quotes that the request never carried (a gateway repeating another client's
    /// headers, a service its own keys) were stored in the job's error and shown by every command: only
    /// the request's own secrets and URLs' were scrubbed. Each is replaced, the words around it kept.
    @Test("an error body quoting credentials the request never carried shows none of them",
          arguments: [
              #"location /x { return 502 "gateway said: Authorization: Bearer OTHERs3cret0\nCookie: theme=dark; sid=CKs3cret01\npassword=PWs3cret02 and {\"access_token\" : \"ATs3cret03\"} (x-api-key=AKs3cret04), Bearer token expired, Basic authentication is disabled; max_tokens: 4096"; }"#,
              #"location /x { default_type application/json; return 502 '{"error": {"message": "gateway said: Authorization: Bearer OTHERs3cret0\\nCookie: theme=dark; sid=CKs3cret01\\npassword=PWs3cret02 and {\\\"access_token\\\" : \\\"ATs3cret03\\\"} (x-api-key=AKs3cret04), Bearer token expired, Basic authentication is disabled; max_tokens: 4096"}}'; }"#,
          ])
    func credentialsTheRequestNeverCarried(_ location: String) async throws {
        let server = try NginxServer.start(extraServerConfig: location)
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/x")))
        let shown = Self.shown(error)
        #expect(!shown.contains("s3cret"), "\(shown)")
        #expect(shown.contains("gateway said: Authorization: Bearer REDACTED\nCookie: REDACTED\npassword=REDACTED and")
                && shown.contains("\"access_token\" : \"REDACTED\"") && shown.contains("x-api-key=REDACTED), Bearer token expired, "
                + "Basic authentication is disabled; max_tokens: 4096"), "\(shown)")
    }

    /// The query echoed into every header get-metadata records: each value is stored without it.
    @Test("get-metadata's result keeps no secret a server echoed into its headers")
    func queryEchoedIntoHeaders() async throws {
        let server = try NginxServer.start(extraServerConfig: #"""
            location /m {
                add_header ETag "\"$args\"";
                add_header Cache-Control $args;
                add_header Content-Disposition "attachment; $args";
                add_header Content-Language $args;
                return 200 "hello world";
            }
            """#)
        defer { server.stop() }
        let router = StorageRouter(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let result = try finished(await run(router, JobSpec(kind: .getMetadata, source: "\(server.baseURL)/m?token=HTs3cr3t")))
        let object = try #require(result.object)
        #expect(object.generation == "\"token=REDACTED\"" && object.cacheControl == "token=REDACTED", "\(object)")
        #expect(object.contentDisposition == "attachment; token=REDACTED" && object.contentLanguage == "token=REDACTED", "\(object)")
        #expect(!"\(object)".contains("HTs3cr3t"), "\(object)")
    }

    /// A download's resume point keeps the answer's ETag to pin the version it resumes: one quoting the
    /// request's secret is not kept (the download then starts over, as without a validator).
    @Test("a download's checkpoints keep no validator that quotes the request's secret")
    func queryEchoedIntoTheValidator() async throws {
        let server = try NginxServer.start(extraServerConfig: #"""
            location /big.bin { etag off; add_header ETag "\"$args\""; }
            """#)
        defer { server.stop() }
        try writePatternFile(server.root + "/big.bin", size: 9 << 20)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let recorder = EventRecorder()
        let router = StorageRouter(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        _ = try finished(await run(router, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/big.bin?token=HTs3cr3t",
                                                   destination: directory.file("big.bin")), recorder: recorder))
        let points = recorder.checkpoints.filter { $0.bytesDone > 0 }
        #expect(!points.isEmpty, "a 9 MiB download checkpoints once")
        #expect(!"\(points)".contains("HTs3cr3t"), "\(points)")
    }
}
