import Checksums
import Dispatch
import Foundation
import JobModel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The storage backend for `file://` references: objects are plain files, their metadata a JSON sidecar.
///
/// - `file:///abs/path` addresses the whole filesystem (bucket root `/`); `file://NAME/path` addresses
///   `<localBucketsDirectory>/NAME/path`. A named bucket must exist for downloads (else `bucketNotFound`)
///   and is created by the first upload. A reference whose real path (symbolic links of the existing
///   components resolved) leaves its bucket root is refused with `pathError`.
/// - Metadata lives beside the object in `.<name>.jobctl-meta.json` (a `StorageObject` as JSON): content
///   type and the other writable fields, custom metadata, base64 MD5 and big-endian CRC32C, size,
///   generation (microseconds since 1970 at upload), metageneration, RFC 3339 times and download tokens.
///   Hidden files ending in `.jobctl-meta.json`, `.jobctl-upload` or `.jobctl-partial` are never objects.
///   A file without a sidecar (e.g. `file:///etc/hosts`) is served with metadata derived from `stat`
///   and no checksums to verify against.
/// - Uploads stream through a fixed buffer into `.<name>.<session>.jobctl-upload` beside the object,
///   hashing as they go; every `checkpointInterval` bytes the file is synced and a
///   `.upload(sessionURI: "file-session:<temp path>", …)` checkpoint reported. On completion the temp
///   file and sidecar are synced and renamed into place and the directory synced. The object and its
///   sidecar are two renames: a crash between them leaves the new object with the old sidecar, which
///   the next download reports as `nonMatchingChecksum` rather than serving silently.
///   Each upload is a new generation (metageneration 1, no download tokens). A session whose source
///   changed size since its resume point is discarded and the upload starts over. A session file left
///   by an attempt that failed (other than by a full disk) is kept for the retry that resumes it.
/// - Downloads go through `PartialFile` and resume pinned to the object's generation.
/// - fetch-url returns `file:///<absolute path>?token=<token>`: for local buckets the URL is only
///   meaningful on this machine; the token (created once, as Firebase does) is what a download URL
///   elsewhere would check.
///
/// Blocking file I/O runs on a dedicated concurrent dispatch queue, never on Swift's cooperative pool,
/// so many concurrent jobs cannot starve other tasks.
public struct LocalBackend: StorageBackend {
    public let configuration: StorageConfiguration
    /// The executable-upload policy from `configuration.executableUploadPolicy`.
    public let policy: UploadPolicy
    /// Bytes between synced checkpoints of an upload or download (default 8 MiB).
    public let checkpointInterval: Int64
    /// Counters for tests and diagnostics.
    let statistics = LocalTransferStatistics()

    public static let defaultCheckpointInterval: Int64 = 8 * 1024 * 1024

    /// Where blocking file I/O runs. Concurrent, so one slow disk does not serialise every job.
    private static let ioQueue = DispatchQueue(label: "jobctl.storage.local-io", qos: .utility, attributes: .concurrent)

    /// A backend for `file://` references using `configuration.localBucketsDirectory` and its policy.
    public init(configuration: StorageConfiguration, checkpointInterval: Int64 = LocalBackend.defaultCheckpointInterval) {
        self.configuration = configuration
        self.policy = UploadPolicy(refusingExecutablesIn: configuration.executableUploadPolicy)
        self.checkpointInterval = max(1, checkpointInterval)
    }

