import Foundation
@testable import JobModel
@testable import StorePort
@testable import Storage

/// An HTTP answer made from the input: the first byte picks the status; then header lines up to an
/// empty line, each `Name: value` kept as `CurlExchange.receiveHeader` keeps it (name lower-cased, blanks
/// around the value dropped, a repeated header joined with `,`); the rest is the body.
struct FuzzAnswer {
    static let statuses = [200, 203, 204, 206, 202, 301, 302, 304, 308, 400, 401, 403, 404, 408, 410, 412, 416, 429, 500, 503]
    var status: Int
    var statusLine: String
    var lines: [String] = []
    var headers: [String: String] = [:]
    var body = Data()

    init(_ input: FuzzInput) {
        status = Self.statuses[Int(input.selector) % Self.statuses.count]
        statusLine = "HTTP/1.1 \(status) X"
        var rest = input.bytes.dropFirst()[...]
        while !rest.isEmpty {
            let end = rest.firstIndex(of: UInt8(ascii: "\n")) ?? rest.endIndex
            var line = rest[rest.startIndex..<end]
            rest = end < rest.endIndex ? rest[(end + 1)...] : []
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            if line.isEmpty { break }
            let text = String(decoding: line, as: UTF8.self)
            if text.hasPrefix("HTTP/") { statusLine = text; continue }
            lines.append(text)
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
            headers[name] = headers[name].map { $0 + "," + value } ?? value
        }
        body = Data(rest)
    }

    func response(url: String = "https://127.0.0.1:9/b/o.txt?sig=SECRETVALUE") -> HTTPResponse {
        HTTPResponse(status: status, headers: headers, body: body, url: url, requestHeaders: ["Authorization: Bearer TOKENVALUE"])
    }
}

// MARK: - httpheaders: what the backends read from an answer's headers

/// The header readers of the storage backends, on an answer made from the input (`FuzzAnswer`): status
/// line, `Content-Range` (`FileSink.rangeBounds`, a slice's check), `Range` of a resumable upload
/// (`confirmedOffset`), `Content-Length` (`MemorySink`), hashes (`x-goog-hash`, `Digest`, `Repr-Digest`,
/// `Content-MD5`, …), `x-goog-generation`, `Retry-After`, `Location`, transfer codings, and the error
/// an answer becomes (`httpError`: the body's message, redacted).
let httpHeadersTarget = FuzzTarget(
    name: "httpheaders",
    summary: "HTTPStatusLine, rangeBounds, confirmedOffset, servedDigests, reportedHashes, checkVersion, retryAfter, httpError, noFileAnswer",
    run: { input in
        let answer = FuzzAnswer(input)
        let headers = answer.headers
        var statusBytes = Array(answer.statusLine.utf8)
        statusBytes.withUnsafeMutableBytes { raw in
            _ = HTTPStatusLine.code(UnsafeRawBufferPointer(raw)[...])
        }
        let response = answer.response()
        for value in headers.values {
            _ = FileSink.rangeBounds(value)
            _ = GCSBackend.confirmedOffset(value, recorded: 0, total: 0)
            _ = GCSBackend.confirmedOffset(value, recorded: 5, total: Int64.max)
            _ = GCSBackend.unreadableRange(value)
            _ = canonicalDigest(value, algorithm: .md5)
            _ = canonicalDigest(value, algorithm: .crc32c)
            _ = GCSBackend.sessionURI(value, startedAt: "https://127.0.0.1:9/upload/storage/v1/b/b/o?uploadType=resumable&name=o")
        }
        _ = GCSBackend.confirmedOffset(headers["range"], recorded: 0, total: 100)
        // (Read with a DateFormatter, ~1 ms: only the header that holds it.)
        if let value = headers["retry-after"] { _ = retryAfterSeconds(value, now: Date(timeIntervalSince1970: 1_764_410_400)) }
        let digests = servedDigests(headers, status: answer.status)
        _ = try? digests.verify(md5: "1B2M2Y8AsgTpgAmY7PhCfg==", crc32c: "AAAAAA==", what: "the file", remedy: "retry")
        _ = digests.needMD5(asked: false)
        _ = isTranscoded(headers)
        _ = reportedHashes(headers)
        _ = reportedHashValues(headers)
        _ = reportedDigests(headers)
        _ = HTTPBackend.reportedHashMismatch(headers, md5: "1B2M2Y8AsgTpgAmY7PhCfg==", crc32c: "AAAAAA==")
        try? GCSBackend.checkVersion(headers, generation: "1764410400000000", crc32c: "AAAAAA==", what: "the object")
        let object = StorageObject(bucket: "b", name: "o", size: 10, md5Hash: nil, crc32c: nil, generation: "1")
        let served = GCSBackend.withServedHashes(object, headers)
        _ = GCSBackend.digests(of: served)
        _ = GCSBackend.storedBytes(of: served)
        for rangeAsked in [false, true] {
            _ = HTTPBackend.noFileAnswer(status: answer.status, headers: headers, rangeAsked: rangeAsked, url: response.url)
        }
        _ = HTTPBackend.isCloseDelimited(response)
        _ = HTTPBackend.headSaysNoSize(response)
        _ = httpError(response, what: "the object")
        _ = serverMessage(response)
        _ = HTTPRequest.headerSecrets(answer.lines)
        if let location = headers["location"] { _ = redirectTarget(location, from: response.url) }
        let sink = MemorySink(limit: 64, url: response.url, progress: { _ in })
        let piece: [UInt8] = [1, 2, 3]
        piece.withUnsafeBytes { bytes in _ = try? sink.write(bytes, status: answer.status, headers: headers) }
    })

