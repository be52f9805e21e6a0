import Foundation

/// An object's metadata as storage reports it (Firebase `StorageMetadata`, GCS object resource).
public struct StorageObject: Codable, Sendable, Equatable, Hashable {
    public var bucket: String
    /// The object's full path.
    public var name: String
    /// The object's length in bytes; -1 when the server did not say (a plain HTTP HEAD without a
    /// `Content-Length`). Shown through `knownSize`.
    public var size: Int64
    public var contentType: String?
    public var cacheControl: String?
    public var contentDisposition: String?
    public var contentEncoding: String?
    public var contentLanguage: String?
    public var customMetadata: [String: String]?
    /// Base64 MD5, as GCS reports it.
    public var md5Hash: String?
    /// Base64 big-endian CRC32C, as GCS reports it.
    public var crc32c: String?
    public var generation: String?
    public var metageneration: String?
    public var timeCreated: String?
    public var updated: String?
    /// Comma-separated Firebase download tokens.
    public var downloadTokens: String?

    public init(bucket: String, name: String, size: Int64, contentType: String? = nil, cacheControl: String? = nil,
                contentDisposition: String? = nil, contentEncoding: String? = nil, contentLanguage: String? = nil,
                customMetadata: [String: String]? = nil, md5Hash: String? = nil, crc32c: String? = nil,
                generation: String? = nil, metageneration: String? = nil, timeCreated: String? = nil,
                updated: String? = nil, downloadTokens: String? = nil) {
        self.bucket = bucket
        self.name = name
        self.size = size
        self.contentType = contentType
        self.cacheControl = cacheControl
        self.contentDisposition = contentDisposition
        self.contentEncoding = contentEncoding
        self.contentLanguage = contentLanguage
        self.customMetadata = customMetadata
        self.md5Hash = md5Hash
        self.crc32c = crc32c
        self.generation = generation
        self.metageneration = metageneration
        self.timeCreated = timeCreated
        self.updated = updated
        self.downloadTokens = downloadTokens
    }

    /// The object's length, nil when the server did not report one (`size` is -1 then): what every
    /// output shows ("unknown", a JSON field left out), never a size of -1 bytes.
    public var knownSize: Int64? { size >= 0 ? size : nil }
}

/// What a finished job produced.
///
/// The fields live in a shared box (copy-on-write, as `JobRecord`'s do): a result is ~380 bytes of
/// optionals and strings, and it travels by value from the transfer through the task's state machine,
/// its outcome, the `succeeded` payload and the store's prepared form; boxed, each of those copies is one
/// retain. Coding, equality and hashing are the plain fields', so the JSON is what it always was.
public struct JobResult: Codable, Sendable, Equatable, Hashable {
    /// The stored fields, one for one with the public properties (documented there); their synthesized
    /// `Codable`, `Equatable` and `Hashable` are the result's own.
    fileprivate struct Fields: Codable, Sendable, Equatable, Hashable {
        var object: StorageObject?
        var path: String?
        var size: Int64?
        var md5: String?
        var crc32c: String?
        var verified: [ChecksumAlgorithm]?
        var blob: String?
        var data: Data?
        var url: String?
        var skipped: Bool?
        var deleted: String?
    }

    /// The fields' box: copying a result copies one reference (see `CopyOnWrite`).
    private var storage: CopyOnWrite<Fields>

    /// The box's identity, for tests that check a copy shares it.
    var storageIdentity: ObjectIdentifier { storage.identity }

    /// Uploads: the stored object's metadata. Downloads: the source object's metadata when known.
    public var object: StorageObject? {
        get { storage.fields.object }
        set { storage.fields.object = newValue }
    }
    /// download-file: the final local path.
    public var path: String? {
        get { storage.fields.path }
        set { storage.fields.path = newValue }
    }
    /// Bytes transferred.
    public var size: Int64? {
        get { storage.fields.size }
        set { storage.fields.size = newValue }
    }
    /// Base64 MD5 and CRC32C of the bytes as computed here; MD5 only when it was computed (the job
    /// asked for it, or it was the one hash the server reported). The server's own MD5, when it reports
    /// one, stays in `object.md5Hash`.
    public var md5: String? {
        get { storage.fields.md5 }
        set { storage.fields.md5 = newValue }
    }
    public var crc32c: String? {
        get { storage.fields.crc32c }
        set { storage.fields.crc32c = newValue }
    }
    /// The hashes compared with the server's and found equal, in `ChecksumAlgorithm` order; nil in
    /// results logged before this field existed, empty when the server reported none to compare.
    public var verified: [ChecksumAlgorithm]? {
        get { storage.fields.verified }
        set { storage.fields.verified = newValue }
    }
    /// download-memory: the SHA-256 (hex) of the bytes in the content-addressed `blobs` table, when the
    /// store moved them there (more than 256 bytes; `PreparedPayload.inlineResultLimit`).
    public var blob: String? {
        get { storage.fields.blob }
        set { storage.fields.blob = newValue }
    }
    /// download-memory: the bytes. From the transfer to the store always; in the logged event only when
    /// there are at most 256 (the store moves larger results into `blobs`, clears this field and names
    /// them in `blob`). Logs of earlier releases keep every result in `blobs`.
    public var data: Data? {
        get { storage.fields.data }
        set { storage.fields.data = newValue }
    }
    /// fetch-url: the download URL.
    public var url: String? {
        get { storage.fields.url }
        set { storage.fields.url = newValue }
    }
    /// True when nothing was transferred because the destination already existed and the job said
    /// `if_exists: skip` (or `skip-identical` and it matched); `object`/`path` then describe what is there.
    /// Nil otherwise, and not encoded.
    public var skipped: Bool? {
        get { storage.fields.skipped }
        set { storage.fields.skipped = newValue }
    }
    /// delete: the reference of the object deleted. Nil otherwise, and not encoded.
    public var deleted: String? {
        get { storage.fields.deleted }
        set { storage.fields.deleted = newValue }
    }

