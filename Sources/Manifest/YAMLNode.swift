import JobModel

// MARK: - Positions

/// A place in the manifest text: 1-based line and column (columns count Unicode scalars, as libyaml does).
struct SourceMark: Sendable, Hashable, Comparable, CustomStringConvertible {
    var line: Int
    var column: Int

    init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    /// The start of the text, where errors about the manifest as a whole point.
    static let start = SourceMark(line: 1, column: 1)

    static func < (lhs: SourceMark, rhs: SourceMark) -> Bool {
        (lhs.line, lhs.column) < (rhs.line, rhs.column)
    }

    var description: String { "\(line):\(column)" }
}

// MARK: - Node tree

/// How a scalar was written; quoting decides whether `5` is a number or a string.
enum ScalarStyle: Sendable, Hashable {
    case plain, singleQuoted, doubleQuoted, literal, folded
}

/// A scalar as written, before any schema gives it a type.
struct YAMLScalar: Sendable, Hashable {
    var value: String
    var style: ScalarStyle
    /// The explicit tag, expanded (`!!str` → `tag:yaml.org,2002:str`); nil when none was written.
    var tag: String?
    var mark: SourceMark
}

/// One key/value pair of a mapping, in document order.
struct YAMLPair: Sendable, Hashable {
    var key: YAMLNode
    var value: YAMLNode
}

/// A YAML document as a tree in which every node knows where it was written.
///
/// Aliases are resolved (an alias becomes a copy of its anchor's node, with the anchor's positions),
/// and `<<` merge keys are applied, so consumers never see either.
indirect enum YAMLNode: Sendable, Hashable {
    case scalar(YAMLScalar)
    case sequence([YAMLNode], SourceMark)
    case mapping([YAMLPair], SourceMark)

    var mark: SourceMark {
        switch self {
        case .scalar(let scalar): scalar.mark
        case .sequence(_, let mark), .mapping(_, let mark): mark
        }
    }

    /// What sort of node it is, without its value: "a mapping", "a number", "a string", "null".
    var typeSummary: String {
        switch self {
        case .mapping: return "a mapping"
        case .sequence: return "a sequence"
        case .scalar(let scalar):
            switch scalar.resolvedType {
            case .null: return "null"
            case .bool: return "a boolean"
            case .int, .float: return "a number"
            case .string: return "a string"
            }
        }
    }

    /// What the node is, for messages: "a mapping", "a sequence", "the number 5", "the string 'x'", "null".
    var summary: String {
        switch self {
        case .mapping: return "a mapping"
        case .sequence: return "a sequence"
        case .scalar(let scalar):
            switch scalar.resolvedType {
            case .null: return "null"
            case .bool: return "the boolean \(scalar.value)"
            case .int, .float: return "the number \(scalar.value)"
            case .string: return "the string '\(scalar.value)'"
            }
        }
    }
}

// MARK: - Scalar resolution

extension YAMLScalar {
    /// The YAML 1.1 core types a plain scalar resolves to.
    enum ResolvedType: Sendable, Hashable {
        case null, bool, int, float, string
    }

    static let stringTag = "tag:yaml.org,2002:str"
    static let intTag = "tag:yaml.org,2002:int"
    static let nullTag = "tag:yaml.org,2002:null"
    static let binaryTag = "tag:yaml.org,2002:binary"

    /// The scalar's tag as written (`!!int` for YAML's own), or "no tag".
    var shownTag: String { tag.map(Self.shown(tag:)) ?? "no tag" }

    /// `tag` as a manifest writes it: `!!int` for YAML's own `tag:yaml.org,2002:int`, others as they are.
    static func shown(tag: String) -> String {
        tag.hasPrefix("tag:yaml.org,2002:") ? "!!" + tag.dropFirst("tag:yaml.org,2002:".count) : tag
    }

    /// The type YAML gives this scalar: quoted and block scalars are strings, plain ones are resolved by
    /// their text (YAML 1.1 rules, so `yes` is a boolean — which is why custom metadata values must be quoted).
    var resolvedType: ResolvedType {
        switch tag {
        case Self.stringTag?: return .string
        case Self.nullTag?: return .null
        case Self.intTag?: return .int
        case "tag:yaml.org,2002:bool"?: return .bool
        case "tag:yaml.org,2002:float"?: return .float
        case .some: return .string
        case nil: break
        }
        guard style == .plain else { return .string }
        switch value {
        case "", "~", "null", "Null", "NULL": return .null
        case "true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes", "YES", "no", "No", "NO",
             "on", "On", "ON", "off", "Off", "OFF", "y", "Y", "n", "N":
            return .bool
        default: break
        }
        if integerValue != nil { return .int }
        if Self.looksLikeFloat(value) { return .float }
        return .string
    }

