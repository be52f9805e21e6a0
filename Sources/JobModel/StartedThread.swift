#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Starts the threads jobctl runs beside Swift's own (the store's, the curl engine's, the log's, …), or
/// says why the system refused one.
///
/// Foundation's `Thread.start()` drops a failed `pthread_create`: under a process limit (`ulimit -u`,
/// systemd's `TasksMax=`) or an address-space limit (`ulimit -v`) the thread never ran, and whoever then
/// waited for it (the first read of the database, a transfer, a log line) waited for ever, silently.
public enum StartedThread {
    /// Starts a detached thread named `name` (see `ThreadName`) that runs `body`; with `stackSize`
    /// (bytes) its stack is that size instead of the system's default.
    public static func start(name: String, stackSize: Int? = nil,
                             _ body: @escaping @Sendable () -> Void) throws(ThreadStartFailure) {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        if let stackSize { pthread_attr_setstacksize(&attributes, max(stackSize, Int(PTHREAD_STACK_MIN))) }
        let job = Unmanaged.passRetained(Job(name: name, body: body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, &attributes, { argument in
            guard let argument else { return nil }
            let job = Unmanaged<Job>.fromOpaque(argument).takeRetainedValue()
            ThreadName.setCurrent(job.name)
            job.body()
            return nil
        }, job)
        guard result == 0 else {
            Unmanaged<Job>.fromOpaque(job).release()
            throw ThreadStartFailure(name: name, errorNumber: result)
        }
    }

    private final class Job {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }
}

/// The system refused a thread (`pthread_create`'s error number), with what to do about it.
public struct ThreadStartFailure: Error, Equatable, CustomStringConvertible {
    /// The thread's name (what it is for).
    public let name: String
    /// `pthread_create`'s answer: EAGAIN at a process or thread limit, and also without the address
    /// space for the thread's stack (glibc answers EAGAIN for the stack its mmap could not have: a worker
    /// under `ulimit -v` was told of `ulimit -u`); ENOMEM where a C library says so.
    public let errorNumber: Int32

    public init(name: String, errorNumber: Int32) {
        self.name = name
        self.errorNumber = errorNumber
    }

    public var description: String {
        let reason = String(cString: strerror(errorNumber))
        let remedy = errorNumber == EAGAIN
            ? "the user's process and thread limit is reached (`ulimit -u`, systemd's TasksMax=, or the system's threads-max), "
                + "or there is no address space for its stack (`ulimit -v`, systemd's LimitAS=)"
            : "there is no memory for its stack (`ulimit -v`, systemd's LimitAS= or MemoryMax=)"
        return "cannot start the thread '\(name)': \(reason); \(remedy)"
    }
}
