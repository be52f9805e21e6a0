import Checksums
import Foundation
import JobModel
#if canImport(Glibc)
import Glibc
#endif

/// A download-file target: bytes go to a hidden temporary file beside the destination, which is synced
/// and atomically renamed over the destination on `commit()`.
///
/// The temporary file is `.<name>.<job id>.jobctl-partial` (`.<name>.jobctl-partial` for a transfer run
/// without a job, and for partials logged before job ids were part of the name, which are still resumed).
/// The job id in the name is what lets the orphan sweep prove whose a leftover is.
///
/// Every file operation goes through a `SafeDirectory` opened on the destination's folder: the
/// temporary file is created with `O_CREAT | O_EXCL | O_NOFOLLOW`, a resumed one is opened with
/// `O_NOFOLLOW` and used only when it is the very inode the job recorded (`FileIdentity`, in the
/// resume point), and the destination itself is never opened — the rename replaces whatever is there.
/// A symbolic link planted at the temporary name is never followed: the download fails with
/// `pathError` naming it, and the link's target is untouched.
///
/// The attempt that writes the temporary file holds its writer lock (`LocalFile.lockWhileWriting`) from
/// when it has the file open until it is renamed into place or removed. A later attempt continues it
/// only when it takes that lock itself: the earlier worker died (its lock went with it), or finished
/// with the file. A worker frozen past its lease (SIGSTOP, a stalled VM) keeps its lock and, woken,
/// writes on through its descriptor — so its file is not continued: the later attempt starts a new one
/// at the name, and the frozen worker writes into a file no name leads to (gone when it closes it), whose
/// commit then finds the name another file's and renames nothing.
///
/// The destination therefore never holds a half-written file: it is either absent, the previous
/// version, or the complete new one. A missing parent directory is created (like `gsutil cp`).
/// The temporary file survives `deinit` so that a paused or interrupted download can continue from
/// `bytesWritten` (persist `resumePoint(generation:etag:)` after `sync()`). A full disk (ENOSPC,
/// EDQUOT) removes the temporary file before the error is thrown, since the job cannot continue.
///
/// Not `Sendable`: one transfer owns it.
public final class PartialFile {
    /// The final path the file is renamed to.
    public let destination: String
    /// The hidden temporary file the bytes are written to.
    public var tempPath: String { directory.childPath(tempName) }
    /// Bytes in the temporary file (the resumed prefix plus everything written since).
    public private(set) var bytesWritten: Int64
    /// Whether `init` continued an earlier temporary file instead of starting at 0.
    public let resumed: Bool
    /// The temporary file's device and inode, recorded in resume points (a new one after `restart()`).
    public private(set) var identity: FileIdentity

    private let directory: SafeDirectory
    private let tempName: String
    private let destinationName: String
    private var file: LocalFile
    private var finished = false
    /// Whether the temporary file was let go before a commit put it in place (`discard()`: a cancel, a
    /// failure no attempt continues, a full disk, a refused commit): its name removed, or found holding
    /// another file. Its bytes are gone, and a resume point the log holds for them must follow (a
    /// checkpoint of `droppedPoint`).
    public private(set) var removed = false
    /// The disk-full error that made a write remove the file (see `write(_:at:)`).
    private var removedForLackOfSpace: StorageError?
    /// The CRC32C (base64) the log recorded for the resumed prefix (`ResumePoint.download`'s
    /// `prefixCRC32C`), which `restartUnlessPrefixUnchanged` checks; nil when it recorded none or nothing
    /// was resumed.
    private var recordedPrefixCRC32C: String?
    /// The CRC32C of the first `count` bytes, as the attempt that wrote them computed them
    /// (`recordPrefix`): in the resume point while `count` is `bytesWritten`.
    private var prefixCRC32C: (count: Int64, crc32c: String)?

    /// Whether the temporary file is on a filesystem kept in memory, whose syncs return at once.
    var onMemoryFilesystem: Bool { file.onMemoryFilesystem }

    /// Whether something (a file, a folder, a link) is at `destination`, looked up relative to its folder
    /// without following links; false when the folder does not exist.
    public static func destinationExists(_ destination: String) -> Bool {
        destinationEntry(destination) != nil
    }

    /// The identity of the regular file at `destination`, looked up relative to its folder without
    /// following links; nil when there is none (or something else is there).
    static func destinationFile(_ destination: String) -> FileIdentity? {
        destinationStatus(destination)?.identity
    }

