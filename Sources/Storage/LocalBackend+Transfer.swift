import Checksums
import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// One local job, run synchronously on the backend's I/O queue. Not `Sendable`: it owns open files.
final class LocalTransfer {
    private let backend: LocalBackend
    private let spec: JobSpec
    /// The job's remote reference (`spec.remoteReference()`) when the caller already parsed it.
    private let parsed: StorageReference?
    private let resumePoint: ResumePoint?
    private let control: TransferControl
    private let report: @Sendable (TransferEvent) -> Void
    private var allocatedBuffer: UnsafeMutableRawBufferPointer?
    /// The job's `max_rate:` and the worker's `--bwlimit`, if any: the buckets network transfers draw
    /// from (`CurlExchange` holds the same two).
    private let ownRate: SharedBandwidth?
    private let sharedRate: SharedBandwidth?

    init(backend: LocalBackend, spec: JobSpec, parsed: StorageReference? = nil, resumePoint: ResumePoint?,
         control: TransferControl, report: @escaping @Sendable (TransferEvent) -> Void) {
        self.backend = backend
        self.spec = spec
        self.parsed = parsed
        self.resumePoint = resumePoint
        self.control = control
        self.report = report
        ownRate = control.rateLimit
        sharedRate = backend.configuration.bandwidth
    }

    /// Whether a copy under `control` and `configuration` is held to a rate limit (its steps then sleep).
    static func isPaced(_ control: TransferControl, _ configuration: StorageConfiguration) -> Bool {
        control.rateLimit != nil || configuration.bandwidth != nil
    }

    deinit { allocatedBuffer?.deallocate() }

    /// The stamp (size, times, identity) of the object file `openObject` opened last, from the status its
    /// metadata was read from: `checkUnchangedWhileRead` compares it at the end of a read.
    private var openedStamp: SourceStamp?

    /// Holds the next step of a copy, `bytes` long, to the rate limits, and ends the attempt once the
    /// job's `timeout:` has passed (a retryable error, as for a network transfer). Returns the step to
    /// take — under a limit a sixteenth of a second's worth of the lowest (`TokenBucket.copyStep`), so
    /// the rate holds over short spans too — once the buckets allow it, or nil at once when a stop was
    /// asked for: the caller goes round to its loop's check of the stop without moving a byte. (It
    /// returned a step then, unpaid for, and steps were at least 16 KiB, curl's buffer floor: each pause
    /// or release of a copy under `max_rate: 1k` let 16 KiB through at once, and a paused upload of
    /// 60,000 bytes stood at 32 KiB after 4 s.) The wait sleeps in slices of at most 100 ms, watching
    /// for a stop.
    ///
    /// `keepingProgress` runs before the timeout's error is thrown: it syncs what the attempt wrote and
    /// reports it as a checkpoint, so the retry resumes there instead of starting over (local copies
    /// otherwise checkpoint every 64 MiB, which a rate-limited copy may take minutes to reach).
    private func paced(_ bytes: Int, keepingProgress: () -> Void = {}) throws(StorageError) -> Int? {
        let deadline = control.deadline
        if let deadline, deadline.hasPassed() {
            keepingProgress()
            throw timedOut(deadline)
        }
        let lowest = min(ownRate?.rate ?? .max, sharedRate?.rate ?? .max)
        guard bytes > 0, lowest < .max else { return bytes }
        let step = min(bytes, TokenBucket.copyStep(for: lowest))
        while true {
            guard control.stopReason == nil else { return nil }
            let now = ContinuousClock.now
            let wait = max(ownRate?.millisecondsUntilReady(at: now) ?? 0, sharedRate?.millisecondsUntilReady(at: now) ?? 0)
            guard wait > 0 else { break }
            if let deadline, deadline.hasPassed(at: now) {
                keepingProgress()
                throw timedOut(deadline)
            }
            let slice = min(wait, 100, deadline.map { Int($0.remainingMilliseconds) + 1 } ?? 100)
            usleep(useconds_t(slice * 1000))
        }
        let now = ContinuousClock.now
        ownRate?.take(step, at: now)
        sharedRate?.take(step, at: now)
        return step
    }

    /// Bytes between a copy's checkpoints: the backend's interval (64 MiB: a local copy moves that in
    /// well under a second), or at most 8 MiB — a network download's — for a copy a rate limit holds,
    /// which may take minutes to move 64 MiB, all of it lost to a killed worker.
    private var checkpointBytes: Int64 {
        ownRate == nil && sharedRate == nil ? backend.checkpointInterval : min(backend.checkpointInterval, Self.pacedCheckpointInterval)
    }

    static let pacedCheckpointInterval: Int64 = 8 << 20

    /// The error of a copy still running at the job's `timeout:`, naming the job's reference.
    private func timedOut(_ deadline: TransferDeadline) -> StorageError {
        deadline.error(url: (spec.kind.isUpload ? spec.destination : spec.source) ?? "")
    }

    /// The bytes the transfer moves, once known (`upload`, `downloadFile` set it before the buffer is
    /// first used): the buffer need not be larger.
    private var transferBytes = Int64(LocalFiles.bufferSize)

