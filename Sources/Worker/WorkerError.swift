/// Why the worker could not do something it was asked to, and what to do about it.
public struct WorkerError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public enum Code: String, Sendable {
        /// A `--metrics` address that is not HOST:PORT, out of range, or not allowed.
        case invalidMetricsAddress
        /// The metrics endpoint could not listen (address in use, not this machine's, …).
        case metricsListenFailed
        /// The service manager's notification variables (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`)
        /// are set but unusable, or no socket could be opened to use them.
        case serviceNotifyFailed
    }

    public let code: Code
    /// What went wrong and what to do.
    public let message: String
    /// The `errno` behind a failed system call, if any.
    public let errno: Int32?

    public init(_ code: Code, _ message: String, errno: Int32? = nil) {
        self.code = code
        self.message = message
        self.errno = errno
    }

    public var description: String { message }
}
