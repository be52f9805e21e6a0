import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// No value from the environment, a token command or a manifest can add a header to a request: a bad
/// value is refused with a typed error before anything is sent (nginx logs every request it receives,
/// with the headers an injection would add).
@Suite("Header injection", .onTestThreads)
struct HeaderInjectionTests {
    /// nginx logging each request with the headers an injection would add or change.
    private func startRecordingNginx() throws -> NginxServer {
        try NginxServer.start(
            extraServerConfig: "access_log $ROOT/../headers.log headers;",
            extraHTTPConfig: #"log_format headers '"$request" $status evil=[$http_x_evil] ctype=[$content_type] upload=[$http_x_upload_content_type]';"#)
    }

    /// The recorded request lines; with `atLeast`, waits up to 5 s for that many: nginx writes a request's
    /// line after it has sent the answer, so a client that has the answer may still find no line.
    private func requestLog(_ server: NginxServer, atLeast count: Int = 0) -> [String] {
        let deadline = Date().addingTimeInterval(5)
        while true {
            let text = (try? String(contentsOfFile: server.directory.file("headers.log"), encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").map(String.init)
            if lines.count >= count || Date() >= deadline { return lines }
            usleep(20_000)
        }
    }

    /// Values that would end the header line early (CR LF, a bare CR or LF) or smuggle other control bytes.
    static let injections = ["good-token\r\nX-Evil: 1", "good-token\rX-Evil: 1", "good-token\nX-Evil: 1",
                             "good-token\u{0}X-Evil: 1", "\r\nX-Evil: 1"]

    @Test("a fixed token with a line break is refused as unauthenticated and nothing is sent", arguments: injections)
    func fixedToken(token: String) async throws {
        let server = try startRecordingNginx()
        defer { server.stop() }
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: server.baseURL, accessToken: token, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://bkt/obj.txt")))
        #expect(error.code == .unauthenticated)
        #expect(!error.retryable)
        #expect(error.message.contains("GOOGLE_OAUTH_ACCESS_TOKEN"), "\(error)")
        let shown = "\(error) \(error.cause ?? "")"
        #expect(!shown.contains("good-token") && !shown.contains("X-Evil"), "the token leaked: \(shown)")
        #expect(requestLog(server).isEmpty, "requests were sent: \(requestLog(server))")
    }

    @Test("a token command printing a line break is refused as unauthenticated and nothing is sent", arguments: [
        #"printf 'good-token\r\nX-Evil: 1\n'"#, #"printf 'good-token\rX-Evil: 1'"#, #"printf 'good token'"#,
    ])
    func commandToken(command: String) async throws {
        let server = try startRecordingNginx()
        defer { server.stop() }
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: server.baseURL, tokenCommand: command, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://bkt/obj.txt")))
        #expect(error.code == .unauthenticated)
        #expect(!error.retryable)
        #expect(error.message.contains("JOBCTL_TOKEN_COMMAND"), "\(error)")
        let shown = "\(error) \(error.cause ?? "")"
        #expect(!shown.contains("good") && !shown.contains("X-Evil"), "the token leaked: \(shown)")
        #expect(requestLog(server).isEmpty, "requests were sent: \(requestLog(server))")
    }

    @Test("GOOGLE_OAUTH_ACCESS_TOKEN with a line break stops the worker at start, without printing it")
    func tokenFromEnvironment() throws {
        let error = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment(["GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.secret\r\nX-Evil: 1"],
                                                     localBucketsDirectory: "/tmp/buckets")
        }
        #expect(error?.code == .unauthenticated)
        #expect(error?.message.contains("GOOGLE_OAUTH_ACCESS_TOKEN") == true)
        #expect(error?.message.contains("secret") == false)
        // A valid token (RFC 6750 b64token) is taken as it is.
        let configuration = try StorageConfiguration.fromEnvironment(["GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.a0-B_c~d+e/f=="],
                                                                     localBucketsDirectory: "/tmp/buckets")
        #expect(configuration.accessToken == "ya29.a0-B_c~d+e/f==")
    }

    @Test("a content type with a line break is refused before the upload is sent (HTTP PUT, GCS in one request and in a session)")
    func contentType() async throws {
        let server = try startRecordingNginx()
        defer { server.stop() }
        let metadata = UploadMetadata(contentType: "text/plain\r\nX-Evil: 1")
        let http = HTTPBackend(configuration: StorageConfiguration(connectTimeout: 5))
        let gcs = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: server.baseURL, connectTimeout: 5))
        let sessions = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: server.baseURL, singleRequestLimit: 0, connectTimeout: 5))
        let cases: [(any StorageBackend, String)] = [(http, "\(server.baseURL)/up.txt"), (gcs, "gs://bkt/up.txt"), (sessions, "gs://bkt/up.txt")]
        for (backend, destination) in cases {
            let spec = JobSpec(kind: .uploadData, destination: destination, data: Data("hello".utf8), metadata: metadata)
            let error = try failure(await run(backend, spec))
            #expect(error.code == .invalidArgument, "\(destination): \(error)")
            #expect(!error.retryable)
            #expect(error.message.contains("content type"), "\(error)")
        }
        #expect(requestLog(server).isEmpty, "requests were sent: \(requestLog(server))")
        #expect(!FileManager.default.fileExists(atPath: server.root + "/up.txt"))
    }

    @Test("metadata that GCS serves back as headers (cache control, custom metadata) refuses control characters")
    func metadataServedAsHeaders() async throws {
        let server = try startRecordingNginx()
        defer { server.stop() }
        let gcs = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: server.baseURL, connectTimeout: 5))
        let bad: [UploadMetadata] = [
            UploadMetadata(cacheControl: "no-cache\r\nX-Evil: 1"),
            UploadMetadata(contentDisposition: "inline\nX-Evil: 1"),
            UploadMetadata(customMetadata: ["owner": "ops\r\nX-Evil: 1"]),
            UploadMetadata(customMetadata: ["own\ner": "ops"]),
        ]
        for metadata in bad {
            let spec = JobSpec(kind: .uploadData, destination: "gs://bkt/up.txt", data: Data("hello".utf8), metadata: metadata)
            let error = try failure(await run(gcs, spec))
            #expect(error.code == .invalidArgument, "\(metadata): \(error)")
            #expect(error.message.contains("control character"), "\(error)")
        }
        #expect(requestLog(server).isEmpty, "requests were sent: \(requestLog(server))")
    }

    @Test("the engine refuses any header line holding a control character, whatever built it")
    func engineGuard() async throws {
        let server = try startRecordingNginx()
        defer { server.stop() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: server.root + "/f.txt"))
        let options = StorageConfiguration(connectTimeout: 5).curlOptions
        for header in ["If-Range: \"abc\"\r\nX-Evil: 1", "X-Fine: 1\nX-Evil: 1", "Bad Name: 1", "NoColon"] {
            let request = HTTPRequest(method: "GET", url: "\(server.baseURL)/f.txt", headers: [header])
            do {
                _ = try await CurlEngine.shared.perform(request, control: nil, options: options)
                Issue.record("the header \(header.debugDescription) was sent")
            } catch {
                guard case .failed(let failure) = error else {
                    Issue.record("expected a failure, got \(error)")
                    continue
                }
                #expect(failure.code == .invalidArgument)
                #expect(!failure.message.contains("abc"), "the value leaked: \(failure.message)")
            }
        }
        // A clean request still goes through, and it is the only one nginx saw.
        let fine = try await CurlEngine.shared.perform(HTTPRequest(method: "GET", url: "\(server.baseURL)/f.txt",
                                                                   headers: ["If-None-Match: \"abc\"\t"]),
                                                       control: nil, options: options)
        #expect(fine.status == 200)
        // Sent one after another: once the clean request's line is there, any earlier one's is too.
        let lines = requestLog(server, atLeast: 1)
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.allSatisfy { $0.contains("evil=[-]") })
    }
}
