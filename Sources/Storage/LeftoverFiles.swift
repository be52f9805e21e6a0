import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// What the event log says about one job's local files: enough to find what it may have left behind.
public struct JobLocalFiles: Sendable, Equatable {
    /// The job.
    public var jobID: String
    public var kind: JobKind
    /// Where its files are made: download-file's local destination path, the destination reference of an
    /// upload or update-metadata, the source reference of fetch-url (the object whose sidecar it writes).
    public var destination: String?
    /// The last resume point the log recorded, if any.
    public var resumePoint: ResumePoint?
    /// A time by this host's clock at which the job was already final (ms since 1970): the worker's own
    /// end of the run, or the moment a sweep began reading the final jobs. A file modified after it may
    /// belong to a later attempt (the job retried since) and is never a leftover. Never the log's
    /// `finished_at_ms`, which another machine's clock may have stamped.
    public var finishedAtMs: Int64?
    /// The lease tokens of the job's attempts (its `claimed` events) that may have written a `file://`
    /// sidecar's temporary or upload session, each named with its attempt's token (`SidecarTemporary`,
    /// `LocalUploadSession.tag`), or a partial download of its own (`PartialFile.tempName(for:jobID:leaseToken:)`).
    public var leaseTokens: [Int64]

    /// Describes a job's local files.
    public init(jobID: String, kind: JobKind, destination: String?, resumePoint: ResumePoint?, finishedAtMs: Int64?,
                leaseTokens: [Int64] = []) {
        self.jobID = jobID
        self.kind = kind
        self.destination = destination
        self.resumePoint = resumePoint
        self.finishedAtMs = finishedAtMs
        self.leaseTokens = leaseTokens
    }

    /// Describes the local files of job `jobID` of `spec`.
    public init(jobID: String, spec: JobSpec, resumePoint: ResumePoint?, finishedAtMs: Int64?, leaseTokens: [Int64] = []) {
        self.init(jobID: jobID, kind: spec.kind, destination: spec.kind == .fetchURL ? spec.source : spec.destination,
                  resumePoint: resumePoint, finishedAtMs: finishedAtMs, leaseTokens: leaseTokens)
    }

    /// The names of the sidecar temporaries the job's attempts wrote beside the object named `object`
    /// (for a long name, also as an older jobctl shortened it: `HiddenName.forms`).
    func sidecarTemporaries(forObject object: String) -> [String] {
        leaseTokens.flatMap { SidecarTemporary.names(forObject: object, token: SidecarTemporary.tag(jobID: jobID, leaseToken: $0)) }
    }

    /// The names of the upload sessions the job's attempts wrote beside the object named `object`: each
    /// attempt's own (its lease token in it), and the one an older jobctl named for the job alone (for a
    /// long name, each also as an older jobctl shortened it).
    func uploadSessions(forObject object: String) -> [String] {
        LocalUploadSession.names(forObject: object, token: jobID)
            + leaseTokens.flatMap {
                LocalUploadSession.names(forObject: object, token: LocalUploadSession.tag(jobID: jobID, leaseToken: $0))
            }
    }
}

/// A hidden temporary file that a final job left behind and no longer needs.
public struct LeftoverFile: Sendable, Equatable, Hashable {
    /// What the file was for.
    public enum Kind: String, Sendable, Codable {
        /// A download's `.NAME.<job id>.jobctl-partial`, an attempt's `.NAME.<job id>.<lease token>.jobctl-partial`
        /// (or an older `.NAME.jobctl-partial` it recorded).
        case partialDownload = "partial-download"
        /// A `file://` upload's session, `.NAME.<job id>.<lease token>.jobctl-upload` (or an older
        /// jobctl's `.NAME.<job id>.jobctl-upload`).
        case uploadSession = "upload-session"
        /// A `file://` sidecar's `.NAME.jobctl-meta.json.<job id>.<lease token>.jobctl-meta.tmp`, written before it is
        /// renamed into place (uploads, update-metadata, fetch-url).
        case sidecarTemporary = "sidecar-temporary"
    }

    /// The job that made it.
    public var jobID: String
    public var kind: Kind
    /// Its absolute path.
    public var path: String
    /// Its size in bytes when it was found.
    public var size: Int64
    /// Its identity when it was found: it is removed only while it is still this file.
    public var identity: FileIdentity
}

