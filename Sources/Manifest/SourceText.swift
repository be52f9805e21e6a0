import Foundation

/// The manifest text with its lines indexed the way YAML splits them, for positions and caret rendering.
///
/// Lines are found once, by one pass over the UTF-8 bytes; a line's text is made only when an error
/// quotes it, so a large manifest without errors pays for no per-line strings.
struct SourceText: Sendable {
    /// The text's UTF-8 bytes (what libyaml reads).
    let bytes: [UInt8]
    /// Byte offset where each line starts (line 1 after any byte-order mark), and where it ends (before
    /// its line break).
    private let lineStarts: [Int]
    private let lineEnds: [Int]

    init(_ text: String) {
        let bytes = Array(text.utf8)
        self.bytes = bytes
        // YAML line breaks: LF, CRLF, CR, and (YAML 1.1) NEL, LS and PS.
        var starts = [bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0]
        var ends: [Int] = []
        bytes.withUnsafeBufferPointer { buffer in
            let count = buffer.count
            var index = 0
            while index < count {
                let byte = buffer[index]
                var length = 0
                if byte == 0x0A {
                    length = 1
                } else if byte == 0x0D {
                    length = index + 1 < count && buffer[index + 1] == 0x0A ? 2 : 1
                } else if byte == 0xC2, index + 1 < count, buffer[index + 1] == 0x85 {
                    length = 2
                } else if byte == 0xE2, index + 2 < count, buffer[index + 1] == 0x80, buffer[index + 2] == 0xA8 || buffer[index + 2] == 0xA9 {
                    length = 3
                }
                if length > 0 {
                    ends.append(index)
                    index += length
                    starts.append(index)
                } else {
                    index += 1
                }
            }
        }
        ends.append(bytes.count)
        lineStarts = starts
        lineEnds = ends
    }

    /// How many lines the text has (an empty text has one, empty).
    var lineCount: Int { lineStarts.count }

    /// The text of a 1-based line, or nil past the end.
    func line(_ number: Int) -> String? {
        guard number >= 1, number <= lineStarts.count else { return nil }
        let start = lineStarts[number - 1], end = max(lineStarts[number - 1], lineEnds[number - 1])
        return String(decoding: bytes[start..<end], as: UTF8.self)
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
        guard mark.line < lineStarts.count else { return true }
        return String(decoding: bytes[lineStarts[mark.line]...], as: UTF8.self).allSatisfy(\.isWhitespace)
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
