import Foundation
import JobModel

/// Everything the storage backends need to know about their environment. No secrets are logged:
/// `description` never prints the token.
public struct StorageConfiguration: Sendable, CustomStringConvertible {
    /// The GCS JSON API endpoint: `STORAGE_EMULATOR_HOST` when set, else `https://storage.googleapis.com`.
    public var gcsEndpoint: String
    /// Whether `gcsEndpoint` is an emulator (affects the download-URL host and a few protocol quirks).
    public var usesEmulator: Bool
    /// The host of Firebase download URLs: `https://firebasestorage.googleapis.com`, or the emulator.
    public var firebaseEndpoint: String {
        didSet { firebaseHosts = FirebaseHosts(emulator: firebaseEndpoint) }
    }
    /// The hosts whose Firebase-form URLs name `gs://` objects: Firebase's and `firebaseEndpoint`'s. Every
    /// reference a command running with these settings parses is read with them (`reference(parsing:)`),
    /// so an emulator named only in a configuration file is recognised as one named in the environment is.
    public private(set) var firebaseHosts: FirebaseHosts
    /// A bearer token (`GOOGLE_OAUTH_ACCESS_TOKEN`); nil means anonymous or `tokenCommand`.
    public var accessToken: String?
    /// A shell command printing a fresh token (`JOBCTL_TOKEN_COMMAND`), run at start and once on a 401.
    public var tokenCommand: String?
    /// Google credentials used when neither `accessToken` nor `tokenCommand` is set: a service-account or
    /// authorized-user file, or the metadata server. Nil with neither: anonymous.
    public var googleCredentials: GoogleCredentials?
    /// How long before expiry a fetched token is replaced (at most half its lifetime).
    public var tokenRefreshMargin: Duration
    /// The most one token from Google credentials takes, resends included, in seconds.
    public var tokenTimeLimit: Int = GoogleTokenFetcher.defaultTimeLimit
    /// Resumable upload chunk size, a multiple of 256 KiB (default 8 MiB).
    public var chunkSize: Int
    /// GCS uploads up to this size, and up to one chunk, use one request instead of a resumable session
    /// (`JOBCTL_RESUMABLE_THRESHOLD`; default 5 MiB; 0: always a session). Never a resumed upload, nor one
    /// with `if_exists: fail` (see `GCSBackend.uploadInOneRequest`).
    public var singleRequestLimit: Int
    /// Where named local buckets (`file://NAME/...`) live: `NAME` is a directory below this one.
    public var localBucketsDirectory: String
    /// Buckets (by name, `*` for all) whose uploads of executables (.exe .dll .bat .apk .ipa) are refused.
    public var executableUploadPolicy: Set<String>
    /// A transfer that moves no byte for this many seconds fails as retryable ("no data for 60 s"):
    /// `JOBCTL_STALL_TIMEOUT` or `worker --stall-timeout`, within `stallTimeoutRange`.
    public var stallTimeout: Int
    /// A transfer whose average rate over the last `stallTimeout` seconds (jobctl's own pauses left out)
    /// stays below this many bytes per second fails as retryable: `JOBCTL_MIN_RATE` or `worker --min-rate`,
    /// within `minRateRange`; 0 turns it off. Not part of `init`: set it after.
    public var minRate: Int64 = StorageConfiguration.defaultMinRate
    /// Connection timeout in seconds (name lookup, TCP and TLS handshakes).
    public var connectTimeout: Int
    /// The certificate authorities HTTPS servers are checked against.
    public var certificateTrust: CertificateTrust
    /// The bandwidth every transfer run with this configuration (or a copy of it) shares: the worker's
    /// `--bwlimit`. Nil means no process-wide limit. Not part of `init`: set it after.
    public var bandwidth: SharedBandwidth?
    /// GCS downloads to a file of at least this many bytes are sliced: `sliceCount` Range requests of one
    /// generation in parallel, CRC32C per slice combined (as gcloud storage's
    /// `sliced_object_download_threshold`). Nil turns slicing off. `JOBCTL_SLICED_THRESHOLD` or
    /// `worker --sliced-threshold`; default 150 MiB.
    public var slicedThreshold: Int64? = StorageConfiguration.defaultSlicedThreshold
    /// How many slices a sliced download uses: `JOBCTL_SLICES` or `worker --slices`, within `sliceCountRange`.
    public var sliceCount: Int = StorageConfiguration.defaultSliceCount
    /// Where each setting came from, so that messages name what the user wrote (see `SettingOrigins`).
    /// `fromEnvironment` keeps the ones it was given; a `worker` flag that replaces a value after it says so.
    public var origins = SettingOrigins()

