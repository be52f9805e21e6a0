import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// The bearer token goes to the configured endpoint only. An upload session URI comes from the server's
/// `Location` header (and later from the log): one on another origin — a misconfigured emulator or proxy,
/// a tampered log — gets the object's bytes, as the server asked, but never the account's token (the
/// session URI is the session's own credential).
@Suite("the bearer token stays on the endpoint", .onTestThreads)
struct SessionOriginTests {
    @Test("a session on another origin is used without the token; requests to the endpoint carry it")
    func sessionElsewhere() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        // `elsewhere` is a second way to the same emulator: another port, so another origin.
        let elsewhere = try FaultProxy(upstreamPort: server.port)
        defer { elsewhere.stop() }
        let endpoint = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", predicate: { $0.target.contains("uploadType=resumable") }),
                      .rewriteResponse { _, response in
                          guard let location = response.header("Location"), let url = URLComponents(string: location) else { return }
                          var moved = url
                          moved.port = Int(elsewhere.port)
                          response.setHeader("Location", moved.string)
                      }, times: 10),
        ])
        defer { endpoint.stop() }
        var configuration = emulatorConfiguration(server, through: endpoint)
        configuration.accessToken = "ya29.test-token-for-the-endpoint-only"
        configuration.singleRequestLimit = 0   // every upload in a resumable session
        let backend = GCSBackend(configuration: configuration)
        let payload = patternData(600_000, seed: 91)
        let result = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/s.bin", data: payload)))
        #expect(result.crc32c == hashes(payload).crc32c)

        let atEndpoint = endpoint.exchanges
        let atElsewhere = elsewhere.exchanges
        #expect(!atElsewhere.isEmpty && atElsewhere.allSatisfy { $0.request.method == "PUT" }, "\(atElsewhere.map(\.request.startLine))")
        #expect(atElsewhere.allSatisfy { $0.request.header("Authorization") == nil }, "the token went to the session's origin")
        #expect(!atEndpoint.isEmpty && atEndpoint.allSatisfy { $0.request.header("Authorization") == "Bearer ya29.test-token-for-the-endpoint-only" })
        // The object is whole (read back through the endpoint).
        let back = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/s.bin", maxSize: 1 << 20)))
        #expect(back.data == payload)
    }

    /// The session URI is the session-start answer's `Location`, which HTTP lets be a relative reference
    /// (RFC 9110 §10.2.2: resolved against the request's URL). Taken as it came, a relative one was handed to
    /// libcurl as a URL and the upload failed for good as `invalidArgument` ("the URL cannot be fetched"),
    /// blaming the job, with the unusable URI recorded as the job's checkpoint; a Location on another scheme
    /// (ftp://, file://) or none at all failed the same way. A relative one is now resolved; anything that
    /// is no http(s) URL is refused where it arrives, as the server's fault, and never becomes a checkpoint.
    @Test("a session Location relative to the endpoint is resolved; one that is no http(s) URL fails as the server's fault", arguments: [
        "relative", "scheme-relative", "ftp", "file", "garbage", "control", "space", "tab", "DEL", "non-ASCII", "backslash",
    ])
    func sessionLocationForms(form: String) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let endpoint = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "POST", predicate: { $0.target.contains("uploadType=resumable") }),
                      .rewriteResponse { _, response in
                          guard let location = response.header("Location"), let url = URLComponents(string: location),
                                let query = url.percentEncodedQuery else { return }
                          let pathAndQuery = url.percentEncodedPath + "?" + query
                          let moved = switch form {
                          case "relative": pathAndQuery
                          case "scheme-relative": "//\(url.host ?? ""):\(url.port ?? 80)" + pathAndQuery
                          case "ftp": "ftp://\(url.host ?? ""):\(url.port ?? 21)" + pathAndQuery
                          case "file": "file://" + pathAndQuery
                          // Characters no URI holds, in the session's query (its credential): libcurl refused the first four
                          // as the job's URL, and the checkpoint holding it failed every retry.
                          case "control", "space", "tab", "DEL", "non-ASCII", "backslash":
                              "http://\(url.host ?? ""):\(url.port ?? 80)" + url.percentEncodedPath + "?"
                                  + ["control": "\u{01}", "space": " ", "tab": "\t", "DEL": "\u{7F}", "non-ASCII": "é", "backslash": "\\"][form]!
                                  + query
                          default: "http://[not a host" + pathAndQuery
                          }
                          response.setHeader("Location", moved)
                      }, times: 10),
        ])
        defer { endpoint.stop() }
        var configuration = emulatorConfiguration(server, through: endpoint)
        configuration.singleRequestLimit = 0   // every upload in a resumable session
        let backend = GCSBackend(configuration: configuration)
        let payload = patternData(600_000, seed: 92)
        let recorder = EventRecorder()
        let outcome = await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/l.bin", data: payload), recorder: recorder)
        let sessions = recorder.checkpoints.compactMap { point -> String? in
            if case .upload(let uri, _, _, _) = point { return uri }
            return nil
        }
        if form == "relative" || form == "scheme-relative" {
            let result = try finished(outcome)
            #expect(result.crc32c == hashes(payload).crc32c)
            #expect(!sessions.isEmpty && sessions.allSatisfy { $0.hasPrefix(endpoint.baseURL + "/") }, "\(sessions)")
            let back = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/l.bin", maxSize: 1 << 20)))
            #expect(back.data == payload)
        } else {
            let error = try failure(outcome)
            #expect(error.code == .unknown && !error.retryable, "\(error)")
            #expect(error.message.contains("upload session") && error.message.contains("Location"), "\(error.message)")
            #expect(sessions.isEmpty, "an unusable session URI became a checkpoint: \(sessions)")
            #expect(!endpoint.exchanges.contains { $0.request.method == "PUT" })
        }
    }

    /// A session URI read back from the log that is no http(s) URL — recorded before such a Location was
    /// refused where it arrives (an attempt whose first PUT then failed, having sent nothing), or an edited
    /// log — is not used: the upload starts a session of its own. It failed for good as `invalidArgument`
    /// at the status query, at every attempt, as the job's own URL would.
    @Test("a resume point's session URI that is no http(s) URL is not used; a new session stores the object", arguments: [
        "/upload/storage/v1/b/test-bucket/o?uploadType=resumable&name=r.bin&upload_id=OLD",
        "ftp://127.0.0.1:1/upload?upload_id=OLD",
        "http://[not a host/upload?upload_id=OLD",
        // Written to the log from a Location not written as a URI, before such a Location was refused where it arrives.
        "http://127.0.0.1:1/upload?upload_id=OLD\u{01}", "http://127.0.0.1:1/upload?upload_id=OLD X", "http://127.0.0.1:1/upload?upload_id=OLD\u{7F}",
        "http://127.0.0.1:1/upload?upload_id=OLDé",
    ])
    func unusableSessionInTheLogIsNotUsed(recorded: String) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let endpoint = try FaultProxy(upstreamPort: server.port)
        defer { endpoint.stop() }
        var configuration = emulatorConfiguration(server, through: endpoint)
        configuration.singleRequestLimit = 0
        let payload = patternData(300_000, seed: 93)
        let resume = ResumePoint.upload(sessionURI: recorded, confirmedOffset: 0, total: Int64(payload.count), source: nil)
        let result = try finished(await run(GCSBackend(configuration: configuration),
                                            JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/r.bin", data: payload), resume: resume))
        #expect(result.crc32c == hashes(payload).crc32c)
        let exchanges = endpoint.exchanges
        #expect(exchanges.filter { $0.request.method == "POST" }.count == 1, "\(exchanges.map(\.request.startLine))")
        #expect(!exchanges.contains { $0.request.target.contains("upload_id=OLD") })
    }

    @Test("origins compare scheme, host and port, the default port filled in", arguments: [
        ("http://127.0.0.1:8080/a", "http://127.0.0.1:8080", true), ("https://storage.googleapis.com/upload?x", "https://storage.googleapis.com", true),
        ("https://storage.googleapis.com:443/u", "https://storage.googleapis.com", true), ("HTTPS://Storage.GoogleAPIs.com/u", "https://storage.googleapis.com", true),
        ("http://storage.googleapis.com/u", "https://storage.googleapis.com", false), ("https://evil.example/u", "https://storage.googleapis.com", false),
        ("http://127.0.0.1:8081/a", "http://127.0.0.1:8080", false), ("not a url", "http://127.0.0.1:8080", false),
    ])
    func origins(_ url: String, _ endpoint: String, _ same: Bool) {
        #expect((GCSBackend.origin(of: url) == GCSBackend.origin(of: endpoint)) == same, "\(url) vs \(endpoint)")
    }
}
