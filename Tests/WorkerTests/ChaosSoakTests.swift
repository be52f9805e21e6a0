import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// A randomized chaos soak: network faults and worker SIGKILLs at once.
///
/// One round submits 40–80 jobs of every transfer kind (upload-file, upload-data, download-file,
/// download-memory with a size limit, fetch-url) against `gs://` (the GCS emulator; uploads over the
/// 256 KiB threshold go in resumable sessions of 256 KiB chunks), plain HTTP (nginx) and `file://`. Every
/// HTTP and GCS request goes through a `FaultProxy` whose faults are drawn per connection and request from
/// a generator seeded by (round seed, connection number, request index): resets (more often on reused
/// connections), stalls past the stall limit, trickles, bodies cut mid-way (framed or not), a wrong
/// `Content-Length`, a resumable session lying about its offset, a 206 lying about its range, a wrong
/// hash. Three `jobctl worker` processes run the jobs; one at a time is SIGKILLed at random moments and
/// started again, until every job has ended (the round fails if that takes longer than its limit).
///
/// Then the invariants: every succeeded job's destination (file, object in the emulator, nginx file,
/// bucket file, memory result) is byte for byte its source; an upload's object, whatever the job's end,
/// is the source or absent (never part of it); a download-file whose destination existed (`if_exists`
/// overwrite, skip, fail or skip-identical) left it whole — replaced only by a success, kept by a skip or
/// a failure — and one that failed left no file where there was none; a failed job carries a typed error
/// code other than `unknown`, and the jobs that cannot succeed (a memory download over its `max_size`,
/// `if_exists: fail` over a file) fail with theirs; no worker we did not kill crashed; `jobctl replay
/// --verify` agrees; after a worker's start sweep, `jobctl orphans` lists nothing and no hidden jobctl
/// file (partial download, upload session, sidecar temporary) is left in any folder; each job's events
/// are a legal lifecycle.
///
/// A failing round prints its seed, its problems, the faults each connection got and the workers' logs.
/// Rounds of the fixed seeds take 10–25 s each on the 2-core machine.
///
/// Environment (all optional):
/// - `JOBCTL_SOAK_SEEDS=7,12,40-49`: the seeds `chaosSoakLong` runs (ranges inclusive).
/// - `JOBCTL_SOAK_MINUTES=15`: `chaosSoakLong` runs consecutive seeds from `JOBCTL_SOAK_FIRST_SEED`
///   (default: from the clock, printed) until that many minutes have passed.
/// - `JOBCTL_SOAK_DRAIN_SECONDS=90`: a round's limit for every job to end (default 60).
///
/// `swift test --filter ChaosSoakTests` runs the fixed seeds of `chaosSoak` (well under a minute);
/// `JOBCTL_SOAK_MINUTES=15 swift test --filter chaosSoakLong` hunts.
@Suite("chaos soak", .onTestThreads, .serialized) struct ChaosSoakTests {
    @Test("faults and SIGKILLs at random: every job ends, and every invariant holds", arguments: [UInt64(1), 2])
    func chaosSoak(seed: UInt64) throws {
        let report = try ChaosRound(seed: seed).run()
        #expect(report.problems.isEmpty, "\(report.failureText)")
        // The round must have been chaotic, or it proves nothing.
        #expect(report.kills >= 2, "only \(report.kills) kills")
        #expect(report.faultedRequests >= 10, "only \(report.faultedRequests) requests got a fault")
    }

