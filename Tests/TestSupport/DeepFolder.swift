import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A chain of folders whose path passes PATH_MAX (4,096 bytes), made and removed one folder at a time
/// from its parent's descriptor (`mkdirat`, `openat`, `unlinkat`): no call is given the whole path,
/// which the kernel refuses (ENAMETOOLONG).
public struct DeepFolder: Sendable {
    /// The folder the chain starts in.
    public let parent: String
    /// The chain's folder names, outermost first.
    public let names: [String]
    /// The file made in the innermost folder.
    public let file: String

    /// The chain's path relative to `parent`, the file's last.
    public var relativeFile: String { (names + [file]).joined(separator: "/") }

    /// Makes `levels` folders of 200-byte names ("00ddd…d", "01ddd…d", …) in `parent`, and the file
    /// `file` holding `text` in the innermost.
    public init(in parent: String, levels: Int = 22, file: String = "deep.txt", text: String = "deep\n") throws {
        self.parent = parent
        self.names = (0..<levels).map { String(format: "%02d", $0) + String(repeating: "d", count: 198) }
        self.file = file
        var current = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard current >= 0 else { throw POSIXError(.ENOENT) }
        defer { close(current) }
        for name in names {
            guard mkdirat(current, name, 0o755) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            let next = openat(current, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard next >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            close(current)
            current = next
        }
        let fd = openat(current, file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        _ = text.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, text.utf8.count) }
        close(fd)
    }

    /// Removes the file and the chain (what else was put in it stays, and keeps its folders).
    public func remove() {
        var descriptors = [open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)]
        for name in names where descriptors.last.map({ $0 >= 0 }) == true {
            descriptors.append(openat(descriptors.last!, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC))
        }
        if let innermost = descriptors.last, innermost >= 0, descriptors.count == names.count + 1 {
            _ = unlinkat(innermost, file, 0)
        }
        for (index, name) in names.enumerated().reversed() where index < descriptors.count && descriptors[index] >= 0 {
            _ = unlinkat(descriptors[index], name, AT_REMOVEDIR)
        }
        for descriptor in descriptors where descriptor >= 0 { close(descriptor) }
    }
}
