import JobModel

/// The JSON of an event payload, as the log stores it: byte for byte what `StoreJSON.encode(payload.wire)`
/// gives (sorted keys, slashes not escaped), written by hand for the payloads a worker appends by the
/// thousand — `claimed`, `started`, `progress` and `succeeded` without a resume point (a result without
/// custom metadata or bytes in flight), and the request and rescue events that carry only a reason — and
/// through Foundation's encoder for every other payload.
///
/// Foundation's `JSONEncoder` boxes every value and sorts keys per object: ~7 % of a draining worker's
/// CPU went there. The hand-written path only handles text it can copy as is (printable ASCII without
/// `"` or `\`); anything that would need escaping takes the encoder, so the two cannot disagree on
/// escapes. `PayloadJSONTests` compares both over every payload case and over a release's log.
public enum PayloadJSON {
    /// The stored JSON of `payload`.
    public static func encode(_ payload: EventPayload) throws(StoreError) -> String {
        if let text = handWritten(payload) { return text }
        return try StoreJSON.encode(payload.wire)
    }

    /// The hand-written JSON of `payload`, or nil when it is not one of the simple shapes.
    static func handWritten(_ payload: EventPayload) -> String? {
        var json = JSONObjectText()
        switch payload {
        case .claimed(let owner, let expiresAt, let attempt):
            json.integer("attempt", Int64(attempt))
            json.integer("leaseExpiresAtMs", expiresAt)
            guard json.text("leaseOwner", owner) else { return nil }
        case .started(let progress), .progress(let progress):
            guard progress.resumePoint == nil else { return nil }
            if let attempt = progress.attempt { json.integer("attempt", Int64(attempt)) }
            if let done = progress.bytesDone { json.integer("bytesDone", done) }
            if let total = progress.bytesTotal { json.integer("bytesTotal", total) }
        case .pauseRequested(let reason), .resumeRequested(let reason), .cancelRequested(let reason),
             .leaseExpired(let reason), .retried(let reason):
            if let reason, !json.text("reason", reason) { return nil }
        case .succeeded(let progress, let result):
            guard progress.resumePoint == nil, let resultJSON = resultObject(result) else { return nil }
            if let attempt = progress.attempt { json.integer("attempt", Int64(attempt)) }
            if let done = progress.bytesDone { json.integer("bytesDone", done) }
            if let total = progress.bytesTotal { json.integer("bytesTotal", total) }
            json.object("result", resultJSON)
        case .submitted, .paused, .cancelled, .attemptFailed, .released, .failed, .archived:
            return nil
        }
        // `v` sorts after every other key of these shapes.
        json.integer("v", Int64(EventPayload.schemaVersion))
        return json.finished()
    }
}

extension PayloadJSON {
    /// A `succeeded` event's result, keys sorted as Foundation sorts them; nil when it holds bytes in
    /// flight (`data`, base64 in Foundation's encoding), custom metadata (a dictionary) or text needing
    /// escapes: those take the encoder.
    static func resultObject(_ result: JobResult) -> JSONObjectText? {
        guard result.data == nil else { return nil }
        var json = JSONObjectText()
        guard json.optionalText("blob", result.blob), json.optionalText("crc32c", result.crc32c),
              json.optionalText("deleted", result.deleted), json.optionalText("md5", result.md5) else { return nil }
        if let object = result.object {
            guard let objectJSON = storageObject(object) else { return nil }
            json.object("object", objectJSON)
        }
        guard json.optionalText("path", result.path) else { return nil }
        if let size = result.size { json.integer("size", size) }
        if let skipped = result.skipped { json.boolean("skipped", skipped) }
        guard json.optionalText("url", result.url) else { return nil }
        if let verified = result.verified {
            guard json.textArray("verified", verified.map(\.rawValue)) else { return nil }
        }
        return json
    }

    /// An object's metadata, keys sorted as Foundation sorts them; nil with custom metadata or text
    /// needing escapes.
    static func storageObject(_ object: StorageObject) -> JSONObjectText? {
        guard object.customMetadata == nil else { return nil }
        var json = JSONObjectText()
        guard json.optionalText("bucket", object.bucket), json.optionalText("cacheControl", object.cacheControl),
              json.optionalText("contentDisposition", object.contentDisposition),
              json.optionalText("contentEncoding", object.contentEncoding),
              json.optionalText("contentLanguage", object.contentLanguage),
              json.optionalText("contentType", object.contentType), json.optionalText("crc32c", object.crc32c),
              json.optionalText("downloadTokens", object.downloadTokens), json.optionalText("generation", object.generation),
              json.optionalText("md5Hash", object.md5Hash), json.optionalText("metageneration", object.metageneration),
              json.optionalText("name", object.name) else { return nil }
        json.integer("size", object.size)
        guard json.optionalText("timeCreated", object.timeCreated), json.optionalText("updated", object.updated) else { return nil }
        return json
    }
}

/// A JSON object written key by key, in the order given (the caller gives them sorted).
struct JSONObjectText {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]

    init() { bytes.reserveCapacity(96) }

    private mutating func key(_ name: StaticString) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
    }

    mutating func integer(_ name: StaticString, _ value: Int64) {
        key(name)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Appends a text member when `value` needs no escaping; otherwise appends nothing and returns false.
    mutating func text(_ name: StaticString, _ value: String) -> Bool {
        guard Self.needsNoEscape(value) else { return false }
        key(name)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: value.utf8)
        bytes.append(UInt8(ascii: "\""))
        return true
    }

    /// Appends a text member when `value` is nil (nothing) or needs no escaping; false otherwise.
    mutating func optionalText(_ name: StaticString, _ value: String?) -> Bool {
        guard let value else { return true }
        return text(name, value)
    }

    mutating func boolean(_ name: StaticString, _ value: Bool) {
        key(name)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    /// Appends an array of texts when none needs escaping; otherwise appends nothing and returns false.
    mutating func textArray(_ name: StaticString, _ values: [String]) -> Bool {
        guard values.allSatisfy(Self.needsNoEscape) else { return false }
        key(name)
        bytes.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(UInt8(ascii: "\""))
            bytes.append(contentsOf: value.utf8)
            bytes.append(UInt8(ascii: "\""))
        }
        bytes.append(UInt8(ascii: "]"))
        return true
    }

    /// Appends another object, finished, as a member.
    mutating func object(_ name: StaticString, _ inner: JSONObjectText) {
        key(name)
        bytes.append(contentsOf: inner.bytes)
        bytes.append(UInt8(ascii: "}"))
    }

    /// Whether `value` is printable ASCII without `"` or `\`: the text JSON holds as is.
    private static func needsNoEscape(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
    }

    func finished() -> String {
        String(decoding: bytes + [UInt8(ascii: "}")], as: UTF8.self)
    }
}