    /// Whether the scalar is null: the same answer as `resolvedType == .null`, without trying the
    /// number forms (every string field asks this).
    var isNull: Bool {
        switch tag {
        case Self.nullTag?: return true
        case .some: return false
        case nil: break
        }
        guard style == .plain else { return false }
        switch value {
        case "", "~", "null", "Null", "NULL": return true
        default: return false
        }
    }

    /// What a scalar says as an integer.
    enum IntegerReading: Sendable, Hashable {
        /// Not an integer at all (quoted, a word, a float such as `1e400`).
        case notAnInteger
        /// Written as an integer, but beyond what 64 bits hold.
        case outOfRange
        /// Decimal digits with a zero first (`010`): octal 8 in YAML 1.1, decimal 10 in YAML 1.2 (see
        /// `DecimalText`); only `decimalReading` says this.
        case leadingZero
        case value(Int)
    }

    /// The integer a plain (or `!!int`) scalar says in the grammar of every number a user types
    /// (`DecimalText`: digits only), a minus allowed so that a negative value is reported as one. YAML's
    /// other integer forms (`+4`, `0x10`, `0o17`, `1_000`) are `notAnInteger` here, and `010` (octal 8 in
    /// YAML 1.1, decimal 10 in YAML 1.2) is `leadingZero`: fields take numbers as the command line and the
    /// environment do, not each in a grammar of its own.
    var decimalReading: IntegerReading {
        guard tag == Self.intTag || (tag == nil && style == .plain) else { return .notAnInteger }
        let negative = value.hasPrefix("-")
        let digits = negative ? value.dropFirst() : Substring(value)
        guard DecimalText.isDigits(digits) else { return .notAnInteger }
        guard !DecimalText.hasLeadingZero(digits) else { return .leadingZero }
        guard let number = Int((negative ? "-" : "") + digits) else { return .outOfRange }
        return .value(number)
    }

    /// The integer a plain (or `!!int`) scalar denotes: decimal with optional sign, `0x` hex, `0o` octal;
    /// `_` separators are allowed. Nil for quoted scalars, anything else, and integers beyond 64 bits.
    var integerValue: Int? {
        if case .value(let value) = integerReading { return value }
        return nil
    }

    /// As `integerValue`, telling an integer too large for 64 bits from text that is no integer.
    var integerReading: IntegerReading {
        guard tag == Self.intTag || (tag == nil && style == .plain) else { return .notAnInteger }
        guard let first = value.utf8.first, first == UInt8(ascii: "-") || first == UInt8(ascii: "+") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
            return .notAnInteger
        }
        var text = Substring(value.contains("_") ? value.replacingOccurrences(of: "_", with: "") : value)
        var negative = false
        if let sign = text.first, sign == "-" || sign == "+" {
            negative = sign == "-"
            text = text.dropFirst()
        }
        var radix = 10
        if text.hasPrefix("0x") { radix = 16; text = text.dropFirst(2) } else if text.hasPrefix("0o") { radix = 8; text = text.dropFirst(2) }
        let digits: (Character) -> Bool = switch radix {
        case 16: { $0.isASCII && $0.isHexDigit }
        case 8: { ("0"..."7").contains($0) }
        default: { $0.isASCII && $0.isNumber }
        }
        guard !text.isEmpty, text.allSatisfy(digits) else { return .notAnInteger }
        // Parsed with its sign so Int.min is in range; nil from here means too many digits.
        guard let value = Int((negative ? "-" : "") + text, radix: radix) else { return .outOfRange }
        return .value(value)
    }

    private static func looksLikeFloat(_ text: String) -> Bool {
        let lowered = text.lowercased()
        if [".inf", "+.inf", "-.inf", ".nan"].contains(lowered) { return true }
        guard text.contains(where: \.isNumber), text.allSatisfy({ $0.isASCII && ($0.isNumber || "+-.eE_".contains($0)) }) else {
            return false
        }
        return Double(text.replacingOccurrences(of: "_", with: "")) != nil
    }
}
