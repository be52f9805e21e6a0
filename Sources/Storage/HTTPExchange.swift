import Checksums
import Foundation
import JobModel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// MARK: - Requests and responses

/// One HTTP request as plain values; the body is either `body` (small, in memory) or streamed from a
/// `RequestBodySource` of `bodyLength` bytes.
struct HTTPRequest: Sendable {
    var method: String
    var url: String
    /// Complete header lines, `Name: value`.
    var headers: [String] = []
    var body = Data()
    /// The body's length when the request has one (`body.count`, or the streamed source's length).
    var bodyLength: Int64?
    var followRedirects = false
    /// The most a success (2xx) answer's body may hold when no sink takes it (JSON read into memory): a
    /// larger one fails the exchange as the server's fault, saying so (`CurlExchange.answerTooLarge`).
    /// Only the first 64 KiB of any such answer were kept, and a list page of 110 objects (~70 KB) was
    /// then "not JSON"; an endless answer was read for ever.
    var answerLimit = HTTPRequest.jsonAnswerLimit
    /// Whether a success answer's body is read and dropped instead of kept, `answerLimit` not applying:
    /// for the requests whose answer jobctl reads only the status and headers of — a plain-HTTP upload's
    /// PUT, a DELETE over HTTP. A server may answer those with a body of any size (a status page, the
    /// upload echoed back); kept up to `answerLimit`, a 201 with 20 MiB failed an upload that had landed
    /// ("the server's answer was larger than 16 MiB"), and every retry did the same. A body whose
    /// `Content-Length` says it is short is read and dropped (the connection stays for the next request);
    /// any other ends the exchange where the headers end, answered: an endless or trickling one held a job
    /// (or a clean-up DELETE, under no job's limits) for ever.
    var discardsSuccessBody = false

    /// What a JSON API answer can legitimately be: a list page of 1,000 full object resources is ~1 MB
    /// (each ~1 KB, up to ~10 KB with the most custom metadata GCS keeps), an object resource a few KiB.
    static let jsonAnswerLimit = 16 * 1024 * 1024

    init(method: String, url: String, headers: [String] = [], followRedirects: Bool = false) {
        self.method = method
        self.url = url
        self.headers = headers
        self.followRedirects = followRedirects
    }

    /// A request whose success answer's body is read and dropped (see `discardsSuccessBody`).
    static func discardingSuccessBody(method: String, url: String, headers: [String] = []) -> HTTPRequest {
        var request = HTTPRequest(method: method, url: url, headers: headers)
        request.discardsSuccessBody = true
        return request
    }

    /// A request with a small in-memory body (JSON metadata).
    init(method: String, url: String, headers: [String] = [], body: Data) {
        self.init(method: method, url: url, headers: headers)
        self.body = body
        self.bodyLength = Int64(body.count)
    }

    /// The credentials among `headers`: the value of each header named like a secret (`Authorization`,
    /// `X-Api-Key`, … as `SecretRedaction.isSecretName` has it), without its scheme word (the token of
    /// `Bearer TOKEN`: a quote of the header then reads `Bearer REDACTED`).
    static func headerSecrets(_ headers: [String]) -> [String] {
        headers.compactMap { line in
            guard let colon = line.firstIndex(of: ":"), SecretRedaction.isSecretName(line[..<colon]) else { return nil }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            guard let space = value.firstIndex(of: " ") else { return value }
            return value[value.index(after: space)...].trimmingCharacters(in: .whitespaces)
        }
    }
}

/// A complete response: status, headers (lower-cased names; repeated headers joined by `,`) and the
/// body when no sink consumed it (JSON, up to the request's `answerLimit`, none when the request
/// `discardsSuccessBody`; error bodies, cut at 64 KiB).
struct HTTPResponse: Sendable {
    var status: Int
    var headers: [String: String]
    var body: Data
    /// The request URL (may hold secrets: redact before showing it).
    var url: String
    /// The request's header lines (may hold credentials: never shown; see `requestSecrets`).
    var requestHeaders: [String] = []
    /// Whether the answer came over HTTP/1.x, where a body without a length or chunks ends with the
    /// connection; an HTTP/2 or HTTP/3 stream frames its body whatever the headers say.
    var isHTTP1 = true
    /// The URL a followed redirect led to (libcurl's effective URL), when one was followed: its secrets
    /// (a token the redirect added) are the request's too (may hold secrets: never shown whole).
    var redirectedTo: String?

    var isSuccess: Bool { (200..<300).contains(status) }

    /// The most of a non-success answer's body kept (the rest is dropped as it arrives): `serverMessage`
    /// quotes from it.
    static let errorBodyLimit = 64 * 1024

    /// What the request carried that the server's text must not be quoted with: its header credentials
    /// and its URL's secret values (a server may echo the request target, `/a?sig=…`, with no URL
    /// around it for `SecretRedaction.redactURLs` to find).
    /// Worked out only when an error quotes the server (not for every answer).
    /// The proxies' credentials (libcurl's, from the process's environment) are among them: a proxy may
    /// answer in the server's place (a 407 quoting `Proxy-Authorization: Basic …`).
    var requestSecrets: [String] {
        HTTPRequest.headerSecrets(requestHeaders) + SecretRedaction.secretValues(in: url)
            + (redirectedTo.map { SecretRedaction.secretValues(in: $0) } ?? [])
            + ProxyEnvironment.secretValues(environment: ProcessInfo.processInfo.environment)
    }

