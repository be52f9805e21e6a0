import Foundation

/// The error codes of Cloud Storage for Firebase (`StorageErrorCode`), with their raw values.
public enum StorageErrorCode: Int, Codable, Sendable, CaseIterable, Hashable {
    case unknown = -13000
    case objectNotFound = -13010
    case bucketNotFound = -13011
    case projectNotFound = -13012
    case quotaExceeded = -13013
    case unauthenticated = -13020
    case unauthorized = -13021
    case retryLimitExceeded = -13030
    case nonMatchingChecksum = -13031
    case downloadSizeExceeded = -13032
    case cancelled = -13040
    case invalidArgument = -13050
    case bucketMismatch = -13051
    case internalError = -13052
    case pathError = -13053

    /// The Firebase name, e.g. `objectNotFound`.
    public var name: String {
        switch self {
        case .unknown: "unknown"
        case .objectNotFound: "objectNotFound"
        case .bucketNotFound: "bucketNotFound"
        case .projectNotFound: "projectNotFound"
        case .quotaExceeded: "quotaExceeded"
        case .unauthenticated: "unauthenticated"
        case .unauthorized: "unauthorized"
        case .retryLimitExceeded: "retryLimitExceeded"
        case .nonMatchingChecksum: "nonMatchingChecksum"
        case .downloadSizeExceeded: "downloadSizeExceeded"
        case .cancelled: "cancelled"
        case .invalidArgument: "invalidArgument"
        case .bucketMismatch: "bucketMismatch"
        case .internalError: "internalError"
        case .pathError: "pathError"
        }
    }

    /// Looks a code up by its Firebase name.
    public init?(name: String) {
        guard let code = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = code
    }
}

/// A typed storage failure: what went wrong, where, and whether trying again can help.
///
/// Never carries credentials: `url` is stripped of query parameters that hold secrets before it is set.
public struct StorageError: Error, Codable, Sendable, Equatable, Hashable, CustomStringConvertible {
    /// The stored fields, one for one with the public properties (documented there); their synthesized
    /// `Codable`, `Equatable` and `Hashable` are the error's own, so its JSON is what it always was.
    fileprivate struct Fields: Codable, Sendable, Equatable, Hashable {
        var code: StorageErrorCode
        var message: String
        var httpStatus: Int?
        var url: String?
        var retryable: Bool
        var retryAfter: Double?
        var cause: String?
        var total: Int64?
        var maximum: Int64?
    }

    /// The fields' box: an error is ~120 bytes of strings and optionals, carried by every typed `throws`
    /// and every record, outcome and state that may hold one; boxed, a copy is one reference (see
    /// `CopyOnWrite`).
    private var storage: CopyOnWrite<Fields>

    /// The box's identity, for tests that check a copy shares it.
    var storageIdentity: ObjectIdentifier { storage.identity }

    public var code: StorageErrorCode {
        get { storage.fields.code }
        set { storage.fields.code = newValue }
    }
    /// What went wrong and, where known, what to do about it.
    public var message: String {
        get { storage.fields.message }
        set { storage.fields.message = newValue }
    }
    public var httpStatus: Int? {
        get { storage.fields.httpStatus }
        set { storage.fields.httpStatus = newValue }
    }
    /// The failing URL without secrets.
    public var url: String? {
        get { storage.fields.url }
        set { storage.fields.url = newValue }
    }
    /// 408, 429, 5xx, timeouts and connection resets are retryable.
    public var retryable: Bool {
        get { storage.fields.retryable }
        set { storage.fields.retryable = newValue }
    }
    /// Seconds the server asked us to wait (Retry-After).
    public var retryAfter: Double? {
        get { storage.fields.retryAfter }
        set { storage.fields.retryAfter = newValue }
    }
    /// The underlying cause (curl or POSIX error text, server message).
    public var cause: String? {
        get { storage.fields.cause }
        set { storage.fields.cause = newValue }
    }
    /// downloadSizeExceeded: the object's size and the limit.
    public var total: Int64? {
        get { storage.fields.total }
        set { storage.fields.total = newValue }
    }
    public var maximum: Int64? {
        get { storage.fields.maximum }
        set { storage.fields.maximum = newValue }
    }

    public init(_ code: StorageErrorCode, _ message: String, httpStatus: Int? = nil, url: String? = nil,
                retryable: Bool = false, retryAfter: Double? = nil, cause: String? = nil,
                total: Int64? = nil, maximum: Int64? = nil) {
        storage = CopyOnWrite(Fields(code: code, message: message, httpStatus: httpStatus, url: url, retryable: retryable,
                                     retryAfter: retryAfter, cause: cause, total: total, maximum: maximum))
    }

    public var description: String {
        var text = "\(code.name) (\(code.rawValue)): \(message)"
        if let httpStatus { text += " [HTTP \(httpStatus)]" }
        if let url { text += " <\(url)>" }
        return text
    }

    /// Decodes the fields at the top level, as the plain struct did.
    public init(from decoder: any Decoder) throws {
        storage = try CopyOnWrite(from: decoder)
    }

    /// Encodes the fields alone, at the top level: the box adds no key and no nesting.
    public func encode(to encoder: any Encoder) throws {
        try storage.encode(to: encoder)
    }
}

extension StorageError: CustomReflectable {
    /// The fields, not the box: `dump` and test failures show an error as they did when the fields were
    /// its stored properties.
    public var customMirror: Mirror {
        storage.mirror(of: self)
    }
}

extension StorageError {
    /// An object too large for a download to memory, in one wording on every backend: what it is (the
    /// reference, or "the object" where the URL beside the message names it), its size when known, the
    /// limit, and the two ways out.
    public static func downloadSizeExceeded(_ object: String, size: Int64?, maximum: Int64, url: String? = nil) -> StorageError {
        let sized = size.map { "is \($0) bytes, more than" } ?? "is larger than"
        return StorageError(.downloadSizeExceeded,
                            "\(object) \(sized) max_size \(maximum) bytes; raise max_size or use download-file",
                            url: url, total: size, maximum: maximum)
    }
}
