import Foundation
import JobModel

// jobctl — a durable, event-sourced transfer job queue. This file only dispatches: each command's
// behaviour lives in Commands+*.swift, the work itself in the library modules.

// First, descriptors 0, 1 and 2 are open (on /dev/null where the caller closed them): otherwise the
// next file or socket opened would take the number, and output meant for the terminal would land in it.
// A command started with its output closed fails its first write to it (see StandardOutput).
// A command that reads its standard input (`submit -`) refuses one closed at start (see StandardInput).
let reopenedAtStart = StandardStreams.ensureOpen()
if reopenedAtStart.contains(STDOUT_FILENO) { StandardOutput.noteClosedAtStart() }
if reopenedAtStart.contains(STDIN_FILENO) { StandardInput.noteClosedAtStart() }

// Before any thread exists (`unsetenv` is not safe beside one reading the environment): the service
// manager's notification variables are taken out of the environment, for `worker` alone, so that no
// process jobctl starts (a token command) inherits them and speaks for it.
_ = ServiceEnvironment.taken

// Then, before any thread exists (every thread inherits this mask): hold SIGTERM, SIGINT and SIGHUP, so one
// that arrives while the worker is still starting waits for its handler instead of killing the process.
// Commands other than `worker` release them again before they run.
ShutdownSignals.block()

// A write past the file size limit (`ulimit -f`, systemd's LimitFSIZE=) fails with EFBIG instead of
// SIGXFSZ killing the process: a worker growing its event log's -wal, or writing a download on one of its
// own threads, died without a word with its jobs left running under leases (the next worker to claim them
// died the same way), and a `submit` died mid-transaction. The error says which file and which limit.
signal(SIGXFSZ, SIG_IGN)

// SIGQUIT (Ctrl-\) quits at once, as it does Unix programs (its default action: the process ends, with a
// core dump where they are enabled; a worker's leases then lapse and its jobs are rescued, as after a
// crash). Swift's runtime took it for a crash of its own: every thread was stopped while it printed a
// "Program crashed" report of each, and then the process went on, a worker finishing its drain.
// Unblocked too: a parent that blocks it (as a test runner does) passes its mask on through exec.
signal(SIGQUIT, SIG_DFL)
var quit = sigset_t()
sigemptyset(&quit)
sigaddset(&quit, SIGQUIT)
sigprocmask(SIG_UNBLOCK, &quit, nil)

// Last, a stack as large as the one jobctl is built for: under `ulimit -s 64` the command runs on a
// thread with an 8 MiB stack (see StackSize); it died of SIGSEGV reading its first manifest job.
let arguments = Array(CommandLine.arguments.dropFirst())
// An argument that is not UTF-8 (a path with byte 0xFF) reaches Swift with replacement characters, and so
// names another file: refused as a usage error, as the current directory's path is (`CurrentDirectory`).
// (A stride, not a range: started with no arguments at all, argc is 0, and `1..<0` traps.)
if let bad = stride(from: 1, to: Int(CommandLine.argc), by: 1).first(where: { index in
    CommandLine.unsafeArgv[index].map { String(validatingCString: $0) == nil } ?? false
}) {
    ShutdownSignals.unblock()
    exit(CommandRunner.usageFailure("argument \(bad) ('\(CommandLine.arguments[bad])') is not valid UTF-8, and jobctl names files by "
                                        + "UTF-8 paths: rename the file or folder, or reach it by a path that is",
                                    usage: CommandRunner.topUsage))
}
// So is a variable naming a file or folder jobctl reads or writes.
for name in ["JOBCTL_DB", "JOBCTL_BUCKETS", "JOBCTL_CONFIG", "JOBCTL_CA_BUNDLE", "GOOGLE_APPLICATION_CREDENTIALS", "SSL_CERT_FILE",
             "SSL_CERT_DIR", "HOME", "XDG_CONFIG_HOME"] {
    if let value = getenv(name), String(validatingCString: value) == nil {
        ShutdownSignals.unblock()
        exit(CommandRunner.usageFailure("$\(name) is not valid UTF-8, and jobctl names files by UTF-8 paths: rename the file or folder, "
                                            + "or set the variable to a path that is", usage: CommandRunner.topUsage))
    }
}
exit(StackSize.run { CommandRunner.run(arguments) })