    /// The JSON body as a dictionary, when it is one.
    var json: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: body)) as? [String: Any]
    }
}

/// Produces a request body on the engine thread. Returns 0 at the end.
///
/// Every body can be rewound: libcurl re-sends a request on a fresh connection when a reused
/// keep-alive connection dies under it, and it must read the body again from the start.
protocol RequestBodySource: AnyObject {
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(StorageError) -> Int
    /// Moves to `position` bytes from the start of this body; false when that is not a position in it.
    func rewind(to position: Int64) -> Bool
    /// Whether the next `count` bytes can be read now without waiting (for hashing that fell behind);
    /// false pauses the exchange until it can (`CurlExchange`).
    func mayGive(_ count: Int) -> Bool
}

extension RequestBodySource {
    func mayGive(_ count: Int) -> Bool { true }
}

/// Consumes a 2xx response body on the engine thread; throwing aborts the exchange with that error.
protocol ResponseBodySink: AnyObject {
    func write(_ bytes: UnsafeRawBufferPointer, status: Int, headers: [String: String]) throws(StorageError)
    /// Whether `write` of the next `count` bytes can go on now without waiting (for hashing that fell
    /// behind); false pauses the exchange until it can (`CurlExchange`).
    func mayTake(_ count: Int) -> Bool
}

extension ResponseBodySink {
    func mayTake(_ count: Int) -> Bool { true }
}

// MARK: - A request that may have arrived unanswered

/// A DELETE's word on whether a copy of it may have reached the server unanswered (`CurlEngine.perform`'s
/// `requestSent`): then the object may be gone by its doing, and a 404 is taken as the delete done —
/// by this attempt after libcurl's resend, or by the next one, told so by `ResumePoint.sentDelete`.
final class DeleteSent: Sendable {
    private let flag = Atomic<Bool>(false)

    /// For `requestSent`.
    var note: @Sendable () -> Void { { self.flag.store(true, ordering: .relaxed) } }

    /// Whether a copy may have arrived unanswered.
    var isSet: Bool { flag.load(ordering: .relaxed) }

    /// A DELETE that failed or stopped: a stop keeps `sentDelete` when the request may have arrived; a
    /// failure reports it first, so the failed attempt leaves it to the next one.
    func ended(_ error: TransferFailure, report: @Sendable (TransferEvent) -> Void) throws(StorageError) -> TransferOutcome {
        switch error {
        case .stopped(let reason): return .stopped(reason, isSet ? .sentDelete : nil)
        case .failed(let failure):
            if isSet { report(.checkpoint(.sentDelete, bytesTotal: nil)) }
            throw failure
        }
    }
}

// MARK: - Checksums while streaming

/// CRC32C — and MD5 when asked for — over a byte stream that may revisit a prefix (a chunk re-sent
/// after the server kept only part of it): bytes at or below `hashedUpTo` are not hashed twice.
///
/// Hashing runs on a `PipelinedChecksums` queue past the first MiB, so the engine thread goes back to
/// curl while the bytes are hashed.
final class StreamChecksums {
    private var hashes: PipelinedChecksums
    private(set) var hashedUpTo: Int64 = 0
    /// Whether MD5 is computed (CRC32C always is).
    var computesMD5: Bool { hashes.computesMD5 }
    /// False when a gap made the hashes meaningless (then they are not compared).
    private(set) var isContiguous = true
    /// The bytes copied and not yet hashed that the stream holds at most (`PipelinedChecksums`).
    private let backlogBytes: Int

    /// The backlog of the streams a task makes (tests make it one block, so that a stream's hashing
    /// falls behind at once).
    @TaskLocal static var backlogBytes = PipelinedChecksums.defaultBacklogBytes

    /// A stream that computes MD5 only when `md5` is true.
    init(md5: Bool = false) {
        backlogBytes = Self.backlogBytes
        hashes = PipelinedChecksums(md5: md5, backlogBytes: backlogBytes)
    }

    /// Starts computing MD5 too, which is possible only before the first byte; false after it (the
    /// caller then hashes the bytes again at the end).
    @discardableResult
    func enableMD5() -> Bool {
        if computesMD5 { return true }
        guard hashedUpTo == 0 else { return false }
        hashes = PipelinedChecksums(md5: true, backlogBytes: backlogBytes)
        return true
    }

    /// Hashes the part of `bytes` (which starts at `offset` in the stream) not hashed yet.
    func feed(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        guard offset <= hashedUpTo else {
            isContiguous = false
            return
        }
        let skip = Int(hashedUpTo - offset)
        guard skip < bytes.count else { return }
        let fresh = UnsafeRawBufferPointer(rebasing: bytes[skip...])
        hashes.update(fresh)
        hashedUpTo += Int64(fresh.count)
    }

    /// Whether `feed` of the next `count` bytes would not wait for the hashing queue (see
    /// `PipelinedChecksums.reserve(forNext:)`); a stream without MD5 never waits.
    func mayTake(_ count: Int) -> Bool {
        hashes.reserve(forNext: count)
    }

    /// Starts again from byte 0.
    func reset() {
        hashes = PipelinedChecksums(md5: computesMD5, backlogBytes: backlogBytes)
        hashedUpTo = 0
        isContiguous = true
    }

    /// Base64 MD5 (nil when not computed) and CRC32C (GCS's encoding). Call once, at the end.
    func finish() -> (md5: String?, crc32c: String) {
        let result = hashes.finish()
        return (result.md5Base64, result.crc32cBase64)
    }
}

