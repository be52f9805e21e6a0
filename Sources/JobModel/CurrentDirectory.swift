import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The process's current directory, for making relative paths absolute.
///
/// Foundation's `FileManager.currentDirectoryPath` answers "" when `getcwd` fails (the directory was
/// removed while the process ran in it: `cd d; rmdir ../d`), and "" + "/" + "rel/out.txt" made a
/// manifest's relative destination `/rel/out.txt`, at the root of the file system. Here that is nil.
public enum CurrentDirectory {
    /// The absolute path of the current directory; nil when it cannot be known (removed, or a parent
    /// not searchable), with `errno` saying why.
    public static var path: String? {
        var size = Int(PATH_MAX) + 1
        while true {
            var buffer = [UInt8](repeating: 0, count: size)
            if buffer.withUnsafeMutableBufferPointer({ getcwd(UnsafeMutableRawPointer($0.baseAddress)?.assumingMemoryBound(to: CChar.self), size) }) != nil {
                // Linux answers "(unreachable)…" for a directory outside the process's root; it is no path.
                // A path that is not UTF-8 cannot be named by a String: decoded with replacement characters
                // (U+FFFD) it named another folder — a look-alike the worker then created and wrote into.
                guard let path = PathText.decoded(buffer.prefix { $0 != 0 }) else {
                    errno = EILSEQ
                    return nil
                }
                return path.hasPrefix("/") ? path : nil
            }
            guard errno == ERANGE, size < 1 << 20 else { return nil }
            size *= 2
        }
    }

    /// `relative` made absolute from the current directory now, its folder named by its real path (the
    /// `..` and links in it resolved: `/run/../x` stops meaning `x` once `/run` is moved), so that it names
    /// the same file for as long as the process runs, wherever its current directory goes; its last
    /// component is kept as given (a link there is still followed when it is used). An absolute path is
    /// returned as it is; a relative one as it is when the current directory cannot be read.
    public static func anchored(_ relative: String) -> String {
        guard !relative.hasPrefix("/"), !relative.isEmpty else { return relative }
        let trimmed = relative.hasSuffix("/") && relative.count > 1 ? String(relative.dropLast()) : relative
        let slash = trimmed.lastIndex(of: "/")
        let folder = slash.map { String(trimmed[..<$0]) } ?? "."
        let last = slash.map { String(trimmed[trimmed.index(after: $0)...]) } ?? trimmed
        if last != "..", last != ".", let real = realpath(folder, nil) {
            defer { free(real) }
            if let base = PathText.decoded(cString: real) {
                return base == "/" ? "/" + last : base + "/" + last
            }
        }
        guard let current = path else { return relative }
        return current.hasSuffix("/") ? current + relative : current + "/" + relative
    }

    /// What a relative path cannot start from when `path` is nil, and what to do.
    public static var missingMessage: String {
        if errno == EILSEQ {
            return "the current directory's path is not valid UTF-8, and jobctl names files by UTF-8 paths: "
                + "cd into a folder whose path is, or write absolute paths"
        }
        return "the current directory cannot be read (\(String(cString: strerror(errno)))): was it removed while jobctl ran in it? "
            + "cd into an existing folder, or write absolute paths"
    }
}

/// Paths the system gives back (`getcwd`, `realpath`, `readlink`) as Strings, or nil when their bytes
/// are not UTF-8: jobctl names files by UTF-8 paths, and decoding with replacement characters (U+FFFD)
/// names another file, which it would then create, write or upload.
public enum PathText {
    /// `bytes` as a String, or nil when they are not valid UTF-8.
    public static func decoded(_ bytes: some Collection<UInt8>) -> String? {
        let text = String(decoding: bytes, as: UTF8.self)
        return text.utf8.elementsEqual(bytes) ? text : nil
    }

    /// A NUL-terminated C string as a String, or nil when it is not valid UTF-8.
    public static func decoded(cString: UnsafePointer<CChar>) -> String? {
        String(validatingCString: cString)
    }

    /// `bytes` for a message: the UTF-8 in them as text, each byte that is not UTF-8 as `\xFF`. Decoded
    /// with U+FFFD instead, `bad\xFF.txt` read as the name of another file, `bad\u{FFFD}.txt`.
    public static func shown(_ bytes: some Collection<UInt8>) -> String {
        let all = Array(bytes)
        var text = ""
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = all.makeIterator()
        // The parser reads ahead, but what it answers covers the bytes in order: the lengths add up to
        // the position of the next answer.
        var position = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded):
                text.unicodeScalars.append(Unicode.UTF8.decode(encoded))
                position += encoded.count
            case .error(let length):
                for byte in all[position..<position + length] {
                    text += "\\x" + String(byte, radix: 16, uppercase: true)
                }
                position += length
            case .emptyInput:
                return text
            }
        }
    }
}
