/// The names of the hidden files jobctl keeps beside a file (`.NAME.<job id>.jobctl-partial`, a
/// `file://` object's sidecar and upload session, an archive being written), fitted to the 255 bytes a
/// file name may have on Linux file systems.
///
/// A legal name of 213–255 bytes left no room for the suffix, so every such download or upload failed
/// at its first file ("not a usable path"). Such a name is cut (at a character boundary) and followed by
/// `~` and eight hexadecimal digits of a hash of the whole name, so the hidden name is still unique per
/// name, and the same every time it is computed — creating, finding and sweeping all compute it.
public enum HiddenName {
    /// The longest file name (`NAME_MAX`).
    public static let maximumBytes = 255

    /// The endings of the names a `file://` folder keeps for jobctl's own files (sidecars, upload
    /// sessions, partial downloads, sidecar temporaries): no object may take one.
    public static let reservedSuffixes = [".jobctl-meta.json", ".jobctl-upload", ".jobctl-partial", ".jobctl-meta.tmp"]

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
    /// would be longer than `maximumBytes`.
    public static func make(_ name: String, suffix: String) -> String {
        let room = maximumBytes - 1 - suffix.utf8.count
        guard name.utf8.count > room else { return "." + name + suffix }
        var hash: UInt32 = 0x811C_9DC5   // FNV-1a, 32 bits
        for byte in name.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        let digits = String(hash, radix: 16)
        let tag = "~" + String(repeating: "0", count: 8 - digits.count) + digits
        var kept = ""
        var used = 0
        for scalar in name.unicodeScalars {
            let size = String(scalar).utf8.count
            guard used + size <= max(0, room - tag.utf8.count) else { break }
            kept.unicodeScalars.append(scalar)
            used += size
        }
        return "." + kept + tag + suffix
    }
}
