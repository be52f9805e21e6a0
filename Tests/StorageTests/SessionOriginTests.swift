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
