import Checksums
import Foundation
import JobModel
import Synchronization

// MARK: - Sliced downloads

extension GCSBackend {
    /// The slices a download of `object` to a file is fetched in, nil when it goes in one stream.
    ///
    /// A sliced download the log's point holds bytes of, of this generation, goes on in the slices it
    /// logged (`loggedSlices`), whatever this worker's own `--slices` and `--sliced-threshold`: a worker
    /// with another count, or with slicing off, fetched the whole object again. Otherwise it is sliced
    /// when slicing is on and the object is at least the threshold, GCS reports its CRC32C (slices are
    /// checked by combining theirs; MD5 cannot be combined, so a job asking for MD5 downloads in one
    /// stream), and no single-stream download of this generation is under way (its bytes are continued
    /// as they are): then in `configuration.sliceCount` slices, none holding a byte yet.
    func slices(for object: StorageObject, md5: Bool, resumingFrom resume: ResumePoint?) -> [DownloadSlice]? {
        guard object.size > 0, object.generation != nil, object.crc32c != nil, !md5 else { return nil }
        if case .download(let written, let generation, _, _, _, _, _)? = resume, written > 0, generation == object.generation { return nil }
        if let logged = loggedSlices(of: object, resumingFrom: resume) { return logged }
        guard let threshold = configuration.slicedThreshold, object.size >= threshold else { return nil }
        return DownloadSlice.plan(size: object.size, count: configuration.sliceCount)
    }

    /// The slices `resume` logged, with their confirmed bytes, when the download continues them: a sliced
    /// download of `object`'s generation holding bytes, its plan one of this object
    /// (`DownloadSlice.planFault`: a damaged or hand-edited point is not continued, and its bytes are
    /// dropped as any other point's that cannot be), and its partial file still the one it recorded, at
    /// least the object's size. A file gone or replaced leaves the choice to this worker's own settings;
    /// `PartialFile` checks it again when it opens it, and a file gone between the two starts again in
    /// the logged slices.
    func loggedSlices(of object: StorageObject, resumingFrom resume: ResumePoint?) -> [DownloadSlice]? {
        guard case .slicedDownload(let slices, let generation, let tempPath, let file)? = resume, generation == object.generation,
              resume?.holdsNoDownloadedBytes == false,
              DownloadSlice.planFault(slices, size: object.size, counts: StorageConfiguration.sliceCountRange) == nil,
              let found = PartialFile.destinationStatus(tempPath), found.identity == file, found.size >= object.size else { return nil }
        return slices
    }

