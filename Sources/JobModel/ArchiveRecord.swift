import Foundation

/// What one `jobctl archive` moved out of the log: the payload of the `archived` event.
///
/// The event belongs to the log itself, not to a job: it is appended to the log-level pseudo job
/// `ArchiveRecord.logJobID` (versions 1, 2, … one per archive), which has no projection row. Replay
/// skips it; `audit` and `watch --all` show it like any other event.
public struct ArchiveRecord: Codable, Sendable, Equatable, Hashable {
    /// The job id the log's own events are recorded under. Not a ULID, so no job can ever have it.
    public static let logJobID = "log"

    /// The archive file's name (its last path component, not the directory it was written in).
    public var file: String
    /// The SHA-256 (hex) of the archive file's bytes as written (what `sha256sum FILE` prints).
    public var sha256: String
    /// Jobs that finished before this time (ms since the epoch) were archived.
    public var beforeMs: Int64
    /// How many jobs, events and blobs the file holds.
    public var jobs: Int
    public var events: Int
    public var blobs: Int
    /// How many of those blobs were removed from the log (the others are still referenced by a job that stays).
    public var blobsRemoved: Int
    /// The smallest and largest seq of the archived events (0 when none).
    public var firstSeq: Int64
    public var lastSeq: Int64

    /// Creates a record.
    public init(file: String, sha256: String, beforeMs: Int64, jobs: Int, events: Int, blobs: Int, blobsRemoved: Int,
                firstSeq: Int64, lastSeq: Int64) {
        self.file = file
        self.sha256 = sha256
        self.beforeMs = beforeMs
        self.jobs = jobs
        self.events = events
        self.blobs = blobs
        self.blobsRemoved = blobsRemoved
        self.firstSeq = firstSeq
        self.lastSeq = lastSeq
    }
}
