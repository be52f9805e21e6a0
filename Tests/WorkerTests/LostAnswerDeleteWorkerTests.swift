import EventStore
import Foundation
import JobModel
import PostgresStore
import Testing
import TestSupport

/// A worker's delete over plain HTTP that nginx carried out but whose answer never came: the attempt
/// records that the DELETE went out (`sentDelete`), and the retry, meeting a 404, succeeds instead of
/// failing the job for good with `objectNotFound` on its own delete.
@Suite("a delete or an if_exists: fail upload after a lost answer or a dead worker, in a worker", .onTestThreads) struct LostAnswerDeleteWorkerTests {
    @Test func deleteWhoseAnswerWasLostSucceedsOnRetry() throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        try Data("doomed".utf8).write(to: URL(fileURLWithPath: nginx.root + "/doomed.txt"))
        let proxy = try FaultProxy(upstreamPort: nginx.port, rules: [
            // The first DELETE, the worker's first request to this proxy (so on a fresh connection, which
            // libcurl does not send again on).
            FaultRule(RequestMatch(method: "DELETE", pathContains: "/doomed.txt"), .resetBeforeResponse, times: 1),
        ])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("lost-delete")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let id = try #require(try submit("""
        - {kind: delete, destination: "\(proxy.baseURL)/doomed.txt"}
        """, database: database, directory: directory).first)
        let worker = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        #expect(worker.wait(seconds: 60) == 0, "\(worker.log)")
        let store = try EventStore(path: database, readOnly: true)
        let job = try #require(try store.job(id))
        #expect(job.state == .succeeded, "\(String(describing: job.error)) \(worker.log)")
        let events = try store.events(jobID: id)
        let types = events.map(\.type)
        #expect(types.contains(.attemptFailed), "\(types)")
        #expect(events.contains { $0.data.resumePoint == .sentDelete }, "\(types)")
        #expect(proxy.firedCounts == [1])
        #expect(!FileManager.default.fileExists(atPath: nginx.root + "/doomed.txt"))
        // The retry's DELETE reached nginx and met a 404.
        let last = proxy.exchanges.last { $0.request.method == "DELETE" }
        #expect(last?.response?.status == 404, "\(proxy.exchanges.map(\.faults))")
        #expect(try store.replay(verify: true).isConsistent)
        // The history says what the failed attempt left for the next one, in words and in JSON.
        let history = try jobctl(["history", id.description, "--all"], database: database)
        #expect(history.status == 0 && history.stdout.contains("delete sent, its answer lost"), "\(history.stdout)\(history.stderr)")
        let json = try jobctl(["history", id.description, "--all", "--json"], database: database)
        #expect(json.status == 0 && json.stdout.contains("\"sent_delete\""), "\(json.stdout)\(json.stderr)")
    }

    /// The worker is killed (SIGKILL) after nginx carried the DELETE out but before its answer came (the
    /// proxy holds it back): the log has no outcome for the attempt, and the next worker, once the lease
    /// ran out, meets a 404 — which, after an attempt that ended without a word, is the delete done.
    @Test func deleteWhoseWorkerDiedSucceedsOnTheNextAttempt() throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("crash-delete")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let id = try deleteKilledAfterItLanded(on: database, in: directory, nginx: nginx, name: "crash.txt") {
            try EventStore(path: database, readOnly: true).job($0)
        }
        let store = try EventStore(path: database, readOnly: true)
        let types = try store.events(jobID: id).map(\.type)
        #expect(types.contains(.leaseExpired), "\(types)")
        #expect(try store.replay(verify: true).isConsistent)
        // The second attempt's start says where it began, in words and in JSON.
        let history = try jobctl(["history", id.description, "--all"], database: database)
        #expect(history.stdout.contains("an earlier attempt ended without a word"), "\(history.stdout)\(history.stderr)")
        let json = try jobctl(["history", id.description, "--all", "--json"], database: database)
        #expect(json.stdout.contains("\"unanswered\""), "\(json.stdout)\(json.stderr)")
    }

    /// An attempt answered with a failure (503, retried), then one killed after nginx carried its DELETE
    /// out: the rescue records `unanswered` though the job's record still shows the 503, so the third
    /// attempt takes the 404 as done. (Without the rescue's word the kept error hid the death.)
    @Test func deleteWhoseWorkerDiedAfterAnAnsweredFailureSucceeds() throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("crash-after-503")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let id = try deleteKilledAfterItLanded(on: database, in: directory, nginx: nginx, name: "after-503.txt", answeredFirst: true) {
            try EventStore(path: database, readOnly: true).job($0)
        }
        let store = try EventStore(path: database, readOnly: true)
        let events = try store.events(jobID: id)
        #expect(events.map(\.type).contains(.attemptFailed), "\(events.map(\.type))")
        let expired = try #require(events.first { $0.type == .leaseExpired })
        #expect(expired.data.resumePoint == .unanswered, "the rescue says the dead attempt may have done its work")
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// The same for an `if_exists: fail` upload whose attempt died before it could say anything — not even
    /// that its bytes went out (a small upload's `sent_upload` may not reach the log first). A worker that
    /// claimed the job and died is played by a claim with a 1 ms lease, its PUT by the file nginx holds; the
    /// next attempt finds the file, reads it back, finds the source's bytes and takes it as its own.
    /// Under `if_exists: skip` the same file was reported skipped: an audit saying the job moved nothing.
    @Test(arguments: [IfExists.fail, .skip])
    func failRuleUploadWhoseWorkerDiedSucceedsOnTheNextAttempt(_ mode: IfExists) throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        let path = nginx.root + "/kept.txt"
        let directory = try TemporaryDirectory("crash-upload")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let id = try #require(try submit("""
        - {kind: upload-data, data: "written once", destination: "\(nginx.baseURL)/kept.txt", if_exists: \(mode.rawValue)}
        """, database: database, directory: directory).first)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        do {
            let dead = try EventStore(path: database)
            #expect(try dead.claim(owner: "worker:died", queues: nil, limit: 1, leaseMs: 1, now: now).count == 1)
        }
        try Data("written once".utf8).write(to: URL(fileURLWithPath: path))

        let second = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        #expect(second.wait(seconds: 60) == 0, "\(second.log)")
        let store = try EventStore(path: database, readOnly: true)
        let job = try #require(try store.job(id))
        #expect(job.state == .succeeded, "\(String(describing: job.error)) \(second.log)")
        #expect(job.attempts == 2)
        #expect(job.result?.skipped == nil && job.result?.verified == [.crc32c], "\(String(describing: job.result))")
        let events = try store.events(jobID: id)
        #expect(events.map(\.type).contains(.leaseExpired), "\(events.map(\.type))")
        #expect(!events.contains { if case .sentUpload? = $0.data.resumePoint { true } else { false } }, "no attempt said its bytes went out")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "written once")
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// The same on PostgreSQL (workers on several machines): the claimed record the next worker gets from
    /// the server carries what `unanswered` is derived from.
    @Test func deleteWhoseWorkerDiedSucceedsOnTheNextAttemptOnPostgreSQL() throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("pg-crash-delete")
        defer { directory.remove() }
        let database = try grantedWorkerDatabase("pgdelete")
        let store = try PostgresStore(url: database, mode: .readOnly)
        _ = try deleteKilledAfterItLanded(on: database, in: directory, nginx: nginx, name: "pg-crash.txt") { try store.job($0) }
        #expect(try jobctl(["replay", "--verify"], database: database).status == 0)
    }

    /// The answered failure, then the death, on PostgreSQL: the rescue's word reaches its projection row.
    @Test func deleteWhoseWorkerDiedAfterAnAnsweredFailureSucceedsOnPostgreSQL() throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("pg-crash-after-503")
        defer { directory.remove() }
        let database = try grantedWorkerDatabase("pgafter503")
        let store = try PostgresStore(url: database, mode: .readOnly)
        let id = try deleteKilledAfterItLanded(on: database, in: directory, nginx: nginx, name: "pg-after-503.txt", answeredFirst: true) {
            try store.job($0)
        }
        let expired = try #require(try store.events(jobID: id).first { $0.type == .leaseExpired })
        #expect(expired.data.resumePoint == .unanswered)
        #expect(try jobctl(["replay", "--verify"], database: database).status == 0)
    }

    /// A delete whose only attempt died (played by a claim with a 1 ms lease) after nginx carried it
    /// out: the rescue fails the job (no attempts left) carrying `unanswered`, and after `jobctl retry`
    /// the new attempt takes the 404 as the delete done.
    @Test func deleteRetriedAfterItsLastAttemptDiedSucceeds() throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("retry-dead-delete")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let id = try #require(try submit("""
        - {kind: delete, destination: "\(nginx.baseURL)/gone.txt", max_attempts: 1}
        """, database: database, directory: directory).first)
        do {
            let dead = try EventStore(path: database)
            #expect(try dead.claim(owner: "worker:died", queues: nil, limit: 1, leaseMs: 1, now: Int64(Date().timeIntervalSince1970 * 1000)).count == 1)
        }
        let rescuer = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        // The drain's rescue failed the job: a failure of the drain's (exit 2).
        #expect(rescuer.wait(seconds: 60) == 2, "\(rescuer.log)")
        let store = try EventStore(path: database, readOnly: true)
        let failed = try #require(try store.job(id))
        #expect(failed.state == .failed && failed.error?.code == .retryLimitExceeded, "\(String(describing: failed.error))")
        #expect(failed.resumePoint == .unanswered)

        #expect(try jobctl(["retry", id.description], database: database).status == 0)
        let worker = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        #expect(worker.wait(seconds: 60) == 0, "\(worker.log)")
        let job = try #require(try store.job(id))
        #expect(job.state == .succeeded, "\(String(describing: job.error)) \(worker.log)")
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// A delete of `name` on `nginx`, through a fault proxy that holds the DELETE's answer back: a worker
    /// (lease 2 s) is killed with SIGKILL once nginx carried the DELETE out, so the attempt ends without an
    /// outcome; a second worker drains. Checks that the kill came first and that the job then succeeded
    /// on its second attempt, the second DELETE meeting a 404. `job` reads the job from the database.
    ///
    /// With `answeredFirst` the first DELETE is answered 503 (an attempt that failed with an answer, its
    /// error kept in the job's record) and the kill hits the second attempt; the third then succeeds.
    private func deleteKilledAfterItLanded(on database: String, in directory: TemporaryDirectory, nginx: NginxServer, name: String,
                                           answeredFirst: Bool = false, job: (String) throws -> JobRecord?) throws -> String {
        let path = nginx.root + "/" + name
        try Data("doomed".utf8).write(to: URL(fileURLWithPath: path))
        // Every rule matching a request fires on it: the stall is added once the 503 was answered (the
        // retry waits the 2 s its Retry-After asks for).
        let busy = FaultRule(RequestMatch(method: "DELETE", pathContains: "/" + name),
                             .respond(ProxyMessage(startLine: "HTTP/1.1 503 Service Unavailable",
                                                   headers: [ProxyHeader("Content-Length", "0"), ProxyHeader("Retry-After", "2")])),
                             times: 1)
        let stall = FaultRule(RequestMatch(method: "DELETE", pathContains: "/" + name), .stallInResponse(afterBytes: 0, seconds: 30), times: 1)
        let proxy = try FaultProxy(upstreamPort: nginx.port, rules: [answeredFirst ? busy : stall])
        defer { proxy.stop() }
        let id = try #require(try submit("- {kind: delete, destination: \"\(proxy.baseURL)/\(name)\"}\n", database: database, directory: directory).first)
        let first = try JobctlProcess.worker(database: database, ["--lease", "2"], logDirectory: directory.path)
        if answeredFirst {
            try #require(eventually(seconds: 30) { proxy.exchanges.contains { $0.response?.status == 503 } }, "no 503: \(first.log)")
            proxy.add(stall)
        }
        try #require(eventually(seconds: 30) { !FileManager.default.fileExists(atPath: path) }, "nginx never saw the DELETE: \(first.log)")
        first.signal(SIGKILL)
        _ = first.wait(seconds: 5)
        #expect(try job(id)?.state == .running, "the attempt's outcome was written before the kill: the test proves nothing")

        let second = try JobctlProcess.worker(database: database, ["--lease", "2", "--drain"], logDirectory: directory.path)
        #expect(second.wait(seconds: 60) == 0, "\(second.log)")
        let finished = try #require(try job(id))
        #expect(finished.state == .succeeded, "\(String(describing: finished.error)) \(second.log)")
        #expect(finished.attempts == (answeredFirst ? 3 : 2))
        if answeredFirst { #expect(proxy.firedCounts == [1, 1], "the first DELETE was answered 503, the second stalled") }
        let deletes = proxy.exchanges.filter { $0.request.method == "DELETE" }
        #expect(deletes.last?.response?.status == 404, "the second attempt asked again and met a 404: \(deletes.map(\.faults))")
        return id
    }
}
