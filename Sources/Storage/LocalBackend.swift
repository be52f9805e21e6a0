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
///   and is created by the first upload. Inside a named bucket no symbolic link is followed: every
///   folder is opened one component at a time with `O_NOFOLLOW`, so a link anywhere below the bucket
///   root (leading out of it or not) is refused with `pathError`. For `file:///` paths the folder is
///   opened as written. Either way the object, its sidecar and its upload session are created, opened,
///   renamed and removed relative to that folder (`SafeDirectory`), never through a link: a link at
///   the object's or the sidecar's name is replaced by an upload and refused by a read.
/// - Metadata lives beside the object in `.<name>.jobctl-meta.json` (a `StorageObject` as JSON): content
///   type and the other writable fields, custom metadata, base64 MD5 and big-endian CRC32C, size,
///   generation (microseconds since 1970 at upload), metageneration, RFC 3339 times and download tokens.
///   It is written through `.<name>.jobctl-meta.json.<job id>.<lease token>.jobctl-meta.tmp` (a random
///   tag in place of both outside the queue: `SidecarTemporary`) and renamed over it. Hidden files ending in `.jobctl-meta.json`,
///   `.jobctl-upload`, `.jobctl-partial` or `.jobctl-meta.tmp` are never objects, nor is a name ending in
///   `.jobctl-cut` (what a long name's shortened hidden names keep of it: `HiddenName`). A sidecar names
///   its object too; one naming another is not believed.
///   A file without a sidecar (e.g. `file:///etc/hosts`) is served with metadata derived from `stat`
///   and no checksums to verify against.
/// - Uploads stream through a fixed buffer into `.<name>.<job id>.<lease token>.jobctl-upload` beside the
///   object (created with `O_EXCL | O_NOFOLLOW`; a name each attempt has to itself), hashing as they go;
///   every `checkpointInterval` bytes the file is synced and a
///   `.upload(sessionURI: "file-session:<device>:<inode>:<temp path>", …)` checkpoint reported. A resumed
///   session is used only while it is still that inode, and the attempt resuming it first renames it to
///   its own name (never a link), so an earlier attempt, woken after its lease was lost, finds its name
///   gone at its commit instead of renaming the retry's file onto the object. On completion the temp
///   file and sidecar are synced and renamed into place and the directory synced. The object and its
///   sidecar are two renames; the sidecar names the file it describes (device and inode), so a crash
///   between them leaves the new object beside a sidecar of another file, which is not believed: the
///   object is served as a file without a sidecar until the job's retry writes both again.
///   Each upload is a new generation (metageneration 1, no download tokens). A session whose source
///   changed size since its resume point is discarded and the upload starts over. A session file left
///   by an attempt that failed (other than by a full disk) is kept for the retry that resumes it, and
///   removed once the job ends failed or cancelled (`leftovers(of:sparing:)`); a sidecar temporary a
///   killed attempt left is removed by the sweep once the job is final, whatever its end.
/// - Downloads go through `PartialFile` and resume pinned to the object's generation.
/// - fetch-url returns `file:///<absolute path>?token=<token>`: for local buckets the URL is only
///   meaningful on this machine; the token (created once, as Firebase does) is what a download URL
///   elsewhere would check.
///
/// Blocking file I/O never runs on Swift's cooperative pool, so many concurrent jobs cannot starve other
/// tasks: reads on a concurrent Dispatch queue, writes (which sync) on threads of their own
/// (`FileIO`).
public struct LocalBackend: StorageBackend {
    public let configuration: StorageConfiguration
    /// The executable-upload policy from `configuration.executableUploadPolicy`.
    public let policy: UploadPolicy
    /// Bytes between synced checkpoints of an upload or download (default 64 MiB).
    public let checkpointInterval: Int64
    /// Counters for tests and diagnostics.
    let statistics = LocalTransferStatistics()

    /// 64 MiB: a local copy moves that in well under a second, so a crash loses little, while each
    /// checkpoint costs an fsync of the file and a committed event (another fsync). At 8 MiB those 128
    /// syncs per 512 MiB held a `file://` upload to about half of `cp` + `fsync`; at 64 MiB it is on par.
    public static let defaultCheckpointInterval: Int64 = 64 * 1024 * 1024

    /// Where reads run (`download-memory`, `get-metadata`): short calls that never sync, for which a
    /// few Dispatch threads that run block after block cost least (a thread each, woken per job, cost
    /// the 10,000-job queue drain a fifth more CPU), at the one priority of a worker's work.
    private static let readQueue = DispatchQueue(label: "jobctl.storage.local-read", qos: WorkPriority.dispatch,
                                                attributes: .concurrent)

    // Everything that writes (each upload, download to a file, metadata change or delete syncs what it
    // wrote) runs on `FileIO`'s threads, one for each at once, so one slow disk does not serialise every
    // job and syncs that come together share the disk's commit.

    /// A backend for `file://` references using `configuration.localBucketsDirectory` and its policy.
    public init(configuration: StorageConfiguration, checkpointInterval: Int64 = LocalBackend.defaultCheckpointInterval) {
        self.configuration = configuration
        self.policy = configuration.uploadPolicy
        self.checkpointInterval = max(1, checkpointInterval)
    }

