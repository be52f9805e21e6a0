import JobModel

/// The JSON of an event payload, as the log stores it: byte for byte what `StoreJSON.encode(payload.wire)`
/// gives (sorted keys, slashes not escaped), written by hand for the payloads a worker appends by the
/// thousand — `claimed`, `started`, `progress` and `succeeded` without a resume point (a result whose text
/// needs no escapes and whose custom metadata has at most one entry), and the request and rescue events that carry only a reason — and
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

    /// The hand-written JSON of `payload`, or nil when it is not one of the simple shapes. Written with
    /// `JSONText`, the store's one hand-written JSON writer (the result inside a `succeeded` payload is
    /// `JobResult`'s own `FastJSONEncodable` text, the same as the projection's).
    static func handWritten(_ payload: EventPayload) -> String? {
        var json = JSONText()
        let version = EventPayload.schemaVersion
        // Keys in sorted order; `v` sorts after every other key of these shapes.
        let written = json.object { json in
            switch payload {
            case .claimed(let owner, let expiresAt, let attempt):
                return json.integer("attempt", attempt) && json.integer("leaseExpiresAtMs", expiresAt)
                    && json.string("leaseOwner", owner) && json.integer("v", version)
            case .started(let progress), .progress(let progress):
                guard progress.resumePoint == nil else { return false }
                return json.integer("attempt", progress.attempt) && json.integer("bytesDone", progress.bytesDone)
                    && json.integer("bytesTotal", progress.bytesTotal) && json.integer("v", version)
            case .pauseRequested(let reason), .resumeRequested(let reason), .cancelRequested(let reason), .retried(let reason):
                return json.string("reason", reason) && json.integer("v", version)
            case .leaseExpired(let progress, let reason):
                // With a word on the next attempt (`unanswered`), the coder writes it.
                guard progress == .none else { return false }
                return json.string("reason", reason) && json.integer("v", version)
            case .succeeded(let progress, let result):
                guard progress.resumePoint == nil else { return false }
                return json.integer("attempt", progress.attempt) && json.integer("bytesDone", progress.bytesDone)
                    && json.integer("bytesTotal", progress.bytesTotal) && json.nested("result", result)
                    && json.integer("v", version)
            case .submitted, .paused, .cancelled, .attemptFailed, .released, .failed, .archived:
                return false
            }
        }
        return written ? json.text : nil
    }
}
