import Foundation

/// Whether a path names anything, for the files jobctl reads only when they are there (the default
/// configuration files, gcloud's application-default credentials) and the paths a setting names.
///
/// Only "no such entry" (ENOENT, or ENOTDIR: a component on the way is a file) means absent. Every other
/// failure to look — a folder on the way this user may not search (EACCES), a loop of links, a name too
/// long, an I/O error — says nothing about whether the file is there: taken for absent, a configuration
/// in a folder the user could not enter was silently not read (and `submit` made a stray database in the
/// current folder), and an unreadable credentials file sent the worker to the metadata server.
public enum PathLookup {
    /// A failure to look that is not "no such entry": the path and why, for a message that names both.
    public struct Failure: Error, Sendable, Equatable {
        public let path: String
        /// The `errno` of the failed `stat`/`lstat`.
        public let code: Int32

        public init(path: String, code: Int32) {
            self.path = path
            self.code = code
        }

        /// `strerror`'s words, with what EACCES means here: a folder on the path this user may not search
        /// (the entry itself needs no permission to be looked at).
        public var reason: String {
            let words = String(cString: strerror(code))
            guard code == EACCES else { return words }
            return "\(words): a folder on its path may not be searched by this user, \(SystemUser.described(geteuid()))"
        }
    }

    /// The `stat` of what `path` names — of a last symbolic link itself unless `followingLinks` — or nil
    /// when nothing is there (ENOENT, ENOTDIR). Throws `Failure` for any other error.
    public static func entry(at path: String, followingLinks: Bool = false) throws(Failure) -> stat? {
        var info = stat()
        if (followingLinks ? stat(path, &info) : lstat(path, &info)) == 0 { return info }
        let code = errno
        if code == ENOENT || code == ENOTDIR { return nil }
        throw Failure(path: path, code: code)
    }
}