    /// Downloads `object` (pinned to its generation) as Range requests of `slices` (`slices(for:…)`) run
    /// in parallel on the curl engine, each writing at its own offsets into one partial file, as gcloud
    /// storage does above `sliced_object_download_threshold`.
    ///
    /// - Every `FileSink.checkpointInterval` bytes (over all slices) the file is synced and a
    ///   `.slicedDownload` resume point records each slice's confirmed bytes; a later attempt (after a
    ///   pause, a failure or a crash) re-hashes those prefixes and requests only the rest of each slice.
    /// - Each slice keeps its own CRC32C; the whole object's is their `CRC32C.combine`, compared with the
    ///   object's. A mismatch removes the partial file and fails with `nonMatchingChecksum`.
    func slicedDownload(_ object: StorageObject, in slices: [DownloadSlice], of reference: StorageReference, to destination: String,
                        within: String?, rule: OverwriteRule, resumingFrom resume: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let total = object.size
        let generation = object.generation ?? ""
        let url = mediaURL(reference, generation: generation)
        var plan = slices
        // Only a point whose slices are continued names the file to open; any other is dropped below.
        let usable = plan.contains { $0.confirmed > 0 } ? resume : nil
        let partial = try PartialFile(slicing: destination, jobID: control.jobID, leaseToken: control.leaseToken, size: total,
                                      resumeFrom: usable, recorded: resume, within: within)
        if !partial.resumed {
            plan = plan.map { DownloadSlice(start: $0.start, length: $0.length) }
            // The log's point was not continued (another generation, a slice plan not of this object, a
            // one-stream point, its file gone): a checkpoint of no bytes replaces it before any other,
            // else an attempt failing before its first checkpoint left it standing for the next.
            if let resume, resume.isDownload, resume.bytesDone > 0 { report(.checkpoint(partial.droppedPoint, bytesTotal: total)) }
        }
        let progress = ProgressThrottle(total: total, report: report)
        // A slice whose kept bytes no longer have the CRC32C its point recorded (the file written to while
        // the job waited) starts over; the others go on.
        let (checked, crcs) = try await SlicedDownloadState.confirmedCRCs(of: partial, slices: plan)
        let changedSlices = checked != plan
        plan = checked
        let keptPrefix = plan.contains { $0.confirmed > 0 }
        let state = SlicedDownloadState(partial: partial, slices: plan, crcs: crcs, generation: generation,
                                        checkpoint: { point in report(.checkpoint(point, bytesTotal: total)) },
                                        progress: { progress.update($0) })
        if changedSlices {
            // The log's point claims the changed slices' bytes: one without them replaces it first.
            let point = try state.confirm()
            state.reported(point)
            report(.checkpoint(point, bytesTotal: total))
        }
        progress.update(state.bytesWritten)

        // One Range request per unfinished slice, all at once; the engine runs them side by side.
        let results = await withTaskGroup(of: Result<HTTPResponse, TransferFailure>.self) { group in
            for (index, slice) in plan.enumerated() where !slice.isComplete {
                let from = slice.start + slice.confirmed
                let request = HTTPRequest(method: "GET", url: url,
                                          headers: Self.storedBytes(of: object) + ["Range: bytes=\(from)-\(slice.start + slice.length - 1)"])
                let sink = SliceSink(state: state, index: index, from: from, generation: generation, crc32c: object.crc32c)
                group.addTask {
                    do throws(TransferFailure) {
                        return .success(try await send(request, control: control, sink: sink))
                    } catch {
                        return .failure(error)
                    }
                }
            }
            var results: [Result<HTTPResponse, TransferFailure>] = []
            for await result in group { results.append(result) }
            return results
        }

        // The checkpoints handed over have reported (or failed) before anything below.
        await state.settle()
        // Whatever removes the partial file below (a cancel, a failure no attempt continues, a full disk,
        // the checksum, a refused commit) reports a checkpoint of no bytes (`reportDropIfRemoved`).
        defer { state.reportDropIfRemoved() }
        // A stop wins over a failure (every slice shares the control); then the first failure.
        var failure: StorageError?
        var stop: StopReason?
        for result in results {
            switch result {
            case .success(let response) where !response.isSuccess:
                if failure == nil { failure = await mediaError(response, reference: reference, generation: generation) }
            case .success: break
            case .failure(.stopped(let reason)): if stop == nil { stop = reason }
            case .failure(.failed(let error)): if failure == nil { failure = error }
            }
        }
        if stop == .cancel {
            partial.discard()
            return .stopped(.cancel, nil)
        }
        // After a checkpoint's sync failed, a later sync may succeed without the bytes it lost: the
        // download ends with that failure, not with a resume point or a copy those bytes may not back.
        if let synced = state.syncFailure {
            if synced.removesPartial { partial.discard() }
            throw synced.error
        }
        if let stop {
            let point = try state.confirm()
            state.reported(point)
            report(.checkpoint(point, bytesTotal: total))
            partial.close()
            return .stopped(stop, point)
        }
        if let failure {
            // A retry continues every slice from what is synced now; a final failure leaves nothing behind.
            if failure.retryable { _ = try? state.confirm() } else { partial.discard() }
            partial.close()
            throw failure
        }
        guard state.isComplete else {
            _ = try? state.confirm()
            throw StorageError(.unknown, "the sliced download ended after \(state.bytesWritten) of \(total) bytes; a retry fetches the rest",
                               url: redactedURL(url), retryable: true)
        }
        let crc32c = state.combinedCRC32C
        let verified: [ChecksumAlgorithm]
        do {
            verified = try Self.digests(of: object).verify(md5: nil, crc32c: crc32c, what: "downloaded file",
                                                           remedy: "the copy was removed — download again")
        } catch {
            partial.discard()
            throw keptPrefix ? error.afterKeptPrefix() : error
        }
        guard let path = try await partial.commitOffPool(replacing: rule.replaces) else { return try rule.downloadFoundTaken(destination) }
        progress.update(total)
        return .finished(JobResult(object: object, path: path, size: total, md5: nil, crc32c: crc32c, verified: verified))
    }
}

