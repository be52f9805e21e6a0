import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A transfer that trickles just above nothing (a server or middlebox sending a byte now and then) fails,
/// retryable, once its average rate over the last stall window stays below the minimum (`--min-rate`);
/// without the rule only a job's `timeout:` ended it, and a job without one held its slot for ever.
@Suite("Minimum transfer rate", .onTestThreads)
struct MinimumRateTests {
    /// A 2 s window and the given minimum.
    private func configuration(minRate: Int64 = StorageConfiguration.defaultMinRate) -> StorageConfiguration {
        var configuration = StorageConfiguration(stallTimeout: 2, connectTimeout: 5)
        configuration.minRate = minRate
        return configuration
    }

    @Test("an http download trickled at ~100 B/s fails retryable after about the window, then a retry gets the whole file")
    func trickledHTTPDownload() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let payload = patternData(64 * 1024, seed: 3)
        try payload.write(to: URL(fileURLWithPath: server.root + "/slow.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .trickleResponse(bytes: 10, interval: 0.1)),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: configuration(), engine: try CurlEngine(threadName: "min-rate-curl"))
        var spec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/slow.bin", maxSize: 1 << 20)
        // Only so that this test ends without the rule: 64 KiB at 100 B/s takes 11 minutes.
        spec.timeoutSeconds = 10
        let job = spec
        let (result, elapsed) = await timedOffTestThreads { await run(backend, job) }
        let error = try failure(result)
        #expect(error.retryable)
        #expect(error.message.contains("moved only") && error.message.contains("over the last 2 s, below the minimum of 1 KiB/s")
                    && error.message.contains("--min-rate or JOBCTL_MIN_RATE"), "\(error)")
        #expect(elapsed >= .milliseconds(1_900) && elapsed < .seconds(6), "took \(elapsed)")
        // The trickle is over (the rule is spent): the retry gets every byte.
        let retried = try finished(await run(backend, spec))
        #expect(sameBytes(retried.data, payload))
    }

    @Test("a gs:// download trickled at ~100 B/s fails retryable, then a retry gets the whole object")
    func trickledGCSDownload() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let payload = patternData(48 * 1024, seed: 4)
        _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                   JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/slow.bin", data: payload)))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .trickleResponse(bytes: 10, interval: 0.1)),
        ])
        defer { proxy.stop() }
        var gcs = emulatorConfiguration(server, through: proxy)
        gcs.stallTimeout = 2
        let backend = GCSBackend(configuration: gcs)
        var spec = JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/slow.bin", maxSize: 1 << 20)
        spec.timeoutSeconds = 10
        let job = spec
        let (result, elapsed) = await timedOffTestThreads { await run(backend, job) }
        let error = try failure(result)
        #expect(error.retryable)
        #expect(error.message.contains("moved only") && error.message.contains("below the minimum of 1 KiB/s"), "\(error)")
        #expect(elapsed < .seconds(7), "took \(elapsed)")
        #expect(proxy.firedCounts == [1])
        let retried = try finished(await run(backend, spec))
        #expect(sameBytes(retried.data, payload))
    }

    @Test("a job whose max_rate is below the minimum is held to a quarter of its max_rate, not the minimum")
    func maxRateLowersTheMinimum() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let payload = patternData(12 * 1024, seed: 5)
        try payload.write(to: URL(fileURLWithPath: server.root + "/limited.bin"))
        // ~4 KiB/s from the server: under the job's 8 KiB/s limit (so jobctl never pauses it), above a quarter
        // of it, and far under the 64 KiB/s minimum the worker was given.
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .trickleResponse(bytes: 256, interval: 0.0625)),
        ])
        defer { proxy.stop() }
        var limited = configuration(minRate: 64 * 1024)
        limited.stallTimeout = 1
        var spec = JobSpec(kind: .downloadMemory, source: "\(proxy.baseURL)/limited.bin", maxSize: 1 << 20)
        spec.maxRate = 8 * 1024
        let read = try finished(await run(HTTPBackend(configuration: limited), spec))
        #expect(sameBytes(read.data, payload))
    }

    @Test("an upload whose server reads it slowly fails retryable, saying the rate and the minimum")
    func trickledUpload() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        // ~2 MiB/s read by the "server", an eighth of the minimum. Slow as seen from the wire, not from the client:
        // it writes into its socket's send buffer (up to 4 MiB) and sees bytes move only as that buffer
        // drains. Fast enough that it drains a third of even the largest such buffer within the window (a
        // window with nothing moved is a stall, "no data for 2 s", whatever the minimum); the body
        // (16 MiB) outlasts the first window whatever the buffers took at once.
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "PUT"), .trickleRequestBody(bytes: 32 * 1024, interval: 1.0 / 64)),
        ])
        defer { proxy.stop() }
        var spec = JobSpec(kind: .uploadData, destination: "\(proxy.baseURL)/up.bin", data: patternData(16 << 20, seed: 6))
        spec.timeoutSeconds = 12
        let backend = HTTPBackend(configuration: configuration(minRate: 16 << 20), engine: try CurlEngine(threadName: "min-rate-up-curl"))
        let job = spec
        let (result, elapsed) = await timedOffTestThreads { await run(backend, job) }
        let error = try failure(result)
        #expect(error.retryable)
        #expect(error.message.contains("moved only") && error.message.contains("below the minimum of 16 MiB/s"), "\(error)")
        #expect(elapsed < .seconds(9), "took \(elapsed)")
    }
}

