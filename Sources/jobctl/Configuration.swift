import Foundation
import JobModel
import Manifest
import PostgresStore
import Storage
import StorePort

// MARK: - The settings a configuration file may hold

/// One setting of the configuration file: what is an environment variable or a flag today.
///
/// A setting reaches the program the way it always has: an environment-backed setting fills its
/// variable when the environment leaves it unset or empty (so the environment wins over the file), and
/// a flag-backed one fills its option when the command line does not give it (so the flag wins).
struct Setting: Sendable {
    enum Route: Sendable {
        /// Read from this environment variable.
        case environment(String)
        /// Given as this `jobctl worker` option, checked as the flag is.
        case option(OptionSpec)
        /// This `jobctl worker` flag, set by `true` (`false` leaves it off); no flag turns one off.
        case flag(OptionSpec)
    }

    let key: String
    let route: Route
    /// What applies when nothing sets it.
    let defaultText: String
    /// Whether the value may be a list (repeatable options).
    let isList: Bool
    /// How the value is shown: secrets redacted.
    let show: @Sendable (String) -> String

    init(_ key: String, _ route: Route, default defaultText: String, list: Bool = false,
         show: @escaping @Sendable (String) -> String = { $0 }) {
        self.key = key
        self.route = route
        self.defaultText = defaultText
        self.isList = list
        self.show = show
    }

    /// The environment variable or `--option` it stands for.
    var routeName: String {
        switch route {
        case .environment(let variable): variable
        case .option(let spec), .flag(let spec): "--\(spec.long)"
        }
    }

    /// What is wrong with `value` for the environment variable `variable`, as the program that reads it
    /// would refuse it (storage settings: the worker; the database answer limit: every PostgreSQL
    /// command), or nil when it is fine or not checked by form. The message names the setting `name`:
    /// the variable unless given (a configuration file's key, as the file spells it).
    static func formProblem(of variable: String, value: String, name: String? = nil) -> (message: String, refusedBy: String)? {
        if variable == Context.answerTimeoutVariable {
            do throws(UsageError) { _ = try Context.answerTimeoutMs(parsing: value, name: name ?? variable) } catch {
                return (error.message, "a command on PostgreSQL")
            }
            return nil
        }
        do throws(StorageError) { try StorageConfiguration.checkForm(of: variable, value: value, name: name) } catch {
            return (error.message, "the worker")
        }
        return nil
    }

    /// A flag's refusal of a file's `value` for `key`, naming the key where it names the flag: checked as
    /// the flag is, the message said "--concurrency 0 is out of range" of a file that says `concurrency: 0`.
    static func optionProblem(_ message: String, flag: String, key: String) -> String {
        var named = ""
        var rest = Substring(message)
        while let found = rest.range(of: flag) {
            let next = rest[found.upperBound...].first
            let whole = next.map { !($0.isLetter || $0.isNumber || $0 == "-") } ?? true
            named += rest[..<found.lowerBound] + (whole ? key : flag)
            rest = rest[found.upperBound...]
        }
        named += rest
        return named == message ? "\(key): \(message)" : named
    }

    /// A flag key's value: YAML's `true` or `false` (any case); nil for anything else.
    static func flagValue(_ values: [String]) -> Bool? {
        guard values.count == 1 else { return nil }
        switch values[0].lowercased() {
        case "true": return true
        case "false": return false
        default: return nil
        }
    }

    /// The keys whose value is a local path (`db` unless a PostgreSQL URL).
    static let pathKeys: Set<String> = ["db", "buckets", "google_application_credentials", "ca_bundle"]

    /// Why a file's `value` for `key` is refused as a relative path, or nil. Unlike a flag or a variable,
    /// given where the command runs, a file is read by every command wherever it runs: a relative path
    /// there would name another database, buckets, credentials or CAs in every folder (a checkout's, a
    /// download's) — the file's own folder is no better a guess. `~` is not expanded.
    static func relativePathProblem(key: String, value: String) -> String? {
        guard pathKeys.contains(key), !value.isEmpty, !value.hasPrefix("/") else { return nil }
        if key == "db" && isPostgresURL(value) { return nil }
        return "'\(key == "db" ? redactedDatabaseURL(value) : value)' is a relative path: read from a configuration file, it would name "
            + "a file in whatever folder a command runs in; write it absolute (/…)"
    }

