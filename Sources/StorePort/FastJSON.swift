import Foundation
import JobModel

/// A value `StoreJSON.decode` can read from a `JSONValue` without Foundation's `JSONDecoder`.
///
/// `init?(json:)` gives exactly the value Foundation's decoder gives for the same JSON (the synthesized
/// `Decodable` conformances: unknown keys ignored, `null` as an absent optional, raw-value enums by raw
/// value, `Data` as base64), or nil whenever it is not sure — a duplicated key, a number that is not a
/// plain integer, a value of the wrong type, a rarely written shape (a resume point, an archive record).
/// The caller then asks Foundation, so any text decodes, or fails, as it always did.
protocol FastJSONDecodable {
    init?(json: JSONValue)
}

/// Decoding with the hand-written readers first and Foundation's decoder for whatever they decline.
enum FastJSON {
    /// The value of `text` when the hand-written reader is sure of it, else nil.
    static func decode<T>(_ type: T.Type, _ text: String) -> T? {
        // The shapes a big log's readers decode once per row (event payloads; PostgreSQL's spec and
        // result columns) by their concrete type: through the protocol, each value was boxed in an
        // existential (a heap copy of the whole payload) only to be cast back out of it.
        if type == EventData.self { return concrete(EventData.self, text) as? T }
        if type == JobSpec.self { return concrete(JobSpec.self, text) as? T }
        if type == JobResult.self { return concrete(JobResult.self, text) as? T }
        guard let fast = type as? any FastJSONDecodable.Type, let json = JSONReader.read(text) else { return nil }
        return fast.init(json: json) as? T
    }

