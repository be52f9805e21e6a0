import Foundation
import Testing
import TestSupport

/// `jobctl worker --metrics`: a real worker runs real jobs, curl scrapes the endpoint, and the Python
/// `prometheus-client` parser (the reference reader of the format) reads what it served.
@Suite("worker metrics endpoint", .onTestThreads) struct WorkerMetricsTests {
    /// A worker on the workspace's log serving its metrics on 127.0.0.1:`port`, its output discarded.
    static func metricsWorker(_ workspace: CLIWorkspace, port: Int) throws -> Process {
        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: PackagePaths.jobctlBinary)
        worker.arguments = ["--db", workspace.database, "worker", "--metrics", "127.0.0.1:\(port)"]
        worker.environment = ["NO_COLOR": "1", "PATH": "/usr/bin:/bin"]
        worker.standardOutput = FileHandle.nullDevice
        worker.standardError = FileHandle.nullDevice
        try worker.run()
        return worker
    }

    /// One parsed sample: its full name (with `_bucket`, `_sum`, …), labels and value.
    struct Sample: Decodable {
        let name: String
        let labels: [String: String]
        let value: Double
    }

    /// One parsed family.
    struct Family: Decodable {
        let type: String
        let samples: [Sample]
    }

    /// Parses an exposition body with `prometheus_client.parser`; a body it refuses fails the test.
    static func parse(_ body: String, in workspace: CLIWorkspace) throws -> [String: Family] {
        let script = try workspace.write("parse_metrics.py", """
            import json, sys
            from prometheus_client.parser import text_string_to_metric_families
            families = {}
            for family in text_string_to_metric_families(sys.stdin.read()):
                families[family.name] = {"type": family.type, "samples": [
                    {"name": s.name, "labels": s.labels, "value": s.value} for s in family.samples]}
            json.dump(families, sys.stdout)
            """)
        let output = try runProcess("\(PackagePaths.venv)/bin/python", [script], stdin: body)
        guard output.status == 0 else { throw CLITestError("prometheus_client refused the body: \(output.stderr)\n\(body)") }
        return try JSONDecoder().decode([String: Family].self, from: Data(output.stdout.utf8))
    }

    /// `curl -s -o - -w '\n%{http_code} %{content_type}' URL`, split into (status, content type, body).
    static func curl(_ arguments: [String]) throws -> (status: Int, contentType: String, body: String) {
        let output = try runProcess("/usr/bin/curl", ["-s", "--max-time", "10", "-w", "\n%{http_code} %{content_type}"] + arguments)
        guard output.status == 0, let split = output.stdout.range(of: "\n", options: .backwards) else {
            throw CLITestError("curl \(arguments) exited \(output.status): \(output.stderr)")
        }
        let trailer = output.stdout[split.upperBound...].split(separator: " ", maxSplits: 1)
        return (Int(trailer.first ?? "") ?? 0, trailer.count > 1 ? String(trailer[1]) : "", String(output.stdout[..<split.lowerBound]))
    }

    /// The value of the sample `name` with exactly `labels`, or nil when it is not served.
    static func value(_ families: [String: Family], _ family: String, _ name: String, _ labels: [String: String]) -> Double? {
        families[family]?.samples.first { $0.name == name && $0.labels == labels }?.value
    }

    @Test func aRealWorkerServesExactCountsThatThePrometheusParserReads() throws {
        let workspace = try CLIWorkspace("metrics")
        defer { workspace.directory.remove() }
        // A port nothing listens on: the retried job's connections are refused (a retryable failure).
        let closed = ClosedLoopbackPort()
        defer { withExtendedLifetime(closed) {} }
        let closedPort = closed.port
        let ids = try workspace.submit("""
            - {kind: upload-data, data: hello, destination: "file://m/a.txt"}
            - {kind: upload-data, data: "hello, world", destination: "file://m/b.txt", queue: other}
            - {kind: download-file, source: "file://m/missing.txt", destination: "\(workspace.directory.file("out.txt"))"}
            - {kind: download-memory, source: "http://127.0.0.1:\(closedPort)/v0/b/bkt/o/x.txt", max_attempts: 2}
            """)
        try #require(ids.count == 4)

        let port = freeLoopbackPort()
        let worker = try Self.metricsWorker(workspace, port: port)
        defer {
            worker.signalTree(SIGKILL)
            worker.waitForExit()
        }

        // Every job ends (the retried one after its one retry, about a second later)…
        let settled = try eventuallyTrue(seconds: 20) {
            let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
            return jobs.allSatisfy { ["succeeded", "failed"].contains($0["state"] as? String ?? "") }
        }
        try #require(settled)
        // Its probes: alive, and ready (its loop turns, its store answers).
        let live = try Self.curl(["http://127.0.0.1:\(port)/healthz"])
        #expect(live.status == 200 && live.body == "ok\n", "\(live)")
        let ready = try Self.curl(["http://127.0.0.1:\(port)/readyz"])
        #expect(ready.status == 200 && ready.body == "ready\n", "\(ready)")
        // …and the worker counts a run just after its outcome is committed: wait for all five runs.
        var families: [String: Family] = [:]
        let counted = try eventuallyTrue(seconds: 10) {
            let scrape = try Self.curl(["http://127.0.0.1:\(port)/metrics"])
            guard scrape.status == 200 else { return false }
            #expect(scrape.contentType == "text/plain; version=0.0.4; charset=utf-8")
            families = try Self.parse(scrape.body, in: workspace)
            return (families["jobctl_transfers"]?.samples.map(\.value).reduce(0, +) ?? 0) >= 5
        }
        try #require(counted)

        // Job counts by queue and state, from the store (every state of a queue shown, zeros included).
        #expect(families["jobctl_jobs"]?.type == "gauge")
        #expect(Self.value(families, "jobctl_jobs", "jobctl_jobs", ["queue": "default", "state": "succeeded"]) == 1)
        #expect(Self.value(families, "jobctl_jobs", "jobctl_jobs", ["queue": "default", "state": "failed"]) == 2)
        #expect(Self.value(families, "jobctl_jobs", "jobctl_jobs", ["queue": "default", "state": "queued"]) == 0)
        #expect(Self.value(families, "jobctl_jobs", "jobctl_jobs", ["queue": "other", "state": "succeeded"]) == 1)
        #expect(families["jobctl_jobs"]?.samples.count == 12)

        // Exact runs by kind and outcome, and the bytes of the two uploads.
        #expect(families["jobctl_transfers"]?.type == "counter")
        let runs = (families["jobctl_transfers"]?.samples ?? []).filter { $0.value != 0 }
            .map { "\($0.labels["kind"] ?? "")/\($0.labels["outcome"] ?? "")=\(Int($0.value))" }.sorted()
        #expect(runs == ["download-file/failed=1", "download-memory/failed=1", "download-memory/retry_scheduled=1",
                         "upload-data/succeeded=2"])
        #expect(Self.value(families, "jobctl_transfer_bytes", "jobctl_transfer_bytes_total",
                           ["kind": "upload-data", "outcome": "succeeded"]) == 17)
        let retries = families["jobctl_retries"]?.samples ?? []
        #expect(retries.count == 1)
        #expect(retries.first?.labels["kind"] == "download-memory")
        #expect(retries.first?.value == 1)
        #expect(Self.value(families, "jobctl_lease_losses", "jobctl_lease_losses_total", ["kind": "upload-data"]) == 0)
        #expect(Self.value(families, "jobctl_lease_rescues", "jobctl_lease_rescues_total", [:]) == 0)

        // Histograms: buckets never decrease, +Inf equals _count, _sum is consistent with the count.
        for (name, expectedCounts) in [("jobctl_transfer_duration_seconds", ["upload-data": 2.0, "download-file": 1, "download-memory": 2]),
                                       ("jobctl_store_commit_seconds", [:]), ("jobctl_store_events_per_commit", [:])] {
            let family = try #require(families[name])
            #expect(family.type == "histogram")
            let series = Dictionary(grouping: family.samples) { $0.labels.filter { $0.key != "le" } }
            for (labels, samples) in series {
                let buckets = samples.filter { $0.name == name + "_bucket" }
                let bounds = buckets.map { Double($0.labels["le"] ?? "") ?? .nan }
                #expect(bounds == bounds.sorted() && bounds.last == .infinity, "\(name) \(labels): \(bounds)")
                #expect(zip(buckets, buckets.dropFirst()).allSatisfy { $0.value <= $1.value }, "\(name) \(labels)")
                let count = try #require(samples.first { $0.name == name + "_count" }?.value)
                let sum = try #require(samples.first { $0.name == name + "_sum" }?.value)
                #expect(buckets.last?.value == count)
                #expect(sum >= 0 && (count > 0 || sum == 0))
                if let kind = labels["kind"] { #expect(count == expectedCounts[kind] ?? 0, "\(name) \(kind)") }
            }
        }
        let commits = try #require(Self.value(families, "jobctl_store_commit_seconds", "jobctl_store_commit_seconds_count", [:]))
        // At least one wait per run: its outcome, which `started` rides with (a run shorter than 200 ms).
        #expect(commits >= 5)
        let written = try #require(Self.value(families, "jobctl_store_events_written", "jobctl_store_events_written_total", [:]))
        let groups = try #require(Self.value(families, "jobctl_store_group_commits", "jobctl_store_group_commits_total", [:]))
        #expect(groups >= 1 && written >= groups)
        // Events per commit (one snapshot of the store's counts with the two totals): as many observations
        // as commits, summing to the events, each commit in a power-of-two bucket up to 128.
        let perCommit = try #require(families["jobctl_store_events_per_commit"])
        #expect(perCommit.samples.filter { $0.name.hasSuffix("_bucket") }.compactMap { Double($0.labels["le"] ?? "") }
            == [1, 2, 4, 8, 16, 32, 64, 128, .infinity])
        #expect(Self.value(families, "jobctl_store_events_per_commit", "jobctl_store_events_per_commit_count", [:]) == groups)
        #expect(Self.value(families, "jobctl_store_events_per_commit", "jobctl_store_events_per_commit_sum", [:]) == written)

        // Anything but GET /metrics: 404 for other paths, 405 for other methods, 431 for a huge request.
        for path in ["/", "/metrics/x", "/favicon.ico", "/METRICS"] {
            #expect(try Self.curl(["http://127.0.0.1:\(port)\(path)"]).status == 404, "\(path)")
        }
        #expect(try Self.curl(["-X", "POST", "http://127.0.0.1:\(port)/metrics"]).status == 405)
        #expect(try Self.curl(["-H", "X-Padding: \(String(repeating: "a", count: 9_000))", "http://127.0.0.1:\(port)/metrics"]).status == 431)
        #expect(try Self.curl(["http://127.0.0.1:\(port)/metrics?x=1"]).status == 200)
        // A client that never finishes its request is answered 408 after the request time limit, and the
        // endpoint serves the next scrape.
        let stall = try workspace.write("stall.py", """
            import socket, sys
            s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
            s.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n")
            print(s.recv(100).split(b"\\r\\n")[0].decode())
            """)
        let stalled = try runProcess("\(PackagePaths.venv)/bin/python", [stall, "\(port)"])
        #expect(stalled.stdout == "HTTP/1.1 408 Request Timeout\n", "\(stalled.stdout)\(stalled.stderr)")
        #expect(try Self.curl(["http://127.0.0.1:\(port)/metrics"]).status == 200)
        // Clients that connect and say nothing, more of them than the 32 connections kept, do not keep a
        // scrape waiting: one connection at a time, the scrape waited 2 s behind each of them.
        let idle = try workspace.write("idle.py", """
            import socket, sys, time
            port = int(sys.argv[1])
            idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
            time.sleep(0.2)
            start = time.monotonic()
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
            status = s.recv(100).split(b"\\r\\n")[0].decode()
            print(status, "%.3f" % (time.monotonic() - start))
            """)
        let crowded = try runProcess("\(PackagePaths.venv)/bin/python", [idle, "\(port)"])
        let answer = crowded.stdout.split(separator: " ")
        #expect(answer.prefix(3).joined(separator: " ") == "HTTP/1.1 200 OK", "\(crowded.stdout)\(crowded.stderr)")
        #expect(answer.last.flatMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }.map { $0 < 1.5 } == true,
                "the scrape waited: \(crowded.stdout)")

        signalIfRunning(worker, SIGTERM)
        worker.waitForExit()
        #expect(worker.terminationStatus == 0)
        #expect(!loopbackPortAnswers(port))
    }

    /// A client whose bytes the server does not read (a request body, pipelined requests, a head past
    /// 8 KiB) gets its whole answer and then the end of the connection, never a reset: the server shuts
    /// its side and reads what is left until the client closes. Closing with those bytes unread sent a
    /// reset, which can take the answer with it.
    @Test func unreadRequestBytesDoNotResetTheAnswer() throws {
        let workspace = try CLIWorkspace("metrics-unread")
        defer { workspace.directory.remove() }
        try #require(try workspace.jobctl(["migrate"]).status == 0)
        let port = freeLoopbackPort()
        let worker = try Self.metricsWorker(workspace, port: port)
        defer {
            worker.signalTree(SIGKILL)
            worker.waitForExit()
        }
        #expect(eventuallyTrue(seconds: 10) { loopbackPortAnswers(port) })
        // Each request is sent whole, then (as a client that writes before it reads) read after a pause.
        let client = try workspace.write("unread.py", """
            import socket, sys, time
            port = int(sys.argv[1])
            def ask(name, payload):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(payload)
                time.sleep(0.3)
                data = b""
                try:
                    while True:
                        chunk = s.recv(65536)
                        if not chunk: break
                        data += chunk
                except OSError as error:
                    print(name, "reset after", len(data), "bytes:", error)
                    return
                head, _, body = data.partition(b"\\r\\n\\r\\n")
                length = [int(l.split(b":")[1]) for l in head.split(b"\\r\\n") if l.lower().startswith(b"content-length:")]
                print(name, head.split(b"\\r\\n")[0].decode(), "whole" if length == [len(body)] else "cut")
            ask("body", b"POST /metrics HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 200000\\r\\n\\r\\n" + b"a" * 200000)
            ask("pipelined", b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" * 200)
            ask("huge", b"GET /metrics HTTP/1.1\\r\\nX-Padding: " + b"a" * 30000 + b"\\r\\n\\r\\n")
            """)
        let output = try runProcess("\(PackagePaths.venv)/bin/python", [client, "\(port)"])
        #expect(output.stdout == """
            body HTTP/1.1 405 Method Not Allowed whole
            pipelined HTTP/1.1 200 OK whole
            huge HTTP/1.1 431 Request Header Fields Too Large whole

            """, "\(output.stdout)\(output.stderr)")
        // The endpoint still serves.
        #expect(try Self.curl(["http://127.0.0.1:\(port)/metrics"]).status == 200)
    }

    /// Bad addresses are usage errors (exit 64) that say what is expected; a remote bind needs the flag.
    @Test(arguments: [
        (["--metrics", "127.0.0.1:0"], "1 to 65535"),
        (["--metrics", "127.0.0.1:65536"], "1 to 65535"),
        (["--metrics", "127.0.0.1:99999999999999999999"], "1 to 65535"),
        (["--metrics", "127.0.0.1:-1"], "1 to 65535"),
        (["--metrics", "127.0.0.1"], "HOST:PORT"),
        (["--metrics", "9464"], "HOST:PORT"),
        (["--metrics", "127.0.0.1:"], "1 to 65535"),
        (["--metrics", "example.com:9464"], "IPv4"),
        (["--metrics", "127.0.0.256:9464"], "IPv4"),
        // Leading zeros passed the check and failed at the bind (exit 1, "is not an IPv4 address").
        (["--metrics", "127.0.0.01:9464"], "IPv4"),
        (["--metrics", "127.000.000.001:9464"], "IPv4"),
        (["--metrics", "0.0.0.0:9464"], "--metrics-allow-remote"),
        (["--metrics", "192.0.2.1:9464"], "--metrics-allow-remote"),
        (["--metrics-allow-remote"], "needs --metrics"),
    ])
    func badAddressesAreUsageErrors(_ arguments: [String], _ fragment: String) throws {
        let workspace = try CLIWorkspace("metrics-usage")
        defer { workspace.directory.remove() }
        let output = try workspace.jobctl(["worker", "--drain"] + arguments)
        #expect(output.status == 64, "\(arguments): \(output.stderr)")
        #expect(output.stderr.contains(fragment), "\(arguments): \(output.stderr)")
    }

    @Test func aPortInUseStopsTheWorkerBeforeItStarts() throws {
        let workspace = try CLIWorkspace("metrics-busy")
        defer { workspace.directory.remove() }
        try #require(try workspace.jobctl(["migrate"]).status == 0)
        let server = try NginxServer.start()
        defer { server.stop() }
        let output = try workspace.jobctl(["worker", "--drain", "--metrics", "127.0.0.1:\(server.port)"])
        #expect(output.status == 1, "\(output.stderr)")
        #expect(output.stderr.contains("another process listens there"), "\(output.stderr)")
    }
}
