import EventStore
import Foundation
import JobModel
import Testing
import TestSupport
import Synchronization
import StorePort
@testable import Worker

/// The lines of a worker's log that parse as JSON objects, and the lines that do not.
private func jsonLines(_ log: String) -> (objects: [[String: Any]], other: [String]) {
    var objects: [[String: Any]] = []
    var other: [String] = []
    for line in log.split(separator: "\n") where !line.isEmpty {
        if let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] {
            objects.append(object)
        } else {
            other.append(String(line))
        }
    }
    return (objects, other)
}

/// The log objects about `job` with event `event`.
private func entries(_ objects: [[String: Any]], _ event: String, job: String? = nil) -> [[String: Any]] {
    objects.filter { ($0["event"] as? String) == event && (job == nil || ($0["job"] as? String) == job) }
}

@Suite("worker logs", .onTestThreads) struct WorkerLogTests {
    static let mib = 1 << 20
    static let secret = "SECRETVALUE4711"

    /// A real worker with `--log-format json` writes one JSON object per line and one line per
    /// transition: claimed, started, resumed, paused, retry_scheduled (delay and error code), succeeded
    /// (bytes, duration, rate), failed, cancelled, released; a URL's token never appears.
    @Test func jsonLinesForEveryTransition() throws {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("worker-log")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(32 * Self.mib))
        let ids = try submit("""
        - {kind: upload-data, data: "hello log", destination: "file://logs/hello.txt"}
        - {kind: download-memory, source: "file://nowhere/missing.txt"}
        - {kind: download-file, source: "\(nginx.baseURL)/broken/x.bin?token=\(Self.secret)", destination: "\(directory.file("x.bin"))", max_attempts: 2}
        - {kind: download-file, source: "\(nginx.baseURL)/slow/big.bin?token=\(Self.secret)", destination: "\(directory.file("d.bin"))"}
        - {kind: download-file, source: "\(nginx.baseURL)/slow/big.bin", destination: "\(directory.file("e.bin"))"}
        """, database: database, directory: directory)
        try #require(ids.count == 5)
        let (hello, missing, broken, slow, released) = (ids[0], ids[1], ids[2], ids[3], ids[4])
        let worker = try JobctlProcess.worker(database: database, ["--concurrency", "5", "--log-format", "json"],
                                              logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        let logged = { (event: String, job: String) -> Bool in !entries(jsonLines(worker.log).objects, event, job: job).isEmpty }

        try #require(eventually(seconds: 20) { logged("started", slow) && logged("started", released) }, "\(worker.log)")
        #expect(try jobctl(["pause", slow], database: database).status == 0)
        try #require(eventually(seconds: 10) { logged("paused", slow) }, "\(worker.log)")
        #expect(try jobctl(["resume", slow], database: database).status == 0)
        try #require(eventually(seconds: 10) { logged("resumed", slow) }, "\(worker.log)")
        #expect(try jobctl(["cancel", slow], database: database).status == 0)
        try #require(eventually(seconds: 10) {
            logged("cancelled", slow) && logged("succeeded", hello) && logged("failed", missing) && logged("failed", broken)
        }, "\(worker.log)")
        worker.signal(SIGTERM)
        #expect(worker.wait(seconds: 15) == 0, "\(worker.log)")

        let (objects, other) = jsonLines(worker.log)
        #expect(other.isEmpty, "lines that are not JSON: \(other)")
        for object in objects {
            #expect(Set(object.keys) == ["time", "time_ms", "level", "event", "job", "kind", "fields"], "\(object)")
            #expect((object["time"] as? String)?.hasSuffix("Z") == true)
        }
        for id in ids { #expect(entries(objects, "claimed", job: id).count >= 1, "no claimed line for \(id)") }
        #expect(entries(objects, "started", job: hello).first?["kind"] as? String == "upload-data")

        let succeeded = try #require(entries(objects, "succeeded", job: hello).first?["fields"] as? [String: Any])
        #expect(succeeded["bytes"] as? Int == 9)
        #expect(succeeded["duration_ms"] is Int)
        #expect(succeeded["bytes_per_second"] is Int)
        #expect((succeeded["rate"] as? String)?.hasSuffix("/s") == true)

        let failed = try #require(entries(objects, "failed", job: missing).first)
        #expect(failed["level"] as? String == "error")
        #expect((failed["fields"] as? [String: Any])?["error"] as? String == "bucketNotFound")

        let retry = try #require(entries(objects, "retry_scheduled", job: broken).first?["fields"] as? [String: Any])
        #expect(retry["http_status"] as? Int == 503)
        #expect(retry["error_code"] as? Int != nil)
        #expect((retry["delay_ms"] as? Int).map { $0 > 0 && $0 <= 60_000 } == true, "\(retry)")
        #expect((entries(objects, "failed", job: broken).first?["fields"] as? [String: Any])?["error"] as? String == "retryLimitExceeded")

        #expect(entries(objects, "paused", job: slow).count == 1)
        #expect(((entries(objects, "resumed", job: slow).first?["fields"] as? [String: Any])?["from_bytes"] as? Int ?? 0) > 0)
        #expect(entries(objects, "cancelled", job: slow).count == 1)
        #expect(entries(objects, "released", job: released).count == 1)
        #expect(!entries(objects, "signal_received").isEmpty)
        #expect(entries(objects, "worker_stopped").count == 1)

        // The token is in the job (the worker needs it) but in no log line; the URL is there, redacted.
        #expect(!worker.log.contains(Self.secret))
        let claimed = try #require(entries(objects, "claimed", job: slow).first?["fields"] as? [String: Any])
        #expect((claimed["source"] as? String)?.contains("token=REDACTED") == true, "\(claimed)")
    }

    /// Text lines: `level event job kind key=value…`; no time into systemd's journal (standard error the
    /// stream JOURNAL_STREAM names), a time otherwise — with a JOURNAL_STREAM naming another stream too
    /// (inherited: a service's `2>>file`; the lines had no time); `-q` leaves only warnings and errors.
    @Test func textLinesTimestampsAndQuiet() throws {
        let directory = try TemporaryDirectory("worker-text-log")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let manifest = """
        - {kind: upload-data, data: "hello", destination: "file://logs/a.txt"}
        - {kind: download-memory, source: "file://nowhere/missing.txt"}
        """
        let ids = try submit(manifest, database: database, directory: directory)
        let journald = try JobctlProcess.worker(database: database, ["--drain"], logDirectory: directory.path, journaled: true)
        #expect(journald.wait(seconds: 20) == 2, "\(journald.log)")
        let lines = journald.log.split(separator: "\n").map(String.init)
        let success = try #require(lines.first { $0.contains(" succeeded \(ids[0]) ") }, "\(journald.log)")
        #expect(success.hasPrefix("info    succeeded \(ids[0]) upload-data bytes=5 duration_ms="), "\(success)")
        let failure = try #require(lines.first { $0.contains(" failed \(ids[1]) ") }, "\(journald.log)")
        #expect(failure.hasPrefix("error   failed \(ids[1]) download-memory error=bucketNotFound"), "\(failure)")
        #expect(!journald.log.contains("\u{1B}["), "colour in a log that is not a terminal")

        for inherited in [[:], ["JOURNAL_STREAM": "8:12345"]] {
            let more = try submit(manifest.replacingOccurrences(of: "a.txt", with: "b-\(inherited.count).txt"), database: database, directory: directory)
            let stamped = try JobctlProcess.worker(database: database, ["--drain"], environment: inherited, logDirectory: directory.path)
            #expect(stamped.wait(seconds: 20) == 2, "\(stamped.log)")
            let line = try #require(stamped.log.split(separator: "\n").first { $0.contains(" succeeded \(more[0]) ") })
            let time = try #require(line.split(separator: " ").first)
            #expect(ISO8601DateFormatter().date(from: String(time).replacingOccurrences(of: #"\.\d+"#, with: "", options: .regularExpression)) != nil,
                    "\(inherited): \(line)")
        }

        _ = try submit(manifest.replacingOccurrences(of: "a.txt", with: "c.txt"), database: database, directory: directory)
        let quiet = try JobctlProcess.worker(database: database, ["--drain", "-q"], logDirectory: directory.path)
        #expect(quiet.wait(seconds: 20) == 2, "\(quiet.log)")
        #expect(!quiet.log.contains(" claimed ") && !quiet.log.contains(" succeeded "), "\(quiet.log)")
        #expect(quiet.log.contains("error   failed "), "\(quiet.log)")
    }

    /// A worker frozen past its lease whose job another worker rescued meanwhile logs, on waking, that it
    /// lost the lease (learnt from its heartbeat or from the store refusing its next append, whichever
    /// comes first). The rescuer is a second worker whose queue has no jobs: a rescue takes any expired
    /// lease. (A worker never expires a lease it still holds itself: it renews its leases before it rescues.)
    @Test func leaseLostIsLogged() throws {
        let nginx = try startWorkerNginx(slowRate: "2m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("worker-lease-log")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(16 * Self.mib))
        let id = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", destination: \"\(directory.file("big.bin"))\"}\n",
                                         database: database, directory: directory).first)
        let worker = try JobctlProcess.worker(database: database, ["--lease", "1", "--log-format", "json", "-v"], logDirectory: directory.path)
        defer { worker.signal(SIGKILL) }
        // -v: progress lines, about one a second while bytes move.
        try #require(eventually(seconds: 20) { !entries(jsonLines(worker.log).objects, "progress", job: id).isEmpty }, "\(worker.log)")
        let progress = entries(jsonLines(worker.log).objects, "progress", job: id).first
        #expect(progress?["level"] as? String == "debug")
        #expect(((progress?["fields"] as? [String: Any])?["bytes"] as? Int ?? 0) > 0)
        worker.signal(SIGSTOP)
        usleep(1_600_000)  // past the 1 s lease: nothing else can make a lease expire
        let rescuer = try JobctlProcess.worker(database: database, ["--drain", "--queue", "rescuer-only"], logDirectory: directory.path)
        #expect(rescuer.wait(seconds: 20) == 0, "\(rescuer.log)")
        worker.signal(SIGCONT)
        #expect(eventually(seconds: 10) { !entries(jsonLines(worker.log).objects, "lease_lost", job: id).isEmpty }, "\(worker.log)")
        let lost = entries(jsonLines(worker.log).objects, "lease_lost", job: id).first
        #expect(lost?["level"] as? String == "warning")
        worker.signal(SIGTERM)
        #expect(worker.wait(seconds: 15) == 0, "\(worker.log)")
    }

    /// On a terminal the level and outcome are coloured; NO_COLOR and --no-color turn it off. A terminal is
    /// never the journal: a JOURNAL_STREAM inherited there (a shell a user service started) leaves colour on.
    @Test func colourOnlyOnATerminal() throws {
        let directory = try TemporaryDirectory("worker-colour-log")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        var runs: [(environment: [String: String], flags: [String], coloured: Bool)] = [
            ([:], [], true), (["NO_COLOR": "1"], [], false), ([:], ["--no-color"], false), (["JOURNAL_STREAM": "8:1"], [], true),
        ]
        runs = runs.map { run in (run.environment.merging(["TERM": "xterm"]) { a, _ in a }, run.flags, run.coloured) }
        for run in runs {
            _ = try submit("- {kind: upload-data, data: \"x\", destination: \"file://c/\(UUID().uuidString).txt\"}\n",
                           database: database, directory: directory)
            let command = ([PackagePaths.jobctlBinary, "--db", database, "worker", "--drain"] + run.flags).map { "'\($0)'" }.joined(separator: " ")
            var environment = run.environment
            if environment["NO_COLOR"] == nil { environment["NO_COLOR"] = "" }
            let output = try runProcess("/usr/bin/script", ["-qfec", "exec \(command)", "/dev/null"], environment: environment)
            #expect(output.stdout.contains("succeeded"), "\(output.stdout)")
            #expect(output.stdout.contains("\u{1B}[32msucceeded\u{1B}[0m") == run.coloured, "\(run): \(output.stdout)")
        }
    }

    // MARK: - The formatter, as a value

    @Test func textQuotesRedactsAndColours() {
        let entry = WorkerLogEntry(atMs: 0, level: .warning, event: .retryScheduled, jobID: "01JOB", kind: .fetchURL, fields: [
            ("delay_ms", .integer(1500)), ("message", .text("server said \"busy\" at https://h/x?token=abc&sig=def")),
            ("source", .text("https://u:pw@h/p?X-Goog-Signature=zz")),
        ])
        let plain = WorkerLogFormatter(format: .text, timestamps: false, color: false).line(entry)
        #expect(plain == #"warning retry_scheduled 01JOB fetch-url delay_ms=1500 message="server said \"busy\" at https://h/x?token=REDACTED&sig=REDACTED" source=https://u:REDACTED@h/p?X-Goog-Signature=REDACTED"#)
        let coloured = WorkerLogFormatter(format: .text, timestamps: true, color: true).line(entry)
        #expect(coloured.hasPrefix("1970-01-01T00:00:00.000Z \u{1B}[33mwarning\u{1B}[0m \u{1B}[33mretry_scheduled\u{1B}[0m 01JOB"), "\(coloured)")
        let json = WorkerLogFormatter(format: .json).line(entry)
        #expect(!json.contains("abc") && !json.contains("pw@") && !json.contains("zz"), "\(json)")
        let object = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any]
        #expect(object?["event"] as? String == "retry_scheduled")
        #expect((object?["fields"] as? [String: Any])?["delay_ms"] as? Int == 1500)
    }

    /// `--log-format json` wrote DEL, the C1 controls and the layout controls of a name raw: an object
    /// named `c/csi\u{9B}2J` or `c/\u{202E}evil.exe` in a prefix download put an 8-bit CSI and a
    /// right-to-left override on the terminal reading the log (`JSONSerialization` escapes only C0),
    /// while the text format escaped them. Still JSON, and the same values to a program reading it.
    @Test func jsonLinesEscapeEveryControlCharacter() throws {
        let hostile = "out/csi\u{9B}2J del\u{7F} \u{202E}evil.exe ls\u{2028}x \u{2066}iso"
        let entry = WorkerLogEntry(atMs: 0, level: .info, event: .claimed, jobID: "01JOB", kind: .downloadFile,
                                   fields: [("destination", .text(hostile))])
        let json = WorkerLogFormatter(format: .json).line(entry)
        for scalar in json.unicodeScalars {
            #expect(!TerminalText.isControl(scalar) && !TerminalText.isLayoutControl(scalar),
                    "raw U+\(String(scalar.value, radix: 16)) in \(json)")
        }
        for escaped in ["\\u009b", "\\u007f", "\\u202e", "\\u2028", "\\u2066"] {
            #expect(json.contains(escaped), "\(escaped) missing from \(json)")
        }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect((object["fields"] as? [String: Any])?["destination"] as? String == hostile)
    }

    /// A skipped transfer's size (`if_exists: skip`: the object found in place) is the server's word:
    /// 2⁶³ − 1 bytes "moved" in a millisecond made a rate past Int64, which trapped (the worker and
    /// every job in flight with it ended).
    @Test("a success's rate is held within Int64, whatever size the server named")
    func rateOfAnySize() throws {
        let lines = Mutex<[String]>([])
        let log = WorkerLog(formatter: WorkerLogFormatter(format: .json), write: { line in lines.withLock { $0.append(line) } })
        for size in [Int64.max, Int64.max / 2, 0] {
            log.finished(jobID: "J\(size)", kind: .uploadFile, outcome: .succeeded(JobResult(size: size)),
                        startedAtMs: 1_000, now: 1_001)
        }
        // A skipped one moved nothing: its line says so, with no rate at all.
        log.finished(jobID: "JS", kind: .uploadFile, outcome: .succeeded(JobResult(size: Int64.max, skipped: true)),
                     startedAtMs: 1_000, now: 1_001)
        let (objects, other) = jsonLines(lines.withLock { $0.joined(separator: "\n") })
        #expect(other.isEmpty, "\(other)")
        let rates = entries(objects, "succeeded").compactMap { (($0["fields"] as? [String: Any])?["bytes_per_second"] as? NSNumber)?.int64Value }
        #expect(rates == [Int64.max, Int64.max, 0], "\(objects)")
        let skipped = entries(objects, "succeeded").compactMap { $0["fields"] as? [String: Any] }.filter { $0["skipped"] as? String == "yes" }
        #expect(skipped.count == 1 && (skipped.first?["moved_bytes"] as? NSNumber)?.int64Value == 0, "\(objects)")
    }

    /// fetch-url's result names its object (its size among the metadata) but moves none of its bytes: its
    /// line said `bytes=10 rate="714 B/s"`, and the metrics counted the object's size as bytes moved.
    @Test("a fetch-url success reports no bytes and no rate, as the object operations do")
    func fetchURLMovesNoBytes() throws {
        let lines = Mutex<[String]>([])
        let log = WorkerLog(formatter: WorkerLogFormatter(format: .json), write: { line in lines.withLock { $0.append(line) } })
        let result = JobResult(object: StorageObject(bucket: "b", name: "o.txt", size: 10), url: "https://example.invalid/o.txt?token=t")
        log.finished(jobID: "JF", kind: .fetchURL, outcome: .succeeded(result), startedAtMs: 1_000, now: 1_014)
        let (objects, _) = jsonLines(lines.withLock { $0.joined(separator: "\n") })
        let fields = try #require(entries(objects, "succeeded").first?["fields"] as? [String: Any], "\(objects)")
        #expect(fields["bytes"] == nil && fields["rate"] == nil && fields["bytes_per_second"] == nil, "\(fields)")
        #expect(fields["duration_ms"] as? Int == 14, "\(fields)")
        let metrics = WorkerMetrics()
        metrics.finished(kind: .fetchURL, outcome: .succeeded(result), startedAtMs: 1_000, now: 1_014)
        let text = metrics.exposition(groupCommits: GroupCommitStats(), store: StoreReading(counts: nil, readAtMs: nil, up: true))
        #expect(text.contains("jobctl_transfers_total{kind=\"fetch-url\",outcome=\"succeeded\"} 1"), "\(text)")
        #expect(text.contains("jobctl_transfer_bytes_total{kind=\"fetch-url\",outcome=\"succeeded\"} 0"), "\(text)")
    }

    @Test func levelsFilter() {
        let lines = Mutex<[String]>([])
        let log = WorkerLog(minimumLevel: .warning, write: { line in lines.withLock { $0.append(line) } })
        log.record(WorkerLogEntry(atMs: 0, level: .info, event: .claimed))
        log.record(WorkerLogEntry(atMs: 0, level: .debug, event: .progress))
        log.record(WorkerLogEntry(atMs: 0, level: .warning, event: .slowCommit))
        log.record(WorkerLogEntry(atMs: 0, level: .error, event: .failed))
        #expect(lines.withLock { $0.count } == 2)
    }

    /// `worker_stopped` closes the log: a run the stop left behind (its commit giving up on a lock another
    /// process held) logged `slow_commit` 2 ms after it in a CI run. Lines recorded from many threads while
    /// the summary is recorded all come before it; the next `worker_started` opens the log again.
    @Test func nothingIsWrittenAfterWorkerStopped() async {
        let lines = Mutex<[String]>([])
        let log = WorkerLog(write: { line in lines.withLock { $0.append(line) } })
        log.record(WorkerLogEntry(atMs: 0, level: .info, event: .workerStarted))
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<2_000 { log.record(WorkerLogEntry(atMs: 0, level: .warning, event: .slowCommit)) }
                }
            }
            group.addTask { log.record(WorkerLogEntry(atMs: 0, level: .info, event: .workerStopped)) }
        }
        log.record(WorkerLogEntry(atMs: 0, level: .warning, event: .slowCommit))
        let written = lines.withLock { $0 }
        #expect(written.last?.contains("worker_stopped") == true, "\(written.suffix(3))")
        #expect(written.filter { $0.contains("worker_stopped") }.count == 1)

        log.record(WorkerLogEntry(atMs: 0, level: .info, event: .workerStarted))
        log.record(WorkerLogEntry(atMs: 0, level: .warning, event: .slowCommit))
        #expect(lines.withLock { $0.suffix(2).map { $0.contains("worker_started") || $0.contains("slow_commit") } } == [true, true])
    }
}