    /// Runs `spec` on the I/O queue; see the type's documentation for each kind's behaviour.
    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        try await perform(spec, parsed: nil, resumingFrom: resumePoint, control: control, report: report)
    }

    /// `perform` with the job's reference already parsed (`spec.remoteReference()`, by the router): parsing
    /// it again was about a quarter of a small in-memory download's instructions.
    func perform(_ spec: JobSpec, parsed: StorageReference?, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<TransferOutcome, StorageError>, Never>) in
            perform(spec, parsed: parsed, resumingFrom: resumePoint, control: control, report: report) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }

    /// Runs `spec` off the cooperative pool (see the type's documentation) and calls `completion` there with its outcome.
    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void,
                        completion: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void) {
        perform(spec, parsed: nil, resumingFrom: resumePoint, control: control, report: report, completion: completion)
    }

    /// The completion form of `perform(_:parsed:…)`.
    func perform(_ spec: JobSpec, parsed: StorageReference?, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void,
                 completion: @escaping @Sendable (Result<TransferOutcome, StorageError>) -> Void) {
        // The job's `timeout:` and `max_rate:` hold a local copy as they hold a network transfer (checked
        // between its steps; see `LocalTransfer.paced`).
        let control = control.limited(toSeconds: spec.timeoutSeconds, maxRate: spec.maxRate)
        let work: @Sendable () -> Void = {
            let transfer = LocalTransfer(backend: self, spec: spec, parsed: parsed, resumePoint: resumePoint, control: control,
                                         report: report)
            do throws(StorageError) {
                let outcome = try transfer.run()
                control.waitOutOwnRateBlocking()
                completion(.success(outcome))
            } catch {
                completion(.failure(error))
            }
        }
        switch spec.kind {
        case .downloadMemory where LocalTransfer.isPaced(control, configuration):
            // A paced read sleeps between its steps: on a thread of its own, not one of the read queue's few.
            FileIO.pool.run(work)
        case .downloadMemory, .getMetadata:
            Self.readQueue.async(execute: work)
        case .uploadFile, .uploadData, .downloadFile, .fetchURL, .updateMetadata, .delete:
            FileIO.pool.run(work)
        }
    }

    /// Partial downloads, `file://` upload sessions and sidecar temporaries, in named buckets too.
    public func leftovers(of job: JobLocalFiles, sparing inUse: Set<String>) -> [LeftoverFile] {
        LeftoverFiles(configuration: configuration).find(job, sparing: inUse)
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

    private let kernelBytes = Mutex<Int64>(0)

    /// Bytes of upload sources the kernel copied into objects (`copy_file_range`), not read into memory.
    var kernelCopiedBytes: Int64 { kernelBytes.withLock { $0 } }

    func addKernelCopiedBytes(_ count: Int) {
        kernelBytes.withLock { $0 += Int64(count) }
    }
}

// MARK: - Locations

/// Where a `file://` object lives, before anything is opened: the bucket root, the folders below it and
/// the file name.
struct LocalObjectPlace: Equatable {
    /// The bucket root (`<buckets>/NAME`), or for `file:///` the object's folder itself.
    let rootPath: String
    /// Folders between the root and the object, walked without following links (empty for `file:///`).
    let components: [String]
    /// The object's file name.
    let name: String
    /// Whether the object is in a named bucket (`file://NAME/…`) rather than a `file:///` path.
    let inNamedBucket: Bool

    /// The object's folder as a path.
    var folderPath: String {
        components.reduce(rootPath) { path, component in (path == "/" ? "" : path) + "/" + component }
    }

    /// The place of `reference` (a `file://` object), with named buckets under `bucketsDirectory`; nil for
    /// a named bucket when `bucketsDirectory` is unknown, or for the root.
    static func of(_ reference: StorageReference, bucketsDirectory: String?) -> LocalObjectPlace? {
        of(reference, path: LocalObjectPath(reference.fullPath), bucketsDirectory: bucketsDirectory)
    }

    /// `of(_:bucketsDirectory:)` with `reference.fullPath` already cut into its parts.
    ///
    /// `namedTail`: the end of the path that came from names rather than from the user — a batch job's
    /// path below the folder or prefix it was expanded from (`JobBatch.path`). In a `file:///` path its
    /// folders are walked without following links, as every folder inside a named bucket is: a link
    /// planted at `dst/sub` after a folder upload to `file:///…/dst/` was submitted took that upload's
    /// `sub/…` files wherever it led. The folder the user named may itself be a link.
    static func of(_ reference: StorageReference, path: LocalObjectPath, bucketsDirectory: String?,
                   namedTail: String? = nil) -> LocalObjectPlace? {
        guard reference.scheme == .file, let name = path.parts.last else { return nil }
        if reference.bucket.isEmpty {
            if let namedTail {
                let tail = SlashSeparatedPath.parts(of: namedTail)
                let parts = path.parts
                if tail.count > 1, parts.count > tail.count, zip(parts.suffix(tail.count), tail).allSatisfy({ $0 == $1 }) {
                    let named = parts.count - tail.count
                    return LocalObjectPlace(rootPath: "/" + parts[..<named].joined(separator: "/"),
                                            components: Array(parts[named..<(parts.count - 1)]), name: name, inNamedBucket: false)
                }
            }
            return LocalObjectPlace(rootPath: "/" + path.joinedFolders, components: [], name: name, inNamedBucket: false)
        }
        guard let bucketsDirectory else { return nil }
        let base = LocalFiles.absolute(bucketsDirectory)
        return LocalObjectPlace(rootPath: (base.hasSuffix("/") ? base : base + "/") + reference.bucket,
                                components: Array(path.parts.dropLast()), name: name, inNamedBucket: true)
    }
}

/// A `file://` object's path cut into its `/`-separated parts, once per job: the reserved-name check and
/// the object's place both read them.
///
/// An ASCII path is cut, and its parts checked for reserved names, on its bytes in one pass: in ASCII
/// every byte is one Character (`\r\n` aside, which holds neither `/` nor a byte of a reserved suffix),
/// so the parts and the answers are the ones `SlashSeparatedPath` and `HiddenName.isReserved` give
/// (both on bytes too). Those cost ~9,000 instructions a job here (two splits, each walking the text
/// twice, a `String` per part, four suffix checks per part). Other text takes them.
struct LocalObjectPath {
    /// The non-empty parts between `/`s, as `SlashSeparatedPath.parts(of:)` gives them.
    let parts: [String]
    /// The first part that is a name the backend keeps for itself (`HiddenName.isReserved`).
    let firstReserved: String?
    /// Every part but the last, joined by `/`.
    let joinedFolders: String