    /// The status of the regular file at `destination` (see `destinationFile`).
    static func destinationStatus(_ destination: String) -> FileStatus? {
        destinationEntry(destination).flatMap { $0.isRegular ? $0 : nil }
    }

    /// Whatever is at `destination` (a file, a folder, a link), looked up relative to its folder without
    /// following links; nil when nothing is, or the folder does not exist.
    private static func destinationEntry(_ destination: String) -> FileStatus? {
        let absolute = LocalFiles.absolute(destination)
        guard let directory = try? SafeDirectory.open(trusted: LocalFiles.directory(of: absolute), create: false) else { return nil }
        return directory.entry(LocalFiles.lastComponent(absolute))
    }

    /// The temporary file's name for a destination file named `name`.
    public static func tempName(for name: String, jobID: String?) -> String {
        HiddenName.make(name, suffix: suffix(jobID: jobID))
    }

    /// `tempName(for:jobID:)` and, for a long name, the name an older jobctl gave the same file
    /// (`HiddenName.forms`): still resumed and swept.
    static func tempNames(for name: String, jobID: String?) -> [String] {
        HiddenName.forms(name, suffix: suffix(jobID: jobID))
    }

    /// Whether `candidate` is `tempName(for:jobID:)` under either of its names (`tempNames`).
    static func isTempName(_ candidate: String, for name: String, jobID: String?) -> Bool {
        HiddenName.isName(candidate, of: name, suffix: suffix(jobID: jobID))
    }

    /// The temporary file's name for a destination file named `name` that the attempt of job `jobID`
    /// holding lease `leaseToken` starts when it finds the job's file held by a frozen attempt
    /// (`.<name>.<job id>.<lease token>.jobctl-partial`).
    public static func tempName(for name: String, jobID: String, leaseToken: Int64) -> String {
        HiddenName.make(name, suffix: ".\(jobID).\(leaseToken).jobctl-partial")
    }

    /// `tempName(for:jobID:leaseToken:)` and, for a long name, an older jobctl's name of the file.
    static func tempNames(for name: String, jobID: String, leaseToken: Int64) -> [String] {
        HiddenName.forms(name, suffix: ".\(jobID).\(leaseToken).jobctl-partial")
    }

    /// `.<job id>.jobctl-partial`, or `.jobctl-partial` without a job.
    private static func suffix(jobID: String?) -> String {
        jobID.map { ".\($0).jobctl-partial" } ?? ".jobctl-partial"
    }

    /// Whether `candidate` is an attempt's own temporary name (`tempName(for:jobID:leaseToken:)`, or an
    /// older jobctl's name of it) for `name` and job `jobID`, whatever its lease token.
    static func isAttemptTempName(_ candidate: String, for name: String, jobID: String) -> Bool {
        let suffix = ".jobctl-partial"
        guard candidate.hasSuffix(suffix) else { return false }
        let stem = candidate.dropLast(suffix.count)
        guard let dot = stem.lastIndex(of: "."), let token = Int64(stem[stem.index(after: dot)...]) else { return false }
        return HiddenName.isName(candidate, of: name, suffix: ".\(jobID).\(token).jobctl-partial")
    }

    /// The temporary path used for `destination` by job `jobID` (nil: a transfer run without a job).
    public static func tempPath(for destination: String, jobID: String? = nil) -> String {
        let absolute = LocalFiles.absolute(destination)
        let directory = LocalFiles.directory(of: absolute)
        return (directory == "/" ? "" : directory) + "/" + tempName(for: LocalFiles.lastComponent(absolute), jobID: jobID)
    }

