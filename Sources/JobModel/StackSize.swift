#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs jobctl on a stack of at least `minimumBytes`, whatever `ulimit -s` says.
///
/// The stack limit (`ulimit -s`, systemd's `LimitSTACK=`) sizes the main thread's stack and, in glibc,
/// every thread started without an explicit size. Under `ulimit -s 64` (64 KiB) `submit` died of SIGSEGV
/// before printing anything: reading one job takes a 64 KiB stack frame in a debug build (and tens of
/// KiB in release), and the threads of the store, the curl engine and Swift's own pool got 64 KiB too.
/// Below the minimum, the command runs on a thread with a stack of the minimum, and threads started
/// afterwards get it as their default; at or above it (8 MiB is Linux's default), nothing changes.
public enum StackSize {
    /// The stack jobctl is built and tested with: Linux's default limit.
    public static let minimumBytes = 8 << 20

    /// The soft stack limit in bytes; nil when unlimited or unknown.
    public static var limitBytes: Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_STACK.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
        return Int(clamping: limit.rlim_cur)
    }

    /// `body`'s answer, run on this thread when the stack limit allows `minimumBytes`, else on a thread
    /// with a stack that size; when no such thread can start, an error on standard error and exit 1.
    public static func run(_ body: @escaping @Sendable () -> Int32) -> Int32 {
        guard let limit = limitBytes, limit < minimumBytes else { return body() }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setstacksize(&attributes, minimumBytes)
        // Threads started later without a size (Foundation's, Dispatch's, Swift's pool) get it too.
        // glibc's pthread_setattr_default_np is a GNU extension Swift's Glibc module does not declare.
        typealias SetDefault = @convention(c) (UnsafePointer<pthread_attr_t>?) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setattr_default_np") {
            _ = unsafeBitCast(symbol, to: SetDefault.self)(&attributes)
        }
        let box = Box(body)
        var thread = pthread_t()
        let started = pthread_create(&thread, &attributes, { argument in
            guard let argument else { return nil }
            let box = Unmanaged<Box>.fromOpaque(argument).takeUnretainedValue()
            box.status = box.body()
            return nil
        }, Unmanaged.passUnretained(box).toOpaque())
        guard started == 0 else {
            let message = "Error: the stack limit is \(limit / 1024) KiB (`ulimit -s`, systemd's LimitSTACK=), less than the "
                + "\(minimumBytes >> 20) MiB jobctl needs, and no thread with a larger stack could start: \(String(cString: strerror(started))); "
                + "raise the limit (`ulimit -s 8192`)\n"
            _ = message.withCString { write(STDERR_FILENO, $0, strlen($0)) }
            return 1
        }
        pthread_join(thread, nil)
        return withExtendedLifetime(box) { box.status }
    }

    private final class Box: @unchecked Sendable {
        let body: @Sendable () -> Int32
        var status: Int32 = 1
        init(_ body: @escaping @Sendable () -> Int32) { self.body = body }
    }
}
