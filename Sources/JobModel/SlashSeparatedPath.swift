/// The `/`-separated parts of a path or object name, as `split(separator: "/")` returns them, cut on
/// bytes when the text is ASCII.
///
/// `String.split(separator:)` compares characters: it walks grapheme clusters, ~100 instructions a byte.
/// A worker splits every job's object path several times (the reference, its name, its folder, its
/// content type), which made those splits a few per cent of a small-object drain. In ASCII text every
/// byte is one character except `\r\n`, and neither of those is `/`, so cutting at the `/` bytes gives
/// exactly the same parts. Other text takes `split` itself.
public enum SlashSeparatedPath {
    /// The parts of `text` between `/`s; empty parts are left out unless `keepingEmpty`.
    public static func parts(of text: String, keepingEmpty: Bool = false) -> [Substring] {
        let utf8 = text.utf8
        // One look at every byte: whether the text is ASCII, and how many parts it can have at most
        // (the array is made that big once instead of growing a part at a time).
        var slashes = 0
        for byte in utf8 {
            if byte >= 0x80 { return text.split(separator: "/", omittingEmptySubsequences: !keepingEmpty) }
            if byte == UInt8(ascii: "/") { slashes += 1 }
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

    /// The last non-empty part of `text` (`split(separator: "/").last`), or nil when there is none.
    ///
    /// An ASCII text is walked as a buffer of bytes (offsets, not `String.Index` steps: a content type
    /// is inferred this way for every upload, and the index walk was most of it).
    public static func lastPart(of text: String) -> Substring? {
        var text = text
        let found = text.withUTF8 { (bytes) -> (start: Int, end: Int)?? in
            guard !bytes.contains(where: { $0 >= 0x80 }) else { return .some(nil) }
            var end = bytes.count
            while end > 0, bytes[end - 1] == UInt8(ascii: "/") { end -= 1 }
            guard end > 0 else { return nil }
            var start = end
            while start > 0, bytes[start - 1] != UInt8(ascii: "/") { start -= 1 }
            return (start, end)
        }
        guard let found else { return nil }
        guard let (start, end) = found else { return text.split(separator: "/").last }
        let utf8 = text.utf8
        return text[utf8.index(utf8.startIndex, offsetBy: start)..<utf8.index(utf8.startIndex, offsetBy: end)]
    }

    /// Everything before the last `/` ("/" for top-level paths, "." for bare names).
    public static func directory(of text: String) -> String {
        let found = text.utf8.allSatisfy({ $0 < 0x80 }) ? text.utf8.lastIndex(of: UInt8(ascii: "/")) : text.lastIndex(of: "/")
        guard let slash = found else { return "." }
        let parent = String(text[..<slash])
        return parent.isEmpty ? "/" : parent
    }
}
