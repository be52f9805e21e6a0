import Foundation
import JobModel

/// Conversions between the GCS JSON API object resource and `StorageObject` / `UploadMetadata`.
enum GCSObjectJSON {
    /// The custom-metadata key Firebase keeps download tokens under.
    static let downloadTokensKey = "firebaseStorageDownloadTokens"

    /// What `object(from:)` needs, for messages: "not an object resource (…)".
    static let needs = "a bucket, a name, a size in bytes and, if any, a generation that is a whole number"

    /// Decodes an object resource. Numbers may arrive as strings (the API) or numbers (some emulators).
    /// Nil without a bucket, a name or a size that is a whole number of bytes: every GCS object resource
    /// has all three, and a transfer planned from a resource without its size would move nothing (a
    /// download with no hashes to compare would then commit an empty file as the object).
    ///
    /// The generation and metageneration, when given, must be decimal numbers as GCS writes them (an
    /// int64): they go back into query strings (`generation=`, `ifGenerationMatch=`) and the log, so a
    /// value such as `1&alt=json` must not reach a URL.
    static func object(from json: [String: Any]) -> StorageObject? {
        guard let bucket = json["bucket"] as? String, let name = json["name"] as? String,
              let size = stringValue(json["size"]).flatMap({ Int64($0) }), size >= 0 else { return nil }
        let generation = stringValue(json["generation"]), metageneration = stringValue(json["metageneration"])
        guard [generation, metageneration].allSatisfy({ $0.map(isGenerationNumber) ?? true }) else { return nil }
        var custom: [String: String] = [:]
        var tokens: String?
        if let metadata = json["metadata"] as? [String: Any] {
            for (key, value) in metadata {
                guard let text = stringValue(value) else { continue }
                if key == downloadTokensKey { tokens = text } else { custom[key] = text }
            }
        }
        return StorageObject(
            bucket: bucket, name: name, size: size,
            contentType: json["contentType"] as? String, cacheControl: json["cacheControl"] as? String,
            contentDisposition: json["contentDisposition"] as? String, contentEncoding: json["contentEncoding"] as? String,
            contentLanguage: json["contentLanguage"] as? String, customMetadata: custom.isEmpty ? nil : custom,
            md5Hash: json["md5Hash"] as? String, crc32c: json["crc32c"] as? String,
            generation: generation, metageneration: metageneration,
            timeCreated: json["timeCreated"] as? String, updated: json["updated"] as? String, downloadTokens: tokens)
    }

    /// The JSON body that starts an upload: the object's name and writable metadata.
    static func uploadBody(name: String, contentType: String, metadata: UploadMetadata?) -> Data {
        var body: [String: Any] = ["name": name, "contentType": contentType]
        if let value = metadata?.cacheControl { body["cacheControl"] = value }
        if let value = metadata?.contentDisposition { body["contentDisposition"] = value }
        if let value = metadata?.contentEncoding { body["contentEncoding"] = value }
        if let value = metadata?.contentLanguage { body["contentLanguage"] = value }
        if let custom = metadata?.customMetadata, !custom.isEmpty { body["metadata"] = custom }
        return encode(body)
    }

    /// The body of a metadata PATCH: the fields set, and `metadata` as `current`'s custom map (download
    /// tokens included) with the keys set and a JSON null for each key removed (GCS deletes those).
    static func patchBody(current: StorageObject, set update: UploadMetadata, removing: [String],
                          clearing: [MetadataField]) -> Data {
        var body: [String: Any] = [:]
        // A field sent as JSON null is removed (the JSON API's patch semantics, gcloud's --clear-…).
        for field in clearing {
            switch field {
            case .contentType: body["contentType"] = NSNull()
            case .cacheControl: body["cacheControl"] = NSNull()
            case .contentDisposition: body["contentDisposition"] = NSNull()
            case .contentEncoding: body["contentEncoding"] = NSNull()
            case .contentLanguage: body["contentLanguage"] = NSNull()
            case .customMetadata: break
            }
        }
        if let value = update.contentType { body["contentType"] = value }
        if let value = update.cacheControl { body["cacheControl"] = value }
        if let value = update.contentDisposition { body["contentDisposition"] = value }
        if let value = update.contentEncoding { body["contentEncoding"] = value }
        if let value = update.contentLanguage { body["contentLanguage"] = value }
        let clearsCustom = clearing.contains(.customMetadata)
        if update.customMetadata != nil || !removing.isEmpty || clearsCustom {
            var custom: [String: Any] = current.customMetadata ?? [:]
            // Every key the object has now is removed, key by key, so the download tokens are kept.
            if clearsCustom { custom = custom.mapValues { _ in NSNull() } }
            if let tokens = current.downloadTokens { custom[downloadTokensKey] = tokens }
            for (key, value) in update.customMetadata ?? [:] { custom[key] = value }
            for key in removing { custom[key] = NSNull() }
            body["metadata"] = custom
        }
        return encode(body)
    }

    /// A JSON object as bytes (keys sorted, so requests are reproducible).
    static func encode(_ object: [String: Any]) -> Data {
        // Only strings, numbers, nulls and nested dictionaries of them are ever passed: serialisation cannot fail.
        (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
    }

    /// 1 to 19 ASCII digits: an int64 generation, nothing a query string could carry further.
    static func isGenerationNumber(_ text: String) -> Bool {
        (1...19).contains(text.utf8.count) && text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    private static func stringValue(_ value: Any?) -> String? {
        switch value {
        case let text as String: text
        case let number as NSNumber: number.stringValue
        default: nil
        }
    }
}
