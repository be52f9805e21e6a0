import Foundation
import Testing
import TestSupport

/// Secrets a job's request carries that come back in what the server or libcurl says: a server's error
/// text quoting the `Authorization` header or the signed URL as it was requested (a path and query, no
/// scheme), libcurl's error naming a proxy it cannot read with the proxy's password. None is printed by
/// the worker or any command, nor stored in the log (the log keeps the job's own URL, and nothing else).
@Suite("secrets quoted back", .onTestThreads) struct QuotedSecretTests {
    static let marker = "S3CR3T"

    /// Every command that shows a job's error, and the log's own copy of it (`--show-secrets` prints
    /// what is stored).
    func outputs(of id: String, in workspace: CLIWorkspace) throws -> [(command: String, text: String)] {
        var outputs: [(String, String)] = []
        for arguments in [["show", id], ["show", id, "--json"], ["history", id], ["history", id, "--json"],
                          ["audit", "--json"], ["list", "--json"]] {
            let output = try workspace.jobctl(arguments)
            outputs.append((arguments.joined(separator: " "), output.stdout + output.stderr))
        }
        return outputs
    }

    /// A GCS endpoint whose 401 text quotes the `Authorization` header it was sent (as a misconfigured
    /// gateway or a debugging proxy does): the token is neither printed nor stored.
    @Test func anEchoedBearerTokenIsNotPrintedOrStored() throws {
        let nginx = try NginxServer.start(extraServerConfig: """
            location /storage/ { default_type text/plain; return 401 "invalid credentials: $http_authorization"; }
            """)
        defer { nginx.stop() }
        let workspace = try CLIWorkspace("quoted-bearer")
        defer { workspace.directory.remove() }
        let id = try #require(try workspace.submit("- {kind: download-memory, source: \"gs://bkt/a.txt\", max_attempts: 1}\n").first)
        let token = "ya29.\(Self.marker)-bearer"
        let worker = try workspace.jobctl(["worker", "--drain", "--log-format", "json"],
                                          environment: ["GOOGLE_OAUTH_ACCESS_TOKEN": token, "STORAGE_EMULATOR_HOST": nginx.baseURL,
                                                        "HOME": workspace.directory.path])
        #expect(worker.status == 2, "\(worker.stderr)")
        let shown = try workspace.jobctl(["show", id])
        // The server's words are kept, the token in them is not.
        #expect(shown.stdout.contains("invalid credentials: Bearer REDACTED"), "\(shown.stdout)")
        let stored = try workspace.jobctl(["history", id, "--json", "--show-secrets"])
        #expect(stored.stdout.contains("invalid credentials: Bearer REDACTED"), "\(stored.stdout)")
        for (command, text) in try outputs(of: id, in: workspace) + [("worker", worker.stdout + worker.stderr),
                                                                      ("history --show-secrets", stored.stdout)] {
            #expect(!text.contains(Self.marker), "jobctl \(command) printed the token:\n\(text)")
        }
    }

    /// A server whose 403 text quotes the request target it refused (`$request_uri`: the path and the
    /// signed query, no scheme, so no URL for the URL redaction to find): the signature is not printed.
    @Test func anEchoedSignedQueryIsNotPrinted() throws {
        let nginx = try NginxServer.start(extraServerConfig: """
            location /signed/ { default_type text/plain; return 403 "signature does not match for $request_uri"; }
            """)
        defer { nginx.stop() }
        let workspace = try CLIWorkspace("quoted-signature")
        defer { workspace.directory.remove() }
        let url = "\(nginx.baseURL)/signed/a.bin?X-Goog-Expires=60&X-Goog-Signature=\(Self.marker)-sig&alt=media"
        let id = try #require(try workspace.submit("- {kind: download-memory, source: \"\(url)\", max_attempts: 1}\n").first)
        let worker = try workspace.jobctl(["worker", "--drain"], environment: ["HOME": workspace.directory.path])
        #expect(worker.status == 2, "\(worker.stderr)")
        let shown = try workspace.jobctl(["show", id])
        #expect(shown.stdout.contains("signature does not match for /signed/a.bin?X-Goog-Expires=60&X-Goog-Signature=REDACTED&alt=media"),
                "\(shown.stdout)")
        for (command, text) in try outputs(of: id, in: workspace) + [("worker", worker.stdout + worker.stderr)] {
            #expect(!text.contains(Self.marker), "jobctl \(command) printed the signature:\n\(text)")
        }
    }

    /// A proxy variable libcurl cannot read (`user:password@host:99999`, written without a scheme as
    /// libcurl allows): libcurl's error quoted it whole. Such a value now stops the worker at start
    /// (`ProxyEnvironment.problem`), its `worker_failed` line naming it; its password is neither printed
    /// nor stored, however short.
    @Test(arguments: [("carol:\(marker)-proxy@127.0.0.1:99999", marker), ("http://carol:\(marker)-proxy@[::1", marker),
                      ("carol:S3c@127.0.0.1:99999", "S3c")])
    func anUnreadableProxyIsNotQuotedWithItsPassword(_ proxy: String, _ secret: String) throws {
        let deadServer = ClosedLoopbackPort()
        let workspace = try CLIWorkspace("quoted-proxy")
        defer { workspace.directory.remove() }
        let id = try #require(try workspace.submit(
            "- {kind: download-memory, source: \"http://127.0.0.1:\(deadServer.port)/a.txt\", max_attempts: 1}\n").first)
        var environment = Dictionary(uniqueKeysWithValues: ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                                                            "no_proxy", "NO_PROXY"].map { ($0, "") })
        environment["http_proxy"] = proxy
        environment["HOME"] = workspace.directory.path
        let worker = try workspace.jobctl(["worker", "--drain", "--log-format", "json"], environment: environment)
        #expect(worker.status == 1, "\(worker.stderr)")
        #expect(worker.stderr.contains("worker_failed") && worker.stderr.contains("carol:REDACTED@"), "\(worker.stderr)")
        let shown = try workspace.jobctl(["show", id])
        #expect(shown.stdout.contains("queued"), "\(shown.stdout)")
        let stored = try workspace.jobctl(["history", id, "--json", "--show-secrets"])
        for (command, text) in try outputs(of: id, in: workspace) + [("worker", worker.stdout + worker.stderr),
                                                                      ("history --show-secrets", stored.stdout)] {
            #expect(!text.contains(secret), "jobctl \(command) printed the proxy's password:\n\(text)")
        }
    }
}