/// Finds and removes the hidden files that final jobs left: partial downloads, `file://` upload
/// sessions and sidecar temporaries. Ownership must be provable, so that no user's file is ever removed:
///
/// - a file whose name carries the job's id (`.NAME.<job id>.jobctl-partial`, `.NAME.<job id>.<lease token>.jobctl-partial`,
///   `.NAME.<job id>.jobctl-upload`,
///   `.NAME.<job id>.<lease token>.jobctl-upload`, `.NAME.jobctl-meta.json.<job id>.<lease token>.jobctl-meta.tmp`,
///   the token one of the job's claims)
///   beside the job's destination (fetch-url: its source); or
/// - the file the job's last resume point recorded, when it recorded the file's identity (device and
///   inode) and the file at that path still has it.
///
/// A file named like ours that the log does not tie to a final job, a link, a file with other hard
/// links, a path an unfinished job's resume point names, and a file modified after its job finished are
/// all left alone.
public struct LeftoverFiles: Sendable {
    /// Where named local buckets (`file://NAME/…`) live; nil: their sessions are not looked for.
    public let localBucketsDirectory: String?

    /// Files modified up to this long after their job's final event still count as its leftovers (file
    /// times come from a coarser clock than the log's).
    static let clockSlackMs: Int64 = 5

    /// A finder for named buckets under `localBucketsDirectory` (nil: downloads and `file:///` only).
    public init(localBucketsDirectory: String?) {
        self.localBucketsDirectory = localBucketsDirectory
    }

    /// A finder for the buckets of `configuration`.
    public init(configuration: StorageConfiguration) {
        self.init(localBucketsDirectory: configuration.localBucketsDirectory)
    }

    /// The paths the resume points of unfinished jobs name: never removed, whatever else says so.
    public static func pathsInUse(_ resumePoints: [ResumePoint]) -> Set<String> {
        Set(resumePoints.compactMap { point -> String? in
            switch point {
            case .download(_, _, _, let temp, _, _, _): temp
            case .slicedDownload(_, _, let temp, _): temp
            case .upload(let uri, _, _, _): LocalUploadSession(uri: uri)?.path
            case .sentUpload, .sentDelete, .unanswered: nil
            }
        })
    }

    /// The leftovers of `job` that exist now (see the type's documentation for what counts).
    public func find(_ job: JobLocalFiles, sparing inUse: Set<String> = []) -> [LeftoverFile] {
        var found: [LeftoverFile] = []
        for candidate in candidates(job) {
            let path = candidate.directory.childPath(candidate.name)
            guard !inUse.contains(path), let entry = candidate.directory.entry(candidate.name), entry.isRegular,
                  entry.links == 1 else { continue }
            if let recorded = candidate.recorded, recorded != entry.identity { continue }
            if let finished = job.finishedAtMs, entry.modifiedMicros / 1_000 > finished.saturatingAdding(Self.clockSlackMs) { continue }
            let leftover = LeftoverFile(jobID: job.jobID, kind: candidate.kind, path: path, size: entry.size, identity: entry.identity)
            if !found.contains(where: { $0.path == path }) { found.append(leftover) }
        }
        return found
    }

    /// Removes `leftover` while the file at its path is still the one found; returns whether it did.
    public static func remove(_ leftover: LeftoverFile) -> Bool {
        guard let directory = try? SafeDirectory.open(trusted: LocalFiles.directory(of: leftover.path), create: false) else {
            return false
        }
        let removed = directory.remove(LocalFiles.lastComponent(leftover.path), ifStill: leftover.identity)
        if removed { try? directory.sync() }
        return removed
    }

    // MARK: - Candidates

    /// A name to look at in an open folder; `recorded` is the identity it must have (nil: the name
    /// itself, carrying the job id, proves ownership).
    private struct Candidate {
        let directory: SafeDirectory
        let name: String
        let kind: LeftoverFile.Kind
        let recorded: FileIdentity?
    }

    private func candidates(_ job: JobLocalFiles) -> [Candidate] {
        guard let destination = job.destination, !destination.isEmpty else { return [] }
        switch job.kind {
        case .downloadFile:
            return partialCandidates(job, destination: destination)
        case .uploadFile, .uploadData:
            return sessionCandidates(job, destination: destination)
        case .updateMetadata, .fetchURL:
            return sidecarCandidates(job, reference: destination)
        case .downloadMemory, .getMetadata, .delete:
            return []
        }
    }

