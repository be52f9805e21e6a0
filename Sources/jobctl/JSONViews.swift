import Foundation
import JobLifecycle
import JobModel
import StorePort

// The CLI's JSON: one shape per value and snake_case keys everywhere (spec, data and result included),
// times as RFC 3339 (`…_at`) beside epoch milliseconds (`…_at_ms`), URLs redacted unless
// `--show-secrets`. The event log's own JSON is a different thing and never changes here: these views
// are built from the decoded values.

/// A storage error: the one `error` object of every command.
struct ErrorView: Encodable {
    let code: Int
    let name: String
    let message: String
    let httpStatus: Int?
    let url: String?
    let retryable: Bool
    let retryAfter: Double?
    let cause: String?
    let total: Int64?
    let maximum: Int64?

    init(_ error: StorageError, display: Display) {
        code = error.code.rawValue
        name = error.code.name
        message = display.message(error)
        httpStatus = error.httpStatus
        url = error.url.map(display.url)
        retryable = error.retryable
        retryAfter = error.retryAfter
        cause = display.cause(error)
        total = error.total
        maximum = error.maximum
    }

    enum CodingKeys: String, CodingKey {
        case code, name, message, url, retryable, cause, total, maximum
        case httpStatus = "http_status", retryAfter = "retry_after"
    }

    /// Every key, always (null when unknown): one shape wherever an error appears.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(code, forKey: .code)
        try container.encode(name, forKey: .name)
        try container.encode(message, forKey: .message)
        try container.encode(httpStatus, forKey: .httpStatus)
        try container.encode(url, forKey: .url)
        try container.encode(retryable, forKey: .retryable)
        try container.encode(retryAfter, forKey: .retryAfter)
        try container.encode(cause, forKey: .cause)
        try container.encode(total, forKey: .total)
        try container.encode(maximum, forKey: .maximum)
    }
}

/// Upload metadata as submitted; custom values named like credentials redacted (`Display.customMetadata`).
struct MetadataView: Encodable {
    let contentType, cacheControl, contentDisposition, contentEncoding, contentLanguage: String?
    let customMetadata: [String: String]?

    init(_ metadata: UploadMetadata, display: Display) {
        contentType = metadata.contentType
        cacheControl = metadata.cacheControl
        contentDisposition = metadata.contentDisposition
        contentEncoding = metadata.contentEncoding
        contentLanguage = metadata.contentLanguage
        customMetadata = display.customMetadata(metadata.customMetadata)
    }

    enum CodingKeys: String, CodingKey {
        case contentType = "content_type", cacheControl = "cache_control", contentDisposition = "content_disposition"
        case contentEncoding = "content_encoding", contentLanguage = "content_language", customMetadata = "custom_metadata"
    }
}

/// A job as submitted.
struct SpecView: Encodable {
    let kind: String
    let source: String?
    let destination: String?
    let dataBase64: String?
    let maxSize: Int64?
    let metadata: MetadataView?
    let key: String?
    let priority: Int
    let maxAttempts: Int
    let queue: String
    /// One attempt's limit (`timeout:`) in seconds, absent when there is none.
    let timeoutSeconds: Int?
    /// The hashes the job asks for (`checksums:`), absent for the default.
    let checksums: [String]?
    /// What a transfer does when its destination exists (`if_exists:`), absent for the default (overwrite).
    let ifExists: String?
    /// The job's own bandwidth (`max_rate:`) in bytes per second, absent when it has none.
    let maxRate: Int64?
    /// The schedule (`run_after:`, `delay:`, `submit --at`), absent when the job runs at once.
    let runAfter: String?
    let runAfterMs: Int64?
    /// The folder, glob or prefix the job came from, absent for a job written on its own.
    let batch: BatchView?
    /// The jobs this one waits for (`after:`; names in a dry run, ids once submitted), absent when none.
    let after: [String]?
    /// update-metadata: the custom metadata keys it deletes.
    let removeCustomMetadata: [String]?
    /// update-metadata: the fields it removes (`content_type`, …, `custom_metadata` for every custom key).
    let clearMetadata: [String]?
    /// delete and update-metadata: the generation the object must be (`if_generation:`), absent when none.
    let ifGeneration: Int64?

