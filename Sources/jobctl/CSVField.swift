import JobModel

/// A field of `audit --csv`, written for spreadsheets and line-oriented programs alike.
///
/// The values come from outside — an object name, a server's hash or error message, a manifest's path —
/// and CSV is opened by spreadsheets, which run a cell that starts with `=`, `+`, `-` or `@` as a formula
/// (`=HYPERLINK(…)`, `=cmd|' /C calc'!A0`: CSV injection). As OWASP advises and spreadsheet exporters
/// do, such a field is written with a `'` in front, which makes the cell text; so is a field that
/// already starts with `'`, so taking one leading `'` off any field that starts with one gives back the
/// value exactly. A field that is a plain integer (an error code, `-13010`) is a number to a
/// spreadsheet, not a formula, and stays as it is. Control characters (a line break, ESC, a tab or CR
/// that would start a formula after a spreadsheet's trimming) are shown as `\u{…}`, as on a terminal,
/// so every row is one line that cannot act on a terminal. `--json` carries every value exactly.
enum CSVField {
    /// `value` as a CSV field: neutralized (`'` in front) and with its control characters shown, then
    /// quoted (RFC 4180) when it holds a comma or a quote.
    static func text(_ value: String) -> String {
        var text = TerminalText.printable(value)
        if startsLikeFormula(text) { text = "'" + text }
        // Bytes first: text without any of these bytes has none of these characters (most fields).
        guard text.utf8.contains(where: { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") }),
              text.contains(where: { $0 == "," || $0 == "\"" }) else { return text }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// Whether a spreadsheet could read `text` as a formula (or it starts with the `'` that marks one
    /// neutralized): its first character is `=`, `+`, `-`, `@` or `'`, and it is not a plain integer.
    static func startsLikeFormula(_ text: String) -> Bool {
        guard let first = text.utf8.first, isFormulaLead(first) else { return false }
        return !isPlainInteger(text)
    }

    /// Whether a field written as bytes can be copied as it is: it neither starts like a formula nor
    /// holds a byte that needs quoting, escaping or `text(_:)`'s judgment (bytes outside ASCII).
    static func isPlain(_ value: String) -> Bool {
        !startsLikeFormula(value)
            && !value.utf8.contains { $0 < 0x20 || $0 >= 0x7F || $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") }
    }

    private static func isFormulaLead(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "=") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "@")
            || byte == UInt8(ascii: "'")
    }

    /// `-`, then one or more ASCII digits.
    private static func isPlainInteger(_ text: String) -> Bool {
        let digits = text.utf8.dropFirst(text.utf8.first == UInt8(ascii: "-") ? 1 : 0)
        return !digits.isEmpty && digits.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }
}
