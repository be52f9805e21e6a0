import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// Every storage setting read from the environment is checked: a bad value stops the worker at start
/// with a message naming the variable, never falls back silently.
@Suite("Storage settings from the environment", .onTestThreads)
struct StorageConfigurationTests {
    private static let buckets = "/tmp/jobctl-buckets-default"

    private func configuration(_ environment: [String: String]) throws -> StorageConfiguration {
        try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: Self.buckets)
    }

    @Test("bad values are refused, naming the variable", arguments: [
        ("JOBCTL_CHUNK_SIZE", "lots"), ("JOBCTL_CHUNK_SIZE", "0"), ("JOBCTL_CHUNK_SIZE", "-1"),
        ("JOBCTL_CHUNK_SIZE", "100"), ("JOBCTL_CHUNK_SIZE", "255KiB"), ("JOBCTL_CHUNK_SIZE", "2GiB"),
        ("JOBCTL_CHUNK_SIZE", "8 MiBs"),
        ("JOBCTL_RESUMABLE_THRESHOLD", "small"), ("JOBCTL_RESUMABLE_THRESHOLD", "-1"), ("JOBCTL_RESUMABLE_THRESHOLD", "2GiB"),
        ("JOBCTL_STALL_TIMEOUT", "forever"), ("JOBCTL_STALL_TIMEOUT", "0s"), ("JOBCTL_STALL_TIMEOUT", "-5s"),
        ("JOBCTL_STALL_TIMEOUT", "2h"), ("JOBCTL_STALL_TIMEOUT", "60"),
        ("STORAGE_EMULATOR_HOST", "not a host"), ("STORAGE_EMULATOR_HOST", "ftp://127.0.0.1:9023"),
        ("STORAGE_EMULATOR_HOST", "http://127.0.0.1:99999"), ("STORAGE_EMULATOR_HOST", "http://user:pw@127.0.0.1:9023"),
        ("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9023/some/path"), ("STORAGE_EMULATOR_HOST", "http://"),
        ("GOOGLE_OAUTH_ACCESS_TOKEN", "has space"), ("GOOGLE_OAUTH_ACCESS_TOKEN", "tab\there"),
        ("JOBCTL_TOKEN_COMMAND", "   "),
        ("JOBCTL_REFUSE_EXECUTABLES", "a,,b"), ("JOBCTL_REFUSE_EXECUTABLES", "my bucket"), ("JOBCTL_REFUSE_EXECUTABLES", ","),
    ])
    func badValue(variable: String, value: String) throws {
        let error = #expect(throws: StorageError.self, "\(variable)=\(value)") { try configuration([variable: value]) }
        #expect(error?.message.contains(variable) == true, "\(error?.message ?? "")")
        #expect(error?.retryable == false)
    }

    @Test("a token and a token command together are refused: one of them would be ignored")
    func tokenAndCommand() throws {
        let error = #expect(throws: StorageError.self) {
            try configuration(["GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.token", "JOBCTL_TOKEN_COMMAND": "echo other"])
        }
        #expect(error?.message.contains("GOOGLE_OAUTH_ACCESS_TOKEN") == true)
        #expect(error?.message.contains("JOBCTL_TOKEN_COMMAND") == true)
        #expect(error?.message.contains("ya29") == false)
    }

    @Test("JOBCTL_BUCKETS naming a file is refused")
    func bucketsIsAFile() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.file("plain-file")
        try "x".write(toFile: file, atomically: true, encoding: .utf8)
        let error = #expect(throws: StorageError.self) { try configuration(["JOBCTL_BUCKETS": file]) }
        #expect(error?.message.contains("JOBCTL_BUCKETS") == true)
        #expect(try configuration(["JOBCTL_BUCKETS": directory.path]).localBucketsDirectory == directory.path)
    }

    @Test("good values are read; unset or empty variables keep the defaults")
    func goodValues() throws {
        let defaults = try configuration([:])
        #expect(defaults.chunkSize == StorageConfiguration.defaultChunkSize)
        #expect(defaults.singleRequestLimit == 5 << 20)
        #expect(defaults.stallTimeout == 60)
        #expect(defaults.localBucketsDirectory == Self.buckets)
        #expect(defaults.gcsEndpoint == "https://storage.googleapis.com")
        #expect(defaults.certificateTrust == .systemDefault)
        let empty = try configuration(["JOBCTL_CHUNK_SIZE": "", "JOBCTL_STALL_TIMEOUT": "", "JOBCTL_CA_BUNDLE": "",
                                       "GOOGLE_OAUTH_ACCESS_TOKEN": "", "STORAGE_EMULATOR_HOST": ""])
        #expect(empty.chunkSize == StorageConfiguration.defaultChunkSize)
        #expect(empty.accessToken == nil)

        let set = try configuration([
            "JOBCTL_CHUNK_SIZE": "16MiB", "JOBCTL_STALL_TIMEOUT": "90s", "STORAGE_EMULATOR_HOST": "127.0.0.1:9023",
            "JOBCTL_REFUSE_EXECUTABLES": "a, b-2 ,*", "JOBCTL_TOKEN_COMMAND": "gcloud auth print-access-token",
        ])
        #expect(set.chunkSize == 16 << 20)
        #expect(set.stallTimeout == 90)
        #expect(set.gcsEndpoint == "http://127.0.0.1:9023")
        #expect(set.usesEmulator)
        #expect(set.executableUploadPolicy == ["a", "b-2", "*"])
        #expect(set.tokenCommand == "gcloud auth print-access-token")
        // Byte counts round down to the 256 KiB multiple GCS requires, as documented.
        #expect(try configuration(["JOBCTL_CHUNK_SIZE": "1000000"]).chunkSize == 786_432)
        #expect(try configuration(["JOBCTL_CHUNK_SIZE": "1GiB"]).chunkSize == 1 << 30)
        #expect(try configuration(["JOBCTL_RESUMABLE_THRESHOLD": "1MiB"]).singleRequestLimit == 1 << 20)
        #expect(try configuration(["JOBCTL_RESUMABLE_THRESHOLD": "0"]).singleRequestLimit == 0)
        #expect(try configuration(["JOBCTL_RESUMABLE_THRESHOLD": "off"]).singleRequestLimit == 0)
        #expect(try configuration(["JOBCTL_RESUMABLE_THRESHOLD": ""]).singleRequestLimit == 5 << 20)
        #expect(try configuration(["JOBCTL_STALL_TIMEOUT": "1h"]).stallTimeout == 3600)
        #expect(try configuration(["STORAGE_EMULATOR_HOST": "http://localhost:9023/"]).gcsEndpoint == "http://localhost:9023")
    }

    @Test("the stall limit parser used by --stall-timeout range-checks and names its source")
    func stallTimeoutParser() throws {
        #expect(try StorageConfiguration.stallTimeout(parsing: "45s", from: "--stall-timeout") == 45)
        #expect(try StorageConfiguration.stallTimeout(parsing: "2m", from: "--stall-timeout") == 120)
        for bad in ["0s", "61m", "soon", "", "1.5s"] {
            let error = #expect(throws: StorageError.self, "\(bad)") {
                try StorageConfiguration.stallTimeout(parsing: bad, from: "--stall-timeout")
            }
            #expect(error?.message.contains("--stall-timeout") == true)
        }
    }

    /// A number too large for a size or a duration to hold, or a duration in milliseconds, was refused as
    /// no size or duration at all: `JOBCTL_CHUNK_SIZE=99999999999999999999` "must be a size like 8MiB or
    /// 8388608 (bytes)", `JOBCTL_STALL_TIMEOUT=999ms` "must be a duration like 60s or 5m (a unit is
    /// required)" — it has one. Each is refused for what is wrong with it: its range, or its fraction.
    @Test("a setting's number too large, or not whole seconds, is refused as such, not as malformed",
          arguments: [
            ("JOBCTL_CHUNK_SIZE", "99999999999999999999", "must be between 256 KiB and 1 GiB"),
            ("JOBCTL_CHUNK_SIZE", "18446744073709551616KiB", "must be between 256 KiB and 1 GiB"),
            ("JOBCTL_RESUMABLE_THRESHOLD", "99999999999999999999", "must be between 0 and 1 GiB"),
            ("JOBCTL_SLICED_THRESHOLD", "99999999999999999999", "must be between 1 MiB and 1 TiB"),
            ("JOBCTL_SLICED_THRESHOLD", "9999999999TiB", "must be between 1 MiB and 1 TiB"),
            ("JOBCTL_STALL_TIMEOUT", "99999999999999999999s", "must be between 1s and 1h"),
            ("JOBCTL_STALL_TIMEOUT", "9223372036854775807ms", "must be between 1s and 1h"),
            ("JOBCTL_STALL_TIMEOUT", "999ms", "must be between 1s and 1h"),
            ("JOBCTL_STALL_TIMEOUT", "1500ms", "must be whole seconds"),
            ("JOBCTL_SLICES", "99999999999999999999", "from 2 to 16"),
          ])
    func numbersOutOfRangeAreNamedSo(variable: String, value: String, expected: String) throws {
        let error = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment([variable: value], localBucketsDirectory: Self.buckets)
        }
        #expect(error?.message.contains(expected) == true, "\(variable)=\(value): \(error?.message ?? "accepted")")
        #expect(error?.message.contains("a unit is required") == false && error?.message.contains("like") == false,
                "\(variable)=\(value): \(error?.message ?? "accepted")")
    }
}

