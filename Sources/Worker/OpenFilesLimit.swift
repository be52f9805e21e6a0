#if canImport(Glibc)
import Glibc
#endif

/// The process's limit on open descriptors (`RLIMIT_NOFILE`).
///
/// Every transfer holds a socket or a file, often a partial file and a directory too, and the store,
/// the log and the metrics endpoint hold more. Many systems still start processes with a soft limit of
/// 1,024 under a much higher hard one, so a worker at high concurrency would fail transfers with
/// "too many open files" though the system allows it more. The worker raises its soft limit to the
/// hard one at start (as Go programs and nginx's `worker_rlimit_nofile` do), and warns when even the
/// hard limit is below what its concurrency may need.
public struct OpenFilesLimit: Sendable, Equatable {
    /// The limit in force.
    public var soft: UInt64
    /// The ceiling an unprivileged process may raise `soft` to.
    public var hard: UInt64

    public init(soft: UInt64, hard: UInt64) {
        self.soft = soft
        self.hard = hard
    }

    /// Descriptors a worker running `concurrency` transfers may hold at once: four a transfer (a
    /// connection or a source file, a partial file, its directory, one spare) and 64 for the store, the
    /// log and the rest.
    public static func needed(concurrency: Int) -> UInt64 {
        UInt64(max(0, concurrency)) * 4 + 64
    }

    /// The most transfers whose descriptors fit in `limit` (0 when not even one does).
    public static func fittingConcurrency(_ limit: UInt64) -> Int {
        limit < 64 ? 0 : Int(clamping: (limit - 64) / 4)
    }

    /// The limit now, or nil if the system does not say.
    public static func current() -> OpenFilesLimit? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return OpenFilesLimit(soft: UInt64(limit.rlim_cur), hard: UInt64(limit.rlim_max))
    }

    /// Raises the soft limit to the hard one, capped at `cap` (an unlimited hard limit would make
    /// some libraries size tables by it). Returns the limit in force afterwards.
    @discardableResult
    public static func raiseSoftLimit(cap: UInt64 = 1 << 20) -> OpenFilesLimit? {
        guard let before = current() else { return nil }
        let wanted = min(before.hard, cap)
        guard wanted > before.soft else { return before }
        var limit = rlimit(rlim_cur: rlim_t(wanted), rlim_max: rlim_t(before.hard))
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return before }
        return current() ?? before
    }
}
