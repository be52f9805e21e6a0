import Foundation
import JobModel

/// Refuses uploads of executables to chosen destinations, as projects on Firebase's free plan do.
///
/// Configured from `JOBCTL_REFUSE_EXECUTABLES` (`StorageConfiguration.executableUploadPolicy`), a
/// comma-separated list applied to the uploads of every scheme (GCS, local buckets, HTTP PUT):
///
/// | entry | refuses uploads to |
/// |---|---|
/// | `*` | everything |
/// | `gs://NAME`, `file://NAME` | that GCS bucket, that named local bucket |
/// | `http://HOST[:PORT]`, `https://HOST[:PORT]` | that server |
/// | `file:///DIR` or `/DIR` | `file:///` paths in that folder or below it (`file:///` alone: every one) |
/// | `gs://*`, `file://*`, `http://*`, `https://*` | every destination of that scheme |
/// | `NAME` | a bucket of that name (GCS or local) or a server with that `host[:port]` |
///
/// Bucket names are compared exactly and host names without regard to case.
public struct UploadPolicy: Sendable, Equatable {
    /// The extensions refused (lower case, no dot).
    public static let executableExtensions: Set<String> = ["exe", "dll", "bat", "apk", "ipa"]

    /// The configured entries (see the type's documentation); empty allows everything.
    public let refusingBuckets: Set<String>
    /// How a refusal names the setting that lists the entries: `JOBCTL_REFUSE_EXECUTABLES`, or "the
    /// configuration file's refuse_executables" when the file set it (`SettingOrigins.jobName`: the
    /// refusal is a job's error, kept in the event log, so no path or line of this machine's file).
    public let setting: String

