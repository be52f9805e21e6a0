import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// The job's rules end to end: real `jobctl pause`/`resume`/`cancel` processes against a real worker
/// running real downloads from nginx on 127.0.0.1.
@Suite("control requests and attempts, end to end", .onTestThreads) struct ControlRulesTests {
    static let mib = 1 << 20

    /// nginx with `/slow/` (rate-limited) and `/gate/` (rate-limited, answering 503 + Retry-After while
    /// `gate.fail` exists in the root).
    static func startNginx() throws -> NginxServer {
        let nginx = try NginxServer.start(extraServerConfig: """
        location /slow/ {
            set $limit_rate 1m;
            if (-f $ROOT/slow.fast) { set $limit_rate 0; }
        }
        location /gate/ {
            set $limit_rate 1m;
            if (-f $ROOT/slow.fast) { set $limit_rate 0; }
            if (-f $ROOT/gate.fail) {
                add_header Retry-After 1 always;
                return 503;
            }
        }
        """)
        for folder in ["slow", "gate"] {
            try FileManager.default.createDirectory(atPath: "\(nginx.root)/\(folder)", withIntermediateDirectories: true)
        }
        return nginx
    }

    /// Waits until the job is running (claimed again after a resume).
    static func waitRunning(_ store: EventStore, _ id: String, _ worker: JobctlProcess) throws {
        try #require(try eventually(seconds: 30) { try store.job(id)?.state == .running }, "\(worker.log)")
    }

    /// One pause/resume cycle through the CLI, each waiting for the worker to act.
    static func pauseAndResume(_ store: EventStore, _ id: String, database: String, worker: JobctlProcess) throws {
        try waitRunning(store, id, worker)
        let pause = try jobctl(["pause", id], database: database)
        #expect(pause.status == 0, "\(pause.stderr)")
        try #require(try eventually(seconds: 30) { try store.job(id)?.state == .paused }, "\(worker.log)")
        let resume = try jobctl(["resume", id], database: database)
        #expect(resume.status == 0, "\(resume.stderr)")
    }

