/// The five kinds of transfer job, one per Cloud Storage for Firebase task API.
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

    /// Whether the job writes an object to storage.
    public var isUpload: Bool { self == .uploadFile || self == .uploadData }
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
