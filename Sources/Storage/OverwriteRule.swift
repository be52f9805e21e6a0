import Foundation
import JobModel

/// The job's `if_exists:` as the transfers apply it. `fail` and `skip` are checked twice: up front (so
/// no bytes move for nothing) and again in the write itself (`linkat` on disk, `ifGenerationMatch=0` on
/// GCS, `If-None-Match: *` over HTTP), which is what makes the rule hold against a concurrent writer: a
/// destination that appears while the transfer runs is refused (`fail`) or left, the job skipped (`skip`).
struct OverwriteRule {
    let mode: IfExists
    /// `fail` or `skip` where an earlier attempt may have stored the object and died before saying so:
    /// after attempts that ended without a word (`ResumePoint.unanswered`), or when what is at the
    /// destination is the very file an earlier attempt of this job was writing (`earlierLink`). An object
    /// holding exactly the source's bytes (size and CRC32C) is then taken as the job's own — its transfer,
    /// verified by that comparison — instead of refused (`fail`) or reported skipped (`skip`, whose audit
    /// would otherwise say the job moved nothing when its own attempt wrote the file); anything else is
    /// refused or skipped as always.
    let acceptsIdentical: Bool
    /// The name an earlier attempt wrote the destination's file under (a download's temporary file, a
    /// `file://` upload's session), when the destination is that file: once the job takes it as its
    /// own, or refuses it (its bytes changed since), that second link to it goes (`dropEarlierLink`).
    private let earlierLink: (path: String, identity: FileIdentity)?
    /// Under `skip`, the file an earlier attempt of the job was writing (a paused download's partial file,
    /// a `file://` upload's session): nothing resumes it once the job ends skipped, so it goes then
    /// (`dropEarlierFile`) — a paused job that resumed into `skipped` left it to the leftover sweep.
    private let earlierFile: (path: String, identity: FileIdentity)?

    /// The rule for `spec` on an attempt starting at `resumePoint`. `existing` is the identity of the
    /// regular file at a local destination (a download's, a `file://` object's), when there is one.
    init(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint? = nil, existing: FileIdentity? = nil) {
        mode = spec.ifExists ?? .overwrite
        let earlier = mode.leavesExisting ? Self.fileWritten(by: resumePoint) : nil
        earlierLink = earlier.flatMap { existing != nil && $0.identity == existing ? $0 : nil }
        earlierFile = mode == .skip ? earlier : nil
        acceptsIdentical = mode.leavesExisting && (resumePoint == .unanswered || earlierLink != nil)
    }

    /// download-file: the rule for `spec` downloading to the local path `destination`, whose file is
    /// looked at (without following a link) only where it can matter: `fail` or `skip` with a resume
    /// point that names a file.
    init(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, downloadingTo destination: String) {
        let looks = (spec.ifExists ?? .overwrite).leavesExisting && Self.fileWritten(by: resumePoint) != nil
        self.init(spec, resumingFrom: resumePoint, existing: looks ? PartialFile.destinationFile(destination) : nil)
    }

    /// The file an attempt that stopped at `resumePoint` was writing, where and what it was: a download's
    /// temporary file, a sliced download's, a `file://` upload's session file. Such an attempt that died
    /// after linking that file into place (`if_exists: fail` links, then removes the temporary name, then
    /// reports) leaves the destination being that very inode.
    static func fileWritten(by resumePoint: ResumePoint?) -> (path: String, identity: FileIdentity)? {
        switch resumePoint {
        case .download(_, _, _, let temp?, let file?, _, _)?: (temp, file)
        case .slicedDownload(_, _, let temp, let file)?: (temp, file)
        case .upload(let uri, _, _, _)?:
            LocalUploadSession(uri: uri).flatMap { session in session.identity.map { (session.path, $0) } }
        default: nil
        }
    }

    /// Removes the earlier attempt's name for the destination's file (see `earlierLink`) if it is still
    /// that file and not its only name. Harmless when it is gone.
    func dropEarlierLink() {
        guard let earlierLink, let directory = try? SafeDirectory.open(trusted: LocalFiles.directory(of: earlierLink.path), create: false),
              let entry = directory.entry(LocalFiles.lastComponent(earlierLink.path)),
              entry.identity == earlierLink.identity, entry.links > 1 else { return }
        _ = directory.remove(LocalFiles.lastComponent(earlierLink.path), ifStill: earlierLink.identity)
    }

    /// Removes the file an earlier attempt of a job now skipped was writing (`earlierFile`) while it is
    /// still that file; only its second name when it is the destination's file (`dropEarlierLink`).
    private func dropEarlierFile() {
        if earlierLink != nil { return dropEarlierLink() }
        guard let earlierFile,
              let directory = try? SafeDirectory.open(trusted: LocalFiles.directory(of: earlierFile.path), create: false) else { return }
        _ = directory.remove(LocalFiles.lastComponent(earlierFile.path), ifStill: earlierFile.identity)
    }