    public static let defaultChunkSize = 8 * 1024 * 1024
    /// GCS requires every chunk but the last to be a multiple of this.
    public static let chunkQuantum = 256 * 1024
    /// `JOBCTL_CHUNK_SIZE` values accepted: 256 KiB to 1 GiB (a chunk is re-sent whole after a failure).
    public static let chunkSizeRange = chunkQuantum...(1 << 30)
    /// gcloud storage's default `sliced_object_download_threshold`.
    public static let defaultSlicedThreshold: Int64 = 150 << 20
    /// Thresholds accepted (besides 0/off): 1 MiB to 1 TiB.
    public static let slicedThresholdRange: ClosedRange<Int64> = (1 << 20)...(1 << 40)
    /// gcloud storage's default `sliced_object_download_max_components`.
    public static let defaultSliceCount = 4
    /// Slice counts accepted.
    public static let sliceCountRange = 2...16
    /// The default minimum rate: 1 KiB/s, what curl users commonly pass as `--speed-limit`. A real
    /// link, even a congested mobile one, moves that much a second; a server or middlebox trickling
    /// less holds its worker slot for nothing.
    public static let defaultMinRate: Int64 = 1024
    /// Minimum rates accepted: 0 (off) to 1 TiB/s.
    public static let minRateRange: ClosedRange<Int64> = 0...(1 << 40)
    /// Stall limits accepted: one second to one hour.
    public static let stallTimeoutRange = 1...3600
    /// Tokens are replaced five minutes before they expire, as Google's libraries do (within minutes).
    public static let defaultTokenRefreshMargin = Duration.seconds(300)
    /// Where `gcloud auth application-default login` writes credentials, below `$HOME`.
    public static let wellKnownCredentialsPath = ".config/gcloud/application_default_credentials.json"

    public init(gcsEndpoint: String = "https://storage.googleapis.com", usesEmulator: Bool = false,
                firebaseEndpoint: String = "https://firebasestorage.googleapis.com", accessToken: String? = nil,
                tokenCommand: String? = nil, googleCredentials: GoogleCredentials? = nil,
                tokenRefreshMargin: Duration = StorageConfiguration.defaultTokenRefreshMargin, chunkSize: Int = StorageConfiguration.defaultChunkSize,
                singleRequestLimit: Int = 5 * 1024 * 1024, localBucketsDirectory: String = "buckets",
                executableUploadPolicy: Set<String> = [], stallTimeout: Int = 60, connectTimeout: Int = 15,
                certificateTrust: CertificateTrust = .systemDefault) {
        self.gcsEndpoint = gcsEndpoint
        self.usesEmulator = usesEmulator
        self.firebaseEndpoint = firebaseEndpoint
        self.firebaseHosts = FirebaseHosts(emulator: firebaseEndpoint)
        self.accessToken = accessToken
        self.tokenCommand = tokenCommand
        self.googleCredentials = googleCredentials
        self.tokenRefreshMargin = tokenRefreshMargin
        self.chunkSize = chunkSize
        self.singleRequestLimit = singleRequestLimit
        self.localBucketsDirectory = localBucketsDirectory
        self.executableUploadPolicy = executableUploadPolicy
        self.stallTimeout = stallTimeout
        self.connectTimeout = connectTimeout
        self.certificateTrust = certificateTrust
    }

