import Foundation
import Testing
import TestSupport

/// The oldest TLS a transfer speaks is jobctl's own choice, not the machine's OpenSSL configuration's.
@Suite("TLS version floor", .onTestThreads) struct TLSVersionFloorTests {
    /// OpenSSL's configuration (`OPENSSL_CONF`, a system-wide policy such as a LEGACY crypto policy) decided
    /// which TLS versions libcurl accepted: where it allowed them, an https download from a server that
    /// speaks only TLS 1.0 and 1.1 (deprecated by RFC 8996) succeeded. It fails at once instead, saying why;
    /// under the default configuration it failed as "the connection failed mid-transfer", retried until
    /// the attempts ran out.
    @Test("a server speaking only TLS 1.0 or 1.1 is refused whatever OpenSSL's configuration allows, at once and saying why")
    func oldTLSRefused() throws {
        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let server = try NginxServer.start(extraServerConfig: """
            ssl_protocols TLSv1 TLSv1.1;
            ssl_ciphers DEFAULT:@SECLEVEL=0;
            """, tls: try authority.issueServerCertificate(names: ["IP:127.0.0.1"]))
        defer { server.stop() }
        try Data("x".utf8).write(to: URL(fileURLWithPath: server.root + "/x.txt"))
        let workspace = try CLIWorkspace("tls-floor")
        defer { workspace.directory.remove() }
        // A configuration that lets OpenSSL speak TLS 1.0 (as some distributions' legacy policies do).
        let permissive = workspace.directory.file("permissive-openssl.cnf")
        try """
        openssl_conf = jobctl_test
        [jobctl_test]
        ssl_conf = jobctl_ssl
        [jobctl_ssl]
        system_default = jobctl_default
        [jobctl_default]
        MinProtocol = TLSv1
        CipherString = DEFAULT:@SECLEVEL=0

        """.write(toFile: permissive, atomically: true, encoding: .utf8)
        // The server does speak TLS 1.0 to a client that accepts it.
        let old = try runProcess("/usr/bin/curl", ["-sS", "--noproxy", "*", "--cacert", authority.certificatePath, "--tls-max", "1.1",
                                                   "\(server.baseURL)/x.txt"],
                                 environment: ["OPENSSL_CONF": permissive])
        #expect(old.status == 0 && old.stdout == "x", "curl: \(old.status) \(old.stderr)")
        for configuration in [permissive, nil] {
            let ids = try workspace.submit("- {kind: download-memory, source: \"\(server.baseURL)/x.txt\"}\n")
            var environment = ["JOBCTL_CA_BUNDLE": authority.certificatePath]
            if let configuration { environment["OPENSSL_CONF"] = configuration }
            let run = try workspace.jobctl(["worker", "--drain"], environment: environment)
            let job = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
            #expect(job["state"] as? String == "failed" && job["attempts"] as? Int == 1, "\(job) \(run.stderr)")
            let message = (job["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(message.contains("TLS 1.2"), "\(job)")
        }
    }
}