    /// The streaming buffer, allocated when first used: an in-memory download reads straight into its
    /// result and never needs it, and a megabyte allocated and freed per job cost it ~1,500
    /// instructions (and the kernel a mapping). At most `LocalFiles.bufferSize` bytes, and no more than
    /// the transfer moves (rounded up to a page): a megabyte for each small upload made a worker at
    /// concurrency 64 hold ~60 MB of heap for a few bytes a job (heaptrack, 4,000 tiny `upload-data`
    /// jobs among 34,000: peak heap 68 MB; 40,000 of them alone afterwards: 12.5 MB).
    private var buffer: UnsafeMutableRawBufferPointer {
        if let allocatedBuffer { return allocatedBuffer }
        let page = 4096
        let needed = Int(min(Int64(LocalFiles.bufferSize), max(1, transferBytes)))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: (needed + page - 1) / page * page, alignment: 16)
        allocatedBuffer = buffer
        return buffer
    }

    func run() throws(StorageError) -> TransferOutcome {
        switch spec.kind {
        case .uploadFile, .uploadData: try upload()
        case .downloadFile: try downloadFile()
        case .downloadMemory: try downloadMemory()
        case .fetchURL: try fetchURL()
        case .getMetadata: try getMetadata()
        case .updateMetadata: try updateMetadata()
        case .delete: try delete()
        }
    }

    /// The reference in the job's `field` ("source" or "destination"): the caller's parse of it when it is
    /// the job's remote reference, else parsed here.
    private func reference(_ text: String?, _ field: String) throws(StorageError) -> StorageReference {
        if let parsed, field == (spec.kind.namesDestinationReference ? "destination" : "source") { return parsed }
        guard let text else { throw StorageError(.invalidArgument, "\(spec.kind.rawValue) needs a \(field) reference") }
        return try backend.configuration.reference(parsing: text)
    }

    // MARK: - Upload

    /// Where upload bytes come from: a file read through the buffer, or inline data.
    private enum Source {
        case file(LocalFile)
        case data(Data)
    }

    private func upload() throws(StorageError) -> TransferOutcome {
        let reference = try reference(spec.destination, "destination")
        let source: Source
        let total: Int64
        var sourceName: String?
        // The source file as it was opened: checked again before the object is written.
        var sourceStamp: SourceStamp?
        if spec.kind == .uploadFile {
            guard let path = spec.source else { throw StorageError(.invalidArgument, "upload-file needs a source path") }
            sourceName = LocalFiles.lastComponent(path)
            try backend.policy.check(reference: reference, sourceName: sourceName)
            let (file, status) = try LocalFile.reading(path, batch: spec.batch, context: .source)
            guard !status.isDirectory else {
                throw StorageError(.invalidArgument, "source '\(path)' is a directory: upload-file takes one regular file")
            }
            source = .file(file)
            total = status.size
            sourceStamp = status.stamp
        } else {
            guard let data = spec.data else { throw StorageError(.invalidArgument, "upload-data needs data") }
            try backend.policy.check(reference: reference, sourceName: nil)
            source = .data(data)
            total = Int64(data.count)
        }
        transferBytes = total

        let location = try backend.locate(reference, creating: true, within: spec.batch?.path)
        let existing = (spec.ifExists ?? .overwrite) == .overwrite ? nil : location.directory.entry(location.name).flatMap { $0.isRegular ? $0 : nil }
        // An existing object that is the session file an earlier attempt linked into place is the job's own
        // (its second name, where a death after the link left one, under the name it has now).
        let rule = OverwriteRule(spec, resumingFrom: existing == nil ? resumePoint : sessionNamedAsNow(in: location),
                                 existing: existing?.identity)
        if let existing {
            let object = try backend.readMetadata(location, status: existing)
            let spec = self.spec
            if let settled = try rule.settlesUpload(existing: object, destination: reference.description,
                                                    source: { () throws(StorageError) in try OverwriteRule.sizeAndCRC32C(of: spec) }) {
                return settled
            }
        }
        let (session, hashes) = try openUploadSession(for: location, total: total, source: source, md5: spec.wantsMD5)
        let temp = session.file
        let offset = session.offset
        if case .file(let file) = source { try file.seek(to: offset) }

        var done = offset
        var lastCheckpoint = offset
        var kernelCopy = true
        report(.progress(bytesDone: done, bytesTotal: total))
        while done < total {
            if let reason = control.stopReason {
                if reason == .cancel {
                    session.discard(in: location)
                    return .stopped(.cancel, nil)
                }
                try temp.sync()
                // Let go now (its lock too), not when the transfer's objects are freed: the next attempt
                // may start in this process at once.
                temp.close()
                return .stopped(reason, .upload(sessionURI: session.uri, confirmedOffset: done, total: total))
            }
            let room = Int(min(Int64(buffer.count), total - done))
            // A file source is copied by the kernel where it can; the CRC is then taken from the bytes
            // stored (read back from the page cache), so it describes exactly what the object holds.
            if case .file(let file) = source, kernelCopy {
                let copied: Int?
                do {
                    // Larger steps than the buffer: the kernel copies without it, and each step is a
                    // system call, a read-back for the CRC and a progress report.
                    guard let step = try paced(Int(min(Self.kernelCopyStep, checkpointBytes, total - done)), keepingProgress: {
                        keepUploaded(session, in: location, done: done, since: lastCheckpoint, total: total)
                    }) else { continue }
                    copied = try temp.copyInKernel(from: file, count: step)
                } catch {
                    if temp.failedForLackOfSpace { session.discard(in: location) }
                    throw error
                }
                if let copied {
                    try hashStored(temp, at: done, count: copied, into: hashes)
                    // The disk writes while the next step copies: the final sync then waits for little.
                    temp.startWriteBack(at: done, count: Int64(copied))
                    backend.statistics.addSourceBytes(copied)
                    backend.statistics.addKernelCopiedBytes(copied)
                    done += Int64(copied)
                    report(.progress(bytesDone: done, bytesTotal: total))
                    if done - lastCheckpoint >= checkpointBytes && done < total {
                        try checkpoint(session, in: location, done: done, total: total)
                        lastCheckpoint = done
                    }
                    continue
                }
                kernelCopy = false
            }
            guard let want = try paced(room, keepingProgress: {
                keepUploaded(session, in: location, done: done, since: lastCheckpoint, total: total)
            }) else { continue }
            let chunk: UnsafeRawBufferPointer
            switch source {
            case .file(let file):
                let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
                guard count > 0 else {
                    // Changed, as below: the session's bytes are of another version, dropped.
                    session.discard(in: location)
                    throw UploadSource.sourceShrank(spec.source ?? "", expected: total, found: done)
                }
                chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            case .data(let data):
                let start = Int(done)
                // Copy through the buffer so the code path matches the file case.
                data.withUnsafeBytes { bytes in
                    UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[start..<(start + want)]))
                }
                chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<want])
            }
            backend.statistics.addSourceBytes(chunk.count)
            do {
                try temp.write(chunk)
            } catch {
                if temp.failedForLackOfSpace { session.discard(in: location) }
                throw error
            }
            hashes.update(chunk)
            done += Int64(chunk.count)
            report(.progress(bytesDone: done, bytesTotal: total))
            if done - lastCheckpoint >= checkpointBytes && done < total {
                try checkpoint(session, in: location, done: done, total: total)
                lastCheckpoint = done
            }
        }

        // A file written to while it was copied would make an object of two versions (whose checksums
        // match what was copied): refused before the object is written, and the session dropped.
        if case .file(let file) = source, let then = sourceStamp {
            let now = try file.status().stamp
            if !now.isUnchanged(since: then) {
                session.discard(in: location)
                throw UploadSource.sourceChanged(spec.source ?? "", now: now, then: then)
            }
        }
        let (md5, crc32c) = hashes.finish()
        let now = Date()
        let time = LocalFiles.timestamp(now)
        let metadata = spec.metadata
        let contentType = ContentTypes.forUpload(spec, destination: reference)
        let object = StorageObject(
            bucket: reference.bucket, name: reference.fullPath, size: total, contentType: contentType,
            cacheControl: metadata?.cacheControl, contentDisposition: metadata?.contentDisposition,
            contentEncoding: metadata?.contentEncoding, contentLanguage: metadata?.contentLanguage,
            customMetadata: metadata?.customMetadata, md5Hash: md5, crc32c: crc32c,
            generation: String(Int64((now.timeIntervalSince1970 * 1_000_000).rounded())), metageneration: "1",
            timeCreated: time, updated: time)

        var diskFull = false
        let sidecar: (name: String, identity: FileIdentity)
        // A sidecar this upload replaces passes its mode (and owner, where the worker may) to the new one
        // (`LocalFile.takeAccess`), as the object it replaces does to the new object below — each its own:
        // an object's mode (0751, 0666) is no sidecar's.
        let replacedSidecar = rule.replaces ? location.directory.entry(location.sidecarName).flatMap { $0.isRegular ? $0 : nil } : nil
        do {
            try temp.sync()
            sidecar = try backend.createMetadata(object, describing: session.identity, for: location, control: control,
                                                 access: replacedSidecar, diskFull: &diskFull)
        } catch {
            // A folder removed or moved away: its sidecar could not be made there, and the error says why.
            if let departure = location.directory.departure {
                session.discard(in: location)
                throw LocalBackend.folderLeft(location, departure)
            }
            // A full disk ends the job, so its session goes to give the space back.
            if diskFull || temp.failedForLackOfSpace { session.discard(in: location) }
            throw error
        }
        // The folder first: one removed or moved away took the session file with it, which is then missing
        // from the folder held open (or still there, in the moved folder) — not another attempt's doing.
        if let departure = location.directory.departure {
            session.discard(in: location)
            location.directory.remove(sidecar.name, ifStill: sidecar.identity)
            throw LocalBackend.folderLeft(location, departure)
        }
        // Only the file this upload wrote is renamed onto the object: never one swapped in at its name.
        guard let current = location.directory.entry(session.name) else {
            // Its name gone: another attempt of the job adopted the file (this one lost its lease).
            location.directory.remove(sidecar.name, ifStill: sidecar.identity)
            throw Self.sessionTaken(session, in: location)
        }
        guard current.isRegular, current.identity == session.identity else {
            location.directory.remove(sidecar.name, ifStill: sidecar.identity)
            throw StorageError(.pathError,
                               "the upload session file '\(location.directory.childPath(session.name))' was replaced by another file "
                                   + "during the upload; nothing was renamed onto '\(location.path)' — check who writes in that "
                                   + "folder, then retry the job")
        }
        // The session stays open, its writer lock held, until it is renamed onto the object: a later
        // attempt that finds it at its name meanwhile does not take it over.
        defer { temp.close() }
        // The object and its sidecar are two renames: a folder at either name (which a rename cannot
        // replace), or a device, socket or pipe (which it would), is refused before the first, so a
        // failed job never leaves the object replaced beside its old metadata.
        do throws(StorageError) {
            for name in [location.name, location.sidecarName] {
                try location.directory.refuseUnreplaceable(name, for: "writing the object '\(reference.description)'")
            }
        } catch {
            session.discard(in: location)
            location.directory.remove(sidecar.name, ifStill: sidecar.identity)
            throw error
        }
        var objectTaken = false
        do throws(StorageError) {
            if rule.replaces {
                if let now = location.directory.entry(location.name), now.isRegular { try temp.takeAccess(of: now) }
                try location.directory.rename(session.name, to: location.name)
            } else if try location.directory.linkExclusive(session.name, to: location.name) {
                // `if_exists: fail` or `skip`: linked into place only if nothing took the name since the check above.
                location.directory.remove(session.name, ifStill: session.identity)
            } else {
                objectTaken = true
            }
        } catch {
            // The session's name gone at the rename: another attempt of the job adopted the file (this
            // one, frozen past its lease between its check and its rename, woke after the retry took
            // it), or another writer moved it. Nothing of this attempt's went onto the object.
            let taken = location.directory.entry(session.name) == nil
            session.discard(in: location)
            location.directory.remove(sidecar.name, ifStill: sidecar.identity)
            if let departure = location.directory.departure { throw LocalBackend.folderLeft(location, departure) }
            if taken { throw Self.sessionTaken(session, in: location) }
            throw error
        }
        if objectTaken {
            // An object written at the name while this upload ran: `fail` refuses, `skip` leaves it.
            session.discard(in: location)
            location.directory.remove(sidecar.name, ifStill: sidecar.identity)
            try rule.settleTakenUpload(reference.description)
            let found = location.directory.entry(location.name).flatMap { $0.isRegular ? try? backend.readMetadata(location, status: $0) : nil }
            return OverwriteRule.skippedUpload(found ?? StorageObject(bucket: reference.bucket, name: reference.fullPath, size: -1))
        }
        do {
            try location.directory.rename(sidecar.name, to: location.sidecarName)
        } catch {
            location.directory.remove(sidecar.name, ifStill: sidecar.identity)
            throw error
        }
        // A sidecar an older jobctl wrote for a long name under the name it then had is the old object's.
        backend.removeOlderSidecar(of: location)
        try location.directory.sync()
        // The sidecar records the hashes of the bytes written here: there is no other copy to compare with.
        return .finished(JobResult(object: object, size: total, md5: md5, crc32c: crc32c, verified: []))
    }

    /// The error of an attempt whose session file lost its name before the commit renamed it: another
    /// attempt of the job adopted it (this one lost its lease, so the error is seldom written), or
    /// another writer moved it; retryable, as the next attempt resumes or writes the object again.
    private static func sessionTaken(_ session: OpenSession, in location: LocalLocation) -> StorageError {
        StorageError(.pathError, "the upload session file '\(location.directory.childPath(session.name))' was renamed away "
                         + "before this attempt committed it (another attempt of the job took it over, or another writer "
                         + "moved it); nothing was renamed onto '\(location.path)' — the next attempt writes it", retryable: true)
    }

    /// Bytes handed to `copy_file_range` at once (at most a checkpoint's worth: a stop is noticed
    /// between steps, and a pause lands on a checkpoint).
    static let kernelCopyStep: Int64 = 8 << 20

    /// An open upload session file: where the bytes go, and how a later attempt finds it again.
    private struct OpenSession {
        let file: LocalFile
        /// Its name in the object's folder.
        let name: String
        let identity: FileIdentity
        /// Bytes already in it (a resumed session) where writing continues.
        let offset: Int64
        /// The folder it is in (`SafeDirectory.path`).
        let folder: String

        /// `file-session:DEVICE:INODE:PATH`, reported in checkpoints. Built when one is reported: most
        /// uploads never are, and building it for each one cost ~2,500 instructions.
        var uri: String {
            LocalUploadSession(path: SafeDirectory.childPath(name, in: folder), identity: identity).uri
        }

        /// Removes the session file while it is still this one, then closes it (cancel, full disk, failed
        /// rename): its writer lock keeps a later attempt from taking it over in between.
        func discard(in location: LocalLocation) {
            location.directory.remove(name, ifStill: identity)
            file.close()
        }
    }

    /// Resumes the session named by an upload resume point when it is this job's for this object (the
    /// job's id in its name), still the file the session recorded (its identity; for sessions logged
    /// before identities were, a regular file with one link owned by us), of the source's size, and its
    /// prefix is the source's (compared byte by byte: a source changed since, or a session of other
    /// bytes, would make an object of two files whose hashes are its own); else creates a new one. A
    /// file at the recorded name that is not the session is never written to.
    ///
    /// Each attempt writes under a name of its own, `.<name>.<job id>.<lease token>.jobctl-upload`
    /// (`LocalUploadSession.tag`), created with `O_EXCL | O_NOFOLLOW`; an attempt that resumes adopts
    /// the earlier attempt's file by renaming it to its own name (`renameExclusive`: one step, one
    /// link), so a worker that lost the lease, frozen and then woken, finds its name gone at its commit
    /// and never renames the retry's file onto the object. A session named by an older jobctl for the
    /// job alone (`.<name>.<job id>.jobctl-upload`) is adopted the same way. When the recorded name is
    /// gone, the file is looked for by its identity among the job's session names (an attempt killed
    /// after it adopted the file, before it recorded its own name). Every attempt holds its session's
    /// writer lock (`LocalFile.lockWhileWriting`) while it has it open; a session whose lock another
    /// attempt holds (one frozen past its lease) is not adopted: its name is removed and a new session
    /// made. Returns the session and the hashes of the bytes it holds so far.
    private func openUploadSession(for location: LocalLocation, total: Int64, source: Source,
                                   md5: Bool) throws(StorageError) -> (OpenSession, StreamingHashes) {
        let token = control.jobID.map { LocalUploadSession.tag(jobID: $0, leaseToken: control.leaseToken) }
            ?? String(UUID().uuidString.prefix(12).lowercased())
        let ownName = LocalUploadSession.name(forObject: location.name, token: token)
        if case .upload(let uri, let offset, let recordedTotal, _)? = resumePoint, let recorded = LocalUploadSession(uri: uri),
           LocalFiles.directory(of: recorded.path) == location.directory.path,
           let name = sessionFile(recorded, in: location),
           let file = try? location.directory.openExisting(name, writable: true, context: .destination),
           let status = try? file.status() {
            let isOurs = recorded.identity.map { status.isRegular && status.identity == $0 } ?? status.couldBeOurLeftover
            // A session file with a second name (linked into place by an attempt that died before
            // removing this name, the object since replaced) is never written to: only this name goes.
            // One whose writer lock another attempt holds (frozen past its lease, its descriptor still
            // open) is not taken over: its writes — its cut back to its own resume point among them —
            // would land in this attempt's file and, once renamed, in the object. Its name goes (only the
            // name, as for a session of a changed source): its writer, woken, writes into a file no name
            // leads to, gone when it closes it, and its commit finds the name gone and renames nothing.
            // The lock is taken before the rename, which then moves only the file locked here (`adopt`).
            let usable = isOurs && status.links == 1 && (recordedTotal == nil || recordedTotal == total)
                && offset <= total && status.size >= offset
            if usable, file.lockWhileWriting(status.identity) == .heldElsewhere {
                file.close()
                location.directory.remove(name, ifStill: status.identity)
            } else if usable {
                switch try adopt(name, status: status, as: ownName, in: location) {
                case .adopted:
                    let hashes = StreamingHashes(md5: md5)
                    if try prefix(of: file, matches: source, upTo: offset, hashing: hashes) {
                        try file.truncate(to: offset)
                        try file.seek(to: offset)
                        return (OpenSession(file: file, name: ownName, identity: status.identity, offset: offset,
                                            folder: location.directory.path), hashes)
                    }
                    // The source changed (size or bytes): the session goes, under the name it has now.
                    file.close()
                    location.directory.remove(ownName, ifStill: status.identity)
                case .lost:
                    // Another attempt adopted it first (this one's lease is gone, or going): start afresh.
                    file.close()
                }
            } else {
                file.close()
                // The source changed size, the session is short or linked elsewhere too: this name goes
                // (only the name). A file that is not the session is left alone.
                if isOurs { location.directory.remove(name, ifStill: status.identity) }
            }
        }
        // A leftover at the attempt's own name can only be its own.
        let file = try location.directory.createExclusive(ownName, replacingOwnLeftover: control.jobID != nil)
        let identity: FileIdentity
        do {
            identity = try file.status().identity
            _ = file.lockWhileWriting(identity)
        } catch {
            file.close()
            location.directory.remove(ownName)
            throw error
        }
        return (OpenSession(file: file, name: ownName, identity: identity, offset: 0, folder: location.directory.path),
                StreamingHashes(md5: md5))
    }

    /// The name in the object's folder of the session file `recorded` names, when it is this job's for
    /// this object: the recorded name while something is there, else (an attempt killed after adopting
    /// it under its own name) the job's session name whose file has the recorded identity; nil when
    /// neither is found. The folder is read only then, and read even when the object is that file (a
    /// death between the link of `if_exists: fail` and the unlink leaves a session name beside it, which
    /// the caller removes).
    private func sessionFile(_ recorded: LocalUploadSession, in location: LocalLocation) -> String? {
        let name = LocalFiles.lastComponent(recorded.path)
        // Another job's session (a log edited by hand, a resume point copied) is never resumed into.
        let isJobs: (String) -> Bool = { candidate in
            self.control.jobID.map { LocalUploadSession.isSession(candidate, forObject: location.name, ofJob: $0) }
                ?? LocalUploadSession.isSession(candidate, forObject: location.name)
        }
        guard isJobs(name) else { return nil }
        if location.directory.entry(name) != nil { return name }
        guard let identity = recorded.identity, control.jobID != nil else { return nil }
        let found = location.directory.names { candidate in
            candidate.hasSuffix(".jobctl-upload") && isJobs(candidate)
                && location.directory.entry(candidate).map { $0.isRegular && $0.identity == identity } == true
        }
        return found.count == 1 ? found[0] : nil
    }

    /// The resume point with its session under the name the file has now: a later attempt that took the
    /// session over (renamed it to its own name) and died before it recorded a checkpoint left the log
    /// naming a name that is gone.
    private func sessionNamedAsNow(in location: LocalLocation) -> ResumePoint? {
        guard case .upload(let uri, let offset, let total, let stamp)? = resumePoint, let recorded = LocalUploadSession(uri: uri),
              LocalFiles.directory(of: recorded.path) == location.directory.path,
              let name = sessionFile(recorded, in: location), name != LocalFiles.lastComponent(recorded.path) else { return resumePoint }
        let moved = LocalUploadSession(path: location.directory.childPath(name), identity: recorded.identity)
        return .upload(sessionURI: moved.uri, confirmedOffset: offset, total: total, source: stamp)
    }

    /// What `adopt` did with an earlier attempt's session file.
    private enum Adoption {
        /// The file is this attempt's, under its own name.
        case adopted
        /// Another attempt renamed it first (or this attempt's own name was taken): it is not this attempt's.
        case lost
    }

    /// Gives the session file at `name` (its status `status`, checked as the job's) this attempt's own
    /// name `ownName`, by a rename that never replaces and never leaves the file a second link: killed
    /// before it, the file keeps the name the log recorded; killed after it, the next attempt finds it
    /// by its identity (`sessionFile`). The file at `ownName` afterwards must be the one checked: one
    /// swapped in at `name` between the check and the rename is given its name back and refused.
    private func adopt(_ name: String, status: FileStatus, as ownName: String, in location: LocalLocation) throws(StorageError) -> Adoption {
        guard name != ownName else { return .adopted }
        switch try location.directory.renameExclusive(name, to: ownName) {
        case .renamed:
            break
        case .sourceGone, .targetTaken:
            // Another attempt took it first; or something sits at this attempt's own name, which the new
            // session's exclusive create replaces when it can only be a leftover of ours, else refuses.
            return .lost
        }
        guard let adopted = location.directory.entry(ownName), adopted.isRegular, adopted.identity == status.identity,
              adopted.links == 1 else {
            if let departure = location.directory.departure { throw LocalBackend.folderLeft(location, departure) }
            _ = try? location.directory.renameExclusive(ownName, to: name)
            throw StorageError(.pathError,
                               "the upload session file '\(location.directory.childPath(name))' was replaced by another file "
                                   + "while this attempt resumed it; nothing was written to it — check who writes in that "
                                   + "folder, then retry the job")
        }
        return .adopted
    }

    /// Syncs the session file and reports the offset the next attempt resumes from.
    private func checkpoint(_ session: OpenSession, in location: LocalLocation, done: Int64, total: Int64) throws(StorageError) {
        do {
            try session.file.sync()
        } catch {
            if session.file.failedForLackOfSpace { session.discard(in: location) }
            throw error
        }
        report(.checkpoint(.upload(sessionURI: session.uri, confirmedOffset: done, total: total), bytesTotal: total))
    }

    /// A timed-out upload's bytes since its last checkpoint, kept for the retry: a checkpoint at `done`,
    /// best effort (the timeout's error follows whatever happens here).
    private func keepUploaded(_ session: OpenSession, in location: LocalLocation, done: Int64, since lastCheckpoint: Int64, total: Int64) {
        guard done > lastCheckpoint else { return }
        try? checkpoint(session, in: location, done: done, total: total)
    }

    /// Hashes `count` bytes the kernel just copied into `file` at `offset`, read back through the buffer.
    private func hashStored(_ file: LocalFile, at offset: Int64, count: Int, into hashes: StreamingHashes) throws(StorageError) {
        var hashed = 0
        while hashed < count {
            let want = min(buffer.count, count - hashed)
            let read = try file.read(at: offset + Int64(hashed), into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard read > 0 else {
                throw StorageError(.internalError, "upload session '\(file.path)' is shorter than the bytes copied into it")
            }
            hashes.update(UnsafeRawBufferPointer(rebasing: buffer[0..<read]))
            hashed += read
        }
    }

    /// Whether the session file's first `length` bytes are the source's, read side by side; `hashes`
    /// takes them as they compare equal (it is dropped when they do not).
    private func prefix(of file: LocalFile, matches source: Source, upTo length: Int64,
                        hashing hashes: StreamingHashes) throws(StorageError) -> Bool {
        try file.seek(to: 0)
        let theirs = UnsafeMutableRawBufferPointer.allocate(byteCount: buffer.count, alignment: 16)
        defer { theirs.deallocate() }
        var position: Int64 = 0
        while position < length {
            let want = Int(min(Int64(buffer.count), length - position))
            let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard count > 0 else { return false }   // shorter than its confirmed offset
            let read: Int
            switch source {
            case .file(let sourceFile):
                read = try sourceFile.read(at: position, into: UnsafeMutableRawBufferPointer(rebasing: theirs[0..<count]))
            case .data(let data):
                read = min(count, max(0, data.count - Int(position)))
                if read > 0 { _ = data.copyBytes(to: UnsafeMutableRawBufferPointer(rebasing: theirs[0..<read]), from: Int(position)..<Int(position) + read) }
            }
            guard read == count, let ours = buffer.baseAddress, let other = theirs.baseAddress, memcmp(ours, other, count) == 0 else {
                return false
            }
            hashes.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            position += Int64(count)
        }
        return true
    }

    // MARK: - Downloads

    /// The CRC32C (base64) of the `size` bytes of the object file `file`, read from its start.
    private static func crc32c(of file: LocalFile, size: Int64, buffer: UnsafeMutableRawBufferPointer) throws(StorageError) -> String {
        var crc = CRC32C()
        var done: Int64 = 0
        while done < size {
            let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(buffer.count), size - done))]))
            guard count > 0 else { break }
            crc.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            done += Int64(count)
        }
        return crc.base64
    }

    /// The object, open for reading, with its metadata. A symbolic link at the object's name (or at any
    /// folder inside its bucket) is refused, never followed.
    private func openObject(field: String = "source") throws(StorageError) -> (LocalFile, StorageObject, LocalLocation) {
        let reference = try reference(field == "source" ? spec.source : spec.destination, field)
        let location = try backend.locate(reference, creating: false, within: spec.batch?.path)
        guard let file = try location.directory.openExisting(location.name, writable: false, context: .object) else {
            // Named by its reference, as every other backend names a missing object (and the folder
            // case below does): the bucket folder's path on this machine is not what the job said.
            throw StorageError(.objectNotFound, "object '\(reference)' does not exist; check the path")
        }
        let status = try file.status()
        guard status.isRegular else {
            throw StorageError(.objectNotFound, "object '\(reference)' does not exist ('\(location.path)' is not a regular file)")
        }
        let object = try backend.readMetadata(location, status: status)
        openedStamp = status.stamp
        return (file, object, location)
    }

    /// A download of an object no recorded hash describes (no sidecar: a file put in the bucket by hand)
    /// checks, once every byte is read, that the file was not written to meanwhile: its bytes could be of
    /// two versions, which nothing would catch — a 4 MB object written at its start and its end during a
    /// copy ended `succeeded` with a file matching neither. A retryable failure (the copy removed by the
    /// caller), as an upload whose source changed is; an object with hashes is checked by them.
    private func checkUnchangedWhileRead(_ file: LocalFile, _ object: StorageObject, reference: String) throws(StorageError) {
        guard object.crc32c == nil, object.md5Hash == nil, let then = openedStamp else { return }
        let now = try file.status().stamp
        guard !now.isUnchanged(since: then) else { return }
        let what = now.size != then.size ? "it holds \(now.size) bytes, not the \(then.size) it held when the read began"
            : now.modifiedNanos != then.modifiedNanos ? "it was written to after the read began"
            : "its change time moved after the read began — a write whose modification time was put back, or a chmod, "
                + "chown or new hard link, which the file's times cannot tell apart"
        throw StorageError(.pathError, "object '\(reference)' changed while it was read (\(what)), and it has no recorded hash "
                               + "to tell which bytes are whose: nothing was kept — a retry reads it again from its start",
                           retryable: true)
    }

    /// The hashes the object's sidecar records (CRC32C always, MD5 when its upload computed one).
    private func recorded(_ object: StorageObject) -> [ServedDigest] {
        var digests: [ServedDigest] = []
        if let md5 = object.md5Hash { digests.append(ServedDigest(algorithm: .md5, value: md5, source: "metadata sidecar")) }
        if let crc32c = object.crc32c { digests.append(ServedDigest(algorithm: .crc32c, value: crc32c, source: "metadata sidecar")) }
        return digests
    }

    /// Compares the bytes read with the sidecar's hashes; the algorithms verified.
    private func verify(_ object: StorageObject, md5: String?, crc32c: String) throws(StorageError) -> [ChecksumAlgorithm] {
        try recorded(object).verify(md5: md5, crc32c: crc32c, what: "download",
                                    remedy: "the object or its metadata is corrupt; the copy was removed")
    }

    private func downloadFile() throws(StorageError) -> TransferOutcome {
        guard let destination = spec.destination else {
            throw StorageError(.invalidArgument, "download-file needs a destination path")
        }
        let rule = OverwriteRule(spec, resumingFrom: resumePoint, downloadingTo: destination)
        if let settled = try rule.beforeDownload(to: destination) { return settled }
        let opened: (LocalFile, StorageObject, LocalLocation)
        do throws(StorageError) {
            opened = try openObject()
        } catch {
            // `skip` after attempts that died: no object to compare with, so the file stays, skipped.
            if let settled = rule.unsettledDownload(to: destination) { return settled }
            throw error
        }
        let (file, object, _) = opened
        // `skip-identical`: the sidecar records every object's CRC32C. An object without one (placed by
        // hand, or its sidecar lost) is read, where an earlier attempt that died may have put the job's own
        // bytes at the destination (`acceptsIdentical`), as HTTP reads a file no hash describes: else that
        // attempt's own download was taken for someone's file — failed under `fail`, skipped under `skip`.
        var objectCRC32C = object.crc32c
        if objectCRC32C == nil, rule.acceptsIdentical, PartialFile.destinationStatus(destination)?.size == object.size {
            objectCRC32C = try Self.crc32c(of: file, size: object.size, buffer: buffer)
            try file.seek(to: 0)
        }
        if let settled = try rule.skipsDownload(of: object, crc32c: objectCRC32C, to: destination) { return settled }
        let total = object.size
        transferBytes = total
        var resume = resumePoint
        if case .download(_, let generation, _, _, _, _, _)? = resume, generation != object.generation {
            resume = nil  // The object changed since the pause: its prefix would be stale.
        }
        let partial = try PartialFile(destination: destination, jobID: control.jobID, leaseToken: control.leaseToken,
                                      resumeFrom: resume, recorded: resumePoint, within: spec.folderTail)
        if partial.bytesWritten > total { try partial.restart() }
        // The check of the kept bytes hashes them for the whole file's check in the same read.
        let wantsMD5 = recorded(object).needMD5(asked: spec.wantsMD5)
        var hashes = StreamingHashes(md5: wantsMD5)
        switch try partial.restartUnlessPrefixUnchanged(feeding: { hashes.update($0) }) {
        case .unchanged: break
        case .restarted:
            _ = hashes.finish()  // its hashing, if any went off the thread, ends
            hashes = StreamingHashes(md5: wantsMD5)
        case .unchecked: try partial.readBack { hashes.update($0) }
        }
        if partial.bytesWritten == 0, let resumePoint, case .download = resumePoint, resumePoint.bytesDone > 0 {
            // Starting over (the object changed, the file was gone): the log's point no longer holds its bytes.
            report(.checkpoint(partial.droppedPoint, bytesTotal: total))
        }
        // Whatever removes the partial file from here on (a cancel, the object shrinking, the checksum, a
        // full disk, a refused commit) reports a checkpoint of no bytes when the log may hold one with
        // bytes: else it kept claiming them, and the next attempt was logged as resuming from them.
        var logHoldsBytes = partial.bytesWritten > 0
        defer {
            if partial.removed, logHoldsBytes { report(.checkpoint(partial.droppedPoint, bytesTotal: total)) }
        }
        let keptPrefix = partial.bytesWritten > 0
        try file.seek(to: partial.bytesWritten)

        let checkpoint = { (partial: PartialFile) -> ResumePoint in
            partial.resumePoint(generation: object.generation, etag: nil)
        }
        var lastCheckpoint = partial.bytesWritten
        report(.progress(bytesDone: partial.bytesWritten, bytesTotal: total))
        while partial.bytesWritten < total {
            if let reason = control.stopReason {
                if reason == .cancel {
                    partial.discard()
                    return .stopped(.cancel, nil)
                }
                try partial.sync()
                // Every byte kept was hashed in order: the point records their CRC32C, which the attempt
                // that resumes checks (the hashes end here with the attempt).
                if partial.bytesWritten > 0 { partial.recordPrefix(count: partial.bytesWritten, crc32c: hashes.finish().crc32c) }
                // Let go now (its lock too), not when the transfer's objects are freed: the next attempt
                // may start in this process at once.
                partial.close()
                return .stopped(reason, checkpoint(partial))
            }
            guard let want = try paced(Int(min(Int64(buffer.count), total - partial.bytesWritten)), keepingProgress: {
                // Timed out: what was written is kept for the retry to continue.
                guard partial.bytesWritten > lastCheckpoint, (try? partial.sync()) != nil else { return }
                logHoldsBytes = true
                report(.checkpoint(checkpoint(partial), bytesTotal: total))
            }) else { continue }
            let count = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard count > 0 else {
                partial.discard()
                throw StorageError(.objectNotFound, "object '\(spec.source ?? "")' shrank while it was read: download it again",
                                   retryable: true)
            }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            try partial.write(chunk)
            hashes.update(chunk)
            report(.progress(bytesDone: partial.bytesWritten, bytesTotal: total))
            if partial.bytesWritten - lastCheckpoint >= checkpointBytes && partial.bytesWritten < total {
                try partial.sync()
                lastCheckpoint = partial.bytesWritten
                logHoldsBytes = true
                report(.checkpoint(checkpoint(partial), bytesTotal: total))
            }
        }
        let (md5, crc32c) = hashes.finish()
        let verified: [ChecksumAlgorithm]
        do {
            verified = try verify(object, md5: md5, crc32c: crc32c)
            try checkUnchangedWhileRead(file, object, reference: spec.source ?? "")
        } catch {
            partial.discard()
            throw keptPrefix && !error.retryable ? error.afterKeptPrefix() : error
        }
        guard let path = try partial.commitUnlessTaken(replacing: rule.replaces) else { return try rule.downloadFoundTaken(destination) }
        return .finished(JobResult(object: object, path: path, size: total, md5: md5, crc32c: crc32c, verified: verified))
    }

    private func downloadMemory() throws(StorageError) -> TransferOutcome {
        let maximum = spec.maxSize ?? JobSpec.defaultMaxSize
        let (file, object, location) = try openObject()
        let total = object.size
        guard total <= maximum else {
            throw StorageError.downloadSizeExceeded("object '\(location.reference)'", size: total, maximum: maximum)
        }
        // Read straight into the result, a buffer's worth at a time, rather than through the buffer.
        var data = Data(count: Int(total))
        var filled = 0
        let hashes = StreamingHashes(md5: recorded(object).needMD5(asked: spec.wantsMD5))
        // An object that one read returns whole reports no progress: its outcome carries the counts, and
        // each report would only wake the task's runner for a figure it could not write (no progress
        // tick passes during one read). Larger objects report before the first read and after each one.
        let reportsProgress = total > Int64(LocalFiles.bufferSize)
        if reportsProgress { report(.progress(bytesDone: 0, bytesTotal: total)) }
        while filled < data.count {
            // Bytes in memory do not survive the process, so a stopped in-memory download has no resume
            // point: it stops at once and the next attempt starts over.
            if let reason = control.stopReason { return .stopped(reason, nil) }
            guard let step = try paced(min(LocalFiles.bufferSize, data.count - filled)) else { continue }
            let range = filled..<(filled + step)
            let count = try file.read(into: &data, range)
            guard count > 0 else {
                throw StorageError(.objectNotFound, "object '\(location.reference)' shrank while it was read: download it again",
                                   retryable: true)
            }
            data.withUnsafeBytes { hashes.update(UnsafeRawBufferPointer(rebasing: $0[filled..<(filled + count)])) }
            filled += count
            if reportsProgress { report(.progress(bytesDone: Int64(filled), bytesTotal: total)) }
        }
        let (md5, crc32c) = hashes.finish()
        let verified = try verify(object, md5: md5, crc32c: crc32c)
        try checkUnchangedWhileRead(file, object, reference: location.reference.description)
        return .finished(JobResult(object: object, size: total, md5: md5, crc32c: crc32c, data: data, verified: verified))
    }

    // MARK: - Download URL

    private func fetchURL() throws(StorageError) -> TransferOutcome {
        let (file, _, location) = try openObject()
        // The object's lock serialises token creation across worker processes: exactly one token is made.
        if let stopped = try lockObject(file) { return stopped }
        let status = try file.status()
        var object = try backend.readMetadata(location, status: status)
        var token = object.downloadTokens?.split(separator: ",").first.map {
            String($0).trimmingCharacters(in: .whitespaces)
        }
        if token?.isEmpty ?? true {
            let created = UUID().uuidString.lowercased()
            token = created
            object.downloadTokens = created
            object.metageneration = String((Int(object.metageneration ?? "1") ?? 1) + 1)
            object.updated = LocalFiles.timestamp()
            try backend.writeMetadata(object, describing: status.identity, to: location, control: control)
            try location.directory.sync()
        }
        let url = "file://" + StorageReference.percentEncode(location.path, keepSlash: true) + "?token=" + StorageReference.percentEncode(token ?? "", keepSlash: false)
        return .finished(JobResult(object: object, url: url))
    }
}

