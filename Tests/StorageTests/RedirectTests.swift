import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// Redirects of plain http(s) URLs against real servers: nginx answering `return 302`, the fault proxy
/// answering what nginx will not, and nginx on TLS with certificates made by `openssl` in the test.
@Suite("Redirects of http(s) URLs", .onTestThreads)
struct RedirectTests {
    private func backend(_ environment: [String: String] = [:]) throws -> HTTPBackend {
        var configuration = try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: "/tmp/buckets")
        configuration.connectTimeout = 5
        configuration.stallTimeout = 30
        return HTTPBackend(configuration: configuration)
    }

    /// get-metadata describes what a download of the same URL fetches: a URL that redirects (a signed
    /// URL's front door, a moved file) was downloaded, but its get-metadata failed with "unexpected HTTP
    /// 302", the HEAD not following the redirect the GET follows. Followed as the GET is, an https URL's
    /// HEAD is still not followed to plain http.
    @Test("get-metadata of a URL that redirects describes the file a download of it fetches")
    func metadataFollowsRedirects() async throws {
        let server = try NginxServer.start(extraServerConfig: """
            location /moved { return 302 /x.txt; }
            """)
        defer { server.stop() }
        try Data("twelve bytes".utf8).write(to: URL(fileURLWithPath: server.root + "/x.txt"))
        let backend = try backend()
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/moved", maxSize: 1 << 20)))
        #expect(downloaded.data == Data("twelve bytes".utf8))
        let metadata = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "\(server.baseURL)/moved")))
        #expect(metadata.object?.size == 12, "\(String(describing: metadata.object))")
        #expect(metadata.object?.contentType == "text/plain", "\(String(describing: metadata.object))")

        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let secure = try NginxServer.start(extraServerConfig: """
            location /down { return 302 \(server.baseURL)/x.txt; }
            """, tls: try authority.issueServerCertificate(names: ["IP:127.0.0.1"]))
        defer { secure.stop() }
        func asked() throws -> Int { try server.settledAccessLog().split(separator: "\n").filter { $0.contains("/x.txt ") }.count }
        let before = try asked()
        let error = try failure(await run(try self.backend(["JOBCTL_CA_BUNDLE": authority.certificatePath]),
                                          JobSpec(kind: .getMetadata, source: "\(secure.baseURL)/down")))
        #expect(!error.retryable && error.httpStatus == 302 && error.message.contains("https"), "\(error)")
        #expect(try asked() == before, "the plain-http server was asked: \(server.accessLog)")
    }

    /// A server's refusal quoting the request it was asked, after a redirect that added a token: the
    /// server's text was scrubbed of the job's URL's secrets only, so the redirect's token reached the
    /// error (and the log) where its target was quoted without a scheme (`/echo?token=…`).
    @Test("a server's error quoting a redirect's token does not reach the job's error")
    func redirectTokenInServerTextIsHidden() async throws {
        let server = try NginxServer.start(extraServerConfig: """
            location /redir { return 302 /echo?token=R3DIRS3CRET&x=1; }
            location /echo { default_type text/plain; return 403 "no access for $request_uri"; }
            """)
        defer { server.stop() }
        let error = try failure(await run(try backend(), JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/redir?token=given",
                                                                 maxSize: 1 << 20)))
        #expect(error.httpStatus == 403, "\(error)")
        #expect(error.message.contains("no access for /echo?token=REDACTED&x=1"), "\(error)")
        #expect(!"\(error) \(error.cause ?? "")".contains("R3DIRS3CRET"), "\(error)")
    }

    /// An error status from the server a redirect led to named only the job's URL ("the server answered
    /// 500 for http://front/…"), blaming the server that had only redirected, where a transport failure
    /// there says where the request had gone. It names that server's origin now (not its path).
    @Test("an error status from a redirect's target names the target's origin, not only the job's URL")
    func statusAtRedirectTargetNamesIt() async throws {
        let target = try NginxServer.start(extraServerConfig: """
            location /broken { return 500; }
            location /gone { return 404; }
            """)
        defer { target.stop() }
        let front = try NginxServer.start(extraServerConfig: """
            location /a { return 302 \(target.baseURL)/broken?sig=S3CRET; }
            location /b { return 302 \(target.baseURL)/gone; }
            location /same { return 302 /missing; }
            """)
        defer { front.stop() }
        let origin = "http://127.0.0.1:\(target.port)"
        let broken = try failure(await run(try backend(), JobSpec(kind: .downloadMemory, source: "\(front.baseURL)/a", maxSize: 1 << 20)))
        #expect(broken.httpStatus == 500 && broken.retryable, "\(broken)")
        #expect(broken.message.contains("the answer came from \(origin)"), "\(broken)")
        #expect(!"\(broken)".contains("S3CRET") && !broken.message.contains("/broken"), "\(broken)")
        let gone = try failure(await run(try backend(), JobSpec(kind: .downloadMemory, source: "\(front.baseURL)/b", maxSize: 1 << 20)))
        #expect(gone.code == .objectNotFound && gone.message.contains("the answer came from \(origin)"), "\(gone)")
        // A redirect on the job's own server is no other server's answer.
        let same = try failure(await run(try backend(), JobSpec(kind: .downloadMemory, source: "\(front.baseURL)/same", maxSize: 1 << 20)))
        #expect(same.code == .objectNotFound && !same.message.contains("the answer came from"), "\(same)")
    }

    /// A redirect followed to a server whose answer is not HTTP (no status line: libcurl's "HTTP/0.9",
    /// the same code as a scheme it refuses to follow) is that server's fault, retryable as it is without
    /// the redirect — not "a redirect to a URL that is not followed", which failed the job for good while
    /// blaming a Location that was a valid http URL.
    @Test("a redirect followed to a server whose answer is not HTTP is a retryable server fault, not an unfollowed redirect")
    func redirectToAnswerThatIsNotHTTP() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let target = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(.any, .respond(ProxyMessage(startLine: "SSH-2.0-OpenSSH_9.2", body: Data("x".utf8))), times: .max),
        ])
        defer { target.stop() }
        let front = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(.any, .respond(.response(302, reason: "Found", headers: [ProxyHeader("Location", "\(target.baseURL)/a.bin")])),
                      times: .max),
        ])
        defer { front.stop() }
        let error = try failure(await run(try backend(), JobSpec(kind: .downloadMemory, source: "\(front.baseURL)/a.bin", maxSize: 1 << 20)))
        #expect(target.exchanges.contains { $0.faults.contains { $0.hasPrefix("respond") } }, "the redirect was not followed")
        #expect(error.retryable, "\(error)")
        #expect(error.message.contains("not HTTP") && !error.message.contains("not followed"), "\(error)")
    }

    /// A failure at the server a redirect led to names that server: a certificate for another name there
    /// was reported as "the server's TLS certificate is not valid for" the job's own host and port — a
    /// plain-http server that has no certificate at all.
    @Test("a certificate refused at a redirect's target names the target, not the job's server")
    func certificateAtRedirectTargetNamesIt() async throws {
        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let secure = try NginxServer.start(tls: try authority.issueServerCertificate(names: ["DNS:example.test"]))
        defer { secure.stop() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: secure.root + "/x.txt"))
        let front = try NginxServer.start(extraServerConfig: """
            location /moved { return 302 \(secure.baseURL)/x.txt?X-Goog-Signature=SECRETSIG; }
            """)
        defer { front.stop() }
        let error = try failure(await run(try backend(["JOBCTL_CA_BUNDLE": authority.certificatePath]),
                                          JobSpec(kind: .downloadMemory, source: "\(front.baseURL)/moved", maxSize: 1 << 20)))
        #expect(!error.retryable && error.message.contains("not valid for"), "\(error)")
        #expect(error.message.contains("127.0.0.1:\(secure.port)"), "\(error)")
        #expect(!error.message.contains("127.0.0.1:\(front.port)") || error.message.contains("redirect"), "\(error)")
        #expect(!"\(error) \(error.cause ?? "")".contains("SECRETSIG"), "\(error)")
    }
}
