import Foundation
import JobModel

/// A value `StoreJSON.decode` can read with `JSONReader`, without Foundation's `JSONDecoder`.
///
/// `init?(reading:)` gives exactly the value Foundation's decoder gives for the same JSON (the
/// synthesized `Decodable` conformances: unknown keys ignored, `null` as an absent optional, raw-value
/// enums by raw value, `Data` as base64), or nil whenever it is not sure — a duplicated key, a number
/// that is not a plain integer, a value of the wrong type, a rarely written shape (a resume point, an
/// archive record). The caller then asks Foundation, so any text decodes, or fails, as it always did.
protocol FastJSONDecodable {
    init?(reading reader: inout JSONReader)
}

/// Decoding with the hand-written readers first and Foundation's decoder for whatever they decline.
enum FastJSON {
    /// The value of `text` when the hand-written reader is sure of it, else nil.
    static func decode<T>(_ type: T.Type, _ text: String) -> T? {
        // The shapes a big log's readers decode once per row (event payloads; PostgreSQL's spec and
        // result columns) by their concrete type: through the protocol, each value was boxed in an
        // existential (a heap copy of the whole payload) only to be cast back out of it.
        if type == EventData.self { return JSONReader.decode(text, EventData.init(reading:)) as? T }
        if type == JobSpec.self { return JSONReader.decode(text, JobSpec.init(reading:)) as? T }
        if type == JobResult.self { return JSONReader.decode(text, JobResult.init(reading:)) as? T }
        guard let fast = type as? any FastJSONDecodable.Type else { return nil }
        return JSONReader.decode(text) { (reader) -> (any FastJSONDecodable)? in fast.init(reading: &reader) } as? T
    }
}

// MARK: - Fields

/// Notes which keys of an object were read, to decline an object that repeats one.
private struct SeenKeys {
    private var bits: UInt64 = 0

    /// Marks key number `index`; false when it was seen before.
    mutating func first(_ index: Int) -> Bool {
        let bit: UInt64 = 1 << UInt64(index)
        guard bits & bit == 0 else { return false }
        bits |= bit
        return true
    }
}

/// A raw-value enum read from its raw string.
private func rawEnum<T: RawRepresentable>(_ reader: inout JSONReader) -> T? where T.RawValue == String {
    reader.string().flatMap(T.init(rawValue:))
}

// MARK: - Payloads

extension EventData: FastJSONDecodable {
    init?(reading reader: inout JSONReader) {
        var seen = SeenKeys()
        var version: Int?
        var data = EventData()
        let read = reader.members { (reader, key) -> Bool in
            if reader.key(key, is: "v") {
                guard seen.first(0), let v = reader.int() else { return false }; version = v
                return true
            }
            if reader.key(key, is: "spec") {
                guard seen.first(1), let v = reader.optional(JobSpec.init(reading:)) else { return false }; data.spec = v
                return true
            }
            if reader.key(key, is: "leaseOwner") {
                guard seen.first(2), let v = reader.optionalString() else { return false }; data.leaseOwner = v
                return true
            }
            if reader.key(key, is: "leaseExpiresAtMs") {
                guard seen.first(3), let v = reader.optionalInt64() else { return false }; data.leaseExpiresAtMs = v
                return true
            }
            if reader.key(key, is: "attempt") {
                guard seen.first(4), let v = reader.optionalInt() else { return false }; data.attempt = v
                return true
            }
            if reader.key(key, is: "bytesDone") {
                guard seen.first(5), let v = reader.optionalInt64() else { return false }; data.bytesDone = v
                return true
            }
            if reader.key(key, is: "bytesTotal") {
                guard seen.first(6), let v = reader.optionalInt64() else { return false }; data.bytesTotal = v
                return true
            }
            if reader.key(key, is: "resumePoint") {
                guard seen.first(11), reader.null() else { return false }  // rare: Foundation reads it
                return true
            }
            if reader.key(key, is: "error") {
                guard seen.first(7), let v = reader.optional(StorageError.init(reading:)) else { return false }; data.error = v
                return true
            }
            if reader.key(key, is: "retryAtMs") {
                guard seen.first(8), let v = reader.optionalInt64() else { return false }; data.retryAtMs = v
                return true
            }
            if reader.key(key, is: "result") {
                guard seen.first(9), let v = reader.optional(JobResult.init(reading:)) else { return false }; data.result = v
                return true
            }
            if reader.key(key, is: "reason") {
                guard seen.first(10), let v = reader.optionalString() else { return false }; data.reason = v
                return true
            }
            if reader.key(key, is: "archive") {
                guard seen.first(12), reader.null() else { return false }  // rare: Foundation reads it
                return true
            }
            if reader.key(key, is: "dependency") {
                guard seen.first(13), let v = reader.optionalString() else { return false }; data.dependency = v
                return true
            }
            return reader.skip()
        }
        guard read else { return nil }
        guard let version else { return nil }
        data.v = version
        self = data
    }
}