    public init(object: StorageObject? = nil, path: String? = nil, size: Int64? = nil, md5: String? = nil,
                crc32c: String? = nil, blob: String? = nil, data: Data? = nil, url: String? = nil,
                verified: [ChecksumAlgorithm]? = nil, skipped: Bool? = nil, deleted: String? = nil) {
        storage = CopyOnWrite(Fields(object: object, path: path, size: size, md5: md5, crc32c: crc32c, verified: verified,
                                 blob: blob, data: data, url: url, skipped: skipped, deleted: deleted))
    }

    /// Decodes the fields at the top level, as the plain struct did.
    public init(from decoder: any Decoder) throws {
        storage = try CopyOnWrite(from: decoder)
    }

    /// Encodes the fields alone, at the top level: the box adds no key and no nesting.
    public func encode(to encoder: any Encoder) throws {
        try storage.encode(to: encoder)
    }
}

extension JobResult: CustomReflectable {
    /// The fields, not the box: `print`, `dump` and test failures show a result as they did when the
    /// fields were its stored properties.
    public var customMirror: Mirror {
        storage.mirror(of: self)
    }
}

/// Where an interrupted transfer continues from. Persisted in `progress` events.
///
/// `indirect`: a resume point rides in every progress report and record (nil mostly), and inline it made
/// each of them 73 bytes wider.
public indirect enum ResumePoint: Codable, Sendable, Equatable, Hashable {
    /// A resumable upload session and the offset the server confirmed. `source` is the source file as
    /// the session's first bytes were read from it (absent for data, and in events logged before it was
    /// recorded): a later attempt resumes the session only while the file still matches it.
    case upload(sessionURI: String, confirmedOffset: Int64, total: Int64?, source: SourceStamp? = nil)
    /// A download: bytes safely written to `tempPath`, pinned to the object's generation or ETag.
    /// `file` is the temporary file's identity when it was written (absent in events logged before it
    /// was recorded): a resumed attempt appends only to that very file.
    /// `total` is the file's size as the answer the bytes came from named it (absent in events logged
    /// before it was recorded): a resumed range whose answer names another size belongs to another file.
    /// `prefixCRC32C` is the CRC32C (base64) of the `bytesWritten` bytes, recorded when an attempt stops
    /// (a pause, a shutdown) or fails retryably: a resumed attempt reads them back and starts over when they no longer
    /// match — the temporary file was written to meanwhile — instead of finishing a file of mixed bytes
    /// that, over plain HTTP without a served hash, nothing after would catch. Absent from the periodic
    /// checkpoints (the stream's hashes run behind it) and from events logged before it was recorded.
    case download(bytesWritten: Int64, generation: String?, etag: String?, tempPath: String?, file: FileIdentity? = nil,
                  total: Int64? = nil, prefixCRC32C: String? = nil)
    /// A sliced download of one GCS generation: the object's byte ranges fetched in parallel into
    /// `tempPath` (the very file `file`), each with the bytes from its start that are synced there.
    /// A later attempt fetches only what each slice still lacks.
    case slicedDownload(slices: [DownloadSlice], generation: String, tempPath: String, file: FileIdentity)
    /// An upload in one request that must not replace what it finds (`if_exists: fail`) whose every byte
    /// (`total`) was handed to the server: it may have landed though no answer came. A later attempt that
    /// finds the destination taken compares it with the source and takes it as its own when it holds the
    /// same bytes, instead of failing on its own upload.
    case sentUpload(total: Int64)
    /// A delete whose request went out but whose answer never came (a reset, a timeout): the server may
    /// have carried it out. A later attempt that finds the object gone takes the delete as done instead
    /// of failing on its own work; without this point a missing object stays an error.
    case sentDelete
    /// An earlier attempt ended without a word — its worker died and its lease ran out — so what it sent
    /// may have been carried out. Recorded by the rescue's `lease_expired` (or the `failed` of a last
    /// attempt) for a delete or an `if_exists: fail` transfer with no resume point saying more, and made
    /// at the claim for logs written before the rescue said so (`JobRecord.resumePointForAttempt`): a
    /// retry would otherwise fail on an earlier attempt's own work. A delete then takes a missing object
    /// as done, an upload takes an object holding exactly the source's bytes as its own.
    case unanswered

    /// Whether a delete that finds its object missing takes that as done: a copy of its DELETE may have
    /// been carried out unanswered (`sentDelete`), or an earlier attempt died (`unanswered`).
    public var deleteMayBeDone: Bool {
        switch self {
        case .sentDelete, .unanswered: true
        default: false
        }
    }

    /// Whether the point is a download's, in one stream or in slices: bytes in a temporary file.
    public var isDownload: Bool {
        switch self {
        case .download, .slicedDownload: true
        default: false
        }
    }

    /// Whether the point holds nothing to continue from: a download with no byte written (one whose
    /// bytes were dropped, or stopped before the first), in one stream or in slices none of which holds
    /// a byte. Its next attempt starts at byte 0, as one without a point does; the point still names
    /// the temporary file to clear up.
    public var holdsNoDownloadedBytes: Bool {
        isDownload && bytesDone == 0
    }

    /// Bytes that need not be sent again.
    public var bytesDone: Int64 {
        switch self {
        case .upload(_, let offset, _, _): offset
        case .download(let written, _, _, _, _, _, _): written
        case .slicedDownload(let slices, _, _, _): slices.reduce(0) { $0.saturatingAdding($1.confirmed) }
        case .sentUpload(let total): total
        case .sentDelete, .unanswered: 0
        }
    }
}

