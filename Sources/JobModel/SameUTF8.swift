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