    @Test("the soak for as long as JOBCTL_SOAK_MINUTES or JOBCTL_SOAK_SEEDS says",
          .enabled(if: ProcessInfo.processInfo.environment["JOBCTL_SOAK_MINUTES"] != nil
                   || ProcessInfo.processInfo.environment["JOBCTL_SOAK_SEEDS"] != nil))
    func chaosSoakLong() throws {
        let environment = ProcessInfo.processInfo.environment
        var seeds = Self.seeds(environment["JOBCTL_SOAK_SEEDS"] ?? "")
        let minutes = Double(environment["JOBCTL_SOAK_MINUTES"] ?? "") ?? 0
        let deadline = Date().addingTimeInterval(minutes * 60)
        // Not stuck: each round may run past the deadline by its own length (a few minutes at most).
        StuckTests.allow(seconds: minutes * 60 + Double(seeds.count) * 300 + 900)
        var next = UInt64(environment["JOBCTL_SOAK_FIRST_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970) % 1_000_000
        var rounds = 0
        var failed: [UInt64] = []
        while !seeds.isEmpty || Date() < deadline {
            let seed: UInt64
            if seeds.isEmpty {
                seed = next
                next += 1
            } else {
                seed = seeds.removeFirst()
            }
            let started = Date()
            let report = try ChaosRound(seed: seed).run()
            rounds += 1
            // Standard error: unbuffered, so a long run shows each round as it ends.
            FileHandle.standardError.write(Data("chaos soak: seed \(seed): \(report.summary) in \(Int(Date().timeIntervalSince(started))) s\n".utf8))
            if !report.problems.isEmpty {
                failed.append(seed)
                Issue.record("\(report.failureText)")
            }
        }
        FileHandle.standardError.write(Data("chaos soak: \(rounds) rounds, failed seeds: \(failed)\n".utf8))
        #expect(rounds > 0)
    }

    static func seeds(_ text: String) -> [UInt64] {
        text.split(separator: ",").flatMap { part -> [UInt64] in
            let bounds = part.split(separator: "-").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
            if bounds.count == 2, bounds[0] <= bounds[1] { return Array(bounds[0]...bounds[1]) }
            return bounds.count == 1 ? bounds : []
        }
    }
}

// MARK: - Randomness

/// SplitMix64: small, fast and fully determined by its seed.
struct SoakRandom {
    private var generator: SeededGenerator

    init(_ seed: UInt64) { generator = SeededGenerator(seed: seed) }

    /// A generator for one key under a seed (a connection, a request), independent of every other key.
    init(_ seed: UInt64, _ keys: UInt64...) {
        var mixed = seed
        for key in keys {
            var mixer = SoakRandom(mixed ^ (key &* 0x9E37_79B9_7F4A_7C15))
            mixed = mixer.next()
        }
        generator = SeededGenerator(seed: mixed)
    }

    mutating func next() -> UInt64 { generator.next() }

    /// Uniform in 0 ..< 1.
    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }

    mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(next() % UInt64(range.upperBound - range.lowerBound + 1))
    }

    mutating func pick<T>(_ items: [T]) -> T { items[int(0...(items.count - 1))] }
}

// MARK: - Faults

/// The faults one proxy draws: per request, from a generator keyed by its connection and its index on it.
final class SoakFaults: Sendable {
    enum Upstream: UInt64, Sendable { case gcs = 1, http = 2 }

    let seed: UInt64
    let upstream: Upstream
    /// The chance a request gets a fault (a reused connection's request may get a reset besides).
    let probability: Double
    /// Seconds a stall lasts: past the workers' stall limit.
    let stallSeconds: Double

    init(seed: UInt64, upstream: Upstream, probability: Double, stallSeconds: Double) {
        self.seed = seed
        self.upstream = upstream
        self.probability = probability
        self.stallSeconds = stallSeconds
    }

    func faults(_ head: ProxyMessage, connection: Int, index: Int) -> [Fault] {
        var random = SoakRandom(seed, upstream.rawValue, UInt64(connection), UInt64(index))
        let roll = random.unit()
        // A reused keep-alive connection dropped under the request: the case libcurl resends on its own.
        if index >= 2 && roll < 0.06 {
            return [random.pick([.resetBeforeResponse, .resetInRequestBody(afterBytes: 0)])]
        }
        guard roll < probability else { return [] }
        let method = head.method
        let target = head.target
        // Where a cut, reset or stall falls: in the head, early in a small body, or anywhere in a large one.
        let cut = random.pick([random.int(0...600), random.int(300...20_000), random.int(0...300_000)])
        let stall = stallSeconds
        if method == "PUT" && target.contains("upload_id=") {
            // A chunk of a resumable session, or its status query.
            return [random.pick([
                .resetInRequestBody(afterBytes: cut), .resetBeforeResponse,
                .stallInRequestBody(afterBytes: cut, seconds: stall), .respond(.response(503, reason: "Service Unavailable")),
                .rewriteResponse(Self.lyingOffset(ahead: true)), .rewriteResponse(Self.lyingOffset(ahead: false)),
                .rewriteResponse(Self.wrongStoredHash),
            ])]
        }
        if method == "PUT" || (method == "POST" && target.contains("uploadType=multipart")) {
            var choices: [Fault] = [.resetInRequestBody(afterBytes: cut), .resetBeforeResponse,
                                    .stallInRequestBody(afterBytes: cut, seconds: stall),
                                    .respond(.response(503, reason: "Service Unavailable"))]
            if upstream == .gcs { choices.append(.rewriteResponse(Self.wrongStoredHash)) }
            return [random.pick(choices)]
        }
        let download = method == "GET" && (upstream == .http || target.contains("alt=media"))
        if download {
            var choices: [[Fault]] = [
                [.resetInResponse(afterBytes: cut)], [.closeInResponse(afterBytes: cut)],
                [.stallInResponse(afterBytes: cut, seconds: stall)], [.trickleResponse(bytes: 32 * 1024, interval: 0.01)],
                [.unframedResponse, .closeInResponse(afterBytes: cut)],
                [.wrongContentLength(by: random.int(1...4_000))],
                [.rewriteResponse(Self.lyingContentRange)],
                [.respond(.response(503, reason: "Service Unavailable"))],
            ]
            if upstream == .gcs {
                // Over plain HTTP without a served hash a short Content-Length frames a short file, which
                // nothing can tell (README, Known limitations); GCS's size and hash tell.
                choices.append([.wrongContentLength(by: -random.int(1...4_000))])
                choices.append([.rewriteResponse(Self.wrongServedHash)])
            }
            return random.pick(choices)
        }
        // Metadata reads, session starts, HEADs, PATCHes, DELETEs.
        return [random.pick([.resetBeforeResponse, .closeInResponse(afterBytes: random.int(0...400)),
                             .stallInResponse(afterBytes: 0, seconds: stall),
                             .respond(.response(503, reason: "Service Unavailable"))])]
    }