/// The hashes a response reports for the whole stored object, base64 as GCS encodes them:
/// `x-goog-hash: crc32c=…,md5=…` (GCS, on JSON and XML API answers and signed-URL uploads) and
/// `x-amz-checksum-crc32c` (S3, when the upload asked for it). ETags are not read: nginx's is
/// mtime-size, and S3's is an MD5 only for some uploads.
func reportedHashes(_ headers: [String: String]) -> (md5: String?, crc32c: String?) {
    let every = reportedHashValues(headers)
    return (every.md5.count == 1 ? every.md5.first : nil, every.crc32c.count == 1 ? every.crc32c.first : nil)
}

/// Every distinct MD5 and CRC32C value the answer's hash headers give (`x-goog-hash`'s, then
/// `x-amz-checksum-crc32c`), as written. A header sent twice (a cache or proxy adding its own) is one
/// line of comma-separated values here, and a value of each algorithm is kept, not only the last:
/// `reportedHashes` gives one only when they agree, and an upload's check compares every one.
func reportedHashValues(_ headers: [String: String]) -> (md5: [String], crc32c: [String]) {
    var md5: [String] = []
    var crc32c: [String] = []
    func add(_ value: String, to values: inout [String]) { if !values.contains(value) { values.append(value) } }
    for item in (headers["x-goog-hash"] ?? "").split(separator: ",") {
        let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
        guard pair.count == 2 else { continue }
        if pair[0] == "md5" { add(pair[1], to: &md5) }
        if pair[0] == "crc32c" { add(pair[1], to: &crc32c) }
    }
    for item in (headers["x-amz-checksum-crc32c"] ?? "").split(separator: ",") {
        add(item.trimmingCharacters(in: .whitespaces), to: &crc32c)
    }
    return (md5, crc32c)
}

/// `reportedHashes` as a plain HTTP server may write them, read the way a download's digests are
/// (`canonicalDigest`): a CRC32C as base64 or as 8 hex digits, in GCS's base64; a value that is no digest
/// of its algorithm is none (nil). Compared with an upload's bytes, a value that cannot be read is no
/// proof of other bytes, and must not have the uploaded file deleted.
func reportedDigests(_ headers: [String: String]) -> (md5: String?, crc32c: String?) {
    let reported = reportedHashes(headers)
    return (reported.md5.flatMap { canonicalDigest($0, algorithm: .md5) },
            reported.crc32c.flatMap { canonicalDigest($0, algorithm: .crc32c) })
}

// MARK: - Upload sources

/// The bytes of an upload: a local file read with `pread` (never loaded whole) or inline data.
final class UploadSource {
    private enum Storage {
        case file(descriptor: Int32, path: String)
        case data(Data)
    }

    private let storage: Storage
    let size: Int64
    /// The file as it was opened (nil for data): checked again before its last bytes are handed over.
    let stamp: SourceStamp?

    /// Opens a local file for reading. Missing or unreadable files are `pathError` (not retryable), as is
    /// anything but a regular file (a FIFO is refused, not waited on), and — when `followingLinks` is
    /// false — a symbolic link.
    /// A folder or glob expansion's file (`batch`) is reached without following links below the folder
    /// (`LocalFiles.openUploadSource`).
    init(path: String, followingLinks: Bool = true, batch: JobBatch? = nil) throws(StorageError) {
        let (descriptor, info, notRegular) = batch == nil
            ? LocalFiles.openRegularForReading(path, followingLinks: followingLinks, allowingDirectories: false)
            : try LocalFiles.openUploadSource(path, batch: batch)
        if let notRegular {
            throw StorageError(.pathError, "the source '\(path)' is \(notRegular), not a regular file: nothing was read from it")
        }
        guard descriptor >= 0 else {
            throw posixError(errno, operation: "cannot open the source file", path: path)
        }
        try LocalFiles.refuseGeneratedSource(descriptor, path: path)
        storage = .file(descriptor: descriptor, path: path)
        size = Int64(info.st_size)
        stamp = SourceStamp(info)
    }

    init(data: Data) {
        storage = .data(data)
        size = Int64(data.count)
        stamp = nil
    }

    deinit {
        if case .file(let descriptor, _) = storage { close(descriptor) }
    }

    /// Reads up to `buffer.count` bytes at `offset`; 0 at the end.
    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws(StorageError) -> Int {
        let wanted = Int(min(Int64(buffer.count), max(0, size - offset)))
        guard wanted > 0, let base = buffer.baseAddress else { return 0 }
        switch storage {
        case .file(let descriptor, let path):
            while true {
                let count = pread(descriptor, base, wanted, off_t(offset))
                if count >= 0 {
                    if count == 0 {
                        throw UploadSource.sourceShrank(path, expected: size, found: offset)
                    }
                    // Before the last bytes go out: a file written to meanwhile would make an object of two
                    // versions (whose checksums match what was sent), so it is refused while nothing is stored.
                    if offset + Int64(count) == size, let stamp { try Self.checkUnchanged(descriptor, path: path, since: stamp) }
                    return count
                }
                if errno == EINTR { continue }
                throw posixError(errno, operation: "cannot read the source file", path: path)
            }
        case .data(let data):
            data.withUnsafeBytes { bytes in
                let start = bytes.baseAddress! + Int(offset)   // offset < size == bytes.count
                base.copyMemory(from: start, byteCount: wanted)
            }
            return wanted
        }
    }