/// A failing token command is retryable (the job is retried with backoff) and the error names the
/// command's exit status, never what it printed.
@Suite("Token command failures", .onTestThreads)
struct TokenCommandTests {
    @Test("a command that exits non-zero is retryable; its output is never shown")
    func failingCommand() async throws {
        let backend = GCSBackend(configuration: StorageConfiguration(
            gcsEndpoint: "http://127.0.0.1:\(freeLoopbackPort())",
            tokenCommand: "echo SECRET-STDOUT; echo SECRET-STDERR >&2; exit 3", connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://bkt/obj.txt")))
        #expect(error.retryable)
        #expect(error.code == .unauthenticated)
        #expect(error.message.contains("exit status 3"), "\(error)")
        #expect(error.message.contains("JOBCTL_TOKEN_COMMAND"), "\(error)")
        #expect(!"\(error) \(error.cause ?? "")".contains("SECRET"))
    }

    @Test("a command killed by a signal, or printing nothing, is retryable too")
    func otherFailures() async throws {
        for (command, fragment) in [("kill -9 $$", "signal 9"), ("true", "printed no token")] {
            let backend = GCSBackend(configuration: StorageConfiguration(
                gcsEndpoint: "http://127.0.0.1:\(freeLoopbackPort())", tokenCommand: command, connectTimeout: 5))
            let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://bkt/obj.txt")))
            #expect(error.retryable, "\(command)")
            #expect(error.message.contains(fragment), "\(command): \(error)")
        }
    }

    /// A command printing without end is stopped once it passes the limit, not collected until its time
    /// runs out; one that prints too much and exits is refused the same way (its output never shown).
    @Test("a command that prints more than any token is stopped, its output not kept")
    func floodingCommand() throws {
        for command in ["exec yes SECRET-FLOOD", "head -c 100000 /dev/zero | tr '\\0' a; echo SECRET-TAIL"] {
            let started = ContinuousClock.now
            let error = #expect(throws: StorageError.self) {
                try GCSTokenSource.commandToken(command, timeLimit: .seconds(20))
            }
            #expect(error?.retryable == true)
            #expect(error?.message.contains("printed more than 64 KiB") == true, "\(command): \(String(describing: error))")
            #expect(error?.message.contains("SECRET") == false)
            #expect(ContinuousClock.now - started < .seconds(15), "\(command): stopped at the limit, not at the time limit")
        }
    }

    /// The command ran under Foundation's Process, which handed it a descriptor of its own: it counted as
    /// finished only once everything it started in the background had exited, and only the shell was
    /// stopped (a `yes` under it printed on for the whole time limit). Now the command leads a process
    /// group: its end is the shell's, and the whole group is stopped.
    @Test("a command's background processes neither hold its token nor outlive a stop")
    func backgroundProcesses() throws {
        // Its output elsewhere: the token comes as soon as the shell exits.
        var started = ContinuousClock.now
        let token = try GCSTokenSource.commandToken("sleep 30 >/dev/null 2>&1 & echo tok-at-once", timeLimit: .seconds(20))
        #expect(token == "tok-at-once")
        #expect(ContinuousClock.now - started < .seconds(5), "not held by the background sleep")

        // Holding the output: refused after a short wait, and stopped with the rest of its group.
        started = ContinuousClock.now
        let held = #expect(throws: StorageError.self) {
            try GCSTokenSource.commandToken("sleep 217 & echo tok-held", timeLimit: .seconds(20))
        }
        #expect(held?.message.contains("left its output open") == true, "\(String(describing: held))")
        #expect(ContinuousClock.now - started < .seconds(8))
        usleep(200_000)
        let left = try runProcess("/usr/bin/pgrep", ["-f", "^sleep 217$"])
        #expect(left.stdout.isEmpty, "the background sleep was stopped: \(left.stdout)")

        // A flood from a child of the shell (no exec): stopped at the size limit, not the time limit.
        started = ContinuousClock.now
        let flood = #expect(throws: StorageError.self) {
            try GCSTokenSource.commandToken("yes SECRET-FLOOD; true", timeLimit: .seconds(20))
        }
        #expect(flood?.message.contains("printed more than 64 KiB") == true, "\(String(describing: flood))")
        #expect(ContinuousClock.now - started < .seconds(8))
    }

    @Test("a command that hangs is stopped at its time limit, and that is retryable too")
    func hangingCommand() throws {
        let started = ContinuousClock.now
        let error = #expect(throws: StorageError.self) {
            try GCSTokenSource.commandToken("echo SECRET-EARLY; exec sleep 30", timeLimit: .milliseconds(300))
        }
        #expect(error?.retryable == true)
        #expect(error?.message.contains("did not finish within") == true, "\(String(describing: error))")
        #expect(error?.message.contains("SECRET") == false)
        // Stopped long before the command would have ended by itself.
        #expect(ContinuousClock.now - started < .seconds(25))
    }
}

