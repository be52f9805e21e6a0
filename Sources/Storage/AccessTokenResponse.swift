import Foundation
import JobModel

/// An access token as a token endpoint or the metadata server answered it (RFC 6749 §5.1), checked as
/// hostile input: at most `sizeLimit` bytes, a JSON object, `access_token` a valid RFC 6750 bearer token,
/// `token_type` (when present) `Bearer`, `expires_in` (when present) within `lifetimeRange`.
struct AccessTokenResponse: Equatable {
    let token: String
    /// Seconds the token is valid from when it was received.
    let lifetime: Int

    /// Token responses are a few hundred bytes; a larger one is refused.
    static let sizeLimit = 16 * 1024
    /// `expires_in` accepted: one second to one day (Google issues one hour).
    static let lifetimeRange = 1...86_400
    /// Assumed when `expires_in` is missing (RFC 6749 makes it optional; Google always sends it).
    static let defaultLifetime = 3600

    /// Parses `body`; `from` names the endpoint in errors ("the token endpoint of service account …").
    /// The body and the token are never quoted.
    init(parsing body: Data, from what: String) throws(StorageError) {
        func malformed(_ detail: String) -> StorageError {
            StorageError(.unauthenticated, "\(what) answered with \(detail); the answer is not shown (it may hold a token). "
                             + "Check that the endpoint is a Google OAuth 2.0 token endpoint")
        }
        guard body.count <= Self.sizeLimit else { throw malformed("more than 16 KiB, too much for a token") }
        guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
            // A JSON object that breaks off was cut on the way (no Content-Length to show it: the close ended
            // it), not a wrong endpoint: asking again can help. One that ends with its `}` is whole and
            // unreadable (a number beyond range, bad text): asking again gets the same.
            let isSpace: (UInt8) -> Bool = { [0x20, 0x09, 0x0A, 0x0D].contains($0) }
            let (first, last) = (body.first(where: { !isSpace($0) }), body.last(where: { !isSpace($0) }))
            if first == UInt8(ascii: "{"), last == UInt8(ascii: "}") {
                throw malformed("a JSON object that cannot be read (a number out of range, or text that is not JSON)")
            }
            if first == UInt8(ascii: "{") {
                throw StorageError(.unauthenticated, "\(what) answered with a JSON object that breaks off (cut short on the way); "
                                       + "the answer is not shown (it may hold a token). A retry asks again", retryable: true)
            }
            throw malformed("something that is not a JSON object")
        }
        guard let token = object["access_token"] as? String else { throw malformed("no 'access_token' text") }
        try BearerToken.validate(token, source: "the access_token \(what) sent")
        if let type = object["token_type"] {
            guard let text = type as? String, text.lowercased() == "bearer" else {
                throw malformed("a 'token_type' other than Bearer")
            }
        }
        var lifetime = Self.defaultLifetime
        if let value = object["expires_in"] {
            // JSONSerialization gives NSNumber for numbers and for true/false (type "c"), which is refused.
            guard let number = value as? NSNumber, String(cString: number.objCType) != "c",
                  number.doubleValue.rounded() == number.doubleValue,
                  let seconds = Int(exactly: number.doubleValue), Self.lifetimeRange.contains(seconds) else {
                throw malformed("an 'expires_in' that is not a whole number of seconds between 1 and 86400")
            }
            lifetime = seconds
        }
        self.token = token
        self.lifetime = lifetime
    }
}