    /// Throws when the open file no longer is what `stamp` recorded (its size, modification or change time):
    /// retryable, as a file being written is often finished soon; the next attempt starts from its start.
    static func checkUnchanged(_ descriptor: Int32, path: String, since stamp: SourceStamp) throws(StorageError) {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw posixError(errno, operation: "cannot check the source file", path: path) }
        let now = SourceStamp(info)
        guard !now.isUnchanged(since: stamp) else { return }
        throw sourceChanged(path, now: now, then: stamp)
    }

    /// The error for a source file that changed while its upload read it.
    /// The source ended before the size it had when the upload began (`found` bytes read of `expected`):
    /// changed, as `sourceChanged` says of one written to or grown — retryable, the next attempt reading it
    /// as it then is.
    static func sourceShrank(_ path: String, expected: Int64, found: Int64) -> StorageError {
        StorageError(.pathError, "the source file '\(path)' shrank while it was being uploaded (it ended after \(found) bytes, not the "
                         + "\(expected) it held when the upload began); the object was not written — a retry uploads the file again "
                         + "from its start", retryable: true)
    }

    static func sourceChanged(_ path: String, now: SourceStamp, then: SourceStamp) -> StorageError {
        let what = now.size != then.size ? "it holds \(now.size) bytes, not the \(then.size) it held when the upload began"
            : "it was written to after the upload began"
        return StorageError(.pathError, "the source file '\(path)' changed while it was being uploaded (\(what)); the object was not "
                                + "written — a retry uploads the file again from its start",
                            retryable: true)
    }

    /// CRC32C — and MD5 when the stream computed it or `md5` is true — of every byte of the source:
    /// the streamed hashes when they cover it all in order with every hash wanted, else computed again
    /// (a skipped range must never go unverified).
    func hashes(streamed: StreamChecksums, md5: Bool = false) throws(StorageError) -> (md5: String?, crc32c: String) {
        if let hashes = Self.streamedHashes(streamed, size: size, md5: md5) { return hashes }
        return try readHashes(md5: md5 || streamed.computesMD5)
    }

    /// `hashes(streamed:md5:)` with the source read again, when it must be, on `FileIO`'s threads: a
    /// large file read on the cooperative pool held back every task of the worker (its heartbeats too).
    func hashesOffPool(streamed: StreamChecksums, md5: Bool = false) async throws(StorageError) -> (md5: String?, crc32c: String) {
        if let hashes = Self.streamedHashes(streamed, size: size, md5: md5) { return hashes }
        let wantsMD5 = md5 || streamed.computesMD5
        return try await FileIO.run(.rehashSource, on: self) { source throws(StorageError) in try source.readHashes(md5: wantsMD5) }
    }

    /// The streamed hashes when they cover the whole source with the algorithms asked for, else nil.
    private static func streamedHashes(_ streamed: StreamChecksums, size: Int64, md5: Bool) -> (md5: String?, crc32c: String)? {
        let wantsMD5 = md5 || streamed.computesMD5
        guard streamed.isContiguous && streamed.hashedUpTo == size && streamed.computesMD5 == wantsMD5 else { return nil }
        return streamed.finish()
    }

    /// The hashes of the whole source, read from its start.
    private func readHashes(md5: Bool) throws(StorageError) -> (md5: String?, crc32c: String) {
        let fresh = StreamChecksums(md5: md5)
        try hashPrefix(upTo: size, into: fresh)
        return fresh.finish()
    }

    /// Hashes bytes `0..<end` into `checksums` (a resumed upload re-hashes what the server already has).
    func hashPrefix(upTo end: Int64, into checksums: StreamChecksums) throws(StorageError) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var offset = checksums.hashedUpTo
        while offset < end {
            let slice = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(buffer.count), end - offset))])
            let count = try read(at: offset, into: slice)
            checksums.feed(UnsafeRawBufferPointer(rebasing: slice[0..<count]), at: offset)
            offset += Int64(count)
        }
    }
}

/// Streams `source[start..<end]` as one request body, hashing and reporting progress as it goes.
///
/// A rewind re-reads bytes already sent; `StreamChecksums` does not hash them twice.
final class UploadRangeBody: RequestBodySource {
    private let source: UploadSource
    private var offset: Int64
    private let start: Int64
    private let end: Int64
    private let checksums: StreamChecksums
    private let progress: (Int64) -> Void

    init(source: UploadSource, start: Int64, end: Int64, checksums: StreamChecksums, progress: @escaping (Int64) -> Void) {
        self.source = source
        self.offset = start
        self.start = start
        self.end = end
        self.checksums = checksums
        self.progress = progress
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(StorageError) -> Int {
        guard offset < end else { return 0 }
        let limited = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(buffer.count), end - offset))])
        let count = try source.read(at: offset, into: limited)
        checksums.feed(UnsafeRawBufferPointer(rebasing: limited[0..<count]), at: offset)
        offset += Int64(count)
        progress(offset)
        return count
    }

    func rewind(to position: Int64) -> Bool {
        guard position >= 0, position <= end - start else { return false }
        offset = start + position
        progress(offset)
        return true
    }

    func mayGive(_ count: Int) -> Bool {
        checksums.mayTake(count)
    }

    /// The bytes this body streams.
    var length: Int64 { end - start }
}

