import EventStore
import Foundation
import JobLifecycle
import JobModel
import PostgresStore
import Testing
import TestSupport

/// Seeded random pause / resume / cancel / retry — one id or a `--state` filter, text or `--json` — fired
/// at jobs in every stage (queued, claimed ahead, started with its `started` still held, mid-transfer,
/// returned with its outcome being written, just succeeded or failed) while one to three real worker
/// processes run them against nginx, and now and then one is killed (SIGKILL) or stopped (SIGTERM).
/// Then the promises are checked: every history a legal lifecycle and `replay --verify` clean; every
/// control acknowledged landed exactly once (each command has its own actor) and was honoured; no
/// cancelled job wrote its destination after the cancel; every success byte-exact, resumed or not; no
/// partial file of a finished job left behind, nor held open by a worker.
///
/// `JOBCTL_CONTROL_RACE_SECONDS` lengthens the storm (default 12 s per engine) and
/// `JOBCTL_CONTROL_RACE_SEED` replays a seed (a failure names the one it used).
@Suite("control races", .onTestThreads) struct ControlRaceTests {
    static let environment = ProcessInfo.processInfo.environment
    static var stormSeconds: Double { environment["JOBCTL_CONTROL_RACE_SECONDS"].flatMap(Double.init) ?? 12 }

    @Test(arguments: WorkerEngine.allCases)
    func randomControlsKeepTheirPromises(engine: WorkerEngine) throws {
        StuckTests.allow(seconds: Self.stormSeconds * 4 + 600)
        let seed = Self.environment["JOBCTL_CONTROL_RACE_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64(UInt32.max))
        var storm = ControlStorm(engine: engine, seed: seed, seconds: Self.stormSeconds)
        try storm.run()
    }
}

/// One control command fired during the storm, and what it answered.
struct FiredControl {
    let actor: String
    let command: String
    /// The job named, or nil for a `--state` form.
    let jobID: String?
    let json: Bool
    let status: Int32
    let stdout: String
    let stderr: String
}

struct ControlStorm {
    let engine: WorkerEngine
    let seed: UInt64
    let seconds: Double
    var random: SeededGenerator

    init(engine: WorkerEngine, seed: UInt64, seconds: Double) {
        self.engine = engine
        self.seed = seed
        self.seconds = seconds
        random = SeededGenerator(seed: seed)
    }

    struct Job {
        let id: String
        let source: String?
        /// A local path, or a `gs://` object for an upload.
        let destination: String
    }

    var context: String { "[\(engine) seed \(seed)]" }

    mutating func run() throws {
        let nginx = try startWorkerNginx(slowRate: "1m")
        defer { nginx.stop() }
        let emulator = try EmulatorServer.start(bucket: "race")
        defer { emulator.stop() }
        // Resumable uploads in 256 KiB chunks, all transfers held to 3 MB/s together: a session is paused
        // with chunks confirmed and resumed, or cancelled, mid-way.
        let environment = ["STORAGE_EMULATOR_HOST": emulator.baseURL, "JOBCTL_CHUNK_SIZE": "262144", "JOBCTL_RESUMABLE_THRESHOLD": "0"]
        let directory = try TemporaryDirectory("control-race")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let out = directory.file("out")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)

        // Slow downloads (1–6 s each at 1 MB/s) to be caught mid-transfer, small ones that race
        // through every stage in milliseconds, and ones that fail at once (503, one attempt).
        var lines: [String] = []
        var planned: [(source: String?, destination: String)] = []
        for index in 0..<8 {
            let size = Int64(1_000_000 + (index * 711_111) % 5_000_000)
            try writePatternFile("\(nginx.root)/slow/s\(index).bin", size: size, seed: UInt8(index + 1))
            let destination = "\(out)/s\(index).bin"
            lines.append("- {kind: download-file, source: \"\(nginx.baseURL)/slow/s\(index).bin\", destination: \"\(destination)\"}")
            planned.append(("\(nginx.root)/slow/s\(index).bin", destination))
        }
        for index in 0..<5 {
            try writePatternFile("\(nginx.root)/f\(index).bin", size: Int64(20_000 + index * 7_000), seed: UInt8(100 + index))
            let destination = "\(out)/f\(index).bin"
            lines.append("- {kind: download-file, source: \"\(nginx.baseURL)/f\(index).bin\", destination: \"\(destination)\"}")
            planned.append(("\(nginx.root)/f\(index).bin", destination))
        }
        for index in 0..<3 {
            let source = directory.file("u\(index).bin")
            try writePatternFile(source, size: Int64(1_500_000 + index * 700_000), seed: UInt8(50 + index))
            let destination = "gs://\(emulator.bucket)/up/u\(index).bin"
            lines.append("- {kind: upload-file, source: \"\(source)\", destination: \"\(destination)\"}")
            planned.append((source, destination))
        }
        for index in 0..<2 {
            let destination = "\(out)/b\(index).bin"
            lines.append("- {kind: download-file, source: \"\(nginx.baseURL)/broken/b\(index).bin\", destination: \"\(destination)\", max_attempts: 1}")
            planned.append((nil, destination))
        }
        let ids = try submit(lines.joined(separator: "\n") + "\n", database: database, directory: directory)
        try #require(ids.count == planned.count, "\(context) submit printed \(ids)")
        let jobs = zip(ids, planned).map { Job(id: $0, source: $1.source, destination: $1.destination) }
        let store = try engine.reader(database)

