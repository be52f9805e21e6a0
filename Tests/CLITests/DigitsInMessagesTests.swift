import Foundation
import Testing
import TestSupport

/// Digits in an error's message are the message's: jobctl once read any " at " followed by 12 or 13
/// digits as a time in ms, and printed a user's file name as a date.
@Suite(.onTestThreads) struct DigitsInMessagesTests {
    @Test("a path with ' at ' and 13 digits is printed as it is by show, show --json, history and audit --csv",
          arguments: StoreEngine.allCases)
    func pathDigitsStayDigits(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("digits-in-messages", engine: engine)
        defer { workspace.directory.remove() }
        let name = "out/snap at 1700000000000.txt"
        try workspace.write("buckets/src/a.txt", "new")
        try workspace.write(name, "old")
        let ids = try workspace.submit("""
            jobs:
              - {kind: download-file, source: file://src/a.txt, destination: "\(name)", if_exists: fail}
            """)
        try #require(ids.count == 1)
        let worker = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(worker.status == 2, "\(worker.stderr)")

        let show = try workspace.jobctl(["show", ids[0]])
        #expect(show.stdout.contains("snap at 1700000000000.txt"), "\(show.stdout)")
        let json = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        let message = try #require((json["error"] as? [String: Any])?["message"] as? String)
        #expect(message.contains("snap at 1700000000000.txt"), "\(message)")
        let csv = try workspace.jobctl(["audit", "--csv"])
        #expect(csv.stdout.contains("snap at 1700000000000.txt"), "\(csv.stdout)")
        let history = try workspace.jobctl(["history", ids[0]])
        #expect(history.stdout.contains("snap at 1700000000000.txt"), "\(history.stdout)")
        for output in [show.stdout, message, csv.stdout, history.stdout] {
            #expect(!output.contains("2023-11-14T22:13:20"), "\(output)")
        }
    }
}