/// A `multipart/related` request body (a GCS upload in one request): `head` (the opening boundary, the
/// metadata part, the media part's headers), then the source's bytes through `media` (hashed and reported
/// as they go), then `tail` (the closing boundary). A rewind (libcurl re-sending on a fresh connection)
/// may land in any of the three.
final class MultipartUploadBody: RequestBodySource {
    private let head: [UInt8]
    private let media: UploadRangeBody
    private let tail: [UInt8]
    private var position: Int64 = 0

    init(head: [UInt8], media: UploadRangeBody, tail: [UInt8]) {
        self.head = head
        self.media = media
        self.tail = tail
    }

    private var mediaLength: Int64 { media.length }

    /// The body's length: what `Content-Length` says.
    var length: Int64 { Int64(head.count) + mediaLength + Int64(tail.count) }

    private var mediaStart: Int64 { Int64(head.count) }
    private var mediaEnd: Int64 { mediaStart + mediaLength }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(StorageError) -> Int {
        if position < mediaStart {
            return copy(head, from: Int(position), into: buffer)
        }
        if position < mediaEnd {
            let count = try media.read(into: buffer)
            position += Int64(count)
            return count
        }
        return copy(tail, from: Int(position - mediaEnd), into: buffer)
    }

    private func copy(_ part: [UInt8], from index: Int, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let count = min(buffer.count, part.count - index)
        guard count > 0, let base = buffer.baseAddress else { return 0 }
        part.withUnsafeBytes { bytes in base.copyMemory(from: bytes.baseAddress! + index, byteCount: count) }
        position += Int64(count)
        return count
    }

    func rewind(to position: Int64) -> Bool {
        guard position >= 0, position <= length else { return false }
        guard media.rewind(to: min(max(0, position - mediaStart), mediaLength)) else { return false }
        self.position = position
        return true
    }

    func mayGive(_ count: Int) -> Bool {
        position >= mediaStart && position < mediaEnd ? media.mayGive(count) : true
    }
}

// MARK: - Download sinks

/// Hashes a response body (CRC32C) and counts it, keeping nothing; past `limit` bytes it stops the
/// exchange (the body cannot be the one it is compared with).
final class HashingSink: ResponseBodySink {
    private let checksums = StreamChecksums(md5: false)
    private let limit: Int64
    private(set) var count: Int64 = 0

    init(limit: Int64) {
        self.limit = limit
    }

    func write(_ bytes: UnsafeRawBufferPointer, status: Int, headers: [String: String]) throws(StorageError) {
        guard count + Int64(bytes.count) <= limit else {
            throw StorageError(.unknown, "the file holds more than the \(limit) bytes it is compared with")
        }
        checksums.feed(bytes, at: count)
        count += Int64(bytes.count)
    }

    /// The CRC32C of what was written.
    var crc32c: String { checksums.finish().crc32c }
}

/// Collects a response body in memory, refusing to grow past `limit` (download-memory).
final class MemorySink: ResponseBodySink {
    private(set) var data = Data()
    let limit: Int64
    let checksums: StreamChecksums
    private let progress: (Int64) -> Void
    private let url: String
    /// Decides at the first body byte, from the status and headers, whether MD5 must be computed too.
    var needsMD5: ((Int, [String: String]) -> Bool)?
    /// Checks the answer at its first body byte, before anything of it is kept (a GCS download: the
    /// generation asked for); what it throws fails the exchange.
    var checkAnswer: ((Int, [String: String]) throws(StorageError) -> Void)?

    /// A sink that computes MD5 from the start when `md5` is true.
    init(limit: Int64, url: String, md5: Bool = false, progress: @escaping (Int64) -> Void) {
        self.checksums = StreamChecksums(md5: md5)
        self.limit = limit
        self.url = url
        self.progress = progress
    }

    func write(_ bytes: UnsafeRawBufferPointer, status: Int, headers: [String: String]) throws(StorageError) {
        if data.isEmpty, let checkAnswer { try checkAnswer(status, headers) }
        if data.isEmpty, let length = headers["content-length"].flatMap({ Int64($0) }), length > limit {
            // Refused before reading the body: the server announced more than we accept.
            throw StorageError.downloadSizeExceeded("the object", size: length, maximum: limit, url: redactedURL(url))
        }
        if Int64(data.count + bytes.count) > limit {
            throw StorageError.downloadSizeExceeded("the object", size: nil, maximum: limit, url: redactedURL(url))
        }
        if data.isEmpty, needsMD5?(status, headers) == true { checksums.enableMD5() }
        checksums.feed(bytes, at: Int64(data.count))
        data.append(contentsOf: bytes)
        progress(Int64(data.count))
    }

    func mayTake(_ count: Int) -> Bool {
        checksums.mayTake(count)
    }
}

