/// A strict, small pull reader of JSON text (RFC 8259) for the store's payloads: the readers of
/// `FastJSON` take each member straight into the value they build, with no tree of the document in
/// between (building that tree — an array of members, a `String` per key, a box per value — was half of
/// the decoding of `audit` and `replay --verify` on a big log).
///
/// It never decides a case Foundation might decide differently: a reader returns nil for anything that
/// is not plainly valid JSON (control characters in strings, lone surrogates, trailing text, nesting
/// deeper than `maximumDepth`) and for any key it does not compare by its bytes alone (one with an
/// escape or a byte outside ASCII); the caller then hands the text to Foundation, whose answer — a value
/// or an error naming what is wrong — is the one given. Members a reader does not know are skipped, and
/// checked as strictly as the ones it reads. `FastJSONTests` compares both readers.
struct JSONReader {
    /// Deeper nesting is left to Foundation (the store's payloads nest four levels at most).
    static let maximumDepth = 32

    /// The value `read` takes from `text`, or nil when the text is not plainly valid JSON, holds more
    /// than that one value, or `read` declines it.
    static func decode<T>(_ text: String, _ read: (inout JSONReader) -> T?) -> T? {
        var text = text
        return text.withUTF8 { bytes -> T? in
            var reader = JSONReader(bytes: bytes)
            guard let value = read(&reader) else { return nil }
            reader.skipWhitespace()
            return reader.position == bytes.count ? value : nil
        }
    }

    /// A member's key: where its bytes lie in the text (plain ASCII without escapes).
    struct Key {
        fileprivate let start: Int
        fileprivate let count: Int
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private var position = 0
    /// The nesting depth of the next value (0: the document itself), as Foundation counts it.
    private var depth = 0

    private init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    // MARK: - Structure