    init(_ text: String) {
        if let cut = text.utf8.withContiguousStorageIfAvailable(Self.cutASCII), let cut {
            self = cut
            return
        }
        parts = SlashSeparatedPath.parts(of: text).map(String.init)
        firstReserved = parts.first(where: HiddenName.isReserved)
        joinedFolders = parts.dropLast().joined(separator: "/")
    }

    private init(parts: [String], firstReserved: String?, joinedFolders: String) {
        self.parts = parts
        self.firstReserved = firstReserved
        self.joinedFolders = joinedFolders
    }

    /// The path in `bytes` cut at its `/`s; nil when it is not ASCII.
    private static func cutASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> LocalObjectPath? {
        guard !bytes.contains(where: { $0 >= 0x80 }) else { return nil }
        var parts: [String] = []
        parts.reserveCapacity(bytes.reduce(1) { $1 == UInt8(ascii: "/") ? $0 + 1 : $0 })
        var firstReserved: String?
        var start = 0
        for end in 0...bytes.count where end == bytes.count || bytes[end] == UInt8(ascii: "/") {
            if start != end {
                let part = UnsafeBufferPointer(rebasing: bytes[start..<end])
                parts.append(String(decoding: part, as: UTF8.self))
                if firstReserved == nil, isReserved(part) { firstReserved = parts[parts.count - 1] }
            }
            start = end + 1
        }
        // Without empty parts (one `/` between parts, none at either end: every normalised reference)
        // the folders joined are the text before the last `/`.
        let partBytes = parts.reduce(0) { $0 + $1.utf8.count }
        let folders = if parts.count > 1, partBytes + parts.count - 1 == bytes.count {
            String(decoding: UnsafeBufferPointer(rebasing: bytes[0..<(bytes.count - parts[parts.count - 1].utf8.count - 1)]),
                   as: UTF8.self)
        } else {
            parts.dropLast().joined(separator: "/")
        }
        return LocalObjectPath(parts: parts, firstReserved: firstReserved, joinedFolders: folders)
    }

    /// `HiddenName.isReserved` for a name of ASCII bytes, compared as bytes.
    static func isReserved(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        HiddenName.reservedSuffixes.contains { suffix in
            let tail = suffix.utf8
            return tail.count <= name.count
                && (tail.withContiguousStorageIfAvailable { $0.elementsEqual(name[(name.count - $0.count)...]) }
                    ?? tail.elementsEqual(name[(name.count - tail.count)...]))
        }
    }
}

/// A `file://` reference resolved to its folder, held open.
///
/// For a named bucket the root (`<buckets>/NAME`, as configured) is opened by its path, and every folder
/// below it one at a time without following links: a symbolic link anywhere inside a bucket is refused,
/// so nothing can lead out of it. For `file:///abs/path` (the whole filesystem, no bucket to stay in) the
/// object's folder is opened by its path as written. Either way the object, its sidecar and its upload
/// session are opened, created, renamed and removed relative to that folder, never through a link.
struct LocalLocation {
    let reference: StorageReference
    /// The bucket root with symbolic links resolved ("/" for `file:///`), for URLs and messages.
    let root: String
    /// The object's folder.
    let directory: SafeDirectory
    /// The object's file name.
    let name: String

    /// The object's path, for URLs and messages.
    var path: String { directory.childPath(name) }
    /// The metadata sidecar's name: `.<name>.jobctl-meta.json` (`HiddenName`: shortened for a long name).
    var sidecarName: String { HiddenName.make(name, suffix: LocalBackend.sidecarSuffix) }
    var sidecarPath: String { directory.childPath(sidecarName) }
    /// The name an older jobctl gave a long name's sidecar (`HiddenName.olderName`), still read; nil for
    /// a name that fits. It may be another object's own sidecar (older jobctls shared it with the object
    /// named that cut form): only a sidecar there that names this object is this object's.
    var olderSidecarName: String? { HiddenName.olderName(name, suffix: LocalBackend.sidecarSuffix) }

}

/// A `file://` upload session: the hidden file the bytes go to before it is renamed onto the object,
/// and its identity. Its URI is `file-session:DEVICE:INODE:PATH` (`file-session:PATH` when logged before
/// identities were recorded; still resumed).
struct LocalUploadSession: Equatable {
    static let prefix = "file-session:"

    let path: String
    let identity: FileIdentity?

    init(path: String, identity: FileIdentity?) {
        self.path = path
        self.identity = identity
    }