/// A configuration file's value reaches the storage settings through the environment, so every message
/// named the variable: "JOBCTL_CA_BUNDLE names '…', which holds no PEM certificate" to a user who had
/// written `ca_bundle:` in a file. At start a message names the file's key and place; in a job's error
/// (kept in the event log, read elsewhere and later) the key alone.
@Suite("Storage settings named as the user gave them", .onTestThreads)
struct SettingOriginsTests {
    private static let buckets = "/tmp/jobctl-buckets-default"

    private static func fromFile(_ pairs: [(String, String)]) -> SettingOrigins {
        var origins = SettingOrigins()
        for (index, (variable, key)) in pairs.enumerated() { origins[variable] = .file(key: key, place: "cfg.yaml:\(index + 1):5") }
        return origins
    }

    @Test("a start-up problem with a file's value names its key and FILE:LINE:COL, not the variable")
    func startUpMessages() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let empty = directory.file("empty.pem")
        try "".write(toFile: empty, atomically: true, encoding: .utf8)
        let plain = directory.file("plain")
        try "x".write(toFile: plain, atomically: true, encoding: .utf8)
        let missing = directory.file("missing.json")
        let origins = Self.fromFile([("JOBCTL_CA_BUNDLE", "ca_bundle"), ("GOOGLE_APPLICATION_CREDENTIALS", "google_application_credentials"),
                                     ("JOBCTL_BUCKETS", "buckets"), ("JOBCTL_TOKEN_COMMAND", "token_command"), ("JOBCTL_SLICES", "slices"),
                                     ("JOBCTL_REFUSE_EXECUTABLES", "refuse_executables"), ("STORAGE_EMULATOR_HOST", "storage_emulator_host")])
        for (environment, expected) in [
            (["JOBCTL_CA_BUNDLE": empty], "ca_bundle (cfg.yaml:1:5) names '\(empty)', which holds no PEM certificate"),
            (["GOOGLE_APPLICATION_CREDENTIALS": missing], "google_application_credentials (cfg.yaml:2:5) names \(missing), which cannot be read"),
            (["JOBCTL_BUCKETS": plain], "buckets (cfg.yaml:3:5) names '\(plain)', which is a file"),
            (["GOOGLE_OAUTH_ACCESS_TOKEN": "tok", "JOBCTL_TOKEN_COMMAND": "echo x"],
             "both GOOGLE_OAUTH_ACCESS_TOKEN and token_command (cfg.yaml:4:5) are set"),
            (["JOBCTL_TOKEN_COMMAND": " "], "token_command (cfg.yaml:4:5) is blank"),
            (["JOBCTL_SLICES": "0"], "slices (cfg.yaml:5:5) must be a whole number of slices from 2 to 16, not '0'"),
            (["JOBCTL_REFUSE_EXECUTABLES": ",,"], "refuse_executables (cfg.yaml:6:5) lists entries"),
            (["STORAGE_EMULATOR_HOST": "ftp://x"], "storage_emulator_host (cfg.yaml:7:5) must be HOST:PORT"),
        ] {
            let error = #expect(throws: StorageError.self, "\(environment)") {
                try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: Self.buckets, origins: origins)
            }
            #expect(error?.message.contains(expected) == true, "\(error?.message ?? "accepted")")
            let named = environment.keys.filter { $0 != "GOOGLE_OAUTH_ACCESS_TOKEN" && error?.message.contains($0) == true }
            #expect(named.isEmpty, "names \(named): \(error?.message ?? "")")
            // From the environment, the variable as before.
            let plainError = #expect(throws: StorageError.self) {
                try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: Self.buckets)
            }
            #expect(environment.keys.allSatisfy { plainError?.message.contains($0) == true }, "\(plainError?.message ?? "")")
        }
    }

    @Test("check finds every problem, and fromEnvironment throws the first of them")
    func everyProblem() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let empty = directory.file("empty.pem")
        try "".write(toFile: empty, atomically: true, encoding: .utf8)
        let environment = ["JOBCTL_CHUNK_SIZE": "3", "JOBCTL_SLICES": "0", "JOBCTL_CA_BUNDLE": empty, "ALL_PROXY": "ftp://127.0.0.1:21"]
        let problems = StorageConfiguration.check(environment, localBucketsDirectory: Self.buckets).problems
        #expect(problems.map(\.variables) == [["JOBCTL_CHUNK_SIZE"], ["JOBCTL_SLICES"], ["JOBCTL_CA_BUNDLE"], ["ALL_PROXY"]],
                "\(problems.map(\.error.message))")
        let error = #expect(throws: StorageError.self) {
            try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: Self.buckets)
        }
        #expect(error?.message == problems.first?.error.message)
    }

    @Test("a job's error names the file's key without its path: refuse_executables, the limits, the CAs")
    func jobMessages() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let bundle = directory.file("ca.pem")
        try "-----BEGIN CERTIFICATE-----\n".write(toFile: bundle, atomically: true, encoding: .utf8)
        let environment = ["JOBCTL_REFUSE_EXECUTABLES": "*", "JOBCTL_STALL_TIMEOUT": "5m", "JOBCTL_MIN_RATE": "2k", "JOBCTL_CA_BUNDLE": bundle]
        let origins = Self.fromFile([("JOBCTL_REFUSE_EXECUTABLES", "refuse_executables"), ("JOBCTL_STALL_TIMEOUT", "stall_timeout"),
                                     ("JOBCTL_MIN_RATE", "min_rate"), ("JOBCTL_CA_BUNDLE", "ca_bundle")])
        let fromFile = try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: Self.buckets, origins: origins)
        let refused = #expect(throws: StorageError.self) {
            try fromFile.uploadPolicy.check(reference: try StorageReference(parsing: "gs://bkt/setup.exe"), sourceName: nil)
        }
        #expect(refused?.message.contains("the configuration file's refuse_executables lists '*'") == true
                    && refused?.message.contains("take that entry out of the configuration file's refuse_executables") == true
                    && refused?.message.contains("cfg.yaml") == false && refused?.message.contains("JOBCTL_") == false,
                "\(refused?.message ?? "")")
        #expect(fromFile.curlOptions.stallTimeoutSetting == "the configuration file's stall_timeout")
        #expect(fromFile.curlOptions.minRateSetting == "the configuration file's min_rate")
        #expect(fromFile.certificateTrust.source == "the configuration file's ca_bundle")
        #expect(fromFile.certificateTrust.settingToChange == "the configuration file's ca_bundle")

        let fromEnvironment = try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: Self.buckets)
        let named = #expect(throws: StorageError.self) {
            try fromEnvironment.uploadPolicy.check(reference: try StorageReference(parsing: "gs://bkt/setup.exe"), sourceName: nil)
        }
        #expect(named?.message.contains("JOBCTL_REFUSE_EXECUTABLES lists '*'") == true, "\(named?.message ?? "")")
        #expect(fromEnvironment.curlOptions.stallTimeoutSetting == "worker --stall-timeout or JOBCTL_STALL_TIMEOUT")
        #expect(fromEnvironment.certificateTrust.source == "JOBCTL_CA_BUNDLE" && fromEnvironment.certificateTrust.settingToChange == nil)
    }

    @Test("a failing token command from the file is named by its key in the job's error, never its text")
    func tokenCommandFromFile() async throws {
        var configuration = try StorageConfiguration.fromEnvironment(
            ["JOBCTL_TOKEN_COMMAND": "echo SECRET-STDOUT; exit 3", "STORAGE_EMULATOR_HOST": "http://127.0.0.1:\(freeLoopbackPort())"],
            localBucketsDirectory: Self.buckets, origins: Self.fromFile([("JOBCTL_TOKEN_COMMAND", "token_command")]))
        configuration.connectTimeout = 5
        let error = try failure(await run(GCSBackend(configuration: configuration), JobSpec(kind: .downloadMemory, source: "gs://bkt/obj.txt")))
        #expect(error.message.contains("the configuration file's token_command failed with exit status 3"), "\(error)")
        #expect(!error.message.contains("JOBCTL_TOKEN_COMMAND") && !error.message.contains("cfg.yaml"), "\(error)")
        #expect(!"\(error) \(error.cause ?? "")".contains("SECRET"))
    }
}
