import Checksums
import Foundation
import JobModel
import Synchronization

/// Runs transfers against plain `http(s)://` URLs: WebDAV servers, signed URLs, static file servers.
///
/// - Downloads resume with `Range` guarded by `If-Range` (the ETag, else Last-Modified), so a changed
///   file is sent whole (200) and the partial copy restarts from zero instead of being spliced.
/// - Uploads are a single `PUT`; plain HTTP has no resumable protocol, so an interrupted upload starts
///   again from byte 0. When the answer reports the stored bytes' hash (`x-goog-hash`,
///   `x-amz-checksum-crc32c`) it is compared with ours; a mismatch deletes the file
///   (`nonMatchingChecksum`). Without such a header there is nothing to compare: an ETag is not a hash.
/// - Downloads are verified against every digest the answer reports for the whole file
///   (`servedDigests`: `Content-MD5`, `Digest`, `Repr-Digest`, `Content-Digest`, `x-goog-hash`); a
///   mismatch removes the copy (`nonMatchingChecksum`).
/// - CRC32C is always computed; MD5 only when the job asks for it (`checksums: [md5]`) or when it is
///   the one hash the server reports.
/// - `fetch-url` has no meaning here (the reference already is a URL) and fails with `invalidArgument`.
public struct HTTPBackend: StorageBackend {
    /// Timeouts (connect, stall) and trusted CAs come from here; endpoints and tokens are not used.
    public let configuration: StorageConfiguration
    /// A test's own engine; nil: the process-wide one.
    private let ownEngine: CurlEngine?
    /// The engine exchanges run on. The process-wide one starts (libcurl's globals, its thread) at the
    /// first exchange, not when the backend is made: a worker or a command that moves no HTTP byte never
    /// starts it.
    private var engine: CurlEngine {
        get throws(TransferFailure) {
            if let ownEngine { return ownEngine }
            return try CurlEngine.shared
        }
    }

    /// A backend for `http(s)://` references, sharing the process-wide curl engine.
    public init(configuration: StorageConfiguration) {
        self.configuration = configuration
        self.ownEngine = nil
    }

    /// A backend on its own curl engine (tests that time transfers, unaffected by other tests' exchanges).
    init(configuration: StorageConfiguration, engine: CurlEngine) {
        self.configuration = configuration
        self.ownEngine = engine
    }

    public func perform(_ spec: JobSpec, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        try await perform(spec, parsed: nil, resumingFrom: resumePoint, control: control, report: report)
    }

    /// `perform` with the job's reference already parsed (`spec.remoteReference()`, by the router).
    func perform(_ spec: JobSpec, parsed: StorageReference?, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                 report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        // Every request of this attempt runs under the job's timeout, if it has one.
        let control = control.limited(toSeconds: spec.timeoutSeconds, maxRate: spec.maxRate)
        let outcome = try await perform(spec, parsed: parsed, limitedBy: control, resumingFrom: resumePoint, report: report)
        await control.waitOutOwnRate()
        return outcome
    }

    /// `perform` under the attempt's own control (its timeout and `max_rate:`).
    private func perform(_ spec: JobSpec, parsed: StorageReference?, limitedBy control: TransferControl, resumingFrom resumePoint: ResumePoint?,
                         report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        switch try TransferPlan(spec, parsed: parsed, firebaseHosts: configuration.firebaseHosts, schemes: [.http, .https],
                               expected: "an http(s) URL", policy: configuration.uploadPolicy) {
        case .upload(let source, let reference, let contentType):
            let rule = OverwriteRule(spec, resumingFrom: resumePoint)
            // Over plain HTTP `fail` looks first as well: nginx's WebDAV module ignores `If-None-Match: *`
            // on PUT (tested), so there the check and the write are two steps; servers that honour the
            // header (S3-style conditional writes) make the write itself refuse.
            if rule.mode != .overwrite {
                // An earlier attempt's `sentUpload` (or `unanswered`) stays until this one knows better (see `upload`).
                let sent: ResumePoint? = switch resumePoint {
                case .sentUpload?, .unanswered?: resumePoint
                default: nil
                }
                switch try await existingFile(reference, control: control) {
                case .stopped(let reason): return .stopped(reason, sent)
                case .value(let existing):
                    if let existing, rule.mode == .fail || rule.mode == .skip, Self.mayHaveStored(sent, size: source.size),
                       let own = try await earlierUploadFound(existing, source: source, reference: reference, contentType: contentType,
                                                              control: control) {
                        return own
                    }
                    if let settled = try await rule.settlesUpload(existing: existing, destination: redactedURL(reference.description),
                                                                  offPool: source) {
                        return settled
                    }
                }
            }
            return try await upload(source, to: reference, contentType: contentType, md5: spec.wantsMD5, rule: rule,
                                    control: control, report: report)
        case .downloadFile(let reference, let destination):
            let rule = OverwriteRule(spec, resumingFrom: resumePoint, downloadingTo: destination)
            let resumePoint = resumePoint == .unanswered ? nil : resumePoint
            if let settled = try rule.beforeDownload(to: destination) { return settled }
            if (rule.mode == .skipIdentical || rule.acceptsIdentical) && PartialFile.destinationExists(destination) {
                switch try await identicalDownload(reference, to: destination, rule: rule, control: control) {
                case .stopped(let reason): return .stopped(reason, nil)
                case .value(let settled?): return settled
                case .value(nil): if let settled = rule.unsettledDownload(to: destination) { return settled }
                }
            }
            return try await downloadFile(reference, to: destination, within: spec.folderTail, md5: spec.wantsMD5, rule: rule,
                                          resumingFrom: resumePoint, control: control, report: report)
        case .downloadMemory(let reference, let maxSize):
            return try await downloadMemory(reference, maxSize: maxSize, md5: spec.wantsMD5, control: control, report: report)
        case .fetchURL(let reference):
            throw StorageError(.invalidArgument, "fetch-url needs a Cloud Storage reference; an http(s) URL already is a download URL",
                               url: redactedURL(reference.description))
        case .getMetadata(let reference):
            return try await headMetadata(reference, control: control)
        case .updateMetadata(let reference, _, _, _):
            throw StorageError(.invalidArgument, "update-metadata needs a gs:// or file:// reference; HTTP has no standard way to change "
                                   + "a file's metadata", url: redactedURL(reference.description))
        case .delete(let reference):
            return try await delete(reference, resumingFrom: resumePoint, control: control, report: report)
        }
    }

    // MARK: - Object operations