// MARK: - Slices as they fill

/// The slices of one sliced download as they fill: bytes written per slice, a CRC32C per slice, and the
/// checkpoint cadence over all of them.
final class SlicedDownloadState: Sendable {
    private struct Fill {
        var slices: [DownloadSlice]
        var written: [Int64]
        var crcs: [CRC32C]
        var sinceCheckpoint: Int64 = 0
        /// Per slice, the bytes from its start already handed to write-back.
        var writeBack: [Int64]
    }

    /// Guards the fill and every use of the partial file: the slices' sinks write from the curl engine's
    /// thread, the download's task reads and syncs after they end.
    private let fill: Mutex<Fill>
    // The partial file is only touched while `fill` is locked.
    private nonisolated(unsafe) let partial: PartialFile
    private let generation: String
    private let checkpoint: @Sendable (ResumePoint) -> Void
    private nonisolated(unsafe) let progress: (Int64) -> Void
    /// The checkpoints' syncs, off the engine thread (see `BackgroundSyncs`); on a filesystem kept in
    /// memory, where a sync returns at once, they are made in `write`.
    private let syncs: BackgroundSyncs
    private let inMemory: Bool
    /// Whether the log may hold a resume point with bytes of this file: the download continued one, or
    /// a checkpoint with bytes reported since. When the file is removed, a checkpoint of none then says
    /// so (`reportDropIfRemoved`).
    private let logHoldsBytes: Mutex<Bool>

    /// The state of `slices` of `partial`, whose confirmed prefixes have the CRC32Cs `crcs`
    /// (`confirmedCRCs`, read from the file before anything is fetched).
    init(partial: PartialFile, slices: [DownloadSlice], crcs: [CRC32C], generation: String,
         checkpoint: @escaping @Sendable (ResumePoint) -> Void, progress: @escaping (Int64) -> Void) {
        self.partial = partial
        self.fill = Mutex(Fill(slices: slices, written: slices.map(\.confirmed), crcs: crcs,
                                writeBack: slices.map(\.confirmed)))
        self.logHoldsBytes = Mutex(slices.contains { $0.confirmed > 0 })
        self.generation = generation
        self.checkpoint = checkpoint
        self.progress = progress
        self.syncs = BackgroundSyncs(path: partial.tempPath)
        self.inMemory = partial.onMemoryFilesystem
    }

    /// Waits for the checkpoint syncs handed over (their reports are out when it returns).
    func settle() async {
        await syncs.settle()
    }

    /// The first checkpoint sync that failed, if one did (and whether for lack of space).
    var syncFailure: BackgroundSyncs.Failure? { syncs.failure }

    /// Notes that `point` is reported: the log may hold its bytes from then on.
    func reported(_ point: ResumePoint) {
        if point.bytesDone > 0 { logHoldsBytes.withLock { $0 = true } }
    }

    /// After the syncs settled: when the partial file was removed and the log may hold a point with bytes
    /// of it, reports a checkpoint of none (`PartialFile.droppedPoint`) — else `show` and `history` kept
    /// the slices' bytes after they were gone, and the next attempt was logged as resuming from them (its
    /// `moved_bytes` and rate short by them). Not after a checkpoint's sync failed: the download ends
    /// with that failure, as a one-stream download does (`FileSink.drop`).
    func reportDropIfRemoved() {
        guard syncs.failure == nil else { return }
        let dropped: ResumePoint? = fill.withLock { _ in partial.removed ? partial.droppedPoint : nil }
        guard let dropped, logHoldsBytes.withLock({ holds in defer { holds = false }; return holds }) else { return }
        checkpoint(dropped)
    }

