/// Which file a path named when a job created it: the device and inode from `fstat(2)`.
///
/// Recorded in a download's resume point (and a `file://` upload session's URI) so that a resumed
/// attempt appends only to the very file the job made: a file put in its place meanwhile, even one with
/// the same name, has another identity and is never written to.
public struct FileIdentity: Codable, Sendable, Equatable, Hashable, CustomStringConvertible {
    /// `st_dev`: the filesystem the file lives on.
    public var device: UInt64
    /// `st_ino`: the file on that filesystem.
    public var inode: UInt64

    /// An identity from `st_dev` and `st_ino`.
    public init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }

    /// `DEVICE:INODE`, the form a `file://` upload session URI carries.
    public var description: String { "\(device):\(inode)" }

    /// Parses `DEVICE:INODE` (both decimal); nil for anything else.
    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return nil }
        self.init(device: device, inode: inode)
    }
}

/// What an upload's source file was when the upload read it first: its size, modification time and
/// identity. Bytes read from a file that no longer matches (written to, grown, replaced by another file)
/// must not be joined to those read before: an upload checks the file again before its last bytes go
/// out, and a later attempt resumes an upload session only while the file still matches the stamp the
/// session was started with.
public struct SourceStamp: Codable, Sendable, Equatable, Hashable {
    /// `st_size` in bytes.
    public var size: Int64
    /// `st_mtim` in nanoseconds since 1970.
    public var modifiedNanos: Int64
    /// `st_dev` and `st_ino`.
    public var file: FileIdentity
    /// `st_ctim` in nanoseconds since 1970: the inode's change time, which every write moves and no one
    /// can set back. A file written in place and its modification time put back (`touch -r`, `rsync
    /// --inplace -t`) kept its size and mtime, and an upload joined bytes of two versions into one object.
    /// Nil in a stamp an older jobctl logged (it is then not compared).
    public var changedNanos: Int64?

    public init(size: Int64, modifiedNanos: Int64, file: FileIdentity, changedNanos: Int64? = nil) {
        self.size = size
        self.modifiedNanos = modifiedNanos
        self.file = file
        self.changedNanos = changedNanos
    }

    /// Whether `other` is the same file, unchanged: the same identity, size and modification time, and
    /// the same change time where both stamps have one. (A `chmod` or a new hard link moves the change
    /// time too: such a file counts as changed, and an upload reads it again from its start — a retry,
    /// never a mixed object.)
    public func isUnchanged(since other: SourceStamp) -> Bool {
        file == other.file && size == other.size && modifiedNanos == other.modifiedNanos
            && (changedNanos == nil || other.changedNanos == nil || changedNanos == other.changedNanos)
    }
}
