import Foundation

/// The kernel's bounds on a local path, which it refuses past with ENAMETOOLONG: PATH_MAX bytes for a
/// whole path (its NUL included) and NAME_MAX for each name in it.
///
/// Every local path a job gets is held to them when it is submitted, rather than by the worker: a path
/// written in a manifest, a folder's with the object's name added, each of a prefix's objects under its
/// folder, and a `file://` reference (a file, or a `file:///absolute/path`).
public enum LocalPathBounds {
    /// Why the kernel would refuse the absolute `path` — as long as PATH_MAX or longer, or a name
    /// longer than NAME_MAX — as a phrase after the path ("is … long …", "has a name of …"); nil when
    /// it fits.
    public static func problem(_ path: String) -> String? {
        if path.utf8.count >= Int(PATH_MAX) {
            return "is \(path.utf8.count) bytes long as an absolute path; Linux takes paths of at most \(Int(PATH_MAX) - 1) bytes (PATH_MAX)"
        }
        if let long = SlashSeparatedPath.parts(of: path).first(where: { $0.utf8.count > Int(NAME_MAX) }) {
            return "has a name of \(long.utf8.count) bytes ('\(long.prefix(40))...'); file names are at most \(Int(NAME_MAX)) bytes"
        }
        return nil
    }

    /// `path` for a message, its middle left out when it is longer than `limit` characters (a path near
    /// PATH_MAX is 4,000 of them): its start and its end, which say where it is and what it is.
    public static func shortened(_ path: String, limit: Int = 160) -> String {
        let scalars = path.unicodeScalars
        guard scalars.count > limit else { return path }
        let head = limit / 2, tail = limit * 3 / 8
        var shown = String.UnicodeScalarView(scalars.prefix(head))
        shown.append(contentsOf: "[…\(scalars.count - head - tail) characters…]".unicodeScalars)
        shown.append(contentsOf: scalars.suffix(tail))
        return String(shown)
    }
}
