import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A location in storage, modelled on Firebase's `StorageReference`.
///
/// Accepted forms:
/// - `gs://bucket/path`
/// - `http(s)://HOST/v0/b/BUCKET/o/PERCENT_ENCODED_PATH` (Firebase form) → `gs`, on Firebase's host
///   (`firebasestorage.googleapis.com`) or the emulator's the settings name (`FirebaseHosts`); a plain URL elsewhere
/// - `https://storage.googleapis.com/BUCKET/PATH` → `gs`
/// - `file:///abs/path` (absolute; bucket is empty) and `file://NAME/path` (a named local bucket)
/// - any other `http(s)://host[:port]/path[?query]`
///
/// Paths normalise as Firebase does: repeated `/` collapse, leading and trailing `/` are trimmed.
/// `.` and `..` segments are refused (`pathError`) so no reference can climb out of its bucket.
///
/// A plain http(s) URL is requested exactly as written (`rawPath` and `query`): its percent escapes are
/// neither decoded nor re-encoded, `//` is not collapsed, because servers may tell `a%2Fb` from `a/b` and
/// presigned URLs sign the exact path. `fullPath` is the decoded, normalised form, for names and display.
public struct StorageReference: Sendable, Hashable, CustomStringConvertible {
    public enum Scheme: String, Sendable, Hashable {
        case gs, file, http, https
    }

    public let scheme: Scheme
    /// gs: the bucket; file: the local bucket name ("" for `file:///`); http(s): `host[:port]`.
    public let bucket: String
    /// The normalised, decoded object path; "" at the root.
    public let fullPath: String
    /// http(s) only: the query string (without `?`), kept verbatim (signed URLs) except that characters a
    /// URL cannot hold (controls, spaces, non-ASCII, ...; see `escapingUnsafeBytes`) are percent-encoded.
    public let query: String?
    /// http(s) only: the path to request, as written — escapes, `//` and a trailing `/` kept, only the
    /// characters a URL cannot hold percent-encoded; `/` when none was written. References made from parts
    /// or by navigation (`child`, `parent`, `root`) use the canonical encoding of `fullPath`. nil for gs and file.
    public let rawPath: String?

    /// Creates a reference from parts; `path` (decoded) is normalised. Throws `pathError` for `.`/`..`
    /// segments. An http(s) reference requests the canonical encoding of the normalised path.
    public init(scheme: Scheme, bucket: String, path: String, query: String? = nil) throws(StorageError) {
        try self.init(scheme: scheme, bucket: bucket, path: path, query: query, rawPath: nil)
    }

    /// `rawPath`: for http(s), the path as written (escapes valid, `path` is its decoding); nil for the
    /// canonical encoding of the normalised `path`. Internal, not private, for the tests' copy of the
    /// former parser, which builds its references through it.
    init(scheme: Scheme, bucket: String, path: String, query: String?, rawPath: String?) throws(StorageError) {
        if scheme != .file && bucket.isEmpty {
            throw StorageError(.invalidArgument, "the bucket (or host) is empty")
        }
        let fullPath = try Self.normalise(path)
        if scheme == .gs { try Self.checkObjectName(fullPath) }
        if scheme == .file { try Self.checkLocalName(bucket: bucket, fullPath) }
        self.init(unchecked: scheme, bucket: bucket, fullPath: fullPath, query: query, rawPath: rawPath)
    }

    /// The longest Cloud Storage object name, in bytes of UTF-8.
    public static let maximumObjectNameBytes = 1_024

