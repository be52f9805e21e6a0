import Foundation

/// The manifest text with its lines indexed the way YAML splits them, for positions and caret rendering.
///
/// Lines are found once, by one pass over the UTF-8 bytes; a line's text is made only when an error
/// quotes it, so a large manifest without errors pays for no per-line strings. The index keeps where
/// every 64th line starts, and a line is found by walking from the one before it: an index entry per
/// line took 16 bytes a line, so a manifest of 60 MB of line breaks (within the file size limit) took
/// 1.3 GB of memory to refuse.
struct SourceText: Sendable {
    /// The text's UTF-8 bytes (what libyaml reads).
    let bytes: [UInt8]
    /// Byte offset where line `1 + 64 × i` starts (line 1 after any byte-order mark).
    private let checkpoints: [Int]
    /// How many lines the text has (an empty text has one, empty).
    let lineCount: Int
    private static let linesPerCheckpoint = 64

    init(_ text: String) {
        self.init(bytes: Array(text.utf8))
    }

    /// The text of UTF-8 `bytes` (valid UTF-8: the caller checked; invalid sequences show as U+FFFD).
    init(bytes: [UInt8]) {
        self.bytes = bytes
        var checkpoints = [bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0]
        var lines = 1
        bytes.withUnsafeBufferPointer { buffer in
            var index = 0
            while let next = Self.nextLineStart(in: buffer, from: index) {
                index = next
                if lines % Self.linesPerCheckpoint == 0 { checkpoints.append(index) }
                lines += 1
            }
        }
        self.checkpoints = checkpoints
        lineCount = lines
    }

    /// Where the line break at or after `index` is (its offset and length), or nil when none is left.
    private static func lineBreak(in buffer: UnsafeBufferPointer<UInt8>, from start: Int) -> (offset: Int, length: Int)? {
        var index = start
        while index < buffer.count {
            if let length = lineBreakLength(in: buffer, at: index) { return (index, length) }
            index += 1
        }
        return nil
    }

    /// The length of the line break at `index`, or nil when none starts there.
    /// YAML line breaks: LF, CRLF, CR, and (YAML 1.1) NEL, LS and PS.
    @inline(__always)
    private static func lineBreakLength(in buffer: UnsafeBufferPointer<UInt8>, at index: Int) -> Int? {
        let count = buffer.count
        let byte = buffer[index]
        if byte == 0x0A {
            return 1
        } else if byte == 0x0D {
            return index + 1 < count && buffer[index + 1] == 0x0A ? 2 : 1
        } else if byte == 0xC2, index + 1 < count, buffer[index + 1] == 0x85 {
            return 2
        } else if byte == 0xE2, index + 2 < count, buffer[index + 1] == 0x80, buffer[index + 2] == 0xA8 || buffer[index + 2] == 0xA9 {
            return 3
        }
        return nil
    }

    private static func nextLineStart(in buffer: UnsafeBufferPointer<UInt8>, from index: Int) -> Int? {
        lineBreak(in: buffer, from: index).map { $0.offset + $0.length }
    }

    /// The byte range of a 1-based line (without its line break), or nil past the end.
    private func lineRange(_ number: Int) -> Range<Int>? {
        guard number >= 1, number <= lineCount else { return nil }
        return bytes.withUnsafeBufferPointer { buffer in
            var start = checkpoints[(number - 1) / Self.linesPerCheckpoint]
            for _ in 0..<((number - 1) % Self.linesPerCheckpoint) {
                guard let next = Self.nextLineStart(in: buffer, from: start) else { return nil }
                start = next
            }
            let end = Self.lineBreak(in: buffer, from: start)?.offset ?? buffer.count
            return start..<max(start, end)
        }
    }

    /// The text of a 1-based line, or nil past the end.
    func line(_ number: Int) -> String? {
        lineRange(number).map { String(decoding: bytes[$0], as: UTF8.self) }
    }

    /// The longest line an error quotes, in bytes: the quote is made into scalars with a map of its
    /// redactions (12 bytes a character), so the 50 MB line of a `data:` past the limit took 600 MB to
    /// quote, for the 160 characters shown.
    static let maximumQuotedLineBytes = 1 << 20

    /// The text of a 1-based line for an error to quote under it: nil past the end and for a line longer
    /// than `maximumQuotedLineBytes` (the error then shows its position and message only).
    func quotedLine(_ number: Int) -> String? {
        guard let range = lineRange(number), range.count <= Self.maximumQuotedLineBytes else { return nil }
        return String(decoding: bytes[range], as: UTF8.self)
    }

