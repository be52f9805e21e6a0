import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A resumed HTTP download asks `Range: bytes=N-`; a 206 that answers another range (a cache or a server
/// bug: here the file's first bytes, labelled and sized as its start) must not be appended at N. Over
/// plain HTTP without a served hash (nginx) nothing else would notice: the sizes add up. The attempt fails
/// (retryable), the partial file is dropped, and the next attempt downloads the whole file afresh.
@Suite("a 206 answering another range than asked", .onTestThreads)
struct RangeAnswerTests {
    private let payload = patternData(3_000_000, seed: 71)

    /// The backend and spec of a download of `name` through `proxy` into `directory`, run until 1 MB is
    /// written and paused there: the resume point a worker's next attempt would start from.
    private static func pausedPartWay(_ proxy: FaultProxy, _ name: String, into directory: TemporaryDirectory, jobID: String)
        async throws -> (backend: HTTPBackend, spec: JobSpec, point: ResumePoint)? {
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let spec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/\(name)", destination: directory.file(name))
        let control = TransferControl(jobID: jobID)
        let first = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 1_000_000 { control.stop(.pause) }
        }
        let paused = try await run(backend, spec, control: control, recorder: first).get()
        guard case .stopped(.pause, let point?) = paused, point.bytesDone > 0 else {
            Issue.record("expected a paused download, got \(paused)")
            return nil
        }
        return (backend, spec, point)
    }

    @Test("HTTP: the wrong part is refused and the retry downloads the whole file")
    func wrongRangeRefused() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/r.bin"))
        let total = payload.count
        let wrongStart = payload
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }), .rewriteResponse { _, response in
                // nginx answered `bytes S-(T-1)/T` with the file's tail; send the head instead, as bytes 0-…
                let length = response.body.count
                response.setHeader("Content-Range", "bytes 0-\(length - 1)/\(total)")
                response.body = wrongStart.prefix(length)
            }, times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-answer")
        defer { directory.remove() }
        let destination = directory.file("r.bin")
        guard let (backend, spec, point) = try await Self.pausedPartWay(proxy, "r.bin", into: directory, jobID: "01RANGE") else { return }

        let refusing = EventRecorder()
        let refused = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGE"), recorder: refusing))
        #expect(refused.retryable && refused.message.contains("range"), "\(refused)")
        #expect(proxy.exchanges.contains { $0.faults.contains("rewrite response") })
        #expect(!FileManager.default.fileExists(atPath: destination), "nothing was committed")
        // The attempt that dropped the bytes says so: its last checkpoint holds none, so the log's point
        // (the next attempt's `started`, its worker's `resumed` line and moved bytes) is not the old one.
        let logged = try #require(refusing.checkpoints.last, "a checkpoint replaces the dropped bytes' point")
        #expect(logged.holdsNoDownloadedBytes && logged.bytesDone == 0, "\(logged)")

        // The next attempt starts from the log's checkpoint, as a worker's would: the dropped partial
        // file is not resumed, and the whole file comes without a Range.
        let result = try finished(await run(backend, spec, resume: logged, control: TransferControl(jobID: "01RANGE")))
        #expect(result.size == Int64(total))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        let last = try #require(proxy.exchanges.last { $0.request.method == "GET" })
        #expect(last.request.header("Range") == nil, "the retry asked for the whole file")
    }

    /// The HTTP twin of the GCS download's check (`SlicedDownloadTests`): a resumed range answered with
    /// more bytes than its `Content-Range` holds (its total and Content-Length agree with each other, not
    /// with the body libcurl was framed to read). Nothing can be resumed from such a file: the partial
    /// file is dropped, the error says the retry downloads it again, and the retry gets the right file.
    @Test("HTTP: a resumed range answered with more bytes than the range holds drops the partial file")
    func moreBytesThanTheRangeHoldsDropThePartialFile() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/long.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }), .rewriteResponse { _, response in
                // nginx's `Content-Range: bytes S-(T-1)/T` stays; 1,000 bytes more follow the range's.
                response.body += Data(repeating: 0x21, count: 1_000)
                response.setHeader("Content-Length", String(response.body.count))
            }, times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-long")
        defer { directory.remove() }
        let destination = directory.file("long.bin")
        guard let (backend, spec, point) = try await Self.pausedPartWay(proxy, "long.bin", into: directory, jobID: "01RANGELONG") else { return }
        try #require(try FileManager.default.contentsOfDirectory(atPath: directory.path).count == 1, "the paused download's partial file")

        let error = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGELONG")))
        #expect(proxy.firedCounts == [1], "the resumed range was answered long")
        #expect(error.retryable && error.message.contains("downloads it again") && !error.message.contains("resumes"), "\(error)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty, "no partial file kept")

        let result = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGELONG")))
        #expect(result.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
    }

    /// Answers to the resumed range that used to be taken: a 206 with no body (which nothing checked,
    /// so the prefix was committed as the file), a 206 of another version from a server that ignored
    /// `If-Range` (the file then mixed two versions) — also when it names no version at all (no ETag, no
    /// Last-Modified) — and a 206 whose body runs past the end of its
    /// `Content-Range` — the whole file after the prefix, its total written so the sizes add up (the
    /// file was committed as the prefix followed by the whole file).
    enum LyingAnswer: String, CaseIterable, Sendable {
        case emptyWithoutRange, emptyUnsatisfiedForm, otherVersion, otherVersionUnnamed, longerThanItsRange
    }

    @Test("HTTP: a resumed range answered empty, from another version or past its end is refused, then the whole file comes",
          arguments: LyingAnswer.allCases)
    func lyingRangeAnswerRefused(_ answer: LyingAnswer) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/v.bin"))
        let other = patternData(payload.count, seed: 72)
        let whole = payload
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }), .rewriteResponse { _, response in
                switch answer {
                case .longerThanItsRange:
                    let start = FileSink.rangeStart(response.header("Content-Range") ?? "") ?? 0
                    response.setHeader("Content-Range", "bytes \(start)-\(whole.count - 1)/\(Int(start) + whole.count)")
                    response.body = whole
                case .emptyWithoutRange:
                    response.setHeader("Content-Range", nil)
                    response.body = Data()
                case .emptyUnsatisfiedForm:
                    response.setHeader("Content-Range", "bytes */\(response.body.count)")
                    response.body = Data()
                case .otherVersionUnnamed:
                    response.setHeader("ETag", nil)
                    response.setHeader("Last-Modified", nil)
                    response.body = other.suffix(response.body.count)
                case .otherVersion:
                    // The right range, of another version: its own ETag, not the If-Range the request sent.
                    response.setHeader("ETag", "\"another-version\"")
                    response.body = other.suffix(response.body.count)
                }
                response.setHeader("Content-Length", String(response.body.count))
            }, times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-lie")
        defer { directory.remove() }
        let destination = directory.file("v.bin")
        guard let (backend, spec, point) = try await Self.pausedPartWay(proxy, "v.bin", into: directory, jobID: "01RANGELIE") else { return }
        let refusing = EventRecorder()
        let refused = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGELIE"), recorder: refusing))
        // (The one past its end names another total than the first answer: refused for that, before its bytes.)
        #expect(refused.retryable && (refused.message.contains("range") || answer == .longerThanItsRange && refused.message.contains("changed size")),
                "\(answer): \(refused)")
        #expect(!FileManager.default.fileExists(atPath: destination), "\(answer): nothing may be committed")
        // The log's point after the attempt: no bytes held, as the partial file was dropped.
        let logged = try #require(refusing.checkpoints.last, "\(answer): a checkpoint replaces the dropped bytes' point")
        #expect(logged.bytesDone == 0, "\(answer): \(logged)")
        let result = try finished(await run(backend, spec, resume: logged, control: TransferControl(jobID: "01RANGELIE")))
        #expect(result.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload, "\(answer)")
    }

    /// A server that kept its validator across a change of the file: the resumed range's answer carried
    /// the same ETag, the rest of another version and that version's size (`bytes S-E/TOTAL`, or `/*`
    /// with the longer body). It was appended, and the job succeeded with a file of two versions. The
    /// size the first answer named is kept with the resume point: another one drops the partial file.
    @Test("HTTP: a resumed range whose answer names another size than the first answer did is not appended",
          arguments: ["total", "unknown total"])
    func rangeOfAFileOfAnotherSize(_ how: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/g.bin"))
        let grown = patternData(payload.count + 1_000, seed: 73)
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }), .rewriteResponse { _, response in
                // The same ETag as nginx gave the first answer (the rule changes only the range's bytes).
                let start = Int(FileSink.rangeStart(response.header("Content-Range") ?? "") ?? 0)
                response.body = grown.suffix(from: start)
                response.setHeader("Content-Range", "bytes \(start)-\(grown.count - 1)/\(how == "total" ? String(grown.count) : "*")")
                response.setHeader("Content-Length", String(response.body.count))
            }, times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-size")
        defer { directory.remove() }
        let destination = directory.file("g.bin")
        guard let (backend, spec, point) = try await Self.pausedPartWay(proxy, "g.bin", into: directory, jobID: "01RANGESIZE") else { return }
        guard case .download(_, _, _, _, _, let total, _) = point else { Issue.record("\(point)"); return }
        #expect(total == Int64(payload.count), "the size the first answer named is kept: \(point)")
        let refusing = EventRecorder()
        let refused = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGESIZE"), recorder: refusing))
        #expect(proxy.firedCounts == [1])
        #expect(refused.retryable && refused.message.contains("again"), "\(how): \(refused)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty, "\(how): no partial file kept")
        #expect(refusing.checkpoints.last?.bytesDone == 0, "\(how): the log's point holds no bytes: \(refusing.checkpoints)")
        let result = try finished(await run(backend, spec, resume: refusing.checkpoints.last ?? point,
                                            control: TransferControl(jobID: "01RANGESIZE")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload, "\(how): \(result)")
    }

    /// A proxy's 203 to the resumed range carries the whole object, which was appended to the prefix.
    @Test("HTTP: a resumed range answered with the whole object (a proxy's 203) replaces the prefix")
    func wholeAnswerReplacesThePrefix() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/w.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }),
                      .respond(.response(203, body: payload)), times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-whole")
        defer { directory.remove() }
        let destination = directory.file("w.bin")
        guard let (backend, spec, point) = try await Self.pausedPartWay(proxy, "w.bin", into: directory, jobID: "01RANGEWHOLE") else { return }
        let result = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGEWHOLE")))
        #expect(proxy.exchanges.contains { $0.faults.contains { $0.hasPrefix("respond") } }, "the fault was served")
        #expect(result.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload, "the answer, not the prefix")
    }

    /// A 204 to the resumed range was taken for an empty object: the prefix was dropped and an empty file
    /// committed, a success. No server answers an empty file so (it is a 200 of length 0): the answer
    /// carries no file, and the download fails saying so, committing nothing.
    @Test("HTTP: a resumed range answered 204 No Content commits nothing")
    func noContentToAResumedRangeCommitsNothing() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/e.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }),
                      .respond(.response(204, reason: "No Content")), times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-empty")
        defer { directory.remove() }
        let destination = directory.file("e.bin")
        guard let (backend, spec, point) = try await Self.pausedPartWay(proxy, "e.bin", into: directory, jobID: "01RANGEEMPTY") else { return }
        let refused = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGEEMPTY")))
        #expect(proxy.firedCounts == [1], "the 204 was served")
        #expect(refused.httpStatus == 204 && refused.message.contains("no file"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: destination), "nothing may be committed")
        let result = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGEEMPTY")))
        #expect(result.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
    }

    /// A resumed range answered with the right start and version but ending before its own
    /// `Content-Range` does, that range's total unknown (`bytes S-E/*`): cut where only the close framed
    /// it, or framed by a Content-Length shorter than the range. The total was taken as the offset plus
    /// the body's length, which always adds up, and the short file was committed. The bytes that came are
    /// the right ones: they are kept, and the next attempt resumes.
    @Test("HTTP: a resumed range whose body ends before its Content-Range does (total unknown) is not the file",
          arguments: ["framed short", "cut unframed"])
    func rangeEndingEarlyRefused(how: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/s.bin"))
        let ranged = RequestMatch(method: "GET", predicate: { $0.header("Range") != nil })
        let unknownTotal = FaultRule(ranged, .rewriteResponse { _, response in
            let range = response.header("Content-Range") ?? ""
            response.setHeader("Content-Range", String(range.prefix { $0 != "/" }) + "/*")
            if how == "framed short" { response.body = response.body.prefix(500_000) }
        }, times: 1)
        let cut: [FaultRule] = how == "cut unframed"
            ? [FaultRule(ranged, .unframedResponse, times: 1), FaultRule(ranged, .closeInResponse(afterBytes: 500_000), times: 1)] : []
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [unknownTotal] + cut)
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-short")
        defer { directory.remove() }
        let destination = directory.file("s.bin")
        guard let (backend, spec, point) = try await Self.pausedPartWay(proxy, "s.bin", into: directory, jobID: "01RANGESHORT") else { return }
        let short = try failure(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGESHORT")))
        #expect(proxy.firedCounts.allSatisfy { $0 == 1 }, "\(proxy.firedCounts)")
        #expect(short.retryable && short.message.contains("ended after byte"), "\(how): \(short)")
        #expect(!FileManager.default.fileExists(atPath: destination), "\(how): nothing may be committed")
        let result = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGESHORT")))
        #expect(result.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload, "\(how)")
    }

    /// An ETag longer than a header may carry (`HeaderValues.longestSentBack`).
    static let longETag = "\"" + String(repeating: "e", count: 9_000) + "\""

    /// A server whose ETag (or Last-Modified) holds a control character (DEL here; libcurl passes it): the
    /// checkpoint kept it as the resume validator, and the next attempt's `If-Range` carrying it was refused
    /// before it was sent — rightly, it could smuggle headers — as `invalidArgument`: the job failed for
    /// good on the server's text. Such a validator cannot pin a version, so there is none: the next
    /// attempt downloads the whole file. So for one longer than a header may carry (9,000 bytes: nginx
    /// answered the `If-Range` carrying it 400, `invalidArgument`, the job failed for good).
    @Test("HTTP: a validator holding a control character, or too long to send back, is not sent back: the next attempt downloads the whole file",
          arguments: ["ETag", "Last-Modified", "long ETag"])
    func unsendableValidatorNotResumed(header: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/k.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .rewriteResponse { _, response in
                if header == "ETag" {
                    response.setHeader("ETag", "\"k\u{7F}1\"")
                } else if header == "long ETag" {
                    response.setHeader("ETag", Self.longETag)
                } else {
                    response.setHeader("ETag", nil)
                    response.setHeader("Last-Modified", "Sat, 05 Dec 2026 12:00:00 GMT\u{7F}")
                }
            }, times: .max),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-validator")
        defer { directory.remove() }
        guard let (backend, spec, paused) = try await Self.pausedPartWay(proxy, "k.bin", into: directory, jobID: "01RANGEVALID") else { return }
        // As a log written before the fix holds it: the server's validator, as it came.
        guard case .download(let written, let generation, _, let tempPath, let file, _, _) = paused else {
            Issue.record("not a download's resume point: \(paused)")
            return
        }
        let sent = header == "ETag" ? "\"k\u{7F}1\"" : header == "long ETag" ? Self.longETag : "Sat, 05 Dec 2026 12:00:00 GMT\u{7F}"
        let point = ResumePoint.download(bytesWritten: written, generation: generation, etag: sent, tempPath: tempPath, file: file)
        let result = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGEVALID")))
        #expect(result.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("k.bin"))) == payload, "\(header)")
        let last = try #require(proxy.exchanges.last { $0.request.method == "GET" })
        #expect(last.request.header("Range") == nil && last.request.header("If-Range") == nil, "\(header): the whole file was asked for")
        // What this attempt's checkpoints record carries no such validator.
        let again = try await Self.pausedPartWay(proxy, "k.bin", into: directory, jobID: "01RANGEVALID2")
        guard case .download(_, _, let etag, _, _, _, _)? = again?.point else {
            Issue.record("not a download's resume point: \(String(describing: again?.point))")
            return
        }
        #expect(etag == nil, "\(header): \(String(describing: etag))")
    }

    /// A resumed range sent chunked, its total unknown (`bytes S-E/*`), with a Content-Length beside it that
    /// frames nothing — here one near Int64.max: the size was taken as that length plus the offset, which
    /// overflowed and stopped the worker (a trap). The transfer coding frames the body, so the length is
    /// not read, and the resumed file is whole.
    @Test("HTTP: a chunked resumed range with a Content-Length near Int64.max is downloaded, not a crash")
    func chunkedRangeWithHugeLengthIgnored() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/c.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }), .rewriteResponse { _, response in
                let range = response.header("Content-Range") ?? ""
                response.setHeader("Content-Range", String(range.prefix { $0 != "/" }) + "/*")
                response.setHeader("Transfer-Encoding", "chunked")
                response.setHeader("Content-Length", String(Int64.max))
            }, times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-chunked")
        defer { directory.remove() }
        guard let (backend, spec, point) = try await Self.pausedPartWay(proxy, "c.bin", into: directory, jobID: "01RANGECHUNK") else { return }
        let result = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01RANGECHUNK")))
        #expect(proxy.firedCounts == [1], "the chunked answer was served")
        #expect(result.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("c.bin"))) == payload)
    }

    /// download-memory asks for the whole object; a 206 (part of it) is not the object.
    @Test("HTTP: download-memory refuses a 206 to its request for the whole object")
    func memoryRefusesPartOfTheObject() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.prefix(300_000).write(to: URL(fileURLWithPath: server.root + "/m.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .respond(.response(206, headers: [ProxyHeader("Content-Range", "bytes 0-999/300000")],
                                                                      body: payload.prefix(1000))), times: 1),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let spec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/m.bin", maxSize: 1 << 20)
        let refused = try failure(await run(backend, spec))
        #expect(refused.retryable && refused.httpStatus == 206, "\(refused)")
        let result = try finished(await run(backend, spec))
        #expect(result.data == payload.prefix(300_000))
    }

    /// Two Content-Length headers that disagree (RFC 9112: an error): libcurl frames the body by one of
    /// them, and the joined value defeated the size check, so a cut body was committed as the file.
    @Test("HTTP: conflicting Content-Length headers are refused for a file and for memory", arguments: [JobKind.downloadFile, .downloadMemory])
    func conflictingLengthsRefused(_ kind: JobKind) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.prefix(300_000).write(to: URL(fileURLWithPath: server.root + "/c.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .rewriteResponse { _, response in
                response.setHeader("Content-Length", nil)
                // libcurl frames the body by the last one.
                response.headers.append(ProxyHeader("Content-Length", String(response.body.count)))
                response.headers.append(ProxyHeader("Content-Length", "10"))
                response.body = response.body.prefix(10)
            }, times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-two-lengths")
        defer { directory.remove() }
        let destination = directory.file("c.bin")
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let spec = kind == .downloadFile ? JobSpec(kind: kind, source: "\(proxy.baseURL)/c.bin", destination: destination)
                                         : JobSpec(kind: kind, source: "\(proxy.baseURL)/c.bin", maxSize: 1 << 20)
        let refused = try failure(await run(backend, spec))
        #expect(refused.retryable && refused.message.contains("conflicting Content-Length"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: destination))
        let result = try finished(await run(backend, spec))
        #expect(result.size == 300_000)
    }

    /// Of two Content-Length headers libcurl frames the body by the last; the longer body's rest, arriving
    /// after the answer was complete, stayed on the kept-alive connection, and the next request sent on it
    /// (any job's) read it as the start of its answer: "not HTTP". The connection is closed instead.
    @Test("HTTP: after conflicting Content-Length headers the connection is not reused: the next exchange gets a clean answer")
    func conflictingLengthsCloseTheConnection() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.prefix(1_000).write(to: URL(fileURLWithPath: server.root + "/n.bin"))
        let answer = ProxyMessage(startLine: "HTTP/1.1 200 OK",
                                  headers: [ProxyHeader("Content-Length", "11"), ProxyHeader("Content-Length", "10")],
                                  body: Data("0123456789X".utf8))
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Length: 10\r\n\r\n".utf8.count
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            // The body framed by the last length, then (once the client moves on, at most 2 s later) the 11th byte.
            FaultRule(RequestMatch(pathContains: "/two"), .respond(answer)),
            FaultRule(RequestMatch(pathContains: "/two"), .stallInResponse(afterBytes: head + 10, seconds: 2)),
        ])
        defer { proxy.stop() }
        let engine = try CurlEngine(threadName: "two-lengths-curl")
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5), engine: engine)
        let refused = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/two", maxSize: 1 << 20)))
        #expect(refused.message.contains("conflicting Content-Length"), "\(refused)")
        let next = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/n.bin", maxSize: 1 << 20)))
        #expect(next.data == payload.prefix(1_000))
        let exchanges = proxy.exchanges
        #expect(exchanges.count == 2 && exchanges.last?.indexOnConnection == 1, "the next request went on a new connection")
    }

    @Test("Content-Range's first byte", arguments: [
        ("bytes 0-99/100", Int64?.some(0)), ("bytes 1000000-2999999/3000000", 1_000_000), ("bytes 5-5/*", 5), ("Bytes 7-9/10", 7),
        ("bytes */100", nil), ("bytes 9-5/10", nil), ("bytes -5-9/10", nil), ("bytes 5-9", nil), ("items 0-9/10", nil), ("", nil),
        ("bytes 99999999999999999999-1/2", nil),
    ])
    func rangeStart(_ header: String, _ expected: Int64?) {
        #expect(FileSink.rangeStart(header) == expected, "\(header)")
    }

    /// A resume point holding every byte of the file: the point an attempt cut after its last byte
    /// leaves (a chunked answer without its last chunk). Made from a paused download's, with the rest of
    /// the file appended to the very partial file.
    private func heldWhole(_ point: ResumePoint) throws -> ResumePoint? {
        guard case .download(let written, let generation, let etag, let tempPath?, let file, _, _) = point else {
            Issue.record("\(point)"); return nil
        }
        let handle = try #require(FileHandle(forWritingAtPath: tempPath))
        try handle.seek(toOffset: UInt64(written))
        try handle.write(contentsOf: payload.suffix(from: Int(written)))
        try handle.synchronize()
        try handle.close()
        return .download(bytesWritten: Int64(payload.count), generation: generation, etag: etag, tempPath: tempPath, file: file,
                         total: Int64(payload.count))
    }

    /// Resumed with every byte held, the range from the end is answered `416` with `Content-Range: bytes
    /// */TOTAL`. It was taken for a change of size: the whole file dropped, and a job on its last attempt
    /// failed. The held bytes are the file (as `wget -c`'s "already fully retrieved"): committed, checked.
    @Test("HTTP: a resumed download holding every byte answered 416 for its size is committed")
    func completeDownloadAnswered416IsCommitted() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/c.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-complete")
        defer { directory.remove() }
        let destination = directory.file("c.bin")
        guard let (backend, spec, paused) = try await Self.pausedPartWay(proxy, "c.bin", into: directory, jobID: "01RANGEDONE"),
              let whole = try heldWhole(paused) else { return }
        let result = try finished(await run(backend, spec, resume: whole, control: TransferControl(jobID: "01RANGEDONE")))
        let last = try #require(proxy.exchanges.last { $0.request.method == "GET" })
        #expect(last.request.header("Range") == "bytes=\(payload.count)-" && last.response?.status == 416, "nginx's 416 was the answer")
        #expect(result.size == Int64(payload.count) && result.crc32c != nil)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["c.bin"], "no partial file left")
    }

    /// A 416 that does not say the held bytes are the file: another total, or the size held but another
    /// version's validator. The partial file is dropped as before, the log's point with it; only another
    /// total is called a change of size.
    @Test("HTTP: a 416 naming another size or version drops the held bytes, and says which",
          arguments: ["another total", "another version"])
    func otherFileAnswered416Drops(_ how: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/d.bin"))
        let total = payload.count
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.header("Range") != nil }), .rewriteResponse { _, response in
                if how == "another total" {
                    response.setHeader("Content-Range", "bytes */\(total + 10)")
                } else {
                    response.setHeader("ETag", "\"another-version\"")
                }
            }, times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-range-416")
        defer { directory.remove() }
        guard let (backend, spec, paused) = try await Self.pausedPartWay(proxy, "d.bin", into: directory, jobID: "01RANGE416"),
              let whole = try heldWhole(paused) else { return }
        let refusing = EventRecorder()
        let refused = try failure(await run(backend, spec, resume: whole, control: TransferControl(jobID: "01RANGE416"), recorder: refusing))
        #expect(proxy.firedCounts == [1])
        #expect(refused.retryable && refused.httpStatus == 416, "\(how): \(refused)")
        #expect(refused.message.contains("changed size") == (how == "another total"), "\(how): \(refused)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty, "\(how): no partial file kept")
        #expect(refusing.checkpoints.last?.bytesDone == 0, "\(how): the log's point holds no bytes: \(refusing.checkpoints)")
        let result = try finished(await run(backend, spec, resume: refusing.checkpoints.last ?? whole,
                                            control: TransferControl(jobID: "01RANGE416")))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("d.bin"))) == payload, "\(how): \(result)")
    }
}
