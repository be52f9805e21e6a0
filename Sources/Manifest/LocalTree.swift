import Foundation
import JobModel

/// The regular files under a local folder, found without following symbolic links.
///
/// A link inside the folder is not followed — neither to a file nor to a folder — so an expansion never
/// reaches outside the folder it names (rsync without `-L` does the same); it is skipped and named in a
/// note. FIFOs, sockets and devices are skipped the same way, and so are names that are not UTF-8
/// (`DirectoryEntries`: no String, so no job, can name them). The folder itself may be reached through
/// a link: the user named it.
enum LocalTree {
    /// What a walk left out, and why.
    enum Skip: Equatable, CaseIterable {
        case symbolicLink, device, socket, fifo, notRegular, undecodableName

        /// As it is said of one entry: "a symbolic link".
        var what: String {
            switch self {
            case .symbolicLink: "a symbolic link"
            case .device: "a device"
            case .socket: "a socket"
            case .fifo: "a FIFO"
            case .notRegular: "not a regular file (a FIFO, or gone while listed)"
            case .undecodableName: "a name that is not valid UTF-8, which no job can name: rename it"
            }
        }

        /// `count` of them: "2 symbolic links".
        func counted(_ count: Int) -> String {
            let one = count == 1
            let noun = switch self {
            case .symbolicLink: one ? "symbolic link" : "symbolic links"
            case .device: one ? "device" : "devices"
            case .socket: one ? "socket" : "sockets"
            case .fifo: one ? "FIFO" : "FIFOs"
            case .notRegular: one ? "entry that is not a regular file" : "entries that are not regular files"
            case .undecodableName: one ? "name that is not valid UTF-8" : "names that are not valid UTF-8"
            }
            return "\(count) \(noun)"
        }
    }

    /// What a walk found.
    struct Listing: Equatable {
        /// Regular files, relative to the root, `/`-separated, in byte order.
        var files: [String] = []
        /// Entries left out, relative to the root (a name that is not UTF-8 shown with `\xFF` for its
        /// bytes: `PathText.shown`), with what they are.
        var skipped: [(path: String, kind: Skip)] = []

        static func == (lhs: Listing, rhs: Listing) -> Bool {
            lhs.files == rhs.files && lhs.skipped.map(\.path) == rhs.skipped.map(\.path)
        }

        /// What was left out, for a note after "skipped": the first entry and what it is, then how many
        /// more of each kind ("'a\xFF' (a name that is not valid UTF-8, …) and 3 more entries: 2 symbolic
        /// links, 1 FIFO"), then what to do; nil when nothing was.
        var skippedText: String? {
            guard let first = skipped.first else { return nil }
            var text = "'\(first.path)' (\(first.kind.what))"
            if skipped.count > 1 {
                let rest = skipped.dropFirst()
                let counts = Skip.allCases.compactMap { kind -> String? in
                    let count = rest.count { $0.kind == kind }
                    return count == 0 ? nil : kind.counted(count)
                }
                text += " and \(rest.count) more \(rest.count == 1 ? "entry" : "entries"): " + counts.joined(separator: ", ")
            }
            var advice: [String] = []
            if skipped.contains(where: { $0.kind == .symbolicLink }) {
                advice.append("links are not followed out of the folder: name their targets in jobs of their own")
            }
            if skipped.contains(where: { $0.kind == .undecodableName }) {
                advice.append("a file whose name is not UTF-8 is uploaded once it is renamed")
            }
            return advice.isEmpty ? text : text + "; " + advice.joined(separator: "; ")
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
            let entries: DirectoryEntries
            do {
                entries = try DirectoryEntries.read(path: folder)
            } catch {
                throw .unreadable(relative, error.reason)
            }
            // A name that is not UTF-8 reaches no file by a String, and no job could name it: skipped, and
            // said so. (Read with U+FFFD for its bytes, it was "a FIFO, or gone"; beside a file named that
            // way, that file was taken a second time, and a folder's files with it.)
            for bytes in entries.undecodable {
                let name = PathText.shown(bytes)
                listing.skipped.append((relative.isEmpty ? name : relative + "/" + name, .undecodableName))
            }
            for name in entries.names {
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
                    listing.skipped.append((path, .symbolicLink))
                case .typeCharacterSpecial?, .typeBlockSpecial?:
                    listing.skipped.append((path, .device))
                case .typeSocket?:
                    listing.skipped.append((path, .socket))
                default:
                    listing.skipped.append((path, .notRegular))
                }
            }
        }
        listing.files.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        listing.skipped.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }
        return listing
    }
}
