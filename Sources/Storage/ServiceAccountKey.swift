import Checksums
import Foundation
import JobModel

/// A service-account key file's usable part: who signs (`client_email`), with what (`private_key`), and
/// where the signed assertion is exchanged for an access token (`token_uri`).
///
/// `description` names the account and the file, never the key.
public struct ServiceAccountKey: Sendable, Equatable, CustomStringConvertible {
    /// The key file, for errors ("the key file … (private_key) …").
    let path: String
    let clientEmail: String
    /// The PEM text; kept as text because an `RSASigner` is not `Sendable`.
    let privateKeyPEM: String
    let tokenURI: String

    /// The one scope jobctl asks for: read and write objects.
    static let scope = "https://www.googleapis.com/auth/devstorage.read_write"
    /// Assertions are valid for one hour, the most Google accepts.
    static let assertionLifetime = 3600

    /// Checks the key can sign, so a bad key fails at start.
    init(path: String, clientEmail: String, privateKeyPEM: String, tokenURI: String) throws(RSASignerError) {
        self.path = path
        self.clientEmail = clientEmail
        self.privateKeyPEM = privateKeyPEM
        self.tokenURI = tokenURI
        _ = try RSASigner(pem: privateKeyPEM)
    }

    /// The JWT bearer assertion (RFC 7523 §2.1) for the token endpoint, issued at `issuedAt` (seconds
    /// since 1970): RS256 over base64url(header).base64url(claims).
    func assertion(issuedAt: Int) throws(StorageError) -> String {
        let header = #"{"alg":"RS256","typ":"JWT"}"#
        let claims: [String: Any] = ["iss": clientEmail, "scope": Self.scope, "aud": tokenURI,
                                     "iat": issuedAt, "exp": issuedAt + Self.assertionLifetime]
        // JSONSerialization of strings and integers cannot fail.
        let claimsJSON = (try? JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys])) ?? Data()
        let signingInput = Base64URL.encode(Data(header.utf8)) + "." + Base64URL.encode(claimsJSON)
        do {
            let signature = try RSASigner(pem: privateKeyPEM).signSHA256(Data(signingInput.utf8))
            return signingInput + "." + Base64URL.encode(Data(signature))
        } catch {
            throw StorageError(.unauthenticated, "the key file \(path) is not usable: its private_key \(error.reason)")
        }
    }

    public var description: String { "service account \(clientEmail) (key file \(path))" }
}

/// base64url without padding (RFC 7515 §2), as JWTs use it.
enum Base64URL {
    static func encode(_ data: Data) -> String {
        data.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
