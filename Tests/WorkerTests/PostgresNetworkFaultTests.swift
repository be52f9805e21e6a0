@testable import Worker
import Foundation
import JobLifecycle
import JobModel
import PostgresStore
import Testing
import TestSupport

/// Worker processes on PostgreSQL behind a network that misbehaves between them and the server (a
/// `TCPFaultProxy` in the URL): answers lost after the server acted, connections that go silent.
@Suite("workers on PostgreSQL behind a faulty network", .onTestThreads) struct PostgresNetworkFaultTests {
    /// `database` with its port replaced by `proxy`'s.
    static func proxied(_ database: String, _ proxy: TCPFaultProxy) throws -> String {
        let server = try PostgresServer.shared()
        let direct = "@127.0.0.1:\(server.port)/"
        #expect(database.contains(direct))
        return database.replacingOccurrences(of: direct, with: "@127.0.0.1:\(proxy.port)/")
    }

    /// A claim whose COMMIT the server carried out but whose answer a reset lost: its jobs were leased to
    /// the worker, which knew nothing of them. They sat `running` until the lease ran out and the rescue
    /// took them back as runs lost to a crash — an attempt spent each, and with `max_attempts: 1` they
    /// failed ("its worker died or lost its lease"), the worker alive and well.
    @Test func aClaimWhoseAnswerWasLostIsTakenUpByItsWorker() throws {
        let directory = try TemporaryDirectory("pg-lost-claim")
        defer { directory.remove() }
        let database = try PostgresServer.shared().makeSchema("pglostclaim")
        let migrated = try jobctl(["migrate"], database: database)
        try #require(migrated.status == 0, "\(migrated.stderr)")
        let count = 12
        let ids = try submit((0..<count).map { "- {kind: upload-data, data: \"job \($0)\", destination: file://out/\($0).txt, max_attempts: 1}\n" }
                                 .joined(), database: database, directory: directory)
        #expect(ids.count == count)
        // The first claim's statement is sent as text (it is prepared in that pipeline); the COMMIT after it
        // reaches the server, and its answer is held back and replaced by a reset.
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port, rules: [
            TCPFaultProxy.Rule(marker: "COMMIT\u{0}", after: ["nextval('lease_tokens'::regclass)"], action: .resetAfterAnswer),
        ])
        defer { proxy.stop() }
        let worker = try JobctlProcess.worker(database: try Self.proxied(database, proxy),
                                              ["--drain", "--lease", "3", "--concurrency", "4"],
                                              environment: ["JOBCTL_BUCKETS": directory.file("buckets")], logDirectory: directory.path)
        let status = worker.wait(seconds: 60)
        #expect(status == 0, "\(worker.log)")
        #expect(proxy.firedRules.count == 1, "the claim's answer was never lost: \(worker.log)")
        #expect(worker.log.contains("store_error"), "\(worker.log)")
        // The lost COMMIT's line says what the worker does about it, not a command's user's check
        // ("`jobctl list` before running the command again"): the worker finds out for itself.
        let lostCommit = worker.log.split(separator: "\n").filter { $0.contains("store_error") && $0.contains("COMMIT") }
        #expect(!lostCommit.isEmpty && lostCommit.allSatisfy { $0.contains("this worker finds out for itself") }, "\(worker.log)")
        #expect(!worker.log.contains("jobctl list"), "\(worker.log)")

