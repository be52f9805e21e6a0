import Foundation

/// Durations written with units, in whole seconds: `90s`, `30m`, `2h`, `1d`, `1h30m`.
///
/// A unit is required (`90` alone is refused): a bare number could mean seconds or milliseconds, and
/// a timeout off by a factor of a thousand is worse than an error. Units run from the largest down
/// (`d`, `h`, `m`, `s`), each at most once; `M`, `H`, `D`, `S` are accepted too.
public enum DurationText {
    private static let units: [(unit: Character, seconds: Int)] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)]

    /// The number of seconds, or nil when `text` is not a non-negative duration with units.
    public static func parse(_ text: String) -> Int? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        guard !trimmed.isEmpty else { return nil }
        var total = 0
        var digits = ""
        var nextUnit = 0   // units must come in order, each once
        for character in trimmed {
            if character.isASCII, character.isNumber {
                digits.append(character)
                continue
            }
            guard !digits.isEmpty, let index = units.firstIndex(where: { $0.unit == character }), index >= nextUnit,
                  let amount = Int(digits) else { return nil }
            let (product, overflow) = amount.multipliedReportingOverflow(by: units[index].seconds)
            guard !overflow else { return nil }
            let (sum, sumOverflow) = total.addingReportingOverflow(product)
            guard !sumOverflow else { return nil }
            total = sum
            digits = ""
            nextUnit = index + 1
        }
        return digits.isEmpty && nextUnit > 0 ? total : nil
    }

    /// The shortest text `parse` reads back as `seconds` (units preferred on a tie): `90s`, `30m`,
    /// `1h30m`, `1d`.
    public static func format(_ seconds: Int) -> String {
        guard seconds > 0 else { return "0s" }
        var rest = seconds
        var text = ""
        for (unit, size) in units where rest >= size {
            text += "\(rest / size)\(unit)"
            rest %= size
        }
        let plain = "\(seconds)s"
        return plain.count < text.count ? plain : text
    }
}
