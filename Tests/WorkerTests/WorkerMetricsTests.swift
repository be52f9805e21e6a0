import EventStore
import Foundation
import JobModel
import PostgresStore
import StorePort
import Testing
import TestSupport
@testable import Worker

@Suite("worker metrics", .onTestThreads) struct WorkerMetricsUnitTests {
    /// Runs `render` on a thread of its own, as the metrics server does (it waits for the store there).
    static func render(_ exporter: MetricsExporter) async -> String {
        await offPool { exporter.render() }
    }

    static func jobsLine(_ text: String, queue: String, state: String) -> String? {
        text.split(separator: "\n").first { $0.hasPrefix("jobctl_jobs{queue=\"\(queue)\",state=\"\(state)\"} ") }.map(String.init)
    }

    /// Scrapes inside the cache window read the store once; with no window every scrape reads it.
    @Test func jobCountsAreReadFromTheStoreAndCached() async throws {
        let directory = try TemporaryDirectory("metrics-cache")
        defer { directory.remove() }
        let store = try EventStore(path: directory.file("jobctl.db"))
        let spec = JobSpec(kind: .uploadData, destination: "file://m/x.txt", data: Data("x".utf8))
        _ = try store.submit([spec], actor: "test", now: Clock.nowMs())
        let cached = MetricsExporter(metrics: WorkerMetrics(), store: store, cacheMs: 3_600_000)
        let uncached = MetricsExporter(metrics: WorkerMetrics(), store: store, cacheMs: 0)
        #expect(Self.jobsLine(await Self.render(cached), queue: "default", state: "queued") == "jobctl_jobs{queue=\"default\",state=\"queued\"} 1")
        _ = try store.submit([spec], actor: "test", now: Clock.nowMs())
        #expect(Self.jobsLine(await Self.render(cached), queue: "default", state: "queued") == "jobctl_jobs{queue=\"default\",state=\"queued\"} 1")
        #expect(Self.jobsLine(await Self.render(uncached), queue: "default", state: "queued") == "jobctl_jobs{queue=\"default\",state=\"queued\"} 2")
    }

    /// A scrape reads the counts alone: `stats` also reads every outcome event of the last hour, which
    /// on a busy log took 0.3–0.7 s of the store's executor a scrape (a drain of 200,000 jobs scraped
    /// every 2 s: 17.2 s instead of 12.2). The counts are `stats`' own, on both engines.
    @Test(arguments: WorkerEngine.allCases)
    func aScrapeReadsTheCountsAloneNotTheOutcomeWindows(engine: WorkerEngine) async throws {
        let directory = try TemporaryDirectory("metrics-counts")
        defer { directory.remove() }
        let database = try engine.database(in: directory)
        let real: any JobStore = switch engine {
        case .sqlite: try EventStore(path: database)
        case .postgres: try PostgresStore(url: database, mode: .create)
        }
        let spec = JobSpec(kind: .uploadData, destination: "file://m/x.txt", data: Data("x".utf8))
        _ = try real.submit([spec, spec], actor: "test", now: Clock.nowMs())
        _ = try real.submit([JobSpec(kind: .uploadData, destination: "file://m/y.txt", data: Data("y".utf8), queue: "other")],
                            actor: "test", now: Clock.nowMs())
        let claimed = try real.claim(owner: "w", queues: ["other"], limit: 1, leaseMs: 60_000, now: Clock.nowMs())
        #expect(claimed.count == 1)
        #expect(try real.queueStateCounts() == real.stats(queue: nil, now: Clock.nowMs()).counts)
        let store = LostAnswerStore(real, loseAnswerTo: .succeeded)
        let text = await Self.render(MetricsExporter(metrics: WorkerMetrics(), store: store, cacheMs: 0))
        #expect(Self.jobsLine(text, queue: "default", state: "queued") == "jobctl_jobs{queue=\"default\",state=\"queued\"} 2")
        #expect(Self.jobsLine(text, queue: "other", state: "running") == "jobctl_jobs{queue=\"other\",state=\"running\"} 1")
        #expect(store.statsCalls.withLock { $0 } == 0)
    }

    static func sampleLine(_ text: String, _ name: String) -> String? {
        text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.map(String.init)
    }

