import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// The network settings as a real `jobctl worker` process reads them: the job's `timeout:` from the
/// manifest, `--stall-timeout`, a failing token command (retried, then given up naming its exit status),
/// a private CA through JOBCTL_CA_BUNDLE, and bad settings refused before the worker starts.
@Suite("worker network settings", .onTestThreads) struct TransferSettingsTests {
    /// Runs `jobctl worker --drain ARGS` to its exit (at most `seconds`), returning its status and log.
    private func drain(_ database: String, _ arguments: [String], environment: [String: String] = [:],
                       directory: TemporaryDirectory, seconds: Double = 30) throws -> (status: Int32?, log: String) {
        let worker = try JobctlProcess.worker(database: database, ["--drain"] + arguments, environment: environment,
                                              logDirectory: directory.path)
        let status = worker.wait(seconds: seconds)
        if status == nil { worker.signal(SIGKILL) }
        return (status, worker.log)
    }

    @Test func timeoutAndStallEndAttemptsWithClearErrors() throws {
        let trickle = try TrickleServer(.trickle(interval: 0.2))
        defer { trickle.stop() }
        let stalled = try TrickleServer(.stallAfter(bytes: 100))
        defer { stalled.stop() }
        let directory = try TemporaryDirectory("limits")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let ids = try submit("""
        defaults: {max_attempts: 1, max_size: 512MiB}
        jobs:
          - {kind: download-memory, source: "\(trickle.baseURL)/slow.bin", timeout: 1s}
          - {kind: download-memory, source: "\(stalled.baseURL)/stuck.bin"}
        """, database: database, directory: directory)
        let run = try drain(database, ["--concurrency", "2", "--stall-timeout", "1s"], directory: directory)
        #expect(run.status == 2, "every job fails here, so the drain exits 2: \(run.log)")
        let store = try EventStore(path: database, readOnly: true)
        let timedOut = try #require(try store.job(ids[0]))
        #expect(timedOut.state == .failed)
        #expect(timedOut.error?.code == .retryLimitExceeded)
        #expect(timedOut.error?.message.contains("the job's 1s timeout passed") == true, "\(String(describing: timedOut.error))")
        let stall = try #require(try store.job(ids[1]))
        #expect(stall.state == .failed)
        #expect(stall.error?.message.contains("no data for 1 s") == true, "\(String(describing: stall.error))")
    }