    init(_ spec: JobSpec, display: Display) {
        kind = spec.kind.rawValue
        source = spec.source.map(display.url)
        destination = spec.destination.map(display.url)
        dataBase64 = spec.data?.base64EncodedString()
        maxSize = spec.maxSize
        metadata = spec.metadata.map { MetadataView($0, display: display) }
        key = spec.key
        priority = spec.priority
        maxAttempts = spec.maxAttempts
        queue = spec.queue
        timeoutSeconds = spec.timeoutSeconds
        checksums = spec.checksums?.map(\.rawValue)
        ifExists = spec.ifExists?.rawValue
        maxRate = spec.maxRate
        runAfter = spec.runAfterMs.map(RFC3339.string)
        runAfterMs = spec.runAfterMs
        batch = spec.batch.map { BatchView($0, display: display) }
        after = spec.after
        removeCustomMetadata = spec.removeCustomMetadata
        clearMetadata = spec.clearMetadata?.map(\.rawValue)
        ifGeneration = spec.ifGeneration
    }

    enum CodingKeys: String, CodingKey {
        case kind, source, destination, metadata, key, priority, queue, batch, after, checksums
        case timeoutSeconds = "timeout_seconds", ifExists = "if_exists", maxRate = "max_rate"
        case removeCustomMetadata = "remove_custom_metadata", clearMetadata = "clear_metadata"
        case ifGeneration = "if_generation"
        case dataBase64 = "data_base64", maxSize = "max_size", maxAttempts = "max_attempts"
        case runAfter = "run_after", runAfterMs = "run_after_ms"
    }
}

/// What a batch job was expanded from: `{"id", "source", "include", "exclude", "path"}`.
struct BatchView: Encodable {
    let id: String
    let source: String
    let include: [String]?
    let exclude: [String]?
    let path: String

    init(_ batch: JobBatch, display: Display) {
        id = batch.id
        source = display.text(batch.source)
        include = batch.include
        exclude = batch.exclude
        path = batch.path
    }
}

/// An object's metadata as storage reported it. Download tokens are capabilities: redacted unless
/// `--show-secrets`, whether GCS reported them as its own field or a `file://` bucket keeps them among the
/// custom metadata (`Display.customMetadata`).
struct ObjectView: Encodable {
    let bucket: String
    let name: String
    /// Left out when the server did not report it.
    let size: Int64?
    let contentType, cacheControl, contentDisposition, contentEncoding, contentLanguage: String?
    let customMetadata: [String: String]?
    let md5Hash, crc32c, generation, metageneration, timeCreated, updated, downloadTokens: String?

    init(_ object: StorageObject, display: Display) {
        bucket = object.bucket
        name = display.objectName(object.name)
        size = object.knownSize
        contentType = object.contentType
        cacheControl = object.cacheControl
        contentDisposition = object.contentDisposition
        contentEncoding = object.contentEncoding
        contentLanguage = object.contentLanguage
        customMetadata = display.customMetadata(object.customMetadata)
        md5Hash = object.md5Hash
        crc32c = object.crc32c
        generation = object.generation
        metageneration = object.metageneration
        timeCreated = object.timeCreated
        updated = object.updated
        downloadTokens = object.downloadTokens.map { display.showSecrets ? $0 : SecretRedaction.marker }
    }

    enum CodingKeys: String, CodingKey {
        case bucket, name, size, crc32c, generation, metageneration, updated
        case contentType = "content_type", cacheControl = "cache_control", contentDisposition = "content_disposition"
        case contentEncoding = "content_encoding", contentLanguage = "content_language", customMetadata = "custom_metadata"
        case md5Hash = "md5_hash", timeCreated = "time_created", downloadTokens = "download_tokens"
    }
}

/// What a job produced.
struct ResultView: Encodable {
    let object: ObjectView?
    let path: String?
    let size: Int64?
    let md5: String?
    let crc32c: String?
    /// The hashes compared with the server's (`md5`, `crc32c`); absent for results logged before it.
    let verified: [String]?
    /// download-memory: the SHA-256 of the bytes, wherever the log keeps them.
    let blob: String?
    let url: String?
    /// delete: the reference of the object deleted.
    let deleted: String?
    /// `true` when `if_exists: skip` / `skip-identical` left the destination as it was (nothing moved);
    /// absent otherwise. The log kept it, and no view showed it, as the README promised.
    let skipped: Bool?

    /// - Parameter revealURL: print a fetch-url result's URL as it is (`jobctl result`: the URL, token
    ///   included, is what the command is for).
    init(_ result: JobResult, display: Display, revealURL: Bool = false) {
        object = result.object.map { ObjectView($0, display: display) }
        path = result.path
        size = result.size
        md5 = result.md5
        crc32c = result.crc32c
        verified = result.verified?.map(\.rawValue)
        blob = result.bytesSHA256
        url = revealURL ? result.url : result.url.map(display.url)
        deleted = result.deleted.map(display.location)
        skipped = result.skipped == true ? true : nil
    }
}

