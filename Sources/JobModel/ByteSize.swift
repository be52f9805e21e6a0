import Foundation

/// Byte counts written with units: `512KiB`, `1MiB`, `2MB`, `1.5GiB`, `1000`, `10 B`, `512k`: the one
/// grammar of every size and rate a user types.
///
/// Without a unit a size is a plain number of bytes, read as `DecimalText` reads every number: digits
/// only, no point and no leading zero (`1.0` and `010` are refused, as `priority:` refuses them; `1.0`
/// was 1 byte). With a unit the number may have a fraction, with digits on both sides of its one point
/// (`1.5M`, `0.5M`; not `.5M` or `5.M`), and may start with 0, as `060s` may: YAML reads no text with a
/// unit as octal. The unit follows (spaces allowed between): `KiB` `MiB` `GiB` `TiB` (1024-based), `KB`
/// `MB` `GB` `TB` (1000-based), `B`, and rclone's one-letter `K` `M` `G` `T` (1024-based), in either
/// case. `--bwlimit` took `1k` and `1T` while the size settings refused them.
public enum ByteSize {
    private static let units: [(suffix: String, factor: UInt64)] = [
        ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40),
        ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("TB", 1_000_000_000_000),
        ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40),
        ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40), ("B", 1),
    ]

    /// What a size's text says.
    public enum Reading: Equatable, Sendable {
        case bytes(Int64)
        /// A well-formed size that is not a whole number of bytes (`1.5B`, `0.0001KiB`).
        case fractionOfAByte
        /// A well-formed size beyond 2⁶³ − 1 bytes.
        case tooLarge
        /// No size at all: no digits, an unknown unit, a sign, an exponent, several points, a point
        /// without digits on both sides, a point or a leading zero without a unit (`grammarNote` says which).
        case notASize
    }

    /// Parses a size; nil when the text is not a non-negative, whole number of bytes with a known unit.
    public static func parse(_ text: String) -> Int64? {
        if case .bytes(let bytes) = read(text) { return bytes }
        return nil
    }

    /// Reads a size exactly, in integers: `1.5KiB` is 1536 bytes, `1.5B` no size (bytes are not rounded).
    /// The grammar is the type's: see there.
    public static func read(_ text: String) -> Reading {
        let trimmed = DecimalText.trimmed(text)
        var number = trimmed
        var factor: UInt64 = 1
        let unit = units.first(where: { trimmed.hasSuffix($0.suffix) })
        if let unit {
            number = DecimalText.trimmed(trimmed.dropLast(unit.suffix.count))
            factor = unit.factor
        }
        let parts = number.split(separator: ".", maxSplits: 2, omittingEmptySubsequences: false)
        // Digits on both sides of a point: `.5M` and `5.M` are no sizes.
        guard (1...2).contains(parts.count), parts.allSatisfy(DecimalText.isDigits) else { return .notASize }
        // A bare byte count is a plain number: `010` and `1.0` are no sizes, as they are no numbers (see `DecimalText`).
        if unit == nil, parts.count == 2 || DecimalText.hasLeadingZero(parts[0]) { return .notASize }
        let whole = Array(parts[0].utf8)
        var fraction = parts.count == 2 ? Array(parts[1].utf8) : []
        while fraction.last == 0x30 { fraction.removeLast() }
        // The number as an integer mantissa over 10^scale.
        var mantissa: UInt64 = 0
        for (index, digit) in (whole + fraction).enumerated() {
            let (times10, overflow) = mantissa.multipliedReportingOverflow(by: 10)
            let (next, carry) = times10.addingReportingOverflow(UInt64(digit - 0x30))
            if overflow || carry { return index < whole.count ? .tooLarge : .fractionOfAByte }
            mantissa = next
        }
        guard fraction.count <= 19 else { return mantissa == 0 ? .bytes(0) : .fractionOfAByte }
        var scale: UInt64 = 1
        for _ in 0..<fraction.count { scale *= 10 }
        let product = factor.multipliedFullWidth(by: mantissa)
        guard product.high < scale else { return .tooLarge }
        let (bytes, remainder) = scale.dividingFullWidth(product)
        guard remainder == 0 else { return .fractionOfAByte }
        guard bytes <= UInt64(Int64.max) else { return .tooLarge }
        return .bytes(Int64(bytes))
    }

    /// ` (why)` when `text` is refused by one of the grammar's rules a near miss breaks (a point without
    /// a unit, a point without digits on both sides, a leading zero without a unit), else "": for a
    /// message about a size or a rate that refused it, after what a size looks like.
    public static func grammarNote(for text: String) -> String {
        var trimmed = DecimalText.trimmed(text)
        if trimmed.hasSuffix("/s") { trimmed.removeLast(2) }
        let unit = units.first(where: { trimmed.hasSuffix($0.suffix) })
        let number = unit.map { DecimalText.trimmed(trimmed.dropLast($0.suffix.count)) } ?? trimmed
        let parts = number.split(separator: ".", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ $0.utf8.allSatisfy { (0x30...0x39).contains($0) } }) else {
            return unit == nil ? DecimalText.leadingZeroNote(for: number) : ""
        }
        if parts[0].isEmpty || parts[1].isEmpty {
            return " (a fraction has digits on both sides of its point: 0.5M, not .5M; 5M, not 5.M)"
        }
        return unit == nil ? " (without a unit the number is a whole number of bytes, written without a point; a fraction takes a unit: 1.5KiB)" : ""
    }

    /// `1.5 MiB`-style text for people.
    public static func format(_ bytes: Int64) -> String {
        let value = Double(bytes)
        if bytes < 1024 { return "\(bytes) B" }
        let steps: [(String, Double)] = [("KiB", 1024), ("MiB", 1_048_576), ("GiB", 1_073_741_824), ("TiB", 1_099_511_627_776)]
        var chosen = steps[0]
        for step in steps where value >= step.1 { chosen = step }
        let scaled = value / chosen.1
        let rounded = (scaled * 10).rounded() / 10
        return rounded == rounded.rounded() ? "\(Int(rounded)) \(chosen.0)" : "\(rounded) \(chosen.0)"
    }
}
