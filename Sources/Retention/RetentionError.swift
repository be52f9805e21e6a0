import Foundation

/// What writing, reading or checking an archive file can fail with; each message says what to do.
public enum RetentionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file could not be created, written, synced, renamed or read.
    case io(String)
    /// The file is not a complete, intact jobctl archive; the message says where and what.
    case invalidArchive(String)
    /// zlib refused to start or to compress.
    case compression(String)
    /// The log's jobs selected for an archive cannot be archived as they stand (a damaged or hand-edited
    /// log: an event missing from a job's history, a blob that does not match its hash); the message says
    /// what. Found before anything is written (`ArchiveWriter.check`).
    case unarchivable(String)

    public var description: String {
        switch self {
        case .io(let message): message
        case .invalidArchive(let message): "not a valid jobctl archive: \(message)"
        case .compression(let message): message
        case .unarchivable(let message): "the log cannot be archived as it stands: \(message); the log is damaged there "
            + "(`jobctl replay --verify` lists what is); nothing was archived"
        }
    }
}
