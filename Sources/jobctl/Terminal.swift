import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

// MARK: - Terminal width

/// The width output should fit: `COLUMNS` when it holds a valid width (as `ls` reads it), else the
/// terminal's own width (`TIOCGWINSZ`) when standard output is one, else nil (a pipe: no fitting).
enum Terminal {
    /// The widths `COLUMNS` may hold; anything else is ignored with a warning.
    static let columnsRange = 10...10_000

    /// The current width, read again on every call (a terminal can be resized while `watch` runs).
    static func width(environment: [String: String], stdoutIsTerminal: Bool, descriptor: Int32 = STDOUT_FILENO) -> Int? {
        if let text = environment["COLUMNS"], !text.isEmpty {
            // The grammar of every number a user types (`Int` took `+80` and refused ` 80 `).
            if case .value(let value) = DecimalText.read(text), let width = Int(exactly: value), columnsRange.contains(width) {
                return width
            }
            warnOnce("jobctl: ignoring COLUMNS='\(text)': expected a whole number from \(columnsRange.lowerBound) to \(columnsRange.upperBound)")
        }
        guard stdoutIsTerminal else { return nil }
        var size = winsize()
        guard ioctl(descriptor, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }

    private static let warned = WarnedFlag()

    private static func warnOnce(_ message: String) {
        guard warned.set() else { return }
        emitError(message)
    }
}

/// A flag set once, from any thread.
private final class WarnedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false

    /// Sets the flag; true only for the first caller.
    func set() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if value { return false }
        value = true
        return true
    }
}

// MARK: - Shutdown signals

/// SIGTERM, SIGINT and SIGHUP: blocked first thing in `main` (before any thread starts, so every thread
/// inherits the mask), then either released again (every command but `worker`, which keeps the
/// default "terminate") or handed to the worker's handlers, which read them through libdispatch
/// signal sources. A signal that arrived in between stays pending and is handled, not lost: the
/// disposition is never set to SIG_IGN, which would discard a pending signal.
enum ShutdownSignals {
    /// SIGHUP too: the terminal a worker was started from closing (an ssh session ending) killed it at
    /// once, its transfers cut and its jobs held until their leases ran out; there is nothing to reload.
    /// SIGINT and SIGHUP are left alone when the process was started ignoring them, as Unix programs
    /// leave them: `nohup` ignores SIGHUP (it asked to outlive its terminal), and a shell ignores SIGINT
    /// in what a script starts with `&` (a Ctrl-C meant for the script must not stop it). Read anyway,
    /// an ignored SIGINT that came in the process's first milliseconds, before `block`, was discarded
    /// and one that came later stopped the worker. SIGTERM, a supervisor's stop, is always read.
    static let numbers: [Int32] = [SIGTERM] + [SIGINT, SIGHUP].filter { !ignoredAtStart($0) }

    /// Whether `number`'s disposition, as inherited through exec, is "ignore".
    private static func ignoredAtStart(_ number: Int32) -> Bool {
        var current = sigaction()
        guard sigaction(number, nil, &current) == 0 else { return false }
        return unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == 1   // SIG_IGN
    }

    /// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in every thread it starts later).
    static func block() {
        var set = signalSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Unblocks them again: a pending one takes its default action at once.
    static func unblock() {
        var set = signalSet()
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    private static func signalSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for number in numbers { sigaddset(&set, number) }
        return set
    }
}