@Suite("worker log quoting", .onTestThreads) struct WorkerLogQuotingTests {
    /// What the formatter used to do: serialise a one-element array and drop its brackets; then DEL, the
    /// C1 controls and the bidirectional and line-breaking controls (U+2028–U+202E, U+2066–U+2069), which
    /// JSONSerialization leaves raw, as `\uxxxx`.
    private static func viaJSONSerialization(_ text: String) throws -> String {
        let data = try JSONSerialization.data(withJSONObject: [text], options: [.sortedKeys, .withoutEscapingSlashes])
        let array = try #require(String(data: data, encoding: .utf8))
        var quoted = ""
        for scalar in array.dropFirst().dropLast().unicodeScalars {
            if (0x7F...0x9F).contains(scalar.value) {
                quoted += "\\u00" + String(scalar.value, radix: 16)
            } else if (0x2028...0x202E).contains(scalar.value) || (0x2066...0x2069).contains(scalar.value) {
                quoted += "\\u" + String(scalar.value, radix: 16)
            } else {
                quoted.unicodeScalars.append(scalar)
            }
        }
        return quoted
    }

    /// Every ASCII byte and every C1 control, alone and inside text, and text beyond ASCII, quote as
    /// JSONSerialization did, DEL and C1 escaped.
    @Test func quotesEveryCharacterAsJSONSerializationDid() throws {
        var samples = (0..<160).map { String(UnicodeScalar(UInt8($0))) }
        samples += (0..<160).map { "a \(String(UnicodeScalar(UInt8($0)))) b" }
        samples += ["\u{A0}\u{A9}\u{BF}\u{C0}", "\u{9B}31m", "x\u{85}"]
        samples += ["", "516.1 KiB/s", "say \"hi\" \\ path/to/x", "é ü 日本 🚀 \u{2028}\u{2029}", "tab\there\r\nnext\u{0B}\u{1F}"]
        // Around the layout controls: each of them, and the characters beside them that stay as they are.
        samples += (0x2020...0x2070).map { "evil\(String(UnicodeScalar(UInt32($0))!))txt.exe" } + ["\u{202E}", "x\u{2069}", "\u{2066}\u{2069}\u{2026}"]
        for sample in samples {
            #expect(WorkerLogFormatter.jsonString(sample) == (try Self.viaJSONSerialization(sample)), "\(Array(sample.utf8))")
        }
    }

