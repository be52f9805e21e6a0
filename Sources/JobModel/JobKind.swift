/// The kinds of job: five transfers, one per Cloud Storage for Firebase task API, and three operations on
/// an object (its metadata read or updated, the object deleted).
public enum JobKind: String, Codable, Sendable, CaseIterable, Hashable {
    /// `putFile(from:metadata:)`: a local file to a storage reference.
    case uploadFile = "upload-file"
    /// `putData(_:metadata:)`: inline bytes to a storage reference.
    case uploadData = "upload-data"
    /// `write(toFile:)`: a storage reference to a local file (temporary file + atomic rename).
    case downloadFile = "download-file"
    /// `getData(maxSize:)`: a storage reference into memory, refused above `maxSize`.
    case downloadMemory = "download-memory"
    /// `downloadURL()`: a shareable download URL for a storage reference.
    case fetchURL = "fetch-url"
    /// `getMetadata()`: an object's metadata (GCS, `file://`, or an HTTP HEAD).
    case getMetadata = "get-metadata"
    /// `updateMetadata(_:)`: changes an object's writable metadata; a null custom value deletes that key.
    case updateMetadata = "update-metadata"
    /// `delete()`: deletes an object.
    case delete

    /// Whether the job writes an object to storage.
    public var isUpload: Bool { self == .uploadFile || self == .uploadData }

    /// Whether the job's storage reference is its `destination` (uploads, update-metadata, delete) rather
    /// than its `source` (downloads, fetch-url, get-metadata).
    public var namesDestinationReference: Bool { isUpload || self == .updateMetadata || self == .delete }

    /// Whether the job acts on an object without moving its bytes.
    public var isObjectOperation: Bool { self == .getMetadata || self == .updateMetadata || self == .delete }

    /// Whether the job moves none of an object's bytes: the object operations, and `fetch-url`, whose
    /// result is a URL (its object's size is the object's, not bytes this job moved).
    public var movesNoBytes: Bool { isObjectOperation || self == .fetchURL }
}

/// The state of a job in the projection.
public enum JobState: String, Codable, Sendable, CaseIterable, Hashable {
    /// Runnable at or after `run_after`.
    case queued
    /// Leased by a worker.
    case running
    /// Stopped by request at its resume point; `resume` re-queues it.
    case paused
    case succeeded
    case failed
    case cancelled

    /// Succeeded, failed and cancelled are final; only `retry` re-opens failed or cancelled jobs.
    public var isFinal: Bool { self == .succeeded || self == .failed || self == .cancelled }
}
