import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A transfer that stalls fails after the worker's stall limit; one that trickles (never stalling,
/// never finishing) fails when the job's own timeout passes. Both are retryable and say which limit hit.
@Suite("Stall limit and job timeout", .onTestThreads)
struct TransferLimitTests {
    private func configuration(stall: Int) -> StorageConfiguration {
        var configuration = StorageConfiguration(connectTimeout: 5)
        configuration.stallTimeout = stall
        return configuration
    }

    @Test("a body that trickles a byte every 0.2 s fails when the job's 1s timeout passes")
    func jobTimeoutPasses() async throws {
        let server = try TrickleServer(.trickle(interval: 0.2))
        defer { server.stop() }
        let backend = HTTPBackend(configuration: configuration(stall: 30))
        let started = ContinuousClock.now
        var spec = JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/slow.bin", maxSize: 1 << 30)
        spec.timeoutSeconds = 1
        let error = try failure(await run(backend, spec))
        let elapsed = ContinuousClock.now - started
        #expect(error.retryable)
        #expect(error.message.contains("the job's 1s timeout passed"), "\(error)")
        // Not before the limit. (No upper bound: on a loaded machine resuming this task can lag; the
        // message shows which limit ended the transfer, and without one this test would never end.)
        #expect(elapsed >= .milliseconds(950), "took \(elapsed)")
        #expect(server.requests.count == 1)
    }

    @Test("a download to a file that times out leaves no file at the destination")
    func jobTimeoutKeepsPartialFile() async throws {
        let server = try TrickleServer(.trickle(interval: 0.1))
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var spec = JobSpec(kind: .downloadFile, source: "\(server.baseURL)/slow.bin", destination: directory.file("slow.bin"))
        spec.timeoutSeconds = 1
        let error = try failure(await run(HTTPBackend(configuration: configuration(stall: 30)), spec))
        #expect(error.retryable)
        #expect(error.message.contains("timeout passed"), "\(error)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("slow.bin")))
    }

    @Test("a body that stops arriving fails after the stall limit with 'no data for 1 s'")
    func stalledDownload() async throws {
        let server = try TrickleServer(.stallAfter(bytes: 1000))
        defer { server.stop() }
        let started = ContinuousClock.now
        // An engine of its own: no connection another test left in the shared cache can stand in for this
        // one (a run of the whole suite once failed it in 3 ms, "the connection failed mid-transfer").
        let backend = HTTPBackend(configuration: configuration(stall: 1), engine: try CurlEngine(threadName: "stall-test-curl"))
        let error = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/stuck.bin", maxSize: 1 << 30)))
        let elapsed = ContinuousClock.now - started
        #expect(error.retryable)
        #expect(error.message.contains("no data for 1 s"), "\(error) — \(error.cause ?? "no cause"); the server saw \(server.requests)")
        #expect(elapsed >= .milliseconds(950), "took \(elapsed)")
    }

    @Test("an upload the server never reads or answers fails after the stall limit")
    func stalledUpload() async throws {
        let server = try TrickleServer(.silent)
        defer { server.stop() }
        let error = try failure(await run(HTTPBackend(configuration: configuration(stall: 1)),
                                          JobSpec(kind: .uploadData, destination: "\(server.baseURL)/up.bin",
                                                  data: patternData(64 * 1024))))
        #expect(error.retryable)
        #expect(error.message.contains("no data for 1 s"), "\(error)")
    }

    @Test("GCS: the timeout bounds every request of the attempt (metadata first)")
    func gcsTimeout() async throws {
        let server = try TrickleServer(.trickle(interval: 0.2))
        defer { server.stop() }
        var configuration = configuration(stall: 30)
        configuration.gcsEndpoint = server.baseURL
        var spec = JobSpec(kind: .downloadMemory, source: "gs://bkt/obj.bin")
        spec.timeoutSeconds = 1
        let error = try failure(await run(GCSBackend(configuration: configuration), spec))
        #expect(error.retryable)
        #expect(error.message.contains("the job's 1s timeout passed"), "\(error)")
    }
}
