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
                let path = String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self)
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
            let base = String(cString: real)
            return base == "/" ? "/" + last : base + "/" + last
        }
        guard let current = path else { return relative }
        return current.hasSuffix("/") ? current + relative : current + "/" + relative
    }

    /// What a relative path cannot start from when `path` is nil, and what to do.
    public static var missingMessage: String {
        "the current directory cannot be read (\(String(cString: strerror(errno)))): was it removed while jobctl ran in it? "
            + "cd into an existing folder, or write absolute paths"
    }
}