        let store = try PostgresStore(url: database, mode: .readOnly)
        let jobs = try store.jobs()
        #expect(jobs.count == count)
        #expect(jobs.allSatisfy { $0.state == .succeeded && $0.attempts == 1 },
                "\(jobs.filter { $0.state != .succeeded }.map { "\($0.id) \($0.state)" }) \(worker.log)")
        for id in ids {
            let types = try store.events(jobID: id).map(\.type)
            #expect(types.filter { $0 == .claimed }.count == 1, "\(id): \(types)")
            #expect(!types.contains(.leaseExpired), "\(id): \(types)")
        }
        #expect(!worker.log.contains("lease_lost") && !worker.log.contains("warning abandoned"), "\(worker.log)")
        let verified = try jobctl(["replay", "--verify"], database: database)
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(!worker.log.contains(try PostgresServer.shared().password))
    }

    /// A job's `failed` commits but its answer is lost, and so are the answers to the worker's looks for it
    /// (each a transaction of its own that locks the job's row, `… FOR KEY SHARE`, so that a commit still
    /// under way ends first): the worker's retry of the outcome was refused for a stale lease (the outcome
    /// had ended it), and it logged `lease_lost` and `abandoned … the lease is stale` while the log held its
    /// own `failed`; `worker --drain` exited 0 with failed=0 abandoned=1. The refusal is resolved from the
    /// job's history now, and the job counts as failed (exit 2).
    @Test func anOutcomeWhoseLooksLoseTheirAnswersIsFoundInTheHistory() throws {
        let directory = try TemporaryDirectory("pg-lost-looks")
        defer { directory.remove() }
        let database = try PostgresServer.shared().makeSchema("pglostlooks")
        let migrated = try jobctl(["migrate"], database: database)
        try #require(migrated.status == 0, "\(migrated.stderr)")
        let job = try #require(try submit("- {kind: download-memory, source: file://src/missing.bin, max_attempts: 1}\n",
                                          database: database, directory: directory).first)
        try FileManager.default.createDirectory(atPath: directory.file("buckets/src"), withIntermediateDirectories: true)
        // The outcome's group commit names the missing object (its error); each look is a transaction
        // whose statement is prepared anew on each new connection.
        let look = TCPFaultProxy.Rule(marker: "COMMIT\u{0}", after: ["FOR KEY SHARE"], action: .resetAfterAnswer)
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port, rules: [
            TCPFaultProxy.Rule(marker: "COMMIT\u{0}", after: ["missing.bin"], action: .resetAfterAnswer), look, look, look,
        ])
        defer { proxy.stop() }
        let worker = try JobctlProcess.worker(database: try Self.proxied(database, proxy), ["--drain", "--lease", "10"],
                                              environment: ["JOBCTL_BUCKETS": directory.file("buckets")], logDirectory: directory.path)
        let status = worker.wait(seconds: 60)
        #expect(proxy.firedRules.count >= 3, "the outcome and two looks were to lose their answers: \(proxy.firedRules) \(worker.log)")
        #expect(status == 2, "\(worker.log)")
        #expect(worker.log.contains("write_landed \(job)") && worker.log.contains("worker_stopped claimed=1 succeeded=0 failed=1"),
                "\(worker.log)")
        #expect(!worker.log.contains("lease_lost") && !worker.log.contains("warning abandoned"), "\(worker.log)")
        let store = try PostgresStore(url: database, mode: .readOnly)
        let types = try store.events(jobID: job).map(\.type)
        #expect(types.filter { $0 == .failed }.count == 1 && types.last == .failed, "\(types)")
        #expect(!worker.log.contains(try PostgresServer.shared().password))
    }

    /// The path to the server goes silent — connections accepted, nothing answered, nothing reset (a
    /// stalled proxy or load balancer, a frozen host) — while a worker holds several running jobs. Every
    /// store call waited behind the one before, each new connection its full connect timeout, and each held
    /// job's outcome then cost another before it was abandoned: with eight jobs under a 30 s lease the
    /// worker gave its jobs up one by one, 10 s apart, and a drain ended ~250 s into the outage. A
    /// connection attempt that failed is not made again for a moment: the calls queued meanwhile fail at
    /// once with its error, so the held jobs are abandoned together about a lease after the silence began.
    @Test func aSilentServerHasItsHeldJobsAbandonedTogether() throws {
        let directory = try TemporaryDirectory("pg-silent-held")
        defer { directory.remove() }
        let database = try PostgresServer.shared().makeSchema("pgsilentheld")
        let migrated = try jobctl(["migrate"], database: database)
        try #require(migrated.status == 0, "\(migrated.stderr)")
        let count = 6
        try FileManager.default.createDirectory(atPath: directory.file("src"), withIntermediateDirectories: true)
        for index in 0..<count { try writePatternFile(directory.file("src/\(index).bin"), size: 600_000) }
        let ids = try submit((0..<count).map { "- {kind: upload-file, source: src/\($0).bin, destination: file://out/\($0).bin, max_rate: 50k}\n" }
                                 .joined(), database: database, directory: directory)
        #expect(ids.count == count)
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port)
        defer { proxy.stop() }
        let store = try PostgresStore(url: database, mode: .readOnly)
        let worker = try JobctlProcess.worker(database: try Self.proxied(database, proxy),
                                              ["--drain", "--lease", "6", "--concurrency", String(count)],
                                              environment: ["JOBCTL_BUCKETS": directory.file("buckets")], logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        try #require(try eventually(seconds: 20) { try ids.allSatisfy { try store.job($0)?.state == .running } }, "\(worker.log)")
        proxy.goSilent()
        let silent = Date()
        let status = worker.wait(seconds: 120)
        let tookSeconds = Date().timeIntervalSince(silent)
        #expect(status == 1, "\(worker.log)")
        // The first call's answer limit (10 s at least) and one connect timeout (10 s), the transfers' own
        // 12 s, and a margin: not one connect timeout per held job and per look at it.
        #expect(tookSeconds < 50, "the drain ended \(tookSeconds) s into the silence: \(worker.log)")
        for id in ids { #expect(worker.log.contains("abandoned \(id)"), "\(id): \(worker.log)") }
        #expect(!worker.log.contains(try PostgresServer.shared().password))
    }

    /// The lease renewals' own connection goes silent (a proxy or a NAT that stopped forwarding it) while
    /// the store's connection and the transfer go on. Its renewal was given up only after the store's
    /// answer limit (the lease, at least 10 s), when the leases it renewed had already run out: another
    /// worker rescued the running download (with `max_attempts: 1` it failed), the worker lost it.
    @Test func aSilentLeaseConnectionIsReplacedBeforeTheLeasesRunOut() throws {
        // Connection 1 is the store's, 2 the lease renewals' (opened at the first heartbeat, 2 s in): its
        // second renewal, 4 s in, never reaches the server, nor does anything after it on that connection.
        let proxy = try Self.runOnceWithALeaseConnectionFault(
            TCPFaultProxy.Rule(marker: "BEGIN ISOLATION", connection: 2, nth: 2, action: .stall),
            scene: SlowDownload(directory: "pg-silent-lease", schema: "pgsilentlease", mebibytes: 18))
        // The renewal was given up and ran again on a new connection (nothing of it had reached the server).
        #expect(proxy.acceptedConnections >= 3, "\(proxy.acceptedConnections) connections")
    }

    /// The lease renewals' connection went silent just after it was opened, at its first statement (the
    /// one that keeps the session to the log's schema): that statement ran before the connection had an
    /// answer limit, and waited for ever. No lease was renewed again (another worker rescued the running
    /// download; with `max_attempts: 1` it failed), and SIGTERM never ended the worker (seen in CI: no
    /// exit 90 s after the signal). The statement is bounded as a renewal is now: given up, the renewal
    /// goes on another connection.
    @Test func aLeaseConnectionSilentAtItsFirstStatementIsGivenUp() throws {
        // Connection 1 is the store's, 2 the lease renewals' (opened at the first heartbeat, 2 s in).
        _ = try Self.runOnceWithALeaseConnectionFault(
            TCPFaultProxy.Rule(marker: "set_config('search_path'", connection: 2, action: .stall),
            scene: SlowDownload(directory: "pg-silent-lease-open", schema: "pgsilentleaseopen", mebibytes: 14))
    }

    /// Runs `scene`'s download on a worker (a 6 s lease) whose path to the server goes through a proxy
    /// with `rule`, beside a rescuer straight to the server that takes any lease that runs out (every
    /// 3 s); expects the fault fired and the download ran once under its one lease, and both workers
    /// stop cleanly. Returns the proxy (stopped) for what it counted.
    static func runOnceWithALeaseConnectionFault(_ rule: TCPFaultProxy.Rule, scene: SlowDownload) throws -> TCPFaultProxy {
        defer { scene.stop() }
        let (directory, database, job) = (scene.directory, scene.database, scene.job)
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port, rules: [rule])
        defer { proxy.stop() }
        let store = try PostgresStore(url: database, mode: .readOnly)
        let worker = try JobctlProcess.worker(database: try proxied(database, proxy), ["--lease", "6", "--concurrency", "1"],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        try #require(try eventually(seconds: 20) { (try store.job(job)?.resumePoint?.bytesDone ?? 0) > 0 }, "\(worker.log)")
        let rescuer = try JobctlProcess.worker(database: database, ["--lease", "6", "--concurrency", "1"], logDirectory: directory.path)
        defer { rescuer.signal(SIGKILL) }

        let ended = try eventually(seconds: 60) { try store.job(job).map { [.succeeded, .failed].contains($0.state) } ?? false }
        #expect(ended, "\(worker.log)")
        #expect(proxy.firedRules.count == 1, "the lease connection's fault never fired: \(worker.log)")
        try scene.expectRunOnce(store: store, worker: worker, rescuer: rescuer)
        scene.stopAndVerify(worker, rescuer)
        return proxy
    }

    /// The lease renewals' connection cannot be opened while the store's own lives (the server or a
    /// firewall refusing a second session): the renewals failed, without a word, until the leases ran
    /// out and another worker took the running download (with `max_attempts: 1` it failed).
    @Test func leasesAreRenewedWhenTheirOwnConnectionCannotBeOpened() throws {
        let scene = try SlowDownload(directory: "pg-refused-lease", schema: "pgrefusedlease", mebibytes: 12)
        defer { scene.stop() }
        let (directory, database, job) = (scene.directory, scene.database, scene.job)
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port)
        defer { proxy.stop() }
        let store = try PostgresStore(url: database, mode: .readOnly)
        let worker = try JobctlProcess.worker(database: try Self.proxied(database, proxy), ["--lease", "6", "--concurrency", "1"],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        // Once the store's connection is open, no other is let through (the first renewal comes 2 s in).
        try #require(eventually(seconds: 10) { proxy.acceptedConnections >= 1 })
        proxy.refuseNewConnections(true)
        try #require(try eventually(seconds: 20) { try store.events(jobID: job).contains { $0.type == .started } }, "\(worker.log)")
        let rescuer = try JobctlProcess.worker(database: database, ["--lease", "6", "--concurrency", "1"], logDirectory: directory.path)
        defer { rescuer.signal(SIGKILL) }

        let ended = try eventually(seconds: 60) { try store.job(job).map { [.succeeded, .failed].contains($0.state) } ?? false }
        #expect(ended, "\(worker.log)")
        #expect(proxy.acceptedConnections == 1)
        try scene.expectRunOnce(store: store, worker: worker, rescuer: rescuer)
        scene.stopAndVerify(worker, rescuer)
    }

    /// A lease renewal whose connection was lost mid-way failed, and the lease keeper swallowed the
    /// error: nothing in the log said the leases were not being renewed (only a later failure of the
    /// worker's loop, if any, was logged), so leases that then ran out left no trace of why.
    @Test func aFailedLeaseRenewalIsLoggedOnceWithItsCause() throws {
        let scene = try SlowDownload(directory: "pg-reset-lease", schema: "pgresetlease", mebibytes: 12)
        defer { scene.stop() }
        let (directory, database, job) = (scene.directory, scene.database, scene.job)
        // Connection 2 is the lease renewals' (opened at the first heartbeat, 2 s in): its second renewal,
        // 4 s in, loses its connection mid-way, at its COMMIT (a renewal whose first round trip finds the
        // connection dead runs again at once on a new one); the next renewal opens connection 3.
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port, rules: [
            TCPFaultProxy.Rule(marker: "COMMIT\u{0}", connection: 2, nth: 2, action: .resetAfterAnswer),
        ])
        defer { proxy.stop() }
        let store = try PostgresStore(url: database, mode: .readOnly)
        let worker = try JobctlProcess.worker(database: try Self.proxied(database, proxy), ["--lease", "6", "--concurrency", "1"],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }

        let ended = try eventually(seconds: 60) { try store.job(job).map { [.succeeded, .failed].contains($0.state) } ?? false }
        #expect(ended, "\(worker.log)")
        #expect(proxy.firedRules.count == 1, "the lease connection was never reset: \(worker.log)")
        worker.signal(SIGTERM)
        #expect(worker.wait(seconds: 20) == 0, "\(worker.log)")
        let notRenewed = worker.log.split(separator: "\n").filter { $0.contains("leases were not renewed") }
        #expect(notRenewed.count == 1, "\(worker.log)")
        #expect(notRenewed.allSatisfy { $0.contains("store_error") && $0.contains("the connection to PostgreSQL was lost") },
                "\(notRenewed)")
        #expect(!worker.log.contains(try PostgresServer.shared().password))
        let record = try #require(try store.job(job))
        #expect(record.state == .succeeded && record.attempts == 1, "\(record.state) \(worker.log)")
    }

    /// SIGTERM while the store's connection has gone silent: the `released` write waited the store's
    /// answer limit (the lease, at least 10 s), past the stop grace (8 s), and the worker exited without
    /// trying it once on a new connection: the running job was left to the rescue (an attempt spent).
    @Test func aStoppingWorkerReleasesItsJobOnANewConnectionWithinTheGrace() throws {
        let scene = try SlowDownload(directory: "pg-stalled-release", schema: "pgstalledrelease", mebibytes: 40)
        defer { scene.stop() }
        let (directory, database, job) = (scene.directory, scene.database, scene.job)
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port)
        defer { proxy.stop() }
        let store = try PostgresStore(url: database, mode: .readOnly)
        let worker = try JobctlProcess.worker(database: try Self.proxied(database, proxy), ["--lease", "6", "--concurrency", "1"],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        try #require(try eventually(seconds: 20) { (try store.job(job)?.resumePoint?.bytesDone ?? 0) > 0 }, "\(worker.log)")
        // The store's connection (1) goes silent at its next transaction; the lease renewals' stays up.
        proxy.add(TCPFaultProxy.Rule(marker: "BEGIN", connection: 1, action: .stall))
        try #require(eventually(seconds: 10) { proxy.firedRules.count == 1 }, "\(worker.log)")
        let stopped = Date()
        worker.signal(SIGTERM)
        let status = worker.wait(seconds: 30)
        let tookSeconds = Date().timeIntervalSince(stopped)
        #expect(status == 0, "\(worker.log)")
        #expect(tookSeconds < 9, "took \(tookSeconds) s: \(worker.log)")
        let types = try store.events(jobID: job).map(\.type)
        #expect(types.last == .released && !types.contains(.leaseExpired), "\(types) \(worker.log)")
        let record = try #require(try store.job(job))
        #expect(record.state == .queued, "\(record.state) \(worker.log)")
        #expect(proxy.acceptedConnections >= 3, "\(proxy.acceptedConnections) connections")
        #expect(!worker.log.contains(try PostgresServer.shared().password))
    }

    /// SIGTERM while the whole path to the server is silent (its connections stalled, new ones taken and
    /// never answered): the stopping worker's `released` write and its lease renewals made one 10 s
    /// connection attempt after another (the connect timeout), and it exited 28–62 s after the signal
    /// where its grace is 8 s. Its store work ends with the grace now, and it exits on time.
    @Test func aStoppingWorkerWhoseServerWentSilentExitsWithinItsGrace() throws {
        let scene = try SlowDownload(directory: "pg-silent-stop", schema: "pgsilentstop", mebibytes: 40)
        defer { scene.stop() }
        let (directory, database, job) = (scene.directory, scene.database, scene.job)
        let proxy = try TCPFaultProxy(upstreamPort: try PostgresServer.shared().port)
        defer { proxy.stop() }
        let store = try PostgresStore(url: database, mode: .readOnly)
        // A lease of 15 s: renewals every 5 s, on their own connection from the first; the store's
        // connection gives an answer up after 15 s, and waits 10 s to connect.
        let worker = try JobctlProcess.worker(database: try Self.proxied(database, proxy), ["--lease", "15", "--concurrency", "1"],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        try #require(try eventually(seconds: 20) { try store.events(jobID: job).contains { $0.type == .progress } }, "\(worker.log)")
        try #require(eventually(seconds: 20) { proxy.acceptedConnections >= 2 }, "no lease connection: \(worker.log)")
        proxy.goSilent()
        usleep(1_000_000)
        let stopped = Date()
        worker.signal(SIGTERM)
        let status = worker.wait(seconds: 90)
        let tookSeconds = Date().timeIntervalSince(stopped)
        #expect(status == 0, "\(worker.log)\(worker.threads)")
        #expect(tookSeconds < 11, "exited \(tookSeconds) s after SIGTERM, its grace 8 s: \(worker.log)")
        // Nothing reached the server after the silence: the job stays running for the rescue, said so.
        #expect(worker.log.contains("warning abandoned \(job)") && worker.log.contains("worker_stopped"), "\(worker.log)")
        // One line for the run: the stop's sweep of the runs left, coming as this one returned, logged it a
        // second time (`the worker stopped before this run's outcome could be written`; one run in eight).
        #expect(worker.log.components(separatedBy: "abandoned \(job)").count == 2, "\(worker.log)")
        #expect(try store.job(job)?.state == .running)
        #expect(!worker.log.contains(try PostgresServer.shared().password))
    }
}

