import Foundation
import Testing
import TestSupport

/// `worker --drain` ends once nothing of its queues is runnable; jobs left queued there, waiting for a
/// job that cannot finish in the drain, were not said anywhere: `submit && worker --drain` reported
/// success with nothing in its log about a job that never ran.
@Suite(.onTestThreads) struct DrainLeftWaitingTests {
    @Test("a drain says how many jobs it left waiting for a paused job, and which job holds them; it still exits 0",
          arguments: StoreEngine.allCases)
    func aDrainSaysWhatWaitsForAPausedJob(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("drain-left-paused", engine: engine)
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        try FileManager.default.createDirectory(atPath: workspace.directory.file("buckets/b"), withIntermediateDirectories: true)
        let ids = try workspace.submit("""
            jobs:
              - {kind: upload-data, data: a, destination: "file://b/a", key: a}
              - {kind: upload-data, data: b, destination: "file://b/b", key: b, after: [a]}
              - {kind: upload-data, data: c, destination: "file://b/c", key: c, after: [b]}
              - {kind: upload-data, data: d, destination: "file://b/d"}
            """)
        #expect(try workspace.jobctl(["pause", ids[0]]).status == 0)
        let drained = try workspace.jobctl(["worker", "--drain", "-q"], environment: environment)
        #expect(drained.status == 0, "\(drained.stderr)")
        #expect(drained.stderr.contains("drain_left_waiting"), "\(drained.stderr)")
        #expect(drained.stderr.contains("jobs=2 "), "\(drained.stderr)")
        #expect(drained.stderr.contains("held_by=\(ids[0])"), "\(drained.stderr)")
        #expect(drained.stderr.contains("paused"), "\(drained.stderr)")
        let summary = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(summary.stderr.contains("left_waiting=2"), "\(summary.stderr)")
    }

    @Test("a drain of one queue says what it left waiting for a job of another queue")
    func aDrainSaysWhatWaitsForAnotherQueue() throws {
        let workspace = try CLIWorkspace("drain-left-queue")
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        try FileManager.default.createDirectory(atPath: workspace.directory.file("buckets/b"), withIntermediateDirectories: true)
        let ids = try workspace.submit("""
            jobs:
              - {kind: upload-data, data: a, destination: "file://b/a", key: a, queue: q2}
              - {kind: upload-data, data: b, destination: "file://b/b", key: b, after: [a], queue: q1}
            """)
        let drained = try workspace.jobctl(["worker", "--drain", "--queue", "q1"], environment: environment)
        #expect(drained.status == 0, "\(drained.stderr)")
        #expect(drained.stderr.contains("drain_left_waiting"), "\(drained.stderr)")
        #expect(drained.stderr.contains("jobs=1 ") && drained.stderr.contains("first=\(ids[1])"), "\(drained.stderr)")
        #expect(drained.stderr.contains("held_by=\(ids[0])") && drained.stderr.contains("q2"), "\(drained.stderr)")
        #expect(drained.stderr.contains("left_waiting=1"), "\(drained.stderr)")
        // A drain that leaves nothing waiting says nothing of it.
        let all = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(all.status == 0 && !all.stderr.contains("drain_left_waiting") && !all.stderr.contains("left_waiting"), "\(all.stderr)")
    }
}
