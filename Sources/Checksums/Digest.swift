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
        let md = algorithm == .md5 ? EVP_md5() : EVP_sha256()
        EVP_DigestInit_ex(context, md, nil)
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

    public static func sha256Hex(_ data: Data) -> String {
        let digest = Digest(.sha256)
        digest.update(data)
        return hex(digest.finalize())
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
