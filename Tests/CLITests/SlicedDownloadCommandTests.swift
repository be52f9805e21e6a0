import Foundation
import Testing
import TestSupport

/// Sliced downloads through the real worker: a worker SIGKILLed mid-way is replaced by another, which
/// fetches only what each slice still lacked; and the options' ranges.
@Suite(.onTestThreads) struct SlicedDownloadCommandTests {
    /// The media GET ranges the proxy saw, from exchange `from` on.
    private static func mediaRanges(_ proxy: FaultProxy, from: Int = 0) -> [String] {
        proxy.exchanges.dropFirst(from).filter { $0.request.method == "GET" && $0.request.target.contains("alt=media") }
            .compactMap { $0.request.header("Range") }
    }

    /// A 16 MiB object uploaded to the emulator through a fault proxy, in a workspace of its own: what a
    /// worker then downloads in slices, the proxy holding or cutting them.
    struct UploadedObject {
        static let size = 16 << 20
        let server: EmulatorServer, proxy: FaultProxy, workspace: CLIWorkspace
        let bytes = Data((0..<UploadedObject.size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 16) })
        let environment: [String: String]

        init(engine: StoreEngine, _ name: String) throws {
            server = try EmulatorServer.start()
            do {
                proxy = try FaultProxy(upstreamPort: server.port)
            } catch {
                server.stop()
                throw error
            }
            do {
                workspace = try CLIWorkspace(name, engine: engine)
            } catch {
                proxy.stop()
                server.stop()
                throw error
            }
            environment = ["STORAGE_EMULATOR_HOST": proxy.baseURL, "HOME": workspace.directory.path]
            try bytes.write(to: URL(fileURLWithPath: workspace.directory.file("big.bin")))
            #expect(try workspace.jobctl(["migrate"]).status == 0)
            let upload = try workspace.write("up.yaml", "- {kind: upload-file, source: big.bin, destination: gs://\(server.bucket)/big.bin}\n")
            #expect(try workspace.jobctl(["submit", upload], environment: environment).status == 0)
            let uploaded = try workspace.jobctl(["worker", "--drain"], environment: environment)
            #expect(uploaded.status == 0, "\(uploaded.stderr)")
        }

        /// Holds a download of it in four slices mid-way, without timing: the first two come whole (8 MiB:
        /// one checkpoint), the third answers nothing and the fourth stops after 1 MiB.
        func holdMidWay() {
            let quarter = Self.size / 4
            proxy.add(FaultRule(RequestMatch(method: "GET", headerContains: ProxyHeader("Range", "bytes=\(2 * quarter)-")),
                                .stallInResponse(afterBytes: 0, seconds: 300)))
            proxy.add(FaultRule(RequestMatch(method: "GET", headerContains: ProxyHeader("Range", "bytes=\(3 * quarter)-")),
                                .stallInResponse(afterBytes: 1 << 20, seconds: 300)))
        }