    /// Reads `STORAGE_EMULATOR_HOST`, `GOOGLE_OAUTH_ACCESS_TOKEN`, `JOBCTL_TOKEN_COMMAND`,
    /// `GOOGLE_APPLICATION_CREDENTIALS`, the gcloud well-known credentials file, `GCE_METADATA_HOST`,
    /// `JOBCTL_CHUNK_SIZE`, `JOBCTL_STALL_TIMEOUT`, `JOBCTL_MIN_RATE`, `JOBCTL_BUCKETS`, `JOBCTL_REFUSE_EXECUTABLES`
    /// (comma-separated bucket names) and the CA settings (`CertificateTrust.fromEnvironment`).
    ///
    /// An unset or empty variable keeps the default; any other value is checked, and a bad one throws
    /// `invalidArgument` (`unauthenticated` for a token) with a message naming the setting as `origins`
    /// says it was given (the variable, a configuration file's key and place) — never a silent fallback.
    /// Tokens are never quoted. The first problem `check` finds is thrown.
    ///
    /// Credentials, first found wins: `GOOGLE_OAUTH_ACCESS_TOKEN` > `JOBCTL_TOKEN_COMMAND` (both set is an
    /// error) > `GOOGLE_APPLICATION_CREDENTIALS` > `$HOME/.config/gcloud/application_default_credentials.json`
    /// (skipped with `STORAGE_EMULATOR_HOST`: an emulator needs no credentials, and a developer's own
    /// login must not be sent to it) > the metadata server when `GCE_METADATA_HOST` is set > the metadata
    /// server at `metadata.google.internal` when `productNameFile` (the DMI product name) says this is a
    /// Google Compute Engine machine (skipped with an emulator too) > anonymous.
    /// A lower source is not read when a higher one is set. A credentials file is read and its key checked
    /// here, so a bad file fails at start, naming the file and the field. `productNameFile` is for tests:
    /// users have no way to move it.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment,
                                       localBucketsDirectory: String, origins: SettingOrigins = SettingOrigins(),
                                       productNameFile: String = GoogleCredentials.gceProductNameFile) throws(StorageError) -> StorageConfiguration {
        let checked = check(environment, localBucketsDirectory: localBucketsDirectory, origins: origins, productNameFile: productNameFile)
        if let problem = checked.problems.first { throw problem.error }
        return checked.configuration
    }

    /// The worker's start-up check of its storage settings (see `fromEnvironment`), with every problem
    /// found rather than the first: `jobctl config` reports what the worker would refuse through this
    /// one function, so the two cannot drift apart. Nothing here runs a token command or touches the
    /// network: a credentials file, a CA bundle and the DMI product name are read, as at every start.
    /// `configuration` is complete only when `problems` is empty.
    public static func check(_ environment: [String: String], localBucketsDirectory: String, origins: SettingOrigins = SettingOrigins(),
                             productNameFile: String = GoogleCredentials.gceProductNameFile)
        -> (configuration: StorageConfiguration, problems: [StorageSettingProblem]) {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        let name = origins.name
        var problems: [StorageSettingProblem] = []
        /// `read`'s value, or nil with its error noted against `variables`.
        func checked<Value>(_ variables: [String], read: () throws(StorageError) -> Value) -> Value? {
            do throws(StorageError) { return try read() } catch {
                problems.append(StorageSettingProblem(variables, error))
                return nil
            }
        }
        var configuration = StorageConfiguration(localBucketsDirectory: localBucketsDirectory)
        configuration.origins = origins
        if let buckets = value("JOBCTL_BUCKETS") {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: buckets, isDirectory: &isDirectory), !isDirectory.boolValue {
                problems.append(StorageSettingProblem(["JOBCTL_BUCKETS"], StorageError(.invalidArgument,
                    "\(name("JOBCTL_BUCKETS")) names '\(buckets)', which is a file; it must be the directory named local buckets live in")))
            }
            // Taken from the folder the command started in, once: looked up again for every job, a relative
            // folder followed the worker's current directory when that was moved, and uploads made a new
            // bucket folder beside it.
            configuration.localBucketsDirectory = CurrentDirectory.anchored(buckets)
        }
        if let emulator = value("STORAGE_EMULATOR_HOST"),
           let endpoint = checked(["STORAGE_EMULATOR_HOST"], read: { () throws(StorageError) in
               try emulatorEndpoint(emulator, from: name("STORAGE_EMULATOR_HOST")) }) {
            configuration.gcsEndpoint = endpoint
            configuration.firebaseEndpoint = endpoint
            configuration.usesEmulator = true
        }
        let token = value("GOOGLE_OAUTH_ACCESS_TOKEN")
        if let token, checked(["GOOGLE_OAUTH_ACCESS_TOKEN"], read: { () throws(StorageError) in
            try BearerToken.validate(token, source: name("GOOGLE_OAUTH_ACCESS_TOKEN")) }) != nil {
            configuration.accessToken = token
        }
        let command = value("JOBCTL_TOKEN_COMMAND")
        if let command {
            configuration.tokenCommand = checked(["JOBCTL_TOKEN_COMMAND"]) { () throws(StorageError) in
                try tokenCommand(parsing: command, from: name("JOBCTL_TOKEN_COMMAND"))
            }
        }
        if token != nil && command != nil {
            problems.append(StorageSettingProblem(["GOOGLE_OAUTH_ACCESS_TOKEN", "JOBCTL_TOKEN_COMMAND"], StorageError(.invalidArgument,
                "both \(name("GOOGLE_OAUTH_ACCESS_TOKEN")) and \(name("JOBCTL_TOKEN_COMMAND")) are set, and only one can be used; "
                    + "keep one of them")))
        }
        // Not read when a token or a token command is given, even one refused above (as a worker never read it).
        if token == nil && command == nil {
            // A problem there is one variable's when GOOGLE_APPLICATION_CREDENTIALS is set; the gcloud file's
            // and GCE_METADATA_HOST's messages name what they are about.
            let named = value("GOOGLE_APPLICATION_CREDENTIALS") != nil ? ["GOOGLE_APPLICATION_CREDENTIALS"] : []
            configuration.googleCredentials = checked(named) { () throws(StorageError) in
                try googleCredentials(environment, usesEmulator: configuration.usesEmulator, productNameFile: productNameFile,
                                      origins: origins)
            } ?? nil
        }
        if let text = value("JOBCTL_CHUNK_SIZE"), let size = checked(["JOBCTL_CHUNK_SIZE"], read: { () throws(StorageError) in
            try chunkSize(parsing: text, from: name("JOBCTL_CHUNK_SIZE")) }) {
            configuration.chunkSize = size
        }
        if let text = value("JOBCTL_RESUMABLE_THRESHOLD"), let limit = checked(["JOBCTL_RESUMABLE_THRESHOLD"], read: { () throws(StorageError) in
            try resumableThreshold(parsing: text, from: name("JOBCTL_RESUMABLE_THRESHOLD")) }) {
            configuration.singleRequestLimit = limit
        }
        if let text = value("JOBCTL_STALL_TIMEOUT"), let seconds = checked(["JOBCTL_STALL_TIMEOUT"], read: { () throws(StorageError) in
            try stallTimeout(parsing: text, from: name("JOBCTL_STALL_TIMEOUT")) }) {
            configuration.stallTimeout = seconds
        }
        if let text = value("JOBCTL_MIN_RATE"), let rate = checked(["JOBCTL_MIN_RATE"], read: { () throws(StorageError) in
            try minRate(parsing: text, from: name("JOBCTL_MIN_RATE")) }) {
            configuration.minRate = rate
        }
        if let text = value("JOBCTL_SLICED_THRESHOLD"), let threshold = checked(["JOBCTL_SLICED_THRESHOLD"], read: { () throws(StorageError) in
            try slicedThreshold(parsing: text, from: name("JOBCTL_SLICED_THRESHOLD")) }) {
            configuration.slicedThreshold = threshold
        }
        if let text = value("JOBCTL_SLICES"), let count = checked(["JOBCTL_SLICES"], read: { () throws(StorageError) in
            try sliceCount(parsing: text, from: name("JOBCTL_SLICES")) }) {
            configuration.sliceCount = count
        }
        if let list = value("JOBCTL_REFUSE_EXECUTABLES"), let entries = checked(["JOBCTL_REFUSE_EXECUTABLES"], read: { () throws(StorageError) in
            try bucketList(list, from: name("JOBCTL_REFUSE_EXECUTABLES")) }) {
            configuration.executableUploadPolicy = entries
        }
        // JOBCTL_CA_BUNDLE alone when set; otherwise SSL_CERT_FILE or SSL_CERT_DIR, which the message names.
        if let trust = checked(value("JOBCTL_CA_BUNDLE") != nil ? ["JOBCTL_CA_BUNDLE"] : [], read: { () throws(StorageError) in
            try CertificateTrust.fromEnvironment(environment, origins: origins) }) {
            configuration.certificateTrust = trust
        }
        for variable in ProxyEnvironment.variables where !variable.lowercased().hasPrefix("no_") {
            if let set = value(variable), let problem = ProxyEnvironment.problem(set) {
                problems.append(StorageSettingProblem([variable], StorageError(.invalidArgument,
                    "$\(variable) is '\(ProxyEnvironment.redacted(set))', which libcurl cannot use as a "
                        + "proxy: \(problem); write [http://|https://|socks5h://…][user:password@]host[:port]")))
            }
        }
        return (configuration, problems)
    }

    /// The Google credentials the environment names, if any (see `fromEnvironment` for the order).
    static func googleCredentials(_ environment: [String: String], usesEmulator: Bool,
                                  productNameFile: String, origins: SettingOrigins = SettingOrigins()) throws(StorageError) -> GoogleCredentials? {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        if let path = value("GOOGLE_APPLICATION_CREDENTIALS") {
            return try GoogleCredentials.load(file: path, source: origins.name("GOOGLE_APPLICATION_CREDENTIALS"))
        }
        // A relative HOME would take the credentials of whatever folder the worker runs in.
        if !usesEmulator, let home = value("HOME"), home.hasPrefix("/") {
            let path = (home.hasSuffix("/") ? home : home + "/") + wellKnownCredentialsPath
            // Only "no such entry" skips it (`PathLookup`): `fileExists` follows links and answers false to
            // any failure, so a file in a folder this user may not search, or a dangling link, was passed
            // over and the worker went on to the metadata server or anonymous access. A link is read (and
            // refused as unreadable when it leads nowhere), as a file is.
            let found: Bool
            do throws(PathLookup.Failure) { found = try PathLookup.entry(at: path) != nil } catch {
                throw StorageError(.unauthenticated, "the gcloud application-default credentials file \(path) cannot be looked for "
                    + "(\(error.reason)); jobctl uses it when it exists: let this user search its folders, set $HOME to this user's "
                    + "own (setpriv and sudo -E keep the caller's), or name credentials in GOOGLE_APPLICATION_CREDENTIALS")
            }
            if found {
                return try GoogleCredentials.load(file: path, source: "the gcloud application-default credentials file")
            }
        }
        if let host = value("GCE_METADATA_HOST") {
            return .metadataServer(host: try GoogleCredentials.metadataHost(host))
        }
        if !usesEmulator, GoogleCredentials.isGoogleComputeEngine(productNameFile: productNameFile) {
            return .metadataServer(host: GoogleCredentials.gceMetadataHost)
        }
        return nil
    }

    // MARK: - Parsing single settings

    /// Checks the form of one environment setting's `value` as `fromEnvironment` reads it — a size, a
    /// duration, a count, an endpoint, a list — without looking at files or the network (what a path
    /// names is `check`'s, which `jobctl config` runs as the worker does). Variables with no form to check
    /// pass. Throws the error `fromEnvironment` would, naming the setting `name` (the variable unless given:
    /// a configuration file's key is named as the file spells it).
    public static func checkForm(of variable: String, value text: String, name: String? = nil) throws(StorageError) {
        guard !text.isEmpty else { return }
        let name = name ?? variable
        switch variable {
        case "JOBCTL_CHUNK_SIZE": _ = try chunkSize(parsing: text, from: name)
        case "JOBCTL_RESUMABLE_THRESHOLD": _ = try resumableThreshold(parsing: text, from: name)
        case "JOBCTL_STALL_TIMEOUT": _ = try stallTimeout(parsing: text, from: name)
        case "JOBCTL_MIN_RATE": _ = try minRate(parsing: text, from: name)
        case "JOBCTL_SLICED_THRESHOLD": _ = try slicedThreshold(parsing: text, from: name)
        case "JOBCTL_SLICES": _ = try sliceCount(parsing: text, from: name)
        case "JOBCTL_REFUSE_EXECUTABLES": _ = try bucketList(text, from: name)
        case "STORAGE_EMULATOR_HOST": _ = try emulatorEndpoint(text, from: name)
        case "JOBCTL_TOKEN_COMMAND": _ = try tokenCommand(parsing: text, from: name)
        default: break
        }
    }

    /// A `JOBCTL_TOKEN_COMMAND` value: any command but a blank one. Never quoted (it may hold a secret).
    static func tokenCommand(parsing text: String, from source: String = "JOBCTL_TOKEN_COMMAND") throws(StorageError) -> String {
        guard !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw StorageError(.invalidArgument, "\(source) is blank; set it to a command that prints an access token, or unset it")
        }
        return text
    }

    /// `JOBCTL_RESUMABLE_THRESHOLD` values accepted: up to 1 GiB (the largest chunk); 0 or `off` sends
    /// every upload in a resumable session.
    public static let resumableThresholdRange: ClosedRange<Int64> = 0...(1 << 30)

    /// The largest GCS upload sent in one request (`5MiB`, `0`, `off`), within `resumableThresholdRange`
    /// (gcloud storage's `resumable_threshold`). The chunk size caps it where it is smaller.
    public static func resumableThreshold(parsing text: String, from source: String = "JOBCTL_RESUMABLE_THRESHOLD") throws(StorageError) -> Int {
        if DecimalText.trimmed(text).lowercased() == "off" { return 0 }
        guard let bytes = sizeOrTooLarge(text) else {
            throw StorageError(.invalidArgument,
                               "\(source) must be a size like 5MiB, or 0 or off to send every upload in a resumable session, not '\(text)'\(ByteSize.grammarNote(for: text))")
        }
        guard resumableThresholdRange.contains(bytes) else {
            throw StorageError(.invalidArgument, "\(source) must be between 0 and 1 GiB, not '\(text)'")
        }
        return Int(bytes)
    }

    /// A chunk size (`8MiB`, `8388608`) within `chunkSizeRange`, rounded down to a multiple of 256 KiB;
    /// `source` names where the text came from in the error.
    public static func chunkSize(parsing text: String, from source: String = "JOBCTL_CHUNK_SIZE") throws(StorageError) -> Int {
        guard let bytes = sizeOrTooLarge(text) else {
            throw StorageError(.invalidArgument, "\(source) must be a size like 8MiB or 8388608 (bytes), not '\(text)'\(ByteSize.grammarNote(for: text))")
        }
        guard bytes >= Int64(chunkSizeRange.lowerBound), bytes <= Int64(chunkSizeRange.upperBound) else {
            throw StorageError(.invalidArgument, "\(source) must be between 256 KiB and 1 GiB, not '\(text)'")
        }
        return Int(bytes) / chunkQuantum * chunkQuantum
    }

    /// A stall limit (`60s`, `5m`) within `stallTimeoutRange`, in seconds; `source` names where the text
    /// came from (`JOBCTL_STALL_TIMEOUT`, `--stall-timeout`) in the error.
    public static func stallTimeout(parsing text: String, from source: String) throws(StorageError) -> Int {
        let outOfRange = StorageError(.invalidArgument,
                                      "\(source) must be between \(DurationText.format(stallTimeoutRange.lowerBound)) and "
                                          + "\(DurationText.format(stallTimeoutRange.upperBound)), not '\(text)'")
        // Too large to hold, or below a second, is out of range (it was called no duration, "a unit is
        // required", whatever its unit); between whole seconds, not a whole number of them.
        let milliseconds: Int64
        switch DurationText.read(text) {
        case .milliseconds(let ms): milliseconds = ms
        case .tooLarge: throw outOfRange
        case .invalid:
            throw StorageError(.invalidArgument, "\(source) must be a duration like 60s or 5m (a unit is required), not '\(text)'")
        }
        guard let seconds = Int(exactly: milliseconds / 1_000), stallTimeoutRange.contains(seconds), milliseconds >= 1_000 else {
            throw outOfRange
        }
        guard milliseconds % 1_000 == 0 else {
            throw StorageError(.invalidArgument, "\(source) must be whole seconds (60s, 5m), not '\(text)'")
        }
        return seconds
    }

    /// A minimum rate (`1k`, `1KiB/s`, `512`: bytes per second, read as `--bwlimit` is) within
    /// `minRateRange`; `0` or `off` turns it off. `source` names where the text came from in the error.
    public static func minRate(parsing text: String, from source: String) throws(StorageError) -> Int64 {
        if DecimalText.trimmed(text).lowercased() == "off" { return 0 }
        switch TransferRate.read(text) {
        case .bytes(let rate) where minRateRange.contains(rate):
            return rate
        case .bytes, .tooLarge:
            throw StorageError(.invalidArgument, "\(source) must be at most 1T per second (or 0 to turn the minimum off), not '\(text)'")
        case .fractionOfAByte:
            throw StorageError(.invalidArgument,
                               "\(source) must be a whole number of bytes per second (1.5k is, 1.1k is not; write a smaller unit), not '\(text)'")
        case .notASize:
            throw StorageError(.invalidArgument,
                               "\(source) must be a rate like 1k or 10KiB/s (bytes per second; K, M, G are 1024-based), or 0 to turn it off, not '\(text)'"
                                   + ByteSize.grammarNote(for: text))
        }
    }

    /// The bytes a size says; `Int64.max` for one too large to hold, so that the caller's range check
    /// refuses it as out of range (it was called no size at all); nil for no size.
    static func sizeOrTooLarge(_ text: String) -> Int64? {
        switch ByteSize.read(text) {
        case .bytes(let bytes): bytes
        case .tooLarge: .max
        case .fractionOfAByte, .notASize: nil
        }
    }

    /// A sliced-download threshold (`150MiB`, `1048576`) within `slicedThresholdRange`, or nil for `0`
    /// and `off` (no slicing); `source` names where the text came from in the error.
    public static func slicedThreshold(parsing text: String, from source: String) throws(StorageError) -> Int64? {
        if DecimalText.trimmed(text).lowercased() == "off" { return nil }
        guard let bytes = sizeOrTooLarge(text) else {
            throw StorageError(.invalidArgument, "\(source) must be a size like 150MiB, or 0 or off to never slice downloads, not '\(text)'\(ByteSize.grammarNote(for: text))")
        }
        if bytes == 0 { return nil }
        guard slicedThresholdRange.contains(bytes) else {
            throw StorageError(.invalidArgument, "\(source) must be between 1 MiB and 1 TiB (or 0/off to never slice downloads), not '\(text)'")
        }
        return bytes
    }

    /// A slice count within `sliceCountRange`; `source` names where the text came from in the error.
    public static func sliceCount(parsing text: String, from source: String) throws(StorageError) -> Int {
        guard case .value(let value) = DecimalText.read(text), let count = Int(exactly: value), sliceCountRange.contains(count) else {
            throw StorageError(.invalidArgument,
                               "\(source) must be a whole number of slices from \(sliceCountRange.lowerBound) to \(sliceCountRange.upperBound), not '\(text)'"
                                   + DecimalText.leadingZeroNote(for: text))
        }
        return count
    }

    /// `host:port` or `http(s)://host[:port]` (a trailing `/` allowed), as Google's clients read
    /// `STORAGE_EMULATOR_HOST`; returns `scheme://host[:port]`.
    static func emulatorEndpoint(_ text: String, from source: String = "STORAGE_EMULATOR_HOST") throws(StorageError) -> String {
        var endpoint = text.contains("://") ? text : "http://" + text
        while endpoint.hasSuffix("/") { endpoint.removeLast() }
        let problem = "\(source) must be HOST:PORT or http(s)://HOST:PORT, not '\(SecretRedaction.redactEndpoint(text))'"
        guard let reference = try? StorageReference(parsing: endpoint + "/") else {
            throw StorageError(.invalidArgument, problem)
        }
        guard reference.scheme == .http || reference.scheme == .https, reference.isRoot, reference.query == nil,
              reference.description == endpoint + "/" else {
            throw StorageError(.invalidArgument, problem)
        }
        return endpoint
    }

    /// The hosts whose Firebase-form URLs name `gs://` objects under the settings in `environment` (the
    /// process's, a configuration file's values filled in): what a command that parses references without
    /// the whole storage check (`submit`'s manifests) reads them with. The same as `firebaseHosts` of the
    /// configuration `check` makes of it whenever the emulator setting is valid.
    public static func firebaseHosts(in environment: [String: String]) -> FirebaseHosts {
        FirebaseHosts(emulator: environment["STORAGE_EMULATOR_HOST"])
    }

    /// `text` parsed as a reference under these settings: a Firebase-form URL on the emulator's host
    /// names a `gs://` object (`firebaseHosts`).
    public func reference(parsing text: String) throws(StorageError) -> StorageReference {
        try StorageReference(parsing: text, firebaseHosts: firebaseHosts)
    }

    /// Comma-separated bucket names (or `*`), each checked; blanks around names are ignored.
    private static func bucketList(_ text: String, from source: String) throws(StorageError) -> Set<String> {
        var buckets: Set<String> = []
        for entry in text.split(separator: ",", omittingEmptySubsequences: false) {
            let name = entry.trimmingCharacters(in: .whitespaces)
            let valid = UploadPolicy.isValidEntry(name)
            guard valid else {
                throw StorageError(.invalidArgument,
                                   "\(source) lists entries separated by commas: * for all, a bucket or host name, gs://BUCKET, file://NAME, file:///DIR or /DIR, http(s)://HOST[:PORT], or SCHEME://*; '\(name)' is none of them")
            }
            buckets.insert(name)
        }
        return buckets
    }

    // MARK: - What curl gets

    /// The per-exchange settings the curl engine applies.
    var curlOptions: CurlOptions {
        // A limit below one second would fail every exchange at its first progress tick.
        var options = CurlOptions(connectTimeout: connectTimeout, stallTimeout: max(1, stallTimeout), trust: certificateTrust,
                                  bandwidth: bandwidth, minRate: max(0, minRate))
        options.stallTimeoutSetting = limitSetting("JOBCTL_STALL_TIMEOUT", flag: "--stall-timeout")
        options.minRateSetting = limitSetting("JOBCTL_MIN_RATE", flag: "--min-rate")
        return options
    }

    /// What a job's message says set a limit: the configuration file's key when it did (a user who wrote
    /// `stall_timeout:` there was told of JOBCTL_STALL_TIMEOUT), otherwise the flag and the variable that can.
    private func limitSetting(_ variable: String, flag: String) -> String {
        origins.isFromFile(variable) ? origins.jobName(variable) : "worker \(flag) or \(variable)"
    }

    public var description: String {
        "StorageConfiguration(gcsEndpoint: \(gcsEndpoint), token: \(accessToken == nil ? "none" : "set (hidden)"), "
            + "tokenCommand: \(tokenCommand == nil ? "none" : "set"), "
            + "credentials: \(googleCredentials.map { "\($0)" } ?? "none"), chunkSize: \(chunkSize), singleRequestLimit: \(singleRequestLimit), buckets: \(localBucketsDirectory), "
            + "stallTimeout: \(stallTimeout) s, minRate: \(minRate) B/s, slicedThreshold: \(slicedThreshold.map(String.init) ?? "off"), slices: \(sliceCount), trust: \(certificateTrust))"
    }
}
