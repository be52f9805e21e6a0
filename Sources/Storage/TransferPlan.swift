import Foundation
import JobModel

/// A job decoded into the one transfer it asks for, shared by the network backends: the remote
/// reference parsed and checked once, the local side resolved, the upload's content type chosen.
enum TransferPlan {
    case upload(UploadSource, to: StorageReference, contentType: String)
    case downloadFile(StorageReference, to: String)
    case downloadMemory(StorageReference, maxSize: Int64)
    case fetchURL(StorageReference)
    case getMetadata(StorageReference)
    /// The fields to set, the custom metadata keys to delete and the fields to clear.
    case updateMetadata(StorageReference, set: UploadMetadata, removing: [String], clearing: [MetadataField])
    case delete(StorageReference)

    /// Decodes `spec` for a backend serving `schemes`; `expected` names them in the error a reference of
    /// another scheme gets (e.g. "an http(s) URL"). An upload `policy` refuses is refused here, before the
    /// source is opened or any request is sent. `parsed` is `spec.remoteReference()` when the caller
    /// parsed it already (the router does, to choose the backend), so a job's reference is parsed once;
    /// otherwise it is parsed here with `firebaseHosts` (the backend's settings').
    init(_ spec: JobSpec, parsed: StorageReference? = nil, firebaseHosts: FirebaseHosts, schemes: Set<StorageReference.Scheme>,
         expected: String, policy: UploadPolicy) throws(StorageError) {
        let remote: StorageReference
        if let parsed { remote = parsed } else { remote = try spec.remoteReference(firebaseHosts: firebaseHosts) }
        guard schemes.contains(remote.scheme) else {
            throw StorageError(.invalidArgument, "\(remote) is not \(expected)")
        }
        try remote.requireObject(for: "a transfer")
        switch spec.kind {
        case .uploadFile:
            guard let path = spec.source else { throw StorageError(.invalidArgument, "upload-file needs a source path") }
            try policy.check(reference: remote, sourceName: LocalFiles.lastComponent(path))
            let contentType = try Self.headerSafeContentType(spec, destination: remote)
            self = .upload(try UploadSource(path: path, batch: spec.batch), to: remote, contentType: contentType)
        case .uploadData:
            guard let data = spec.data else { throw StorageError(.invalidArgument, "upload-data needs data") }
            try policy.check(reference: remote, sourceName: nil)
            self = .upload(UploadSource(data: data), to: remote, contentType: try Self.headerSafeContentType(spec, destination: remote))
        case .downloadFile:
            guard let destination = spec.destination else {
                throw StorageError(.invalidArgument, "download-file needs a destination path")
            }
            self = .downloadFile(remote, to: destination)
        case .downloadMemory:
            self = .downloadMemory(remote, maxSize: spec.maxSize ?? JobSpec.defaultMaxSize)
        case .fetchURL:
            self = .fetchURL(remote)
        case .getMetadata:
            self = .getMetadata(remote)
        case .updateMetadata:
            let update = spec.metadata ?? UploadMetadata()
            let removing = spec.removeCustomMetadata ?? []
            let clearing = spec.clearMetadata ?? []
            guard !update.isEmpty || !removing.isEmpty || !clearing.isEmpty else {
                throw StorageError(.invalidArgument, "the update-metadata job changes nothing: give it 'metadata:' fields to set or remove")
            }
            try Self.checkHeaderSafe(update)
            self = .updateMetadata(remote, set: update, removing: removing, clearing: clearing)
        case .delete:
            self = .delete(remote)
        }
    }
}

extension TransferPlan {
    /// The upload's content type, after checking every metadata value that becomes a header: the content
    /// type here (`Content-Type`, `X-Upload-Content-Type`), and the fields GCS serves back as response
    /// headers (`Cache-Control`, `Content-Disposition`, `Content-Encoding`, `Content-Language`,
    /// `x-goog-meta-KEY: VALUE`). A control character in any of them is refused before a request is sent.
    static func headerSafeContentType(_ spec: JobSpec, destination: StorageReference) throws(StorageError) -> String {
        let remedy = "fix the job's metadata in the manifest and submit it again"
        let contentType = ContentTypes.forUpload(spec, destination: destination)
        try HeaderValues.check(contentType, what: "the content type", remedy: remedy)
        guard let metadata = spec.metadata else { return contentType }
        try checkHeaderSafe(metadata)
        return contentType
    }

    /// Checks every metadata value GCS serves back as a response header for control characters.
    static func checkHeaderSafe(_ metadata: UploadMetadata) throws(StorageError) {
        let remedy = "fix the job's metadata in the manifest and submit it again"
        if let contentType = metadata.contentType {
            try HeaderValues.check(contentType, what: "the content type", remedy: remedy)
        }
        let fields: [(String, String?)] = [
            ("cache_control", metadata.cacheControl), ("content_disposition", metadata.contentDisposition),
            ("content_encoding", metadata.contentEncoding), ("content_language", metadata.contentLanguage),
        ]
        for case let (name, value?) in fields {
            try HeaderValues.check(value, what: "the metadata field \(name)", remedy: remedy)
        }
        for (key, value) in (metadata.customMetadata ?? [:]).sorted(by: { $0.key < $1.key }) {
            try HeaderValues.check(key, what: "a custom metadata key", remedy: remedy)
            try HeaderValues.check(value, what: "the custom metadata value of '\(key)'", remedy: remedy)
        }
    }
}

extension JobSpec {
    /// The storage side of the job: the destination of an upload, update-metadata or delete, the source of
    /// everything else; a Firebase-form URL on one of `firebaseHosts` (the settings':
    /// `StorageConfiguration.firebaseHosts`) is a `gs://` object.
    func remoteReference(firebaseHosts: FirebaseHosts) throws(StorageError) -> StorageReference {
        let role = kind.namesDestinationReference ? "destination" : "source"
        guard let text = kind.namesDestinationReference ? destination : source else {
            throw StorageError(.invalidArgument, "the \(kind.rawValue) job has no \(role) reference")
        }
        return try StorageReference(parsing: text, firebaseHosts: firebaseHosts)
    }
}