extension JobSpec: FastJSONDecodable {
    init?(reading reader: inout JSONReader) {
        var seen = SeenKeys()
        var kind: JobKind?
        var priority: Int?
        var maxAttempts: Int?
        var queue: String?
        var spec = JobSpec(kind: .uploadData)
        let read = reader.members { (reader, key) -> Bool in
            if reader.key(key, is: "kind") {
                guard seen.first(0), let v: JobKind = rawEnum(&reader) else { return false }; kind = v
                return true
            }
            if reader.key(key, is: "source") {
                guard seen.first(1), let v = reader.optionalString() else { return false }; spec.source = v
                return true
            }
            if reader.key(key, is: "destination") {
                guard seen.first(2), let v = reader.optionalString() else { return false }; spec.destination = v
                return true
            }
            if reader.key(key, is: "data") {
                guard seen.first(3), let v = reader.optional({ $0.string().flatMap { Data(base64Encoded: $0) } }) else { return false }
                spec.data = v
                return true
            }
            if reader.key(key, is: "maxSize") {
                guard seen.first(4), let v = reader.optionalInt64() else { return false }; spec.maxSize = v
                return true
            }
            if reader.key(key, is: "metadata") {
                guard seen.first(5), let v = reader.optional(UploadMetadata.init(reading:)) else { return false }; spec.metadata = v
                return true
            }
            if reader.key(key, is: "key") {
                guard seen.first(6), let v = reader.optionalString() else { return false }; spec.key = v
                return true
            }
            if reader.key(key, is: "priority") {
                guard seen.first(7), let v = reader.int() else { return false }; priority = v
                return true
            }
            if reader.key(key, is: "maxAttempts") {
                guard seen.first(8), let v = reader.int() else { return false }; maxAttempts = v
                return true
            }
            if reader.key(key, is: "queue") {
                guard seen.first(9), let v = reader.string() else { return false }; queue = v
                return true
            }
            if reader.key(key, is: "timeoutSeconds") {
                guard seen.first(10), let v = reader.optionalInt() else { return false }; spec.timeoutSeconds = v
                return true
            }
            if reader.key(key, is: "checksums") {
                guard seen.first(11), let v = reader.optional({ $0.array { (e: inout JSONReader) -> ChecksumAlgorithm? in rawEnum(&e) } }) else { return false }
                spec.checksums = v
                return true
            }
            if reader.key(key, is: "ifExists") {
                guard seen.first(12), let v = reader.optional({ (e: inout JSONReader) -> IfExists? in rawEnum(&e) }) else { return false }; spec.ifExists = v
                return true
            }
            if reader.key(key, is: "maxRate") {
                guard seen.first(13), let v = reader.optionalInt64() else { return false }; spec.maxRate = v
                return true
            }
            if reader.key(key, is: "runAfterMs") {
                guard seen.first(14), let v = reader.optionalInt64() else { return false }; spec.runAfterMs = v
                return true
            }
            if reader.key(key, is: "batch") {
                guard seen.first(15), let v = reader.optional(JobBatch.init(reading:)) else { return false }; spec.batch = v
                return true
            }
            if reader.key(key, is: "after") {
                guard seen.first(16), let v = reader.optional({ $0.array { $0.string() } }) else { return false }; spec.after = v
                return true
            }
            if reader.key(key, is: "removeCustomMetadata") {
                guard seen.first(17), let v = reader.optional({ $0.array { $0.string() } }) else { return false }
                spec.removeCustomMetadata = v
                return true
            }
            if reader.key(key, is: "ifGeneration") {
                guard seen.first(18), let v = reader.optionalInt64() else { return false }; spec.ifGeneration = v
                return true
            }
            if reader.key(key, is: "clearMetadata") {
                guard seen.first(19), let v = reader.optional({ $0.array { (e: inout JSONReader) -> MetadataField? in rawEnum(&e) } }) else {
                    return false
                }
                spec.clearMetadata = v
                return true
            }
            return reader.skip()
        }
        guard read else { return nil }
        guard let kind, let priority, let maxAttempts, let queue else { return nil }
        spec.kind = kind
        spec.priority = priority
        spec.maxAttempts = maxAttempts
        spec.queue = queue
        self = spec
    }
}