    /// Parses a session URI; nil when it is not a local session.
    init?(uri: String) {
        guard uri.hasPrefix(Self.prefix) else { return nil }
        let rest = uri.dropFirst(Self.prefix.count)
        if rest.hasPrefix("/") {
            self.init(path: String(rest), identity: nil)
            return
        }
        let parts = rest.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].hasPrefix("/"), let identity = FileIdentity("\(parts[0]):\(parts[1])") else { return nil }
        self.init(path: String(parts[2]), identity: identity)
    }

    var uri: String {
        Self.prefix + (identity.map { "\($0):" } ?? "") + path
    }

    /// `.<object>.<token>.jobctl-upload`: the token is `tag(jobID:leaseToken:)` for an attempt of a job
    /// (the job's id alone in a session an older jobctl wrote), a random one outside the queue.
    static func name(forObject object: String, token: String) -> String {
        HiddenName.make(object, suffix: suffix(token))
    }

    /// `name(forObject:token:)` and, for a long object name, the name an older jobctl gave the session
    /// (`HiddenName.forms`).
    static func names(forObject object: String, token: String) -> [String] {
        HiddenName.forms(object, suffix: suffix(token))
    }

    /// Whether `candidate` is the session of `object` for `token` under either of its names.
    static func isName(_ candidate: String, forObject object: String, token: String) -> Bool {
        HiddenName.isName(candidate, of: object, suffix: suffix(token))
    }

    private static func suffix(_ token: String) -> String { "." + token + ".jobctl-upload" }

    /// The token in the name of the session of job `jobID`'s attempt under lease `leaseToken`:
    /// `<job id>.<lease token>`, so two live attempts of one job (a worker that lost the lease, frozen
    /// then woken, and the retry) never write or rename a file by the same name. Without a lease token
    /// (only tests run an attempt without one) the job's id alone, the name older jobctls used.
    static func tag(jobID: String, leaseToken: Int64?) -> String {
        SidecarTemporary.tag(jobID: jobID, leaseToken: leaseToken)
    }

    /// Whether `name` is a session name for the object named `object` (any token, with or without a
    /// lease token after it; under the name made now or the one an older jobctl gave a long name).
    static func isSession(_ name: String, forObject object: String) -> Bool {
        guard name.hasSuffix(".jobctl-upload") else { return false }
        let parts = name.dropLast(".jobctl-upload".count).split(separator: ".", omittingEmptySubsequences: false)
        // The token is the last part, or the last two (`<job id>.<lease token>`); the name is the one made with it.
        return [1, 2].contains { count in
            parts.count > count && parts.suffix(count).allSatisfy { !$0.isEmpty }
                && isName(name, forObject: object, token: parts.suffix(count).joined(separator: "."))
        }
    }

    /// Whether `name` is a session of job `jobID` for the object named `object`: an attempt's
    /// (`.<object>.<job id>.<lease token>.jobctl-upload`) or one an older jobctl named for the job alone
    /// (`.<object>.<job id>.jobctl-upload`), under either name of a long object's (`HiddenName.forms`).
    static func isSession(_ name: String, forObject object: String, ofJob jobID: String) -> Bool {
        if isName(name, forObject: object, token: jobID) { return true }
        guard name.hasSuffix(".jobctl-upload") else { return false }
        let stem = name.dropLast(".jobctl-upload".count)
        guard let dot = stem.lastIndex(of: "."), let token = Int64(stem[stem.index(after: dot)...]) else { return false }
        return isName(name, forObject: object, token: tag(jobID: jobID, leaseToken: token))
    }
}

/// The temporary a sidecar is written to before it is renamed over `.<object>.jobctl-meta.json`:
/// `.<object>.jobctl-meta.json.<job id>.<lease token>.jobctl-meta.tmp` (a random tag in place of both
/// outside the queue). The id and the attempt's lease token tie a temporary a killed attempt left to its
/// job, and the sweep removes it once the job is final (`LeftoverFiles`, from the tokens of the job's
/// claims). The token keeps each attempt's name its own: a temporary is written whole and then renamed
/// by name, so a name two live attempts shared (a worker that lost the lease, woken, and the retry)
/// let one rename the other's file — empty, half written, or describing its own object file — into
/// place, or find the name gone and fail the job. One written by a jobctl that named it with a random
/// tag ties it to nothing, and is left alone.
enum SidecarTemporary {
    /// The temporary's name beside the object named `object`, for `token` (`tag(jobID:leaseToken:)`, or a
    /// random tag).
    static func name(forObject object: String, token: String) -> String {
        HiddenName.make(object, suffix: suffix(token))
    }

    /// `name(forObject:token:)` and, for a long object name, the name an older jobctl gave the temporary
    /// (`HiddenName.forms`): the sweep looks for both.
    static func names(forObject object: String, token: String) -> [String] {
        HiddenName.forms(object, suffix: suffix(token))
    }

    private static func suffix(_ token: String) -> String { LocalBackend.sidecarSuffix + "." + token + ".jobctl-meta.tmp" }

    /// The token in the name of the temporary of job `jobID`'s attempt under lease `leaseToken` (nil: an
    /// attempt that has none, which only tests make).
    static func tag(jobID: String, leaseToken: Int64?) -> String {
        leaseToken.map { jobID + "." + String($0) } ?? jobID
    }
}

extension LocalBackend {
    /// The directory holding bucket `name` ("" → "/").
    func bucketRoot(_ bucket: String) -> String {
        if bucket.isEmpty { return "/" }
        let base = LocalFiles.absolute(configuration.localBucketsDirectory)
        return (base.hasSuffix("/") ? base : base + "/") + bucket
    }

    /// Opens `reference`'s folder, refusing non-file schemes, the root, reserved names and symbolic links
    /// inside a bucket, or below the folder a batch job was expanded from (`within`, its `JobBatch.path`:
    /// see `LocalObjectPlace.of`'s `namedTail`). Uploads create the bucket and the folders (`creating`);
    /// reads do not, and a missing folder is `objectNotFound`.
    func locate(_ reference: StorageReference, creating: Bool, within: String? = nil) throws(StorageError) -> LocalLocation {
        guard reference.scheme == .file else {
            throw StorageError(.invalidArgument, "'\(reference)' is not a file:// reference; the local backend serves file:// only")
        }
        guard !reference.isRoot else {
            throw StorageError(.invalidArgument, "'\(reference)' is a bucket root, not an object: add an object path")
        }
        let path = LocalObjectPath(reference.fullPath)
        if let reserved = path.firstReserved {
            throw StorageError(.invalidArgument, HiddenName.reservedMessage(reserved))
        }
        guard let place = LocalObjectPlace.of(reference, path: path, bucketsDirectory: configuration.localBucketsDirectory,
                                              namedTail: within) else {
            throw StorageError(.invalidArgument, "'\(reference)' names no object")
        }
        let context: LocalFiles.Context = creating ? .destination : .object
        do throws(StorageError) {
            if reference.bucket.isEmpty {
                var directory = try SafeDirectory.open(trusted: place.rootPath, create: creating, context: context)
                if !place.components.isEmpty { directory = try directory.descend(place.components, create: creating, context: context) }
                return LocalLocation(reference: reference, root: "/", directory: directory, name: place.name)
            }
            return try locate(reference, in: place, creating: creating, context: context)
        } catch {
            guard !creating, error.code == .objectNotFound else { throw error }
            throw StorageError(.objectNotFound, "object '\(reference)' does not exist (no folder '\(place.folderPath)')", cause: error.cause)
        }
    }