/// Writes a response body through a `PartialFile`, hashing, syncing and checkpointing as it goes; a
/// checkpoint's sync runs off the engine thread (`BackgroundSyncs`), and `settle()` waits for it.
///
/// When a ranged request is answered with anything but a 206 (a 200 or 203 carries the whole body, a
/// 204 or an empty 200 an empty one), the partial file and the hashes start again from zero.
final class FileSink: ResponseBodySink {
    let partial: PartialFile
    let checksums: StreamChecksums
    /// Decides at the first body byte, from the status and headers, whether MD5 must be computed too.
    /// When bytes were hashed before (a resumed download) it cannot start then: the caller hashes the
    /// file again at the end (`checksums.computesMD5` is false).
    var needsMD5: ((Int, [String: String]) -> Bool)?
    /// Checks the answer at its first body byte, before anything of it is written (a GCS download: the
    /// generation asked for); what it throws fails the exchange.
    var checkAnswer: ((Int, [String: String]) throws(StorageError) -> Void)?
    private(set) var offset: Int64
    private var lastCheckpoint: Int64
    private let requestedOffset: Int64
    /// Makes a checkpoint's report from the partial file (its byte count and resume point, made durable
    /// by the sync that follows) and the response headers.
    private let checkpoint: (PartialFile, [String: String]) -> TransferEvent
    /// Where a checkpoint's report goes once its sync returned.
    private let report: @Sendable (TransferEvent) -> Void
    /// The checkpoints' syncs, off the engine thread (see `BackgroundSyncs`): made at the first one
    /// handed over, so a download of less than a checkpoint (nearly every small file) makes none.
    private var syncs: BackgroundSyncs?
    /// Whether the partial file is on a filesystem kept in memory, where a sync returns at once and is
    /// made here (asked once, at the first checkpoint).
    private lazy var inMemory = partial.onMemoryFilesystem
    /// The headers of the response being written (ETag, Last-Modified, Content-Range).
    private(set) var responseHeaders: [String: String] = [:]
    private let progress: (Int64) -> Void
    /// Bytes between two durable checkpoints.
    static let checkpointInterval: Int64 = 8 * 1024 * 1024
    private(set) var restartedFromZero = false
    /// Whether the file holds bytes an earlier attempt kept (a resumed prefix not since dropped): a hash
    /// that fails at the end may be theirs (`StorageError.afterKeptPrefix`).
    private(set) var keepsEarlierBytes: Bool
    /// Whether any body byte of this response arrived (the 200-instead-of-206 check runs once).
    private var receivedAny = false
    /// Whether the log may hold a resume point with bytes in it: the download resumed from one, or a
    /// checkpoint was handed over since. When such bytes go (`restartFromZero`, `drop`), a checkpoint of
    /// none says so — else the attempt failed with the old point standing, and the next was logged as
    /// resuming from bytes it downloaded again (its `moved_bytes` and rate short by them).
    private var logHoldsBytes: Bool

    /// The `If-Range` validator the request sent (the ETag, else Last-Modified of the version the prefix
    /// came from); a 206 naming another version is refused (`checkRange`).
    private let sentValidator: String?

    /// A sink that computes MD5 from the start when `md5` is true.
    /// `prefixHashes`: a stream that already hashed every byte kept in `partial`, in order (the check of
    /// the kept bytes fed them: `restartUnlessPrefixUnchangedOffPool(md5:)`); nil for a fresh one,
    /// of MD5 too when `md5`.
    init(partial: PartialFile, requestedOffset: Int64, sentValidator: String? = nil, md5: Bool = false,
         prefixHashes: StreamChecksums? = nil,
         checkpoint: @escaping (PartialFile, [String: String]) -> TransferEvent, report: @escaping @Sendable (TransferEvent) -> Void,
         progress: @escaping (Int64) -> Void) {
        self.sentValidator = sentValidator
        self.partial = partial
        self.checksums = prefixHashes ?? StreamChecksums(md5: md5)
        self.offset = partial.bytesWritten
        self.lastCheckpoint = partial.bytesWritten
        self.logHoldsBytes = partial.bytesWritten > 0
        self.keepsEarlierBytes = partial.bytesWritten > 0
        self.requestedOffset = requestedOffset
        self.checkpoint = checkpoint
        self.report = report
        self.progress = progress
    }

    /// A 206 must carry the bytes asked for: one range (`Content-Range: bytes A-B/…`) starting at the
    /// offset the request named, of the version the prefix came from. Any other answer (another start,
    /// no range, several ranges, the `*/SIZE` form; an ETag — or a Last-Modified — other than the
    /// `If-Range` sent, from a server that ignored it) would be written at the wrong place or after
    /// another version's bytes, and over plain HTTP without a served hash nothing after would notice
    /// (the sizes can add up). The partial file is dropped — a server that answers ranges wrongly is not
    /// asked for one again — and the attempt fails, retryable: the next downloads the whole file.
    ///
    /// Checked at the first body byte, and after the response when none came (a 206 with no body).
    func checkRange(_ headers: [String: String]) throws(StorageError) {
        let contentRange = headers["content-range"]
        let answered = headers["etag"] ?? headers["last-modified"]
        // A 206 names its version (RFC 9110 §15.3.7: the ETag a 200 would carry). One naming none cannot
        // show it is the version of the If-Range sent: a server that ignored If-Range and sent no
        // validator either spliced another version's bytes onto the prefix.
        let otherVersion = sentValidator != nil && answered != sentValidator
        if let contentRange, Self.rangeStart(contentRange) == requestedOffset, !otherVersion { return }
        try restartFromZero()
        let what = !otherVersion ? contentRange.map { "'Content-Range: \($0)'" } ?? "no Content-Range"
            : answered.map { "another version ('\($0)', not the '\(sentValidator ?? "")' of If-Range)" }
            ?? "no ETag or Last-Modified to show it is the version of If-Range '\(sentValidator ?? "")'"
        throw StorageError(.unknown, "the server answered the range from byte \(requestedOffset) with \(what); the partial download "
                               + "was dropped and a retry downloads the whole file", retryable: true)
    }

