import Foundation

// MARK: - Values a server sent back, without the request's secrets

/// A server may send back what it was asked with — its query in an `ETag` or a `Content-Type`, its
/// `Authorization` header in a message — and what it sends is stored in the log (a result's metadata, an
/// error) and shown by every command. The URL redaction of the CLI does not see such values (they are no
/// URLs), so they are scrubbed of the request's secrets before they are stored.
extension StorageObject {
    /// The object with each of `secrets` (see `SecretRedaction.scrub`) replaced by `REDACTED` in every
    /// value a server reports. Its bucket and name are the job's own and kept.
    public func withoutSecrets(_ secrets: [String]) -> StorageObject {
        guard !secrets.isEmpty else { return self }
        let scrub = { (value: String?) in value.map { SecretRedaction.scrub($0, secrets: secrets) } }
        var object = self
        object.contentType = scrub(contentType)
        object.cacheControl = scrub(cacheControl)
        object.contentDisposition = scrub(contentDisposition)
        object.contentEncoding = scrub(contentEncoding)
        object.contentLanguage = scrub(contentLanguage)
        object.customMetadata = customMetadata.map { metadata in
            Dictionary(metadata.map { (SecretRedaction.scrub($0.key, secrets: secrets), SecretRedaction.scrub($0.value, secrets: secrets)) },
                       uniquingKeysWith: { first, _ in first })
        }
        object.md5Hash = scrub(md5Hash)
        object.crc32c = scrub(crc32c)
        object.generation = scrub(generation)
        object.metageneration = scrub(metageneration)
        object.timeCreated = scrub(timeCreated)
        object.updated = scrub(updated)
        return object
    }
}

extension JobResult {
    /// The result with its object's reported values scrubbed of `secrets` (`StorageObject.withoutSecrets`).
    /// Its URL, path and bytes are the job's own (a fetched URL's token is the result itself), and kept.
    public func withoutSecrets(_ secrets: [String]) -> JobResult {
        guard !secrets.isEmpty, let object else { return self }
        let scrubbed = object.withoutSecrets(secrets)
        guard scrubbed != object else { return self }
        var result = self
        result.object = scrubbed
        return result
    }
}

extension StorageError {
    /// The error with each of `secrets` replaced by `REDACTED` in its message and cause, which may quote
    /// what a server answered (a header, a validator, its text).
    public func withoutSecrets(_ secrets: [String]) -> StorageError {
        guard !secrets.isEmpty else { return self }
        var error = self
        error.message = SecretRedaction.scrub(message, secrets: secrets)
        error.cause = cause.map { SecretRedaction.scrub($0, secrets: secrets) }
        return error
    }
}

extension JobSpec {
    /// The secret values the job's own URLs carry (`SecretRedaction.secretValues`), which no value a server
    /// sends back may be stored with; empty for URLs with nothing to hide (`gs://b/o`, a local path).
    public var urlSecrets: [String] {
        [source, destination].compactMap { $0 }.filter(SecretRedaction.mayHoldSecret).flatMap(SecretRedaction.secretValues(in:))
    }
}
