import Foundation
import Testing
import TestSupport

/// `audit` and `replay --verify` stream: rows are printed as they are read, and the process's memory
/// does not grow with the log. Peak memory is measured in the `jobctl` process itself (GNU time's
/// maximum resident set size), never inside the test process.
@Suite("Audit and replay over a growing log", .onTestThreads)
struct BigLogTests {
    /// `count` download-memory jobs of one 64-byte object in a `file://` folder of the workspace.
    static func manifest(_ workspace: CLIWorkspace, count: Int, name: String = "o.bin") throws -> String {
        let object = try workspace.write("objects/\(name)", String(repeating: "x", count: 64))
        let job = "  - kind: download-memory\n    source: \"file://\(object)\"\n"
        return "jobs:\n" + String(repeating: job, count: count)
    }

    /// The peak resident set size of `jobctl ARGS` in KiB, its standard output thrown away.
    static func peakKiB(_ workspace: CLIWorkspace, _ arguments: [String]) throws -> Int {
        let report = workspace.directory.file("rss-\(UUID().uuidString.prefix(8)).txt")
        let quoted = ([PackagePaths.jobctlBinary, "--db", workspace.database] + arguments).map { "'\($0)'" }.joined(separator: " ")
        let output = try runProcess("/bin/sh", ["-c", "/usr/bin/time -f %M -o '\(report)' \(quoted) > /dev/null"],
                                    environment: ["NO_COLOR": "1"], currentDirectory: workspace.directory.path)
        guard output.status == 0 else { throw CLITestError("jobctl \(arguments) exited \(output.status): \(output.stderr)") }
        let text = try String(contentsOfFile: report, encoding: .utf8)
        guard let kib = text.split(separator: "\n").last.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) }) else {
            throw CLITestError("no peak RSS in '\(text)'")
        }
        return kib
    }

    @Test("audit streams every job in submission order, the same rows as a table, JSON and CSV", arguments: StoreEngine.allCases)
    func auditStreamsEveryRow(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("biglog-audit", engine: engine)
        // Past PostgreSQL's 1,000-row FETCH pages; some drained (results), some still queued ("-").
        var ids = try workspace.submit(try Self.manifest(workspace, count: 1_200))
        let drain = try workspace.jobctl(["worker", "--drain", "--concurrency", "16"])
        #expect(drain.status == 0, "\(drain.stderr)")
        ids += try workspace.submit(try Self.manifest(workspace, count: 1_300, name: "p.bin"))
        #expect(ids.count == 2_500)

        let json = try workspace.jobctl(["audit", "--json"])
        #expect(json.status == 0, "\(json.stderr)")
        // The array jsonText prints: two-space indentation, sorted keys, one object after another.
        #expect(json.stdout.hasPrefix("[\n  {\n    \"attempts\" : 1,\n"))
        #expect(json.stdout.hasSuffix("\n  }\n]\n"))
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
        #expect(rows.compactMap { $0["id"] as? String } == ids)
        #expect(rows.prefix(1_200).allSatisfy { $0["state"] as? String == "succeeded" && $0["size"] as? Int == 64 })
        #expect(rows.suffix(1_300).allSatisfy { $0["state"] as? String == "queued" && $0["size"] == nil })
        // Times are written without a date formatter per row, yet read as Foundation's formatter writes them.
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        for row in rows {
            for key in ["submitted", "started", "finished"] {
                guard let ms = row["\(key)_at_ms"] as? Int64 ?? (row["\(key)_at_ms"] as? Int).map(Int64.init) else { continue }
                #expect(row["\(key)_at"] as? String == formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)))
            }
        }

        let csv = try workspace.jobctl(["audit", "--csv"])
        #expect(csv.status == 0, "\(csv.stderr)")
        let lines = csv.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.count == 2_502 && lines.last == "")
        #expect(lines.first?.hasPrefix("id,kind,state,attempts,") == true)
        #expect(lines.dropFirst().dropLast().map { String($0.prefix { $0 != "," }) } == ids)

        let table = try workspace.jobctl(["audit"])
        #expect(table.status == 0, "\(table.stderr)")
        let tableLines = table.stdout.split(separator: "\n").map(String.init)
        #expect(tableLines.count == 2_502)
        #expect(tableLines.last == "2500 jobs: 1300 queued, 1200 succeeded")
        let body = Array(tableLines.dropFirst().dropLast())
        #expect(body.map { String($0.prefix { $0 != " " }) } == ids)
        // Columns measured over every row before the first is printed: each starts where its header does.
        let header = try #require(tableLines.first)
        let sizeColumn = try #require(header.range(of: "SIZE")).lowerBound.utf16Offset(in: header)
        #expect(body.allSatisfy { line in
            let index = line.index(line.startIndex, offsetBy: sizeColumn)
            return line[line.index(before: index)] == " " && line[index] != " "
        })

        let none = try workspace.jobctl(["audit", "--since", "2999-01-01", "--json"])
        #expect(none.status == 0)
        let noRows = try JSONSerialization.jsonObject(with: Data(none.stdout.utf8)) as? [Any]
        #expect(noRows?.isEmpty == true, "\(none.stdout)")
    }

    @Test("replay --verify and audit keep their memory flat while the log grows tenfold", arguments: StoreEngine.allCases)
    func memoryStaysFlat(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("biglog-memory", engine: engine)
        _ = try workspace.submit(try Self.manifest(workspace, count: 1_500))
        let small = (replay: try Self.peakKiB(workspace, ["replay", "--verify"]), audit: try Self.peakKiB(workspace, ["audit", "--json"]))
        _ = try workspace.submit(try Self.manifest(workspace, count: 13_500, name: "p.bin"))
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.stdout == "replayed 15000 events into 15000 jobs: projection matches\n", "\(verify.stderr)")
        let big = (replay: try Self.peakKiB(workspace, ["replay", "--verify"]), audit: try Self.peakKiB(workspace, ["audit", "--json"]))
        // Holding every job (as before) costs several KiB a job: 13,500 more jobs would add tens of MiB.
        #expect(big.replay - small.replay < 12 * 1_024, "replay peak \(small.replay) KiB → \(big.replay) KiB")
        #expect(big.audit - small.audit < 12 * 1_024, "audit peak \(small.audit) KiB → \(big.audit) KiB")
        #expect(big.replay < 64 * 1_024 && big.audit < 64 * 1_024, "replay \(small.replay) → \(big.replay) KiB, audit \(small.audit) → \(big.audit) KiB")
    }

    @Test("stats reports the database's size and its size per finished job", arguments: StoreEngine.allCases)
    func statsReportsTheSize(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("biglog-size", engine: engine)
        _ = try workspace.submit(try Self.manifest(workspace, count: 40))
        let drain = try workspace.jobctl(["worker", "--drain", "--concurrency", "8"])
        #expect(drain.status == 0, "\(drain.stderr)")
        _ = try workspace.submit(try Self.manifest(workspace, count: 10, name: "p.bin"))  // queued: not finished

        let stats = try #require(try workspace.json(["stats", "--json"]) as? [String: Any])
        let bytes = try #require(stats["database_bytes"] as? Int)
        #expect(stats["finished_jobs"] as? Int == 40)
        #expect(stats["bytes_per_finished_job"] as? Int == bytes / 40)
        // At least the 50 jobs' events and rows; well under what a page per row would take.
        #expect(bytes > 50 * 400 && bytes < 64 << 20, "\(bytes)")
        if engine == .sqlite {
            let file = try #require(try FileManager.default.attributesOfItem(atPath: workspace.database)[.size] as? Int)
            #expect(bytes == file, "the file holds every page after the worker's checkpoint")
        }
        // One queue's figures still divide the whole database by every finished job.
        let oneQueue = try #require(try workspace.json(["stats", "--queue", "nope", "--json"]) as? [String: Any])
        #expect(oneQueue["finished_jobs"] as? Int == 40 && oneQueue["database_bytes"] as? Int == bytes)

        let text = try workspace.jobctl(["stats"])
        #expect(text.status == 0)
        #expect(text.stdout.contains("\ndatabase: "), "\(text.stdout)")
        #expect(text.stdout.contains(" per finished job (40 finished jobs)"), "\(text.stdout)")
    }
}