    /// A quoted value reads back as the text it came from (the line splits back into its fields).
    @Test func quotedValuesParseBack() throws {
        for sample in ["rate 1 KiB/s", "x\"y\\z\u{01}\n", "日本 語", "csi \u{9B}31m del \u{7F} nel \u{85} © \u{A0}"] {
            let quoted = WorkerLogFormatter.jsonString(sample)
            let parsed = try JSONSerialization.jsonObject(with: Data("[\(quoted)]".utf8)) as? [String]
            #expect(parsed == [sample])
        }
    }
}

/// The text line written in one string is the line the formatter built from parts before: each
/// part (time, padded level, event, job, kind, `name=value` fields) joined by one space.
@Suite("worker log text lines", .onTestThreads) struct WorkerLogTextLineTests {
    /// The former formatter: parts in an array, joined.
    static func partsJoined(_ entry: WorkerLogEntry, timestamps: Bool, color: Bool) -> String {
        func paint(_ text: String, _ code: String?) -> String {
            guard color, let code else { return text }
            return "\u{1B}[\(code)m\(text)\u{1B}[0m"
        }
        let levelCode: String? = switch entry.level {
        case .debug: "2"
        case .info: nil
        case .warning: "33"
        case .error: "31"
        }
        let eventCode: String? = switch entry.event {
        case .succeeded: "32"
        case .failed, .leaseLost, .abandoned, .storeError: "31"
        case .retryScheduled, .slowCommit, .cancelled: "33"
        default: nil
        }
        var parts: [String] = []
        if timestamps { parts.append(RFC3339.string(entry.atMs)) }
        parts.append(paint(entry.level.name.padding(toLength: 7, withPad: " ", startingAt: 0), levelCode))
        parts.append(paint(entry.event.rawValue, eventCode))
        if let job = entry.jobID { parts.append(job) }
        if let kind = entry.kind { parts.append(kind.rawValue) }
        for (name, value) in entry.fields { parts.append("\(name)=\(formerTextValue(value))") }
        return parts.joined(separator: " ")
    }