    /// Opens the temporary file for `destination`, resuming or creating it.
    ///
    /// When `resume` is `.download` naming this destination's temporary file (the job's, or the name used
    /// before job ids were part of it; none means the job's), that file is still the inode recorded in the
    /// resume point (for old resume points without one: a regular file with one link, owned by us), holds
    /// at least `bytesWritten` bytes and no live attempt holds its writer lock, it is truncated to
    /// `bytesWritten` and writing continues there.
    /// Otherwise a new temporary file is created and writing starts at 0; a different file found at the
    /// old name is never written to. Any other resume point (an upload's) is ignored.
    ///
    /// `within` is the part of `destination` below a folder the user named (a prefix download's object
    /// path, `JobBatch.path`): the folders in it come from object names, so they are opened (and made)
    /// without following links — a link planted there by someone else is refused, never written
    /// through — as the folders inside a `file://` bucket are. The folder the user named is opened as
    /// named, links and all.
    ///
    /// `leaseToken` is the attempt's lease token. An attempt that finds the job's file held by another
    /// live attempt (frozen past its lease) removes that file's name and starts a file under a name of
    /// its own, `tempName(for:jobID:leaseToken:)`, recorded in its resume points; so does one whose resume
    /// point records such a name it cannot continue. A frozen attempt woken between its commit's check
    /// that its name still leads to its file and its rename then finds the name gone, never the
    /// rescuer's unfinished file: no one starts a file at a name such an attempt may still rename.
    ///
    /// `recorded` is the job's resume point as the log has it, when the caller passes `resume` as nil
    /// because its prefix is stale (the object changed): an attempt's own file it names is not
    /// continued, so its name goes, and the new file gets a name of its own as well.
    public init(destination: String, jobID: String?, leaseToken: Int64? = nil, resumeFrom resume: ResumePoint?,
                recorded: ResumePoint? = nil, within: String? = nil) throws(StorageError) {
        let absolute = LocalFiles.absolute(destination)
        let name = LocalFiles.lastComponent(absolute)
        guard !absolute.hasSuffix("/"), !name.isEmpty, name != ".", name != ".." else {
            throw StorageError(.invalidArgument, "download destination '\(destination)' names a directory, not a file")
        }
        // A name jobctl keeps for its own files (a `file://` object's metadata sidecar, a partial download),
        // the file's or a folder's on its path (one a prefix download makes from an object's name too):
        // the download would stand in for one. `submit` refuses these; a log written before it did may
        // still hold one.
        if let reserved = HiddenName.reservedComponent(in: absolute) {
            throw StorageError(.invalidArgument, "download destination '\(destination)': \(HiddenName.reservedMessage(reserved))")
        }
        self.destination = absolute
        destinationName = name
        directory = try Self.openDirectory(of: absolute, within: within)
        // What the commit would refuse (a folder, a device, a pipe, the worker's own log) is refused
        // before a byte is fetched, not after the whole transfer; the commit checks again.
        try directory.refuseUnreplaceable(name, for: "a download")
        let ours = Self.tempName(for: name, jobID: jobID)

        let opened: LocalFile
        switch Self.resumable(resume, in: directory, destinationName: name, ours: ours, jobID: jobID) {
        case .resumed(let file, let name, let start):
            opened = file
            tempName = name
            bytesWritten = start
            resumed = true
            if case .download(_, _, _, _, _, _, let crc32c?)? = resume { recordedPrefixCRC32C = crc32c }
        case .none(var frozenWriter):
            if resume == nil, let jobID, let stale = Self.attemptsOwnName(recorded, destinationName: name, jobID: jobID, in: directory) {
                if let found = directory.entry(stale), found.isRegular, found.links == 1, found.couldBeOurLeftover {
                    directory.remove(stale, ifStill: found.identity)
                }
                frozenWriter = true
            }
            // A file at the job's name is an earlier attempt's, not continued: its name goes (its writer,
            // if one still writes it, keeps a file that no name leads to). When an attempt still holds
            // it, or held the file the resume point names, that attempt may be frozen between its
            // commit's check and its rename of the job's name: a new file there would be the one it
            // renames onto the destination. This attempt's file then gets a name of its own, and nothing
            // of the job's is left at the job's name (what an attempt finds there, locked or not, is one
            // no later attempt will continue).
            // Nearly always nothing is at the job's name: created at once, in one call (looking first for
            // an attempt holding a file there cost every download a failed open). Something there: the
            // checks above and below, as before.
            if !frozenWriter, jobID != nil, leaseToken != nil, let created = try directory.createIfAbsent(ours) {
                opened = created
                tempName = ours
            } else {
                let fresh: String
                if let jobID, let leaseToken, frozenWriter || Self.heldElsewhere(ours, in: directory) {
                    if let found = directory.entry(ours), found.couldBeOurLeftover { directory.remove(ours, ifStill: found.identity) }
                    fresh = Self.tempName(for: name, jobID: jobID, leaseToken: leaseToken)
                } else {
                    fresh = ours
                }
                opened = try directory.createExclusive(fresh, replacingOwnLeftover: true)
                tempName = fresh
            }
            bytesWritten = 0
            resumed = false
        }
        do {
            identity = try opened.status().identity
        } catch {
            opened.close()
            throw error
        }
        if !resumed { _ = opened.lockWhileWriting(identity) }
        file = opened
    }

