import JobModel

/// The JSON of an event payload, as the log stores it: byte for byte what `StoreJSON.encode(payload.wire)`
/// gives (sorted keys, slashes not escaped), written by hand for the payloads a worker appends by the
/// thousand — `claimed`, `started` and `progress` without a resume point, and the request and rescue
/// events that carry only a reason — and through Foundation's encoder for every other payload.
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
        case .submitted, .paused, .cancelled, .attemptFailed, .released, .succeeded, .failed, .archived:
            return nil
        }
        // `v` sorts after every other key of these shapes.
        json.integer("v", Int64(EventPayload.schemaVersion))
        return json.finished()
    }
}

/// A JSON object written key by key, in the order given (the caller gives them sorted).
private struct JSONObjectText {
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
        guard value.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) else {
            return false
        }
        key(name)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: value.utf8)
        bytes.append(UInt8(ascii: "\""))
        return true
    }

    func finished() -> String {
        String(decoding: bytes + [UInt8(ascii: "}")], as: UTF8.self)
    }
}
