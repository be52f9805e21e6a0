import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// Uploads through the fault proxy in front of real servers (nginx, the GCS emulator): connections
/// reset mid-body on reused keep-alive connections, answers lost after the server acted, servers that
/// confirm bytes never sent, bytes corrupted on the way.
@Suite("Upload faults", .onTestThreads)
struct UploadFaultTests {
    // MARK: - Set-up

    /// The emulator with a fault proxy in front; `backend` talks to the proxy, `direct` to the emulator.
    struct ProxiedEmulator {
        let server: EmulatorServer
        let proxy: FaultProxy

        /// Uploads sent in one request up to this size (capped by the 256 KiB chunk); 0 (the default here):
        /// every upload in a session, whose faults most of these tests are about.
        let singleRequestLimit: Int

        init(_ rules: [FaultRule], singleRequestLimit: Int = 0) throws {
            self.singleRequestLimit = singleRequestLimit
            server = try EmulatorServer.start()
            do {
                proxy = try FaultProxy(upstreamPort: server.port, rules: rules)
            } catch {
                server.stop()
                throw error
            }
        }

        var backend: GCSBackend {
            GCSBackend(configuration: StorageConfiguration(gcsEndpoint: proxy.baseURL, usesEmulator: true, firebaseEndpoint: proxy.baseURL,
                                                           chunkSize: 256 * 1024, singleRequestLimit: singleRequestLimit,
                                                           stallTimeout: 30, connectTimeout: 5))
        }

        var direct: GCSBackend { GCSBackend(configuration: emulatorConfiguration(server)) }

        /// The object's bytes, read straight from the emulator (and verified against its MD5/CRC32C).
        func storedBytes(_ name: String) async throws -> Data? {
            let result = try finished(await run(direct, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/\(name)", maxSize: 1 << 24)))
            return result.data
        }

        /// Whether the object exists on the emulator.
        func exists(_ name: String) async -> Bool {
            if case .failure(let error) = await run(direct, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/\(name)", maxSize: 1 << 24)),
               error.code == .objectNotFound {
                return false
            }
            return true
        }

        func stop() {
            proxy.stop()
            server.stop()
        }
    }

    /// Chunk PUTs (not status queries) of a resumable session.
    static func chunkPut(startingAt start: Int64? = nil, nth: Int = 1, reusedConnection: Bool = false) -> RequestMatch {
        RequestMatch(method: "PUT", pathContains: "upload_id=", headerContains: ProxyHeader("Content-Range", start.map { "bytes \($0)-" } ?? "bytes "),
                     reusedConnection: reusedConnection, nth: nth,
                     predicate: { $0.header("Content-Range")?.contains("*/") == false })
    }

    private static func isStatusQuery(_ exchange: ProxyExchange) -> Bool {
        exchange.request.method == "PUT" && exchange.request.header("Content-Range")?.hasPrefix("bytes */") == true
    }

    /// The start offsets of the chunk PUTs, in order.
    private static func chunkStarts(_ exchanges: [ProxyExchange]) -> [Int64] {
        exchanges.compactMap { exchange -> Int64? in
            guard exchange.request.method == "PUT", !isStatusQuery(exchange),
                  let range = exchange.request.header("Content-Range"), range.hasPrefix("bytes ") else { return nil }
            return Int64(range.dropFirst(6).prefix { $0 != "-" })
        }
    }

    private static let quantum: Int64 = 256 * 1024

    // MARK: - Item 2: resets on reused keep-alive connections

    @Test("an HTTP PUT reset mid-body on a reused connection is sent again on a fresh one and succeeds",
          arguments: [1_000, 400_000, Int.max])
    func httpPutResetOnReusedConnection(afterBytes: Int) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let payload = patternData(1_000_000, seed: 21)
        let source = directory.file("big.bin")
        try payload.write(to: URL(fileURLWithPath: source))
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))

        // The fault needs the PUT to go out on a reused connection. The engine is shared with every test
        // running at the same time, so under load the warm connection can be gone by then; the scenario
        // is tried again (up to 3 times) until the reset really hit, and at least once it must.
        for round in 1...3 {
            let proxy = try FaultProxy(upstreamPort: server.port, rules: [
                FaultRule(RequestMatch(method: "PUT", pathContains: "/big.bin", reusedConnection: true), .resetInRequestBody(afterBytes: afterBytes)),
            ])
            defer { proxy.stop() }
            // A first upload opens the keep-alive connection the second one reuses.
            _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/warm.txt", data: Data("warm".utf8))))
            let uploaded = try finished(await run(backend, JobSpec(kind: .uploadFile, source: source, destination: "\(proxy.baseURL)/big.bin")))
            #expect(uploaded.md5 == nil && uploaded.crc32c == hashes(payload).crc32c)
            #expect(try sameBytes(Data(contentsOf: URL(fileURLWithPath: server.root + "/big.bin")), payload))
            let puts = proxy.exchanges.filter { $0.request.target == "/big.bin" }
            guard proxy.firedCounts == [1] || round == 3 else { continue }
            #expect(proxy.firedCounts == [1], "the PUT never went out on a reused connection in 3 rounds")
            #expect(puts.count == 2, "\(puts.map(\.faults))")
            #expect(puts.first?.indexOnConnection ?? 0 >= 2, "the reset hit a reused connection")
            #expect(puts.first?.forwarded == false)
            #expect(puts.last?.indexOnConnection == 1, "sent again on a fresh connection")
            #expect(puts.last?.requestBodyBytes == payload.count)
            return
        }
    }

    // MARK: An if_exists: fail upload whose answer was lost

    @Test("if_exists: fail over HTTP, its PUT stored but the answer lost: the retry finds its own file (same bytes) and succeeds",
          arguments: [false, true])
    func failRuleAnswerLostRetryFindsItsOwnFile(emptyFile: Bool) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            // nginx stores the file; the client never hears of it (nor of libcurl's resend on a fresh connection).
            FaultRule(RequestMatch(method: "PUT", pathContains: "/mine.bin"), .resetBeforeResponse, times: .max),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let payload = emptyFile ? Data() : patternData(300_000, seed: 31)
        let spec = JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/mine.bin", data: payload, ifExists: .fail)
        let recorder = EventRecorder()
        let error = try failure(await run(backend, spec, recorder: recorder))
        #expect(error.retryable, "\(error)")
        #expect(try sameBytes(Data(contentsOf: URL(fileURLWithPath: server.root + "/mine.bin")), payload), "nginx stored it")
        // Every byte went out: the attempt says so, for the next one.
        let sent = try #require(recorder.checkpoints.last, "\(recorder.all)")
        #expect(sent == .sentUpload(total: Int64(payload.count)))
        let firstAttempt = proxy.exchanges.count

        let again = try finished(await run(backend, spec, resume: sent))
        #expect(again.skipped == nil && again.size == Int64(payload.count))
        #expect(again.crc32c == hashes(payload).crc32c && again.verified == [.crc32c])
        let retry = proxy.exchanges.dropFirst(firstAttempt).filter { $0.request.target == "/mine.bin" }.map(\.request.method)
        // The retry looked (HEAD), read the file back to compare it (GET: nginx reports no hash), sent nothing.
        #expect(retry == ["HEAD", "GET"], "\(retry)")