    /// get-metadata over HTTP: a HEAD, its headers read as the object's metadata (`Content-Length`, the
    /// content headers, hashes the server reports, the ETag as generation, `Last-Modified`). Redirects are
    /// followed as a download's GET follows them (an https URL's to https only), so the metadata is that of
    /// the file a download of the URL fetches.
    private func headMetadata(_ reference: StorageReference, control: TransferControl) async throws(StorageError) -> TransferOutcome {
        let url = reference.description
        let response: HTTPResponse
        switch try await exchange(HTTPRequest(method: "HEAD", url: url, followRedirects: true), control: control) {
        case .stopped(let reason): return .stopped(reason, nil)
        case .value(let answer): response = answer
        }
        guard response.isSuccess else { throw httpError(response, what: redactedURL(url)) }
        // A 204 (or another 2xx that is no file) was an object of size -1: it names none.
        if let refusal = Self.noFileAnswer(status: response.status, headers: response.headers, rangeAsked: false, url: url,
                                           request: .metadata) {
            throw refusal
        }
        let headers = response.headers
        let reported = reportedDigests(headers)
        // An object GCS stores gzip-encoded, answered as it would serve it decompressed: no Content-Length,
        // and `x-goog-hash` of the stored bytes. Described as GCS's own metadata describes it — the stored
        // object: its length and its encoding, which the hashes are of.
        let transcoded = isTranscoded(headers)
        let length = transcoded ? headers["x-goog-stored-content-length"] : headers["content-length"]
        let object = StorageObject(bucket: reference.bucket, name: reference.fullPath,
                                   size: length.flatMap { Int64($0) } ?? -1,
                                   contentType: headers["content-type"], cacheControl: headers["cache-control"],
                                   contentDisposition: headers["content-disposition"],
                                   contentEncoding: transcoded ? headers["x-goog-stored-content-encoding"] : headers["content-encoding"],
                                   contentLanguage: headers["content-language"], md5Hash: reported.md5, crc32c: reported.crc32c,
                                   generation: headers["etag"], updated: updatedTime(lastModified: headers["last-modified"]))
        return .finished(JobResult(object: object))
    }

    /// `skip-identical` for a download over HTTP: a HEAD, and the local file is kept when the server reports
    /// a CRC32C for the whole file (`x-goog-hash`, `x-amz-checksum-crc32c`, `Digest`, `Repr-Digest`) and a
    /// `Content-Length` that both match it. Without a CRC32C (nginx, most static servers) there is nothing
    /// to compare — an ETag is not a hash — so the file is downloaded again (nil); so it is when the HEAD
    /// fails (the GET then reports why).
    ///
    /// Under `fail` where an earlier attempt may have written the destination (`acceptsIdentical`), a
    /// missing CRC32C is made by reading the file back (a GET of the same length as the local file,
    /// hashed as it streams, nothing kept): the alternative is a job failing for good on its own download.
    private func identicalDownload(_ reference: StorageReference, to destination: String, rule: OverwriteRule,
                                   control: TransferControl) async throws(StorageError) -> StopOr<TransferOutcome?> {
        let url = reference.description
        let response: HTTPResponse
        switch await head(url, control: control) {
        case .stopped(let reason): return .stopped(reason)
        case .value(.failure): return .value(nil)
        case .value(.success(let answered)): response = answered
        }
        guard response.status == 200, let size = response.headers["content-length"].flatMap({ Int64($0) }) else { return .value(nil) }
        // One CRC32C, or none when the server's disagree (a header sent twice with two values).
        let reportedCRC32C = Set(servedDigests(response.headers, status: 200).filter { $0.algorithm == .crc32c }.map(\.value))
        var crc32c = reportedCRC32C.count == 1 ? reportedCRC32C.first : nil
        if crc32c == nil, rule.acceptsIdentical, PartialFile.destinationStatus(destination)?.size == size {
            switch try await readBackCRC32C(url, size: size, followRedirects: true, control: control) {
            case .stopped(let reason): return .stopped(reason)
            case .value(let read): crc32c = read
            }
        }
        let object = StorageObject(bucket: reference.bucket, name: reference.fullPath, size: size, crc32c: crc32c,
                                   generation: response.headers["etag"],
                                   updated: updatedTime(lastModified: response.headers["last-modified"]))
        return .value(try await rule.skipsDownloadOffPool(of: object, crc32c: crc32c, to: destination))
    }

    /// delete over HTTP: a DELETE (WebDAV servers such as nginx's module answer it); 404 or 410 is
    /// `objectNotFound` — unless an earlier copy of the DELETE went out and its answer was lost (an
    /// earlier attempt's, `ResumePoint.sentDelete`, or this one's first that libcurl sent again; as in
    /// `GCSBackend`): then the file gone is taken as that delete's work.
    private func delete(_ reference: StorageReference, resumingFrom resumePoint: ResumePoint?, control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let url = reference.description
        let deleted = JobResult(deleted: redactedURL(url))
        let sent = DeleteSent()
        let response: HTTPResponse
        do throws(TransferFailure) {
            response = try await engine.perform(HTTPRequest.discardingSuccessBody(method: "DELETE", url: url), control: control,
                                                options: configuration.curlOptions, requestSent: sent.note)
        } catch {
            return try sent.ended(error, report: report)
        }
        if response.status == 404 || response.status == 410, resumePoint?.deleteMayBeDone == true || sent.isSet {
            return .finished(deleted)
        }
        if response.status == 410 {
            throw StorageError(.objectNotFound, "\(redactedURL(url)) does not exist (410 Gone)", httpStatus: 410, url: redactedURL(url))
        }
        guard response.isSuccess else { throw httpError(response, what: redactedURL(url), unfollowed: UnfollowedRedirect.delete) }
        return .finished(deleted)
    }

    // MARK: - Upload