    /// The former value rendering, on `String`s and Unicode scalars.
    static func formerTextValue(_ value: WorkerLogValue) -> String {
        switch value {
        case .integer(let number):
            return String(number)
        case .number(let number):
            return number.isFinite ? String(format: "%.1f", number) : "0"
        case .text(let raw):
            let text = SecretRedaction.redactURLs(in: raw)
            let plain = !text.isEmpty && text.unicodeScalars.allSatisfy { scalar in
                scalar.value > 0x20 && !(0x7F...0xBF).contains(scalar.value) && !(0x2000...0x2FFF).contains(scalar.value)
                    && scalar != "\"" && scalar != "\\"
            }
            if plain { return text }
            return WorkerLogFormatter.jsonString(text)
        }
    }

    /// Awkward values: quotes, backslashes, every control character, DEL, C1 controls and other
    /// non-ASCII text, combining marks, emoji, URLs with secrets (plain and JSON-escaped), long values.
    static let awkwardTexts: [String] = {
        var texts = ["", " ", "plain", "a b", "\"", "\\", "say \"hi\"", "back\\slash", "caf\u{E9}", "cafe\u{301}",
                     "\u{65E5}\u{672C}\u{8A9E}", "\u{1F680} rocket", "\u{1F469}\u{200D}\u{1F469}\u{200D}\u{1F467}",
                     "nbsp\u{A0}x", "nel\u{85}x", "\u{2028}\u{2029}", "\u{7F}", "x\u{7F}y", "\u{FEFF}bom",
                     "evil\u{202E}txt.exe", "\u{2066}isolated\u{2069}", "dash \u{2014} ellipsis \u{2026}",
                     "https://h/x?token=abc&sig=def", "https:\\/\\/h\\/x?token=abc", "see https://u:pw@h/p#key=1.",
                     "file:///tmp/a b/c", "gs://b/o", "http://127.0.0.1:8080/small-jobctl/f00001.bin",
                     String(repeating: "long-value-", count: 200), String(repeating: "\u{E9}\"", count: 300),
                     "=", "a=b", "tab\there", "cr\rlf\n", "\r\n"]
        texts += (0..<32).map { "c\(String(UnicodeScalar(UInt8($0))))c" }
        return texts
    }()