    /// The Unicode scalar at a mark, or nil past the end of its line.
    func scalar(at mark: SourceMark) -> Unicode.Scalar? {
        guard let line = line(mark.line), mark.column >= 1 else { return nil }
        let scalars = line.unicodeScalars
        guard let index = scalars.index(scalars.startIndex, offsetBy: mark.column - 1, limitedBy: scalars.endIndex),
              index < scalars.endIndex else { return nil }
        return scalars[index]
    }

    /// Whether nothing but white space follows the mark (libyaml reports unclosed things at the very end).
    func isBlank(from mark: SourceMark) -> Bool {
        guard let first = line(mark.line) else { return true }
        let rest = first.unicodeScalars.dropFirst(max(0, mark.column - 1))
        guard rest.allSatisfy({ $0.properties.isWhitespace }) else { return false }
        guard let next = lineRange(mark.line + 1) else { return true }
        return String(decoding: bytes[next.lowerBound...], as: UTF8.self).allSatisfy(\.isWhitespace)
    }

    /// The line and column of a UTF-8 byte offset into the text (libyaml reader errors give offsets).
    func mark(atByteOffset offset: Int) -> SourceMark {
        Self.mark(atByteOffset: offset, in: bytes[...])
    }

    /// The line and column of a byte offset in possibly invalid UTF-8; columns count decoded scalars.
    static func mark(atByteOffset offset: Int, in bytes: ArraySlice<UInt8>) -> SourceMark {
        var line = 1
        var column = 1
        var index = bytes.startIndex
        let end = min(bytes.startIndex + offset, bytes.endIndex)
        while index < end {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\n") {
                line += 1
                column = 1
            } else if byte == UInt8(ascii: "\r") {
                if index + 1 < bytes.endIndex, bytes[index + 1] == UInt8(ascii: "\n") { index += 1 }
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80, !(line == 1 && column == 1 && byte == 0xEF && isBOM(bytes, at: index)) {
                column += 1
            }
            index += 1
        }
        return SourceMark(line: line, column: column)
    }

    private static func isBOM(_ bytes: ArraySlice<UInt8>, at index: Int) -> Bool {
        bytes[index...].starts(with: [0xEF, 0xBB, 0xBF])
    }

    /// Calls `body` with the position of every byte-order mark (U+FEFF, bytes EF BB BF) past the text's
    /// first bytes, in order: one pass, and none at all when no 0xEF byte is there.
    ///
    /// A BOM opens a file; anywhere else it is what `cat a.yaml b.yaml` leaves where the second file began.
    /// libyaml skips one at the start of a line and reads one inside a line as text, so the manifest
    /// failed with an error about what followed it ("did not find expected key"), or not at all.
    /// Lines are YAML's, as `line(_:)` splits them; the BOM counts as a column, as libyaml counts it.
    func forEachByteOrderMarkPastStart(_ body: (SourceMark) -> Void) {
        let bom: [UInt8] = [0xEF, 0xBB, 0xBF]
        let start = bytes.starts(with: bom) ? 3 : 0
        guard bytes.count >= start + 3, bytes[start...].contains(0xEF) else { return }
        bytes.withUnsafeBufferPointer { buffer in
            var line = 1
            var column = 1
            var index = start
            while index < buffer.count {
                let byte = buffer[index]
                if byte == 0xEF, index + 2 < buffer.count, buffer[index + 1] == 0xBB, buffer[index + 2] == 0xBF {
                    body(SourceMark(line: line, column: column))
                } else if let length = Self.lineBreakLength(in: buffer, at: index) {
                    line += 1
                    column = 1
                    index += length
                    continue
                }
                if byte & 0xC0 != 0x80 { column += 1 }
                index += 1
            }
        }
    }

    /// The byte offset of the first byte that is not part of valid UTF-8, or nil when all of it is valid.
    static func firstInvalidUTF8Offset(_ bytes: [UInt8]) -> Int? {
        // The standard library's validation is fast; walk scalar by scalar only to find where it fails.
        if String(validating: bytes, as: UTF8.self) != nil { return nil }
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded): offset += encoded.count
            case .emptyInput: return nil
            case .error: return offset
            }
        }
    }
}
