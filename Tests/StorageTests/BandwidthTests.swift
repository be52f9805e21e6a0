import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

/// `max_rate:` measured against nginx: the average rate of a download stays within ±15 % of the limit.
@Suite struct BandwidthTests {
    @Test func downloadHonoursMaxRate() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let size = 2 * 1_048_576
        try FileManager.default.createDirectory(atPath: server.root + "/rate", withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: size).write(to: URL(fileURLWithPath: server.root + "/rate/a.bin"))
        let directory = try TemporaryDirectory("jobctl-rate")
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let limit: Int64 = 1_048_576
        let started = ContinuousClock.now
        let result = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/rate/a.bin",
                                                             destination: directory.file("a.bin"), maxRate: limit)))
        let elapsed = started.duration(to: .now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = Double(size) / seconds
        print("max_rate \(limit) B/s: \(size) bytes in \(seconds) s = \(Int(rate)) B/s")
        #expect(result.size == Int64(size))
        #expect(rate >= Double(limit) * 0.85 && rate <= Double(limit) * 1.15, "measured \(rate) B/s for a limit of \(limit)")
    }
}
