import Foundation
import JobModel
import PostgresStore
import Testing
import TestSupport

/// Worker processes sharing one PostgreSQL database, as workers on several machines would.
@Suite("workers on PostgreSQL") struct PostgresWorkerTests {
    /// A worker killed with SIGKILL while it holds a slow download; then three workers drain a few
    /// hundred small uploads together. Every upload is claimed exactly once, every lease token is
    /// unique, the killed worker's job is rescued and finished by another, and `replay --verify` passes.
    @Test func workersDrainOneDatabaseAndRescueAKilledWorkersJob() throws {
        let nginx = try startWorkerNginx(slowRate: "4m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("pg-workers")
        defer { directory.remove() }
        let database = try PostgresServer.shared().makeSchema("pgworkers")
        let environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        try writePatternFile("\(nginx.root)/slow/big.bin", size: 16 << 20)
        let destination = directory.file("big.bin")
        let slow = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", destination: \"\(destination)\"}\n",
                                           database: database, directory: directory).first)

        // The first worker takes the download and dies holding it.
        let first = try JobctlProcess.worker(database: database, ["--lease", "3"], environment: environment,
                                             logDirectory: directory.path)
        let store = try PostgresStore(url: database, mode: .readOnly)
        let checkpointed = try eventually(seconds: 20) { (try store.job(slow)?.resumePoint?.bytesDone ?? 0) > 0 }
        try #require(checkpointed, "no checkpoint persisted: \(first.log)")
        first.signal(SIGKILL)
        _ = first.wait(seconds: 5)
        #expect(try store.job(slow)?.state == .running)

        let count = 300
        let uploads = try submit((0..<count).map { "- {kind: upload-data, data: \"job \($0)\", destination: \"file://out/\($0).txt\"}" }
                                    .joined(separator: "\n") + "\n", database: database, directory: directory)
        #expect(uploads.count == count)
        let workers = try (0..<3).map { _ in
            try JobctlProcess.worker(database: database, ["--drain", "--concurrency", "4"],
                                     environment: environment, logDirectory: directory.path)
        }
        for worker in workers {
            #expect(worker.wait(seconds: 60) == 0, "\(worker.log)")
        }

        let jobs = try store.jobs()
        #expect(jobs.count == count + 1)
        #expect(jobs.allSatisfy { $0.state == .succeeded }, "\(jobs.filter { $0.state != .succeeded }.map(\.id))")
        var events: [JobEvent] = []
        while true {
            let page = try store.events(afterSeq: events.last?.seq ?? 0, limit: 1_000)
            if page.isEmpty { break }
            events += page
        }
        let claims = events.filter { $0.type == .claimed }
        let claimsPerJob = Dictionary(grouping: claims, by: \.jobID).mapValues(\.count)
        #expect(uploads.allSatisfy { claimsPerJob[$0] == 1 }, "an upload was claimed more than once")
        let tokens = claims.compactMap(\.leaseToken)
        #expect(tokens.count == claims.count && Set(tokens).count == tokens.count, "lease tokens repeat")
        // Uploads went to more than one worker.
        #expect(Set(uploads.compactMap { id in claims.first { $0.jobID == id }?.data.leaseOwner }).count > 1)

