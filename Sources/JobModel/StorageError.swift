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
    public var code: StorageErrorCode
    /// What went wrong and, where known, what to do about it.
    public var message: String
    public var httpStatus: Int?
    /// The failing URL without secrets.
    public var url: String?
    /// 408, 429, 5xx, timeouts and connection resets are retryable.
    public var retryable: Bool
    /// Seconds the server asked us to wait (Retry-After).
    public var retryAfter: Double?
    /// The underlying cause (curl or POSIX error text, server message).
    public var cause: String?
    /// downloadSizeExceeded: the object's size and the limit.
    public var total: Int64?
    public var maximum: Int64?

    public init(_ code: StorageErrorCode, _ message: String, httpStatus: Int? = nil, url: String? = nil,
                retryable: Bool = false, retryAfter: Double? = nil, cause: String? = nil,
                total: Int64? = nil, maximum: Int64? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.url = url
        self.retryable = retryable
        self.retryAfter = retryAfter
        self.cause = cause
        self.total = total
        self.maximum = maximum
    }

    public var description: String {
        var text = "\(code.name) (\(code.rawValue)): \(message)"
        if let httpStatus { text += " [HTTP \(httpStatus)]" }
        if let url { text += " <\(url)>" }
        return text
    }
}