    static let awkwardEntries: [WorkerLogEntry] = {
        var entries: [WorkerLogEntry] = []
        for (index, text) in awkwardTexts.enumerated() {
            let level = WorkerLogLevel.allCases[index % WorkerLogLevel.allCases.count]
            let event = WorkerLogEvent.allCases[index % WorkerLogEvent.allCases.count]
            let kind = JobKind.allCases[index % JobKind.allCases.count]
            entries.append(WorkerLogEntry(atMs: Int64(index) * 86_400_123, level: level, event: event, jobID: text, kind: kind,
                                          fields: [("v", .text(text)), (text.isEmpty ? "e" : text, .integer(Int64(index)))]))
        }
        let numbers: [WorkerLogValue] = [.integer(.min), .integer(.max), .integer(0), .integer(-1), .number(-0.05),
                                         .number(.infinity), .number(-.infinity), .number(1e300), .number(.nan), .number(0.95)]
        entries.append(WorkerLogEntry(atMs: 253_402_300_800_000, level: .info, event: .succeeded, jobID: "Y10K", kind: .uploadFile,
                                      fields: numbers.enumerated().map { ("n\($0.offset)", $0.element) }))
        entries.append(WorkerLogEntry(atMs: -1_000_000_000_000_000, level: .error, event: .failed, jobID: nil, kind: nil, fields: [("x", .text("y"))]))
        entries.append(WorkerLogEntry(atMs: -62_135_596_800_001, level: .debug, event: .progress))
        return entries
    }()