/// Where an interrupted transfer continues: `{"type": "upload", "session_uri", "confirmed_offset",
/// "total"}`, `{"type": "download", "bytes_written", "generation", "etag", "temp_path", "prefix_crc32c"}`,
/// `{"type": "sliced_download", "bytes_written", "generation", "temp_path", "slices"}`,
/// `{"type": "sent_upload", "total"}`, `{"type": "sent_delete"}` or `{"type": "unanswered"}`.
struct ResumePointView: Encodable {
    let type: String
    let sessionURI: String?
    let confirmedOffset: Int64?
    let total: Int64?
    let bytesWritten: Int64?
    let generation: String?
    let etag: String?
    let tempPath: String?
    /// A sliced download's slices: start, length and the bytes confirmed from the start.
    let slices: [DownloadSlice]?
    /// The CRC32C of a download's kept bytes, which the attempt that resumes checks (recorded by an attempt
    /// that stopped or failed retryably; absent from periodic checkpoints).
    var prefixCrc32c: String?

    init(_ resume: ResumePoint, display: Display) {
        if case .slicedDownload(let slices, _, _, _) = resume { self.slices = slices } else { slices = nil }
        if case .download(_, _, _, _, _, _, let crc32c) = resume { prefixCrc32c = crc32c }
        switch resume {
        case .upload(let session, let offset, let total, _):
            type = "upload"
            sessionURI = display.url(session)
            confirmedOffset = offset
            self.total = total
            bytesWritten = nil
            generation = nil
            etag = nil
            tempPath = nil
        case .download(let written, let generation, let etag, let tempPath, _, _, _):
            type = "download"
            sessionURI = nil
            confirmedOffset = nil
            total = nil
            bytesWritten = written
            self.generation = generation
            self.etag = etag
            self.tempPath = tempPath
        case .slicedDownload(_, let generation, let tempPath, _):
            type = "sliced_download"
            sessionURI = nil
            confirmedOffset = nil
            total = nil
            bytesWritten = resume.bytesDone
            self.generation = generation
            etag = nil
            self.tempPath = tempPath
        case .sentUpload(let total):
            type = "sent_upload"
            sessionURI = nil
            confirmedOffset = nil
            self.total = total
            bytesWritten = nil
            generation = nil
            etag = nil
            tempPath = nil
        case .sentDelete, .unanswered:
            type = resume == .sentDelete ? "sent_delete" : "unanswered"
            sessionURI = nil
            confirmedOffset = nil
            total = nil
            bytesWritten = nil
            generation = nil
            etag = nil
            tempPath = nil
        }
    }

    enum CodingKeys: String, CodingKey {
        case type, total, generation, etag, slices
        case sessionURI = "session_uri", confirmedOffset = "confirmed_offset", bytesWritten = "bytes_written", tempPath = "temp_path"
        case prefixCrc32c = "prefix_crc32c"
    }
}

/// A job as `list`, `show` and the control commands print it.
struct JobView: Encodable {
    let id: String
    let kind: String
    let state: String
    let queue: String
    let priority: Int
    let attempts: Int
    let maxAttempts: Int
    let source: String?
    let destination: String?
    let key: String?
    /// Confirmed bytes (for an upload: what the server holds).
    let bytesDone: Int64
    /// An upload's bytes sent but not (yet) confirmed.
    let bytesSent: Int64?
    let bytesTotal: Int64?
    let resumePoint: ResumePointView?
    let pauseRequested: Bool
    let cancelRequested: Bool
    let retryScheduled: Bool
    let error: ErrorView?
    let result: ResultView?
    let spec: SpecView
    let createdAt: String
    let createdAtMs: Int64
    let startedAt: String?
    let startedAtMs: Int64?
    let finishedAt: String?
    let finishedAtMs: Int64?
    let runAfter: String
    let runAfterMs: Int64
    /// The batch id, absent for a job written on its own.
    let batch: String?
    /// The ids of the jobs this one waits for (`after:`), absent when none.
    let after: [String]?
    /// Those of `after` that have not succeeded yet, for a queued or paused job; absent when not known.
    let waitingFor: [String]?

