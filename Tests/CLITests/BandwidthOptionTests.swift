import Foundation
import Testing
import TestSupport

/// `worker --bwlimit RATE`: rclone's syntax, range-checked with a usage error.
@Suite(.onTestThreads) struct BandwidthOptionTests {
    @Test func badRatesAreUsageErrors() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        for (rate, fragment) in [("fast", "a rate like 512k"), ("10", "at least 1k"), ("5T", "at most 1T"),
                                 ("1023.5", "without a unit the number is a whole number of bytes"), (".5M", "digits on both sides of its point")] {
            let output = try workspace.jobctl(["worker", "--drain", "--bwlimit", rate])
            #expect(output.status == 64, "\(rate): \(output.stderr)")
            #expect(output.stderr.hasPrefix("Error: --bwlimit must be") && output.stderr.contains(fragment), "\(output.stderr)")
        }
    }

    @Test func aGoodRateRunsTheWorker() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let output = try workspace.jobctl(["worker", "--drain", "--bwlimit=10M"])
        #expect(output.status == 0, "\(output.stderr)")
        let help = try workspace.jobctl(["help", "worker"])
        #expect(help.stdout.contains("--bwlimit"))
    }

    /// The rates a worker process kept, measured from its own events: bytes over the time from a job's
    /// `started` event to its `succeeded` event, both stamped by the worker. The test process's clock
    /// plays no part, so a loaded test runner cannot make the figure wrong — only a loaded machine can
    /// make the worker slower, which lowers the rate: the ceiling (+15 %) is asserted on every trial,
    /// the floor (−15 %) on the best of up to three.
    @Test func workerKeepsBwlimitAndMaxRateWithinFifteenPercent() throws {
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        let mebibyte = 1_048_576
        try FileManager.default.createDirectory(atPath: nginx.root + "/rate", withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 8 * mebibyte).write(to: URL(fileURLWithPath: nginx.root + "/rate/down.bin"))
        try Data(repeating: 0x3C, count: 4 * mebibyte).write(to: URL(fileURLWithPath: nginx.root + "/rate/small.bin"))
        let bwlimit = 2.0 * Double(mebibyte)
        // (name, bytes, limit): 8 MiB each way under --bwlimit 2M, and 4 MiB under a job's max_rate 1M
        // (the lower of the two holds). Each takes about four seconds.
        let expected: [(name: String, bytes: Int, limit: Double)] = [
            ("download", 8 * mebibyte, bwlimit), ("upload", 8 * mebibyte, bwlimit), ("max_rate", 4 * mebibyte, Double(mebibyte)),
        ]
        var lastShortfall: [String] = []
        for trial in 1...3 {
            let workspace = try CLIWorkspace("bwlimit")
            defer { workspace.directory.remove() }
            try Data(repeating: 0x77, count: 8 * mebibyte).write(to: URL(fileURLWithPath: workspace.directory.file("up.bin")))
            let ids = try workspace.submit("""
            jobs:
              - {kind: download-file, source: "\(nginx.baseURL)/rate/down.bin", destination: down.bin}
              - {kind: upload-file, source: up.bin, destination: "\(nginx.baseURL)/rate/up-\(trial).bin"}
              - {kind: download-file, source: "\(nginx.baseURL)/rate/small.bin", destination: small.bin, max_rate: 1M}
            """)
            try #require(ids.count == 3)
            let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "1", "--bwlimit", "2M"])
            try #require(worker.status == 0, "\(worker.stderr)")
            lastShortfall = []
            for (id, job) in zip(ids, expected) {
                let events = try #require(try workspace.json(["history", id, "--json"]) as? [[String: Any]])
                let started = try #require(events.first { $0["type"] as? String == "started" }?["at_ms"] as? Int)
                let succeeded = try #require(events.first { $0["type"] as? String == "succeeded" }?["at_ms"] as? Int)
                let seconds = Double(max(succeeded - started, 1)) / 1000
                let rate = Double(job.bytes) / seconds
                print("[BandwidthOptionTests] trial \(trial) \(job.name): \(job.bytes) bytes in \(seconds) s = \(Int(rate)) B/s "
                      + "for a limit of \(Int(job.limit)) (\(String(format: "%+.1f", (rate / job.limit - 1) * 100)) %)")
                #expect(rate <= job.limit * 1.15, "\(job.name): \(rate) B/s is over the limit of \(job.limit) by more than 15 %")
                if rate < job.limit * 0.85 { lastShortfall.append("\(job.name): \(Int(rate)) B/s of \(Int(job.limit))") }
            }
            if lastShortfall.isEmpty { break }
        }
        #expect(lastShortfall.isEmpty, "below the limit by more than 15 % in three trials: \(lastShortfall)")
    }
}
