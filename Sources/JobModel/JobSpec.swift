import Foundation

/// Metadata sent with an upload, as in Firebase's `StorageMetadata` (the writable part).
public struct UploadMetadata: Codable, Sendable, Equatable, Hashable {
    public var contentType: String?
    public var cacheControl: String?
    public var contentDisposition: String?
    public var contentEncoding: String?
    public var contentLanguage: String?
    public var customMetadata: [String: String]?

    public init(contentType: String? = nil, cacheControl: String? = nil, contentDisposition: String? = nil,
                contentEncoding: String? = nil, contentLanguage: String? = nil, customMetadata: [String: String]? = nil) {
        self.contentType = contentType
        self.cacheControl = cacheControl
        self.contentDisposition = contentDisposition
        self.contentEncoding = contentEncoding
        self.contentLanguage = contentLanguage
        self.customMetadata = customMetadata
    }

    /// True when no field is set.
    public var isEmpty: Bool { self == UploadMetadata() }
}

/// A hash a transfer can compute and compare with the one storage reports.
public enum ChecksumAlgorithm: String, Codable, Sendable, Equatable, Hashable, CaseIterable {
    case md5
    case crc32c
}

/// One validated job, as stored in the `submitted` event.
///
/// Local paths (`upload-file` source, `download-file` destination) are absolute. References are
/// canonical strings that `StorageReference(parsing:)` accepts.
public struct JobSpec: Codable, Sendable, Equatable, Hashable {
    public var kind: JobKind
    /// upload-file: absolute local path; downloads and fetch-url: storage reference.
    public var source: String?
    /// Uploads: storage reference; download-file: absolute local path.
    public var destination: String?
    /// upload-data: the bytes to upload (base64 in JSON).
    public var data: Data?
    /// download-memory: the largest object accepted, in bytes.
    public var maxSize: Int64?
    /// Uploads: object metadata.
    public var metadata: UploadMetadata?
    /// Idempotency key: a second submit with the same key creates no job.
    public var key: String?
    /// Higher runs first.
    public var priority: Int
    /// Attempts before `retryLimitExceeded`.
    public var maxAttempts: Int
    public var queue: String
    /// How long one attempt may take, in seconds (the manifest's `timeout:`); nil means no limit. An
    /// attempt still running when it passes fails as retryable. Specs stored before this field existed
    /// decode with nil.
    public var timeoutSeconds: Int?
    /// The hashes the job asks to compute and compare (the manifest's `checksums:`). Nil means the
    /// default: CRC32C, plus MD5 only where it is the one hash the server reports. MD5 listed here is
    /// computed and compared wherever the server reports one. Specs stored before this field existed
    /// decode with nil, and nil is not encoded, so they re-encode unchanged.
    public var checksums: [ChecksumAlgorithm]?
    /// What to do when the destination exists (the manifest's `if_exists:`); nil means `overwrite`. Nil
    /// is not encoded, so specs stored before this field existed re-encode unchanged.
    public var ifExists: IfExists?
    /// The job's own bandwidth limit in bytes per second (the manifest's `max_rate:`); nil means none
    /// beyond the worker's `--bwlimit`. Nil is not encoded.
    public var maxRate: Int64?
    /// When the job may run first, in ms since the epoch (the manifest's `run_after:` or `delay:`, or
    /// `submit --at`); nil means at once. A job is not claimed before then. Nil is not encoded.
    public var runAfterMs: Int64?
    /// The folder, glob or prefix the job was expanded from, with the batch id it shares with the rest of
    /// the expansion; nil for a job written on its own. Nil is not encoded.
    public var batch: JobBatch?
    /// The jobs this one waits for (the manifest's `after:`): it is not claimed until every one of them has
    /// succeeded, and ends `cancelled` when one of them ends failed or cancelled. Stored as full job ids;
    /// the manifest's names (keys or id prefixes) are resolved by the store at submit. Nil (never empty)
    /// is not encoded, so specs stored before this field existed re-encode unchanged.
    public var after: [String]?
    /// update-metadata: the custom metadata keys to delete (written `key: null`, as the SDK's null does),
    /// sorted. Nil is not encoded.
    public var removeCustomMetadata: [String]?
    /// delete and update-metadata: the object's generation the job expects (the manifest's
    /// `if_generation:`), sent as GCS's `ifGenerationMatch` and compared with a `file://` object's sidecar;
    /// another generation fails the job with the precondition error. Nil (no condition) is not encoded.
    public var ifGeneration: Int64?

    /// The `if_generation:` values accepted: GCS generations are positive 64-bit integers.
    public static let generationRange: ClosedRange<Int> = 1...Int(Int64.max)

    /// The `timeout:` values accepted: one second to seven days (a resumable upload session lives a week).
    public static let timeoutRange = 1...(7 * 86_400)

    public static let defaultMaxSize: Int64 = 1 << 20
    public static let defaultMaxAttempts = 5
    public static let defaultQueue = "default"

    public init(kind: JobKind, source: String? = nil, destination: String? = nil, data: Data? = nil,
                maxSize: Int64? = nil, metadata: UploadMetadata? = nil, key: String? = nil,
                priority: Int = 0, maxAttempts: Int = JobSpec.defaultMaxAttempts, queue: String = JobSpec.defaultQueue,
                timeoutSeconds: Int? = nil, checksums: [ChecksumAlgorithm]? = nil, ifExists: IfExists? = nil, maxRate: Int64? = nil,
                runAfterMs: Int64? = nil, batch: JobBatch? = nil, after: [String]? = nil) {
        self.kind = kind
        self.source = source
        self.destination = destination
        self.data = data
        self.maxSize = maxSize
        self.metadata = metadata
        self.key = key
        self.priority = priority
        self.maxAttempts = maxAttempts
        self.queue = queue
        self.timeoutSeconds = timeoutSeconds
        self.checksums = checksums
        self.ifExists = ifExists
        self.maxRate = maxRate
        self.runAfterMs = runAfterMs
        self.batch = batch
        self.after = after
    }

    /// Whether the job asks for MD5 to be computed.
    public var wantsMD5: Bool { checksums?.contains(.md5) ?? false }
}
