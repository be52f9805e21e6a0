import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The C library's `write`, out of reach of `StandardStreams.write`'s own name.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    write(descriptor, bytes, count)
}

/// The process's standard input, output and error, written without Foundation's `FileHandle`.
///
/// `FileHandle.write(_:)` stops the process (a trap: "Illegal instruction") when the write fails — a
/// closed standard error, a pipe whose reader has gone — so a worker started with `2>&-` died at its
/// first log line. Here a write that fails is reported to the caller, who may ignore it: the log is
/// not the record, the event log is.
public enum StandardStreams {
    /// Opens `/dev/null` on each of descriptors 0, 1 and 2 that is closed, before anything else opens a
    /// file: otherwise the next file or socket the process opens gets that number, and whatever the
    /// process writes to its standard output or error lands in it (a log line inside a downloaded file,
    /// an HTTP request). Returns the descriptors it opened.
    @discardableResult
    public static func ensureOpen() -> [Int32] {
        var opened: [Int32] = []
        for descriptor in Int32(0)...2 where fcntl(descriptor, F_GETFD) == -1 && errno == EBADF {
            // `open` returns the lowest free number: this one, as those below it are open.
            let null = open("/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY)
            guard null >= 0 else { continue }
            if null != descriptor {
                // Cannot happen when the lower ones are open; never keep a stray descriptor.
                _ = dup2(null, descriptor)
                close(null)
            }
            opened.append(descriptor)
        }
        return opened
    }

    /// Writes all of `bytes` to `descriptor`, again after an interrupted or partial write. False when a
    /// write failed (the rest is not written): a closed descriptor, a broken pipe (with SIGPIPE ignored;
    /// otherwise that signal ends the process first, as for any command-line filter), a full disk.
    @discardableResult
    public static func write(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32) -> Bool {
        guard var next = bytes.baseAddress else { return true }
        var remaining = bytes.count
        while remaining > 0 {
            let written = systemWrite(descriptor, next, remaining)
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            remaining -= written
            next += written
        }
        return true
    }

    /// Writes `text` as UTF-8 to `descriptor`; see `write(_:to:)`.
    @discardableResult
    public static func write(_ text: String, to descriptor: Int32) -> Bool {
        var text = text
        return text.withUTF8 { write(UnsafeRawBufferPointer($0), to: descriptor) }
    }

    /// Writes `bytes` to `descriptor`; see `write(_:to:)`.
    @discardableResult
    public static func write(_ bytes: [UInt8], to descriptor: Int32) -> Bool {
        bytes.withUnsafeBytes { write($0, to: descriptor) }
    }

    /// Writes `data` to `descriptor`; see `write(_:to:)`.
    @discardableResult
    public static func write(_ data: Data, to descriptor: Int32) -> Bool {
        data.withUnsafeBytes { write($0, to: descriptor) }
    }
}