    private func locate(_ reference: StorageReference, in place: LocalObjectPlace, creating: Bool,
                        context: LocalFiles.Context) throws(StorageError) -> LocalLocation {
        var root: SafeDirectory
        do throws(StorageError) {
            root = try SafeDirectory.open(trusted: place.rootPath, create: creating, context: context)
            // The bucket is named by its real path (also one made just now), so the paths recorded in
            // resume points are the same in every attempt. Read from the open directory in one call: no
            // component of the path is looked up again.
            if let real = root.namedByRealPath() {
                root = real
            } else if let real = LocalFiles.resolved(place.rootPath), real != place.rootPath {
                root = try SafeDirectory.open(trusted: real, create: false, context: context)
            }
        } catch {
            if !creating, LocalFiles.resolved(place.rootPath) == nil {
                throw StorageError(.bucketNotFound,
                                   "local bucket '\(reference.bucket)' does not exist (no directory '\(place.rootPath)'): "
                                       + "create it or upload to it first")
            }
            throw StorageError(.bucketNotFound, "local bucket '\(reference.bucket)' cannot be opened ('\(place.rootPath)'): \(error.message)",
                               cause: error.cause)
        }
        let directory = try root.descend(place.components, create: creating, context: context)
        return LocalLocation(reference: reference, root: root.path, directory: directory, name: place.name)
    }
}

// MARK: - Metadata sidecar

extension LocalBackend {
    /// The ending of a sidecar's name (`HiddenName.make(name, suffix:)`).
    static let sidecarSuffix = ".jobctl-meta.json"
    /// The largest sidecar read: metadata is a few hundred bytes.
    static let sidecarLimit = 1 << 20
    /// How long an object's lock is waited for while another process holds it (`LocalFile.lockExclusive`).
    static let objectLockWaitMs = 10_000

    /// The object's metadata: the sidecar when there is one that describes this file, else derived from
    /// `status`. A symbolic link at the sidecar's name is refused, never followed.
    ///
    /// A sidecar names the file it describes (its device and inode, kept by the rename that puts an
    /// upload in place). Another file at the object's name — the new object of an upload that died
    /// between its two renames, or a file put there by hand — is served as a file without a sidecar:
    /// the old sidecar's checksums are another file's, and comparing them failed its downloads as
    /// corrupt (`nonMatchingChecksum`) although every byte was right. A sidecar from before it named
    /// its file is believed as before.
    ///
    /// A sidecar records the object's name too: one that names another object (by its last part, so a
    /// folder moved with its files keeps them) is not this object's either. That is what tells a long
    /// name's sidecar, written by an older jobctl under the name it then had (`olderSidecarName`, read
    /// when there is no sidecar at the current name), from the sidecar of the object named that cut form,
    /// whose own sidecar name it is.
    func readMetadata(_ location: LocalLocation, status: FileStatus) throws(StorageError) -> StorageObject {
        if let object = try believedSidecar(location.sidecarName, of: location, status: status) { return object }
        if let older = location.olderSidecarName, let object = try believedSidecar(older, of: location, status: status) {
            return object
        }
        return Self.derivedMetadata(location, status: status)
    }

    /// The object's metadata from the sidecar at `name` when there is one there that describes this file
    /// and names this object; nil otherwise. A link there is refused, never followed; so is anything but
    /// a regular file, and a file that is not a sidecar's JSON.
    private func believedSidecar(_ name: String, of location: LocalLocation, status: FileStatus) throws(StorageError) -> StorageObject? {
        guard let file = try location.directory.openExisting(name, writable: false, context: .other) else { return nil }
        defer { file.close() }
        guard try file.status().isRegular else {
            throw LocalFiles.unexpectedFileRefused(location.directory.childPath(name), what: "not a regular file",
                                                   operation: "reading metadata")
        }
        let data = try file.readAll(limit: Self.sidecarLimit)
        let sidecar: SidecarJSON.Contents
        do {
            sidecar = try SidecarJSON.decode(data) ?? SidecarJSON.decodeWithFoundation(data)
        } catch {
            throw StorageError(.internalError, "metadata sidecar '\(location.directory.childPath(name))' is not valid JSON: "
                                   + "remove it or upload the object again", cause: String(describing: error))
        }
        if let described = sidecar.file, described != status.identity { return nil }
        guard Self.names(sidecar.object, location) else { return nil }
        var object = sidecar.object
        object.bucket = location.reference.bucket
        object.name = location.reference.fullPath
        // The file is the object: a sidecar's size (another writer's, or a planted one) never
        // stands for it, whichever operation reads it (download, fetch-url, get-metadata).
        object.size = status.size
        return object
    }

    /// Whether the sidecar's `object` is that of the object at `location`: the last part of the name it
    /// records (after its last `/`) is the object's file name, byte for byte. A sidecar recording no
    /// name is believed.
    static func names(_ object: StorageObject, _ location: LocalLocation) -> Bool {
        let recorded = object.name.utf8
        let name = location.name.utf8
        guard !recorded.isEmpty else { return true }
        guard recorded.count >= name.count, recorded.reversed().starts(with: name.reversed()) else { return false }
        let before = recorded.dropLast(name.count)
        return before.isEmpty || before.last == UInt8(ascii: "/")
    }