    /// A session's 308 naming an offset a chunk ahead of what it holds, or one behind (none at all below a chunk).
    static func lyingOffset(ahead: Bool) -> @Sendable (ProxyMessage, inout ProxyMessage) -> Void {
        { _, response in
            guard response.status == 308 else { return }
            let last = response.header("Range").flatMap { Int64($0.split(separator: "-").last ?? "") } ?? -1
            let lie = ahead ? last + 262_144 : last - 262_144
            response.setHeader("Range", lie >= 0 ? "bytes=0-\(lie)" : nil)
        }
    }

    /// An upload's final answer naming hashes the stored object does not have.
    static let wrongStoredHash: @Sendable (ProxyMessage, inout ProxyMessage) -> Void = { _, response in
        guard (200..<300).contains(response.status), var text = String(data: response.body, encoding: .utf8) else { return }
        for (field, fake) in [("crc32c", "AAAAAA=="), ("md5Hash", "AAAAAAAAAAAAAAAAAAAAAA==")] {
            if let range = text.range(of: "\"\(field)\"\\s*:\\s*\"[^\"]*\"", options: .regularExpression) {
                text.replaceSubrange(range, with: "\"\(field)\": \"\(fake)\"")
            }
        }
        response.body = Data(text.utf8)
    }

    /// A download answer whose `x-goog-hash` names other bytes.
    static let wrongServedHash: @Sendable (ProxyMessage, inout ProxyMessage) -> Void = { _, response in
        guard (200..<300).contains(response.status) else { return }
        response.setHeader("x-goog-hash", "crc32c=AAAAAA==,md5=AAAAAAAAAAAAAAAAAAAAAA==")
    }

    /// A 206 whose `Content-Range` starts a byte away from the range asked for (the body unchanged).
    static let lyingContentRange: @Sendable (ProxyMessage, inout ProxyMessage) -> Void = { _, response in
        guard response.status == 206, let range = response.header("Content-Range"), range.hasPrefix("bytes ") else { return }
        let parts = range.dropFirst(6).split(separator: "/")
        let bounds = parts.first?.split(separator: "-").compactMap { Int64($0) } ?? []
        guard bounds.count == 2, parts.count == 2 else { return }
        let shift: Int64 = bounds[0] > 0 ? -1 : 1
        response.setHeader("Content-Range", "bytes \(bounds[0] + shift)-\(bounds[1] + shift)/\(parts[1])")
    }
}

// MARK: - A round

/// What one job is and what the round expects of it.
struct SoakJob {
    enum Backend: String { case gcs, http, file }
    enum Expectation { case mayFail, mustFail(StorageErrorCode) }

    let name: String
    let kind: JobKind
    let backend: Backend
    /// The bytes the job's destination (or result) must hold when it succeeds.
    let bytes: Data
    let manifestLine: String
    let expectation: Expectation
    /// Where the destination's bytes are read back from (a local path, or an object name in the emulator).
    let destination: String?
    /// download-file: what its destination held before (nil: nothing), and its `if_exists`.
    var previous: Data? = nil
    var ifExists = "overwrite"
    var id = ""
}

/// One seeded round: servers, proxies, jobs, workers, kills, then the invariants.
struct ChaosRound {
    struct Report {
        var seed: UInt64
        var problems: [String] = []
        var kills = 0
        var faultedRequests = 0
        var requests = 0
        var requestKinds: [String: Int] = [:]
        /// The error codes failed jobs ended with.
        var failureCodes: [String: Int] = [:]
        var states: [JobState: Int] = [:]
        var faultLines: [String] = []
        /// How often each kind of fault was applied (its label without numbers), to see what a round covered.
        var faultKinds: [String: Int] = [:]
        var workerLogs: [String] = []

