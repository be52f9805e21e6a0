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

/// A writable metadata field update-metadata can clear (`content_type: null` in a manifest; as
/// gcloud's `--clear-content-type`, `--clear-custom-metadata`): GCS is sent the field as JSON null,
/// which removes it. `customMetadata` clears every custom key (the download tokens stay: they are
/// fetch-url's, not metadata the job writes).
public enum MetadataField: String, Codable, Sendable, Equatable, Hashable, CaseIterable {
    case contentType = "content_type"
    case cacheControl = "cache_control"
    case contentDisposition = "content_disposition"
    case contentEncoding = "content_encoding"
    case contentLanguage = "content_language"
    case customMetadata = "custom_metadata"
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
    // MARK: - Copy-on-write storage

    /// The stored fields, one for one with the public properties (documented there); their synthesized
    /// `Codable`, `Equatable` and `Hashable` are the spec's own, so the JSON keys and shape are what they
    /// were when the fields were the spec's stored properties.
    fileprivate struct Fields: Codable, Sendable, Equatable, Hashable {
        var kind: JobKind
        var source: String?
        var destination: String?
        var data: Data?
        var maxSize: Int64?
        var metadata: UploadMetadata?
        var key: String?
        var priority: Int
        var maxAttempts: Int
        var queue: String
        var timeoutSeconds: Int?
        var checksums: [ChecksumAlgorithm]?
        var ifExists: IfExists?
        var maxRate: Int64?
        var runAfterMs: Int64?
        var batch: JobBatch?
        var after: [String]?
        var removeCustomMetadata: [String]?
        var ifGeneration: Int64?
        var clearMetadata: [MetadataField]?
    }

    /// The fields' box: copying a spec copies one reference (see `CopyOnWrite`).
    private var storage: CopyOnWrite<Fields>

    /// The box's identity, for tests that check a copy shares it.
    var storageIdentity: ObjectIdentifier { storage.identity }

    // MARK: - Fields

