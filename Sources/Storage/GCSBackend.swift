import Checksums
import Foundation
import JobModel

/// Runs the five job kinds against the GCS JSON API (what Firebase buckets are), or an emulator of it.
///
/// - Uploads always use a resumable session: the session URI is reported as a checkpoint before any
///   data is sent and after every chunk the server confirms, so an upload continues after a pause, a
///   crash or a restart of the process with a single status query. (A one-request multipart upload
///   would save one round trip for small objects, but could not be resumed; sessions of one chunk
///   cost little.)
/// - A chunk whose answer is lost (the connection broke) or refused for its offset (400: the server
///   stored more than we heard of) is followed by a status query, and the upload continues from the
///   server's offset — a bounded number of times without progress. An offset the server confirms
///   beyond what was sent, beyond the object, or below what it confirmed before means the session
///   cannot be trusted: it is cancelled and the upload starts again in a new session, once.
/// - Downloads read the object's metadata first (size, generation, hashes), then fetch the media
///   pinned to that generation, resuming with `Range` from a synced partial file.
/// - MD5 and CRC32C are computed while streaming and compared with the server's — for uploads always,
///   from the object's metadata when the final answer lacks them; a mismatch fails with
///   `nonMatchingChecksum` and the bad copy (that generation of the remote object, or the local
///   partial file) is removed. A transfer no hash can verify (the server reports neither) fails
///   (`unverifiableUpload`, `unverifiableDownload`), its copy removed as a mismatch's.
public struct GCSBackend: StorageBackend {
    /// Endpoint, credentials, chunk size, timeouts and trusted CAs.
    public let configuration: StorageConfiguration
    /// The process-wide curl engine, started at the first exchange (not when the backend is made).
    private var engine: CurlEngine { get throws(TransferFailure) { try CurlEngine.shared } }
    private let tokens: GCSTokenSource

    /// A backend talking to `configuration.gcsEndpoint` with the configured credentials, sharing the
    /// process-wide curl engine (one thread, one connection cache, for every backend).
    public init(configuration: StorageConfiguration) {
        self.configuration = configuration
        self.tokens = GCSTokenSource(configuration: configuration)
    }

