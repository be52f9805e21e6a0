import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// An answer framed by nothing but the connection's close (no `Content-Length`, not chunked: HTTP/1.0
/// style, as a middlebox may forward it) and cut short looks to libcurl like a complete answer. The cut
/// is the network's fault, not the object's: the attempt fails retryable, never `nonMatchingChecksum`
/// (which fails the job for good), and the next attempt gets the object.
@Suite("GCS answers cut short with no length to tell", .onTestThreads)
struct UnframedAnswerTests {
    /// The emulator holding `payload` at `name`, and a proxy in front of it cutting, once, the answers to
    /// the requests `match` selects after `afterBytes`, sent without a length.
    private static func cutting(_ match: RequestMatch, afterBytes: Int, name: String, payload: Data) async throws -> (EmulatorServer, FaultProxy) {
        let server = try EmulatorServer.start()
        do {
            _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                       JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/\(name)", data: payload)))
            let proxy = try FaultProxy(upstreamPort: server.port, rules: [
                FaultRule(match, .unframedResponse),
                FaultRule(match, .closeInResponse(afterBytes: afterBytes)),
            ])
            return (server, proxy)
        } catch {
            server.stop()
            throw error
        }
    }

    @Test("a download to memory whose media answer is cut short is retryable, and the retry gets every byte")
    func memoryDownloadCut() async throws {
        let payload = patternData(300_000, seed: 91)
        let (server, proxy) = try await Self.cutting(RequestMatch(method: "GET", pathContains: "alt=media"), afterBytes: 50_000,
                                                     name: "m.bin", payload: payload)
        defer {
            proxy.stop()
            server.stop()
        }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let spec = JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/m.bin", maxSize: 1 << 20)
        let cut = try failure(await run(backend, spec))
        #expect(proxy.firedCounts == [1, 1])
        #expect(cut.retryable && cut.code != .nonMatchingChecksum, "\(cut)")
        #expect(cut.message.contains("of an object of 300000"), "\(cut)")
        let fetched = try finished(await run(backend, spec))
        #expect(sameBytes(fetched.data, payload))
        #expect(fetched.crc32c == hashes(payload).crc32c)
    }

    @Test("object metadata cut short (no JSON left) is retryable, and the retry downloads the file")
    func metadataCut() async throws {
        let payload = patternData(100_000, seed: 92)
        let metadataGet = RequestMatch(method: "GET", predicate: { $0.target.contains("/o/") && !$0.target.contains("alt=media") })
        let (server, proxy) = try await Self.cutting(metadataGet, afterBytes: 200, name: "d.bin", payload: payload)
        defer {
            proxy.stop()
            server.stop()
        }
        let directory = try TemporaryDirectory("jobctl-unframed")
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let spec = JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/d.bin", destination: directory.file("d.bin"))
        let cut = try failure(await run(backend, spec))
        #expect(proxy.firedCounts == [1, 1])
        #expect(cut.retryable && cut.message.contains("not an object resource"), "\(cut)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("d.bin")))
        let downloaded = try finished(await run(backend, spec))
        #expect(downloaded.crc32c == hashes(payload).crc32c)
        #expect(sameBytes(try Data(contentsOf: URL(fileURLWithPath: directory.file("d.bin"))), payload))
    }
}

/// The same over plain HTTP: a 200 framed by the connection's close and cut short was a success with
/// the first bytes only, to a file or to memory. Where the server tells the file's size — a HEAD's
/// `Content-Length`, or `x-goog-stored-content-length` on the answer (GCS behind a signed URL) — a body
/// of another size fails retryable, and the retry gets every byte; where nothing tells, it is taken as
/// curl takes it (README, *Known limitations*).
@Suite("HTTP answers cut short with no length to tell", .onTestThreads)
struct UnframedHTTPAnswerTests {
    private let payload = patternData(200_000, seed: 93)

