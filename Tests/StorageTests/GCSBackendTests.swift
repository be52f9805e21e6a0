import Foundation
@testable import JobModel
@testable import Storage
import TestSupport
import Testing

/// GCSBackend against a real gcp-storage-emulator on 127.0.0.1 (one per test).
@Suite("GCS backend against the emulator", .onTestThreads)
struct GCSBackendTests {
    // MARK: - Uploads

    @Test("upload-data: small object in one request, inferred content type, checksums; read back to memory; a session reports its URI first")
    func uploadDataSmall() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let payload = Data("hello, storage\n".utf8)
        let recorder = EventRecorder()
        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/notes/hello.txt",
                                                               data: payload), recorder: recorder))
        let expected = hashes(payload)
        #expect(uploaded.object?.name == "notes/hello.txt")
        #expect(uploaded.object?.size == Int64(payload.count))
        #expect(uploaded.object?.contentType == "text/plain")
        #expect(uploaded.object?.md5Hash == expected.md5)
        #expect(uploaded.object?.crc32c == expected.crc32c)
        #expect(uploaded.md5 == nil && uploaded.object?.md5Hash == expected.md5)
        // A small object goes in one request: no session, so nothing to resume from is reported.
        #expect(recorder.checkpoints.isEmpty, "\(recorder.all)")

        // In a resumable session (one-request uploads off), the session URI is reported before any data
        // is sent, so it can be persisted.
        var sessions = emulatorConfiguration(server)
        sessions.singleRequestLimit = 0
        let sessionRecorder = EventRecorder()
        _ = try finished(await run(GCSBackend(configuration: sessions), JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/notes/hello.txt",
                                                                                data: payload), recorder: sessionRecorder))
        guard case .upload(let uri, 0, let total, _)? = sessionRecorder.checkpoints.first else {
            Issue.record("no initial upload checkpoint: \(sessionRecorder.all)")
            return
        }
        #expect(uri.contains("upload_id="))
        #expect(total == Int64(payload.count))

        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/notes/hello.txt")))
        #expect(downloaded.data == payload)
        #expect(downloaded.md5 == nil && downloaded.object?.md5Hash == expected.md5)
        #expect(downloaded.crc32c == expected.crc32c)
    }

    @Test("upload-file: 1.5 MiB in 256 KiB chunks, a checkpoint per confirmed chunk; download-file matches")
    func uploadFileMultiChunk() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.file("big.bin")
        let payload = patternData(1_572_864 + 1234)
        try payload.write(to: URL(fileURLWithPath: source))
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let recorder = EventRecorder()
        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadFile, source: source,
                                                               destination: "gs://\(server.bucket)/data/big.bin"), recorder: recorder))
        #expect(uploaded.object?.size == Int64(payload.count))
        #expect(uploaded.object?.md5Hash == hashes(payload).md5)
        let offsets = recorder.checkpoints.map(\.bytesDone)
        #expect(offsets == [0, 262_144, 524_288, 786_432, 1_048_576, 1_310_720, 1_572_864], "offsets: \(offsets)")
        #expect(recorder.progress.last == Int64(payload.count))

        let destination = directory.file("out/big.bin")
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/data/big.bin",
                                                                 destination: destination)))
        #expect(downloaded.path == destination)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        #expect(downloaded.md5 == nil && downloaded.object?.md5Hash == hashes(payload).md5)
        #expect(!FileManager.default.fileExists(atPath: PartialFile.tempPath(for: destination)))
    }

    @Test("an empty object uploads and downloads")
    func emptyObject() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/empty",
                                                               data: Data())))
        #expect(uploaded.object?.size == 0)
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/empty")))
        #expect(downloaded.data == Data())
    }

    @Test("a paused upload resumes from the persisted session and offset in a fresh backend")
    func resumableUploadAcrossRestart() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let source = directory.file("resume.bin")
        let payload = patternData(1_300_000, seed: 42)
        try payload.write(to: URL(fileURLWithPath: source))
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "gs://\(server.bucket)/resume.bin")

        // First process: pause once the server confirmed half a megabyte.
        let control = TransferControl()
        let first = EventRecorder { event in
            if case .checkpoint(let point, _) = event, point.bytesDone >= 524_288 { control.stop(.pause) }
        }
        let outcome = try await run(GCSBackend(configuration: emulatorConfiguration(server)), spec, control: control, recorder: first).get()
        guard case .stopped(.pause, let point?) = outcome, case .upload(_, let confirmed, let total, _) = point else {
            Issue.record("expected a paused upload with a resume point, got \(outcome)")
            return
        }
        #expect(confirmed >= 524_288 && confirmed < Int64(payload.count))
        #expect(total == Int64(payload.count))

        // The resume point survives a round trip through the log's JSON.
        let persisted = try JSONDecoder().decode(ResumePoint.self, from: JSONEncoder().encode(point))

        // Second process: only the resume point is known.
        let second = EventRecorder()
        let result = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)), spec,
                                            resume: persisted, recorder: second))
        #expect(result.object?.md5Hash == hashes(payload).md5)
        #expect(result.object?.crc32c == hashes(payload).crc32c)
        #expect(result.md5 == nil && result.object?.md5Hash == hashes(payload).md5)
        // It continued where the server was, not from zero.
        #expect(second.checkpoints.first?.bytesDone == confirmed)
        #expect(!second.checkpoints.contains { $0.bytesDone == 0 })
        let downloaded = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                                JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/resume.bin", maxSize: 1 << 22)))
        #expect(downloaded.data == payload)
    }

    @Test("an upload paused before any chunk was confirmed resumes from 0 (the emulator's `bytes=0-0` quirk)")
    func resumeBeforeFirstChunk() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let payload = patternData(600_000, seed: 8)
        let spec = JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/early.bin", data: payload)
        let control = TransferControl()
        // Stop as soon as the session exists: the first chunk is aborted before the server confirms it.
        let first = EventRecorder { event in
            if case .checkpoint = event { control.stop(.shutdown) }
        }
        let outcome = try await run(GCSBackend(configuration: emulatorConfiguration(server)), spec, control: control, recorder: first).get()
        guard case .stopped(.shutdown, let point?) = outcome, case .upload(_, 0, _, _) = point else {
            Issue.record("expected a stop at offset 0, got \(outcome)")
            return
        }
        let second = EventRecorder()
        let result = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)), spec, resume: point, recorder: second))
        #expect(result.object?.md5Hash == hashes(payload).md5, "a one-byte offset would corrupt the object")
        #expect(second.checkpoints.first?.bytesDone == 0)
    }

    @Test("a cancelled upload stops with no resume point")
    func cancelledUpload() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let control = TransferControl()
        let recorder = EventRecorder { event in
            if case .checkpoint(let point, _) = event, point.bytesDone > 0 { control.stop(.cancel) }
        }
        let outcome = try await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                    JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/cancel.bin", data: patternData(800_000)),
                                    control: control, recorder: recorder).get()
        #expect(outcome == .stopped(.cancel, nil))
    }

    // MARK: - Downloads

    @Test("an interrupted download resumes with Range and fetches only the rest")
    func rangedDownloadResume() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, chunkSize: 8 << 20))
        let payload = patternData(3_000_000, seed: 5)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/dl.bin", data: payload)))
        let destination = directory.file("dl.bin")
        let spec = JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/dl.bin", destination: destination)

        let control = TransferControl()
        let first = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 1_000_000 { control.stop(.pause) }
        }
        let outcome = try await run(backend, spec, control: control, recorder: first).get()
        guard case .stopped(.pause, let point?) = outcome, case .download(let written, let generation, _, let temp, _, _, _) = point else {
            Issue.record("expected a paused download, got \(outcome)")
            return
        }
        #expect(written >= 1_000_000 && written < Int64(payload.count))
        #expect(generation != nil)
        #expect(temp.map { FileManager.default.fileExists(atPath: $0) } == true)
        #expect(!FileManager.default.fileExists(atPath: destination))

        let second = EventRecorder()
        let journal = FileIO.Journal()
        let result = try finished(await FileIO.$journal.withValue(journal) { await run(backend, spec, resume: point, recorder: second) })
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
        #expect(result.md5 == nil && result.object?.md5Hash == hashes(payload).md5)
        // The kept bytes were read once: the check of their recorded CRC32C fed the whole file's hashes.
        #expect(journal.recorded.filter { $0 == .readBack }.count == 1, "\(journal.recorded)")
        // The second attempt started at the written offset: it fetched fewer bytes than the object.
        let firstReported = try #require(second.progress.first)
        #expect(firstReported == written)
        #expect(Int64(payload.count) - firstReported < Int64(payload.count))
    }

    /// A partial prefix changed on the disk between two attempts (one byte inverted in place: same size,
    /// same inode). After a pause the point records the prefix's CRC32C, so the resuming attempt finds the
    /// change before it fetches a byte and downloads the whole object; after a crash (a periodic
    /// checkpoint, no CRC32C) the object's CRC32C catches it at the end. That failed the job for good as
    /// `nonMatchingChecksum`, blaming an object that was whole: now retryable, the copy removed, and the
    /// next attempt, from byte 0, gets the object.
    @Test("a partial prefix changed on disk: a paused one starts over, a crashed one's mismatch is retryable",
          arguments: [true, false])
    func changedPrefixIsNotTheObjectsFault(paused: Bool) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, chunkSize: 8 << 20))
        let payload = patternData(2_000_000, seed: 9)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/sum.bin", data: payload)))
        let destination = directory.file("sum.bin")
        let spec = JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/sum.bin", destination: destination)
        let control = TransferControl()
        let first = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 500_000 { control.stop(.pause) }
        }
        let outcome = try await run(backend, spec, control: control, recorder: first).get()
        guard case .stopped(.pause, let stopped?) = outcome, case .download(_, _, _, let temp?, _, _, _) = stopped else {
            Issue.record("expected a paused download, got \(outcome)")
            return
        }
        #expect(stopped.prefixCRC32C != nil, "a pause records the CRC32C of what it kept: \(stopped)")
        let point = paused ? stopped : stopped.withoutPrefixCRC32C
        try invertBytes(at: 1000, count: 1, inFileAt: temp)

        let second = EventRecorder()
        if paused {
            _ = try finished(await run(backend, spec, resume: point, recorder: second))
            #expect(second.progress.first == 0, "the changed prefix was continued: \(second.progress.prefix(3))")
        } else {
            let error = try failure(await run(backend, spec, resume: point, recorder: second))
            #expect(error.code == .nonMatchingChecksum)
            #expect(error.retryable, "\(error)")
            #expect(!FileManager.default.fileExists(atPath: destination))
            #expect(!FileManager.default.fileExists(atPath: temp))
            #expect(second.checkpoints.last?.holdsNoDownloadedBytes == true, "\(second.checkpoints)")
            _ = try finished(await run(backend, spec, resume: second.checkpoints.last))
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)
    }

    /// A download from byte 0 whose bytes do not match the object's CRC32C is the object's or the server's
    /// fault: `nonMatchingChecksum` for good, nothing left behind.
    @Test func aWholeDownloadThatDoesNotMatchFailsForGood() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let payload = patternData(300_000, seed: 4)
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .rewriteResponse { _, response in
                var body = response.body
                if !body.isEmpty { body[body.startIndex] ^= 0xFF }
                response.body = body
            }),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/whole.bin", data: payload)))
        let destination = directory.file("whole.bin")
        let proxied = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: proxy.baseURL, usesEmulator: true,
                                                                     firebaseEndpoint: proxy.baseURL, stallTimeout: 30, connectTimeout: 5))
        let error = try failure(await run(proxied, JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/whole.bin", destination: destination)))
        #expect(error.code == .nonMatchingChecksum && !error.retryable, "\(error)")
        #expect(!FileManager.default.fileExists(atPath: destination))
    }

    @Test("download-memory refuses an object above max_size before reading its body")
    func maxSizeRefusedEarly() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/large.bin",
                                                    data: patternData(100_000))))
        let recorder = EventRecorder()
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/large.bin",
                                                           maxSize: 1000), recorder: recorder))
        #expect(error.code == .downloadSizeExceeded)
        #expect(error.total == 100_000)
        #expect(error.maximum == 1000)
        #expect(error.message == "object 'gs://\(server.bucket)/large.bin' is 100000 bytes, more than max_size 1000 bytes; raise max_size or use download-file")
        #expect(recorder.progress.allSatisfy { $0 == 0 }, "no body bytes may be read: \(recorder.progress)")
    }

    /// The media answer holds more than the object the metadata describes — a proxy that dropped
    /// `Accept-Encoding`, so GCS decompressed a gzip-stored object on the way, or another body spliced in —
    /// past the job's max_size though the object is within it. That is the transfer's fault, as a longer
    /// answer below max_size is (and as a download to a file takes it): retryable, nothing kept. It failed
    /// for good as downloadSizeExceeded, "the object is 150000 bytes, more than the maximum", with the
    /// object's own 100,000 bytes as its total, telling the user to raise a limit the object fits.
    @Test("download-memory: an answer longer than the object, past max_size, is retryable, not downloadSizeExceeded",
          arguments: [false, true])
    func answerLongerThanTheObject(unframed: Bool) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let payload = patternData(100_000, seed: 61)
        _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                   JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/longer.bin", data: payload)))
        let media = RequestMatch(method: "GET", pathContains: "alt=media")
        var rules = [FaultRule(media, .rewriteResponse { _, response in
            response.body += patternData(50_000, seed: 62)
            response.setHeader("Content-Length", String(response.body.count))
        }, times: .max)]
        // Without a Content-Length the excess is found while the body arrives, not from the headers.
        if unframed { rules.append(FaultRule(media, .unframedResponse, times: .max)) }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: rules)
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/longer.bin", maxSize: 120_000)))
        #expect(error.code == .unknown && error.retryable, "\(error)")
        #expect(!error.message.contains("max_size"), "\(error.message)")
        #expect(proxy.firedCounts.first == 1)
    }

    @Test("a cancelled download removes its partial file")
    func cancelledDownloadRemovesPartial() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, chunkSize: 8 << 20))
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/c.bin", data: patternData(2_000_000))))
        let destination = directory.file("c.bin")
        let control = TransferControl()
        let recorder = EventRecorder { event in
            if case .progress(let done, _) = event, done > 300_000 { control.stop(.cancel) }
        }
        let outcome = try await run(backend, JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/c.bin", destination: destination),
                                    control: control, recorder: recorder).get()
        #expect(outcome == .stopped(.cancel, nil))
        #expect(!FileManager.default.fileExists(atPath: destination))
        #expect(!FileManager.default.fileExists(atPath: PartialFile.tempPath(for: destination)))
    }

    // MARK: - Metadata

    @Test("content types are inferred from the extension unless explicit; metadata round-trips")
    func metadataAndContentTypes() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let photo = directory.file("photo.jpg")
        try Data([0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3]).write(to: URL(fileURLWithPath: photo))

        let inferred = try finished(await run(backend, JobSpec(kind: .uploadFile, source: photo,
                                                               destination: "gs://\(server.bucket)/img/photo.jpg")))
        #expect(inferred.object?.contentType == "image/jpeg")

        let unknown = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/blob.unknownext",
                                                              data: Data("x".utf8))))
        #expect(unknown.object?.contentType == "application/octet-stream")

        let metadata = UploadMetadata(contentType: "application/x-custom", cacheControl: "public, max-age=60",
                                      contentDisposition: "attachment; filename=\"report.txt\"", contentLanguage: "en",
                                      customMetadata: ["owner": "night-shift", "batch": "42"])
        let explicit = try finished(await run(backend, JobSpec(kind: .uploadFile, source: photo,
                                                               destination: "gs://\(server.bucket)/img/explicit.jpg", metadata: metadata)))
        #expect(explicit.object?.contentType == "application/x-custom")
        #expect(explicit.object?.cacheControl == "public, max-age=60")
        #expect(explicit.object?.contentDisposition == "attachment; filename=\"report.txt\"")
        #expect(explicit.object?.contentLanguage == "en")
        #expect(explicit.object?.customMetadata == ["owner": "night-shift", "batch": "42"])

        // Read back independently of the upload's answer.
        let fetched = try finished(await run(backend, JobSpec(kind: .fetchURL, source: "gs://\(server.bucket)/img/explicit.jpg")))
        #expect(fetched.object?.contentType == "application/x-custom")
        #expect(fetched.object?.customMetadata == ["owner": "night-shift", "batch": "42"])
    }

    @Test("fetch-url creates a download token once and reuses it; the URL serves the bytes")
    func fetchURLToken() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let payload = Data("token me".utf8)
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/dir/file name.txt", data: payload,
                                                    metadata: UploadMetadata(customMetadata: ["keep": "me"]))))
        let first = try finished(await run(backend, JobSpec(kind: .fetchURL, source: "gs://\(server.bucket)/dir/file%20name.txt")))
        let url = try #require(first.url)
        let prefix = "\(server.baseURL)/v0/b/\(server.bucket)/o/dir%2Ffile%20name.txt?alt=media&token="
        #expect(url.hasPrefix(prefix), "\(url)")
        let token = String(url.dropFirst(prefix.count))
        #expect(UUID(uuidString: token) != nil)
        #expect(first.object?.downloadTokens == token)
        #expect(first.object?.customMetadata == ["keep": "me"], "creating the token must keep other metadata")

        let second = try finished(await run(backend, JobSpec(kind: .fetchURL, source: "gs://\(server.bucket)/dir/file%20name.txt")))
        #expect(second.url == url)

        // The Firebase-form URL names the object where STORAGE_EMULATOR_HOST names its host (here given
        // to the parse: this process has no such variable); on any other host it is a plain URL.
        let plain = String(url.prefix(while: { $0 != "?" }))
        let named = try StorageReference(parsing: plain, firebaseHosts: ["firebasestorage.googleapis.com", "127.0.0.1:\(server.port)"])
        #expect(named.description == "gs://\(server.bucket)/dir/file%20name.txt")
        let viaURL = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: named.description)))
        #expect(viaURL.data == payload)
        #expect(try StorageReference(parsing: plain).scheme == .http)
    }

    // MARK: - Errors

    @Test("a missing object is objectNotFound, a missing bucket is bucketNotFound")
    func notFoundErrors() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let missingObject = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/nope.txt")))
        #expect(missingObject.code == .objectNotFound)
        #expect(missingObject.httpStatus == 404)
        #expect(missingObject.url?.contains("/o/nope.txt") == true)
        #expect(!missingObject.retryable)

        let missingBucket = try failure(await run(backend, JobSpec(kind: .fetchURL, source: "gs://no-such-bucket/x.txt")))
        #expect(missingBucket.code == .bucketNotFound)
        #expect(missingBucket.httpStatus == 404)

        let uploadToMissingBucket = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "gs://no-such-bucket/x.txt",
                                                                           data: Data("x".utf8))))
        #expect(uploadToMissingBucket.code == .bucketNotFound)
    }

    @Test("a missing local source file is a pathError, not retryable")
    func missingSourceFile() async throws {
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: "http://127.0.0.1:9"))
        let error = try failure(await run(backend, JobSpec(kind: .uploadFile, source: "/nonexistent/dir/file.bin",
                                                           destination: "gs://b/file.bin")))
        #expect(error.code == .pathError)
        #expect(!error.retryable)
    }

    @Test("connection refused is a retryable error with curl's text as the cause")
    func connectionRefused() async throws {
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: "http://127.0.0.1:\(port)", connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://bucket/object")))
        #expect(error.retryable)
        #expect(error.httpStatus == nil)
        #expect(error.cause?.contains("curl error 7") == true, "\(String(describing: error.cause))")
        #expect(error.url?.hasPrefix("http://127.0.0.1:\(port)/storage/v1/b/bucket/o/object") == true)
    }

    @Test("a token command is used for the bearer token and never appears in errors")
    func tokenCommandNeverLeaks() async throws {
        let port = freeLoopbackPort()
        let secret = "ya29.secret-\(UUID().uuidString)"
        let configuration = StorageConfiguration(gcsEndpoint: "http://127.0.0.1:\(port)", tokenCommand: "echo \(secret)", connectTimeout: 5)
        #expect(!configuration.description.contains(secret))
        let error = try failure(await run(GCSBackend(configuration: configuration),
                                          JobSpec(kind: .downloadMemory, source: "gs://bucket/object")))
        #expect(!"\(error)".contains(secret))
        #expect(!(error.cause ?? "").contains(secret))
        let failing = StorageConfiguration(gcsEndpoint: "http://127.0.0.1:\(port)", tokenCommand: "exit 3")
        let tokenError = try failure(await run(GCSBackend(configuration: failing), JobSpec(kind: .downloadMemory, source: "gs://bucket/object")))
        #expect(tokenError.code == .unauthenticated)
    }
}