    /// Empties the partial file and forgets its hashes and checkpoints: the download starts at byte 0,
    /// and a checkpoint of no bytes replaces the log's (handed over after the earlier ones, which it follows).
    private func restartFromZero() throws(StorageError) {
        try partial.restart()
        checksums.reset()
        offset = 0
        lastCheckpoint = 0
        keepsEarlierBytes = false
        if logHoldsBytes {
            try handOver(.checkpoint(partial.resumePoint(generation: nil, etag: nil), bytesTotal: nil))
            logHoldsBytes = false
        }
    }

    /// A download that could not resume from the log's point (`recorded`: another version, no validator,
    /// its file gone; a sliced download's point, which one stream does not continue) starts at byte 0:
    /// a checkpoint of no bytes says so before any other, else an attempt failing before its first
    /// checkpoint left the old point standing for the next.
    func startsOver(from recorded: ResumePoint?) {
        guard offset == 0, let recorded, recorded.isDownload, recorded.bytesDone > 0 else { return }
        report(.checkpoint(partial.droppedPoint, bytesTotal: nil))
    }

    /// Removes the partial file (a download nothing can resume from) once the checkpoints handed over
    /// reported, and reports a checkpoint of no bytes when the log may hold one with bytes: the next
    /// attempt starts at byte 0, and the log says so.
    func drop() async {
        await syncs?.settle()
        partial.discard()
        reportDropped()
    }

    /// Renames the finished file into place (`PartialFile.commitUnlessTaken`); nil when the destination was
    /// found taken under `replacing: false` (`if_exists: fail` or `skip`). A commit that refused removes the
    /// file (that, or its temporary name or folder taken over): a checkpoint of no bytes then reports, as
    /// `drop()` does. Called after `settle()`.
    func commit(replacing: Bool) async throws(StorageError) -> String? {
        let path: String?
        do {
            path = try await partial.commitOffPool(replacing: replacing)
        } catch {
            if partial.removed { reportDropped() }
            throw error
        }
        if path == nil { reportDropped() }
        return path
    }

    /// The checkpoint of no bytes of a partial file just removed, when the log may hold one with bytes
    /// (the checkpoints handed over have reported). Not after a checkpoint's sync failed: the download
    /// ends with that failure (see `outcome`).
    private func reportDropped() {
        guard logHoldsBytes, syncs?.failure == nil else { return }
        logHoldsBytes = false
        report(.checkpoint(partial.droppedPoint, bytesTotal: nil))
    }

    /// Hands a checkpoint's report over: made once the partial file is synced (off the engine thread
    /// unless the file is in memory).
    private func handOver(_ event: TransferEvent) throws(StorageError) {
        if inMemory {
            try partial.sync()
            report(event)
        } else {
            let report = report
            let syncs = self.syncs ?? BackgroundSyncs(path: partial.tempPath)
            self.syncs = syncs
            syncs.sync(try partial.duplicateDescriptor()) { report(event) }
        }
    }

    /// After a successful response whose body never came, so was not checked at its first byte: a 206
    /// must still name the range asked for; any other answer to a ranged request says the object is now
    /// empty, so the prefix must not stand for it.
    func checkEmptyRangeAnswer(status: Int, headers: [String: String]) throws(StorageError) {
        guard !receivedAny else { return }
        if status == 206 {
            try checkRange(headers)
        } else if requestedOffset > 0 && offset > 0 {
            try restartFromZero()
            restartedFromZero = true
        }
    }

    /// The first byte of `bytes A-B/TOTAL` (or `bytes A-B/*`), nil for anything else.
    static func rangeStart(_ contentRange: String) -> Int64? {
        rangeBounds(contentRange)?.first
    }

    /// The first and last byte of `bytes A-B/TOTAL` (or `bytes A-B/*`), nil for anything else.
    static func rangeBounds(_ contentRange: String) -> (first: Int64, last: Int64)? {
        let value = contentRange.trimmingCharacters(in: .whitespaces)
        guard value.lowercased().hasPrefix("bytes "), let dash = value.firstIndex(of: "-"),
              let slash = value.firstIndex(of: "/"), dash < slash else { return nil }
        let first = value[value.index(value.startIndex, offsetBy: 6)..<dash].trimmingCharacters(in: .whitespaces)
        let last = value[value.index(after: dash)..<slash].trimmingCharacters(in: .whitespaces)
        guard let start = Int64(first), let end = Int64(last), start >= 0, end >= start else { return nil }
        return (start, end)
    }

