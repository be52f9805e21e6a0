import JobModel

/// Content types inferred from file extensions, as `putFile(from:)` does when no contentType is given.
public enum ContentTypes {
    /// The type used when the extension is unknown or missing.
    public static let fallback = "application/octet-stream"

    /// The content type for `path`'s extension (case-insensitive); `application/octet-stream` when unknown.
    /// Only the last path component counts, and a leading dot (`.bashrc`) is not an extension.
    public static func infer(path: String) -> String {
        var name = SlashSeparatedPath.lastPart(of: path) ?? Substring(path)
        // Every ASCII byte is a Character: the extension is found and lowercased as bytes, into a small
        // inline string. Every upload infers its type once or twice, and building the name and the
        // lowercased extension as Strings was ~4,000 instructions a time. Other text keeps the
        // Character-wise reading: there a combining mark can join the dot into another Character.
        let ascii = name.withUTF8 { (bytes) -> String? in
            guard !bytes.contains(where: { $0 >= 0x80 }) else { return nil }
            guard let dot = bytes.lastIndex(of: UInt8(ascii: ".")), dot != 0 else { return fallback }
            let ext = bytes[(dot + 1)...]
            guard ext.count <= longestExtension else { return fallback }
            let key = String(unsafeUninitializedCapacity: ext.count) { buffer in
                for (offset, byte) in ext.enumerated() {
                    buffer[offset] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
                }
                return ext.count
            }
            return table[key] ?? fallback
        }
        return ascii ?? inferByCharacters(name)
    }

    /// `infer` for a last component that is not all ASCII.
    private static func inferByCharacters(_ name: Substring) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return fallback }
        return table[name[name.index(after: dot)...].lowercased()] ?? fallback
    }

    /// The longest extension in `table`: a longer one cannot match.
    private static let longestExtension = table.keys.map(\.utf8.count).max() ?? 0

    /// Extension (lower case, no dot) → type.
    public static let table: [String: String] = [
        // Images
        "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp",
        "svg": "image/svg+xml", "ico": "image/vnd.microsoft.icon", "bmp": "image/bmp", "tif": "image/tiff",
        "tiff": "image/tiff", "avif": "image/avif", "heic": "image/heic",
        // Text and web
        "txt": "text/plain", "html": "text/html", "htm": "text/html", "css": "text/css",
        "js": "text/javascript", "mjs": "text/javascript", "json": "application/json", "xml": "application/xml",
        "csv": "text/csv", "md": "text/markdown", "yaml": "application/yaml", "yml": "application/yaml",
        "ics": "text/calendar", "map": "application/json",
        // Documents
        "pdf": "application/pdf", "rtf": "application/rtf", "doc": "application/msword",
        "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xls": "application/vnd.ms-excel",
        "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "ppt": "application/vnd.ms-powerpoint",
        "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "odt": "application/vnd.oasis.opendocument.text", "epub": "application/epub+zip",
        // Archives
        "zip": "application/zip", "gz": "application/gzip", "tgz": "application/gzip", "tar": "application/x-tar",
        "bz2": "application/x-bzip2", "7z": "application/x-7z-compressed", "xz": "application/x-xz",
        "zst": "application/zstd", "rar": "application/vnd.rar",
        // Audio
        "mp3": "audio/mpeg", "wav": "audio/wav", "ogg": "audio/ogg", "flac": "audio/flac", "m4a": "audio/mp4",
        "aac": "audio/aac", "opus": "audio/opus",
        // Video
        "mp4": "video/mp4", "mov": "video/quicktime", "avi": "video/x-msvideo", "webm": "video/webm",
        "mkv": "video/x-matroska", "m4v": "video/mp4", "mpeg": "video/mpeg", "mpg": "video/mpeg",
        // Fonts
        "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf", "otf": "font/otf",
        // Binaries
        "wasm": "application/wasm", "exe": "application/vnd.microsoft.portable-executable",
        "dll": "application/vnd.microsoft.portable-executable", "apk": "application/vnd.android.package-archive",
        "bat": "application/x-msdos-program", "sh": "application/x-sh", "jar": "application/java-archive",
    ]

    /// The content type an upload is stored with, the same for every backend: an explicit
    /// `metadata.contentType` wins; upload-file infers from the local file's extension, as Firebase's
    /// `putFile` does, then from the destination's name; upload-data infers from the destination's name.
    public static func forUpload(_ spec: JobSpec, destination: StorageReference) -> String {
        if let explicit = spec.metadata?.contentType { return explicit }
        if spec.kind == .uploadFile, let source = spec.source {
            let fromSource = infer(path: source)
            if fromSource != fallback { return fromSource }
        }
        return infer(path: destination.fullPath)  // its last component, as `destination.name` is
    }
}
