import Foundation

/// Everything the storage backends need to know about their environment. No secrets are logged:
/// `description` never prints the token.
public struct StorageConfiguration: Sendable, CustomStringConvertible {
    /// The GCS JSON API endpoint: `STORAGE_EMULATOR_HOST` when set, else `https://storage.googleapis.com`.
    public var gcsEndpoint: String
    /// Whether `gcsEndpoint` is an emulator (affects the download-URL host and a few protocol quirks).
    public var usesEmulator: Bool
    /// The host of Firebase download URLs: `https://firebasestorage.googleapis.com`, or the emulator.
    public var firebaseEndpoint: String
    /// A bearer token (`GOOGLE_OAUTH_ACCESS_TOKEN`); nil means anonymous or `tokenCommand`.
    public var accessToken: String?
    /// A shell command printing a fresh token (`JOBCTL_TOKEN_COMMAND`), run at start and once on a 401.
    public var tokenCommand: String?
    /// Resumable upload chunk size, a multiple of 256 KiB (default 8 MiB).
    public var chunkSize: Int
    /// Uploads up to this size use one request instead of a resumable session (default 5 MiB).
    public var singleRequestLimit: Int
    /// Where named local buckets (`file://NAME/...`) live: `NAME` is a directory below this one.
    public var localBucketsDirectory: String
    /// Buckets (by name, `*` for all) whose uploads of executables (.exe .dll .bat .apk .ipa) are refused.
    public var executableUploadPolicy: Set<String>
    /// A transfer slower than `lowSpeedLimit` bytes/s for `stallTimeout` seconds fails as retryable.
    public var lowSpeedLimit: Int
    public var stallTimeout: Int
    /// Connection timeout in seconds.
    public var connectTimeout: Int

    public static let defaultChunkSize = 8 * 1024 * 1024

    public init(gcsEndpoint: String = "https://storage.googleapis.com", usesEmulator: Bool = false,
                firebaseEndpoint: String = "https://firebasestorage.googleapis.com", accessToken: String? = nil,
                tokenCommand: String? = nil, chunkSize: Int = StorageConfiguration.defaultChunkSize,
                singleRequestLimit: Int = 5 * 1024 * 1024, localBucketsDirectory: String = "buckets",
                executableUploadPolicy: Set<String> = [], lowSpeedLimit: Int = 1, stallTimeout: Int = 60,
                connectTimeout: Int = 15) {
        self.gcsEndpoint = gcsEndpoint
        self.usesEmulator = usesEmulator
        self.firebaseEndpoint = firebaseEndpoint
        self.accessToken = accessToken
        self.tokenCommand = tokenCommand
        self.chunkSize = chunkSize
        self.singleRequestLimit = singleRequestLimit
        self.localBucketsDirectory = localBucketsDirectory
        self.executableUploadPolicy = executableUploadPolicy
        self.lowSpeedLimit = lowSpeedLimit
        self.stallTimeout = stallTimeout
        self.connectTimeout = connectTimeout
    }

    /// Reads `STORAGE_EMULATOR_HOST`, `GOOGLE_OAUTH_ACCESS_TOKEN`, `JOBCTL_TOKEN_COMMAND`,
    /// `JOBCTL_CHUNK_SIZE`, `JOBCTL_BUCKETS` and `JOBCTL_REFUSE_EXECUTABLES` (comma-separated bucket names).
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment,
                                       localBucketsDirectory: String) -> StorageConfiguration {
        var configuration = StorageConfiguration(localBucketsDirectory: environment["JOBCTL_BUCKETS"] ?? localBucketsDirectory)
        if var emulator = environment["STORAGE_EMULATOR_HOST"], !emulator.isEmpty {
            if !emulator.contains("://") { emulator = "http://" + emulator }
            while emulator.hasSuffix("/") { emulator.removeLast() }
            configuration.gcsEndpoint = emulator
            configuration.firebaseEndpoint = emulator
            configuration.usesEmulator = true
        }
        if let token = environment["GOOGLE_OAUTH_ACCESS_TOKEN"], !token.isEmpty { configuration.accessToken = token }
        if let command = environment["JOBCTL_TOKEN_COMMAND"], !command.isEmpty { configuration.tokenCommand = command }
        if let text = environment["JOBCTL_CHUNK_SIZE"], let size = Int(text), size > 0 {
            let quantum = 256 * 1024
            configuration.chunkSize = max(quantum, size / quantum * quantum)
        }
        if let list = environment["JOBCTL_REFUSE_EXECUTABLES"] {
            configuration.executableUploadPolicy = Set(list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        }
        return configuration
    }

    public var description: String {
        "StorageConfiguration(gcsEndpoint: \(gcsEndpoint), token: \(accessToken == nil ? "none" : "set (hidden)"), "
            + "tokenCommand: \(tokenCommand == nil ? "none" : "set"), chunkSize: \(chunkSize), buckets: \(localBucketsDirectory))"
    }
}
