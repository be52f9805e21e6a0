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
///
/// Read exactly, as `ByteSize` reads sizes: a rate that is not a whole number of bytes per second
/// (`1023.5`, `1.1M`) is refused, not rounded (rounded, `1023.5` passed the 1k minimum).
public enum TransferRate {
    /// The rates accepted: 1 KiB/s to 1 TiB/s.
    public static let range: ClosedRange<Int64> = 1024...(1 << 40)

    /// What `text` says as a rate, in bytes per second.
    public static func read(_ text: String) -> ByteSize.Reading {
        // A size's grammar (rclone's `512k` among its units), per second.
        var trimmed = DecimalText.trimmed(text)
        if trimmed.hasSuffix("/s") { trimmed.removeLast(2) }
        return ByteSize.read(String(trimmed))
    }

    /// Bytes per second, or nil when `text` is not a whole number of bytes per second.
    public static func parse(_ text: String) -> Int64? {
        if case .bytes(let rate) = read(text) { return rate }
        return nil
    }

    /// A message for a rate that is malformed or out of `range`, naming `what` (`'max_rate'`, `--bwlimit`).
    public static func problem(with text: String, what: String) -> String? {
        switch read(text) {
        case .bytes(let rate) where range.contains(rate):
            return nil
        case .bytes, .tooLarge:
            return "\(what) must be at least 1k (1024 bytes per second) and at most 1T per second, not '\(text)'"
        case .fractionOfAByte:
            return "\(what) must be a whole number of bytes per second (1.5M is, 1.1M is not; write a smaller unit), not '\(text)'"
        case .notASize:
            return "\(what) must be a rate like 512k or 10M (bytes per second; K, M, G are 1024-based), not '\(text)'\(ByteSize.grammarNote(for: text))"
        }
    }
}
