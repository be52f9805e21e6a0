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
}
