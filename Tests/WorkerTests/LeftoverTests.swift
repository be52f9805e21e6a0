import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// Real worker processes: a job that ends failed or cancelled leaves no hidden file behind; one that
/// will resume keeps it; what crashed workers and worker-less cancels leave is swept by the next worker;
/// a user's files named like ours are never touched.
@Suite("worker leftovers", .onTestThreads) struct LeftoverTests {
    private func exists(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
    }

    private func entries(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    @Test("downloads that fail for good (retries exhausted, 404) leave no partial file")
    func failedDownloadsLeaveNoPartial() throws {
        let nginx = try startWorkerNginx()
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("leftover-failed")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let out = directory.file("out")
        let ids = try submit("""
        - {kind: download-file, source: "\(nginx.baseURL)/broken/a.bin", destination: "\(out)/a.bin", max_attempts: 1}
        - {kind: download-file, source: "\(nginx.baseURL)/missing/b.bin", destination: "\(out)/b.bin"}
        """, database: database, directory: directory)
        let worker = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        #expect(worker.wait(seconds: 30) == 2, "both jobs fail, so the drain exits 2: \(worker.log)")
        let store = try EventStore(path: database, readOnly: true)
        #expect(try store.job(ids[0])?.error?.code == .retryLimitExceeded)
        #expect(try store.job(ids[1])?.error?.code == .objectNotFound)
        #expect(entries(out).isEmpty, "left behind: \(entries(out))")
    }

    @Test("a retry-scheduled download keeps its partial; cancelled while no worker runs it, the next worker's sweep removes it and nothing else")
    func sweepRemovesWhatAWorkerlessCancelLeft() throws {
        let nginx = try startWorkerNginx(retryAfterSeconds: 600)
        defer { nginx.stop() }
        nginx.setFlaky(true)
        try Data("flaky".utf8).write(to: URL(fileURLWithPath: "\(nginx.root)/flaky/f.bin"))
        let directory = try TemporaryDirectory("leftover-sweep")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let out = directory.file("out")
        let id = try #require(try submit("""
        - {kind: download-file, source: "\(nginx.baseURL)/flaky/f.bin", destination: "\(out)/f.bin", max_attempts: 3}
        """, database: database, directory: directory).first)
        let partial = "\(out)/.f.bin.\(id).jobctl-partial"
        let store = try EventStore(path: database, readOnly: true)

        let first = try JobctlProcess.worker(database: database, logDirectory: directory.path)
        let retryScheduled = try eventually(seconds: 20) {
            try store.events(jobID: id).contains { $0.type == .attemptFailed }
        }
        try #require(retryScheduled, "no retry was scheduled: \(first.log)")
        first.signal(SIGTERM)
        #expect(first.wait(seconds: 15) == 0, "\(first.log)")
        #expect(exists(partial), "a job that will be retried keeps its partial file: \(entries(out))")

        // Files named like ours that the log does not tie to this final job.
        let usersFiles = ["\(out)/.f.bin.jobctl-partial", "\(out)/.f.bin.\(JobID.generate()).jobctl-partial",
                          "\(out)/.g.bin.\(id).jobctl-partial", "\(out)/f.bin"]
        for path in usersFiles { try Data("user's".utf8).write(to: URL(fileURLWithPath: path)) }

        #expect(try jobctl(["cancel", id], database: database).status == 0)
        #expect(try store.job(id)?.state == .cancelled)
        #expect(exists(partial), "no worker ran the cancel")
        let listed = try jobctl(["orphans", "--json"], database: database)
        #expect(listed.status == 0, "\(listed.stderr)")
        let orphans = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        #expect(orphans.compactMap { $0["path"] as? String } == [partial], "\(listed.stdout)")
        #expect(exists(partial), "listing removes nothing")

        let second = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        #expect(second.wait(seconds: 30) == 0, "\(second.log)")
        #expect(!exists(partial), "the sweep left \(entries(out))")
        // Said in the worker's log, as one of its own lines (JSON-only under --log-format json).
        let removal = second.log.split(separator: "\n").first { $0.contains(" orphan_removed ") }
        #expect(removal?.contains("\(id) file=partial-download path=\(partial) bytes=") == true, "\(second.log)")
        #expect(removal?.hasSuffix("job_state=cancelled") == true, "\(second.log)")
        for path in usersFiles { #expect(exists(path), "the sweep removed \(path)") }
    }

    @Test("a file:// upload killed mid-transfer leaves its session until the job is final; the next worker's sweep removes it")
    func killedLocalUploadSessionIsSwept() throws {
        let directory = try TemporaryDirectory("leftover-killed")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let source = directory.file("big.bin")
        try writePatternFile(source, size: 48 << 20)
        let id = try #require(try submit("- {kind: upload-file, source: \"\(source)\", destination: \"file://media/big.bin\"}\n",
                                         database: database, directory: directory).first)
        let bucket = directory.file("buckets/media")
        let store = try EventStore(path: database, readOnly: true)
        // The attempt's own name: the job's id and its lease token.
        var session = ""

        // Held to 8 MiB/s (6 s for the file): a wide window for the kill, however busy the machine.
        let first = try JobctlProcess.worker(database: database, ["--lease", "1", "--bwlimit", "8M"], logDirectory: directory.path)
        let started = eventually(seconds: 20) {
            guard let token = try? store.job(id)?.leaseToken else { return false }
            session = "\(bucket)/.big.bin.\(id).\(token).jobctl-upload"
            return exists(session)
        }
        first.signal(SIGKILL)
        _ = first.wait(seconds: 5)
        try #require(started, "the upload never created its session file: \(first.log)")
        try #require(try store.job(id)?.state == .running, "the upload finished before the worker was killed; nothing to test")
        #expect(exists(session))

        #expect(try jobctl(["cancel", id], database: database).status == 0)
        let second = try JobctlProcess.worker(database: database, ["--drain", "--lease", "1"], logDirectory: directory.path)
        #expect(second.wait(seconds: 30) == 0, "\(second.log)")
        #expect(try store.job(id)?.state == .cancelled)
        #expect(!exists(session), "left behind: \(entries(bucket))")
        #expect(entries(bucket).isEmpty, "left behind: \(entries(bucket))")
    }
}
