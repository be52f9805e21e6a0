import EventStore
import Foundation
import JobModel
import PostgresStore
import StorePort
import Testing
import TestSupport

/// `jobctl orphans`: lists the hidden files final jobs left, `--remove` removes them, and a file merely
/// named like ours is never listed or removed.
@Suite("jobctl orphans", .onTestThreads) struct OrphansCommandTests {
    @Test func listsThenRemovesOnlyWhatFinalJobsLeft() throws {
        let workspace = try CLIWorkspace("orphans")
        defer { workspace.directory.remove() }
        let out = workspace.directory.file("out")
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: download-file, source: "file://docs/a.bin", destination: "\(out)/a.bin"}
        - {kind: download-file, source: "file://docs/b.bin", destination: "\(out)/b.bin"}
        - {kind: upload-data, data: "u", destination: "file://docs/dir/u.txt"}
        """)
        let submitted = try workspace.jobctl(["submit", manifest])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 3)
        // What a crashed worker would have left for each job, and files that merely look like ours.
        let partialA = "\(out)/.a.bin.\(ids[0]).jobctl-partial"
        let session = workspace.directory.file("buckets/docs/dir/.u.txt.\(ids[2]).jobctl-upload")
        let kept = [
            "\(out)/.b.bin.\(ids[1]).jobctl-partial",             // its job is queued: it will resume from it
            "\(out)/.a.bin.jobctl-partial",                       // the old shared name, recorded nowhere
            "\(out)/.a.bin.\(JobID.generate()).jobctl-partial",   // a job this log does not know
            "\(out)/.c.bin.\(ids[0]).jobctl-partial",             // the right id beside another file
            workspace.directory.file("buckets/docs/dir/.u.txt.0123456789ab.jobctl-upload"),
        ]
        for path in [partialA, session] + kept { try workspace.write(String(path.dropFirst(workspace.directory.path.count + 1)), "bytes") }
        // Then a and the upload are cancelled (no worker runs them again); b stays queued.
        #expect(try workspace.jobctl(["cancel", ids[0], ids[2]]).status == 0)

        let listed = try #require(try workspace.json(["orphans", "--json"]) as? [[String: Any]])
        #expect(Set(listed.compactMap { $0["path"] as? String }) == [partialA, session], "\(listed)")
        let a = try #require(listed.first { $0["path"] as? String == partialA })
        #expect(a["job_id"] as? String == ids[0] && a["state"] as? String == "cancelled")
        #expect(a["kind"] as? String == "partial-download" && a["size"] as? Int == 5 && a["removed"] == nil)
        #expect(listed.first { $0["path"] as? String == session }?["kind"] as? String == "upload-session")

        let table = try workspace.jobctl(["orphans"])
        #expect(table.status == 0)
        #expect(table.stdout.contains("JOB") && table.stdout.contains(partialA) && table.stdout.contains(session), "\(table.stdout)")
        #expect(FileManager.default.fileExists(atPath: partialA) && FileManager.default.fileExists(atPath: session))

        let removed = try #require(try workspace.json(["orphans", "--remove", "--json"]) as? [[String: Any]])
        #expect(removed.count == 2 && removed.allSatisfy { $0["removed"] as? Bool == true }, "\(removed)")
        #expect(!FileManager.default.fileExists(atPath: partialA))
        #expect(!FileManager.default.fileExists(atPath: session))
        for path in kept { #expect(FileManager.default.fileExists(atPath: path), "removed \(path)") }

        let none = try workspace.jobctl(["orphans"])
        #expect(none.status == 0 && none.stdout.isEmpty && none.stderr.contains("no leftover files"), "\(none)")
        #expect(try workspace.jobctl(["help", "orphans"]).stdout.contains("USAGE: jobctl orphans"))
    }

    /// A partial download was hidden for good when the job's final event came from a clock behind this
    /// machine's (a `jobctl cancel` on a host 30 s behind): the file looked "modified after the job
    /// finished", a later attempt's, to `orphans`, the sweeps and `archive`. They compare the file with
    /// this machine's clock now, when they read the final jobs; a file modified after that is still left alone.
    @Test("a partial download of a job cancelled from a clock 30 s behind is listed and swept; one modified later is kept",
          arguments: StoreEngine.allCases)
    func cancelFromAClockBehind(engine: StoreEngine) throws {
        let library = try #require(ClockStepTests.fakeTimeLibrary(), "libfaketime is not installed (Debian package faketime)")
        let workspace = try CLIWorkspace("orphans-skew", engine: engine)
        defer { workspace.directory.remove() }
        let out = workspace.directory.file("out")
        let ids = try workspace.submit("""
            - {kind: download-file, source: "file://docs/a.bin", destination: "\(out)/a.bin"}
            - {kind: download-file, source: "file://docs/b.bin", destination: "\(out)/b.bin"}
            """)
        try #require(ids.count == 2)
        // What a worker on this machine left, written now; b's file is dated a minute ahead, as a later
        // attempt's file would be, after the sweep began.
        let partialA = "\(out)/.a.bin.\(ids[0]).jobctl-partial"
        let partialB = "\(out)/.b.bin.\(ids[1]).jobctl-partial"
        for path in [partialA, partialB] { try workspace.write(String(path.dropFirst(workspace.directory.path.count + 1)), "bytes") }
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(60)], ofItemAtPath: partialB)
        let cancel = try runProcess("/usr/bin/env", [PackagePaths.jobctlBinary, "--db", workspace.database, "cancel", ids[0], ids[1]],
                                    environment: ["LD_PRELOAD": library, "FAKETIME": "-30s", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                                                  "NO_COLOR": "1"])
        #expect(cancel.status == 0, "\(cancel.stderr)")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        let finished = try #require((jobs.first { $0["id"] as? String == ids[0] }?["finished_at_ms"] as? NSNumber)?.int64Value)
        #expect(finished < Int64(Date().timeIntervalSince1970 * 1000) - 20_000, "the cancel's clock was 30 s behind")

        let listed = try #require(try workspace.json(["orphans", "--json"]) as? [[String: Any]])
        #expect(listed.compactMap { $0["path"] as? String } == [partialA], "\(listed)")
        // A worker's sweep (at start and before a drain ends) removes it, and leaves b's.
        let worker = try workspace.jobctl(["worker", "--drain"])
        #expect(worker.status == 0 && worker.stderr.contains("orphan_removed"), "\(worker.stderr)")
        #expect(!FileManager.default.fileExists(atPath: partialA))
        #expect(FileManager.default.fileExists(atPath: partialB))
    }

    /// A sidecar temporary a killed worker left (update-metadata, fetch-url and uploads write one before
    /// renaming it over the sidecar) names its job and its attempt's lease token: listed and removed once
    /// that job is final, for every attempt the log gave it, on either store. One named with a random tag
    /// (an older jobctl's), a token the job never held, or no token ties it to no attempt and is left alone.
    @Test("sidecar temporaries named with a final job's id and one of its tokens are listed and removed, others kept",
          arguments: StoreEngine.allCases)
    func sidecarTemporaries(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("orphans-sidecar", engine: engine)
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: upload-data, data: "u", destination: "file://docs/u.txt"}
        - {kind: update-metadata, destination: "file://docs/m.txt", metadata: {content_type: text/plain}}
        - {kind: fetch-url, source: "file://docs/f.txt"}
        - {kind: update-metadata, destination: "file://docs/q.txt", metadata: {content_type: text/plain}}
        """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 4)
        // Each job runs; the first three fail an attempt and run again (two tokens each), the last runs on.
        let store: any JobStore = switch engine {
        case .sqlite: try EventStore(path: workspace.database, mode: .readWrite)
        case .postgres: try PostgresStore(url: workspace.database, mode: .readWrite)
        }
        func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1_000) }
        let firstClaims = try store.claim(owner: "worker:test", queues: nil, limit: 10, leaseMs: 60_000, now: nowMs())
        try #require(firstClaims.map(\.record.id) == ids)
        for claim in firstClaims.prefix(3) {
            _ = try store.append(PendingEvent(jobID: claim.record.id, actor: "worker:test", leaseToken: claim.token,
                                              payload: .attemptFailed(.none, error: StorageError(.internalError, "busy", retryable: true),
                                                                      retryAtMs: nowMs())), now: nowMs())
        }
        let secondClaims = try store.claim(owner: "worker:test", queues: nil, limit: 10, leaseMs: 60_000, now: nowMs() + 1)
        try #require(secondClaims.map(\.record.id) == Array(ids.prefix(3)))
        let folder = workspace.directory.file("buckets/docs")
        func temporary(_ object: String, _ token: String) -> String { "\(folder)/.\(object).jobctl-meta.json.\(token).jobctl-meta.tmp" }
        func tokens(_ index: Int) -> [Int64] { [firstClaims[index].token, secondClaims[index].token] }
        let left = zip(["u.txt", "m.txt", "f.txt"], 0..<3).flatMap { object, index in
            tokens(index).map { temporary(object, "\(ids[index]).\($0)") }
        }
        let kept = [
            temporary("q.txt", "\(ids[3]).\(firstClaims[3].token)"),   // its job is running: not final
            temporary("m.txt", "ab12cd34"),                            // an older jobctl's random tag: no job named
            temporary("m.txt", "\(JobID.generate()).\(firstClaims[1].token)"), // a job this log does not know
            temporary("u.txt", "\(ids[1]).\(firstClaims[1].token)"),   // the right id and token beside another object
            temporary("m.txt", "\(ids[1]).\(firstClaims[3].token)"),   // another job's token
            temporary("m.txt", ids[1]),                                // no token: no attempt of the job names it so
        ]
        for path in left + kept { try workspace.write(String(path.dropFirst(workspace.directory.path.count + 1)), "{}") }
        for claim in secondClaims {
            _ = try store.append(PendingEvent(jobID: claim.record.id, actor: "worker:test", leaseToken: claim.token,
                                              payload: .failed(.none, error: StorageError(.objectNotFound, "gone"), reason: nil)),
                                 now: nowMs() + 10)
        }

        func orphans(_ arguments: [String]) throws -> [[String: Any]] {
            let output = try workspace.jobctl(["orphans", "--json"] + arguments, environment: environment)
            try #require(output.status == 0, "\(output.stderr)")
            return try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [[String: Any]])
        }
        let listed = try orphans([])
        #expect(Set(listed.compactMap { $0["path"] as? String }) == Set(left), "\(listed)")
        #expect(listed.allSatisfy { $0["kind"] as? String == "sidecar-temporary" && $0["state"] as? String == "failed" }, "\(listed)")
        let removed = try orphans(["--remove"])
        #expect(removed.count == left.count && removed.allSatisfy { $0["removed"] as? Bool == true }, "\(removed)")
        for path in left { #expect(!FileManager.default.fileExists(atPath: path), "kept \(path)") }
        for path in kept { #expect(FileManager.default.fileExists(atPath: path), "removed \(path)") }
    }

    /// Each attempt of a `file://` upload writes its session under a name of its own (its lease token in
    /// it): the sessions a final job's attempts left are listed and removed, on either store, with the one
    /// an older jobctl named for the job alone; a running job's, a token the job never held, an unknown
    /// job's and a random tag are left alone.
    @Test("upload sessions named with a final job's id and one of its tokens are listed and removed, others kept",
          arguments: StoreEngine.allCases)
    func uploadSessionsOfEachAttempt(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("orphans-session", engine: engine)
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        _ = try workspace.write("r.bin", "r")
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: upload-data, data: "u", destination: "file://docs/u.txt"}
        - {kind: upload-file, source: "\(workspace.directory.file("r.bin"))", destination: "file://docs/r.txt"}
        """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 2)
        let store: any JobStore = switch engine {
        case .sqlite: try EventStore(path: workspace.database, mode: .readWrite)
        case .postgres: try PostgresStore(url: workspace.database, mode: .readWrite)
        }
        func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1_000) }
        // The first job fails an attempt and runs again (two tokens); the second runs on.
        let firstClaims = try store.claim(owner: "worker:test", queues: nil, limit: 10, leaseMs: 60_000, now: nowMs())
        try #require(firstClaims.map(\.record.id) == ids)
        _ = try store.append(PendingEvent(jobID: ids[0], actor: "worker:test", leaseToken: firstClaims[0].token,
                                          payload: .attemptFailed(.none, error: StorageError(.internalError, "busy", retryable: true),
                                                                  retryAtMs: nowMs())), now: nowMs())
        let secondClaim = try #require(try store.claim(owner: "worker:test", queues: nil, limit: 10, leaseMs: 60_000, now: nowMs() + 1).first)
        try #require(secondClaim.record.id == ids[0])
        let folder = workspace.directory.file("buckets/docs")
        func session(_ object: String, _ token: String) -> String { "\(folder)/.\(object).\(token).jobctl-upload" }
        let left = [
            session("u.txt", "\(ids[0]).\(firstClaims[0].token)"),
            session("u.txt", "\(ids[0]).\(secondClaim.token)"),
            session("u.txt", ids[0]),                                          // an older jobctl's, for the job alone
        ]
        let kept = [
            session("r.txt", "\(ids[1]).\(firstClaims[1].token)"),           // its job is running: not final
            session("u.txt", "\(ids[0]).\(firstClaims[1].token)"),           // a token the job never held
            session("u.txt", "\(JobID.generate()).\(firstClaims[0].token)"), // a job this log does not know
            session("r.txt", "\(ids[0]).\(firstClaims[0].token)"),           // the right id and token beside another object
            session("u.txt", "0123456789ab"),                                 // a random tag (outside the queue)
        ]
        for path in left + kept { try workspace.write(String(path.dropFirst(workspace.directory.path.count + 1)), "bytes") }
        _ = try store.append(PendingEvent(jobID: ids[0], actor: "worker:test", leaseToken: secondClaim.token,
                                          payload: .failed(.none, error: StorageError(.objectNotFound, "gone"), reason: nil)),
                             now: nowMs() + 10)

        func orphans(_ arguments: [String]) throws -> [[String: Any]] {
            let output = try workspace.jobctl(["orphans", "--json"] + arguments, environment: environment)
            try #require(output.status == 0, "\(output.stderr)")
            return try #require(try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [[String: Any]])
        }
        let listed = try orphans([])
        #expect(Set(listed.compactMap { $0["path"] as? String }) == Set(left), "\(listed)")
        #expect(listed.allSatisfy { $0["kind"] as? String == "upload-session" && $0["state"] as? String == "failed" }, "\(listed)")
        let removed = try orphans(["--remove"])
        #expect(removed.count == left.count && removed.allSatisfy { $0["removed"] as? Bool == true }, "\(removed)")
        for path in left { #expect(!FileManager.default.fileExists(atPath: path), "kept \(path)") }
        for path in kept { #expect(FileManager.default.fileExists(atPath: path), "removed \(path)") }
    }

    /// A download attempt that finds the job's partial file held by a frozen attempt writes one of its
    /// own, `.NAME.<job id>.<lease token>.jobctl-partial`; killed before it recorded it (no checkpoint),
    /// no later attempt knows it. Once the job is final, the tokens of its claims prove those names: they
    /// are listed and removed on either store; a token the job never held, another job's id, another
    /// file's name and a job claimed once (no claims read) are left alone.
    @Test("partial downloads named with a retried final job's id and one of its tokens are listed and removed, others kept",
          arguments: StoreEngine.allCases)
    func partialDownloadsOfAttempts(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("orphans-partial", engine: engine)
        defer { workspace.directory.remove() }
        let out = workspace.directory.file("out")
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: download-file, source: "http://127.0.0.1:9/a.bin", destination: "\(out)/a.bin"}
        - {kind: download-file, source: "http://127.0.0.1:9/b.bin", destination: "\(out)/b.bin"}
        """)
        let submitted = try workspace.jobctl(["submit", manifest])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 2)
        let store: any JobStore = switch engine {
        case .sqlite: try EventStore(path: workspace.database, mode: .readWrite)
        case .postgres: try PostgresStore(url: workspace.database, mode: .readWrite)
        }
        func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1_000) }
        // Both are claimed; the first fails an attempt and is claimed again (a rescuer's token).
        let firstClaims = try store.claim(owner: "worker:test", queues: nil, limit: 10, leaseMs: 60_000, now: nowMs())
        try #require(firstClaims.map(\.record.id) == ids)
        _ = try store.append(PendingEvent(jobID: ids[0], actor: "worker:test", leaseToken: firstClaims[0].token,
                                          payload: .attemptFailed(.none, error: StorageError(.internalError, "busy", retryable: true),
                                                                  retryAtMs: nowMs())), now: nowMs())
        let secondClaim = try #require(try store.claim(owner: "worker:test", queues: nil, limit: 10, leaseMs: 60_000, now: nowMs() + 1).first)
        try #require(secondClaim.record.id == ids[0])
        func partial(_ name: String, _ id: String, _ token: Int64) -> String { "\(out)/.\(name).\(id).\(token).jobctl-partial" }
        let left = [
            partial("a.bin", ids[0], secondClaim.token),
            partial("a.bin", ids[0], firstClaims[0].token),
        ]
        let kept = [
            partial("a.bin", ids[0], firstClaims[1].token),              // a token the job never held
            partial("a.bin", JobID.generate(), secondClaim.token),        // a job this log does not know
            partial("c.bin", ids[0], secondClaim.token),                  // the right id and token beside another file
            partial("b.bin", ids[1], firstClaims[1].token),               // claimed once: its claims are not read
        ]
        for path in left + kept { try workspace.write(String(path.dropFirst(workspace.directory.path.count + 1)), "bytes") }
        for (id, token) in [(ids[0], secondClaim.token), (ids[1], firstClaims[1].token)] {
            _ = try store.append(PendingEvent(jobID: id, actor: "worker:test", leaseToken: token,
                                              payload: .failed(.none, error: StorageError(.objectNotFound, "gone"), reason: nil)),
                                 now: nowMs() + 10)
        }

        let listed = try #require(try workspace.json(["orphans", "--json"]) as? [[String: Any]])
        #expect(Set(listed.compactMap { $0["path"] as? String }) == Set(left), "\(listed)")
        #expect(listed.allSatisfy { $0["kind"] as? String == "partial-download" && $0["state"] as? String == "failed" }, "\(listed)")
        let removed = try #require(try workspace.json(["orphans", "--remove", "--json"]) as? [[String: Any]])
        #expect(removed.count == left.count && removed.allSatisfy { $0["removed"] as? Bool == true }, "\(removed)")
        for path in left { #expect(!FileManager.default.fileExists(atPath: path), "kept \(path)") }
        for path in kept { #expect(FileManager.default.fileExists(atPath: path), "removed \(path)") }
    }
}