    /// A store that does not answer (here another process holds SQLite's write lock while the worker's
    /// executor waits in a commit, the job count read queued behind it) no longer holds the scrape until
    /// it does — for the 30 s of the busy timeout, longer than Prometheus waits: the scrape answers
    /// within about `storeWaitMs` with the counts last read, `jobctl_store_up 0` and their read time;
    /// once the lock is released the counts are fresh again.
    @Test func aStalledStoreDoesNotHoldTheScrape() async throws {
        let directory = try TemporaryDirectory("metrics-stalled")
        defer { directory.remove() }
        let path = directory.file("jobctl.db")
        let store = try EventStore(path: path)
        let spec = JobSpec(kind: .uploadData, destination: "file://m/x.txt", data: Data("x".utf8))
        _ = try store.submit([spec], actor: "test", now: Clock.nowMs())
        let exporter = MetricsExporter(metrics: WorkerMetrics(), store: store, cacheMs: 0, storeWaitMs: 1_000)
        let before = await Self.render(exporter)
        #expect(Self.sampleLine(before, "jobctl_store_up") == "jobctl_store_up 1")
        #expect(Self.jobsLine(before, queue: "default", state: "queued") == "jobctl_jobs{queue=\"default\",state=\"queued\"} 1")
        let firstRead = try #require(Self.sampleLine(before, "jobctl_jobs_read_time_seconds"))

        let lock = try SQLiteWriteLock(database: path)
        var locked = true
        defer { if locked { lock.release() } }
        // A write on the store's executor that waits for the lock: every later call queues behind it.
        let blocked = Task { try await store.run { store in try store.submit([spec], actor: "test", now: Clock.nowMs()) } }
        try await Task.sleep(for: .milliseconds(200))
        for round in 0..<3 {
            let started = ContinuousClock.now
            let during = await Self.render(exporter)
            let waited = ContinuousClock.now - started
            #expect(waited < .seconds(5), "a scrape waited \(waited) for a stalled store")
            // The first scrape waits out the bound; the later ones, the read still stalled, at once.
            if round > 0 { #expect(waited < .milliseconds(700), "scrape \(round) waited \(waited) again") }
            #expect(Self.sampleLine(during, "jobctl_store_up") == "jobctl_store_up 0")
            #expect(!exporter.storeUp(), "/readyz reads the store as down")
            #expect(Self.jobsLine(during, queue: "default", state: "queued") == "jobctl_jobs{queue=\"default\",state=\"queued\"} 1")
            #expect(Self.sampleLine(during, "jobctl_jobs_read_time_seconds") == firstRead)
            #expect(during.contains("jobctl_store_group_commits_total "))
        }
        lock.release()
        locked = false
        _ = try await blocked.value
        var after = ""
        for _ in 0..<100 {
            after = await Self.render(exporter)
            if Self.sampleLine(after, "jobctl_store_up") == "jobctl_store_up 1" { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(Self.sampleLine(after, "jobctl_store_up") == "jobctl_store_up 1")
        #expect(exporter.storeUp())
        #expect(Self.jobsLine(after, queue: "default", state: "queued") == "jobctl_jobs{queue=\"default\",state=\"queued\"} 2")
        #expect(Self.sampleLine(after, "jobctl_jobs_read_time_seconds") != firstRead)
    }

    /// Label values are escaped as the format requires: backslash, double quote, line feed.
    @Test func labelValuesAreEscaped() {
        let text = WorkerMetrics().exposition(groupCommits: GroupCommitStats(), store: StoreReading(counts: [
            StoreStats.QueueStateCount(queue: "a\"b\\c\nd", state: .queued, count: 3),
        ], readAtMs: 0, up: true))
        #expect(text.contains("jobctl_jobs{queue=\"a\\\"b\\\\c\\nd\",state=\"queued\"} 3\n"))
    }

    /// Buckets are cumulative: each observation counts in its own bucket and every later one.
    @Test func histogramBucketsAreCumulative() {
        var histogram = Histogram(bounds: [1, 5, 10])
        for value in [0.5, 1, 3, 7, 20] { histogram.observe(value) }
        #expect(histogram.cumulative.map(\.1) == [2, 3, 4])
        #expect(histogram.count == 5)
        #expect(histogram.sum == 31.5)
        var text = MetricsText()
        text.histogram("h", [("kind", "k")], histogram)
        #expect(text.output == """
            h_bucket{kind="k",le="1"} 2
            h_bucket{kind="k",le="5"} 3
            h_bucket{kind="k",le="10"} 4
            h_bucket{kind="k",le="+Inf"} 5
            h_sum{kind="k"} 31.5
            h_count{kind="k"} 5

            """)
    }

    /// Events per commit: each commit counts in the first power-of-two bucket that holds its size (129
    /// events only in +Inf), the count is the commits and the sum the events.
    @Test func eventsPerCommitHistogramFollowsTheStoreSizeClasses() {
        var stats = GroupCommitStats()
        for size in [1, 1, 2, 3, 4, 5, 8, 9, 128, 129, 0] { stats.recordCommit(of: size) }
        #expect(stats.commits == 10 && stats.events == 290)
        let text = WorkerMetrics().exposition(groupCommits: stats, store: StoreReading(counts: nil, readAtMs: nil, up: false))
        let lines = text.split(separator: "\n").filter { $0.hasPrefix("jobctl_store_events_per_commit") }
        #expect(lines == [
            "jobctl_store_events_per_commit_bucket{le=\"1\"} 2", "jobctl_store_events_per_commit_bucket{le=\"2\"} 3",
            "jobctl_store_events_per_commit_bucket{le=\"4\"} 5", "jobctl_store_events_per_commit_bucket{le=\"8\"} 7",
            "jobctl_store_events_per_commit_bucket{le=\"16\"} 8", "jobctl_store_events_per_commit_bucket{le=\"32\"} 8",
            "jobctl_store_events_per_commit_bucket{le=\"64\"} 8", "jobctl_store_events_per_commit_bucket{le=\"128\"} 9",
            "jobctl_store_events_per_commit_bucket{le=\"+Inf\"} 10", "jobctl_store_events_per_commit_sum 290",
            "jobctl_store_events_per_commit_count 10",
        ])
        #expect(text.contains("# TYPE jobctl_store_events_per_commit histogram\n"))
    }

    @Test(arguments: [("127.0.0.1:9464", "127.0.0.1", 9464, true), ("localhost:1", "127.0.0.1", 1, true),
                      ("127.1.2.3:65535", "127.1.2.3", 65535, true), ("0.0.0.0:9464", "0.0.0.0", 9464, false),
                      ("10.1.2.3:80", "10.1.2.3", 80, false)])
    func addressesParse(_ text: String, _ host: String, _ port: Int, _ loopback: Bool) throws {
        let address = try MetricsAddress(parsing: text)
        #expect(address.host == host && Int(address.port) == port && address.isLoopback == loopback)
    }
}
