import Foundation

/// The manifest text split into lines the way YAML splits them, for positions and caret rendering.
struct SourceText: Sendable {
    let text: String
    /// Lines without their terminators; line 1 without a byte-order mark.
    let lines: [String]

    init(_ text: String) {
        self.text = text
        // YAML line breaks: LF, CRLF, CR, and (YAML 1.1) NEL, LS and PS.
        let breaks: Set<Character> = ["\n", "\r\n", "\r", "\u{85}", "\u{2028}", "\u{2029}"]
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: { breaks.contains($0) }).map(String.init)
        if let first = lines.first, first.hasPrefix("\u{FEFF}") { lines[0] = String(first.dropFirst()) }
        self.lines = lines
    }

    /// The text of a 1-based line, or nil past the end.
    func line(_ number: Int) -> String? {
        lines.indices.contains(number - 1) ? lines[number - 1] : nil
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
        return lines.dropFirst(mark.line).allSatisfy { $0.allSatisfy(\.isWhitespace) }
    }

    /// The line and column of a UTF-8 byte offset into the text (libyaml reader errors give offsets).
    func mark(atByteOffset offset: Int) -> SourceMark {
        Self.mark(atByteOffset: offset, in: Array(text.utf8)[...])
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
