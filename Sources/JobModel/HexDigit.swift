/// One hexadecimal digit's value, for the percent-decoding of references and of secrets quoted back.
enum HexDigit {
    /// `0`–`9`, `a`–`f`, `A`–`F` as 0–15; nil for any other byte.
    static func value(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