    /// Removes the sidecar an older jobctl wrote for the object under `olderSidecarName`, once its
    /// metadata is at the current name (written, or the object deleted): only a regular file there that
    /// names this object, and only while it is still that file. Best effort; the caller syncs the folder.
    func removeOlderSidecar(of location: LocalLocation) {
        guard let older = location.olderSidecarName,
              let file = try? location.directory.openExisting(older, writable: false, context: .other) else { return }
        defer { file.close() }
        guard let status = try? file.status(), status.isRegular, let data = try? file.readAll(limit: Self.sidecarLimit),
              let sidecar = SidecarJSON.decode(data) ?? (try? SidecarJSON.decodeWithFoundation(data)),
              !sidecar.object.name.isEmpty, Self.names(sidecar.object, location) else { return }
        location.directory.remove(older, ifStill: status.identity)
    }

    /// The metadata of a file no sidecar describes, from its `stat`: no checksums to verify against.
    static func derivedMetadata(_ location: LocalLocation, status: FileStatus) -> StorageObject {
        let time = LocalFiles.timestamp(Date(timeIntervalSince1970: Double(status.modifiedMicros) / 1_000_000))
        return StorageObject(bucket: location.reference.bucket, name: location.reference.fullPath, size: status.size,
                             contentType: ContentTypes.infer(path: location.name), generation: String(status.modifiedMicros),
                             metageneration: "1", timeCreated: time, updated: time)
    }

    /// Eight random lowercase hexadecimal digits (32 random bits), as the first eight of a random UUID's
    /// were, without formatting a whole UUID (~7,000 instructions an upload).
    static func randomTag() -> String {
        let digits = String(UInt32.random(in: .min ... .max), radix: 16)
        return String(repeating: "0", count: 8 - digits.count) + digits
    }

    /// Writes the sidecar of the object file `described` atomically: a new temporary file (`O_EXCL`,
    /// synced, named for the attempt `control` runs: `SidecarTemporary`) renamed over the sidecar's name, which replaces
    /// whatever was there. The caller syncs the directory.
    func writeMetadata(_ object: StorageObject, describing described: FileIdentity, to location: LocalLocation,
                       control: TransferControl) throws(StorageError) {
        var diskFull = false
        // The sidecar it replaces passes its mode and owner on (update-metadata, fetch-url): rewritten as the
        // worker's own 0644, an object's private metadata became readable by everyone.
        let replaced = location.directory.entry(location.sidecarName).flatMap { $0.isRegular ? $0 : nil }
        let temp = try createMetadata(object, describing: described, for: location, control: control, access: replaced,
                                      diskFull: &diskFull)
        do throws(StorageError) {
            if let departure = location.directory.departure { throw Self.folderLeft(location, departure) }
            try location.directory.rename(temp.name, to: location.sidecarName)
        } catch {
            location.directory.remove(temp.name, ifStill: temp.identity)
            throw error
        }
        // Read from an older jobctl's name (a long name's), the metadata is at the current one now.
        removeOlderSidecar(of: location)
    }

    /// The error of a write whose object folder is no longer at its path (removed, moved away, or another
    /// made or linked at its name: `departure`) when its file was about to be renamed in: renamed through
    /// the folder's descriptor, it would have landed in the moved folder while the job reported the object
    /// at its name. Retryable: the next attempt opens the folder now at the path (or makes it again).
    static func folderLeft(_ location: LocalLocation, _ departure: SafeDirectory.Departure) -> StorageError {
        StorageError(.pathError, "the folder '\(location.directory.path)' \(departure.phrase) while '\(location.reference)' "
                         + "was being written; nothing was renamed into it — the next attempt writes the object where the "
                         + "path leads now", retryable: true)
    }

    /// Creates and syncs a new temporary sidecar of the object file `described` beside the object, named
    /// for the attempt `control` runs (`SidecarTemporary`: its job's id and lease token; a random tag
    /// outside the queue), returning its name and identity; it is removed again when writing fails (only
    /// while its name still holds it), and `diskFull` then says whether the disk was full (by errno). A
    /// file at the attempt's own name can only be this attempt's, and is replaced (when it could be ours:
    /// `createExclusive(_:replacingOwnLeftover:)`). With `access` (the sidecar it replaces), the file takes
    /// that file's mode and owner (`LocalFile.takeAccess`).
    func createMetadata(_ object: StorageObject, describing described: FileIdentity, for location: LocalLocation,
                        control: TransferControl, access: FileStatus? = nil,
                        diskFull: inout Bool) throws(StorageError) -> (name: String, identity: FileIdentity) {
        let data = SidecarJSON.encode(object, describing: described) ?? SidecarJSON.encodeWithFoundation(object, describing: described)
        let token = control.jobID.map { SidecarTemporary.tag(jobID: $0, leaseToken: control.leaseToken) } ?? Self.randomTag()
        let name = SidecarTemporary.name(forObject: location.name, token: token)
        let file = try location.directory.createExclusive(name, replacingOwnLeftover: control.jobID != nil)
        let identity: FileIdentity
        do {
            identity = try file.status().identity
        } catch {
            // Which file is ours cannot be told: whatever is at the name is left (the orphan sweep knows
            // the attempt's temporary by its name once the job is final).
            file.close()
            throw error
        }
        do {
            if let access { try file.takeAccess(of: access) }
            try file.write(data)
            try file.sync()
            file.close()
            return (name, identity)
        } catch {
            diskFull = file.failedForLackOfSpace
            file.close()
            // Only while the name still holds the file made here: another writer may have renamed its
            // own file onto the name since (a failed sync can take seconds), and that one is not ours.
            location.directory.remove(name, ifStill: identity)
            throw error
        }
    }
}