    /// Every setting, in the order `jobctl config` lists them.
    static let all: [Setting] = [
        Setting("db", .environment("JOBCTL_DB"), default: "jobctl.db", show: redactedDatabaseURL),
        Setting("buckets", .environment("JOBCTL_BUCKETS"), default: "buckets/ beside the database"),
        Setting("db_answer_timeout", .environment(Context.answerTimeoutVariable),
                default: "30s on PostgreSQL (worker: its lease, at least 10s; archive, replay, migrate: none)"),
        Setting("queue", .option(Options.workerQueue.spec), default: "every queue", list: true),
        Setting("concurrency", .option(Options.concurrency.spec), default: "4"),
        Setting("claim_ahead", .option(Options.claimAhead.spec), default: "the concurrency"),
        Setting("lease", .option(Options.lease.spec), default: "30s"),
        Setting("stall_timeout", .environment("JOBCTL_STALL_TIMEOUT"), default: "60s"),
        Setting("min_rate", .environment("JOBCTL_MIN_RATE"), default: "1KiB/s"),
        Setting("log_format", .option(Options.logFormat.spec), default: "text"),
        Setting("metrics", .option(Options.metrics.spec), default: "off"),
        Setting("metrics_allow_remote", .flag(Options.metricsAllowRemote.spec), default: "false"),
        Setting("bwlimit", .option(Options.bandwidthLimit.spec), default: "unlimited"),
        Setting("chunk_size", .environment("JOBCTL_CHUNK_SIZE"), default: "8MiB"),
        Setting("resumable_threshold", .environment("JOBCTL_RESUMABLE_THRESHOLD"), default: "5MiB"),
        Setting("storage_emulator_host", .environment("STORAGE_EMULATOR_HOST"), default: "none (Google's endpoint)",
                show: SecretRedaction.redactEndpoint),
        Setting("google_application_credentials", .environment("GOOGLE_APPLICATION_CREDENTIALS"), default: "none"),
        Setting("token_command", .environment("JOBCTL_TOKEN_COMMAND"), default: "none", show: { _ in "REDACTED" }),
        Setting("ca_bundle", .environment("JOBCTL_CA_BUNDLE"), default: "the system's CAs"),
        Setting("refuse_executables", .environment("JOBCTL_REFUSE_EXECUTABLES"), default: "none"),
        Setting("sliced_threshold", .environment("JOBCTL_SLICED_THRESHOLD"), default: "150MiB"),
        Setting("slices", .environment("JOBCTL_SLICES"), default: "4"),
    ]
}

// MARK: - Finding and reading the file

/// The configuration in effect: what the file set, and where.
struct Configuration: Sendable {
    /// Values from a file, by key, with `FILE:LINE:COL`.
    var fileValues: [String: (values: [String], source: String)] = [:]
    /// The files read, in the order they were applied (later ones win).
    var files: [String] = []

    /// The environment variable naming the file, as `--config` does.
    static let environmentVariable = "JOBCTL_CONFIG"
    /// The system-wide file.
    static let systemPath = "/etc/jobctl/config.yaml"

    /// The files to read: `--config FILE` or `$JOBCTL_CONFIG` alone (it must exist); otherwise the
    /// system file, then the user's (`$XDG_CONFIG_HOME/jobctl/config.yaml`, `~/.config/…` when unset),
    /// which wins, each when it exists. Throws when whether one exists cannot be told (`isPresent`).
    static func paths(flag: String?, environment: [String: String]) throws(ConfigurationError) -> (paths: [String], explicit: Bool) {
        if let explicit = flag ?? environment[environmentVariable].flatMap({ $0.isEmpty ? nil : $0 }) {
            return ([explicit], true)
        }
        // Each default file with the folder a user changes to make it readable, and how it was found.
        var candidates = [(path: systemPath, remedy: "let this user search \((systemPath as NSString).deletingLastPathComponent) "
                            + "(its mode or group)")]
        // Absolute paths only, as the XDG base directory specification says: a relative one would read
        // a file from whatever folder the command runs in (a checkout's, a download's).
        let absolute = { (name: String) in environment[name].flatMap { $0.hasPrefix("/") ? $0 : nil } }
        if let base = absolute("XDG_CONFIG_HOME") {
            candidates.append(("\(base)/jobctl/config.yaml", "let this user search its folders, or set $XDG_CONFIG_HOME to this user's own"))
        } else if let home = absolute("HOME") {
            candidates.append(("\(home)/.config/jobctl/config.yaml", "let this user search its folders, or set $HOME to this user's own "
                                + "(setpriv and sudo -E keep the caller's)"))
        }
        var paths: [String] = []
        for candidate in candidates where try isPresent(candidate.path, remedy: candidate.remedy) {
            paths.append(candidate.path)
        }
        return (paths, false)
    }