    /// Reads an object, handing each member's key to `member`, which must read (or `skip`) its value;
    /// false when the next value is not an object, is malformed, or `member` declines.
    mutating func members(_ member: (inout JSONReader, Key) -> Bool) -> Bool {
        guard begin(), bytes[position] == UInt8(ascii: "{") else { return false }
        position += 1
        depth += 1
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            depth -= 1
            return true
        }
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\""), let key = plainKey() else { return false }
            guard colon(), member(&self, key) else { return false }
            skipWhitespace()
            guard position < bytes.count else { return false }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "}"):
                position += 1
                depth -= 1
                return true
            default: return false
            }
        }
    }

    /// Reads an array whose every element `element` reads; nil when the next value is not such an array.
    mutating func array<T>(_ element: (inout JSONReader) -> T?) -> [T]? {
        guard begin(), bytes[position] == UInt8(ascii: "[") else { return nil }
        position += 1
        depth += 1
        var values: [T] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            depth -= 1
            return values
        }
        while true {
            guard let value = element(&self) else { return nil }
            values.append(value)
            skipWhitespace()
            guard position < bytes.count else { return nil }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "]"):
                position += 1
                depth -= 1
                return values
            default: return nil
            }
        }
    }

    /// An object of strings, as `[String: String]` decodes (declined when a key repeats).
    mutating func stringDictionary() -> [String: String]? {
        guard begin(), bytes[position] == UInt8(ascii: "{") else { return nil }
        position += 1
        depth += 1
        var dictionary: [String: String] = [:]
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            depth -= 1
            return dictionary
        }
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\""), let key = stringAtQuote(), colon(),
                  let value = string(), dictionary.updateValue(value, forKey: key) == nil else { return nil }
            skipWhitespace()
            guard position < bytes.count else { return nil }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "}"):
                position += 1
                depth -= 1
                return dictionary
            default: return nil
            }
        }
    }

    /// Whether `key` is `name`, byte for byte.
    func key(_ key: Key, is name: StaticString) -> Bool {
        guard key.count == name.utf8CodeUnitCount else { return false }
        let start = name.utf8Start
        for index in 0..<key.count where bytes[key.start + index] != start[index] { return false }
        return true
    }

    /// Skips the next value, checking it as strictly as the readers read; false when it is malformed.
    mutating func skip() -> Bool {
        guard begin() else { return false }
        switch bytes[position] {
        case UInt8(ascii: "{"):
            position += 1
            depth += 1
            skipWhitespace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
                position += 1
                depth -= 1
                return true
            }
            while true {
                skipWhitespace()
                guard position < bytes.count, bytes[position] == UInt8(ascii: "\""), stringAtQuote() != nil, colon(), skip() else { return false }
                skipWhitespace()
                guard position < bytes.count else { return false }
                switch bytes[position] {
                case UInt8(ascii: ","): position += 1
                case UInt8(ascii: "}"):
                    position += 1
                    depth -= 1
                    return true
                default: return false
                }
            }
        case UInt8(ascii: "["):
            position += 1
            depth += 1
            skipWhitespace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
                position += 1
                depth -= 1
                return true
            }
            while true {
                guard skip() else { return false }
                skipWhitespace()
                guard position < bytes.count else { return false }
                switch bytes[position] {
                case UInt8(ascii: ","): position += 1
                case UInt8(ascii: "]"):
                    position += 1
                    depth -= 1
                    return true
                default: return false
                }
            }
        case UInt8(ascii: "\""): return stringAtQuote() != nil
        case UInt8(ascii: "t"): return literal("true")
        case UInt8(ascii: "f"): return literal("false")
        case UInt8(ascii: "n"): return literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            if case .malformed = number() { return false }
            return true
        default: return false
        }
    }

    // MARK: - Scalars

    /// The next value as a string; nil when it is not a well-formed string.
    mutating func string() -> String? {
        guard begin(), bytes[position] == UInt8(ascii: "\"") else { return nil }
        return stringAtQuote()
    }

    /// The next value as a plain integer in `Int64`'s range; nil for anything else (a fraction, an
    /// exponent, `-0`: Foundation's to read).
    mutating func int64() -> Int64? {
        guard begin() else { return nil }
        switch bytes[position] {
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            if case .integer(let value) = number() { return value }
            return nil
        default: return nil
        }
    }

    /// `int64()` as an `Int`.
    mutating func int() -> Int? { int64().flatMap { Int(exactly: $0) } }

    /// The next value as `true` or `false`.
    mutating func bool() -> Bool? {
        guard begin() else { return nil }
        switch bytes[position] {
        case UInt8(ascii: "t"): return literal("true") ? true : nil
        case UInt8(ascii: "f"): return literal("false") ? false : nil
        default: return nil
        }
    }

    /// Reads `null` and returns true; false, reading nothing, when the next value is not `null`.
    mutating func null() -> Bool {
        guard begin(), bytes[position] == UInt8(ascii: "n") else { return false }
        return literal("null")
    }

    /// `read` of the next value, or `.some(nil)` for `null` (an absent optional); nil when `read` declines.
    mutating func optional<T>(_ read: (inout JSONReader) -> T?) -> T?? {
        if null() { return .some(nil) }
        guard let value = read(&self) else { return nil }
        return .some(value)
    }

    mutating func optionalString() -> String?? { optional { $0.string() } }
    mutating func optionalInt64() -> Int64?? { optional { $0.int64() } }
    mutating func optionalInt() -> Int?? { optional { $0.int() } }

    // MARK: - Bytes

    mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    /// Skips whitespace before a value; false at the end of the text or too deep.
    private mutating func begin() -> Bool {
        skipWhitespace()
        return position < bytes.count && depth <= Self.maximumDepth
    }

    /// Reads the `:` after a key.
    private mutating func colon() -> Bool {
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { return false }
        position += 1
        return true
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard bytes.count - position >= count else { return false }
        for index in 0..<count where bytes[position + index] != word.utf8Start[index] { return false }
        position += count
        return true
    }

    /// A key at its opening quote, when it is printable ASCII without escapes (every key the store
    /// writes); nil otherwise, so that no key is matched other than by its bytes.
    private mutating func plainKey() -> Key? {
        position += 1  // "
        let start = position
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                position += 1
                return Key(start: start, count: position - 1 - start)
            }
            guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") else { return nil }
            position += 1
        }
        return nil
    }

    /// A string at its opening quote; nil for control characters, bad escapes and lone surrogates.
    private mutating func stringAtQuote() -> String? {
        position += 1  // "
        let start = position
        // Most strings need no unescaping: copy them in one piece.
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
                position += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { return nil }
            position += 1
        }
        guard position < bytes.count else { return nil }
        var unescaped = Array(UnsafeBufferPointer(rebasing: bytes[start..<position]))
        while position < bytes.count {
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return String(decoding: unescaped, as: UTF8.self)
            case UInt8(ascii: "\\"):
                position += 1
                guard position < bytes.count else { return nil }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): unescaped.append(escape)
                case UInt8(ascii: "b"): unescaped.append(0x08)
                case UInt8(ascii: "f"): unescaped.append(0x0C)
                case UInt8(ascii: "n"): unescaped.append(0x0A)
                case UInt8(ascii: "r"): unescaped.append(0x0D)
                case UInt8(ascii: "t"): unescaped.append(0x09)
                case UInt8(ascii: "u"):
                    guard let scalar = unicodeEscape() else { return nil }
                    unescaped.append(contentsOf: String(Character(scalar)).utf8)
                default: return nil
                }
            default:
                if byte < 0x20 { return nil }
                unescaped.append(byte)
                position += 1
            }
        }
        return nil
    }

    /// The scalar of a `\u` escape (the `\u` already read), joining a surrogate pair.
    private mutating func unicodeEscape() -> Unicode.Scalar? {
        guard let first = hex4() else { return nil }
        switch first {
        case 0xD800...0xDBFF:
            guard bytes.count - position >= 6, bytes[position] == UInt8(ascii: "\\"),
                  bytes[position + 1] == UInt8(ascii: "u") else { return nil }
            position += 2
            guard let second = hex4(), (0xDC00...0xDFFF).contains(second) else { return nil }
            return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
        case 0xDC00...0xDFFF:
            return nil
        default:
            return Unicode.Scalar(first)
        }
    }

    private mutating func hex4() -> UInt32? {
        guard bytes.count - position >= 4 else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
            position += 1
        }
        return value
    }

    /// What a number reads as.
    private enum Number {
        case integer(Int64)
        /// Valid JSON, but a fraction, an exponent, `-0`, or out of `Int64`'s range.
        case other
        case malformed
    }

    /// A number per RFC 8259 at its first byte (`-` or a digit).
    private mutating func number() -> Number {
        var negative = false
        if bytes[position] == UInt8(ascii: "-") {
            negative = true
            position += 1
        }
        let digitsStart = position
        while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
        let digits = position - digitsStart
        guard digits > 0 else { return .malformed }
        if digits > 1 && bytes[digitsStart] == UInt8(ascii: "0") { return .malformed }  // a leading zero is not JSON
        var plain = true
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            plain = false
            position += 1
            let fraction = position
            while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
            guard position > fraction else { return .malformed }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            plain = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            let exponent = position
            while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
            guard position > exponent else { return .malformed }
        }
        guard plain, !(negative && digits == 1 && bytes[digitsStart] == UInt8(ascii: "0")), digits <= 19 else { return .other }
        var magnitude: UInt64 = 0
        for index in digitsStart..<position { magnitude = magnitude * 10 + UInt64(bytes[index] - UInt8(ascii: "0")) }
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { return .other }
            return .integer(magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude))
        }
        guard magnitude <= UInt64(Int64.max) else { return .other }
        return .integer(Int64(magnitude))
    }
}