    /// Where `rule` does not replace (`if_exists: fail` or `skip`) the PUT carries `If-None-Match: *`: a
    /// server that honours it answers 412 instead of replacing the file (nginx's WebDAV module does not
    /// honour it), which `fail` reports as its refusal and `skip` as the upload skipped.
    /// Such an upload reports `ResumePoint.sentUpload` once its last byte is handed over: should the
    /// answer never come (a reset, a timeout), the next attempt, finding the file there, can tell its own
    /// upload from someone else's (`earlierUploadFound`) instead of failing on it.
    private func upload(_ source: UploadSource, to reference: StorageReference, contentType: String, md5: Bool, rule: OverwriteRule,
                        control: TransferControl,
                        report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let replacing = rule.replaces
        // An http(s) reference's description is the URL exactly as written (its `rawPath` and query).
        let url = reference.description
        let checksums = StreamChecksums(md5: md5)
        let total = source.size
        let progress = ProgressThrottle(total: total, report: report)
        // Only the answer's status and headers are read (its hashes, its ETag): a body is dropped, whatever its size.
        var request = HTTPRequest.discardingSuccessBody(method: "PUT", url: url, headers: ["Content-Type: \(contentType)"])
        if !replacing { request.headers.append("If-None-Match: *") }
        request.bodyLength = total
        let sent = Atomic<Bool>(false)
        let reportSent = { @Sendable in
            if sent.exchange(true, ordering: .relaxed) == false {
                report(.checkpoint(.sentUpload(total: total), bytesTotal: total))
            }
        }
        // How far libcurl read the body (its latest position: a resend on a fresh connection reads it
        // again from the start).
        let handedOver = Atomic<Int64>(0)
        let body = UploadRangeBody(source: source, start: 0, end: total, checksums: checksums, progress: { offset in
            handedOver.store(offset, ordering: .relaxed)
            progress.update(offset)
            if !replacing && offset == total { reportSent() }
        })
        progress.update(0)
        // No body: it is all handed over with the request.
        if !replacing && total == 0 { reportSent() }
        // Whether libcurl had to send the PUT again (its reused connection died): see the 412 below.
        let resent = Atomic<Bool>(false)
        let noteResent: (@Sendable () -> Void)? = replacing ? nil : { @Sendable in resent.store(true, ordering: .relaxed) }
        let response: HTTPResponse
        do throws(TransferFailure) {
            response = try await engine.perform(request, source: body, control: control, options: configuration.curlOptions,
                                                requestSent: noteResent)
        } catch {
            switch error {
            // Not resumable: the next attempt starts at 0 — but one that was sent whole may have landed.
            case .stopped(let reason): return .stopped(reason, sent.load(ordering: .relaxed) ? .sentUpload(total: total) : nil)
            case .failed(let failure): throw failure
            }
        }
        if response.status == 412 && !replacing {
            // A server that honours `If-None-Match: *` refuses libcurl's resend when the first copy, whose
            // answer died with the connection, was stored: that file may be this upload's own.
            if resent.load(ordering: .relaxed) && sent.load(ordering: .relaxed) {
                switch try await existingFile(reference, control: control) {
                case .stopped(let reason): return .stopped(reason, .sentUpload(total: total))
                case .value(let existing?):
                    if let own = try await earlierUploadFound(existing, source: source, reference: reference, contentType: contentType,
                                                              control: control) {
                        return own
                    }
                case .value(nil): break
                }
            }
            try rule.settleTakenUpload(url, httpStatus: 412)
            return await skippedTakenUpload(reference, control: control)
        }
        guard response.isSuccess else { throw Self.uploadError(response, url: url) }
        // A success that came before the body was all handed over (a server answering from the headers,
        // then closing) cannot be for these bytes: without a hash in the answer nothing else would tell.
        let read = handedOver.load(ordering: .relaxed)
        if read < total {
            throw StorageError(.unknown, "the server answered \(response.status) to the upload to \(redactedURL(url)) before its body was sent "
                                   + "(\(read) of \(total) bytes handed over); the upload is not taken as done and a retry sends it again",
                               httpStatus: response.status, url: redactedURL(url), retryable: true)
        }
        // A server that reports only an MD5 gets one, read again from the source (never the case for GCS).
        let reported = reportedDigests(response.headers)
        let ours = try await source.hashesOffPool(streamed: checksums, md5: md5 || (reported.md5 != nil && reported.crc32c == nil))
        if let mismatch = Self.reportedHashMismatch(response.headers, md5: ours.md5, crc32c: ours.crc32c) {
            let deletion = await deleteBadUpload(url, etag: response.headers["etag"])
            throw StorageError(.nonMatchingChecksum, "\(mismatch); \(deletion)", httpStatus: response.status, url: redactedURL(url))
        }
        var verified: [ChecksumAlgorithm] = []
        if reported.md5 != nil && ours.md5 != nil { verified.append(.md5) }
        if reported.crc32c != nil { verified.append(.crc32c) }
        return Self.uploaded(source, to: reference, contentType: contentType, hashes: ours, verified: verified)
    }

    /// The result of an upload of `source` that `reference` now holds: the file as this side knows it
    /// (plain HTTP reports no generation or times), with the source's hashes and those compared.
    private static func uploaded(_ source: UploadSource, to reference: StorageReference, contentType: String,
                                 hashes: (md5: String?, crc32c: String), verified: [ChecksumAlgorithm]) -> TransferOutcome {
        let object = StorageObject(bucket: reference.bucket, name: reference.fullPath, size: source.size,
                                   contentType: contentType, md5Hash: hashes.md5, crc32c: hashes.crc32c,
                                   generation: nil, updated: nil)
        return .finished(JobResult(object: object, size: source.size, md5: hashes.md5, crc32c: hashes.crc32c, verified: verified))
    }

    /// Whether an earlier attempt may have stored this upload of `size` bytes: it handed over every byte
    /// and heard nothing back (`sentUpload`), or it ended without a word (`unanswered`).
    private static func mayHaveStored(_ resumePoint: ResumePoint?, size: Int64) -> Bool {
        switch resumePoint {
        case .sentUpload(let total)?: total == size
        case .unanswered?: true
        default: false
        }
    }

    /// After an earlier attempt of this `if_exists: fail` upload handed the server every byte and heard
    /// nothing back (`ResumePoint.sentUpload`), the file this attempt finds may be that upload. It is taken
    /// as the job's own when it holds exactly the source's bytes: the same size and the same CRC32C — the
    /// one the server reports, or else computed by reading the file back (a GET, hashed as it streams,
    /// nothing kept). The job then succeeds with it, that comparison its verification. Anything else
    /// (another size, other bytes, a read-back that fails) is nil, and the rule refuses as always: nothing
    /// is overwritten either way.
    private func earlierUploadFound(_ existing: StorageObject, source: UploadSource, reference: StorageReference,
                                    contentType: String, control: TransferControl) async throws(StorageError) -> TransferOutcome? {
        guard existing.size == source.size || existing.size < 0 else { return nil }
        let ours = try await source.hashesOffPool(streamed: StreamChecksums(md5: false))
        var theirs = existing.crc32c
        if theirs == nil {
            switch try await readBackCRC32C(reference.description, size: source.size, followRedirects: false, control: control) {
            case .stopped(let reason): return .stopped(reason, .sentUpload(total: source.size))
            case .value(let read): theirs = read
            }
        }
        guard let theirs, theirs == ours.crc32c else { return nil }
        return Self.uploaded(source, to: reference, contentType: contentType, hashes: ours, verified: [.crc32c])
    }