/// The rule as a value: what counts, what does not.
@Suite("Movement window")
struct MovementWindowTests {
    private let start = ContinuousClock.now

    private func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    @Test("nothing moved over the window is a stall; a trickle below the minimum is too slow; at or above it, nothing")
    func verdicts() {
        var idle = MovementWindow(window: .seconds(2), minimum: 1024, startedAt: start)
        #expect(idle.ticked(bytes: 0, at: at(1_000)) == nil)
        #expect(idle.ticked(bytes: 0, at: at(2_000)) == .stalled)

        var slow = MovementWindow(window: .seconds(2), minimum: 1024, startedAt: start)
        for second in 1...1 { #expect(slow.ticked(bytes: Int64(second) * 100, at: at(second * 1_000)) == nil) }
        #expect(slow.ticked(bytes: 200, at: at(2_000)) == .tooSlow(bytesPerSecond: 100))

        var fast = MovementWindow(window: .seconds(2), minimum: 1024, startedAt: start)
        for tenth in 1...60 { #expect(fast.ticked(bytes: Int64(tenth) * 110, at: at(tenth * 100)) == nil) }

        var off = MovementWindow(window: .seconds(2), minimum: 0, startedAt: start)
        for tenth in 1...60 { #expect(off.ticked(bytes: Int64(tenth), at: at(tenth * 100)) == nil) }
    }

    @Test("a fast start does not hide a trickle later: the window slides")
    func slides() {
        var window = MovementWindow(window: .seconds(2), minimum: 1024, startedAt: start)
        #expect(window.ticked(bytes: 1 << 20, at: at(100)) == nil)
        var verdict: MovementWindow.Shortfall?
        var milliseconds = 100
        while verdict == nil, milliseconds < 10_000 {
            milliseconds += 100
            verdict = window.ticked(bytes: (1 << 20) + Int64(milliseconds / 100), at: at(milliseconds))
        }
        #expect(verdict == .tooSlow(bytesPerSecond: 10), "\(String(describing: verdict))")
        #expect((2_100...2_400).contains(milliseconds), "tripped at \(milliseconds) ms")
    }

    @Test("time jobctl held the transfer back (a rate limit, hashing) counts neither as stalled nor as slow")
    func pausesLeftOut() {
        var window = MovementWindow(window: .seconds(2), minimum: 1024, startedAt: start)
        #expect(window.ticked(bytes: 1_500, at: at(1_000)) == nil)
        window.paused(at: at(1_000))
        // Ticks while paused change nothing, however long the pause.
        #expect(window.ticked(bytes: 1_500, at: at(30_000)) == nil)
        window.resumed(at: at(60_000))
        #expect(window.running(at: at(60_500)) == .milliseconds(1_500))
        // 1,500 + 700 bytes over 2 s of running time: 1,100 B/s, enough.
        #expect(window.ticked(bytes: 2_200, at: at(61_000)) == nil)
    }

    @Test("a rate limit lowers the minimum to a quarter of the lowest limit, never raises it")
    func loweredMinimum() {
        #expect(MovementWindow.minimum(1024, limitedTo: nil) == 1024)
        #expect(MovementWindow.minimum(64 * 1024, limitedTo: 8 * 1024) == 2 * 1024)
        #expect(MovementWindow.minimum(1024, limitedTo: 1 << 30) == 1024)
        #expect(MovementWindow.minimum(0, limitedTo: 8 * 1024) == 0)
    }

    @Test("libcurl's counts starting again (a resend on a fresh connection) are measured anew, not as a loss")
    func countsStartAgain() {
        var window = MovementWindow(window: .seconds(2), minimum: 1024, startedAt: start)
        #expect(window.ticked(bytes: 50_000, at: at(1_500)) == nil)
        #expect(window.ticked(bytes: 10, at: at(1_600)) == nil)
        #expect(window.ticked(bytes: 5_000, at: at(3_000)) == nil)
    }
}