    init(_ job: JobRecord, display: Display, waitingFor: [String]? = nil) {
        id = job.id
        kind = job.spec.kind.rawValue
        state = job.state.rawValue
        queue = job.spec.queue
        priority = job.spec.priority
        attempts = job.attempts
        maxAttempts = job.maxAttempts
        source = job.spec.source.map(display.url)
        destination = job.spec.destination.map(display.url)
        key = job.spec.key
        bytesDone = job.confirmedBytes
        bytesSent = job.unconfirmedBytes
        bytesTotal = job.bytesTotal
        resumePoint = job.displayedResumePoint.map { ResumePointView($0, display: display) }
        pauseRequested = job.pauseRequested
        cancelRequested = job.cancelRequested
        retryScheduled = job.retryScheduled
        error = job.error.map { ErrorView($0, display: display) }
        result = job.result.map { ResultView($0, display: display) }
        spec = SpecView(job.spec, display: display)
        createdAt = RFC3339.string(job.createdAtMs)
        createdAtMs = job.createdAtMs
        startedAt = job.startedAtMs.map(RFC3339.string)
        startedAtMs = job.startedAtMs
        finishedAt = job.finishedAtMs.map(RFC3339.string)
        finishedAtMs = job.finishedAtMs
        runAfter = RFC3339.string(job.runAfterMs)
        runAfterMs = job.runAfterMs
        batch = job.batch
        after = job.spec.after
        self.waitingFor = waitingFor
    }

    enum CodingKeys: String, CodingKey {
        case id, kind, state, queue, priority, attempts, source, destination, key, error, result, spec, batch, after
        case waitingFor = "waiting_for"
        case maxAttempts = "max_attempts", bytesDone = "bytes_done", bytesSent = "bytes_sent", bytesTotal = "bytes_total"
        case resumePoint = "resume_point", pauseRequested = "pause_requested", cancelRequested = "cancel_requested"
        case retryScheduled = "retry_scheduled"
        case createdAt = "created_at", createdAtMs = "created_at_ms", startedAt = "started_at", startedAtMs = "started_at_ms"
        case finishedAt = "finished_at", finishedAtMs = "finished_at_ms", runAfter = "run_after", runAfterMs = "run_after_ms"
    }
}

/// An event's payload.
struct EventDataView: Encodable {
    let spec: SpecView?
    let leaseOwner: String?
    let leaseExpiresAt: String?
    let leaseExpiresAtMs: Int64?
    let attempt: Int?
    let bytesDone: Int64?
    let bytesTotal: Int64?
    let resumePoint: ResumePointView?
    let error: ErrorView?
    let retryAt: String?
    let retryAtMs: Int64?
    let result: ResultView?
    let reason: String?
    let archive: ArchiveView?
    /// cancelled: the job (`after:`) whose end cancelled this one.
    let dependency: String?

    init(_ data: EventData, display: Display) {
        spec = data.spec.map { SpecView($0, display: display) }
        leaseOwner = data.leaseOwner
        leaseExpiresAt = data.leaseExpiresAtMs.map(RFC3339.string)
        leaseExpiresAtMs = data.leaseExpiresAtMs
        attempt = data.attempt
        bytesDone = data.bytesDone
        bytesTotal = data.bytesTotal
        resumePoint = data.resumePoint.map { ResumePointView($0, display: display) }
        error = data.error.map { ErrorView($0, display: display) }
        retryAt = data.retryAtMs.map(RFC3339.string)
        retryAtMs = data.retryAtMs
        result = data.result.map { ResultView($0, display: display) }
        reason = data.reason.map { display.text($0) }
        archive = data.archive.map(ArchiveView.init)
        dependency = data.dependency
    }

    enum CodingKeys: String, CodingKey {
        case spec, attempt, error, result, reason, archive, dependency
        case leaseOwner = "lease_owner", leaseExpiresAt = "lease_expires_at", leaseExpiresAtMs = "lease_expires_at_ms"
        case bytesDone = "bytes_done", bytesTotal = "bytes_total", resumePoint = "resume_point"
        case retryAt = "retry_at", retryAtMs = "retry_at_ms"
    }
}

/// An event as `history --json` and `watch --json` print it.
struct EventView: Encodable {
    let seq: Int64?
    let jobID: String
    let version: Int
    let type: String
    let status: String?
    let at: String
    let atMs: Int64
    let actor: String
    let lease: Int64?
    let data: EventDataView

    init(_ event: JobEvent, display: Display) {
        seq = event.seq
        jobID = event.jobID
        version = event.version
        type = event.type.rawValue
        status = ObserverStatus(event.type)?.rawValue
        at = RFC3339.string(event.atMs)
        atMs = event.atMs
        actor = event.actor
        lease = event.leaseToken
        data = EventDataView(event.data, display: display)
    }

