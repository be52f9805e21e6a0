/// The `/`-separated parts of a path or object name, cut at its `/` bytes, as the filesystem and every
/// storage server cut it.
///
/// Not `split(separator: "/")`, which compares characters: a combining mark after a `/` joins it into
/// another Character (`"/\u{301}"`), so `"a/../\u{301}x"` split that way is `["a", "../\u{301}x"]` and
/// hides its `..` from every check, while the kernel walks `a`, `..`, `\u{301}x`. The byte `/` (0x2F)
/// never occurs inside another character's UTF-8, so cutting at it gives the parts every reader of the
/// name sees. (Character-wise it was also ~100 instructions a byte; a worker splits every job's path
/// several times.)
public enum SlashSeparatedPath {
    /// The parts of `text` between `/`s; empty parts are left out unless `keepingEmpty`.
    public static func parts(of text: String, keepingEmpty: Bool = false) -> [Substring] {
        let utf8 = text.utf8
        // One look at every byte: whether the text is ASCII, and how many parts it can have at most
        // (the array is made that big once instead of growing a part at a time).
        var slashes = 0
        var ascii = true
        for byte in utf8 {
            if byte >= 0x80 { ascii = false }
            if byte == UInt8(ascii: "/") { slashes += 1 }
        }
        if !ascii {
            // Sliced on scalars: a part may start with a combining mark, which is no Character boundary.
            return text.unicodeScalars.split(separator: "/", maxSplits: .max, omittingEmptySubsequences: !keepingEmpty)
                .map { Substring($0) }
        }
        var parts: [Substring] = []
        parts.reserveCapacity(slashes + 1)
        var start = utf8.startIndex
        var index = start
        while index != utf8.endIndex {
            if utf8[index] == UInt8(ascii: "/") {
                if keepingEmpty || start != index { parts.append(text[start..<index]) }
                start = utf8.index(after: index)
            }
            index = utf8.index(after: index)
        }
        if keepingEmpty || start != utf8.endIndex { parts.append(text[start..<utf8.endIndex]) }
        return parts
    }

    /// The last non-empty part of `text` (`parts(of: text).last`), or nil when there is none.
    ///
    /// The text is walked as a buffer of bytes (offsets, not `String.Index` steps: a content type
    /// is inferred this way for every upload, and the index walk was most of it).
    public static func lastPart(of text: String) -> Substring? {
        var text = text
        let found = text.withUTF8 { (bytes) -> (start: Int, end: Int)? in
            var end = bytes.count
            while end > 0, bytes[end - 1] == UInt8(ascii: "/") { end -= 1 }
            guard end > 0 else { return nil }
            var start = end
            while start > 0, bytes[start - 1] != UInt8(ascii: "/") { start -= 1 }
            return (start, end)
        }
        guard let (start, end) = found else { return nil }
        let utf8 = text.utf8
        // Offsets next to a `/` byte are scalar boundaries (not always Character ones): sliced on scalars.
        return Substring(text.unicodeScalars[utf8.index(utf8.startIndex, offsetBy: start)..<utf8.index(utf8.startIndex, offsetBy: end)])
    }

    /// Everything before the last `/` ("/" for top-level paths, "." for bare names).
    public static func directory(of text: String) -> String {
        guard let slash = text.utf8.lastIndex(of: UInt8(ascii: "/")) else { return "." }
        let parent = String(text.unicodeScalars[..<slash])
        return parent.isEmpty ? "/" : parent
    }
}
