import Foundation
import Testing
import TestSupport

/// A heartbeat that meets a run's outcome commit is no lost lease.
@Suite("a heartbeat beside an outcome's commit", .onTestThreads)
struct HeartbeatRaceTests {
    /// The heartbeat took the running jobs, then updated their leases; a job whose outcome committed in
    /// between was no longer running, and the heartbeat took it for a lost lease: `lease_lost … stopping
    /// the transfer` at warning and a lease loss counted, for a job that had succeeded. With a 1 s lease
    /// (a heartbeat every 333 ms) a drain of 3,000 small jobs met it about ten times. One worker alone
    /// never loses a lease here: nothing else can take one.
    @Test("a drain of many small jobs with a short lease logs no lease_lost")
    func noFalseLeaseLoss() throws {
        let workspace = try CLIWorkspace("heartbeat-race")
        defer { workspace.directory.remove() }
        let jobs = (0..<3_000).map { "- {kind: upload-data, data: \"d\($0)\", destination: \"file://race/\($0).txt\"}" }
        _ = try workspace.submit(jobs.joined(separator: "\n"))
        let drained = try workspace.jobctl(["worker", "--drain", "--lease", "1", "--concurrency", "8"],
                                           environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(drained.status == 0, "\(drained.stderr.suffix(2_000))")
        #expect(drained.stderr.contains("succeeded=3000"), "\(drained.stderr.suffix(2_000))")
        let lost = drained.stderr.split(separator: "\n").filter { $0.contains("lease_lost") }
        #expect(lost.isEmpty, "\(lost.count) false lease losses:\n\(lost.prefix(5).joined(separator: "\n"))")
    }
}
