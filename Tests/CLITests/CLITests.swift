import EventStore
import Foundation
import PostgresStore
import Synchronization
import Testing
import TestSupport
import Worker

@Suite("jobctl binary", .onTestThreads) struct CLITests {
    static let manifest = """
    defaults:
      queue: media
      max_attempts: 3
    jobs:
      - kind: upload-data
        data: "hello, world"
        destination: file://docs/greeting.txt
        key: greeting
        metadata:
          content_type: text/plain
          custom_metadata:
            team: storage
      - kind: download-memory
        source: file://docs/greeting.txt
        max_size: 1KiB
      - kind: fetch-url
        source: file://docs/greeting.txt
    """

    @Test func helpAndVersion() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let help = try workspace.jobctl(["--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("OVERVIEW:"))
        #expect(help.stdout.contains("submit"))
        for command in ["submit", "list", "show", "history", "audit", "replay", "migrate", "worker", "watch", "pause", "resume", "cancel", "retry", "result"] {
            let output = try workspace.jobctl(["help", command])
            #expect(output.status == 0, "help \(command)")
            #expect(output.stdout.contains("USAGE: jobctl \(command)"), "help \(command)")
            #expect(output.stdout.contains("OPTIONS:"), "help \(command)")
            let dashH = try workspace.jobctl([command, "-h"])
            #expect(dashH.stdout == output.stdout, "\(command) -h")
        }
        let version = try workspace.jobctl(["--version"])
        #expect(version.status == 0)
        #expect(version.stdout.hasPrefix("jobctl "))
        // The log schemas it knows, which the refusal of a newer log names: which build to upgrade to.
        #expect(version.stdout.contains("(event log schema: SQLite \(EventStore.knownSchemaVersion), PostgreSQL "
                                        + "\(PostgresStore.knownSchemaVersion))"), "\(version.stdout)")
        // A word after --version is a mistake said, not ignored; --help with a topic is help on it.
        for arguments in [["--version", "x"], ["version", "--json"]] {
            let extra = try workspace.jobctl(arguments)
            #expect(extra.status == 64 && extra.stdout.isEmpty, "\(arguments)")
            #expect(extra.stderr.contains("'\(arguments[0])' takes no arguments (got '\(arguments[1])')"), "\(extra.stderr)")
        }
        let topic = try workspace.jobctl(["--help", "list"])
        #expect(topic.status == 0 && topic.stdout.contains("USAGE: jobctl list"), "\(topic.stdout)")
        let twoTopics = try workspace.jobctl(["help", "list", "show"])
        #expect(twoTopics.status == 64 && twoTopics.stderr.contains("help takes one topic (got 'list' 'show')"), "\(twoTopics.stderr)")
    }

    /// Completions offered `help` after `jobctl help` and the man page had a section for it, but `jobctl
    /// help help` said "unknown command 'help'" (exit 64); `jobctl help manifest --man` printed the man
    /// page, the topic silently dropped.
    @Test("jobctl help help prints help's own usage; --man takes no topic; global options may come first")
    func helpOnHelp() throws {
        let help = try runProcess(PackagePaths.jobctlBinary, ["help", "help"])
        #expect(help.status == 0 && help.stdout.contains("USAGE: jobctl help [<options>] [<topic>]") && help.stdout.contains("--man"),
                "\(help.status) \(help.stdout)\(help.stderr)")
        for arguments in [["help", "--help"], ["--help", "help"], ["-h", "help"], ["help", "-h"]] {
            let same = try runProcess(PackagePaths.jobctlBinary, arguments)
            #expect(same.status == 0 && same.stdout == help.stdout, "\(arguments): \(same.stderr)")
        }
        let overview = try runProcess(PackagePaths.jobctlBinary, ["--help"]).stdout
        #expect(overview.contains("\n  help  "), "the overview does not list help")
        for arguments in [["help", "manifest", "--man"], ["help", "--man", "list"]] {
            let refused = try runProcess(PackagePaths.jobctlBinary, arguments)
            #expect(refused.status == 64 && refused.stdout.isEmpty
                    && refused.stderr.contains("--man prints the whole manual page and takes no topic"), "\(arguments): \(refused.stderr)")
        }
        let workspace = try CLIWorkspace("helphelp")
        defer { workspace.directory.remove() }
        // `jobctl --db x.db help list` is `jobctl help list` (the --db value was taken for a second topic).
        let placed = try workspace.jobctl(["--config", workspace.directory.file("none.yaml"), "help", "list"])
        #expect(placed.status == 0 && placed.stdout.contains("USAGE: jobctl list"), "\(placed.stderr)")
    }

    /// Help lines ran to 334 columns (`help config`), option lines to 291 (`help worker`), and the --db
    /// and --config lines to 152 and 156 in every help: prose and descriptions are wrapped to 100
    /// columns, to the terminal's width when that is less (60 at the least).
    @Test("every help text's every line fits 100 columns off a terminal, and the terminal's width on one")
    func helpFitsItsWidth() throws {
        let overview = try runProcess(PackagePaths.jobctlBinary, ["--help"])
        let commands = try CompletionTests.commandNames()
        #expect(commands.contains("worker") && commands.contains("help"))
        var texts: [(String, String)] = [("--help", overview.stdout), ("(none)", try runProcess(PackagePaths.jobctlBinary, []).stdout),
                                         ("help manifest", try runProcess(PackagePaths.jobctlBinary, ["help", "manifest"]).stdout)]
        for command in commands {
            for arguments in [["help", command], [command, "--help"]] {
                let output = try runProcess(PackagePaths.jobctlBinary, arguments, environment: ["COLUMNS": "300"])
                #expect(output.status == 0, "\(arguments): \(output.stderr)")
                texts.append((arguments.joined(separator: " "), output.stdout))
            }
        }
        for (name, text) in texts {
            #expect(text.contains("\n"), "\(name) printed nothing")
            for line in text.split(separator: "\n") where line.count > 100 {
                Issue.record("jobctl \(name): a line of \(line.count) columns: \(line)")
            }
        }
        // Option descriptions wrap under their column: no continuation line starts left of it.
        let worker = try runProcess(PackagePaths.jobctlBinary, ["help", "worker"]).stdout
        let options = try #require(worker.components(separatedBy: "OPTIONS:\n").dropFirst().first?.components(separatedBy: "\n\n").first)
        for line in options.split(separator: "\n") where !line.hasPrefix("  -") {
            #expect(line.hasPrefix(String(repeating: " ", count: 26)), "'\(line)'")
        }
        // On a terminal: its width, when less than 100 (COLUMNS or the terminal's own), but never under 60.
        let workspace = try CLIWorkspace("helpwidth")
        defer { workspace.directory.remove() }
        for (columns, limit) in [(72, 72), (40, 60), (200, 100)] {
            let screen = try workspace.jobctlOnTerminal(["help", "worker"], columns: columns)
            let lines = terminalLines(screen.stdout)
            #expect(lines.contains { $0.hasPrefix("USAGE: jobctl worker") }, "\(screen.stdout)")
            let widest = lines.map(\.count).max() ?? 0
            #expect(widest <= limit && widest > limit - 10, "\(columns) columns: lines up to \(widest)")
        }
    }

    /// `jobctl nosuch` ended "(see 'jobctl --help')" where a command's usage error ends "See 'jobctl help
    /// list'.": one form.
    @Test("every usage error says where to read more in one form")
    func usageErrorsPointToHelpAlike() throws {
        let cases: [([String], String)] = [
            (["nosuch"], "  See 'jobctl --help'."), (["--version", "x"], "  See 'jobctl --help'."),
            (["list", "--nosuch"], "  See 'jobctl help list'."), (["show"], "  See 'jobctl help show'."),
            (["help", "nosuch"], "  See 'jobctl help help'."), (["help", "list", "show"], "  See 'jobctl help help'."),
        ]
        for (arguments, last) in cases {
            let output = try runProcess(PackagePaths.jobctlBinary, arguments)
            #expect(output.status == 64, "\(arguments)")
            #expect(output.stderr.split(separator: "\n").last.map(String.init) == last, "\(arguments): \(output.stderr)")
        }
    }

    /// `jobctl --help` lists the options every command takes before or after its name; it was written
    /// out by hand and had lost --config and --no-color, and its --db line left out the file's `db`.
    @Test("jobctl --help lists every global option, as each command's help does")
    func overviewListsEveryGlobalOption() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let overview = try workspace.jobctl(["--help"])
        let options = try #require(overview.stdout.components(separatedBy: "\nOPTIONS:\n").dropFirst().first)
        let list = try workspace.jobctl(["help", "list"]).stdout
        for global in ["--db <path|url>", "--config <file>", "--no-color", "-h, --help"] {
            let line = try #require(list.split(separator: "\n").first { $0.hasPrefix("  \(global) ") }, "help list lacks \(global)")
            #expect(options.contains(line), "jobctl --help lacks '\(line)'")
        }
        #expect(options.contains("--version"))
        // Each of them works placed before the command, as the overview's usage shows.
        let config = try workspace.write("settings.yaml", "concurrency: 3\n")
        let placed = try runProcess(PackagePaths.jobctlBinary, ["--no-color", "--config", config, "--db", workspace.database, "config"],
                                    environment: ["NO_COLOR": "", "JOBCTL_CONFIG": "", "JOBCTL_DB": ""],
                                    currentDirectory: workspace.directory.path)
        #expect(placed.status == 0 && placed.stdout.contains(config), "\(placed.stderr)")
    }

    /// `jobctl help worker` says what the log's lines are; it named 5 of the 12 events that are not a
    /// job's transition (write_landed, clock_skew, log_lines_dropped, orphan_* and the start and stop
    /// lines were missing), though README's *Worker logs* names them all.
    @Test("jobctl help worker and README's Worker logs name every event a worker logs")
    func everyWorkerLogEventDocumented() throws {
        let help = try runProcess(PackagePaths.jobctlBinary, ["help", "worker"]).stdout
        let readme = try String(contentsOfFile: PackagePaths.root + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "### Worker logs\n").dropFirst().first?
            .components(separatedBy: "\n### ").first, "README has no Worker logs section")
        for event in WorkerLogEvent.allCases {
            #expect(help.contains(event.rawValue), "jobctl help worker does not name \(event.rawValue)")
            #expect(section.contains("`\(event.rawValue)`"), "README's Worker logs does not name `\(event.rawValue)`")
        }
    }

    /// README: "JSON output is one dialect everywhere: snake_case keys …, times as RFC 3339 `…_at` beside
    /// epoch milliseconds `…_at_ms`". Every command's --json is walked for a key that breaks it
    /// (`archive verify --json` gave `created_at` alone).
    @Test("every --json output keeps the one dialect: snake_case keys, each …_at beside its …_at_ms")
    func jsonOutputsKeepOneDialect() throws {
        let workspace = try CLIWorkspace("dialect")
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("""
            jobs:
              - kind: upload-data
                data: "\(String(repeating: "x", count: 400))"
                destination: file://b/x.txt
                key: up
              - kind: download-memory
                source: file://b/x.txt
                after: [up]
              - kind: download-memory
                source: file://b/missing.txt
                max_attempts: 1
            """)
        try #require(ids.count == 3)
        let worker = try workspace.jobctl(["worker", "--drain", "-q", "--json"], environment: ["JOBCTL_BUCKETS": ""])
        #expect(worker.status == 2, "\(worker.stderr)")
        let archive = workspace.directory.file("a.ndjson.gz")
        var outputs: [(String, String)] = []
        for arguments in [["list", "--json"], ["show", ids[1], "--json"], ["history", ids[1], "--json"], ["history", ids[2], "--json"],
                          ["audit", "--json"], ["stats", "--json"], ["result", ids[1], "--json"], ["watch", ids[0], "--json"],
                          ["orphans", "--json"], ["replay", "--verify", "--json"], ["config", "--json"], ["migrate", "--json"],
                          ["retry", "--state", "failed", "--dry-run", "--json"], ["cancel", ids[0], "--json"],
                          ["archive", "--before", "0s", "--to", archive, "--blobs-before", "0s", "--json"],
                          ["archive", "verify", archive, "--json"], ["audit", "--from", archive, "--json"],
                          ["history", "log", "--json"]] {
            let output = try workspace.jobctl(arguments)
            outputs.append((arguments.joined(separator: " "), output.stdout))
        }
        outputs.append(("worker --drain --json", worker.stdout))
        var checked = 0
        for (command, text) in outputs {
            // `watch --json` prints JSON lines; the others one document.
            let documents = command.hasPrefix("watch") ? text.split(separator: "\n").map(String.init) : [text]
            for document in documents {
                let value = try JSONSerialization.jsonObject(with: Data(document.utf8))
                for problem in Self.dialectProblems(value, path: "") {
                    Issue.record("jobctl \(command): \(problem)")
                }
                checked += 1
            }
        }
        #expect(checked >= outputs.count)
    }

    private static func dialectProblems(_ value: Any, path: String) -> [String] {
        if let array = value as? [Any] { return array.flatMap { dialectProblems($0, path: path + "[]") } }
        guard let object = value as? [String: Any] else { return [] }
        var problems: [String] = []
        for (key, member) in object {
            // Maps keyed by data, not field names: users' own metadata (kept as given) and the counts
            // by error name (Firebase's `objectNotFound`).
            if ["custom_metadata", "failures_by_code", "retries_by_code"].contains(key) { continue }
            if key.contains(where: { $0.isUppercase || $0 == "-" }) { problems.append("\(path).\(key) is not snake_case") }
            if key.hasSuffix("_at"), object[key + "_ms"] == nil { problems.append("\(path).\(key) has no \(key)_ms beside it") }
            if key.hasSuffix("_at_ms"), object[String(key.dropLast(3))] == nil { problems.append("\(path).\(key) has no \(key.dropLast(3)) beside it") }
            problems += dialectProblems(member, path: path + "." + key)
        }
        return problems
    }

    /// Messages quote commands as remedies ("run `jobctl replay --verify`"). Each one quoted anywhere in
    /// Sources must name a command this binary has and only options that command takes.
    @Test("every `jobctl …` a message or help quotes names a real command and its real options")
    func quotedCommandsExist() throws {
        let sources = PackagePaths.root + "/Sources"
        let files = try #require(FileManager.default.enumerator(atPath: sources)).compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }
        var quoted: Set<String> = []
        for file in files {
            let text = try String(contentsOfFile: sources + "/" + file, encoding: .utf8)
            for match in text.matches(of: /`(jobctl [^`]+)`/) {
                for part in match.1.components(separatedBy: "&&") { quoted.insert(part.trimmingCharacters(in: .whitespaces)) }
            }
        }
        #expect(quoted.count > 20, "\(quoted)")
        var helps: [String: ProcessOutput] = [:]
        // Global options may come before the command (`jobctl --db x.db list`): it is the word after them.
        let takingValue = try CompletionTests.globalOptionsTakingValue()
        for command in quoted.sorted() {
            var words = command.split(separator: " ").map(String.init)
            while words.count > 2, words[1].hasPrefix("--"), words[1] != "--help", words[1] != "--version" {
                let option = words.remove(at: 1)
                if takingValue.contains(option), words.count > 1 { words.remove(at: 1) }
            }
            guard words.count > 1 else { continue }
            if words[1] == "help" {
                let output = try runProcess(PackagePaths.jobctlBinary, Array(words.dropFirst()))
                #expect(output.status == 0, "`\(command)` exited \(output.status): \(output.stderr)")
                continue
            }
            let help = try helps[words[1]] ?? runProcess(PackagePaths.jobctlBinary, ["help", words[1]])
            helps[words[1]] = help
            #expect(help.status == 0, "`\(command)`: there is no command '\(words[1])'")
            for option in words.dropFirst(2) where option.hasPrefix("--") {
                let name = option.split(separator: "=")[0]
                #expect(help.stdout.split(separator: "\n").contains { $0.hasPrefix("  \(name) ") || $0.contains(", \(name) ") || $0 == "  \(name)" },
                        "`\(command)`: '\(words[1])' has no option \(name)")
            }
        }
    }

    /// README: a command's events are `cli:USER` ($USER, else $LOGNAME, else uidN; at most 256 bytes of
    /// it); a worker's are its `owner=`, `worker:HOST:PID`.
    @Test("events name their actor as README says: cli:$USER, else $LOGNAME, else uidN, at most 256 bytes; a worker its owner")
    func actorsAsDocumented() throws {
        let workspace = try CLIWorkspace("actors")
        defer { workspace.directory.remove() }
        let path = try workspace.write("one.yaml", "jobs:\n  - kind: upload-data\n    data: x\n    destination: file://b/x.txt\n")
        func submittedActor(_ environment: [String: String]) throws -> String? {
            // env -u: unset what the test process itself has, then set what this case gives.
            let unset = ["USER", "LOGNAME"].flatMap { ["-u", $0] }
            let output = try runProcess("/usr/bin/env", unset + environment.map { "\($0)=\($1)" }
                                        + [PackagePaths.jobctlBinary, "--db", workspace.database, "submit", "--json", path],
                                        currentDirectory: workspace.directory.path)
            let jobs = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [[String: Any]]
            let id = try #require(jobs?.first?["id"] as? String, "\(output.stderr)")
            let events = try workspace.json(["history", id, "--json"]) as? [[String: Any]]
            _ = try workspace.jobctl(["cancel", id])
            return events?.first?["actor"] as? String
        }
        #expect(try submittedActor(["USER": "alice", "LOGNAME": "bob"]) == "cli:alice")
        #expect(try submittedActor(["LOGNAME": "bob"]) == "cli:bob")
        #expect(try submittedActor([:]) == "cli:uid\(getuid())")
        // Bounded, and cut between characters: a 100 KB $USER was stored whole in every event.
        #expect(try submittedActor(["USER": String(repeating: "a", count: 100_000)]) == "cli:" + String(repeating: "a", count: 256))
        #expect(try submittedActor(["USER": "a" + String(repeating: "é", count: 200)]) == "cli:a" + String(repeating: "é", count: 127))
        let id = try #require(try workspace.submit("jobs:\n  - kind: upload-data\n    data: y\n    destination: file://b/y.txt\n").first)
        let worker = try workspace.jobctl(["worker", "--drain"], environment: ["JOBCTL_BUCKETS": ""])
        let owner = try #require(worker.stderr.firstMatch(of: /owner=(worker:[^ ]+:[0-9]+)/), "\(worker.stderr)")
        let events = try #require(try workspace.json(["history", id, "--json"]) as? [[String: Any]])
        #expect(events.dropFirst().allSatisfy { $0["actor"] as? String == String(owner.1) }, "\(events.map { $0["actor"] ?? "" })")
    }

    @Test func usageErrorsExit64() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let unknown = try workspace.jobctl(["frobnicate"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.hasPrefix("Error: unknown command 'frobnicate'"))
        #expect(unknown.stdout.isEmpty)
        let typo = try workspace.jobctl(["sumbit", "x.yaml"])
        #expect(typo.stderr.contains("did you mean 'submit'"))
        let badOption = try workspace.jobctl(["list", "--stat", "queued"])
        #expect(badOption.status == 64)
        #expect(badOption.stderr.contains("unknown option '--stat'"))
        #expect(badOption.stderr.contains("Usage: jobctl list"))
        let missing = try workspace.jobctl(["show"])
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("missing expected argument '<id>'"))
        let badState = try workspace.jobctl(["list", "--state=done"])
        #expect(badState.status == 64)
        #expect(badState.stderr.contains("unknown state 'done'"))
        let badLimit = try workspace.jobctl(["list", "--limit", "many"])
        #expect(badLimit.status == 64)
    }

    /// `--exit-when-idle` is "with --all" in the help; with a job id or a batch it changed nothing and
    /// was taken silently (a script meaning to stop once idle followed one job until it ended).
    @Test("watch --exit-when-idle without --all is a usage error, not ignored")
    func exitWhenIdleNeedsAll() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let id = try #require(try workspace.submit("jobs:\n  - kind: upload-data\n    data: hi\n    destination: file://b/x.txt\n").first)
        for arguments in [["watch", id, "--exit-when-idle"], ["watch", "--batch", id, "--exit-when-idle"]] {
            // The job stays queued (no worker), so a watch that took the flag would follow it for ever:
            // `timeout` ends it (exit 124).
            let output = try runProcess("/usr/bin/timeout", ["10", PackagePaths.jobctlBinary, "--db", workspace.database] + arguments,
                                        environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
            #expect(output.status == 64 && output.stderr.contains("--exit-when-idle applies only with --all"),
                    "\(arguments): exit \(output.status): \(output.stderr)")
        }
    }

    @Test(arguments: StoreEngine.allCases)
    func submitThenInspect(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("cli-inspect", engine: engine)
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", Self.manifest)
        let submitted = try workspace.jobctl(["submit", path])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 3)
        #expect(ids.allSatisfy { $0.count == 26 })

        // The database file is private to its owner.
        if engine == .sqlite {
            let mode = try FileManager.default.attributesOfItem(atPath: workspace.database)[.posixPermissions] as? Int
            #expect(mode == 0o600)
        }

        let list = try workspace.jobctl(["list"])
        #expect(list.status == 0)
        #expect(list.stdout.contains("ID"))
        #expect(list.stdout.contains("upload-data"))
        #expect(list.stdout.contains("queued"))
        #expect(list.stdout.contains("file://docs/greeting.txt"))

        let listJSON = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(listJSON.count == 3)
        #expect(Set(listJSON.compactMap { $0["id"] as? String }) == Set(ids))
        #expect(listJSON.allSatisfy { $0["state"] as? String == "queued" && $0["queue"] as? String == "media" })
        let filtered = try #require(try workspace.json(["list", "--kind", "fetch-url", "--json"]) as? [[String: Any]])
        #expect(filtered.count == 1)

        let show = try workspace.jobctl(["show", ids[0]])
        #expect(show.status == 0)
        #expect(show.stdout.contains("upload-data"))
        #expect(show.stdout.contains("greeting"))
        let shown = try #require(try workspace.json(["show", ids[0], "--json"]) as? [String: Any])
        #expect(shown["id"] as? String == ids[0])
        #expect(shown["max_attempts"] as? Int == 3)
        #expect(shown["key"] as? String == "greeting")
        // The ids of one submit sort in the manifest's order; a prefix they share names none of them
        // and says which it matches, one of 15 characters names one.
        #expect(ids == ids.sorted())
        let shared = try workspace.jobctl(["show", String(ids[1].prefix(10))])
        #expect(shared.status == 1 && shared.stderr.contains("matches 3 jobs") && ids.allSatisfy(shared.stderr.contains), "\(shared.stderr)")
        let unique = uniquePrefix(of: ids[1], among: ids)
        #expect(unique.count <= 15)
        let byPrefix = try #require(try workspace.json(["show", unique, "--json"]) as? [String: Any])
        #expect(byPrefix["id"] as? String == ids[1])

        let history = try #require(try workspace.json(["history", ids[0], "--json"]) as? [[String: Any]])
        #expect(history.count == 1)
        #expect(history.first?["type"] as? String == "submitted")
        #expect(history.first?["version"] as? Int == 1)
        let historyTable = try workspace.jobctl(["history", ids[0]])
        #expect(historyTable.stdout.contains("submitted"))
        #expect(historyTable.stdout.contains("cli:"))

        let audit = try #require(try workspace.json(["audit", "--json"]) as? [[String: Any]])
        #expect(audit.count == 3)
        let csv = try workspace.jobctl(["audit", "--csv"])
        let csvLines = csv.stdout.split(separator: "\n")
        #expect(csvLines.first?.hasPrefix("id,kind,state,attempts") == true)
        #expect(csvLines.count == 4)
        let recent = try #require(try workspace.json(["audit", "--since", "1h", "--json"]) as? [[String: Any]])
        #expect(recent.count == 3)
        let future = try #require(try workspace.json(["audit", "--since", "2999-01-01", "--json"]) as? [[String: Any]])
        #expect(future.isEmpty)

        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(verify.stdout.contains("projection matches"))
    }

    @Test(arguments: StoreEngine.allCases)
    func idempotentKeysAcrossSubmits(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("cli-keys", engine: engine)
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", Self.manifest)
        let first = try #require(try workspace.json(["submit", "--json", path]) as? [[String: Any]])
        let second = try #require(try workspace.json(["submit", "--json", path]) as? [[String: Any]])
        #expect(first.filter { $0["created"] as? Bool == true }.count == 3)
        // The keyed job is not created again and keeps its id; the two unkeyed jobs are new.
        let keyedFirst = first.first { $0["key"] as? String == "greeting" }
        let keyedSecond = second.first { $0["key"] as? String == "greeting" }
        #expect(keyedFirst?["id"] as? String == keyedSecond?["id"] as? String)
        #expect(keyedSecond?["created"] as? Bool == false)
        let all = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        #expect(all.count == 5)
    }

    @Test func submitFromStandardInput() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let output = try workspace.jobctl(["submit", "-"], stdin: Self.manifest)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.split(separator: "\n").count == 3)
    }

    @Test func dryRunValidatesAndStoresNothing() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", Self.manifest)
        let output = try workspace.jobctl(["submit", "--dry-run", path])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("3 jobs valid; nothing submitted"))
        #expect(!FileManager.default.fileExists(atPath: workspace.database))
        let json = try workspace.jobctl(["submit", "--dry-run", "--json", path])
        let specs = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
        #expect(specs.compactMap { $0["kind"] as? String } == ["upload-data", "download-memory", "fetch-url"])
        #expect(!FileManager.default.fileExists(atPath: workspace.database))
    }

    /// README and `help submit` say `--json` prints `[{id, key, kind, created, batch}]`, but a job without
    /// a key or a batch had no such field at all. The dry run prints the job specs instead, and says so.
    @Test("submit --json gives every job its five keys, null when absent; --dry-run --json prints specs, as its help says",
          arguments: StoreEngine.allCases)
    func submitJSONHasEveryKey(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("submitjson", engine: engine)
        defer { workspace.directory.remove() }
        try workspace.write("photos/a.jpg", "a")
        try workspace.write("photos/b.jpg", "b")
        let path = try workspace.write("jobs.yaml", """
            jobs:
              - {kind: upload-data, data: one, destination: "file://docs/one.txt", key: first}
              - {kind: upload-data, data: two, destination: "file://docs/two.txt"}
              - {kind: upload-file, source: "\(workspace.directory.file("photos"))/", destination: "file://docs/photos/"}
            """)
        let dryRun = try #require(try workspace.json(["submit", "--dry-run", "--json", path]) as? [[String: Any]])
        let rows = try #require(try workspace.json(["submit", "--json", path]) as? [[String: Any]])
        try #require(rows.count == 4, "\(rows)")
        for row in rows {
            #expect(Set(row.keys) == ["id", "key", "kind", "created", "batch"], "\(row)")
        }
        #expect(rows[0]["key"] as? String == "first" && rows[0]["batch"] is NSNull, "\(rows[0])")
        #expect(rows[1]["key"] is NSNull && rows[1]["batch"] is NSNull, "\(rows[1])")
        let batch = try #require(rows[2]["batch"] as? String)
        #expect(rows[2]["key"] is NSNull && rows[3]["batch"] as? String == batch, "\(rows[2...])")
        // The dry run's objects are the specs `show --json` prints for the jobs submitted (no id, no created),
        // but for the batch's id: each expansion draws its own.
        func withoutBatchID(_ spec: [String: Any]) -> NSDictionary {
            var spec = spec
            if var batch = spec["batch"] as? [String: Any] { batch["id"] = nil; spec["batch"] = batch }
            return NSDictionary(dictionary: spec)
        }
        try #require(dryRun.count == 4)
        for (spec, row) in zip(dryRun, rows) {
            let id = try #require(row["id"] as? String)
            let shown = try #require(try workspace.json(["show", id, "--json"]) as? [String: Any])
            let shownSpec = try #require(shown["spec"] as? [String: Any])
            #expect(withoutBatchID(spec) == withoutBatchID(shownSpec), "\(spec) \(shown)")
            #expect(spec["id"] == nil && spec["created"] == nil)
        }
        let help = try workspace.jobctl(["help", "submit"]).stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(help.contains("(key and batch null when the job has none)")
                && help.contains("with --dry-run, an array of the job specs as they would be submitted, each as show --json prints a job's spec"),
                "\(help)")
    }

    /// A dry run answers as the submit would: an `after:` that names no job in the manifests or the log
    /// (it said "1 job valid", exit 0, where the submit refused it, exit 65), a key whose job the log
    /// holds with another spec, a cycle; and it says which jobs a key maps to a job already there.
    @Test func dryRunPlansAgainstTheLog() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let missing = try workspace.write("missing.yaml", "- {kind: upload-data, data: x, destination: \"file://b/x\", after: [000000]}\n")
        for _ in 0..<2 {
            // With no log, then with one.
            let refused = try workspace.jobctl(["submit", "--dry-run", missing])
            #expect(refused.status == 65, "\(refused.stdout)\(refused.stderr)")
            #expect(refused.stderr.contains("missing.yaml:1:") && refused.stderr.contains("'after' names '000000'"), "\(refused.stderr)")
            #expect(try workspace.jobctl(["submit", missing]).status == 65)
            _ = try workspace.jobctl(["migrate"])
        }
        let first = try workspace.write("first.yaml", "- {kind: upload-data, data: one, destination: \"file://b/one\", key: one}\n")
        let firstID = try #require(try workspace.jobctl(["submit", first]).stdout.split(separator: "\n").first.map(String.init))
        let second = try workspace.write("second.yaml", """
            - {kind: upload-data, data: one, destination: "file://b/one", key: one}
            - {kind: upload-data, data: two, destination: "file://b/two", after: [one]}
            """)
        let planned = try workspace.jobctl(["submit", "--dry-run", second])
        #expect(planned.status == 0, "\(planned.stderr)")
        #expect(planned.stdout.contains("(already in the log as \(firstID): not submitted again)"), "\(planned.stdout)")
        #expect(planned.stdout.contains("2 jobs valid (1 already in the log under its key); nothing submitted"), "\(planned.stdout)")
        #expect(try workspace.jobctl(["list", "--json"]).stdout.components(separatedBy: "\"id\"").count == 2, "nothing was stored")
        // A key the log holds with another spec: refused by the dry run as by the submit.
        let conflict = try workspace.write("conflict.yaml", "- {kind: upload-data, data: changed, destination: \"file://b/one\", key: one}\n")
        let real = try workspace.jobctl(["submit", conflict])
        let dry = try workspace.jobctl(["submit", "--dry-run", conflict])
        #expect(real.status != 0 && dry.status == real.status, "\(dry.stdout)\(dry.stderr) / \(real.stderr)")
        #expect(dry.stderr == real.stderr, "\(dry.stderr) / \(real.stderr)")
    }

    @Test func badManifestSubmitsNothing() throws {
        let workspace = try CLIWorkspace()
        defer { workspace.directory.remove() }
        let good = try workspace.write("good.yaml", Self.manifest)
        let bad = try workspace.write("bad.yaml", """
        jobs:
          - kind: upload-data
            data: "x"
            destination: gs://bucket/ok.txt
          - kind: download-memory
            source: gs://bucket/a.txt
            max_size: lots
        """)
        let output = try workspace.jobctl(["submit", good, bad])
        #expect(output.status == 65)
        #expect(output.stderr.contains("bad.yaml:7:15: error:"), "\(output.stderr)")
        #expect(output.stderr.contains("    max_size: lots"))
        #expect(output.stderr.contains("nothing was submitted"))
        #expect(output.stdout.isEmpty)
        // Nothing stored: the good manifest's jobs are not there either.
        if FileManager.default.fileExists(atPath: workspace.database) {
            let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
            #expect(jobs.isEmpty)
        }
        let missing = try workspace.jobctl(["submit", workspace.directory.file("nope.yaml")])
        #expect(missing.status == 65)
        #expect(missing.stderr.contains("nope.yaml: error: cannot read the manifest"))
    }

    @Test(arguments: StoreEngine.allCases)
    func controlsAndRefusals(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("cli-controls", engine: engine)
        defer { workspace.directory.remove() }
        let path = try workspace.write("jobs.yaml", Self.manifest)
        let ids = try workspace.jobctl(["submit", path]).stdout.split(separator: "\n").map(String.init)
        let paused = try workspace.jobctl(["pause", ids[0]])
        #expect(paused.status == 0)
        #expect(paused.stdout.contains("paused"))
        let resumed = try workspace.jobctl(["resume", ids[0]])
        #expect(resumed.stdout.contains("queued"))
        let cancelled = try workspace.jobctl(["cancel", ids[1]])
        #expect(cancelled.stdout.contains("cancelled"))
        let cancelledJSON = try #require(try workspace.json(["show", ids[1], "--json"]) as? [String: Any])
        let error = try #require(cancelledJSON["error"] as? [String: Any])
        #expect(error["name"] as? String == "cancelled")
        #expect(error["code"] as? Int == -13040)
        let pauseCancelled = try workspace.jobctl(["pause", ids[1]])
        #expect(pauseCancelled.status == 1)
        #expect(pauseCancelled.stderr.contains("Error:"))
        let retried = try workspace.jobctl(["retry", ids[1]])
        #expect(retried.status == 0)
        #expect(retried.stdout.contains("queued"))
        let retryQueued = try workspace.jobctl(["retry", ids[1]])
        #expect(retryQueued.status == 1)
        let unknown = try workspace.jobctl(["show", "ZZZZZZZZZZ"])
        #expect(unknown.status == 1)
        #expect(unknown.stderr.hasPrefix("Error:"))
        let history = try #require(try workspace.json(["history", ids[1], "--json"]) as? [[String: Any]])
        #expect(history.compactMap { $0["type"] as? String } == ["submitted", "cancelled", "retried"])
        let result = try workspace.jobctl(["result", ids[0]])
        #expect(result.status == 1)
        #expect(result.stderr.contains("only succeeded jobs have a result"))
    }

    @Test(arguments: StoreEngine.allCases)
    func readCommandsOnMissingDatabase(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("cli-missing", engine: engine)
        defer { workspace.directory.remove() }
        let output = try workspace.jobctl(["list"])
        #expect(output.status == 1)
        #expect(output.stderr.contains("no database at"))
        if engine == .sqlite {
            #expect(!FileManager.default.fileExists(atPath: workspace.database))
        }
    }

    /// Several `jobctl submit` processes at once on one file: nothing lost, nothing doubled.
    @Test(arguments: StoreEngine.allCases)
    func concurrentSubmitProcesses(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("cli-concurrent", engine: engine)
        defer { workspace.directory.remove() }
        let processes = 4
        let jobsEach = 25
        var paths: [String] = []
        for p in 0..<processes {
            var text = "jobs:\n"
            for j in 0..<jobsEach {
                text += "  - {kind: upload-data, data: \"\(p)-\(j)\", destination: \"gs://bkt/p\(p)/\(j).txt\", key: \"k-\(p)-\(j)\"}\n"
            }
            // Every process also submits one shared key: exactly one job may exist for it.
            text += "  - {kind: upload-data, data: shared, destination: gs://bkt/shared.txt, key: shared}\n"
            paths.append(try workspace.write("m\(p).yaml", text))
        }
        let manifestPaths = paths
        let outputs = Mutex<[ProcessOutput]>([])
        DispatchQueue.concurrentPerform(iterations: processes) { index in
            if let output = try? workspace.jobctl(["submit", "--json", manifestPaths[index]]) {
                outputs.withLock { $0.append(output) }
            }
        }
        let results = outputs.withLock { $0 }
        #expect(results.count == processes)
        #expect(results.allSatisfy { $0.status == 0 }, "\(results.map(\.stderr))")
        let jobs = try #require(try workspace.json(["list", "--limit", "0", "--json"]) as? [[String: Any]])
        #expect(jobs.count == processes * jobsEach + 1)
        let keys = jobs.compactMap { $0["key"] as? String }
        #expect(Set(keys).count == keys.count)
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0)
    }
}
