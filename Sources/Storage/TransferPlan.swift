import Foundation
import JobModel

/// A job decoded into the one transfer it asks for, shared by the network backends: the remote
/// reference parsed and checked once, the local side resolved, the upload's content type chosen.
enum TransferPlan {
    case upload(UploadSource, to: StorageReference, contentType: String)
    case downloadFile(StorageReference, to: String)
    case downloadMemory(StorageReference, maxSize: Int64)
    case fetchURL(StorageReference)

    /// Decodes `spec` for a backend serving `schemes`; `expected` names them in the error a reference of
    /// another scheme gets (e.g. "an http(s) URL"). An upload `policy` refuses is refused here, before the
    /// source is opened or any request is sent.
    init(_ spec: JobSpec, schemes: Set<StorageReference.Scheme>, expected: String, policy: UploadPolicy) throws(StorageError) {
        let remote = try spec.remoteReference()
        guard schemes.contains(remote.scheme) else {
            throw StorageError(.invalidArgument, "\(remote) is not \(expected)")
        }
        try remote.requireObject(for: "a transfer")
        switch spec.kind {
        case .uploadFile:
            guard let path = spec.source else { throw StorageError(.invalidArgument, "upload-file needs a source path") }
            try policy.check(reference: remote, sourceName: LocalFiles.lastComponent(path))
            self = .upload(try UploadSource(path: path), to: remote, contentType: ContentTypes.forUpload(spec, destination: remote))
        case .uploadData:
            guard let data = spec.data else { throw StorageError(.invalidArgument, "upload-data needs data") }
            try policy.check(reference: remote, sourceName: nil)
            self = .upload(UploadSource(data: data), to: remote, contentType: ContentTypes.forUpload(spec, destination: remote))
        case .downloadFile:
            guard let destination = spec.destination else {
                throw StorageError(.invalidArgument, "download-file needs a destination path")
            }
            self = .downloadFile(remote, to: destination)
        case .downloadMemory:
            self = .downloadMemory(remote, maxSize: spec.maxSize ?? JobSpec.defaultMaxSize)
        case .fetchURL:
            self = .fetchURL(remote)
        }
    }
}

extension JobSpec {
    /// The storage side of the job: the destination of an upload, the source of everything else.
    func remoteReference() throws(StorageError) -> StorageReference {
        let role = kind.isUpload ? "destination" : "source"
        guard let text = kind.isUpload ? destination : source else {
            throw StorageError(.invalidArgument, "the \(kind.rawValue) job has no \(role) reference")
        }
        return try StorageReference(parsing: text)
    }
}