    enum CodingKeys: String, CodingKey {
        case seq, version, type, status, at, actor, lease, data
        case jobID = "job_id", atMs = "at_ms"
    }
}

/// One row of `jobctl audit`: JSON (with the shared `error` object) and CSV (flat `error_*` columns).
struct AuditRow: Encodable {
    let id: String
    let kind: String
    let state: String
    let attempts: Int
    let source: String?
    let destination: String?
    let size: Int64?
    let md5: String?
    let crc32c: String?
    /// The hashes of `md5` and `crc32c` compared with the server's (`[]`: neither); absent when the result
    /// does not say (no result, or one logged before it was recorded). CSV: space-separated, `none` for `[]`.
    let verified: [String]?
    /// `true` for a transfer `if_exists: skip` (or `skip-identical`) settled without writing, as in `show`
    /// and `result`; absent otherwise: a skipped job's row read as a transfer made. CSV: the last column,
    /// `true` or empty.
    let skipped: Bool?
    let submittedAt: String
    let submittedAtMs: Int64
    let startedAt: String?
    let startedAtMs: Int64?
    let finishedAt: String?
    let finishedAtMs: Int64?
    let error: ErrorView?
    /// The batch and what it was expanded from, as the `submitted` event recorded them.
    let batch: BatchView?

    init(_ job: JobRecord, display: Display) {
        id = job.id
        kind = job.spec.kind.rawValue
        state = job.state.rawValue
        attempts = job.attempts
        batch = job.spec.batch.map { BatchView($0, display: display) }
        source = job.spec.source.map(display.url)
        destination = job.spec.destination.map(display.url)
        size = job.result?.size ?? job.result?.object?.knownSize ?? job.bytesTotal
        md5 = job.result?.md5 ?? job.result?.object?.md5Hash
        crc32c = job.result?.crc32c ?? job.result?.object?.crc32c
        verified = job.result?.verified?.map(\.rawValue)
        skipped = job.result?.skipped == true ? true : nil
        submittedAt = RFC3339.string(job.createdAtMs)
        submittedAtMs = job.createdAtMs
        startedAt = job.startedAtMs.map(RFC3339.string)
        startedAtMs = job.startedAtMs
        finishedAt = job.finishedAtMs.map(RFC3339.string)
        finishedAtMs = job.finishedAtMs
        error = job.error.map { ErrorView($0, display: display) }
    }

    static let csvHeader = "id,kind,state,attempts,source,destination,size,md5,crc32c,submitted_at,started_at,finished_at,error_code,error_name,error_message,batch,batch_source,verified,skipped"

    var csvLine: String {
        let fields: [String?] = [id, kind, state, "\(attempts)", source, destination, size.map(String.init), md5, crc32c,
                                 submittedAt, startedAt, finishedAt, error.map { String($0.code) }, error?.name, error?.message,
                                 batch?.id, batch?.source,
                                 VerifiedHashes.csvText(verified), skipped == true ? "true" : nil]
        return fields.map { CSVField.text($0 ?? "") }.joined(separator: ",")
    }

    enum CodingKeys: String, CodingKey {
        case id, kind, state, attempts, source, destination, size, md5, crc32c, error, batch, verified, skipped
        case submittedAt = "submitted_at", submittedAtMs = "submitted_at_ms", startedAt = "started_at", startedAtMs = "started_at_ms"
        case finishedAt = "finished_at", finishedAtMs = "finished_at_ms"
    }
}

/// What an `archived` event records, as `--json` prints it (and `jobctl archive --json`).
struct ArchiveView: Encodable {
    let file: String
    let sha256: String
    let before: String
    let beforeMs: Int64
    let jobs: Int
    let events: Int
    let blobs: Int
    let blobsRemoved: Int
    let firstSeq: Int64
    let lastSeq: Int64

    init(_ record: ArchiveRecord) {
        file = record.file
        sha256 = record.sha256
        before = RFC3339.string(record.beforeMs)
        beforeMs = record.beforeMs
        jobs = record.jobs
        events = record.events
        blobs = record.blobs
        blobsRemoved = record.blobsRemoved
        firstSeq = record.firstSeq
        lastSeq = record.lastSeq
    }

    enum CodingKeys: String, CodingKey {
        case file, sha256, before, jobs, events, blobs
        case beforeMs = "before_ms", blobsRemoved = "blobs_removed", firstSeq = "first_seq", lastSeq = "last_seq"
    }
}
