import Foundation
import JobModel

/// Runs the five job kinds against the GCS JSON API (what Firebase buckets are), or an emulator of it.
///
/// - Uploads always use a resumable session: the session URI is reported as a checkpoint before any
///   data is sent and after every chunk the server confirms, so an upload continues after a pause, a
///   crash or a restart of the process with a single status query. (A one-request multipart upload
///   would save one round trip for small objects, but could not be resumed; sessions of one chunk
///   cost little.)
/// - Downloads read the object's metadata first (size, generation, hashes), then fetch the media
///   pinned to that generation, resuming with `Range` from a synced partial file.
/// - MD5 and CRC32C are computed while streaming and compared with the server's; a mismatch fails
///   with `nonMatchingChecksum` and the bad copy (remote object or local partial file) is removed.
public struct GCSBackend: StorageBackend {
    /// Endpoint, credentials, chunk size and timeouts.
    public let configuration: StorageConfiguration
    private let engine: CurlEngine
    private let tokens: GCSTokenSource

    /// A backend talking to `configuration.gcsEndpoint` with the configured credentials, sharing the
    /// process-wide curl engine (one thread, one connection cache, for every backend).
    public init(configuration: StorageConfiguration) {
        self.configuration = configuration
        self.engine = .shared
        self.tokens = GCSTokenSource(accessToken: configuration.accessToken, tokenCommand: configuration.tokenCommand)
    }

    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        switch try TransferPlan(spec, schemes: [.gs], expected: "a Cloud Storage reference (gs:// or a Firebase URL)",
                               policy: configuration.uploadPolicy) {
        case .upload(let source, let reference, let contentType):
            return try await upload(source, to: reference, contentType: contentType, metadata: spec.metadata,
                                    resumingFrom: resumePoint, control: control, report: report)
        case .downloadFile(let reference, let destination):
            return try await downloadFile(reference, to: destination, resumingFrom: resumePoint, control: control, report: report)
        case .downloadMemory(let reference, let maxSize):
            return try await downloadMemory(reference, maxSize: maxSize, control: control, report: report)
        case .fetchURL(let reference):
            return try await fetchURL(reference, control: control)
        }
    }

    // MARK: - Upload

    private func upload(_ source: UploadSource, to reference: StorageReference, contentType: String,
                        metadata: UploadMetadata?, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let total = source.size
        let checksums = StreamChecksums()
        let progress = ProgressThrottle(total: total, report: report)
        var session: String?
        var offset: Int64 = 0

        // Continue an earlier session when one is given and still alive.
        if case .upload(let uri, let confirmed, let recordedTotal)? = resumePoint, recordedTotal == nil || recordedTotal == total {
            switch try await queryUploadStatus(uri, total: total, recordedOffset: confirmed, control: control) {
            case .incomplete(let serverOffset):
                session = uri
                offset = serverOffset
                report(.checkpoint(.upload(sessionURI: uri, confirmedOffset: offset, total: total), bytesTotal: total))
            case .finished(let object):
                try source.hashPrefix(upTo: total, into: checksums)
                return .finished(try await verifiedUploadResult(object, checksums: checksums, reference: reference))
            case .expired:
                break
            case .stopped(let reason):
                return .stopped(reason, reason == .cancel ? nil : resumePoint)
            }
        }

        var restartedSession = false
        while true {
            if session == nil {
                do throws(TransferFailure) {
                    let uri = try await startUploadSession(reference, contentType: contentType, metadata: metadata,
                                                           total: total, control: control)
                    session = uri
                    offset = 0
                    report(.checkpoint(.upload(sessionURI: uri, confirmedOffset: 0, total: total), bytesTotal: total))
                } catch {
                    switch error {
                    case .stopped(let reason): return .stopped(reason, nil)
                    case .failed(let failure): throw failure
                    }
                }
            }
            guard let uri = session else { continue }
            // Re-hash what the server already holds (a resumed session) before sending more.
            if checksums.hashedUpTo < offset { try source.hashPrefix(upTo: offset, into: checksums) }
            progress.update(offset)

            let outcome = try await sendChunks(source, session: uri, from: offset, checksums: checksums,
                                               control: control, progress: progress, report: report)
            switch outcome {
            case .finished(let object):
                return .finished(try await verifiedUploadResult(object, checksums: checksums, reference: reference))
            case .stopped(let reason, let confirmed):
                if reason == .cancel {
                    await cancelUploadSession(uri)
                    return .stopped(.cancel, nil)
                }
                return .stopped(reason, .upload(sessionURI: uri, confirmedOffset: confirmed, total: total))
            case .expired:
                // The session vanished mid-upload: start one new session, once.
                guard !restartedSession else {
                    throw StorageError(.unknown, "the upload session expired twice; the upload will be retried from the start",
                                       url: redactedURL(uri), retryable: true)
                }
                restartedSession = true
                session = nil
            }
        }
    }

    private enum ChunkOutcome {
        case finished([String: Any])
        case stopped(StopReason, confirmed: Int64)
        case expired
    }

    /// PUTs `chunkSize` pieces from `offset` until the server answers with the object.
    private func sendChunks(_ source: UploadSource, session: String, from start: Int64, checksums: StreamChecksums,
                            control: TransferControl, progress: ProgressThrottle,
                            report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> ChunkOutcome {
        let total = source.size
        let quantum: Int64 = 256 * 1024
        let chunkSize = max(quantum, Int64(configuration.chunkSize) / quantum * quantum)
        var offset = start
        while true {
            if let reason = control.stopReason { return .stopped(reason, confirmed: offset) }
            let end = min(offset + chunkSize, total)
            var request = HTTPRequest(method: "PUT", url: session)
            request.headers = total == 0 || offset == end
                ? ["Content-Range: bytes */\(total)"]
                : ["Content-Range: bytes \(offset)-\(end - 1)/\(total)"]
            request.bodyLength = end - offset
            let chunkStart = offset
            let response: HTTPResponse
            do {
                response = try await send(request, control: control, source: {
                    UploadRangeBody(source: source, start: chunkStart, end: end, checksums: checksums,
                                    progress: { progress.update($0) })
                })
            } catch {
                switch error {
                case .stopped(let reason): return .stopped(reason, confirmed: offset)
                case .failed(let failure): throw failure
                }
            }
            switch response.status {
            case 200, 201:
                guard let json = response.json else {
                    throw StorageError(.unknown, "the upload finished but the server's answer is not an object resource",
                                       httpStatus: response.status, url: redactedURL(session), retryable: true)
                }
                return .finished(json)
            case 308:
                let confirmed = Self.confirmedOffset(response.headers["range"], recorded: offset)
                offset = confirmed
                progress.update(offset)
                report(.checkpoint(.upload(sessionURI: session, confirmedOffset: offset, total: total), bytesTotal: total))
            case 404, 410:
                return .expired
            default:
                throw httpError(response, what: "the upload session")
            }
        }
    }

    /// `Range: bytes=0-N` → N+1; no Range → 0. The emulator answers `bytes=0-0` before any data,
    /// which would claim one byte: when nothing was confirmed before, that means 0.
    static func confirmedOffset(_ range: String?, recorded: Int64) -> Int64 {
        guard let range, let dash = range.lastIndex(of: "-"), let last = Int64(range[range.index(after: dash)...]) else {
            return 0
        }
        if last == 0 && recorded == 0 { return 0 }
        return last + 1
    }

    private enum UploadStatus {
        case incomplete(Int64)
        case finished([String: Any])
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
        case 308: return .incomplete(Self.confirmedOffset(response.headers["range"], recorded: recordedOffset))
        case 200, 201:
            guard let json = response.json else { return .expired }
            return .finished(json)
        case 404, 410: return .expired
        default: throw httpError(response, what: "the upload session")
        }
    }

    /// POSTs the metadata and returns the session URI from `Location`.
    private func startUploadSession(_ reference: StorageReference, contentType: String, metadata: UploadMetadata?,
                                    total: Int64, control: TransferControl) async throws(TransferFailure) -> String {
        let url = "\(endpoint)/upload/storage/v1/b/\(reference.bucket)/o?uploadType=resumable&name=\(reference.encodedPath)"
        let request = HTTPRequest(
            method: "POST", url: url,
            headers: ["Content-Type: application/json; charset=UTF-8", "X-Upload-Content-Type: \(contentType)",
                      "X-Upload-Content-Length: \(total)"],
            body: GCSObjectJSON.uploadBody(name: reference.fullPath, contentType: contentType, metadata: metadata))
        let response = try await send(request, control: control)
        guard response.isSuccess else {
            throw .failed(await objectError(response, reference: reference, what: "the upload of \(reference)"))
        }
        guard let location = response.headers["location"], !location.isEmpty else {
            throw .failed(StorageError(.unknown, "the server started no upload session (no Location header)",
                                       httpStatus: response.status, url: redactedURL(url)))
        }
        return location
    }

    /// Best effort: tells the server a cancelled session will not be finished.
    private func cancelUploadSession(_ session: String) async {
        _ = try? await send(HTTPRequest(method: "DELETE", url: session), control: nil)
    }

    /// Compares the streamed hashes with the stored object's; a mismatch deletes the object.
    private func verifiedUploadResult(_ json: [String: Any], checksums: StreamChecksums,
                                      reference: StorageReference) async throws(StorageError) -> JobResult {
        guard let object = GCSObjectJSON.object(from: json) else {
            throw StorageError(.unknown, "the upload finished but the object resource could not be read")
        }
        let ours = checksums.finish()
        if checksums.isContiguous && checksums.hashedUpTo == object.size {
            if let md5 = object.md5Hash, md5 != ours.md5 {
                await deleteBadObject(reference, generation: object.generation)
                throw StorageError(.nonMatchingChecksum, "the stored object's MD5 \(md5) differs from the uploaded bytes' \(ours.md5); the object was deleted — upload again")
            }
            if let crc = object.crc32c, crc != ours.crc32c {
                await deleteBadObject(reference, generation: object.generation)
                throw StorageError(.nonMatchingChecksum, "the stored object's CRC32C \(crc) differs from the uploaded bytes' \(ours.crc32c); the object was deleted — upload again")
            }
        }
        return JobResult(object: object, size: object.size, md5: ours.md5, crc32c: ours.crc32c)
    }

    /// Best effort: a failed delete leaves a bad object that the next upload overwrites.
    private func deleteBadObject(_ reference: StorageReference, generation: String?) async {
        let url = objectURL(reference) + (generation.map { "?generation=\($0)" } ?? "")
        _ = try? await send(HTTPRequest(method: "DELETE", url: url), control: nil)
    }

    // MARK: - Download to a file

    private func downloadFile(_ reference: StorageReference, to destination: String, resumingFrom resumePoint: ResumePoint?,
                              control: TransferControl,
                              report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let object: StorageObject
        switch try await metadata(reference, control: control) {
        case .value(let value): object = value
        case .stopped(let reason): return .stopped(reason, reason == .cancel ? nil : resumePoint)
        }
        let generation = object.generation
        var resume = resumePoint
        if case .download(_, let recorded, _, _, _)? = resume, recorded != generation { resume = nil }  // changed: start over
        let partial = try PartialFile(destination: destination, jobID: control.jobID, resumeFrom: resume)
        if partial.bytesWritten > object.size { try partial.restart() }
        let total = object.size
        let progress = ProgressThrottle(total: total, report: report)
        let start = partial.bytesWritten
        let sink = FileSink(partial: partial, requestedOffset: start,
                            checkpoint: { partial, _ in
                                report(.checkpoint(partial.resumePoint(generation: generation, etag: nil), bytesTotal: total))
                            },
                            progress: { progress.update($0) })
        try sink.hashExistingPrefix()
        progress.update(start)

        var servedHeaders: [String: String] = [:]
        if start < total {
            var request = HTTPRequest(method: "GET", url: mediaURL(reference, generation: generation))
            if start > 0 { request.headers.append("Range: bytes=\(start)-") }
            do throws(TransferFailure) {
                let response = try await send(request, control: control, sink: sink)
                guard response.isSuccess else {
                    throw TransferFailure.failed(await objectError(response, reference: reference, what: "\(reference)"))
                }
                servedHeaders = response.headers
            } catch {
                return try sink.outcome(of: error, bytesTotal: total, report: report) { partial in
                    partial.resumePoint(generation: generation, etag: nil)
                }
            }
        }
        guard sink.offset == total else {
            try? sink.partial.sync()
            throw StorageError(.unknown, "the download ended after \(sink.offset) of \(total) bytes; it will be resumed",
                               url: redactedURL(mediaURL(reference, generation: generation)), retryable: true)
        }
        let ours = sink.checksums.finish()
        if let failure = checksumMismatch(object: Self.withServedHashes(object, servedHeaders), md5: ours.md5, crc32c: ours.crc32c,
                                          what: "downloaded file") {
            sink.partial.discard()
            throw failure
        }
        let path = try sink.partial.commit()
        progress.update(total)
        return .finished(JobResult(object: object, path: path, size: total, md5: ours.md5, crc32c: ours.crc32c))
    }

    /// Fills hashes the metadata lacked from the media response's `x-goog-hash: crc32c=…,md5=…`, which
    /// covers the whole object even on a ranged response.
    static func withServedHashes(_ object: StorageObject, _ headers: [String: String]) -> StorageObject {
        guard let header = headers["x-goog-hash"] else { return object }
        var filled = object
        for item in header.split(separator: ",") {
            let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2 else { continue }
            if pair[0] == "md5", filled.md5Hash == nil { filled.md5Hash = pair[1] }
            if pair[0] == "crc32c", filled.crc32c == nil { filled.crc32c = pair[1] }
        }
        return filled
    }

    private func checksumMismatch(object: StorageObject, md5: String, crc32c: String, what: String) -> StorageError? {
        if let expected = object.md5Hash, expected != md5 {
            return StorageError(.nonMatchingChecksum, "the \(what)'s MD5 \(md5) differs from the object's \(expected); the copy was removed — download again")
        }
        if let expected = object.crc32c, expected != crc32c {
            return StorageError(.nonMatchingChecksum, "the \(what)'s CRC32C \(crc32c) differs from the object's \(expected); the copy was removed — download again")
        }
        return nil
    }

    // MARK: - Download to memory

    private func downloadMemory(_ reference: StorageReference, maxSize: Int64, control: TransferControl,
                                report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let object: StorageObject
        switch try await metadata(reference, control: control) {
        case .value(let value): object = value
        case .stopped(let reason): return .stopped(reason, nil)
        }
        guard object.size <= maxSize else {
            throw StorageError(.downloadSizeExceeded,
                               "\(reference) is \(object.size) bytes, more than the maximum of \(maxSize); raise max_size or download it to a file",
                               url: redactedURL(objectURL(reference)), total: object.size, maximum: maxSize)
        }
        let progress = ProgressThrottle(total: object.size, report: report)
        let url = mediaURL(reference, generation: object.generation)
        let sink = MemorySink(limit: maxSize, url: url, progress: { progress.update($0) })
        progress.update(0)
        var servedHeaders: [String: String] = [:]
        do throws(TransferFailure) {
            let response = try await send(HTTPRequest(method: "GET", url: url), control: control, sink: sink)
            guard response.isSuccess else {
                throw TransferFailure.failed(await objectError(response, reference: reference, what: "\(reference)"))
            }
            servedHeaders = response.headers
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason, nil)   // memory downloads restart from zero
            case .failed(var failure):
                if failure.code == .downloadSizeExceeded { failure.total = object.size }
                throw failure
            }
        }
        let ours = sink.checksums.finish()
        if let failure = checksumMismatch(object: Self.withServedHashes(object, servedHeaders), md5: ours.md5, crc32c: ours.crc32c,
                                          what: "downloaded data") {
            throw failure
        }
        let data = sink.data
        return .finished(JobResult(object: object, size: Int64(data.count), md5: ours.md5, crc32c: ours.crc32c, data: data))
    }

    // MARK: - Download URL

    private func fetchURL(_ reference: StorageReference, control: TransferControl) async throws(StorageError) -> TransferOutcome {
        var object: StorageObject
        switch try await metadata(reference, control: control) {
        case .value(let value): object = value
        case .stopped(let reason): return .stopped(reason, nil)
        }
        var token = object.downloadTokens?.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            .first(where: { !$0.isEmpty })
        if token == nil {
            // Create one as Firebase does: a random UUID in the object's custom metadata. The whole map is
            // sent because some servers replace `metadata` instead of merging it.
            let created = UUID().uuidString.lowercased()
            var custom: [String: Any] = object.customMetadata ?? [:]
            custom[GCSObjectJSON.downloadTokensKey] = created
            let request = HTTPRequest(method: "PATCH", url: objectURL(reference),
                                      headers: ["Content-Type: application/json; charset=UTF-8"],
                                      body: GCSObjectJSON.encode(["metadata": custom]))
            let response: HTTPResponse
            do {
                response = try await send(request, control: control)
            } catch {
                switch error {
                case .stopped(let reason): return .stopped(reason, nil)
                case .failed(let failure): throw failure
                }
            }
            guard response.isSuccess else {
                throw await objectError(response, reference: reference, what: "\(reference)")
            }
            if let json = response.json, let updated = GCSObjectJSON.object(from: json) { object = updated }
            token = created
        }
        let url = "\(configuration.firebaseEndpoint)/v0/b/\(reference.bucket)/o/\(reference.encodedPath)?alt=media&token=\(token ?? "")"
        return .finished(JobResult(object: object, url: url))
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
        guard let json = response.json, let object = GCSObjectJSON.object(from: json) else {
            throw StorageError(.unknown, "the server's metadata for \(reference) is not an object resource",
                               httpStatus: response.status, url: redactedURL(response.url))
        }
        return .value(object)
    }

    /// Maps a failed object request; a 404 is `bucketNotFound` when the bucket itself is missing.
    private func objectError(_ response: HTTPResponse, reference: StorageReference, what: String) async -> StorageError {
        var error = httpError(response, what: what)
        if response.status == 404 {
            let bucketURL = "\(endpoint)/storage/v1/b/\(reference.bucket)"
            if let bucket = try? await send(HTTPRequest(method: "GET", url: bucketURL), control: nil), bucket.status == 404 {
                error.code = .bucketNotFound
                error.message = "the bucket '\(reference.bucket)' does not exist; check the reference's bucket name"
            } else {
                error.code = .objectNotFound
                error.message = "\(what) does not exist; check the path"
            }
        }
        return error
    }

    // MARK: - Requests

    private var endpoint: String {
        var text = configuration.gcsEndpoint
        while text.hasSuffix("/") { text.removeLast() }
        return text
    }

    private func objectURL(_ reference: StorageReference) -> String {
        "\(endpoint)/storage/v1/b/\(reference.bucket)/o/\(reference.encodedPath)"
    }

    private func mediaURL(_ reference: StorageReference, generation: String?) -> String {
        "\(endpoint)/download/storage/v1/b/\(reference.bucket)/o/\(reference.encodedPath)?alt=media"
            + (generation.map { "&generation=\($0)" } ?? "")
    }

    private var timeouts: CurlTimeouts {
        CurlTimeouts(connect: configuration.connectTimeout, lowSpeedLimit: configuration.lowSpeedLimit,
                     stallSeconds: configuration.stallTimeout)
    }

    /// Sends one request with the bearer token; on a 401 with a token command, refreshes the token and
    /// sends it once more (the body source is recreated, the sink has received nothing).
    private func send(_ request: HTTPRequest, control: TransferControl?, source: (() -> any RequestBodySource)? = nil,
                      sink: (any ResponseBodySink)? = nil) async throws(TransferFailure) -> HTTPResponse {
        var attempt = request
        do {
            if let header = try tokens.authorizationHeader() { attempt.headers.append(header) }
        } catch {
            throw .failed(error)
        }
        let response = try await engine.perform(attempt, source: source?(), sink: sink, control: control, timeouts: timeouts)
        guard response.status == 401, tokens.canRefresh else { return response }
        var retry = request
        do {
            retry.headers.append("Authorization: Bearer \(try tokens.refresh())")
        } catch {
            throw .failed(error)
        }
        return try await engine.perform(retry, source: source?(), sink: sink, control: control, timeouts: timeouts)
    }
}