    /// The CRC32C of each slice's confirmed prefix, read back from the file (a resumed download; all
    /// empty for a new one), and the slices as they can go on: a slice whose point recorded its bytes'
    /// CRC32C (`DownloadSlice.crc32c`) and whose bytes no longer have it starts over at its first byte.
    /// On `FileIO`'s threads when there is anything to read: prefixes of a large object may be gigabytes,
    /// and the caller is a task on the cooperative pool.
    static func confirmedCRCs(of partial: PartialFile, slices: [DownloadSlice]) async throws(StorageError) -> ([DownloadSlice], [CRC32C]) {
        guard slices.contains(where: { $0.confirmed > 0 }) else { return (slices, slices.map { _ in CRC32C() }) }
        return try await FileIO.run(.readBack, on: partial) { partial throws(StorageError) -> ([DownloadSlice], [CRC32C]) in
            var checked: [DownloadSlice] = []
            var crcs: [CRC32C] = []
            for slice in slices {
                var crc = CRC32C()
                if slice.confirmed > 0 { try partial.readBack(at: slice.start, count: slice.confirmed) { crc.update($0) } }
                if let recorded = slice.crc32c, slice.confirmed > 0, crc.base64 != recorded {
                    checked.append(DownloadSlice(start: slice.start, length: slice.length))
                    crcs.append(CRC32C())
                } else {
                    checked.append(slice)
                    crcs.append(crc)
                }
            }
            return (checked, crcs)
        }
    }

    /// Bytes written over all slices.
    var bytesWritten: Int64 { fill.withLock { $0.written.reduce(0, +) } }

    /// Whether every slice has all its bytes.
    var isComplete: Bool { fill.withLock { fill in zip(fill.slices, fill.written).allSatisfy { $1 == $0.length } } }

    /// The whole object's CRC32C (base64), combined from the slices' in order.
    var combinedCRC32C: String {
        fill.withLock { fill in
            // The CRC of no bytes is 0, so the first slice's CRC comes through the first combine unchanged.
            var value: UInt32 = 0
            for (slice, crc) in zip(fill.slices, fill.crcs) {
                value = CRC32C.combine(value, crc.value, secondLength: slice.length)
            }
            let bytes = Data([UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)])
            return bytes.base64EncodedString()
        }
    }

    /// Writes one answer's bytes at slice `index`'s next offset; past the slice's end is an error (a
    /// server that ignored the Range). Syncs and reports a checkpoint every `FileSink.checkpointInterval`.
    func write(_ bytes: UnsafeRawBufferPointer, slice index: Int) throws(StorageError) {
        if let failure = syncs.failure { throw failure.error }
        let outcome: Result<(ResumePoint, Int32?)?, StorageError> = fill.withLock { fill in
            let slice = fill.slices[index]
            let count = Int64(bytes.count)
            guard fill.written[index] + count <= slice.length else {
                return .failure(StorageError(.unknown, "the server sent more than the \(slice.length) bytes asked for at offset \(slice.start) "
                                                 + "(it ignored the Range header); the partial download was kept — try again",
                                             retryable: true))
            }
            do throws(StorageError) {
                try partial.write(bytes, at: slice.start + fill.written[index])
            } catch {
                return .failure(error)
            }
            fill.crcs[index].update(bytes)
            fill.written[index] += count
            fill.sinceCheckpoint += count
            // As a single-stream download does: the disk writes while the network delivers, so a
            // checkpoint's sync (and the commit's) waits for little.
            if fill.written[index] - fill.writeBack[index] >= PartialFile.writeBackStep {
                partial.startWriteBack(at: slice.start + fill.writeBack[index], count: fill.written[index] - fill.writeBack[index])
                fill.writeBack[index] = fill.written[index]
            }
            progress(fill.written.reduce(0, +))
            guard fill.sinceCheckpoint >= FileSink.checkpointInterval else { return .success(nil) }
            do throws(StorageError) {
                // The sync is handed over with a duplicate of the descriptor, taken while the file is ours.
                return inMemory ? .success((try confirmLocked(&fill), nil))
                    : .success((try confirmLocked(&fill, syncing: false), try partial.duplicateDescriptor()))
            } catch {
                return .failure(error)
            }
        }
        guard let (point, descriptor) = try outcome.get() else { return }
        if let descriptor {
            syncs.sync(descriptor) { [self] in
                reported(point)
                checkpoint(point)
            }
        } else {
            reported(point)
            checkpoint(point)
        }
    }

    /// Syncs the file and records every slice's written bytes as confirmed; returns the resume point.
    func confirm() throws(StorageError) -> ResumePoint {
        let outcome: Result<ResumePoint, StorageError> = fill.withLock { fill in
            do throws(StorageError) { return .success(try confirmLocked(&fill)) } catch { return .failure(error) }
        }
        return try outcome.get()
    }

    /// Syncs the file (unless `syncing` is false: the caller hands the sync over and reports the point
    /// only after it) and records every slice's written bytes as confirmed; returns the resume point.
    private func confirmLocked(_ fill: inout Fill, syncing: Bool = true) throws(StorageError) -> ResumePoint {
        if syncing { try partial.sync() }
        for index in fill.slices.indices {
            fill.slices[index].confirmed = fill.written[index]
            // Each slice's CRC32C runs with its writes: the point records what its kept bytes must hash to.
            fill.slices[index].crc32c = fill.written[index] > 0 ? fill.crcs[index].base64 : nil
        }
        fill.sinceCheckpoint = 0
        return .slicedDownload(slices: fill.slices, generation: generation, tempPath: partial.tempPath, file: partial.identity)
    }
}

