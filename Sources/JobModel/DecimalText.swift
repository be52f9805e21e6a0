/// Decimal integers: the one grammar every number a user types is read with (flags, environment
/// variables, configuration keys, manifest fields; sizes, rates and durations read their digits with it
/// too), and written as ASCII straight into a byte buffer.
///
/// A number is one or more ASCII digits (`0`–`9`) and nothing else: no sign (`+4` was taken as 4 by one
/// setting and refused by others), no `_` or `,` separators, no `0x`/`0o` prefix, no other script's
/// digits, and no leading zero (`010` is octal 8 to YAML 1.1 — which a manifest's `%YAML 1.1` names —
/// to C's `strtol` and to shells, decimal 10 to YAML 1.2: it was read as 10 whatever the writer meant).
/// Spaces and tabs around the text are ignored; any other space (a no-break space pasted from a page)
/// is refused, as everything else is: a text that might mean something else is refused, never read as
/// a guess.
public enum DecimalText {
    /// What a number's text says.
    public enum Reading: Equatable, Sendable {
        case value(Int64)
        /// Digits only, but more than `Int64` holds.
        case tooLarge
        /// Digits, but more than one with a zero first (`010`, `00`): see the type's summary.
        case leadingZero
        /// Not a number in this grammar.
        case invalid
    }

    /// Why a number with a leading zero is refused, for messages.
    public static let leadingZeroRule = "a number may not start with 0: 010 is octal 8 to YAML 1.1, C and shells, "
        + "decimal 10 to others; write it without the leading zero"

    /// ` (` + `leadingZeroRule` + `)` when `text` is a plain number but for its leading zero, else "": for
    /// a message about a size, a rate, a duration or a count that refused it.
    public static func leadingZeroNote(for text: some StringProtocol) -> String {
        read(text) == .leadingZero ? " (\(leadingZeroRule))" : ""
    }

    /// Whether `digits` (ASCII digits, nothing trimmed) are more than one with a zero first.
    public static func hasLeadingZero(_ digits: some StringProtocol) -> Bool {
        digits.utf8.count > 1 && digits.utf8.first == UInt8(ascii: "0")
    }

    /// `text` without the spaces and tabs around it (only those: see the type's summary).
    public static func trimmed(_ text: some StringProtocol) -> Substring {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        let string = Substring(text)
        guard let first = string.firstIndex(where: { !isBlank($0) }), let last = string.lastIndex(where: { !isBlank($0) }) else {
            return string[string.endIndex...]
        }
        return string[first...last]
    }

    /// Whether `text` is one or more ASCII digits and nothing else (nothing trimmed).
    public static func isDigits(_ text: some StringProtocol) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    /// Reads `text` as above, never trapping.
    public static func read(_ text: some StringProtocol) -> Reading {
        let digits = trimmed(text)
        guard isDigits(digits) else { return .invalid }
        guard !hasLeadingZero(digits) else { return .leadingZero }
        guard let value = Int64(digits) else { return .tooLarge }
        return .value(value)
    }

    /// `value` in decimal, as `String(value)` prints it, appended to `bytes`.
    public static func append(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned, so Int64.min has one too.
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits, written from the end
        withUnsafeMutableBytes(of: &digits) { buffer in
            var start = buffer.count
            repeat {
                start -= 1
                buffer[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[start...]))
        }
    }
}