        func stop() {
            workspace.directory.remove()
            proxy.stop()
            server.stop()
        }
    }

    /// How the worker that takes over a download killed mid-way in four slices is set up.
    enum TakingOver: String, CaseIterable, Sendable {
        /// As the first: `--slices 4` (the default).
        case sameSlices
        /// `--slices 2`: it fetched the object again from byte 0.
        case twoSlices
        /// `--sliced-threshold off`: it fetched the object again from byte 0, in one stream.
        case slicingOff

        var flags: [String] {
            switch self {
            case .sameSlices: ["--sliced-threshold", "1MiB"]
            case .twoSlices: ["--sliced-threshold", "1MiB", "--slices", "2"]
            case .slicingOff: ["--sliced-threshold", "off"]
            }
        }
    }

    /// Whatever the second worker's `--slices` or `--sliced-threshold`, it goes on in the slices the log
    /// holds, asking only for what each still lacks: its log says it resumed from the bytes kept, and its
    /// success counts only what it moved.
    @Test("a worker SIGKILLed mid-way: the next one fetches only the rest of each unfinished slice, whatever its slice settings",
          arguments: StoreEngine.allCases, TakingOver.allCases)
    func killedMidWayResumesSliceBySlice(engine: StoreEngine, takingOver: TakingOver) throws {
        let object = try UploadedObject(engine: engine, "cli-sliced")
        defer { object.stop() }
        let (server, proxy, workspace, bytes, environment) = (object.server, object.proxy, object.workspace, object.bytes, object.environment)
        let size = UploadedObject.size

        // The first worker is held mid-way without timing: the first two slices come whole (8 MiB: one
        // checkpoint), the third answers nothing and the fourth stops after 1 MiB, until the worker dies.
        object.holdMidWay()
        let id = try #require(try workspace.submit("- {kind: download-file, source: gs://\(server.bucket)/big.bin, destination: out/big.bin}\n").first)
        let first = Process()
        first.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        first.arguments = ["--db", workspace.database, "worker", "--lease", "1s", "--sliced-threshold", "1MiB", "--slices", "4"]
        first.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        first.currentDirectoryURL = URL(fileURLWithPath: workspace.directory.path)
        first.standardOutput = FileHandle.nullDevice
        let firstLog = workspace.directory.file("first-worker.log")
        #expect(FileManager.default.createFile(atPath: firstLog, contents: nil))
        first.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: firstLog))
        try first.run()
        func resumePoint() throws -> [String: Any]? {
            let shown = try workspace.jobctl(["show", id, "--json"])
            guard shown.status == 0, let job = try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any] else { return nil }
            return job["resume_point"] as? [String: Any]
        }
        // Wait for the first checkpoint in the log, then kill the worker without warning.
        let checkpointed = try eventuallyTrue(seconds: 60) { try resumePoint()?["type"] as? String == "sliced_download" }
        first.signalTree(SIGKILL)
        first.waitForExit()
        #expect(checkpointed, "the worker logged no sliced checkpoint: \((try? String(contentsOfFile: firstLog, encoding: .utf8)) ?? "")")
        let firstRound = proxy.exchanges.count
        #expect(Self.mediaRanges(proxy).count == 4, "\(Self.mediaRanges(proxy))")

        let point = try #require(try resumePoint())
        let slices = try #require(point["slices"] as? [[String: Any]])
        let recorded = slices.compactMap { slice -> (start: Int, length: Int, confirmed: Int)? in
            guard let start = slice["start"] as? Int, let length = slice["length"] as? Int, let confirmed = slice["confirmed"] as? Int else { return nil }
            return (start, length, confirmed)
        }
        #expect(recorded.count == 4 && recorded.map(\.length).reduce(0, +) == size, "\(slices)")
        let done = recorded.map(\.confirmed).reduce(0, +)
        #expect(done >= 8 << 20 && done < size, "\(slices)")

        // A second worker takes the job over once the lease ran out and finishes it.
        let second = try workspace.jobctl(["worker", "--drain", "--log-format", "json"] + takingOver.flags, environment: environment)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: workspace.directory.file("out/big.bin"))) == bytes)
        let result = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
        #expect(result["state"] as? String == "succeeded", "\(result)")
        let resumed = Self.mediaRanges(proxy, from: firstRound)
        let expected = recorded.filter { $0.confirmed < $0.length }.map { "bytes=\($0.start + $0.confirmed)-\($0.start + $0.length - 1)" }
        #expect(Set(resumed) == Set(expected) && resumed.count == expected.count, "\(resumed) vs \(expected)")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("out/.big.bin.\(id).jobctl-partial")))
        // The worker's log and the event log: resumed from the bytes kept, none of them dropped.
        let log = second.stderr.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        func fields(_ event: String) -> [String: Any]? {
            log.first { $0["event"] as? String == event && $0["job"] as? String == id }?["fields"] as? [String: Any]
        }
        #expect(fields("resumed")?["from_bytes"] as? Int == done && fields("restarted") == nil, "\(second.stderr)")
        #expect(fields("succeeded")?["moved_bytes"] as? Int == size - done, "\(second.stderr)")
        let events = try #require(try workspace.json(["history", id, "--json"]) as? [[String: Any]])
        let kept = events.compactMap { ($0["data"] as? [String: Any])?["resume_point"] as? [String: Any] }.compactMap { $0["bytes_written"] as? Int }
        #expect(!kept.contains(0), "a checkpoint dropped the kept bytes: \(kept)")
    }

    /// A sliced download killed mid-way whose object is then replaced: the next attempt plans on the new
    /// generation and starts at byte 0. The slices it dropped stayed in the log: the attempt failing
    /// after the drop (`cut`) showed "resume: 9 MiB written in 4 slices" in `history`, the next one was
    /// logged `resumed from_bytes=…` and started "resume: 9 MiB written …", and either success read
    /// `moved_bytes` short by those bytes. Now the drop is a checkpoint of none: the failure shows no byte
    /// kept, the next attempt is `started` from byte 0 (`history` says so, not "resume: none"), and the
    /// success counts every byte it fetched.
    @Test("slices dropped for a new generation leave the log: history, the worker's lines, its moved bytes",
          arguments: [(StoreEngine.sqlite, true), (.postgres, true), (.sqlite, false)])
    func droppedSlicesLeaveTheLog(engine: StoreEngine, cut: Bool) throws {
        let object = try UploadedObject(engine: engine, "cli-sliced-drop")
        defer { object.stop() }
        let (server, proxy, workspace, bytes, environment) = (object.server, object.proxy, object.workspace, object.bytes, object.environment)
        let size = UploadedObject.size

        // Held mid-way as in `killedMidWayResumesSliceBySlice`: two slices whole (one checkpoint), two stalled.
        object.holdMidWay()
        let id = try #require(try workspace.submit("- {kind: download-file, source: gs://\(server.bucket)/big.bin, destination: out/big.bin}\n").first)
        let first = try LoggedWorker(workspace, ["--lease", "1s", "--sliced-threshold", "1MiB", "--slices", "4"], environment: environment,
                                     logName: "first.log")
        let checkpointed = eventuallyTrue(seconds: 60) {
            let job = try? workspace.json(["show", id, "--json"]) as? [String: Any]
            return (job?["resume_point"] as? [String: Any])?["type"] as? String == "sliced_download"
        }
        first.kill()
        try #require(checkpointed, "no sliced checkpoint: \(first.log())")

        // The object replaced behind the job's back: a new generation.
        let replacement = Data(bytes.reversed())
        try replacement.write(to: URL(fileURLWithPath: workspace.directory.file("v2.bin")))
        let stored = try runProcess("/usr/bin/curl", ["-sf", "-X", "POST", "--data-binary", "@" + workspace.directory.file("v2.bin"),
                                                      "http://127.0.0.1:\(server.port)/upload/storage/v1/b/\(server.bucket)/o?uploadType=media&name=big.bin"])
        try #require(stored.status == 0, "\(stored.stderr)")
        // The attempt that drops the slices has every slice cut early (before any checkpoint of the new
        // generation): it fails, retryable, and the next one runs.
        if cut {
            proxy.add(FaultRule(RequestMatch(method: "GET", pathContains: "alt=media"), .resetInResponse(afterBytes: 200_000), times: 4))
        }
        let second = try workspace.jobctl(["worker", "--drain", "--sliced-threshold", "1MiB", "--log-format", "json"], environment: environment)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: workspace.directory.file("out/big.bin"))) == replacement)

        let history = try workspace.jobctl(["history", id, "--all"])
        #expect(history.status == 0, "\(history.stderr)")
        let lines = history.stdout.split(separator: "\n").map(String.init)
        let events = try #require(try workspace.json(["history", id, "--json"]) as? [[String: Any]])
        func point(_ event: [String: Any]) -> [String: Any]? { (event["data"] as? [String: Any])?["resume_point"] as? [String: Any] }
        let started = events.filter { $0["type"] as? String == "started" }
        let log = second.stderr.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let succeeded = try #require(log.first { $0["event"] as? String == "succeeded" }, "\(second.stderr)")
        let fields = succeeded["fields"] as? [String: Any] ?? [:]
        #expect(fields["bytes"] as? Int == size && fields["moved_bytes"] == nil, "the success counted bytes it fetched as kept: \(succeeded)")
        if cut {
            let failed = try #require(events.first { $0["type"] as? String == "attempt_failed" }, "\(history.stdout)")
            #expect(point(failed)?["bytes_written"] as? Int == 0, "the failure kept the dropped slices: \(failed)")
            let failedLine = try #require(lines.first { $0.contains("attempt_failed") })
            #expect(failedLine.contains("resume: none (no byte kept") && !failedLine.contains("slices"), "\(failedLine)")
            // The attempt after it starts from nothing: a start, not a resume of nothing.
            #expect(started.count == 3 && point(started[2])?["bytes_written"] as? Int == 0, "\(started)")
            let startedLine = try #require(lines.last { $0.contains(" started ") }, "\(history.stdout)")
            #expect(startedLine.contains("from byte 0 (no byte kept from earlier attempts)") && !startedLine.contains("resume:"), "\(startedLine)")
            let logged = log.filter { ["started", "resumed"].contains($0["event"] as? String ?? "") }.map { $0["event"] as? String }
            #expect(logged == ["resumed", "started"], "\(second.stderr)")
        } else {
            // The attempt that dropped them said so in the log.
            let progress = events.filter { $0["type"] as? String == "progress" && point($0) != nil }
            #expect(progress.contains { point($0)?["bytes_written"] as? Int == 0 }, "no checkpoint of no bytes: \(history.stdout)")
        }
    }

    @Test("--sliced-threshold and --slices: valid values start the worker, others exit 64 naming the option")
    func optionRanges() throws {
        let workspace = try CLIWorkspace("cli-sliced-options")
        defer { workspace.directory.remove() }
        #expect(try workspace.jobctl(["migrate"]).status == 0)
        for arguments in [["--sliced-threshold", "1MiB"], ["--sliced-threshold", "off"], ["--sliced-threshold", "0"],
                          ["--sliced-threshold", "1TiB"], ["--slices", "2"], ["--slices", "16"]] {
            let run = try workspace.jobctl(["worker", "--drain"] + arguments)
            #expect(run.status == 0, "\(arguments): \(run.stderr)")
        }
        for (arguments, option) in [(["--sliced-threshold", "1000"], "--sliced-threshold"), (["--sliced-threshold", "2TiB"], "--sliced-threshold"),
                                    (["--sliced-threshold", "big"], "--sliced-threshold"),
                                    (["--slices", "1"], "--slices"), (["--slices", "17"], "--slices"), (["--slices", "four"], "--slices")] {
            let run = try workspace.jobctl(["worker", "--drain"] + arguments)
            #expect(run.status == 64 && run.stderr.hasPrefix("Error: \(option) must be"), "\(arguments): \(run.status) \(run.stderr)")
        }
        for (name, value) in [("JOBCTL_SLICED_THRESHOLD", "10"), ("JOBCTL_SLICES", "99")] {
            let run = try workspace.jobctl(["worker", "--drain"], environment: [name: value])
            #expect(run.status != 0 && run.stderr.contains("\(name) must be"), "\(name): \(run.stderr)")
        }
        // The configuration file's keys stand for the variables: shown by `config`, checked by the worker.
        try workspace.write("xdg/jobctl/config.yaml", "sliced_threshold: 64MiB\nslices: 8\n")
        let fromFile = try ConfigCommandTests.settings(try ConfigCommandTests.run(workspace, ["config", "--json"]))
        #expect(fromFile["sliced_threshold"]?["value"] == "64MiB" && fromFile["sliced_threshold"]?["variable"] == "JOBCTL_SLICED_THRESHOLD")
        #expect(fromFile["slices"]?["value"] == "8" && fromFile["slices"]?["variable"] == "JOBCTL_SLICES")
        try workspace.write("xdg/jobctl/config.yaml", "sliced_threshold: 5\n")
        let refused = try ConfigCommandTests.run(workspace, ["--db", workspace.database, "worker", "--drain"])
        // Named as the file names it, not by the variable it stands for.
        #expect(refused.status != 0 && refused.stderr.contains("sliced_threshold must be between")
                    && !refused.stderr.contains("JOBCTL_SLICED_THRESHOLD"), "\(refused.stderr)")
        let help = try workspace.jobctl(["help", "worker"])
        #expect(help.stdout.contains("--sliced-threshold <size>") && help.stdout.contains("--slices <count>"), "\(help.stdout)")
    }
}