    /// Whether something is at `path` itself, not following a last symbolic link: a default file that
    /// is missing is silently not read, but a link to nowhere (or to itself) was skipped as if missing,
    /// while the same link given as `--config` was an error. Read, it is now an error naming it. Only
    /// "no such entry" is missing (`PathLookup`): a file in a folder this user may not search was taken
    /// for missing too, and every command ran without it — a `submit` made a stray `jobctl.db` in the
    /// current folder, where no worker looks. That is an error naming the file, why and `remedy`.
    static func isPresent(_ path: String, remedy: String) throws(ConfigurationError) -> Bool {
        do throws(PathLookup.Failure) { return try PathLookup.entry(at: path) != nil } catch {
            throw ConfigurationError("\(path): cannot tell whether it exists (\(error.reason)); jobctl reads this file when it "
                                     + "exists: \(remedy), or name the file to read with --config")
        }
    }

    /// Reads the configuration; throws a `ConfigurationError` with every problem at its file, line and column.
    static func load(flag: String?, environment: [String: String]) throws -> Configuration {
        let (paths, explicit) = try paths(flag: flag, environment: environment)
        var configuration = Configuration()
        for path in paths {
            let data = try ConfigurationFile.read(path, explicit: explicit)
            let read = SettingsFile.read(data: data, path: path, keys: Setting.all.map(\.key),
                                         listKeys: Set(Setting.all.filter(\.isList).map(\.key)))
            let entries: [SettingsEntry]
            switch read {
            case .success(let found): entries = found
            case .failure(let errors): throw ConfigurationError(errors.render())
            }
            var problems: [String] = []
            for entry in entries {
                guard let setting = Setting.all.first(where: { $0.key == entry.key }) else { continue }
                let place = "\(path):\(entry.line):\(entry.column)"
                switch setting.route {
                case .option(let spec):
                    for value in entry.values {
                        do { try spec.validate?(value) } catch {
                            let message = (error as? UsageError)?.message ?? String(describing: error)
                            problems.append("\(place): error: \(Setting.optionProblem(message, flag: "--\(spec.long)", key: entry.key))")
                        }
                    }
                case .flag:
                    if Setting.flagValue(entry.values) == nil {
                        problems.append("\(place): error: \(entry.key) must be true or false, not '\(entry.values.joined(separator: ","))'")
                    }
                case .environment(let variable):
                    // Its form, as the program reads the variable it stands for, named as the file names it
                    // (what a path names is checked where the worker checks it: `StorageConfiguration.check`).
                    if let problem = Setting.formProblem(of: variable, value: entry.values.joined(separator: ","), name: entry.key) {
                        problems.append("\(place): error: \(problem.message)")
                    }
                }
                if let problem = Setting.relativePathProblem(key: entry.key, value: entry.values.joined(separator: ",")) {
                    problems.append("\(place): error: \(entry.key): \(problem)")
                }
                configuration.fileValues[entry.key] = (entry.values, place)
            }
            if !problems.isEmpty { throw ConfigurationError(problems.joined(separator: "\n")) }
            configuration.files.append(path)
        }
        return configuration
    }

    /// `environment` with every environment-backed setting the file sets and the environment leaves
    /// unset or empty filled in.
    func environment(over environment: [String: String]) -> [String: String] {
        var merged = environment
        for setting in Setting.all {
            guard case .environment(let variable) = setting.route, let value = fileValues[setting.key],
                  (environment[variable] ?? "").isEmpty else { continue }
            merged[variable] = value.values.joined(separator: ",")
        }
        return merged
    }

    /// Where each environment-backed storage setting in `environment(over:)` came from: the file's key and
    /// place for the ones it filled in, the environment for the rest. Messages name what the user wrote.
    func origins(over environment: [String: String]) -> SettingOrigins {
        var origins = SettingOrigins()
        for setting in Setting.all {
            guard case .environment(let variable) = setting.route, let value = fileValues[setting.key],
                  (environment[variable] ?? "").isEmpty else { continue }
            origins[variable] = .file(key: setting.key, place: value.source)
        }
        return origins
    }

