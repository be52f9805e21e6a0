import Foundation
@testable import JobModel

/// The reference parser as it was before its byte-level searches (Character-wise `firstIndex`, `split`
/// and host checks), kept verbatim apart from how it builds its result, so the table in
/// `ReferenceParserEquivalenceTests` can hold the current parser to it, input by input.
enum CharacterwiseReferenceParser {
    static func parse(_ text: String) throws(StorageError) -> StorageReference {
        let input = StorageReference.hasEdgeWhitespace(text) ? text.trimmingCharacters(in: .whitespaces) : text
        guard let (schemeEnd, restStart) = StorageReference.schemeSeparator(in: input) else {
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
            try checkBucketName(bucket, in: text)
            let decoded = try StorageReference.percentDecode(path, in: text)
            try StorageReference.refuseEmptyObjectSegments(String(decoded.dropFirst()), in: text)
            return try StorageReference(scheme: .gs, bucket: bucket, path: decoded)
        case "file":
            let (authority, path) = Self.splitAuthority(rest)
            let bucket = authority.lowercased() == "localhost" ? "" : authority
            if !bucket.isEmpty { try checkBucketName(bucket, in: text) }
            return try StorageReference(scheme: .file, bucket: bucket, path: try StorageReference.percentDecode(path, in: text))
        case "http", "https":
            return try parseHTTP(rest, scheme: schemeText == "https" ? .https : .http, original: text)
        default:
            throw StorageError(.invalidArgument, "'\(text)' has unknown scheme '\(schemeText)': expected gs, file, http or https")
        }
    }

    static func parseHTTP(_ rest: String, scheme: StorageReference.Scheme, original: String) throws(StorageError) -> StorageReference {
        var remainder = rest
        if let hash = remainder.firstIndex(of: "#") { remainder = String(remainder[..<hash]) }
        var query: String?
        if let mark = remainder.firstIndex(of: "?") {
            query = String(remainder[remainder.index(after: mark)...])
            remainder = String(remainder[..<mark])
        }
        let (host, rawPath) = splitAuthority(remainder)
        guard !host.isEmpty else { throw StorageError(.invalidArgument, "'\(original)' has no host") }
        if host.utf8.contains(UInt8(ascii: "@")) {
            throw StorageError(.invalidArgument, "credentials in URLs are refused (they would be logged); use a token instead")
        }
        try checkHost(host, in: original)
        let segments = rawPath.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        // Firebase form: /v0/b/BUCKET/o/ENCODED_PATH on Firebase's host or the emulator's.
        if segments.count >= 2, segments[0] == "v0", segments[1] == "b", FirebaseHosts.firebase.contains(host) {
            // Read the bucket from the raw path: collapsing `//` would turn `/v0/b//o/x` into bucket `o`.
            let afterPrefix = rawPath.hasPrefix("/v0/b/") ? rawPath.dropFirst("/v0/b/".count) : ""
            guard segments.count >= 3, let first = afterPrefix.first, first != "/" else {
                throw StorageError(.invalidArgument, "'\(original)' has no bucket: a Firebase URL reads /v0/b/BUCKET/o/PATH")
            }
            let bucket = try StorageReference.percentDecode(segments[2], in: original)
            try checkBucketName(bucket, in: original)
            var path = ""
            if segments.count >= 4 {
                guard segments[3] == "o" else {
                    throw StorageError(.invalidArgument, "'\(original)': a Firebase URL reads /v0/b/BUCKET/o/PATH")
                }
                path = try StorageReference.percentDecode(segments.dropFirst(4).joined(separator: "/"), in: original)
                let afterBucket = afterPrefix.drop(while: { $0 != "/" })
                if afterBucket.hasPrefix("/o/") {
                    try StorageReference.refuseEmptyObjectSegments(String(afterBucket.dropFirst(3)), in: original)
                }
            }
            try StorageReference.refuseEmptyObjectSegments(path, in: original)
            return try StorageReference(scheme: .gs, bucket: bucket, path: path)
        }
        // https://storage.googleapis.com/BUCKET/PATH
        if host.lowercased() == "storage.googleapis.com", let first = segments.first {
            let bucket = try StorageReference.percentDecode(first, in: original)
            try checkBucketName(bucket, in: original)
            let path = try StorageReference.percentDecode(segments.dropFirst().joined(separator: "/"), in: original)
            try StorageReference.refuseEmptyObjectSegments(String(rawPath.dropFirst().drop(while: { $0 != "/" }).dropFirst()), in: original)
            try StorageReference.refuseEmptyObjectSegments(path, in: original)
            return try StorageReference(scheme: .gs, bucket: bucket, path: path)
        }
        let path = try StorageReference.percentDecode(rawPath, in: original)
        return try StorageReference(scheme: scheme, bucket: host, path: path, query: query, rawPath: rawPath)
    }

    private static func splitAuthority(_ text: String) -> (String, String) {
        guard let slash = text.firstIndex(of: "/") else { return (text, "") }
        return (String(text[..<slash]), String(text[slash...]))
    }

    private static func checkHost(_ host: String, in text: String) throws(StorageError) {
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
            // As the parser now says it (a host in another script: its ASCII form).
            if pieces.count <= 2, !pieces[0].isEmpty, !pieces[0].unicodeScalars.allSatisfy(\.isASCII),
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

    private static func checkBucketName(_ bucket: String, in text: String) throws(StorageError) {
        guard StorageReference.isValidBucketName(bucket) else {
            throw StorageError(.invalidArgument, "'\(text)' has an invalid bucket name '\(bucket)': use letters, digits, '-', '_' and '.'")
        }
    }

    private static func isHostNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."): true
        default: false
        }
    }
}
