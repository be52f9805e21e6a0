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