    /// What `resumable` found.
    private enum Resumable {
        /// The earlier file, opened, locked and positioned at its resume offset.
        case resumed(LocalFile, String, Int64)
        /// Nothing to continue; `frozenWriter`: the recorded file is held by another live attempt, or the
        /// resume point names an attempt's own name (such an attempt found the job's file held), so a
        /// frozen attempt may still rename the job's name.
        case none(frozenWriter: Bool)
    }

    /// The attempt's own temporary name (`tempName(for:jobID:leaseToken:)`) in `directory` that `recorded`
    /// names, if any.
    private static func attemptsOwnName(_ recorded: ResumePoint?, destinationName: String, jobID: String,
                                        in directory: SafeDirectory) -> String? {
        let path: String?
        switch recorded {
        case .download(_, _, _, let temp, _, _, _)?: path = temp
        case .slicedDownload(_, _, let temp, _)?: path = temp
        default: path = nil
        }
        guard let path, LocalFiles.directory(of: path) == directory.path else { return nil }
        let name = LocalFiles.lastComponent(path)
        return isAttemptTempName(name, for: destinationName, jobID: jobID) ? name : nil
    }

    /// Whether the file at `name` is held (its writer lock) by another live attempt; its name is then
    /// removed, so that attempt writes and renames only a file no name leads to.
    private static func heldElsewhere(_ name: String, in directory: SafeDirectory) -> Bool {
        guard let file = try? directory.openExisting(name, writable: true, context: .destination) else { return false }
        defer { file.close() }
        guard let status = try? file.status(), status.isRegular, status.links == 1, status.couldBeOurLeftover,
              file.lockWhileWriting(status.identity) == .heldElsewhere else { return false }
        directory.remove(name, ifStill: status.identity)
        return true
    }

    /// The earlier temporary file `resume` names, opened, checked and positioned at its resume offset;
    /// `.none` when there is none to continue (the caller starts a new one).
    private static func resumable(_ resume: ResumePoint?, in directory: SafeDirectory, destinationName: String,
                                  ours: String, jobID: String?) -> Resumable {
        guard case .download(let written, _, _, let previousTemp, let recorded, _, _)? = resume else { return .none(frozenWriter: false) }
        let name: String
        var attemptsOwn = false
        if let previousTemp {
            name = LocalFiles.lastComponent(previousTemp)
            attemptsOwn = jobID.map { isAttemptTempName(name, for: destinationName, jobID: $0) } ?? false
            // The job's name (`ours`), the one before job ids were part of it, or an attempt's own; for a
            // long destination name each also as an older jobctl shortened it.
            guard LocalFiles.directory(of: previousTemp) == directory.path,
                  name == ours || isTempName(name, for: destinationName, jobID: jobID)
                    || isTempName(name, for: destinationName, jobID: nil) || attemptsOwn else {
                return .none(frozenWriter: false)
            }
        } else {
            name = ours
        }
        guard written > 0 else { return .none(frozenWriter: attemptsOwn) }
        // A link at the name is refused here; if it sits at our own name, creating the new file reports it.
        guard let file = try? directory.openExisting(name, writable: true, context: .destination),
              let status = try? file.status() else { return .none(frozenWriter: attemptsOwn) }
        let isOurs = recorded.map { status.isRegular && status.identity == $0 } ?? status.couldBeOurLeftover
        // A second name on the file (an attempt that died between linking it into place and removing this
        // name, the destination since moved; anyone's hard link) makes it someone's file as well: never
        // written to, as truncating it here would change that file too.
        guard isOurs, status.links == 1, status.size >= written else {
            file.close()
            // Ours but unusable (shorter than recorded, or linked elsewhere too): this name goes — only the
            // name, so a file it shares stays whole. Someone else's file is left alone.
            if isOurs { directory.remove(name, ifStill: status.identity) }
            return .none(frozenWriter: attemptsOwn)
        }
        // An attempt that still writes it (frozen past its lease, its descriptor open) holds its lock:
        // not continued, as its writes — its cut back to its own resume point among them — would land in
        // this attempt's file (and, once renamed, in the destination). Taken, the lock was let go after
        // this open, perhaps by a commit that renamed the file into place: still at the name, it is one
        // no other attempt writes.
        guard file.lockWhileWriting(status.identity) != .heldElsewhere else {
            // Its name goes: the attempt that holds it writes on, and commits, a file no name leads to.
            file.close()
            directory.remove(name, ifStill: status.identity)
            return .none(frozenWriter: true)
        }
        guard let named = directory.entry(name), named.isRegular, named.identity == status.identity, named.links == 1 else {
            file.close()
            return .none(frozenWriter: attemptsOwn)
        }
        do {
            try file.truncate(to: written)
            try file.seek(to: written)
        } catch {
            file.close()
            return .none(frozenWriter: attemptsOwn)
        }
        return .resumed(file, name, written)
    }

