import Foundation
import JobModel
import Manifest
import Synchronization

/// The command's standard input, which `submit -` reads its manifest from.
///
/// A caller that started jobctl with its standard input closed (`jobctl submit - 0<&-`) finds `/dev/null`
/// there: `StandardStreams.ensureOpen` puts it on a closed descriptor before anything else opens a file.
/// Read as it is, that was an empty manifest, refused as "the manifest has no jobs" — as if the caller had
/// sent one with none. A closed standard input is a read that fails (EBADF) instead, as the read of the
/// closed descriptor would have; `/dev/null` given on purpose (`< /dev/null`) stays an empty manifest, as
/// an empty file is.
enum StandardInput {
    /// Whether descriptor 0 was closed when the process started (it now points at `/dev/null`).
    private static let closedAtStart = Atomic<Bool>(false)

    /// Records that the caller started the process with its standard input closed.
    static func noteClosedAtStart() { closedAtStart.store(true, ordering: .relaxed) }

    /// Everything on standard input, as `ManifestParser.readContents(ofDescriptor:)` reads it, or the
    /// error number of the read that failed: EBADF when standard input was closed at start.
    static func readManifest(with parser: ManifestParser) -> Result<Data, ReadFailure> {
        if closedAtStart.load(ordering: .relaxed) { return .failure(ReadFailure(code: EBADF)) }
        guard let data = parser.readContents(ofDescriptor: STDIN_FILENO) else { return .failure(ReadFailure(code: errno)) }
        return .success(data)
    }

    /// A read of standard input that failed.
    struct ReadFailure: Error, CustomStringConvertible {
        /// The error number (`errno`).
        let code: Int32

        /// What went wrong, and for a closed standard input what to do.
        var description: String {
            let reason = String(cString: strerror(code))
            guard code == EBADF else { return "cannot read the manifest from standard input (\(reason))" }
            return "cannot read the manifest from standard input (\(reason): it was closed when jobctl started); "
                + "give the manifest on it (`jobctl submit - < FILE`) or name the file (`jobctl submit FILE`)"
        }
    }
}
