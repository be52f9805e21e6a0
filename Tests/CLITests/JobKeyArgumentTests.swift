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
        #expect(refused.status == 65 && refused.stderr.contains("waiting.yaml:2:") && refused.stderr.contains("names two jobs")
                && refused.stderr.contains("nothing was submitted"), "\(refused.stdout)\(refused.stderr)")
        // So is a key of the same manifest that is a prefix of a job's id in the log.
        let inside = String(ids[0].prefix(15))
        let together = try workspace.write("together.yaml", """
        jobs:
          - {kind: upload-data, data: z, destination: file://b/z.txt, key: \(inside)}
          - {kind: upload-data, data: w, destination: file://b/w.txt, after: [\(inside)]}
        """)
        let both = try workspace.jobctl(["submit", together])
        #expect(both.status == 65 && both.stderr.contains("together.yaml:3:") && both.stderr.contains("'\(inside)' names two jobs"),
                "\(both.stdout)\(both.stderr)")

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

    /// A key of a whole id's shape (another system's ULID) names its job; one equal to another job's id
    /// leaves that id naming that job: `show ID`, `cancel ID` acted on the job keyed ID.
    @Test("a whole id names its job, whatever key another job has", arguments: StoreEngine.allCases)
    func wholeIDBeforeKey(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("job-key-whole-id", engine: engine)
        defer { workspace.directory.remove() }
        let first = try workspace.submit("- {kind: upload-data, data: a, destination: file://b/a.txt}")
        let upstream = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
        let ids = try workspace.submit("""
        - {kind: upload-data, data: b, destination: file://b/b.txt, key: \(upstream)}
        - {kind: upload-data, data: c, destination: file://b/c.txt, key: "\(first[0])"}
        """)
        let byKey = try workspace.json(["show", "--json", upstream]) as? [String: Any]
        #expect(byKey?["id"] as? String == ids[0])
        let shown = try workspace.json(["show", "--json", first[0]]) as? [String: Any]
        #expect(shown?["id"] as? String == first[0])
        let cancelled = try workspace.jobctl(["cancel", first[0]])
        #expect(cancelled.status == 0 && cancelled.stdout.contains("\(first[0])  cancelled"), "\(cancelled.stdout)\(cancelled.stderr)")
        let other = try workspace.json(["show", "--json", ids[1]]) as? [String: Any]
        #expect(other?["state"] as? String == "queued")
    }
}
