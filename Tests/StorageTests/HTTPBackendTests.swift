import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// HTTPBackend against a real nginx on 127.0.0.1 (GET with Range/If-Range/ETag, WebDAV PUT).
@Suite("HTTP backend against nginx", .onTestThreads)
struct HTTPBackendTests {
    private func configuration() -> StorageConfiguration {
        StorageConfiguration(stallTimeout: 30, connectTimeout: 5)
    }

    @Test("PUT upload then GET download round-trips the bytes and checksums")
    func putThenGet() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let payload = patternData(700_000, seed: 3)
        let source = directory.file("up.json")
        try payload.write(to: URL(fileURLWithPath: source))
        let backend = HTTPBackend(configuration: configuration())

        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadFile, source: source,
                                                               destination: "\(server.baseURL)/deep/dir/up.json")))
        #expect(uploaded.size == Int64(payload.count))
        #expect(uploaded.md5 == nil, "MD5 is computed only when asked or the only hash offered")
        #expect(uploaded.object?.contentType == "application/json")
        #expect(try Data(contentsOf: URL(fileURLWithPath: server.root + "/deep/dir/up.json")) == payload)

        let data = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/inline.txt",
                                                           data: Data("inline".utf8))))
        #expect(data.size == 6)

        let destination = directory.file("down/up.json")
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/deep/dir/up.json",
                                                                 destination: destination)))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        #expect(downloaded.md5 == nil)
        #expect(downloaded.crc32c == hashes(payload).crc32c)

        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/inline.txt")))
        #expect(memory.data == Data("inline".utf8))

        let recorder = EventRecorder()
        let refused = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/deep/dir/up.json",
                                                             maxSize: 1000), recorder: recorder))
        #expect(refused.code == .downloadSizeExceeded)
        #expect(refused.total == Int64(payload.count))
        #expect(refused.maximum == 1000)
        // The one wording every backend uses (the URL beside it names the object).
        #expect(refused.message == "the object is \(payload.count) bytes, more than max_size 1000 bytes; raise max_size or use download-file")
        #expect(recorder.progress.allSatisfy { $0 == 0 })
    }

    @Test("an interrupted GET resumes with Range + If-Range and fetches only the rest")
    func rangedResume() async throws {
        let fixture = try BigFileFixture("big.bin", size: 24 << 20)
        defer { fixture.stop() }
        let (server, directory, backend, total) = (fixture.server, fixture.directory, fixture.backend, fixture.size)
        let destination = directory.file("big.bin")
        let spec = JobSpec(kind: .downloadFile, source: "\(server.baseURL)/big.bin", destination: destination)

        let control = TransferControl()
        let first = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 4 << 20 { control.stop(.pause) }
        }
        let firstJournal = FileIO.Journal()
        let outcome = try await FileIO.$journal.withValue(firstJournal) { await run(backend, spec, control: control, recorder: first) }.get()
        // Paused: the bytes so far were synced for the next attempt — off the cooperative pool, unless
        // the file is on tmpfs, where a sync returns at once — and nothing was read back.
        let filesystem = try runProcess("/usr/bin/stat", ["-f", "--format=%T", directory.path]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(firstJournal.recorded == (filesystem == "tmpfs" ? [] : [.sync]), "\(filesystem): \(firstJournal.recorded)")
        guard case .stopped(.pause, let point?) = outcome, case .download(let written, _, let etag, _, _, _, _) = point else {
            Issue.record("expected a paused download, got \(outcome)")
            return
        }
        #expect(written >= 4 << 20 && written < total)
        #expect(etag?.isEmpty == false)

        let second = EventRecorder()
        let secondJournal = FileIO.Journal()
        let result = try finished(await FileIO.$journal.withValue(secondJournal) { await run(backend, spec, resume: point, recorder: second) })
        #expect(result.size == total)
        // The 4 MiB already there were hashed again off the cooperative pool, before the rest came — read
        // once: the check of their recorded CRC32C fed the whole file's hashes too.
        #expect(secondJournal.recorded.first == .readBack, "\(secondJournal.recorded)")
        #expect(secondJournal.recorded.filter { $0 == .readBack }.count == 1, "\(secondJournal.recorded)")
        // A durable checkpoint (after fsync) every 8 MiB, each carrying the validator for the next resume.
        let checkpoints = second.checkpoints
        #expect(checkpoints.count == 2, "\(checkpoints)")
        var previous = written
        for case .download(let bytes, _, let validator, _, _, _, _) in checkpoints {
            #expect(bytes - previous >= 8 << 20 && bytes - previous < 9 << 20, "checkpoint gap \(bytes - previous)")
            #expect(validator == etag)
            previous = bytes
        }
        #expect(try fileMD5(destination) == fileMD5(server.root + "/big.bin"))
        // nginx logged the second request as a 206 carrying only the missing bytes. (The paused first
        // request may be logged after it: nginx logs it when it notices the connection went away.)
        let lines = server.accessLogLines(atLeast: 2) { $0.contains("GET /big.bin") }
        let statuses = lines.map { $0.split(separator: "\"")[2].split(separator: " ") }   // ` 206 BYTES `
        #expect(statuses.map { $0.first } == ["200", "206"] || statuses.map { $0.first } == ["206", "200"], "\(lines)")
        let fields = try #require(statuses.first { $0.first == "206" })
        let sent = try #require(fields.dropFirst().first.flatMap { Int64($0) })
        #expect(sent == total - written)
        #expect(sent < total)
    }

    /// A download of a `size`-byte pattern file `f.bin` from `server` into `directory`, paused after
    /// 2 MiB: the backend, the job and the outcome (a pause with its resume point).
    private func pausedDownload(of size: Int64, from server: NginxServer, into directory: TemporaryDirectory)
        async throws -> (HTTPBackend, JobSpec, TransferOutcome) {
        try writePatternFile(server.root + "/f.bin", size: size, seed: 1)
        let backend = HTTPBackend(configuration: configuration())
        let spec = JobSpec(kind: .downloadFile, source: "\(server.baseURL)/f.bin", destination: directory.file("f.bin"))
        let control = TransferControl()
        let first = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 2 << 20 { control.stop(.pause) }
        }
        return (backend, spec, try await run(backend, spec, control: control, recorder: first).get())
    }

    @Test("a file changed since the pause is fetched whole (If-Range fails → 200) and still verifies")
    func changedFileRestarts() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (backend, spec, outcome) = try await pausedDownload(of: 16 << 20, from: server, into: directory)
        let destination = try #require(spec.destination)
        guard case .stopped(.pause, let point?) = outcome else {
            Issue.record("expected a paused download, got \(outcome)")
            return
        }
        // Replace the file with different content of another size (hence another ETag).
        try writePatternFile(server.root + "/f.bin", size: 10 << 20, seed: 2)
        let result = try finished(await run(backend, spec, resume: point))
        #expect(result.size == 10 << 20)
        #expect(try fileMD5(destination) == fileMD5(server.root + "/f.bin"))
        let last = try #require(server.accessLog.split(separator: "\n").last)
        #expect(last.contains("\" 200 10485760 \"bytes="), "a ranged request answered whole: \(last)")
    }

    /// A paused download's partial file edited in place while the job waits (same size, same inode, the
    /// file on the server unchanged): nginx serves no hash, so the resumed attempt joined the rest to the
    /// changed prefix and the job succeeded with a file that matched nothing. The pause now records the
    /// prefix's CRC32C; the resuming attempt reads the prefix back, finds it changed and downloads the
    /// whole file.
    @Test func aPartialFileEditedDuringThePauseIsDownloadedAgain() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (backend, spec, outcome) = try await pausedDownload(of: 6 << 20, from: server, into: directory)
        let destination = try #require(spec.destination)
        guard case .stopped(.pause, let point?) = outcome, case .download(let written, _, _, let tempPath?, _, _, _) = point else {
            Issue.record("expected a paused download with its temporary file, got \(outcome)")
            return
        }
        #expect(point.prefixCRC32C != nil, "\(point)")
        try invertBytes(at: 1000, count: 7, inFileAt: tempPath)
        let second = EventRecorder()
        let result = try finished(await run(backend, spec, resume: point, recorder: second))
        #expect(result.size == 6 << 20)
        #expect(try fileMD5(destination) == fileMD5(server.root + "/f.bin"), "a changed prefix was joined to the rest")
        #expect(second.checkpoints.first?.holdsNoDownloadedBytes == true, "the log kept the \(written) changed bytes: \(second.checkpoints)")
        // (An untouched prefix is still continued, its CRC32C recorded as here: `rangedResume`.)
    }

    /// A download cut by a reset keeps its bytes for the retry, which resumed from the last periodic
    /// checkpoint, unchecked: a partial file edited during the backoff was finished around the change and
    /// the job succeeded with a file that matched nothing (nginx serves no hash). The failing attempt now
    /// hands over a checkpoint of every byte it kept, with their CRC32C; the retry resumes from all of them,
    /// and from byte 0 when they changed.
    @Test(arguments: [false, true])
    func aRetryResumesFromEveryKeptByteAndChecksThem(edited: Bool) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try writePatternFile(server.root + "/f.bin", size: 3 << 20, seed: 3)
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "/f.bin"), .resetInResponse(afterBytes: 1 << 20), times: 1),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: configuration())
        let destination = directory.file("f.bin")
        let spec = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/f.bin", destination: destination)
        let first = EventRecorder()
        let error = try failure(await run(backend, spec, recorder: first))
        #expect(error.retryable, "\(error)")
        let point = try #require(first.checkpoints.last, "the failed attempt left no point to resume from")
        guard case .download(let written, _, _, let tempPath?, _, _, let crc32c) = point else { Issue.record("\(point)"); return }
        #expect(written > 0 && written < 3 << 20 && crc32c != nil, "\(point)")
        if edited { try invertBytes(at: 100, count: 5, inFileAt: tempPath) }
        let second = EventRecorder()
        _ = try finished(await run(backend, spec, resume: point, recorder: second))
        #expect(try fileMD5(destination) == fileMD5(server.root + "/f.bin"), "a changed prefix was joined to the rest")
        if edited {
            #expect(second.checkpoints.first?.holdsNoDownloadedBytes == true, "\(second.checkpoints)")
        } else {
            #expect(!second.checkpoints.contains { $0.holdsNoDownloadedBytes }, "\(second.checkpoints)")
            #expect((second.progress.first ?? 0) >= written, "the retry did not resume from the kept bytes: \(second.progress.prefix(3))")
        }
    }

    @Test("a restart from byte 0 writes a new file: a stale attempt still holding the old one cannot reach the result")
    func restartLeavesTheOldFileToItsWriter() async throws {
        // Worker A paused (here: stopped) part-way, then frozen past its lease with the partial file open;
        // worker B resumes that file, the object changed meanwhile, so B's ranged request is answered whole.
        // A, woken, goes on writing the old object's bytes at its own offset before it hears its lease is
        // gone. Emptying the file in place let those bytes land in B's result: a file that matched nothing
        // reported as downloaded. Now B restarts in a new file and A writes only into the one it holds.
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let (backend, spec, outcome) = try await pausedDownload(of: 8 << 20, from: server, into: directory)
        let destination = try #require(spec.destination)
        guard case .stopped(.pause, let point?) = outcome, case .download(let written, _, _, let tempPath?, _, _, _) = point else {
            Issue.record("expected a paused download with its temporary file, got \(outcome)")
            return
        }
        let stale = try #require(FileHandle(forWritingAtPath: tempPath))
        defer { try? stale.close() }
        let staleBytes = try Data(contentsOf: URL(fileURLWithPath: server.root + "/f.bin"))[Int(written)..<Int(written) + (1 << 20)]

        // Another size, hence another ETag (nginx's is the time in seconds and the size).
        try writePatternFile(server.root + "/f.bin", size: 6 << 20, seed: 2)
        let result = try finished(await run(backend, spec, resume: point))
        #expect(result.size == 6 << 20)
        // A wakes and writes the next MiB of the old object where it stood.
        try stale.seek(toOffset: UInt64(written))
        try stale.write(contentsOf: staleBytes)
        try stale.synchronize()
        #expect(try fileMD5(destination) == fileMD5(server.root + "/f.bin"), "the old attempt's bytes landed in the downloaded file")
    }

    @Test("404 is objectNotFound; secrets in the query never reach the error")
    func notFoundAndRedaction() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let backend = HTTPBackend(configuration: configuration())
        let url = "\(server.baseURL)/missing.bin?token=SECRET1&X-Goog-Signature=SECRET2&upload_id=SECRET3&keep=yes"
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: url)))
        #expect(error.code == .objectNotFound)
        #expect(error.httpStatus == 404)
        #expect(!error.retryable)
        let shown = "\(error) \(error.url ?? "") \(error.cause ?? "")"
        #expect(!shown.contains("SECRET"))
        #expect(error.url == "\(server.baseURL)/missing.bin?token=REDACTED&X-Goog-Signature=REDACTED&upload_id=REDACTED&keep=yes")

        let fetch = try failure(await run(backend, JobSpec(kind: .fetchURL, source: "\(server.baseURL)/x")))
        #expect(fetch.code == .invalidArgument)
    }

    @Test("connection refused is retryable")
    func connectionRefused() async throws {
        let backend = HTTPBackend(configuration: configuration())
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "http://\(closed.hostAndPort)/x?access_token=SECRET")))
        #expect(error.retryable)
        #expect(error.url?.contains("SECRET") == false)
    }
}