// MARK: - gcsjson: JSON the Google servers answer, and credentials files

/// The JSON bodies the backends read: a GCS object resource (`GCSObjectJSON.object`, then what a
/// transfer does with it), a token endpoint's answer (`AccessTokenResponse`), a GCS error body, and a
/// credentials file (`GOOGLE_APPLICATION_CREDENTIALS`, `GoogleCredentials.load`: a service-account key's
/// PEM goes to OpenSSL). The object read must survive the store's JSON (a result holds it).
let gcsJSONTarget = FuzzTarget(
    name: "gcsjson",
    summary: "GCSObjectJSON.object(from:), AccessTokenResponse(parsing:), GoogleCredentials.load(file:), error bodies",
    run: { input in
        let data = input.data
        let response = HTTPResponse(status: 400, headers: [:], body: data, url: "https://127.0.0.1:9/storage/v1/b/b/o/x")
        if let json = response.json {
            if let object = GCSObjectJSON.object(from: json) {
                _ = GCSBackend.digests(of: object)
                _ = GCSBackend.storedBytes(of: object)
                _ = GCSBackend.uploadMismatch(object, storedSize: nil, sourceSize: 10, md5: nil, crc32c: "AAAAAA==")
                _ = GCSBackend.readConditions(object)
                _ = GCSObjectJSON.patchBody(current: object, set: UploadMetadata(contentType: "text/plain"), removing: ["k"], clearing: [])
                checkStored(StorageObject.self, (try? StoreJSON.encode(object)) ?? "")
                let result = JobResult(object: object)
                checkStored(JobResult.self, (try? StoreJSON.encode(result)) ?? "")
            }
            for item in json["items"] as? [[String: Any]] ?? [] { _ = GCSObjectJSON.object(from: item) }
        }
        _ = httpError(response, what: "the object")
        _ = try? AccessTokenResponse(parsing: data, from: "the token endpoint")
        let path = Harness.scratchFile("credentials.json", data)
        if let credentials = try? GoogleCredentials.load(file: path, source: "GOOGLE_APPLICATION_CREDENTIALS") {
            _ = credentials.description
            if case .serviceAccount(let key) = credentials { _ = try? key.assertion(issuedAt: 1_764_410_400) }
        }
    })
