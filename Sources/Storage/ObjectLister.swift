import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// Lists the objects under a prefix: what `submit` expands a `download-file` job from a prefix into.
///
/// - `gs://` (and Firebase references): the GCS JSON API's object list with `prefix`, following
///   `nextPageToken` page by page (`maxResults` per page).
/// - `file://`: a walk of the bucket folder below the prefix that does not follow symbolic links (the
///   local backend refuses links inside a bucket too) and leaves out jobctl's own hidden files (metadata
///   sidecars, upload sessions, partial downloads).
///
/// Names are full object names, in no particular order; the caller sorts and filters.
public struct ObjectLister: Sendable {
    public let configuration: StorageConfiguration
    /// Objects asked for per page (`maxResults`); GCS returns at most 1000.
    public let pageSize: Int

    /// The page sizes accepted.
    public static let pageSizeRange = 1...1_000

    public init(configuration: StorageConfiguration, pageSize: Int = 1_000) {
        self.configuration = configuration
        self.pageSize = min(max(pageSize, Self.pageSizeRange.lowerBound), Self.pageSizeRange.upperBound)
    }

    /// The full names of the objects whose names start with the prefix `prefix` names (its path and a
    /// `/`; every object for a bucket root), at most `limit + 1` of them (so a caller can tell "more than
    /// the limit").
    public func objectNames(under prefix: StorageReference, limit: Int) async throws(StorageError) -> [String] {
        try await listing(under: prefix, limit: limit).names
    }

    /// What a listing found: the object names (as `objectNames`), and the entries of a `file://` bucket
    /// under the prefix that are no objects and were left out (links, FIFOs, sockets, devices), each with
    /// its path relative to the bucket and what it is.
    public struct Listing: Sendable {
        public var names: [String] = []
        public var skipped: [(path: String, what: String)] = []
        /// The `gs://` objects (among `names`) whose names end in `/` and that hold data, with their sizes:
        /// not the zero-byte "folder" placeholders consoles make, which a prefix download skips without a
        /// word, but objects no local file can be named after, which it skips saying so.
        public var slashNamed: [(name: String, size: Int64)] = []
    }

    /// `objectNames`, with what a `file://` walk left out.
    public func listing(under prefix: StorageReference, limit: Int) async throws(StorageError) -> Listing {
        switch prefix.scheme {
        case .gs:
            return try await GCSBackend(configuration: configuration).objectListing(under: prefix, pageSize: pageSize, limit: limit)
        case .file:
            return try LocalBackend(configuration: configuration).listing(under: prefix, limit: limit)
        case .http, .https:
            throw StorageError(.invalidArgument, "'\(prefix)' is a plain \(prefix.scheme.rawValue) URL, which cannot be listed; "
                               + "name each file in a job of its own")
        }
    }
}

