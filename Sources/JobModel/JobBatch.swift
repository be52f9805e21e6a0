import Foundation

/// Where a job came from when one manifest entry expanded into many: a folder or glob of local files
/// (upload-file) or a prefix of stored objects (download-file).
///
/// Recorded in the job's `submitted` event (inside the spec), so the log keeps what a folder, glob or
/// prefix meant on the day it was submitted, whatever it holds later. Every job of one expansion shares
/// the id.
public struct JobBatch: Codable, Sendable, Equatable, Hashable {
    /// The batch id: a ULID, like job ids, shared by every job of the expansion.
    public var id: String
    /// What was expanded, resolved: an absolute folder (ending in `/`), an absolute glob, or a storage
    /// prefix (`gs://b/photos/`).
    public var source: String
    /// The `include:` patterns, when the manifest gave any.
    public var include: [String]?
    /// The `exclude:` patterns, when the manifest gave any.
    public var exclude: [String]?
    /// This job's path relative to the folder, the glob's root or the prefix.
    public var path: String

    /// Creates a batch record.
    public init(id: String, source: String, include: [String]? = nil, exclude: [String]? = nil, path: String) {
        self.id = id
        self.source = source
        self.include = include
        self.exclude = exclude
        self.path = path
    }
}