extension UploadMetadata: FastJSONDecodable {
    init?(reading reader: inout JSONReader) {
        var seen = SeenKeys()
        var metadata = UploadMetadata()
        let read = reader.members { (reader, key) -> Bool in
            if reader.key(key, is: "contentType") {
                guard seen.first(0), let v = reader.optionalString() else { return false }; metadata.contentType = v
                return true
            }
            if reader.key(key, is: "cacheControl") {
                guard seen.first(1), let v = reader.optionalString() else { return false }; metadata.cacheControl = v
                return true
            }
            if reader.key(key, is: "contentDisposition") {
                guard seen.first(2), let v = reader.optionalString() else { return false }; metadata.contentDisposition = v
                return true
            }
            if reader.key(key, is: "contentEncoding") {
                guard seen.first(3), let v = reader.optionalString() else { return false }; metadata.contentEncoding = v
                return true
            }
            if reader.key(key, is: "contentLanguage") {
                guard seen.first(4), let v = reader.optionalString() else { return false }; metadata.contentLanguage = v
                return true
            }
            if reader.key(key, is: "customMetadata") {
                guard seen.first(5), let v = reader.optional({ $0.stringDictionary() }) else { return false }; metadata.customMetadata = v
                return true
            }
            return reader.skip()
        }
        guard read else { return nil }
        self = metadata
    }
}

extension JobBatch: FastJSONDecodable {
    init?(reading reader: inout JSONReader) {
        var seen = SeenKeys()
        var id: String?
        var source: String?
        var path: String?
        var include: [String]?
        var exclude: [String]?
        let read = reader.members { (reader, key) -> Bool in
            if reader.key(key, is: "id") {
                guard seen.first(0), let v = reader.string() else { return false }; id = v
                return true
            }
            if reader.key(key, is: "source") {
                guard seen.first(1), let v = reader.string() else { return false }; source = v
                return true
            }
            if reader.key(key, is: "include") {
                guard seen.first(2), let v = reader.optional({ $0.array { $0.string() } }) else { return false }; include = v
                return true
            }
            if reader.key(key, is: "exclude") {
                guard seen.first(3), let v = reader.optional({ $0.array { $0.string() } }) else { return false }; exclude = v
                return true
            }
            if reader.key(key, is: "path") {
                guard seen.first(4), let v = reader.string() else { return false }; path = v
                return true
            }
            return reader.skip()
        }
        guard read else { return nil }
        guard let id, let source, let path else { return nil }
        self.init(id: id, source: source, include: include, exclude: exclude, path: path)
    }
}

extension StorageError: FastJSONDecodable {
    init?(reading reader: inout JSONReader) {
        var seen = SeenKeys()
        var code: StorageErrorCode?
        var message: String?
        var retryable: Bool?
        var error = StorageError(.unknown, "")
        let read = reader.members { (reader, key) -> Bool in
            if reader.key(key, is: "code") {
                guard seen.first(0), let raw = reader.int(), let v = StorageErrorCode(rawValue: raw) else { return false }
                code = v
                return true
            }
            if reader.key(key, is: "message") {
                guard seen.first(1), let v = reader.string() else { return false }; message = v
                return true
            }
            if reader.key(key, is: "httpStatus") {
                guard seen.first(2), let v = reader.optionalInt() else { return false }; error.httpStatus = v
                return true
            }
            if reader.key(key, is: "url") {
                guard seen.first(3), let v = reader.optionalString() else { return false }; error.url = v
                return true
            }
            if reader.key(key, is: "retryable") {
                guard seen.first(4), let v = reader.bool() else { return false }; retryable = v
                return true
            }
            if reader.key(key, is: "retryAfter") {
                // Only whole seconds written as integers; a fraction is Foundation's to read.
                guard seen.first(5), let v = reader.optional({ $0.int64().flatMap { Double(exactly: $0) } }) else { return false }
                error.retryAfter = v
                return true
            }
            if reader.key(key, is: "cause") {
                guard seen.first(6), let v = reader.optionalString() else { return false }; error.cause = v
                return true
            }
            if reader.key(key, is: "total") {
                guard seen.first(7), let v = reader.optionalInt64() else { return false }; error.total = v
                return true
            }
            if reader.key(key, is: "maximum") {
                guard seen.first(8), let v = reader.optionalInt64() else { return false }; error.maximum = v
                return true
            }
            return reader.skip()
        }
        guard read else { return nil }
        guard let code, let message, let retryable else { return nil }
        error.code = code
        error.message = message
        error.retryable = retryable
        self = error
    }
}

// MARK: - Results