    public var kind: JobKind {
        get { storage.fields.kind }
        set { storage.fields.kind = newValue }
    }
    /// upload-file: absolute local path; downloads and fetch-url: storage reference.
    public var source: String? {
        get { storage.fields.source }
        set { storage.fields.source = newValue }
    }
    /// Uploads: storage reference; download-file: absolute local path.
    public var destination: String? {
        get { storage.fields.destination }
        set { storage.fields.destination = newValue }
    }
    /// upload-data: the bytes to upload (base64 in JSON).
    public var data: Data? {
        get { storage.fields.data }
        set { storage.fields.data = newValue }
    }
    /// download-memory: the largest object accepted, in bytes.
    public var maxSize: Int64? {
        get { storage.fields.maxSize }
        set { storage.fields.maxSize = newValue }
    }
    /// Uploads: object metadata.
    public var metadata: UploadMetadata? {
        get { storage.fields.metadata }
        set { storage.fields.metadata = newValue }
    }
    /// Idempotency key: a second submit with the same key creates no job.
    public var key: String? {
        get { storage.fields.key }
        set { storage.fields.key = newValue }
    }
    /// Higher runs first.
    public var priority: Int {
        get { storage.fields.priority }
        set { storage.fields.priority = newValue }
    }
    /// Attempts before `retryLimitExceeded`.
    public var maxAttempts: Int {
        get { storage.fields.maxAttempts }
        set { storage.fields.maxAttempts = newValue }
    }
    public var queue: String {
        get { storage.fields.queue }
        set { storage.fields.queue = newValue }
    }
    /// How long one attempt may take, in seconds (the manifest's `timeout:`); nil means no limit. An
    /// attempt still running when it passes fails as retryable. Specs stored before this field existed
    /// decode with nil.
    public var timeoutSeconds: Int? {
        get { storage.fields.timeoutSeconds }
        set { storage.fields.timeoutSeconds = newValue }
    }
    /// The hashes the job asks to compute and compare (the manifest's `checksums:`). Nil means the
    /// default: CRC32C, plus MD5 only where it is the one hash the server reports. MD5 listed here is
    /// computed and compared wherever the server reports one. Specs stored before this field existed
    /// decode with nil, and nil is not encoded, so they re-encode unchanged.
    public var checksums: [ChecksumAlgorithm]? {
        get { storage.fields.checksums }
        set { storage.fields.checksums = newValue }
    }
    /// What to do when the destination exists (the manifest's `if_exists:`); nil means `overwrite`. Nil
    /// is not encoded, so specs stored before this field existed re-encode unchanged.
    public var ifExists: IfExists? {
        get { storage.fields.ifExists }
        set { storage.fields.ifExists = newValue }
    }
    /// The job's own bandwidth limit in bytes per second (the manifest's `max_rate:`); nil means none
    /// beyond the worker's `--bwlimit`. Nil is not encoded.
    public var maxRate: Int64? {
        get { storage.fields.maxRate }
        set { storage.fields.maxRate = newValue }
    }
    /// When the job may run first, in ms since the epoch (the manifest's `run_after:` or `delay:`, or
    /// `submit --at`); nil means at once. A job is not claimed before then. Nil is not encoded.
    public var runAfterMs: Int64? {
        get { storage.fields.runAfterMs }
        set { storage.fields.runAfterMs = newValue }
    }
    /// The folder, glob or prefix the job was expanded from, with the batch id it shares with the rest of
    /// the expansion; nil for a job written on its own. Nil is not encoded.
    public var batch: JobBatch? {
        get { storage.fields.batch }
        set { storage.fields.batch = newValue }
    }
    /// The jobs this one waits for (the manifest's `after:`): it is not claimed until every one of them has
    /// succeeded, and ends `cancelled` when one of them ends failed or cancelled. Stored as full job ids;
    /// the manifest's names (keys or id prefixes) are resolved by the store at submit. Nil (never empty)
    /// is not encoded, so specs stored before this field existed re-encode unchanged.
    public var after: [String]? {
        get { storage.fields.after }
        set { storage.fields.after = newValue }
    }
    /// update-metadata: the custom metadata keys to delete (written `key: null`, as the SDK's null does),
    /// sorted. Nil is not encoded.
    public var removeCustomMetadata: [String]? {
        get { storage.fields.removeCustomMetadata }
        set { storage.fields.removeCustomMetadata = newValue }
    }
    /// update-metadata: the fields it removes (written `field: null`), in `MetadataField`'s order. Nil
    /// (never empty) is not encoded.
    public var clearMetadata: [MetadataField]? {
        get { storage.fields.clearMetadata }
        set { storage.fields.clearMetadata = newValue }
    }
    /// delete and update-metadata: the object's generation the job expects (the manifest's
    /// `if_generation:`), sent as GCS's `ifGenerationMatch` and compared with a `file://` object's sidecar;
    /// another generation fails the job with the precondition error. Nil (no condition) is not encoded.
    public var ifGeneration: Int64? {
        get { storage.fields.ifGeneration }
        set { storage.fields.ifGeneration = newValue }
    }

    /// Decodes the fields at the top level, as the plain struct did.
    public init(from decoder: any Decoder) throws {
        storage = try CopyOnWrite(from: decoder)
    }

    /// Encodes the fields alone, at the top level: the box adds no key and no nesting.
    public func encode(to encoder: any Encoder) throws {
        try storage.encode(to: encoder)
    }

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
        storage = CopyOnWrite(Fields(kind: kind, source: source, destination: destination, data: data, maxSize: maxSize,
                                 metadata: metadata, key: key, priority: priority, maxAttempts: maxAttempts, queue: queue,
                                 timeoutSeconds: timeoutSeconds, checksums: checksums, ifExists: ifExists, maxRate: maxRate,
                                 runAfterMs: runAfterMs, batch: batch, after: after, removeCustomMetadata: nil,
                                 ifGeneration: nil, clearMetadata: nil))
    }

    /// Whether the job asks for MD5 to be computed.
    public var wantsMD5: Bool { checksums?.contains(.md5) ?? false }
}

extension JobSpec: CustomReflectable {
    /// The fields, not the box: `print`, `dump` and test failures show a spec as they did when the fields
    /// were its stored properties.
    public var customMirror: Mirror {
        storage.mirror(of: self)
    }
}