    /// How a worker's message names a flag-backed setting: `--flag` when given on the command line (or
    /// not at all), the file's `KEY (FILE:LINE:COL)` when the file filled it in (see `arguments`).
    func name(of spec: OptionSpec, given arguments: ParsedArguments) -> String {
        guard let setting = Setting.all.first(where: { if case .option(let option) = $0.route { option.long == spec.long } else { false } }),
              let value = fileValues[setting.key], arguments.filledFromFile.contains(spec.long) else { return "--\(spec.long)" }
        return "\(setting.key) (\(value.source))"
    }

    /// `arguments` with every flag-backed setting the file sets and was not given, for `jobctl worker`
    /// (the flags are the worker's: `list --queue`, a filter, is not the worker's `--queue`).
    func arguments(_ arguments: ParsedArguments, for command: CommandSpec) -> ParsedArguments {
        guard command.name == Commands.worker.name else { return arguments }
        var filled = arguments
        for setting in Setting.all {
            guard let value = fileValues[setting.key] else { continue }
            switch setting.route {
            case .option(let spec) where command.options.contains(where: { $0.long == spec.long }):
                filled.fillIfAbsent(spec.long, value.values)
            case .flag(let spec) where command.options.contains(where: { $0.long == spec.long }):
                if Setting.flagValue(value.values) == true { filled.fillFlagIfAbsent(spec.long) }
            default:
                continue
            }
        }
        return filled
    }
}

/// Reading a configuration file the way `ssh` reads its own: only a regular file that no one but its
/// owner — this user or root — may change. The file sets the token command (a command this user runs),
/// the CAs trusted, the credentials and the servers every transfer goes to, so a file another user can
/// write is another user's control over everything this user's jobs touch.
enum ConfigurationFile {
    /// The largest file read (a configuration is a few hundred bytes).
    static let maxBytes = 1 << 20

    /// The file's bytes, checked as above on the descriptor read (a file swapped in after the check is
    /// not the one read); a `ConfigurationError` naming the file, what is wrong and the fix otherwise.
    static func read(_ path: String, explicit: Bool) throws -> Data {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else {
            let code = errno
            var link = stat()
            if !explicit, lstat(path, &link) == 0, link.st_mode & S_IFMT == S_IFLNK {
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)).map { " to \($0)" } ?? ""
                throw ConfigurationError("\(path): a symbolic link\(target) that cannot be followed (\(String(cString: strerror(code)))); "
                                         + "fix the link or remove it (jobctl reads this file when it exists)")
            }
            let reason = code == ENOENT && explicit ? "no such file" : "cannot read it (\(String(cString: strerror(code))))"
            let remedy = explicit ? "check --config or $\(Configuration.environmentVariable)" : "jobctl reads this file when it exists"
            throw ConfigurationError("\(path): \(reason); \(remedy)")
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw ConfigurationError("\(path): not a regular file; check --config or $\(Configuration.environmentVariable)")
        }
        if let problem = writableByOthers(info, path: path) ?? folderProblem(of: path) {
            throw ConfigurationError("\(path): refused: \(problem) — whoever can change it chooses the commands, "
                                     + "certificates, credentials and servers jobctl uses as this user")
        }
        guard info.st_size <= maxBytes else {
            throw ConfigurationError("\(path): \(info.st_size) bytes, more than a configuration file holds (\(maxBytes) at most)")
        }
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { Foundation.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw ConfigurationError("\(path): cannot read it (\(String(cString: strerror(errno)))); check --config or $\(Configuration.environmentVariable)")
            }
            if count == 0 { return data }
            data.append(contentsOf: chunk[0..<count])
            guard data.count <= maxBytes else {
                throw ConfigurationError("\(path): more than a configuration file holds (\(maxBytes) bytes at most)")
            }
        }
    }

    /// What makes the file (its `stat`) another user's to change: an owner neither this user nor root,
    /// or write permission for others. Group write is allowed: a group is one the administrator made
    /// (the service's own, whose members write its database and so choose its transfers anyway).
    static func writableByOthers(_ info: stat, path: String) -> String? {
        let me = geteuid()
        if info.st_uid != me && info.st_uid != 0 {
            return "it belongs to \(SystemUser.described(info.st_uid)), not to \(thisUserOrRoot) (chown it, or copy it and use --config)"
        }
        if info.st_mode & S_IWOTH != 0 {
            return "every user may write to it (mode \(String(format: "%04o", info.st_mode & 0o7777)); chmod o-w \(path))"
        }
        return nil
    }

    /// The same for the folder holding `path`: one others may write to without the sticky bit lets them
    /// put their own file in its place.
    static func folderProblem(of path: String) -> String? {
        let folder = (path as NSString).deletingLastPathComponent
        var info = stat()
        guard stat(folder.isEmpty ? "." : folder, &info) == 0 else { return nil }
        let me = geteuid()
        if info.st_uid != me && info.st_uid != 0 {
            return "its folder \(folder.isEmpty ? "." : folder) belongs to \(SystemUser.described(info.st_uid)), not to \(thisUserOrRoot)"
        }
        if info.st_mode & S_IWOTH != 0 && info.st_mode & S_ISVTX == 0 {
            return "every user may replace it: its folder \(folder.isEmpty ? "." : folder) is writable by all (mode "
                + "\(String(format: "%04o", info.st_mode & 0o7777))) without the sticky bit"
        }
        return nil
    }

    private static var thisUserOrRoot: String {
        geteuid() == 0 ? "root" : "\(SystemUser.described(geteuid())) or root"
    }
}