        // Without the earlier attempt's word, the same file is someone else's: refused, as always.
        let refused = try failure(await run(backend, spec))
        #expect(refused.code == .invalidArgument && !refused.retryable && refused.message.contains("if_exists: fail"), "\(refused)")
    }

    @Test("if_exists: fail over HTTP, first copy stored and its answer lost, libcurl's resend refused (412): the attempt takes its own file, not another's",
          arguments: [false, true])
    func failRuleResendRefused(storedBytesDiffer: Bool) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let payload = patternData(120_000, seed: 36)
        // The look before the upload (HEAD) opens the connection the PUT reuses; that connection can be
        // gone by then under load, so the scenario is tried up to 3 times until the reset really hit it.
        for round in 1...3 {
            let name = "/resent-\(round).bin"
            var rules = [
                // The first copy reaches nginx (which stores it) and its answer is lost with the connection.
                FaultRule(RequestMatch(method: "PUT", pathContains: name, reusedConnection: true), .resetBeforeResponse),
                // The resend meets a server that honours If-None-Match: * (nginx's module does not): 412.
                FaultRule(RequestMatch(method: "PUT", pathContains: name, nth: 2), .respond(.response(412, reason: "Precondition Failed"))),
            ]
            if storedBytesDiffer {
                // What nginx stored is not what was sent: the file is not this upload's.
                rules.append(FaultRule(RequestMatch(method: "PUT", pathContains: name, reusedConnection: true), .rewriteRequest { request in
                    if !request.body.isEmpty { request.body[request.body.startIndex] ^= 0xFF }
                }))
            }
            let proxy = try FaultProxy(upstreamPort: server.port, rules: rules)
            defer { proxy.stop() }
            let spec = JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)\(name)", data: payload, ifExists: .fail)
            let result = await run(backend, spec)
            let puts = proxy.exchanges.filter { $0.request.method == "PUT" }
            guard proxy.firedCounts.prefix(2) == [1, 1] || round == 3 else { continue }
            #expect(proxy.firedCounts.prefix(2) == [1, 1], "the PUT never went out on a reused connection in 3 rounds")
            #expect(puts.count == 2 && puts.first?.indexOnConnection ?? 0 >= 2, "\(puts.map(\.faults))")
            if storedBytesDiffer {
                let refused = try failure(result)
                #expect(refused.code == .invalidArgument && !refused.retryable && refused.message.contains("if_exists: fail"), "\(refused)")
            } else {
                let uploaded = try finished(result)
                #expect(uploaded.crc32c == hashes(payload).crc32c && uploaded.size == Int64(payload.count))
                // After the 412 it looked again and read the file back to compare: nothing more was sent.
                let after = proxy.exchanges.filter { $0.request.target == name }.map(\.request.method)
                #expect(after == ["HEAD", "PUT", "PUT", "HEAD", "GET"], "\(after)")
            }
            let stored = try Data(contentsOf: URL(fileURLWithPath: server.root + name))
            #expect(sameBytes(stored, payload) != storedBytesDiffer, "the file nginx stored was kept as it is")
            return
        }
    }

    @Test("if_exists: fail over HTTP: after a lost answer, a file with other bytes (or another size) is still refused, and kept")
    func failRuleAnswerLostOtherBytesAreRefused() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let payload = patternData(200_000, seed: 33)
        let other = patternData(200_000, seed: 34)
        for (name, content) in [("same-size.bin", other), ("shorter.bin", other.prefix(1_000))] {
            try Data(content).write(to: URL(fileURLWithPath: server.root + "/" + name))
            let spec = JobSpec(kind: .uploadData, destination: "\(server.baseURL)/\(name)", data: payload, ifExists: .fail)
            let error = try failure(await run(backend, spec, resume: .sentUpload(total: Int64(payload.count))))
            #expect(error.code == .invalidArgument && !error.retryable && error.message.contains("if_exists: fail"), "\(name): \(error)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: server.root + "/" + name)) == Data(content), "\(name) was replaced")
        }
    }

    @Test("if_exists: fail over HTTP, a PUT cut mid-body: nothing stored, and the retry uploads it (whatever the attempt reported)")
    func failRuleCutMidBodyRetryUploads() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            // The PUT and libcurl's resend of it on a fresh connection.
            FaultRule(RequestMatch(method: "PUT", pathContains: "/cut.bin"), .resetInRequestBody(afterBytes: 50_000), times: 2),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let payload = patternData(400_000, seed: 35)
        let spec = JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/cut.bin", data: payload, ifExists: .fail)
        let recorder = EventRecorder()
        let error = try failure(await run(backend, spec, recorder: recorder))
        #expect(error.retryable, "\(error)")
        #expect(!FileManager.default.fileExists(atPath: server.root + "/cut.bin"))
        // libcurl may have read the whole body into the socket before the cut: then the attempt reports it
        // sent (it cannot know better), and the retry, finding nothing there, simply uploads.
        #expect(recorder.checkpoints.allSatisfy { $0 == .sentUpload(total: Int64(payload.count)) }, "\(recorder.checkpoints)")
        let uploaded = try finished(await run(backend, spec, resume: recorder.checkpoints.last))
        #expect(uploaded.crc32c == hashes(payload).crc32c)
        #expect(try sameBytes(Data(contentsOf: URL(fileURLWithPath: server.root + "/cut.bin")), payload))
        #expect(proxy.firedCounts == [2])
    }

    @Test("a GCS chunk reset mid-body on a reused connection is re-sent by libcurl; the object matches")
    func gcsChunkResetOnReusedConnection() async throws {
        // libcurl alone decides whether the second chunk reuses the idle connection (on a starved test
        // process it may open another, and the rule never fires): tried again, up to 3 times, until the
        // reset really hit a reused connection, and at least once it must.
        for round in 1...3 {
            let setup = try ProxiedEmulator([
                FaultRule(Self.chunkPut(startingAt: Self.quantum, reusedConnection: true), .resetInRequestBody(afterBytes: 100_000)),
            ])
            defer { setup.stop() }
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let payload = patternData(700_000, seed: 22)   // chunks at 0, 256 KiB, 512 KiB
            let source = directory.file("chunks.bin")
            try payload.write(to: URL(fileURLWithPath: source))

            let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadFile, source: source,
                                                                         destination: "gs://\(setup.server.bucket)/chunks.bin")))
            #expect(uploaded.object?.md5Hash == hashes(payload).md5)
            #expect(uploaded.object?.crc32c == hashes(payload).crc32c)
            #expect(try await sameBytes(setup.storedBytes("chunks.bin"), payload))

            guard setup.proxy.firedCounts == [1] || round == 3 else { continue }
            let exchanges = setup.proxy.exchanges
            #expect(setup.proxy.firedCounts == [1], "the chunk never went out on a reused connection in 3 rounds")
            #expect(Self.chunkStarts(exchanges) == [0, Self.quantum, Self.quantum, 2 * Self.quantum])
            // libcurl itself sent the chunk again: no status query was needed.
            #expect(!exchanges.contains(where: Self.isStatusQuery))
            let resent = exchanges.filter { $0.request.header("Content-Range")?.hasPrefix("bytes \(Self.quantum)-") == true }
            #expect(resent.first?.indexOnConnection ?? 0 >= 2)
            #expect(resent.last?.indexOnConnection == 1)
            return
        }
    }

    @Test("a session start (in-memory JSON body) reset on a reused connection is re-sent and succeeds")
    func gcsSessionStartResetOnReusedConnection() async throws {
        // libcurl alone decides whether a request reuses an idle connection: tried again until the fault hit one.
        for round in 1...3 {
            let setup = try ProxiedEmulator([
                FaultRule(RequestMatch(method: "POST", pathContains: "name=second.txt", reusedConnection: true), .resetInRequestBody(afterBytes: 10)),
            ])
            defer { setup.stop() }
            _ = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/first.txt",
                                                              data: Data("first".utf8))))
            let payload = Data("second upload".utf8)
            let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/second.txt",
                                                                         data: payload)))
            #expect(uploaded.object?.md5Hash == hashes(payload).md5)
            #expect(try await sameBytes(setup.storedBytes("second.txt"), payload))
            guard setup.proxy.firedCounts == [1] || round == 3 else { continue }
            #expect(setup.proxy.firedCounts == [1])
            let posts = setup.proxy.exchanges.filter { $0.request.method == "POST" && $0.request.target.contains("second.txt") }
            #expect(posts.count == 2)
            #expect(posts.last?.requestBodyBytes == posts.last?.request.body.count)
            return
        }
    }

    // MARK: Uploads in one request

    /// The one-request uploads (`uploadType=multipart`) of an object of `size` bytes named `name`.
    static func oneRequestPosts(_ exchanges: [ProxyExchange], _ name: String) -> [ProxyExchange] {
        exchanges.filter { $0.request.method == "POST" && $0.request.target.contains("uploadType=multipart")
            && $0.request.target.contains("name=\(name)") }
    }

    @Test("a small upload is one request: metadata and bytes in one multipart POST, no session, no PUT; the object matches")
    func smallUploadIsOneRequest() async throws {
        let setup = try ProxiedEmulator([], singleRequestLimit: 5 << 20)
        defer { setup.stop() }
        let payload = patternData(200_000, seed: 5)
        let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/one.bin",
                                                                     data: payload, metadata: UploadMetadata(customMetadata: ["k": "v"]))))
        #expect(uploaded.object?.size == Int64(payload.count) && uploaded.object?.customMetadata == ["k": "v"])
        #expect(uploaded.crc32c == hashes(payload).crc32c && uploaded.verified?.contains(.crc32c) == true)
        #expect(try await sameBytes(setup.storedBytes("one.bin"), payload))
        let exchanges = setup.proxy.exchanges
        #expect(Self.oneRequestPosts(exchanges, "one.bin").count == 1)
        #expect(!exchanges.contains { $0.request.method == "PUT" || $0.request.target.contains("uploadType=resumable") })
        // One byte more than the limit (the 256 KiB chunk here): a session.
        let bigger = patternData(256 * 1024 + 1, seed: 6)
        _ = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/two.bin", data: bigger)))
        #expect(Self.oneRequestPosts(setup.proxy.exchanges, "two.bin").isEmpty)
        #expect(setup.proxy.exchanges.contains { $0.request.method == "POST" && $0.request.target.contains("uploadType=resumable&name=two.bin") })
        #expect(try await sameBytes(setup.storedBytes("two.bin"), bigger))
    }

    @Test("a one-request upload reset mid-body on a reused connection is re-sent whole by libcurl (the body rewinds); the object matches")
    func oneRequestUploadResetOnReusedConnection() async throws {
        // libcurl alone decides whether a request reuses an idle connection: tried again until the fault hit one.
        for round in 1...3 {
            let setup = try ProxiedEmulator([
                FaultRule(RequestMatch(method: "POST", pathContains: "name=second.bin", reusedConnection: true), .resetInRequestBody(afterBytes: 70_000)),
            ], singleRequestLimit: 5 << 20)
            defer { setup.stop() }
            _ = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/first.bin",
                                                              data: Data("first".utf8))))
            let payload = patternData(150_000, seed: 9)
            let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/second.bin",
                                                                         data: payload)))
            #expect(uploaded.crc32c == hashes(payload).crc32c)
            #expect(try await sameBytes(setup.storedBytes("second.bin"), payload))
            guard setup.proxy.firedCounts == [1] || round == 3 else { continue }
            #expect(setup.proxy.firedCounts == [1])
            let posts = Self.oneRequestPosts(setup.proxy.exchanges, "second.bin")
            #expect(posts.count == 2)
            #expect(posts.first?.requestBodyBytes == 70_000)
            #expect(posts.last?.requestBodyBytes == posts.last?.request.body.count)
            return
        }
    }

    @Test("a one-request upload cut on a fresh connection fails retryable with nothing stored; the next attempt stores it")
    func oneRequestUploadCutIsRetryable() async throws {
        let setup = try ProxiedEmulator([
            FaultRule(RequestMatch(method: "POST", pathContains: "uploadType=multipart"), .resetInRequestBody(afterBytes: 40_000)),
        ], singleRequestLimit: 5 << 20)
        defer { setup.stop() }
        let payload = patternData(120_000, seed: 11)
        let spec = JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/cut.bin", data: payload)
        let error = try failure(await run(setup.backend, spec))
        #expect(error.retryable, "\(error)")
        #expect(await !setup.exists("cut.bin"))
        let uploaded = try finished(await run(setup.backend, spec))
        #expect(uploaded.crc32c == hashes(payload).crc32c)
        #expect(try await sameBytes(setup.storedBytes("cut.bin"), payload))
        #expect(setup.proxy.firedCounts == [1])
        #expect(Self.oneRequestPosts(setup.proxy.exchanges, "cut.bin").count == 2)
    }

    @Test("a one-request upload with one media byte flipped on the way is nonMatchingChecksum and the object is deleted")
    func oneRequestCorruptedByteIsCaught() async throws {
        let setup = try ProxiedEmulator([
            // The body is the metadata part, then the bytes: 5,000 from the end lies well inside the bytes.
            FaultRule(RequestMatch(method: "POST", pathContains: "uploadType=multipart"),
                      .rewriteRequest { request in request.body[request.body.endIndex - 5_000] ^= 0x01 }),
        ], singleRequestLimit: 5 << 20)
        defer { setup.stop() }
        let payload = patternData(100_000, seed: 13)
        let error = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/flipped.bin",
                                                                 data: payload)))
        #expect(error.code == .nonMatchingChecksum, "\(error)")
        #expect(error.message.contains("the object was deleted"), "\(error.message)")
        #expect(setup.proxy.firedCounts == [1])
        #expect(await !setup.exists("flipped.bin"))
        #expect(setup.proxy.exchanges.contains { $0.request.method == "DELETE" && $0.request.target.contains("ifGenerationMatch=") })
    }

    @Test("libcurl codes: transport faults are retryable, the rest is not", arguments: [
        (7, true), (28, true), (6, true), (55, true), (56, true), (52, true), (18, true), (8, true), (16, true),
        (92, true), (95, true), (96, true), (35, true), (65, true), (97, true),
        (1, false), (3, false), (60, false), (47, false), (27, false),
    ])
    func curlCodeMapping(code: Int, retryable: Bool) {
        let error = curlFailure(code: code, text: "detail", url: "http://127.0.0.1/x?token=SECRET")
        #expect(error.retryable == retryable, "curl error \(code): \(error)")
        #expect(error.cause?.contains("curl error \(code)") == true)
        #expect(error.url == "http://127.0.0.1/x?token=REDACTED")
    }

    /// An answer without a status line (libcurl's "HTTP/0.9"), with a header of a megabyte (libcurl's
    /// "Out of memory"), or with 400 KiB of short header lines (libcurl's limit for them all, which said
    /// "the connection failed mid-transfer") came from a server that was reached: a server fault,
    /// retryable like a garbled reply — not "the URL cannot be fetched", which is for a URL no request
    /// could be made from.
    @Test("an answer that is not HTTP, or whose headers are too large, is a retryable server fault",
          arguments: ["not HTTP", "a header is larger", "headers together are larger"])
    func unreadableAnswersAreServerFaults(expected: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let answer = switch expected {
        case "not HTTP": ProxyMessage(startLine: "SSH-2.0-OpenSSH_9.2", body: Data("x".utf8))
        case "a header is larger": ProxyMessage.response(200, headers: [ProxyHeader("X-Padding", String(repeating: "a", count: 1 << 20))],
                                                          body: Data("x".utf8))
        default: ProxyMessage.response(200, headers: (0..<4_000).map { ProxyHeader("X-Padding-\($0)", String(repeating: "a", count: 100)) },
                                       body: Data("x".utf8))
        }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [FaultRule(.any, .respond(answer), times: .max)])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/a.bin", maxSize: 1 << 20)))
        #expect(error.retryable, "\(error)")
        #expect(error.message.contains(expected), "\(error)")
        #expect(error.code == .unknown && !error.message.contains("cannot be fetched"), "\(error)")
        #expect(proxy.exchanges.contains { $0.faults.contains { $0.hasPrefix("respond") } })
        // A URL no request is made from stays a permanent error.
        let scheme = curlFailure(code: 1, text: "Protocol \"gopher\" not supported", url: "gopher://127.0.0.1/x")
        #expect(!scheme.retryable && scheme.code == .invalidArgument)
    }

    /// A redirect to a URL libcurl will not follow (another scheme, or no URL at all) is the server's answer,
    /// the same at every attempt: not "an answer that is not HTTP" to retry, nor a fault of the job's URL.
    /// Its Location is not shown: it may carry a token.
    @Test("a redirect to file://, ftp:// or a malformed URL is a permanent error naming the redirect", arguments: [
        "file:///etc/hostname", "ftp://127.0.0.1:1/x?token=SECRET", "http://[::1?token=SECRET",
    ])
    func unfollowableRedirectIsPermanent(location: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(.any, .respond(.response(302, reason: "Found", headers: [ProxyHeader("Location", location)])), times: .max),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for spec in [JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/a.bin", maxSize: 1 << 20),
                     JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/a.bin", destination: directory.file("a.bin"))] {
            let error = try failure(await run(backend, spec))
            #expect(!error.retryable && error.code == .unknown, "\(error)")
            #expect(error.httpStatus == 302 && error.message.contains("redirected"), "\(error)")
            #expect(!"\(error) \(error.cause ?? "")".contains("SECRET"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.file("a.bin")))
    }

    /// A server redirecting a URL to itself: libcurl stops after 5 redirects. The error said only
    /// libcurl's "the transfer failed: Number of redirects hit maximum amount".
    @Test("a redirect loop is a permanent error that names the redirects")
    func redirectLoop() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(.any, .respond(.response(302, reason: "Found", headers: [ProxyHeader("Location", "/loop.bin?token=SECRET")])),
                      times: .max),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/loop.bin", maxSize: 1 << 20)))
        #expect(!error.retryable && error.httpStatus == 302, "\(error)")
        #expect(error.message.contains("redirected more than 5 times"), "\(error)")
        #expect(!"\(error) \(error.cause ?? "")".contains("SECRET"), "\(error)")
        #expect(proxy.exchanges.count == 6, "the first request and 5 redirects followed")
    }

    @Test("every cut the proxy makes in an answer is a retryable error, never a success", arguments: [
        "resetBeforeResponse", "resetInStatusLine", "resetInHeaders", "resetInBody",
        "closeBeforeResponse", "closeInStatusLine", "closeInHeaders", "closeInBody",
    ])
    func cutAnswersAreRetryable(cut: String) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let payload = patternData(300_000, seed: 23)
        try payload.write(to: URL(fileURLWithPath: server.root + "/cut.bin"))
        let fault: Fault = switch cut {
        case "resetBeforeResponse": .resetBeforeResponse
        case "resetInStatusLine": .resetInResponse(afterBytes: 5)
        case "resetInHeaders": .resetInResponse(afterBytes: 40)
        case "resetInBody": .resetInResponse(afterBytes: 100_000)
        case "closeBeforeResponse": .closeInResponse(afterBytes: 0)
        case "closeInStatusLine": .closeInResponse(afterBytes: 5)
        case "closeInHeaders": .closeInResponse(afterBytes: 40)
        default: .closeInResponse(afterBytes: 100_000)
        }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [FaultRule(.any, fault, times: .max)])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/cut.bin", maxSize: 1 << 20)))
        #expect(error.retryable, "\(cut): \(error)")
        // nginx answers a PUT with a head and an empty body: only the cuts up to the headers apply.
        guard !cut.hasSuffix("InBody") else { return }
        let upload = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/up.bin", data: payload)))
        #expect(upload.retryable, "\(cut): \(upload)")
    }

    // MARK: - A session forgotten once complete

    /// The session start POSTs among the exchanges.
    private static func sessionStarts(_ exchanges: [ProxyExchange]) -> Int {
        exchanges.filter { $0.request.method == "POST" && $0.request.target.contains("uploadType=resumable") }.count
    }

    @Test("the last chunk's answer lost and its session gone (404): the object it stored is the result, not stored again")
    func lastAnswerLostSessionGone() async throws {
        // The emulator forgets a session once it is complete: libcurl's resend of the last chunk meets a 404.
        let setup = try ProxiedEmulator([FaultRule(Self.chunkPut(startingAt: 2 * Self.quantum), .resetBeforeResponse)])
        defer { setup.stop() }
        let payload = patternData(700_000, seed: 35)
        let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/gone.bin",
                                                                     data: payload)))
        #expect(setup.proxy.firedCounts == [1])
        #expect(uploaded.crc32c == hashes(payload).crc32c && uploaded.verified == [.crc32c])
        #expect(try await sameBytes(setup.storedBytes("gone.bin"), payload))
        let exchanges = setup.proxy.exchanges
        #expect(exchanges.contains { $0.response?.status == 404 }, "the session was asked for again and was gone")
        #expect(Self.sessionStarts(exchanges) == 1, "\(exchanges.map(\.request.startLine))")
        #expect(Self.chunkStarts(exchanges).filter { $0 == 0 }.count == 1, "no byte sent twice from the start")
    }

    @Test("a resumed session gone (404) after the dead attempt's last chunk landed: that object is the result, same generation")
    func resumedSessionGoneAfterLastChunk() async throws {
        // Every answer to the last chunk and to the status query lost: the attempt ends, its resume point
        // short of the end, while the object is stored whole.
        let setup = try ProxiedEmulator([
            FaultRule(Self.chunkPut(startingAt: 2 * Self.quantum), .resetBeforeResponse, times: .max),
            FaultRule(RequestMatch(method: "PUT", headerContains: ProxyHeader("Content-Range", "bytes */")), .resetBeforeResponse, times: .max),
        ])
        defer { setup.stop() }
        let payload = patternData(700_000, seed: 36)
        let spec = JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/resumed.bin", data: payload)
        let recorder = EventRecorder()
        let lost = try failure(await run(setup.backend, spec, recorder: recorder))
        #expect(lost.retryable, "\(lost)")
        let point = try #require(recorder.checkpoints.last)
        guard case .upload(let uri, let confirmed, let total, let source) = point else {
            Issue.record("not an upload's resume point: \(point)")
            return
        }
        #expect(confirmed == 2 * Self.quantum)
        // The next attempt talks to the emulator itself: the session, past the proxy that cuts its answers.
        let direct = ResumePoint.upload(sessionURI: uri.replacingOccurrences(of: setup.proxy.baseURL, with: setup.server.baseURL),
                                        confirmedOffset: confirmed, total: total, source: source)
        let stored = try finished(await run(setup.direct, JobSpec(kind: .getMetadata, source: "gs://\(setup.server.bucket)/resumed.bin")))
        let generation = try #require(stored.object?.generation)

        let resumed = try finished(await run(setup.direct, spec, resume: direct))
        #expect(resumed.object?.generation == generation, "stored again: \(resumed.object?.generation ?? "none") after \(generation)")
        #expect(resumed.crc32c == hashes(payload).crc32c)
        #expect(try await sameBytes(setup.storedBytes("resumed.bin"), payload))
    }

    // MARK: - Item 3: the server's offset moved on without the client hearing of it

    @Test("a chunk stored but its answer lost: the resent chunk's 400 leads to a status query and the upload continues")
    func answerLostAfterChunkStored() async throws {
        // libcurl alone decides whether a request reuses an idle connection: tried again until the fault hit one.
        for round in 1...3 {
            let setup = try ProxiedEmulator([
                FaultRule(Self.chunkPut(startingAt: Self.quantum, reusedConnection: true), .resetBeforeResponse),
            ])
            defer { setup.stop() }
            let payload = patternData(900_000, seed: 31)   // four chunks
            let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/moved.bin",
                                                                         data: payload)))
            #expect(uploaded.object?.md5Hash == hashes(payload).md5)
            #expect(try await sameBytes(setup.storedBytes("moved.bin"), payload))
            guard setup.proxy.firedCounts == [1] || round == 3 else { continue }
            let exchanges = setup.proxy.exchanges
            #expect(setup.proxy.firedCounts == [1])
            // libcurl re-sent the chunk the emulator had already stored; the emulator refused its offset.
            let refused = exchanges.first { $0.response?.status == 400 }
            let message = String(decoding: refused?.response?.body ?? Data(), as: UTF8.self)
            #expect(message.contains("Invalid Content-Range start: expected \(2 * Self.quantum), got \(Self.quantum)"), "\(message)")
            // One status query, then on from the server's offset.
            #expect(exchanges.filter(Self.isStatusQuery).count == 1)
            #expect(Self.chunkStarts(exchanges) == [0, Self.quantum, Self.quantum, 2 * Self.quantum, 3 * Self.quantum])
            return
        }
    }

    @Test("a chunk whose answer breaks off after its status line (libcurl cannot resend): a status query, and on",
          arguments: [true, false])
    func answerCutAfterStatusLine(reset: Bool) async throws {
        // Past the status line libcurl has seen a response, so it does not send the request again.
        let setup = try ProxiedEmulator([
            FaultRule(Self.chunkPut(startingAt: Self.quantum), reset ? .resetInResponse(afterBytes: 40) : .closeInResponse(afterBytes: 40)),
        ])
        defer { setup.stop() }
        let payload = patternData(700_000, seed: 32)
        let recorder = EventRecorder()
        let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/cut.bin",
                                                                     data: payload), recorder: recorder))
        #expect(uploaded.object?.crc32c == hashes(payload).crc32c)
        #expect(try await sameBytes(setup.storedBytes("cut.bin"), payload))
        #expect(setup.proxy.exchanges.filter(Self.isStatusQuery).count == 1)
        #expect(Self.chunkStarts(setup.proxy.exchanges) == [0, Self.quantum, 2 * Self.quantum])
        #expect(recorder.checkpoints.map(\.bytesDone) == [0, Self.quantum, 2 * Self.quantum])
        #expect(setup.proxy.exchanges.filter { $0.request.header("Content-Range")?.hasPrefix("bytes \(Self.quantum)-") == true }.count == 1)
    }

    @Test("offset mismatches that never resolve stop after three status queries with a retryable error")
    func mismatchIsBounded() async throws {
        let setup = try ProxiedEmulator([
            FaultRule(Self.chunkPut(startingAt: Self.quantum),
                      .respond(.response(400, headers: [ProxyHeader("Content-Type", "application/json")],
                                         body: Data(#"{"error":{"message":"Invalid Content-Range start: expected 1, got 262144"}}"#.utf8))),
                      times: .max),
        ])
        defer { setup.stop() }
        let error = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/stuck.bin",
                                                                 data: patternData(700_000, seed: 33))))
        #expect(error.retryable)
        #expect(error.code == .unknown)
        #expect(error.message.contains("stayed at \(Self.quantum) of 700000 bytes"), "\(error.message)")
        #expect(error.cause?.contains("Invalid Content-Range start") == true)
        #expect(setup.proxy.exchanges.filter(Self.isStatusQuery).count == GCSBackend.resyncLimit)
        #expect(setup.proxy.firedCounts == [GCSBackend.resyncLimit + 1])
    }

    /// A session that keeps 1 KiB of every chunk, and confirms it: each round is progress, so the rounds
    /// without progress never added up, and a 0.67 MiB file was sent 684 times over in 256 KiB chunks
    /// (139 MiB), a checkpoint in the log each round. The bytes an attempt sends are bounded (twice the
    /// object and two chunks), and a checkpoint waits for a quantum more to be confirmed.
    @Test("a session that keeps only a little of each chunk ends the attempt, retryable, after about twice the object sent")
    func sessionKeepingALittleOfEachChunk() async throws {
        let setup = try ProxiedEmulator([
            FaultRule(Self.chunkPut(), .rewriteRequest { request in
                // `bytes START-END/TOTAL` becomes its first KiB, which the emulator stores and confirms.
                guard let range = request.header("Content-Range"), request.body.count > 1024 else { return }
                let fields = range.dropFirst(6).split(whereSeparator: { $0 == "-" || $0 == "/" })
                guard fields.count == 3, let start = Int(fields[0]) else { return }
                request.body = Data(request.body.prefix(1024))
                request.setHeader("Content-Range", "bytes \(start)-\(start + 1023)/\(fields[2])")
            }, times: .max),
        ])
        defer { setup.stop() }
        let recorder = EventRecorder()
        let total = 700_000
        let error = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/trickle.bin",
                                                                 data: patternData(total, seed: 35)), recorder: recorder))
        #expect(error.retryable && error.code == .unknown, "\(error)")
        #expect(error.message.contains("the upload session kept only") && error.message.contains("only a little of each chunk"),
                "\(error.message)")
        let puts = setup.proxy.exchanges.filter { $0.request.method == "PUT" }
        let sent = puts.map { Int64($0.requestBodyBytes) }.reduce(0, +)
        #expect(sent <= 2 * Int64(total) + 2 * Self.quantum, "\(puts.count) PUTs sent \(sent) bytes")
        // One checkpoint when the session started; none of the rounds confirmed a quantum.
        #expect(recorder.checkpoints.count == 1, "\(recorder.checkpoints)")
        // The next attempt continues the session from what it holds, and is bounded the same way.
        let resume = try #require(recorder.checkpoints.last)
        let again = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/trickle.bin",
                                                                 data: patternData(total, seed: 35)), resume: resume))
        #expect(again.message.contains("it holds \(2 * puts.count * 1024) of \(total) bytes"), "\(again.message)")
        #expect(setup.proxy.exchanges.filter { $0.request.method == "POST" }.count == 1, "a new session was started")
    }

    @Test("a 400 that is not about the offset fails at once as invalidArgument, after one status query")
    func otherBadRequestFails() async throws {
        let setup = try ProxiedEmulator([
            FaultRule(Self.chunkPut(startingAt: 0),
                      .respond(.response(400, body: Data(#"{"error":{"message":"Metadata part is too large"}}"#.utf8)))),
        ])
        defer { setup.stop() }
        let error = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/bad.bin",
                                                                 data: patternData(300_000, seed: 34))))
        #expect(error.code == .invalidArgument)
        #expect(!error.retryable)
        #expect(error.message.contains("Metadata part is too large"))
        #expect(setup.proxy.exchanges.filter(Self.isStatusQuery).count == 1)
    }

    // MARK: - Item 4: confirmed bytes never sent, and the final hash

    /// Rewrites a 308's `Range: bytes=0-N` to claim `extra` more bytes.
    static func inflateRange(by extra: Int64) -> Fault {
        .rewriteResponse { _, response in
            guard response.status == 308, let range = response.header("Range"), let dash = range.lastIndex(of: "-"),
                  let last = Int64(range[range.index(after: dash)...]) else { return }
            response.setHeader("Range", "bytes=0-\(last + extra)")
        }
    }

    @Test("a 308 claiming 1 MiB more than was sent: the session is dropped, a new one uploads the right bytes")
    func lyingRangeRecoversInNewSession() async throws {
        let setup = try ProxiedEmulator([FaultRule(Self.chunkPut(startingAt: 0), Self.inflateRange(by: 1 << 20))])
        defer { setup.stop() }
        let payload = patternData(2_000_000, seed: 41)
        let recorder = EventRecorder()
        let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/hole.bin",
                                                                     data: payload), recorder: recorder))
        #expect(uploaded.object?.md5Hash == hashes(payload).md5)
        #expect(uploaded.object?.size == Int64(payload.count))
        #expect(try await sameBytes(setup.storedBytes("hole.bin"), payload))

        let exchanges = setup.proxy.exchanges
        #expect(exchanges.filter { $0.request.method == "POST" }.count == 2, "a second session")
        // Never a chunk past what the server really held: after the lie, the first session got nothing
        // more, and the second one got every chunk from 0.
        let starts = Self.chunkStarts(exchanges)
        #expect(starts == [0] + stride(from: 0, to: Int64(payload.count), by: Int(Self.quantum)).map { $0 }, "\(starts)")
        // The lie never became a checkpoint: the new session's checkpoint replaced the old one.
        let sessions = recorder.checkpoints.compactMap { point -> String? in
            if case .upload(let uri, _, _, _) = point { return uri }
            return nil
        }
        #expect(Set(sessions).count == 2)
        #expect(!recorder.checkpoints.contains { $0.bytesDone > Self.quantum && $0.bytesDone < 2 * Self.quantum })
    }

    @Test("a server that keeps confirming unsent bytes fails typed (internalError), never succeeded")
    func persistentLiarFails() async throws {
        let setup = try ProxiedEmulator([FaultRule(Self.chunkPut(), Self.inflateRange(by: 1 << 20), times: .max)])
        defer { setup.stop() }
        let error = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/liar.bin",
                                                                 data: patternData(2_000_000, seed: 42))))
        #expect(error.code == .internalError)
        #expect(!error.retryable)
        #expect(error.message.contains("confirmed \(Self.quantum + (1 << 20)) bytes when only \(Self.quantum) had been sent"), "\(error.message)")
        #expect(setup.proxy.exchanges.filter { $0.request.method == "POST" }.count == 2)
        #expect(await !setup.exists("liar.bin"))
    }

    /// A 308 whose `Range` is no single `bytes=0-N` — an end past any offset, a range not from byte 0, two
    /// ranges (a header sent twice with two values), an end that is no number — says nothing the upload
    /// can go on from: the session is dropped, a new one stores the object. The first of these trapped on
    /// `N + 1` and took the worker down; the others were read as an offset from the text after the last
    /// dash.
    @Test("a 308 whose Range is no single bytes=0-N: the session is dropped, a new one uploads the right bytes", arguments: [
        ["bytes=0-9223372036854775807"],
        ["bytes=4096-262143"],
        ["bytes=0-262143", "bytes=0-0"],
        ["bytes=0-26214x"],
    ])
    func unreadableRangeRecoversInNewSession(ranges: [String]) async throws {
        let setup = try ProxiedEmulator([FaultRule(Self.chunkPut(startingAt: 0), .rewriteResponse { _, response in
            guard response.status == 308 else { return }
            response.setHeader("Range", nil)
            response.headers += ranges.map { ProxyHeader("Range", $0) }
        })])
        defer { setup.stop() }
        let payload = patternData(700_000, seed: 45)
        let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/range.bin",
                                                                     data: payload)))
        #expect(uploaded.object?.size == Int64(payload.count))
        #expect(try await sameBytes(setup.storedBytes("range.bin"), payload))
        #expect(setup.proxy.firedCounts == [1])
        let exchanges = setup.proxy.exchanges
        #expect(exchanges.filter { $0.request.method == "POST" }.count == 2, "\(exchanges.map(\.request.startLine))")
        #expect(exchanges.contains { $0.request.method == "DELETE" && $0.request.target.contains("upload_id=") }, "the session was cancelled")
    }

    @Test("a 308's Range read as an offset only when it is one bytes=0-N", arguments: [
        ("bytes=0-262143", Int64(262_144)),
        ("bytes=0-262143,bytes=0-262143", Int64(262_144)),
        ("bytes=0-0", Int64(0)),
        ("bytes=0-9223372036854775806", Int64.max),
        ("bytes=0-9223372036854775807", nil),
        ("bytes=0-99999999999999999999", nil),
        ("bytes=1-262143", nil),
        ("bytes=0-262143,bytes=0-524287", nil),
        ("bytes=0-", nil),
        ("bytes=0--5", nil),
        ("bytes=0-+5", nil),
        ("0-262143", nil),
    ] as [(String, Int64?)])
    func confirmedOffsets(range: String, offset: Int64?) {
        #expect(GCSBackend.confirmedOffset(range, recorded: 0, total: 1_000_000) == offset)
    }

    /// The one request of an empty upload's session (`Content-Range: bytes */0`), answered 308.
    static func emptyUploadIncomplete(range: String?) -> FaultRule {
        FaultRule(RequestMatch(method: "PUT", pathContains: "upload_id=", headerContains: ProxyHeader("Content-Range", "bytes */0")),
                  .respond(.response(308, reason: "Resume Incomplete", headers: range.map { [ProxyHeader("Range", $0)] } ?? [])))
    }

    /// An empty upload in a session (`if_exists: fail` keeps one whatever the size) answered 308 (the
    /// resumable upload protocol): without `Range` the server holds
    /// nothing yet, so the same session is asked again and completes; `Range: bytes=0-0` says it holds
    /// one byte of an empty object, which cannot be — it was read as "nothing" (the emulator's way before
    /// any data) and the session kept. It is not believed now: the session is dropped and a new one
    /// stores the object.
    @Test("an empty upload's 308: no Range is nothing stored yet (same session); bytes=0-0 is a lie (new session)",
          arguments: [false, true])
    func emptyUploadIncomplete(claimsOneByte: Bool) async throws {
        let setup = try ProxiedEmulator([Self.emptyUploadIncomplete(range: claimsOneByte ? "bytes=0-0" : nil)])
        defer { setup.stop() }
        let recorder = EventRecorder()
        let uploaded = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/empty.bin",
                                                                     data: Data(), ifExists: .fail), recorder: recorder))
        #expect(uploaded.size == 0 && uploaded.object?.size == 0)
        #expect(try await setup.storedBytes("empty.bin") == Data())
        #expect(setup.proxy.firedCounts == [1])
        let exchanges = setup.proxy.exchanges
        let sessions = exchanges.filter { $0.request.method == "POST" }.count
        #expect(sessions == (claimsOneByte ? 2 : 1), "\(exchanges.map(\.request.startLine))")
        if claimsOneByte {
            #expect(exchanges.contains { $0.request.method == "DELETE" && $0.request.target.contains("upload_id=") }, "the lying session was cancelled")
        }
        #expect(!recorder.checkpoints.contains { $0.bytesDone > 0 }, "no byte of an empty object was ever confirmed")
    }

    @Test("a server that keeps claiming a byte of an empty upload fails typed (internalError), never succeeded")
    func emptyUploadPersistentLiarFails() async throws {
        var rule = Self.emptyUploadIncomplete(range: "bytes=0-0")
        rule.times = .max
        let setup = try ProxiedEmulator([rule])
        defer { setup.stop() }
        let error = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/empty-liar.bin",
                                                                 data: Data(), ifExists: .fail)))
        #expect(error.code == .internalError && !error.retryable, "\(error)")
        #expect(error.message.contains("confirmed 1 bytes of a 0-byte upload"), "\(error.message)")
        #expect(setup.proxy.exchanges.filter { $0.request.method == "POST" }.count == 2)
        #expect(await !setup.exists("empty-liar.bin"))
    }

    @Test("the final hash is compared: one byte flipped on the way is nonMatchingChecksum and the object is deleted",
          arguments: [false, true])
    func corruptedByteIsCaught(finalAnswerWithoutHashes: Bool) async throws {
        var rules = [FaultRule(Self.chunkPut(startingAt: Self.quantum),
                               .rewriteRequest { request in request.body[request.body.startIndex + 777] ^= 0x01 })]
        if finalAnswerWithoutHashes {
            // The final answer carries no hash: the backend must read them from the object's metadata.
            rules.append(FaultRule(Self.chunkPut(), .rewriteResponse { _, response in
                guard response.status == 200, var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
                json["md5Hash"] = nil
                json["crc32c"] = nil
                response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? response.body
            }, times: .max))
        }
        let setup = try ProxiedEmulator(rules)
        defer { setup.stop() }
        let payload = patternData(700_000, seed: 43)
        let error = try failure(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/flipped.bin",
                                                                 data: payload)))
        #expect(error.code == .nonMatchingChecksum, "\(error)")
        #expect(error.message.contains("the object was deleted"), "\(error.message)")
        #expect(await !setup.exists("flipped.bin"))
        let exchanges = setup.proxy.exchanges
        #expect(exchanges.contains { $0.request.method == "DELETE" && $0.request.target.contains("ifGenerationMatch=") })
        if finalAnswerWithoutHashes {
            #expect(setup.proxy.firedCounts.last ?? 0 >= 1, "the final answer was stripped")
            #expect(exchanges.contains { $0.request.method == "GET" && $0.request.target.contains("/storage/v1/b/") })
        }
    }

    @Test("offset checks: more than sent, more than the total, or back below what was confirmed", arguments: [
        (Int64(1001), Int64(0), Int64(262_144), Int64(1000), true),
        (Int64(262_144), Int64(0), Int64(262_144), Int64(1000_000), false),
        (Int64(262_145), Int64(0), Int64(262_144), Int64(1000_000), true),
        (Int64(100), Int64(262_144), Int64(524_288), Int64(1000_000), true),
        (Int64(262_144), Int64(262_144), Int64(524_288), Int64(1000_000), false),
        (Int64(0), Int64(0), Int64(0), Int64(0), false),
    ])
    func implausibleOffsets(offset: Int64, floor: Int64, ceiling: Int64, total: Int64, implausible: Bool) {
        #expect((GCSBackend.implausibleOffset(offset, floor: floor, ceiling: ceiling, total: total) != nil) == implausible)
    }

    @Test("hashes with a skipped range are computed again from the source, so a hole cannot hide")
    func skippedRangeIsRehashed() throws {
        let payload = patternData(100_000, seed: 44)
        let source = UploadSource(data: payload)
        let streamed = StreamChecksums(md5: true)
        payload.prefix(1000).withUnsafeBytes { streamed.feed($0, at: 0) }
        payload.suffix(from: 50_000).withUnsafeBytes { streamed.feed($0, at: 50_000) }   // bytes 1000..<50000 never seen
        #expect(!streamed.isContiguous)
        let computed = try source.hashes(streamed: streamed)
        #expect(computed.md5 == hashes(payload).md5)
        #expect(computed.crc32c == hashes(payload).crc32c)
    }

    @Test("a plain-HTTP PUT whose answer reports another hash (x-goog-hash) is nonMatchingChecksum and the file is deleted")
    func httpPutReportedHashMismatch() async throws {
        let payload = patternData(50_000, seed: 45)
        let ours = hashes(payload)
        let server = try NginxServer.start(extraServerConfig: """
            location = /right.bin {
                dav_methods PUT DELETE;
                add_header x-goog-hash "crc32c=\(ours.crc32c),md5=\(ours.md5)" always;
            }
            location = /wrong.bin {
                dav_methods PUT DELETE;
                add_header x-goog-hash "crc32c=AAAAAA==,md5=AAAAAAAAAAAAAAAAAAAAAA==" always;
            }
            """)
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let right = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/right.bin", data: payload)))
        #expect(right.md5 == nil && right.verified == [.crc32c])
        let error = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/wrong.bin", data: payload)))
        #expect(error.code == .nonMatchingChecksum)
        #expect(error.message.contains("deleted"), "\(error.message)")
        #expect(!FileManager.default.fileExists(atPath: server.root + "/wrong.bin"))
        #expect(FileManager.default.fileExists(atPath: server.root + "/right.bin"))
    }

    /// The cleanup DELETE of a PUT reported with other bytes carries the answer's ETag in `If-Match`, so
    /// only that version goes. An ETag that cannot be sent back — a control character (the engine
    /// refuses the request), longer than a header line servers take (nginx refuses it, 400) — was sent
    /// all the same: the DELETE failed, and the message said only "could not be deleted". Without
    /// `If-Match` it could remove a version someone else wrote since: no DELETE is sent, the file stays,
    /// and the message says why.
    @Test("a mismatched PUT whose ETag cannot be sent back in If-Match is not deleted, and the message says why",
          arguments: ["control character", "too long"])
    func httpPutMismatchWithUnsendableETag(form: String) async throws {
        let payload = patternData(50_000, seed: 49)
        let server = try NginxServer.start(extraServerConfig: """
            location = /bad.bin {
                dav_methods PUT DELETE;
                add_header x-goog-hash "crc32c=AAAAAA==" always;
            }
            """)
        defer { server.stop() }
        let etag = form == "control character" ? "\"v1\u{1}\"" : "\"" + String(repeating: "e", count: 9_000) + "\""
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PUT"), .rewriteResponse { _, response in response.setHeader("ETag", etag) }, times: .max),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/bad.bin", data: payload)))
        #expect(error.code == .nonMatchingChecksum, "\(form): \(error)")
        let why = form == "control character" ? "holds a control character" : "is 9002 bytes long"
        #expect(error.message.contains("was not deleted") && error.message.contains(why) && error.message.contains("If-Match"),
                "\(form): \(error.message)")
        #expect(!error.message.contains("\u{1}") && !error.message.contains("eeee"), "the ETag is not quoted: \(error.message)")
        #expect(proxy.exchanges.map(\.request.method) == ["PUT"], "no DELETE without the ETag pinning the version")
        #expect(try Data(contentsOf: URL(fileURLWithPath: server.root + "/bad.bin")) == payload, "the file is left")
    }

    /// A hash header the PUT's answer carries twice with two values (a cache or proxy adding its own)
    /// cannot describe one stored file: the last `x-goog-hash` CRC32C (or `x-goog-hash`'s over
    /// `x-amz-checksum-crc32c`) alone was compared, and an upload passed as verified beside a value that
    /// said the server stored other bytes.
    @Test("a plain-HTTP PUT whose answer repeats a hash header with another value is nonMatchingChecksum",
          arguments: ["x-goog-hash twice", "x-amz-checksum-crc32c and x-goog-hash", "md5 twice"])
    func httpPutRepeatedHashHeader(form: String) async throws {
        let payload = patternData(50_000, seed: 48)
        let ours = hashes(payload)
        var changed = payload
        changed[changed.count / 2] ^= 0x01
        let other = hashes(changed)
        let lines: String = switch form {
        case "x-goog-hash twice":
            "add_header x-goog-hash \"crc32c=\(other.crc32c)\" always; add_header x-goog-hash \"crc32c=\(ours.crc32c)\" always;"
        case "x-amz-checksum-crc32c and x-goog-hash":
            "add_header x-amz-checksum-crc32c \"\(other.crc32c)\" always; add_header x-goog-hash \"crc32c=\(ours.crc32c)\" always;"
        default:
            "add_header x-goog-hash \"md5=\(other.md5)\" always; add_header x-goog-hash \"md5=\(ours.md5)\" always;"
        }
        let server = try NginxServer.start(extraServerConfig: "location = /twice.bin { dav_methods PUT DELETE; \(lines) }")
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let error = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/twice.bin", data: payload)))
        #expect(error.code == .nonMatchingChecksum, "\(form): \(error)")
        #expect(error.message.contains("reported 2 different"), "\(form): \(error.message)")
        #expect(!FileManager.default.fileExists(atPath: server.root + "/twice.bin"), "\(form): the upload is deleted")
    }

    /// The hash a PUT's answer reports is read as a download's digests are: a CRC32C in hex is the same
    /// CRC32C, and a value that is no digest at all proves nothing. Both were compared as text with our
    /// base64, failed `nonMatchingChecksum`, and had the uploaded file — holding exactly the bytes sent —
    /// deleted.
    @Test("a plain-HTTP PUT whose answer reports its CRC32C in hex, or a hash that cannot be read, keeps the uploaded file")
    func httpPutReportedHashForms() async throws {
        let payload = patternData(50_000, seed: 47)
        let crc32c = try #require(Data(base64Encoded: hashes(payload).crc32c))
        let hex = crc32c.map { String(format: "%02x", $0) }.joined()
        let server = try NginxServer.start(extraServerConfig: """
            location = /hex.bin {
                dav_methods PUT DELETE;
                add_header x-goog-hash "crc32c=\(hex)" always;
            }
            location = /garbled.bin {
                dav_methods PUT DELETE;
                add_header x-goog-hash "crc32c=!!!,md5=zz" always;
            }
            """)
        defer { server.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let inHex = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/hex.bin", data: payload)))
        #expect(inHex.verified == [.crc32c])
        let garbled = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(server.baseURL)/garbled.bin", data: payload)))
        #expect(garbled.verified == [])
        for name in ["hex.bin", "garbled.bin"] {
            #expect(try Data(contentsOf: URL(fileURLWithPath: server.root + "/" + name)) == payload, "\(name)")
        }
    }

    /// A server that answers 200 from the headers alone, before any of the body, cannot have stored it;
    /// without a hash in its answer nothing else would tell, and the upload used to succeed, reported as
    /// all sent. It fails retryable now, and the retry (through to nginx) stores the bytes.
    @Test("a plain-HTTP PUT answered 200 before its body was sent is not taken as done; the retry stores it")
    func httpPutAnsweredBeforeItsBody() async throws {
        let payload = patternData(8_000_000, seed: 46)
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PUT"), .respondBeforeBody(.response(200, reason: "OK")), times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-early-answer")
        defer { directory.remove() }
        let source = directory.file("big.bin")
        try payload.write(to: URL(fileURLWithPath: source))
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let spec = JobSpec(kind: .uploadFile, source: source, destination: "\(proxy.baseURL)/early.bin")
        let refused = try failure(await run(backend, spec))
        #expect(refused.retryable && refused.message.contains("before its body was sent"), "\(refused.message)")
        #expect(proxy.exchanges.first?.faults == ["respond 200 before the body"])
        #expect(!FileManager.default.fileExists(atPath: server.root + "/early.bin"))
        let stored = try finished(await run(backend, spec))
        #expect(stored.size == Int64(payload.count))
        #expect(try Data(contentsOf: URL(fileURLWithPath: server.root + "/early.bin")) == payload)
    }
}