    /// Every awkward entry, in every combination of time and colour, is the line the former formatter
    /// made; `appendLine` adds exactly that line and a line feed, in text and in JSON.
    @Test func awkwardValuesMakeTheFormerLines() {
        var differences: [String] = []
        for entry in Self.awkwardEntries {
            for (timestamps, color) in [(true, false), (false, false), (true, true), (false, true)] {
                let formatter = WorkerLogFormatter(format: .text, timestamps: timestamps, color: color)
                let line = formatter.line(entry)
                let former = Self.partsJoined(entry, timestamps: timestamps, color: color)
                if !line.utf8.elementsEqual(former.utf8) { differences.append("\(former.debugDescription) → \(line.debugDescription)") }
                var text = "before\n"
                formatter.appendLine(entry, to: &text)
                if !text.utf8.elementsEqual(("before\n" + former + "\n").utf8) { differences.append("appended: \(text.debugDescription)") }
                var bytes = Array("before\n".utf8)
                formatter.appendLine(entry, toBytes: &bytes)
                if bytes != Array(("before\n" + former + "\n").utf8) { differences.append("as bytes: \(String(decoding: bytes, as: UTF8.self).debugDescription)") }
            }
            let json = WorkerLogFormatter(format: .json)
            var text = ""
            json.appendLine(entry, to: &text)
            if text != json.line(entry) + "\n" { differences.append("json: \(text.debugDescription)") }
            var bytes: [UInt8] = []
            json.appendLine(entry, toBytes: &bytes)
            if bytes != Array((json.line(entry) + "\n").utf8) { differences.append("json as bytes: \(String(decoding: bytes, as: UTF8.self).debugDescription)") }
        }
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
        for text in Self.awkwardTexts {
            #expect(WorkerLogFormatter.textValue(.text(text)).utf8.elementsEqual(Self.formerTextValue(.text(text)).utf8), "\(text.debugDescription)")
        }
    }

    /// The fixed level column is what the former lines made with Foundation's
    /// `padding(toLength: 7, withPad: " ", startingAt: 0)` of each level's name.
    @Test(arguments: WorkerLogLevel.allCases)
    func paddedLevelNames(_ level: WorkerLogLevel) {
        #expect(WorkerLogFormatter.paddedLevelName(level) == level.name.padding(toLength: 7, withPad: " ", startingAt: 0))
    }

