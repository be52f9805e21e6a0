import EventStore
import Foundation
import JobModel
import PostgresStore
import Testing
import TestSupport

/// Jobs a worker claims ahead of its free slots: held under a lease until a slot frees, and given up
/// (released, paused, cancelled, rescued) exactly like a running job. Each test holds the slots of a
/// worker with slow downloads, so the jobs it claims with them wait, claimed but not started.
@Suite("claiming ahead", .onTestThreads) struct ClaimAheadTests {
    /// A 64 MiB download at 2 MB/s: busy for the whole test.
    static func slowSource(_ nginx: NginxServer, _ name: String = "hold") throws -> String {
        try writePatternFile("\(nginx.root)/slow/\(name).bin", size: 64 << 20)
        return "\(nginx.baseURL)/slow/\(name).bin"
    }

    /// Waits until `id` is claimed and not started: the job waits in the worker's claim-ahead buffer.
    static func waitUntilClaimedAhead(_ id: String, _ store: any JobStore, _ worker: JobctlProcess) throws {
        let held = try eventually(seconds: 20) {
            try store.job(id)?.state == .running && store.events(jobID: id).map(\.type) == [.submitted, .claimed]
        }
        let history = try store.events(jobID: id).map(\.type)
        try #require(held, "job \(id) was not claimed ahead: \(history) \(worker.log)")
    }

