import Foundation
import Testing
import TestSupport

/// `--queue` as a filter (list, stats, the bulk controls) takes a queue's name as a manifest's `queue:`
/// and the worker's `--queue` do. It took any text: a name no manifest can give selected nothing in
/// silence ("no jobs"), and `stats` printed control characters back to the terminal as they were.
@Suite(.onTestThreads) struct QueueFilterTests {
    @Test("a --queue no manifest can name is a usage error, shown with its control characters escaped", arguments: [
        ["list", "--queue", "no such queue!"],
        ["stats", "--queue", "x\u{1B}[31my"],
        ["cancel", "--queue", "a b"],
        ["retry", "--queue", "", "--dry-run"],
    ])
    func refused(arguments: [String]) throws {
        let workspace = try CLIWorkspace("queue-filter")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        let result = try workspace.jobctl(arguments)
        #expect(result.status == 64, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("--queue must be a name of 1 to 64 letters"), "\(result.stderr)")
        #expect(!result.stderr.contains("\u{1B}") && !result.stdout.contains("\u{1B}"), "\(result.stderr.debugDescription)")
    }

    @Test func aQueuesNameStillFilters() throws {
        let workspace = try CLIWorkspace("queue-filter")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("jobs.yaml", """
        jobs:
          - {kind: upload-data, data: "a", destination: file://docs/a.txt, queue: media.thumbs-2}
          - {kind: upload-data, data: "b", destination: file://docs/b.txt}
        """)
        #expect(try workspace.jobctl(["submit", manifest]).status == 0)
        let listed = try #require(try workspace.json(["list", "--queue", "media.thumbs-2", "--json"]) as? [[String: Any]])
        #expect(listed.count == 1)
        #expect(try workspace.jobctl(["stats", "--queue", "default"]).status == 0)
    }
}
