import Foundation

/// Job identifiers: 26-character Crockford base32 ULIDs (48-bit millisecond time, 80 random bits),
/// so ids sort by submission time and never collide across processes.
public enum JobID {
    private static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ")

    /// A new id for the current time.
    public static func generate(atMs: Int64 = Clock.nowMs()) -> String {
        var generator = SystemRandomNumberGenerator()
        var characters: [Character] = []
        characters.reserveCapacity(26)
        var time = UInt64(max(0, atMs)) & 0xFFFF_FFFF_FFFF
        var timePart: [Character] = []
        for _ in 0..<10 {
            timePart.append(alphabet[Int(time & 31)])
            time >>= 5
        }
        characters.append(contentsOf: timePart.reversed())
        for _ in 0..<16 {
            characters.append(alphabet[Int(generator.next() & 31)])
        }
        return String(characters)
    }

    /// Whether `text` has the shape of a job id (accepts lowercase).
    public static func isValid(_ text: String) -> Bool {
        text.count == 26 && text.uppercased().allSatisfy { alphabet.contains($0) }
    }
}

/// Wall-clock milliseconds. The only place the model reads the clock; state machines take time as an argument.
public enum Clock {
    public static func nowMs() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }
}
