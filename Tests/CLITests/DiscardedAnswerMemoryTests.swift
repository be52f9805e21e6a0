import Foundation
import Testing
import TestSupport

/// A worker's plain-HTTP upload answered `201` with a 20 MiB body: the job failed ("the server's answer
/// was larger than 16 MiB"), the first 16 MiB held in memory. It succeeds now, and the body is read
/// without being kept: the worker's peak memory is that of the same upload answered with a few bytes.
@Suite(.onTestThreads) struct DiscardedAnswerMemoryTests {
    @Test("a worker's upload answered 201 with 20 MiB succeeds, keeping none of the answer in memory")
    func largeAnswerNotKept() throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        func answer(_ bytes: Int) -> Fault {
            .rewriteResponse { _, response in
                response.startLine = "HTTP/1.1 201 Created"
                response.body = Data(repeating: UInt8(ascii: "a"), count: bytes)
                response.setHeader("Content-Type", "text/plain")
                response.setHeader("Content-Length", String(bytes))
            }
        }
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            // Every attempt's: a retry is answered alike.
            FaultRule(RequestMatch(method: "PUT", pathContains: "/small.bin"), answer(100), times: 100),
            FaultRule(RequestMatch(method: "PUT", pathContains: "/large.bin"), answer(20 * 1024 * 1024), times: 100),
        ], recordsBodies: false)
        defer { proxy.stop() }
        let workspace = try CLIWorkspace("discarded-answer")
        defer { workspace.directory.remove() }
        var peaks: [String: Int64] = [:]
        for name in ["small", "large"] {
            _ = try workspace.submit("- {kind: upload-data, data: \(name) upload, destination: \"\(proxy.baseURL)/\(name).bin\"}\n")
            let drained = try workspace.jobctlPeakMemory(["worker", "--drain"])
            #expect(drained.status == 0, "\(name): \(drained.stderr)")
            #expect(FileManager.default.contents(atPath: server.root + "/\(name).bin") == Data("\(name) upload".utf8))
            peaks[name] = drained.peakBytes
        }
        #expect(proxy.firedCounts == [1, 1], "one attempt each")
        let small = try #require(peaks["small"]), large = try #require(peaks["large"])
        #expect(large - small < 8 << 20, "peak \(large >> 20) MiB with the 20 MiB answer, \(small >> 20) MiB with a 100-byte one")
    }
}
