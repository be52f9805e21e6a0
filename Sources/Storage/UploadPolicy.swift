import JobModel

/// Refuses uploads of executables to chosen buckets, as projects on Firebase's free plan do.
///
/// Configured from `JOBCTL_REFUSE_EXECUTABLES` (`StorageConfiguration.executableUploadPolicy`):
/// bucket names, or `*` for every bucket.
public struct UploadPolicy: Sendable, Equatable {
    /// The extensions refused (lower case, no dot).
    public static let executableExtensions: Set<String> = ["exe", "dll", "bat", "apk", "ipa"]

    /// The buckets that refuse executables; `*` means all.
    public let refusingBuckets: Set<String>

    /// A policy refusing executables in `buckets` (`*` = every bucket); an empty set allows everything.
    public init(refusingExecutablesIn buckets: Set<String>) {
        refusingBuckets = buckets
    }

    /// Throws `unauthorized` when `reference`'s bucket refuses executables and either the destination
    /// name or `sourceName` (the local file's name, for upload-file) ends in a refused extension.
    public func check(reference: StorageReference, sourceName: String?) throws(StorageError) {
        guard refusingBuckets.contains("*") || refusingBuckets.contains(reference.bucket) else { return }
        for name in [reference.name, sourceName].compactMap({ $0 }) {
            guard let ext = Self.executableExtension(of: name) else { continue }
            let bucket = reference.bucket.isEmpty ? "file:///" : reference.bucket
            throw StorageError(.unauthorized,
                               "bucket '\(bucket)' refuses executable uploads (.\(ext)); this mirrors the Firebase free plan — "
                                   + "remove the bucket from JOBCTL_REFUSE_EXECUTABLES to allow them")
        }
    }

    /// The refused extension `name` ends in (lower case), if any.
    static func executableExtension(of name: String) -> String? {
        let last = name.split(separator: "/").last.map(String.init) ?? name
        guard let dot = last.lastIndex(of: ".") else { return nil }
        let ext = last[last.index(after: dot)...].lowercased()
        return executableExtensions.contains(ext) ? ext : nil
    }
}