    /// A download trickling ~500 B/s: below the 1 KiB/s default minimum it fails at the first window's
    /// end, naming the rate and the minimum; with `--min-rate 0` the same trickle is let finish.
    @Test func minimumRateFailsATrickleUnlessTurnedOff() throws {
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        let payload = patternData(2_000, seed: 9)
        try payload.write(to: URL(fileURLWithPath: nginx.root + "/trickle.bin"))
        let proxy = try FaultProxy(upstreamPort: nginx.port, rules: [
            FaultRule(RequestMatch(method: "GET"), .trickleResponse(bytes: 50, interval: 0.1), times: 2),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("minrate")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let slow = try submit("- {kind: download-memory, source: \"\(proxy.baseURL)/trickle.bin\", max_attempts: 1, timeout: 20s}\n",
                              database: database, directory: directory)
        let failed = try drain(database, ["--stall-timeout", "1s"], directory: directory)
        #expect(failed.status == 2, "\(failed.log)")
        let store = try EventStore(path: database, readOnly: true)
        let job = try #require(try store.job(slow[0]))
        #expect(job.error?.message.contains("below the minimum of 1 KiB/s") == true
                    && job.error?.message.contains("--min-rate") == true, "\(String(describing: job.error))")

        let allowed = try submit("- {kind: download-memory, source: \"\(proxy.baseURL)/trickle.bin\", max_attempts: 1, timeout: 20s}\n",
                                 database: database, directory: directory)
        let run = try drain(database, ["--stall-timeout", "1s", "--min-rate", "0"], directory: directory)
        #expect(run.status == 0, "\(run.log)")
        let finished = try #require(try EventStore(path: database, readOnly: true).job(allowed[0]))
        #expect(finished.state == .succeeded, "\(String(describing: finished.error))")
        #expect(proxy.firedCounts == [2])
    }

    @Test func failingTokenCommandIsRetriedThenNamesItsExitStatus() throws {
        let directory = try TemporaryDirectory("token")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let ids = try submit("- {kind: download-memory, source: gs://bkt/obj.txt, max_attempts: 2}\n",
                             database: database, directory: directory)
        let run = try drain(database, [], environment: [
            "STORAGE_EMULATOR_HOST": "127.0.0.1:\(freeLoopbackPort())",
            "JOBCTL_TOKEN_COMMAND": "echo SECRET-TOKEN-OUTPUT; exit 3",
            "GOOGLE_OAUTH_ACCESS_TOKEN": "",
        ], directory: directory)
        #expect(run.status == 2, "every job fails here, so the drain exits 2: \(run.log)")
        let store = try EventStore(path: database, readOnly: true)
        let job = try #require(try store.job(ids[0]))
        #expect(job.state == .failed)
        #expect(job.attempts == 2)
        #expect(job.error?.code == .retryLimitExceeded)
        #expect(job.error?.message.contains("exit status 3") == true, "\(String(describing: job.error))")
        let retries = try store.events(jobID: ids[0]).filter { $0.type == .attemptFailed }
        #expect(retries.count == 1)
        #expect(retries.first?.data.error?.retryable == true)
        let history = try jobctl(["history", ids[0], "--json"], database: database)
        #expect(!history.stdout.contains("SECRET") && !run.log.contains("SECRET"))
    }

    @Test func privateCAThroughTheEnvironment() throws {
        let authority = try TestCertificateAuthority.create()
        defer { authority.remove() }
        let nginx = try NginxServer.start(tls: try authority.issueServerCertificate(names: ["IP:127.0.0.1"]))
        defer { nginx.stop() }
        try "over tls".write(toFile: nginx.root + "/tls.txt", atomically: true, encoding: .utf8)
        let directory = try TemporaryDirectory("tls")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let ids = try submit("""
        - {kind: download-memory, source: "\(nginx.baseURL)/tls.txt", max_attempts: 1}
        """, database: database, directory: directory)
        let run = try drain(database, [], environment: ["JOBCTL_CA_BUNDLE": authority.certificatePath], directory: directory)
        #expect(run.status == 0, "\(run.log)")
        let store = try EventStore(path: database, readOnly: true)
        let job = try #require(try store.job(ids[0]))
        #expect(job.state == .succeeded, "\(String(describing: job.error))")
        #expect(try jobctl(["result", ids[0]], database: database).stdout == "over tls")
    }

    @Test(arguments: [
        (["JOBCTL_CHUNK_SIZE": "lots"], [], 1, "JOBCTL_CHUNK_SIZE"),
        (["JOBCTL_STALL_TIMEOUT": "0s"], [], 1, "JOBCTL_STALL_TIMEOUT"),
        (["JOBCTL_CA_BUNDLE": "/nonexistent/ca.pem"], [], 1, "JOBCTL_CA_BUNDLE"),
        (["GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.x\r\nX-Evil: 1"], [], 1, "GOOGLE_OAUTH_ACCESS_TOKEN"),
        ([:], ["--stall-timeout", "0s"], 64, "--stall-timeout"),
        ([:], ["--stall-timeout", "soon"], 64, "--stall-timeout"),
        ([:], ["--stall-timeout=2h"], 64, "--stall-timeout"),
        (["JOBCTL_MIN_RATE": "slow"], [], 1, "JOBCTL_MIN_RATE"),
        ([:], ["--min-rate", "1.5"], 64, "--min-rate"),
        ([:], ["--min-rate", "fast"], 64, "--min-rate"),
    ] as [([String: String], [String], Int32, String)])
    func badSettingsStopTheWorkerAtStart(environment: [String: String], arguments: [String], status: Int32, named: String) throws {
        let directory = try TemporaryDirectory("settings")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let run = try drain(database, arguments, environment: environment, directory: directory, seconds: 10)
        #expect(run.status == status, "\(run.log)")
        #expect(run.log.contains("Error: ") && run.log.contains(named), "\(run.log)")
        #expect(!run.log.contains("X-Evil"))
        // Refused before the event log was opened.
        #expect(!FileManager.default.fileExists(atPath: database))
    }
}
