import Foundation

/// Text shown to people on a terminal, with its control characters made visible.
///
/// Server replies (an error body, an object's content type or hash), manifest values (an idempotency
/// key) and other processes' words (a cancel reason) reach `show`, `list`, `history`, `audit`, `watch`,
/// error messages and the worker's log. A C0 control (ESC, BEL), DEL or a C1 control (U+009B is an
/// 8-bit CSI) in them could recolour, retitle or clear the reader's terminal, or hide what follows; so
/// each is written as `\u{1B}` instead, which reads as what it is and cannot act. So are the Unicode
/// characters that rearrange what a terminal shows without being seen: the bidirectional embeddings,
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069; a U+202E in `evil\u{202E}txt.exe` shows it as
/// `evilexe.txt`) and the line and paragraph separators (U+2028, U+2029).
public enum TerminalText {
    /// C0 controls, DEL, C1 controls and the layout controls (`isLayoutControl`).
    public static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || isLayoutControl(scalar)
    }

    /// The line and paragraph separators and the bidirectional embeddings and overrides (U+2028–U+202E),
    /// and the bidirectional isolates (U+2066–U+2069).
    public static func isLayoutControl(_ scalar: Unicode.Scalar) -> Bool {
        (0x2028...0x202E).contains(scalar.value) || (0x2066...0x2069).contains(scalar.value)
    }

    /// A name a row stores — a job's kind, an event's type, perhaps one a newer jobctl wrote, so any
    /// text — as messages show it: printable, at most 100 characters.
    public static func storedName(_ stored: String) -> String {
        printable(clipped(stored, limit: 100))
    }

    /// The most characters of an error message `clipped(_:)` keeps.
    public static let maximumMessageLength = 1_000

    /// `message` at most `limit` characters long: its start (what is wrong) and its end (what to do)
    /// kept, the middle — usually a value quoted from the input — cut with a note of how much. A
    /// 120 KB `JOBCTL_STALL_TIMEOUT`, a 16 MiB `kind:`, was quoted whole on standard error.
    public static func clipped(_ message: String, limit: Int = maximumMessageLength) -> String {
        let scalars = message.unicodeScalars
        guard scalars.count > limit else { return message }
        let head = limit * 6 / 10, tail = limit * 3 / 10
        var shown = String.UnicodeScalarView(scalars.prefix(head))
        shown.append(contentsOf: " […\(scalars.count - head - tail) characters left out…] ".unicodeScalars)
        shown.append(contentsOf: scalars.suffix(tail))
        return String(shown)
    }

    /// `text` with every control character shown as `\u{…}`: for a single-line field (a table cell,
    /// a `show` value), where a line break or a tab would break the layout too.
    public static func printable(_ text: String) -> String {
        escaping(text) { isControl($0) }
    }

    /// `text` with every control character but the line break and the tab shown as `\u{…}`: for
    /// messages of several lines (standard error).
    public static func printableKeepingLines(_ text: String) -> String {
        escaping(text) { isControl($0) && $0 != "\n" && $0 != "\t" }
    }

    /// `text` with every control character but the tab shown as `\u{…}`: for a manifest's file name
    /// and messages, whose columns count a tab as one.
    public static func printableKeepingTabs(_ text: String) -> String {
        escaping(text) { isControl($0) && $0 != "\t" }
    }

    /// `json` — JSON text as `JSONEncoder` writes it, UTF-8 — with every control character it left as it
    /// is written as a JSON escape: DEL as `\u007f`, the C1 controls as `\u0080`–`\u009f` and the layout
    /// controls (`isLayoutControl`) as `\u2028`–`\u202e`, `\u2066`–`\u2069`, as the worker's log writes
    /// them. The encoder escapes only C0: a DEL, an 8-bit CSI or a right-to-left override in a value
    /// (custom metadata, a key) reached the terminal of whoever ran `jobctl result` or `list --json`.
    /// Still JSON, and the same values to a program that reads it; other non-ASCII text stays as it is.
    /// Outside its strings JSON text is ASCII structure, so every such byte sequence is inside a string.
    public static func escapingJSONControls(_ json: Data) -> Data {
        // C2 80–9F: U+0080–U+009F. E2 80 A8–AE: U+2028–U+202E. E2 81 A6–A9: U+2066–U+2069.
        guard json.contains(where: { $0 == 0x7F || $0 == 0xC2 || $0 == 0xE2 }) else { return json }
        let bytes = [UInt8](json)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 16)
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        func escape(_ value: UInt32) {
            out += [UInt8(ascii: "\\"), UInt8(ascii: "u"), hex[Int(value >> 12 & 0xF)], hex[Int(value >> 8 & 0xF)],
                    hex[Int(value >> 4 & 0xF)], hex[Int(value & 0xF)]]
        }
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            let next = index + 1 < bytes.count ? bytes[index + 1] : 0
            if byte == 0x7F {
                escape(0x7F)
                index += 1
            } else if byte == 0xC2, (0x80...0x9F).contains(next) {
                escape(UInt32(next))
                index += 2
            } else if byte == 0xE2, index + 2 < bytes.count,
                      (next == 0x80 && (0xA8...0xAE).contains(bytes[index + 2])) || (next == 0x81 && (0xA6...0xA9).contains(bytes[index + 2])) {
                escape(0x2000 | UInt32(next & 0x3F) << 6 | UInt32(bytes[index + 2] & 0x3F))
                index += 3
            } else {
                out.append(byte)
                index += 1
            }
        }
        return Data(out)
    }

    private static func escaping(_ text: String, where shouldEscape: (Unicode.Scalar) -> Bool) -> String {
        guard text.unicodeScalars.contains(where: shouldEscape) else { return text }
        var shown = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if shouldEscape(scalar) {
                shown.append(contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
            } else {
                shown.append(scalar)
            }
        }
        return String(shown)
    }
}
