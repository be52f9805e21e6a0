import Checksums
import Foundation

/// The names of the hidden files jobctl keeps beside a file (`.NAME.<job id>.jobctl-partial`, a
/// `file://` object's sidecar and upload session, an archive being written), fitted to the 255 bytes a
/// file name may have on Linux file systems.
///
/// A legal name of 213–255 bytes left no room for the suffix, so every such download or upload failed
/// at its first file ("not a usable path"). Such a name is shortened: its first bytes (cut at a
/// character boundary), `~`, the SHA-256 of the whole name in 64 hexadecimal digits and
/// `shortenedMarker`, then the suffix. The same every time it is computed — creating, finding and
/// sweeping all compute it — and, for one suffix, no other name's:
///
/// - two shortened names are equal only when their digests are (the digest sits at a fixed place from
///   the end), that is when the names are;
/// - a shortened name is no name's own (`.NAME` + suffix): that NAME would end in `shortenedMarker`, a
///   reserved suffix no `file://` object may take (partial downloads, whose folders are anyone's, carry
///   their job's id in the suffix: only that job's one destination is ever named with it).
///
/// Older jobctls (`olderName`) kept `~` and eight hexadecimal digits of the name's FNV-1a-32 instead:
/// an object named exactly that cut form (`<first 228 bytes>~<hash>`, 237 bytes) had the very sidecar of
/// the 255-byte name it was cut from, as had two long names with one prefix and one hash, so uploading
/// one wiped the other's checksums and metadata, and deleting one deleted the other's sidecar. What those
/// jobctls wrote is still found under that name (`forms`, `isName`), by whoever reads or sweeps it.
public enum HiddenName {
    /// The longest file name (`NAME_MAX`).
    public static let maximumBytes = 255

    /// What the kept part of a shortened hidden name ends in, after its digest: a reserved suffix, so
    /// that no object's own hidden name is ever a shortened one.
    public static let shortenedMarker = ".jobctl-cut"

    /// The endings of the names a `file://` folder keeps for jobctl's own files (sidecars, upload
    /// sessions, partial downloads, sidecar temporaries, and the part a shortened hidden name keeps of
    /// its name): no object may take one.
    public static let reservedSuffixes = [".jobctl-meta.json", ".jobctl-upload", ".jobctl-partial", ".jobctl-meta.tmp", shortenedMarker]

    /// Whether `name` (one path component) ends in a reserved suffix, compared on bytes as the names are
    /// on disk (a character that joins the next one, U+0600, made `x\u{600}.jobctl-upload` not end in
    /// `.jobctl-upload` for `hasSuffix`, though its bytes do).
    public static func isReserved(_ name: some StringProtocol) -> Bool {
        reservedSuffixes.contains { name.utf8.reversed().starts(with: $0.utf8.reversed()) }
    }

    /// The first component of `path` (`/`-separated) that `isReserved`, if any.
    public static func reservedComponent(in path: String) -> String? {
        path.split(separator: "/").first(where: isReserved).map(String.init)
    }

    /// Why a `file://` object may not have `name`: the message the backend and `submit` give.
    public static func reservedMessage(_ name: String) -> String {
        "'\(name)' is reserved for jobctl's temporary and metadata files: choose another name"
    }

    /// `.` + `name` + `suffix` (which starts with its own `.`), with `name` shortened when the whole
    /// would be longer than `maximumBytes` (see the type's documentation).
    public static func make(_ name: String, suffix: String) -> String {
        let room = maximumBytes - 1 - suffix.utf8.count
        guard name.utf8.count > room else { return "." + name + suffix }
        let tag = "~" + Digest.sha256Hex(Data(name.utf8)) + shortenedMarker
        return "." + start(of: name, bytes: room - tag.utf8.count) + tag + suffix
    }

    /// The name an older jobctl gave the same file when `name` had to be shortened (`~` and the
    /// FNV-1a-32 of the name in eight hexadecimal digits); nil when it did not (`make`'s name then).
    public static func olderName(_ name: String, suffix: String) -> String? {
        let room = maximumBytes - 1 - suffix.utf8.count
        guard name.utf8.count > room else { return nil }
        var hash: UInt32 = 0x811C_9DC5   // FNV-1a, 32 bits
        for byte in name.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        let digits = String(hash, radix: 16)
        let tag = "~" + String(repeating: "0", count: 8 - digits.count) + digits
        return "." + start(of: name, bytes: room - tag.utf8.count) + tag + suffix
    }

    /// Every name the hidden file of `name` with `suffix` may have: `make`'s, then an older jobctl's
    /// when that differs. Whoever finds or sweeps the file looks for each; whoever creates one makes
    /// `make`'s.
    public static func forms(_ name: String, suffix: String) -> [String] {
        [make(name, suffix: suffix)] + (olderName(name, suffix: suffix).map { [$0] } ?? [])
    }

    /// Whether `candidate` is the hidden file of `name` with `suffix` under either of its `forms`,
    /// compared as bytes (as names are on disk).
    public static func isName(_ candidate: String, of name: String, suffix: String) -> Bool {
        forms(name, suffix: suffix).contains { candidate.hasSameUTF8(as: $0) }
    }

    /// The temporaries `.NAME.<pid>SUFFIX` in `folder` that writers of `name` (an archive, a backup) make
    /// beside it, each with the process id in its name, for whoever removes dead runs' ones. A name long
    /// enough to be shortened carries a digest in place of its end: not found here.
    public static func processTemporaries(of name: String, in folder: String, suffixes: [String]) -> [(path: String, pid: Int32)] {
        let start = "." + name + "."
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        return entries.compactMap { entry in
            guard entry.hasPrefix(start), let suffix = suffixes.first(where: { entry.hasSuffix($0) }) else { return nil }
            let digits = entry.dropFirst(start.count).dropLast(suffix.count)
            guard !digits.isEmpty, digits.count <= 10, digits.allSatisfy({ ("0"..."9").contains($0) }), let pid = Int32(digits) else { return nil }
            return ((folder == "/" ? "" : folder) + "/" + entry, pid)
        }
    }

    /// The longest start of `name` (whole Unicode scalars) of at most `bytes` UTF-8 bytes.
    private static func start(of name: String, bytes: Int) -> String {
        var kept = ""
        var used = 0
        for scalar in name.unicodeScalars {
            let size = String(scalar).utf8.count
            guard used + size <= max(0, bytes) else { break }
            kept.unicodeScalars.append(scalar)
            used += size
        }
        return kept
    }
}
