import Foundation
import JobModel

/// A hash a response reports for the whole object, and the header (or metadata) it came from.
struct ServedDigest: Equatable, Sendable {
    var algorithm: ChecksumAlgorithm
    /// Base64 as GCS encodes it: MD5's 16 bytes, CRC32C's 4 bytes big-endian.
    var value: String
    /// Where it came from, for the error message (`Content-MD5`, `Repr-Digest`, `object metadata`).
    var source: String
}

/// The hashes a download's response reports for the whole object, in every form we read:
///
/// - `x-goog-hash: crc32c=…,md5=…` (GCS, the whole object even on a ranged answer; not for a body
///   GCS decompressed on the way) and `x-amz-checksum-crc32c`;
/// - `Digest: md5=…, crc32c=…` (RFC 3230 instance digests: the whole representation, also on a 206);
/// - `Repr-Digest: md5=:…:, crc32c=:…:` (RFC 9530: the whole representation, also on a 206);
/// - `Content-MD5` (RFC 1864) and `Content-Digest` (RFC 9530) digest the message body, which is the
///   whole object only on a 200; on a 206 they cover the part sent and are not read.
///
/// Names are case-insensitive; CRC32C is read as base64 of its 4 big-endian bytes or as 8 hex digits.
/// Each value counts, also of a header sent twice: `verify` then needs the file to match them all.
/// A value that does not decode to a digest of the algorithm's length is ignored (it verifies nothing),
/// as are algorithms we do not compute (`sha-256`).
func servedDigests(_ headers: [String: String], status: Int) -> [ServedDigest] {
    var digests: [ServedDigest] = []
    func add(_ algorithm: ChecksumAlgorithm, _ text: String, from source: String) {
        guard let value = canonicalDigest(text, algorithm: algorithm) else { return }
        digests.append(ServedDigest(algorithm: algorithm, value: value, source: source))
    }
    // Every value a header gives, as for the dictionaries below: one sent twice with two values (a cache
    // or proxy adding its own) cannot be matched by one file, and keeping one of them (the last, or none
    // when two Content-MD5 lines joined read as no digest) let a file pass that matched it or nothing.
    // A body GCS decompressed on the way: its x-goog-hash describes the stored bytes, not the body.
    if !isTranscoded(headers) {
        let goog = (headers["x-goog-hash"] ?? "").split(separator: ",").compactMap { item -> (String, String)? in
            let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            return pair.count == 2 ? (pair[0].lowercased(), pair[1]) : nil
        }
        for (name, value) in goog where name == "md5" { add(.md5, value, from: "x-goog-hash") }
        for (name, value) in goog where name == "crc32c" { add(.crc32c, value, from: "x-goog-hash") }
        for value in (headers["x-amz-checksum-crc32c"] ?? "").split(separator: ",") {
            add(.crc32c, String(value), from: "x-amz-checksum-crc32c")
        }
    }
    let wholeBody = status == 200
    for value in wholeBody ? (headers["content-md5"] ?? "").split(separator: ",") : [] {
        add(.md5, String(value), from: "Content-MD5")
    }
    var dictionaries = [("digest", "Digest"), ("repr-digest", "Repr-Digest")]
    if wholeBody { dictionaries.append(("content-digest", "Content-Digest")) }
    for (name, display) in dictionaries {
        for item in (headers[name] ?? "").split(separator: ",") {
            let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, let algorithm = ChecksumAlgorithm(rawValue: pair[0].lowercased()) else { continue }
            // RFC 9530 values are structured-field byte sequences, `:base64:`; RFC 3230's are bare.
            var value = Substring(pair[1])
            if value.hasPrefix(":") && value.hasSuffix(":") && value.count >= 2 { value = value.dropFirst().dropLast() }
            add(algorithm, String(value), from: display)
        }
    }
    return digests
}

/// Whether GCS served an object stored gzip-compressed decompressed, to a client that did not accept gzip
/// (decompressive transcoding): `x-goog-stored-content-encoding: gzip` and no `Content-Encoding: gzip`.
/// The answer's `x-goog-hash` then describes the stored bytes, and it has no `Content-Length`.
func isTranscoded(_ headers: [String: String]) -> Bool {
    headers["x-goog-stored-content-encoding"]?.lowercased() == "gzip" && headers["content-encoding"]?.lowercased() != "gzip"
}

/// `text` as GCS's base64 of the digest bytes, or nil when it is not a digest of `algorithm`'s length.
func canonicalDigest(_ text: String, algorithm: ChecksumAlgorithm) -> String? {
    let trimmed = text.trimmingCharacters(in: .whitespaces)
    let length = algorithm == .md5 ? 16 : 4
    if let bytes = Data(base64Encoded: trimmed), bytes.count == length { return bytes.base64EncodedString() }
    if algorithm == .crc32c, trimmed.count == 8, let value = UInt32(trimmed, radix: 16) {
        return Data([UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]).base64EncodedString()
    }
    return nil
}

extension Array where Element == ServedDigest {
    /// Whether MD5 must be computed to check these: it is asked for, or it is the one hash offered
    /// (CRC32C is always computed, and is the check of choice: as fast as the disk, MD5 is not).
    func needMD5(asked: Bool) -> Bool {
        asked || (contains { $0.algorithm == .md5 } && !contains { $0.algorithm == .crc32c })
    }

    /// Compares each digest with ours and returns the algorithms verified (in `ChecksumAlgorithm`
    /// order); an MD5 we did not compute is not compared. A difference throws `nonMatchingChecksum`
    /// naming `what` and ending with `remedy`, and carrying `url`. The URL is an autoclosure, made only
    /// for that error: callers pass `redactedURL(…)`, and redacting a download's URL on every verified
    /// download was ~5 % of a small-file download's instructions.
    func verify(md5: String?, crc32c: String, what: String, remedy: String,
                url: @autoclosure () -> String? = nil) throws(StorageError) -> [ChecksumAlgorithm] {
        var verified: Set<ChecksumAlgorithm> = []
        for digest in self {
            let ours: String
            switch digest.algorithm {
            case .md5:
                guard let md5 else { continue }
                ours = md5
            case .crc32c:
                ours = crc32c
            }
            guard ours == digest.value else {
                let name = digest.algorithm == .md5 ? "MD5" : "CRC32C"
                throw StorageError(.nonMatchingChecksum,
                                   "the \(what)'s \(name) \(ours) differs from the \(digest.value) in the server's \(digest.source); \(remedy)",
                                   url: url())
            }
            verified.insert(digest.algorithm)
        }
        return ChecksumAlgorithm.allCases.filter(verified.contains)
    }
}