    /// The CRC32C of the file at `url` read back whole — a GET hashed as it streams, nothing kept — or nil
    /// when the read fails, is not a success or is not exactly `size` bytes (`HashingSink` refuses more);
    /// the stop reason when the transfer was stopped. What a comparison uses when the server reports
    /// no CRC32C (nginx and most static servers).
    private func readBackCRC32C(_ url: String, size: Int64, followRedirects: Bool,
                                control: TransferControl) async throws(StorageError) -> StopOr<String?> {
        let sink = HashingSink(limit: size)
        let response: HTTPResponse
        do throws(TransferFailure) {
            response = try await engine.perform(HTTPRequest(method: "GET", url: url, followRedirects: followRedirects), sink: sink,
                                                control: control, options: configuration.curlOptions)
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason)
            case .failed: return .value(nil)
            }
        }
        let isFile = Self.noFileAnswer(status: response.status, headers: response.headers, rangeAsked: false, url: url) == nil
        return .value(isFile && sink.count == size ? sink.crc32c : nil)
    }

    /// A PUT's refusal. A 404 says the server has no such path to take the upload, or takes none there (a
    /// static server): it read "the upload to http://…/f does not exist", as if the upload were a thing
    /// looked for. A redirect is named with where it led and not followed (`UnfollowedRedirect`).
    static func uploadError(_ response: HTTPResponse, url: String) -> StorageError {
        guard response.status == 404 else {
            return httpError(response, what: "the upload to \(redactedURL(url))", unfollowed: UnfollowedRedirect.upload)
        }
        var error = httpError(response, what: "the upload to \(redactedURL(url))")
        let quoted = error.cause.map { ": \($0)" } ?? ""
        error.message = "the server has no place to upload to at \(redactedURL(url)) (HTTP 404): the path is wrong, or the server "
            + "takes no uploads (PUT) there; check the destination\(quoted)"
        return error
    }

    /// What a HEAD says is at `reference` (size from `Content-Length`, hashes the server reports), nil on
    /// 404 or 410, or the stop reason.
    private func existingFile(_ reference: StorageReference, control: TransferControl) async throws(StorageError) -> StopOr<StorageObject?> {
        let url = reference.description
        let response: HTTPResponse
        switch try await exchange(HTTPRequest(method: "HEAD", url: url), control: control) {
        case .stopped(let reason): return .stopped(reason)
        case .value(let answer): response = answer
        }
        if response.status == 404 || response.status == 410 { return .value(nil) }
        guard response.isSuccess else {
            throw httpError(response, what: "the look at \(redactedURL(url)) before uploading", unfollowed: UnfollowedRedirect.upload)
        }
        // A 204 (or another 2xx that is no file) was a file of size -1 there: `skip` skipped the upload,
        // the job succeeding with nothing uploaded, and `fail` refused it. It tells neither way.
        if let refusal = Self.noFileAnswer(status: response.status, headers: response.headers, rangeAsked: false, url: url,
                                           request: .lookBeforeUpload) {
            throw refusal
        }
        let reported = reportedDigests(response.headers)
        return .value(StorageObject(bucket: reference.bucket, name: reference.fullPath,
                                    size: response.headers["content-length"].flatMap { Int64($0) } ?? -1,
                                    md5Hash: reported.md5, crc32c: reported.crc32c))
    }

    /// `skip`'s upload refused with 412 (a file was written at the URL while it ran): skipped, with the
    /// file as a look finds it — or only its name when the look fails or finds it gone again.
    private func skippedTakenUpload(_ reference: StorageReference, control: TransferControl) async -> TransferOutcome {
        let unknown = StorageObject(bucket: reference.bucket, name: reference.fullPath, size: -1)
        switch try? await existingFile(reference, control: control) {
        case .stopped(let reason)?: return .stopped(reason, nil)
        case .value(let existing)?: return OverwriteRule.skippedUpload(existing ?? unknown)
        case nil: return OverwriteRule.skippedUpload(unknown)
        }
    }

    /// A value, or the stop reason that interrupted fetching it.
    enum StopOr<Value> {
        case value(Value)
        case stopped(StopReason)
    }

    /// A HEAD of `url` (redirects followed) for a look that is only a hint: its answer, or the failure
    /// (the caller decides whether to go on without what it would have said); `stopped` when the
    /// transfer was.
    private func head(_ url: String, control: TransferControl) async -> StopOr<Result<HTTPResponse, StorageError>> {
        do throws(TransferFailure) {
            return .value(.success(try await engine.perform(HTTPRequest(method: "HEAD", url: url, followRedirects: true),
                                                            control: control, options: configuration.curlOptions)))
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason)
            case .failed(let failure): return .value(.failure(failure))
            }
        }
    }

    /// One request without a body, its answer or the stop reason; a transfer failure is thrown as is.
    private func exchange(_ request: HTTPRequest, control: TransferControl) async throws(StorageError) -> StopOr<HTTPResponse> {
        do throws(TransferFailure) {
            return .value(try await engine.perform(request, control: control, options: configuration.curlOptions))
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason)
            case .failed(let failure): throw failure
            }
        }
    }

    /// How the hashes the server reported for the stored file (`x-goog-hash`, `x-amz-checksum-crc32c`)
    /// differ from the uploaded bytes', or nil when they match or none was reported. An MD5 we did not
    /// compute (`md5` nil) is not compared.
    /// Every value the answer gives is compared (`reportedHashValues`): one header sent twice with two
    /// values cannot both describe what was stored, and the last alone decided — an upload passed as
    /// verified beside a value that said otherwise. Two values of one algorithm that disagree are a
    /// mismatch whatever the bytes' (MD5's is not computed when no single MD5 was reported).
    static func reportedHashMismatch(_ headers: [String: String], md5: String?, crc32c: String) -> String? {
        let every = reportedHashValues(headers)
        let reportedMD5 = every.md5.compactMap { canonicalDigest($0, algorithm: .md5) }
        let reportedCRC32C = every.crc32c.compactMap { canonicalDigest($0, algorithm: .crc32c) }
        for (name, values) in [("MD5", Array(Set(reportedMD5))), ("CRC32C", Array(Set(reportedCRC32C)))] where values.count > 1 {
            return "the server reported \(values.count) different \(name)s for the uploaded file (\(values.sorted().joined(separator: ", ")))"
        }
        if let expected = reportedMD5.first, let md5, expected != md5 {
            return "the server stored MD5 \(expected) but the uploaded bytes' is \(md5)"
        }
        if let expected = reportedCRC32C.first, expected != crc32c {
            return "the server stored CRC32C \(expected) but the uploaded bytes' is \(crc32c)"
        }
        return nil
    }

    /// Deletes an upload the server reported with other bytes than were sent; with `If-Match` when the
    /// PUT returned an ETag, so only that version goes. Best effort: what became of the file, as the end
    /// of the error's message (what the user is to do).
    ///
    /// An ETag that cannot be sent back (a control character, which the engine refuses to put in a
    /// header; longer than servers take in a header line, which they refuse) was sent all the same: the
    /// DELETE failed and the message said only that the file could not be deleted. Sending it without
    /// `If-Match` could remove a newer version someone else wrote since, so the file is left, and the
    /// message says why.
    private func deleteBadUpload(_ url: String, etag: String?) async -> String {
        if let etag, let unsendable = HeaderValues.whyNotSendableBack(etag) {
            return "the uploaded file was not deleted: the ETag the server answered with \(unsendable), so it cannot be sent back "
                + "in If-Match, and a delete without it could remove a version someone else wrote since — check the file, delete it "
                + "and upload again"
        }
        let request = HTTPRequest.discardingSuccessBody(method: "DELETE", url: url, headers: etag.map { ["If-Match: \($0)"] } ?? [])
        let response: HTTPResponse
        do throws(TransferFailure) {
            response = try await engine.perform(request, control: nil, options: configuration.curlOptions)
        } catch {
            let why = switch error {
            case .failed(let failure): failure.message
            case .stopped: "the transfer was stopped"
            }
            return "the uploaded file could not be deleted (\(why)) — delete it and upload again"
        }
        if response.isSuccess { return "the uploaded file was deleted — upload again" }
        if response.status == 412 {
            // If-Match compares strongly: a weak ETag (`W/"…"`) never matches, as a version written since does not.
            return "the uploaded file was not deleted: the server answered 412 to the DELETE, as the file no longer matches the "
                + "ETag the upload was answered with (written again since, or a weak ETag) — check the file, delete it and upload again"
        }
        return "the uploaded file could not be deleted (the server answered \(response.status) to the DELETE) — delete it and upload again"
    }

    // MARK: - Download to a file

    private func downloadFile(_ reference: StorageReference, to destination: String, within: String?, md5: Bool, rule: OverwriteRule,
                              resumingFrom resumePoint: ResumePoint?,
                              control: TransferControl,
                              report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let url = reference.description
        // Without a validator a resumed prefix could belong to another version of the file: start over.
        var resume = resumePoint
        var validator: String?
        // The file's size as the answer the kept bytes came from named it (logs before it was recorded: none).
        var kept: Int64?
        // (One that cannot be sent back, from a log written before `validator` left such out, is none.)
        if case .download(_, _, let etag, _, _, let total, _)? = resume, let etag, !etag.isEmpty, HeaderValues.whyNotSendableBack(etag) == nil {
            validator = etag
            kept = total
        } else {
            resume = nil
        }
        let recordedTotal = kept
        let partial = try PartialFile(destination: destination, jobID: control.jobID, leaseToken: control.leaseToken,
                                      resumeFrom: resume, recorded: resumePoint, within: within)
        // The check of the kept bytes hashes them for the whole file's check in the same read.
        let prefixHashes = try await partial.restartUnlessPrefixUnchangedOffPool(md5: md5)
        let start = partial.bytesWritten
        let progress = ProgressThrottle(total: nil, report: report)
        // The total comes with the response headers, which the sink holds once the body starts.
        weak var headersSource: FileSink?
        let sink = FileSink(partial: partial, requestedOffset: start, sentValidator: start > 0 ? validator : nil, md5: md5,
                            prefixHashes: prefixHashes,
                            checkpoint: { partial, headers in
                                .checkpoint(partial.resumePoint(generation: nil, etag: Self.validator(headers, of: url),
                                                                total: Self.fileSize(headers) ?? recordedTotal),
                                            bytesTotal: Self.totalSize(headers, offset: 0))
                            },
                            report: report,
                            progress: { done in
                                if progress.total == nil, let headers = headersSource?.responseHeaders {
                                    progress.total = Self.totalSize(headers, offset: 0)
                                }
                                progress.update(done)
                            })
        headersSource = sink
        sink.startsOver(from: resumePoint)
        sink.needsMD5 = { status, headers in servedDigests(headers, status: status).needMD5(asked: md5) }
        try await sink.hashExistingPrefixOffPool()

        var request = HTTPRequest(method: "GET", url: url, followRedirects: true)
        let rangeAsked = start > 0 && validator != nil
        if rangeAsked, let validator {
            request.headers += ["Range: bytes=\(start)-", "If-Range: \(validator)"]
        }
        // Before anything of an answer that carries no file is written (a 202's status document), nor the
        // rest of another file: a resumed range whose answer names another size than the one the kept
        // bytes came from (`Content-Range: bytes S-E/TOTAL`) is of another version, whatever its validator
        // says — a server that kept its ETag across a change had the two spliced into one file that passed.
        let sizeChanged = Mutex<Bool>(false)
        sink.checkAnswer = { status, headers throws(StorageError) in
            if let refusal = Self.noFileAnswer(status: status, headers: headers, rangeAsked: rangeAsked, url: url) { throw refusal }
            if status == 206, rangeAsked, let recordedTotal, let total = Self.rangeTotal(headers), total != recordedTotal {
                sizeChanged.withLock { $0 = true }
                throw StorageError(.unknown, "the file at \(redactedURL(url)) changed size (\(recordedTotal) bytes when its download began, "
                                       + "\(total) now) though its validator did not; the partial file was dropped and a retry starts "
                                       + "the download again", httpStatus: 206, url: redactedURL(url), retryable: true)
            }
        }
        let response: HTTPResponse
        do throws(TransferFailure) {
            response = try await engine.perform(request, sink: sink, control: control, options: configuration.curlOptions)
        } catch {
            if sizeChanged.withLock({ $0 }), case .failed(let failure) = error {
                await sink.drop()
                throw failure
            }
            // The validator from this response (if any) pins the resumed range to the same version.
            let etag = Self.validator(sink.responseHeaders, of: url) ?? validator
            let total = Self.fileSize(sink.responseHeaders) ?? recordedTotal
            return try await sink.outcome(of: error, bytesTotal: nil, report: report) { partial in
                partial.resumePoint(generation: nil, etag: etag, total: total)
            }
        }
        try await sink.settle()
        var completeBefore: HTTPResponse?
        if response.status == 416 && start > 0 {
            switch Self.unsatisfiedRange(response.headers, held: start, validator: validator, recordedTotal: recordedTotal) {
            case .complete:
                completeBefore = response
            case .otherFile(let why):
                await sink.drop()
                throw StorageError(.unknown, "the file at \(redactedURL(url)) \(why); the partial file was dropped and a retry starts "
                                       + "the download again", httpStatus: 416, url: redactedURL(url), retryable: true)
            }
        }
        if let response = completeBefore {
            // Every byte was there already (an attempt cut after the last one, before the answer's end):
            // the file is the held bytes, checked as a whole answer's would be.
            return try await finishDownload(sink, response: response, reference: reference, md5: md5, rule: rule, destination: destination,
                                        url: url)
        }
        guard response.isSuccess else {
            if response.status != 404 { try? await sink.partial.syncOffPool() } else { await sink.drop() }
            throw httpError(response, what: redactedURL(url))
        }
        // One without a body (a 204) never reached the check above.
        if let refusal = Self.noFileAnswer(status: response.status, headers: response.headers, rangeAsked: rangeAsked, url: url) {
            if refusal.retryable { try? await sink.partial.syncOffPool() } else { await sink.drop() }
            throw refusal
        }
        let emptyAnswer: StorageError?
        do throws(StorageError) {
            try sink.checkEmptyRangeAnswer(status: response.status, headers: response.headers)
            emptyAnswer = nil
        } catch {
            emptyAnswer = error
        }
        // A restart from zero there handed over a checkpoint of no bytes: it reports before the attempt ends.
        try await sink.settle()
        if let emptyAnswer { throw emptyAnswer }
        if response.status == 206, let range = response.headers["content-range"].flatMap(FileSink.rangeBounds),
           sink.offset - 1 > range.last {
            // Bytes past the end of the range the answer names: they belong nowhere it said, and a total
            // written to match would have made the file look whole.
            await sink.drop()
            throw StorageError(.unknown, "the server sent bytes up to \(sink.offset - 1) in an answer for the range \(range.first)-\(range.last); "
                                   + "the partial file was dropped and a retry downloads it again", httpStatus: 206, url: redactedURL(url),
                               retryable: true)
        }
        if response.status == 206, let range = response.headers["content-range"].flatMap(FileSink.rangeBounds),
           sink.offset - 1 < range.last {
            // Short of the range the answer names: cut where only the close framed it, or framed by a
            // Content-Length the range contradicts. With the total unknown (`bytes S-E/*`) nothing below
            // would tell, the offset plus the body always adding up. The bytes that came are the range's.
            try? await sink.partial.syncOffPool()
            throw StorageError(.unknown, "the answer for the range \(range.first)-\(range.last) ended after byte \(sink.offset - 1); "
                                   + "a retry resumes from the last checkpoint the log holds, if any", httpStatus: 206,
                               url: redactedURL(url), retryable: true)
        }
        if response.status == 206, rangeAsked, let recordedTotal, sink.offset > recordedTotal {
            // A resumed range of unknown total (`bytes S-E/*`) ran past the size the kept bytes' answer named.
            await sink.drop()
            throw StorageError(.unknown, "the file at \(redactedURL(url)) changed size (\(recordedTotal) bytes when its download began, "
                                   + "\(sink.offset) bytes came now) though its validator did not; the partial file was dropped and "
                                   + "a retry starts the download again", httpStatus: 206, url: redactedURL(url), retryable: true)
        }
        var expected = Self.totalSize(response.headers, offset: response.status == 206 ? start : 0)
        if expected == nil, Self.isCloseDelimited(response) {
            switch try await sizeOfUnframed(response, url: url, control: control) {
            case .stopped(let reason):
                let etag = Self.validator(response.headers, of: url)
                return try await sink.outcome(of: .stopped(reason), bytesTotal: nil, report: report) { partial in
                    partial.resumePoint(generation: nil, etag: etag)
                }
            case .value(let size): expected = size
            }
        }
        if let expected, sink.offset > expected {
            // More than the answer announced: nothing to resume from.
            await sink.drop()
            throw StorageError(.unknown, "the server sent \(sink.offset) bytes of a file of \(expected); the partial file was dropped "
                                   + "and a retry downloads it again", url: redactedURL(url), retryable: true)
        }
        if let expected, sink.offset != expected {
            try? await sink.partial.syncOffPool()
            throw StorageError(.unknown, "the download ended after \(sink.offset) of \(expected) bytes; a retry resumes from the last checkpoint the log holds, if any",
                               url: redactedURL(url), retryable: true)
        }
        return try await finishDownload(sink, response: response, reference: reference, md5: md5, rule: rule, destination: destination,
                                        url: url)
    }

    /// Verifies a whole download against the hashes the answer served and commits it to the destination
    /// (under `rule`: a destination that appeared meanwhile is refused by `fail`, left by `skip`).
    private func finishDownload(_ sink: FileSink, response: HTTPResponse, reference: StorageReference, md5: Bool, rule: OverwriteRule,
                                destination: String, url: String) async throws(StorageError) -> TransferOutcome {
        // The final response's headers: a 200 after a ranged request (the file changed) replaced the prefix.
        let served = servedDigests(response.headers, status: response.status)
        let ours = try await sink.finishHashesOffPool(md5: served.needMD5(asked: md5))
        let verified: [ChecksumAlgorithm]
        do {
            verified = try served.verify(md5: ours.md5, crc32c: ours.crc32c, what: "downloaded file",
                                         remedy: "the copy was removed — download again", url: redactedURL(url))
        } catch {
            let kept = sink.keepsEarlierBytes
            await sink.drop()
            throw kept ? error.afterKeptPrefix() : error
        }
        guard let path = try await sink.commit(replacing: rule.replaces) else { return try rule.downloadFoundTaken(destination) }
        let object = StorageObject(bucket: reference.bucket, name: reference.fullPath, size: sink.offset,
                                   contentType: response.headers["content-type"], md5Hash: ours.md5, crc32c: ours.crc32c)
        return .finished(JobResult(object: object, path: path, size: sink.offset, md5: ours.md5, crc32c: ours.crc32c,
                                   verified: verified))
    }

    /// What a `416 Range Not Satisfiable` to a resumed range (`Range: bytes=HELD-`) says of the held bytes.
    enum UnsatisfiedRange: Equatable {
        /// The file is exactly the held bytes: the attempt that wrote them was cut after the last one.
        case complete
        /// Another file than the one the held bytes came from; why, for the error.
        case otherFile(String)
    }

    /// Reads a 416 to a resumed range. Its `Content-Range: bytes */TOTAL` (RFC 9110 §15.5.17) names the
    /// file's size: when that is the number of bytes held — and the size the kept bytes' answer named,
    /// when recorded — of the version `If-Range` named (the 416 names that one or none), every byte is
    /// there, as `wget -c` says "already fully retrieved". Such a download was thrown away as "changed
    /// size" and failed for good on its last attempt. Any other 416 is of a file that changed.
    static func unsatisfiedRange(_ headers: [String: String], held: Int64, validator: String?,
                                 recordedTotal: Int64?) -> UnsatisfiedRange {
        let answered = headers["etag"] ?? headers["last-modified"]
        guard let total = rangeTotal(headers) else { return .otherFile("answered 416 to the range from byte \(held) without its size") }
        if total != held || recordedTotal.map({ $0 != total }) == true {
            let then = recordedTotal.map { "\($0) bytes" } ?? "at least the \(held) bytes held"
            return .otherFile("changed size (\(then) when its download began, \(total) now)")
        }
        if let answered, answered != validator {
            return .otherFile("changed: its validator is now '\(answered)', not the '\(validator ?? "")' its held bytes came with")
        }
        return .complete
    }

    /// The error for a successful answer to a download's GET that carries no file, nil for one that does:
    /// a 200 (203: a proxy's copy of it) or, to a range asked for, a 206. A file, even an empty one, comes
    /// as a 200 (of length 0): a `204 No Content` says there is nothing to send (an endpoint with no file,
    /// an export not ready), a 202 that the request was accepted and its result is not there yet — so
    /// fails retryable, as the result may come —, 201, 205, 207 and the rest answer something else. They
    /// were taken as the file, an empty one when they had no body: a job succeeded without it, where
    /// tools that check what they got (rclone's size check) fail. A 206 to a request that asked no range
    /// is part of the file at best; a `Content-Range` of unknown total (`bytes 0-999/*`) let that part
    /// pass for the file.
    ///
    /// get-metadata's HEAD (`request: .metadata`) is held to the same: a HEAD is answered as the GET
    /// would be (RFC 9110 §9.3.2), and a 204 was read as a file of unknown size (-1).
    static func noFileAnswer(status: Int, headers: [String: String], rangeAsked: Bool, url: String,
                             request: NoFileRequest = .download) -> StorageError? {
        switch status {
        case 200, 203: return nil
        case 206 where rangeAsked: return nil
        default: break
        }
        // Made only for an answer that is refused: every download's answer passes through here.
        let asked = switch request {
        case .download: "the download of \(redactedURL(url))"
        case .metadata: "the HEAD asking the metadata of \(redactedURL(url))"
        case .lookBeforeUpload: "the look at \(redactedURL(url)) before uploading (HEAD)"
        }
        let kept = request == .download ? "; nothing was kept" : ""
        switch status {
        case 206:
            return StorageError(.unknown, "the server answered the request for all of \(redactedURL(url)) with part of it (206, "
                                    + "\(headers["content-range"].map { "'Content-Range: \($0)'" } ?? "no Content-Range"))\(kept) "
                                    + "and a retry asks again", httpStatus: 206, url: redactedURL(url), retryable: true)
        case 202:
            return StorageError(.unknown, "the server answered 202 Accepted to \(asked): no file yet (its "
                                    + "request was accepted, the result is not ready)\(kept) and a retry asks again",
                                httpStatus: 202, url: redactedURL(url), retryable: true)
        case 204:
            return StorageError(.unknown, "the server answered 204 No Content to \(asked): no file "
                                    + "(an empty file is answered 200 with a length of 0)\(kept). Check that the URL "
                                    + "names a file", httpStatus: 204, url: redactedURL(url))
        default:
            return StorageError(.unknown, "the server answered \(status) to \(asked), which carries no file "
                                    + "(a file is answered 200)\(kept). Check that the URL names a file",
                                httpStatus: status, url: redactedURL(url))
        }
    }

    /// Which request `noFileAnswer` judges: a download's GET, or get-metadata's HEAD (which keeps nothing).
    enum NoFileRequest {
        case download
        case metadata
        /// The HEAD an upload under `if_exists: skip`, `fail` or `skip-identical` looks with first.
        case lookBeforeUpload
    }

    /// Whether a successful answer's body was framed by nothing but the connection's close: an HTTP/1.x
    /// answer with no `Content-Length`, not chunked (an HTTP/1.0 server, or a middlebox forwarding one).
    /// libcurl takes the close for the end, so a cut looks like a whole answer. Over HTTP/2 the stream
    /// frames the body (a cut one is an error), so no length is needed and none is asked for.
    /// A `Transfer-Encoding` whose last coding is not `chunked` (`identity` from an old server) frames
    /// nothing either: the close ends the body (RFC 9112 §6.3), and libcurl reads it so.
    static func isCloseDelimited(_ response: HTTPResponse) -> Bool {
        response.isHTTP1 && (response.status == 200 || response.status == 203)
            && response.headers["content-length"] == nil && !isChunked(response.headers)
    }

    /// Whether the answer's transfer codings end in `chunked`, which frames its body.
    private static func isChunked(_ headers: [String: String]) -> Bool {
        guard let codings = headers["transfer-encoding"] else { return false }
        return codings.split(separator: ",").last?.trimmingCharacters(in: .whitespaces).lowercased() == "chunked"
    }

    /// The size the server says the file of a close-delimited answer has: none for an answer GCS
    /// decompressed on the way, `x-goog-stored-content-length` (GCS behind a signed URL: the stored
    /// bytes, as served), else a HEAD's `Content-Length` for the same version (its validator, when both
    /// name one, the answer's). Nil when nothing tells (the HEAD is refused — not implemented, or not
    /// allowed by a URL signed for GET — or names no length): the answer is then taken as whole, as curl
    /// takes it. A HEAD that failed as a retry would not (a reset, a stall, 408, 429, 5xx) throws
    /// retryable instead: the size was there to ask for, so a cut answer must not pass for the file
    /// because one look at it was cut too. So does a HEAD that says there is no file (404, 410, a 2xx
    /// other than 200) or whose length frames nothing: see `headSaysNoSize`. Asked only for such
    /// answers, which are rare: a framed one costs no extra request.
    private func sizeOfUnframed(_ response: HTTPResponse, url: String, control: TransferControl) async throws(StorageError) -> StopOr<Int64?> {
        // Decompressed on the way (GCS's transcoding): no length the server keeps describes the body.
        if isTranscoded(response.headers) { return .value(nil) }
        if let stored = response.headers["x-goog-stored-content-length"].flatMap({ Int64($0) }) { return .value(stored) }
        let head: HTTPResponse
        switch await self.head(url, control: control) {
        case .stopped(let reason): return .stopped(reason)
        case .value(.failure(let failure)):
            guard failure.retryable else { return .value(nil) }
            throw unframedSizeUnknown(url, "failed", cause: failure.message)
        case .value(.success(let answered)): head = answered
        }
        switch Self.headSaysNoSize(head) {
        case .lenient: return .value(nil)
        case .refused(let what):
            throw unframedSizeUnknown(url, what, cause: head.isSuccess ? nil : httpError(head, what: redactedURL(url)).message)
        case nil: break
        }
        guard let length = head.headers["content-length"].flatMap({ Int64($0) }) else { return .value(nil) }
        if let answered = Self.validator(response.headers, of: url), let now = Self.validator(head.headers, of: url), answered != now {
            // Another version by now (a file replaced, a page made anew for each request): its size says
            // nothing of this answer's, and a cut one must not pass for the file because of it. The
            // validators are the server's text, not quoted.
            throw StorageError(.unknown, "the answer had no length (the connection's close ended it, so a cut would look whole) and "
                                   + "the HEAD asking the file's size found another version (its ETag, else Last-Modified, is not "
                                   + "the answer's); a retry downloads it again", url: redactedURL(url), retryable: true)
        }
        return .value(length)
    }

    /// What a HEAD asked for the size of a close-delimited answer says when it names no usable length:
    /// `lenient` when the server only declines to tell (the answer is then taken as whole, as curl takes
    /// it), `refused` (what the HEAD did, for the message) when a cut answer must not pass because of it;
    /// nil when its `Content-Length`, if any, is the file's size.
    enum HeadWithoutSize: Equatable {
        case lenient
        case refused(String)
    }

    /// Reads the HEAD's status and framing for `sizeOfUnframed`; each status's treatment is explained beside it.
    static func headSaysNoSize(_ head: HTTPResponse) -> HeadWithoutSize? {
        switch head.status {
        case 200, 203:
            // The file (203: a proxy's copy of its 200, as a download takes it). `Content-Length` beside
            // `Transfer-Encoding` frames nothing (RFC 9112 §6.3: such a message "ought to be handled as an
            // error"): a length that may be anything's must neither pass a cut answer nor fail a whole one
            // for good. A `Transfer-Encoding` alone (chunked: the server does not know the size ahead, a
            // page made as it is sent) tells nothing and is lenient, as a HEAD with no length is.
            guard head.headers["transfer-encoding"] != nil else { return nil }
            guard head.headers["content-length"] != nil else { return .lenient }
            return .refused("answered with both Transfer-Encoding and Content-Length, so its length frames nothing (RFC 9112 §6.3)")
        case 404, 410:
            // No file any more (deleted or moved since the GET answered): the cut answer may be all that
            // is left of it, and must not become the file. The retry meets the 404 and fails as a download
            // of a missing file does (objectNotFound). A server answering HEAD 404 for a file its GET
            // serves is too broken to guess for: HEAD must be answered as GET (RFC 9110 §9.3.2).
            return .refused("found no file (\(head.status))")
        case 201...299:
            // A success that is no file (204 No Content, 202 not ready, 206 part of it, …): what a GET
            // answered so would fail (`noFileAnswer`); it names no size of the file, and a cut answer
            // must not pass for the file because of it. The retry's GET tells what is there.
            return .refused("answered \(head.status), which is no file")
        case 501:
            // HEAD not implemented: the server will never tell, however often it is asked (it is a 5xx,
            // which a retry would otherwise wait out). Lenient, as 405.
            return .lenient
        case 408, 429, 500...599:
            // Busy or failing this time (as a retry takes it): asked again, it may tell the size.
            return .refused("failed")
        default:
            // Refused for good without saying the file is gone: 405 (HEAD not allowed), 403, 401 or 400
            // from a URL signed for GET alone (S3's and GCS's signatures cover the method), a redirect
            // left after those followed. Nothing will tell the size: the answer is taken as curl takes it
            // (README, Known limitations).
            return .lenient
        }
    }

    /// The retryable error of an answer the connection's close ended whose size the HEAD did not tell,
    /// `what` saying what the HEAD did ("failed", "found no file (404)").
    private func unframedSizeUnknown(_ url: String, _ what: String, cause: String?) -> StorageError {
        StorageError(.unknown, "the answer had no length (the connection's close ended it, so a cut would look whole) and the HEAD "
                         + "asking the file's size \(what); a retry asks again", url: redactedURL(url), retryable: true, cause: cause)
    }

    /// The resume validator: the ETag when strong or weak, else Last-Modified. None when it cannot be sent
    /// back (`HeaderValues.whyNotSendableBack`): one holding a control character the engine refuses to put
    /// in `If-Range` (it could add headers), one longer than a header may carry the server refuses (400) —
    /// so it pins no version, and, kept in a resume point, it failed the next attempt for good (`invalidArgument`).
    /// None either when it quotes a secret of the request's `url` (a server echoing its query into the
    /// ETag): kept, the resume point in the log — shown by `history --json` — held the secret.
    private static func validator(_ headers: [String: String], of url: String) -> String? {
        guard let value = headers["etag"] ?? headers["last-modified"], HeaderValues.whyNotSendableBack(value) == nil else { return nil }
        guard SecretRedaction.mayHoldSecret(url) else { return value }
        let secrets = SecretRedaction.secretValues(in: url)
        return SecretRedaction.scrub(value, secrets: secrets) == value ? value : nil
    }

    /// The whole file's size as an answer names it, for a resume point: a range's total (`bytes A-B/TOTAL`;
    /// none for `/*` — its `Content-Length` is the range's, not the file's), else a whole answer's length.
    private static func fileSize(_ headers: [String: String]) -> Int64? {
        headers["content-range"] == nil ? totalSize(headers, offset: 0) : rangeTotal(headers)
    }

    /// The total a `Content-Range: bytes A-B/TOTAL` names; nil without one, or for `/*`.
    private static func rangeTotal(_ headers: [String: String]) -> Int64? {
        guard let range = headers["content-range"], let slash = range.lastIndex(of: "/") else { return nil }
        return Int64(range[range.index(after: slash)...])
    }

    /// The full size from `Content-Range: bytes A-B/TOTAL`, else `offset + Content-Length`. A
    /// `Content-Length` beside `Transfer-Encoding` frames nothing (RFC 9112 §6.3: the transfer coding
    /// wins, and libcurl ignores it) and is not read; one too large to add `offset` to says nothing either.
    private static func totalSize(_ headers: [String: String], offset: Int64) -> Int64? {
        if let range = headers["content-range"], let slash = range.lastIndex(of: "/"),
           let total = Int64(range[range.index(after: slash)...]) {
            return total
        }
        guard headers["transfer-encoding"] == nil, let length = headers["content-length"].flatMap({ Int64($0) }) else { return nil }
        let (total, overflow) = length.addingReportingOverflow(offset)
        return overflow ? nil : total
    }

    // MARK: - Download to memory

    private func downloadMemory(_ reference: StorageReference, maxSize: Int64, md5: Bool, control: TransferControl,
                                report: @escaping @Sendable (TransferEvent) -> Void) async throws(StorageError) -> TransferOutcome {
        let url = reference.description
        let progress = ProgressThrottle(total: nil, report: report)
        let sink = MemorySink(limit: maxSize, url: url, md5: md5, progress: { progress.update($0) })
        sink.needsMD5 = { status, headers in servedDigests(headers, status: status).needMD5(asked: md5) }
        sink.checkAnswer = { status, headers throws(StorageError) in
            if let refusal = Self.noFileAnswer(status: status, headers: headers, rangeAsked: false, url: url) { throw refusal }
            // The size the answer names, for the progress events (a download to memory reported none: no
            // percentage, no ETA in `watch`, `list`, `show`).
            progress.total = Self.totalSize(headers, offset: 0)
        }
        let response: HTTPResponse
        do throws(TransferFailure) {
            response = try await engine.perform(HTTPRequest(method: "GET", url: url, followRedirects: true), sink: sink,
                                                control: control, options: configuration.curlOptions)
        } catch {
            switch error {
            case .stopped(let reason): return .stopped(reason, nil)
            case .failed(let failure): throw failure
            }
        }
        guard response.isSuccess else { throw httpError(response, what: redactedURL(url)) }
        // The request asked for the whole object: a 206 is part of it, a 204 nothing.
        if let refusal = Self.noFileAnswer(status: response.status, headers: response.headers, rangeAsked: false, url: url) {
            throw refusal
        }
        // The size the answer names (a Content-Range's total: a 200 that carries one says the file is
        // larger than its body), else — for an answer the connection's close ended — the one the server
        // tells otherwise: a body of another size is the transfer's fault, not the file's.
        var expected = Self.totalSize(response.headers, offset: 0)
        if expected == nil, Self.isCloseDelimited(response) {
            switch try await sizeOfUnframed(response, url: url, control: control) {
            case .stopped(let reason): return .stopped(reason, nil)
            case .value(let size): expected = size
            }
        }
        if let expected, expected != Int64(sink.data.count) {
            let framing = response.headers["content-length"] == nil ? " (its answer had no length: the connection's close ended it)" : ""
            throw StorageError(.unknown, "the server sent \(sink.data.count) bytes of a file of \(expected)\(framing); nothing was kept "
                                   + "and a retry downloads it again", url: redactedURL(url), retryable: true)
        }
        let served = servedDigests(response.headers, status: response.status)
        let streamed = sink.checksums.finish()
        let data = sink.data
        // An empty body never reached the sink, so it never turned MD5 on: hash it here.
        let ours = served.needMD5(asked: md5) && streamed.md5 == nil
            ? (md5: Optional(Data(Digest.md5(data)).base64EncodedString()), crc32c: streamed.crc32c) : streamed
        let verified = try served.verify(md5: ours.md5, crc32c: ours.crc32c, what: "downloaded data",
                                         remedy: "nothing was kept — download again", url: redactedURL(url))
        let object = StorageObject(bucket: reference.bucket, name: reference.fullPath, size: Int64(data.count),
                                   contentType: response.headers["content-type"], md5Hash: ours.md5, crc32c: ours.crc32c)
        return .finished(JobResult(object: object, size: Int64(data.count), md5: ours.md5, crc32c: ours.crc32c, data: data,
                                   verified: verified))
    }
}
