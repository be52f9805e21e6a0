import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// What the commands print, in detail: exit codes, limits, one JSON shape, terminal behaviour, and
/// messages that say exactly what happened.
@Suite("output details", .onTestThreads) struct OutputDetailTests {
    // MARK: - Exit codes

    /// `worker --drain` exits 2 when a job it ran failed, so `submit && worker --drain` works in scripts.
    @Test func drainExitsTwoWhenAJobFailed() throws {
        let workspace = try CLIWorkspace("drain-exit")
        defer { workspace.directory.remove() }
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        _ = try workspace.submit("""
        - {kind: upload-data, data: fine, destination: "file://drain/ok.txt"}
        - {kind: download-memory, source: "http://\(closed.hostAndPort)/missing", max_attempts: 1}
        """)
        let failed = try workspace.jobctl(["worker", "--drain", "--json"])
        #expect(failed.status == 2, "\(failed.stderr)")
        let summary = try #require(try JSONSerialization.jsonObject(with: Data(failed.stdout.utf8)) as? [String: Any])
        #expect(summary["failed"] as? Int == 1)
        #expect(summary["succeeded"] as? Int == 1)
        #expect(failed.stderr.contains("1 job ended failed (exit 2)"), "\(failed.stderr)")

        _ = try workspace.submit("- {kind: upload-data, data: fine, destination: \"file://drain/ok2.txt\"}\n")
        let succeeded = try workspace.jobctl(["worker", "--drain"])
        #expect(succeeded.status == 0, "\(succeeded.stderr)")

        for help in [try workspace.jobctl(["--help"]), try workspace.jobctl(["help", "worker"])] {
            #expect(help.stdout.contains("EXIT CODES:"))
            #expect(help.stdout.contains("2    worker --drain: finished, but a job it ran ended failed"))
        }
    }

    // MARK: - list

    @Test func listSaysWhatItLeavesOut() throws {
        let workspace = try CLIWorkspace("list-limit")
        defer { workspace.directory.remove() }
        let jobs = (0..<55).map { "- {kind: upload-data, data: \"\($0)\", destination: \"file://many/\($0).txt\"}" }
        _ = try workspace.submit(jobs.joined(separator: "\n") + "\n")
        let table = try workspace.jobctl(["list"])
        #expect(table.stdout.split(separator: "\n").count == 51)
        #expect(table.stderr.contains("showing 50 of 55 jobs; --limit 0 for all"), "\(table.stderr)")
        let all = try workspace.jobctl(["list", "--limit", "0"])
        #expect(all.stdout.split(separator: "\n").count == 56)
        #expect(all.stderr.isEmpty)
        // --json has no default limit: scripts get every job.
        let json = try workspace.jobctl(["list", "--json"])
        #expect((try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [Any])?.count == 55)
        #expect(json.stderr.isEmpty)
        let limited = try workspace.jobctl(["list", "--json", "--limit", "10"])
        #expect((try JSONSerialization.jsonObject(with: Data(limited.stdout.utf8)) as? [Any])?.count == 10)
        #expect(limited.stderr.contains("showing 10 of 55 jobs"))
    }

    /// The table fits the terminal (its own width, or COLUMNS), and the source → destination column
    /// keeps both sides visible, each elided in its middle.
    @Test func listFitsTheTerminal() throws {
        let workspace = try CLIWorkspace("list-width")
        defer { workspace.directory.remove() }
        let destination = workspace.directory.file("downloads/a/rather/deep/tree/of/folders/for/the/final-destination.bin")
        _ = try workspace.submit("""
        - {kind: download-file, source: "https://downloads.example.com/releases/2026/very/long/path/source-archive.tar.gz", destination: "\(destination)"}
        """)
        for columns in [120, 100, 80] {
            let screen = try workspace.jobctlOnTerminal(["list"], columns: columns)
            #expect(screen.status == 0, "\(screen.stdout)")
            let lines = terminalLines(screen.stdout).filter { $0.contains("download-file") || $0.contains("→") }
            #expect(!lines.isEmpty, "\(screen.stdout)")
            for line in lines {
                #expect(line.count <= columns, "\(columns) columns: \(line)")
            }
            let row = try #require(lines.last)
            // Both sides keep their start and their end.
            #expect(row.range(of: #"https:/\S*….*\.gz → /tmp\S*….*\.bin"#, options: .regularExpression) != nil, "\(row)")
        }
        let piped = try workspace.jobctl(["list"], environment: ["COLUMNS": "90"])
        #expect(piped.stdout.split(separator: "\n").allSatisfy { $0.count <= 90 }, "\(piped.stdout)")
        // Without a terminal or COLUMNS nothing is cut.
        let whole = try workspace.jobctl(["list"])
        #expect(whole.stdout.contains("final-destination.bin"))
        #expect(whole.stdout.contains("very/long/path/source-archive.tar.gz"))
    }

