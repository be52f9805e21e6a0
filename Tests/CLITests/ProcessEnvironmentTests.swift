import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import TestSupport

/// What the process environment hands jobctl that it does not read as a setting of its own: folders it
/// may not search, a FIFO where OpenSSL reads its configuration, libpq's `PG*` variables.
@Suite("the process environment", .onTestThreads)
struct ProcessEnvironmentTests {
    /// Runs `jobctl ARGS` in `folder` as the user `nobody` (no groups, nobody's HOME), with no `JOBCTL_DB`,
    /// configuration file or credentials of the tests' environment, and `environment`, for at most 60 s.
    static func runAsNobody(_ arguments: [String], in folder: String, environment: [String: String]) throws -> ProcessOutput {
        let nobody = try #require(getpwnam("nobody")).pointee
        let base = ["NO_COLOR": "1", "HOME": DatabasePermissionTests.otherUsersHome, "JOBCTL_DB": "", "JOBCTL_CONFIG": "", "GOOGLE_APPLICATION_CREDENTIALS": "",
                    "GOOGLE_OAUTH_ACCESS_TOKEN": "", "JOBCTL_TOKEN_COMMAND": "", "STORAGE_EMULATOR_HOST": ""]
        return try runProcess("/usr/bin/setpriv", ["--reuid=\(nobody.pw_uid)", "--regid=\(nobody.pw_gid)", "--clear-groups", "--",
                                                   PackagePaths.jobctlBinary] + arguments,
                              environment: base.merging(environment) { $1 }, currentDirectory: folder, seconds: 60)
    }