    /// Cloud Storage's rules for object names that a request cannot get past: at most 1,024 bytes, no
    /// carriage return or line feed. Refused here, where a manifest reports them at the field: sent, a
    /// longer name made the emulator drop the connection (retried five times as "the connection failed
    /// mid-transfer") and Cloud Storage answer 400.
    static func checkObjectName(_ name: String) throws(StorageError) {
        let bytes = name.utf8.count
        if bytes > maximumObjectNameBytes {
            throw StorageError(.invalidArgument, "the object name is \(bytes) bytes; Cloud Storage names are at most "
                + "\(maximumObjectNameBytes) bytes of UTF-8")
        }
        if name.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D }) {
            throw StorageError(.invalidArgument, "the object name contains a line feed or carriage return, which Cloud Storage names cannot hold")
        }
    }

    /// A `file://` object is a file: the kernel's bounds (`LocalPathBounds`), refused here, where a
    /// manifest reports them at the field, rather than by the worker ("File name too long"). Without a
    /// bucket the reference is an absolute path; with one, the bucket is a folder's name and the path
    /// below it is only part of the file's (the buckets' folder comes first), checked as far as it goes.
    static func checkLocalName(bucket: String, _ fullPath: String) throws(StorageError) {
        if bucket.isEmpty {
            if let problem = LocalPathBounds.problem("/" + fullPath) {
                throw StorageError(.invalidArgument, "the local path \(problem)")
            }
            return
        }
        if bucket.utf8.count > Int(NAME_MAX) {
            throw StorageError(.invalidArgument, "the local bucket's name is \(bucket.utf8.count) bytes; it names a folder, and file names "
                + "are at most \(Int(NAME_MAX)) bytes")
        }
        let inBuckets = bucket.utf8.count + 1 + fullPath.utf8.count
        if inBuckets >= Int(PATH_MAX) {
            throw StorageError(.invalidArgument, "the bucket and object name are \(inBuckets) bytes as a path, and the buckets' folder "
                + "comes before them; Linux takes paths of at most \(Int(PATH_MAX) - 1) bytes (PATH_MAX)")
        }
        if let problem = LocalPathBounds.problem(fullPath) {
            throw StorageError(.invalidArgument, "the object's path \(problem)")
        }
    }

    private init(unchecked scheme: Scheme, bucket: String, fullPath: String, query: String?, rawPath: String? = nil) {
        self.scheme = scheme
        self.bucket = scheme == .http || scheme == .https ? Self.canonicalHost(bucket) : bucket
        self.fullPath = fullPath
        if scheme == .http || scheme == .https {
            self.query = query.map(Self.escapingUnsafeBytes)
            let written = rawPath.map(Self.escapingUnsafeBytes) ?? ""
            self.rawPath = written.isEmpty ? "/" + Self.percentEncodePath(fullPath) : written
        } else {
            self.query = nil
            self.rawPath = nil
        }
    }

    // MARK: - Parsing

    /// The longest reference, in bytes of UTF-8 as written: 16 KiB. Twice what common servers take in a
    /// request line (nginx's and Apache's defaults refuse one over 8 KiB with 414), room for any signed
    /// URL, and over the longest `gs://` reference (a 222-byte bucket, a 1,024-byte name percent-encoded).
    /// Nothing bounded it: a 10 MB URL was accepted, stored in the job and sent (curl takes 8 MB).
    public static let maximumReferenceBytes = 16_384

    /// Parses any accepted form; throws `invalidArgument` (or `pathError`) with a message that says why.
    /// A Firebase-form URL names a `gs://` object on Firebase's own host only: a command that runs with
    /// storage settings parses with their hosts (`init(parsing:firebaseHosts:)`), the emulator's included.
    public init(parsing text: String) throws(StorageError) {
        try self.init(parsing: text, firebaseHosts: .firebase)
    }

    /// Parses any accepted form, reading a Firebase-form URL (`/v0/b/BUCKET/o/PATH`) on one of
    /// `firebaseHosts` as the `gs://` object it names (see `FirebaseHosts`).
    public init(parsing text: String, firebaseHosts: FirebaseHosts) throws(StorageError) {
        // First, before any work on the text (and without quoting it).
        let length = text.utf8.count
        if length > Self.maximumReferenceBytes {
            throw StorageError(.invalidArgument, "the reference is \(length) bytes long; jobctl takes at most \(Self.maximumReferenceBytes) bytes "
                + "(servers commonly refuse a request line over 8 KiB, and Cloud Storage object names are at most "
                + "\(Self.maximumObjectNameBytes) bytes)")
        }
        // A worker parses every job's reference: the byte-level steps below keep Foundation's string search
        // and character sets out of that path (they were ~6 % of a small-file drain's CPU).
        let input = Self.hasEdgeWhitespace(text) ? text.trimmingCharacters(in: .whitespaces) : text
        guard let (schemeEnd, restStart) = Self.schemeSeparator(in: input) else {
            throw StorageError(.invalidArgument, "'\(text)' is not a storage URL: expected gs://, file://, http:// or https://")
        }
        let schemeText = String(input.unicodeScalars[..<schemeEnd]).lowercased()
        let rest = String(input.unicodeScalars[restStart...])
        // Refused before any other check so no message can echo a password back into a log.
        if rest.utf8.prefix(while: { $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") })
            .contains(UInt8(ascii: "@")) {
            throw StorageError(.invalidArgument, "credentials in URLs are refused (they would be logged); use a token instead")
        }
        switch schemeText {
        case "gs":
            let (bucket, path) = Self.splitAuthority(rest)
            guard !bucket.isEmpty else { throw StorageError(.invalidArgument, "'\(text)' has no bucket: expected gs://BUCKET/PATH") }
            try Self.checkBucketName(bucket, in: text)
            let decoded = try Self.percentDecode(path, in: text)
            try Self.refuseEmptyObjectSegments(String(decoded.utf8.dropFirst()) ?? "", in: text)
            try self.init(scheme: .gs, bucket: bucket, path: decoded)
        case "file":
            let (authority, path) = Self.splitAuthority(rest)
            let bucket = authority.lowercased() == "localhost" ? "" : authority
            if !bucket.isEmpty { try Self.checkBucketName(bucket, in: text) }
            try self.init(scheme: .file, bucket: bucket, path: try Self.percentDecode(path, in: text))
        case "http", "https":
            try self.init(parsingHTTP: rest, scheme: schemeText == "https" ? .https : .http, original: text, firebaseHosts: firebaseHosts)
        default:
            throw StorageError(.invalidArgument, "'\(text)' has unknown scheme '\(schemeText)': expected gs, file, http or https")
        }
    }

    private init(parsingHTTP rest: String, scheme: Scheme, original: String, firebaseHosts: FirebaseHosts) throws(StorageError) {
        // Searched and split on bytes, as curl and servers read a URL: a Character search missed a `#`,
        // `?` or `/` that a combining mark joined into another Character (and was most of a parse).
        let ascii = Self.isASCII(rest)
        var remainder = rest
        // Sliced on scalars: a byte found may be followed by a combining mark of the same Character.
        if let hash = Self.firstIndex(of: UInt8(ascii: "#"), in: remainder, ascii: ascii) {
            remainder = String(remainder.unicodeScalars[..<hash])
        }
        var query: String?
        if let mark = Self.firstIndex(of: UInt8(ascii: "?"), in: remainder, ascii: ascii) {
            query = String(remainder.unicodeScalars[remainder.utf8.index(after: mark)...])
            remainder = String(remainder.unicodeScalars[..<mark])
        }
        let (host, rawPath) = Self.splitAuthority(remainder, ascii: ascii)
        guard !host.isEmpty else { throw StorageError(.invalidArgument, "'\(original)' has no host") }
        if host.utf8.contains(UInt8(ascii: "@")) {
            throw StorageError(.invalidArgument, "credentials in URLs are refused (they would be logged); use a token instead")
        }
        try Self.checkHost(host, in: original)
        let segments = ascii
            ? rawPath.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map { String(Substring($0)) }
            : SlashSeparatedPath.parts(of: rawPath).map(String.init)
        // Firebase form: /v0/b/BUCKET/o/ENCODED_PATH on Firebase's host or the emulator's.
        if segments.count >= 2, segments[0] == "v0", segments[1] == "b", firebaseHosts.contains(host) {
            // Read the bucket from the raw path: collapsing `//` would turn `/v0/b//o/x` into bucket `o`.
            let afterPrefix = rawPath.hasPrefix("/v0/b/") ? rawPath.dropFirst("/v0/b/".count) : ""
            guard segments.count >= 3, let first = afterPrefix.first, first != "/" else {
                throw StorageError(.invalidArgument, "'\(original)' has no bucket: a Firebase URL reads /v0/b/BUCKET/o/PATH")
            }
            let bucket = try Self.percentDecode(segments[2], in: original)
            try Self.checkBucketName(bucket, in: original)
            var path = ""
            if segments.count >= 4 {
                guard segments[3] == "o" else {
                    throw StorageError(.invalidArgument, "'\(original)': a Firebase URL reads /v0/b/BUCKET/o/PATH")
                }
                path = try Self.percentDecode(segments.dropFirst(4).joined(separator: "/"), in: original)
                // The segments above dropped any `//` written raw: asked of the written path too.
                let afterBucket = afterPrefix.utf8.drop(while: { $0 != UInt8(ascii: "/") })
                if afterBucket.starts(with: "/o/".utf8) {
                    try Self.refuseEmptyObjectSegments(String(afterBucket.dropFirst(3)) ?? "", in: original)
                }
            }
            try Self.refuseEmptyObjectSegments(path, in: original)
            try self.init(scheme: .gs, bucket: bucket, path: path)
            return
        }
        // https://storage.googleapis.com/BUCKET/PATH
        if host.lowercased() == "storage.googleapis.com", let first = segments.first {
            let bucket = try Self.percentDecode(first, in: original)
            try Self.checkBucketName(bucket, in: original)
            let path = try Self.percentDecode(segments.dropFirst().joined(separator: "/"), in: original)
            // The segments dropped any `//` written raw: asked of the written path after the bucket too.
            let afterBucket = rawPath.utf8.dropFirst().drop(while: { $0 != UInt8(ascii: "/") }).dropFirst()
            try Self.refuseEmptyObjectSegments(String(afterBucket) ?? "", in: original)
            try Self.refuseEmptyObjectSegments(path, in: original)
            try self.init(scheme: .gs, bucket: bucket, path: path)
            return
        }
        let path = try Self.percentDecode(rawPath, in: original)
        try self.init(scheme: scheme, bucket: host, path: path, query: query, rawPath: rawPath)
    }

    /// Refuses a Cloud Storage object name (decoded, after the bucket's `/`) with an empty segment: `//`
    /// inside it, or a `/` first. Cloud Storage names are flat — `d/x//y` and `d/x/y` are two objects —
    /// but references normalise as Firebase's `child` does, `//` collapsed and a leading `/` dropped, so
    /// `gs://b/d/x//y` (or `d%2Fx%2F%2Fy`, or the Firebase form) named `d/x/y`: a download read the other
    /// object and a `delete` removed it. Such a name cannot be addressed, so it is refused, saying so. One
    /// `/` at the end is a prefix's (`gs://b/photos/`), trimmed as before.
    static func refuseEmptyObjectSegments(_ name: String, in text: String) throws(StorageError) {
        var previousWasSlash = true  // a `/` first is an empty first segment
        for byte in name.utf8 {
            let isSlash = byte == UInt8(ascii: "/")
            if isSlash && previousWasSlash {
                throw StorageError(.invalidArgument, "'\(text)' names an object with an empty segment ('//', or a '/' first): "
                    + "jobctl reads object paths as Firebase does, with repeated '/' collapsed, so it would act on '\(Self.collapsed(name))', "
                    + "another object; jobctl cannot name such an object")
            }
            previousWasSlash = isSlash
        }
    }

    /// `name` with its empty segments dropped, for the message above.
    private static func collapsed(_ name: String) -> String {
        SlashSeparatedPath.parts(of: name).joined(separator: "/")
    }

    // MARK: - Navigation (as Firebase's StorageReference)

    /// The last path component; "" at the root.
    public var name: String {
        SlashSeparatedPath.lastPart(of: fullPath).map(String.init) ?? ""
    }

    /// Whether this is the bucket's root (no object can live here).
    public var isRoot: Bool { fullPath.isEmpty }

    /// The reference one level up; nil at the root.
    public var parent: StorageReference? {
        guard !isRoot else { return nil }
        var parts = SlashSeparatedPath.parts(of: fullPath)
        parts.removeLast()
        return StorageReference(unchecked: scheme, bucket: bucket, fullPath: parts.joined(separator: "/"), query: nil)
    }

    /// The bucket's root.
    public var root: StorageReference {
        StorageReference(unchecked: scheme, bucket: bucket, fullPath: "", query: nil)
    }

    /// A reference below this one; `path` may hold several components and is normalised.
    public func child(_ path: String) throws(StorageError) -> StorageReference {
        let joined = fullPath.isEmpty ? path : fullPath + "/" + path
        return try StorageReference(scheme: scheme, bucket: bucket, path: joined)
    }

    /// Throws `invalidArgument` when the reference cannot name an object (the root).
    public func requireObject(for purpose: String = "this operation") throws(StorageError) {
        if isRoot {
            throw StorageError(.invalidArgument, "\(description) is a bucket root; \(purpose) needs an object path")
        }
    }

    // MARK: - Rendering

    /// The canonical text: `gs://b/p`, `file://b/p`, `file:///p`; for http(s) the URL to request,
    /// `http(s)://host` + `rawPath` + `?query` (what specs store, so the stored text requests the same).
    public var description: String {
        switch scheme {
        case .gs:
            return "gs://\(bucket)/\(Self.percentEncodePath(fullPath))"
        case .file:
            return "file://\(bucket)/\(Self.percentEncodePath(fullPath))"
        case .http, .https:
            let base = "\(scheme.rawValue)://\(bucket)\(rawPath ?? "/" + Self.percentEncodePath(fullPath))"
            return query.map { "\(base)?\($0)" } ?? base
        }
    }

    /// The path with each character outside the unreserved set escaped, `/` included
    /// (the Firebase and GCS JSON API object-name form: `images%2Fstars.jpg`).
    public var encodedPath: String { Self.percentEncode(fullPath, keepSlash: false) }

    // MARK: - Helpers

    /// Whether `text` may start or end with what `CharacterSet.whitespaces` trims (space, tab, or any
    /// non-ASCII character, which might be a Unicode space); false lets parsing skip the trim.
    static func hasEdgeWhitespace(_ text: String) -> Bool {
        guard let first = text.utf8.first, let last = text.utf8.last else { return false }
        func mayTrim(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte >= 0x80 }
        return mayTrim(first) || mayTrim(last)
    }

    /// The first `://` in `text`: where it starts and where what follows it starts.
    static func schemeSeparator(in text: String) -> (String.Index, String.Index)? {
        let bytes = text.utf8
        var index = bytes.startIndex
        while index != bytes.endIndex {
            if bytes[index] == UInt8(ascii: ":") {
                let slash1 = bytes.index(after: index)
                if slash1 != bytes.endIndex, bytes[slash1] == UInt8(ascii: "/") {
                    let slash2 = bytes.index(after: slash1)
                    if slash2 != bytes.endIndex, bytes[slash2] == UInt8(ascii: "/") {
                        // ASCII bytes always start a scalar: the indices slice `unicodeScalars` exactly.
                        return (index, bytes.index(after: slash2))
                    }
                }
            }
            index = bytes.index(after: index)
        }
        return nil
    }

    /// `text` up to its first `/` (the authority) and from it (the path).
    private static func splitAuthority(_ text: String) -> (String, String) {
        splitAuthority(text, ascii: isASCII(text))
    }

    /// `splitAuthority`, told whether `text` is ASCII (then the `/` is found on bytes).
    private static func splitAuthority(_ text: String, ascii: Bool) -> (String, String) {
        guard let slash = firstIndex(of: UInt8(ascii: "/"), in: text, ascii: ascii) else { return (text, "") }
        return (String(text.unicodeScalars[..<slash]), String(text.unicodeScalars[slash...]))
    }

    /// Whether every byte of `text` is ASCII: then each byte is a whole Character (or half of `\r\n`,
    /// which holds no other character), and byte searches find what Character searches find.
    static func isASCII(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 < 0x80 }
    }

    /// The first `byte` (an ASCII character) in `text`, found on bytes whatever the text: a combining mark
    /// after it (`#\u{301}`, `/\u{301}`) makes one Character that is not `#` or `/`, but curl, servers
    /// and the filesystem all read the byte, so a Character search put a fragment into the path and a
    /// whole `gs://b/\u{301}x` into the bucket's name. The index is a scalar boundary.
    private static func firstIndex(of byte: UInt8, in text: String, ascii: Bool) -> String.Index? {
        text.utf8.firstIndex(of: byte)
    }

    static func normalise(_ path: String) throws(StorageError) -> String {
        if let same = alreadyNormal(path) { return same }
        let parts = SlashSeparatedPath.parts(of: path)
        for part in parts where part == "." || part == ".." {
            throw StorageError(.pathError, "path '\(path)' contains a '\(part)' segment, which is not allowed")
        }
        if path.utf8.contains(0) { throw StorageError(.pathError, "path contains a NUL character") }
        return parts.joined(separator: "/")
    }

    /// `normalise(path)` for the paths nearly every job has, found in one pass over the bytes: ASCII, no
    /// NUL, no empty, `.` or `..` part, at most one `/` in front (dropped) and none at the end — the
    /// path itself, so nothing is split and joined again (~9,000 instructions a reference, and a worker
    /// makes one or two for every job). Nil: `normalise` does the general work.
    static func alreadyNormal(_ path: String) -> String? {
        var leadingSlash = false
        var partLength = 0
        var dots = 0
        var first = true
        for byte in path.utf8 {
            if byte == UInt8(ascii: "/") {
                if first {
                    leadingSlash = true
                } else if partLength == 0 || dots == partLength && dots <= 2 {
                    return nil  // an empty part (`//`), or `.` or `..`
                }
                partLength = 0
                dots = 0
            } else {
                if byte >= 0x80 || byte == 0 { return nil }
                partLength += 1
                if byte == UInt8(ascii: ".") { dots += 1 }
            }
            first = false
        }
        // The last part: not empty (no `/` at the end, and not only "/"), not `.` or `..`.
        if partLength == 0 || dots == partLength && dots <= 2 { return path.isEmpty ? "" : nil }
        return leadingSlash ? String(path.dropFirst()) : path
    }

    private static func checkBucketName(_ bucket: String, in text: String) throws(StorageError) {
        guard isValidBucketName(bucket) else {
            throw StorageError(.invalidArgument, "'\(text)' has an invalid bucket name '\(bucket)': use letters, digits, '-', '_' and '.'")
        }
    }

    /// Cloud Storage's bucket naming rules, as a sentence for messages.
    public static let cloudStorageBucketRule = "Cloud Storage bucket names are 3 to 63 characters (up to 222 with dots, "
        + "at most 63 between two), lower-case letters, digits, '-', '_' and '.', starting and ending with a letter or digit, "
        + "and not an IP address"

    /// Why no Cloud Storage bucket can be named `bucket`, or nil when one can. Parsing takes any name
    /// `isValidBucketName` allows, for `gs://` as for `file://` (where a bucket is a folder's name, and
    /// `file://B` or `file://x` are fine); a `gs://` name against these rules would reach the server only
    /// when the job runs, and fail there. So `submit` checks each `gs://` reference it reads with this,
    /// and reports a mistake (`gs://MyBucket/x`, `gs://b/x`) at its line. Checked on bytes, ASCII only.
    /// https://cloud.google.com/storage/docs/buckets#naming
    public static func cloudStorageBucketProblem(_ bucket: String) -> String? {
        let bytes = Array(bucket.utf8)
        let isLower = { (byte: UInt8) in byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z") }
        let isDigit = { (byte: UInt8) in byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
        if bytes.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) {
            return "it has upper-case letters (write '\(bucket.lowercased())')"
        }
        if let other = bytes.first(where: { !isLower($0) && !isDigit($0) && !"-_.".utf8.contains($0) }) {
            return "it holds '\(Character(Unicode.Scalar(other)))'"
        }
        let hasDots = bytes.contains(UInt8(ascii: "."))
        if bytes.count < 3 || bytes.count > (hasDots ? 222 : 63) {
            return "it is \(bytes.count) character\(bytes.count == 1 ? "" : "s") long"
        }
        guard let first = bytes.first, let last = bytes.last, isLower(first) || isDigit(first), isLower(last) || isDigit(last) else {
            return "it does not start and end with a letter or digit"
        }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        if parts.contains(where: { $0.count > 63 }) {
            return "a part between its dots is longer than 63 characters"
        }
        if parts.count == 4, parts.allSatisfy({ !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(isDigit) }) {
            return "it is an IP address"
        }
        return nil
    }

    /// ASCII letters and digits, `-`, `_` and `.`, and not dots only (`.`, `..` would climb out of a
    /// local bucket's directory). Checked on bytes: a worker checks every job's bucket, and building a
    /// Foundation `CharacterSet` for it was 5 % of a small-job drain's instructions.
    static func isValidBucketName(_ bucket: String) -> Bool {
        !bucket.isEmpty && !bucket.utf8.allSatisfy({ $0 == UInt8(ascii: ".") })
            && bucket.utf8.allSatisfy { isHostNameByte($0) || $0 == UInt8(ascii: "_") }
    }

    private static func checkHost(_ host: String, in text: String) throws(StorageError) {
        if isASCII(host), host.utf8.first != UInt8(ascii: "[") {
            return try checkASCIIHost(host, in: text)
        }
        var name = Substring(host)
        if name.hasPrefix("[") {
            guard let close = name.firstIndex(of: "]") else {
                throw StorageError(.invalidArgument, "'\(text)' has a malformed IPv6 host")
            }
            name = name[name.index(after: close)...]
            if name.isEmpty { return }
            guard name.hasPrefix(":") else { throw StorageError(.invalidArgument, "'\(text)' has a malformed host") }
            name = name.dropFirst()
            guard !name.isEmpty, name.allSatisfy(\.isNumber), let port = Int(name), port > 0, port < 65536 else {
                throw StorageError(.invalidArgument, "'\(text)' has an invalid port")
            }
            return
        }
        let pieces = name.split(separator: ":", omittingEmptySubsequences: false)
        guard pieces.count <= 2, !pieces[0].isEmpty, pieces[0].utf8.allSatisfy(isHostNameByte) else {
            // A name in another script is taken in its ASCII form only (libcurl connects to what is written).
            if pieces.count <= 2, !pieces[0].isEmpty, !isASCII(String(pieces[0])),
               let ascii = Punycode.asciiHost(String(pieces[0])), ascii.utf8.allSatisfy(isHostNameByte) {
                let port = pieces.count == 2 ? ":" + pieces[1] : ""
                throw StorageError(.invalidArgument, "'\(text)' has a host that is not ASCII, '\(pieces[0])': write it in its ASCII "
                                       + "(IDNA) form, '\(ascii)\(port)'")
            }
            throw StorageError(.invalidArgument, "'\(text)' has an invalid host '\(host)'")
        }
        if pieces.count == 2 {
            guard !pieces[1].isEmpty, pieces[1].allSatisfy(\.isNumber), let port = Int(pieces[1]), port > 0, port < 65536 else {
                throw StorageError(.invalidArgument, "'\(text)' has an invalid port '\(pieces[1])'")
            }
        }
    }

    /// `host[:port]` as one text for each endpoint: an IPv4 address written in any form libcurl (and
    /// `inet_aton`) connects to the same as its dotted quad — `2130706433`, `0x7f000001`, `0177.0.0.1`,
    /// `127.1` — is that dotted quad, and a port's leading zeros are dropped (`018080` is `18080`).
    /// Every comparison of servers (`JOBCTL_REFUSE_EXECUTABLES`, the destinations two jobs share) compared
    /// the text, so the same server written another way got past them. Names and IPv6 literals are kept
    /// as written (their case is compared apart). Hosts that are none of these come back unchanged.
    public static func canonicalHost(_ hostAndPort: String) -> String {
        var host = Substring(hostAndPort)
        var port: Substring?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return hostAndPort }
            let after = host[host.index(after: close)...]
            if after.hasPrefix(":") { port = after.dropFirst() }
            host = host[...close]
        } else if let colon = host.lastIndex(of: ":") {
            port = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        var canonical = String(host)
        if !host.isEmpty, host.utf8.allSatisfy({ isHexDigitByte($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "x")
                                                  || $0 == UInt8(ascii: "X") }),
           host.utf8.first.map({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) == true {
            var address = in_addr()
            if inet_aton(String(host), &address) != 0 {
                let value = UInt32(bigEndian: address.s_addr)
                canonical = "\(value >> 24).\(value >> 16 & 0xFF).\(value >> 8 & 0xFF).\(value & 0xFF)"
            }
        }
        guard let port else { return canonical }
        let digits = port.drop { $0 == "0" }
        return canonical + ":" + (digits.isEmpty && !port.isEmpty ? "0" : String(digits))
    }

    private static func isHexDigitByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F"))
    }

    /// `checkHost` for an ASCII host that is not an IPv6 literal, on bytes (the Character-wise split and
    /// digit checks were ~12 k instructions a job): the same hosts accepted, the same messages.
    private static func checkASCIIHost(_ host: String, in text: String) throws(StorageError) {
        let pieces = host.utf8.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
        guard pieces.count <= 2, !pieces[0].isEmpty, pieces[0].allSatisfy(isHostNameByte) else {
            throw StorageError(.invalidArgument, "'\(text)' has an invalid host '\(host)'")
        }
        if pieces.count == 2 {
            let digits = pieces[1]
            guard !digits.isEmpty, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                  let port = Int(Substring(digits)), port > 0, port < 65536 else {
                throw StorageError(.invalidArgument, "'\(text)' has an invalid port '\(Substring(digits))'")
            }
        }
    }

    /// ASCII letters, digits, `-` and `.`: what a host name (or IPv4 address) is made of.
    private static func isHostNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."): true
        default: false
        }
    }

    /// Decodes `%XX` escapes; throws `invalidArgument` on a malformed escape or invalid UTF-8.
    public static func percentDecode(_ text: String, in original: String? = nil) throws(StorageError) -> String {
        guard text.utf8.contains(UInt8(ascii: "%")) else { return text }
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "%") {
                guard iterator.count >= 2,
                      let high = HexDigit.value(iterator[iterator.startIndex]),
                      let low = HexDigit.value(iterator[iterator.startIndex + 1]) else {
                    throw StorageError(.invalidArgument, "'\(original ?? text)' has a malformed percent escape")
                }
                bytes.append(high << 4 | low)
                iterator = iterator.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw StorageError(.invalidArgument, "'\(original ?? text)' decodes to invalid UTF-8")
        }
        return decoded
    }


    /// Escapes every byte outside `A-Z a-z 0-9 - . _ ~` (and `/` when `keepSlash`).
    public static func percentEncode(_ text: String, keepSlash: Bool) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepSlash:
                output.append("/")
            default:
                let digits = Array("0123456789ABCDEF".utf8)
                output.append("%")
                output.unicodeScalars.append(Unicode.Scalar(digits[Int(byte >> 4)]))
                output.unicodeScalars.append(Unicode.Scalar(digits[Int(byte & 15)]))
            }
        }
        return output
    }

    private static func percentEncodePath(_ path: String) -> String { percentEncode(path, keepSlash: true) }

    /// `text` with each byte a URL cannot hold written as `%XX` — controls, space, DEL, non-ASCII and
    /// the characters in `"<>\^{|}` plus the backtick — and every other character, `%` escapes included,
    /// kept as written (what a browser does to a typed URL). Used for the path and query of http(s) URLs.
    static func escapingUnsafeBytes(_ text: String) -> String {
        guard text.utf8.contains(where: isUnsafeInURL) else { return text }
        let digits = Array("0123456789ABCDEF".utf8)
        var output = ""
        output.reserveCapacity(text.utf8.count + 16)
        for byte in text.utf8 {
            if isUnsafeInURL(byte) {
                output.append("%")
                output.unicodeScalars.append(Unicode.Scalar(digits[Int(byte >> 4)]))
                output.unicodeScalars.append(Unicode.Scalar(digits[Int(byte & 15)]))
            } else {
                output.unicodeScalars.append(Unicode.Scalar(byte))
            }
        }
        return output
    }

    /// Whether `escapingUnsafeBytes` writes `byte` as `%XX`.
    private static func isUnsafeInURL(_ byte: UInt8) -> Bool {
        switch byte {
        case 0...0x20, 0x7F...0xFF: true
        case UInt8(ascii: "\""), UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "\\"), UInt8(ascii: "^"),
             UInt8(ascii: "`"), UInt8(ascii: "{"), UInt8(ascii: "|"), UInt8(ascii: "}"): true
        default: false
        }
    }
}

extension StorageReference: Codable {
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        try self.init(parsing: text)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
