#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Names the calling thread in the operating system: what `/proc/PID/task/*/comm`, `top -H`, `perf` and
/// debuggers show, and what Foundation's `Thread.current.name` reads back on Linux.
public enum ThreadName {
    /// The longest name Linux keeps, in bytes.
    public static let limit = 15

    /// Sets the calling thread's name, cut to `limit` bytes on a character boundary. Every thread jobctl
    /// starts names itself so, first thing. Not through `Thread`'s `name`: Foundation applies it to the
    /// thread `start()` recorded, which a new thread can reach before `start()` has recorded it (the name
    /// was then lost and the thread kept its creator's: seen once in the full suite, a file-I/O thread
    /// named like Dispatch's); set before `start()` it is not applied at all, and a name over 15 bytes is
    /// refused whole. `/proc/thread-self/comm` is the calling thread's own.
    public static func setCurrent(_ name: String) {
        #if os(Linux)
        let bytes = Array(prefix(name, bytes: limit).utf8)
        let descriptor = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }  // no /proc: the thread keeps its name, nothing else depends on it
        _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
        #endif
    }

    /// The longest start of `name` of at most `count` UTF-8 bytes that ends between whole UTF-8 sequences.
    public static func prefix(_ name: String, bytes count: Int) -> String {
        var bytes = Array(name.utf8.prefix(max(0, count)))
        while !bytes.isEmpty, String(validating: bytes, as: UTF8.self) == nil { bytes.removeLast() }
        return String(decoding: bytes, as: UTF8.self)
    }
}