/// A sidecar's JSON: what `JSONEncoder` with `[.prettyPrinted, .sortedKeys]` writes for a `StorageObject`
/// and the object file it describes (`objectFile`, `DEVICE:INODE`; see `LocalBackend.readMetadata`).
///
/// An object without custom metadata whose strings are printable ASCII (nearly every one a worker uploads)
/// is written by hand, byte for byte as the encoder writes it: the encoder, with its reflection over
/// `Codable` and its key sorting, cost ~49,000 instructions per upload. Any other object is left to it.
enum SidecarJSON {
    /// What a sidecar holds: the object's metadata and the file it describes (nil in a sidecar written
    /// before sidecars named their file).
    typealias Contents = (object: StorageObject, file: FileIdentity?)

    /// The sidecar's bytes as `JSONEncoder` writes them.
    static func encodeWithFoundation(_ object: StorageObject, describing file: FileIdentity?) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // Encoding a struct of strings, numbers and a string dictionary cannot fail.
        return (try? encoder.encode(Document(object: object, file: file))) ?? Data()
    }

    /// A sidecar as `JSONDecoder` reads it: the object, and the file it describes when it names one (an
    /// `objectFile` that is not `DEVICE:INODE` makes the sidecar invalid).
    static func decodeWithFoundation(_ data: Data) throws -> Contents {
        let decoder = JSONDecoder()
        let object = try decoder.decode(StorageObject.self, from: data)
        let named = try decoder.decode(NamedFile.self, from: data)
        return (object, named.objectFile)
    }

    /// The object's members and `objectFile` in one JSON object.
    private struct Document: Encodable {
        let object: StorageObject
        let file: FileIdentity?

        func encode(to encoder: any Encoder) throws {
            try object.encode(to: encoder)
            var container = encoder.container(keyedBy: NamedFile.CodingKeys.self)
            try container.encodeIfPresent(file?.description, forKey: .objectFile)
        }
    }

    /// A sidecar's `objectFile` member.
    private struct NamedFile: Decodable {
        enum CodingKeys: String, CodingKey { case objectFile }
        let objectFile: FileIdentity?

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            guard let text = try container.decodeIfPresent(String.self, forKey: .objectFile) else {
                objectFile = nil
                return
            }
            guard let file = FileIdentity(text) else {
                throw DecodingError.dataCorruptedError(forKey: .objectFile, in: container, debugDescription: "not DEVICE:INODE")
            }
            objectFile = file
        }
    }

    /// The members of a sidecar written by hand, in the encoder's key order (`customMetadata`, between
    /// `crc32c` and `downloadTokens`, is never one of them).
    private enum Member: CaseIterable {
        case bucket, cacheControl, contentDisposition, contentEncoding, contentLanguage, contentType, crc32c, downloadTokens
        case generation, md5Hash, metageneration, name, objectFile, size, timeCreated, updated

        /// `"key" : `, as the encoder writes it before the value.
        var key: StaticString {
            switch self {
            case .bucket: "\"bucket\" : "
            case .cacheControl: "\"cacheControl\" : "
            case .contentDisposition: "\"contentDisposition\" : "
            case .contentEncoding: "\"contentEncoding\" : "
            case .contentLanguage: "\"contentLanguage\" : "
            case .contentType: "\"contentType\" : "
            case .crc32c: "\"crc32c\" : "
            case .downloadTokens: "\"downloadTokens\" : "
            case .generation: "\"generation\" : "
            case .md5Hash: "\"md5Hash\" : "
            case .metageneration: "\"metageneration\" : "
            case .name: "\"name\" : "
            case .objectFile: "\"objectFile\" : "
            case .size: "\"size\" : "
            case .timeCreated: "\"timeCreated\" : "
            case .updated: "\"updated\" : "
            }
        }

        /// The member's string value in `object` or, for `objectFile`, of `file` (nil: left out, as
        /// `encodeIfPresent` leaves it); nil for `size`, which is a number.
        func text(in object: StorageObject, file: FileIdentity?) -> String? {
            switch self {
            case .bucket: object.bucket
            case .cacheControl: object.cacheControl
            case .contentDisposition: object.contentDisposition
            case .contentEncoding: object.contentEncoding
            case .contentLanguage: object.contentLanguage
            case .contentType: object.contentType
            case .crc32c: object.crc32c
            case .downloadTokens: object.downloadTokens
            case .generation: object.generation
            case .md5Hash: object.md5Hash
            case .metageneration: object.metageneration
            case .name: object.name
            case .objectFile: file?.description
            case .size: nil
            case .timeCreated: object.timeCreated
            case .updated: object.updated
            }
        }

        /// Sets the member's string value in `object`, or `file` from `objectFile` (`size` is set as a
        /// number instead); false for an `objectFile` that is not `DEVICE:INODE`.
        func set(_ text: String, in object: inout StorageObject, file: inout FileIdentity?) -> Bool {
            switch self {
            case .bucket: object.bucket = text
            case .cacheControl: object.cacheControl = text
            case .contentDisposition: object.contentDisposition = text
            case .contentEncoding: object.contentEncoding = text
            case .contentLanguage: object.contentLanguage = text
            case .contentType: object.contentType = text
            case .crc32c: object.crc32c = text
            case .downloadTokens: object.downloadTokens = text
            case .generation: object.generation = text
            case .md5Hash: object.md5Hash = text
            case .metageneration: object.metageneration = text
            case .name: object.name = text
            case .objectFile:
                guard let named = FileIdentity(text) else { return false }
                file = named
            case .size: break
            case .timeCreated: object.timeCreated = text
            case .updated: object.updated = text
            }
            return true
        }
    }

    /// The same bytes written by hand; nil for an object with custom metadata or a string that is not
    /// printable ASCII (the encoder's escapes and key order there are its own business).
    static func encode(_ object: StorageObject, describing file: FileIdentity?) -> Data? {
        guard object.customMetadata == nil else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(512)
        bytes.append(UInt8(ascii: "{"))
        for member in Member.allCases {
            if member == .size {
                appendKey(member.key, to: &bytes)
                LocalFiles.appendBytes(of: String(object.size), to: &bytes)
            } else if let text = member.text(in: object, file: file) {
                appendKey(member.key, to: &bytes)
                guard appendString(text, to: &bytes) else { return nil }
            }
        }
        LocalFiles.appendBytes(of: "\n}", to: &bytes)
        return Data(bytes)
    }

    /// The object in a sidecar laid out as `encode` writes it (members in the encoder's key order, its
    /// white space, strings of printable ASCII with `\"`, `\\` or `\/` escapes, a plain integer size);
    /// nil for any other text, which `JSONDecoder` then reads (or refuses, with its own message). What
    /// it accepts is JSON that `JSONDecoder` reads as the same object: the decoder cost ~64,000
    /// instructions per download from a named bucket.
    static func decode(_ data: Data) -> Contents? {
        data.withUnsafeBytes { bytes -> Contents? in
            var reader = SidecarReader(bytes: bytes)
            var object = StorageObject(bucket: "", name: "", size: 0)
            var file: FileIdentity?
            var required = 0
            var remaining = Member.allCases[...]
            guard reader.skip("{\n  ") else { return nil }
            repeat {
                // Each member once, in order: no duplicate, unknown or custom-metadata member.
                guard let index = remaining.firstIndex(where: { reader.skip($0.key) }) else { return nil }
                let member = remaining[index]
                remaining = remaining[(index + 1)...]
                if member == .size {
                    guard let size = reader.integer() else { return nil }
                    object.size = size
                } else {
                    guard let text = reader.string(), member.set(text, in: &object, file: &file) else { return nil }
                }
                if member == .bucket || member == .name || member == .size { required += 1 }
            } while reader.skip(",\n  ")
            // The three members `StorageObject` cannot do without, each found once.
            guard reader.skip("\n}"), reader.atEnd, required == 3 else { return nil }
            return (object, file)
        }
    }

    /// `,` after the previous member (none before the first), a new line, the indent and `key`.
    private static func appendKey(_ key: StaticString, to bytes: inout [UInt8]) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        LocalFiles.appendBytes(of: "\n  ", to: &bytes)
        LocalFiles.appendBytes(of: key, to: &bytes)
    }

    /// `value` as a JSON string with the encoder's escapes for `"`, `\` and `/`; false when it holds
    /// anything but printable ASCII.
    private static func appendString(_ value: String, to bytes: inout [UInt8]) -> Bool {
        var value = value
        return value.withUTF8 { text in
            bytes.append(UInt8(ascii: "\""))
            for byte in text {
                guard byte >= 0x20, byte < 0x7F else { return false }
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "/") {
                    bytes.append(UInt8(ascii: "\\"))
                }
                bytes.append(byte)
            }
            bytes.append(UInt8(ascii: "\""))
            return true
        }
    }
}

