import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// The fault proxy (Tests/TestSupport/FaultProxy.swift) is itself tested: bytes pass through unchanged,
/// the client's connection is kept alive whatever the upstream does, and each fault does what it says.
@Suite("Fault proxy", .onTestThreads)
struct FaultProxyTests {
    /// Generous: these tests are about what the proxy does to bytes, not about timeouts, and the process-wide
    /// engine they share with every other suite can be busy for seconds at the run's heaviest (a loaded run
    /// once failed the first request here: "could not connect to the server" with a 5 s connect timeout).
    private let timeouts = CurlOptions(connectTimeout: 30, stallTimeout: 30, trust: .systemDefault)

    private func perform(_ request: HTTPRequest, options: CurlOptions? = nil) async -> Result<HTTPResponse, TransferFailure> {
        do {
            return .success(try await CurlEngine.shared.perform(request, control: nil, options: options ?? self.timeouts))
        } catch {
            return .failure(error)
        }
    }

    private func response(_ result: Result<HTTPResponse, TransferFailure>,
                          sourceLocation: SourceLocation = #_sourceLocation) throws -> HTTPResponse {
        switch result {
        case .success(let response): return response
        case .failure(let failure):
            // With libcurl's own words (`cause`): "could not connect" alone does not say refused or timed out.
            let cause = if case .failed(let error) = failure { error.cause ?? "" } else { "" }
            Issue.record("expected a response, got \(failure) \(cause)", sourceLocation: sourceLocation)
            throw TestServerError("no response")
        }
    }

    private func transportError(_ result: Result<HTTPResponse, TransferFailure>,
                                sourceLocation: SourceLocation = #_sourceLocation) throws -> StorageError {
        if case .failure(.failed(let error)) = result { return error }
        Issue.record("expected a transport error, got \(result)", sourceLocation: sourceLocation)
        throw TestServerError("no error")
    }

    /// Whether every client connection numbered its requests 1, 2, 3… without a gap (the proxy kept
    /// each open until the client left) and at least one connection carried more than one request.
    static func keptAlive(_ exchanges: [ProxyExchange]) -> Bool {
        let byConnection = Dictionary(grouping: exchanges, by: \.connection)
        let consecutive = byConnection.values.allSatisfy { $0.map(\.indexOnConnection) == Array(1...$0.count) }
        return consecutive && byConnection.values.contains { $0.count > 1 }
    }

    @Test("bytes pass through unchanged both ways, and the client's connection stays open across requests")
    func passThrough() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let payload = patternData(1_500_000, seed: 5)

        var put = HTTPRequest(method: "PUT", url: "\(proxy.baseURL)/through/p.bin", headers: ["Content-Type: application/octet-stream"])
        put.body = payload
        put.bodyLength = Int64(payload.count)
        let stored = try response(await perform(put))
        #expect(stored.status == 201)
        #expect(try sameBytes(Data(contentsOf: URL(fileURLWithPath: server.root + "/through/p.bin")), payload))

        // The whole body through a sink (an engine response keeps only 64 KiB of a body nobody sinks).
        let read = try finished(await run(HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)),
                                          JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/through/p.bin", maxSize: 1 << 22)))
        #expect(sameBytes(read.data, payload))
        let viaProxy = try response(await perform(HTTPRequest(method: "GET", url: "\(proxy.baseURL)/through/p.bin")))
        let direct = try response(await perform(HTTPRequest(method: "GET", url: "\(server.baseURL)/through/p.bin")))
        #expect(viaProxy.status == 200)
        for name in ["etag", "last-modified", "content-length", "content-type", "accept-ranges"] {
            #expect(viaProxy.headers[name] == direct.headers[name], "\(name)")
        }

        var ranged = HTTPRequest(method: "GET", url: "\(proxy.baseURL)/through/p.bin")
        ranged.headers = ["Range: bytes=1000-1999"]
        let part = try response(await perform(ranged))
        #expect(part.status == 206)
        #expect(sameBytes(part.body, payload[1000..<2000]))

        let missing = try response(await perform(HTTPRequest(method: "GET", url: "\(proxy.baseURL)/missing")))
        #expect(missing.status == 404)