    /// gs:// and file:// paths read as gsutil prints them (decoded) for people, encoded in JSON;
    /// counts are singular or plural as they should be; control characters never reach a terminal.
    @Test func pathsDecodedAndProperPlurals() throws {
        let workspace = try CLIWorkspace("decoded")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: upload-data, data: "x", destination: "gs://bucket/reports/annual report (final).pdf"}
        - {kind: upload-data, data: "xy", destination: "gs://bucket/odd/na%1Bme.txt"}
        """)
        let list = try workspace.jobctl(["list"])
        #expect(list.stdout.contains("<1 byte> → gs://bucket/reports/annual report (final).pdf"), "\(list.stdout)")
        #expect(list.stdout.contains("<2 bytes> → gs://bucket/odd/na%1Bme.txt"), "\(list.stdout)")
        #expect(!list.stdout.contains("\u{1B}"))
        let show = try workspace.jobctl(["show", ids[0]])
        #expect(show.stdout.contains("destination: gs://bucket/reports/annual report (final).pdf"), "\(show.stdout)")
        #expect(show.stdout.contains("1 byte inline"))
        let json = try workspace.jobctl(["show", ids[0], "--json"])
        #expect(json.stdout.contains("gs://bucket/reports/annual%20report%20%28final%29.pdf"), "\(json.stdout)")
        #expect(try workspace.jobctl(["submit", "--dry-run", workspace.write("one.yaml", "- {kind: upload-data, data: x, destination: \"gs://bkt/x\"}\n")])
            .stdout.contains("1 job valid"))
    }

    /// A local path's control characters read `\u{1B}`, as every outside text's do: they read `%1B`, so the
    /// files `pct%1B.txt` and `pct<ESC>.txt` printed alike in list, show and the -o refusals, and the
    /// path pasted back named the other file.
    @Test func localPathsKeepTheirPercentSigns() throws {
        let workspace = try CLIWorkspace("local-percent")
        defer { workspace.directory.remove() }
        let plain = try workspace.write("pct%1B.txt", "a")
        let escaped = try workspace.write("pct\u{1B}.txt", "b")
        let backslashed = try workspace.write("pct\\u{1B}.txt", "c")
        let ids = try workspace.submit("""
        - {kind: upload-file, source: "\(plain)", destination: "gs://bkt/a"}
        - {kind: upload-file, source: "\(escaped.replacingOccurrences(of: "\u{1B}", with: "\\e"))", destination: "gs://bkt/b"}
        - {kind: upload-file, source: '\(backslashed)', destination: "gs://bkt/c"}
        """)
        let list = try workspace.jobctl(["list"])
        #expect(list.stdout.contains("pct%1B.txt → gs://bkt/a") && list.stdout.contains("pct\\u{1B}.txt → gs://bkt/b")
                && list.stdout.contains("pct\\\\u{1B}.txt → gs://bkt/c"), "\(list.stdout)")
        #expect(!list.stdout.contains("\u{1B}"))
        let shown = try workspace.jobctl(["show", ids[1]])
        #expect(shown.stdout.contains("source:      \(workspace.directory.path)/pct\\u{1B}.txt"), "\(shown.stdout)")
    }

    /// What a job will do is all shown: `timeout:`, `checksums:`, `if_exists:` and `max_rate:` were stored
    /// and obeyed but missing from `show` and from every spec in JSON (a dry run's included).
    @Test func everyFieldOfTheSpecIsShown() throws {
        let workspace = try CLIWorkspace("spec-fields")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("fields.yaml", """
        - {kind: download-file, source: "gs://bkt/x", destination: out/x, timeout: 1h30m, checksums: [md5], if_exists: skip-identical, max_rate: 10M}
        - {kind: delete, destination: "gs://bkt/y", if_generation: 42}
        """)
        let dryRun = try #require(try workspace.json(["submit", "--dry-run", "--json", manifest]) as? [[String: Any]])
        let ids = try workspace.submit(String(contentsOfFile: manifest, encoding: .utf8))
        let shown = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        let history = try #require(try workspace.json(["history", ids[0], "--json"]) as? [[String: Any]])
        let submitted = (history.first?["data"] as? [String: Any])?["spec"] as? [String: Any]
        for spec in [dryRun.first, shown["spec"] as? [String: Any], submitted] {
            #expect(spec?["timeout_seconds"] as? Int == 5_400, "\(spec ?? [:])")
            #expect(spec?["checksums"] as? [String] == ["md5"], "\(spec ?? [:])")
            #expect(spec?["if_exists"] as? String == "skip-identical", "\(spec ?? [:])")
            #expect(spec?["max_rate"] as? Int == 10_485_760, "\(spec ?? [:])")
        }
        let text = try workspace.jobctl(["show", ids[0]]).stdout
        for line in ["timeout:", "1h30m", "checksums:", "md5", "if exists:", "skip-identical", "max rate:", "10 MiB/s"] {
            #expect(text.contains(line), "\(line) in \(text)")
        }
        #expect(try workspace.jobctl(["show", ids[1]]).stdout.contains("if generation: 42"))
    }

    /// A metadata operation moves no object's bytes: `show` said `bytes: 0 B (100%)` for a get-metadata
    /// of an object whose size the server did not give (beside its `object:` line's `size unknown`), and
    /// `bytes: 5 B (100%)` for one of a 5-byte object, as if it had been downloaded.
    @Test func aMetadataOperationShowsNoBytesMoved() throws {
        let workspace = try CLIWorkspace("metadata-bytes")
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        #expect(try workspace.jobctl(["submit", try workspace.write("one.yaml", "- {kind: upload-data, data: hello, destination: file://b/x.txt}\n")],
                                     environment: environment).status == 0)
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)
        let ids = try workspace.submit("- {kind: get-metadata, source: file://b/x.txt}\n")
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)
        let shown = try workspace.jobctl(["show", ids[0]])
        #expect(shown.status == 0 && shown.stdout.contains("state:      succeeded") && shown.stdout.contains("object:     b/x.txt (5 bytes"), "\(shown.stdout)")
        #expect(!shown.stdout.contains("bytes:"), "\(shown.stdout)")
    }

    /// An upload that `if_exists: skip` found in place succeeded with `skipped` in its logged result, which
    /// no view showed (the README promises `"skipped": true`), and the worker's line read `bytes=… rate=…`
    /// as if the file had been sent.
    @Test func aSkippedTransferSaysSoEverywhere() throws {
        let workspace = try CLIWorkspace("skipped-result")
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        let environment = ["JOBCTL_BUCKETS": buckets]
        let first = try workspace.jobctl(["submit", try workspace.write("one.yaml", "- {kind: upload-data, data: hello, destination: file://b/x.txt}\n")],
                                         environment: environment)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)
        let ids = try workspace.submit("- {kind: upload-data, data: other, destination: file://b/x.txt, if_exists: skip}\n")
        let id = try #require(ids.first)
        let drained = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(drained.status == 0, "\(drained.stderr)")
        let line = try #require(drained.stderr.split(separator: "\n").first { $0.contains(" succeeded \(id)") }, "\(drained.stderr)")
        #expect(line.contains("skipped=yes") && line.contains("moved_bytes=0") && !line.contains("rate="), "\(line)")
        let shown = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
        #expect((shown["result"] as? [String: Any])?["skipped"] as? Bool == true, "\(shown)")
        let result = try #require(try workspace.json(["result", id, "--json"]) as? [String: Any])
        #expect(result["skipped"] as? Bool == true, "\(result)")
        // The audit, read years later, tells a skip from a transfer too.
        let audited = try #require(try workspace.json(["audit", "--json"]) as? [[String: Any]])
        #expect(audited.first { $0["id"] as? String == id }?["skipped"] as? Bool == true, "\(audited)")
        #expect(audited.first { $0["id"] as? String != id }?["skipped"] == nil, "\(audited)")
        let csv = try workspace.jobctl(["audit", "--csv"]).stdout.split(separator: "\n")
        #expect(csv.first?.hasSuffix(",verified,skipped") == true, "\(csv)")
        #expect(csv.first { $0.hasPrefix(id) }?.hasSuffix(",true") == true, "\(csv)")
        #expect(csv.first { !$0.hasPrefix(id) && !$0.hasPrefix("id,") }?.hasSuffix(",") == true, "\(csv)")
        let text = try workspace.jobctl(["show", id]).stdout
        #expect(text.contains("skipped:") && text.contains("it was left as it is, and nothing of this job's was written there"), "\(text)")
        #expect(text.contains("none written (skipped)") && !text.contains("(100%)"), "\(text)")
        #expect(try String(contentsOfFile: buckets + "/b/x.txt", encoding: .utf8) == "hello")
        // A transfer that was not skipped has no such key.
        let listed = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        let other = try #require(listed.compactMap { $0["id"] as? String }.first { $0 != id })
        let sent = try #require(try workspace.json(["show", other, "--json"]) as? [String: Any])
        #expect((sent["result"] as? [String: Any])?["skipped"] == nil, "\(sent)")
    }

    // MARK: - One JSON shape

    /// Every key of every command's JSON is snake_case (user metadata keys are kept as given), and an
    /// error is the same object wherever it appears.
    @Test func oneJSONShapeEverywhere() throws {
        let workspace = try CLIWorkspace("json-shape")
        defer { workspace.directory.remove() }
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let worker = "worker:test:1"
        let metadata = UploadMetadata(contentType: "text/plain", customMetadata: ["ownerName": "ann"])
        let ids = try store.submit([
            JobSpec(kind: .uploadData, destination: "gs://bucket/a.txt", data: Data("hello".utf8), metadata: metadata, maxAttempts: 1),
            JobSpec(kind: .downloadFile, source: "gs://bucket/b.bin", destination: "/tmp/b.bin"),
        ], actor: "cli:test", now: now).map(\.id)
        var claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 1_000, now: now).first)
        let error = StorageError(.unauthorized, "permission denied", httpStatus: 403, url: "https://h/x", cause: "Forbidden")
        try store.append(PendingEvent(jobID: claim.record.id, type: .started, actor: worker, leaseToken: claim.token), now: now)
        try store.append(PendingEvent(jobID: claim.record.id, type: .failed, actor: worker, leaseToken: claim.token,
                                      data: EventData(error: error)), now: now + 1)
        // The second job's worker dies: its lease expires and a rescue records it.
        claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 1_000, now: now + 2).first)
        _ = try store.rescueExpired(now: now + 10_000, actor: "worker:test:2")

        var documents: [(String, Any)] = []
        for arguments in [["list", "--json"], ["show", ids[0], "--json"], ["history", ids[0], "--json"], ["history", ids[1], "--json"],
                          ["audit", "--json"], ["replay", "--verify", "--json"], ["cancel", ids[1], "--json"]] {
            documents.append((arguments.joined(separator: " "), try workspace.json(arguments)))
        }
        let watch = try workspace.jobctl(["watch", ids[0]])
        for line in watch.stdout.split(separator: "\n") {
            documents.append(("watch", try JSONSerialization.jsonObject(with: Data(line.utf8))))
        }
        var errorShapes: [String: Set<String>] = [:]
        for (command, document) in documents {
            visit(document) { path, key, value in
                if !path.hasSuffix("custom_metadata") {
                    #expect(key.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "_" }, "\(command): key '\(key)' at \(path)")
                }
                if key == "error", let object = value as? [String: Any] { errorShapes[command] = Set(object.keys) }
            }
        }
        #expect(Set(errorShapes.values).count == 1, "\(errorShapes)")
        #expect(errorShapes.count >= 4, "\(errorShapes.keys)")
        #expect(errorShapes.values.first == ["code", "name", "message", "http_status", "url", "retryable", "retry_after", "cause", "total", "maximum"])
        let listed = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        let upload = try #require(listed.first { $0["id"] as? String == ids[0] })
        let custom = ((upload["spec"] as? [String: Any])?["metadata"] as? [String: Any])?["custom_metadata"] as? [String: String]
        #expect(custom == ["ownerName": "ann"])
        #expect(upload["created_at_ms"] as? Int64 == now || upload["created_at_ms"] as? Int == Int(now))

        // Text shows RFC 3339 times, never epoch milliseconds (older logs wrote them into reasons).
        let history = try workspace.jobctl(["history", ids[1]])
        #expect(history.stdout.contains("lease_expired"), "\(history.stdout)")
        #expect(history.stdout.range(of: #"\b1\d{12}\b"#, options: .regularExpression) == nil, "\(history.stdout)")
    }

    private func visit(_ value: Any, path: String = "", _ body: (String, String, Any) -> Void) {
        if let object = value as? [String: Any] {
            for (key, child) in object {
                body(path, key, child)
                visit(child, path: path + "/" + key, body)
            }
        } else if let array = value as? [Any] {
            for child in array { visit(child, path: path, body) }
        }
    }

    // MARK: - Messages

    /// A final failure never says it will be retried; a scheduled retry says when.
    @Test func retriesAreMentionedOnlyWhenScheduled() throws {
        let workspace = try CLIWorkspace("retry-wording")
        defer { workspace.directory.remove() }
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let ids = try workspace.submit("- {kind: download-memory, source: \"http://\(closed.hostAndPort)/down\", max_attempts: 1}\n")
        #expect(try workspace.jobctl(["worker", "--drain"]).status == 2)
        for arguments in [["show", ids[0]], ["show", ids[0], "--json"], ["history", ids[0]], ["history", ids[0], "--json"],
                          ["audit", "--csv"], ["watch", ids[0]], ["result", ids[0]]] {
            let output = try workspace.jobctl(arguments)
            #expect(!(output.stdout + output.stderr).contains("will be retried"), "\(arguments): \(output.stdout)\(output.stderr)")
        }
        let watch = try workspace.jobctlOnTerminal(["watch", ids[0]])
        #expect(!watch.stdout.contains("will be retried"), "\(watch.stdout)")
        #expect(watch.stdout.contains("could not connect"), "\(watch.stdout)")

        // A log written before this fix (and any storage message) carries the promise: it is not shown.
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let later = try store.submit([JobSpec(kind: .downloadMemory, source: "https://h.example/x", maxAttempts: 3)],
                                     actor: "cli:test", now: now)[0].id
        let claim = try #require(try store.claim(owner: "w", queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        let old = StorageError(.unknown, "the server answered 503 for https://h.example/x; the transfer will be retried",
                               httpStatus: 503, retryable: true)
        try store.append(PendingEvent(jobID: later, type: .attemptFailed, actor: "w", leaseToken: claim.token,
                                      data: EventData(error: old, retryAtMs: now + 3_600_000)), now: now)
        let scheduled = try workspace.jobctl(["show", later])
        #expect(scheduled.stdout.contains("the server answered 503 for https://h.example/x; attempt 2 of 3 at "), "\(scheduled.stdout)")
        #expect(!scheduled.stdout.contains("will be retried"))
    }

    /// A cancelled job says "cancelled" once, wherever it is shown.
    @Test func cancelledSaysItOnce() throws {
        let workspace = try CLIWorkspace("cancel-once")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("- {kind: upload-data, data: x, destination: \"file://c/x.txt\"}\n")
        #expect(try workspace.jobctl(["cancel", ids[0]]).status == 0)
        let watch = try workspace.jobctlOnTerminal(["watch", ids[0]])
        #expect(watch.stdout.contains("\(ids[0]) cancelled by cli:"), "\(watch.stdout)")
        for output in [watch, try workspace.jobctl(["show", ids[0]]), try workspace.jobctl(["history", ids[0]]),
                       try workspace.jobctl(["result", ids[0]])] {
            let text = output.stdout + output.stderr
            #expect(!text.contains("cancelled: cancelled"), "\(text)")
        }
    }

    /// A succeeded job has nothing left to resume: its resume point is not shown.
    @Test func succeededJobShowsNoResumePoint() throws {
        let workspace = try CLIWorkspace("resume-hidden")
        defer { workspace.directory.remove() }
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let id = try store.submit([JobSpec(kind: .uploadFile, source: "/tmp/a.bin", destination: "gs://bucket/a.bin")],
                                  actor: "cli:test", now: now)[0].id
        let claim = try #require(try store.claim(owner: "w", queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        let resume = ResumePoint.upload(sessionURI: "https://h/upload?upload_id=x", confirmedOffset: 1 << 20, total: 2 << 20)
        try store.append(PendingEvent(jobID: id, type: .progress, actor: "w", leaseToken: claim.token,
                                      data: EventData(bytesDone: 1 << 20, bytesTotal: 2 << 20, resumePoint: resume)), now: now)
        let paused = try workspace.jobctl(["show", id])
        #expect(paused.stdout.contains("resume at:"), "the fixture has no resume point: \(paused.stdout)")
        try store.append(PendingEvent(jobID: id, type: .succeeded, actor: "w", leaseToken: claim.token,
                                      data: EventData(result: JobResult(object: StorageObject(bucket: "bucket", name: "a.bin", size: 2 << 20),
                                                                        size: 2 << 20))), now: now + 1)
        let show = try workspace.jobctl(["show", id])
        #expect(!show.stdout.contains("resume at"), "\(show.stdout)")
        #expect(show.stdout.contains("bytes:       2 MiB of 2 MiB (100%)"), "\(show.stdout)")
        let json = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
        #expect(json["resume_point"] == nil)
    }

    /// On a terminal, `watch` shows the rate and the time left from the first `progress` event: the
    /// `started` event (bytes 0, or the resume offset, at its time) is the rate's first sample. The
    /// events are written with fixed times, so the figures are exact.
    @Test(arguments: [(Int64(0), Int64(1) << 20, Int64(1_000), "1 MiB/s  ETA 9s"),
                      (Int64(4) << 20, Int64(5) << 20, Int64(2_000), "512 KiB/s  ETA 10s")])
    func watchShowsTheTimeLeftFromTheFirstProgressEvent(startedAt: Int64, progressAt: Int64, afterMs: Int64, expected: String) throws {
        let workspace = try CLIWorkspace("watch-eta")
        defer { workspace.directory.remove() }
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let total: Int64 = 10 << 20
        let id = try store.submit([JobSpec(kind: .downloadFile, source: "gs://bucket/a.bin", destination: workspace.directory.file("a.bin"))],
                                  actor: "cli:test", now: now)[0].id
        let claim = try #require(try store.claim(owner: "w", queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        try store.append(PendingEvent(jobID: id, type: .started, actor: "w", leaseToken: claim.token,
                                      data: EventData(bytesDone: startedAt, bytesTotal: total)), now: now)
        try store.append(PendingEvent(jobID: id, type: .progress, actor: "w", leaseToken: claim.token,
                                      data: EventData(bytesDone: progressAt, bytesTotal: total)), now: now + afterMs)
        try store.append(PendingEvent(jobID: id, type: .succeeded, actor: "w", leaseToken: claim.token,
                                      data: EventData(result: JobResult(object: StorageObject(bucket: "bucket", name: "a.bin", size: total),
                                                                        size: total))), now: now + afterMs + 1)
        let watch = try workspace.jobctlOnTerminal(["watch", id], columns: 100)
        #expect(watch.status == 0, "\(watch.stdout)")
        let bar = terminalLines(watch.stdout).filter { $0.hasPrefix("[") && $0.contains("/10 MiB") }
        #expect(bar.count == 1 && bar.first?.hasSuffix(expected) == true, "\(bar)")
    }

    /// An upload the server refused (403) after the body was sent shows the bytes the server confirmed
    /// (none), not the bytes sent. Progress comes from Storage's transfer callbacks, which count bytes
    /// read into the request body: the CLI shows the server-confirmed offset instead.
    @Test func refusedUploadShowsNoProgress() throws {
        let nginx = try NginxServer.start(extraServerConfig: "location /forbidden/ { return 403; }")
        defer { nginx.stop() }
        let workspace = try CLIWorkspace("refused-upload")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
        - {kind: upload-data, data: "\(String(repeating: "a", count: 4096))", destination: "\(nginx.baseURL)/forbidden/a.txt"}
        """)
        #expect(try workspace.jobctl(["worker", "--drain"]).status == 2)
        let job = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        #expect(job["state"] as? String == "failed")
        #expect((job["error"] as? [String: Any])?["http_status"] as? Int == 403)
        #expect(job["bytes_done"] as? Int == 0, "\(job)")
        #expect(!(try workspace.jobctl(["list"])).stdout.contains("100%"))

        // Whether the callbacks reported the whole body before the 403 depends on timing; this job's
        // log holds exactly that case: everything sent, nothing confirmed, then the refusal.
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let id = try store.submit([JobSpec(kind: .uploadData, destination: "https://h.example/b/a.txt", data: Data(count: 4096))],
                                  actor: "cli:test", now: now)[0].id
        let claim = try #require(try store.claim(owner: "w", queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        try store.append(PendingEvent(jobID: id, type: .progress, actor: "w", leaseToken: claim.token,
                                      data: EventData(bytesDone: 4096, bytesTotal: 4096)), now: now)
        try store.append(PendingEvent(jobID: id, type: .failed, actor: "w", leaseToken: claim.token,
                                      data: EventData(bytesDone: 4096, bytesTotal: 4096,
                                                      error: StorageError(.unauthorized, "permission denied", httpStatus: 403))), now: now + 1)
        let list = try workspace.jobctl(["list", "--kind", "upload-data"])
        #expect(!list.stdout.contains("100%"), "\(list.stdout)")
        #expect(list.stdout.contains(" 0% "), "\(list.stdout)")
        let show = try workspace.jobctl(["show", id])
        #expect(show.stdout.contains("bytes:       0 B of 4 KiB confirmed (0%); 4 KiB sent"), "\(show.stdout)")
        let json = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
        #expect(json["bytes_done"] as? Int == 0)
        #expect(json["bytes_sent"] as? Int == 4096)
    }

    // MARK: - result

    /// `result` refuses to write binary bytes to a terminal (as curl does) unless asked with `-o -`;
    /// piped, the bytes arrive exactly; `-o FILE` works for every kind.
    @Test func resultOutput() throws {
        let workspace = try CLIWorkspace("result-output")
        defer { workspace.directory.remove() }
        let binary = Data([0, 1, 2, 0x1B, 0x5B, 0x32, 0x4A, 0xFF, 0xFE, 10])
        let ids = try workspace.submit("""
        - {kind: upload-data, data_base64: "\(binary.base64EncodedString())", destination: "file://r/bin.dat", priority: 3}
        - {kind: upload-data, data: "plain text\\n", destination: "file://r/text.txt", priority: 3}
        - {kind: download-memory, source: "file://r/bin.dat", priority: 2}
        - {kind: download-memory, source: "file://r/text.txt", priority: 2}
        - {kind: fetch-url, source: "file://r/text.txt", priority: 1}
        - {kind: download-file, source: "file://r/text.txt", destination: "out/text.txt", priority: 1}
        """)
        #expect(try workspace.jobctl(["worker", "--drain", "--concurrency", "1"]).status == 0)
        let (upload, binaryDownload, textDownload, fetch, download) = (ids[0], ids[2], ids[3], ids[4], ids[5])

        let refused = try workspace.jobctlOnTerminal(["result", binaryDownload])
        #expect(refused.status == 1, "\(refused.stdout)")
        #expect(refused.stdout.contains("binary output can mess up your terminal; use -o FILE or pipe it"), "\(refused.stdout)")
        #expect(!refused.stdout.contains("\u{1B}[2J"))
        let forced = try workspace.jobctlOnTerminal(["result", binaryDownload, "-o", "-"])
        #expect(forced.status == 0)
        let text = try workspace.jobctlOnTerminal(["result", textDownload])
        #expect(text.status == 0)
        #expect(text.stdout.contains("plain text"))

        let piped = try runProcess(PackagePaths.jobctlBinary, ["--db", workspace.database, "result", binaryDownload])
        #expect(piped.status == 0)
        #expect(Data(piped.stdout.utf8) == binary || piped.stdout.utf8.count >= binary.count)
        let file = workspace.directory.file("bytes.bin")
        #expect(try workspace.jobctl(["result", binaryDownload, "-o", file]).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == binary)

        // -o is honoured for every kind: the URL, the metadata JSON, the path.
        let urlFile = workspace.directory.file("url.txt")
        #expect(try workspace.jobctl(["result", fetch, "-o", urlFile]).status == 0)
        #expect(try String(contentsOfFile: urlFile, encoding: .utf8).hasPrefix("file://"))
        #expect(try String(contentsOfFile: urlFile, encoding: .utf8).contains("token="))
        let metadataFile = workspace.directory.file("metadata.json")
        #expect(try workspace.jobctl(["result", upload, "-o", metadataFile]).status == 0)
        let metadata = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: metadataFile))) as? [String: Any]
        #expect(metadata?["size"] as? Int == binary.count)
        #expect(metadata?["content_type"] != nil)
        let pathFile = workspace.directory.file("path.txt")
        #expect(try workspace.jobctl(["result", download, "-o", pathFile]).status == 0)
        #expect(try String(contentsOfFile: pathFile, encoding: .utf8).hasSuffix("out/text.txt\n"))
        let unwritable = try workspace.jobctl(["result", fetch, "-o", workspace.directory.file("no/such/dir/url.txt")])
        #expect(unwritable.status == 1)
        #expect(unwritable.stderr.contains("cannot write"))
    }
}