    /// Runs `spec` on the I/O queue; see the type's documentation for each kind's behaviour.
    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<TransferOutcome, StorageError>, Never>) in
            Self.ioQueue.async {
                let transfer = LocalTransfer(backend: self, spec: spec, resumePoint: resumePoint, control: control, report: report)
                do throws(StorageError) {
                    continuation.resume(returning: .success(try transfer.run()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}

/// Byte counters, so tests can prove that a resumed upload did not re-read what was already stored.
final class LocalTransferStatistics: Sendable {
    private let sourceBytes = Mutex<Int64>(0)

    /// Bytes read from upload sources (files or inline data) by this backend instance.
    var sourceBytesRead: Int64 { sourceBytes.withLock { $0 } }

    func addSourceBytes(_ count: Int) {
        sourceBytes.withLock { $0 += Int64(count) }
    }
}

// MARK: - Locations

/// A `file://` reference resolved to paths on disk.
struct LocalLocation {
    let reference: StorageReference
    /// The bucket root with symbolic links resolved.
    let root: String
    /// The object's path with the existing components' symbolic links resolved.
    let path: String

    var directory: String { LocalFiles.directory(of: path) }
    var name: String { LocalFiles.lastComponent(path) }
    var sidecarPath: String { Self.sidecarPath(for: path) }

    static func sidecarPath(for path: String) -> String {
        let directory = LocalFiles.directory(of: path)
        return (directory == "/" ? "" : directory) + "/." + LocalFiles.lastComponent(path) + ".jobctl-meta.json"
    }

    /// Names the backend keeps for itself; no object may take one.
    static func isReserved(_ name: String) -> Bool {
        name.hasSuffix(".jobctl-meta.json") || name.hasSuffix(".jobctl-upload") || name.hasSuffix(".jobctl-partial")
            || name.hasSuffix(".jobctl-meta.tmp")
    }
}

extension LocalBackend {
    /// The directory holding bucket `name` ("" → "/").
    func bucketRoot(_ bucket: String) -> String {
        if bucket.isEmpty { return "/" }
        let base = LocalFiles.absolute(configuration.localBucketsDirectory)
        return (base.hasSuffix("/") ? base : base + "/") + bucket
    }

    /// Resolves `reference`, refusing non-file schemes, the root, reserved names and symlink escapes.
    func locate(_ reference: StorageReference, creatingBucket: Bool) throws(StorageError) -> LocalLocation {
        guard reference.scheme == .file else {
            throw StorageError(.invalidArgument, "'\(reference)' is not a file:// reference; the local backend serves file:// only")
        }
        guard !reference.isRoot else {
            throw StorageError(.invalidArgument, "'\(reference)' is a bucket root, not an object: add an object path")
        }
        if let reserved = reference.fullPath.split(separator: "/").first(where: { LocalLocation.isReserved(String($0)) }) {
            throw StorageError(.invalidArgument, "'\(reserved)' is reserved for jobctl's temporary and metadata files: choose another name")
        }
        let rootPath = bucketRoot(reference.bucket)
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: rootPath, isDirectory: &isDirectory) {
            guard creatingBucket else {
                throw StorageError(.bucketNotFound,
                                   "local bucket '\(reference.bucket)' does not exist (no directory '\(rootPath)'): "
                                       + "create it or upload to it first")
            }
            try LocalFiles.makeDirectories(rootPath)
        } else if !isDirectory.boolValue {
            throw StorageError(.bucketNotFound, "local bucket '\(reference.bucket)' is not a directory ('\(rootPath)')")
        }
        guard let root = LocalFiles.resolved(rootPath) else {
            throw StorageError(.bucketNotFound, "local bucket '\(reference.bucket)' cannot be resolved ('\(rootPath)')")
        }
        let joined = (root == "/" ? "" : root) + "/" + reference.fullPath
        let path = LocalFiles.resolvedAllowingMissingTail(joined)
        guard LocalFiles.isContained(path, in: root), path != root else {
            throw StorageError(.pathError,
                               "'\(reference)' resolves to '\(path)', outside its bucket root '\(root)' "
                                   + "(a symbolic link leads out of the bucket); refusing to follow it")
        }
        return LocalLocation(reference: reference, root: root, path: path)
    }
}

// MARK: - Metadata sidecar

extension LocalBackend {
    /// The object's metadata: the sidecar when there is one, else derived from `stat`.
    func readMetadata(_ location: LocalLocation, size: Int64, modifiedMicros: Int64) throws(StorageError) -> StorageObject {
        let reference = location.reference
        guard let data = FileManager.default.contents(atPath: location.sidecarPath) else {
            let time = LocalFiles.timestamp(Date(timeIntervalSince1970: Double(modifiedMicros) / 1_000_000))
            return StorageObject(bucket: reference.bucket, name: reference.fullPath, size: size,
                                 contentType: ContentTypes.infer(path: reference.name), generation: String(modifiedMicros),
                                 metageneration: "1", timeCreated: time, updated: time)
        }
        do {
            var object = try JSONDecoder().decode(StorageObject.self, from: data)
            object.bucket = reference.bucket
            object.name = reference.fullPath
            return object
        } catch {
            throw StorageError(.internalError,
                               "metadata sidecar '\(location.sidecarPath)' is not valid JSON: remove it or upload the object again",
                               cause: String(describing: error))
        }
    }

    /// Writes the sidecar atomically (temp file, fsync, rename); the caller syncs the directory.
    func writeMetadata(_ object: StorageObject, to location: LocalLocation) throws(StorageError) {
        let temp = prepareMetadata(object, for: location)
        try writeFile(temp.data, to: temp.path)
        try LocalFiles.rename(temp.path, to: location.sidecarPath)
    }

    func prepareMetadata(_ object: StorageObject, for location: LocalLocation) -> (path: String, data: Data) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // Encoding a struct of strings, numbers and a string dictionary cannot fail.
        let data = (try? encoder.encode(object)) ?? Data()
        let random = UUID().uuidString.prefix(8).lowercased()
        return (location.sidecarPath + "." + random + ".jobctl-meta.tmp", data)
    }

    /// Creates `path` with `data` and syncs it; removes it on failure.
    func writeFile(_ data: Data, to path: String) throws(StorageError) {
        let file = try LocalFile(path: path, flags: O_WRONLY | O_CREAT | O_TRUNC, context: .destination)
        do {
            let outcome = data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Result<Void, StorageError> in
                do throws(StorageError) { try file.write(bytes); return .success(()) } catch { return .failure(error) }
            }
            try outcome.get()
            try file.sync()
            file.close()
        } catch {
            file.close()
            LocalFiles.remove(path)
            throw error
        }
    }
}

// MARK: - Hashing

/// MD5 and CRC32C over the same stream; past the first MiB they are computed on a `PipelinedChecksums`
/// queue while the transfer goes on reading and writing.
final class StreamingHashes {
    private let hashes = PipelinedChecksums()

    func update(_ bytes: UnsafeRawBufferPointer) {
        hashes.update(bytes)
    }

    /// Base64 MD5 and base64 big-endian CRC32C; call once.
    func finish() -> (md5: String, crc32c: String) {
        let result = hashes.finish()
        return (result.md5Base64, result.crc32cBase64)
    }
}