/// A fresh schema holding one `download-file` job (`max_attempts: 1`) of a file nginx serves at 1 MB/s:
/// long enough for the lease renewals a scene meddles with.
struct SlowDownload {
    let nginx: NginxServer
    let directory: TemporaryDirectory
    let database: String
    let job: String

    init(directory name: String, schema: String, mebibytes: Int) throws {
        nginx = try startWorkerNginx(slowRate: "1m")
        do {
            directory = try TemporaryDirectory(name)
            database = try PostgresServer.shared().makeSchema(schema)
            let migrated = try jobctl(["migrate"], database: database)
            try #require(migrated.status == 0, "\(migrated.stderr)")
            try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(mebibytes) << 20)
            job = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", "
                                              + "destination: \"\(directory.file("big.bin"))\", max_attempts: 1}\n",
                                          database: database, directory: directory).first)
        } catch {
            nginx.stop()
            throw error
        }
    }

    func stop() {
        nginx.stop()
        directory.remove()
    }

    /// The download succeeded at its one attempt, claimed once, never rescued, its worker's lease never lost.
    func expectRunOnce(store: PostgresStore, worker: JobctlProcess, rescuer: JobctlProcess) throws {
        let record = try #require(try store.job(job))
        #expect(record.state == .succeeded && record.attempts == 1, "\(record.state) \(worker.log) \(rescuer.log)")
        let types = try store.events(jobID: job).map(\.type)
        #expect(types.filter { $0 == .claimed }.count == 1 && !types.contains(.leaseExpired), "\(types)")
        #expect(!worker.log.contains("lease_lost"), "\(worker.log)")
    }

    /// Stops the workers (each must exit 0) and checks the log replays into its projection.
    func stopAndVerify(_ workers: JobctlProcess...) {
        for worker in workers { worker.signal(SIGTERM) }
        for worker in workers { #expect(worker.wait(seconds: 20) == 0, "\(worker.log)\(worker.threads)") }
        let verified = try? jobctl(["replay", "--verify"], database: database)
        #expect(verified?.status == 0, "\(verified?.stdout ?? "") \(verified?.stderr ?? "")")
    }
}

