import Foundation
import JobModel

/// Whether the system lets the worker start the threads Swift's concurrency runtime will ask for.
///
/// The worker's own threads (the store's, the curl engine's, the log's) say when the system refuses
/// one (`StartedThread`), but the runtime's cooperative pool is started by libdispatch at the first
/// task, and libdispatch, refused a thread, sleeps and asks again for ever: under a process limit that
/// left room for jobctl's own threads and not for those (`ulimit -u 6` with other processes of the user
/// running, an address-space limit) the worker hung at its start, silent, its log empty and SIGTERM
/// never read (its handler is installed from a task). So before its first task the worker starts as
/// many threads as the runtime may want at once — the pool's width (a thread a core) and libdispatch's
/// own few — waits until all run, and ends them: refused one, it stops with the reason instead.
enum ThreadHeadroom {
    /// The threads checked for: one a core for the cooperative pool, and room for libdispatch's manager
    /// and signal threads and the worker's threads started later (its sync and checkpoint threads).
    static var needed: Int { ProcessInfo.processInfo.activeProcessorCount + 8 }

    /// Starts `count` threads that wait together, then ends and joins them; the first refusal is thrown
    /// (the threads started so far are ended first).
    static func check(_ count: Int = needed) throws(ThreadStartFailure) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw ThreadStartFailure(name: "jobctl-headroom", errorNumber: errno) }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }   // never inherited by a command another thread starts
        var started: [pthread_t] = []
        var refusal: Int32 = 0
        for _ in 0..<count {
            var thread = pthread_t()
            let reader = UnsafeMutableRawPointer(bitPattern: Int(ends[0]) + 1)
            let result = pthread_create(&thread, nil, { argument in
                // Blocks until the write end closes (end of file), then returns.
                let fd = Int32(Int(bitPattern: argument) - 1)
                var byte: UInt8 = 0
                while read(fd, &byte, 1) < 0 && errno == EINTR {}
                return nil
            }, reader)
            if result != 0 {
                refusal = result
                break
            }
            started.append(thread)
        }
        close(ends[1])
        for thread in started { pthread_join(thread, nil) }
        close(ends[0])
        if refusal != 0 {
            throw ThreadStartFailure(name: "jobctl-pool (\(started.count + 1) of \(count) threads the worker needs at once)",
                                     errorNumber: refusal)
        }
    }
}