    static let entries: [WorkerLogEntry] = [
        WorkerLogEntry(atMs: 1_796_045_473_668, level: .info, event: .claimed, jobID: "01M8QQV124E51HWKPQKQ3SFXE9", kind: .downloadMemory,
                       fields: [("attempt", .integer(1)), ("max_attempts", .integer(5)), ("queue", .text("default")),
                                ("lease_token", .integer(7)), ("source", .text("file:///tmp/objects/o-000001.bin"))]),
        WorkerLogEntry(atMs: 0, level: .warning, event: .retryScheduled, jobID: "01JOB", kind: .fetchURL, fields: [
            ("delay_ms", .integer(-3)), ("message", .text("said \"busy\" at https://h/x?token=abc")), ("empty", .text("")),
            ("rate", .text("64 B/s")), ("ratio", .number(0.25)), ("odd", .number(.nan)), ("é", .text("ünïcode\ttab")),
        ]),
        WorkerLogEntry(atMs: -1, level: .error, event: .failed, jobID: nil, kind: nil, fields: []),
        WorkerLogEntry(atMs: 86_399_999, level: .debug, event: .progress, jobID: "", kind: .uploadFile, fields: [("bytes", .integer(0))]),
        WorkerLogEntry(atMs: 951_782_400_000, level: .info, event: .succeeded, jobID: "J", kind: .downloadFile,
                       fields: [("path", .text("/tmp/a b/c")), ("source", .text("gs://b/o"))]),
    ]

    @Test(arguments: entries)
    func sameLineAsThePartsJoined(_ entry: WorkerLogEntry) {
        for (timestamps, color) in [(true, false), (false, false), (true, true), (false, true)] {
            let line = WorkerLogFormatter(format: .text, timestamps: timestamps, color: color).line(entry)
            #expect(line == Self.partsJoined(entry, timestamps: timestamps, color: color), "\(timestamps) \(color)")
        }
    }
}

/// The `started` line of an attempt after one that dropped its partial download: the log's point holds
/// no bytes, so the attempt starts at byte 0 — it was logged `resumed` (`from_bytes` of the dropped bytes
/// when the point was stale), and its moved bytes and rate were short by them.
@Suite("worker log: an attempt after a dropped download", .onTestThreads) struct DroppedDownloadLogTests {
    @Test func anAttemptFromAPointHoldingNoBytesIsStartedNotResumed() throws {
        let lines = Mutex<[String]>([])
        let log = WorkerLog(minimumLevel: .info, formatter: WorkerLogFormatter(format: .json), write: { line in
            lines.withLock { $0.append(line) }
        })
        let dropped = ResumePoint.download(bytesWritten: 0, generation: nil, etag: nil, tempPath: "/t/.f.partial")
        let held = ResumePoint.download(bytesWritten: 8_388_608, generation: nil, etag: "\"v1\"", tempPath: "/t/.f.partial")
        log.started(jobID: "01DROPPED", kind: .downloadFile, progress: TransferProgress(attempt: 3, bytesDone: 0, resumePoint: dropped), now: 1)
        log.started(jobID: "01HELD", kind: .downloadFile, progress: TransferProgress(attempt: 2, bytesDone: 8_388_608, resumePoint: held), now: 2)
        let objects = jsonLines(lines.withLock { $0.joined(separator: "\n") }).objects
        #expect(entries(objects, "started", job: "01DROPPED").count == 1 && entries(objects, "resumed", job: "01DROPPED").isEmpty, "\(objects)")
        #expect(entries(objects, "resumed", job: "01HELD").count == 1, "\(objects)")
    }

    /// A sliced download's point none of whose slices holds a byte (one stopped before its first) is a
    /// start from byte 0 too: it was logged `resumed from_bytes=0`.
    @Test func anAttemptFromSlicesHoldingNoBytesIsStartedNotResumed() throws {
        let lines = Mutex<[String]>([])
        let log = WorkerLog(minimumLevel: .info, formatter: WorkerLogFormatter(format: .json), write: { line in
            lines.withLock { $0.append(line) }
        })
        let file = FileIdentity(device: 1, inode: 2)
        let empty = ResumePoint.slicedDownload(slices: DownloadSlice.plan(size: 16 << 20, count: 4), generation: "7",
                                               tempPath: "/t/.f.partial", file: file)
        var plan = DownloadSlice.plan(size: 16 << 20, count: 4)
        plan[1].confirmed = 1 << 20
        let held = ResumePoint.slicedDownload(slices: plan, generation: "7", tempPath: "/t/.f.partial", file: file)
        log.started(jobID: "01EMPTY", kind: .downloadFile, progress: TransferProgress(attempt: 2, bytesDone: 0, resumePoint: empty), now: 1)
        log.started(jobID: "01SLICED", kind: .downloadFile, progress: TransferProgress(attempt: 2, bytesDone: 1 << 20, resumePoint: held), now: 2)
        let objects = jsonLines(lines.withLock { $0.joined(separator: "\n") }).objects
        #expect(entries(objects, "started", job: "01EMPTY").count == 1 && entries(objects, "resumed", job: "01EMPTY").isEmpty, "\(objects)")
        #expect(entries(objects, "resumed", job: "01SLICED").count == 1, "\(objects)")
    }

