import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// Real worker processes, real nginx and GCS emulator on 127.0.0.1: control from another process,
/// crashes (SIGKILL), graceful shutdown (SIGTERM) and retries.
@Suite("worker transfers", .onTestThreads) struct TransferControlTests {
    static let mib = 1 << 20

    private func events(_ store: any JobStore, _ id: String, _ type: EventType) throws -> [JobEvent] {
        try store.events(jobID: id).filter { $0.type == type }
    }

    /// pause, resume and cancel from another process reach a running download within a second; resume
    /// continues from the bytes already written (a ranged GET), cancel removes the partial file.
    @Test(arguments: WorkerEngine.allCases)
    func pauseResumeAndCancelFromAnotherProcess(engine: WorkerEngine) throws {
        // Slow (16 s for the file) until the controls have landed, however busy the machine; then fast.
        let nginx = try startWorkerNginx(slowRate: "1m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("control")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(16 * Self.mib))
        let kept = directory.file("out/kept.bin")
        let dropped = directory.file("out/dropped.bin")
        let ids = try submit("""
        - {kind: download-file, source: "\(nginx.baseURL)/slow/big.bin", destination: "\(kept)"}
        - {kind: download-file, source: "\(nginx.baseURL)/slow/big.bin", destination: "\(dropped)"}
        """, database: database, directory: directory)
        let worker = try JobctlProcess.worker(database: database, ["--concurrency", "2"], logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let store = try engine.reader(database)
        let running = try eventually(seconds: 20) {
            try ids.allSatisfy { id in try store.job(id).map { $0.state == .running && $0.bytesDone > 0 } ?? false }
        }
        try #require(running, "transfers did not start: \(worker.log)")

        // Pause one, cancel the other, from this (another) process.
        let pause = try jobctl(["pause", ids[0]], database: database)
        #expect(pause.status == 0, "\(pause.stderr)\n\(worker.log)")
        let cancel = try jobctl(["cancel", ids[1]], database: database)
        #expect(cancel.status == 0, "\(cancel.stderr)\n\(worker.log)")
        #expect(try eventually(seconds: 5) { try store.job(ids[0])?.state == .paused })
        #expect(try eventually(seconds: 5) { try store.job(ids[1])?.state == .cancelled })

        let pauseAsked = try #require(try events(store, ids[0], .pauseRequested).first)
        let paused = try #require(try events(store, ids[0], .paused).first)
        #expect(paused.atMs - pauseAsked.atMs < 1000, "pause took \(paused.atMs - pauseAsked.atMs) ms")
        let cancelAsked = try #require(try events(store, ids[1], .cancelRequested).first)
        let cancelled = try #require(try events(store, ids[1], .cancelled).first)
        #expect(cancelled.atMs - cancelAsked.atMs < 1000, "cancel took \(cancelled.atMs - cancelAsked.atMs) ms")
        #expect(cancelled.data.error?.code == .cancelled)

        // Pause kept its bytes; cancel removed its partial file.
        let pausedJob = try #require(try store.job(ids[0]))
        guard case .download(let written, _, _, let tempPath, _, _, _)? = pausedJob.resumePoint else {
            Issue.record("paused job has no download resume point: \(String(describing: pausedJob.resumePoint))")
            return
        }
        #expect(written > 0)
        #expect(written < Int64(16 * Self.mib))
        let temp = try #require(tempPath)
        #expect(temp == directory.file("out/.kept.bin.\(ids[0]).jobctl-partial"), "the partial's name carries its job id")
        #expect(FileManager.default.fileExists(atPath: temp))
        #expect(!FileManager.default.fileExists(atPath: kept))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.file("out"))
        #expect(!leftovers.contains { $0.contains("dropped") }, "cancel left \(leftovers)")

        // Resume continues from the bytes written, not from zero.
        nginx.setFast(true)
        #expect(try jobctl(["resume", ids[0]], database: database).status == 0)
        #expect(try eventually(seconds: 30) { try store.job(ids[0])?.state == .succeeded }, "\(worker.log)")
        let expected = try Data(contentsOf: URL(fileURLWithPath: "\(nginx.root)/slow/big.bin"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: kept)) == expected)
        #expect(nginx.servedRange("/slow/big.bin", from: written), "\(nginx.accessLog)")
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// A worker killed with SIGKILL mid-download: another worker rescues the job after the lease expires
    /// and continues from the last persisted checkpoint.
    @Test func killedWorkerDownloadIsFinishedByAnother() throws {
        let nginx = try startWorkerNginx(slowRate: "8m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("kill-download")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let size = 32 * Self.mib
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(size))
        let destination = directory.file("big.bin")
        let id = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", destination: \"\(destination)\"}\n",
                                         database: database, directory: directory).first)
        let first = try JobctlProcess.worker(database: database, ["--lease", "2"], logDirectory: directory.path)
        let store = try EventStore(path: database, readOnly: true)
        let checkpointed = try eventually(seconds: 20) { (try store.job(id)?.resumePoint?.bytesDone ?? 0) > 0 }
        try #require(checkpointed, "no checkpoint persisted: \(first.log)")
        first.signal(SIGKILL)
        _ = first.wait(seconds: 5)
        let persisted = try #require(try store.job(id)?.resumePoint?.bytesDone)
        #expect(try store.job(id)?.state == .running)

        let second = try JobctlProcess.worker(database: database, ["--lease", "2", "--drain"], logDirectory: directory.path)
        #expect(second.wait(seconds: 40) == 0, "\(second.log)")
        let job = try #require(try store.job(id))
        #expect(job.state == .succeeded)
        let claims = try events(store, id, .claimed)
        #expect(claims.count == 2)
        #expect(Set(claims.compactMap(\.data.leaseOwner)).count == 2)
        #expect(try events(store, id, .leaseExpired).count == 1)
        // The second attempt asked only for the bytes after the persisted checkpoint.
        #expect(nginx.servedRange("/slow/big.bin", from: persisted), "\(nginx.accessLog)")
        let expected = try Data(contentsOf: URL(fileURLWithPath: "\(nginx.root)/slow/big.bin"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == expected)
        let verify = try jobctl(["replay", "--verify"], database: database)
        #expect(verify.status == 0, "\(verify.stdout)")
    }

    /// A worker killed with SIGKILL mid resumable upload: another worker resumes the persisted session
    /// (one status query) and re-sends at most the chunk that was in flight. The emulator sits behind an
    /// nginx reverse proxy whose access log records every chunk's Content-Range, so the bytes sent are
    /// counted by a real server, not by jobctl.
    @Test func killedWorkerUploadResumesTheSession() throws {
        let emulator = try EmulatorServer.start(bucket: "jobs-bucket")
        defer { emulator.stop() }
        let proxy = try NginxServer.start(extraServerConfig: """
        location ~ ^/(upload|storage|download)/ {
            proxy_pass http://127.0.0.1:\(emulator.port);
            proxy_request_buffering off;
            proxy_buffering off;
            client_max_body_size 0;
            proxy_redirect http://127.0.0.1:\(emulator.port)/ http://$http_host/;
            access_log $ROOT/../uploads.log uploads;
        }
        """, extraHTTPConfig: """
        log_format uploads '$request_method $status "$http_content_range"';
        """)
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("kill-upload")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let chunk = 1 * Self.mib
        let size = 24 * Self.mib
        let source = directory.file("upload.bin")
        try writePatternFile(source, size: Int64(size))
        let environment = ["STORAGE_EMULATOR_HOST": proxy.baseURL, "JOBCTL_CHUNK_SIZE": "\(chunk)"]
        let id = try #require(try submit("""
        - {kind: upload-file, source: "\(source)", destination: "gs://\(emulator.bucket)/big/upload.bin", priority: 5}
        """, database: database, directory: directory).first)
        // The first worker is held to 4 MiB/s (6 s for the file): a wide window for the kill, however busy the machine.
        let first = try JobctlProcess.worker(database: database, ["--lease", "2", "--bwlimit", "4M"], environment: environment,
                                             logDirectory: directory.path)
        let store = try EventStore(path: database, readOnly: true)
        let started = try eventually(seconds: 30) { (try store.job(id)?.resumePoint?.bytesDone ?? 0) >= Int64(chunk) }
        try #require(started, "no confirmed chunk persisted: \(first.log)")
        first.signal(SIGKILL)
        _ = first.wait(seconds: 5)
        let persisted = try #require(try store.job(id)?.resumePoint?.bytesDone)
        #expect(persisted < Int64(size), "the upload finished before the kill; the test proves nothing")

        let second = try JobctlProcess.worker(database: database, ["--lease", "2", "--drain"], environment: environment,
                                              logDirectory: directory.path)
        #expect(second.wait(seconds: 60) == 0, "\(second.log)")
        let job = try #require(try store.job(id))
        #expect(job.state == .succeeded, "\(String(describing: job.error))")
        let all = try store.events(jobID: id)
        let secondClaim = try #require(all.lastIndex { $0.type == .claimed })
        let resumedAt = try #require(all[secondClaim...].first { $0.type == .progress && $0.data.resumePoint != nil }?.data.resumePoint?.bytesDone)
        // The new attempt continued at the server's offset, never below what the log had persisted.
        #expect(resumedAt >= persisted, "resumed at \(resumedAt), persisted \(persisted)")
        #expect(resumedAt < Int64(size))

        // Every data chunk that reached the proxy, whatever its fate: at most one chunk's bytes twice.
        let log = (try? String(contentsOfFile: proxy.directory.file("uploads.log"), encoding: .utf8)) ?? ""
        var sent: Int64 = 0
        var chunkRequests = 0
        for line in log.split(separator: "\n") where line.hasPrefix("PUT ") {
            guard let open = line.firstIndex(of: "\""), let range = line[line.index(after: open)...].split(separator: "\"").first,
                  range.hasPrefix("bytes "), !range.hasPrefix("bytes */") else { continue }
            let bounds = range.dropFirst("bytes ".count).split(separator: "/")[0].split(separator: "-").compactMap { Int64($0) }
            guard bounds.count == 2 else { continue }
            sent += bounds[1] - bounds[0] + 1
            chunkRequests += 1
        }
        #expect(chunkRequests >= size / chunk, "the proxy saw \(chunkRequests) chunk requests:\n\(log)")
        #expect(sent >= Int64(size))
        #expect(sent - Int64(size) <= Int64(chunk), "re-sent \(sent - Int64(size)) bytes:\n\(log)")
        #expect(job.result?.object?.size == Int64(size))

        // Read the object back through a download job: byte-identical.
        let copy = directory.file("copy.bin")
        let downloadID = try #require(try submit("- {kind: download-file, source: \"gs://\(emulator.bucket)/big/upload.bin\", destination: \"\(copy)\"}\n",
                                                 database: database, directory: directory).first)
        let third = try JobctlProcess.worker(database: database, ["--drain"], environment: environment, logDirectory: directory.path)
        #expect(third.wait(seconds: 60) == 0, "\(third.log)")
        #expect(try store.job(downloadID)?.state == .succeeded)
        #expect(try Data(contentsOf: URL(fileURLWithPath: copy)) == Data(contentsOf: URL(fileURLWithPath: source)))
        #expect(try jobctl(["replay", "--verify"], database: database).status == 0)
    }

    /// SIGTERM: stop claiming, pause the transfer at its resume point, release the lease, exit 0 quickly.
    /// SIGHUP (the terminal a worker runs in closing) the same: it used to kill the worker on the spot,
    /// its job left running under a lease no one renewed.
    @Test(arguments: [SIGTERM, SIGHUP])
    func sigtermReleasesAtTheResumePoint(signal: Int32) throws {
        let nginx = try startWorkerNginx(slowRate: "4m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("sigterm")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(12 * Self.mib))
        let destination = directory.file("big.bin")
        let id = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", destination: \"\(destination)\"}\n",
                                         database: database, directory: directory).first)
        // As a shell starts it: test threads block most signals, SIGHUP among them, and a child inherits that.
        let worker = try JobctlProcess.worker(database: database, logDirectory: directory.path, cleanSignalMask: true)
        let store = try EventStore(path: database, readOnly: true)
        try #require(try eventually(seconds: 20) { (try store.job(id)?.bytesDone ?? 0) > 0 }, "\(worker.log)")
        let signalled = Date()
        worker.signal(signal)
        let status = worker.wait(seconds: 10)
        #expect(status == 0, "signal \(signal): \(worker.log)")
        #expect(Date().timeIntervalSince(signalled) < 10)
        let job = try #require(try store.job(id))
        #expect(job.state == .queued)
        #expect(job.leaseOwner == nil)
        #expect(try store.events(jobID: id).last?.type == .released)
        let written = try #require(job.resumePoint?.bytesDone)
        #expect(written > 0)

        let next = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        #expect(next.wait(seconds: 30) == 0, "\(next.log)")
        #expect(try store.job(id)?.state == .succeeded)
        #expect(nginx.servedRange("/slow/big.bin", from: written), "\(nginx.accessLog)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == Data(contentsOf: URL(fileURLWithPath: "\(nginx.root)/slow/big.bin")))
    }

    /// 503 + Retry-After is retried no sooner than the server asked; a server that keeps failing ends in
    /// retryLimitExceeded carrying the last error; 404 fails at once without retries.
    @Test func retriesHonourRetryAfterAndGiveUp() throws {
        let nginx = try startWorkerNginx(retryAfterSeconds: 2)
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("retries")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        try "flaky data".write(toFile: "\(nginx.root)/flaky/data.txt", atomically: true, encoding: .utf8)
        nginx.setFlaky(true)
        let ids = try submit("""
        - {kind: download-memory, source: "\(nginx.baseURL)/flaky/data.txt", max_attempts: 4, priority: 3}
        - {kind: download-memory, source: "\(nginx.baseURL)/broken/other.txt", max_attempts: 2, priority: 2}
        - {kind: download-file, source: "\(nginx.baseURL)/missing.bin", destination: "\(directory.file("missing.bin"))", priority: 1}
        """, database: database, directory: directory)
        let worker = try JobctlProcess.worker(database: database, ["--concurrency", "3"], logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let store = try EventStore(path: database, readOnly: true)

        // 404: objectNotFound at once, one attempt, no retry.
        #expect(try eventually(seconds: 15) { try store.job(ids[2])?.state == .failed }, "\(worker.log)")
        let missing = try #require(try store.job(ids[2]))
        #expect(missing.error?.code == .objectNotFound)
        #expect(missing.error?.httpStatus == 404)
        #expect(missing.attempts == 1)
        #expect(try events(store, ids[2], .attemptFailed).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: directory.file("missing.bin")))

        // 503 with Retry-After: 2 → retried no sooner than 2 s later.
        #expect(try eventually(seconds: 15) { try !events(store, ids[0], .attemptFailed).isEmpty })
        let failure = try #require(try events(store, ids[0], .attemptFailed).first)
        #expect(failure.data.error?.httpStatus == 503)
        #expect(failure.data.error?.retryable == true)
        let retryAt = try #require(failure.data.retryAtMs)
        // retryAt is computed when the failure is seen; the event's time is its commit a moment later.
        // Without Retry-After the first backoff would be at most 1 s, so ≥ 1.9 s shows the header was honoured.
        #expect(retryAt - failure.atMs >= 1_900, "retry scheduled after \(retryAt - failure.atMs) ms")
        nginx.setFlaky(false)
        #expect(try eventually(seconds: 20) { try store.job(ids[0])?.state == .succeeded }, "\(worker.log)")
        let recovered = try #require(try store.job(ids[0]))
        #expect(recovered.attempts >= 2)
        let claims = try events(store, ids[0], .claimed)
        #expect(claims.count == recovered.attempts)
        if claims.count >= 2 { #expect(claims[1].atMs >= retryAt) }
        let bytes = try jobctl(["result", ids[0]], database: database)
        #expect(bytes.stdout == "flaky data")

        // /broken/ always answers 503: two attempts, then retryLimitExceeded carrying the last error.
        #expect(try eventually(seconds: 30) { try store.job(ids[1])?.state.isFinal == true }, "\(worker.log)")
        let exhausted = try #require(try store.job(ids[1]))
        #expect(exhausted.state == .failed)
        #expect(exhausted.error?.code == .retryLimitExceeded)
        #expect(exhausted.error?.httpStatus == 503)
        #expect(exhausted.error?.message.contains("503") == true || exhausted.error?.cause?.contains("503") == true,
                "\(String(describing: exhausted.error))")
        #expect(exhausted.attempts == 2)
        #expect(try events(store, ids[1], .attemptFailed).count == 1)
    }
}

@Suite("fencing and observing", .onTestThreads) struct FencingAndWatchTests {
    /// A worker frozen (SIGSTOP) past its lease loses the job to another worker; when it wakes, the store
    /// refuses its appends (stale lease token), so the job succeeds exactly once.
    @Test(arguments: WorkerEngine.allCases)
    func frozenWorkerCannotWriteAfterLosingItsLease(engine: WorkerEngine) throws {
        // Slow (8 s for the file) until the first worker is frozen; the rescuer's download runs fast.
        let nginx = try startWorkerNginx(slowRate: "1m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("fencing")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(8 << 20))
        let destination = directory.file("big.bin")
        let id = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", destination: \"\(destination)\"}\n",
                                         database: database, directory: directory).first)
        let frozen = try JobctlProcess.worker(database: database, ["--lease", "1"], logDirectory: directory.path)
        defer { frozen.signal(SIGKILL) }
        let store = try engine.reader(database)
        try #require(try eventually(seconds: 20) { (try store.job(id)?.bytesDone ?? 0) > 0 }, "\(frozen.log)")
        try frozen.freezeOutsideWrites(sqliteDatabase: engine == .sqlite ? database : nil)
        nginx.setFast(true)
        // The rescuer's own lease is long: a loaded machine that stalls it past a 1 s lease would let it
        // rescue its own job (a third claim), which is not what this test is about.
        let rescuer = try JobctlProcess.worker(database: database, ["--lease", "10", "--drain"], logDirectory: directory.path)
        #expect(rescuer.wait(seconds: 40) == 0, "\(rescuer.log)")
        #expect(try store.job(id)?.state == .succeeded)
        frozen.signal(SIGCONT)
        // Give the woken worker time to try to write (its transfer continues until it learns the lease is gone).
        usleep(3_000_000)
        frozen.signal(SIGTERM)
        #expect(frozen.wait(seconds: 10) != nil)
        let events = try store.events(jobID: id)
        #expect(events.filter { $0.type == .succeeded }.count == 1)
        #expect(events.filter { $0.type == .claimed }.count == 2)
        #expect(events.last?.type == .succeeded, "\(events.map(\.type))")
        let owners = events.filter { $0.type == .claimed }.compactMap(\.data.leaseOwner)
        let winner = events.first { $0.type == .succeeded }?.actor
        #expect(winner == owners.last)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == Data(contentsOf: URL(fileURLWithPath: "\(nginx.root)/slow/big.bin")))
        #expect(try store.replay(verify: true).isConsistent)
    }

    /// `watch` follows a job from another process as JSON lines (output is not a terminal) and exits 0
    /// on success; `result` prints a memory download's bytes and a fetched URL.
    @Test(arguments: WorkerEngine.allCases)
    func watchAndResult(engine: WorkerEngine) throws {
        let directory = try TemporaryDirectory("watch")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let ids = try submit("""
        - {kind: upload-data, data: "watched bytes", destination: "file://w/a.txt", priority: 2}
        - {kind: download-memory, source: "file://w/a.txt", max_size: 1KiB, priority: 1}
        - {kind: fetch-url, source: "file://w/a.txt"}
        - {kind: download-memory, source: "file://w/a.txt", max_size: 4}
        """, database: database, directory: directory)
        let watcher = try JobctlProcess(database: database, arguments: ["watch", ids[0]], logDirectory: directory.path)
        let failedWatcher = try JobctlProcess(database: database, arguments: ["watch", ids[3], "--on", "failure"], logDirectory: directory.path)
        usleep(200_000)
        let worker = try JobctlProcess.worker(database: database, ["--drain", "--concurrency", "1"],
                                              environment: ["JOBCTL_BUCKETS": directory.file("buckets")],
                                              logDirectory: directory.path)
        // Exit 2: the oversized memory download it ran ended failed.
        #expect(worker.wait(seconds: 30) == 2, "\(worker.log)")
        #expect(watcher.wait(seconds: 10) == 0, "\(watcher.log)")
        let lines = watcher.log.split(separator: "\n").compactMap { line in
            try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        }
        let statuses = lines.compactMap { $0["status"] as? String }
        #expect(statuses.first == "resume", "\(watcher.log)")
        #expect(statuses.last == "success", "\(watcher.log)")
        #expect(lines.allSatisfy { $0["job_id"] as? String == ids[0] })

        // The oversized memory download fails with downloadSizeExceeded; its watcher saw only 'failure' and exits 1.
        #expect(failedWatcher.wait(seconds: 10) == 1, "\(failedWatcher.log)")
        let failureLines = failedWatcher.log.split(separator: "\n").compactMap { line in
            try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        }
        #expect(failureLines.count == 1)
        #expect(failureLines.first?["status"] as? String == "failure")
        let store = try engine.reader(database)
        let tooBig = try #require(try store.job(ids[3]))
        #expect(tooBig.error?.code == .downloadSizeExceeded)
        #expect(tooBig.error?.total == 13)
        #expect(tooBig.error?.maximum == 4)

        let bytes = try jobctl(["result", ids[1]], database: database)
        #expect(bytes.status == 0)
        #expect(bytes.stdout == "watched bytes")
        let output = directory.file("copy.txt")
        #expect(try jobctl(["result", ids[1], "-o", output], database: database).status == 0)
        #expect(try String(contentsOfFile: output, encoding: .utf8) == "watched bytes")
        let url = try jobctl(["result", ids[2]], database: database)
        #expect(url.stdout.hasPrefix("file://"))
        #expect(url.stdout.contains("token="))
        let metadata = try jobctl(["result", ids[0]], database: database)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(metadata.stdout.utf8)) as? [String: Any])
        #expect(object["size"] as? Int == 13)
        #expect(object["content_type"] as? String == "text/plain")
    }
}

@Suite("upload control and signals", .onTestThreads) struct UploadControlTests {
    /// pause during a resumable upload keeps the session; resume continues from the server-confirmed
    /// offset (not from zero) and the object arrives whole.
    @Test func pauseAndResumeAResumableUpload() throws {
        let emulator = try EmulatorServer.start(bucket: "jobs-bucket")
        defer { emulator.stop() }
        let directory = try TemporaryDirectory("pause-upload")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let chunk = 1 << 20
        let size = 24 << 20
        let source = directory.file("upload.bin")
        try writePatternFile(source, size: Int64(size))
        let environment = ["STORAGE_EMULATOR_HOST": emulator.baseURL, "JOBCTL_CHUNK_SIZE": "\(chunk)"]
        let id = try #require(try submit("- {kind: upload-file, source: \"\(source)\", destination: \"gs://\(emulator.bucket)/p/upload.bin\"}\n",
                                         database: database, directory: directory).first)
        // Held to 4 MiB/s (6 s for the file): a wide window for the pause, however busy the machine.
        let worker = try JobctlProcess.worker(database: database, ["--bwlimit", "4M"], environment: environment, logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let store = try EventStore(path: database, readOnly: true)
        try #require(try eventually(seconds: 30) { (try store.job(id)?.resumePoint?.bytesDone ?? 0) >= Int64(chunk) }, "\(worker.log)")
        #expect(try jobctl(["pause", id], database: database).status == 0)
        #expect(try eventually(seconds: 5) { try store.job(id)?.state == .paused })
        let paused = try #require(try store.job(id))
        guard case .upload(let session, let offset, _, _)? = paused.resumePoint else {
            Issue.record("no upload resume point after pause: \(String(describing: paused.resumePoint))")
            return
        }
        #expect(!session.isEmpty)
        #expect(offset > 0)
        #expect(offset < Int64(size), "the upload finished before the pause; the test proves nothing")
        let asked = try #require(try store.events(jobID: id).first { $0.type == .pauseRequested })
        let stopped = try #require(try store.events(jobID: id).first { $0.type == .paused })
        #expect(stopped.atMs - asked.atMs < 1000)

        #expect(try jobctl(["resume", id], database: database).status == 0)
        #expect(try eventually(seconds: 60) { try store.job(id)?.state == .succeeded }, "\(worker.log)")
        let events = try store.events(jobID: id)
        let resumedClaim = try #require(events.lastIndex { $0.type == .claimed })
        let firstAfter = try #require(events[resumedClaim...].first { $0.type == .progress && $0.data.resumePoint != nil })
        #expect((firstAfter.data.resumePoint?.bytesDone ?? 0) >= offset, "restarted below the paused offset")
        if case .upload(let resumedSession, _, _, _)? = firstAfter.data.resumePoint {
            #expect(resumedSession == session, "a new session was started instead of resuming")
        }
        #expect(try store.job(id)?.result?.object?.size == Int64(size))
    }

    /// A second SIGTERM/SIGINT exits at once (exit 130) while the graceful stop is still under way.
    ///
    /// The graceful stop must not be able to finish first (aborting a stalled transfer is quick, and
    /// a stop that finished would exit 0 before the second signal came): another SQLite client holds
    /// the write lock, so the `released` event the stop has to commit waits — the worker is genuinely
    /// in the middle of its graceful stop when the second signal arrives, and the log proves it after.
    @Test func secondSignalExitsAtOnce() throws {
        let listener = try SilentListener()
        defer { listener.close() }
        let directory = try TemporaryDirectory("second-signal")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let id = try #require(try submit("- {kind: download-memory, source: \"http://127.0.0.1:\(listener.port)/never\"}\n",
                                         database: database, directory: directory).first)
        let worker = try JobctlProcess.worker(database: database, logDirectory: directory.path)
        let store = try EventStore(path: database, readOnly: true)
        try #require(try eventually(seconds: 20) { try store.events(jobID: id).contains { $0.type == .started } }, "\(worker.log)")
        let lock = try SQLiteWriteLock(database: database)
        var locked = true
        defer { if locked { lock.release() } }
        worker.signal(SIGINT)
        #expect(eventually(seconds: 5) { worker.log.contains("again to exit at once") })
        worker.signal(SIGINT)
        #expect(worker.wait(seconds: 3) == 130, "\(worker.log)")
        #expect(worker.log.contains("signal_received signal=") && worker.log.contains("action=\"exiting now\""))
        lock.release()
        locked = false
        // The graceful stop never committed: the job was still being handed back when the worker left.
        let events = try store.events(jobID: id)
        #expect(!events.contains { $0.type == .released }, "the graceful stop finished first: \(events.map(\.type))")
        #expect(try store.job(id)?.state == .running)
    }

    /// SIGTERM at the very start of a worker — as soon as `main` runs, before the store is even
    /// open — stops it cleanly (exit 0), never the default action (killed by SIGTERM, 143).
    ///
    /// The test waits until the process has SIGTERM/SIGINT blocked (visible in /proc), then signals at
    /// once. Blocking them is the first thing `main` does, so the signal lands before the worker has
    /// opened its database: the runs count how often that was so, and at least one must be. (A worker
    /// that blocked them only while installing its handlers — after opening the store — has no such
    /// run: that was the bug.) A signal during the dynamic loader, before `main`, is out of any
    /// program's reach.
    @Test func sigtermAtStartStopsCleanly() throws {
        let directory = try TemporaryDirectory("early-signal")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        // Only submit and migrate create a database; the worker refuses a missing one.
        #expect(try jobctl(["migrate"], database: database).status == 0)
        var signalledBeforeTheStoreOpened = 0
        for run in 1...10 {
            // Started as a shell starts it: no signal blocked (a test thread's own mask must not leak in).
            let worker = try JobctlProcess.worker(database: database, logDirectory: directory.path, cleanSignalMask: true)
            let pid = worker.process.processIdentifier
            let deadline = Date().addingTimeInterval(5)
            while !(runsJobctl(pid: pid) && shutdownSignalsBlocked(pid: pid)), worker.process.isRunning, Date() < deadline {
                usleep(100)
            }
            try #require(shutdownSignalsBlocked(pid: pid), "run \(run): the worker never blocked SIGTERM/SIGINT: \(worker.log)")
            if !hasOpenFile(pid: pid, prefix: database) { signalledBeforeTheStoreOpened += 1 }
            worker.signal(SIGTERM)
            let status = worker.wait(seconds: 10)
            #expect(worker.process.terminationReason == .exit && status == 0,
                    "run \(run): \(worker.process.terminationReason == .exit ? "exit" : "killed by signal") \(String(describing: status)): \(worker.log)")
        }
        #expect(signalledBeforeTheStoreOpened >= 1, "every signal came after the worker had opened its store")
    }

    /// `watch --all --exit-when-idle` follows every job's events as JSON lines and exits once idle.
    @Test func watchAllFollowsEveryJob() throws {
        let directory = try TemporaryDirectory("watch-all")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        _ = try jobctl(["migrate"], database: database)
        let watcher = try JobctlProcess(database: database, arguments: ["watch", "--all", "--on", "success"], logDirectory: directory.path)
        defer { watcher.signal(SIGKILL) }
        usleep(300_000)
        let ids = try submit("""
        - {kind: upload-data, data: one, destination: "file://all/1.txt"}
        - {kind: upload-data, data: two, destination: "file://all/2.txt"}
        - {kind: upload-data, data: three, destination: "file://all/3.txt"}
        """, database: database, directory: directory)
        let worker = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        #expect(worker.wait(seconds: 30) == 0)
        #expect(eventually(seconds: 5) { watcher.log.split(separator: "\n").count >= 3 })
        let lines = watcher.log.split(separator: "\n").compactMap { line in
            try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        }
        #expect(Set(lines.compactMap { $0["job_id"] as? String }) == Set(ids))
        #expect(lines.allSatisfy { $0["status"] as? String == "success" })
        let idle = try JobctlProcess(database: database, arguments: ["watch", "--all", "--exit-when-idle"], logDirectory: directory.path)
        #expect(idle.wait(seconds: 5) == 0)
    }
}

@Suite("watch on a terminal", .onTestThreads) struct WatchTerminalTests {
    /// On a terminal (a pseudo-terminal from `script`), `watch` draws a progress bar with bytes, rate and
    /// ETA, redrawn in place and never wider than the terminal, then the outcome; the ETA reads as
    /// minutes and seconds, not raw seconds; with NO_COLOR there are no colour codes.
    /// What `watch` of a download of `mebibytes` MiB from nginx at 2 MB/s drew on a pseudo-terminal
    /// (`script`) `columns` wide, run with `environment`; a worker drains the job meanwhile.
    private func watchedOnATerminal(_ name: String, mebibytes: Int, columns: Int, environment: [String: String]) throws -> String {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory(name)
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(mebibytes << 20))
        let id = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", destination: \"\(directory.file("big.bin"))\"}\n",
                                         database: database, directory: directory).first)
        let worker = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path)
        let command = "stty cols \(columns) rows 20; exec \(PackagePaths.jobctlBinary) --db \(database) watch \(id)"
        let output = try runProcess("/usr/bin/script", ["-qfec", command, "/dev/null"], environment: environment)
        #expect(worker.wait(seconds: 30) == 0, "\(worker.log)")
        #expect(output.status == 0, "\(output.stdout)\(output.stderr)")
        return output.stdout
    }

    @Test func progressBarOnATerminal() throws {
        // 12 MiB at 2 MB/s: several progress events (the first comes one progress interval after
        // `started`), so the watcher has two samples for a rate and an ETA before the end.
        let columns = 64
        let screen = try watchedOnATerminal("watch-tty", mebibytes: 12, columns: columns,
                                            environment: ["NO_COLOR": "1", "TERM": "xterm", "COLUMNS": ""])
        #expect(screen.contains("resume"), "\(screen)")
        #expect(screen.contains("\r\u{1B}[2K["), "no in-place redraw: \(screen.debugDescription)")
        #expect(screen.contains("#"))
        #expect(screen.contains("%"))
        #expect(screen.contains("MiB/12 MiB"), "\(screen.debugDescription)")
        #expect(screen.contains("/s"))
        #expect(screen.contains("ETA"))
        // Every redraw and every line fits the terminal; ETAs read 45s / 6m14s / 1h02m.
        let lines = screen.replacingOccurrences(of: "\u{1B}[2K", with: "").split(whereSeparator: { $0 == "\r" || $0 == "\n" || $0 == "\r\n" })
        for line in lines { #expect(line.count <= columns, "\(line.count) > \(columns): \(line)") }
        // Progress lines only: a job id (a ULID) can itself contain the letters "ETA".
        for line in lines where line.contains(" ETA ") && line.contains("/s") {
            #expect(line.range(of: #"ETA (\d{1,2}s|\d+m\d\ds|\d+h\d\dm)$"#, options: .regularExpression) != nil, "\(line)")
        }
        #expect(screen.contains("succeeded"))
        #expect(!screen.contains("\u{1B}[32m"), "colour despite NO_COLOR")
        #expect(!screen.contains("{\""), "JSON on a terminal")
    }

    /// `TERM=dumb` (Emacs' shell buffers, some CI consoles) takes no escape sequences: the bar is redrawn
    /// with a carriage return alone, a shorter line padded with spaces over the longer one before it.
    /// It was drawn with ESC[2K, which such a terminal shows as text.
    @Test func progressBarOnADumbTerminalHasNoEscapes() throws {
        let columns = 50
        let screen = try watchedOnATerminal("watch-dumb", mebibytes: 8, columns: columns,
                                            environment: ["NO_COLOR": "", "TERM": "dumb", "COLUMNS": ""])
        #expect(screen.contains("MiB/8 MiB"), "no progress bar: \(screen.debugDescription)")
        #expect(!screen.contains("\u{1B}"), "escape sequences on a dumb terminal: \(screen.debugDescription)")
        #expect(screen.contains("succeeded"))
        // Redraws of one line: each covers what the one before it showed (its text up to the spaces
        // that pad it over an earlier, longer one), and fits the terminal.
        for line in screen.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            let draws = line.split(separator: "\r", omittingEmptySubsequences: true)
            for draw in draws { #expect(draw.count <= columns, "\(draw.count) > \(columns): \(draw)") }
            for (before, after) in zip(draws, draws.dropFirst()) {
                let shown = before.count - before.reversed().prefix { $0 == " " }.count
                #expect(after.count >= shown, "'\(after)' leaves the end of '\(before)' on the screen")
            }
        }
    }
}
