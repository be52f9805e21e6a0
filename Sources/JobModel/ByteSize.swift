import Foundation

/// Byte counts written with units: `512KiB`, `1MiB`, `2MB`, `1.5GiB`, `1000`, `10 B`, `512k`: the one
/// grammar of every size and rate a user types.
///
/// The number is `DecimalText`'s digits, with at most one point (a bare count, without a unit, has no
/// leading zero, as no number has); the unit, if any, follows (spaces allowed between): `KiB` `MiB` `GiB` `TiB` (1024-based), `KB` `MB` `GB` `TB` (1000-based), `B`, and
/// rclone's one-letter `K` `M` `G` `T` (1024-based), in either case. `--bwlimit` took `1k` and `1T`
/// while the size settings refused them.
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
        /// A well-formed size that is not a whole number of bytes (`1.5B`, `1.5`, `0.0001KiB`).
        case fractionOfAByte
        /// A well-formed size beyond 2⁶³ − 1 bytes.
        case tooLarge
        /// No size at all: no digits, an unknown unit, a sign, an exponent, several points.
        case notASize
    }

    /// Parses a size; nil when the text is not a non-negative, whole number of bytes with a known unit.
    public static func parse(_ text: String) -> Int64? {
        if case .bytes(let bytes) = read(text) { return bytes }
        return nil
    }

    /// Reads a size exactly, in integers: `1.5KiB` is 1536 bytes, `1.5B` no size (bytes are not rounded).
    /// The number is ASCII digits with at most one point; the unit, if any, follows (spaces allowed).
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
        guard (1...2).contains(parts.count), parts.contains(where: { !$0.isEmpty }),
              parts.allSatisfy({ $0.utf8.allSatisfy { (0x30...0x39).contains($0) } }) else { return .notASize }
        // A bare byte count is a plain number: `010` is no size, as it is no number (see `DecimalText`).
        if unit == nil, parts.count == 1, DecimalText.hasLeadingZero(parts[0]) { return .notASize }
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
