import Foundation

extension String {
    /// Whether both strings hold exactly the same UTF-8 bytes. Not `==`, which calls canonically
    /// equivalent text equal: the store keys jobs and compares stored text by their bytes.
    ///
    /// `utf8.elementsEqual` walks both views an index at a time (~2,000 instructions for a 26-byte job
    /// id), and the store's write path compares a job's id three or four times per event; strings
    /// with contiguous UTF-8 (every native string) are compared with one `memcmp` instead.
    public func hasSameUTF8(as other: String) -> Bool {
        let compared = utf8.withContiguousStorageIfAvailable { mine in
            other.utf8.withContiguousStorageIfAvailable { theirs -> Bool in
                guard mine.count == theirs.count else { return false }
                guard let a = mine.baseAddress, let b = theirs.baseAddress else { return true }  // both empty
                return memcmp(a, b, mine.count) == 0
            }
        }
        if let compared, let result = compared { return result }
        return utf8.elementsEqual(other.utf8)
    }
}

/// A string as a dictionary key compared and hashed by its UTF-8 bytes: the key the store uses for job
/// ids, which are equal only byte for byte (see `hasSameUTF8`).
///
/// Why not `[UInt8]`: an array hashes one element at a time (a `Hasher` call per byte, ~650
/// instructions for a 26-byte job id, ~9 % of a PostgreSQL worker's instructions with a group's few
/// dozen lookups a job) and is a copy of the bytes; this hashes the string's contiguous bytes in one
/// call and keeps the string.
public struct UTF8Key: Hashable, Sendable {
    public let string: String

    public init(_ string: String) {
        self.string = string
    }

    public static func == (lhs: UTF8Key, rhs: UTF8Key) -> Bool {
        lhs.string.hasSameUTF8(as: rhs.string)
    }

    public func hash(into hasher: inout Hasher) {
        let hashed: Void? = string.utf8.withContiguousStorageIfAvailable { bytes in
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        }
        if hashed == nil {
            // A string without contiguous UTF-8 (bridged text): the same bytes, hashed the same way.
            Array(string.utf8).withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }
}