/// The router hands the HTTP backend the reference it parsed to choose the backend, so a job's URL is
/// parsed once per attempt: the plan made from it must be the one the backend makes on its own.
@Suite("HTTP jobs through the router", .onTestThreads)
struct RouterHTTPTests {
    @Test("the router's parsed reference gives the same outcome as the HTTP backend parsing the job itself")
    func sameOutcomeAsDirect() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let files = try TemporaryDirectory()
        defer { files.remove() }
        let payload = patternData(20_000, seed: 3)
        try payload.write(to: URL(fileURLWithPath: server.root + "/in.bin"))
        try payload.write(to: URL(fileURLWithPath: files.file("up.bin")))
        let configuration = StorageConfiguration(executableUploadPolicy: ["*"], stallTimeout: 30, connectTimeout: 5)
        let router = StorageRouter(configuration: configuration)
        let direct = HTTPBackend(configuration: configuration)
        let base = server.baseURL
        let specs: [(String, JobSpec)] = [
            ("download-memory", JobSpec(kind: .downloadMemory, source: "\(base)/in.bin", maxSize: 1 << 20)),
            ("download-file", JobSpec(kind: .downloadFile, source: "\(base)/in.bin?x=1#frag", destination: files.file("OUT"))),
            ("upload-file", JobSpec(kind: .uploadFile, source: files.file("up.bin"), destination: "\(base)/dir/UP.bin")),
            ("bucket root", JobSpec(kind: .downloadMemory, source: "\(base)/", maxSize: 1 << 20)),
            ("blocked upload", JobSpec(kind: .uploadData, destination: "\(base)/tool.exe", data: Data("x".utf8))),
            ("fetch-url", JobSpec(kind: .fetchURL, source: "\(base)/in.bin")),
            ("missing", JobSpec(kind: .downloadMemory, source: "\(base)/nothing-here", maxSize: 1 << 20)),
        ]
        for (label, spec) in specs {
            var routed = spec
            var alone = spec
            if spec.kind == .downloadFile {
                routed.destination = files.file("routed.bin")
                alone.destination = files.file("alone.bin")
            }
            if spec.kind == .uploadFile {
                routed.destination = "\(base)/dir/routed.bin"
                alone.destination = "\(base)/dir/alone.bin"
            }
            // The completion form (what a worker's task runner calls) routes the same way.
            let completed = spec.kind == .downloadFile || spec.kind == .uploadFile ? nil : await withCheckedContinuation { done in
                router.perform(routed, resumingFrom: nil, control: TransferControl(), report: { _ in }) { done.resume(returning: $0) }
            }
            let viaRouter = await run(router, routed)
            let viaBackend = await run(direct, alone)
            if let completed {
                switch (completed, viaRouter) {
                case (.success(.finished(let a)), .success(.finished(let b))):
                    #expect(a.data == b.data && a.size == b.size && a.crc32c == b.crc32c, "\(label), completion form")
                case (.failure(let a), .failure(let b)):
                    #expect(a.code == b.code && a.message == b.message && a.httpStatus == b.httpStatus, "\(label), completion form: \(a) vs \(b)")
                default:
                    Issue.record("\(label): the completion form gave \(completed), the async form \(viaRouter)")
                }
            }
            switch (viaRouter, viaBackend) {
            case (.success(.finished(let a)), .success(.finished(let b))):
                #expect(a.data == b.data && a.size == b.size && a.crc32c == b.crc32c, "\(label)")
            case (.failure(let a), .failure(let b)):
                #expect(a.code == b.code && a.message.replacingOccurrences(of: "routed", with: "alone") == b.message
                        && a.httpStatus == b.httpStatus, "\(label): \(a) vs \(b)")
            default:
                Issue.record("\(label): the router gave \(viaRouter), the backend \(viaBackend)")
            }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: files.file("routed.bin"))) == payload)
        #expect(try Data(contentsOf: URL(fileURLWithPath: server.root + "/dir/routed.bin")) == payload)
    }
}
