import JobModel

/// How the commands show whether a result's hashes were compared with the server's.
///
/// A result's `md5` and `crc32c` are what jobctl computed from the bytes it moved; `verified` lists those
/// it compared with a hash the server reported (a plain-HTTP download without a digest header, a
/// `file://` upload, an MD5 asked of an object that has none compare nothing). Printed alike, a hash that
/// was never compared read as a verified one. Results logged before `verified` was recorded are shown as
/// they always were: nothing says what was compared.
enum VerifiedHashes {
    /// What `show` appends to a hash jobctl computed but did not compare.
    static let unverifiedNote = " (unverified: computed by jobctl, not compared with the server's)"

    /// What `audit`'s table appends to such a hash.
    static let unverifiedMark = " (unverified)"

    /// Whether `algorithm`'s hash in `result` was computed and not compared: false when it was compared,
    /// when the result has no such hash, and for results logged before `verified` existed.
    static func isUnverified(_ algorithm: ChecksumAlgorithm, in result: JobResult) -> Bool {
        guard let verified = result.verified else { return false }
        let computed = algorithm == .md5 ? result.md5 : result.crc32c
        return computed != nil && !verified.contains(algorithm)
    }

    /// `audit`'s `verified` field in CSV: the algorithms compared separated by a space, `none` when
    /// nothing was, empty when the result does not say (no result, or one logged before it was recorded).
    static func csvText(_ verified: [String]?) -> String? {
        guard let verified else { return nil }
        return verified.isEmpty ? "none" : verified.joined(separator: " ")
    }
}
