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

    /// A stable id of the same shape for `name`: the same name always gives the same id (FNV-1a, 130 bits
    /// from two seeds; not a secret, just a name). A keyed folder expansion takes its batch id from its
    /// key this way, so submitting the manifest again maps to the same jobs and the same batch.
    public static func derived(from name: String) -> String {
        func fnv(_ seed: UInt64) -> UInt64 {
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ seed
            for byte in name.utf8 {
                hash ^= UInt64(byte)
                hash &*= 0x0000_0100_0000_01B3
            }
            return hash
        }
        var high = fnv(0x9E37_79B9_7F4A_7C15), low = fnv(0xC2B2_AE3D_27D4_EB4F)
        var characters: [Character] = []
        for index in 0..<26 {
            let source = index < 13 ? high : low
            characters.append(alphabet[Int(source & 31)])
            if index < 13 { high >>= 5 } else { low >>= 5 }
        }
        // The first character of a ULID is at most 7 (48 bits of time in 50).
        characters[0] = alphabet[Int(high & 7)]
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