extension GCSBackend {
    /// Lists `prefix` page by page (see `ObjectLister`).
    func objectListing(under prefix: StorageReference, pageSize: Int, limit: Int) async throws(StorageError) -> ObjectLister.Listing {
        let path = prefix.isRoot ? "" : prefix.fullPath + "/"
        var names: [String] = []
        var slashNamed: [(name: String, size: Int64)] = []
        var pageToken: String?
        var pages = 0
        var tokensSeen: Set<String> = []
        repeat {
            var url = "\(endpoint)/storage/v1/b/\(StorageReference.percentEncode(prefix.bucket, keepSlash: false))/o?maxResults=\(pageSize)"
            if !path.isEmpty { url += "&prefix=" + StorageReference.percentEncode(path, keepSlash: false) }
            if let pageToken { url += "&pageToken=" + StorageReference.percentEncode(pageToken, keepSlash: false) }
            let response: HTTPResponse
            do {
                response = try await send(HTTPRequest(method: "GET", url: url), control: nil)
            } catch {
                switch error {
                case .stopped: throw StorageError(.cancelled, "listing \(prefix) was interrupted")
                case .failed(let failure): throw failure
                }
            }
            guard response.isSuccess else {
                var error = httpError(response, what: "the object list of \(prefix)")
                if response.status == 404 {
                    error.code = .bucketNotFound
                    error.message = "the bucket '\(prefix.bucket)' does not exist; check the reference's bucket name"
                }
                throw error
            }
            guard let json = response.json else {
                throw StorageError(.unknown, "the server's object list for \(prefix) is not JSON", httpStatus: response.status,
                                   url: redactedURL(response.url))
            }
            for item in json["items"] as? [[String: Any]] ?? [] {
                guard let name = item["name"] as? String else { continue }
                names.append(name)
                // The JSON API gives the size as a decimal string.
                if name.utf8.last == UInt8(ascii: "/"),
                   let size = (item["size"] as? String).flatMap({ Int64($0) }) ?? (item["size"] as? NSNumber)?.int64Value, size > 0 {
                    slashNamed.append((name, size))
                }
            }
            pageToken = (json["nextPageToken"] as? String).flatMap { $0.isEmpty ? nil : $0 }
            pages += 1
            // A token given before leads back to pages already read: followed, the listing went round for
            // 100,000 pages (hours at a real server's pace).
            if let pageToken, !tokensSeen.insert(pageToken).inserted {
                throw StorageError(.unknown, "the server's object list of \(prefix) gave a page token it had given before (after \(pages) "
                                       + "pages): its pages go round, so the listing was stopped", url: redactedURL(response.url),
                                   retryable: true)
            }
            // A server that keeps answering with a token and no end is not followed for ever.
            if pages > 100_000 {
                throw StorageError(.unknown, "the object list of \(prefix) did not end after \(pages) pages")
            }
        } while pageToken != nil && names.count <= limit
        return ObjectLister.Listing(names: names, slashNamed: slashNamed)
    }
}

extension LocalBackend {
    /// A folder of a walk, open; closed when nothing below it is left to open.
    private final class OpenFolder {
        let descriptor: Int32
        init(_ descriptor: Int32) { self.descriptor = descriptor }
        deinit { Glibc.close(descriptor) }
    }