/// A configuration file that cannot be used: printed as it is (it names the file, line and column), exit 64.
struct ConfigurationError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: - The storage settings

extension Context {
    /// Where each storage setting came from: the configuration file for those it filled in.
    var settingOrigins: SettingOrigins { configuration.origins(over: processEnvironment) }

    /// The storage settings of every command that touches storage (the worker, `submit`'s listings,
    /// `orphans`, `archive`'s leftovers), checked as `StorageConfiguration.check` does: a bad one throws,
    /// named as the user gave it (the variable, or the file's key and place).
    func storageConfiguration() throws(StorageError) -> StorageConfiguration {
        try StorageConfiguration.fromEnvironment(environment, localBucketsDirectory: localBucketsDirectory, origins: settingOrigins)
    }

    /// The same check with every problem it finds: what `jobctl config` reports.
    func storageCheck() -> (configuration: StorageConfiguration, problems: [StorageSettingProblem]) {
        StorageConfiguration.check(environment, localBucketsDirectory: localBucketsDirectory, origins: settingOrigins)
    }
}

// MARK: - jobctl config

/// The proxy variables libcurl reads from the environment (not settings of the file: libcurl reads the
/// process's environment itself), as `jobctl config` shows them: each with its value, a password in it
/// redacted, or "none". `HTTP_PROXY` is shown only when set, since libcurl does not read it; so is
/// `SSLKEYLOGFILE`, which libcurl does read: it writes every TLS session's keys there; and so is
/// `OPENSSL_CONF`, which OpenSSL reads (one `OpenSSLConfiguration` refuses is named on standard error).
func proxyRows(_ environment: [String: String]) -> [(key: String, value: String, source: String)] {
    var rows = ProxyEnvironment.variables.map { variable -> (key: String, value: String, source: String) in
        guard let value = environment[variable], !value.isEmpty else { return (variable, "none", "default") }
        return (variable, ProxyEnvironment.redacted(value), "environment ($\(variable))")
    }
    if let keyLog = environment["SSLKEYLOGFILE"], !keyLog.isEmpty {
        rows.append(("SSLKEYLOGFILE", keyLog, "environment ($SSLKEYLOGFILE): libcurl writes every TLS session's keys there"))
    }
    if let conf = environment[OpenSSLConfiguration.variable], !conf.isEmpty {
        rows.append((OpenSSLConfiguration.variable, conf, "environment ($\(OpenSSLConfiguration.variable)): OpenSSL reads its configuration there (hashing, TLS)"))
    }
    if let ignored = environment["HTTP_PROXY"], !ignored.isEmpty {
        rows.insert(("HTTP_PROXY", ProxyEnvironment.redacted(ignored), "environment ($HTTP_PROXY), not read: libcurl takes http_proxy"),
                    at: 1)
    }
    return rows
}