    private func partialCandidates(_ job: JobLocalFiles, destination: String) -> [Candidate] {
        let absolute = LocalFiles.absolute(destination)
        let name = LocalFiles.lastComponent(absolute)
        guard !name.isEmpty else { return [] }
        let folder = LocalFiles.directory(of: absolute)
        // The job's name, and for a long destination name also as an older jobctl shortened it.
        let ours = PartialFile.tempNames(for: name, jobID: job.jobID)
        var recorded: (name: String, identity: FileIdentity)?
        if case .download(_, _, _, let temp?, let identity?, _, _)? = job.resumePoint,
           LocalFiles.directory(of: temp) == folder,
           PartialFile.isTempName(LocalFiles.lastComponent(temp), for: name, jobID: nil)
            || PartialFile.isAttemptTempName(LocalFiles.lastComponent(temp), for: name, jobID: job.jobID) {
            recorded = (LocalFiles.lastComponent(temp), identity)
        }
        // An attempt that found the job's file held by a frozen one wrote a file of its own, named with
        // its lease token: the tokens of the job's claims prove those names (read for a retried job only).
        let attempts = job.leaseTokens.flatMap { PartialFile.tempNames(for: name, jobID: job.jobID, leaseToken: $0) }
        // Nearly every finished download left nothing: one `lstat` per name says so without opening the
        // folder (the sweep before a draining worker exits looks at every download it finished: this was
        // three calls each). The path resolves as `open(trusted:)` resolves it (links in the folder's
        // components followed, the name itself not), so a name it does not find, the folder would not hold.
        guard ours.contains(where: { Self.mayExist(SafeDirectory.childPath($0, in: folder)) })
                || attempts.contains(where: { Self.mayExist(SafeDirectory.childPath($0, in: folder)) })
                || recorded.map({ Self.mayExist(SafeDirectory.childPath($0.name, in: folder)) }) == true,
              let directory = try? SafeDirectory.open(trusted: folder, create: false) else {
            return []
        }
        var candidates = ours.map { Candidate(directory: directory, name: $0, kind: .partialDownload, recorded: nil) }
        candidates += attempts.map { Candidate(directory: directory, name: $0, kind: .partialDownload, recorded: nil) }
        if let recorded {
            candidates.append(Candidate(directory: directory, name: recorded.name, kind: .partialDownload, recorded: recorded.identity))
        }
        return candidates
    }

    /// Whether something may sit at `path`: false only when `lstat` says no such entry.
    private static func mayExist(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 || errno != ENOENT
    }

    private func sessionCandidates(_ job: JobLocalFiles, destination: String) -> [Candidate] {
        guard let reference = try? StorageReference(parsing: destination), reference.scheme == .file,
              let place = LocalObjectPlace.of(reference, bucketsDirectory: localBucketsDirectory) else { return [] }
        let sessions = job.uploadSessions(forObject: place.name)
        // As for downloads: nearly every finished upload left nothing, and one `lstat` per name says so
        // without resolving the bucket root and opening each folder (eleven calls a job in the sweep
        // before a draining worker exits). Following links on the way can only find more than the walk
        // that follows none, never less: a name `lstat` does not find, the folder does not hold.
        let sidecars = job.sidecarTemporaries(forObject: place.name)
        var recordedSession: LocalUploadSession?
        if case .upload(let uri, _, _, _)? = job.resumePoint { recordedSession = LocalUploadSession(uri: uri) }
        guard sessions.contains(where: { Self.mayExist(SafeDirectory.childPath($0, in: place.folderPath)) })
                || sidecars.contains(where: { Self.mayExist(SafeDirectory.childPath($0, in: place.folderPath)) })
                || recordedSession.map({ Self.mayExist($0.path) }) == true,
              let directory = try? open(place) else { return [] }
        var candidates = sessions.map { Candidate(directory: directory, name: $0, kind: .uploadSession, recorded: nil) }
        candidates += sidecars.map { Candidate(directory: directory, name: $0, kind: .sidecarTemporary, recorded: nil) }
        if let session = recordedSession, let identity = session.identity, LocalFiles.directory(of: session.path) == directory.path {
            let name = LocalFiles.lastComponent(session.path)
            if LocalUploadSession.isSession(name, forObject: place.name) {
                candidates.append(Candidate(directory: directory, name: name, kind: .uploadSession, recorded: identity))
            }
        }
        return candidates
    }

    /// The sidecar temporaries a job that rewrites a `file://` object's sidecar (update-metadata, fetch-url)
    /// names with its id and its attempts' tokens; as for uploads, one `lstat` a name says when there is none.
    private func sidecarCandidates(_ job: JobLocalFiles, reference: String) -> [Candidate] {
        guard let reference = try? StorageReference(parsing: reference), reference.scheme == .file,
              let place = LocalObjectPlace.of(reference, bucketsDirectory: localBucketsDirectory) else { return [] }
        let names = job.sidecarTemporaries(forObject: place.name)
        guard names.contains(where: { Self.mayExist(SafeDirectory.childPath($0, in: place.folderPath)) }),
              let directory = try? open(place) else { return [] }
        return names.map { Candidate(directory: directory, name: $0, kind: .sidecarTemporary, recorded: nil) }
    }

    /// Opens an object's folder as the local backend does (no links followed inside a named bucket).
    private func open(_ place: LocalObjectPlace) throws(StorageError) -> SafeDirectory {
        guard place.inNamedBucket else { return try SafeDirectory.open(trusted: place.rootPath, create: false) }
        let root = try SafeDirectory.open(trusted: LocalFiles.resolved(place.rootPath) ?? place.rootPath, create: false)
        return try root.descend(place.components, create: false)
    }
}