    /// An attempt logged `resumed from_bytes=X` that finds its partial download unusable only once it
    /// runs — here cut short behind the paused job's back — fetches it all again: the event log gets a
    /// checkpoint of no bytes and the success counts every byte, but the worker's log said nothing more,
    /// and its reader took the `resumed` line for a resume that never happened. A `restarted` line now
    /// follows it (`from_bytes=0`, `dropped_bytes=X`), before anything else of the attempt.
    @Test(arguments: [WorkerLogFormatter.Format.json, .text])
    func aResumeWhosePartialIsDroppedOnceRunningSaysSo(format: WorkerLogFormatter.Format) throws {
        let nginx = try startWorkerNginx(slowRate: "8m")
        defer { nginx.stop() }
        let directory = try TemporaryDirectory("worker-restarted-log")
        defer { directory.remove() }
        let database = directory.file("jobctl.db")
        let size = 32 << 20
        try writePatternFile("\(nginx.root)/slow/big.bin", size: Int64(size))
        let id = try #require(try submit("- {kind: download-file, source: \"\(nginx.baseURL)/slow/big.bin\", destination: \"\(directory.file("big.bin"))\"}\n",
                                         database: database, directory: directory).first)
        // Read as JSON to follow the job; the format under test is the second worker's.
        let first = try JobctlProcess.worker(database: database, ["--log-format", "json"], logDirectory: directory.path)
        defer { first.signal(SIGKILL) }
        func resumePoint() throws -> [String: Any]? {
            let shown = try jobctl(["show", id, "--json"], database: database)
            return (try? JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])?["resume_point"] as? [String: Any]
        }
        try #require(eventually(seconds: 30) { (try resumePoint()?["bytes_written"] as? Int ?? 0) > 0 }, "\(first.log)")
        #expect(try jobctl(["pause", id], database: database).status == 0)
        try #require(eventually(seconds: 10) { !entries(jsonLines(first.log).objects, "paused", job: id).isEmpty }, "\(first.log)")
        first.signal(SIGTERM)
        #expect(first.wait(seconds: 15) == 0, "\(first.log)")
        let point = try #require(try resumePoint())
        let kept = try #require(point["bytes_written"] as? Int)
        let partial = try #require(point["temp_path"] as? String)
        // Cut short behind the job's back: the next attempt finds fewer bytes than the log records.
        try #require(truncate(partial, off_t(kept / 2)) == 0, "no partial file at \(partial)")
        nginx.setFast(true)
        #expect(try jobctl(["resume", id], database: database).status == 0)
        let second = try JobctlProcess.worker(database: database, ["--drain", "--log-format", format.rawValue], logDirectory: directory.path)
        #expect(second.wait(seconds: 60) == 0, "\(second.log)")

        // Each line of the job as (event, fields), whichever the format.
        let lines: [(event: String, fields: [String: String])] = second.log.split(separator: "\n").compactMap { line in
            if format == .json {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], object["job"] as? String == id,
                      let event = object["event"] as? String else { return nil }
                return (event, (object["fields"] as? [String: Any] ?? [:]).mapValues { "\($0)" })
            }
            let words = line.split(separator: " ").map(String.init)
            guard let at = words.firstIndex(of: id), at > 0 else { return nil }
            let fields = words[(at + 1)...].compactMap { word -> (String, String)? in
                guard let equals = word.firstIndex(of: "=") else { return nil }
                return (String(word[..<equals]), String(word[word.index(after: equals)...]))
            }
            return (words[at - 1], Dictionary(fields) { a, _ in a })
        }
        let events = lines.map(\.event)
        let resumed = try #require(events.firstIndex(of: "resumed"), "\(second.log)")
        #expect(lines[resumed].fields["from_bytes"] == "\(kept)", "\(second.log)")
        let restarted = try #require(events.firstIndex(of: "restarted"), "a resume from \(kept) bytes the log never took back: \(second.log)")
        let succeeded = try #require(events.firstIndex(of: "succeeded"), "\(second.log)")
        #expect(resumed < restarted && restarted < succeeded && events.filter { $0 == "restarted" }.count == 1, "\(events)")
        #expect(lines[restarted].fields["from_bytes"] == "0" && lines[restarted].fields["dropped_bytes"] == "\(kept)", "\(second.log)")
        #expect(lines[succeeded].fields["bytes"] == "\(size)" && lines[succeeded].fields["moved_bytes"] == nil, "\(second.log)")
        // What the event log says of the same attempt: a checkpoint of no bytes after its start.
        let history = try jobctl(["history", id, "--json"], database: database)
        let logged = (try? JSONSerialization.jsonObject(with: Data(history.stdout.utf8)) as? [[String: Any]]) ?? []
        let lastStart = try #require(logged.lastIndex { $0["type"] as? String == "started" }, "\(history.stdout)")
        #expect(logged[lastStart...].contains {
            $0["type"] as? String == "progress" && ((($0["data"] as? [String: Any])?["resume_point"] as? [String: Any])?["bytes_written"] as? Int) == 0
        }, "\(history.stdout)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("big.bin"))).count == size)
    }
}
