import Foundation

/// What a transfer does when its destination (an object, or a download's local file) already exists:
/// the manifest's `if_exists:`. Nil in a spec means `overwrite`, as `gsutil cp` does.
public enum IfExists: String, Codable, Sendable, Equatable, Hashable, CaseIterable {
    /// Replace what is there (the default).
    case overwrite
    /// Leave what is there and succeed with a result that says the transfer was skipped.
    case skip
    /// Fail (not retryable) without writing. The check and the write are one step where the destination
    /// allows it: `ifGenerationMatch=0` on GCS, `If-None-Match: *` over HTTP, an exclusive link on disk.
    case fail
    /// Skip when the destination has the source's size and CRC32C (as rclone's `--checksum`); otherwise
    /// overwrite. Uploads only.
    case skipIdentical = "skip-identical"
}

/// A rate in bytes per second, written as rclone writes `--bwlimit`: `512k`, `10M`, `1.5G`
/// (K, M, G, T are binary: 1024, 1024², …; `KiB`-style and `KB`-style units are accepted too). A bare
/// number is bytes per second (rclone reads it as KiB/s: always write a unit to be clear).
public enum TransferRate {
    /// The rates accepted: 1 KiB/s to 1 TiB/s.
    public static let range: ClosedRange<Int64> = 1024...(1 << 40)

    private static let units: [(suffix: String, factor: Double)] = [
        ("KiB", 1024), ("MiB", 1_048_576), ("GiB", 1_073_741_824), ("TiB", 1_099_511_627_776),
        ("KB", 1000), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12),
        ("K", 1024), ("M", 1_048_576), ("G", 1_073_741_824), ("T", 1_099_511_627_776), ("B", 1), ("", 1),
    ]

    /// Bytes per second, or nil when `text` is not a rate.
    public static func parse(_ text: String) -> Int64? {
        var trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasSuffix("/s") { trimmed.removeLast(2) }
        // rclone writes `512k`: a lower-case one-letter unit means the same as the upper-case one.
        if let last = trimmed.last, "kmgt".contains(last) {
            trimmed = String(trimmed.dropLast()) + last.uppercased()
        }
        for (suffix, factor) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)
            guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
                  let value = Double(number) else { return nil }
            let bytes = (value * factor).rounded()
            guard bytes < 9.0e18 else { return nil }
            return Int64(bytes)
        }
        return nil
    }

    /// A message for a rate that is malformed or out of `range`, naming `what` (`'max_rate'`, `--bwlimit`).
    public static func problem(with text: String, what: String) -> String? {
        guard let rate = parse(text) else {
            return "\(what) must be a rate like 512k or 10M (bytes per second; K, M, G are 1024-based), not '\(text)'"
        }
        guard range.contains(rate) else {
            return "\(what) must be at least 1k (1024 bytes per second) and at most 1T per second, not '\(text)'"
        }
        return nil
    }
}
