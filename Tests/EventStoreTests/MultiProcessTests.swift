import Foundation
import JobModel
import Testing
import TestSupport
@testable import EventStore

/// Real processes writing to one file. The test binary re-runs itself with a filter that selects
/// `childSubmitter`, which is enabled only in those children (the environment names the database).
@Suite("Separate processes", .onTestThreads)
struct MultiProcessTests {
    static let databaseVariable = "JOBCTL_STORE_CHILD_DB"
    static let environment = ProcessInfo.processInfo.environment
    static let rounds = 10, perBatch = 3

    @Test("processes submitting to one file at once lose and duplicate nothing")
    func processesSubmitConcurrently() throws {
        let fixture = try StoreFixture("store-processes")
        defer { fixture.remove() }
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let children = 3
        let outputs = LockedList<ProcessOutput>()
        let failures = onThreads(children) { index in
            let output = try runProcess(executable, [
                "--testing-library", "swift-testing", "--filter", "MultiProcessTests/childSubmitter",
            ], environment: [
                Self.databaseVariable: fixture.path, "JOBCTL_STORE_CHILD_INDEX": String(index),
                "JOBCTL_STORE_CHILDREN": String(children),
            ])
            outputs.append(output)
        }
        #expect(failures == [])
        for output in outputs.items {
            #expect(output.status == 0, "child failed: \(output.stdout.suffix(2_000)) \(output.stderr.suffix(2_000))")
        }

        let store = fixture.store
        let jobs = try store.jobs()
        #expect(jobs.count == children * Self.rounds * Self.perBatch + Self.rounds)
        let keys = jobs.compactMap(\.key)
        #expect(Set(keys).count == jobs.count)
        // Every child wrote the ids it was given; each key maps to one job for all of them.
        var byKey: [String: Set<String>] = [:]
        for index in 0..<children {
            let lines = try String(contentsOfFile: fixture.directory.file("child-\(index).txt"), encoding: .utf8)
                .split(separator: "\n")
            #expect(lines.count == Self.rounds * (Self.perBatch + 1))
            for line in lines {
                let parts = line.split(separator: " ").map(String.init)
                byKey[parts[0], default: []].insert(parts[1])
            }
        }
        #expect(byKey.count == jobs.count)
        #expect(byKey.values.allSatisfy { $0.count == 1 })
        for job in jobs {
            #expect(try store.events(jobID: job.id).map(\.version) == Array(1...job.version))
        }
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// Runs only in a child spawned by `processesSubmitConcurrently`.
    @Test(.enabled(if: environment[databaseVariable] != nil, "runs only as a spawned child process"))
    func childSubmitter() throws {
        let path = try #require(Self.environment[Self.databaseVariable])
        let index = try #require(Self.environment["JOBCTL_STORE_CHILD_INDEX"])
        let children = try #require(Int(Self.environment["JOBCTL_STORE_CHILDREN"] ?? ""))
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        // Wait until every child is up, so the writes really overlap.
        _ = FileManager.default.createFile(atPath: "\(directory)/ready-\(index)", contents: nil)
        let deadline = Date().addingTimeInterval(30)
        while (0..<children).contains(where: { !FileManager.default.fileExists(atPath: "\(directory)/ready-\($0)") }),
              Date() < deadline {
            usleep(2_000)
        }
        let store = try EventStore(path: path)
        var lines: [String] = []
        for round in 0..<Self.rounds {
            var specs = (0..<Self.perBatch).map { uploadSpec(key: "p\(index)-r\(round)-\($0)") }
            specs.append(uploadSpec(key: "shared-r\(round)"))
            let outcomes = try store.submit(specs, actor: "cli:p\(index)", now: Int64(round))
            lines += outcomes.map { "\($0.key ?? "") \($0.id)" }
            let shared = outcomes[Self.perBatch].id
            _ = try store.requestPause(id: shared, actor: "cli:p\(index)", now: Int64(round))
            // Another process may have resumed it already: resuming a queued job is refused.
            do {
                _ = try store.requestResume(id: shared, actor: "cli:p\(index)", now: Int64(round))
            } catch {
                guard case StoreError.invalidControl(let message) = error, message.contains("queued, not paused") else { throw error }
            }
        }
        try lines.joined(separator: "\n").write(toFile: "\(directory)/child-\(index).txt", atomically: true, encoding: .utf8)
    }
}