/// The libpq variables set in `environment` (not settings of the file: libpq reads the process's
/// environment itself), as `jobctl config` shows them after the proxies: only those set, `PGPASSWORD`
/// redacted, each saying what it does with the command's database — libpq's keyword unless the URL sets
/// it. `PGOPTIONS` chose the log's schema with no mention anywhere (`LibpqEnvironment`).
func libpqRows(_ environment: [String: String], database: String) -> [(key: String, value: String, source: String)] {
    LibpqEnvironment.shown(environment, target: database).map { ($0.name, $0.value, "environment ($\($0.name)): \($0.effect)") }
}

extension Commands {
    static let config = CommandSpec(
        name: "config",
        abstract: "Show every setting's effective value and where it came from.",
        options: [Options.json.help("Print the settings as JSON.")],
        discussion: """
        Settings come from, in order of precedence: a flag, the environment, the configuration file, the
        default. The file is YAML: --config FILE or $JOBCTL_CONFIG names it; otherwise
        /etc/jobctl/config.yaml and then $XDG_CONFIG_HOME/jobctl/config.yaml (~/.config/… when unset) are
        read when they exist, the second winning. Keys: \(Setting.all.map(\.key).joined(separator: ", ")).
        An unknown key or a bad value is an error at its file, line and column. The proxy variables of the
        environment that HTTP(S) transfers honour (\(ProxyEnvironment.variables.joined(separator: ", "))) are listed
        after the settings, then every libpq variable that is set (PGHOST, PGOPTIONS, PGPASSWORD, …), which
        libpq reads for what a PostgreSQL URL leaves out. Secrets are redacted, a proxy's password and
        PGPASSWORD too.
        """
    ) { arguments, context in
        struct Row: Encodable {
            let key: String; let value: String; let source: String; let variable: String
        }
        let configuration = context.configuration
        let processEnvironment = context.processEnvironment
        let rows = Setting.all.map { setting -> Row in
            let fromFile = configuration.fileValues[setting.key]
            var value = setting.defaultText
            var source = "default"
            if let fromFile {
                value = fromFile.values.map(setting.show).joined(separator: ",")
                source = fromFile.source
            }
            if case .environment(let variable) = setting.route, let set = processEnvironment[variable], !set.isEmpty {
                value = setting.show(set)
                source = "environment ($\(variable))"
            }
            if setting.key == "ca_bundle", source == "default" {
                // Without JOBCTL_CA_BUNDLE the OpenSSL variables choose the CAs (`CertificateTrust`): the
                // system's CAs are not what is trusted then.
                let openssl = ["SSL_CERT_FILE", "SSL_CERT_DIR"].compactMap { variable in
                    processEnvironment[variable].flatMap { $0.isEmpty ? nil : (variable, $0) }
                }
                if !openssl.isEmpty {
                    value = openssl.map(\.1).joined(separator: " and ")
                    source = "environment (" + openssl.map { "$\($0.0)" }.joined(separator: " and ") + ")"
                }
            }
            if setting.key == "db", let given = try? arguments.value(Options.database) {
                value = setting.show(given)
                source = "flag (--db)"
            }
            // Every value shown passes the redaction of URL-like secrets, whatever its setting's own `show`
            // does: `JOBCTL_REFUSE_EXECUTABLES=https://ru:pw@…` and `JOBCTL_BUCKETS=/b?token=…`, shown as
            // set, printed their secrets.
            return Row(key: setting.key, value: SecretRedaction.redactURLLike(value), source: source, variable: setting.routeName)
        } + (proxyRows(processEnvironment) + libpqRows(processEnvironment, database: context.databasePath)).map {
            Row(key: $0.key, value: SecretRedaction.redactURLLike($0.value), source: $0.source, variable: $0.key)
        }
        // A value the worker would refuse is not in effect: it is shown as set, named on standard error
        // with the worker's own message — found by the checks the worker runs at start, so the two cannot
        // disagree — and the exit status is the one the worker would exit with at the first of them. A
        // value from the environment is named by its variable, one from the file by its key and
        // FILE:LINE:COL; no secret is quoted.
        var problems: [(message: String, status: Int32)] = []
        var notes: [String] = []
        let answerTimeout = Context.answerTimeoutVariable
        if let set = processEnvironment[answerTimeout], !set.isEmpty, let problem = Setting.formProblem(of: answerTimeout, value: set) {
            let said = "jobctl config: $\(answerTimeout): \(TerminalText.clipped(problem.message))"
            // Only PostgreSQL commands read it: on an SQLite log nothing refuses it, so neither does config.
            if context.usesPostgres {
                problems.append(("\(said); \(problem.refusedBy) will not start with it", ExitCode.failure))
            } else {
                notes.append("\(said) (not read here: the log is SQLite)")
            }
        }
        if let problem = OpenSSLConfiguration.problem(processEnvironment) {
            problems.append(("jobctl config: \(TerminalText.clipped(problem)); no command but config will start with it", ExitCode.usage))
        }
        problems += Commands.workerStartProblems(context).map { problem in
            ("jobctl config: \(TerminalText.clipped(problem.message)); the worker will not start with it", problem.status)
        }
        let status = problems.first?.status ?? ExitCode.ok
        let messages = (problems.map(\.message) + notes).map { TerminalText.printable(SecretRedaction.redactURLLike($0)) }
        if arguments[Options.json] {
            struct View: Encodable { let files: [String]; let settings: [Row] }
            emit(try jsonText(View(files: configuration.files, settings: rows)))
            messages.forEach(emitError)
            return status
        }
        // Each key with the flag or variable it stands for (`variable` in the JSON), `(--flag)` or
        // `($VARIABLE)`, under the key when both do not fit on one line (a proxy variable is its own key).
        // At most 100 columns wide, as help is (a pipe too): cells wrap rather than lose their ends.
        let indent = "  "
        let named = rows.map { row -> String in
            guard row.variable != row.key else { return row.key }
            return "\(row.key) (\(row.variable.hasPrefix("--") ? row.variable : "$" + row.variable))"
        }
        let narrowest = rows.reduce(0) { max($0, visibleWidth($1.key), indent.count + 3 + visibleWidth($1.variable)) }
        // A value of thousands of characters (a variable set by mistake) is clipped as messages are.
        let table = zip(named, rows).map { [$0, TerminalText.clipped($1.value), $1.source] }
        emit(renderTable([TableColumn("SETTING (FLAG OR VARIABLE)", fit: .wrap(minimum: narrowest), wrapIndent: indent),
                          TableColumn("VALUE", fit: .wrap(minimum: 16)), TableColumn("SOURCE", fit: .wrap(minimum: 16))],
                         table, width: min(context.width ?? HelpLayout.defaultWidth, HelpLayout.defaultWidth)).text)
        emit(configuration.files.isEmpty ? "no configuration file" : "files: \(configuration.files.joined(separator: ", "))")
        messages.forEach(emitError)
        return status
    }