extension JobResult: FastJSONDecodable {
    init?(reading reader: inout JSONReader) {
        var seen = SeenKeys()
        var result = JobResult()
        let read = reader.members { (reader, key) -> Bool in
            if reader.key(key, is: "object") {
                guard seen.first(0), let v = reader.optional(StorageObject.init(reading:)) else { return false }; result.object = v
                return true
            }
            if reader.key(key, is: "path") {
                guard seen.first(1), let v = reader.optionalString() else { return false }; result.path = v
                return true
            }
            if reader.key(key, is: "size") {
                guard seen.first(2), let v = reader.optionalInt64() else { return false }; result.size = v
                return true
            }
            if reader.key(key, is: "md5") {
                guard seen.first(3), let v = reader.optionalString() else { return false }; result.md5 = v
                return true
            }
            if reader.key(key, is: "crc32c") {
                guard seen.first(4), let v = reader.optionalString() else { return false }; result.crc32c = v
                return true
            }
            if reader.key(key, is: "verified") {
                guard seen.first(5), let v = reader.optional({ $0.array { (e: inout JSONReader) -> ChecksumAlgorithm? in rawEnum(&e) } }) else { return false }
                result.verified = v
                return true
            }
            if reader.key(key, is: "blob") {
                guard seen.first(6), let v = reader.optionalString() else { return false }; result.blob = v
                return true
            }
            if reader.key(key, is: "data") {
                guard seen.first(7), let v = reader.optional({ $0.string().flatMap { Data(base64Encoded: $0) } }) else { return false }
                result.data = v
                return true
            }
            if reader.key(key, is: "url") {
                guard seen.first(8), let v = reader.optionalString() else { return false }; result.url = v
                return true
            }
            if reader.key(key, is: "skipped") {
                guard seen.first(9), let v = reader.optional({ $0.bool() }) else { return false }; result.skipped = v
                return true
            }
            if reader.key(key, is: "deleted") {
                guard seen.first(10), let v = reader.optionalString() else { return false }; result.deleted = v
                return true
            }
            return reader.skip()
        }
        guard read else { return nil }
        self = result
    }
}

extension StorageObject: FastJSONDecodable {
    init?(reading reader: inout JSONReader) {
        var seen = SeenKeys()
        var bucket: String?
        var name: String?
        var size: Int64?
        var object = StorageObject(bucket: "", name: "", size: 0)
        let read = reader.members { (reader, key) -> Bool in
            if reader.key(key, is: "bucket") {
                guard seen.first(0), let v = reader.string() else { return false }; bucket = v
                return true
            }
            if reader.key(key, is: "name") {
                guard seen.first(1), let v = reader.string() else { return false }; name = v
                return true
            }
            if reader.key(key, is: "size") {
                guard seen.first(2), let v = reader.int64() else { return false }; size = v
                return true
            }
            if reader.key(key, is: "contentType") {
                guard seen.first(3), let v = reader.optionalString() else { return false }; object.contentType = v
                return true
            }
            if reader.key(key, is: "cacheControl") {
                guard seen.first(4), let v = reader.optionalString() else { return false }; object.cacheControl = v
                return true
            }
            if reader.key(key, is: "contentDisposition") {
                guard seen.first(5), let v = reader.optionalString() else { return false }; object.contentDisposition = v
                return true
            }
            if reader.key(key, is: "contentEncoding") {
                guard seen.first(6), let v = reader.optionalString() else { return false }; object.contentEncoding = v
                return true
            }
            if reader.key(key, is: "contentLanguage") {
                guard seen.first(7), let v = reader.optionalString() else { return false }; object.contentLanguage = v
                return true
            }
            if reader.key(key, is: "customMetadata") {
                guard seen.first(8), let v = reader.optional({ $0.stringDictionary() }) else { return false }; object.customMetadata = v
                return true
            }
            if reader.key(key, is: "md5Hash") {
                guard seen.first(9), let v = reader.optionalString() else { return false }; object.md5Hash = v
                return true
            }
            if reader.key(key, is: "crc32c") {
                guard seen.first(10), let v = reader.optionalString() else { return false }; object.crc32c = v
                return true
            }
            if reader.key(key, is: "generation") {
                guard seen.first(11), let v = reader.optionalString() else { return false }; object.generation = v
                return true
            }
            if reader.key(key, is: "metageneration") {
                guard seen.first(12), let v = reader.optionalString() else { return false }; object.metageneration = v
                return true
            }
            if reader.key(key, is: "timeCreated") {
                guard seen.first(13), let v = reader.optionalString() else { return false }; object.timeCreated = v
                return true
            }
            if reader.key(key, is: "updated") {
                guard seen.first(14), let v = reader.optionalString() else { return false }; object.updated = v
                return true
            }
            if reader.key(key, is: "downloadTokens") {
                guard seen.first(15), let v = reader.optionalString() else { return false }; object.downloadTokens = v
                return true
            }
            return reader.skip()
        }
        guard read else { return nil }
        guard let bucket, let name, let size else { return nil }
        object.bucket = bucket
        object.name = name
        object.size = size
        self = object
    }
}
