/// A JSON value as `JSONReader` reads it: just enough of JSON for the store's own payloads, with
/// objects kept as members in text order (duplicates included, so a decoder can refuse them).
///
/// Numbers other than plain integers that fit an `Int64` are kept as `.otherNumber`: the readers built
/// on this type decline them and leave the text to Foundation's decoder, which owns those cases.
enum JSONValue {
    case null
    case bool(Bool)
    case integer(Int64)
    /// A number with a fraction, an exponent, a leading zero, `-0`, or out of `Int64`'s range.
    case otherNumber
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])
}

/// A strict, small JSON reader (RFC 8259) for the store's payloads, a few times faster than
/// Foundation's `JSONDecoder` for the same text.
///
/// It never decides a case Foundation might decide differently: it returns nil for anything that is not
/// plainly valid JSON (control characters in strings, lone surrogates, trailing text, nesting deeper
/// than `maximumDepth`), and the caller then hands the text to Foundation, whose answer — a value or
/// an error naming what is wrong — is the one given. `FastJSONTests` compares both readers.
enum JSONReader {
    /// Deeper nesting is left to Foundation (the store's payloads nest four levels at most).
    static let maximumDepth = 32

    /// The value `text` holds, or nil when the text is not plainly valid JSON.
    static func read(_ text: String) -> JSONValue? {
        var text = text
        return text.withUTF8 { bytes -> JSONValue? in
            var parser = Parser(bytes: bytes)
            guard let value = parser.value(depth: 0) else { return nil }
            parser.skipWhitespace()
            return parser.position == bytes.count ? value : nil
        }
    }

    private struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        var position = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        mutating func skipWhitespace() {
            while position < bytes.count {
                switch bytes[position] {
                case 0x20, 0x09, 0x0A, 0x0D: position += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) -> JSONValue? {
            skipWhitespace()
            guard position < bytes.count, depth <= JSONReader.maximumDepth else { return nil }
            switch bytes[position] {
            case UInt8(ascii: "{"): return object(depth: depth)
            case UInt8(ascii: "["): return array(depth: depth)
            case UInt8(ascii: "\""): return string().map(JSONValue.string)
            case UInt8(ascii: "t"): return literal("true") ? .bool(true) : nil
            case UInt8(ascii: "f"): return literal("false") ? .bool(false) : nil
            case UInt8(ascii: "n"): return literal("null") ? .null : nil
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            default: return nil
            }
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let count = word.utf8CodeUnitCount
            guard bytes.count - position >= count else { return false }
            for index in 0..<count where bytes[position + index] != word.utf8Start[index] { return false }
            position += count
            return true
        }

        mutating func object(depth: Int) -> JSONValue? {
            position += 1  // {
            var members: [(key: String, value: JSONValue)] = []
            // One allocation for the store's objects (at most 16 members: a GCS object's metadata)
            // instead of growing 1, 2, 4, 8, 16 — a tenth of `audit`'s CPU went to regrowing.
            members.reserveCapacity(16)
            skipWhitespace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
                position += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard position < bytes.count, bytes[position] == UInt8(ascii: "\""), let key = string() else { return nil }
                skipWhitespace()
                guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { return nil }
                position += 1
                guard let value = value(depth: depth + 1) else { return nil }
                members.append((key, value))
                skipWhitespace()
                guard position < bytes.count else { return nil }
                switch bytes[position] {
                case UInt8(ascii: ","): position += 1
                case UInt8(ascii: "}"):
                    position += 1
                    return .object(members)
                default: return nil
                }
            }
        }

        mutating func array(depth: Int) -> JSONValue? {
            position += 1  // [
            var elements: [JSONValue] = []
            skipWhitespace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
                position += 1
                return .array(elements)
            }
            while true {
                guard let element = value(depth: depth + 1) else { return nil }
                elements.append(element)
                skipWhitespace()
                guard position < bytes.count else { return nil }
                switch bytes[position] {
                case UInt8(ascii: ","): position += 1
                case UInt8(ascii: "]"):
                    position += 1
                    return .array(elements)
                default: return nil
                }
            }
        }

        /// A string starting at the opening quote; nil for control characters, bad escapes and lone surrogates.
        mutating func string() -> String? {
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
        mutating func unicodeEscape() -> Unicode.Scalar? {
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

        mutating func hex4() -> UInt32? {
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

        /// A number per RFC 8259; `.integer` only for a plain integer in `Int64`'s range.
        mutating func number() -> JSONValue? {
            var negative = false
            if bytes[position] == UInt8(ascii: "-") {
                negative = true
                position += 1
            }
            let digitsStart = position
            while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
            let digits = position - digitsStart
            guard digits > 0 else { return nil }
            var plain = !(digits > 1 && bytes[digitsStart] == UInt8(ascii: "0"))
            if !plain { return nil }  // a leading zero is not JSON
            if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
                plain = false
                position += 1
                let fraction = position
                while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
                guard position > fraction else { return nil }
            }
            if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
                plain = false
                position += 1
                if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
                let exponent = position
                while position < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position]) { position += 1 }
                guard position > exponent else { return nil }
            }
            guard plain, !(negative && digits == 1 && bytes[digitsStart] == UInt8(ascii: "0")), digits <= 19 else {
                return .otherNumber
            }
            var magnitude: UInt64 = 0
            for index in digitsStart..<position { magnitude = magnitude * 10 + UInt64(bytes[index] - UInt8(ascii: "0")) }
            if negative {
                guard magnitude <= UInt64(Int64.max) + 1 else { return .otherNumber }
                return .integer(magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude))
            }
            guard magnitude <= UInt64(Int64.max) else { return .otherNumber }
            return .integer(Int64(magnitude))
        }
    }
}
