import Foundation
import Testing
import TestSupport

/// A job's key names it wherever a command takes a job, as `after:` names it: `show up` said "no job
/// matches 'up'" for a job submitted with `key: up`.
@Suite("Commands take a job's key", .onTestThreads)
struct JobKeyArgumentTests {
    @Test("show, history, result, pause, resume, cancel and retry take a key; a key that is another job's id prefix names neither",
          arguments: StoreEngine.allCases)
    func keysNameJobs(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("job-key", engine: engine)
        defer { workspace.directory.remove() }
        // `ABCDEF` is also six id characters: as a key it names its job, never an id prefix.
        let path = try workspace.write("jobs.yaml", """
        jobs:
          - {kind: upload-data, data: "one", destination: file://b/one.txt, key: nightly-photos}
          - {kind: upload-data, data: "two", destination: file://b/two.txt, key: ABCDEF}
          - {kind: upload-data, data: "three", destination: file://b/three.txt}
        """)
        let submitted = try workspace.jobctl(["submit", path])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 3)

        let shown = try workspace.jobctl(["show", "nightly-photos"])
        #expect(shown.status == 0 && shown.stdout.contains("id:          \(ids[0])"), "\(shown.stdout)\(shown.stderr)")
        let byLowerCase = try workspace.jobctl(["show", "abcdef"])
        #expect(byLowerCase.status != 0, "a key is matched as written: \(byLowerCase.stdout)")
        let second = try workspace.json(["show", "--json", "ABCDEF"]) as? [String: Any]
        #expect(second?["id"] as? String == ids[1])
        // A key that is also a prefix of another job's id names neither: `show PREFIX` printed the keyed
        // job, so a job submitted later could take the name an id prefix gave another. Each still has
        // its whole id, and after: refuses the name as the commands do. (Fifteen characters name one job
        // of a batch.)
        let prefix = String(ids[2].prefix(15))
        let shadowing = try workspace.write("more.yaml", "jobs:\n  - {kind: upload-data, data: x, destination: file://b/x.txt, key: \(prefix)}\n")
        let more = try workspace.jobctl(["submit", shadowing])
        try #require(more.status == 0, "\(more.stderr)")
        let keyedID = more.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        for command in [["show"], ["cancel"], ["result"], ["history"]] {
            let both = try workspace.jobctl(command + [prefix])
            #expect(both.status == 1 && both.stdout.isEmpty
                    && both.stderr.contains("'\(prefix)' names two jobs: \(keyedID) by its key, and \(ids[2]) by its id"),
                    "\(command): \(both.stdout)\(both.stderr)")
        }
        let byWholeID = try workspace.json(["show", "--json", ids[2]]) as? [String: Any]
        #expect(byWholeID?["id"] as? String == ids[2])
        let waiting = try workspace.write("waiting.yaml", "jobs:\n  - {kind: upload-data, data: y, destination: file://b/y.txt, after: [\(prefix)]}\n")
        let refused = try workspace.jobctl(["submit", waiting])
        #expect(refused.status != 0 && refused.stderr.contains("names two jobs"), "\(refused.stdout)\(refused.stderr)")

        let paused = try workspace.jobctl(["pause", "nightly-photos", "ABCDEF"])
        #expect(paused.status == 0, "\(paused.stderr)")
        #expect(paused.stdout.contains("\(ids[0])  paused") && paused.stdout.contains("\(ids[1])  paused"), "\(paused.stdout)")
        let resumed = try workspace.jobctl(["resume", "nightly-photos"])
        #expect(resumed.status == 0 && resumed.stdout.contains("\(ids[0])  queued"), "\(resumed.stdout)\(resumed.stderr)")
        let cancelled = try workspace.jobctl(["cancel", "ABCDEF"])
        #expect(cancelled.status == 0 && cancelled.stdout.contains("\(ids[1])  cancelled"), "\(cancelled.stdout)\(cancelled.stderr)")
        let retried = try workspace.jobctl(["retry", "ABCDEF"])
        #expect(retried.status == 0 && retried.stdout.contains("\(ids[1])  queued"), "\(retried.stdout)\(retried.stderr)")

        let drained = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": workspace.directory.file("buckets")])
        #expect(drained.status == 0, "\(drained.stderr)")
        let result = try workspace.jobctl(["result", "nightly-photos"])
        #expect(result.status == 0 && result.stdout.contains("\"name\" : \"one.txt\""), "\(result.stdout)\(result.stderr)")
        let history = try workspace.jobctl(["history", "nightly-photos"])
        #expect(history.status == 0 && history.stdout.contains("paused") && history.stdout.contains("succeeded"),
                "\(history.stdout)\(history.stderr)")

        // What names no job says so, a short text both ways.
        let unknown = try workspace.jobctl(["show", "no-such-key"])
        #expect(unknown.status == 1 && unknown.stderr.contains("no job matches 'no-such-key'"), "\(unknown.stderr)")
        let short = try workspace.jobctl(["show", "abc"])
        #expect(short.status == 1 && short.stderr.contains("'abc' is no job's key, and too short for a job id prefix"), "\(short.stderr)")
    }

    /// A key of a whole id's shape is refused at submit: with it, `show ID` (and every control) named the
    /// keyed job instead of the one `submit` printed ID for.
    @Test("a key shaped as a job id is refused at submit, at its line and column", arguments: StoreEngine.allCases)
    func idShapedKeyRefused(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("job-key-id-shape", engine: engine)
        defer { workspace.directory.remove() }
        let first = try workspace.submit("- {kind: upload-data, data: a, destination: file://b/a.txt}")
        let path = try workspace.write("planted.yaml", """
        jobs:
          - {kind: upload-data, data: b, destination: file://b/b.txt}
          - {kind: upload-data, data: c, destination: file://b/c.txt, key: "\(first[0].lowercased())"}
        """)
        let planted = try workspace.jobctl(["submit", path])
        #expect(planted.status == 65 && planted.stdout.isEmpty, "\(planted.stdout)\(planted.stderr)")
        #expect(planted.stderr.contains("planted.yaml:3:68: error: 'key' must not have the shape of a job id"), "\(planted.stderr)")
        let shown = try workspace.json(["show", "--json", first[0]]) as? [String: Any]
        #expect(shown?["id"] as? String == first[0])
        let listed = try workspace.json(["list", "--json"]) as? [Any]
        #expect(listed?.count == 1, "nothing of the refused manifest was submitted")
    }

    /// A log whose key has a whole id's shape (an older jobctl let one in): the id names the job that
    /// has it, the key no longer takes its place.
    @Test("a whole id names its job, whatever key another job has")
    func wholeIDBeforeKey() throws {
        let workspace = try CLIWorkspace("job-key-whole-id")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: upload-data, data: a, destination: file://b/a.txt}
        - {kind: upload-data, data: b, destination: file://b/b.txt, key: planted}
        """)
        let plant = try runProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            c.execute("UPDATE jobs SET idempotency_key = ? WHERE id = ?", (sys.argv[2], sys.argv[3]))
            c.commit()
            """, workspace.database, ids[0], ids[1]])
        try #require(plant.status == 0, "\(plant.stderr)")
        let shown = try workspace.json(["show", "--json", ids[0]]) as? [String: Any]
        #expect(shown?["id"] as? String == ids[0])
        let cancelled = try workspace.jobctl(["cancel", ids[0]])
        #expect(cancelled.status == 0 && cancelled.stdout.contains("\(ids[0])  cancelled"), "\(cancelled.stdout)\(cancelled.stderr)")
        let other = try workspace.json(["show", "--json", ids[1]]) as? [String: Any]
        #expect(other?["state"] as? String == "queued")
    }
}
