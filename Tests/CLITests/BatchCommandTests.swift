import Foundation
import Testing
import TestSupport

/// Folders, globs and prefixes expanded at submit into batches, run by real workers against the GCS
/// emulator and `file://` buckets, read back by the official client; `--batch` on list, audit, watch and
/// the control commands; schedules from the command line.
@Suite(.onTestThreads) struct BatchCommandTests {
    private static var interop: String { "\(PackagePaths.root)/Tests/StorageTests/Fixtures/interop.py" }
    private static var python: String { "\(PackagePaths.venv)/bin/python" }

    /// The batch ids in `submit`'s "batch ID: N jobs from SOURCE" lines, in order.
    private func batches(_ stderr: String) -> [(id: String, count: Int, source: String)] {
        stderr.split(separator: "\n").compactMap { line in
            guard line.hasPrefix("batch "), let colon = line.firstIndex(of: ":") else { return nil }
            let id = String(line[line.index(line.startIndex, offsetBy: 6)..<colon])
            let rest = line[line.index(after: colon)...].split(separator: " ", maxSplits: 3)
            guard rest.count == 4, let count = Int(rest[0]) else { return nil }
            return (id, count, String(rest[3]))
        }
    }

    private func jsonArray(_ workspace: CLIWorkspace, _ arguments: [String]) throws -> [[String: Any]] {
        try #require(try workspace.json(arguments) as? [[String: Any]])
    }

