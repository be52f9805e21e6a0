import Foundation
import JobModel
import Synchronization

/// The command's standard output: every line a command prints goes through `write`, so a write that
/// fails (a full disk, `/dev/full`, an output closed by the caller) is never taken for printed output.
///
/// A pipe whose reader went away ends a command with SIGPIPE, as it ends any filter. Any other failed
/// write ended nowhere: `jobctl list --json > /dev/full` exited 0 with nothing written, an `audit` read
/// every job into a full disk and `watch --all` went on printing into it until every job ended. Now the
/// first such write ends the command at once with exit 1 and says so on standard error, like the filters
/// of coreutils; a worker, whose record is the event log, only notes it (`failure`) and goes on.
enum StandardOutput {
    /// The errno of the first write that failed, 0 while none has.
    private static let firstFailure = Atomic<Int32>(0)
    /// Whether a failed write ends the process (every command but `worker`).
    private static let endsOnFailure = Atomic<Bool>(true)
    /// Whether descriptor 1 was closed when the process started (it now points at `/dev/null`).
    private static let closedAtStart = Atomic<Bool>(false)

    /// Records that the caller started the process with its standard output closed: `ensureOpen` put
    /// `/dev/null` there, which takes every write, so each write fails here with EBADF instead.
    static func noteClosedAtStart() { closedAtStart.store(true, ordering: .relaxed) }

    /// A failed write is only recorded, for a command that must finish what it does whatever its output
    /// (the worker: its jobs are in the log, not in what it prints).
    static func keepRunningOnFailure() { endsOnFailure.store(false, ordering: .relaxed) }

    /// The error of the first write that failed, nil while every write succeeded.
    static var failure: String? {
        let code = firstFailure.load(ordering: .relaxed)
        return code == 0 ? nil : "writing to standard output failed: \(String(cString: strerror(code)))"
    }

    /// Writes `bytes`; see the type's description for what a failure does.
    static func write(_ bytes: [UInt8]) {
        if closedAtStart.load(ordering: .relaxed) {
            fail(EBADF)
        } else if !StandardStreams.write(bytes, to: STDOUT_FILENO) {
            fail(errno)
        }
    }

    /// Writes `text` as UTF-8; see `write(_:)`.
    static func write(_ text: String) { write(Array(text.utf8)) }

    /// Writes `data`; see `write(_:)`.
    static func write(_ data: Data) { write([UInt8](data)) }

    private static func fail(_ code: Int32) {
        // A pipe without a reader ends the process with SIGPIPE before `write` returns, unless the
        // signal is ignored (the worker); EPIPE is reported like any other failure.
        _ = firstFailure.compareExchange(expected: 0, desired: code == 0 ? EIO : code, ordering: .relaxed)
        guard endsOnFailure.load(ordering: .relaxed), let failure else { return }
        emitError("Error: \(failure); the output is incomplete (what the command changed in the log stays changed)")
        exit(ExitCode.failure)
    }
}