/// Which running jobs a worker takes up after a claim of its own went unanswered: only that claim's. The
/// owner name (`worker:<host>:<pid>`) alone is not proof: two containers may share a host name and a pid,
/// and a job another live worker runs must never be run a second time under the same lease token.
@Suite struct UnansweredClaimAdoptionTests {
    static let owner = "worker:box:1"
    static let lost = WorkerPool.UnansweredClaims(aboveToken: 40, leaseExpiries: [10_000, 12_000])

    /// A job of `owner` under `token`, its last event `last` (nil: the `claimed` the lost claim wrote).
    static func scene(token: Int64, owner: String = owner, claimedOwner: String = owner, expiry: Int64 = 10_000,
                      lastType: EventType = .claimed) throws -> (JobRecord, JobEvent) {
        let spec = JobSpec(kind: .uploadData, destination: "file:///tmp/o", data: Data("x".utf8), maxAttempts: 1)
        let submitted = try JobEvent(jobID: "JOB", version: 1, type: .submitted, atMs: 1, actor: "cli:u", data: EventData(spec: spec))
        var record = try #require(JobRecord(submitted: submitted))
        let claimed = try JobEvent(jobID: "JOB", version: 2, type: .claimed, atMs: 2, actor: claimedOwner, leaseToken: token,
                                   data: EventData(leaseOwner: claimedOwner, leaseExpiresAtMs: expiry, attempt: 1))
        record.apply(claimed)
        record.leaseOwner = owner
        guard lastType != .claimed else { return (record, claimed) }
        let next = try JobEvent(jobID: "JOB", version: 3, type: lastType, atMs: 3, actor: claimedOwner, leaseToken: token,
                                data: EventData(attempt: 1, bytesDone: 0))
        record.apply(next)
        return (record, next)
    }

