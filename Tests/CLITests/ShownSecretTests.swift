import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import TestSupport

/// Secrets the redaction of URLs did not reach: path parameters, download tokens set as custom metadata,
/// the settings `config` shows, and the environment a token command inherits.
@Suite("secrets in other places", .onTestThreads) struct ShownSecretTests {
    /// The job views that print a job's URLs and metadata.
    static func views(_ id: String) -> [[String]] {
        [["list"], ["list", "--json"], ["show", id], ["show", id, "--json"], ["history", id], ["history", id, "--json"],
         ["audit", "--json"], ["audit", "--csv"], ["audit"]]
    }

    /// `;jsessionid=` and `;token=` hold no `@`, `?` or `#`: the display's shortcut printed them whole.
    @Test("path parameters named like secrets are redacted by list, show, history and audit")
    func pathParameters() throws {
        let workspace = try CLIWorkspace("path-params")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            - {kind: download-memory, source: "http://127.0.0.1:9/files;jsessionid=PPs3cr3t/a.bin;token=PTs3cr3t"}
            """)
        let id = try #require(ids.first)
        for arguments in Self.views(id) {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 0, "jobctl \(arguments.joined(separator: " ")): \(output.stderr)")
            #expect(!output.stdout.contains("s3cr3t"), "jobctl \(arguments.joined(separator: " ")) printed a secret:\n\(output.stdout)")
        }
        #expect(try workspace.jobctl(["show", id, "--json"]).stdout.contains("jsessionid=REDACTED"))
        #expect(try workspace.jobctl(["show", id, "--json", "--show-secrets"]).stdout.contains("jsessionid=PPs3cr3t"))
    }

    /// Download tokens set through `custom_metadata:` are the object's download tokens: redacted as its
    /// `download_tokens` are, in the job's spec and in a `file://` upload's result.
    @Test("firebaseStorageDownloadTokens in custom metadata is redacted wherever metadata is shown")
    func downloadTokensAsCustomMetadata() throws {
        let workspace = try CLIWorkspace("meta-tokens")
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        try FileManager.default.createDirectory(atPath: buckets + "/b", withIntermediateDirectories: true)
        let ids = try workspace.submit("""
            - kind: upload-data
              data: hello
              destination: file://b/o.txt
              metadata: {custom_metadata: {firebaseStorageDownloadTokens: FTs3cr3t, owner: ops}}
            """)
        let id = try #require(ids.first)
        let drained = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": buckets])
        #expect(drained.status == 0, "\(drained.stderr)")
        for arguments in Self.views(id) + [["result", id], ["result", id, "--json"]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 0, "jobctl \(arguments.joined(separator: " ")): \(output.stderr)")
            #expect(!output.stdout.contains("FTs3cr3t"), "jobctl \(arguments.joined(separator: " ")) printed a token:\n\(output.stdout)")
        }
        let result = try workspace.jobctl(["result", id])
        #expect(result.stdout.contains("\"firebaseStorageDownloadTokens\" : \"REDACTED\"") && result.stdout.contains("\"owner\" : \"ops\""),
                "\(result.stdout)")
        #expect(try workspace.jobctl(["show", id, "--json", "--show-secrets"]).stdout.contains("FTs3cr3t"))
        #expect(try workspace.jobctl(["result", id, "--show-secrets"]).stdout.contains("FTs3cr3t"))
        // The sidecar has the object's mode: its tokens give no more than reading the object, and a worker
        // of another user sharing the bucket reads both (made 0600, such a worker failed every job of it).
        var sidecar = stat(), object = stat()
        #expect(stat(buckets + "/b/.o.txt.jobctl-meta.json", &sidecar) == 0 && stat(buckets + "/b/o.txt", &object) == 0)
        #expect(sidecar.st_mode & 0o777 == object.st_mode & 0o777, "the sidecar's mode is \(String(sidecar.st_mode & 0o777, radix: 8))")
    }

    /// Every row's value, not only the settings known to hold a URL with a password.
    @Test("config and config --json redact URL-like secrets in every setting's value")
    func configRows() throws {
        let workspace = try CLIWorkspace("config-secrets")
        defer { workspace.directory.remove() }
        let environment = ["NO_COLOR": "1", "XDG_CONFIG_HOME": workspace.directory.file("xdg"), "JOBCTL_CONFIG": "",
                           "JOBCTL_REFUSE_EXECUTABLES": "https://ru:REs3cr3t@127.0.0.1", "JOBCTL_BUCKETS": "/b?token=BUs3cr3t"]
        for arguments in [["config"], ["config", "--json"]] {
            let output = try runProcess(PackagePaths.jobctlBinary, ["--db", workspace.database] + arguments, environment: environment,
                                        currentDirectory: workspace.directory.path)
            #expect(!output.stdout.contains("s3cr3t") && !output.stderr.contains("s3cr3t"),
                    "jobctl \(arguments.joined(separator: " ")):\n\(output.stdout)\(output.stderr)")
            #expect(output.stdout.contains("token=REDACTED"), "\(output.stdout)")
        }
    }

    /// The file's line is quoted under the error: a password written with a YAML escape (`\x40` for the
    /// `@`) hid from the scan of its raw text.
    @Test("a configuration file's error quotes no secret written with an escape")
    func escapedSecretInTheConfigFile() throws {
        let workspace = try CLIWorkspace("config-escape")
        defer { workspace.directory.remove() }
        let file = try workspace.write("c.yaml", #"db: ["postgres://ju:JUs3cr3tPW\x40127.0.0.1/jobs"]"# + "\n")
        let output = try runProcess(PackagePaths.jobctlBinary, ["--config", file, "config"],
                                    environment: ["NO_COLOR": "1", "JOBCTL_DB": "", "JOBCTL_CONFIG": ""],
                                    currentDirectory: workspace.directory.path)
        #expect(output.status == 64, "\(output.stdout)\(output.stderr)")
        #expect(output.stderr.contains("c.yaml:1:"), "\(output.stderr)")
        #expect(!output.stderr.contains("s3cr3t") && !output.stdout.contains("s3cr3t"), "\(output.stderr)")
    }

    /// The command fetches a token; the log's URL, with its password, is none of its business.
    @Test("a token command the worker runs does not inherit JOBCTL_DB, PGPASSWORD or its own text")
    func tokenCommandEnvironment() throws {
        let workspace = try CLIWorkspace("token-env")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("""
            - {kind: download-memory, source: "gs://bkt/o.txt", max_attempts: 1}
            """)
        let seen = workspace.directory.file("seen.txt")
        let command = "printf '%s %s %s' \"${JOBCTL_DB-unset}\" \"${JOBCTL_TOKEN_COMMAND-unset}\" \"${PGPASSWORD-unset}\" > '\(seen)'; echo token"
        let result = try runProcess(PackagePaths.jobctlBinary, ["worker", "--drain"], environment: [
            "NO_COLOR": "1", "JOBCTL_DB": workspace.database, "STORAGE_EMULATOR_HOST": "127.0.0.1:9", "JOBCTL_TOKEN_COMMAND": command,
            "PGPASSWORD": "pg-password-probe",
        ], currentDirectory: workspace.directory.path)
        #expect(result.status == 2, "the job fails (nothing listens): \(result.stderr)")
        let text = try String(contentsOfFile: seen, encoding: .utf8)
        #expect(text == "unset unset unset", "the token command saw: \(text)")
    }
}
