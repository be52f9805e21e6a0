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
}