    /// Hashes the bytes already in the partial file (a resumed download), unless the stream already has.
    func hashExistingPrefix() throws(StorageError) {
        guard offset > checksums.hashedUpTo else { return }
        var position: Int64 = 0
        let checksums = self.checksums
        try partial.readBack { bytes in
            checksums.feed(bytes, at: position)
            position += Int64(bytes.count)
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer, status: Int, headers: [String: String]) throws(StorageError) {
        try checkSyncs()
        defer { receivedAny = true }
        // Before anything of the answer touches the file (a restart from zero included).
        if !receivedAny, let checkAnswer { try checkAnswer(status, headers) }
        if !receivedAny, requestedOffset > 0, status != 206 {
            // Not a part (the server ignored Range, If-Range failed, or a 203 from a proxy): the body is
            // the whole object, so start over with it.
            try restartFromZero()
            restartedFromZero = true
        }
        if !receivedAny, status == 206 {
            try checkRange(headers)
        }
        if !receivedAny, needsMD5?(status, headers) == true { checksums.enableMD5() }
        responseHeaders = headers
        try partial.write(bytes)
        checksums.feed(bytes, at: offset)
        offset += Int64(bytes.count)
        progress(offset)
        if offset - lastCheckpoint >= Self.checkpointInterval {
            try handOver(checkpoint(partial, headers))
            logHoldsBytes = true
            lastCheckpoint = offset
        }
    }

    func mayTake(_ count: Int) -> Bool {
        checksums.mayTake(count)
    }

    /// Waits for the checkpoint syncs handed over (their reports are out when it returns). A sync that
    /// failed fails the download, as it did when syncs were made in `write`.
    func settle() async throws(StorageError) {
        await syncs?.settle()
        try checkSyncs()
    }

    /// Throws the failure of a checkpoint's sync, if one failed, removing the partial file as a failed
    /// download does when no attempt will use it (lack of space, or a failure not worth retrying).
    private func checkSyncs() throws(StorageError) {
        guard let failure = syncs?.failure else { return }
        if failure.removesPartial { partial.discard() }
        throw failure.error
    }
}

extension FileSink {
    /// The hashes of the whole file: the streamed ones, or — when MD5 is wanted but could not be
    /// streamed (a resumed download learned it only from the answer) — both read back from the file, on
    /// `FileIO`'s threads.
    func finishHashesOffPool(md5 wanted: Bool) async throws(StorageError) -> (md5: String?, crc32c: String) {
        let streamed = checksums.finish()
        guard wanted, streamed.md5 == nil else { return streamed }
        return try await FileIO.run(.readBack, on: self) { sink throws(StorageError) in try sink.readBackHashes() }
    }

    /// `hashExistingPrefix()` on `FileIO`'s threads: a resumed download's prefix may be gigabytes.
    func hashExistingPrefixOffPool() async throws(StorageError) {
        guard offset > checksums.hashedUpTo else { return }
        try await FileIO.run(.readBack, on: self) { sink throws(StorageError) in try sink.hashExistingPrefix() }
    }

    /// Records the CRC32C of every byte kept in the partial file (`PartialFile.recordPrefix`), for the
    /// resume point of an attempt that ends here, when each was hashed in order; false when none are kept
    /// or they were not (the stream's hashes end here with the attempt). The attempt that resumes checks it.
    @discardableResult
    private func recordKeptPrefix() -> Bool {
        guard checksums.isContiguous, checksums.hashedUpTo == partial.bytesWritten, partial.bytesWritten > 0 else { return false }
        partial.recordPrefix(count: partial.bytesWritten, crc32c: checksums.finish().crc32c)
        return true
    }

    /// MD5 and CRC32C of the whole partial file, read back from it.
    private func readBackHashes() throws(StorageError) -> (md5: String?, crc32c: String) {
        let fresh = StreamChecksums(md5: true)
        var position: Int64 = 0
        try partial.readBack { bytes in
            fresh.feed(bytes, at: position)
            position += Int64(bytes.count)
        }
        return fresh.finish()
    }

    /// Ends a download the transfer did not finish. A cancel removes the partial file; any other stop
    /// syncs it and reports (and returns) where the next attempt resumes, built by `resumePoint` from the
    /// partial file; a failure keeps the bytes only when another attempt may use them.
    func outcome(of interruption: TransferFailure, bytesTotal: Int64?,
                 report: @Sendable (TransferEvent) -> Void,
                 resumePoint: (PartialFile) -> ResumePoint) async throws(StorageError) -> TransferOutcome {
        // The checkpoints handed over report before this one. After a checkpoint's sync failed, a later
        // sync may succeed without the bytes it lost: the download ends with that failure instead of a
        // resume point (a cancel still removes the file).
        await syncs?.settle()
        switch interruption {
        case .stopped(.cancel): break   // removes the file below, whatever the syncs did
        case .stopped, .failed: try checkSyncs()
        }
        switch interruption {
        case .stopped(.cancel):
            partial.discard()
            reportDropped()
            return .stopped(.cancel, nil)
        case .stopped(let reason):
            try await partial.syncOffPool()
            recordKeptPrefix()
            let point = resumePoint(partial)
            report(.checkpoint(point, bytesTotal: bytesTotal))
            partial.close()
            return .stopped(reason, point)
        case .failed(let failure):
            if failure.retryable {
                // The bytes kept for the retry, synced, with their CRC32C: the retry resumes from all of
                // them, checked, rather than from the last periodic checkpoint's unchecked ones (a file
                // edited during the backoff was finished around the change).
                if (try? await partial.syncOffPool()) != nil, recordKeptPrefix() {
                    report(.checkpoint(resumePoint(partial), bytesTotal: bytesTotal))
                    logHoldsBytes = true
                }
            } else {
                partial.discard()
                reportDropped()
            }
            partial.close()
            throw failure
        }
    }
}

// MARK: - Progress throttling

/// Forwards progress at most every `step` bytes (and always the final value), so a 1 GiB transfer
/// reports thousands of events, not millions.
final class ProgressThrottle {
    private var lastReported: Int64 = -1
    private let step: Int64
    /// The size when known; a download learns it from the response headers after it starts.
    var total: Int64?
    private let report: @Sendable (TransferEvent) -> Void

    init(total: Int64?, step: Int64 = 256 * 1024, report: @escaping @Sendable (TransferEvent) -> Void) {
        self.total = total
        self.step = step
        self.report = report
    }

    func update(_ done: Int64) {
        if lastReported < 0 || done - lastReported >= step || done == total || done < lastReported {
            lastReported = done
            report(.progress(bytesDone: done, bytesTotal: total))
        }
    }
}
