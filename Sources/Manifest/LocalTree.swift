import Foundation

/// The regular files under a local folder, found without following symbolic links.
///
/// A link inside the folder is not followed — neither to a file nor to a folder — so an expansion never
/// reaches outside the folder it names (rsync without `-L` does the same); it is skipped and named in a
/// note. FIFOs, sockets and devices are skipped the same way. The folder itself may be reached through
/// a link: the user named it.
enum LocalTree {
    /// What a walk found.
    struct Listing: Equatable {
        /// Regular files, relative to the root, `/`-separated, in byte order.
        var files: [String] = []
        /// Entries left out, relative to the root, with what they are ("a symbolic link", "a FIFO").
        var skipped: [(path: String, what: String)] = []

        static func == (lhs: Listing, rhs: Listing) -> Bool {
            lhs.files == rhs.files && lhs.skipped.map(\.path) == rhs.skipped.map(\.path)
        }
    }

    /// Why a walk stopped.
    enum Failure: Error, Equatable {
        /// A folder could not be read (the path relative to the root, "" for the root; the reason).
        case unreadable(String, String)
        /// More than `limit` files.
        case tooMany(Int)
        /// Folders nested deeper than `maximumDepth`.
        case tooDeep(String)
    }

    /// Folders deeper than this are refused (without links there are no loops; this bounds the walk).
    static let maximumDepth = 256

    /// Walks `root` (absolute). `accept` sees each regular file's relative path; only accepted files are
    /// kept and counted against `limit`.
    static func walk(_ root: String, limit: Int, accept: (String) -> Bool) throws(Failure) -> Listing {
        var listing = Listing()
        var pending: [(relative: String, depth: Int)] = [("", 0)]
        let files = FileManager.default
        while let (relative, depth) = pending.popLast() {
            let folder = relative.isEmpty ? root : root + "/" + relative
            let names: [String]
            do {
                names = try files.contentsOfDirectory(atPath: folder)
            } catch {
                throw .unreadable(relative, Self.reason(error))
            }
            for name in names {
                let path = relative.isEmpty ? name : relative + "/" + name
                // attributesOfItem reads the entry itself (lstat): a link is seen as a link.
                let type = (try? files.attributesOfItem(atPath: root + "/" + path))?[.type] as? FileAttributeType
                switch type {
                case .typeRegular?:
                    guard accept(path) else { continue }
                    listing.files.append(path)
                    if listing.files.count > limit { throw .tooMany(limit) }
                case .typeDirectory?:
                    guard depth + 1 <= maximumDepth else { throw .tooDeep(path) }
                    pending.append((path, depth + 1))
                case .typeSymbolicLink?:
                    listing.skipped.append((path, "a symbolic link"))
                case .typeCharacterSpecial?, .typeBlockSpecial?:
                    listing.skipped.append((path, "a device"))
                case .typeSocket?:
                    listing.skipped.append((path, "a socket"))
                case nil where name.unicodeScalars.contains("\u{FFFD}"):
                    // The folder's listing decodes names as UTF-8, with U+FFFD for bytes that are not: such
                    // a name reaches no file, and no job could name it (it was called a FIFO, or gone).
                    listing.skipped.append((path, "a name that is not valid UTF-8, which no job can name: rename it"))
                default:
                    listing.skipped.append((path, "not a regular file (a FIFO, or gone while listed)"))
                }
            }
        }
        listing.files.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        listing.skipped.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
        return listing
    }

    private static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code))).lowercased()
        }
        return nsError.localizedDescription
    }
}