    @Test(arguments: StoreEngine.allCases)
    func aFolderUploadsAsOneBatchThatTheOfficialClientReadsBack(engine: StoreEngine) throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let workspace = try CLIWorkspace("batch-upload", engine: engine)
        defer { workspace.directory.remove() }
        let files = ["photos/a.jpg": "first photo", "photos/2024/05/b c.jpg": "second photo, in a folder", "photos/skip.tmp": "no"]
        for (name, text) in files { try workspace.write(name, text) }
        let manifest = try workspace.write("up.yaml", """
        jobs:
          - kind: upload-file
            source: photos/
            destination: gs://\(server.bucket)/backup/
            exclude: ["*.tmp"]
            key: nightly
          - {kind: upload-data, data: alone, destination: gs://\(server.bucket)/alone.txt}
        """)
        try FileManager.default.createSymbolicLink(atPath: workspace.directory.file("photos/link.jpg"), withDestinationPath: "/etc/hostname")
        let environment = ["STORAGE_EMULATOR_HOST": server.baseURL, "HOME": workspace.directory.path]
        let dryRun = try workspace.jobctl(["submit", "--dry-run", manifest], environment: environment)
        #expect(dryRun.status == 0 && dryRun.stdout.contains(" jobs from \(workspace.directory.path)/photos/\n3 jobs valid; nothing submitted"),
                "\(dryRun.stdout)\(dryRun.stderr)")
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        #expect(submitted.stdout.split(separator: "\n").count == 3)
        // The link is not followed out of the folder: skipped, with a note at the job.
        #expect(submitted.stderr.contains("up.yaml:2:5: note: 'source' 'photos/': skipped 'link.jpg' (a symbolic link)"), "\(submitted.stderr)")
        let batch = try #require(batches(submitted.stderr).first, "\(submitted.stderr)")
        #expect(batch.count == 2 && batch.source == workspace.directory.path + "/photos/", "\(submitted.stderr)")

        let listed = try jsonArray(workspace, ["list", "--batch", batch.id.lowercased(), "--json"])
        #expect(listed.count == 2 && listed.allSatisfy { $0["batch"] as? String == batch.id })
        #expect(Set(listed.compactMap { $0["destination"] as? String })
                == ["gs://\(server.bucket)/backup/a.jpg", "gs://\(server.bucket)/backup/2024/05/b%20c.jpg"])

        let worker = try workspace.jobctl(["worker", "--drain", "--concurrency", "2"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")

        // The official client reads every object back, byte for byte, verifying the MD5 itself.
        for (name, text) in files where !name.hasSuffix(".tmp") {
            let object = "backup/" + name.dropFirst("photos/".count)
            let output = workspace.directory.file("read-back")
            let read = try runProcess(Self.python, [Self.interop, "read", server.bucket, String(object), output],
                                      environment: ["STORAGE_EMULATOR_HOST": server.baseURL])
            #expect(read.status == 0, "\(read.stderr.suffix(1000))")
            #expect(try String(contentsOfFile: output, encoding: .utf8) == text)
        }
        let skipped = try runProcess(Self.python, [Self.interop, "read", server.bucket, "backup/skip.tmp", "/dev/null"],
                                     environment: ["STORAGE_EMULATOR_HOST": server.baseURL])
        #expect(skipped.status == 2, "the excluded file was not uploaded")

        // The audit shows what the folder meant when it was submitted.
        let audit = try jsonArray(workspace, ["audit", "--batch", batch.id, "--json"])
        #expect(audit.count == 2 && audit.allSatisfy { $0["state"] as? String == "succeeded" })
        let origin = try #require(audit.first?["batch"] as? [String: Any])
        #expect(origin["source"] as? String == workspace.directory.path + "/photos/")
        #expect(origin["exclude"] as? [String] == ["*.tmp"])
        let csv = try workspace.jobctl(["audit", "--batch", batch.id, "--csv"])
        #expect(csv.stdout.split(separator: "\n").dropFirst().allSatisfy { $0.hasSuffix(",\(batch.id),\(workspace.directory.path)/photos/,crc32c,") },
                "\(csv.stdout)")
        let id = try #require(listed.first?["id"] as? String)
        let history = try jsonArray(workspace, ["history", id, "--json"])
        let spec = (history.first?["data"] as? [String: Any])?["spec"] as? [String: Any]
        #expect((spec?["batch"] as? [String: Any])?["id"] as? String == batch.id)
        let show = try workspace.jobctl(["show", id])
        #expect(show.stdout.contains("batch:") && show.stdout.contains(batch.id) && show.stdout.contains("expanded from:"), "\(show.stdout)")

        // Submitting the keyed manifest again maps to the same jobs and the same batch.
        let again = try workspace.jobctl(["submit", manifest, "--json"], environment: environment)
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [[String: Any]])
        #expect(rows.prefix(2).allSatisfy { $0["created"] as? Bool == false && $0["batch"] as? String == batch.id }, "\(again.stdout)")
        #expect(try workspace.jobctl(["replay", "--verify"]).status == 0)
    }

    /// A glob uploads to a plain HTTP folder (nginx PUT), each file under its path below the glob's folder,
    /// the URL's query kept on every request.
    @Test func aGlobUploadsIntoAnHTTPFolderOnNginx() throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let workspace = try CLIWorkspace("batch-nginx")
        defer { workspace.directory.remove() }
        try workspace.write("logs/2026/11/app.log", "eleven")
        try workspace.write("logs/2026/12/app.log", "twelve")
        try workspace.write("logs/2026/12/app.txt", "not a log")
        let manifest = try workspace.write("m.yaml", """
        - kind: upload-file
          source: "logs/**/*.log"
          destination: "\(server.baseURL)/archive/?v=1"
        """)
        let submitted = try workspace.jobctl(["submit", manifest])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        #expect(batches(submitted.stderr).map(\.count) == [2], "\(submitted.stderr)")
        let destinations = try jsonArray(workspace, ["list", "--json"]).compactMap { $0["destination"] as? String }.sorted()
        #expect(destinations == ["\(server.baseURL)/archive/2026/11/app.log?v=1", "\(server.baseURL)/archive/2026/12/app.log?v=1"])
        let worker = try workspace.jobctl(["worker", "--drain"])
        #expect(worker.status == 0, "\(worker.stderr)")
        let stored = { (path: String) in try? String(contentsOfFile: server.root + "/archive/" + path, encoding: .utf8) }
        #expect(stored("2026/11/app.log") == "eleven" && stored("2026/12/app.log") == "twelve")
        #expect(stored("2026/12/app.txt") == nil)
        #expect(!server.accessLogLines(atLeast: 1, matching: { $0.contains("PUT /archive/2026/11/app.log?v=1") }).isEmpty, "\(server.accessLog)")
    }

    /// A folder or glob is listed at submit without its links; a file or subfolder swapped for a link
    /// after that (by whoever may write to the folder being backed up) was opened through the link when
    /// the job ran, so a root worker uploaded `/etc/shadow`. Each is refused now, on `file://` (its own
    /// copy) and on HTTP (the network backends' source); the folder named (here through a link) is
    /// still followed, as every path a user writes is.
    @Test func linksPlacedInAFolderAfterSubmitAreNotUploaded() throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let workspace = try CLIWorkspace("batch-links")
        defer { workspace.directory.remove() }
        try workspace.write("docs/a.txt", "a, listed")
        try workspace.write("docs/c.txt", "c, listed")
        try workspace.write("docs/sub/b.txt", "b, listed")
        try workspace.write("outside/secret.txt", "S3CRET-OUTSIDE")
        try workspace.write("outside/b.txt", "S3CRET-B")
        try FileManager.default.createSymbolicLink(atPath: workspace.directory.file("docslink"), withDestinationPath: "docs")
        let manifest = try workspace.write("m.yaml", """
        - {kind: upload-file, source: docs/, destination: "file://b/backup/", max_attempts: 1}
        - {kind: upload-file, source: "docslink/**/*.txt", destination: "\(server.baseURL)/archive/", max_attempts: 1}
        """)
        let submitted = try workspace.jobctl(["submit", manifest])
        #expect(submitted.status == 0 && batches(submitted.stderr).map(\.count) == [3, 3], "\(submitted.stderr)")
        let docs = workspace.directory.file("docs")
        try FileManager.default.removeItem(atPath: docs + "/a.txt")
        try FileManager.default.createSymbolicLink(atPath: docs + "/a.txt", withDestinationPath: workspace.directory.file("outside/secret.txt"))
        try FileManager.default.removeItem(atPath: docs + "/sub")
        try FileManager.default.createSymbolicLink(atPath: docs + "/sub", withDestinationPath: workspace.directory.file("outside"))

        let worker = try workspace.jobctl(["worker", "--drain"])
        #expect(worker.status == 2, "\(worker.stderr)")
        let jobs = try jsonArray(workspace, ["list", "--json"])
        let byDestination = Dictionary(jobs.compactMap { job in (job["destination"] as? String).map { ($0, job) } }) { a, _ in a }
        for destination in ["file://b/backup/a.txt", "file://b/backup/sub/b.txt", "\(server.baseURL)/archive/a.txt", "\(server.baseURL)/archive/sub/b.txt"] {
            let job = try #require(byDestination[destination], "\(byDestination.keys.sorted())")
            #expect(job["state"] as? String == "failed", "\(destination): \(job)")
            let shown = try workspace.jobctl(["show", try #require(job["id"] as? String)])
            #expect(shown.stdout.contains("pathError") && shown.stdout.contains("was not followed"), "\(destination): \(shown.stdout)")
        }
        for destination in ["file://b/backup/c.txt", "\(server.baseURL)/archive/c.txt"] {
            #expect(byDestination[destination]?["state"] as? String == "succeeded", "\(destination): \(String(describing: byDestination[destination]))")
        }
        let bucket = workspace.directory.file("buckets/b/backup")
        #expect((try? String(contentsOfFile: bucket + "/c.txt", encoding: .utf8)) == "c, listed")
        #expect((try? String(contentsOfFile: server.root + "/archive/c.txt", encoding: .utf8)) == "c, listed")
        for path in [bucket + "/a.txt", bucket + "/sub/b.txt", server.root + "/archive/a.txt", server.root + "/archive/sub/b.txt"] {
            #expect(!FileManager.default.fileExists(atPath: path), "\(path) was written")
        }
    }

    @Test(arguments: StoreEngine.allCases)
    func prefixesDownloadIntoAFolderFromTheEmulatorAndAFileBucket(engine: StoreEngine) throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let workspace = try CLIWorkspace("batch-download", engine: engine)
        defer { workspace.directory.remove() }
        // Objects the official client wrote.
        for name in ["photos/a.txt", "photos/2024/b.txt", "elsewhere/c.txt"] {
            let source = try workspace.write("seed/" + name, "object " + name)
            let wrote = try runProcess(Self.python, [Self.interop, "write", server.bucket, name, source, "text/plain"],
                                       environment: ["STORAGE_EMULATOR_HOST": server.baseURL])
            #expect(wrote.status == 0, "\(wrote.stderr.suffix(1000))")
        }
        try workspace.write("buckets/demo/photos/x.txt", "local x")
        try workspace.write("buckets/demo/photos/deep/y.txt", "local y")
        try workspace.write("buckets/demo/other/z.txt", "not this")
        // A link in the bucket is no object: left out, and said so at the job's source.
        try FileManager.default.createSymbolicLink(atPath: workspace.directory.file("buckets/demo/photos/linked.txt"),
                                                   withDestinationPath: workspace.directory.file("buckets/demo/other/z.txt"))
        let environment = ["STORAGE_EMULATOR_HOST": server.baseURL, "HOME": workspace.directory.path,
                           "JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let manifest = try workspace.write("down.yaml", """
        jobs:
          - {kind: download-file, source: "gs://\(server.bucket)/photos/", destination: out/gcs/}
          - {kind: download-file, source: "file://demo/photos/", destination: out/local/}
        """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        #expect(batches(submitted.stderr).map(\.count) == [2, 2], "\(submitted.stderr)")
        #expect(batches(submitted.stderr).map(\.source) == ["gs://\(server.bucket)/photos/", "file://demo/photos/"])
        #expect(submitted.stderr.contains("down.yaml:3:35: note: 'source' 'file://demo/photos/': skipped 'photos/linked.txt' "
                                          + "(a symbolic link); a link in a bucket is never followed"), "\(submitted.stderr)")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        let read = { (path: String) in try? String(contentsOfFile: workspace.directory.file(path), encoding: .utf8) }
        #expect(read("out/gcs/a.txt") == "object photos/a.txt")
        #expect(read("out/gcs/2024/b.txt") == "object photos/2024/b.txt")
        #expect(read("out/local/x.txt") == "local x" && read("out/local/deep/y.txt") == "local y")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("out/gcs/c.txt")))
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("out/local/z.txt")))

        // A prefix that holds nothing, and a bucket that does not exist: errors at the job, nothing submitted.
        let before = try jsonArray(workspace, ["list", "--json"]).count
        let bad = try workspace.write("bad.yaml", """
        - {kind: download-file, source: "gs://\(server.bucket)/nothing/", destination: out/none/}
        - {kind: download-file, source: "gs://no-such-bucket/photos/", destination: out/none/}
        - {kind: upload-file, source: seed/, destination: "file://demo/copy/"}
        """)
        let refused = try workspace.jobctl(["submit", bad], environment: environment)
        #expect(refused.status == 65)
        #expect(refused.stderr.contains("bad.yaml:1:3: error: the prefix 'gs://\(server.bucket)/nothing/' holds no object"), "\(refused.stderr)")
        #expect(refused.stderr.contains("bad.yaml:2:33: error: cannot list the prefix 'gs://no-such-bucket/photos/': the bucket 'no-such-bucket' does not exist"),
                "\(refused.stderr)")
        #expect(refused.stderr.contains("Error: nothing was submitted"))
        #expect(try jsonArray(workspace, ["list", "--json"]).count == before)
    }

    /// A prefix download skipped every object whose name ends in `/`, also one holding data (only the
    /// zero-byte "folder" placeholders are meant), without a word; alone under its prefix, the prefix
    /// "held no object". Such an object cannot be a local file of its name: it is skipped with a note
    /// naming it, its size and why, and the placeholders are still skipped silently.
    @Test func anObjectWithDataWhoseNameEndsInASlashIsSkippedWithANote() throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let workspace = try CLIWorkspace("batch-slash")
        defer { workspace.directory.remove() }
        for (name, text) in [("k/keep/", "14 bytes of data"), ("k/other.txt", "x"), ("k/empty/", ""), ("only/report/", "the only object")] {
            // Written by the official client (the emulator drops a media upload of no bytes).
            let body = try workspace.write("seed-\(name.count)-\(text.count)", text)
            let wrote = try runProcess(Self.python, [Self.interop, "write", server.bucket, name, body, "application/octet-stream"],
                                       environment: ["STORAGE_EMULATOR_HOST": server.baseURL])
            #expect(wrote.status == 0, "\(name): \(wrote.stderr.suffix(1000))")
        }
        let environment = ["STORAGE_EMULATOR_HOST": server.baseURL, "HOME": workspace.directory.path]
        let manifest = try workspace.write("k.yaml", "jobs:\n  - {kind: download-file, source: \"gs://\(server.bucket)/k/\", destination: out/}\n")
        let listed = try workspace.jobctl(["submit", "--dry-run", manifest], environment: environment)
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.contains("gs://\(server.bucket)/k/other.txt → ") && listed.stdout.contains("1 job valid"), "\(listed.stdout)")
        #expect(listed.stderr.contains("k.yaml:2:35: note: 'source' 'gs://\(server.bucket)/k/': skipped the object 'k/keep/' (16 bytes): its "
                                       + "name ends in '/', which no local file's can, and it holds data, so it is no empty folder placeholder"),
                "\(listed.stderr)")
        #expect(!listed.stderr.contains("k/empty/"), "a placeholder is skipped without a word: \(listed.stderr)")
        let only = try workspace.write("only.yaml", "jobs:\n  - {kind: download-file, source: \"gs://\(server.bucket)/only/\", destination: out/}\n")
        let refused = try workspace.jobctl(["submit", "--dry-run", only], environment: environment)
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("only.yaml:2:35: note: 'source' 'gs://\(server.bucket)/only/': skipped the object 'only/report/' (15 bytes)"),
                "\(refused.stderr)")
        #expect(refused.stderr.contains("only.yaml:2:5: error: the prefix 'gs://\(server.bucket)/only/' holds no object"), "\(refused.stderr)")
    }

    /// Object names are cut at their `/` bytes, as the kernel and GCS cut them. A combining mark after a
    /// `/` joins it into another Character, and Character-wise cuts skipped `photos/\u{301}y` in a prefix
    /// download of `photos/` (not under it, Character by Character), kept `gs://b/%CC%81x`'s leading `/`
    /// (it asked for the object `/\u{301}x`), read `gs://b/\u{301}x` as a bucket named `b/\u{301}x`, and
    /// hid the `..` of `file://demo/../%CC%81x` until the worker refused the name.
    @Test func namesWithAMarkAfterASlashAreCutAtTheSlash() throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let workspace = try CLIWorkspace("batch-marks")
        defer { workspace.directory.remove() }
        let environment = ["STORAGE_EMULATOR_HOST": server.baseURL, "HOME": workspace.directory.path,
                           "JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        for (name, text) in [("photos/ok.txt", "fine"), ("photos/\u{301}y", "marked in photos"), ("\u{301}x", "marked")] {
            let source = try workspace.write("seed.bin", text)
            let wrote = try runProcess(Self.python, [Self.interop, "write", server.bucket, name, source, "text/plain"],
                                       environment: ["STORAGE_EMULATOR_HOST": server.baseURL])
            #expect(wrote.status == 0, "\(wrote.stderr.suffix(1000))")
        }
        let prefix = try workspace.write("prefix.yaml", "- {kind: download-file, source: \"gs://\(server.bucket)/photos/\", destination: out/}\n")
        let expanded = try workspace.jobctl(["submit", prefix], environment: environment)
        #expect(expanded.status == 0 && batches(expanded.stderr).map(\.count) == [2], "\(expanded.stderr)")

        try workspace.write("buckets/demo/a", "in the bucket")
        try workspace.write("buckets/\u{301}x", "beside the bucket")
        let climbing = try workspace.write("climbing.yaml", "- {kind: download-memory, source: \"file://demo/../%CC%81x\"}\n")
        let refused = try workspace.jobctl(["submit", climbing], environment: environment)
        #expect(refused.status == 65 && refused.stderr.contains("climbing.yaml:1:35: error:"), "\(refused.stderr)")
        #expect(refused.stderr.contains("contains a '..' segment"), "\(refused.stderr)")

        let single = try workspace.write("single.yaml", "- {kind: download-memory, source: \"gs://\(server.bucket)/%CC%81x\"}\n"
                                         + "- {kind: download-memory, source: \"gs://\(server.bucket)/\u{301}x\"}\n")
        let submitted = try workspace.jobctl(["submit", single], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        let read = { (path: String) in try? String(contentsOfFile: workspace.directory.file(path), encoding: .utf8) }
        #expect(read("out/ok.txt") == "fine" && read("out/\u{301}y") == "marked in photos")
        let jobs = try jsonArray(workspace, ["list", "--json"]).filter { $0["kind"] as? String == "download-memory" }
        #expect(jobs.count == 2 && jobs.allSatisfy { $0["state"] as? String == "succeeded" && $0["source"] as? String == "gs://\(server.bucket)/%CC%81x" },
                "\(jobs)")
    }

    @Test(arguments: StoreEngine.allCases)
    func bulkControlAndWatchSelectABatch(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("batch-control", engine: engine)
        defer { workspace.directory.remove() }
        for name in ["one/a.txt", "one/b.txt", "two/c.txt", "two/d/e.txt"] { try workspace.write(name, name) }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let manifest = try workspace.write("m.yaml", """
        - {kind: upload-file, source: one, destination: "file://demo/one/"}
        - {kind: upload-file, source: "two/**", destination: "file://demo/two/"}
        - {kind: upload-data, data: hi, destination: "file://demo/alone.txt"}
        """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = batches(submitted.stderr).map(\.id)
        #expect(ids.count == 2 && batches(submitted.stderr).map(\.count) == [2, 2], "\(submitted.stderr)")

        let dryRun = try workspace.jobctl(["cancel", "--batch", ids[0], "--dry-run"])
        #expect(dryRun.stdout.contains("dry run: cancel would change 2 of 2 jobs"), "\(dryRun.stdout)")
        let cancelled = try workspace.jobctl(["cancel", "--batch", ids[0]])
        #expect(cancelled.status == 0 && cancelled.stdout.contains("cancel: 2 of 2 jobs changed"), "\(cancelled.stdout)")
        #expect(try jsonArray(workspace, ["list", "--state", "cancelled", "--json"]).allSatisfy { $0["batch"] as? String == ids[0] })
        #expect(try jsonArray(workspace, ["list", "--state", "queued", "--json"]).count == 3)
        let paused = try workspace.jobctl(["pause", "--batch", ids[1], "--json"])
        #expect(paused.status == 0)
        let report = try #require(try JSONSerialization.jsonObject(with: Data(paused.stdout.utf8)) as? [String: Any])
        #expect(report["matched"] as? Int == 2 && report["changed"] as? Int == 2)
        #expect(try workspace.jobctl(["resume", "--batch", ids[1]]).status == 0)
        #expect(try workspace.jobctl(["retry", "--batch", ids[0]]).stdout.contains("retry: 2 of 2 jobs changed"))
        #expect(try workspace.jobctl(["cancel", "--batch", ids[0]]).status == 0)

        // Malformed ids are usage errors naming the option; ids and filters do not mix.
        for bad in [["list", "--batch", "nope"], ["cancel", "--batch", "01ARZ3NDEKTSV4RRFFQ69G5FA!"], ["audit", "--batch"],
                    ["watch", "--batch", ids[1], "--all"]] {
            let output = try workspace.jobctl(bad)
            #expect(output.status == 64, "\(bad): \(output.stderr)")
            #expect(output.stderr.contains("--batch"), "\(bad): \(output.stderr)")
        }
        let mixed = try workspace.jobctl(["pause", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--batch", ids[1]])
        #expect(mixed.status == 64 && mixed.stderr.contains("not both"))

        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)
        // watch --batch: the events of that batch's jobs only, then its outcome.
        let watched = try workspace.jobctl(["watch", "--batch", ids[1], "--json"])
        #expect(watched.status == 0, "\(watched.stderr)")
        let events = watched.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let batchJobs = Set(try jsonArray(workspace, ["list", "--batch", ids[1], "--json"]).compactMap { $0["id"] as? String })
        #expect(!events.isEmpty && events.allSatisfy { batchJobs.contains($0["job_id"] as? String ?? "") }, "\(watched.stdout)")
        #expect(events.filter { $0["status"] as? String == "success" }.count == 2, "\(watched.stdout)")
        #expect(try workspace.jobctl(["watch", "--batch", ids[0]]).status == 1, "a cancelled batch did not all succeed")
        // On a terminal: the batch as one bar below the event lines (jobs ended, of them failed, bytes).
        let shown = try workspace.jobctlOnTerminal(["watch", "--batch", ids[1]], columns: 100)
        #expect(shown.stdout.contains("[##############################] 100% 2/2 jobs, 20 B")
                && shown.stdout.contains("batch \(ids[1]): 2 jobs: 2 succeeded"), "\(shown.stdout)")
        let cancelledBatch = try workspace.jobctlOnTerminal(["watch", "--batch", ids[0]], columns: 100)
        #expect(cancelledBatch.stdout.contains("100% 2/2 jobs (2 failed)"), "\(cancelledBatch.stdout)")
        // A batch's id where a job's belongs says so (it said no job matches).
        for command in [["watch", ids[1]], ["show", ids[1]], ["cancel", ids[1]]] {
            let asJob = try workspace.jobctl(command)
            #expect(asJob.status == 1 && asJob.stderr.contains("'\(ids[1])' is the id of a batch of 2 jobs, not of a job: give it with --batch"),
                    "\(command): \(asJob.stderr)")
        }
        let unknown = try workspace.jobctl(["watch", "--batch", "01ARZ3NDEKTSV4RRFFQ69G5FAV"])
        #expect(unknown.status == 1 && unknown.stderr.contains("no job has the batch id"))
    }

    @Test func schedulesFromTheCommandLineAreRangeCheckedAndShown() throws {
        let workspace = try CLIWorkspace("schedule")
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("m.yaml", """
        - {kind: upload-data, data: a, destination: "file://demo/a"}
        - {kind: upload-data, data: b, destination: "file://demo/b", run_after: "2031-01-02T03:04:05Z"}
        """)
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let submitted = try workspace.jobctl(["submit", "--at", "2h", manifest])
        let after = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let jobs = try jsonArray(workspace, ["list", "--json"]).sorted { ($0["run_after_ms"] as? Int64 ?? 0) < ($1["run_after_ms"] as? Int64 ?? 0) }
        let held = try #require(jobs.first?["run_after_ms"] as? Int64)
        #expect(held >= before + 7_200_000 && held <= after + 7_200_000)
        // The manifest's own schedule wins over --at.
        #expect(jobs.last?["run_after"] as? String == "2031-01-02T03:04:05.000Z")
        let id = try #require(jobs.first?["id"] as? String)
        let show = try workspace.jobctl(["show", id])
        #expect(show.stdout.contains("runs at:"), "\(show.stdout)")
        #expect(try workspace.jobctl(["list"]).stdout.contains("RUNS AT"))

        // A time in the past runs at once.
        let past = try workspace.write("past.yaml", "- {kind: upload-data, data: c, destination: \"file://demo/c\"}\n")
        let ran = try workspace.jobctl(["submit", "--at", "2001-01-01T00:00:00Z", "--json", past])
        let row = try #require(try JSONSerialization.jsonObject(with: Data(ran.stdout.utf8)) as? [[String: Any]])
        let pastID = try #require(row.first?["id"] as? String)
        let pastJob = try #require(try workspace.json(["show", "--json", pastID]) as? [String: Any])
        #expect(pastJob["run_after_ms"] as? Int64 == pastJob["created_at_ms"] as? Int64)

        for bad in ["4000d", "yesterday", "10000-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "-5m", "99999999999999999999d",
                    "2027-02-30T00:00:00Z", "2027-01-01T00:00:00+99:00", "2027-01-01T24:00:00Z"] {
            let output = try workspace.jobctl(["submit", "--at", bad, past])
            #expect(output.status == 64, "--at \(bad): \(output.stderr)")
            #expect(output.stderr.contains("--at"), "--at \(bad): \(output.stderr)")
        }
    }
}