    /// What the job's outcome stores leaves here without the bearer token its requests carried: a server
    /// (or what answers in its place) may send it back in an object's metadata or its error text
    /// (`HTTPResponse.requestSecrets` scrubs the text it quotes; this, every value).
    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        // Every request of this attempt runs under the job's timeout, if it has one.
        let control = control.limited(toSeconds: spec.timeoutSeconds, maxRate: spec.maxRate)
        let outcome: TransferOutcome
        do throws(StorageError) {
            outcome = try await perform(spec, limitedBy: control, resumingFrom: resumePoint, report: report)
        } catch {
            throw error.withoutSecrets(await tokens.sentTokens())
        }
        await control.waitOutOwnRate()
        guard case .finished(let result) = outcome else { return outcome }
        return .finished(result.withoutSecrets(await tokens.sentTokens()))
    }

    /// `perform` under the attempt's own control (its timeout and `max_rate:`).
    private func perform(_ spec: JobSpec, limitedBy control: TransferControl, resumingFrom resumePoint: ResumePoint?,
                         report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        switch try TransferPlan(spec, firebaseHosts: configuration.firebaseHosts, schemes: [.gs],
                               expected: "a Cloud Storage reference (gs:// or a Firebase URL)", policy: configuration.uploadPolicy) {
        case .upload(let source, let reference, let contentType):
            let rule = OverwriteRule(spec, resumingFrom: resumePoint)
            // After attempts that died unanswered, no session to resume: a fresh start with a look first.
            let resumePoint = resumePoint == .unanswered ? nil : resumePoint
            // A resumed session was started under the precondition already: no second look.
            if resumePoint == nil && rule.mode != .overwrite {
                switch try await existingObject(reference, control: control) {
                case .stopped(let reason): return .stopped(reason, nil)
                case .value(let existing):
                    if let settled = try await rule.settlesUpload(existing: existing, destination: reference.description,
                                                                  offPool: source) {
                        return settled
                    }
                }
            }
            do throws(StorageError) {
                if resumePoint == nil && rule.replaces && source.size <= singleRequestLimit {
                    return try await uploadInOneRequest(source, to: reference, contentType: contentType, metadata: spec.metadata,
                                                        md5: spec.wantsMD5, control: control, report: report)
                }
                return try await upload(source, to: reference, contentType: contentType, metadata: spec.metadata, md5: spec.wantsMD5,
                                        ifGenerationMatchZero: !rule.replaces, resumingFrom: resumePoint, control: control, report: report)
            } catch where error.httpStatus == 412 && !rule.replaces {
                // GCS checks `ifGenerationMatch=0` when the session starts and when it completes: an object
                // written meanwhile is refused by `fail`, and left by `skip`, which reports what is there.
                try rule.settleTakenUpload(reference.description, httpStatus: 412)
                let unknown = StorageObject(bucket: reference.bucket, name: reference.fullPath, size: -1)
                switch try? await existingObject(reference, control: control) {
                case .stopped(let reason)?: return .stopped(reason, nil)
                case .value(let existing)?: return OverwriteRule.skippedUpload(existing ?? unknown)
                case nil: return OverwriteRule.skippedUpload(unknown)
                }
            }
        case .downloadFile(let reference, let destination):
            let rule = OverwriteRule(spec, resumingFrom: resumePoint, downloadingTo: destination)
            let resumePoint = resumePoint == .unanswered ? nil : resumePoint
            if let settled = try rule.beforeDownload(to: destination) { return settled }
            return try await downloadFile(reference, to: destination, within: spec.folderTail, md5: spec.wantsMD5, rule: rule,
                                          resumingFrom: resumePoint, control: control, report: report)
        case .downloadMemory(let reference, let maxSize):
            return try await downloadMemory(reference, maxSize: maxSize, md5: spec.wantsMD5, control: control, report: report)
        case .fetchURL(let reference):
            return try await fetchURL(reference, control: control)
        case .getMetadata(let reference):
            switch try await metadata(reference, control: control) {
            case .value(let object): return .finished(JobResult(object: object))
            case .stopped(let reason): return .stopped(reason, nil)
            }
        case .updateMetadata(let reference, let update, let removing, let clearing):
            return try await updateMetadata(reference, set: update, removing: removing, clearing: clearing, ifGeneration: spec.ifGeneration,
                                            control: control)
        case .delete(let reference):
            return try await delete(reference, ifGeneration: spec.ifGeneration, resumingFrom: resumePoint, control: control, report: report)
        }
    }

    // MARK: - Object operations

    /// A JSON API PATCH of the object's writable metadata. The custom map sent is the object's current one
    /// with the job's keys set and a null for each key removed, so a server that merges `metadata` (GCS)
    /// and one that replaces it (some emulators) end with the same map; Firebase download tokens stay.
    ///
    /// Because the map sent repeats keys as they were read, the PATCH is conditional on the generation and
    /// metageneration read (`ifGenerationMatch`, `ifMetagenerationMatch`): a change another client made in
    /// between (a key it removed or set) is never undone. GCS answers such a PATCH 412; the object is read
    /// again and the update made on what is there now, up to `metadataRounds` times.
    ///
    /// With `ifGeneration` the generation read is compared first, so a server that ignores preconditions
    /// (the emulator) still refuses a stale job, and a 412 whose re-read finds another generation fails
    /// with `generationMismatch`.
    private func updateMetadata(_ reference: StorageReference, set update: UploadMetadata, removing: [String], clearing: [MetadataField],
                                ifGeneration: Int64?, control: TransferControl) async throws(StorageError) -> TransferOutcome {
        for round in 1...Self.metadataRounds {
            let current: StorageObject
            switch try await metadata(reference, control: control) {
            case .value(let object): current = object
            case .stopped(let reason): return .stopped(reason, nil)
            }
            if let ifGeneration, current.generation != String(ifGeneration) {
                throw StorageError.generationMismatch(reference.description, expected: ifGeneration, actual: current.generation)
            }
            let response: HTTPResponse
            switch try await conditionalPatch(reference, read: current, round: round, control: control,
                                              body: GCSObjectJSON.patchBody(current: current, set: update, removing: removing, clearing: clearing)) {
            case .applied(let answer): response = answer
            case .changed: continue
            case .stopped(let reason): return .stopped(reason, nil)
            }
            guard let json = response.json, let object = GCSObjectJSON.object(from: json) else {
                throw StorageError(.unknown, "the server's answer to the metadata update of \(reference) is not an object resource (\(GCSObjectJSON.needs))",
                                   httpStatus: response.status, url: redactedURL(response.url))
            }
            guard Self.names(object, reference) else { throw Self.anotherObject(object, answering: "the metadata update of \(reference)", response) }
            return .finished(JobResult(object: object))
        }
        preconditionFailure("the last round returns or throws")
    }

    /// How many times a metadata PATCH is made again on the object as read anew after a 412 (another client
    /// changed the object between our read and our PATCH).
    static let metadataRounds = 5

    /// How a metadata PATCH made on condition of the version read ended.
    private enum ConditionalPatch {
        /// The server applied it (a success status).
        case applied(HTTPResponse)
        /// The object changed since it was read (412) and `round` leaves another: read it again.
        case changed
        case stopped(StopReason)
    }

    /// PATCHes `body` onto `reference` on condition of the version `read` (`readConditions`): a 412 in
    /// the last round is `keptChanging`, any other failure the object's error.
    private func conditionalPatch(_ reference: StorageReference, read: StorageObject, round: Int, control: TransferControl,
                                  body: Data) async throws(StorageError) -> ConditionalPatch {
        let request = HTTPRequest(method: "PATCH", url: objectURL(reference) + Self.readConditions(read),
                                  headers: ["Content-Type: application/json; charset=UTF-8"], body: body)
        let response: HTTPResponse
        do {
            response = try await send(request, control: control)
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason)
            case .failed(let failure): throw failure
            }
        }
        if response.status == 412 {
            if round < Self.metadataRounds { return .changed }
            throw Self.keptChanging(reference, response)
        }
        guard response.isSuccess else { throw await objectError(response, reference: reference, what: "\(reference)") }
        return .applied(response)
    }

    /// The query that makes a metadata PATCH conditional on the version `object` was read at: its
    /// generation and metageneration, each when known.
    static func readConditions(_ object: StorageObject) -> String {
        let conditions = [object.generation.map { "ifGenerationMatch=\($0)" }, object.metageneration.map { "ifMetagenerationMatch=\($0)" }]
            .compactMap { $0 }
        return conditions.isEmpty ? "" : "?" + conditions.joined(separator: "&")
    }

    /// The error when the object changed under every PATCH of `metadataRounds`: retryable, as the next
    /// attempt reads it again.
    private static func keptChanging(_ reference: StorageReference, _ response: HTTPResponse) -> StorageError {
        StorageError(.unknown, "\(reference) changed between reading its metadata and updating it \(metadataRounds) times in a row "
                         + "(412 to ifMetagenerationMatch); nothing of this job was applied and a retry reads it again",
                     httpStatus: 412, url: redactedURL(response.url), retryable: true)
    }

    /// The query that makes a request conditional on the object's generation, or nothing.
    static func generationCondition(_ generation: Int64?) -> String {
        generation.map { "?ifGenerationMatch=\($0)" } ?? ""
    }

    /// A JSON API DELETE; a missing object is `objectNotFound` (a missing bucket `bucketNotFound`).
    ///
    /// With `ifGeneration` the DELETE carries `ifGenerationMatch` (412 for another generation). The
    /// object's generation is read first as well: a server that ignores preconditions (the emulator)
    /// then refuses a stale job too, and the error names the generation found.
    ///
    /// A DELETE that went out but got no answer reports `ResumePoint.sentDelete` before it fails: the
    /// server may have carried it out, and the next attempt, finding the object gone, takes that as this
    /// job's own delete instead of failing with `objectNotFound` — as does this attempt when libcurl had
    /// to send the DELETE again (see `CurlEngine.perform`'s `requestSent`).
    private func delete(_ reference: StorageReference, ifGeneration: Int64?, resumingFrom resumePoint: ResumePoint?,
                        control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let deleted = JobResult(deleted: reference.description)
        // A copy of the DELETE whose answer never came — an earlier attempt's, or this attempt's first
        // one that libcurl sent again on a fresh connection — may have deleted the object.
        let sentBefore = resumePoint?.deleteMayBeDone == true
        let sent = DeleteSent()
        do throws(StorageError) {
            if let ifGeneration {
                switch try await metadata(reference, control: control) {
                case .stopped(let reason): return .stopped(reason, nil)
                case .value(let current) where current.generation != String(ifGeneration):
                    throw StorageError.generationMismatch(reference.description, expected: ifGeneration, actual: current.generation)
                case .value: break
                }
            }
            let response: HTTPResponse
            do {
                // Only its status is read: a body (none from Cloud Storage) is dropped, whatever its size.
                response = try await send(HTTPRequest.discardingSuccessBody(method: "DELETE",
                                                                            url: objectURL(reference) + Self.generationCondition(ifGeneration)),
                                          control: control, requestSent: sent.note)
            } catch {
                return try sent.ended(error, report: report)
            }
            if response.status == 412, let ifGeneration {
                throw StorageError.generationMismatch(reference.description, expected: ifGeneration, actual: nil, httpStatus: 412)
            }
            guard response.isSuccess else { throw await objectError(response, reference: reference, what: "\(reference)") }
            return .finished(deleted)
        } catch where (sentBefore || sent.isSet) && error.code == .objectNotFound {
            return .finished(deleted)
        }
    }

    // MARK: - Upload

    /// Re-synchronisations in a row (status queries, or 308s confirming nothing new) that may leave the
    /// server's offset where it was before the attempt gives up with a retryable error.
    static let resyncLimit = 3

    /// A resumable session as this attempt knows it.
    private struct UploadSession {
        let uri: String
        /// The offset the server confirmed last.
        var confirmed: Int64
        /// The most bytes the server can hold: the end of the furthest chunk this attempt sent, or the
        /// whole object for a session an earlier process started (its last chunk may still land).
        var ceiling: Int64
        /// The offset the latest checkpoint recorded (see `confirm`).
        var checkpointed: Int64
    }

    private func upload(_ source: UploadSource, to reference: StorageReference, contentType: String,
                        metadata: UploadMetadata?, md5: Bool, ifGenerationMatchZero: Bool, resumingFrom resumePoint: ResumePoint?,
                        control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let total = source.size
        let checksums = StreamChecksums(md5: md5)
        let progress = ProgressThrottle(total: total, report: report)
        var session: UploadSession?
        // A session that expired or cannot be trusted is replaced by a new one, once per attempt.
        var replacedSession = false

        // A session whose bytes were read from the source as it was before a change (written to, or
        // replaced by another file) is dropped: continuing it would store an object of two versions.
        var resumable = resumePoint
        if case .upload(let uri, _, _, _)? = resumePoint, Self.sessionURI(uri, startedAt: endpoint) != uri {
            // No http(s) URL (recorded before such a Location was refused where it arrives — an attempt that
            // could send it nothing —, or an edited log): libcurl would refuse it as the job's own URL, for
            // good. Nothing goes to it, and the upload starts a session of its own.
            resumable = nil
        } else if case .upload(let uri, _, _, _)? = resumePoint, CurlEngine.isHTTPS(endpoint), !CurlEngine.isHTTPS(uri) {
            // Only an edited log holds one (a session the server started so is refused at once): nothing
            // goes to it, not even the session's cancellation, and the upload starts a session of its own.
            resumable = nil
        } else if case .upload(let uri, _, _, let recordedSource?)? = resumePoint, let stamp = source.stamp, !stamp.isUnchanged(since: recordedSource) {
            await cancelUploadSession(uri)
            resumable = nil
        }
        // Continue an earlier session when one is given and still alive.
        if case .upload(let uri, let confirmed, let recordedTotal, _)? = resumable, recordedTotal == nil || recordedTotal == total {
            switch try await queryUploadStatus(uri, total: total, recordedOffset: confirmed, control: control) {
            case .unreadable:
                // Nothing it holds can be read from its answer: start afresh.
                await cancelUploadSession(uri)
                replacedSession = true
            case .incomplete(let serverOffset):
                if Self.implausibleOffset(serverOffset, floor: confirmed, ceiling: total, total: total) != nil {
                    // It lost bytes it had confirmed, or claims more than exists: start afresh.
                    await cancelUploadSession(uri)
                    replacedSession = true
                } else {
                    session = UploadSession(uri: uri, confirmed: serverOffset, ceiling: total, checkpointed: serverOffset)
                    report(.checkpoint(.upload(sessionURI: uri, confirmedOffset: serverOffset, total: total, source: source.stamp), bytesTotal: total))
                }
            case .finished(let object):
                return .finished(try await verifiedUploadResult(object, source: source, checksums: checksums, reference: reference))
            case .finishedUnread(let status):
                return .finished(try await storedByFinishedSession(reference, uri: uri, status: status, source: source,
                                                                   checksums: checksums, control: control))
            case .expired:
                // A server that forgets a session once it is complete: the attempt that died may have sent
                // the last chunk. Its object, holding exactly the source's bytes, is not stored again.
                if let whole = try await storedByVanishedSession(reference, source: source, checksums: checksums, control: control) {
                    return .finished(whole)
                }
            case .stopped(let reason):
                return .stopped(reason, reason == .cancel ? nil : resumePoint)
            }
        }

        while true {
            if session == nil {
                do throws(TransferFailure) {
                    let uri = try await startUploadSession(reference, contentType: contentType, metadata: metadata, total: total,
                                                           ifGenerationMatchZero: ifGenerationMatchZero, control: control)
                    session = UploadSession(uri: uri, confirmed: 0, ceiling: 0, checkpointed: 0)
                    report(.checkpoint(.upload(sessionURI: uri, confirmedOffset: 0, total: total, source: source.stamp), bytesTotal: total))
                } catch {
                    switch error {
                    case .stopped(let reason): return .stopped(reason, nil)
                    case .failed(let failure): throw failure
                    }
                }
            }
            guard var current = session else { continue }
            // Re-hash what the server already holds (a resumed session) before sending more.
            if checksums.hashedUpTo < current.confirmed {
                // What the server holds may be gigabytes: read off the cooperative pool.
                let confirmed = current.confirmed
                try await FileIO.run(.rehashSource, on: (source, checksums)) { pair throws(StorageError) in
                    try pair.0.hashPrefix(upTo: confirmed, into: pair.1)
                }
            }
            progress.update(current.confirmed)

            let outcome = try await sendChunks(source, session: &current, checksums: checksums,
                                               control: control, progress: progress, report: report)
            session = current
            if case .finishedEarly = outcome,
               let whole = try await wholeStoredUpload(reference, source: source, checksums: checksums) {
                // A session an earlier attempt finished (its answer lost) answers any chunk with the object.
                return .finished(whole)
            }
            switch outcome {
            case .finished(let object):
                return .finished(try await verifiedUploadResult(object, source: source, checksums: checksums, reference: reference))
            case .finishedUnread(let status):
                return .finished(try await storedByFinishedSession(reference, uri: current.uri, status: status, source: source,
                                                                   checksums: checksums, control: control))
            case .stopped(let reason):
                if reason == .cancel {
                    await cancelUploadSession(current.uri)
                    return .stopped(.cancel, nil)
                }
                return .stopped(reason, .upload(sessionURI: current.uri, confirmedOffset: current.confirmed, total: total, source: source.stamp))
            case .expired:
                // The session vanished after its last chunk went out (the answer lost, and a server that
                // forgets a complete session): the object that chunk stored is not stored a second time.
                if current.ceiling >= total,
                   let whole = try await storedByVanishedSession(reference, source: source, checksums: checksums, control: control) {
                    return .finished(whole)
                }
                // The session vanished mid-upload: start one new session, once.
                guard !replacedSession else {
                    throw StorageError(.unknown, "the upload session expired twice; a retry starts a new session",
                                       url: redactedURL(current.uri), retryable: true)
                }
                replacedSession = true
                session = nil
            case .untrusted(let problem), .finishedEarly(let problem):
                // The session's offsets (or its end) contradict what was sent: its contents cannot be trusted. Drop
                // it (so no later attempt resumes it) and send everything again in a new one, once.
                await cancelUploadSession(current.uri)
                guard !replacedSession else {
                    throw StorageError(.internalError,
                                       "the server broke the resumable upload protocol twice (\(problem)); the upload was abandoned — check the endpoint and anything between it and this machine",
                                       url: redactedURL(current.uri), cause: problem)
                }
                replacedSession = true
                session = nil
            }
        }
    }

    /// The largest upload sent as one request: `singleRequestLimit` (5 MiB), and never more than one chunk
    /// (a smaller `chunkSize` keeps smaller objects in resumable sessions).
    var singleRequestLimit: Int64 { Int64(min(configuration.singleRequestLimit, configuration.chunkSize)) }

    /// Uploads a small object in one request — `uploadType=multipart`: its metadata and its bytes in one
    /// POST — instead of a resumable session's two (start, then the bytes), as gcloud storage does below its
    /// resumable threshold: half the round trips for many small files.
    ///
    /// Used only where the session gave nothing this cannot: no resume point (a resumed session goes on as
    /// one), and `if_exists` replacing (overwrite, skip-identical after its look). A request whose
    /// answer is lost may have stored the object, and sending it again stores the same bytes once more, so
    /// a failure is the attempt's and the next attempt sends everything again (at most one chunk). With
    /// `if_exists: fail` or `skip` the resend would meet its own object (412) and call it someone else's, so
    /// those uploads keep a session, which says what it stored. The stored object is verified exactly as a
    /// session's (`verifiedUploadResult`): size, CRC32C, MD5 when asked; a mismatch deletes it.
    ///
    /// See https://cloud.google.com/storage/docs/uploading-objects#uploading-an-object and
    /// https://cloud.google.com/storage/docs/json_api/v1/objects/insert
    private func uploadInOneRequest(_ source: UploadSource, to reference: StorageReference, contentType: String,
                                    metadata: UploadMetadata?, md5: Bool, control: TransferControl,
                                    report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let total = source.size
        let checksums = StreamChecksums(md5: md5)
        let progress = ProgressThrottle(total: total, report: report)
        // Random per request: no source can hold it by design.
        let boundary = "jobctl-" + String(UInt64.random(in: .min ... .max), radix: 16) + String(UInt64.random(in: .min ... .max), radix: 16)
        var head = Array("--\(boundary)\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".utf8)
        head += GCSObjectJSON.uploadBody(name: reference.fullPath, contentType: contentType, metadata: metadata)
        head += Array("\r\n--\(boundary)\r\nContent-Type: \(contentType)\r\n\r\n".utf8)
        let tail = Array("\r\n--\(boundary)--\r\n".utf8)
        let url = "\(endpoint)/upload/storage/v1/b/\(reference.bucket)/o?uploadType=multipart&name=\(reference.encodedPath)"
        var request = HTTPRequest(method: "POST", url: url, headers: ["Content-Type: multipart/related; boundary=\(boundary)"])
        request.bodyLength = Int64(head.count) + total + Int64(tail.count)
        let response: HTTPResponse
        do throws(TransferFailure) {
            response = try await send(request, control: control, source: {
                MultipartUploadBody(head: head, media: UploadRangeBody(source: source, start: 0, end: total, checksums: checksums,
                                                                       progress: { progress.update($0) }),
                                    tail: tail)
            })
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason, nil)
            case .failed(let failure): throw failure
            }
        }
        guard response.isSuccess else {
            throw await objectError(response, reference: reference, what: "the upload of \(reference)", upload: true)
        }
        guard let json = response.json else {
            throw StorageError(.unknown, "the upload finished but the server's answer is not an object resource (\(GCSObjectJSON.needs))",
                               httpStatus: response.status, url: redactedURL(url), retryable: true)
        }
        return .finished(try await verifiedUploadResult(json, source: source, checksums: checksums, reference: reference))
    }

    private enum ChunkOutcome {
        case finished([String: Any])
        /// The session said the upload is complete (this status) in an answer that is no JSON (cut short
        /// where nothing framed it, garbled on the way): the stored object has to tell.
        case finishedUnread(Int)
        case stopped(StopReason)
        case expired
        /// The server confirmed an offset that cannot be true (the reason): the session is unusable.
        case untrusted(String)
        /// The server answered a chunk that was not the last with the object (the reason): believed only
        /// if the stored object holds every byte of the source.
        case finishedEarly(String)
    }

    /// PUTs `chunkSize` pieces from the session's confirmed offset until the server answers with the object.
    ///
    /// When an answer is lost (the connection broke) or the server refuses a chunk's `Content-Range`
    /// (400: its offset moved on without us hearing of it — a response lost after it stored the chunk,
    /// or a chunk of a dead process landing late), the session is asked where it stands (an empty PUT
    /// with `Content-Range: bytes */TOTAL`) and the upload continues from the server's offset.
    /// `resyncLimit` such rounds in a row without progress end the attempt with a retryable error.
    /// Every confirmed offset is checked against what was sent (`implausibleOffset`).
    ///
    /// The bytes sent are bounded too: twice what the session still needed when this began, and two chunks
    /// (resends after lost answers, chunks the server kept part of). Progress reset the rounds' count, so a
    /// server that kept 1 KiB of each chunk it was sent had a 0.67 MiB file sent 684 times over (139 MiB),
    /// with a checkpoint in the log each time; it ends the attempt (`keptTooLittle`), retryable.
    private func sendChunks(_ source: UploadSource, session: inout UploadSession, checksums: StreamChecksums,
                            control: TransferControl, progress: ProgressThrottle,
                            report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> ChunkOutcome {
        let total = source.size
        let quantum = Self.chunkQuantum
        let chunkSize = max(quantum, Int64(configuration.chunkSize) / quantum * quantum)
        var withoutProgress = 0
        let firstOffset = session.confirmed
        let budget = 2 * (total - firstOffset) + 2 * chunkSize
        var sent: (bytes: Int64, requests: Int) = (0, 0)
        while true {
            if let reason = control.stopReason { return .stopped(reason) }
            let start = session.confirmed
            let end = min(start + chunkSize, total)
            guard sent.bytes + (end - start) <= budget else {
                throw Self.keptTooLittle(session, total: total, sent: sent, from: firstOffset)
            }
            sent = (sent.bytes + (end - start), sent.requests + 1)
            var request = HTTPRequest(method: "PUT", url: session.uri)
            request.headers = total == 0 || start == end
                ? ["Content-Range: bytes */\(total)"]
                : ["Content-Range: bytes \(start)-\(end - 1)/\(total)"]
            request.bodyLength = end - start
            session.ceiling = max(session.ceiling, end)
            let answer: Result<HTTPResponse, TransferFailure>
            do {
                answer = .success(try await send(request, control: control, source: {
                    UploadRangeBody(source: source, start: start, end: end, checksums: checksums,
                                    progress: { progress.update($0) })
                }))
            } catch {
                answer = .failure(error)
            }

            // Why the session has to be asked where it stands.
            let problem: StorageError
            switch answer {
            case .failure(.stopped(let reason)):
                return .stopped(reason)
            case .failure(.failed(let failure)):
                // A broken connection or a timeout: the chunk may or may not have landed. Not a problem of
                // the source file (`pathError`, such as one written to meanwhile): the session cannot help.
                guard failure.retryable, failure.httpStatus == nil, failure.code != .pathError else { throw failure }
                problem = failure
            case .success(let response):
                switch response.status {
                case 200, 201:
                    if start != end && end < total {
                        return .finishedEarly("the server said the upload was complete after bytes \(start)-\(end - 1) of \(total)")
                    }
                    guard let json = response.json else { return .finishedUnread(response.status) }
                    return .finished(json)
                case 308:
                    guard let confirmed = Self.confirmedOffset(response.headers["range"], recorded: start, total: total) else {
                        return .untrusted(Self.unreadableRange(response.headers["range"]))
                    }
                    if let violation = Self.implausibleOffset(confirmed, floor: start, ceiling: session.ceiling, total: total) {
                        return .untrusted(violation)
                    }
                    if confirmed > start {
                        withoutProgress = 0
                    } else {
                        withoutProgress += 1
                        guard withoutProgress <= Self.resyncLimit else {
                            throw Self.noProgress(session, total: total, cause: "the server stored none of the last chunk")
                        }
                    }
                    try confirm(confirmed, of: source, in: &session, checksums: checksums, progress: progress, report: report)
                    continue
                case 404, 410:
                    return .expired
                case 400:
                    // Usually "Invalid Content-Range start: expected X, got Y": the server is further on.
                    problem = httpError(response, what: "the upload session")
                default:
                    throw httpError(response, what: "the upload session")
                }
            }

            withoutProgress += 1
            guard withoutProgress <= Self.resyncLimit else {
                throw Self.noProgress(session, total: total, cause: problem.description)
            }
            switch try await queryUploadStatus(session.uri, total: total, recordedOffset: start, control: control) {
            case .unreadable(let problem):
                return .untrusted(problem)
            case .incomplete(let serverOffset):
                if let violation = Self.implausibleOffset(serverOffset, floor: start, ceiling: session.ceiling, total: total) {
                    return .untrusted(violation)
                }
                // A 400 while the offsets agree, and not about the offset, is about something else.
                if problem.httpStatus == 400 && serverOffset == start && !Self.isOffsetComplaint(problem) { throw problem }
                if serverOffset > start { withoutProgress = 0 }
                try confirm(serverOffset, of: source, in: &session, checksums: checksums, progress: progress, report: report)
            case .finished(let json):
                return .finished(json)
            case .finishedUnread(let status):
                return .finishedUnread(status)
            case .expired:
                return .expired
            case .stopped(let reason):
                return .stopped(reason)
            }
        }
    }

    /// Records an offset the server confirmed: progress, hashes up to it, and a checkpoint once it is a
    /// `chunkQuantum` past the last one (or the whole object). GCS confirms whole quanta (but at the end),
    /// so each chunk it takes is a checkpoint; a server that confirms a little at a time wrote an event to
    /// the log for each. A later attempt asks the session where it stands anyway.
    private func confirm(_ offset: Int64, of source: UploadSource, in session: inout UploadSession, checksums: StreamChecksums,
                         progress: ProgressThrottle, report: @Sendable (TransferEvent) -> Void) throws(StorageError) {
        if checksums.hashedUpTo < offset { try source.hashPrefix(upTo: offset, into: checksums) }
        session.confirmed = offset
        progress.update(offset)
        guard offset - session.checkpointed >= Self.chunkQuantum || offset == source.size else { return }
        session.checkpointed = offset
        report(.checkpoint(.upload(sessionURI: session.uri, confirmedOffset: offset, total: source.size, source: source.stamp), bytesTotal: source.size))
    }

    /// What a resumable upload's chunks are multiples of (but the last), and what GCS confirms whole.
    static let chunkQuantum: Int64 = 256 * 1024

    /// The failure of an attempt whose chunks the session kept too little of (see `sendChunks`).
    private static func keptTooLittle(_ session: UploadSession, total: Int64, sent: (bytes: Int64, requests: Int), from first: Int64) -> StorageError {
        StorageError(.unknown, "the upload session kept only \(session.confirmed - first) of the \(sent.bytes) bytes sent to it in \(sent.requests) "
                         + "requests (it holds \(session.confirmed) of \(total) bytes): the server stores only a little of each chunk, so "
                         + "nothing more was sent; a retry continues the session", url: redactedURL(session.uri), retryable: true)
    }

    private static func noProgress(_ session: UploadSession, total: Int64, cause: String) -> StorageError {
        StorageError(.unknown, "the upload session stayed at \(session.confirmed) of \(total) bytes after \(resyncLimit) tries",
                     url: redactedURL(session.uri), retryable: true, cause: cause)
    }

    /// Whether a 400 complains about the chunk's position — the emulator's "Invalid Content-Range
    /// start: expected X, got Y", GCS's "…the upload offset is X byte(s), which exceeds…". HTTP has no
    /// finer code than the server's text.
    static func isOffsetComplaint(_ error: StorageError) -> Bool {
        let text = "\(error.message) \(error.cause ?? "")".lowercased()
        return text.contains("content-range") || text.contains("offset")
    }

    /// Why a confirmed offset cannot be true, or nil when it can. A server holds at most the bytes
    /// sent to it (`ceiling`) and never fewer than it confirmed before (`floor`); an offset past either
    /// means skipped or lost data — continuing would leave a hole in the object.
    static func implausibleOffset(_ offset: Int64, floor: Int64, ceiling: Int64, total: Int64) -> String? {
        if offset > total {
            return "it confirmed \(offset) bytes of a \(total)-byte upload"
        }
        if offset > ceiling {
            return "it confirmed \(offset) bytes when only \(ceiling) had been sent"
        }
        if offset < floor {
            return "its confirmed offset went back from \(floor) to \(offset) bytes"
        }
        return nil
    }

    /// `Range: bytes=0-N` → N+1; no Range → 0 (the resumable upload protocol: the server holds bytes 0
    /// to N). The emulator answers `bytes=0-0` before any data, which would claim one byte: when nothing
    /// was confirmed before, that means 0 — but not for an empty upload, of which no server can hold a
    /// byte: there it is the one byte it says, which `implausibleOffset` refuses (the session is dropped).
    ///
    /// Nil for a Range that is no single `bytes=0-N` with N an offset (`unreadableRange`): a range not
    /// from byte 0, two different ranges (a header sent twice; repeats of one value are that value), an
    /// end that is no decimal number or has no successor. The protocol has no such answer, so nothing
    /// the session holds can be read from it (taking the text after the last dash read `bytes=0-N,
    /// bytes=0-M` as M, and trapped on an N of Int64.max).
    static func confirmedOffset(_ range: String?, recorded: Int64, total: Int64) -> Int64? {
        guard let range else { return 0 }
        let values = Set(range.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        guard values.count == 1, let value = values.first?.utf8, value.count > 8,
              value.prefix(8).elementsEqual("bytes=0-".utf8) else { return nil }
        let digits = value.dropFirst(8)
        guard digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
              let last = Int64(String(decoding: digits, as: UTF8.self)), last < .max else { return nil }
        if last == 0 && recorded == 0 && total > 0 { return 0 }
        return last + 1
    }

    /// Why a session whose 308 carried `range` (which `confirmedOffset` cannot read) is not trusted.
    static func unreadableRange(_ range: String?) -> String {
        let shown = (range ?? "").prefix(60)
        return "its 308 said it holds 'Range: \(shown)\((range ?? "").count > 60 ? "…" : "")', which is no single bytes=0-N"
    }

    private enum UploadStatus {
        case incomplete(Int64)
        /// Incomplete (308), with a Range that says nothing readable (the reason): the session is unusable.
        case unreadable(String)
        case finished([String: Any])
        /// Complete (200, 201), said in an answer that is no JSON: not a session gone (see `ChunkOutcome`).
        case finishedUnread(Int)
        case expired
        case stopped(StopReason)
    }

    /// Asks a session how much it holds (an empty PUT with `Content-Range: bytes */TOTAL`).
    private func queryUploadStatus(_ session: String, total: Int64, recordedOffset: Int64,
                                   control: TransferControl) async throws(StorageError) -> UploadStatus {
        var request = HTTPRequest(method: "PUT", url: session, headers: ["Content-Range: bytes */\(total)"], body: Data())
        request.bodyLength = 0
        let response: HTTPResponse
        do {
            response = try await send(request, control: control)
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason)
            case .failed(let failure): throw failure
            }
        }
        switch response.status {
        case 308:
            guard let offset = Self.confirmedOffset(response.headers["range"], recorded: recordedOffset, total: total) else {
                return .unreadable(Self.unreadableRange(response.headers["range"]))
            }
            return .incomplete(offset)
        case 200, 201:
            // The session is complete whatever its body holds: one cut short is no sign that it is gone.
            guard let json = response.json else { return .finishedUnread(response.status) }
            return .finished(json)
        case 404, 410: return .expired
        default: throw httpError(response, what: "the upload session")
        }
    }

    /// POSTs the metadata and returns the session URI from `Location`.
    /// With `ifGenerationMatchZero` the session carries the precondition `ifGenerationMatch=0`: the upload
    /// fails with 412 instead of replacing an object (`if_exists: fail` and `skip`).
    private func startUploadSession(_ reference: StorageReference, contentType: String, metadata: UploadMetadata?,
                                    total: Int64, ifGenerationMatchZero: Bool, control: TransferControl) async throws(TransferFailure) -> String {
        let url = "\(endpoint)/upload/storage/v1/b/\(reference.bucket)/o?uploadType=resumable&name=\(reference.encodedPath)"
            + (ifGenerationMatchZero ? "&ifGenerationMatch=0" : "")
        let request = HTTPRequest(
            method: "POST", url: url,
            headers: ["Content-Type: application/json; charset=UTF-8", "X-Upload-Content-Type: \(contentType)",
                      "X-Upload-Content-Length: \(total)"],
            body: GCSObjectJSON.uploadBody(name: reference.fullPath, contentType: contentType, metadata: metadata))
        let response = try await send(request, control: control)
        guard response.isSuccess else {
            throw .failed(await objectError(response, reference: reference, what: "the upload of \(reference)", upload: true))
        }
        guard let header = response.headers["location"], !header.isEmpty else {
            throw .failed(StorageError(.unknown, "the server started no upload session (no Location header)",
                                       httpStatus: response.status, url: redactedURL(url)))
        }
        guard let location = Self.sessionURI(header, startedAt: url) else {
            // Not shown: it is the session's credential, and no URL `redactedURL` would recognise.
            throw .failed(StorageError(.unknown, "the server started the upload session at a Location that is no http(s) URL "
                                           + "written as RFC 3986 has it (another scheme, no host, a control character, a space or "
                                           + "a byte past ASCII); nothing was sent to it — check the endpoint and anything between it and this machine",
                                       httpStatus: response.status, url: redactedURL(url)))
        }
        if CurlEngine.isHTTPS(endpoint), !CurlEngine.isHTTPS(location) {
            // The object's bytes would leave TLS. The session URI is not shown: it is the session's credential.
            throw .failed(StorageError(.unknown, "the server started the upload session at a URL that is not https, though the "
                                           + "endpoint is; the object's bytes are not sent without TLS",
                                       httpStatus: response.status, url: redactedURL(url)))
        }
        return location
    }

    /// The session URI a session-start answer's `Location` names: an absolute http(s) URL as it is (GCS's),
    /// a relative reference resolved against `request`, the URL that started the session (RFC 9110
    /// §10.2.2); nil for anything else — another scheme, no host, text that is no URL or not written as one
    /// (`isWrittenAsURI`) — which libcurl would refuse as a URL of the job's, after it became the job's
    /// checkpoint. The same check refuses such a URI read back from the log.
    static func sessionURI(_ location: String, startedAt request: String) -> String? {
        guard isWrittenAsURI(location), let components = URLComponents(string: location) else { return nil }
        let resolved: String
        if components.scheme != nil {
            resolved = location
        } else {
            guard let base = URL(string: request), let url = URL(string: location, relativeTo: base) else { return nil }
            resolved = url.absoluteString
        }
        guard let absolute = URLComponents(string: resolved), let scheme = absolute.scheme?.lowercased(),
              scheme == "http" || scheme == "https", let host = absolute.host, !host.isEmpty, isWrittenAsURI(resolved) else { return nil }
        return resolved
    }

    /// Whether `text` is written as RFC 3986 writes a URI (a `Location` is a URI reference, RFC 9110
    /// §10.2.2): ASCII letters and digits, `-._~:/?#[]@!$&'()*+,;=`, and `%` before two hex digits. Nothing
    /// else: no control character, space, DEL or byte past ASCII, nor a quote, `<`, `>`, a backslash, `^`, a
    /// backtick, `{`, `|` or `}` (which parsers read differently, a backslash as a slash). URLComponents let a
    /// Location with a control character or a space through, libcurl refused it as the job's URL (curl
    /// error 3, `invalidArgument`, not retried), and as the job's checkpoint it failed every retry the same
    /// way; one past ASCII went out re-encoded, another URI than the server gave.
    static func isWrittenAsURI(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.count, isHexDigit(bytes[index + 1]), isHexDigit(bytes[index + 2]) else { return false }
                index += 3
                continue
            }
            guard uriCharacters.contains(byte) else { return false }
            index += 1
        }
        return !bytes.isEmpty
    }

    /// RFC 3986's unreserved and reserved characters.
    private static let uriCharacters = Set(("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                                            + "-._~:/?#[]@!$&'()*+,;=").utf8)

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }

    /// Best effort: tells the server a cancelled session will not be finished.
    private func cancelUploadSession(_ session: String) async {
        _ = try? await send(HTTPRequest.discardingSuccessBody(method: "DELETE", url: session), control: nil)
    }

    /// Compares the stored object with the source — size, CRC32C, and MD5 when the job asked for it (or
    /// the object reports no CRC32C) — always: the hashes come from the final answer, or from the
    /// object's metadata when that answer carried none (or named another object), and ours cover every
    /// byte of the source (computed again when the streamed ones skipped a range).
    ///
    /// A mismatch is checked against the stored object itself before anything is deleted: an answer can
    /// be stale or forged (by something between this machine and the server), and the delete acts on
    /// the generation it names. When the stored object holds the source's bytes the upload succeeded; when
    /// it is the answer's generation and does not, that generation is deleted (`ifGenerationMatch`) and the
    /// job fails with `nonMatchingChecksum`; when it is another generation, nothing is deleted and the
    /// attempt fails retryable. The object's own MD5 stays in the result.
    private func verifiedUploadResult(_ json: [String: Any], source: UploadSource, checksums: StreamChecksums,
                                      reference: StorageReference) async throws(StorageError) -> JobResult {
        var resource = json
        guard var object = GCSObjectJSON.object(from: resource) else {
            // An error's JSON in a 200, say: the upload may well be stored, so the next attempt asks again.
            throw StorageError(.unknown, "the upload finished but the server's answer is not an object resource (\(GCSObjectJSON.needs))",
                               url: redactedURL(objectURL(reference)), retryable: true)
        }
        let aboutThis = Self.names(object, reference)
        if !aboutThis || (object.md5Hash == nil && object.crc32c == nil) {
            // An answer about another object says nothing about this upload: the stored one is asked for.
            do {
                resource = try await storedObjectResource(reference, generation: aboutThis ? object.generation : nil)
            } catch where error.code == .objectNotFound {
                // The session said the upload is complete, and nothing (of that generation) is stored.
                throw StorageError(.unknown, "the upload session said the upload is complete, but \(reference) is not stored; "
                                       + "a retry uploads it again", url: redactedURL(objectURL(reference)), retryable: true)
            }
            guard let stored = GCSObjectJSON.object(from: resource), Self.names(stored, reference) else {
                throw StorageError(.unknown, "the server's metadata for \(reference) is not this object's resource (\(GCSObjectJSON.needs))",
                                   url: redactedURL(objectURL(reference)), retryable: true)
            }
            object = stored
        }
        let ours = try await source.hashesOffPool(streamed: checksums, md5: object.crc32c == nil && object.md5Hash != nil)
        let storedSize = resource["size"] == nil ? nil : object.size
        guard let mismatch = Self.uploadMismatch(object, storedSize: storedSize, sourceSize: source.size,
                                                 md5: ours.md5, crc32c: ours.crc32c) else {
            let result = Self.uploaded(object, ours)
            guard result.verified?.isEmpty == false else { throw await unverifiableUpload(reference, generation: object.generation) }
            return result
        }
        // Before deleting: what is stored now?
        guard let (stored, storedSizeNow) = try await currentObject(reference) else {
            throw StorageError(.unknown, "\(mismatch), and the server's metadata for \(reference) is not this object's resource; "
                                   + "nothing was deleted", url: redactedURL(objectURL(reference)), retryable: true)
        }
        let currentMismatch = Self.uploadMismatch(stored, storedSize: storedSizeNow, sourceSize: source.size,
                                                  md5: ours.md5, crc32c: ours.crc32c)
        if currentMismatch == nil && (stored.crc32c != nil || (stored.md5Hash != nil && ours.md5 != nil)) {
            return Self.uploaded(stored, ours)
        }
        guard stored.generation != nil, stored.generation == object.generation else {
            throw StorageError(.unknown, "\(mismatch) by the server's answer (generation \(object.generation ?? "none")), which does not "
                                   + "describe the stored object (generation \(stored.generation ?? "none")); nothing was deleted — a retry "
                                   + "uploads again", url: redactedURL(objectURL(reference)), retryable: true)
        }
        let deleted = await deleteBadObject(reference, generation: stored.generation)
        throw StorageError(.nonMatchingChecksum,
                           "\(currentMismatch ?? mismatch); " + (deleted ? "the object was deleted — upload again"
                                                                         : "the object could not be deleted — delete \(reference) and upload again"),
                           url: redactedURL(objectURL(reference)))
    }

    /// The failure of an upload whose stored object has no hash to compare with the source's: neither the
    /// final answer nor the object's metadata (read again for them) gave a CRC32C or an MD5. GCS reports
    /// a CRC32C for every object, composite ones included, so this is a server (an emulator, a proxy that
    /// rewrites answers) that cannot vouch for what it stored; the upload succeeded with `verified: []`,
    /// an object of other bytes taken for the source. That generation is deleted as a mismatch's is — it
    /// was never verified, and left in place it would be read as the upload — and the job fails for good
    /// (`internalError`): the server answered the same way twice, and a retry would send every byte again
    /// to the same end.
    private func unverifiableUpload(_ reference: StorageReference, generation: String?) async -> StorageError {
        let deleted = await deleteBadObject(reference, generation: generation)
        return StorageError(.internalError,
                            "the server reported no CRC32C or MD5 for the stored \(reference) (neither in the upload's answer nor in "
                                + "the object's metadata): nothing could verify it against the source, so "
                                + (deleted ? "the object was deleted" : "it could not be deleted either — delete \(reference)")
                                + "; GCS reports a CRC32C for every object — check the endpoint and anything between it and this machine",
                            url: redactedURL(objectURL(reference)))
    }

    /// The result of an upload whose stored object matched the source's hashes `ours`.
    private static func uploaded(_ object: StorageObject, _ ours: (md5: String?, crc32c: String)) -> JobResult {
        var verified: [ChecksumAlgorithm] = []
        if object.md5Hash != nil && ours.md5 != nil { verified.append(.md5) }
        if object.crc32c != nil { verified.append(.crc32c) }
        return JobResult(object: object, size: object.size, md5: ours.md5, crc32c: ours.crc32c, verified: verified)
    }

    /// Whether `object` is the one `reference` names (a server's answer about another is no answer). Byte
    /// for byte: GCS names are byte strings, and `==` takes canonically equivalent text (an `é` composed
    /// or not) for the same name.
    private static func names(_ object: StorageObject, _ reference: StorageReference) -> Bool {
        object.bucket.hasSameUTF8(as: reference.bucket) && object.name.hasSameUTF8(as: reference.fullPath)
    }

    /// After the server said an upload was complete before it had every byte (`ChunkOutcome.finishedEarly`):
    /// the result when the stored object holds exactly the source's bytes (a session an earlier attempt
    /// finished, its answer lost), nil otherwise — nothing is deleted either way.
    private func wholeStoredUpload(_ reference: StorageReference, source: UploadSource,
                                   checksums: StreamChecksums) async throws(StorageError) -> JobResult? {
        guard let (stored, size) = try await currentObject(reference), size != nil, stored.crc32c != nil else { return nil }
        let ours = try await source.hashesOffPool(streamed: checksums, md5: false)
        guard Self.uploadMismatch(stored, storedSize: size, sourceSize: source.size, md5: nil, crc32c: ours.crc32c) == nil else {
            return nil
        }
        return Self.uploaded(stored, ours)
    }

    /// The object `reference` names, when it holds exactly the source's bytes (size and CRC32C): what a
    /// session that vanished (404, 410) stored before it went. Nil when there is none or it differs.
    private func storedByVanishedSession(_ reference: StorageReference, source: UploadSource, checksums: StreamChecksums,
                                         control: TransferControl) async throws(StorageError) -> JobResult? {
        guard case .value(let stored?) = try await existingObject(reference, control: control), stored.crc32c != nil else { return nil }
        let ours = try await source.hashesOffPool(streamed: checksums, md5: false)
        guard Self.uploadMismatch(stored, storedSize: stored.size, sourceSize: source.size, md5: nil, crc32c: ours.crc32c) == nil else {
            return nil
        }
        return Self.uploaded(stored, ours)
    }

    /// The result of a session that said it is complete in an answer with no object resource in it
    /// (`ChunkOutcome.finishedUnread`): the stored object, when it holds exactly the source's bytes (size
    /// and CRC32C). Anything else — no object, other bytes (another writer's, stored after ours) — throws
    /// retryable with nothing deleted and no new session: the next attempt asks the same session again,
    /// and a whole answer names the generation it stored. Starting over instead stored the source a
    /// second time, over what another writer stored meanwhile.
    private func storedByFinishedSession(_ reference: StorageReference, uri: String, status: Int, source: UploadSource,
                                         checksums: StreamChecksums, control: TransferControl) async throws(StorageError) -> JobResult {
        if let whole = try await storedByVanishedSession(reference, source: source, checksums: checksums, control: control) {
            return whole
        }
        throw StorageError(.unknown, "the upload session said the upload is complete (\(status)), but its answer is not an object "
                               + "resource (cut short or garbled) and \(reference) does not hold the uploaded bytes now; nothing was "
                               + "deleted or sent again — a retry asks the session again",
                           httpStatus: status, url: redactedURL(uri), retryable: true)
    }

    /// The object `reference` names as stored now (its latest generation) and its size when the metadata
    /// gives one; nil when the server's answer is not that object's resource.
    /// None stored (404) is nil too: a session's false "complete" to a chunk of a new object was taken
    /// for the job's own missing object, and failed it for good (`objectNotFound`).
    private func currentObject(_ reference: StorageReference) async throws(StorageError) -> (StorageObject, Int64?)? {
        let resource: [String: Any]
        do {
            resource = try await storedObjectResource(reference, generation: nil)
        } catch where error.code == .objectNotFound {
            return nil
        }
        guard let stored = GCSObjectJSON.object(from: resource), Self.names(stored, reference) else { return nil }
        return (stored, resource["size"] == nil ? nil : stored.size)
    }

    /// How the stored object differs from the uploaded source, or nil when it matches. A hash the
    /// server does not report is not compared (GCS always reports CRC32C; MD5 is missing for
    /// composite objects), nor is an MD5 we did not compute (`md5` nil).
    static func uploadMismatch(_ object: StorageObject, storedSize: Int64?, sourceSize: Int64, md5: String?, crc32c: String) -> String? {
        if let storedSize, storedSize != sourceSize {
            return "the stored object holds \(storedSize) bytes but \(sourceSize) were uploaded"
        }
        if let expected = object.md5Hash, let md5, expected != md5 {
            return "the stored object's MD5 \(expected) differs from the uploaded bytes' \(md5)"
        }
        if let expected = object.crc32c, expected != crc32c {
            return "the stored object's CRC32C \(expected) differs from the uploaded bytes' \(crc32c)"
        }
        return nil
    }

    /// The stored object's resource (that generation), for the hashes a final answer left out.
    private func storedObjectResource(_ reference: StorageReference, generation: String?) async throws(StorageError) -> [String: Any] {
        let url = objectURL(reference) + (generation.map { "?generation=\($0)" } ?? "")
        let response: HTTPResponse
        do {
            response = try await send(HTTPRequest(method: "GET", url: url), control: nil)
        } catch {
            switch error {
            case .stopped: throw StorageError(.cancelled, "the upload's verification was stopped", url: redactedURL(url))
            case .failed(let failure): throw failure
            }
        }
        guard response.isSuccess else { throw await objectError(response, reference: reference, what: "\(reference)") }
        guard let json = response.json else {
            throw StorageError(.unknown, "the server's metadata for \(reference) is not an object resource (\(GCSObjectJSON.needs))",
                               httpStatus: response.status, url: redactedURL(url), retryable: true)
        }
        return json
    }

    /// Deletes an upload that failed verification — only the generation just written
    /// (`ifGenerationMatch`), so a newer object someone else stored meanwhile is never removed.
    /// Best effort; true when the server confirmed the delete.
    private func deleteBadObject(_ reference: StorageReference, generation: String?) async -> Bool {
        guard let generation else { return false }
        let url = objectURL(reference) + "?ifGenerationMatch=\(generation)"
        guard let response = try? await send(HTTPRequest.discardingSuccessBody(method: "DELETE", url: url), control: nil) else { return false }
        return response.isSuccess
    }

    // MARK: - Download to a file

    private func downloadFile(_ reference: StorageReference, to destination: String, within: String?, md5: Bool, rule: OverwriteRule,
                              resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                              report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let object: StorageObject
        do throws(StorageError) {
            switch try await metadata(reference, control: control) {
            case .value(let value): object = value
            case .stopped(let reason): return .stopped(reason, reason == .cancel ? nil : resumePoint)
            }
        } catch {
            // `skip` after attempts that died: no object to compare with, so the file stays, skipped.
            if let settled = rule.unsettledDownload(to: destination) { return settled }
            throw error
        }
        // `skip-identical`: GCS reports every object's CRC32C in its metadata.
        if let settled = try await rule.skipsDownloadOffPool(of: object, crc32c: object.crc32c, to: destination) { return settled }
        if let slices = slices(for: object, md5: md5, resumingFrom: resumePoint) {
            return try await slicedDownload(object, in: slices, of: reference, to: destination, within: within, rule: rule,
                                            resumingFrom: resumePoint, control: control, report: report)
        }
        let generation = object.generation
        var resume = resumePoint
        if case .download(_, let recorded, _, _, _, _, _)? = resume, recorded != generation { resume = nil }  // changed: start over
        let partial = try PartialFile(destination: destination, jobID: control.jobID, leaseToken: control.leaseToken,
                                      resumeFrom: resume, recorded: resumePoint, within: within)
        if partial.bytesWritten > object.size { try partial.restart() }
        // CRC32C, which GCS always reports, is the check; MD5 is computed when asked or when it is the
        // only hash the object has.
        let expected = Self.digests(of: object)
        // The check of the kept bytes hashes them for the whole file's check in the same read.
        let prefixHashes = try await partial.restartUnlessPrefixUnchangedOffPool(md5: expected.needMD5(asked: md5))
        let total = object.size
        let progress = ProgressThrottle(total: total, report: report)
        let start = partial.bytesWritten
        let sink = FileSink(partial: partial, requestedOffset: start, md5: expected.needMD5(asked: md5), prefixHashes: prefixHashes,
                            checkpoint: { partial, _ in
                                .checkpoint(partial.resumePoint(generation: generation, etag: nil), bytesTotal: total)
                            },
                            report: report,
                            progress: { progress.update($0) })
        let crc32c = object.crc32c
        let media = mediaURL(reference, generation: generation)
        sink.checkAnswer = { _, headers throws(StorageError) in
            try GCSBackend.checkVersion(headers, generation: generation, crc32c: crc32c, what: "the download from byte \(start)")
            // Nothing could verify the bytes: refused before the first is written, not after the last.
            if expected.isEmpty && GCSBackend.digests(of: GCSBackend.withServedHashes(object, headers)).isEmpty {
                throw GCSBackend.unverifiableDownload(reference, url: media, remedy: "nothing of it was kept")
            }
        }
        sink.startsOver(from: resumePoint)
        try await sink.hashExistingPrefixOffPool()
        progress.update(start)

        var servedHeaders: [String: String] = [:]
        if start < total {
            var request = HTTPRequest(method: "GET", url: mediaURL(reference, generation: generation), headers: Self.storedBytes(of: object))
            if start > 0 { request.headers.append("Range: bytes=\(start)-") }
            do throws(TransferFailure) {
                let response = try await send(request, control: control, sink: sink)
                guard response.isSuccess else {
                    throw TransferFailure.failed(await mediaError(response, reference: reference, generation: generation))
                }
                servedHeaders = response.headers
            } catch {
                return try await sink.outcome(of: error, bytesTotal: total, report: report) { partial in
                    partial.resumePoint(generation: generation, etag: nil)
                }
            }
        }
        try await sink.settle()
        guard sink.offset <= total else {
            // More than the object holds (another version's bytes, a transformed body): nothing to resume.
            await sink.drop()
            throw StorageError(.unknown, "the server sent \(sink.offset) bytes of an object of \(total); the partial file was dropped "
                                   + "and a retry downloads it again", url: redactedURL(mediaURL(reference, generation: generation)),
                               retryable: true)
        }
        guard sink.offset == total else {
            try? await sink.partial.syncOffPool()
            throw StorageError(.unknown, "the download ended after \(sink.offset) of \(total) bytes; a retry resumes from the last checkpoint the log holds, if any",
                               url: redactedURL(mediaURL(reference, generation: generation)), retryable: true)
        }
        let served = Self.digests(of: Self.withServedHashes(object, servedHeaders))
        guard !served.isEmpty else {
            // A partial file complete from an earlier attempt (no media request), or an empty object.
            await sink.drop()
            throw Self.unverifiableDownload(reference, url: media, remedy: "the copy was removed")
        }
        let ours = try await sink.finishHashesOffPool(md5: served.needMD5(asked: md5))
        let verified: [ChecksumAlgorithm]
        do {
            verified = try served.verify(md5: ours.md5, crc32c: ours.crc32c, what: "downloaded file",
                                         remedy: "the copy was removed — download again")
        } catch {
            await sink.drop()
            throw sink.keepsEarlierBytes ? error.afterKeptPrefix() : error
        }
        guard let path = try await sink.commit(replacing: rule.replaces) else { return try rule.downloadFoundTaken(destination) }
        progress.update(total)
        return .finished(JobResult(object: object, path: path, size: total, md5: ours.md5, crc32c: ours.crc32c, verified: verified))
    }

    /// The failure of a download of `reference` that no hash could verify: neither the object's metadata
    /// nor the media answer's `x-goog-hash` gave a CRC32C or an MD5. GCS reports a CRC32C for every
    /// object, composite ones included (as gcloud storage's `check_hashes=if_fast_else_fail` relies on),
    /// so this is a server or something in between that cannot vouch for the bytes: such a download was
    /// committed as `succeeded`, whatever bytes came. Nothing is kept (`remedy` says what became of them),
    /// and the job fails for good (`internalError`): the metadata and the media answer both left the
    /// hashes out, which is how that endpoint answers, and a retry would fetch every byte again to the same end.
    static func unverifiableDownload(_ reference: StorageReference, url: String, remedy: String) -> StorageError {
        StorageError(.internalError,
                     "the server reported no CRC32C or MD5 for \(reference) (neither in its metadata nor in the media answer's "
                         + "x-goog-hash): nothing could verify the downloaded bytes, and \(remedy); GCS reports a CRC32C for every "
                         + "object — check the endpoint and anything between it and this machine",
                     url: redactedURL(url))
    }

    /// Fills hashes the metadata lacked from the media response's `x-goog-hash: crc32c=…,md5=…`, which
    /// covers the whole object even on a ranged response.
    static func withServedHashes(_ object: StorageObject, _ headers: [String: String]) -> StorageObject {
        let served = reportedHashes(headers)
        var filled = object
        if filled.md5Hash == nil { filled.md5Hash = served.md5 }
        if filled.crc32c == nil { filled.crc32c = served.crc32c }
        return filled
    }

    /// The hashes the object's metadata reports, to compare a download with.
    /// The header a media GET of `object` carries so that GCS serves the bytes it stores: for an object
    /// stored with `Content-Encoding: gzip`, `Accept-Encoding: gzip`. Without it GCS decompresses the object
    /// on the way (decompressive transcoding): another size than the metadata's, Range ignored, and hashes
    /// — the metadata's and `x-goog-hash` — of the stored bytes, so the download could never be verified.
    /// The stored (compressed) bytes are what is downloaded and verified, as `gcloud storage cp
    /// --do-not-decompress` keeps them; libcurl decodes nothing (no `CURLOPT_ACCEPT_ENCODING` is set).
    static func storedBytes(of object: StorageObject) -> [String] {
        let encodings = object.contentEncoding?.lowercased().split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } ?? []
        return encodings.contains("gzip") ? ["Accept-Encoding: gzip"] : []
    }

    static func digests(of object: StorageObject) -> [ServedDigest] {
        var digests: [ServedDigest] = []
        if let md5 = object.md5Hash { digests.append(ServedDigest(algorithm: .md5, value: md5, source: "object metadata")) }
        if let crc32c = object.crc32c { digests.append(ServedDigest(algorithm: .crc32c, value: crc32c, source: "object metadata")) }
        return digests
    }

    // MARK: - Download to memory

    private func downloadMemory(_ reference: StorageReference, maxSize: Int64, md5: Bool, control: TransferControl,
                                report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let object: StorageObject
        switch try await metadata(reference, control: control) {
        case .value(let value): object = value
        case .stopped(let reason): return .stopped(reason, nil)
        }
        guard object.size <= maxSize else {
            throw StorageError.downloadSizeExceeded("object '\(reference)'", size: object.size, maximum: maxSize,
                                                    url: redactedURL(objectURL(reference)))
        }
        let progress = ProgressThrottle(total: object.size, report: report)
        let url = mediaURL(reference, generation: object.generation)
        // The object's size is the most its media answer may hold (max_size was compared with it above).
        let sink = MemorySink(limit: object.size, url: url, md5: Self.digests(of: object).needMD5(asked: md5),
                              progress: { progress.update($0) })
        // As a download to a file: an answer of another version is refused at its first byte, retryable,
        // instead of failing the final CRC32C for good.
        let generation = object.generation, crc32c = object.crc32c
        let unhashed = Self.digests(of: object).isEmpty
        sink.checkAnswer = { _, headers throws(StorageError) in
            try GCSBackend.checkVersion(headers, generation: generation, crc32c: crc32c, what: "the download to memory")
            // Nothing could verify the bytes: refused at the first, not after the last.
            if unhashed && GCSBackend.digests(of: GCSBackend.withServedHashes(object, headers)).isEmpty {
                throw GCSBackend.unverifiableDownload(reference, url: url, remedy: "nothing of it was kept")
            }
        }
        progress.update(0)
        var servedHeaders: [String: String] = [:]
        do throws(TransferFailure) {
            let response = try await send(HTTPRequest(method: "GET", url: url, headers: Self.storedBytes(of: object)), control: control, sink: sink)
            guard response.isSuccess else {
                throw TransferFailure.failed(await mediaError(response, reference: reference, generation: object.generation))
            }
            servedHeaders = response.headers
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason, nil)   // memory downloads restart from zero
            case .failed(let failure) where failure.code == .downloadSizeExceeded:
                // An answer longer than the object (a body transcoded on the way, another one spliced in):
                // the transfer's fault, as a longer one is below (and as a download to a file takes it),
                // not the object's — it fits max_size.
                throw StorageError(.unknown, "the server sent more than the \(object.size) bytes of \(reference); nothing was kept "
                                       + "and a retry downloads it again", url: redactedURL(url), retryable: true, cause: failure.message)
            case .failed(let failure):
                throw failure
            }
        }
        let data = sink.data
        guard Int64(data.count) == object.size else {
            // An answer cut short where nothing marked its end (no Content-Length: the connection's close
            // ended it), or one longer than the object: the transfer's fault, not the object's, so no
            // checksum is compared and a retry fetches it again.
            throw StorageError(.unknown, "the server sent \(data.count) bytes of an object of \(object.size); nothing was kept "
                                   + "and a retry downloads it again", url: redactedURL(url), retryable: true)
        }
        let served = Self.digests(of: Self.withServedHashes(object, servedHeaders))
        // An empty object: no body byte, so no `checkAnswer`.
        guard !served.isEmpty else { throw Self.unverifiableDownload(reference, url: url, remedy: "nothing was kept") }
        let streamed = sink.checksums.finish()
        // MD5 wanted only once the media answer's headers were read, or an empty object: hash it here.
        let ours = served.needMD5(asked: md5) && streamed.md5 == nil
            ? (md5: Optional(Data(Digest.md5(data)).base64EncodedString()), crc32c: streamed.crc32c) : streamed
        let verified = try served.verify(md5: ours.md5, crc32c: ours.crc32c, what: "downloaded data",
                                         remedy: "nothing was kept — download again")
        return .finished(JobResult(object: object, size: Int64(data.count), md5: ours.md5, crc32c: ours.crc32c, data: data,
                                   verified: verified))
    }

    // MARK: - Download URL

    /// The object's Firebase download URL, creating a download token when it has none. The token goes
    /// into the custom map as Firebase does; the whole map is sent (some servers replace `metadata`
    /// instead of merging it), so the PATCH is conditional on the version read, as `updateMetadata`'s.
    ///
    /// A token created is returned only once the server shows it holds it: in the PATCH's answer, or else
    /// in the object read once more (`storedToken`). A server that answered 200 without applying the
    /// PATCH had the job succeed with a URL no one could use.
    private func fetchURL(_ reference: StorageReference, control: TransferControl) async throws(StorageError) -> TransferOutcome {
        for round in 1...Self.metadataRounds {
            var object: StorageObject
            switch try await metadata(reference, control: control) {
            case .value(let value): object = value
            case .stopped(let reason): return .stopped(reason, nil)
            }
            var token = object.downloadTokens?.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                .first(where: { !$0.isEmpty })
            if token == nil {
                // Create one as Firebase does: a random UUID in the object's custom metadata.
                let created = UUID().uuidString.lowercased()
                var custom: [String: Any] = object.customMetadata ?? [:]
                custom[GCSObjectJSON.downloadTokensKey] = created
                let response: HTTPResponse
                switch try await conditionalPatch(reference, read: object, round: round, control: control,
                                                  body: GCSObjectJSON.encode(["metadata": custom])) {
                case .applied(let answer): response = answer
                case .changed: continue
                case .stopped(let reason): return .stopped(reason, nil)
                }
                if let json = response.json, let updated = GCSObjectJSON.object(from: json), Self.names(updated, reference),
                   Self.holds(updated, token: created) {
                    object = updated
                } else {
                    switch try await storedToken(created, of: reference, patchStatus: response.status, control: control) {
                    case .value(let reread): object = reread
                    case .stopped(let reason): return .stopped(reason, nil)
                    }
                }
                token = created
            }
            let url = "\(configuration.firebaseEndpoint)/v0/b/\(reference.bucket)/o/\(reference.encodedPath)?alt=media&token=\(StorageReference.percentEncode(token ?? "", keepSlash: false))"
            return .finished(JobResult(object: object, url: url))
        }
        preconditionFailure("the last round returns or throws")
    }

    /// Whether `object`'s download tokens (a comma-separated list) include `token`.
    static func holds(_ object: StorageObject, token: String) -> Bool {
        (object.downloadTokens ?? "").split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == token }
    }

    /// The object read again after a token PATCH whose answer did not show the token `created` (no object
    /// resource, another object's, or one without it): the object when it holds the token now, else a
    /// retryable failure — the server's fault, and the next attempt reads the object again (and takes a
    /// token it holds by then, or writes one anew).
    private func storedToken(_ created: String, of reference: StorageReference, patchStatus: Int,
                             control: TransferControl) async throws(StorageError) -> Fetched<StorageObject> {
        switch try await metadata(reference, control: control) {
        case .stopped(let reason): return .stopped(reason)
        case .value(let object) where Self.holds(object, token: created): return .value(object)
        case .value:
            throw StorageError(.unknown, "the server answered the download token's update with \(patchStatus) but \(reference) does not hold "
                                   + "the token: a URL with it would not work; none is returned, and a retry reads the object again",
                               httpStatus: patchStatus, url: redactedURL(objectURL(reference)), retryable: true)
        }
    }

    // MARK: - Metadata and errors

    /// A value, or the stop reason that interrupted fetching it.
    private enum Fetched<Value> {
        case value(Value)
        case stopped(StopReason)
    }

    /// The object's metadata, or the stop reason when the control stopped the request.
    private func metadata(_ reference: StorageReference, control: TransferControl) async throws(StorageError) -> Fetched<StorageObject> {
        let response: HTTPResponse
        do {
            response = try await send(HTTPRequest(method: "GET", url: objectURL(reference)), control: control)
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason)
            case .failed(let failure): throw failure
            }
        }
        guard response.isSuccess else { throw await objectError(response, reference: reference, what: "\(reference)") }
        return .value(try Self.objectResource(response, reference: reference))
    }

    /// The object a successful metadata answer describes. A body that is no JSON at all was cut or garbled
    /// on the way (a truncation with nothing to mark the end, an interfering middlebox): asking again can
    /// help. JSON without the object's fields is what the server says, and stays an error.
    ///
    /// The resource must name the object asked for (`names`): every read of metadata — a download's plan,
    /// a sliced download's, `get-metadata`, `fetch-url`, `update-metadata`, an upload's look first — goes
    /// through here, and an answer about another bucket or object (a cache or proxy that mixed answers up,
    /// a server bug) was recorded as the job's result: `show` printed `object: evil-bucket/../../etc/other.txt`
    /// for a download of `gs://bkt/small.txt`, whose bytes were then fetched on that other object's word.
    private static func objectResource(_ response: HTTPResponse, reference: StorageReference) throws(StorageError) -> StorageObject {
        guard let json = response.json, let object = GCSObjectJSON.object(from: json) else {
            throw StorageError(.unknown, "the server's metadata for \(reference) is not an object resource (\(GCSObjectJSON.needs))",
                               httpStatus: response.status, url: redactedURL(response.url), retryable: response.json == nil)
        }
        guard names(object, reference) else { throw anotherObject(object, answering: "\(reference)", response) }
        try checkSize(object, reference: reference, url: response.url)
        return object
    }

    /// The error for an answer about `object` to a request about another one (`what`): retryable, as the
    /// upload's final answer about another object already is — nothing of it was used, and asking again
    /// can get the right one. The other name is shown cut to 200 characters (it is the server's text).
    private static func anotherObject(_ object: StorageObject, answering what: String, _ response: HTTPResponse) -> StorageError {
        let named = "\(object.bucket)/\(object.name)"
        let shown = named.count > 200 ? named.prefix(200) + "…" : Substring(named)
        return StorageError(.unknown, "the server's metadata for \(what) describes another object ('\(shown)'); nothing of it was used, "
                                + "and a retry asks again", httpStatus: response.status, url: redactedURL(response.url), retryable: true)
    }

    /// The largest object Cloud Storage holds: 5 TiB (https://cloud.google.com/storage/quotas#objects).
    static let largestObjectSize: Int64 = 5 << 40

    /// Refuses metadata whose size no object can have (more than `largestObjectSize`), before anything is
    /// planned from it: a download to a file set its partial file to 2^63-1 bytes and failed
    /// `internalError`, "raise the file system's largest file size", and one to memory told the user to raise
    /// max_size; the answer is the server's fault.
    static func checkSize(_ object: StorageObject, reference: StorageReference, url: String) throws(StorageError) {
        guard object.size > largestObjectSize else { return }
        throw StorageError(.unknown, "the server's metadata for \(reference) gives a size of \(object.size) bytes, more than any Cloud "
                               + "Storage object can hold (5 TiB): the answer is not to be trusted, and nothing was planned from it",
                           url: redactedURL(url))
    }

    /// The object's metadata, nil when there is none (404), or the stop reason.
    private func existingObject(_ reference: StorageReference, control: TransferControl) async throws(StorageError) -> Fetched<StorageObject?> {
        let response: HTTPResponse
        do {
            response = try await send(HTTPRequest(method: "GET", url: objectURL(reference)), control: control)
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason)
            case .failed(let failure): throw failure
            }
        }
        if response.status == 404 { return .value(nil) }
        guard response.isSuccess else { throw await objectError(response, reference: reference, what: "\(reference)") }
        return .value(try Self.objectResource(response, reference: reference))
    }

    /// Maps a failed media request for `generation`. GCS answers a generation that no longer exists with
    /// 404: an object replaced between the metadata read that pinned its generation and this request
    /// failed the job for good as `objectNotFound`, "does not exist; check the path", though it was there.
    /// When the object is there under another generation, the failure is retryable instead, and the next
    /// attempt plans on the new one (as it already did when the object changed between attempts).
    func mediaError(_ response: HTTPResponse, reference: StorageReference, generation: String?) async -> StorageError {
        let error = await objectError(response, reference: reference, what: "\(reference)")
        guard error.code == .objectNotFound, let generation, !generation.isEmpty,
              let current = try? await send(HTTPRequest(method: "GET", url: objectURL(reference)), control: nil), current.status == 200,
              let now = try? Self.objectResource(current, reference: reference), let replacement = now.generation,
              replacement != generation else { return error }
        return StorageError(.unknown, "\(reference) was replaced while it was being downloaded (generation \(generation) is gone; it is "
                                + "generation \(replacement) now): a retry downloads the new version",
                            httpStatus: response.status, url: redactedURL(mediaURL(reference, generation: generation)), retryable: true)
    }

    /// Maps a failed object request; a 404 is `bucketNotFound` when the bucket itself is missing.
    ///
    /// An upload (`upload: true`) names no object that must exist: a 404 to it with the bucket there means
    /// the endpoint has no upload service at `/upload/storage/v1` (an endpoint that is no GCS API, or a
    /// path prefix missing from it). It read "the upload of gs://b/x does not exist; check the path".
    /// (A resumable session that expired answers its own requests 404; that is handled where they are sent.)
    func objectError(_ response: HTTPResponse, reference: StorageReference, what: String, upload: Bool = false) async -> StorageError {
        var error = httpError(response, what: what)
        if response.status == 404 {
            let bucketURL = "\(endpoint)/storage/v1/b/\(reference.bucket)"
            let bucket = try? await send(HTTPRequest(method: "GET", url: bucketURL), control: nil)
            if bucket?.status == 404 {
                error.code = .bucketNotFound
                error.message = "the bucket '\(reference.bucket)' does not exist; check the reference's bucket name"
            } else if upload {
                error.code = .objectNotFound
                let service = "/upload/storage/v1 at \(redactedURL(endpoint))"
                error.message = bucket?.status == 200
                    ? "the server answered 404 to \(what) though the bucket '\(reference.bucket)' exists: the endpoint serves no "
                        + "uploads at \(service) (no GCS JSON API, or a path prefix missing); check STORAGE_EMULATOR_HOST"
                    : "the server answered 404 to \(what): the bucket '\(reference.bucket)' or the upload service (\(service)) "
                        + "was not found; check the bucket name and STORAGE_EMULATOR_HOST"
            } else {
                error.code = .objectNotFound
                error.message = "\(what) does not exist; check the path"
            }
        }
        return error
    }

    // MARK: - Requests

    var endpoint: String {
        var text = configuration.gcsEndpoint
        while text.hasSuffix("/") { text.removeLast() }
        return text
    }

    private func objectURL(_ reference: StorageReference) -> String {
        "\(endpoint)/storage/v1/b/\(reference.bucket)/o/\(reference.encodedPath)"
    }

    func mediaURL(_ reference: StorageReference, generation: String?) -> String {
        "\(endpoint)/download/storage/v1/b/\(reference.bucket)/o/\(reference.encodedPath)?alt=media"
            + (generation.map { "&generation=\($0)" } ?? "")
    }

    /// `scheme://host:port` of `url` (the scheme's default port when none is written), lowercased; nil
    /// when it has no scheme or host.
    static func origin(of url: String) -> String? {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
              let host = components.host?.lowercased(), !host.isEmpty else { return nil }
        let port = components.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : -1)
        return "\(scheme)://\(host):\(port)"
    }

    /// Whether `url` is on the configured endpoint (same scheme, host and port): the only place the
    /// bearer token goes. An upload session URI comes from the server's `Location` (and later from the
    /// log); GCS puts it on the endpoint, and the session URI itself is the session's credential, so a
    /// session elsewhere (a misconfigured emulator or proxy, a tampered log) gets the object's bytes
    /// but never the account's token.
    func sendsToken(to url: String) -> Bool {
        guard let target = Self.origin(of: url) else { return false }
        return target == Self.origin(of: endpoint)
    }

    /// Sends one request with the bearer token (only to the endpoint: `sendsToken(to:)`); on a 401 with a
    /// refreshable token (a command or Google credentials), refreshes the token and sends it once more
    /// (the body source is recreated, the sink has received nothing).
    func send(_ request: HTTPRequest, control: TransferControl?, source: (() -> any RequestBodySource)? = nil,
              sink: (any ResponseBodySink)? = nil,
              requestSent: (@Sendable () -> Void)? = nil) async throws(TransferFailure) -> HTTPResponse {
        guard sendsToken(to: request.url) else {
            return try await engine.perform(request, source: source?(), sink: sink, control: control,
                                            options: configuration.curlOptions, requestSent: requestSent)
        }
        var attempt = request
        let header = try await tokens.authorizationHeader(stoppingOn: control)
        if let header { attempt.headers.append(header) }
        let response = try await engine.perform(attempt, source: source?(), sink: sink, control: control,
                                                options: configuration.curlOptions, requestSent: requestSent)
        guard response.status == 401, tokens.canRefresh else { return response }
        var retry = request
        retry.headers.append("Authorization: Bearer \(try await tokens.refresh(replacing: header, stoppingOn: control))")
        return try await engine.perform(retry, source: source?(), sink: sink, control: control, options: configuration.curlOptions,
                                        requestSent: requestSent)
    }
}