        let exchanges = proxy.exchanges
        #expect(exchanges.count == 5)
        #expect(exchanges.allSatisfy { $0.forwarded && $0.faults.isEmpty })
        #expect(exchanges.map(\.requestBodyBytes) == [payload.count, 0, 0, 0, 0])
        // The proxy never closes a client connection on its own: on each connection the requests count
        // up from 1 with no gap, and the client did reuse one. (libcurl alone decides whether a request
        // reuses an idle connection — on a starved test process it may open another.)
        #expect(Self.keptAlive(exchanges), "connections and their request numbers: \(exchanges.map { ($0.connection, $0.indexOnConnection) })")
    }

    @Test("an HTTP/1.0 upstream that closes after each answer still gets one keep-alive client connection")
    func keepAliveOverClosingUpstream() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let configuration = StorageConfiguration(gcsEndpoint: proxy.baseURL, usesEmulator: true, firebaseEndpoint: proxy.baseURL,
                                                 chunkSize: 256 * 1024, stallTimeout: 30, connectTimeout: 5)
        let payload = patternData(600_000, seed: 6)
        let uploaded = try finished(await run(GCSBackend(configuration: configuration),
                                              JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/kept.bin", data: payload)))
        #expect(uploaded.object?.md5Hash == hashes(payload).md5)
        let exchanges = proxy.exchanges
        #expect(exchanges.map(\.request.method) == ["POST", "PUT", "PUT", "PUT"])
        #expect(Self.keptAlive(exchanges), "connections and their request numbers: \(exchanges.map { ($0.connection, $0.indexOnConnection) })")
        #expect(exchanges.map { $0.response?.status ?? 0 } == [200, 308, 308, 200])
    }

    @Test("rules pick the nth matching request and act a set number of times")
    func ruleCounting() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try Data("ok".utf8).write(to: URL(fileURLWithPath: server.root + "/f.txt"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "/f.txt", nth: 2), .respond(.response(503, body: Data("busy".utf8))), times: 2),
        ])
        defer { proxy.stop() }
        var statuses: [Int] = []
        for _ in 0..<4 {
            statuses.append(try response(await perform(HTTPRequest(method: "GET", url: "\(proxy.baseURL)/f.txt"))).status)
        }
        #expect(statuses == [200, 503, 503, 200])
        #expect(proxy.firedCounts == [2])
        #expect(proxy.exchanges.map(\.forwarded) == [true, false, false, true])
        // Answered by the proxy: nginx saw only the two forwarded requests.
        #expect(server.accessLog.split(separator: "\n").filter { $0.contains("GET /f.txt") }.count == 2)
    }

    @Test("rewrites change the request the upstream gets and the response the client gets")
    func rewrites() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PUT"), .rewriteRequest { request in request.body[request.body.startIndex + 10] ^= 0xFF }),
            FaultRule(RequestMatch(method: "PUT"), .rewriteResponse { _, response in response.setHeader("X-Fault", "rewritten") }),
        ])
        defer { proxy.stop() }
        let payload = patternData(5000, seed: 9)
        var put = HTTPRequest(method: "PUT", url: "\(proxy.baseURL)/r.bin")
        put.body = payload
        put.bodyLength = Int64(payload.count)
        let answer = try response(await perform(put))
        #expect(answer.headers["x-fault"] == "rewritten")
        var expected = payload
        expected[10] ^= 0xFF
        #expect(try sameBytes(Data(contentsOf: URL(fileURLWithPath: server.root + "/r.bin")), expected))
    }

    @Test("resets and truncations: before forwarding, after forwarding, in the response")
    func cuts() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let payload = patternData(200_000, seed: 10)
        try payload.write(to: URL(fileURLWithPath: server.root + "/g.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(pathContains: "/never.bin"), .resetInRequestBody(afterBytes: 1000)),
            FaultRule(RequestMatch(pathContains: "/acted.bin"), .resetBeforeResponse),
            FaultRule(RequestMatch(pathContains: "/g.bin?cut"), .closeInResponse(afterBytes: 50_000)),
            FaultRule(RequestMatch(pathContains: "/g.bin?reset"), .resetInResponse(afterBytes: 50_000)),
        ])
        defer { proxy.stop() }
        let body = patternData(100_000, seed: 11)
        for name in ["never.bin", "acted.bin"] {
            var put = HTTPRequest(method: "PUT", url: "\(proxy.baseURL)/\(name)")
            put.body = body
            put.bodyLength = Int64(body.count)
            let error = try transportError(await perform(put))
            #expect(error.retryable, "\(name): \(error)")
        }
        // Reset mid-body: nothing reached nginx. Reset after forwarding: nginx stored it, the client never heard.
        #expect(!FileManager.default.fileExists(atPath: server.root + "/never.bin"))
        #expect(try sameBytes(Data(contentsOf: URL(fileURLWithPath: server.root + "/acted.bin")), body))
        let never = proxy.exchanges.filter { $0.request.target == "/never.bin" }
        #expect(never.count == 1 && never.allSatisfy { !$0.forwarded && $0.requestBodyBytes < body.count })

        for query in ["cut", "reset"] {
            let error = try transportError(await perform(HTTPRequest(method: "GET", url: "\(proxy.baseURL)/g.bin?\(query)")))
            #expect(error.retryable, "\(query): \(error)")
        }
    }

    @Test("stall and trickle deliver every byte, late")
    func stallAndTrickle() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let payload = patternData(20_000, seed: 12)
        try payload.write(to: URL(fileURLWithPath: server.root + "/s.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(pathContains: "?stall"), .stallInResponse(afterBytes: 1000, seconds: 0.3)),
            FaultRule(RequestMatch(pathContains: "?trickle"), .trickleResponse(bytes: 4096, interval: 0.05)),
        ])
        defer { proxy.stop() }
        for (query, atLeast) in [("stall", 0.3), ("trickle", 0.2)] {
            let started = Date()
            let answer = try response(await perform(HTTPRequest(method: "GET", url: "\(proxy.baseURL)/s.bin?\(query)")))
            #expect(answer.body == payload, "\(query)")
            #expect(Date().timeIntervalSince(started) >= atLeast, "\(query) was not held back")
        }
    }

    @Test("a stalled request body arrives whole, late")
    func requestBodyStall() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PUT"), .stallInRequestBody(afterBytes: 10_000, seconds: 0.3)),
        ])
        defer { proxy.stop() }
        let body = patternData(100_000, seed: 13)
        var put = HTTPRequest(method: "PUT", url: "\(proxy.baseURL)/late.bin")
        put.body = body
        put.bodyLength = Int64(body.count)
        let started = Date()
        #expect(try response(await perform(put)).status == 201)
        #expect(Date().timeIntervalSince(started) >= 0.3)
        #expect(try sameBytes(Data(contentsOf: URL(fileURLWithPath: server.root + "/late.bin")), body))
    }

    @Test("a long stall ends as soon as the client gives up on it")
    func stallEndsWhenClientLeaves() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try Data("late".utf8).write(to: URL(fileURLWithPath: server.root + "/never.txt"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(.any, .stallInResponse(afterBytes: 0, seconds: 60)),
        ])
        defer { proxy.stop() }
        // The engine's stall limit (no byte for 1 s) gives up; the proxy's 60 s stall holds nothing.
        let error = try transportError(await perform(HTTPRequest(method: "GET", url: "\(proxy.baseURL)/never.txt"),
                                                     options: CurlOptions(connectTimeout: 5, stallTimeout: 1, trust: .systemDefault)))
        #expect(error.retryable)
        #expect(error.message.contains("no data for 1 s"), "\(error)")
        proxy.stop()   // waits for the connection's thread, which ended when the client left
        let exchange = try #require(proxy.exchanges.first)
        #expect(exchange.forwarded)
        // Timed by the proxy's own thread: the client's departure ended the stall, not its 60 s.
        #expect(exchange.duration < 30, "\(exchange.duration)")
    }
}

/// Whether two byte strings are equal, without Swift Testing diffing megabytes when they are not.
func sameBytes<Bytes: Collection<UInt8>>(_ actual: Data?, _ expected: Bytes) -> Bool {
    guard let actual else { return false }
    return actual.elementsEqual(expected)
}
