import Foundation
import Testing
import TestSupport

/// `worker --bwlimit RATE`: rclone's syntax, range-checked with a usage error.
@Suite struct BandwidthOptionTests {
    @Test func badRatesAreUsageErrors() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        for (rate, fragment) in [("fast", "a rate like 512k"), ("10", "at least 1k"), ("5T", "at most 1T")] {
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
}
