import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import TestSupport

/// The configuration file and `jobctl config`: precedence flag > environment > file > default.
@Suite("configuration file", .onTestThreads) struct ConfigCommandTests {
    /// Runs the binary without the workspace's `--db`, with exactly `environment` added (and no
    /// configuration from the machine: XDG_CONFIG_HOME points into the workspace).
    static func run(_ workspace: CLIWorkspace, _ arguments: [String], environment: [String: String] = [:]) throws -> ProcessOutput {
        var env = ["NO_COLOR": "1", "XDG_CONFIG_HOME": workspace.directory.file("xdg"), "JOBCTL_DB": "", "JOBCTL_CONFIG": ""]
        env.merge(environment) { _, new in new }
        return try runProcess(PackagePaths.jobctlBinary, arguments, environment: env, currentDirectory: workspace.directory.path)
    }

    /// The text table's cells by key, each cell's wrapped lines joined and its spaces left out (a cell
    /// wraps at spaces, or within a word longer than its column): setting (key and flag or variable),
    /// value, source.
    static func textTable(_ stdout: String) -> [String: [String]] {
        let lines = stdout.split(separator: "\n").map(String.init)
        guard let header = lines.first, let value = header.range(of: "VALUE"), let source = header.range(of: "SOURCE") else { return [:] }
        let starts = [0, header.distance(from: header.startIndex, to: value.lowerBound), header.distance(from: header.startIndex, to: source.lowerBound)]
        var rows: [[String]] = []
        for line in lines.dropFirst() where !line.hasPrefix("files: ") && line != "no configuration file" {
            let cells = starts.indices.map { index in
                let text = Array(line)
                let end = index + 1 < starts.count ? min(starts[index + 1], text.count) : text.count
                return starts[index] < end ? String(text[starts[index]..<end]).replacingOccurrences(of: " ", with: "") : ""
            }
            if line.first == " ", !rows.isEmpty {
                for index in cells.indices { rows[rows.count - 1][index] += cells[index] }
            } else {
                rows.append(cells)
            }
        }
        return Dictionary(rows.map { row in (String(row[0].prefix { $0 != "(" }), row) }) { first, _ in first }
    }