// MARK: - Object operations

extension LocalTransfer {
    fileprivate func getMetadata() throws(StorageError) -> TransferOutcome {
        let (file, object, _) = try openObject()
        file.close()
        return .finished(JobResult(object: object))
    }

    /// Rewrites the sidecar atomically (a new file renamed over it, never through a link) under the
    /// object's lock, so concurrent updates and fetch-url's token creation do not lose each other's changes.
    fileprivate func updateMetadata() throws(StorageError) -> TransferOutcome {
        let update = spec.metadata ?? UploadMetadata()
        let removing = spec.removeCustomMetadata ?? []
        let (file, _, location) = try openObject(field: "destination")
        defer { file.close() }
        if let stopped = try lockObject(file) { return stopped }
        let status = try file.status()
        var object = try backend.readMetadata(location, status: status)
        try checkGeneration(of: object, reference: location.reference)
        let clearing = spec.clearMetadata ?? []
        if clearing.contains(.contentType) { object.contentType = nil }
        if clearing.contains(.cacheControl) { object.cacheControl = nil }
        if clearing.contains(.contentDisposition) { object.contentDisposition = nil }
        if clearing.contains(.contentEncoding) { object.contentEncoding = nil }
        if clearing.contains(.contentLanguage) { object.contentLanguage = nil }
        if let value = update.contentType { object.contentType = value }
        if let value = update.cacheControl { object.cacheControl = value }
        if let value = update.contentDisposition { object.contentDisposition = value }
        if let value = update.contentEncoding { object.contentEncoding = value }
        if let value = update.contentLanguage { object.contentLanguage = value }
        var custom = clearing.contains(.customMetadata) ? [:] : object.customMetadata ?? [:]
        for (key, value) in update.customMetadata ?? [:] { custom[key] = value }
        for key in removing { custom[key] = nil }
        object.customMetadata = custom.isEmpty ? nil : custom
        object.metageneration = String((Int(object.metageneration ?? "1") ?? 1) + 1)
        object.updated = LocalFiles.timestamp()
        try backend.writeMetadata(object, describing: status.identity, to: location, control: control)
        try location.directory.sync()
        return .finished(JobResult(object: object))
    }