/// Reads the parts of a hand-written sidecar from its bytes.
private struct SidecarReader {
    let bytes: UnsafeRawBufferPointer
    private var index = 0

    init(bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var atEnd: Bool { index == bytes.count }

    /// Steps over `literal` when the bytes continue with it.
    mutating func skip(_ literal: StaticString) -> Bool {
        let matched = literal.withUTF8Buffer { text in
            bytes.count - index >= text.count && text.indices.allSatisfy { bytes[index + $0] == text[$0] }
        }
        if matched { index += literal.utf8CodeUnitCount }
        return matched
    }

    /// A string of printable ASCII in quotes, escaping only `"`, `\\` and `/`; nil for anything else.
    /// Decoded from the bytes in place when it holds no escape (nearly always: keys, checksums, times).
    mutating func string() -> String? {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
        let start = index + 1
        var end = start
        var escapes = false
        while end < bytes.count, bytes[end] != UInt8(ascii: "\"") {
            let byte = bytes[end]
            if byte < 0x20 || byte >= 0x7F { return nil }
            if byte == UInt8(ascii: "\\") {
                escapes = true
                end += 1
                guard end < bytes.count, Self.isEscaped(bytes[end]) else { return nil }
            }
            end += 1
        }
        guard end < bytes.count else { return nil }
        index = end + 1
        let text = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
        guard escapes else { return String(decoding: text, as: UTF8.self) }
        var unescaped: [UInt8] = []
        unescaped.reserveCapacity(text.count)
        var escaped = false
        for byte in text {
            if byte == UInt8(ascii: "\\") && !escaped {
                escaped = true
                continue
            }
            escaped = false
            unescaped.append(byte)
        }
        return String(decoding: unescaped, as: UTF8.self)
    }

    /// Whether `byte` is one the hand-written encoder escapes (`"`, `\\`, `/`).
    private static func isEscaped(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "/")
    }

    /// An integer as JSON writes one (`-`, then digits without a leading zero) that fits an `Int64`;
    /// nil for anything else (fractions and exponents included), and for `-0`.
    mutating func integer() -> Int64? {
        let start = index
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let digits = index
        while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
        guard index > digits, bytes[digits] != UInt8(ascii: "0") || (index == digits + 1 && digits == start) else { return nil }
        return Int64(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self))
    }
}

// MARK: - Hashing

/// CRC32C — and MD5 when asked for — over the same stream; past the first MiB they are computed on a
/// `PipelinedChecksums` queue while the transfer goes on reading and writing.
final class StreamingHashes {
    private let hashes: PipelinedChecksums

    /// Hashes that compute MD5 only when `md5` is true.
    init(md5: Bool) {
        hashes = PipelinedChecksums(md5: md5)
    }

    func update(_ bytes: UnsafeRawBufferPointer) {
        hashes.update(bytes)
    }

    /// Base64 MD5 (nil when not computed) and base64 big-endian CRC32C; call once.
    func finish() -> (md5: String?, crc32c: String) {
        let result = hashes.finish()
        return (result.md5Base64, result.crc32cBase64)
    }
}