    @Test func theLostClaimsOwnJobIsTakenUp() throws {
        let (record, last) = try Self.scene(token: 41)
        #expect(Self.lost.adopts(record, lastEvent: last, owner: Self.owner, held: []) == 41)
        let (later, laterLast) = try Self.scene(token: 45, expiry: 12_000)
        #expect(Self.lost.adopts(later, lastEvent: laterLast, owner: Self.owner, held: [41]) == 45)
    }

    @Test func anotherWorkersJobUnderTheSameOwnerNameIsLeftAlone() throws {
        // Claimed by a worker of the same name at another time (its own lease expiry)…
        let (other, otherLast) = try Self.scene(token: 42, expiry: 10_500)
        #expect(Self.lost.adopts(other, lastEvent: otherLast, owner: Self.owner, held: []) == nil)
        // …or already started there (its last event is no longer the claim).
        let (started, startedLast) = try Self.scene(token: 43, lastType: .started)
        #expect(Self.lost.adopts(started, lastEvent: startedLast, owner: Self.owner, held: []) == nil)
    }

    @Test func heldEarlierAndOthersJobsAreLeftAlone() throws {
        let (held, heldLast) = try Self.scene(token: 41)
        #expect(Self.lost.adopts(held, lastEvent: heldLast, owner: Self.owner, held: [41]) == nil)
        let (earlier, earlierLast) = try Self.scene(token: 40)
        #expect(Self.lost.adopts(earlier, lastEvent: earlierLast, owner: Self.owner, held: []) == nil)
        let (foreign, foreignLast) = try Self.scene(token: 44, owner: "worker:box:2", claimedOwner: "worker:box:2")
        #expect(Self.lost.adopts(foreign, lastEvent: foreignLast, owner: Self.owner, held: []) == nil)
    }
}