/// The response sink of one slice's Range request.
///
/// The answer must be the range asked for — a 206 whose `Content-Range` starts at `from` — of the
/// generation asked for (`x-goog-generation`, and the whole object's CRC32C in `x-goog-hash`, when the
/// answer names them), checked before its first byte is written: the bytes of another range (a 200 with
/// the whole object, a 206 of another part) or of another version (a cache, a proxy) written into the
/// slice would fail the combined CRC32C at the end, and with it the job for good, where refusing them
/// leaves the slice as it was and the attempt retryable.
final class SliceSink: ResponseBodySink, Sendable {
    private let state: SlicedDownloadState
    private let index: Int
    /// The first byte the request asked for.
    private let from: Int64
    /// The generation every slice asked for, and the object's CRC32C (base64) when its metadata gave one.
    private let generation: String
    private let crc32c: String?
    /// Whether the answer's range was checked (its first body bytes arrived).
    private let checked = Atomic<Bool>(false)

    init(state: SlicedDownloadState, index: Int, from: Int64, generation: String, crc32c: String?) {
        self.state = state
        self.index = index
        self.from = from
        self.generation = generation
        self.crc32c = crc32c
    }

    func write(_ bytes: UnsafeRawBufferPointer, status: Int, headers: [String: String]) throws(StorageError) {
        if !checked.load(ordering: .relaxed) {
            let range = headers["content-range"]
            guard status == 206, let range, FileSink.rangeStart(range) == from else {
                let answered = status == 206 ? range.map { "'Content-Range: \($0)'" } ?? "no Content-Range" : "status \(status)"
                throw StorageError(.unknown, "the server answered the slice's range from byte \(from) with \(answered); "
                                       + "nothing of it was written, and a retry asks again", retryable: true)
            }
            try GCSBackend.checkVersion(headers, generation: generation, crc32c: crc32c, what: "the slice from byte \(from)")
            checked.store(true, ordering: .relaxed)
        }
        try state.write(bytes, slice: index)
    }
}

extension GCSBackend {
    /// A media answer must be of the generation asked for: its `x-goog-generation`, and the whole object's
    /// CRC32C in its `x-goog-hash`, when it names them. Checked at the first body byte, before anything is
    /// written: another version's bytes (a cache's, a proxy's) after a resumed prefix or in a slice would
    /// fail the whole file's CRC32C at the end, and the job for good; refused, the attempt is retryable.
    static func checkVersion(_ headers: [String: String], generation: String?, crc32c: String?, what: String) throws(StorageError) {
        // Every generation the answer gives (a header sent twice arrives joined by commas): one that
        // differs is enough, repeats of the one asked for are that one.
        if let generation, let answered = headers["x-goog-generation"]?.split(separator: ",")
            .map({ $0.trimmingCharacters(in: .whitespaces) }).first(where: { $0 != generation }) {
            throw StorageError(.unknown, "the server answered \(what) with generation \(answered), not the \(generation) asked for; "
                                   + "nothing of it was written, and a retry asks again", retryable: true)
        }
        // Every CRC32C the answer gives (a header sent twice by a cache in between): one that differs is enough.
        if let crc32c, let answered = reportedHashValues(headers).crc32c.first(where: { $0 != crc32c }) {
            throw StorageError(.unknown, "the server answered \(what) for an object whose CRC32C is \(answered), not the \(crc32c) "
                                   + "of the generation asked for; nothing of it was written, and a retry asks again", retryable: true)
        }
    }
}