/// One byte range of a sliced download and how much of it is safely on disk.
public struct DownloadSlice: Codable, Sendable, Equatable, Hashable {
    /// The slice's first byte in the object.
    public var start: Int64
    /// The slice's length in bytes.
    public var length: Int64
    /// Bytes from `start` written and synced (0...length).
    public var confirmed: Int64
    /// The CRC32C (base64) of the `confirmed` bytes, as the attempt that wrote them computed them (each
    /// slice's CRC32C runs with its writes, so every checkpoint records it; absent in events logged before
    /// it was recorded, and for a slice with none): a resuming attempt reads each slice's bytes back and
    /// fetches again a slice whose bytes changed on the disk meanwhile.
    public var crc32c: String?

    public init(start: Int64, length: Int64, confirmed: Int64 = 0, crc32c: String? = nil) {
        self.start = start
        self.length = length
        self.confirmed = confirmed
        self.crc32c = crc32c
    }

    /// Whether every byte of the slice is on disk.
    public var isComplete: Bool { confirmed >= length }

    /// Why `slices` cannot be continued as the plan of a sliced download of an object of `size` bytes
    /// (nil when it can): a logged plan is continued whatever the resuming worker's own `--slices`, so
    /// one read from a damaged or hand-edited log is checked before a byte is written at its offsets —
    /// between `counts` slices (the `--slices` range), each of at least one byte with no more confirmed
    /// than it holds, the first at byte 0, each starting where the one before ends, the last ending at
    /// `size`.
    public static func planFault(_ slices: [DownloadSlice], size: Int64, counts: ClosedRange<Int>) -> String? {
        guard counts.contains(slices.count) else {
            return "it has \(slices.count) slices, not \(counts.lowerBound) to \(counts.upperBound)"
        }
        var end: Int64 = 0
        for (index, slice) in slices.enumerated() {
            guard slice.start == end else {
                return "slice \(index + 1) starts at byte \(slice.start), not at byte \(end) where the one before ends"
            }
            guard slice.length > 0, slice.length <= size - end else {
                return "slice \(index + 1) of \(slice.length) bytes does not fit the object's \(size) from byte \(slice.start)"
            }
            guard slice.confirmed >= 0, slice.confirmed <= slice.length else {
                return "slice \(index + 1) records \(slice.confirmed) confirmed bytes of its \(slice.length)"
            }
            end += slice.length
        }
        guard end == size else { return "its slices end at byte \(end), not at the object's \(size) bytes" }
        return nil
    }

    /// `count` slices covering `size` bytes, in order, the first ones one byte longer when the size does
    /// not divide evenly; fewer slices (at least one) when the object has fewer bytes than `count`.
    public static func plan(size: Int64, count: Int) -> [DownloadSlice] {
        let slices = Int64(max(1, min(Int64(count), max(size, 1))))
        let base = size / slices
        let extra = size % slices
        var start: Int64 = 0
        return (0..<slices).map { index in
            let length = base + (index < extra ? 1 : 0)
            defer { start += length }
            return DownloadSlice(start: start, length: length)
        }
    }
}