        // The killed worker's download: rescued (lease_expired), claimed by another, finished whole.
        let slowClaims = claims.filter { $0.jobID == slow }
        #expect(slowClaims.count == 2)
        #expect(Set(slowClaims.compactMap(\.data.leaseOwner)).count == 2)
        #expect(events.filter { $0.jobID == slow && $0.type == .leaseExpired }.count == 1)
        let expected = try Data(contentsOf: URL(fileURLWithPath: "\(nginx.root)/slow/big.bin"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == expected)
        #expect(try String(contentsOfFile: directory.file("buckets/out/7.txt"), encoding: .utf8) == "job 7")

        let verify = try jobctl(["replay", "--verify"], database: database)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// PostgreSQL stopped (`pg_ctl stop -m fast`: every session terminated) and started again while two
    /// workers run: each reports the store error and retries, and both go on working on the same
    /// database once it is back. Nothing is lost: every job succeeds with exactly one `succeeded`
    /// event, every lease token is unique, and `replay --verify` passes.
    @Test func workersReportRetryAndGoOnAcrossAPostgreSQLRestart() throws {
        let server = try PostgresServer.makePrivate()
        defer { server.shutDown() }
        let directory = try TemporaryDirectory("pg-restart")
        defer { directory.remove() }
        let database = try server.makeSchema("pgrestart")
        let environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        let manifest = { (range: Range<Int>) in
            range.map { "- {kind: upload-data, data: \"job \($0)\", destination: \"file://out/\($0).txt\"}" }.joined(separator: "\n") + "\n"
        }
        let before = try submit(manifest(0..<150), database: database, directory: directory)
        let workers = try (0..<2).map { _ in
            // A short lease: a job whose outcome could not be written during the outage is given up by
            // its worker and rescued once the lease expires.
            try JobctlProcess.worker(database: database, ["--concurrency", "4", "--lease", "2", "--log-format", "json"],
                                     environment: environment, logDirectory: directory.path)
        }
        let early = try PostgresStore(url: database, mode: .readOnly)
        try #require(try eventually(seconds: 20) { (try early.counts()[.succeeded] ?? 0) > 0 }, "no job finished: \(workers.map(\.log))")

        let outage = Date()
        try server.stop()
        // Every worker notices: its next poll fails, it logs a store error, keeps running and retries
        // (a second store error while the server is still down).
        let reported = eventually(seconds: 20) {
            workers.allSatisfy { $0.log.components(separatedBy: "\"store_error\"").count - 1 >= 2 }
        }
        try server.start()
        print("PostgreSQL was down for \(String(format: "%.1f", Date().timeIntervalSince(outage))) s")
        try #require(reported, "a worker did not report the outage: \(workers.map(\.log))")
        #expect(workers.allSatisfy { $0.process.isRunning })

        // Both go on: the first batch finishes, and a batch submitted after the restart is worked too.
        let after = try submit(manifest(150..<200), database: database, directory: directory)
        // This process's own session was terminated too: read through a new one.
        let store = try PostgresStore(url: database, mode: .readOnly)
        let all = before + after
        let done = try eventually(seconds: 60) { (try store.counts()[.succeeded] ?? 0) == all.count }
        for worker in workers {
            worker.signal(SIGTERM)
            #expect(worker.wait(seconds: 30) == 0, "\(worker.log)")
        }
        print("all \(all.count) jobs succeeded \(String(format: "%.1f", Date().timeIntervalSince(outage))) s after the outage began; "
              + "given up during it: \(workers.map { $0.log.components(separatedBy: "\"abandoned\"").count - 1 })")
        let counts = try store.counts()
        #expect(done, "\(counts)")

        var events: [JobEvent] = []
        while true {
            let page = try store.events(afterSeq: events.last?.seq ?? 0, limit: 1_000)
            if page.isEmpty { break }
            events += page
        }
        let succeeded = Dictionary(grouping: events.filter { $0.type == .succeeded }, by: \.jobID).mapValues(\.count)
        #expect(all.allSatisfy { succeeded[$0] == 1 }, "a job did not succeed exactly once")
        #expect(succeeded.count == all.count)
        let tokens = events.filter { $0.type == .claimed }.compactMap(\.leaseToken)
        #expect(Set(tokens).count == tokens.count, "lease tokens repeat")
        // Work after the restart was shared out again (both workers claimed jobs of the second batch).
        let secondOwners = Set(events.filter { $0.type == .claimed && after.contains($0.jobID) }.compactMap(\.data.leaseOwner))
        print("store errors logged: \(workers.map { $0.log.components(separatedBy: "\"store_error\"").count - 1 }); "
              + "workers claiming after the restart: \(secondOwners.count)")
        #expect(try String(contentsOfFile: directory.file("buckets/out/199.txt"), encoding: .utf8) == "job 199")
        let verify = try jobctl(["replay", "--verify"], database: database)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }
}