    /// `lstat` failing with EACCES was taken for "no file there": a configuration in a folder the user may
    /// not search was silently not read — `config` said "no configuration file" and `submit` made a
    /// stray `./jobctl.db` no worker reads. Only "no such file" is missing now; anything else is an error
    /// naming the file and why, exit 64, before any database is touched.
    @Test("a default configuration file in a folder this user may not search is an error naming it; no stray database is made",
          .enabled(if: DatabasePermissionTests.canRunAsNobody, "needs root (to run jobctl as the user nobody with setpriv)"))
    func configurationInAnUnsearchableFolder() throws {
        let workspace = try CLIWorkspace("env-unsearchable")
        defer { workspace.directory.remove() }
        let nobody = try #require(getpwnam("nobody")).pointee
        let file = try workspace.write("x6/jobctl/config.yaml", "db: \(workspace.directory.file("real.db"))\n")
        chmod(file, 0o644)
        chmod(workspace.directory.file("x6/jobctl"), 0)
        let work = workspace.directory.file("work")
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        chown(work, nobody.pw_uid, nobody.pw_gid)
        let manifest = try workspace.write("work/m.yaml", "- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        chmod(manifest, 0o644)
        let environment = ["XDG_CONFIG_HOME": workspace.directory.file("x6")]
        for arguments in [["config"], ["submit", manifest]] {
            let output = try Self.runAsNobody(arguments, in: work, environment: environment)
            #expect(output.status == 64 && output.stderr.contains("\(file): cannot tell whether it exists (Permission denied")
                    && output.stderr.contains("--config"), "\(arguments): exit \(output.status): \(output.stdout)\(output.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: work + "/jobctl.db"), "submit made a database the configuration does not name")
        // With the folder gone the file is simply missing (ENOENT), which is no error.
        chmod(workspace.directory.file("x6/jobctl"), 0o755)
        try FileManager.default.removeItem(atPath: workspace.directory.file("x6/jobctl"))
        let none = try Self.runAsNobody(["config"], in: work, environment: environment)
        #expect(none.status == 0 && none.stdout.contains("no configuration file"), "\(none.stderr)")
    }

    /// The gcloud application-default credentials file was looked for with `fileExists`: one in a folder
    /// the user may not search, or a dangling link, was passed over for the metadata server or anonymous
    /// access. The worker's start check — which `config` runs — names it now, exit 1.
    @Test("a gcloud credentials file that cannot be looked for, or a dangling link to one, stops the worker's start check",
          .enabled(if: DatabasePermissionTests.canRunAsNobody, "needs root (to run jobctl as the user nobody with setpriv)"))
    func unreachableGcloudCredentials() throws {
        let workspace = try CLIWorkspace("env-adc")
        defer { workspace.directory.remove() }
        let home = workspace.directory.file("home")
        let file = home + "/.config/gcloud/application_default_credentials.json"
        _ = try workspace.write("home/.config/gcloud/application_default_credentials.json", "{}")
        chmod(home + "/.config/gcloud", 0)
        let environment = ["HOME": home, "XDG_CONFIG_HOME": workspace.directory.file("xdg")]
        let hidden = try Self.runAsNobody(["--db", workspace.database, "config"], in: workspace.directory.path, environment: environment)
        #expect(hidden.status == 1 && hidden.stderr.contains("the gcloud application-default credentials file \(file) cannot be looked for "
                                                              + "(Permission denied"), "exit \(hidden.status): \(hidden.stderr)")
        chmod(home + "/.config/gcloud", 0o755)
        try FileManager.default.removeItem(atPath: file)
        try FileManager.default.createSymbolicLink(atPath: file, withDestinationPath: home + "/gone.json")
        let dangling = try ConfigCommandTests.run(workspace, ["--db", workspace.database, "config"],
                                                  environment: environment.merging(["GOOGLE_APPLICATION_CREDENTIALS": "",
                                                                                    "GOOGLE_OAUTH_ACCESS_TOKEN": "", "JOBCTL_TOKEN_COMMAND": "",
                                                                                    "STORAGE_EMULATOR_HOST": ""]) { $1 })
        #expect(dangling.status == 1 && dangling.stderr.contains(file) && dangling.stderr.contains("cannot be read"),
                "exit \(dangling.status): \(dangling.stderr)")
    }

    /// `fileExists` answers false to any failure to look: a CA bundle in a folder the user may not search
    /// was said not to exist, which sent them looking for a typo. It says why now.
    @Test("a CA bundle in a folder this user may not search is said to be out of reach, not missing",
          .enabled(if: DatabasePermissionTests.canRunAsNobody, "needs root (to run jobctl as the user nobody with setpriv)"))
    func outOfReachIsNotMissing() throws {
        let workspace = try CLIWorkspace("env-out-of-reach")
        defer { workspace.directory.remove() }
        let bundle = try workspace.write("private/ca.pem", "-----BEGIN CERTIFICATE-----\n")
        chmod(workspace.directory.file("private"), 0)
        let environment = ["XDG_CONFIG_HOME": workspace.directory.file("xdg"), "JOBCTL_CA_BUNDLE": bundle]
        let config = try Self.runAsNobody(["--db", workspace.database, "config"], in: workspace.directory.path, environment: environment)
        #expect(config.status == 1 && config.stderr.contains("JOBCTL_CA_BUNDLE names '\(bundle)', which cannot be looked at (Permission denied"),
                "exit \(config.status): \(config.stderr)")
    }

    /// OpenSSL opens `$OPENSSL_CONF` itself at its first use — the migrations' SHA-256 when `submit` opens
    /// a log — and a FIFO there held `submit` for ever (the worker too, at its first transfer). Every
    /// command but `config` refuses it at start now, exit 64; `config` shows it and names it; `/dev/null`
    /// (OpenSSL's usual "no configuration") is taken.
    @Test("OPENSSL_CONF naming a FIFO stops every command at start but config, which shows it; /dev/null is taken")
    func openSSLConfigurationFIFO() throws {
        let workspace = try CLIWorkspace("env-openssl")
        defer { workspace.directory.remove() }
        let fifo = workspace.directory.file("openssl.cnf")
        #expect(mkfifo(fifo, 0o600) == 0)
        let manifest = try workspace.write("m.yaml", "- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        let environment = ["OPENSSL_CONF": fifo, "XDG_CONFIG_HOME": workspace.directory.file("xdg"), "JOBCTL_CONFIG": ""]
        for arguments in [["submit", manifest], ["list"], ["worker", "--drain"]] {
            let output = try runProcess(PackagePaths.jobctlBinary, ["--db", workspace.database] + arguments, environment: environment,
                                        currentDirectory: workspace.directory.path, seconds: 30)
            #expect(output.status == 64 && output.stderr.contains("$OPENSSL_CONF names '\(fifo)', which is a FIFO"),
                    "\(arguments): exit \(output.status): \(output.stderr)")
        }
        let config = try ConfigCommandTests.run(workspace, ["--db", workspace.database, "config", "--json"], environment: ["OPENSSL_CONF": fifo])
        #expect(config.status == 64 && config.stderr.contains("$OPENSSL_CONF names '\(fifo)', which is a FIFO"), "\(config.stderr)")
        #expect(try ConfigCommandTests.settings(config)["OPENSSL_CONF"]?["value"] == fifo, "\(config.stdout)")
        let none = try runProcess(PackagePaths.jobctlBinary, ["--db", workspace.database, "submit", manifest],
                                  environment: environment.merging(["OPENSSL_CONF": "/dev/null"]) { $1 },
                                  currentDirectory: workspace.directory.path, seconds: 30)
        #expect(none.status == 0, "\(none.stderr)")
    }

    /// libpq reads `PGOPTIONS` (and every `PG*` variable it documents) for what the URL leaves out, and
    /// nothing said so: `PGOPTIONS='-c search_path=team_b'` put a submit's job into a new log of its own.
    /// `config` lists each one set, `PGPASSWORD` redacted, with whether the URL overrides it.
    @Test("config lists the libpq variables that are set, PGPASSWORD redacted, and whether the URL overrides each")
    func libpqVariablesShown() throws {
        let workspace = try CLIWorkspace("env-libpq")
        defer { workspace.directory.remove() }
        let variables = ["PGOPTIONS": "-c search_path=team_b", "PGPASSWORD": "pg-s3cret-pw", "PGPORT": "6543", "PGCONNECT_TIMEOUT": "3"]
        func rows(_ database: String) throws -> [String: [String: String]] {
            let output = try ConfigCommandTests.run(workspace, ["--db", database, "config", "--json"], environment: variables)
            #expect(!(output.stdout + output.stderr).contains("pg-s3cret-pw"))
            return try ConfigCommandTests.settings(output)
        }
        let bare = try rows("postgres://jobctl@127.0.0.1/jobs")
        #expect(bare["PGOPTIONS"]?["value"] == "-c search_path=team_b", "\(bare)")
        #expect(bare["PGOPTIONS"]?["source"]?.contains("libpq's options, as the URL does not set it — a search_path there chooses "
                                                       + "the schema of the log") == true, "\(bare["PGOPTIONS"] ?? [:])")
        #expect(bare["PGPASSWORD"]?["value"] == "REDACTED", "\(bare["PGPASSWORD"] ?? [:])")
        #expect(bare["PGPORT"]?["source"]?.contains("libpq's port, as the URL does not set it") == true)
        #expect(bare["PGCONNECT_TIMEOUT"]?["source"]?.contains("not used: jobctl sets connect_timeout") == true)
        #expect(bare["PGHOST"] == nil, "shown only when set")
        let pinned = try rows("postgres://jobctl@127.0.0.1:5432/jobs?options=-c%20search_path%3Dteam_a")
        #expect(pinned["PGOPTIONS"]?["source"]?.contains("not used: the URL sets options") == true, "\(pinned["PGOPTIONS"] ?? [:])")
        #expect(pinned["PGPORT"]?["source"]?.contains("not used: the URL sets port") == true, "\(pinned["PGPORT"] ?? [:])")
        let sqlite = try rows(workspace.database)
        #expect(sqlite["PGOPTIONS"]?["source"]?.contains("not read here (the log is SQLite)") == true, "\(sqlite["PGOPTIONS"] ?? [:])")
    }

    /// What README says of libpq's variables, on a real server: a URL's `options` wins over `PGOPTIONS`,
    /// and a URL without them takes `PGOPTIONS`' search_path — the log a command opens is that schema's.
    @Test("a URL's search_path wins over PGOPTIONS'; a URL without one takes PGOPTIONS' schema")
    func urlWinsOverPGOPTIONS() throws {
        let server = try PostgresServer.shared()
        let workspace = try CLIWorkspace("env-pgoptions", engine: .postgres)
        defer { workspace.directory.remove() }
        let other = "env_other_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(10).lowercased()
        try server.psql(database: "postgres", "CREATE SCHEMA \(other)")
        let manifest = try workspace.write("m.yaml", "- {kind: upload-data, data: x, destination: file://b/x.txt}\n")
        let elsewhere = ["PGOPTIONS": "-c search_path=\(other)"]
        let pinned = try workspace.jobctl(["submit", manifest], environment: elsewhere)
        #expect(pinned.status == 0, "\(pinned.stderr)")
        #expect(try workspace.jobctl(["list", "--json"]).stdout.contains(pinned.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(try server.psql(database: "postgres", "SELECT count(*) FROM pg_tables WHERE schemaname = '\(other)'") == "0")
        // The same URL without its options: PGOPTIONS chooses the schema, and the job goes to a log there.
        let bare = try #require(workspace.database.components(separatedBy: "&options=").first)
        let moved = try runProcess(PackagePaths.jobctlBinary, ["--db", bare, "submit", manifest], environment: elsewhere,
                                   currentDirectory: workspace.directory.path)
        #expect(moved.status == 0, "\(moved.stderr)")
        #expect(try server.psql(database: "postgres", "SELECT count(*) FROM \(other).jobs") == "1")
    }
}