    /// Opens the temporary file of a sliced download of `size` bytes: the one `resume` names when it is
    /// a `.slicedDownload` of this destination's temporary file, still the recorded inode and still
    /// `size` bytes long (`resumed` is then true and the slices' confirmed bytes are valid); otherwise a
    /// new temporary file, extended to `size` (sparse) so that every slice writes at its own offset.
    /// The same safety as `init(destination:jobID:resumeFrom:)`: `O_NOFOLLOW`, the inode checked, a
    /// file that is not ours never written to.
    public convenience init(slicing destination: String, jobID: String?, leaseToken: Int64? = nil, size: Int64,
                            resumeFrom resume: ResumePoint?, recorded: ResumePoint? = nil, within: String? = nil) throws(StorageError) {
        // A sliced resume point is read through the single-stream checks (same temp name, same inode) with
        // its size as the byte count, so the file is kept at full length.
        var translated: ResumePoint?
        if case .slicedDownload(_, let generation, let tempPath, let identity)? = resume, size > 0 {
            translated = .download(bytesWritten: size, generation: generation, etag: nil, tempPath: tempPath, file: identity)
        }
        try self.init(destination: destination, jobID: jobID, leaseToken: leaseToken, resumeFrom: translated, recorded: recorded,
                      within: within)
        if !resumed {
            do {
                try file.truncate(to: size)
            } catch {
                discard()
                throw error
            }
        }
        bytesWritten = size
        writeBackStart = size
    }

    deinit { file.close() }

    /// Lets the file go — its descriptor and its writer lock — without removing it: an attempt that
    /// stopped (paused, released, failed retryable) and keeps its file for the next one to resume. Left to
    /// `deinit`, the file was let go when the last object holding it was freed, which can come after the
    /// attempt has ended (an HTTP exchange is freed on the transfer engine's thread): a next attempt in the
    /// same process meanwhile found the lock held and started over. Nothing may be written after.
    public func close() {
        file.close()
    }

    /// The folder of the absolute path `destination`, made where missing: opened as named, except the
    /// folders of `within` (the tail of `destination` below the user's folder), opened one by one
    /// without following links.
    static func openDirectory(of destination: String, within: String?) throws(StorageError) -> SafeDirectory {
        // Cut and compared on bytes (see `SlashSeparatedPath`): Characters can join a `/` to a mark.
        let folders = within.map { SlashSeparatedPath.parts(of: $0, keepingEmpty: true).dropLast().map(String.init) } ?? []
        guard let within, !folders.isEmpty, destination.utf8.reversed().starts(with: ("/" + within).utf8.reversed()) else {
            return try SafeDirectory.open(trusted: LocalFiles.directory(of: destination), create: true)
        }
        let end = destination.utf8.index(destination.utf8.endIndex, offsetBy: -(within.utf8.count + 1))
        let root = String(destination.unicodeScalars[..<end])
        return try SafeDirectory.open(trusted: root.isEmpty ? "/" : root, create: true).descend(folders, create: true)
    }

