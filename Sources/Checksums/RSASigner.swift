import CCrypto
import Foundation

/// Why a private key could not be read or used. Never carries key material.
public struct RSASignerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, worded for "the key in FILE (field) …".
    public let reason: String

    public var description: String { reason }
}

/// RS256 (RSASSA-PKCS1-v1_5 with SHA-256) signatures with an RSA private key read from PEM — the one
/// file that calls libcrypto's key and signing functions (`Digest.swift` holds the hashing ones).
///
/// Owns its `EVP_PKEY` and frees it in `deinit`. Not `Sendable`: create one per signature (reading a
/// key takes well under a millisecond), keep the PEM text where it must be shared.
/// See https://www.openssl.org/docs/man3.0/man3/PEM_read_bio_PrivateKey.html and
/// https://www.openssl.org/docs/man3.0/man3/EVP_DigestSign.html
public final class RSASigner {
    private let key: OpaquePointer

    /// Reads an unencrypted RSA private key in PEM form (`-----BEGIN PRIVATE KEY-----` or
    /// `-----BEGIN RSA PRIVATE KEY-----`). An encrypted key fails instead of asking for a passphrase.
    public init(pem: String) throws(RSASignerError) {
        let bytes = Array(pem.utf8)
        guard !bytes.isEmpty, bytes.count < Int(Int32.max) else {
            throw RSASignerError(reason: "is empty; it must hold a PEM private key")
        }
        defer { ERR_clear_error() }
        let read = bytes.withUnsafeBytes { buffer in
            jobctl_read_private_key_pem(buffer.baseAddress, Int32(buffer.count))
        }
        guard let read else {
            throw RSASignerError(reason: "is not a readable PEM private key (or it is encrypted); download a new key in JSON form")
        }
        guard jobctl_evp_pkey_is_rsa(read) == 1 else {
            EVP_PKEY_free(read)
            throw RSASignerError(reason: "is not an RSA key; service-account keys are RSA keys")
        }
        key = read
    }

    deinit { EVP_PKEY_free(key) }

    /// The RS256 signature of `message`.
    public func signSHA256(_ message: Data) throws(RSASignerError) -> [UInt8] {
        defer { ERR_clear_error() }
        guard let context = EVP_MD_CTX_new() else {
            throw RSASignerError(reason: "could not be used: out of memory")
        }
        defer { EVP_MD_CTX_free(context) }
        try check(EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key), "EVP_DigestSignInit")
        let bytes = [UInt8](message)
        var length = 0
        try check(EVP_DigestSign(context, nil, &length, bytes, bytes.count), "EVP_DigestSign")
        var signature = [UInt8](repeating: 0, count: length)
        try check(EVP_DigestSign(context, &signature, &length, bytes, bytes.count), "EVP_DigestSign")
        return Array(signature.prefix(length))
    }

    /// Every libcrypto return code of this file is checked here (1 is success).
    private func check(_ result: Int32, _ call: String) throws(RSASignerError) {
        guard result == 1 else { throw RSASignerError(reason: "could not sign (\(call) failed)") }
    }
}