    static func settings(_ output: ProcessOutput) throws -> [String: [String: String]] {
        let object = try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any], "\(output.stderr)")
        let rows = try #require(object["settings"] as? [[String: String]])
        return Dictionary(uniqueKeysWithValues: rows.compactMap { row in row["key"].map { ($0, row) } })
    }

    @Test("flag > environment > file > default, shown by `jobctl config --json` with secrets redacted")
    func precedence() throws {
        let workspace = try CLIWorkspace("config")
        defer { workspace.directory.remove() }
        let file = try workspace.write("xdg/jobctl/config.yaml", """
            # the user's file
            db: postgres://app:hunter2@127.0.0.1/jobs
            concurrency: 12
            queue: [media, mail]
            stall_timeout: 5m
            token_command: fetch-token --secret s3cr3t
            """)
        let fromFile = try Self.settings(try Self.run(workspace, ["config", "--json"]))
        #expect(fromFile["db"]?["value"] == "postgres://app:REDACTED@127.0.0.1/jobs" && fromFile["db"]?["source"] == "\(file):2:5")
        #expect(fromFile["concurrency"]?["value"] == "12" && fromFile["concurrency"]?["source"] == "\(file):3:14")
        #expect(fromFile["queue"]?["value"] == "media,mail")
        #expect(fromFile["stall_timeout"]?["value"] == "5m" && fromFile["stall_timeout"]?["variable"] == "JOBCTL_STALL_TIMEOUT")
        #expect(fromFile["token_command"]?["value"] == "REDACTED")
        #expect(fromFile["lease"]?["value"] == "30s" && fromFile["lease"]?["source"] == "default")
        let text = try Self.run(workspace, ["config"])
        #expect(!text.stdout.contains("hunter2") && !text.stdout.contains("s3cr3t") && text.stdout.contains("files: \(file)"))

        let fromEnvironment = try Self.settings(try Self.run(workspace, ["config", "--json"],
                                                              environment: ["JOBCTL_DB": "env.db", "JOBCTL_STALL_TIMEOUT": "90s",
                                                                            "JOBCTL_MIN_RATE": "512"]))
        #expect(fromEnvironment["db"]?["value"] == "env.db" && fromEnvironment["db"]?["source"] == "environment ($JOBCTL_DB)")
        #expect(fromEnvironment["stall_timeout"]?["value"] == "90s")
        #expect(fromEnvironment["min_rate"]?["value"] == "512" && fromEnvironment["min_rate"]?["source"] == "environment ($JOBCTL_MIN_RATE)")
        #expect(fromFile["min_rate"]?["value"] == "1KiB/s" && fromFile["min_rate"]?["source"] == "default")
        let fromFlag = try Self.settings(try Self.run(workspace, ["config", "--json", "--db", "flag.db"], environment: ["JOBCTL_DB": "env.db"]))
        #expect(fromFlag["db"]?["value"] == "flag.db" && fromFlag["db"]?["source"] == "flag (--db)")

        // --config (and $JOBCTL_CONFIG) name the one file read instead.
        let other = try workspace.write("other.yaml", "concurrency: 3\n")
        #expect(try Self.settings(try Self.run(workspace, ["--config", other, "config", "--json"]))["concurrency"]?["value"] == "3")
        let viaEnvironment = try Self.settings(try Self.run(workspace, ["config", "--json"], environment: ["JOBCTL_CONFIG": other]))
        #expect(viaEnvironment["concurrency"]?["source"] == "\(other):1:14" && viaEnvironment["db"]?["source"] == "default")
    }

    /// Without JOBCTL_CA_BUNDLE, SSL_CERT_FILE and SSL_CERT_DIR choose the CAs a worker trusts: the row
    /// shows them, not "the system's CAs"; JOBCTL_CA_BUNDLE (from the environment or the file) still wins.
    @Test("ca_bundle shows SSL_CERT_FILE / SSL_CERT_DIR when they choose the CAs")
    func certificateVariablesShown() throws {
        let workspace = try CLIWorkspace("configca")
        defer { workspace.directory.remove() }
        let unset = ["JOBCTL_CA_BUNDLE": "", "SSL_CERT_FILE": "", "SSL_CERT_DIR": ""]
        let none = try Self.settings(try Self.run(workspace, ["config", "--json"], environment: unset))
        #expect(none["ca_bundle"]?["value"] == "the system's CAs" && none["ca_bundle"]?["source"] == "default")
        let file = try Self.settings(try Self.run(workspace, ["config", "--json"],
                                                   environment: unset.merging(["SSL_CERT_FILE": "/srv/ca.pem"]) { $1 }))
        #expect(file["ca_bundle"]?["value"] == "/srv/ca.pem" && file["ca_bundle"]?["source"] == "environment ($SSL_CERT_FILE)",
                "\(file["ca_bundle"] ?? [:])")
        let both = try Self.settings(try Self.run(workspace, ["config", "--json"],
                                                   environment: unset.merging(["SSL_CERT_FILE": "/srv/ca.pem", "SSL_CERT_DIR": "/srv/certs"]) { $1 }))
        #expect(both["ca_bundle"]?["value"] == "/srv/ca.pem and /srv/certs"
                    && both["ca_bundle"]?["source"] == "environment ($SSL_CERT_FILE and $SSL_CERT_DIR)", "\(both["ca_bundle"] ?? [:])")
        let bundle = try Self.settings(try Self.run(workspace, ["config", "--json"],
                                                     environment: ["JOBCTL_CA_BUNDLE": "/srv/private.pem", "SSL_CERT_FILE": "/srv/ca.pem", "SSL_CERT_DIR": ""]))
        #expect(bundle["ca_bundle"]?["value"] == "/srv/private.pem" && bundle["ca_bundle"]?["source"] == "environment ($JOBCTL_CA_BUNDLE)")
        let fromFile = try workspace.write("xdg/jobctl/config.yaml", "ca_bundle: /srv/private.pem\n")
        let filed = try Self.settings(try Self.run(workspace, ["config", "--json"], environment: unset.merging(["SSL_CERT_FILE": "/srv/ca.pem"]) { $1 }))
        #expect(filed["ca_bundle"]?["value"] == "/srv/private.pem" && filed["ca_bundle"]?["source"] == "\(fromFile):1:12")
    }

    /// A bad value in the environment is not passed off as in effect: the table still shows it, standard
    /// error names the variable with the worker's message, and the exit status is the worker's.
    @Test("a value from the environment the worker would refuse is named on standard error, exit 1")
    func badEnvironmentValueNamed() throws {
        let workspace = try CLIWorkspace("configbadenv")
        defer { workspace.directory.remove() }
        let bad = try Self.run(workspace, ["config"], environment: ["JOBCTL_STALL_TIMEOUT": "banana", "STORAGE_EMULATOR_HOST": "ftp://x"])
        #expect(bad.status == 1, "\(bad.stderr)")
        #expect(bad.stdout.contains("banana"))
        #expect(bad.stderr.contains("$JOBCTL_STALL_TIMEOUT: JOBCTL_STALL_TIMEOUT must be a duration"), "\(bad.stderr)")
        #expect(bad.stderr.contains("$STORAGE_EMULATOR_HOST: STORAGE_EMULATOR_HOST must be HOST:PORT"), "\(bad.stderr)")
        let json = try Self.run(workspace, ["config", "--json"], environment: ["JOBCTL_SLICES": "99"])
        #expect(json.status == 1 && json.stderr.contains("$JOBCTL_SLICES"), "\(json.stderr)")
        #expect(try Self.settings(json)["slices"]?["value"] == "99")
        let good = try Self.run(workspace, ["config"], environment: ["JOBCTL_STALL_TIMEOUT": "90s"])
        #expect(good.status == 0 && good.stderr.isEmpty, "\(good.stderr)")
    }

    /// `config` said exit 0 for settings the worker refuses at start (it checked only what parses): an
    /// empty CA bundle, a credentials file that is not there, a token and a token command both set, a
    /// token that is no bearer token, buckets that are a file. It runs the worker's own check now: each is
    /// named with the worker's message, exit 1, no secret quoted, and the token command is not run.
    @Test("config refuses what the worker refuses at start, with its message, exit 1, and runs no token command",
          arguments: ["ca_bundle", "credentials", "token_and_command", "token", "buckets"])
    func workerStartChecks(_ problem: String) throws {
        let workspace = try CLIWorkspace("config-start-\(problem)")
        defer { workspace.directory.remove() }
        let ran = workspace.directory.file("token-command-ran")
        let command = "touch '\(ran)'; echo S3CR3T-command"
        var environment = ["JOBCTL_DB": workspace.database, "HOME": workspace.directory.path]
        let expected: String
        switch problem {
        case "ca_bundle":
            environment["JOBCTL_CA_BUNDLE"] = try workspace.write("empty.pem", "")
            expected = "$JOBCTL_CA_BUNDLE: JOBCTL_CA_BUNDLE names '\(workspace.directory.file("empty.pem"))', which holds no PEM certificate"
        case "credentials":
            environment["GOOGLE_APPLICATION_CREDENTIALS"] = workspace.directory.file("missing.json")
            expected = "$GOOGLE_APPLICATION_CREDENTIALS: GOOGLE_APPLICATION_CREDENTIALS names \(workspace.directory.file("missing.json")), which cannot be read"
        case "token_and_command":
            environment["GOOGLE_OAUTH_ACCESS_TOKEN"] = "S3CR3T-token"
            environment["JOBCTL_TOKEN_COMMAND"] = command
            expected = "both GOOGLE_OAUTH_ACCESS_TOKEN and JOBCTL_TOKEN_COMMAND are set"
        case "token":
            environment["GOOGLE_OAUTH_ACCESS_TOKEN"] = "S3CR3T token"
            expected = "$GOOGLE_OAUTH_ACCESS_TOKEN: GOOGLE_OAUTH_ACCESS_TOKEN is not a usable bearer token"
        default:
            environment["JOBCTL_BUCKETS"] = try workspace.write("plain-file", "x")
            expected = "$JOBCTL_BUCKETS: JOBCTL_BUCKETS names '\(workspace.directory.file("plain-file"))', which is a file"
        }
        for arguments in [["config"], ["config", "--json"]] {
            let config = try Self.run(workspace, arguments, environment: environment)
            #expect(config.status == 1, "\(arguments): \(config.stderr)")
            #expect(config.stderr.contains("jobctl config: ") && config.stderr.contains(expected)
                        && config.stderr.contains("the worker will not start with it"), "\(arguments): \(config.stderr)")
            #expect(!(config.stdout + config.stderr).contains("S3CR3T"), "\(arguments): \(config.stdout)\(config.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: ran), "config ran the token command")
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file:///\(workspace.directory.file("x.txt"))\"}\n")
        let worker = try Self.run(workspace, ["worker", "--drain"], environment: environment)
        #expect(worker.status == 1, "\(worker.stderr)")
        #expect(worker.stderr.contains(expected.replacingOccurrences(of: #"^\$[A-Z_]+: "#, with: "", options: .regularExpression)),
                "\(worker.stderr)")
        #expect(!worker.stderr.contains("S3CR3T"), "\(worker.stderr)")
        // Every problem is named, not the first only.
        var two = environment
        two["JOBCTL_SLICES"] = "99"
        let both = try Self.run(workspace, ["config"], environment: two)
        #expect(both.status == 1 && both.stderr.contains(expected) && both.stderr.contains("$JOBCTL_SLICES: JOBCTL_SLICES must be"),
                "\(both.stderr)")
    }

    /// Settings a configuration file gave reach the program through the environment, and every message
    /// named the variable: "JOBCTL_CA_BUNDLE names '…/ca.pem'", "slices: JOBCTL_SLICES must be…",
    /// "concurrency: --concurrency 0 is out of range". They name the file's key at FILE:LINE:COL now, in
    /// what `config` reports and in what stops the worker.
    @Test("a problem with a file's setting names its key and FILE:LINE:COL, never the variable or flag it stands for")
    func fileSettingsNamedAsWritten() throws {
        let workspace = try CLIWorkspace("config-file-names")
        defer { workspace.directory.remove() }
        let ran = workspace.directory.file("token-command-ran")
        let empty = try workspace.write("empty.pem", "")
        let missing = workspace.directory.file("missing.json")
        let bucketsFile = try workspace.write("plain-file", "x")
        let file = try workspace.write("c.yaml", """
            ca_bundle: \(empty)
            google_application_credentials: \(missing)
            token_command: touch '\(ran)'; echo S3CR3T-command
            buckets: \(bucketsFile)
            metrics: 0.0.0.0:9464
            """)
        let environment = ["JOBCTL_DB": workspace.database, "HOME": workspace.directory.path, "GOOGLE_OAUTH_ACCESS_TOKEN": "S3CR3T-token",
                           "JOBCTL_CA_BUNDLE": "", "JOBCTL_BUCKETS": "", "JOBCTL_TOKEN_COMMAND": "", "GOOGLE_APPLICATION_CREDENTIALS": ""]
        let expected = [
            "ca_bundle (\(file):1:12) names '\(empty)', which holds no PEM certificate",
            "both GOOGLE_OAUTH_ACCESS_TOKEN and token_command (\(file):3:16) are set",
            "buckets (\(file):4:10) names '\(bucketsFile)', which is a file",
        ]
        let config = try Self.run(workspace, ["--config", file, "config"], environment: environment)
        #expect(config.status == 1, "\(config.stderr)")
        for message in expected { #expect(config.stderr.contains("jobctl config: \(message)"), "\(message)\n\(config.stderr)") }
        for variable in ["JOBCTL_CA_BUNDLE", "JOBCTL_TOKEN_COMMAND", "JOBCTL_BUCKETS"] {
            #expect(!config.stderr.contains(variable), "\(variable): \(config.stderr)")
        }
        #expect(!(config.stdout + config.stderr).contains("S3CR3T"), "\(config.stdout)\(config.stderr)")
        #expect(!FileManager.default.fileExists(atPath: ran), "config ran the token command")
        // Without a token, the credentials file is read, and named so.
        let withoutCommand = try workspace.write("d.yaml", "google_application_credentials: \(missing)\n")
        let named = try Self.run(workspace, ["--config", withoutCommand, "config"], environment: environment.merging(["GOOGLE_OAUTH_ACCESS_TOKEN": ""]) { $1 })
        #expect(named.status == 1 && named.stderr.contains("google_application_credentials (\(withoutCommand):1:33) names \(missing), which cannot be read")
                    && !named.stderr.contains("GOOGLE_APPLICATION_CREDENTIALS"), "\(named.stderr)")

        // The worker stops at the first of them, named alike.
        let worker = try Self.run(workspace, ["--config", file, "worker", "--drain"], environment: environment)
        #expect(worker.status == 1 && expected.contains(where: worker.stderr.contains) && !worker.stderr.contains("JOBCTL_"), "\(worker.stderr)")
        #expect(!worker.stderr.contains("S3CR3T"), "\(worker.stderr)")
        // A worker flag's key: `metrics:` is named, not --metrics.
        let metrics = try workspace.write("m.yaml", "metrics: 0.0.0.0:9464\n")
        let remote = try Self.run(workspace, ["--config", metrics, "worker", "--drain"], environment: environment.merging(["GOOGLE_OAUTH_ACCESS_TOKEN": ""]) { $1 })
        #expect(remote.status == 64 && remote.stderr.contains("metrics (\(metrics):1:10) 0.0.0.0:9464 is not a loopback address"),
                "\(remote.stderr)")
        let flagged = try Self.run(workspace, ["--config", metrics, "worker", "--drain", "--metrics", "0.0.0.0:9465"],
                                   environment: environment.merging(["GOOGLE_OAUTH_ACCESS_TOKEN": ""]) { $1 })
        #expect(flagged.status == 64 && flagged.stderr.contains("--metrics 0.0.0.0:9465 is not a loopback address"), "\(flagged.stderr)")
    }

    /// A job refused by a configuration file's `refuse_executables` said "JOBCTL_REFUSE_EXECUTABLES lists
    /// '*' … take that entry out of JOBCTL_REFUSE_EXECUTABLES" — in the event log, for good. It names the
    /// file's key, without the file's path or line (the log outlives the file and is read elsewhere).
    @Test("a job refused by the file's refuse_executables names that key, without a path, in the event log")
    func refusedExecutableNamesTheFilesKey() throws {
        let workspace = try CLIWorkspace("config-refuse")
        defer { workspace.directory.remove() }
        let file = try workspace.write("c.yaml", "refuse_executables: \"*\"\n")
        let id = try #require(try workspace.submit(
            "- {kind: upload-data, data: x, max_attempts: 1, destination: \"file:///\(workspace.directory.file("setup.exe"))\"}\n").first)
        let environment = ["JOBCTL_DB": workspace.database, "JOBCTL_REFUSE_EXECUTABLES": ""]
        let worker = try Self.run(workspace, ["--config", file, "worker", "--drain"], environment: environment)
        #expect(worker.status == 2, "\(worker.stderr)")
        let history = try Self.run(workspace, ["history", id, "--json"], environment: environment)
        #expect(history.stdout.contains("the configuration file's refuse_executables lists '*'")
                    && history.stdout.contains("take that entry out of the configuration file's refuse_executables"), "\(history.stdout)")
        #expect(!history.stdout.contains("JOBCTL_REFUSE_EXECUTABLES") && !history.stdout.contains("c.yaml"), "\(history.stdout)")
        // Set in the environment, it names the variable as before.
        let again = try #require(try workspace.submit(
            "- {kind: upload-data, data: x, max_attempts: 1, destination: \"file:///\(workspace.directory.file("again.exe"))\"}\n").first)
        _ = try Self.run(workspace, ["worker", "--drain"], environment: ["JOBCTL_DB": workspace.database, "JOBCTL_REFUSE_EXECUTABLES": "*"])
        let named = try Self.run(workspace, ["history", again, "--json"], environment: environment)
        #expect(named.stdout.contains("JOBCTL_REFUSE_EXECUTABLES lists '*'"), "\(named.stdout)")
    }

    @Test("the proxy variables libcurl honours are shown, text and JSON, their passwords redacted")
    func proxyVariables() throws {
        let workspace = try CLIWorkspace("config-proxy")
        defer { workspace.directory.remove() }
        // Every proxy variable given (empty ones count as unset), so the machine's own do not leak in.
        var environment = Dictionary(uniqueKeysWithValues: ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                                                            "ALL_PROXY", "no_proxy", "NO_PROXY"].map { ($0, "") })
        environment["https_proxy"] = "http://alice:pr0xy-s3cret@proxy.example:3128"
        environment["ALL_PROXY"] = "bob:all-s3cret@socks.example:1080"
        environment["no_proxy"] = "localhost,.internal"
        let settings = try Self.settings(try Self.run(workspace, ["config", "--json"], environment: environment))
        #expect(settings["https_proxy"]?["value"] == "http://alice:REDACTED@proxy.example:3128", "\(settings)")
        #expect(settings["https_proxy"]?["source"] == "environment ($https_proxy)")
        #expect(settings["https_proxy"]?["variable"] == "https_proxy")
        #expect(settings["ALL_PROXY"]?["value"] == "bob:REDACTED@socks.example:1080", "\(settings)")
        #expect(settings["no_proxy"]?["value"] == "localhost,.internal")
        #expect(settings["http_proxy"]?["value"] == "none" && settings["http_proxy"]?["source"] == "default")
        #expect(settings["HTTP_PROXY"] == nil, "shown only when set")
        let text = try Self.run(workspace, ["config"], environment: environment)
        #expect(text.status == 0, "\(text.stderr)")
        let cells = Self.textTable(text.stdout)
        #expect(cells["https_proxy"]?[1].contains("alice:REDACTED@proxy.example") == true, "\(text.stdout)")
        #expect(cells["no_proxy"]?[1] == "localhost,.internal", "\(text.stdout)")
        for output in [text.stdout, text.stderr] { #expect(!output.contains("s3cret")) }
    }

    /// A proxy value libcurl cannot use (`ftp://`, a port past 65535) failed every transfer as "could not
    /// connect to the server", retried, with the worker started and `config` at exit 0. Both say so now;
    /// so does a raw `/`, `?`, `#` or `@` in a proxy's password (libcurl read `alice:SE/CRET@proxy` as the
    /// host `alice`, and every job failed as a proxy name that could not be resolved).
    @Test(arguments: [("ALL_PROXY", "ftp://127.0.0.1:21", "scheme 'ftp'"), ("http_proxy", "http://u:pw-s3cret@127.0.0.1:99999", "port '99999'"),
                      ("https_proxy", "http://[::1:1", "closing ']'"), ("http_proxy", "http://:3128", "names no host"),
                      // libcurl ends the host at the first '/', '?' or '#', and the password at the first '@'.
                      ("http_proxy", "http://alice:pw-s3cret/x@127.0.0.1:19963", "percent-encode it there (%2F, %3F, %23)"),
                      ("HTTPS_PROXY", "alice:pw-s3cret#x@127.0.0.1:3128", "percent-encode it there (%2F, %3F, %23)"),
                      ("ALL_PROXY", "socks5h://alice:pw-s3cret@x@127.0.0.1:1080", "percent-encode it there (%40)")])
    func anUnusableProxyIsRefusedAtStart(variable: String, value: String, named: String) throws {
        let workspace = try CLIWorkspace("config-bad-proxy")
        defer { workspace.directory.remove() }
        var environment = Dictionary(uniqueKeysWithValues: ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"].map { ($0, "") })
        environment[variable] = value
        let config = try Self.run(workspace, ["config"], environment: environment)
        #expect(config.status == 1, "\(config.stderr)")
        #expect(config.stderr.contains("$\(variable)") && config.stderr.contains(named), "\(config.stderr)")
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file:///\(workspace.directory.file("x.txt"))\"}\n")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 1, "\(worker.stderr)")
        #expect(worker.stderr.contains("$\(variable)") && worker.stderr.contains(named), "\(worker.stderr)")
        for output in [config.stdout, config.stderr, worker.stderr] { #expect(!output.contains("pw-s3cret")) }
        // A usable one is taken as before.
        environment[variable] = "socks5h://127.0.0.1:1080"
        #expect(try Self.run(workspace, ["config"], environment: environment).status == 0)
    }

    /// libcurl writes every TLS session's keys to `SSLKEYLOGFILE` (as the curl tool does), and nothing
    /// said so: `config` did not show it and the worker started silently. Shown when set, and a
    /// `tls_key_log` warning when a worker starts.
    @Test func aTLSKeyLogFileIsShownAndWarnedOf() throws {
        let workspace = try CLIWorkspace("config-keylog")
        defer { workspace.directory.remove() }
        let unset = try Self.settings(try Self.run(workspace, ["config", "--json"], environment: ["SSLKEYLOGFILE": ""]))
        #expect(unset["SSLKEYLOGFILE"] == nil, "shown only when set")
        let keys = workspace.directory.file("keys.log")
        let environment = ["SSLKEYLOGFILE": keys]
        let settings = try Self.settings(try Self.run(workspace, ["config", "--json"], environment: environment))
        #expect(settings["SSLKEYLOGFILE"]?["value"] == keys, "\(settings)")
        #expect(settings["SSLKEYLOGFILE"]?["source"]?.contains("writes every TLS session's keys there") == true, "\(settings)")
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file:///\(workspace.directory.file("x.txt"))\"}\n")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        #expect(worker.stderr.contains("tls_key_log") && worker.stderr.contains(keys), "\(worker.stderr)")
        let quiet = try workspace.jobctl(["worker", "--drain"], environment: ["SSLKEYLOGFILE": ""])
        #expect(!quiet.stderr.contains("tls_key_log"), "\(quiet.stderr)")
    }

    /// `STORAGE_EMULATOR_HOST` with a password (refused: the worker does not start with it) is shown as
    /// the refusal shows it, password redacted, with a scheme or without one (`HOST:PORT` form).
    @Test("an emulator host's password is redacted by config, text and JSON, and by the worker's refusal",
          arguments: [("http://emu:S3CR3T-emu@127.0.0.1:9023", "http://emu:REDACTED@127.0.0.1:9023"),
                      ("emu:S3CR3T-emu@127.0.0.1:9023", "emu:REDACTED@127.0.0.1:9023")])
    func emulatorHostPassword(_ value: String, _ shown: String) throws {
        let workspace = try CLIWorkspace("config-emulator")
        defer { workspace.directory.remove() }
        let environment = ["STORAGE_EMULATOR_HOST": value, "JOBCTL_DB": workspace.database]
        let json = try Self.run(workspace, ["config", "--json"], environment: environment)
        #expect(try Self.settings(json)["storage_emulator_host"]?["value"] == shown, "\(json.stdout)")
        let text = try Self.run(workspace, ["config"], environment: environment)
        #expect(Self.textTable(text.stdout)["storage_emulator_host"]?[1] == shown && text.stderr.contains("not '\(shown)'"),
                "\(text.stdout)\(text.stderr)")
        let worker = try Self.run(workspace, ["worker", "--drain"], environment: environment)
        #expect(worker.status == 64 || worker.status == 1, "\(worker.stderr)")
        #expect(worker.stderr.contains("not '\(shown)'"), "\(worker.stderr)")
        for (command, output) in [("config --json", json), ("config", text), ("worker", worker)] {
            #expect(!(output.stdout + output.stderr).contains("S3CR3T"), "jobctl \(command):\n\(output.stdout)\(output.stderr)")
        }
    }

    @Test("the file's settings reach the commands: db for every command, worker flags unless given")
    func settingsApply() throws {
        let workspace = try CLIWorkspace("configapply")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("jobs:\n  - kind: upload-data\n    data: x\n    destination: file://b/x\n")
        try workspace.write("xdg/jobctl/config.yaml", "db: \(workspace.database)\nlog_format: json\nqueue: [nowhere]\n")
        // db from the file.
        let list = try Self.run(workspace, ["list", "--json"])
        #expect(list.status == 0 && list.stdout.contains(ids[0]), "\(list.stderr)")
        // queue from the file: the worker takes nothing from another queue and logs JSON lines.
        let idle = try Self.run(workspace, ["worker", "--drain", "-v"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(idle.status == 0, "\(idle.stderr)")
        #expect(try Self.run(workspace, ["list", "--json", "--state", "queued"]).stdout.contains(ids[0]), "the job stayed queued")
        let lines = idle.stderr.split(separator: "\n")
        #expect(!lines.isEmpty && lines.allSatisfy { $0.hasPrefix("{") }, "\(idle.stderr)")
        // A flag wins: --queue default runs it.
        let ran = try Self.run(workspace, ["worker", "--drain", "--queue", "default", "--log-format", "text"],
                               environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(ran.status == 0 && !ran.stderr.hasPrefix("{"), "\(ran.stderr)")
        #expect(try Self.run(workspace, ["list", "--json", "--state", "succeeded"]).stdout.contains(ids[0]))
    }

    /// YAML's null sets no value, as an empty one does: `db: ~` made a database file named `~`.
    @Test("a null setting keeps the default")
    func nullKeepsTheDefault() throws {
        let workspace = try CLIWorkspace("confignull")
        defer { workspace.directory.remove() }
        let file = try workspace.write("null.yaml", "db: ~\nbuckets: null\n")
        let migrate = try Self.run(workspace, ["--config", file, "migrate"])
        #expect(migrate.status == 0, "\(migrate.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("~")))
        #expect(FileManager.default.fileExists(atPath: workspace.directory.file("jobctl.db")))
        // Every key alike: null (or an empty list) is the key left out. `concurrency: ~` was refused as
        // "not ''", `stall_timeout: ~` shown as set to nothing by the file, `queue: []` likewise.
        let nulls = try workspace.write("nulls.yaml", "concurrency: ~\nstall_timeout: ~\nqueue: []\nlease: null\n")
        let shown = try Self.run(workspace, ["--config", nulls, "config", "--json"])
        #expect(shown.status == 0, "\(shown.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any], "\(shown.stdout)")
        let rows = try #require(document["settings"] as? [[String: Any]], "\(shown.stdout)")
        for key in ["concurrency", "stall_timeout", "queue", "lease"] {
            let row = rows.first { $0["key"] as? String == key }
            #expect(row?["source"] as? String == "default", "\(key): \(String(describing: row))")
        }
    }

    /// A password holding `#` or `?` (libpq takes it) ended the generic URL redaction's user part early:
    /// `config` printed it; so did `migrate --to` for a key/value connection string.
    @Test("a PostgreSQL password is never shown, whatever characters it holds")
    func databasePasswordsRedacted() throws {
        let workspace = try CLIWorkspace("configpw")
        defer { workspace.directory.remove() }
        for url in ["postgres://u:SECRET123#x@127.0.0.1:1/db", "postgres://u:SECRET123?x@127.0.0.1:1/db",
                    "postgresql://u:SECRET123/x@127.0.0.1:1/db"] {
            let shown = try Self.run(workspace, ["--db", url, "config"])
            // A raw '/' before the '@' is refused by every command that opens the database: `config` says so too.
            let refused = url.contains("/x@")
            #expect(shown.status == (refused ? 64 : 0) && shown.stdout.contains("REDACTED"), "\(url): \(shown.stdout) \(shown.stderr)")
            #expect(!shown.stdout.contains("SECRET123") && !shown.stderr.contains("SECRET123"), "\(url): \(shown.stdout)")
            let json = try Self.run(workspace, ["--db", url, "config", "--json"])
            #expect(!json.stdout.contains("SECRET123"), "\(url): \(json.stdout)")
        }
        let migrate = try Self.run(workspace, ["--db", workspace.directory.file("x.db"), "migrate", "--to",
                                               "host=127.0.0.1 port=1 password=SECRET123"])
        #expect(migrate.status == 64 && !migrate.stderr.contains("SECRET123") && migrate.stderr.contains("password=REDACTED"),
                "\(migrate.stderr)")
    }

    @Test("unknown keys, bad values and bad shapes are errors at their file:line:col, exit 64",
          arguments: [
            ("concurrency: 4\nconcurency: 8\n", "2:1: error: unknown setting 'concurency' (did you mean 'concurrency'?)"),
            ("concurrency: 0\n", "1:14: error: concurrency 0 is out of range"),
            ("lease: forever\n", "1:8: error: lease expects"),
            ("concurrency: [1, 2]\n", "1:14: error: 'concurrency' takes one value, not a list"),
            ("queue:\n  a: b\n", "2:3: error: 'queue' takes a value or a list, not a mapping"),
            // A queue no manifest can name (PostgreSQL refused the NUL in every claim, for ever).
            ("queue: [media, \"q\\0x\"]\n", "1:8: error: queue must be a name of 1 to 64 letters"),
            ("queue: 'bad name!'\n", "1:8: error: queue must be a name of 1 to 64 letters"),
            // A null in a list is no name (a worker of a queue named null took nothing).
            ("queue: [media, null]\n", "1:8: error: queue must be a name of 1 to 64 letters"),
            ("concurrency: 4\n---\nqueue: x\n", "2:1: error: a configuration file is one YAML document, but a second one starts here"),
            ("- concurrency\n", "1:1: error: a configuration file is a mapping of settings"),
            ("concurrency: 4\nconcurrency: 5\n", "2:1: error:"),
            ("concurrency: 'unclosed\n", "error:"),
            // Settings that stand for environment variables are checked as the program reads those.
            ("chunk_size: 3\n", "1:13: error: chunk_size must be between 256 KiB and 1 GiB, not '3'"),
            ("slices: 0\n", "1:9: error: slices must be a whole number"),
            ("stall_timeout: 99999999999999999999s\n", "1:16: error: stall_timeout must be between 1s and 1h"),
            ("sliced_threshold: NaN\n", "1:19: error: sliced_threshold must be a size"),
            ("resumable_threshold: 2GiB\n", "1:22: error: resumable_threshold must be between 0 and 1 GiB"),
            ("storage_emulator_host: 'http://[::1'\n", "1:24: error: storage_emulator_host must be"),
            ("refuse_executables: ',,'\n", "1:21: error: refuse_executables lists"),
            ("token_command: '  '\n", "1:16: error: token_command is blank"),
            // A relative path in a file names another file in every folder a command runs in.
            ("db: jobs.db\n", "1:5: error: db: 'jobs.db' is a relative path"),
            ("buckets: ../data/buckets\n", "1:10: error: buckets: '../data/buckets' is a relative path"),
            ("ca_bundle: certs/ca.pem\n", "1:12: error: ca_bundle: 'certs/ca.pem' is a relative path"),
            ("google_application_credentials: ~/key.json\n", "1:33: error: google_application_credentials: '~/key.json' is a relative path"),
            ("db_answer_timeout: soon\n", "1:20: error: db_answer_timeout 'soon' is not a duration"),
            ("bwlimit: fast\n", "1:10: error: bwlimit"),
            ("log_format: xml\n", "1:13: error: log_format expects text or json"),
            ("metrics: '127.0.0.1:99999'\n", "1:10: error: metrics port 99999 is out of range"),
            ("metrics_allow_remote: yes\n", "1:23: error: metrics_allow_remote must be true or false, not 'yes'"),
          ])
    func malformed(text: String, message: String) throws {
        let workspace = try CLIWorkspace("configbad")
        defer { workspace.directory.remove() }
        let file = try workspace.write("bad.yaml", text)
        let output = try Self.run(workspace, ["--config", file, "list"])
        #expect(output.status == 64 && output.stderr.contains("\(file):") && output.stderr.contains(message), "\(output.stderr)")
        // The file's key is named, never the variable or the flag it stands for.
        #expect(!output.stderr.contains("JOBCTL_") && !output.stderr.contains("STORAGE_EMULATOR_HOST") && !output.stderr.contains(/--[a-z]/),
                "\(output.stderr)")
        let missing = try Self.run(workspace, ["list", "--config", workspace.directory.file("none.yaml")])
        #expect(missing.status == 64 && missing.stderr.contains("no such file"), "\(missing.stderr)")
    }

    /// The file's bytes were decoded with replacement characters: a path written in Latin-1
    /// (`db: …/caf\xE9.db`) named another file, `caf\u{FFFD}.db`, which `migrate` then created and filled;
    /// a UTF-16 file was "control characters are not allowed". Refused now at the first byte that is not
    /// UTF-8, as a manifest is, and nothing is made.
    @Test("a configuration file that is not UTF-8 is an error at its first bad byte, exit 64; no database is made")
    func notUTF8() throws {
        let workspace = try CLIWorkspace("configutf8")
        defer { workspace.directory.remove() }
        let latin1 = workspace.directory.file("latin1.yaml")
        let (first, second) = ("concurrency: 4\n", "db: \(workspace.directory.path)/caf")
        try (Data((first + second).utf8) + Data([0xE9]) + Data(".db\n".utf8)).write(to: URL(fileURLWithPath: latin1))
        let utf16 = workspace.directory.file("utf16.yaml")
        try #require("concurrency: 4\n".data(using: .utf16)).write(to: URL(fileURLWithPath: utf16))
        let offset = first.utf8.count + second.utf8.count
        for (file, message) in [(latin1, "\(latin1):2:\(second.utf8.count + 1): error: the configuration file is not valid UTF-8 "
                                     + "(byte 0xE9 at offset \(offset))"),
                                (utf16, "\(utf16):1:1: error: the configuration file is UTF-16; save it as UTF-8")] {
            for arguments in [["config"], ["migrate"]] {
                let output = try Self.run(workspace, ["--config", file] + arguments)
                #expect(output.status == 64 && output.stderr.contains(message), "\(arguments): \(output.status) \(output.stderr)")
            }
        }
        let made = try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path).filter { $0.contains(".db") }
        #expect(made.isEmpty, "\(made)")
    }

    /// A setting's value is quoted in its error; a huge one was quoted whole (a 120 KB line on standard
    /// error). Errors keep their start and end and say how much was left out.
    @Test("a huge bad value is quoted clipped in every error, not whole")
    func hugeValueClipped() throws {
        let workspace = try CLIWorkspace("confighuge")
        defer { workspace.directory.remove() }
        let huge = String(repeating: "9", count: 120_000) + "x"
        let outputs = [
            try Self.run(workspace, ["--db", workspace.database, "worker", "--drain"], environment: ["JOBCTL_STALL_TIMEOUT": huge]),
            try Self.run(workspace, ["config"], environment: ["JOBCTL_STALL_TIMEOUT": huge]),
            try Self.run(workspace, ["--db", workspace.database, "list", "--state", huge]),
        ]
        for output in outputs {
            #expect(output.status != 0, "\(output.stderr.prefix(300))")
            #expect(output.stderr.count < 2_500 && output.stderr.contains("characters left out"), "\(output.stderr.count) characters: \(output.stderr.prefix(300))")
        }
    }

    /// The file chooses the token command (run as this user), the CAs, the credentials and the servers:
    /// like ssh's, a file another user can change is refused by every command before any of it is used.
    @Test("a configuration file other users can change is refused, exit 64, by every command")
    func othersCannotWriteTheFile() throws {
        let workspace = try CLIWorkspace("configmode")
        defer { workspace.directory.remove() }
        let folder = workspace.directory.file("shared")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        chmod(folder, 0o755)
        let file = try workspace.write("shared/config.yaml", "token_command: fetch-token\nconcurrency: 3\n")
        let environment = ["JOBCTL_CONFIG": file]
        func refused(_ expected: String, _ line: UInt = #line) throws {
            for arguments in [["config"], ["--db", workspace.database, "list"], ["--db", workspace.database, "worker", "--drain"]] {
                let output = try Self.run(workspace, arguments, environment: environment)
                #expect(output.status == 64 && output.stderr.contains("\(file): refused: ") && output.stderr.contains(expected),
                        "\(arguments), line \(line): exit \(output.status): \(output.stderr)")
            }
        }
        func accepted(_ line: UInt = #line) throws {
            let output = try Self.run(workspace, ["config", "--json"], environment: environment)
            #expect(try Self.settings(output)["concurrency"]?["value"] == "3", "line \(line): \(output.stderr)")
        }

        chmod(file, 0o666)
        try refused("every user may write to it (mode 0666; chmod o-w \(file))")
        chmod(file, 0o664)   // group write: the administrator's group
        try accepted()
        chmod(file, 0o644)
        chmod(folder, 0o777)
        try refused("its folder \(folder) is writable by all (mode 0777) without the sticky bit")
        chmod(folder, 0o1777)   // as /tmp: others may not replace this user's file
        try accepted()
        chmod(folder, 0o755)
        if getuid() == 0, let nobody = getpwnam("nobody")?.pointee {
            chown(file, nobody.pw_uid, nobody.pw_gid)
            try refused("it belongs to nobody (uid \(nobody.pw_uid)), not to root (chown it")
            chown(file, 0, 0)
            chown(folder, nobody.pw_uid, nobody.pw_gid)
            try refused("its folder \(folder) belongs to nobody (uid \(nobody.pw_uid))")
            chown(folder, 0, 0)
        }
        try accepted()
        let notAFile = workspace.directory.file("shared/folder.yaml")
        try FileManager.default.createDirectory(atPath: notAFile, withIntermediateDirectories: true)
        let output = try Self.run(workspace, ["config"], environment: ["JOBCTL_CONFIG": notAFile])
        #expect(output.status == 64 && output.stderr.contains("\(notAFile): not a regular file"), "\(output.stderr)")
    }

    /// `FileManager.fileExists` follows links: a default file that was a dangling or looping link was
    /// skipped as if missing (its settings silently not applied), while the same link as `--config` was
    /// an error. It is an error naming the file now; a default file that is missing stays silent.
    @Test("a default configuration file that is a dangling or looping link is an error naming it, exit 64")
    func brokenLinkAtDefaultPathIsReported() throws {
        let workspace = try CLIWorkspace("configlink")
        defer { workspace.directory.remove() }
        let folder = workspace.directory.file("xdg/jobctl")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let file = folder + "/config.yaml"
        let missing = try Self.run(workspace, ["config", "--json"])
        #expect(missing.status == 0, "a missing default file: \(missing.stderr)")
        for (target, why) in [(folder + "/gone.yaml", "No such file"), ("config.yaml", "Too many levels of symbolic links")] {
            try? FileManager.default.removeItem(atPath: file)
            try FileManager.default.createSymbolicLink(atPath: file, withDestinationPath: target)
            for arguments in [["config"], ["--db", workspace.database, "list"]] {
                let output = try Self.run(workspace, arguments)
                #expect(output.status == 64 && output.stderr.contains("\(file): a symbolic link to \(target) that cannot be followed")
                        && output.stderr.contains(why), "\(arguments): exit \(output.status): \(output.stderr)")
            }
        }
        // Pointing somewhere readable, the link is read as before.
        _ = try workspace.write("xdg/jobctl/real.yaml", "concurrency: 6\n")
        try FileManager.default.removeItem(atPath: file)
        try FileManager.default.createSymbolicLink(atPath: file, withDestinationPath: "real.yaml")
        let output = try Self.run(workspace, ["config", "--json"])
        #expect(try Self.settings(output)["concurrency"]?["value"] == "6", "\(output.stderr)")
    }

    /// XDG_CONFIG_HOME and HOME name the user's file only when absolute (the XDG base directory
    /// specification): a relative one read a configuration from whatever folder the command ran in.
    @Test("a relative XDG_CONFIG_HOME or HOME is ignored: no configuration from the current folder")
    func relativeConfigHomeIgnored() throws {
        let workspace = try CLIWorkspace("configrelative")
        defer { workspace.directory.remove() }
        _ = try workspace.write("here/jobctl/config.yaml", "concurrency: 7\n")
        _ = try workspace.write("home/.config/jobctl/config.yaml", "concurrency: 9\n")
        for environment in [["XDG_CONFIG_HOME": "here"], ["XDG_CONFIG_HOME": "", "HOME": "home"]] {
            let output = try Self.run(workspace, ["config", "--json"], environment: environment)
            #expect(try Self.settings(output)["concurrency"]?["value"] == "4", "\(environment): \(output.stdout)")
        }
        // A relative XDG_CONFIG_HOME falls back to an absolute HOME's ~/.config, as when it is unset.
        let output = try Self.run(workspace, ["config", "--json"],
                                  environment: ["XDG_CONFIG_HOME": "here", "HOME": workspace.directory.file("home")])
        #expect(try Self.settings(output)["concurrency"]?["value"] == "9", "\(output.stdout)")
    }

    @Test("absolute paths and PostgreSQL URLs in a file are taken; relative ones from a flag or the environment too")
    func absolutePathsAndURLsTaken() throws {
        let workspace = try CLIWorkspace("configpaths")
        defer { workspace.directory.remove() }
        let file = try workspace.write("paths.yaml", "db: postgres://u:secret@127.0.0.1:1/x\nbuckets: /srv/buckets\n"
                                       + "ca_bundle: /etc/ssl/private.pem\ngoogle_application_credentials: /etc/key.json\n")
        let output = try Self.run(workspace, ["--config", file, "config", "--json"],
                                  environment: ["GOOGLE_OAUTH_ACCESS_TOKEN": "", "JOBCTL_TOKEN_COMMAND": "", "JOBCTL_CA_BUNDLE": "",
                                                "GOOGLE_APPLICATION_CREDENTIALS": ""])
        // Taken, not refused as relative: what they name is checked as the worker checks it at start.
        #expect(output.status == 1 && !output.stderr.contains("relative path")
                    && output.stderr.contains("ca_bundle (\(file):3:12) names '/etc/ssl/private.pem', which does not exist")
                    && output.stderr.contains("google_application_credentials (\(file):4:33) names /etc/key.json, which cannot be read"),
                "\(output.stderr)")
        let settings = try Self.settings(output)
        #expect(settings["buckets"]?["value"] == "/srv/buckets" && settings["ca_bundle"]?["value"] == "/etc/ssl/private.pem")
        #expect(!output.stdout.contains("secret"))
        // The rule is the file's: a relative path given where the command runs means that folder.
        let flag = try Self.run(workspace, ["--db", "here.db", "config", "--json"], environment: ["JOBCTL_BUCKETS": "b"])
        #expect(flag.status == 0, "\(flag.stderr)")
        #expect(try Self.settings(flag)["buckets"]?["value"] == "b")
    }
    /// An unknown key's error names a command that lists the settings; that command must run while the
    /// file still has the error (`jobctl config` loads the file first, so it failed with the same error).
    @Test("the remedy an unknown key's error quotes runs while the key is still there and lists every key")
    func unknownKeyRemedyRuns() throws {
        let workspace = try CLIWorkspace("configremedy")
        defer { workspace.directory.remove() }
        let file = try workspace.write("typo.yaml", "concurency: 8\n")
        let output = try Self.run(workspace, ["--config", file, "list"])
        #expect(output.status == 64, "\(output.stderr)")
        let quoted = try #require(output.stderr.firstMatch(of: /`jobctl ([a-z ]+)`/), "no remedy in: \(output.stderr)")
        let remedy = try Self.run(workspace, ["--config", file] + quoted.1.split(separator: " ").map(String.init))
        #expect(remedy.status == 0, "`jobctl \(quoted.1)` exited \(remedy.status): \(remedy.stderr)")
        let keys = try Self.settings(try Self.run(workspace, ["config", "--json"])).values.filter { $0["key"] != $0["variable"] }.compactMap { $0["key"] }
        #expect(keys.contains("db") && keys.contains("concurrency"))
        for key in keys { #expect(remedy.stdout.contains(key), "`jobctl \(quoted.1)` does not name \(key)") }
    }

    /// The text table named no key's flag or variable: only `--json` did (`variable`), though the README
    /// says each key "stands for the flag or variable `jobctl config` names beside it". Each key now shows
    /// it, `(--flag)` or `($VARIABLE)`, and the table keeps within 100 columns (a terminal's width when
    /// narrower), long values wrapped whole rather than cut.
    @Test("the text table names each key's flag or variable, within 100 columns, values whole")
    func textNamesFlagOrVariable() throws {
        let workspace = try CLIWorkspace("config-text")
        defer { workspace.directory.remove() }
        let url = "postgres://jobs:S3CR3T@127.0.0.1:5432/a-database-with-a-long-name?sslmode=disable&application_name=nightly-copies"
        let file = try workspace.write("xdg/jobctl/config.yaml", "db: '\(url)'\nconcurrency: 12\nmetrics_allow_remote: false\n")
        let json = try Self.settings(try Self.run(workspace, ["config", "--json"]))
        for columns in ["", "300", "72"] {
            let text = try Self.run(workspace, ["config"], environment: ["COLUMNS": columns])
            #expect(text.status == 0, "\(text.stderr)")
            let limit = columns == "72" ? 72 : 100
            let lines = text.stdout.split(separator: "\n")
            #expect(lines.first?.hasPrefix("SETTING (FLAG OR VARIABLE)") == true, "\(text.stdout)")
            for line in lines { #expect(line.count <= limit, "COLUMNS=\(columns): \(line.count) columns: \(line)") }
            let cells = Self.textTable(text.stdout)
            #expect(cells.count == json.count, "\(cells.keys.sorted()) vs \(json.keys.sorted())")
            for (key, row) in json {
                let variable = try #require(row["variable"])
                let named = variable == key ? key : "\(key)(\(variable.hasPrefix("--") ? variable : "$" + variable))"
                #expect(cells[key]?[0] == named, "COLUMNS=\(columns): \(key) is shown as \(cells[key]?[0] ?? "nothing"), not \(named)")
                #expect(cells[key]?[1] == row["value"]?.replacingOccurrences(of: " ", with: ""), "COLUMNS=\(columns): \(key)'s value")
            }
            #expect(cells["db"]?[0] == "db($JOBCTL_DB)" && cells["concurrency"]?[0] == "concurrency(--concurrency)"
                        && cells["metrics_allow_remote"]?[0] == "metrics_allow_remote(--metrics-allow-remote)"
                        && cells["google_application_credentials"]?[0] == "google_application_credentials($GOOGLE_APPLICATION_CREDENTIALS)")
            #expect(cells["db"]?[2] == "\(file):1:5" && cells["lease"]?[2] == "default", "\(text.stdout)")
            #expect(!text.stdout.contains("S3CR3T"))
        }
    }

    /// `config` ran the worker's storage check but none of its other refusals at start: a `metrics:`
    /// address that is not loopback (the endpoint has no authentication), a PostgreSQL URL with a raw `@`
    /// in its password, one libpq cannot read (`?sslmod=`), a libpq key/value string. Each is named now
    /// with the worker's message and exit status, the file's key at FILE:LINE:COL, without contacting
    /// the database's server or printing its password.
    @Test("config refuses the metrics address and the database URL the worker refuses at start, with its message and status",
          arguments: [
            ("metrics", "metrics: 0.0.0.0:9464\n", 64, "metrics (FILE:1:10) 0.0.0.0:9464 is not a loopback address and the endpoint has no authentication"),
            ("raw-at", "db: postgres://jobs:p@ss@127.0.0.1:PORT/jobs\n", 64, "db (FILE:1:5): the PostgreSQL URL holds a raw '@' or '/' before its last '@'"),
            ("unknown-parameter", "db: 'postgres://jobs:S3CR3T@127.0.0.1:PORT/jobs?sslmod=require'\n", 1,
             "db (FILE:1:5): cannot connect to PostgreSQL at postgres://jobs:REDACTED@127.0.0.1:PORT/jobs?sslmod=require: invalid URI query parameter"),
            // Values libpq refuses only when it connects: refused before a connection by both.
            ("port", "db: 'postgres://jobs:S3CR3T@127.0.0.1:99999/jobs'\n", 1, "invalid port number: \"99999\""),
            ("sslmode", "db: 'postgres://jobs:S3CR3T@127.0.0.1:PORT/jobs?sslmode=bogus'\n", 1, "invalid sslmode value: \"bogus\""),
            ("timeout", "db: 'postgres://jobs:S3CR3T@127.0.0.1:PORT/jobs?connect_timeout=abc'\n", 1,
             "invalid integer value \"abc\" for connection option \"connect_timeout\""),
            // From the environment: a file's key/value string is refused as a relative path when the file is read.
            ("keywords", "JOBCTL_DB=host=127.0.0.1 port=PORT password=S3CR3T dbname=jobs", 64, "is a libpq key/value connection string"),
          ])
    func workerRefusalsBeyondStorage(_ label: String, _ text: String, _ status: Int32, _ expected: String) throws {
        let workspace = try CLIWorkspace("config-worker-\(label)")
        defer { workspace.directory.remove() }
        let listener = try PendingConnections()
        defer { listener.close() }
        let setting = text.replacingOccurrences(of: "PORT", with: "\(listener.port)")
        let fromEnvironment = setting.hasPrefix("JOBCTL_DB=")
        let file = try workspace.write("c.yaml", fromEnvironment ? "concurrency: 1\n" : setting)
        let message = expected.replacingOccurrences(of: "FILE", with: file).replacingOccurrences(of: "PORT", with: "\(listener.port)")
        var environment = ["HOME": workspace.directory.path]
        if fromEnvironment { environment["JOBCTL_DB"] = String(setting.dropFirst("JOBCTL_DB=".count)) }
        for arguments in [["config"], ["config", "--json"]] {
            let config = try Self.run(workspace, ["--config", file] + arguments, environment: environment)
            #expect(config.status == status, "\(arguments): \(config.stderr)")
            #expect(config.stderr.contains("jobctl config: ") && config.stderr.contains(message)
                        && config.stderr.contains("the worker will not start with it"), "\(arguments): \(config.stderr)")
            #expect(!(config.stdout + config.stderr).contains("S3CR3T") && !config.stderr.contains("ss@"), "\(config.stdout)\(config.stderr)")
        }
        #expect(listener.pending == 0, "config connected to the database's server")
        // The worker refuses the same, with the same message and status.
        let worker = try Self.run(workspace, ["--config", file, "worker", "--drain"], environment: environment)
        #expect(worker.status == status && worker.stderr.contains(message.replacingOccurrences(of: "db (\(file):1:5): ", with: "")),
                "\(worker.stderr)")
        #expect(!worker.stderr.contains("S3CR3T"), "\(worker.stderr)")
    }

    /// The file may allow a remote metrics address as the flag does (`metrics_allow_remote: true`), and
    /// `config` then accepts it; a reachable-looking PostgreSQL URL is accepted unread by the server.
    @Test("metrics_allow_remote in the file lets a remote metrics address pass; a well-formed URL passes without a connection")
    func acceptedWithoutAConnection() throws {
        let workspace = try CLIWorkspace("config-worker-accepted")
        defer { workspace.directory.remove() }
        let listener = try PendingConnections()
        defer { listener.close() }
        let file = try workspace.write("c.yaml", """
            metrics: 0.0.0.0:9464
            metrics_allow_remote: true
            db: 'postgres://jobs:S3CR3T@127.0.0.1:\(listener.port)/jobs?sslmode=disable&application_name=x'
            """)
        let config = try Self.run(workspace, ["--config", file, "config", "--json"], environment: ["HOME": workspace.directory.path])
        #expect(config.status == 0 && config.stderr.isEmpty, "\(config.stderr)")
        let settings = try Self.settings(config)
        #expect(settings["metrics_allow_remote"]?["value"] == "true" && settings["metrics_allow_remote"]?["variable"] == "--metrics-allow-remote"
                    && settings["metrics_allow_remote"]?["source"] == "\(file):2:23", "\(settings["metrics_allow_remote"] ?? [:])")
        #expect(listener.pending == 0, "config connected to the database's server")
        // Without `metrics:`, the file's `metrics_allow_remote: true` asks nothing of a worker (the flag alone is refused, as before).
        let allowOnly = try workspace.write("a.yaml", "metrics_allow_remote: true\n")
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file:///\(workspace.directory.file("x.txt"))\"}\n")
        let worker = try Self.run(workspace, ["--config", allowOnly, "--db", workspace.database, "worker", "--drain"])
        #expect(worker.status == 0, "\(worker.stderr)")
        let flagOnly = try Self.run(workspace, ["--config", allowOnly, "--db", workspace.database, "worker", "--drain", "--metrics-allow-remote"])
        #expect(flagOnly.status == 64 && flagOnly.stderr.contains("--metrics-allow-remote needs --metrics HOST:PORT"), "\(flagOnly.stderr)")
        let bare = try Self.run(workspace, ["--db", workspace.database, "worker", "--drain", "--metrics-allow-remote"])
        #expect(bare.status == 64 && bare.stderr.contains("--metrics-allow-remote needs --metrics HOST:PORT"), "\(bare.stderr)")
    }

    /// README's "Configuration file" section lists the keys; `jobctl config` knows the real ones.
    @Test("README's list of configuration keys is the list jobctl reads")
    func readmeListsEveryKey() throws {
        let workspace = try CLIWorkspace("configreadme")
        defer { workspace.directory.remove() }
        // `jobctl help config` lists the keys from the settings table itself.
        let help = try Self.run(workspace, ["help", "config"]).stdout.replacingOccurrences(of: "\n", with: " ")
        let keyList = try #require(help.firstMatch(of: /Keys: ([a-z_, ]+)\./), "help config lists no keys: \(help)")
        let known = Set(keyList.1.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        #expect(known.contains("db") && known.contains("slices"))
        let readme = try String(contentsOfFile: PackagePaths.root + "/README.md", encoding: .utf8)
        let line = try #require(readme.split(separator: "\n").first { $0.hasPrefix("Keys: `db`") }, "README has no 'Keys: `db`' line")
        let paragraph = try #require(readme.range(of: String(line))).lowerBound
        let listEnd = try #require(readme[paragraph...].range(of: " — each stands for")).lowerBound
        let listed = Set(readme[paragraph..<listEnd].matches(of: /`([a-z_]+)`/).map { String($0.1) })
        #expect(listed == known, "README lists \(listed.subtracting(known).sorted()) that jobctl lacks, and lacks \(known.subtracting(listed).sorted())")
    }
}

/// A socket listening on a free port of 127.0.0.1 that accepts nothing: a client that connects waits in
/// its backlog, so `pending` says whether anything connected (a command that must contact no server).
final class PendingConnections {
    let socket: Int32
    let port: Int

    init() throws {
        let listening = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, length) == 0 && getsockname(listening, $0, &length) == 0 }
        }
        guard bound, listen(listening, 16) == 0 else {
            Glibc.close(listening)
            throw CLITestError("cannot listen on 127.0.0.1: errno \(errno)")
        }
        _ = fcntl(listening, F_SETFL, fcntl(listening, F_GETFL) | O_NONBLOCK)
        socket = listening
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// The connections made to it so far (each taken and closed).
    var pending: Int {
        var count = 0
        while true {
            let connection = accept(socket, nil, nil)
            guard connection >= 0 else { return count }
            Glibc.close(connection)
            count += 1
        }
    }

    func close() { Glibc.close(socket) }
}
