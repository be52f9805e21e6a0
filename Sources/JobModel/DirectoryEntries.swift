#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The names in a directory, read with `readdir(3)` and decoded strictly: a name that is not UTF-8 is
/// kept apart, as its bytes, never turned into a String.
///
/// `FileManager.contentsOfDirectory` decodes names with U+FFFD for the bytes that are not UTF-8, and a
/// walk that then looked the decoded name up (`lstat`) reached another file: with `bad\u{FFFD}.txt`
/// beside `bad\xFF.txt`, a folder upload planned the look-alike twice and dropped the other without a
/// word (a folder `d\xFF/` likewise, with everything in it). Every walk of a folder reads it here.
public struct DirectoryEntries: Sendable, Equatable {
    /// The names that are UTF-8, in the order the directory gave them (`.` and `..` left out).
    public var names: [String] = []
    /// The names that are not, as their bytes: no String names them, so no path built from one reaches them.
    public var undecodable: [[UInt8]] = []

    public init(names: [String] = [], undecodable: [[UInt8]] = []) {
        self.names = names
        self.undecodable = undecodable
    }

    /// Why a directory could not be read: `errno` of the call that failed.
    public struct Failure: Error, Sendable, Equatable {
        public var code: Int32
        public init(code: Int32) { self.code = code }
        /// The system's words for `code`, in lower case ("permission denied").
        public var reason: String { String(cString: strerror(code)).lowercased() }
    }

    /// The entries of the directory at `path` (a link to one followed).
    public static func read(path: String) throws(Failure) -> DirectoryEntries {
        let descriptor = path.withCString { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard descriptor >= 0 else { throw Failure(code: errno) }
        defer { close(descriptor) }
        return try read(descriptor: descriptor)
    }

    /// The entries of the directory open at `descriptor`, from its start; the descriptor stays open (it
    /// is read through a duplicate, whose offset it shares).
    public static func read(descriptor: Int32) throws(Failure) -> DirectoryEntries {
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { throw Failure(code: errno) }
        guard let stream = fdopendir(copy) else {
            let code = errno
            close(copy)
            throw Failure(code: code)
        }
        defer { closedir(stream) }
        rewinddir(stream)
        var entries = DirectoryEntries()
        while true {
            // readdir answers nil at the end and on an error; only an error sets errno.
            errno = 0
            guard let entry = readdir(stream) else {
                if errno != 0 { throw Failure(code: errno) }
                return entries
            }
            let bytes = withUnsafeBytes(of: &entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if bytes == [0x2E] || bytes == [0x2E, 0x2E] { continue }
            if let name = PathText.decoded(bytes) {
                entries.names.append(name)
            } else {
                entries.undecodable.append(bytes)
            }
        }
    }
}