        var summary: String {
            let counts = states.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) \($0.key.rawValue)" }.joined(separator: ", ")
            let kinds = faultKinds.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
            let sent = requestKinds.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            let codes = failureCodes.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
            return "\(counts) (failures: \(codes)); \(kills) kills; \(faultedRequests) of \(requests) requests faulted (\(kinds)); "
                + "requests: \(sent); \(problems.count) problems"
        }

        var failureText: String {
            """
            chaos soak seed \(seed) (rerun: JOBCTL_SOAK_SEEDS=\(seed) swift test --filter chaosSoakLong): \(summary)
            PROBLEMS:
            \(problems.prefix(40).joined(separator: "\n"))
            FAULTS (connection #request method target: faults):
            \(faultLines.suffix(250).joined(separator: "\n"))
            WORKER LOGS (tails):
            \(workerLogs.joined(separator: "\n----\n"))
            """
        }
    }

    let seed: UInt64
    static let chunk = 256 * 1024

    func run() throws -> Report {
        var report = Report(seed: seed)
        var random = SoakRandom(seed)
        let environmentSeconds = Double(ProcessInfo.processInfo.environment["JOBCTL_SOAK_DRAIN_SECONDS"] ?? "") ?? 60

        let emulator = try EmulatorServer.start(bucket: "soak")
        defer { emulator.stop() }
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        let gcsFaults = SoakFaults(seed: seed, upstream: .gcs, probability: 0.22, stallSeconds: 3)
        let httpFaults = SoakFaults(seed: seed, upstream: .http, probability: 0.3, stallSeconds: 3)
        let gcsProxy = try FaultProxy(upstreamPort: emulator.port, chooser: { gcsFaults.faults($0, connection: $1, index: $2) },
                                      recordsBodies: false)
        defer { gcsProxy.stop() }
        let httpProxy = try FaultProxy(upstreamPort: nginx.port, chooser: { httpFaults.faults($0, connection: $1, index: $2) },
                                       recordsBodies: false)
        defer { httpProxy.stop() }
        let directory = try TemporaryDirectory("soak-\(seed)")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let buckets = directory.file("buckets")
        for folder in ["src", "out", "buckets/local/seed", "buckets/local/up", "mem"] {
            try FileManager.default.createDirectory(atPath: directory.file(folder), withIntermediateDirectories: true)
        }

        // MARK: Jobs
        var jobs: [SoakJob] = []
        let count = random.int(40...80)
        for number in 0..<count {
            let name = String(format: "j%02d", number)
            let size = random.unit() < 0.4 ? random.int(Self.chunk + 1...Self.chunk * 4 + 77) : random.int(0...40_000)
            let bytes = patternData(size, seed: seed &* 1_000 &+ UInt64(number))
            let kind = random.pick([JobKind.uploadFile, .uploadFile, .uploadData, .downloadFile, .downloadFile, .downloadMemory, .fetchURL])
            var backend = random.pick([SoakJob.Backend.gcs, .gcs, .http, .http, .file])
            // fetch-url of a plain http URL is refused at submit (it already is a download URL).
            if kind == .fetchURL && backend == .http { backend = .gcs }
            jobs.append(try makeJob(name: name, kind: kind, backend: backend, bytes: bytes, random: &random, directory: directory,
                                    emulator: emulator, gcsProxy: gcsProxy, nginx: nginx, httpProxy: httpProxy))
        }
        let manifest = "defaults: {max_attempts: 6}\njobs:\n" + jobs.map(\.manifestLine).joined(separator: "\n") + "\n"
        let environment = ["STORAGE_EMULATOR_HOST": gcsProxy.baseURL, "JOBCTL_BUCKETS": buckets,
                           "JOBCTL_CHUNK_SIZE": "\(Self.chunk)", "JOBCTL_RESUMABLE_THRESHOLD": "\(Self.chunk)",
                           "JOBCTL_STALL_TIMEOUT": "2s"]
        let ids = try submit(manifest, database: database, directory: directory)
        guard ids.count == jobs.count else {
            report.problems.append("submit printed \(ids.count) ids for \(jobs.count) jobs")
            return report
        }
        for index in jobs.indices { jobs[index].id = ids[index] }

        // MARK: Workers and kills
        let workerArguments = ["--lease", "2", "--concurrency", "3", "--stall-timeout", "2s"]
        let startWorker = { try JobctlProcess.worker(database: database, workerArguments, environment: environment, logDirectory: directory.path) }
        var workers = try (0..<3).map { _ in try startWorker() }
        var everyWorker = workers
        let store = try EventStore(path: database, readOnly: true)
        let killBudget = random.int(3...6)
        let drainDeadline = Date().addingTimeInterval(environmentSeconds)
        var nextKill = Date().addingTimeInterval(0.3 + random.unit() * 1.2)
        var drained = false
        while Date() < drainDeadline {
            if try store.jobs().allSatisfy({ $0.state.isFinal }) {
                drained = true
                break
            }
            if report.kills < killBudget && Date() >= nextKill {
                let victim = random.int(0...(workers.count - 1))
                workers[victim].signal(SIGKILL)
                _ = workers[victim].wait(seconds: 10)
                report.kills += 1
                usleep(useconds_t(random.int(0...400_000)))
                workers[victim] = try startWorker()
                everyWorker.append(workers[victim])
                // The second kill soon after the first: a round whose jobs drained before it proved little
                // (a full run once ended seed 1 with one kill).
                nextKill = Date().addingTimeInterval(report.kills < 2 ? 0.1 + random.unit() * 0.4 : 0.2 + random.unit() * 1.3)
            }
            usleep(50_000)
        }
        for worker in workers { worker.signal(SIGTERM) }
        for worker in workers {
            let status = worker.wait(seconds: 20)
            if status != 0 { report.problems.append("a worker we did not kill ended with \(status.map(String.init) ?? "no exit in 20 s") after SIGTERM") }
        }
        for worker in everyWorker {
            for marker in ["Fatal error", "fatalError", "Assertion failed", "Precondition failed", "panic"] where worker.log.contains(marker) {
                report.problems.append("a worker's log says \(marker)")
            }
        }
        report.workerLogs = everyWorker.suffix(4).map { String($0.log.suffix(3_000)) }

        let finalJobs = try store.jobs()
        for job in finalJobs {
            report.states[job.state, default: 0] += 1
            if job.state == .failed { report.failureCodes[job.error?.code.name ?? "none", default: 0] += 1 }
        }
        if !drained {
            let open = finalJobs.filter { !$0.state.isFinal }.map { "\($0.id) \($0.kind.rawValue) \($0.state.rawValue) attempts \($0.attempts)" }
            report.problems.append("not every job ended within \(Int(environmentSeconds)) s: \(open.joined(separator: "; "))")
        }

        // MARK: Sweep, then the invariants
        let sweeper = try JobctlProcess.worker(database: database, ["--drain"], environment: environment, logDirectory: directory.path)
        let swept = sweeper.wait(seconds: 30)
        if swept != 0 && drained { report.problems.append("the sweeping drain exited \(swept.map(String.init) ?? "no exit in 30 s"): \(sweeper.log.suffix(1_000))") }
        let records = Dictionary(uniqueKeysWithValues: finalJobs.map { ($0.id, $0) })
        for job in jobs {
            guard let record = records[job.id] else {
                report.problems.append("\(job.name): job \(job.id) missing")
                continue
            }
            report.problems += try check(job, record, store: store, database: database, directory: directory, emulator: emulator)
        }
        let verify = try jobctl(["replay", "--verify"], database: database)
        if verify.status != 0 { report.problems.append("replay --verify exited \(verify.status): \(verify.stdout.suffix(2_000)) \(verify.stderr)") }
        let orphans = try jobctl(["orphans", "--json"], database: database)
        if orphans.status != 0 || orphans.stdout.filter({ !$0.isWhitespace }) != "[]" {
            report.problems.append("after the sweep, jobctl orphans says (\(orphans.status)): \(orphans.stdout.prefix(2_000)) \(orphans.stderr)")
        }
        for folder in [directory.file("out"), buckets, nginx.root] {
            for leftover in hiddenLeftovers(under: folder) {
                report.problems.append("left behind after the sweep: \(leftover)")
            }
        }

        // MARK: The schedule, for a failure's report
        for (label, proxy) in [("gcs", gcsProxy), ("http", httpProxy)] {
            let exchanges = proxy.exchanges
            report.requests += exchanges.count
            for exchange in exchanges { report.requestKinds["\(label) \(exchange.request.method)", default: 0] += 1 }
            for exchange in exchanges where !exchange.faults.isEmpty {
                report.faultedRequests += 1
                for fault in exchange.faults {
                    let kind = fault.split(separator: " ").filter { $0.first?.isNumber != true && $0 != "by" && $0 != "for" }.joined(separator: " ")
                    report.faultKinds["\(label) \(exchange.request.method) \(kind)", default: 0] += 1
                }
                report.faultLines.append("\(label) c\(exchange.connection) #\(exchange.indexOnConnection) \(exchange.request.method) "
                                         + "\(exchange.request.target.prefix(90)): \(exchange.faults.joined(separator: ", "))")
            }
        }
        return report
    }

    // MARK: Making jobs

    private func makeJob(name: String, kind: JobKind, backend: SoakJob.Backend, bytes: Data, random: inout SoakRandom,
                         directory: TemporaryDirectory, emulator: EmulatorServer, gcsProxy: FaultProxy,
                         nginx: NginxServer, httpProxy: FaultProxy) throws -> SoakJob {
        let object = "soak/\(name).bin"
        func remote(_ folder: String) -> String {
            switch backend {
            case .gcs: "gs://\(emulator.bucket)/\(folder)/\(name).bin"
            case .http: "\(httpProxy.baseURL)/\(folder)/\(name).bin"
            case .file: "file://local/\(folder)/\(name).bin"
            }
        }
        func landing(_ folder: String) -> String {
            switch backend {
            case .gcs: "gs:\(folder)/\(name).bin"
            case .http: "\(nginx.root)/\(folder)/\(name).bin"
            case .file: directory.file("buckets/local/\(folder)/\(name).bin")
            }
        }
        /// Puts the source object in place, past the proxy.
        func seedObject() throws {
            switch backend {
            case .gcs:
                let path = directory.file("src/\(name).seed")
                try bytes.write(to: URL(fileURLWithPath: path))
                let put = try runProcess("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "--data-binary", "@\(path)",
                                                          "-H", "Content-Type: application/octet-stream",
                                                          "\(emulator.baseURL)/upload/storage/v1/b/\(emulator.bucket)/o?uploadType=media&name=seed%2F\(name).bin"])
                guard put.stdout == "200" else { throw WorkerTestError("seeding \(object) in the emulator: \(put.stdout) \(put.stderr)") }
            case .http:
                try FileManager.default.createDirectory(atPath: "\(nginx.root)/seed", withIntermediateDirectories: true)
                try bytes.write(to: URL(fileURLWithPath: "\(nginx.root)/seed/\(name).bin"))
            case .file:
                try bytes.write(to: URL(fileURLWithPath: directory.file("buckets/local/seed/\(name).bin")))
            }
        }
        switch kind {
        case .uploadFile:
            let source = directory.file("src/\(name).bin")
            try bytes.write(to: URL(fileURLWithPath: source))
            return SoakJob(name: name, kind: kind, backend: backend, bytes: bytes,
                           manifestLine: "  - {kind: upload-file, source: \"\(source)\", destination: \"\(remote("up"))\"}",
                           expectation: .mayFail, destination: landing("up"))
        case .uploadData:
            let small = bytes.prefix(random.int(0...3_000))
            return SoakJob(name: name, kind: kind, backend: backend, bytes: Data(small),
                           manifestLine: "  - {kind: upload-data, data_base64: \"\(small.base64EncodedString())\", destination: \"\(remote("up"))\"}",
                           expectation: .mayFail, destination: landing("up"))
        case .downloadFile:
            try seedObject()
            let destination = directory.file("out/\(name).bin")
            // Some destinations exist already, with other bytes: each policy must keep them whole or replace them whole.
            var previous: Data?
            var ifExists = "overwrite"
            if random.unit() < 0.35 {
                previous = patternData(random.int(1...50_000), seed: seed &+ 77 &+ UInt64(name.count))
                try previous?.write(to: URL(fileURLWithPath: destination))
                ifExists = random.pick(["overwrite", "skip", "fail", "skip-identical"])
            }
            var job = SoakJob(name: name, kind: kind, backend: backend, bytes: bytes,
                              manifestLine: "  - {kind: download-file, source: \"\(remote("seed"))\", destination: \"\(destination)\", if_exists: \(ifExists)}",
                              expectation: previous != nil && ifExists == "fail" ? .mustFail(.invalidArgument) : .mayFail, destination: destination)
            job.previous = previous
            job.ifExists = ifExists
            return job
        case .downloadMemory:
            try seedObject()
            let tooSmall = !bytes.isEmpty && random.unit() < 0.3
            let limit = tooSmall ? random.int(1...(bytes.count - 1 > 0 ? bytes.count - 1 : 1)) : bytes.count + random.int(1...1000)
            return SoakJob(name: name, kind: kind, backend: backend, bytes: bytes,
                           manifestLine: "  - {kind: download-memory, source: \"\(remote("seed"))\", max_size: \(limit)}",
                           expectation: tooSmall ? .mustFail(.downloadSizeExceeded) : .mayFail, destination: nil)
        case .fetchURL:
            try seedObject()
            return SoakJob(name: name, kind: kind, backend: backend, bytes: bytes,
                           manifestLine: "  - {kind: fetch-url, source: \"\(remote("seed"))\"}",
                           expectation: .mayFail, destination: nil)
        default:
            throw WorkerTestError("the soak makes no \(kind.rawValue) jobs")
        }
    }

    // MARK: Invariants

    private func check(_ job: SoakJob, _ record: JobRecord, store: EventStore, database: String,
                       directory: TemporaryDirectory, emulator: EmulatorServer) throws -> [String] {
        var problems: [String] = []
        let label = "\(job.name) \(job.kind.rawValue) \(job.backend.rawValue) \(job.bytes.count) B (\(job.id))"
        let errorText = record.error.map { "\($0.code.name): \($0.message) [\($0.cause ?? "")]" } ?? "no error"

        // Lifecycle.
        problems += lifecycleProblems(try store.events(jobID: job.id), maxAttempts: record.maxAttempts).map { "\(label): \($0)" }

        // Outcome and error.
        switch record.state {
        case .succeeded:
            if case .mustFail(let code) = job.expectation { problems.append("\(label): succeeded where it must fail with \(code.name)") }
        case .failed, .cancelled:
            guard let error = record.error else {
                problems.append("\(label): \(record.state.rawValue) without an error")
                break
            }
            if error.code == .unknown { problems.append("\(label): failed with code unknown: \(errorText)") }
            if case .mustFail(let code) = job.expectation, error.code != code, error.code != .retryLimitExceeded {
                problems.append("\(label): failed with \(error.code.name) where \(code.name) was due: \(errorText)")
            }
        default:
            problems.append("\(label): ended \(record.state.rawValue)")
        }

        // Destinations.
        let stored = try destinationBytes(job, emulator: emulator)
        switch job.kind {
        case .uploadFile, .uploadData:
            if record.state == .succeeded && stored == nil { problems.append("\(label): succeeded but its object is missing") }
            if let stored, stored != job.bytes {
                problems.append("\(label): \(record.state.rawValue), its object holds \(stored.count) B that are not the source's (\(errorText))")
            }
        case .downloadFile:
            let label = "\(label) if_exists \(job.ifExists)\(job.previous.map { " over \($0.count) B" } ?? "")"
            let kept = job.previous != nil && job.ifExists == "skip"
            if record.state == .succeeded {
                let due = kept ? job.previous : job.bytes
                if stored != due {
                    problems.append("\(label): succeeded, the file holds \(stored.map { "\($0.count) B" } ?? "nothing") not the \(kept ? "previous file's" : "object's") bytes")
                }
                if (record.result?.skipped ?? false) != kept { problems.append("\(label): succeeded with skipped \(record.result?.skipped ?? false)") }
            } else if stored != job.previous {
                problems.append("\(label): \(record.state.rawValue) (\(errorText)), its destination holds \(stored.map { "\($0.count) B" } ?? "nothing"), "
                                + "not what it held before (\(job.previous.map { "\($0.count) B" } ?? "nothing"))")
            }
        case .downloadMemory where record.state == .succeeded:
            let path = directory.file("mem/\(job.name)")
            let result = try jobctl(["result", job.id, "-o", path], database: database)
            let bytes = try? Data(contentsOf: URL(fileURLWithPath: path))
            if result.status != 0 || bytes != job.bytes {
                problems.append("\(label): succeeded, its result (\(result.status) \(result.stderr)) holds \(bytes?.count ?? -1) B, not the object's")
            }
        case .fetchURL where record.state == .succeeded:
            guard let url = record.result?.url else {
                problems.append("\(label): succeeded without a URL")
                break
            }
            guard let token = URLComponents(string: url)?.queryItems?.first(where: { $0.name == "token" })?.value, !token.isEmpty else {
                problems.append("\(label): its URL has no token: \(url)")
                break
            }
            let tokens = try storedTokens(job, emulator: emulator, directory: directory)
            if !tokens.contains(token) { problems.append("\(label): its URL's token \(token) is not the object's (\(tokens))") }
        default:
            break
        }
        return problems
    }

    /// The destination's bytes: an uploaded object (read past the proxy) or a downloaded file; nil when absent.
    private func destinationBytes(_ job: SoakJob, emulator: EmulatorServer) throws -> Data? {
        guard let destination = job.destination else { return nil }
        guard destination.hasPrefix("gs:") else { return try? Data(contentsOf: URL(fileURLWithPath: destination)) }
        let name = destination.dropFirst(3).replacingOccurrences(of: "/", with: "%2F")
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("soak-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let get = try runProcess("/usr/bin/curl", ["-sS", "-o", path, "-w", "%{http_code}",
                                                  "\(emulator.baseURL)/storage/v1/b/\(emulator.bucket)/o/\(name)?alt=media"])
        if get.stdout == "404" { return nil }
        guard get.stdout == "200" else { throw WorkerTestError("reading \(destination) from the emulator: \(get.stdout) \(get.stderr)") }
        return try Data(contentsOf: URL(fileURLWithPath: path))
    }

    /// The download tokens the source object holds in its metadata.
    private func storedTokens(_ job: SoakJob, emulator: EmulatorServer, directory: TemporaryDirectory) throws -> [String] {
        let text: String
        switch job.backend {
        case .gcs:
            let get = try runProcess("/usr/bin/curl", ["-sS", "\(emulator.baseURL)/storage/v1/b/\(emulator.bucket)/o/seed%2F\(job.name).bin"])
            text = get.stdout
        case .file:
            text = (try? String(contentsOfFile: directory.file("buckets/local/seed/.\(job.name).bin.jobctl-meta.json"), encoding: .utf8)) ?? ""
        case .http:
            return []
        }
        guard let regex = try? NSRegularExpression(pattern: "\"firebaseStorageDownloadTokens\"\\s*:\\s*\"([^\"]*)\"|\"download_?[tT]okens\"\\s*:\\s*\"([^\"]*)\"") else { return [] }
        var tokens: [String] = []
        for match in regex.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            for group in 1..<match.numberOfRanges {
                guard let range = Range(match.range(at: group), in: text) else { continue }
                for token in text[range].split(separator: ",") { tokens.append(String(token)) }
            }
        }
        return tokens
    }

    /// Hidden jobctl files anywhere below `folder`: partials, upload sessions, metadata temporaries.
    private func hiddenLeftovers(under folder: String) -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: folder) else { return [] }
        var found: [String] = []
        while let path = walker.nextObject() as? String {
            let name = (path as NSString).lastPathComponent
            if name.contains(".jobctl-") && !name.hasSuffix(".jobctl-meta.json") { found.append("\(folder)/\(path)") }
        }
        return found
    }

    /// What is wrong with one job's event sequence, judged by the rules of README's *Jobs, states and
    /// events* without the product's own lifecycle code.
    func lifecycleProblems(_ events: [JobEvent], maxAttempts: Int) -> [String] {
        enum Phase: String { case none, queued, running, paused, succeeded, failed, cancelled }
        var phase = Phase.none
        var problems: [String] = []
        var startedThisRun = false
        var lastToken: Int64 = .min
        var lastVersion = 0
        var attempts = 0
        for event in events {
            let type = event.type
            func illegal() { problems.append("event \(type.rawValue) (v\(event.version)) in phase \(phase.rawValue)") }
            if event.version <= lastVersion { problems.append("event \(type.rawValue) has version \(event.version) after \(lastVersion)") }
            lastVersion = event.version
            switch type {
            case .submitted:
                if phase == .none { phase = .queued } else { illegal() }
            case .claimed:
                guard phase == .queued else { illegal(); break }
                phase = .running
                startedThisRun = false
                attempts += 1
                if let token = event.leaseToken {
                    if token <= lastToken { problems.append("lease token \(token) after \(lastToken)") }
                    lastToken = token
                }
            case .started:
                if phase == .running && !startedThisRun { startedThisRun = true } else { illegal() }
            case .progress:
                if phase != .running || !startedThisRun { illegal() }
            case .pauseRequested, .cancelRequested, .resumeRequested:
                if phase != .running && phase != .paused { illegal() }
            case .attemptFailed, .leaseExpired:
                if phase == .running { phase = .queued } else { illegal() }
            case .released:
                if phase == .running {
                    phase = .queued
                    attempts -= 1
                } else { illegal() }
            case .paused:
                if phase == .running || phase == .queued { phase = .paused } else { illegal() }
            case .succeeded:
                if phase == .running && startedThisRun { phase = .succeeded } else { illegal() }
            case .failed:
                if phase == .running || phase == .queued { phase = .failed } else { illegal() }
            case .cancelled:
                if [.running, .queued, .paused].contains(phase) { phase = .cancelled } else { illegal() }
            case .retried:
                if phase == .failed || phase == .cancelled { phase = .queued } else { illegal() }
            case .archived:
                illegal()
            }
        }
        if ![.succeeded, .failed, .cancelled].contains(phase) { problems.append("its events end in phase \(phase.rawValue)") }
        if attempts > maxAttempts { problems.append("\(attempts) attempts counted, max_attempts \(maxAttempts)") }
        return problems
    }
}