    /// A policy refusing executables in `buckets` (entries as documented on the type); an empty set
    /// allows everything.
    public init(refusingExecutablesIn buckets: Set<String>, setting: String = "JOBCTL_REFUSE_EXECUTABLES") {
        refusingBuckets = Set(buckets.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
        self.setting = setting
    }

    /// Throws `unauthorized` when `reference` is a destination that refuses executables and either the
    /// destination name or `sourceName` (the local file's name, for upload-file) ends in a refused
    /// extension. The message names the destination as the user knows it (`gs://photos`, the local
    /// folder, the server) and the entry that refused it.
    public func check(reference: StorageReference, sourceName: String?) throws(StorageError) {
        guard let entry = refusingEntry(for: reference) else { return }
        for name in [reference.name, sourceName].compactMap({ $0 }) {
            guard let ext = Self.executableExtension(of: name) else { continue }
            throw StorageError(.unauthorized,
                               "\(Self.destinationDescription(reference)) refuses executable uploads (.\(ext)): "
                                   + "\(setting) lists '\(entry)', mirroring the Firebase free plan — "
                                   + "take that entry out of \(setting) to allow them")
        }
    }

    /// The first configured entry (in sorted order, so messages are stable) that covers `reference`.
    public func refusingEntry(for reference: StorageReference) -> String? {
        refusingBuckets.sorted().first { Self.entry($0, covers: reference) }
    }

    /// Whether `entry` is one the policy understands: `*`, an absolute folder (`/DIR`), `SCHEME://NAME`
    /// or `SCHEME://*` for gs, file (`file:///DIR` too), http and https, or a bare bucket or host name.
    /// A setting with any other entry is refused, so a typo never silently allows executables.
    static func isValidEntry(_ entry: String) -> Bool {
        if entry == "*" { return true }
        if entry.hasPrefix("/") { return entry.count > 1 && !entry.unicodeScalars.contains { $0.properties.generalCategory == .control } }
        if let separator = entry.range(of: "://") {
            let scheme = entry[..<separator.lowerBound].lowercased()
            let rest = String(entry[separator.upperBound...])
            guard ["gs", "file", "http", "https"].contains(scheme), !rest.isEmpty else { return false }
            if rest == "*" || (scheme == "file" && rest.hasPrefix("/")) { return true }
            return isName(trimmingSlashes(rest), allowingPort: scheme.hasPrefix("http"))
        }
        return isName(entry, allowingPort: true)
    }

    private static func isName(_ name: String, allowingPort: Bool) -> Bool {
        let extra: String = allowingPort ? "-_.:[]" : "-_."
        return !name.isEmpty && !name.allSatisfy({ $0 == "." })
            && name.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || extra.unicodeScalars.contains($0)) }
    }

    /// Whether one configured entry covers `reference`.
    static func entry(_ entry: String, covers reference: StorageReference) -> Bool {
        if entry == "*" { return true }
        if entry.hasPrefix("/") { return reference.scheme == .file && reference.bucket.isEmpty && isInFolder(reference, entry) }
        guard let separator = entry.range(of: "://") else {
            // A bare name: a bucket of that name, or a server with that host[:port].
            switch reference.scheme {
            case .gs, .file: return !reference.bucket.isEmpty && reference.bucket == entry
            case .http, .https: return reference.bucket.lowercased() == StorageReference.canonicalHost(entry).lowercased()
            }
        }
        let scheme = entry[..<separator.lowerBound].lowercased()
        let rest = String(entry[separator.upperBound...])
        guard scheme == reference.scheme.rawValue else { return false }
        if rest == "*" { return true }
        switch reference.scheme {
        case .gs:
            return reference.bucket == trimmingSlashes(rest)
        case .file:
            if rest.hasPrefix("/") { return reference.bucket.isEmpty && isInFolder(reference, rest) }
            return !reference.bucket.isEmpty && reference.bucket == trimmingSlashes(rest)
        case .http, .https:
            return reference.bucket.lowercased() == StorageReference.canonicalHost(trimmingSlashes(rest)).lowercased()
        }
    }

    /// Whether the `file:///` reference lies in `folder` (an absolute path) or below it.
    private static func isInFolder(_ reference: StorageReference, _ folder: String) -> Bool {
        // Cut at `/` bytes and compared byte for byte, as the filesystem does (see `SlashSeparatedPath`).
        let parts = SlashSeparatedPath.parts(of: folder)
        let path = SlashSeparatedPath.parts(of: reference.fullPath)
        return path.count > parts.count && zip(path, parts).allSatisfy { $0.utf8.elementsEqual($1.utf8) }
    }

    private static func trimmingSlashes(_ text: String) -> String {
        var trimmed = Substring(text)
        while trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        return String(trimmed)
    }

    /// The destination as a user knows it: `bucket 'gs://photos'`, `local bucket 'file://drop'`, `local
    /// folder '/srv/in'` (a `file:///` path's folder), `server 'https://host:8443'`.
    static func destinationDescription(_ reference: StorageReference) -> String {
        switch reference.scheme {
        case .gs:
            return "bucket 'gs://\(reference.bucket)'"
        case .file where reference.bucket.isEmpty:
            let folder = SlashSeparatedPath.parts(of: reference.fullPath).dropLast().joined(separator: "/")
            return "local folder '/\(folder)'"
        case .file:
            return "local bucket 'file://\(reference.bucket)'"
        case .http, .https:
            return "server '\(reference.scheme.rawValue)://\(reference.bucket)'"
        }
    }

    /// The refused extension `name` ends in (lower case), if any.
    static func executableExtension(of name: String) -> String? {
        let last = SlashSeparatedPath.lastPart(of: name).map(String.init) ?? name
        guard let dot = last.lastIndex(of: ".") else { return nil }
        let ext = last[last.index(after: dot)...].lowercased()
        return executableExtensions.contains(ext) ? ext : nil
    }
}

extension StorageConfiguration {
    /// The executable-upload policy from `executableUploadPolicy` (`JOBCTL_REFUSE_EXECUTABLES`, or the
    /// configuration file's `refuse_executables`, named so in its refusals).
    public var uploadPolicy: UploadPolicy {
        UploadPolicy(refusingExecutablesIn: executableUploadPolicy, setting: origins.jobName("JOBCTL_REFUSE_EXECUTABLES"))
    }
}