    /// The issue's reproduction: `pause ID` then `cancel ID` right after, on a running download. Both
    /// exit 0, so the job must end cancelled — whether the cancel reaches the store before or after the
    /// worker's `paused`. The reverse order refuses the pause; pause then resume leaves it running.
    @Test func anAcknowledgedCancelEndsTheJobCancelled() throws {
        let nginx = try Self.startNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("control-rules")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(32 * Self.mib))
        try writePatternFile("\(nginx.root)/slow/medium.bin", size: Int64(12 * Self.mib))
        let ids = try submit("""
        - {kind: download-file, source: "\(nginx.baseURL)/slow/big.bin", destination: "\(directory.file("out/paused-then-cancelled.bin"))"}
        - {kind: download-file, source: "\(nginx.baseURL)/slow/big.bin", destination: "\(directory.file("out/cancelled-then-paused.bin"))"}
        - {kind: download-file, source: "\(nginx.baseURL)/slow/medium.bin", destination: "\(directory.file("out/paused-then-resumed.bin"))"}
        """, database: database, directory: directory)
        let worker = try JobctlProcess.worker(database: database, ["--concurrency", "3"], logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let store = try EventStore(path: database, readOnly: true)
        try #require(try eventually(seconds: 20) {
            try ids.allSatisfy { id in try store.job(id).map { $0.state == .running && $0.bytesDone > 0 } ?? false }
        }, "transfers did not start: \(worker.log)")

        // pause, then resume: both acknowledged, so the job must not stay paused. First, so that the
        // medium-sized download is still running.
        #expect(try jobctl(["pause", ids[2]], database: database).status == 0)
        #expect(try jobctl(["resume", ids[2]], database: database).status == 0)
        // pause, then cancel: both acknowledged.
        #expect(try jobctl(["pause", ids[0]], database: database).status == 0)
        #expect(try jobctl(["cancel", ids[0]], database: database).status == 0)
        // cancel, then pause: the pause is refused (the job is being, or has been, cancelled).
        #expect(try jobctl(["cancel", ids[1]], database: database).status == 0)
        let refused = try jobctl(["pause", ids[1]], database: database)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("cancelled"), "\(refused.stderr)")

        for id in ids[0...1] {
            #expect(try eventually(seconds: 30) { try store.job(id)?.state == .cancelled }, "\(worker.log)")
            let job = try #require(try store.job(id))
            #expect(job.error?.code == .cancelled)
            #expect(!job.pauseRequested && !job.cancelRequested)
            #expect(try store.events(jobID: id).last?.type == .cancelled)
        }
        let history = try store.events(jobID: ids[0]).map(\.type)
        #expect(history.contains(.pauseRequested) && history.contains(.cancelled), "\(history)")
        // The controls have landed: the rest may run fast (slow until now, a wide window for them).
        nginx.setFast(true)
        // Nothing changes afterwards: still cancelled once the worker has had time to act on anything.
        #expect(try eventually(seconds: 30) { try store.job(ids[2])?.state == .succeeded }, "\(worker.log)")
        #expect(try ids[0...1].allSatisfy { try store.job($0)?.state == .cancelled })
        let resumed = try store.events(jobID: ids[2]).map(\.type)
        #expect(resumed.contains(.pauseRequested) && resumed.contains(.resumeRequested), "\(resumed)")
        #expect(try jobctl(["replay", "--verify"], database: database).status == 0)
    }

    /// `max_attempts: 1`, two pause/resume cycles, then success: the pauses used no attempt.
    @Test func pausesDoNotUseAttempts() throws {
        let nginx = try Self.startNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("attempts-pauses")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        // 16 s at 1 MB/s: long enough that three pause/resume cycles happen while it is still running,
        // however busy the machine; then the server is made fast for the rest. (A pause sent once the
        // server is fast can come too late: the last 14 MiB take some 25 ms.)
        try writePatternFile("\(nginx.root)/slow/file.bin", size: Int64(16 * Self.mib))
        let destination = directory.file("file.bin")
        let id = try #require(try submit("""
        - {kind: download-file, source: "\(nginx.baseURL)/slow/file.bin", destination: "\(destination)", max_attempts: 1}
        """, database: database, directory: directory).first)
        let worker = try JobctlProcess.worker(database: database, logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let store = try EventStore(path: database, readOnly: true)
        for _ in 0..<3 {
            try Self.pauseAndResume(store, id, database: database, worker: worker)
        }
        nginx.setFast(true)
        #expect(try eventually(seconds: 30) { try store.job(id)?.state == .succeeded }, "\(worker.log)")
        let job = try #require(try store.job(id))
        #expect(job.attempts == 1 && job.maxAttempts == 1)
        let claims = try store.events(jobID: id).filter { $0.type == .claimed }
        #expect(claims.count == 4)
        #expect(claims.map(\.data.attempt) == [1, 1, 1, 1])
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination))
            == Data(contentsOf: URL(fileURLWithPath: "\(nginx.root)/slow/file.bin")))
        #expect(try jobctl(["replay", "--verify"], database: database).status == 0)
    }

    /// `max_attempts: 2`, two pauses and a SIGTERM release, then a retryable failure: the failure is
    /// the first charged attempt, so it is retried (and the retry succeeds), not final.
    @Test func pausesAndAReleaseLeaveTheRetry() throws {
        let nginx = try Self.startNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("attempts-release")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        try writePatternFile("\(nginx.root)/gate/file.bin", size: Int64(12 * Self.mib))
        let destination = directory.file("file.bin")
        let id = try #require(try submit("""
        - {kind: download-file, source: "\(nginx.baseURL)/gate/file.bin", destination: "\(destination)", max_attempts: 2}
        """, database: database, directory: directory).first)
        let store = try EventStore(path: database, readOnly: true)
        let first = try JobctlProcess.worker(database: database, logDirectory: directory.path)
        defer { first.signal(SIGKILL) }
        for _ in 0..<2 {
            try Self.pauseAndResume(store, id, database: database, worker: first)
        }
        try Self.waitRunning(store, id, first)
        first.signal(SIGTERM)
        #expect(first.wait(seconds: 10) == 0, "\(first.log)")
        nginx.setFast(true)
        #expect(try store.events(jobID: id).last?.type == .released)
        #expect(try store.job(id)?.attempts == 0)

        // The server now fails: the next attempt ends in a retryable 503.
        #expect(FileManager.default.createFile(atPath: "\(nginx.root)/gate.fail", contents: Data("fail".utf8)), "could not create a file the test needs")
        let second = try JobctlProcess.worker(database: database, logDirectory: directory.path)
        defer { second.signal(SIGKILL) }
        try #require(try eventually(seconds: 20) { try store.events(jobID: id).contains { $0.type == .attemptFailed } },
                     "\(second.log)")
        // The server recovers at once: the retry waits at least the 1 s Retry-After, so it succeeds.
        try FileManager.default.removeItem(atPath: "\(nginx.root)/gate.fail")
        let events = try store.events(jobID: id)
        let failure = try #require(events.first { $0.type == .attemptFailed })
        #expect(failure.data.error?.httpStatus == 503)
        #expect(failure.data.retryAtMs.map { $0 > failure.atMs } == true)
        #expect(!events.contains { $0.type == .failed })
        #expect(events.filter { $0.type == .claimed }.prefix(4).map(\.data.attempt) == [1, 1, 1, 1])

        // The retry is the second attempt.
        #expect(try eventually(seconds: 30) { try store.job(id)?.state == .succeeded }, "\(second.log)")
        let job = try #require(try store.job(id))
        #expect(job.attempts == 2)
        #expect(try store.events(jobID: id).filter { $0.type == .claimed }.last?.data.attempt == 2)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination))
            == Data(contentsOf: URL(fileURLWithPath: "\(nginx.root)/gate/file.bin")))
    }
}
