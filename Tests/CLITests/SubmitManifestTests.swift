import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `jobctl submit` on manifests that used to crash it, be refused, pass unchecked or leak secrets.
@Suite("jobctl submit: manifest limits, sources, folders, secrets", .onTestThreads) struct SubmitManifestTests {
    // MARK: - Limits

    /// 50,000 levels of nesting: exit 65 with the position of the first collection past 64 levels, at once
    /// (this crashed with SIGSEGV before).
    @Test(arguments: [
        ("flow-sequences.yaml", String(repeating: "[", count: 50_000) + String(repeating: "]", count: 50_000) + "\n", "1:65"),
        ("flow-mappings.yaml", String(repeating: "{a: ", count: 50_000) + String(repeating: "}", count: 50_000) + "\n", "1:257"),
        ("block-sequences.yaml", String(repeating: "- ", count: 50_000) + "x\n", "1:129"),
        ("block-mappings.yaml", (0..<2_000).map { String(repeating: " ", count: $0) + "a:\n" }.joined(), "65:65"),
    ])
    func deepNestingExits65WithAPosition(_ name: String, _ text: String, _ position: String) throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let path = try workspace.write(name, text)
        let started = Date()
        let output = try workspace.jobctl(["submit", path])
        #expect(output.status == 65, "\(output.stderr.prefix(500))")
        #expect(output.stderr.contains("\(name):\(position): error: collections nest more than 64 levels deep here"),
                "\(output.stderr.prefix(500))")
        #expect(output.stderr.contains("Error: nothing was submitted"))
        #expect(output.stdout.isEmpty)
        // No line of the (one-line, 100 KB) manifest is printed whole.
        #expect(output.stderr.split(separator: "\n").allSatisfy { $0.count < 400 })
        // Generous: the refusal takes milliseconds; a parse quadratic in depth took seconds.
        #expect(Date().timeIntervalSince(started) < 30)
    }

    /// A nightly manifest of 100,000 upload-file jobs, no alias anywhere: submitted in one transaction.
    @Test func aHundredThousandJobManifestSubmits() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        var text = "defaults:\n  queue: nightly\n  check_source: false\njobs:\n"
        text.reserveCapacity(11_000_000)
        for index in 0..<100_000 {
            text += "  - kind: upload-file\n    source: files/f\(index).csv\n    destination: gs://nightly/2026-11-29/\n"
        }
        let path = try workspace.write("nightly.yaml", text)
        let started = Date()
        let output = try workspace.jobctl(["submit", path])
        let elapsed = Date().timeIntervalSince(started)
        #expect(output.status == 0, "\(output.stderr.prefix(500))")
        #expect(output.stdout.split(separator: "\n").count == 100_000)
        // Generous, so it cannot flake; a submit quadratic in jobs would take hours.
        #expect(elapsed < 180, "submit of 100,000 jobs took \(elapsed) s")
        let newest = try #require(try workspace.json(["list", "--limit", "1", "--json"]) as? [[String: Any]])
        #expect(newest.first?["destination"] as? String == "gs://nightly/2026-11-29/f99999.csv")
    }

    /// A manifest of 5,000 errors prints the first 100 (each with its line and caret), says how many
    /// more there are, counts them all, exits 65 and stores nothing; so do keys repeated across
    /// manifests. Every error used to be printed (200,000 took about a minute to make and print).
    @Test func onlyTheFirstHundredErrorsArePrinted() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let path = try workspace.write("many.yaml", "jobs:\n" + String(repeating: "  - {kind: bogus, source: gs://bkt/x}\n", count: 5_000))
        let output = try workspace.jobctl(["submit", path])
        #expect(output.status == 65, "\(output.stderr.prefix(500))")
        #expect(output.stdout.isEmpty)
        let lines = output.stderr.split(separator: "\n").map(String.init)
        let diagnostics = lines.filter { $0.contains(": error: ") }
        #expect(diagnostics.count == 100)
        #expect(diagnostics.first?.hasPrefix("\(path):2:12: error: unknown kind 'bogus'") == true, "\(diagnostics.first ?? "")")
        #expect(diagnostics.last?.hasPrefix("\(path):101:12: error: unknown kind 'bogus'") == true, "\(diagnostics.last ?? "")")
        #expect(lines.suffix(3) == ["4900 more errors not shown after the first 100; fix these and run it again to see the next",
                                    "5000 errors generated.", "Error: nothing was submitted"], "\(lines.suffix(3))")
        #expect(!FileManager.default.fileExists(atPath: workspace.database))

        let keyed = (0..<150).map { "- {kind: upload-data, data: x, destination: \"file://b/\($0)\", key: k\($0)}\n" }.joined()
        let first = try workspace.write("one.yaml", keyed)
        let second = try workspace.write("two.yaml", keyed)
        let twice = try workspace.jobctl(["submit", first, second])
        #expect(twice.status == 65, "\(twice.stderr.prefix(500))")
        let repeated = twice.stderr.split(separator: "\n").map(String.init)
        #expect(repeated.filter { $0.contains(": error: idempotency key ") }.count == 100)
        #expect(repeated.suffix(2) == ["50 more errors not shown after the first 100; fix these and run it again to see the next",
                                       "Error: nothing was submitted"], "\(repeated.suffix(2))")
        #expect(!FileManager.default.fileExists(atPath: workspace.database))
    }

    // MARK: - Keys made by expansion

    /// A folder job's key K gives its files' jobs K/PATH; one of those equal to another job's key (or a
    /// key repeated in a second manifest) is an error at the job, and nothing is submitted. It used to
    /// reach the log, which refused it "already names job 01M…" — a job that was never submitted.
    @Test func aKeyMadeTwiceIsRefusedAtItsJob() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try workspace.write("fold/a.txt", "a\n")
        let folder = try workspace.write("folder.yaml", """
        jobs:
          - {kind: upload-data, data: x, destination: "file://b/z.txt", key: f/a.txt}
          - {kind: upload-file, source: fold/, destination: "file://b/up/", key: f}
        """)
        let refused = try workspace.jobctl(["submit", folder])
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("folder.yaml:3:5: error: idempotency key 'f/a.txt' is already given to the job at line 2"),
                "\(refused.stderr)")
        #expect(!refused.stderr.contains("already names job"), "\(refused.stderr)")

        let first = try workspace.write("one.yaml", "- {kind: upload-data, data: x, destination: \"file://b/z.txt\", key: k}\n")
        let second = try workspace.write("two.yaml", "- {kind: upload-data, data: y, destination: \"file://b/y.txt\", key: k}\n")
        let twice = try workspace.jobctl(["submit", first, second])
        #expect(twice.status == 65, "\(twice.stderr)")
        #expect(twice.stderr.contains("two.yaml:1:3: error: idempotency key 'k' is already given to the job at "), "\(twice.stderr)")
        #expect(try workspace.jobctl(["list", "--json"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "[]"
                || !FileManager.default.fileExists(atPath: workspace.database))

        // Each on its own still submits, and a second submit of the same keyed job returns it.
        let once = try workspace.jobctl(["submit", first])
        #expect(once.status == 0, "\(once.stderr)")
        #expect(try workspace.jobctl(["submit", first]).stdout == once.stdout)
    }

    /// A key the log already holds for another spec was refused with a bare error (exit 1, "Error:
    /// idempotency key 'ka' already names job …"), naming no manifest, where every other error of the
    /// plan is `file:line:col: error:` and exit 65. It is refused at the key now, with and without
    /// `--dry-run`.
    @Test func aKeyTheLogHoldsForAnotherSpecIsRefusedAtTheKey() throws {
        let workspace = try CLIWorkspace("key-conflict")
        defer { workspace.directory.remove() }
        let first = try workspace.write("one.yaml", """
            - {kind: upload-data, destination: "file://b/x", key: ka, data: "one"}
            """)
        let submitted = try workspace.jobctl(["submit", first])
        try #require(submitted.status == 0, "\(submitted.stderr)")
        let existing = try #require(submitted.stdout.split(separator: "\n").first.map(String.init))

        let changed = try workspace.write("two.yaml", """
            - {kind: upload-data, destination: "file://b/x", key: ka, data: "two"}
            """)
        for dryRun in [[], ["--dry-run"]] {
            let refused = try workspace.jobctl(["submit"] + dryRun + [changed])
            #expect(refused.status == 65, "\(dryRun): \(refused.stderr)")
            #expect(refused.stderr.contains("two.yaml:1:55: error: idempotency key 'ka' already names job \(existing) in the log, "
                                            + "submitted with a different spec"), "\(dryRun): \(refused.stderr)")
            #expect(refused.stderr.contains("Error: nothing was submitted"), "\(dryRun): \(refused.stderr)")
        }

        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(jobs.count == 1)
    }

    /// `after: [up]`, `up` the key of a folder upload, was "'up' … is neither the key of a job in the
    /// manifests nor …": the user had written that key two lines up. It says what the key names now:
    /// the folder's files' jobs, each `up/<relative path>`.
    @Test func afterNamingAFoldersKeySaysItNamesTheFilesJobs() throws {
        let workspace = try CLIWorkspace("after-folder-key")
        defer { workspace.directory.remove() }
        try workspace.write("fold/a.txt", "a\n")
        let manifest = try workspace.write("m.yaml", """
            - {kind: upload-file, source: fold/, destination: "file://b/up/", key: up}
            - {kind: upload-data, data: done, destination: "file://b/done", after: [up]}
            """)
        let refused = try workspace.jobctl(["submit", "--dry-run", manifest])
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("m.yaml:2:73: error: 'after' names 'up', the key of a folder, glob or prefix job, which is not "
                                        + "one job: its key names each of its files' jobs as 'up/<relative path>' ('up/a.txt', …)"),
                "\(refused.stderr)")
        #expect(!refused.stderr.contains("neither the key of a job"), "\(refused.stderr)")
        let named = try workspace.write("n.yaml", """
            - {kind: upload-file, source: fold/, destination: "file://b/up/", key: up}
            - {kind: upload-data, data: done, destination: "file://b/done", after: [up/a.txt]}
            """)
        let planned = try workspace.jobctl(["submit", "--dry-run", named])
        #expect(planned.status == 0, "\(planned.stderr)")
    }

    /// Keys are told apart by their bytes, as the log tells them apart: a folder holding `café` (NFC)
    /// and `cafe\u{301}` (NFD) uploads as two jobs under a key, and two jobs keyed so are two jobs. The
    /// manifest, the expanded keys' check and the submit plan compared with `==`, which calls the two
    /// equal: "idempotency key 'nightly/café' is already given to the job at line 1", exit 65.
    @Test func keysThatDifferOnlyInNormalisationAreTwoKeys() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try workspace.write("up/caf\u{E9}", "composed")
        try workspace.write("up/cafe\u{301}", "decomposed")
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let manifest = try workspace.write("m.yaml", """
        - {kind: upload-file, source: up/, destination: "file://b/k/", key: nightly}
        - {kind: upload-data, data: one, destination: "file://b/caf\u{E9}", key: "caf\u{E9}"}
        - {kind: upload-data, data: two, destination: "file://b/cafe\u{301}", key: "cafe\u{301}", after: ["caf\u{E9}"]}
        - {kind: upload-data, data: three, destination: "file://b/both", after: ["caf\u{E9}", "cafe\u{301}"]}
        """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n")
        #expect(ids.count == 5 && Set(ids).count == 5, "\(submitted.stdout)")
        let again = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(again.status == 0 && again.stdout.split(separator: "\n").prefix(4) == ids.prefix(4), "\(again.stdout)\(again.stderr)")
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")
        let read = { (path: String) in try? Data(contentsOf: URL(fileURLWithPath: workspace.directory.file(path))) }
        #expect(read("buckets/b/k/caf\u{E9}") == Data("composed".utf8) && read("buckets/b/k/cafe\u{301}") == Data("decomposed".utf8))
        #expect(read("buckets/b/caf\u{E9}") == Data("one".utf8) && read("buckets/b/cafe\u{301}") == Data("two".utf8))
    }

    /// A `gs://` object name longer than Cloud Storage's 1,024 bytes, or holding a line feed, is an error at
    /// its field, in every form that names a GCS object; the same name in a `file://` bucket is not. It
    /// used to be submitted, and against the emulator the upload was retried five times as "the
    /// connection failed mid-transfer".
    /// A Firebase-form URL is a `gs://` object on Firebase's host and on the emulator's that
    /// `STORAGE_EMULATOR_HOST` names; on any other host it is a plain URL: read as `gs://` there, a pasted
    /// emulator URL went to Google's servers with the worker's credentials.
    @Test func firebaseFormURLsNameObjectsOnlyOnFirebasesOrTheEmulatorsHost() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("fb.yaml", """
        - {kind: download-memory, source: "http://127.0.0.1:9199/v0/b/demo/o/a%2Fb.txt"}
        - {kind: download-memory, source: "http://127.0.0.1:9200/v0/b/demo/o/a%2Fb.txt?alt=media&token=t"}
        - {kind: download-memory, source: "https://firebasestorage.googleapis.com/v0/b/demo/o/c.txt"}
        """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: ["STORAGE_EMULATOR_HOST": "http://127.0.0.1:9199"])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let sources = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]]).compactMap { $0["source"] as? String }
        #expect(Set(sources) == ["gs://demo/a/b.txt", "http://127.0.0.1:9200/v0/b/demo/o/a%2Fb.txt?alt=media&token=REDACTED",
                                 "gs://demo/c.txt"], "\(sources)")
    }

    /// A folder whose path is not UTF-8 cannot be named by a Swift String: decoded with replacement
    /// characters, a submit run inside one resolved its relative paths against a look-alike folder
    /// (`dir\u{FFFD}`), which the worker then created and wrote into. Now the submit is refused (65),
    /// an argument that is not UTF-8 is a usage error (64), and a relative `--db` there is the file given.
    @Test func aCurrentDirectoryThatIsNotUTF8IsNotReplacedByALookAlike() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let script = """
            mkdir -p "$(printf 'dir\\377')" && cd "$(printf 'dir\\377')" || exit 99
            printf 'jobs:\\n  - {kind: download-file, source: file://b/x, destination: out/x.txt}\\n' > m.yaml
            "$0" --db ../j.db submit m.yaml; echo "relative=$?"
            "$0" --db ../j.db submit "$PWD/m.yaml"; echo "absolute=$?"
            "$0" --db ./x.db migrate >/dev/null; echo "migrate=$?"
            JOBCTL_DB="$PWD/y.db" "$0" list; echo "variable=$?"
            ls -a; cd .. && ls -a
            """
        let output = try runProcess("/bin/sh", ["-c", script, PackagePaths.jobctlBinary], currentDirectory: workspace.directory.path)
        #expect(output.stdout.contains("relative=65") && output.stdout.contains("absolute=64") && output.stdout.contains("migrate=0")
                && output.stdout.contains("variable=64"),
                "\(output.stdout)\(output.stderr)")
        #expect(output.stderr.contains("m.yaml: error: the manifest's folder is unknown: the current directory's path is not valid UTF-8"),
                "\(output.stderr)")
        #expect(output.stderr.contains("is not valid UTF-8, and jobctl names files by UTF-8 paths"), "\(output.stderr)")
        #expect(output.stderr.contains("$JOBCTL_DB is not valid UTF-8"), "\(output.stderr)")
        // The database and its writer lock where they were named; no look-alike folder beside it.
        let listed = output.stdout.split(separator: "\n").map(String.init)
        #expect(listed.contains("x.db") && listed.contains("x.db-writer-lock"), "\(output.stdout)")
        // (Foundation lists the real folder with a replacement character too: one entry is the real one.)
        #expect((try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path)).filter { $0.hasPrefix("dir") }.count == 1,
                "\(output.stdout)")
    }

    /// A `file://` object named like jobctl's own hidden files (a sidecar, an upload session, a partial
    /// download, the part a long name's shortened hidden name keeps of it) passed submit and failed only
    /// when it ran; now an error at its field, and a folder whose file would take such a name is refused
    /// at its destination, as other unnameable files are.
    @Test func reservedFileNamesAreRefusedAtSubmit() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try workspace.write("docs/.a.txt.jobctl-meta.json", "{}")
        try workspace.write("docs/b.txt", "b")
        let manifest = try workspace.write("res.yaml", """
        - {kind: upload-data, data: x, destination: "file://b/.hello.txt.jobctl-meta.json"}
        - {kind: download-file, source: "file://b/dir/x.jobctl-upload/y", destination: out/y}
        - {kind: upload-file, source: docs/, destination: "file://b/backup/"}
        - {kind: upload-data, data: x, destination: "gs://bkt/.hello.txt.jobctl-meta.json"}
        - {kind: upload-data, data: x, destination: "file://b/a~0f.jobctl-cut"}
        """)
        let refused = try workspace.jobctl(["submit", manifest])
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("res.yaml:1:45: error: 'destination' 'file://b/.hello.txt.jobctl-meta.json': "
                                        + "'.hello.txt.jobctl-meta.json' is reserved for jobctl's temporary and metadata files"), "\(refused.stderr)")
        #expect(refused.stderr.contains("res.yaml:2:33: error: 'source' 'file://b/dir/x.jobctl-upload/y': 'x.jobctl-upload' is reserved"),
                "\(refused.stderr)")
        #expect(refused.stderr.contains("res.yaml:3:51: error: 'source' 'docs/': its file '.a.txt.jobctl-meta.json' has no valid storage "
                                        + "reference under 'destination': '.a.txt.jobctl-meta.json' is reserved"), "\(refused.stderr)")
        // The ending a shortened hidden name keeps of a long name's (`HiddenName.shortenedMarker`).
        #expect(refused.stderr.contains("res.yaml:5:45: error: 'destination' 'file://b/a~0f.jobctl-cut': 'a~0f.jobctl-cut' is reserved"),
                "\(refused.stderr)")
        // A gs:// object may have any such name: the names are file://'s own.
        #expect(refused.stderr.contains("4 errors generated."), "\(refused.stderr)")
        #expect(try workspace.jobctl(["list"]).stdout.split(separator: "\n").count <= 1)
    }

    /// A download's local destination named like jobctl's own files (a `file://` object's sidecar, a
    /// partial download) was written as asked: `destination: buckets/b/.x.jobctl-meta.json` replaced the
    /// object's metadata with whatever the download held, and the object then failed every download
    /// ("metadata sidecar … is not valid JSON") or was believed with a forged content type and generation.
    /// Refused at the field, whether the name is written, taken from the source's (a folder destination)
    /// or written as a `file:///` path.
    @Test func downloadDestinationsNamedLikeJobctlsOwnFilesAreRefused() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try FileManager.default.createDirectory(atPath: workspace.directory.file("out"), withIntermediateDirectories: true)
        let manifest = try workspace.write("dl.yaml", """
        - {kind: download-file, source: "gs://bkt/a.txt", destination: out/.a.txt.jobctl-meta.json}
        - {kind: download-file, source: "gs://bkt/.b.txt.jobctl-meta.json", destination: out/}
        - {kind: download-file, source: "gs://bkt/c.txt", destination: "file://\(workspace.directory.file("out"))/.c.txt.01ABC.jobctl-partial"}
        - {kind: download-file, source: "gs://bkt/d.txt", destination: out/d.txt}
        - {kind: download-file, source: "gs://bkt/e.txt", destination: "buckets/bk/.o3.jobctl-meta.json/"}
        - {kind: download-file, source: "gs://bkt/f.txt", destination: out/d.jobctl-upload/f.txt}
        """)
        let refused = try workspace.jobctl(["submit", "--no-check-sources", manifest])
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("dl.yaml:1:64: error: 'destination' 'out/.a.txt.jobctl-meta.json': '.a.txt.jobctl-meta.json' is reserved "
                                        + "for jobctl's temporary and metadata files"), "\(refused.stderr)")
        #expect(refused.stderr.contains("dl.yaml:2:82: error: 'destination' 'out/': '.b.txt.jobctl-meta.json' is reserved"), "\(refused.stderr)")
        #expect(refused.stderr.contains("'.c.txt.01ABC.jobctl-partial' is reserved"), "\(refused.stderr)")
        // A folder so named on the path (made by the download, it sat where an object's sidecar goes).
        #expect(refused.stderr.contains("'buckets/bk/.o3.jobctl-meta.json/': '.o3.jobctl-meta.json' is reserved"), "\(refused.stderr)")
        #expect(refused.stderr.contains("'out/d.jobctl-upload/f.txt': 'd.jobctl-upload' is reserved"), "\(refused.stderr)")
        #expect(refused.stderr.contains("5 errors generated."), "\(refused.stderr)")
        #expect(try workspace.jobctl(["list"]).stdout.split(separator: "\n").count <= 1)
    }

    @Test func cloudStorageObjectNamesAreCheckedAtSubmit() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let longest = String(repeating: "\u{E9}", count: 512)  // 1,024 bytes
        let fits = try workspace.write("fits.yaml", """
        - {kind: upload-data, data: x, destination: "gs://bkt/\(longest)"}
        - {kind: upload-data, data: x, destination: "file://b/\(String(repeating: String(longest.prefix(120)) + "/", count: 5))x/y"}
        """)
        let fine = try workspace.jobctl(["submit", "--dry-run", fits])
        #expect(fine.status == 0, "\(fine.stderr)")
        let manifest = try workspace.write("long.yaml", """
        - {kind: upload-data, data: x, destination: "gs://bkt/\(longest)x"}
        - {kind: download-memory, source: "https://firebasestorage.googleapis.com/v0/b/bkt/o/\(String(repeating: "n", count: 1_025))"}
        - {kind: download-memory, source: "https://storage.googleapis.com/bkt/a%0Ab"}
        - {kind: upload-data, data: x, destination: "gs://bkt/a%0Db"}
        """)
        let refused = try workspace.jobctl(["submit", manifest])
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("long.yaml:1:45: error: 'destination' is not a valid storage reference: the object name is 1025 bytes; "
                                        + "Cloud Storage names are at most 1024 bytes of UTF-8"), "\(refused.stderr)")
        #expect(refused.stderr.contains("long.yaml:2:35: error: 'source' is not a valid storage reference: the object name is 1025 bytes"), "\(refused.stderr)")
        #expect(refused.stderr.components(separatedBy: "contains a line feed or carriage return").count == 3, "\(refused.stderr)")
        #expect(refused.stderr.contains("4 errors generated."), "\(refused.stderr)")
    }

    /// `gs://BKT/x` and `gs://b/x` name buckets Cloud Storage cannot have: they were submitted and failed
    /// only when a worker ran them. Refused at submit now (65), at the value, saying the rule.
    @Test func cloudStorageBucketNamesAreCheckedAtSubmit() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("buckets.yaml", """
        - {kind: download-memory, source: gs://BKT/x}
        - {kind: upload-data, data: x, destination: gs://b/x}
        - {kind: upload-data, data: x, destination: file://B/x}
        """)
        let refused = try workspace.jobctl(["submit", manifest])
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("buckets.yaml:1:35: error: 'source' is not a valid storage reference: the bucket name 'BKT' "
                                        + "cannot be a Cloud Storage bucket's: it has upper-case letters (write 'bkt'); Cloud Storage bucket "
                                        + "names are 3 to 63 characters"), "\(refused.stderr)")
        #expect(refused.stderr.contains("buckets.yaml:2:45: error: 'destination' is not a valid storage reference: the bucket name 'b' "
                                        + "cannot be a Cloud Storage bucket's: it is 1 character long"), "\(refused.stderr)")
        #expect(refused.stderr.contains("2 errors generated."), "\(refused.stderr)")
    }

    /// A file whose name is not UTF-8 (byte 0xFF) is named for what it is: skipped from a folder upload
    /// with a note saying so (it read "not a regular file (a FIFO, or gone while listed)"), and a
    /// `file://` prefix holding one is refused (it was left out without a word, the others downloaded).
    @Test func filesNamedInOtherEncodingsAreNamedForWhatTheyAre() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try workspace.write("up/fine.txt", "fine")
        try workspace.write("buckets/b/p/fine.txt", "fine")
        for folder in ["up", "buckets/b/p"] {
            let path = Array(workspace.directory.file(folder + "/latin").utf8) + [0xE9, 0xFF, 0]
            let fd = path.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_CREAT | O_WRONLY, 0o644) } }
            #expect(fd >= 0)
            close(fd)
        }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let upload = try workspace.write("up.yaml", "- {kind: upload-file, source: up/, destination: \"file://c/\"}\n")
        let uploaded = try workspace.jobctl(["submit", "--dry-run", upload], environment: environment)
        #expect(uploaded.status == 0, "\(uploaded.stderr)")
        #expect(uploaded.stderr.contains("up.yaml:1:3: note: 'source' 'up/': skipped 'latin\\xE9\\xFF' (a name that is not valid UTF-8, "
                                         + "which no job can name: rename it)"), "\(uploaded.stderr)")
        let download = try workspace.write("down.yaml", "- {kind: download-file, source: \"file://b/p/\", destination: out/}\n")
        let refused = try workspace.jobctl(["submit", download], environment: environment)
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("down.yaml:1:33: error: cannot list the prefix 'file://b/p/': '"), "\(refused.stderr)")
        #expect(refused.stderr.contains("/buckets/b/p/latin\\xE9\\xFF' in file://b/p has a name that is not valid UTF-8"), "\(refused.stderr)")
    }

    /// Makes the file (or folder) at `path` followed by the bytes `tail`, which are not UTF-8.
    private func make(_ path: String, _ tail: [UInt8], folder: Bool = false, holding text: String = "x") {
        let bytes = (Array(path.utf8) + tail).map { CChar(bitPattern: $0) } + [0]
        if folder {
            #expect(mkdir(bytes, 0o755) == 0)
            return
        }
        let fd = open(bytes, O_CREAT | O_WRONLY | O_EXCL, 0o644)
        #expect(fd >= 0)
        _ = text.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, text.utf8.count) }
        close(fd)
    }

    /// Beside a file named with U+FFFD (`bad\u{FFFD}.txt`), the one whose name holds the byte 0xFF
    /// (`bad\xFF.txt`) was read as that look-alike: the folder upload, the glob and the file:// prefix
    /// each planned the look-alike twice (two jobs for one file, one destination; with `key:` "idempotency
    /// key … is already given") and dropped the other file, and a folder `d\xFF/` with everything in it,
    /// without a note. Names are read as bytes now: the look-alikes are planned once, the others are
    /// named in the note (the prefix, as before for such names, is refused).
    @Test func aNameThatIsNotUTF8IsNeverTakenForItsLookAlike() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        for folder in ["src", "buckets/lb/b"] {
            try workspace.write(folder + "/bad\u{FFFD}.txt", "look-alike")
            try workspace.write(folder + "/d\u{FFFD}/other.txt", "other")
            let path = workspace.directory.file(folder)
            make(path + "/bad", [0xFF] + Array(".txt".utf8), holding: "the file whose name is not UTF-8")
            make(path + "/d", [0xFF], folder: true)
            make(path + "/d", [0xFF] + Array("/secret.txt".utf8), holding: "secret")
        }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        for (name, source) in [("folder", "src/"), ("glob", "src/**")] {
            let manifest = try workspace.write(name + ".yaml", "- {kind: upload-file, source: \"\(source)\", destination: \"file://lb/\(name)/\", key: \(name)}\n")
            let output = try workspace.jobctl(["submit", manifest], environment: environment)
            #expect(output.status == 0, "\(source): \(output.stderr)")
            #expect(output.stdout.split(separator: "\n").count == 2, "\(source): \(output.stdout)")
            #expect(output.stderr.contains("\(name).yaml:1:3: note: 'source' '\(source)': skipped 'bad\\xFF.txt' (a name that is not valid "
                                           + "UTF-8, which no job can name: rename it) and 1 more entry: 1 name that is not valid UTF-8"),
                    "\(source): \(output.stderr)")
            #expect(!output.stderr.contains("already given"), "\(source): \(output.stderr)")
        }
        let drained = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(drained.status == 0, "\(drained.stderr)")
        for name in ["folder", "glob"] {
            let stored = try FileManager.default.subpathsOfDirectory(atPath: workspace.directory.file("buckets/lb/" + name))
            #expect(stored.filter { $0.hasSuffix(".txt") }.sorted() == ["bad\u{FFFD}.txt", "d\u{FFFD}/other.txt"], "\(stored)")
            #expect(try String(contentsOfFile: workspace.directory.file("buckets/lb/\(name)/bad\u{FFFD}.txt"), encoding: .utf8) == "look-alike")
        }
        let prefix = try workspace.write("prefix.yaml", "- {kind: download-file, source: \"file://lb/b/\", destination: out/}\n")
        let refused = try workspace.jobctl(["submit", "--dry-run", prefix], environment: environment)
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("/buckets/lb/b/bad\\xFF.txt' (and 1 more beside it) in file://lb/b has a name that is not valid UTF-8"),
                "\(refused.stderr)")
    }

    /// A folder whose path reaches 4,096 bytes (PATH_MAX) inside an uploaded folder, or inside a file://
    /// bucket being prefix-downloaded, was skipped with a note calling it "not a regular file (a FIFO, or
    /// gone while listed)", and every file below it left out: the lookup by its whole path failed with
    /// ENAMETOOLONG, and any failure read as "not a regular file". Both are errors at 'source' now, with
    /// the length and the limit, and nothing is submitted.
    @Test func aFolderPastPathMaxIsAnErrorAtTheSourceNotAFIFO() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        var deep: [DeepFolder] = []
        defer { deep.forEach { $0.remove() } }
        for root in ["src", "buckets/lb/deep"] {
            try workspace.write(root + "/shallow.txt", "s\n")
            deep.append(try DeepFolder(in: workspace.directory.file(root)))
        }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let upload = try workspace.write("u.yaml", "jobs:\n  - {kind: upload-file, source: src/, destination: \"file://lb/up/\"}\n")
        let uploaded = try workspace.jobctl(["submit", upload], environment: environment)
        let length = (workspace.directory.file("src/") + deep[0].relativeFile).utf8.count
        #expect(uploaded.status == 65, "\(uploaded.stderr)")
        #expect(uploaded.stderr.contains("u.yaml:2:33: error: 'source' 'src/': its file '00ddd"), "\(uploaded.stderr)")
        #expect(uploaded.stderr.contains("/deep.txt' is \(length) bytes long as an absolute path; Linux takes paths of at most 4095 bytes "
                                         + "(PATH_MAX), so no job could open it"), "\(uploaded.stderr)")
        let download = try workspace.write("d.yaml", "jobs:\n  - {kind: download-file, source: \"file://lb/deep/\", destination: out/}\n")
        let downloaded = try workspace.jobctl(["submit", download], environment: environment)
        #expect(downloaded.status == 65, "\(downloaded.stderr)")
        #expect(downloaded.stderr.contains("d.yaml:2:35: error: cannot list the prefix 'file://lb/deep/': the folder 'deep/00ddd"),
                "\(downloaded.stderr)")
        #expect(downloaded.stderr.contains("is too deep for what is in it to be named: a file:// reference to a file there is 4230 bytes "
                                           + "or more as a path (with the bucket's name), and Linux takes paths of at most 4095 bytes (PATH_MAX)"),
                "\(downloaded.stderr)")
        for output in [uploaded, downloaded] {
            #expect(!output.stderr.contains("FIFO"), "\(output.stderr)")
        }
        #expect(!(try workspace.jobctl(["list"]).stdout.contains("shallow")), "nothing was submitted")
    }

    // MARK: - Upload sources

    @Test func uploadSourcesAreCheckedAtSubmit() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try workspace.write("data/here.csv", "a,b\n")
        let path = try workspace.write("jobs.yaml", """
        jobs:
          - {kind: upload-file, source: data/here.csv, destination: gs://bkt/here.csv}
          - {kind: upload-file, source: data/later.csv, destination: gs://bkt/later.csv}
          - {kind: upload-file, source: "data/*.txt", destination: gs://bkt/}
          - {kind: upload-file, source: data, destination: gs://bkt/}
        """)
        let refused = try workspace.jobctl(["submit", path])
        #expect(refused.status == 65)
        #expect(refused.stderr.contains("jobs.yaml:3:33: error: 'source' 'data/later.csv' does not exist"), "\(refused.stderr)")
        #expect(refused.stderr.contains("--no-check-sources"))
        // A glob that takes nothing is refused at its job; a folder expands (here.csv), so it is no error.
        #expect(refused.stderr.contains("jobs.yaml:4:5: error: 'source' 'data/*.txt' holds no regular file"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("jobs.yaml:5:"))
        #expect(!FileManager.default.fileExists(atPath: workspace.database))

        // Without the glob: the missing file is fine once the check is off.
        let later = try workspace.write("later.yaml", """
        jobs:
          - {kind: upload-file, source: data/here.csv, destination: gs://bkt/here.csv}
          - {kind: upload-file, source: data/later.csv, destination: gs://bkt/later.csv}
        """)
        #expect(try workspace.jobctl(["submit", "--dry-run", later]).status == 65)
        let unchecked = try workspace.jobctl(["submit", "--no-check-sources", later])
        #expect(unchecked.status == 0, "\(unchecked.stderr)")
        #expect(unchecked.stdout.split(separator: "\n").count == 2)
        let perJob = try workspace.write("per-job.yaml", """
        - {kind: upload-file, source: data/later.csv, destination: gs://bkt/later.csv, check_source: false}
        """)
        #expect(try workspace.jobctl(["submit", perJob]).status == 0)
        #expect(try workspace.jobctl(["help", "submit"]).stdout.contains("--no-check-sources"))
    }

    /// A source the worker could not read is refused at submit. Run as an unprivileged user (root reads
    /// everything), through `setpriv` when the tests run as root.
    @Test func anUnreadableSourceIsRefused() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let source = try workspace.write("secret.csv", "a,b\n")
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-file, source: secret.csv, destination: gs://bkt/s.csv}\n")
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: workspace.directory.path)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: manifest)
        try FileManager.default.setAttributes([.posixPermissions: 0o000], ofItemAtPath: source)
        let arguments = [PackagePaths.jobctlBinary, "--db", workspace.database, "submit", "--dry-run", manifest]
        let output = getuid() == 0
            ? try runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups"] + arguments,
                             environment: ["NO_COLOR": "1", "HOME": DatabasePermissionTests.otherUsersHome], currentDirectory: "/")
            : try runProcess(arguments[0], Array(arguments.dropFirst()), environment: ["NO_COLOR": "1"])
        #expect(output.status == 65, "\(output.stdout)\(output.stderr)")
        #expect(output.stderr.contains("jobs.yaml:1:31: error: 'source' 'secret.csv' cannot be read"), "\(output.stderr)")
        #expect(output.stderr.contains("permission denied"))
    }

    /// A file the submitting user may not read inside a folder upload was taken, and its job failed when
    /// it ran, while the same file named by itself is refused at submit: the folder upload is refused too,
    /// naming it (rsync and rclone report such a file as a failure, not a skip), and 'exclude:' takes it out.
    @Test func anUnreadableFileInAFolderUploadIsRefusedNamingIt() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try workspace.write("up/open.csv", "a,b\n")
        let secret = try workspace.write("up/private/secret.csv", "x\n")
        let manifest = try workspace.write("jobs.yaml", "- {kind: upload-file, source: up/, destination: gs://bkt/up/}\n")
        let excluding = try workspace.write("excluding.yaml", "- {kind: upload-file, source: up/, destination: gs://bkt/up/, exclude: [secret.csv]}\n")
        for path in [workspace.directory.path, workspace.directory.file("up"), workspace.directory.file("up/private")] { chmod(path, 0o755) }
        for path in [manifest, excluding, workspace.directory.file("up/open.csv")] { chmod(path, 0o644) }
        chmod(secret, 0o000)
        func submit(_ manifest: String) throws -> ProcessOutput {
            let arguments = [PackagePaths.jobctlBinary, "--db", workspace.database, "submit", "--dry-run", manifest]
            return getuid() == 0
                ? try runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups"] + arguments,
                                 environment: ["NO_COLOR": "1", "HOME": DatabasePermissionTests.otherUsersHome], currentDirectory: "/")
                : try runProcess(arguments[0], Array(arguments.dropFirst()), environment: ["NO_COLOR": "1"])
        }
        let refused = try submit(manifest)
        #expect(refused.status == 65, "\(refused.stdout)\(refused.stderr)")
        #expect(refused.stderr.contains("jobs.yaml:1:31: error: 'source' 'up/': its file 'private/secret.csv' cannot be read: "
                                        + "permission denied; the worker must be able to read every file it uploads"), "\(refused.stderr)")
        let excluded = try submit(excluding)
        #expect(excluded.status == 0, "\(excluded.stderr)")
        #expect(excluded.stdout.contains("up/open.csv") && !excluded.stdout.contains("secret"), "\(excluded.stdout)")

        // A folder the user cannot open: refused, unless `exclude:` leaves it out whole (`X/**`), when the
        // walk does not go in (it failed on the folder whatever the patterns said).
        chmod(workspace.directory.file("up/private"), 0o700)
        chmod(secret, 0o644)
        let folderRefused = try submit(manifest)
        #expect(folderRefused.status == 65, "\(folderRefused.stdout)\(folderRefused.stderr)")
        #expect(folderRefused.stderr.contains("the folder '\(workspace.directory.file("up/private"))' cannot be read"), "\(folderRefused.stderr)")
        let folderExcluding = try workspace.write("folder-excluding.yaml",
                                                  "- {kind: upload-file, source: up/, destination: gs://bkt/up/, exclude: [\"private/**\"]}\n")
        chmod(folderExcluding, 0o644)
        let folderExcluded = try submit(folderExcluding)
        #expect(folderExcluded.status == 0, "\(folderExcluded.stderr)")
        #expect(folderExcluded.stdout.contains("up/open.csv") && !folderExcluded.stdout.contains("private"), "\(folderExcluded.stdout)")
    }

    /// A source the worker may not read when the job runs failed `unauthorized (-13021)` on file:// and
    /// `pathError (-13053)` over HTTP and gs://: the same local file, two answers. It is a `pathError` on
    /// every backend (a file:// bucket folder the worker may not write stays `unauthorized`). The worker
    /// runs as `nobody` when the tests run as root (root reads everything).
    @Test func aSourceTheWorkerCannotReadIsAPathErrorOnEveryBackend() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let server = try NginxServer.start()
        defer { server.stop() }
        let source = try workspace.write("secret.csv", "a,b\n")
        try FileManager.default.createDirectory(atPath: workspace.directory.file("buckets/b"), withIntermediateDirectories: true)
        let ids = try workspace.submit("""
        - {kind: upload-file, source: \(source), destination: file://b/secret.csv}
        - {kind: upload-file, source: \(source), destination: \(server.baseURL)/secret.csv}
        """)
        #expect(ids.count == 2)
        let worker = [PackagePaths.jobctlBinary, "--db", workspace.database, "worker", "--drain"]
        let environment = ["NO_COLOR": "1", "JOBCTL_BUCKETS": workspace.directory.file("buckets"), "HOME": DatabasePermissionTests.otherUsersHome]
        let drained: ProcessOutput
        if getuid() == 0 {
            let nobody = try #require(getpwnam("nobody")).pointee
            #expect(try runProcess("/bin/chown", ["-R", "\(nobody.pw_uid):\(nobody.pw_gid)", workspace.directory.path]).status == 0)
            chown(source, 0, 0)
            chmod(source, 0o600)
            drained = try runProcess("/usr/bin/setpriv", ["--reuid=\(nobody.pw_uid)", "--regid=\(nobody.pw_gid)", "--clear-groups"] + worker,
                                     environment: environment, currentDirectory: "/")
        } else {
            chmod(source, 0o000)
            drained = try runProcess(worker[0], Array(worker.dropFirst()), environment: environment)
        }
        #expect(drained.status == 2, "a drain whose jobs failed exits 2: \(drained.stderr)")
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(jobs.count == 2)
        for job in jobs {
            let error = try #require(job["error"] as? [String: Any], "\(job)")
            #expect(job["state"] as? String == "failed", "\(job)")
            #expect(error["name"] as? String == "pathError" && error["code"] as? Int == -13053, "\(job)")
            #expect((error["message"] as? String)?.contains("permission denied") == true, "\(job)")
        }
    }

    /// `jobctl submit m.yaml < a.bin` with `source: /dev/stdin` was accepted after checking a.bin (100,000
    /// bytes); the worker, whose standard input was another file, uploaded that (3 bytes) and succeeded.
    /// Every local path that leads through a link of /proc is refused at its position, a download's
    /// destination too; a folder on procfs is refused as its files are.
    @Test func aStandardInputSourceIsRefusedNotCheckedAsTheFileSubmitReads() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let input = workspace.directory.file("a.bin")
        try patternData(100_000, seed: 3).write(to: URL(fileURLWithPath: input))
        try workspace.write("c.txt", "c\n")
        let manifest = try workspace.write("jobs.yaml", """
        - {kind: upload-file, source: /dev/stdin, destination: gs://bkt/stdin.bin}
        - {kind: upload-file, source: /proc/self/cwd/c.txt, destination: gs://bkt/c.txt, check_source: false}
        - {kind: download-file, source: gs://bkt/a.txt, destination: /dev/stdout}
        - {kind: upload-file, source: /proc/sys/kernel/random/, destination: gs://bkt/random/}
        - {kind: upload-file, source: c.txt, destination: gs://bkt/kept.txt}

        """)
        let output = try runProcess("/bin/sh", ["-c", "exec \"$0\" --db \"$1\" submit \"$2\" < \"$3\"",
                                                PackagePaths.jobctlBinary, workspace.database, manifest, input],
                                    environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
        #expect(output.status == 65, "\(output.stdout)\(output.stderr)")
        #expect(output.stderr.contains("jobs.yaml:1:31: error: 'source' '/dev/stdin' leads through '/proc/self', a link the kernel's "
                                       + "/proc makes to whichever process follows it"), "\(output.stderr)")
        #expect(output.stderr.contains("it names a file of the submitting process"), "\(output.stderr)")
        #expect(output.stderr.contains("jobs.yaml:2:31: error: 'source' '/proc/self/cwd/c.txt' leads through '/proc/self'"), "\(output.stderr)")
        #expect(output.stderr.contains("jobs.yaml:3:62: error: 'destination' '/dev/stdout' leads through '/proc/self'"), "\(output.stderr)")
        #expect(output.stderr.contains("jobs.yaml:4:31: error: 'source' '/proc/sys/kernel/random/': the folder '/proc/sys/kernel/random' "
                                       + "is on procfs"), "\(output.stderr)")
        #expect(output.stderr.contains("4 errors generated."), "\(output.stderr)")
        #expect(try workspace.jobctl(["list"]).stdout.split(separator: "\n").count <= 1, "something was submitted")
    }

    // MARK: - Secrets

    @Test func secretsNeverReachStandardError() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", """
        jobs:
          - kind: upload-data
            data: x
            destination: http://ops:Pa55w0rd@files.example.com/x
          - {kind: download-memory, source: "https://example.com/a?token=t0k3n&X-Goog-Signature=5ig&alt=media", max_size: lots}
          - kind: fetch-url
            source: "https://example.com/b.txt?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=f00d"
        """)
        let output = try workspace.jobctl(["submit", path])
        #expect(output.status == 65)
        for secret in ["Pa55w0rd", "t0k3n", "5ig&", "AKIAEXAMPLE", "f00d"] {
            #expect(!output.stderr.contains(secret), "\(secret) leaked: \(output.stderr)")
        }
        #expect(output.stderr.contains("    destination: http://ops:REDACTED@files.example.com/x\n                 ^"), "\(output.stderr)")
        // The caret under `lots`, after a redacted URL on the same line.
        let lines = output.stderr.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let diagnostic = try #require(lines.firstIndex { $0.contains("jobs.yaml:5:") && $0.contains("max_size") })
        let shown = Array(lines[diagnostic + 1].unicodeScalars)
        let caret = lines[diagnostic + 2].unicodeScalars.count - 1
        #expect(String(String.UnicodeScalarView(shown[caret...].prefix(4))) == "lots", "\(output.stderr)")
    }

    // MARK: - Folder destinations, end to end

    /// Into a named local bucket's folder and root, then back down into `out/` and an existing folder:
    /// every file lands under its own name, and the log says so.
    @Test func trailingSlashesMeanIntoThisFolder() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try workspace.write("t.csv", "a,b\n1,2\n")
        try FileManager.default.createDirectory(atPath: workspace.directory.file("got"), withIntermediateDirectories: true)
        let buckets = workspace.directory.file("buckets")
        let environment = ["JOBCTL_BUCKETS": buckets]
        let uploads = try workspace.write("up.yaml", """
        - {kind: upload-file, source: t.csv, destination: file://docs/inbox/}
        - {kind: upload-file, source: t.csv, destination: file://docs/}
        """)
        let ids = try workspace.jobctl(["submit", uploads], environment: environment).stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 2)
        let spec = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        #expect(spec["destination"] as? String == "file://docs/inbox/t.csv")
        let uploaded = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(uploaded.status == 0, "\(uploaded.stderr)")
        #expect(try String(contentsOfFile: buckets + "/docs/inbox/t.csv", encoding: .utf8) == "a,b\n1,2\n")
        #expect(try String(contentsOfFile: buckets + "/docs/t.csv", encoding: .utf8) == "a,b\n1,2\n")

        let downloads = try workspace.write("down.yaml", """
        - {kind: download-file, source: file://docs/inbox/t.csv, destination: out/}
        - {kind: download-file, source: file://docs/inbox/t.csv, destination: got}
        """)
        let submitted = try workspace.jobctl(["submit", downloads], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let downloaded = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(downloaded.status == 0, "\(downloaded.stderr)")
        #expect(try String(contentsOfFile: workspace.directory.file("out/t.csv"), encoding: .utf8) == "a,b\n1,2\n")
        #expect(try String(contentsOfFile: workspace.directory.file("got/t.csv"), encoding: .utf8) == "a,b\n1,2\n")
        let jobs = try #require(try workspace.json(["list", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(jobs.count == 4)
        #expect(jobs.allSatisfy { $0["state"] as? String == "succeeded" }, "\(jobs)")
    }

    /// Three downloads of `…/x/f.txt`, `…/y/f.txt` and `…/z/f.txt` into `out/` were submitted and all
    /// succeeded, each reporting `out/f.txt`, which held one of them; two uploads to one object likewise.
    /// Now an error at the second job (65, nothing submitted) unless one waits for the other.
    @Test func twoJobsWritingOneDestinationAreRefusedUnlessOrdered() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        let environment = ["JOBCTL_BUCKETS": buckets]
        for folder in ["x", "y", "z"] { try workspace.write("buckets/src/\(folder)/f.txt", "from \(folder)\n") }
        let downloads = try workspace.write("down.yaml", """
        jobs:
          - {kind: download-file, source: "file://src/x/f.txt", destination: out/}
          - {kind: download-file, source: "file://src/y/f.txt", destination: out/}
          - {kind: download-file, source: "file://src/z/f.txt", destination: out/z.txt}
        """)
        let refused = try workspace.jobctl(["submit", downloads], environment: environment)
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("down.yaml:3:5: error: this job downloads to '\(workspace.directory.file("out/f.txt"))', as the job "
                                        + "at line 2 does, and neither waits for the other"), "\(refused.stderr)")
        #expect(refused.stderr.contains("Error: nothing was submitted"))
        #expect(try !FileManager.default.fileExists(atPath: workspace.database)
                || workspace.jobctl(["list", "--json"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "[]")

        let uploads = try workspace.write("up.yaml", """
        - {kind: upload-data, data: one, destination: "file://dst/a.txt"}
        - {kind: upload-data, data: two, destination: "gs://bkt/a.txt"}
        - {kind: upload-data, data: three, destination: "file://dst/a.txt"}
        """)
        let twice = try workspace.jobctl(["submit", uploads], environment: environment)
        #expect(twice.status == 65, "\(twice.stderr)")
        #expect(twice.stderr.contains("up.yaml:3:3: error: this job uploads to 'file://dst/a.txt', as the job at line 1 does"), "\(twice.stderr)")
        #expect(!twice.stderr.contains("up.yaml:2:"), "\(twice.stderr)")

        // Ordered by `after:`, directly or through another job, they write in turn: submitted, and the
        // last one's bytes are what the object holds.
        let ordered = try workspace.write("ordered.yaml", """
        - {kind: upload-data, data: one, destination: "file://dst/b.txt", key: first}
        - {kind: upload-data, data: two, destination: "file://dst/other.txt", key: middle, after: [first]}
        - {kind: upload-data, data: three, destination: "file://dst/b.txt", after: [middle]}
        """)
        let submitted = try workspace.jobctl(["submit", ordered], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)
        #expect(try String(contentsOfFile: buckets + "/dst/b.txt", encoding: .utf8) == "three")
    }

    /// A file one job writes where another job's file needs a folder (a prefix holding the objects `a`
    /// and `a/b`, downloaded into `restore/`; an upload to `file://dst/x` and one to `file://dst/x/y`) was
    /// submitted: one of the two failed when it ran, and which one depended on the order they ran in.
    /// Now an error at the later job (65, nothing submitted), `after:` or not: no order writes both.
    @Test func aFileWhereAnotherJobsFolderMustBeIsRefused() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        try workspace.write("buckets/src/a", "a file\n")
        try workspace.write("buckets/src/c/a/b", "below a folder a\n")
        let downloads = try workspace.write("down.yaml", """
        - {kind: download-file, source: "file://src/c/a/b", destination: restore/a/b, key: deep}
        - {kind: download-file, source: "file://src/a", destination: restore/, after: [deep]}
        """)
        let refused = try workspace.jobctl(["submit", downloads], environment: environment)
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("down.yaml:2:3: error: this job writes '\(workspace.directory.file("restore/a"))', and the job at "
                                        + "line 1 writes '\(workspace.directory.file("restore/a/b"))': a file and a folder of one name"),
                "\(refused.stderr)")
        #expect(refused.stderr.contains("Error: nothing was submitted"))

        // A folder upload whose files map below an object another job uploads: the same, at the later job.
        try workspace.write("tree/y", "y\n")
        let uploads = try workspace.write("up.yaml", """
        - {kind: upload-file, source: tree/, destination: "file://dst/x/"}
        - {kind: upload-data, data: one, destination: "file://dst/x"}
        """)
        let clash = try workspace.jobctl(["submit", uploads], environment: environment)
        #expect(clash.status == 65, "\(clash.stderr)")
        #expect(clash.stderr.contains("up.yaml:2:3: error: this job writes '\(workspace.directory.file("buckets/dst/x"))', and the job at line 1 "
                                      + "writes '\(workspace.directory.file("buckets/dst/x/y"))' (as the files of a folder, glob or prefix job map)"),
                "\(clash.stderr)")
        #expect(try !FileManager.default.fileExists(atPath: workspace.database)
                || workspace.jobctl(["list", "--json"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "[]")
        // Side by side, not one below the other: submitted.
        let fine = try workspace.write("fine.yaml", """
        - {kind: upload-data, data: one, destination: "file://dst/x.txt"}
        - {kind: upload-data, data: two, destination: "file://dst/x/y.txt"}
        """)
        #expect(try workspace.jobctl(["submit", fine], environment: environment).status == 0)
        // Names compared byte for byte, as the file system does: the precomposed "é" of a file and the
        // decomposed one of a folder are two entries, not a file where a folder must be.
        let twins = try workspace.write("twins.yaml", """
        - {kind: upload-data, data: one, destination: "file://dst/caf\u{E9}"}
        - {kind: upload-data, data: two, destination: "file://dst/cafe\u{301}/b"}
        """)
        let accepted = try workspace.jobctl(["submit", twins], environment: environment)
        #expect(accepted.status == 0, "\(accepted.stderr)")
    }

    /// One local file written under several spellings — a named bucket's object, the same object as a
    /// `file:///` path, a download into that path through a linked folder — was taken as three
    /// destinations: all submitted, the file holding whichever ran last. Now they are one.
    @Test func oneLocalFileSpelledThreeWaysIsOneDestination() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let buckets = workspace.directory.file("buckets")
        let environment = ["JOBCTL_BUCKETS": buckets]
        try FileManager.default.createDirectory(atPath: buckets + "/fb/dd", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: workspace.directory.file("lnk"), withDestinationPath: buckets + "/fb")
        let manifest = try workspace.write("m.yaml", """
        - {kind: upload-data, data: a, destination: "file://fb/dd/a.bin"}
        - {kind: upload-data, data: b, destination: "file://\(buckets)/fb/dd/a.bin"}
        - {kind: download-file, source: "http://127.0.0.1:9/x", destination: lnk/dd/a.bin}
        - {kind: upload-data, data: c, destination: "file://fb/dd/b.bin"}
        - {kind: upload-data, data: d, destination: "file://fb/new/c.bin"}
        - {kind: download-file, source: "http://127.0.0.1:9/y", destination: lnk/new/c.bin}
        """)
        let refused = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("m.yaml:2:3: error: this job uploads to 'file://\(buckets)/fb/dd/a.bin', as the job at line 1 does "
                                        + "(written 'file://fb/dd/a.bin' there: the same file)"), "\(refused.stderr)")
        #expect(refused.stderr.contains("m.yaml:3:3: error: this job downloads to '\(workspace.directory.file("lnk/dd/a.bin"))', "
                                        + "as the job at line 2 does"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("m.yaml:4:"), "\(refused.stderr)")
        // A folder not there yet, through the link: the link's folder is resolved, the new one added.
        #expect(refused.stderr.contains("m.yaml:6:3: error: this job downloads to '\(workspace.directory.file("lnk/new/c.bin"))', "
                                        + "as the job at line 5 does"), "\(refused.stderr)")
    }

    /// A manifest read from a pipe (bash's `<(…)`, `/dev/fd/63`) resolves its relative paths from the
    /// current folder, as standard input does: from its own folder, `/dev/fd`, they were refused as
    /// leading through a link of /proc.
    @Test func aManifestFromAPipeResolvesFromTheCurrentFolder() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        try workspace.write("c.txt", "x\n")
        let manifest = try workspace.write("r.yaml", "- {kind: upload-file, source: c.txt, destination: \"file://b/c.txt\"}\n")
        let output = try runProcess("/bin/bash", ["-c", "exec \"$0\" --db \"$1\" submit --dry-run <(cat \"$2\")",
                                                  PackagePaths.jobctlBinary, workspace.database, manifest],
                                    environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("upload-file  \(workspace.directory.file("c.txt")) → file://b/c.txt"), "\(output.stdout)")
    }

    /// A `gs://` or `file://` name holding `%` printed as written: the object `c/a%2Fb` showed as
    /// `gs://bkt/c/a%2Fb`, which read back (pasted into a manifest) names `c/a/b`, and the names
    /// `tab<TAB>x` and `tab%09x` printed alike. `%` is now `%25` in them; the path printed reads back as
    /// the same object.
    @Test func printedReferencesReadBackAsTheSameObject() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let manifest = try workspace.write("m.yaml", """
        - {kind: upload-data, data: x, destination: "gs://bkt/c/a%252Fb"}
        - {kind: upload-data, data: x, destination: "gs://bkt/c/tab%09x"}
        - {kind: upload-data, data: x, destination: "gs://bkt/c/tab%2509x"}
        - {kind: upload-data, data: x, destination: "file://lb/100%25.txt"}
        """)
        let plan = try workspace.jobctl(["submit", "--dry-run", manifest], environment: environment)
        #expect(plan.status == 0, "\(plan.stderr)")
        let lines = plan.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains("upload-data  - → gs://bkt/c/a%252Fb"), "\(plan.stdout)")
        #expect(lines.contains("upload-data  - → gs://bkt/c/tab%09x"), "\(plan.stdout)")
        #expect(lines.contains("upload-data  - → gs://bkt/c/tab%2509x"), "\(plan.stdout)")
        #expect(lines.contains("upload-data  - → file://lb/100%25.txt"), "\(plan.stdout)")
        let ids = try workspace.jobctl(["submit", manifest], environment: environment).stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 4)
        let shown = try workspace.jobctl(["show", ids[0]], environment: environment).stdout
        #expect(shown.contains("gs://bkt/c/a%252Fb"), "\(shown)")
    }

    /// `gs://b/d/x//y` (or `d%2Fx%2F%2Fy`, or the Firebase form) named `d/x/y`, another object — a delete
    /// removed it. Refused at the field (65).
    @Test func cloudStorageNamesWithEmptySegmentsAreRefusedAtSubmit() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let manifest = try workspace.write("m.yaml", """
        - {kind: delete, destination: "gs://bkt/d/x//y"}
        - {kind: download-memory, source: "gs://bkt/d/x%2F%2Fy"}
        - {kind: download-memory, source: "gs://bkt/d/x/y"}
        """)
        let refused = try workspace.jobctl(["submit", manifest])
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains("m.yaml:1:"), "\(refused.stderr)")
        #expect(refused.stderr.contains("m.yaml:2:"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("m.yaml:3:"), "\(refused.stderr)")
        #expect(refused.stderr.contains("it would act on 'd/x/y', another object"), "\(refused.stderr)")
    }

    /// `checksums:` goes from the manifest (job or defaults) through the worker into the result: the
    /// default verifies CRC32C only; asking for MD5 stores it in the sidecar and compares it on the way back.
    @Test func checksumsFieldReachesTheResult() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let manifest = try workspace.write("sums.yaml", """
        defaults: {checksums: [md5]}
        jobs:
          - {kind: upload-data, data: hello, destination: file://docs/a.txt, priority: 2}
          - {kind: download-memory, source: file://docs/a.txt, priority: 1}
          - {kind: download-memory, source: file://docs/a.txt, checksums: [crc32c]}
        """)
        let ids = try workspace.jobctl(["submit", manifest], environment: environment).stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 3)
        let drained = try workspace.jobctl(["worker", "--drain", "--concurrency", "1"], environment: environment)
        #expect(drained.status == 0, "\(drained.stderr)")
        func result(_ id: String) throws -> [String: Any] {
            let job = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
            return try #require(job["result"] as? [String: Any], "\(job)")
        }
        let md5 = "XUFAKrxLKna5cZ2REBfFkg=="   // MD5 of "hello"
        #expect(try result(ids[0])["md5"] as? String == md5)
        #expect(try result(ids[1])["verified"] as? [String] == ["md5", "crc32c"])
        #expect(try result(ids[1])["md5"] as? String == md5)
        #expect(try result(ids[2])["verified"] as? [String] == ["crc32c"])
        #expect(try result(ids[2])["md5"] == nil)
    }

    // MARK: - Standard input

    /// A standard input that cannot be read (a folder) is an error saying so, as for a manifest file; it
    /// was read as empty and refused as "the manifest has no jobs".
    @Test func unreadableStandardInputSaysSo() throws {
        let workspace = try CLIWorkspace("stdin-folder")
        defer { workspace.directory.remove() }
        let command = [PackagePaths.jobctlBinary, "--db", workspace.database, "submit", "-"].map { "'\($0)'" }.joined(separator: " ")
        let output = try runProcess("/bin/bash", ["-c", "\(command) < '\(workspace.directory.path)'"], environment: ["NO_COLOR": "1"])
        #expect(output.status == 65, "\(output.stderr)")
        #expect(output.stderr.contains("<stdin>: error: cannot read the manifest from standard input (Is a directory)"), "\(output.stderr)")
        #expect(!output.stderr.contains("no jobs"), "\(output.stderr)")
    }

    /// A standard input the caller closed (`submit - 0<&-`) is an error saying so, exit 65, nothing
    /// submitted: jobctl puts `/dev/null` on a closed descriptor at start, and that read as an empty
    /// manifest ("the manifest has no jobs"), as if the caller had sent one. `/dev/null` given on purpose is
    /// an empty manifest, refused as an empty manifest file is, with the same message.
    @Test func closedStandardInputSaysSo() throws {
        let workspace = try CLIWorkspace("stdin-closed")
        defer { workspace.directory.remove() }
        let command = [PackagePaths.jobctlBinary, "--db", workspace.database, "submit", "-"].map { "'\($0)'" }.joined(separator: " ")
        let closed = try runProcess("/bin/bash", ["-c", "\(command) 0<&-"], environment: ["NO_COLOR": "1"])
        #expect(closed.status == 65, "\(closed.stderr)")
        #expect(closed.stderr.contains("<stdin>: error: cannot read the manifest from standard input (Bad file descriptor: it was "
                                       + "closed when jobctl started); give the manifest on it (`jobctl submit - < FILE`)"), "\(closed.stderr)")
        #expect(!closed.stderr.contains("no jobs"), "\(closed.stderr)")
        #expect(closed.stderr.contains("Error: nothing was submitted"), "\(closed.stderr)")

        let devNull = try runProcess("/bin/bash", ["-c", "\(command) < /dev/null"], environment: ["NO_COLOR": "1"])
        let emptyFile = try workspace.write("empty.yaml", "")
        let fromFile = try workspace.jobctl(["submit", emptyFile], environment: ["NO_COLOR": "1"])
        #expect(devNull.status == 65 && fromFile.status == 65, "\(devNull.stderr)\(fromFile.stderr)")
        #expect(devNull.stderr.contains("<stdin>:1:1: error: the manifest has no jobs"), "\(devNull.stderr)")
        #expect(devNull.stderr.replacingOccurrences(of: "<stdin>", with: emptyFile) == fromFile.stderr,
                "\(devNull.stderr)\n\(fromFile.stderr)")
        #expect(!FileManager.default.fileExists(atPath: workspace.database), "nothing submitted: no log was created")
    }

    /// A note names what a listing skipped — a link in an uploaded folder, an entry of a `file://` bucket
    /// that is no object — and the manifest; a line break in either printed a line of its own, so a file
    /// named `a\nm.yaml:9:9: error: FORGED` wrote a diagnostic the manifest never had. It shows as
    /// `\u{A}`, as in an error.
    @Test func aNoteIsOneLineWhateverTheNamesItQuotes() throws {
        let workspace = try CLIWorkspace("note-line-breaks")
        defer { workspace.directory.remove() }
        let environment = ["JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let forged = "a\nm.yaml:9:9: error: FORGED"
        for folder in ["src", "buckets/lb/p"] {
            try FileManager.default.createDirectory(atPath: workspace.directory.file(folder), withIntermediateDirectories: true)
            try Data("x".utf8).write(to: URL(fileURLWithPath: workspace.directory.file(folder + "/ok.txt")))
            #expect(symlink("ok.txt", workspace.directory.file(folder + "/" + forged)) == 0)
        }
        let manifest = try workspace.write("two\nlines.yaml", """
            - {kind: upload-file, source: src/, destination: "file://lb/up/"}
            - {kind: download-file, source: "file://lb/p/", destination: out/}

            """)
        let output = try workspace.jobctl(["submit", "--dry-run", manifest], environment: environment)
        #expect(output.status == 0, "\(output.stderr)")
        let lines = output.stderr.split(separator: "\n")
        let notes = lines.filter { $0.contains(": note: ") }
        #expect(notes.count == 2, "\(output.stderr)")
        for note in notes {
            #expect(note.contains("two\\u{A}lines.yaml:") && note.contains("a\\u{A}m.yaml:9:9: error: FORGED' (a symbolic link)"), "\(note)")
        }
        #expect(!lines.contains { $0.hasPrefix("m.yaml:9:9") || $0.hasPrefix("lines.yaml") }, "\(output.stderr)")
        // The line naming what a batch was expanded from, too (a folder named with a line break).
        let odd = "s\nX"
        try FileManager.default.createDirectory(atPath: workspace.directory.file(odd), withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: workspace.directory.file(odd + "/f.txt")))
        let folder = try workspace.write("folder.yaml", "- {kind: upload-file, source: \"s\\nX/\", destination: \"file://lb/odd/\"}\n")
        for arguments in [["submit", "--dry-run", folder], ["submit", folder]] {
            let submitted = try workspace.jobctl(arguments, environment: environment)
            #expect(submitted.status == 0, "\(submitted.stderr)")
            let all = (submitted.stdout + submitted.stderr).split(separator: "\n")
            #expect(all.contains { $0.hasPrefix("batch ") && $0.hasSuffix("s\\u{A}X/") }, "\(all)")
            #expect(!all.contains { $0 == "X/" }, "\(all)")
        }
    }
}
