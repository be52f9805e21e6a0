import Foundation
import Testing
import TestSupport

/// A proxy from the environment that cannot be reached is named in the job's error (its password
/// redacted), not taken for the server.
@Suite("proxy errors", .onTestThreads) struct ProxyErrorTests {
    /// Submits one download from a server that is not there into `workspace`, and the environment that
    /// sends it through `proxy` (`http_proxy`; every other proxy variable empty): the job's ids and that environment.
    static func jobThroughProxy(_ workspace: CLIWorkspace, _ proxy: String) throws -> (ids: [String], environment: [String: String]) {
        let deadServer = ClosedLoopbackPort()
        let ids = try workspace.submit(
            "- {kind: download-memory, source: \"http://127.0.0.1:\(deadServer.port)/a.txt\", max_attempts: 1}\n")
        var environment = Dictionary(uniqueKeysWithValues: ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                                                            "no_proxy", "NO_PROXY"].map { ($0, "") })
        environment["http_proxy"] = proxy
        environment["HOME"] = workspace.directory.path
        return (ids, environment)
    }

    @Test("a dead proxy is named, with its variable and without its password; the server is not blamed")
    func deadProxyIsNamed() throws {
        let deadProxy = ClosedLoopbackPort()
        let workspace = try CLIWorkspace("proxy-dead")
        defer { workspace.directory.remove() }
        let (ids, environment) = try Self.jobThroughProxy(workspace, "http://carol:pr0xy-s3cret@\(deadProxy.hostAndPort)")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 2, "\(worker.stderr)")
        let shown = try workspace.jobctl(["show", try #require(ids.first)])
        let expected = "could not connect to the proxy http://carol:REDACTED@\(deadProxy.hostAndPort) (from $http_proxy)"
        #expect(shown.stdout.contains(expected), "\(shown.stdout)")
        #expect(!shown.stdout.contains("could not connect to the server"), "\(shown.stdout)")
        for output in [worker.stdout, worker.stderr, shown.stdout, shown.stderr] { #expect(!output.contains("pr0xy-s3cret")) }
    }

    /// A password with `/`, `?` or `#` written raw, as people paste them: RFC 3986 ends a URL's
    /// authority at the first of those, which left the rest of the password in what was shown — and
    /// libcurl, which ends the proxy's host there too, failed every job as a proxy name it could not
    /// resolve. The worker and `config` refuse it at start now, saying to percent-encode it; encoded, the
    /// proxy is used. The password is hidden everywhere either way.
    @Test("a proxy password holding / ? or # raw is refused at start, hidden; percent-encoded it is used, and hidden in the job's error",
          arguments: [("pr0/xy-s3cr3t", "pr0%2Fxy-s3cr3t"), ("pr0?xy-s3cr3t", "pr0%3Fxy-s3cr3t"), ("pr0#xy-s3cr3t", "pr0%23xy-s3cr3t")])
    func delimitersInThePassword(raw: String, encoded: String) throws {
        let deadProxy = ClosedLoopbackPort()
        let workspace = try CLIWorkspace("proxy-delimiters")
        defer { workspace.directory.remove() }
        let (ids, environment) = try Self.jobThroughProxy(workspace, "http://carol:\(raw)@\(deadProxy.hostAndPort)")
        let refused = try workspace.jobctl(["worker", "--drain", "-v"], environment: environment)
        let named = "$http_proxy is 'http://carol:REDACTED@\(deadProxy.hostAndPort)'"
        #expect(refused.status == 1 && refused.stderr.contains(named) && refused.stderr.contains("percent-encode it there (%2F, %3F, %23)"),
                "exit \(refused.status): \(refused.stderr)")
        // --json: the table wraps a long value over lines; both forms are checked for the password below.
        let config = try workspace.jobctl(["config"], environment: environment)
        #expect(config.status == 1 && config.stderr.contains(named), "exit \(config.status): \(config.stderr)")
        let configJSON = try workspace.jobctl(["config", "--json"], environment: environment)
        #expect(configJSON.stdout.contains("http:\\/\\/carol:REDACTED@\(deadProxy.hostAndPort)")
                    || configJSON.stdout.contains("http://carol:REDACTED@\(deadProxy.hostAndPort)"), "\(configJSON.stdout)")
        var encodedEnvironment = environment
        encodedEnvironment["http_proxy"] = "http://carol:\(encoded)@\(deadProxy.hostAndPort)"
        let worker = try workspace.jobctl(["worker", "--drain", "-v"], environment: encodedEnvironment)
        #expect(worker.status == 2, "\(worker.stderr)")
        #expect(worker.stderr.contains("could not connect to the proxy http://carol:REDACTED@\(deadProxy.hostAndPort)"), "\(worker.stderr)")
        let shown = try workspace.jobctl(["show", "--json", try #require(ids.first)])
        for output in [refused.stderr, config.stdout, config.stderr, configJSON.stdout, worker.stdout, worker.stderr, shown.stdout, shown.stderr] {
            #expect(!output.contains("xy-s3cr3t"), "\(output)")
        }
    }
    /// A proxy that answers 407 quoting what it was sent — the request's head, `Proxy-Authorization:
    /// Basic …` included, or "bad credentials user:password" — put the proxy's password, whole or in
    /// base64, into the job's error, the worker's log and every output. Both forms are hidden now.
    @Test("a proxy's 407 quoting its credentials, plainly or in Basic form, shows neither")
    func proxyAnswerQuotingItsCredentials() throws {
        let server = ClosedLoopbackPort()
        let proxy = try FaultProxy(upstreamPort: server.port, chooser: { head, _, _ in
            let body = "bad credentials puser:pPaSsW0rd; you sent Proxy-Authorization: \(head.header("Proxy-Authorization") ?? "none")"
            return [.respond(.response(407, reason: "Proxy Authentication Required", body: Data(body.utf8)))]
        })
        defer { proxy.stop() }
        let workspace = try CLIWorkspace("proxy-407")
        defer { workspace.directory.remove() }
        let (ids, environment) = try Self.jobThroughProxy(workspace, "http://puser:pPaSsW0rd@127.0.0.1:\(proxy.port)")
        let worker = try workspace.jobctl(["worker", "--drain", "-v"], environment: environment)
        #expect(worker.status == 2, "\(worker.stderr)")
        let sent = proxy.exchanges.compactMap { $0.request.header("Proxy-Authorization") }
        #expect(sent.contains("Basic " + Data("puser:pPaSsW0rd".utf8).base64EncodedString()), "\(sent)")
        let id = try #require(ids.first)
        let shown = try workspace.jobctl(["show", id])
        #expect(shown.stdout.contains("407"), "\(shown.stdout)")
        #expect(shown.stdout.contains("bad credentials puser:REDACTED"), "\(shown.stdout)")
        // The proxy is named, with its variable: it read "unexpected HTTP 407", as if the server had said it.
        #expect(shown.stdout.contains("the proxy http://puser:REDACTED@127.0.0.1:\(proxy.port) (from $http_proxy) asked for credentials (HTTP 407)"),
                "\(shown.stdout)")
        // Its advice reads as written: the scrubber took `http://USER:PASSWORD@HOST:PORT` for a URL and
        // printed `USER:REDACTED@`, hiding what to write.
        #expect(shown.stdout.contains("give them in the variable's URL (http://<user>:<password>@<host>:<port>)"), "\(shown.stdout)")
        #expect(!shown.stdout.contains("USER:REDACTED"), "\(shown.stdout)")
        let outputs = [worker.stdout, worker.stderr, shown.stdout, try workspace.jobctl(["show", "--json", id]).stdout,
                       try workspace.jobctl(["history", id]).stdout, try workspace.jobctl(["audit", "--csv"]).stdout]
        for output in outputs {
            #expect(!output.contains("pPaSsW0rd") && !output.contains("cHVzZXI6cFBhU3NXMHJk"), "\(output)")
        }
    }

    /// The advice for a libpq key/value string names the URL to write; its placeholder password read
    /// `postgresql://USER:REDACTED@HOST:PORT/DBNAME`, the scrubber taking the placeholder for a URL.
    @Test("advice naming a URL with credentials reads as written, the real password still hidden")
    func placeholderURLsReadAsWritten() throws {
        let workspace = try CLIWorkspace("advice-placeholder")
        defer { workspace.directory.remove() }
        let listed = try runProcess(PackagePaths.jobctlBinary, ["--db", "host=127.0.0.1 password=kv-s3cr3t", "list"],
                                    currentDirectory: workspace.directory.path)
        #expect(listed.status == 64, "\(listed.stderr)")
        #expect(listed.stderr.contains("takes PostgreSQL as a URL: postgresql://<user>:<password>@<host>:<port>/<dbname>?sslmode="),
                "\(listed.stderr)")
        #expect(!listed.stderr.contains("kv-s3cr3t") && !listed.stderr.contains("USER:REDACTED"), "\(listed.stderr)")
    }

    /// An `https_proxy` written `https://` for a proxy that speaks plain http: OpenSSL's "wrong version
    /// number" read "the server did not answer in TLS: the https URL may name a plain-http port", blaming
    /// the server that was never reached.
    @Test("no TLS answer through a proxy names the proxy, not the server alone")
    func noTLSThroughAProxyNamesIt() throws {
        let server = ClosedLoopbackPort()
        // nginx on a plain-http port answers a TLS hello with its 400 at once.
        let proxy = try NginxServer.start()
        defer { proxy.stop() }
        let workspace = try CLIWorkspace("proxy-no-tls")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("- {kind: download-memory, source: \"https://127.0.0.1:\(server.port)/a.txt\", max_attempts: 1}\n")
        var environment = Dictionary(uniqueKeysWithValues: ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                                                            "no_proxy", "NO_PROXY"].map { ($0, "") })
        environment["https_proxy"] = "https://puser:pPaSsW0rd@127.0.0.1:\(proxy.port)"
        environment["HOME"] = workspace.directory.path
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 2, "\(worker.stderr)")
        let shown = try workspace.jobctl(["show", try #require(ids.first)])
        #expect(shown.stdout.contains("no TLS answer came through the proxy https://puser:REDACTED@127.0.0.1:\(proxy.port) (from $https_proxy)"),
                "\(shown.stdout)")
        #expect(!shown.stdout.contains("pPaSsW0rd") && !worker.stderr.contains("pPaSsW0rd"))
    }
}