        var workers: [JobctlProcess] = []
        func startWorker() throws -> JobctlProcess {
            try JobctlProcess.worker(database: database, ["--concurrency", "2", "--claim-ahead", "2", "--lease", "2", "--bwlimit", "3M"],
                                     environment: environment, logDirectory: directory.path)
        }
        var logs: [JobctlProcess] = []
        defer { for worker in workers { worker.signal(SIGKILL) } }
        for _ in 0..<Int.random(in: 1...3, using: &random) {
            let worker = try startWorker()
            workers.append(worker)
            logs.append(worker)
        }

        // The storm.
        var fired: [FiredControl] = []
        var killed: Set<Int32> = []
        let commands = ["pause", "resume", "cancel", "retry"]
        let states = ["queued", "running", "paused", "failed", "cancelled"]
        let end = Date().addingTimeInterval(seconds)
        var counter = 0
        while Date() < end {
            counter += 1
            let roll = Int.random(in: 0..<100, using: &random)
            if roll < 3 && !workers.isEmpty {
                // A crash: the worker's jobs come back when their leases (2 s) expire.
                let victim = workers.remove(at: Int.random(in: 0..<workers.count, using: &random))
                if roll != 0 { killed.insert(victim.process.processIdentifier) }
                victim.signal(roll == 0 ? SIGTERM : SIGKILL)
                _ = victim.wait(seconds: 15)
                continue
            }
            if workers.count < 3 && (workers.isEmpty || roll < 6) {
                let worker = try startWorker()
                workers.append(worker)
                logs.append(worker)
                continue
            }
            var command = commands[Int.random(in: 0..<commands.count, using: &random)]
            let json = Bool.random(using: &random)
            let actor = "race\(counter)"
            var arguments: [String] = []
            var target: String? = nil
            if roll < 12 {
                arguments += ["--state", states[Int.random(in: 0..<states.count, using: &random)]]
            } else {
                // Mostly a job that has not succeeded, with a command its state (as just read) takes: a
                // succeeded job refuses everything.
                let open = try jobs.filter { try store.job($0.id)?.state != .succeeded }
                let pool = open.isEmpty || roll < 20 ? jobs : open
                let job = pool[Int.random(in: 0..<pool.count, using: &random)]
                if roll >= 40, let state = try store.job(job.id)?.state {
                    let fitting: [String] = switch state {
                    case .queued: ["pause", "cancel"]
                    case .running: ["pause", "cancel", "resume", "pause"]
                    case .paused: ["resume", "cancel", "resume"]
                    case .failed, .cancelled: ["retry"]
                    case .succeeded: commands
                    }
                    command = fitting[Int.random(in: 0..<fitting.count, using: &random)]
                }
                target = job.id
                arguments.append(job.id)
            }
            arguments.insert(command, at: 0)
            if json { arguments.append("--json") }
            let output = try runProcess(PackagePaths.jobctlBinary, ["--db", database] + arguments,
                                        environment: ["NO_COLOR": "1", "USER": actor])
            fired.append(FiredControl(actor: "cli:\(actor)", command: command, jobID: target, json: json,
                                      status: output.status, stdout: output.stdout, stderr: output.stderr))
            // Mostly back to back; now and then a pause so transfers get going.
            if Int.random(in: 0..<10, using: &random) == 0 { usleep(UInt32.random(in: 50_000...400_000, using: &random)) }
        }

