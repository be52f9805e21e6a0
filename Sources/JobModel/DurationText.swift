import Foundation

/// Durations written with units — `90s`, `30m`, `2h`, `1d`, `1w`, `1500ms`, `1h30m` — the one grammar
/// for every duration a user types: manifest fields, environment variables and command-line options.
///
/// Units run from the largest down (`w`, `d`, `h`, `m`, `s`, `ms`), each at most once, in either case.
/// A bare number is refused unless the caller names the unit it means (`--lease 30` is seconds): a
/// number that could mean seconds or milliseconds, guessed wrong, is a timeout off by a factor of a
/// thousand. Arithmetic is checked: a value past what `Int64` milliseconds hold reads as `tooLarge`,
/// never traps.
public enum DurationText {
    private static let units: [(unit: String, ms: Int64)] = [
        ("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1),
    ]

    /// What a duration text is.
    public enum Reading: Equatable, Sendable {
        /// A duration, in milliseconds.
        case milliseconds(Int64)
        /// Digits and units, but more than `Int64` milliseconds can hold.
        case tooLarge
        /// Not a duration at all (`inf`, `1e300`, `-5s`, `1.5h`, `30m1h`).
        case invalid
    }

    /// Reads `text`; a bare number is in `defaultUnitMs` (nil: a unit is required).
    public static func read(_ text: String, defaultUnitMs: Int64? = nil) -> Reading {
        let bytes = Array(DecimalText.trimmed(text).lowercased().utf8)
        guard !bytes.isEmpty else { return .invalid }
        if bytes.allSatisfy(isDigit) {
            // A bare number is a plain number: no leading zero (see `DecimalText`).
            guard let factor = defaultUnitMs, bytes.count == 1 || bytes[0] != UInt8(ascii: "0") else {
                return .invalid
            }
            return scaled(bytes[...], by: factor)
        }
        var total: Int64 = 0
        var tooLarge = false
        var index = 0
        var nextUnit = 0   // units come in order, each once
        while index < bytes.count {
            let digitsStart = index
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            guard index > digitsStart else { return .invalid }
            let unitStart = index
            while index < bytes.count, !isDigit(bytes[index]) { index += 1 }
            let unit = String(decoding: bytes[unitStart..<index], as: UTF8.self)
            guard let position = units.firstIndex(where: { $0.unit == unit }), position >= nextUnit else { return .invalid }
            nextUnit = position + 1
            switch scaled(bytes[digitsStart..<unitStart], by: units[position].ms) {
            case .milliseconds(let part):
                let (sum, overflow) = total.addingReportingOverflow(part)
                if overflow { tooLarge = true } else { total = sum }
            case .tooLarge:
                tooLarge = true
            case .invalid:
                return .invalid
            }
        }
        return tooLarge ? .tooLarge : .milliseconds(total)
    }

    /// Whole seconds, or nil when `text` is not a duration with units or is not a whole number of
    /// seconds (`1500ms`).
    public static func parse(_ text: String) -> Int? {
        guard case .milliseconds(let ms) = read(text), ms % 1_000 == 0, let seconds = Int(exactly: ms / 1_000) else {
            return nil
        }
        return seconds
    }

    /// The shortest text `parse` reads back as `seconds` (units preferred on a tie): `90s`, `30m`,
    /// `1h30m`, `1d`.
    public static func format(_ seconds: Int) -> String {
        guard seconds > 0 else { return "0s" }
        var rest = Int64(seconds)
        var text = ""
        for (unit, ms) in units where ms >= 1_000 && unit != "w" && rest >= ms / 1_000 {
            text += "\(rest / (ms / 1_000))\(unit)"
            rest %= ms / 1_000
        }
        let plain = "\(seconds)s"
        return plain.count < text.count ? plain : text
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private static func scaled(_ digits: ArraySlice<UInt8>, by factor: Int64) -> Reading {
        guard let amount = Int64(String(decoding: digits, as: UTF8.self)) else { return .tooLarge }
        let (product, overflow) = amount.multipliedReportingOverflow(by: factor)
        return overflow ? .tooLarge : .milliseconds(product)
    }
}