    /// Writes `bytes` at `offset` (a sliced download's slice), leaving `bytesWritten` — the file's full
    /// size, set when it was opened — as it is. Errors as `write(_:)`.
    ///
    /// Slices write in turns while their answers arrive: once one of them met a full disk and the file
    /// was removed, the next slice's bytes get the same disk-full error (they trapped the whole worker,
    /// every job it held left to lease expiry, found by a disk filled mid-download).
    public func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StorageError) {
        if let removedForLackOfSpace { throw removedForLackOfSpace }
        precondition(!finished, "PartialFile used after commit or discard")
        do {
            try file.write(bytes, at: offset)
        } catch {
            if file.failedForLackOfSpace {
                removedForLackOfSpace = error
                discard()
            }
            throw error
        }
    }

    /// Asks the kernel to start writing `count` bytes at `offset` out now (a slice's bytes since its last
    /// step), so the next `sync()` waits for little — what `write(_:)` does every `writeBackStep` bytes.
    public func startWriteBack(at offset: Int64, count: Int64) {
        file.startWriteBack(at: offset, count: count)
    }

    /// Re-reads `count` bytes at `offset` in chunks: a resumed slice's confirmed prefix, to hash it again.
    public func readBack(at offset: Int64, count: Int64, chunk: (UnsafeRawBufferPointer) -> Void) throws(StorageError) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: LocalFiles.bufferSize, alignment: 16)
        defer { buffer.deallocate() }
        var done: Int64 = 0
        while done < count {
            let want = Int(min(Int64(buffer.count), count - done))
            let read = try file.read(at: offset + done, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard read > 0 else {
                throw StorageError(.internalError, "temporary file '\(tempPath)' is shorter than the \(offset + count) bytes recorded")
            }
            chunk(UnsafeRawBufferPointer(rebasing: buffer[0..<read]))
            done += Int64(read)
        }
    }

    /// Where a later attempt continues from: the bytes written so far (synced by the caller), this
    /// temporary file and its identity, pinned to `generation` or `etag`.
    public func resumePoint(generation: String?, etag: String?, total: Int64? = nil) -> ResumePoint {
        let prefix = prefixCRC32C.flatMap { $0.count == bytesWritten ? $0.crc32c : nil }
        return .download(bytesWritten: bytesWritten, generation: generation, etag: etag, tempPath: tempPath, file: identity,
                         total: total, prefixCRC32C: prefix)
    }

    /// Records the CRC32C (base64) of the file's first `count` bytes as the attempt computed them while
    /// writing: an attempt that stops or fails retryably gives its resume point the hash of what it kept (see
    /// `ResumePoint.download`'s `prefixCRC32C`).
    public func recordPrefix(count: Int64, crc32c: String) {
        prefixCRC32C = (count, crc32c)
    }

    /// The resume point of a download whose bytes were dropped: none held, no version pinned, so the next
    /// attempt starts at byte 0 (and still knows the temporary file's name to clear up).
    public var droppedPoint: ResumePoint {
        .download(bytesWritten: 0, generation: nil, etag: nil, tempPath: tempPath, file: identity)
    }

    /// Appends `bytes`. A full disk throws `internalError` ("disk full …", not retryable) and removes the
    /// temporary file; other failures are typed from errno (EIO → internalError, EACCES → unauthorized).
    public func write(_ bytes: UnsafeRawBufferPointer) throws(StorageError) {
        precondition(!finished, "PartialFile used after commit or discard")
        do {
            try file.write(bytes)
        } catch {
            if file.failedForLackOfSpace { discard() }
            throw error
        }
        bytesWritten += Int64(bytes.count)
        // The disk writes while the network delivers: every few MiB the kernel is told to start writing
        // them out, so a checkpoint's `sync()` (and the commit's) waits for little instead of for every
        // byte since the last one — a download to disk then costs about max(network, disk), not the sum.
        if bytesWritten - writeBackStart >= Self.writeBackStep {
            file.startWriteBack(at: writeBackStart, count: bytesWritten - writeBackStart)
            writeBackStart = bytesWritten
        }
    }

    /// Bytes written between two requests to start write-back.
    static let writeBackStep: Int64 = 4 << 20
    /// Where the bytes not yet handed to write-back start.
    private var writeBackStart: Int64 = 0

    /// Appends `data`.
    public func write(_ data: Data) throws(StorageError) {
        // Data.withUnsafeBytes only rethrows untyped errors, so the typed one travels in a Result.
        let outcome = data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Result<Void, StorageError> in
            do throws(StorageError) { try write(bytes); return .success(()) } catch { return .failure(error) }
        }
        try outcome.get()
    }

    /// `fsync(2)` on the temporary file: everything up to `bytesWritten` survives a crash.
    public func sync() throws(StorageError) {
        do {
            try file.sync()
        } catch {
            if file.failedForLackOfSpace { discard() }
            throw error
        }
    }

    /// A duplicate of the temporary file's descriptor, which the caller closes (`BackgroundSyncs`).
    func duplicateDescriptor() throws(StorageError) -> Int32 {
        try file.duplicateDescriptor()
    }

    /// Starts again from byte 0 (the server sent the whole body to a ranged request, or the resumed
    /// prefix is longer than the object) in a new temporary file at the same name; the old one's name is
    /// removed. Not the old file emptied: a resumed file was written by an earlier attempt, and the worker
    /// that ran it may not be dead — frozen past its lease (SIGSTOP, a stalled VM), then woken, it writes
    /// on at its own offset until it hears its lease is gone. Its bytes are the object as it was, which
    /// match ours at every offset while we resume the same version; after a restart they would not, and
    /// landed behind our offset (in the file we then renamed into place) as a corrupt, "verified" file.
    public func restart() throws(StorageError) {
        precondition(!finished, "PartialFile restarted after commit or discard")
        let fresh: LocalFile
        do throws(StorageError) {
            directory.remove(tempName, ifStill: identity)
            fresh = try directory.createExclusive(tempName, replacingOwnLeftover: true)
            do throws(StorageError) {
                identity = try fresh.status().identity
                _ = fresh.lockWhileWriting(identity)
            } catch {
                fresh.close()
                directory.remove(tempName)
                throw error
            }
        } catch {
            discard()
            throw error
        }
        file.close()
        file = fresh
        bytesWritten = 0
        writeBackStart = 0
        recordedPrefixCRC32C = nil
        prefixCRC32C = nil
    }

    /// Syncs, renames the temporary file over the destination and syncs the directory, so the rename
    /// survives a crash. Returns the final (absolute) path. Whatever was at the destination (a file, a
    /// symbolic link) is replaced, never written through; a folder no longer at the destination's path
    /// (removed, moved away, another made at its name), or a temporary name that no longer holds this
    /// file (swapped meanwhile), is not renamed into place (retryable `pathError` saying which).
    ///
    /// A regular file it replaces passes on its permission bits and, where the worker may, its owner and
    /// group (`LocalFile.takeAccess`), given to the temporary file before the rename.
    ///
    /// With `replacing: false` (`if_exists: fail` and `skip`) the file is linked into place only when
    /// nothing is at the destination (`linkat`, so the check and the write are one step); otherwise the
    /// temporary file is removed and the error says the destination exists (`commitUnlessTaken` returns
    /// nil instead).
    ///
    /// The file stays open (its writer lock held) until it is renamed or removed: a later attempt that
    /// finds it at the temporary name meanwhile does not take it over.
    public func commit(replacing: Bool = true, syncing: Bool = true) throws(StorageError) -> String {
        guard let path = try commitUnlessTaken(replacing: replacing, syncing: syncing) else {
            throw StorageError.destinationExists(destination)
        }
        return path
    }

    /// `commit`, except that a destination found taken under `replacing: false` (something appeared there
    /// while the download ran) is nil, the temporary file removed, rather than an error: `if_exists: skip`
    /// leaves what appeared and reports the job skipped.
    public func commitUnlessTaken(replacing: Bool = true, syncing: Bool = true) throws(StorageError) -> String? {
        precondition(!finished, "PartialFile committed twice or after discard")
        if syncing { try sync() }
        // The folder first: one removed or moved away took the temporary file with it, which is then
        // missing from the folder held open (or still there, in the moved folder) — the folder's doing.
        if let departure = directory.departure {
            discard()
            // Retryable: the next attempt opens the folder now at that path (or makes it again).
            let landing = departure == .removed ? "the downloaded bytes went with it"
                : "the file would have landed in the moved folder"
            throw StorageError(.pathError,
                               "the folder '\(directory.path)' \(departure.phrase) while the download ran; nothing was "
                                   + "renamed onto '\(destination)' (\(landing)); the download is tried again",
                               retryable: true)
        }
        let current = directory.entry(tempName)
        guard let current, current.isRegular, current.identity == identity else {
            discard()
            // Retryable: the usual writer is a worker that lost this job's lease (frozen, then woken) and
            // renamed or removed the temporary name it shared; the next attempt starts over on its own file.
            let what = current == nil ? "was removed or renamed" : "was replaced by another file"
            throw StorageError(.pathError,
                               "the temporary file '\(tempPath)' \(what) while the download ran "
                                   + "(a worker that lost this job's lease, or another program writing in that folder); "
                                   + "nothing was renamed onto '\(destination)'; the download is tried again",
                               retryable: true)
        }
        do throws(StorageError) {
            if replacing {
                try directory.refuseUnreplaceable(destinationName, for: "a download")
                if let replaced = directory.entry(destinationName), replaced.isRegular { try file.takeAccess(of: replaced) }
                try directory.rename(tempName, to: destinationName)
            } else {
                guard try directory.linkExclusive(tempName, to: destinationName) else {
                    discard()
                    return nil
                }
                directory.remove(tempName, ifStill: identity)
            }
        } catch {
            discard()
            throw error
        }
        finished = true
        file.close()
        if syncing { try directory.sync() }
        return destination
    }

    /// Closes and removes the temporary file (cancel, checksum mismatch, full disk). Harmless to repeat; a
    /// file that is no longer ours at the temporary name is left alone.
    public func discard() {
        // Removed before it is closed: its lock keeps a later attempt from taking it over in between.
        if !finished {
            directory.remove(tempName, ifStill: identity)
            removed = true
        }
        file.close()
        finished = true
    }

    /// Re-reads the first `bytesWritten` bytes of the temporary file in chunks, to re-hash a resumed prefix.
    public func readBack(chunk: (UnsafeRawBufferPointer) -> Void) throws(StorageError) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: LocalFiles.bufferSize, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while offset < bytesWritten {
            let want = Int(min(Int64(buffer.count), bytesWritten - offset))
            let count = try file.read(at: offset, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]))
            guard count > 0 else {
                throw StorageError(.internalError, "temporary file '\(tempPath)' is shorter than the \(bytesWritten) bytes recorded")
            }
            chunk(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            offset += Int64(count)
        }
    }

    /// Whether the log recorded a CRC32C of the resumed prefix that `restartUnlessPrefixUnchanged` checks.
    var checksPrefix: Bool { recordedPrefixCRC32C != nil }

    /// What `restartUnlessPrefixUnchanged` found.
    public enum PrefixCheck: Sendable, Equatable {
        /// The log recorded no CRC32C of the kept bytes (or none were kept): nothing was read or fed.
        case unchecked
        /// The kept bytes have the CRC32C recorded: every one of them was fed, in order.
        case unchanged
        /// They changed: the file starts over from byte 0, and what was fed is of bytes no longer kept.
        case restarted
    }

    /// A resumed prefix whose CRC32C the log recorded (`ResumePoint.download`'s `prefixCRC32C`) is read
    /// back and hashed; when it no longer has that hash — the file was written to while the job was
    /// paused (an edit in place keeps its size and inode) — the download starts over from byte 0
    /// (`restart()`) instead of joining new bytes to changed ones. Called before the caller takes
    /// `bytesWritten` as where its request starts.
    ///
    /// The bytes read go to `feeding` too, in order, so that a caller that hashes the kept bytes for
    /// the whole file's check does it in the same read (`.unchanged`); a prefix of gigabytes was read
    /// twice, once here and once for those hashes.
    public func restartUnlessPrefixUnchanged(feeding: (UnsafeRawBufferPointer) -> Void) throws(StorageError) -> PrefixCheck {
        guard let recorded = recordedPrefixCRC32C else { return .unchecked }
        recordedPrefixCRC32C = nil
        var crc = CRC32C()
        try readBack { bytes in
            crc.update(bytes)
            feeding(bytes)
        }
        guard crc.base64 != recorded else { return .unchanged }
        try restart()
        return .restarted
    }
}

extension StorageError {
    /// A downloaded file's hash check that failed when part of the file was kept from an earlier attempt:
    /// those bytes sat on the disk between the attempts and may have changed there (an edit in place
    /// during a pause or after a crash keeps a file's size and inode), so the object is not blamed for
    /// good — the copy is removed as before, and the failure is retryable: the next attempt downloads
    /// every byte, and a mismatch then is the object's or the server's.
    func afterKeptPrefix() -> StorageError {
        var error = self
        error.retryable = true
        error.message += " (part of the file was kept from an earlier attempt and may have changed on this disk since: "
            + "a retry downloads the whole object)"
        return error
    }
}

extension JobSpec {
    /// A download-file job's destination below the folder the user named, when the job came from a
    /// prefix (`JobBatch.path`, the object's name relative to the prefix): see `PartialFile.init`'s
    /// `within`. Nil for a job written one by one, whose whole path is the user's.
    var folderTail: String? {
        guard kind == .downloadFile, let batch, let destination, destination.hasSuffix("/" + batch.path) else { return nil }
        return batch.path
    }
}