    /// What a `jobctl worker` started with these settings and no flags would refuse before it runs a job,
    /// in the order it checks them, each with the worker's message and exit status: the storage settings
    /// (`StorageConfiguration.check`, 1), the metrics endpoint (`metricsProblem`, 64), and the database's
    /// target as far as it can be read without a connection (`databaseTargetProblem`, 64;
    /// `PostgresStore.checkURL`, 1). The worker flags a configuration file sets are checked as it loads
    /// (exit 64). No token command is run and no server is contacted.
    static func workerStartProblems(_ context: Context) -> [(message: String, status: Int32)] {
        var problems: [(message: String, status: Int32)] = []
        let origins = context.settingOrigins
        for problem in context.storageCheck().problems {
            let environmentVariable = problem.variables.count == 1 && origins[problem.variables[0]] == .environment ? problem.variables.first : nil
            problems.append(("\(environmentVariable.map { "$\($0): " } ?? "")\(problem.error.message)", ExitCode.failure))
        }
        // The worker's arguments as the file fills them in when no flag is given.
        if let worker = try? context.configuration.arguments(ParsedArguments.parse([], for: Commands.worker), for: Commands.worker),
           let problem = try? metricsProblem(worker, context) {
            problems.append((problem.message, ExitCode.usage))
        }
        if let problem = context.databaseTargetProblem {
            problems.append((problem.message, ExitCode.usage))
        } else if context.usesPostgres {
            do throws(StoreError) { try PostgresStore.checkURL(context.databasePath) } catch {
                problems.append(("\(context.databaseName): \(String(describing: error))", ExitCode.failure))
            }
        }
        return problems
    }
}