    /// Walks a `file://` prefix (see `ObjectLister`).
    ///
    /// Each folder is opened from its parent's descriptor (`openat`, `O_NOFOLLOW`) and each entry looked
    /// at from there (`fstatat`): a folder whose path reached PATH_MAX bytes could not be looked up by
    /// its path (ENAMETOOLONG), and was left out as "a FIFO, or gone while listed" with every object in
    /// it. A folder too deep for a `file://` reference to name what is in it (the bucket's name and the
    /// object's, PATH_MAX bytes or more: `StorageReference.checkLocalName`) refuses the listing, saying
    /// how long and what the limit is; so does any lookup that fails for another reason than the entry
    /// being gone.
    func listing(under prefix: StorageReference, limit: Int) throws(StorageError) -> ObjectLister.Listing {
        let root = bucketRoot(prefix.bucket)
        var isDirectory: ObjCBool = false
        if !prefix.bucket.isEmpty, !(FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory) && isDirectory.boolValue) {
            throw StorageError(.bucketNotFound, "local bucket '\(prefix.bucket)' does not exist (no directory '\(root)')")
        }
        if let reserved = HiddenName.reservedComponent(in: prefix.fullPath) {
            throw StorageError(.invalidArgument, HiddenName.reservedMessage(reserved))
        }
        let base = prefix.fullPath
        let start = base.isEmpty ? root : (root == "/" ? "" : root) + "/" + base
        let startDescriptor = start.withCString { Glibc.open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard startDescriptor >= 0 else {
            let code = errno
            // A prefix that names no folder lists nothing, as an empty prefix does on GCS.
            if code == ENOENT || code == ENOTDIR { return ObjectLister.Listing() }
            throw StorageError(.unauthorized, "the folder '\(start)' of \(prefix) cannot be read: \(Self.reason(code))")
        }
        var names: [String] = []
        var skipped: [(path: String, what: String)] = []
        let objectName = { (path: String) in base.isEmpty ? path : base + "/" + path }
        var pending: [(parent: OpenFolder, name: String, relative: String)] = []
        var next: (folder: OpenFolder, relative: String)? = (OpenFolder(startDescriptor), "")
        while names.count <= limit {
            if next == nil {
                guard let (parent, name, relative) = pending.popLast() else { break }
                let descriptor = name.withCString { openat(parent.descriptor, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                guard descriptor >= 0 else {
                    let code = errno
                    guard code == ENOENT || code == ELOOP || code == ENOTDIR else {
                        throw StorageError(.unauthorized, "the folder '\(start)/\(relative)' of \(prefix) cannot be read: \(Self.reason(code))")
                    }
                    skipped.append((objectName(relative), "removed, or replaced by a link or a file, while the bucket was listed"))
                    continue
                }
                next = (OpenFolder(descriptor), relative)
            }
            guard let (folder, relative) = next else { break }
            next = nil
            let entries: DirectoryEntries
            do {
                entries = try DirectoryEntries.read(descriptor: folder.descriptor)
            } catch {
                throw StorageError(.unauthorized, "the folder '\(start)/\(relative)' of \(prefix) cannot be read: \(error.reason)")
            }
            // A name that is not UTF-8 (a file's or a folder's): no reference can name it, and leaving it out
            // silently downloaded the prefix without it. Read with U+FFFD for its bytes, it named a file of
            // that spelling when there was one, which was then listed twice.
            if let bytes = entries.undecodable.min(by: { $0.lexicographicallyPrecedes($1) }) {
                let path = (relative.isEmpty ? "" : relative + "/") + PathText.shown(bytes)
                let more = entries.undecodable.count > 1 ? " (and \(entries.undecodable.count - 1) more beside it)" : ""
                throw StorageError(.invalidArgument, "'\(start)/\(path)'\(more) in \(prefix) has a name that is not valid UTF-8 "
                    + "(a byte that is not shown as \\xNN), which no job can name: rename it, or narrow the prefix")
            }
            for entry in entries.names where !HiddenName.isReserved(entry) {
                let path = relative.isEmpty ? entry : relative + "/" + entry
                // Read without following links: a link is neither an object nor a folder of the bucket.
                var info = stat()
                guard entry.withCString({ fstatat(folder.descriptor, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else {
                    let code = errno
                    guard code == ENOENT else {
                        throw StorageError(.unauthorized, "'\(start)/\(path)' in \(prefix) cannot be looked at: \(Self.reason(code))")
                    }
                    skipped.append((objectName(path), "removed while the bucket was listed"))
                    continue
                }
                switch info.st_mode & S_IFMT {
                case S_IFREG:
                    names.append(objectName(path))
                case S_IFDIR:
                    // Every object below would be named past the kernel's bound: said here, where the walk
                    // stops (no reference could name them, and the walk would go on as deep as they go).
                    let length = prefix.bucket.utf8.count + 1 + objectName(path).utf8.count + 2
                    if length >= Int(PATH_MAX) {
                        throw StorageError(.invalidArgument, "the folder '\(LocalPathBounds.shortened(objectName(path)))' in \(prefix) is too deep for what is in it "
                            + "to be named: a file:// reference to a file there is \(length) bytes or more as a path (with the bucket's name), "
                            + "and Linux takes paths of at most \(Int(PATH_MAX) - 1) bytes (PATH_MAX); move its files to a shorter path, "
                            + "or narrow the prefix")
                    }
                    pending.append((folder, entry, path))
                default:
                    // Said, not left out silently: a link in a bucket is never followed (its target is no object).
                    let what = switch info.st_mode & S_IFMT {
                    case S_IFLNK: "a symbolic link"
                    case S_IFSOCK: "a socket"
                    case S_IFIFO: "a FIFO"
                    case S_IFCHR, S_IFBLK: "a device"
                    default: "not a regular file"
                    }
                    skipped.append((objectName(path), what))
                }
            }
        }
        return ObjectLister.Listing(names: names, skipped: skipped)
    }

    private static func reason(_ code: Int32) -> String {
        String(cString: strerror(code)).lowercased()
    }
}
