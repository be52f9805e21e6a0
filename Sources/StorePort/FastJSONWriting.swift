import Foundation
import JobModel

/// A value `StoreJSON.encode` can write without Foundation's `JSONEncoder`: exactly the bytes the
/// store's encoder gives (sorted keys, slashes not escaped, nil optionals left out), or nil when the
/// value holds something whose bytes only Foundation decides — text that would need escaping (anything
/// but printable ASCII without `"` and `\`) or a dictionary of more than one key (whose sort order is
/// Foundation's). `FastJSONTests` compares both writers.
///
/// `replay --verify` encodes every rebuilt job's spec and result to compare them byte for byte with the
/// stored projection, which made Foundation's encoder its second cost after decoding.
protocol FastJSONEncodable {
    /// Appends the value's JSON to `json`; false when it must be left to Foundation.
    func write(to json: inout JSONText) -> Bool
}

extension FastJSON {
    /// The JSON of `value` when it can be written by hand, else nil.
    static func encode<T>(_ value: T) -> String? {
        guard let writable = value as? any FastJSONEncodable else { return nil }
        var json = JSONText()
        guard writable.write(to: &json) else { return nil }
        return json.text
    }
}

/// JSON text written member by member; the callers give each object's keys in sorted order.
struct JSONText {
    private var bytes: [UInt8] = []
    /// Whether the object being written has a member yet.
    private var hasMember = false

    init() { bytes.reserveCapacity(256) }

    var text: String { String(decoding: bytes, as: UTF8.self) }

    /// Whether Foundation writes this byte of a string as it is, without an escape.
    @inline(__always)
    private static func isPlain(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }

    mutating func object(_ body: (inout JSONText) -> Bool) -> Bool {
        bytes.append(UInt8(ascii: "{"))
        hasMember = false
        guard body(&self) else { return false }
        bytes.append(UInt8(ascii: "}"))
        hasMember = true
        return true
    }

    private mutating func key(_ name: StaticString) {
        if hasMember { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
        hasMember = true
    }

    /// Appends `value` in quotes when every byte is plain (false, nothing appended, otherwise: the
    /// caller falls back to Foundation's encoder). One pass over the string's contiguous UTF-8 to check
    /// and one copy, instead of an iterator for each.
    private mutating func quoted(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { utf8 in
            for byte in utf8 where !Self.isPlain(byte) { return false }
            bytes.append(UInt8(ascii: "\""))
            bytes.append(contentsOf: utf8)
            bytes.append(UInt8(ascii: "\""))
            return true
        }
    }

    mutating func string(_ name: StaticString, _ value: String?) -> Bool {
        guard let value else { return true }
        key(name)
        return quoted(value)
    }

    mutating func integer<I: BinaryInteger>(_ name: StaticString, _ value: I?) -> Bool {
        guard let value else { return true }
        key(name)
        if let value = Int64(exactly: value) {
            DecimalText.append(value, to: &bytes)
        } else {
            bytes.append(contentsOf: String(value).utf8)
        }
        return true
    }

    mutating func bool(_ name: StaticString, _ value: Bool?) -> Bool {
        guard let value else { return true }
        key(name)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
        return true
    }

    mutating func data(_ name: StaticString, _ value: Data?) -> Bool {
        string(name, value?.base64EncodedString())
    }

    mutating func strings(_ name: StaticString, _ values: [String]?) -> Bool {
        guard let values else { return true }
        key(name)
        return array(values)
    }

    /// `values` as a JSON array of strings (no key: a member's value, or the whole text).
    mutating func array(_ values: [String]) -> Bool {
        bytes.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            guard quoted(value) else { return false }
        }
        bytes.append(UInt8(ascii: "]"))
        return true
    }

