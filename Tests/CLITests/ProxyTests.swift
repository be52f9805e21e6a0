import Foundation
import Testing
import TestSupport

/// The proxies libcurl takes from the environment (`https_proxy`, `HTTPS_PROXY`, `ALL_PROXY`): a worker
/// whose proxy refuses the tunnel says so, and does not spend its attempts on a refusal that will not change.
@Suite("proxies from the environment", .onTestThreads) struct ProxyTests {
    @Test("a proxy refusing the CONNECT fails the job at once, naming the proxy and its answer")
    func refusedTunnel() throws {
        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let server = try NginxServer.start(tls: try authority.issueServerCertificate(names: ["IP:127.0.0.1"]))
        defer { server.stop() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: server.root + "/x.txt"))
        // nginx is no forward proxy: it answers a CONNECT with 400.
        let proxy = try NginxServer.start()
        defer { proxy.stop() }
        let workspace = try CLIWorkspace("proxy")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("- {kind: download-memory, source: \"\(server.baseURL)/x.txt\"}\n")
        let run = try workspace.jobctl(["worker", "--drain"],
                                       environment: ["JOBCTL_CA_BUNDLE": authority.certificatePath, "HTTPS_PROXY": proxy.baseURL,
                                                     "https_proxy": "", "ALL_PROXY": "", "all_proxy": "", "NO_PROXY": "", "no_proxy": ""])
        #expect(run.status == 2, "\(run.stderr)")
        let job = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        #expect(job["state"] as? String == "failed" && job["attempts"] as? Int == 1, "\(job)")
        let message = try #require((job["error"] as? [String: Any])?["message"] as? String, "\(job)")
        #expect(message.contains("proxy refused") && message.contains("HTTP 400") && message.contains("HTTPS_PROXY"), "\(message)")
        #expect(!proxy.accessLogLines(atLeast: 1, matching: { $0.contains("CONNECT") }).isEmpty, "\(proxy.accessLog)")
        #expect(!(try server.settledAccessLog()).contains("GET /x.txt"))
    }
}