    /// nginx serving `payload` at /u.bin behind a proxy that cuts the first `times` GETs after 50,000
    /// bytes, sent without a length, and also applies `extra`.
    private func cutting(times: Int, _ extra: [FaultRule] = []) throws -> (NginxServer, FaultProxy) {
        let server = try NginxServer.start()
        do {
            try payload.write(to: URL(fileURLWithPath: server.root + "/u.bin"))
            let get = RequestMatch(method: "GET")
            return (server, try FaultProxy(upstreamPort: server.port, rules: [
                FaultRule(get, .unframedResponse, times: times),
                FaultRule(get, .closeInResponse(afterBytes: 50_000), times: times),
            ] + extra))
        } catch {
            server.stop()
            throw error
        }
    }

    @Test("a HEAD's Content-Length tells the cut: retryable, to a file and to memory, and the retry is whole")
    func headTellsTheSize() async throws {
        let (server, proxy) = try cutting(times: 2)
        defer {
            proxy.stop()
            server.stop()
        }
        let directory = try TemporaryDirectory("jobctl-unframed-http")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let fileSpec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/u.bin", destination: directory.file("u.bin"))
        let memorySpec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/u.bin", maxSize: 1 << 20)
        let toFile = try failure(await run(backend, fileSpec))
        #expect(toFile.retryable && toFile.message.contains("of 200000"), "\(toFile)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("u.bin")))
        let toMemory = try failure(await run(backend, memorySpec))
        #expect(toMemory.retryable && toMemory.message.contains("of a file of 200000"), "\(toMemory)")
        #expect(proxy.firedCounts == [2, 2])
        #expect(proxy.exchanges.filter { $0.request.method == "HEAD" }.count == 2)
        #expect(try finished(await run(backend, memorySpec)).data == payload)
        _ = try finished(await run(backend, fileSpec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("u.bin"))) == payload)
    }

    /// Found by the chaos soak (seed 247): a download-memory job over HTTP succeeded with 18,931 of 21,353
    /// bytes, its answer cut where nothing framed it and the HEAD that would have told the size stalled.
    @Test("a HEAD that fails as a retry would (reset, 503) lets no cut answer pass: retryable, to a file and to memory",
          arguments: ["reset", "503"])
    func failedHeadDoesNotPassTheCut(headFault: String) async throws {
        let fault: Fault = headFault == "reset" ? .resetBeforeResponse : .respond(.response(503, reason: "Service Unavailable"))
        let (server, proxy) = try cutting(times: 2, [FaultRule(RequestMatch(method: "HEAD"), fault, times: .max)])
        defer {
            proxy.stop()
            server.stop()
        }
        let directory = try TemporaryDirectory("jobctl-unframed-http")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let fileSpec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/u.bin", destination: directory.file("u.bin"))
        let memorySpec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/u.bin", maxSize: 1 << 20)
        let toFile = try failure(await run(backend, fileSpec))
        #expect(toFile.retryable && toFile.message.contains("HEAD asking the file's size failed"), "\(toFile)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("u.bin")))
        let toMemory = try failure(await run(backend, memorySpec))
        #expect(toMemory.retryable && toMemory.message.contains("HEAD asking the file's size failed"), "\(toMemory)")
        #expect(proxy.exchanges.filter { $0.request.method == "HEAD" }.count >= 2)
        // The GETs are no longer cut: the retries are whole (and ask no HEAD).
        #expect(try finished(await run(backend, memorySpec)).data == payload)
        _ = try finished(await run(backend, fileSpec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("u.bin"))) == payload)
    }

    /// The HEAD after a cut answer names another version than the answer did (a page made anew for each
    /// request, or a file replaced meanwhile): its length says nothing of the answer's, and nothing else
    /// told it, so the cut answer was the file — 50,000 of 200,000 bytes, a success.
    @Test("a HEAD naming another version than the cut answer lets it not pass either: retryable, to a file and to memory",
          arguments: ["ETag", "Last-Modified"])
    func headOfAnotherVersionDoesNotPassTheCut(validator: String) async throws {
        let (server, proxy) = try cutting(times: 2, [
            FaultRule(RequestMatch(method: "HEAD"), .rewriteResponse { _, response in
                if validator == "ETag" {
                    response.setHeader("ETag", "\"another-version\"")
                } else {
                    response.setHeader("ETag", nil)
                    response.setHeader("Last-Modified", "Sat, 05 Dec 2026 12:00:00 GMT")
                }
            }, times: .max),
            FaultRule(RequestMatch(method: "GET"), .rewriteResponse { _, response in
                if validator != "ETag" { response.setHeader("ETag", nil) }
            }, times: .max),
        ])
        defer {
            proxy.stop()
            server.stop()
        }
        let directory = try TemporaryDirectory("jobctl-unframed-http")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let fileSpec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/u.bin", destination: directory.file("u.bin"))
        let memorySpec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/u.bin", maxSize: 1 << 20)
        let toFile = try failure(await run(backend, fileSpec))
        #expect(toFile.retryable && toFile.message.contains("another version"), "\(toFile)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("u.bin")))
        let toMemory = try failure(await run(backend, memorySpec))
        #expect(toMemory.retryable && toMemory.message.contains("another version"), "\(toMemory)")
        #expect(proxy.firedCounts.prefix(2) == [2, 2])
        #expect(proxy.exchanges.filter { $0.request.method == "HEAD" }.count == 2)
        // The GETs are no longer cut: the retries are whole.
        #expect(try finished(await run(backend, memorySpec)).data == payload)
        _ = try finished(await run(backend, fileSpec))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("u.bin"))) == payload)
    }

    /// The HEAD after a cut answer says there is no file — deleted in between (a real 404 from nginx),
    /// 410, a 2xx that is no file (204, 202) — or sends a `Content-Length` beside `Transfer-Encoding`,
    /// which frames nothing: none tells the file's size, yet the cut answer passed for the whole file
    /// (50,000 of 200,000 bytes, a success). Now the attempt fails retryable; the retry meets what is
    /// there: nginx's 404 (objectNotFound, for good), or the file, whole.
    @Test("a HEAD saying there is no file (deleted, 410, 204, 202) or with a length that frames nothing lets no cut answer pass",
          arguments: ["deleted", "410", "204", "202", "Transfer-Encoding beside Content-Length"])
    func headSayingNoFileDoesNotPassTheCut(form: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let path = server.root + "/u.bin"
        try payload.write(to: URL(fileURLWithPath: path))
        let headFault: Fault = switch form {
        case "410": .respond(.response(410, reason: "Gone"))
        case "204": .respond(.response(204, reason: "No Content"))
        case "202": .respond(.response(202, reason: "Accepted"))
        default: .rewriteResponse { _, response in
            if form != "deleted" { response.setHeader("Transfer-Encoding", "chunked") }
        }
        }
        let get = RequestMatch(method: "GET")
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(get, .unframedResponse, times: 2),
            FaultRule(get, .closeInResponse(afterBytes: 50_000), times: 2),
            // The file deleted once nginx answered the GET (its whole body is in the proxy by then).
            FaultRule(get, .rewriteResponse { _, _ in
                if form == "deleted" { try? FileManager.default.removeItem(atPath: path) }
            }, times: 2),
            FaultRule(RequestMatch(method: "HEAD"), headFault, times: .max),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-unframed-http")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let fileSpec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/u.bin", destination: directory.file("u.bin"))
        let memorySpec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/u.bin", maxSize: 1 << 20)
        let said = switch form {
        case "deleted": "found no file (404)"
        case "410": "found no file (410)"
        case "204", "202": "answered \(form), which is no file"
        default: "both Transfer-Encoding and Content-Length"
        }
        let toFile = try failure(await run(backend, fileSpec))
        #expect(toFile.retryable && toFile.message.contains(said), "\(form): \(toFile)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("u.bin")))
        if form == "deleted" { try payload.write(to: URL(fileURLWithPath: path)) }
        let toMemory = try failure(await run(backend, memorySpec))
        #expect(toMemory.retryable && toMemory.message.contains(said), "\(form): \(toMemory)")
        #expect(proxy.firedCounts.prefix(2) == [2, 2])
        #expect(proxy.exchanges.filter { $0.request.method == "HEAD" }.count == 2)
        if form == "deleted" {
            // The retry meets the file gone, and fails as a download of a missing file does.
            for spec in [memorySpec, fileSpec] {
                let gone = try failure(await run(backend, spec))
                #expect(gone.code == .objectNotFound && !gone.retryable && gone.httpStatus == 404, "\(gone)")
            }
            #expect(!FileManager.default.fileExists(atPath: directory.file("u.bin")))
        } else {
            // The GETs are no longer cut: the retries are whole (and ask no HEAD).
            #expect(try finished(await run(backend, memorySpec)).data == payload)
            _ = try finished(await run(backend, fileSpec))
            #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("u.bin"))) == payload)
        }
    }

    /// A HEAD refused for good without saying the file is gone — 403 (a URL signed for GET alone), 405,
    /// 501 (HEAD not implemented) — tells nothing and never will: a whole answer framed by the close is
    /// taken as the file, as curl takes it. A 501 was taken as a 5xx a retry waits out, and failed every
    /// attempt of a whole download.
    @Test("a HEAD refused for good (403, 405, 501) leaves a whole answer without a length a success",
          arguments: [403, 405, 501])
    func refusedHeadLeavesAWholeAnswerWhole(status: Int) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/u.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .unframedResponse, times: .max),
            FaultRule(RequestMatch(method: "HEAD"), .respond(.response(status)), times: .max),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-unframed-http")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/u.bin", maxSize: 1 << 20)))
        #expect(memory.data == payload)
        _ = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/u.bin", destination: directory.file("u.bin"))))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("u.bin"))) == payload)
        #expect(proxy.exchanges.filter { $0.request.method == "HEAD" }.count == 2, "the HEAD was asked, and refused")
    }

    /// A `Transfer-Encoding` that does not end in `chunked` (`identity`, from old servers) frames nothing:
    /// the body ends at the close (RFC 9112 §6.3), and libcurl reads it so. Such an answer was taken for a
    /// framed one — it has a Transfer-Encoding — so no HEAD was asked and a cut one was the file. (One
    /// libcurl cannot decode, `gzip` alone, it refuses.)
    @Test("an answer whose Transfer-Encoding is not chunked is framed by the close too: a cut one is retryable",
          arguments: ["identity", "Identity , identity"])
    func transferEncodingWithoutChunkedIsUnframed(coding: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/u.bin"))
        // Cut at 50,000 bytes and closed.
        let cut = Data("HTTP/1.1 200 OK\r\nTransfer-Encoding: \(coding)\r\nConnection: close\r\n\r\n".utf8) + payload.prefix(50_000)
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .respondAsWritten(cut, seconds: 0), times: 2),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-unframed-http")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let fileSpec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/u.bin", destination: directory.file("u.bin"))
        let memorySpec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/u.bin", maxSize: 1 << 20)
        let toFile = try failure(await run(backend, fileSpec))
        #expect(toFile.retryable && toFile.message.contains("of 200000"), "\(coding): \(toFile)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("u.bin")))
        let toMemory = try failure(await run(backend, memorySpec))
        #expect(toMemory.retryable && toMemory.message.contains("of a file of 200000"), "\(coding): \(toMemory)")
        #expect(proxy.firedCounts == [2])
        #expect(try finished(await run(backend, memorySpec)).data == payload)
    }

    @Test("x-goog-stored-content-length on the answer tells the cut where the HEAD does not")
    func storedLengthTellsTheSize() async throws {
        let total = payload.count
        let (server, proxy) = try cutting(times: 1, [
            FaultRule(RequestMatch(method: "GET"), .rewriteResponse { _, response in
                response.setHeader("x-goog-stored-content-length", "\(total)")
            }, times: .max),
            FaultRule(RequestMatch(method: "HEAD"), .respond(.response(405, reason: "Method Not Allowed")), times: .max),
        ])
        defer {
            proxy.stop()
            server.stop()
        }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let spec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/u.bin", maxSize: 1 << 20)
        let cut = try failure(await run(backend, spec))
        #expect(cut.retryable && cut.message.contains("of a file of 200000"), "\(cut)")
        #expect(!proxy.exchanges.contains { $0.request.method == "HEAD" }, "the answer told it")
        #expect(try finished(await run(backend, spec)).data == payload)
    }

    /// GCS decompressing a gzip-stored object on the way (no `Accept-Encoding` sent), behind something
    /// that forwards its answer framed by the close: `x-goog-stored-content-length` is the stored
    /// (compressed) length, not the body's, and so may be a HEAD's `Content-Length`: neither may fail a
    /// whole answer.
    @Test("a transcoded answer is not held to the stored length")
    func transcodedAnswerIsNotHeldToStoredLength() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/t.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .rewriteResponse { _, response in
                response.setHeader("x-goog-stored-content-encoding", "gzip")
                response.setHeader("x-goog-stored-content-length", "24")
            }, times: .max),
            FaultRule(RequestMatch(method: "GET"), .unframedResponse, times: .max),
            // A HEAD describing the stored bytes, as the metadata does.
            FaultRule(RequestMatch(method: "HEAD"), .respond(.response(200, reason: "OK", headers: [
                ProxyHeader("Content-Length", "24"), ProxyHeader("x-goog-stored-content-encoding", "gzip"),
            ])), times: .max),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let whole = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/t.bin", maxSize: 1 << 20)))
        #expect(whole.data == payload)
    }

    /// An HTTP/2 stream frames its body: an answer without `Content-Length` (nginx's `sub_filter` drops it)
    /// is whole when the stream ends, and a cut one is an error. It was taken for one framed by the
    /// connection's close and followed by a HEAD for the size — a request more for every such download,
    /// and a failure whenever the HEAD named another length.
    @Test("over HTTP/2 an answer without Content-Length is framed by its stream: no HEAD is asked")
    func http2AnswerWithoutLengthIsFramed() async throws {
        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let server = try NginxServer.start(extraServerConfig: """
            location /dyn/ { sub_filter 'zz' 'yy'; sub_filter_once off; sub_filter_types *; }
            """, tls: try authority.issueServerCertificate(names: ["IP:127.0.0.1"]), http2: true)
        defer { server.stop() }
        let text = Data(String(repeating: "abcdefgh\n", count: 5_000).utf8)
        try FileManager.default.createDirectory(atPath: server.root + "/dyn", withIntermediateDirectories: true)
        try text.write(to: URL(fileURLWithPath: server.root + "/dyn/p.txt"))
        let configuration = try StorageConfiguration.fromEnvironment(["JOBCTL_CA_BUNDLE": authority.certificatePath],
                                                                     localBucketsDirectory: "/nonexistent")
        let result = try finished(await run(HTTPBackend(configuration: configuration),
                                            JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/dyn/p.txt", maxSize: 1 << 20)))
        #expect(result.data == text)
        // Two lines when a HEAD followed the GET (nginx writes each after its answer: wait a little for one).
        let lines = server.accessLogLines(atLeast: 2, seconds: 1) { $0.contains("/dyn/p.txt") }
        #expect(lines.contains { $0.contains("\"GET /dyn/p.txt HTTP/2.0\" 200") }, "not HTTP/2 or no length dropped: \(server.accessLog)")
        #expect(!lines.contains { $0.contains("\"HEAD ") }, "\(server.accessLog)")
    }
}
