import Foundation

/// Byte counts written with units: `512KiB`, `1MiB`, `2MB`, `1.5GiB`, `1000`, `10 B`.
public enum ByteSize {
    private static let units: [(suffix: String, factor: Double)] = [
        ("KiB", 1024), ("MiB", 1024 * 1024), ("GiB", 1024 * 1024 * 1024), ("TiB", 1024 * 1024 * 1024 * 1024),
        ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("TB", 1_000_000_000_000),
        ("K", 1024), ("M", 1024 * 1024), ("G", 1024 * 1024 * 1024), ("B", 1),
    ]

    /// Parses a size; nil when the text is not a non-negative size with a known unit.
    public static func parse(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { return nil }
        if let plain = Int64(trimmed) { return plain >= 0 ? plain : nil }
        for (suffix, factor) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)
            guard !number.isEmpty, number.allSatisfy({ $0.isNumber || $0 == "." }),
                  let value = Double(number), value >= 0 else { return nil }
            let bytes = (value * factor).rounded()
            guard bytes < 9.0e18, bytes == bytes.rounded(.down) else { return nil }
            return Int64(bytes)
        }
        return nil
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