    /// A dictionary of at most one entry (a longer one is Foundation's to sort).
    mutating func dictionary(_ name: StaticString, _ value: [String: String]?) -> Bool {
        guard let value else { return true }
        guard value.count <= 1 else { return false }
        key(name)
        bytes.append(UInt8(ascii: "{"))
        if let (entry, text) = value.first {
            guard quoted(entry) else { return false }
            bytes.append(UInt8(ascii: ":"))
            guard quoted(text) else { return false }
        }
        bytes.append(UInt8(ascii: "}"))
        return true
    }

    mutating func nested<T: FastJSONEncodable>(_ name: StaticString, _ value: T?) -> Bool {
        guard let value else { return true }
        key(name)
        return value.write(to: &self)
    }
}

// MARK: - The store's shapes

/// A list of ids (the job ids a leftover sweep passes over, bound as one JSON parameter): through
/// Foundation's encoder a draining worker's last sweep spent ~2 ms on the store's thread writing the
/// 2,000 ids of its own downloads.
extension Array: FastJSONEncodable where Element == String {
    func write(to json: inout JSONText) -> Bool { json.array(self) }
}

extension JobSpec: FastJSONEncodable {
    func write(to json: inout JSONText) -> Bool {
        json.object { json in
            json.strings("after", after) && json.nested("batch", batch) && json.strings("checksums", checksums?.map(\.rawValue))
                && json.strings("clearMetadata", clearMetadata?.map(\.rawValue)) && json.data("data", data) && json.string("destination", destination) && json.string("ifExists", ifExists?.rawValue)
                && json.integer("ifGeneration", ifGeneration) && json.string("key", key) && json.string("kind", kind.rawValue)
                && json.integer("maxAttempts", maxAttempts) && json.integer("maxRate", maxRate) && json.integer("maxSize", maxSize)
                && json.nested("metadata", metadata) && json.integer("priority", priority) && json.string("queue", queue)
                && json.strings("removeCustomMetadata", removeCustomMetadata) && json.integer("runAfterMs", runAfterMs)
                && json.string("source", source) && json.integer("timeoutSeconds", timeoutSeconds)
        }
    }
}

extension JobBatch: FastJSONEncodable {
    func write(to json: inout JSONText) -> Bool {
        json.object { json in
            json.strings("exclude", exclude) && json.string("id", id) && json.strings("include", include) && json.string("path", path)
                && json.string("source", source)
        }
    }
}

extension UploadMetadata: FastJSONEncodable {
    func write(to json: inout JSONText) -> Bool {
        json.object { json in
            json.string("cacheControl", cacheControl) && json.string("contentDisposition", contentDisposition)
                && json.string("contentEncoding", contentEncoding) && json.string("contentLanguage", contentLanguage)
                && json.string("contentType", contentType) && json.dictionary("customMetadata", customMetadata)
        }
    }
}

extension JobResult: FastJSONEncodable {
    func write(to json: inout JSONText) -> Bool {
        json.object { json in
            json.string("blob", blob) && json.string("crc32c", crc32c) && json.data("data", data) && json.string("deleted", deleted)
                && json.string("md5", md5) && json.nested("object", object) && json.string("path", path) && json.integer("size", size)
                && json.bool("skipped", skipped) && json.string("url", url) && json.strings("verified", verified?.map(\.rawValue))
        }
    }
}

extension StorageObject: FastJSONEncodable {
    func write(to json: inout JSONText) -> Bool {
        json.object { json in
            json.string("bucket", bucket) && json.string("cacheControl", cacheControl) && json.string("contentDisposition", contentDisposition)
                && json.string("contentEncoding", contentEncoding) && json.string("contentLanguage", contentLanguage)
                && json.string("contentType", contentType) && json.string("crc32c", crc32c) && json.dictionary("customMetadata", customMetadata)
                && json.string("downloadTokens", downloadTokens) && json.string("generation", generation) && json.string("md5Hash", md5Hash)
                && json.string("metageneration", metageneration) && json.string("name", name) && json.integer("size", size)
                && json.string("timeCreated", timeCreated) && json.string("updated", updated)
        }
    }
}
