import Foundation
import Testing
import TestSupport

/// A worker with `gs://` jobs queued and no Google credentials (nor an emulator) says so once at start,
/// naming what it looked for, and still runs (anonymous access to public buckets stays possible).
@Suite("worker warning about missing Google credentials", .onTestThreads) struct MissingCredentialsTests {
    /// Whether this machine is a Google Compute Engine machine by its DMI product name: then the worker
    /// finds the metadata server, and rightly does not warn.
    static let onGoogleComputeEngine = ((try? String(contentsOfFile: "/sys/class/dmi/id/product_name", encoding: .utf8)) ?? "")
        .hasPrefix("Google")

    /// Submits a `gs://` job that waits an hour (queued, never claimed: no request leaves the machine) and
    /// a `file://` job, runs a real worker with exactly `environment` (plus PATH, HOME and NO_COLOR) and
    /// `extra` arguments until the `file://` job succeeded, stops it with SIGTERM, and returns its log.
    static func workerLog(_ workspace: CLIWorkspace, environment: [String: String] = [:], extra: [String] = [],
                          gsQueue: String = "default") throws -> String {
        _ = try workspace.submit("""
            - {kind: upload-data, data: hello, destination: "gs://private-bucket/a.txt", delay: 1h, queue: \(gsQueue)}
            - {kind: upload-data, data: hello, destination: "file://m/b.txt"}
            """)
        let worker = try LoggedWorker(workspace, extra, environment: environment)
        defer { worker.kill() }
        let ran = eventuallyTrue(seconds: 20) { worker.log().contains(" succeeded ") || worker.log().contains("\"event\":\"succeeded\"") }
        try #require(ran, "the worker never ran the file:// job:\n\(worker.log())")
        worker.stop()
        #expect(worker.process.terminationStatus == 0, "\(worker.log())")
        return worker.log()
    }

    static func warnings(_ log: String) -> [Substring] {
        log.split(separator: "\n").filter { $0.contains(" no_credentials ") }
    }

    @Test(arguments: StoreEngine.allCases)
    func anonymousWorkerWithQueuedGCSJobsWarnsOnce(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("no-credentials", engine: engine)
        defer { workspace.directory.remove() }
        let log = try Self.workerLog(workspace)
        let warnings = Self.warnings(log)
        if Self.onGoogleComputeEngine {
            #expect(warnings.isEmpty, "\(log)")
            return
        }
        #expect(warnings.count == 1, "\(log)")
        let line = String(warnings.first ?? "")
        #expect(line.contains("warning no_credentials queued_gs_jobs=1 "), "\(line)")
        for source in ["GOOGLE_OAUTH_ACCESS_TOKEN", "JOBCTL_TOKEN_COMMAND", "GOOGLE_APPLICATION_CREDENTIALS",
                       "gcloud well-known file", "application_default_credentials.json", "metadata server", "GCE_METADATA_HOST",
                       "public buckets"] {
            #expect(line.contains(source), "\(source) missing from \(line)")
        }
        // Said at start, just after `worker_started`, which opens the run's log.
        let lines = log.split(separator: "\n")
        #expect(lines.first?.contains(" worker_started ") == true, "\(log)")
        #expect(lines.dropFirst().first?.contains(" no_credentials ") == true, "\(log)")
        // The JSON log carries the same event as a warning.
        let again = try CLIWorkspace("no-credentials-json", engine: engine)
        defer { again.directory.remove() }
        let json = try Self.workerLog(again, extra: ["--log-format", "json"])
        let objects = json.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let warning = try #require(objects.first { $0["event"] as? String == "no_credentials" }, "\(json)")
        #expect(warning["level"] as? String == "warning")
        #expect((warning["fields"] as? [String: Any])?["queued_gs_jobs"] as? Int == 1)
        #expect(objects.filter { $0["event"] as? String == "no_credentials" }.count == 1)
    }

    /// No warning with a token, with an emulator, or when the worker's queues hold no `gs://` job.
    @Test(arguments: [
        (["GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.test-token"], [String](), "default"),
        (["STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"], [], "default"),
        ([:], ["--queue", "default"], "elsewhere"),
    ])
    func noWarningWhenCredentialsOrNoGCSJobs(environment: [String: String], extra: [String], gsQueue: String) throws {
        let workspace = try CLIWorkspace("credentials-found")
        defer { workspace.directory.remove() }
        let log = try Self.workerLog(workspace, environment: environment, extra: extra, gsQueue: gsQueue)
        #expect(Self.warnings(log).isEmpty, "\(log)")
        #expect(log.contains(" worker_started "), "\(log)")
        #expect(!log.contains("ya29"))
    }
}