        // The calm: transfers fast, one worker at least, every paused job resumed, until all are final.
        nginx.setFast(true)
        if workers.isEmpty {
            let worker = try startWorker()
            workers.append(worker)
            logs.append(worker)
        }
        let allLogs = { logs.map(\.log).joined(separator: "\n----\n") }
        var settled = false
        let calmEnd = Date().addingTimeInterval(60)
        while !settled && Date() < calmEnd {
            _ = try? jobctl(["resume", "--state", "paused"], database: database)
            settled = try jobs.allSatisfy { job in try store.job(job.id).map { $0.state.isFinal } ?? false }
            if !settled { usleep(200_000) }
        }
        let finalStates = try jobs.map { try store.job($0.id)?.state.rawValue ?? "missing" }
        try #require(settled, "\(context) jobs did not settle: \(finalStates)\n\(allLogs())")

        // While the last workers still run (no sweep since the jobs ended): nothing a finished job made
        // is left on disk, or open in a worker.
        // A job a user cancelled while no worker ran it (paused, or back in the queue after a crash) leaves
        // its file to the next worker's sweep (README, Guarantees); any other end takes it at once.
        let trails = try histories(jobs, store)
        // A finished job's files go just after its final event is committed (the runner removes them once
        // the transfer has returned, off the cooperative pool): a job final in the log may still have its
        // file for a moment, longer on a loaded machine. Left after seconds, it is left.
        func leftoverFiles() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: out).filter { name in
            guard name.hasSuffix(".jobctl-partial"), let job = jobs.first(where: { name.contains($0.id) }) else { return false }
            let events = try store.events(jobID: job.id)
            guard let end = events.last else { return true }
            let before = events.dropLast().last
            // A rescue ends a killed worker's run: `lease_expired`, or at the last attempt `failed` for the
            // expired lease itself (the run's file, made before its held `started` was written, is the sweep's).
            let rescued = before?.type == .leaseExpired || (end.type == .failed && end.data.reason?.hasPrefix("lease expired") == true)
            return !end.actor.hasPrefix("cli:") && !rescued
        } }
        _ = try eventually(seconds: 5) { try leftoverFiles().isEmpty }
        let leftovers = try leftoverFiles()
        #expect(leftovers.isEmpty, "\(context) partial files of finished jobs left behind: \(leftovers)\n\(trails)")
        for worker in workers where worker.process.isRunning {
            let pid = worker.process.processIdentifier
            let openPartials = {
                (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.compactMap { fd in
                    try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)")
                }.filter { $0.contains(".jobctl-partial") } ?? []
            }
            let closed = eventually(seconds: 5) { openPartials().isEmpty }
            let open = openPartials()
            let named = jobs.filter { job in open.contains { $0.contains(job.id) } }.map(\.id)
            let lines = worker.log.split(separator: "\n").filter { line in named.contains { line.contains($0) } }.joined(separator: "\n")
            #expect(closed, "\(context) worker \(pid) still holds partial files open: \(open)\n\(trails)\n\(lines)")
        }
        for worker in workers { worker.signal(SIGTERM) }
        for worker in workers { #expect(worker.wait(seconds: 30) == 0, "\(context) \(worker.log)") }
        workers.removeAll()

        try checkHistories(jobs, store: store, logs: allLogs)
        try checkUploads(jobs, store: store, database: database, environment: environment, directory: directory)
        // Only a killed worker's leases expire: one that lives renews every lease it holds.
        for job in jobs {
            for event in try store.events(jobID: job.id) where event.type == .leaseExpired || (event.type == .failed && event.data.reason?.hasPrefix("lease expired") == true) {
                let holder = event.data.reason.flatMap { $0.split(separator: " ").first { $0.hasPrefix("worker:") } }
                let pid = holder.flatMap { $0.split(separator: ":").last }.flatMap { Int32($0) }
                #expect(pid.map { killed.contains($0) } ?? true, "\(context) job \(job.id): a live worker's lease expired: \(event.data.reason ?? "")\n\(allLogs())")
            }
        }
        try checkLedger(fired, store: store, jobs: jobs)
        if ControlRaceTests.environment["JOBCTL_CONTROL_RACE_VERBOSE"] != nil {
            var counts: [String: Int] = [:]
            for job in jobs { for event in try store.events(jobID: job.id) { counts[event.type.rawValue, default: 0] += 1 } }
            let changed = fired.filter { $0.status == 0 && !$0.stdout.contains("already so") }.count
            print("\(context) \(fired.count) controls, \(changed) acknowledged, \(killed.count) kills; events: \(counts.sorted { $0.key < $1.key })")
        }
        let verify = try jobctl(["replay", "--verify"], database: database)
        #expect(verify.status == 0, "\(context) \(verify.stdout)\(verify.stderr)")
    }

    private func histories(_ jobs: [Job], _ store: any JobStore) throws -> String {
        try jobs.map { job in "\(job.id): " + (try store.events(jobID: job.id).map { "\($0.type.rawValue)(\($0.actor))" }.joined(separator: " ")) }
            .joined(separator: "\n")
    }

    /// Every job's history is a legal lifecycle; requests are honoured; results are byte-exact; a
    /// cancelled job's destination was not written after the cancel.
    private func checkHistories(_ jobs: [Job], store: any JobStore, logs: () -> String) throws {
        for job in jobs {
            let events = try store.events(jobID: job.id)
            let trail = events.map(\.type.rawValue).joined(separator: " ")
            if let problem = Self.illegalStep(events) {
                Issue.record("\(context) job \(job.id): \(problem)\n\(trail)")
            }
            guard let record = try store.job(job.id) else {
                Issue.record("\(context) job \(job.id) is missing")
                continue
            }
            let exists = FileManager.default.fileExists(atPath: job.destination)
            switch record.state {
            case .succeeded where job.destination.hasPrefix("gs://"):
                break  // read back in `checkUploads`
            case .succeeded:
                if let source = job.source {
                    let same = (try? Data(contentsOf: URL(fileURLWithPath: job.destination))) == (try? Data(contentsOf: URL(fileURLWithPath: source)))
                    #expect(same, "\(context) job \(job.id) succeeded with other bytes than its source\n\(trail)")
                }
            case .cancelled, .failed:
                // Written before the cancel, by an attempt whose success a crash kept from the log, is
                // allowed; written after, never.
                if exists, let cancelledAt = events.last(where: { $0.type == .cancelRequested || $0.type == .cancelled })?.atMs,
                   record.state == .cancelled {
                    var info = stat()
                    if stat(job.destination, &info) == 0 {
                        let changedMs = Int64(info.st_ctim.tv_sec) * 1_000 + Int64(info.st_ctim.tv_nsec) / 1_000_000
                        #expect(changedMs <= cancelledAt + 5, "\(context) job \(job.id) wrote its destination \(changedMs - cancelledAt) ms after its cancel\n\(trail)")
                    }
                }
            default:
                Issue.record("\(context) job \(job.id) ended \(record.state)\n\(trail)")
            }
            // A paused download resumes from its resume point: the next attempt's `started` carries it.
            for (index, event) in events.enumerated() where event.type == .paused {
                guard let bytes = event.data.resumePoint?.bytesDone, bytes > 0 else { continue }
                guard let next = events[(index + 1)...].first(where: { [.started, .cancelled, .leaseExpired].contains($0.type) }),
                      next.type == .started else { continue }
                #expect(next.data.resumePoint?.bytesDone == bytes,
                        "\(context) job \(job.id) paused at \(bytes) bytes started again at \(String(describing: next.data.resumePoint?.bytesDone))\n\(trail)")
            }
        }
        _ = logs
    }

    /// Every upload that succeeded stored exactly its source's bytes: read back by a download job.
    private func checkUploads(_ jobs: [Job], store: any JobStore, database: String, environment: [String: String],
                              directory: TemporaryDirectory) throws {
        let uploads = try jobs.filter { job in try job.destination.hasPrefix("gs://") && store.job(job.id)?.state == .succeeded }
        guard !uploads.isEmpty else { return }
        let copies = uploads.map { directory.file("copy-\($0.id).bin") }
        let manifest = zip(uploads, copies).map { "- {kind: download-file, source: \"\($0.destination)\", destination: \"\($1)\"}" }
        _ = try submit(manifest.joined(separator: "\n") + "\n", database: database, directory: directory)
        let drain = try JobctlProcess.worker(database: database, ["--drain"], environment: environment, logDirectory: directory.path)
        #expect(drain.wait(seconds: 60) == 0, "\(context) \(drain.log)")
        for (job, copy) in zip(uploads, copies) {
            let same = (try? Data(contentsOf: URL(fileURLWithPath: copy))) == (try? Data(contentsOf: URL(fileURLWithPath: job.source ?? "")))
            let trail = try store.events(jobID: job.id).map(\.type.rawValue).joined(separator: " ")
            #expect(same, "\(context) upload \(job.id) stored other bytes than its source\n\(trail)")
        }
    }

    /// The first event that could not have followed the events before it, or nil.
    static func illegalStep(_ events: [JobEvent]) -> String? {
        guard let first = events.first, first.type == .submitted else { return "does not begin with submitted" }
        var lifecycle = JobLifecycle(folding: [first])
        var startedThisAttempt = false
        for (index, event) in events.enumerated().dropFirst() {
            guard let job = lifecycle.record else { return "no record" }
            if event.version != index + 1 { return "event \(index) has version \(event.version)" }
            // A request on a job that no longer runs is honoured by the very next event.
            if job.state != .running {
                if job.cancelRequested && event.type != .cancelled { return "a pending cancel on a \(job.state) job was followed by \(event.type)" }
                if job.state == .queued && job.pauseRequested && ![.paused, .cancelled].contains(event.type) {
                    return "a pending pause on a queued job was followed by \(event.type)"
                }
            }
            let legal: Bool
            switch event.type {
            case .submitted, .archived: legal = false
            case .claimed: legal = job.state == .queued
            case .started:
                legal = job.state == .running && !startedThisAttempt
                startedThisAttempt = true
            case .progress, .attemptFailed, .leaseExpired, .released, .succeeded, .failed:
                legal = job.state == .running
            case .pauseRequested: legal = job.state == .running && !job.pauseRequested && !job.cancelRequested
            case .cancelRequested: legal = job.state == .running && !job.cancelRequested
            case .resumeRequested:
                legal = job.state == .paused || (job.state == .running && job.pauseRequested)
                    || (index >= 1 && events[index - 1].type == .paused)
            case .paused: legal = job.state == .queued || job.state == .running
            case .cancelled: legal = job.state == .queued || job.state == .paused || job.state == .running
            case .retried: legal = job.state == .failed || job.state == .cancelled
            }
            if !legal { return "\(event.type) (v\(event.version)) followed a \(job.state) job" }
            // A worker's event carries the token of the claim that holds the job.
            if let token = event.leaseToken, event.type != .claimed, token != job.leaseToken {
                return "\(event.type) carries token \(token), the job's is \(String(describing: job.leaseToken))"
            }
            if event.type == .claimed { startedThisAttempt = false }
            lifecycle.apply(event)
        }
        return nil
    }

    /// Each command's own actor: a change it acknowledged appended exactly one event of its kind, a
    /// repeat or a refusal none.
    private func checkLedger(_ fired: [FiredControl], store: any JobStore, jobs: [Job]) throws {
        var byActor: [String: [JobEvent]] = [:]
        for job in jobs {
            for event in try store.events(jobID: job.id) where event.actor.hasPrefix("cli:race") {
                byActor[event.actor, default: []].append(event)
            }
        }
        let primary: [String: Set<EventType>] = [
            "pause": [.pauseRequested, .paused], "resume": [.resumeRequested],
            "cancel": [.cancelRequested, .cancelled], "retry": [.retried],
        ]
        for control in fired {
            let events = byActor[control.actor] ?? []
            let kinds = primary[control.command] ?? []
            let said = "\(control.command) \(control.jobID ?? "--state") → \(control.status): \(control.stdout)\(control.stderr)"
            if let jobID = control.jobID {
                let own = events.filter { kinds.contains($0.type) }
                #expect(events.allSatisfy { $0.jobID == jobID }, "\(context) \(said) wrote to another job")
                if control.status != 0 {
                    #expect(events.isEmpty, "\(context) \(said) was refused yet appended \(events.map(\.type))")
                } else if !control.json && control.stdout.contains("already so") {
                    #expect(events.isEmpty, "\(context) \(said) was a repeat yet appended \(events.map(\.type))")
                } else if !control.json {
                    #expect(own.count == 1, "\(context) \(said) appended \(events.map(\.type))")
                } else {
                    #expect(own.count <= 1, "\(context) \(said) appended \(events.map(\.type))")
                }
            } else if control.json, let report = try? JSONSerialization.jsonObject(with: Data(control.stdout.utf8)) as? [String: Any],
                      let decisions = report["jobs"] as? [[String: Any]] {
                for decision in decisions {
                    guard let id = decision["id"] as? String, let outcome = decision["outcome"] as? String else { continue }
                    let own = events.filter { $0.jobID == id && kinds.contains($0.type) }
                    #expect(own.count == (outcome == "changed" ? 1 : 0), "\(context) \(said): \(id) \(outcome) appended \(own.map(\.type))")
                }
            } else {
                #expect(events.allSatisfy { kinds.contains($0.type) || $0.type == .cancelled || $0.type == .paused },
                        "\(context) \(said) appended \(events.map(\.type))")
            }
        }
    }
}