    /// SIGTERM: the job claimed ahead is released (`released`, back to queued) along with the running
    /// one, so another worker claims and finishes it at once, long before the 60 s lease would expire.
    @Test(arguments: WorkerEngine.allCases)
    func claimedAheadJobReleasedOnSIGTERMIsClaimableAtOnce(engine: WorkerEngine) throws {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("ahead-term")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        let ids = try submit("""
            - {kind: download-file, source: "\(try Self.slowSource(nginx))", destination: "\(directory.file("hold.bin"))"}
            - {kind: upload-data, data: "ahead", destination: "file://out/ahead.txt"}

            """, database: database, directory: directory)
        let ahead = try #require(ids.last)
        let store = try engine.reader(database)
        let first = try JobctlProcess.worker(database: database, ["--concurrency", "1", "--lease", "60"],
                                             environment: environment, logDirectory: directory.path)
        defer { first.signal(SIGKILL) }
        try Self.waitUntilClaimedAhead(ahead, store, first)

        first.signal(SIGTERM)
        #expect(first.wait(seconds: 30) == 0, "\(first.log)")
        #expect(try store.job(ahead)?.state == .queued)
        #expect(try store.events(jobID: ahead).map(\.type) == [.submitted, .claimed, .released])

        let second = try JobctlProcess.worker(database: database, ["--concurrency", "2", "--lease", "60"],
                                              environment: environment, logDirectory: directory.path)
        defer { second.signal(SIGKILL) }
        let done = try eventually(seconds: 20) { try store.job(ahead)?.state == .succeeded }
        second.signal(SIGTERM)
        #expect(second.wait(seconds: 30) == 0, "\(second.log)")
        try #require(done, "the released job was not finished by the second worker: \(second.log)")
        let events = try store.events(jobID: ahead)
        #expect(events.map(\.type) == [.submitted, .claimed, .released, .claimed, .started, .succeeded])
        #expect(events.map(\.version) == Array(1...events.count))
        #expect(Set(events.filter { $0.type == .claimed }.compactMap(\.data.leaseOwner)).count == 2)
        #expect(try String(contentsOfFile: directory.file("buckets/out/ahead.txt"), encoding: .utf8) == "ahead")
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// A pause and a cancel of jobs claimed ahead are honoured at once, without their transfer ever
    /// starting: `paused` / `cancelled` follow the request, no `started`, nothing written.
    @Test(arguments: WorkerEngine.allCases)
    func pauseAndCancelOfClaimedAheadJobsAreHonoured(engine: WorkerEngine) throws {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("ahead-control")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        let ids = try submit("""
            - {kind: download-file, source: "\(try Self.slowSource(nginx, "a"))", destination: "\(directory.file("a.bin"))"}
            - {kind: download-file, source: "\(try Self.slowSource(nginx, "b"))", destination: "\(directory.file("b.bin"))"}
            - {kind: upload-data, data: "paused", destination: "file://out/paused.txt"}
            - {kind: upload-data, data: "cancelled", destination: "file://out/cancelled.txt"}

            """, database: database, directory: directory)
        try #require(ids.count == 4)
        let (holds, toPause, toCancel) = (ids[0...1], ids[2], ids[3])
        let store = try engine.reader(database)
        // Two slots, two held: the first claim takes all four jobs.
        let worker = try JobctlProcess.worker(database: database, ["--concurrency", "2", "--lease", "60"],
                                              environment: environment, logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }

        try Self.waitUntilClaimedAhead(toPause, store, worker)
        try Self.waitUntilClaimedAhead(toCancel, store, worker)
        #expect(try jobctl(["pause", toPause], database: database).status == 0)
        #expect(try eventually(seconds: 10) { try store.job(toPause)?.state == .paused }, "\(worker.log)")
        #expect(try store.events(jobID: toPause).map(\.type) == [.submitted, .claimed, .pauseRequested, .paused])

        #expect(try jobctl(["cancel", toCancel], database: database).status == 0)
        #expect(try eventually(seconds: 10) { try store.job(toCancel)?.state == .cancelled }, "\(worker.log)")
        #expect(try store.events(jobID: toCancel).map(\.type) == [.submitted, .claimed, .cancelRequested, .cancelled])

        // Neither transfer ran; the slot's own job was never disturbed.
        #expect(!FileManager.default.fileExists(atPath: directory.file("buckets/out/paused.txt")))
        #expect(!FileManager.default.fileExists(atPath: directory.file("buckets/out/cancelled.txt")))
        #expect(try holds.allSatisfy { try store.job($0)?.state == .running })
        #expect(worker.process.isRunning)
    }

    /// SIGKILL: the job claimed ahead holds a lease like a running one, so it is rescued when the
    /// lease expires (`lease_expired`) and another worker finishes it. (A 6 s lease: a held job is
    /// released after a third of it, 2 s, which the kill comes well before.)
    @Test(arguments: WorkerEngine.allCases)
    func killedWorkersClaimedAheadJobsAreRescued(engine: WorkerEngine) throws {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("ahead-kill")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        let ids = try submit("""
            - {kind: download-file, source: "\(try Self.slowSource(nginx))", destination: "\(directory.file("hold.bin"))"}
            - {kind: upload-data, data: "rescued", destination: "file://out/rescued.txt"}

            """, database: database, directory: directory)
        let ahead = try #require(ids.last)
        let store = try engine.reader(database)
        let first = try JobctlProcess.worker(database: database, ["--concurrency", "1", "--lease", "6"],
                                             environment: environment, logDirectory: directory.path)
        try Self.waitUntilClaimedAhead(ahead, store, first)
        first.signal(SIGKILL)
        _ = first.wait(seconds: 5)

        let second = try JobctlProcess.worker(database: database, ["--concurrency", "2", "--lease", "2"],
                                              environment: environment, logDirectory: directory.path)
        defer { second.signal(SIGKILL) }
        let done = try eventually(seconds: 40) { try store.job(ahead)?.state == .succeeded }
        second.signal(SIGTERM)
        _ = second.wait(seconds: 30)
        try #require(done, "the killed worker's claimed-ahead job was not rescued: \(second.log)")
        let events = try store.events(jobID: ahead)
        #expect(events.map(\.type) == [.submitted, .claimed, .leaseExpired, .claimed, .started, .succeeded])
        #expect(events.map(\.version) == Array(1...events.count))
        #expect(try String(contentsOfFile: directory.file("buckets/out/rescued.txt"), encoding: .utf8) == "rescued")
    }

    /// Behind a long transfer a held job would only wait: after a third of the lease (here 1 s) it is
    /// released, the busy worker does not claim it again while its slot is still taken by a run older
    /// than the claim-ahead window, and an idle worker runs it while the long transfer goes on.
    @Test(arguments: WorkerEngine.allCases)
    func heldJobBehindALongTransferGoesToAnIdleWorker(engine: WorkerEngine) throws {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("ahead-fair")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        let ids = try submit("""
            - {kind: download-file, source: "\(try Self.slowSource(nginx))", destination: "\(directory.file("hold.bin"))"}
            - {kind: upload-data, data: "fair", destination: "file://out/fair.txt"}

            """, database: database, directory: directory)
        let (hold, ahead) = (ids[0], ids[1])
        let store = try engine.reader(database)
        let busy = try JobctlProcess.worker(database: database, ["--concurrency", "1", "--lease", "3"],
                                            environment: environment, logDirectory: directory.path)
        defer { busy.signal(SIGKILL) }
        let released = try eventually(seconds: 20) { try store.events(jobID: ahead).map(\.type) == [.submitted, .claimed, .released] }
        let history = try store.events(jobID: ahead).map(\.type)
        try #require(released, "\(history) \(busy.log)")
        // A few heartbeat periods later the busy worker still has not taken it back.
        usleep(1_500_000)
        #expect(try store.job(ahead)?.state == .queued)

        let idle = try JobctlProcess.worker(database: database, ["--concurrency", "1", "--lease", "3"],
                                            environment: environment, logDirectory: directory.path)
        defer { idle.signal(SIGKILL) }
        let done = try eventually(seconds: 20) { try store.job(ahead)?.state == .succeeded }
        try #require(done, "\(idle.log)")
        #expect(try store.job(hold)?.state == .running)
        let events = try store.events(jobID: ahead)
        #expect(events.map(\.type) == [.submitted, .claimed, .released, .claimed, .started, .succeeded])
        #expect(Set(events.filter { $0.type == .claimed }.compactMap(\.data.leaseOwner)).count == 2)
    }

    /// Small downloads drained by one worker with claim-ahead: every job's history is exactly
    /// submitted, claimed, started, succeeded, versions 1…4 — no `progress` event for a transfer that
    /// ends within its first progress interval — and the log replays to the projection.
    @Test(arguments: WorkerEngine.allCases)
    func everyHistoryIsSubmittedClaimedStartedSucceeded(engine: WorkerEngine) throws {
        let directory = try TemporaryDirectory("ahead-history")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let objects = directory.file("objects")
        try FileManager.default.createDirectory(atPath: objects, withIntermediateDirectories: true)
        var manifest = "jobs:\n"
        for index in 0..<300 {
            let path = "\(objects)/\(index).bin"
            try Data(String(repeating: "\(index % 10)", count: 64).utf8).write(to: URL(fileURLWithPath: path))
            manifest += "  - {kind: download-memory, source: \"file://\(path)\"}\n"
        }
        let ids = try submit(manifest, database: database, directory: directory)
        #expect(ids.count == 300)
        let worker = try JobctlProcess.worker(database: database, ["--drain", "--concurrency", "8"],
                                              logDirectory: directory.path)
        #expect(worker.wait(seconds: 90) == 0, "\(worker.log)")
        let store = try engine.reader(database)
        var histories: [String: [EventType]] = [:]
        for id in ids {
            let events = try store.events(jobID: id)
            histories[id] = events.map(\.type)
            #expect(events.map(\.version) == Array(1...events.count), "job \(id)")
        }
        let odd = histories.filter { $0.value != [.submitted, .claimed, .started, .succeeded] }
        #expect(odd.isEmpty, "\(odd.prefix(3))")
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// A job claimed ahead waits for a slot; its `succeeded` line's `duration_ms` (and the rate made from
    /// it) starts when it got the slot, not at its claim: behind a ~3 s download on the one slot, the
    /// small upload's wait is in its history (claimed → started) but not in its logged duration.
    @Test func loggedDurationOfAJobClaimedAheadLeavesOutItsWait() throws {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("ahead-duration")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        try writePatternFile("\(nginx.root)/slow/short.bin", size: 8 << 20)
        let ids = try submit("""
            - {kind: download-file, source: "\(nginx.baseURL)/slow/short.bin", destination: "\(directory.file("short.bin"))"}
            - {kind: upload-data, data: "waited", destination: "file://out/waited.txt"}

            """, database: database, directory: directory)
        let ahead = try #require(ids.last)
        let worker = try JobctlProcess.worker(database: database, ["--drain", "--concurrency", "1", "--lease", "60"],
                                              environment: ["JOBCTL_BUCKETS": directory.file("buckets")],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        #expect(worker.wait(seconds: 60) == 0, "\(worker.log)")
        let events = try WorkerEngine.sqlite.reader(database).events(jobID: ahead)
        try #require(events.map(\.type) == [.submitted, .claimed, .started, .succeeded], "\(events.map(\.type)) \(worker.log)")
        // Claimed with the download, started once the download had returned.
        let waitedMs = events[2].atMs - events[1].atMs
        try #require(waitedMs >= 1_000, "the upload did not wait for the slot (\(waitedMs) ms): \(worker.log)")
        let line = try #require(worker.log.split(separator: "\n").first { $0.contains(" succeeded \(ahead) ") }, "\(worker.log)")
        let field = try #require(line.split(separator: " ").first { $0.hasPrefix("duration_ms=") }, "\(line)")
        let durationMs = try #require(Int64(field.dropFirst("duration_ms=".count)), "\(line)")
        #expect(durationMs < waitedMs, "duration_ms=\(durationMs) counts the \(waitedMs) ms the job waited for its slot: \(line)")
        #expect(try String(contentsOfFile: directory.file("buckets/out/waited.txt"), encoding: .utf8) == "waited")
    }

    /// `--claim-ahead 0`: a worker claims only for its free slots. Behind one long transfer on its one
    /// slot, the second job stays queued (with the default of one held job, the same claim took both).
    @Test func claimAheadZeroClaimsOnlyForFreeSlots() throws {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("ahead-zero")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let environment = ["JOBCTL_BUCKETS": directory.file("buckets")]
        let ids = try submit("""
            - {kind: download-file, source: "\(try Self.slowSource(nginx))", destination: "\(directory.file("hold.bin"))"}
            - {kind: upload-data, data: "later", destination: "file://out/later.txt"}

            """, database: database, directory: directory)
        let (running, queued) = (try #require(ids.first), try #require(ids.last))
        let store = try WorkerEngine.sqlite.reader(database)
        let worker = try JobctlProcess.worker(database: database, ["--concurrency", "1", "--claim-ahead", "0", "--lease", "60"],
                                              environment: environment, logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let started = try eventually(seconds: 20) { try store.job(running)?.state == .running }
        try #require(started, "the long download was not claimed: \(worker.log)")
        // Claimed alone: the claim that took the first job would have taken the second with it.
        Thread.sleep(forTimeInterval: 0.5)
        #expect(try store.job(queued)?.state == .queued)
        #expect(try store.events(jobID: queued).map(\.type) == [.submitted])
        worker.signal(SIGTERM)
        #expect(worker.wait(seconds: 30) == 0, "\(worker.log)")
        #expect(try store.events(jobID: queued).map(\.type) == [.submitted])
    }
}