    /// Removes the object and its sidecar relative to the bucket folder's descriptor; a link at the
    /// object's name is refused, never followed or removed.
    fileprivate func delete() throws(StorageError) -> TransferOutcome {
        let reference: StorageReference
        if let parsed { reference = parsed } else { reference = try backend.configuration.reference(parsing: spec.destination ?? "") }
        let location = try backend.locate(reference, creating: false, within: spec.batch?.path)
        guard let found = location.directory.entry(location.name) else {
            // An earlier attempt may have removed it and died before its outcome was written
            // (`ResumePoint.deleteMayBeDone`): the delete is done; a sidecar it left behind goes too.
            if resumePoint?.deleteMayBeDone == true {
                if let sidecar = location.directory.entry(location.sidecarName), sidecar.isRegular {
                    location.directory.remove(location.sidecarName, ifStill: sidecar.identity)
                }
                backend.removeOlderSidecar(of: location)
                try location.directory.sync()
                return .finished(JobResult(deleted: reference.description))
            }
            throw StorageError(.objectNotFound, "object '\(reference)' does not exist; check the path")
        }
        if found.kind == .symbolicLink { throw LocalFiles.symbolicLinkRefused(location.path, operation: "deleting") }
        guard found.isRegular else {
            throw StorageError(.objectNotFound, "object '\(reference)' does not exist ('\(location.path)' is not a regular file)")
        }
        try ProtectedFiles.refuse(found.identity, at: location.path, "deleting the object '\(reference.description)'")
        // The sidecar's generation is compared under the object's lock, as update-metadata writes it.
        var lockedObject: LocalFile?
        if spec.ifGeneration != nil {
            let (file, object, _) = try openObject(field: "destination")
            lockedObject = file
            if let stopped = try lockObject(file) { return stopped }
            try checkGeneration(of: object, reference: reference)
        }
        defer { lockedObject?.close() }
        guard location.directory.remove(location.name, ifStill: found.identity) else {
            throw StorageError(.objectNotFound, "object '\(reference)' was removed or replaced while it was being deleted; check the path")
        }
        if let sidecar = location.directory.entry(location.sidecarName), sidecar.isRegular {
            location.directory.remove(location.sidecarName, ifStill: sidecar.identity)
        }
        // An older jobctl's sidecar of a long name goes only when it names this object: under that name
        // may be the sidecar of the object named that cut form.
        backend.removeOlderSidecar(of: location)
        try location.directory.sync()
        return .finished(JobResult(deleted: reference.description))
    }

    /// Takes `file`'s lock (the object's: see `LocalFile.lockExclusive`): nil once taken, the stopped
    /// outcome when the job was cancelled or paused while another process held it.
    private func lockObject(_ file: LocalFile) throws(StorageError) -> TransferOutcome? {
        let control = control
        guard try file.lockExclusive(waitingAtMostMs: LocalBackend.objectLockWaitMs, stopped: { control.stopReason != nil }) else {
            return .stopped(control.stopReason ?? .cancel, nil)
        }
        return nil
    }

    /// Throws the precondition error when the job names a generation (`if_generation:`) the object's
    /// sidecar does not record.
    private func checkGeneration(of object: StorageObject, reference: StorageReference) throws(StorageError) {
        guard let expected = spec.ifGeneration, object.generation != String(expected) else { return }
        throw StorageError.generationMismatch(reference.description, expected: expected, actual: object.generation)
    }
}
