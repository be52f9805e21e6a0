import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A 200 whose `Content-Range` names a larger file than its body was a whole download to memory (to a
/// file it was already a short one).
@Suite("answers whose length says otherwise than their body", .onTestThreads)
struct MisframedAnswerTests {
    private let payload = patternData(300_000, seed: 41)

    @Test("HTTP: a 200 whose Content-Range names a larger file is a short download to memory too, retryable")
    func contentRangeTotalTellsIt() async throws {
        let total = payload.count + 1_000
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/p.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .rewriteResponse { _, response in
                response.setHeader("Content-Range", "bytes 0-\(response.body.count - 1)/\(total)")
            }, times: 1),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let spec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/p.bin", maxSize: 1 << 20)
        let short = try failure(await run(backend, spec))
        #expect(short.retryable && short.message.contains("300000 bytes of a file of 301000"), "\(short)")
        #expect(proxy.firedCounts == [1])
        #expect(try finished(await run(backend, spec)).data == payload)
    }
}