    /// The refusal of `fail` for `destination`, once the earlier attempt's second name for it (if any) is
    /// gone: the file is not the job's, and that name must not outlive the job (a leftover sweep leaves a
    /// file with two names alone).
    private func refused(_ destination: String) -> StorageError {
        dropEarlierLink()
        return StorageError.destinationExists(destination)
    }

    /// The outcome under `acceptsIdentical` when the local destination is not the object's bytes (or
    /// cannot be compared): `fail` refuses, `skip` leaves the file and reports the job skipped — never a
    /// download over it.
    private func notTheJobs(_ destination: String) throws(StorageError) -> TransferOutcome {
        if mode == .fail { throw refused(destination) }
        return skippedDownload(destination)
    }

    /// A download-file skipped because its destination exists, the earlier attempt's file gone.
    private func skippedDownload(_ destination: String) -> TransferOutcome {
        dropEarlierFile()
        return .finished(JobResult(path: LocalFiles.absolute(destination), skipped: true))
    }

    /// download-file under `acceptsIdentical`, when the comparison could not be made (the server's
    /// answer to a look failed): `skip` reports the job skipped rather than download over the file;
    /// nil otherwise (`fail` goes on to a download that refuses to replace it).
    func unsettledDownload(to destination: String) -> TransferOutcome? {
        guard acceptsIdentical, mode == .skip, PartialFile.destinationExists(destination) else { return nil }
        return skippedDownload(destination)
    }

    /// Whether the final write may replace what is at the destination: `overwrite`, and `skip-identical`
    /// once its comparison found a difference. `fail` and `skip` never do — the write itself refuses a
    /// destination that appeared after the look (see the type's note). `skip` used to rename over it: a
    /// file the user wrote while the download ran was replaced, and the job reported it downloaded.
    var replaces: Bool { !mode.leavesExisting }

    /// download-file: the outcome when the final write found the destination taken (something appeared
    /// there while the transfer ran; the downloaded file is removed): `fail` refuses, `skip` leaves what
    /// appeared and reports the job skipped.
    func downloadFoundTaken(_ destination: String) throws(StorageError) -> TransferOutcome {
        if mode == .fail { throw StorageError.destinationExists(destination) }
        return skippedDownload(destination)
    }

    /// Uploads: what the final write finding the object taken means (created while the upload ran: GCS's
    /// 412 to `ifGenerationMatch=0`, an HTTP server's to `If-None-Match: *`, a `file://` link refused).
    /// `fail` throws its refusal; under `skip` this returns, and the caller reports the upload skipped
    /// (`skippedUpload`) with what it finds there.
    func settleTakenUpload(_ destination: String, httpStatus: Int? = nil) throws(StorageError) {
        guard mode == .skip else { throw StorageError.destinationExists(destination, httpStatus: httpStatus) }
        dropEarlierFile()
    }

    /// download-file: the outcome when the local destination already exists and the rule settles the
    /// job without a transfer (`skip`), nil when the download goes ahead; throws for `fail`.
    func beforeDownload(to destination: String) throws(StorageError) -> TransferOutcome? {
        // `acceptsIdentical`: settled once the object is known (`skipsDownload`).
        guard mode.leavesExisting && !acceptsIdentical, PartialFile.destinationExists(destination) else { return nil }
        if mode == .fail { throw StorageError.destinationExists(destination) }
        return skippedDownload(destination)
    }

    /// download-file with `skip-identical`: the outcome when the local destination already holds the
    /// object's bytes — the same size and the CRC32C `crc32c` (base64, as GCS reports it) — nil when the
    /// download goes ahead (another rule, no destination, no CRC32C to compare, or a difference).
    ///
    /// Under `fail` or `skip` with `acceptsIdentical` a destination holding the object's bytes is the
    /// job's own download from an attempt that died before saying so (a result, not a skip); any other
    /// destination is refused (`fail`) or skipped (`skip`), as `beforeDownload` would have.
    func skipsDownload(of object: StorageObject, crc32c: String?, to destination: String) throws(StorageError) -> TransferOutcome? {
        guard mode == .skipIdentical || acceptsIdentical, PartialFile.destinationExists(destination) else { return nil }
        let path = LocalFiles.absolute(destination)
        // An unreadable or odd destination (a folder, a link, a FIFO) is not the object's bytes: the
        // download replaces it (or reports why it cannot), as it replaces a link without following it.
        guard let crc32c, let local = try? UploadSource(path: path, followingLinks: false), local.size == object.size else {
            return acceptsIdentical ? try notTheJobs(destination) : nil
        }
        let ours = try OverwriteRule.sizeAndCRC32C(of: local)
        guard ours.crc32c == crc32c else {
            return acceptsIdentical ? try notTheJobs(destination) : nil
        }
        if acceptsIdentical { dropEarlierLink() }
        return .finished(JobResult(object: object, path: path, size: ours.size, crc32c: ours.crc32c, verified: [.crc32c],
                                   skipped: acceptsIdentical ? nil : true))
    }

