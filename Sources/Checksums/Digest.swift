import CCrypto
import Foundation

/// Streaming MD5 and SHA-256 over OpenSSL's EVP interface (the one file that calls libcrypto).
///
/// Not `Sendable`: one digest belongs to one transfer. See https://www.openssl.org/docs/man3.0/man3/EVP_DigestInit.html
public final class Digest {
    public enum Algorithm: Sendable { case md5, sha256 }

    private let context: OpaquePointer
    public let algorithm: Algorithm

    public init(_ algorithm: Algorithm) {
        self.algorithm = algorithm
        // EVP_MD_CTX_new only fails when malloc fails; there is nothing useful to do then.
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new: out of memory") }
        self.context = context
        EVP_DigestInit_ex(context, Fetched.algorithm(algorithm), nil)
    }

    deinit { EVP_MD_CTX_free(context) }

    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        EVP_DigestUpdate(context, base, bytes.count)
    }

    public func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    /// The digest; the object must not be updated afterwards.
    public func finalize() -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &output, &length)
        return Array(output.prefix(Int(length)))
    }

    public static func md5(_ data: Data) -> [UInt8] {
        let digest = Digest(.md5)
        digest.update(data)
        return digest.finalize()
    }

    /// The SHA-256 of `data` in lowercase hex, in one call (no context object kept).
    public static func sha256Hex(_ data: Data) -> String {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let done = data.withUnsafeBytes { bytes in
            // No bytes may come with no base address: EVP_DigestUpdate returns before reading when the count is 0.
            EVP_Digest(bytes.baseAddress, bytes.count, &output, &length, Fetched.sha256, nil)
        }
        // EVP_Digest fails only when memory runs out, as EVP_MD_CTX_new does above.
        guard done == 1 else { fatalError("EVP_Digest(SHA-256) failed") }
        return hex(output.prefix(Int(length)))
    }

    /// The algorithms, fetched from OpenSSL's default provider once. Passing `EVP_sha256()` instead makes
    /// every `EVP_DigestInit_ex` fetch it again (OpenSSL 3's "implicit fetch", a lock and a name lookup):
    /// for a 64-byte `download-memory` result that was most of the ~15,000 instructions its hash cost.
    /// See https://www.openssl.org/docs/man3.0/man7/crypto.html ("Performance").
    private enum Fetched {
        /// A fetched method is immutable and may be shared between threads (crypto(7)); it is never freed.
        struct Method: @unchecked Sendable { let pointer: OpaquePointer }

        static let md5Method = fetch("MD5", fallback: EVP_md5())
        static let sha256Method = fetch("SHA256", fallback: EVP_sha256())
        static var sha256: OpaquePointer { sha256Method.pointer }

        static func algorithm(_ algorithm: Algorithm) -> OpaquePointer {
            algorithm == .md5 ? md5Method.pointer : sha256Method.pointer
        }

        /// The explicitly fetched method, or the legacy one (fetched implicitly per use) when the provider
        /// does not offer it (a FIPS configuration without MD5, say): slower, never wrong.
        private static func fetch(_ name: String, fallback: OpaquePointer?) -> Method {
            guard let method = EVP_MD_fetch(nil, name, nil) ?? fallback else {
                fatalError("OpenSSL offers no \(name) digest")
            }
            return Method(pointer: method)
        }
    }

    /// Lowercase hex of `bytes`. By hand: `String(format: "%02x")` per byte cost ~8 % of the store's
    /// time in a drain of small downloads (every `download-memory` result is stored under its SHA-256).
    public static func hex<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