    private static func concrete<V: FastJSONDecodable>(_ type: V.Type, _ text: String) -> V? {
        guard let json = JSONReader.read(text) else { return nil }
        return V(json: json)
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

extension JSONValue {
    var string: String? { if case .string(let value) = self { value } else { nil } }
    var int64: Int64? { if case .integer(let value) = self { value } else { nil } }
    var int: Int? { if case .integer(let value) = self { Int(exactly: value) } else { nil } }
    var bool: Bool? { if case .bool(let value) = self { value } else { nil } }

    /// `read` of the value, or `.some(nil)` for `null` (an absent optional); nil when `read` declines.
    func optional<T>(_ read: (JSONValue) -> T?) -> T?? {
        if case .null = self { return .some(nil) }
        guard let value = read(self) else { return nil }
        return .some(value)
    }

    var optionalString: String?? { optional(\.string) }
    var optionalInt64: Int64?? { optional(\.int64) }
    var optionalInt: Int?? { optional(\.int) }

    /// An array whose every element `read` accepts.
    func array<T>(_ read: (JSONValue) -> T?) -> [T]? {
        guard case .array(let elements) = self else { return nil }
        var values: [T] = []
        values.reserveCapacity(elements.count)
        for element in elements {
            guard let value = read(element) else { return nil }
            values.append(value)
        }
        return values
    }

    /// An object of strings, as `[String: String]` decodes (declined when a key repeats).
    var stringDictionary: [String: String]? {
        guard case .object(let members) = self else { return nil }
        var dictionary: [String: String] = [:]
        for (key, value) in members {
            guard let text = value.string, dictionary.updateValue(text, forKey: key) == nil else { return nil }
        }
        return dictionary
    }
}

/// A raw-value enum read from its raw string.
private func rawEnum<T: RawRepresentable>(_ value: JSONValue) -> T? where T.RawValue == String {
    value.string.flatMap(T.init(rawValue:))
}

// MARK: - Payloads

extension EventData: FastJSONDecodable {
    init?(json: JSONValue) {
        guard case .object(let members) = json else { return nil }
        var seen = SeenKeys()
        var version: Int?
        var data = EventData()
        for (key, value) in members {
            switch key {
            case "v": guard seen.first(0), let v = value.int else { return nil }; version = v
            case "spec": guard seen.first(1), let v = value.optional(JobSpec.init(json:)) else { return nil }; data.spec = v
            case "leaseOwner": guard seen.first(2), let v = value.optionalString else { return nil }; data.leaseOwner = v
            case "leaseExpiresAtMs": guard seen.first(3), let v = value.optionalInt64 else { return nil }; data.leaseExpiresAtMs = v
            case "attempt": guard seen.first(4), let v = value.optionalInt else { return nil }; data.attempt = v
            case "bytesDone": guard seen.first(5), let v = value.optionalInt64 else { return nil }; data.bytesDone = v
            case "bytesTotal": guard seen.first(6), let v = value.optionalInt64 else { return nil }; data.bytesTotal = v
            case "resumePoint": guard seen.first(11), case .null = value else { return nil }  // rare: Foundation reads it
            case "error": guard seen.first(7), let v = value.optional(StorageError.init(json:)) else { return nil }; data.error = v
            case "retryAtMs": guard seen.first(8), let v = value.optionalInt64 else { return nil }; data.retryAtMs = v
            case "result": guard seen.first(9), let v = value.optional(JobResult.init(json:)) else { return nil }; data.result = v
            case "reason": guard seen.first(10), let v = value.optionalString else { return nil }; data.reason = v
            case "archive": guard seen.first(12), case .null = value else { return nil }  // rare: Foundation reads it
            default: continue
            }
        }
        guard let version else { return nil }
        data.v = version
        self = data
    }
}

extension JobSpec: FastJSONDecodable {
    init?(json: JSONValue) {
        guard case .object(let members) = json else { return nil }
        var seen = SeenKeys()
        var kind: JobKind?
        var priority: Int?
        var maxAttempts: Int?
        var queue: String?
        var spec = JobSpec(kind: .uploadData)
        for (key, value) in members {
            switch key {
            case "kind": guard seen.first(0), let v: JobKind = rawEnum(value) else { return nil }; kind = v
            case "source": guard seen.first(1), let v = value.optionalString else { return nil }; spec.source = v
            case "destination": guard seen.first(2), let v = value.optionalString else { return nil }; spec.destination = v
            case "data":
                guard seen.first(3), let v = value.optional({ $0.string.flatMap { Data(base64Encoded: $0) } }) else { return nil }
                spec.data = v
            case "maxSize": guard seen.first(4), let v = value.optionalInt64 else { return nil }; spec.maxSize = v
            case "metadata": guard seen.first(5), let v = value.optional(UploadMetadata.init(json:)) else { return nil }; spec.metadata = v
            case "key": guard seen.first(6), let v = value.optionalString else { return nil }; spec.key = v
            case "priority": guard seen.first(7), let v = value.int else { return nil }; priority = v
            case "maxAttempts": guard seen.first(8), let v = value.int else { return nil }; maxAttempts = v
            case "queue": guard seen.first(9), let v = value.string else { return nil }; queue = v
            case "timeoutSeconds": guard seen.first(10), let v = value.optionalInt else { return nil }; spec.timeoutSeconds = v
            case "checksums":
                guard seen.first(11), let v = value.optional({ $0.array { (e: JSONValue) -> ChecksumAlgorithm? in rawEnum(e) } }) else { return nil }
                spec.checksums = v
            case "ifExists": guard seen.first(12), let v = value.optional({ (e: JSONValue) -> IfExists? in rawEnum(e) }) else { return nil }; spec.ifExists = v
            case "maxRate": guard seen.first(13), let v = value.optionalInt64 else { return nil }; spec.maxRate = v
            case "runAfterMs": guard seen.first(14), let v = value.optionalInt64 else { return nil }; spec.runAfterMs = v
            case "batch": guard seen.first(15), let v = value.optional(JobBatch.init(json:)) else { return nil }; spec.batch = v
            case "after": guard seen.first(16), let v = value.optional({ $0.array(\.string) }) else { return nil }; spec.after = v
            case "removeCustomMetadata":
                guard seen.first(17), let v = value.optional({ $0.array(\.string) }) else { return nil }
                spec.removeCustomMetadata = v
            case "ifGeneration": guard seen.first(18), let v = value.optionalInt64 else { return nil }; spec.ifGeneration = v
            default: continue
            }
        }
        guard let kind, let priority, let maxAttempts, let queue else { return nil }
        spec.kind = kind
        spec.priority = priority
        spec.maxAttempts = maxAttempts
        spec.queue = queue
        self = spec
    }
}

extension UploadMetadata: FastJSONDecodable {
    init?(json: JSONValue) {
        guard case .object(let members) = json else { return nil }
        var seen = SeenKeys()
        var metadata = UploadMetadata()
        for (key, value) in members {
            switch key {
            case "contentType": guard seen.first(0), let v = value.optionalString else { return nil }; metadata.contentType = v
            case "cacheControl": guard seen.first(1), let v = value.optionalString else { return nil }; metadata.cacheControl = v
            case "contentDisposition": guard seen.first(2), let v = value.optionalString else { return nil }; metadata.contentDisposition = v
            case "contentEncoding": guard seen.first(3), let v = value.optionalString else { return nil }; metadata.contentEncoding = v
            case "contentLanguage": guard seen.first(4), let v = value.optionalString else { return nil }; metadata.contentLanguage = v
            case "customMetadata": guard seen.first(5), let v = value.optional(\.stringDictionary) else { return nil }; metadata.customMetadata = v
            default: continue
            }
        }
        self = metadata
    }
}

extension JobBatch: FastJSONDecodable {
    init?(json: JSONValue) {
        guard case .object(let members) = json else { return nil }
        var seen = SeenKeys()
        var id: String?
        var source: String?
        var path: String?
        var include: [String]?
        var exclude: [String]?
        for (key, value) in members {
            switch key {
            case "id": guard seen.first(0), let v = value.string else { return nil }; id = v
            case "source": guard seen.first(1), let v = value.string else { return nil }; source = v
            case "include": guard seen.first(2), let v = value.optional({ $0.array(\.string) }) else { return nil }; include = v
            case "exclude": guard seen.first(3), let v = value.optional({ $0.array(\.string) }) else { return nil }; exclude = v
            case "path": guard seen.first(4), let v = value.string else { return nil }; path = v
            default: continue
            }
        }
        guard let id, let source, let path else { return nil }
        self.init(id: id, source: source, include: include, exclude: exclude, path: path)
    }
}

extension StorageError: FastJSONDecodable {
    init?(json: JSONValue) {
        guard case .object(let members) = json else { return nil }
        var seen = SeenKeys()
        var code: StorageErrorCode?
        var message: String?
        var retryable: Bool?
        var error = StorageError(.unknown, "")
        for (key, value) in members {
            switch key {
            case "code":
                guard seen.first(0), let raw = value.int, let v = StorageErrorCode(rawValue: raw) else { return nil }
                code = v
            case "message": guard seen.first(1), let v = value.string else { return nil }; message = v
            case "httpStatus": guard seen.first(2), let v = value.optionalInt else { return nil }; error.httpStatus = v
            case "url": guard seen.first(3), let v = value.optionalString else { return nil }; error.url = v
            case "retryable": guard seen.first(4), let v = value.bool else { return nil }; retryable = v
            case "retryAfter":
                // Only whole seconds written as integers; a fraction is Foundation's to read.
                guard seen.first(5), let v = value.optional({ $0.int64.flatMap { Double(exactly: $0) } }) else { return nil }
                error.retryAfter = v
            case "cause": guard seen.first(6), let v = value.optionalString else { return nil }; error.cause = v
            case "total": guard seen.first(7), let v = value.optionalInt64 else { return nil }; error.total = v
            case "maximum": guard seen.first(8), let v = value.optionalInt64 else { return nil }; error.maximum = v
            default: continue
            }
        }
        guard let code, let message, let retryable else { return nil }
        error.code = code
        error.message = message
        error.retryable = retryable
        self = error
    }
}

// MARK: - Results

extension JobResult: FastJSONDecodable {
    init?(json: JSONValue) {
        guard case .object(let members) = json else { return nil }
        var seen = SeenKeys()
        var result = JobResult()
        for (key, value) in members {
            switch key {
            case "object": guard seen.first(0), let v = value.optional(StorageObject.init(json:)) else { return nil }; result.object = v
            case "path": guard seen.first(1), let v = value.optionalString else { return nil }; result.path = v
            case "size": guard seen.first(2), let v = value.optionalInt64 else { return nil }; result.size = v
            case "md5": guard seen.first(3), let v = value.optionalString else { return nil }; result.md5 = v
            case "crc32c": guard seen.first(4), let v = value.optionalString else { return nil }; result.crc32c = v
            case "verified":
                guard seen.first(5), let v = value.optional({ $0.array { (e: JSONValue) -> ChecksumAlgorithm? in rawEnum(e) } }) else { return nil }
                result.verified = v
            case "blob": guard seen.first(6), let v = value.optionalString else { return nil }; result.blob = v
            case "data":
                guard seen.first(7), let v = value.optional({ $0.string.flatMap { Data(base64Encoded: $0) } }) else { return nil }
                result.data = v
            case "url": guard seen.first(8), let v = value.optionalString else { return nil }; result.url = v
            case "skipped": guard seen.first(9), let v = value.optional(\.bool) else { return nil }; result.skipped = v
            case "deleted": guard seen.first(10), let v = value.optionalString else { return nil }; result.deleted = v
            default: continue
            }
        }
        self = result
    }
}

extension StorageObject: FastJSONDecodable {
    init?(json: JSONValue) {
        guard case .object(let members) = json else { return nil }
        var seen = SeenKeys()
        var bucket: String?
        var name: String?
        var size: Int64?
        var object = StorageObject(bucket: "", name: "", size: 0)
        for (key, value) in members {
            switch key {
            case "bucket": guard seen.first(0), let v = value.string else { return nil }; bucket = v
            case "name": guard seen.first(1), let v = value.string else { return nil }; name = v
            case "size": guard seen.first(2), let v = value.int64 else { return nil }; size = v
            case "contentType": guard seen.first(3), let v = value.optionalString else { return nil }; object.contentType = v
            case "cacheControl": guard seen.first(4), let v = value.optionalString else { return nil }; object.cacheControl = v
            case "contentDisposition": guard seen.first(5), let v = value.optionalString else { return nil }; object.contentDisposition = v
            case "contentEncoding": guard seen.first(6), let v = value.optionalString else { return nil }; object.contentEncoding = v
            case "contentLanguage": guard seen.first(7), let v = value.optionalString else { return nil }; object.contentLanguage = v
            case "customMetadata": guard seen.first(8), let v = value.optional(\.stringDictionary) else { return nil }; object.customMetadata = v
            case "md5Hash": guard seen.first(9), let v = value.optionalString else { return nil }; object.md5Hash = v
            case "crc32c": guard seen.first(10), let v = value.optionalString else { return nil }; object.crc32c = v
            case "generation": guard seen.first(11), let v = value.optionalString else { return nil }; object.generation = v
            case "metageneration": guard seen.first(12), let v = value.optionalString else { return nil }; object.metageneration = v
            case "timeCreated": guard seen.first(13), let v = value.optionalString else { return nil }; object.timeCreated = v
            case "updated": guard seen.first(14), let v = value.optionalString else { return nil }; object.updated = v
            case "downloadTokens": guard seen.first(15), let v = value.optionalString else { return nil }; object.downloadTokens = v
            default: continue
            }
        }
        guard let bucket, let name, let size else { return nil }
        object.bucket = bucket
        object.name = name
        object.size = size
        self = object
    }
}