    /// Uploads: the outcome when an existing object (`nil` when there is none) makes the upload
    /// unnecessary, nil when the upload goes ahead. `source` gives the local source's size and CRC32C
    /// (base64, as GCS reports it), computed only when `skip-identical` (or `acceptsIdentical`) needs
    /// them. Throws for `fail` when the object exists; under `acceptsIdentical` an object holding the
    /// source's bytes is the job's own upload (`fail` and `skip` alike), not a refusal or a skip.
    func settlesUpload(existing: StorageObject?, destination: String,
                       source: () throws(StorageError) -> (size: Int64, crc32c: String)) throws(StorageError) -> TransferOutcome? {
        guard let existing else { return nil }
        if acceptsIdentical, try Self.holdsSource(existing, source) {
            dropEarlierLink()
            return .finished(JobResult(object: existing, size: existing.size, crc32c: existing.crc32c, verified: [.crc32c]))
        }
        switch mode {
        case .overwrite: return nil
        case .skip:
            dropEarlierFile()
            return Self.skippedUpload(existing)
        case .fail: throw refused(destination)
        case .skipIdentical: return try Self.holdsSource(existing, source) ? Self.skippedUpload(existing) : nil
        }
    }

    /// Whether `existing` has the source's size and CRC32C (false when it reports no CRC32C).
    private static func holdsSource(_ existing: StorageObject, _ source: () throws(StorageError) -> (size: Int64, crc32c: String)) throws(StorageError) -> Bool {
        guard let crc32c = existing.crc32c else { return false }
        let local = try source()
        return local.size == existing.size && local.crc32c == crc32c
    }

    /// Whether `skipsUpload` reads the source, or `skipsDownload` the destination (on `FileIO`'s threads, then).
    private var readsSource: Bool { mode == .skipIdentical || acceptsIdentical }

    /// `skipsDownload` on `FileIO`'s threads under `skip-identical`, the one rule that reads the local file
    /// (a large file read on the cooperative pool held back every task of the worker, heartbeats included).
    func skipsDownloadOffPool(of object: StorageObject, crc32c: String?, to destination: String) async throws(StorageError) -> TransferOutcome? {
        guard readsSource else { return try skipsDownload(of: object, crc32c: crc32c, to: destination) }
        let rule = self
        return try await FileIO.run(.compare) { () throws(StorageError) -> TransferOutcome? in
            try rule.skipsDownload(of: object, crc32c: crc32c, to: destination)
        }
    }

    /// `settlesUpload` with `source` as the local source, on `FileIO`'s threads under `skip-identical`
    /// (or `acceptsIdentical`), the rules that read it.
    func settlesUpload(existing: StorageObject?, destination: String, offPool source: UploadSource) async throws(StorageError) -> TransferOutcome? {
        guard readsSource else {
            return try settlesUpload(existing: existing, destination: destination) { () throws(StorageError) in
                try OverwriteRule.sizeAndCRC32C(of: source)
            }
        }
        let rule = self
        return try await FileIO.run(.compare, on: source) { source throws(StorageError) -> TransferOutcome? in
            try rule.settlesUpload(existing: existing, destination: destination) { () throws(StorageError) in
                try OverwriteRule.sizeAndCRC32C(of: source)
            }
        }
    }

    /// The size and base64 CRC32C of an upload's source (for `skip-identical`).
    static func sizeAndCRC32C(of source: UploadSource) throws(StorageError) -> (size: Int64, crc32c: String) {
        (source.size, try source.hashes(streamed: StreamChecksums(md5: false)).crc32c)
    }

    /// The size and base64 CRC32C of `spec`'s source: its file, or its inline data.
    static func sizeAndCRC32C(of spec: JobSpec) throws(StorageError) -> (size: Int64, crc32c: String) {
        if let data = spec.data { return try sizeAndCRC32C(of: UploadSource(data: data)) }
        guard let path = spec.source else { throw StorageError(.invalidArgument, "\(spec.kind.rawValue) needs a source") }
        return try sizeAndCRC32C(of: UploadSource(path: path, batch: spec.batch))
    }

    /// The result of an upload that was skipped: the object as it is (no size when the server did not
    /// say one: a plain HTTP HEAD without `Content-Length`).
    static func skippedUpload(_ existing: StorageObject) -> TransferOutcome {
        .finished(JobResult(object: existing, size: existing.knownSize, crc32c: existing.crc32c, skipped: true))
    }
}

extension IfExists {
    /// Whether the rule leaves an existing destination as it is (`fail` refuses, `skip` skips).
    fileprivate var leavesExisting: Bool { self == .fail || self == .skip }
}
