import Foundation
import Testing
import TestSupport

/// The manifests in jobs/ run as their comments and the README say: `make demo`'s steps on the demo, and
/// the GCS example against the emulator its comment points at. Each runs from a copy of jobs/, so the
/// files they download (`../var/…`) land in the test's folder, not in the checkout.
@Suite("Shipped example manifests", .onTestThreads)
struct ShippedExampleTests {
    /// A workspace holding a copy of jobs/ (as `jobs/`), and the manifest's path in it.
    private static func workspaceWithJobs(_ label: String, manifest: String) throws -> (CLIWorkspace, String) {
        let workspace = try CLIWorkspace(label)
        try FileManager.default.copyItem(atPath: PackagePaths.root + "/jobs", toPath: workspace.directory.file("jobs"))
        return (workspace, workspace.directory.file("jobs/\(manifest)"))
    }

    /// Drains the workspace's queue with a worker (killed after 120 s) and says how every job ended.
    private static func drain(_ workspace: CLIWorkspace, environment: [String: String]) throws -> (ProcessOutput, [String: String]) {
        let worker = try runProcess("/usr/bin/timeout", ["120", PackagePaths.jobctlBinary, "--db", workspace.database, "worker", "--drain", "-q"],
                                    environment: environment.merging(["NO_COLOR": "1"]) { a, _ in a },
                                    currentDirectory: workspace.directory.path)
        let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
        var states: [String: String] = [:]
        for job in jobs {
            let name = "\(job["kind"] ?? "?") \(job["source"] ?? job["destination"] ?? "?")"
            states[name] = "\(job["state"] ?? "?")" + ((job["error"] as? [String: Any]).map { ": \($0["message"] ?? "")" } ?? "")
        }
        return (worker, states)
    }

    @Test("make demo: jobs/demo.yaml submits, drains to success, audits, prints the fetch-url result and verifies")
    func demoRunsAsMakeDemoDoes() throws {
        let (workspace, manifest) = try Self.workspaceWithJobs("demo", manifest: "demo.yaml")
        defer { workspace.directory.remove() }
        // `make demo`: the database in var/demo, the bucket beside it.
        let environment = ["JOBCTL_BUCKETS": "", "HOME": workspace.directory.path]
        let submit = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(submit.status == 0, "\(submit.stderr)")
        let (worker, states) = try Self.drain(workspace, environment: environment)
        #expect(worker.status == 0, "worker --drain exited \(worker.status): \(worker.stderr)")
        #expect(states.count == 8 && states.values.allSatisfy { $0 == "succeeded" }, "\(states)")
        let audit = try workspace.jobctl(["audit"])
        #expect(audit.status == 0 && audit.stdout.contains("8 jobs: 8 succeeded"), "\(audit.stdout)\(audit.stderr)")
        let fetch = try #require(try workspace.json(["list", "--kind", "fetch-url", "--json"]) as? [[String: Any]])
        let id = try #require(fetch.first?["id"] as? String)
        let result = try workspace.jobctl(["result", id])
        #expect(result.status == 0 && result.stdout.hasPrefix("file://") && result.stdout.contains("token="), "\(result.stdout)")
        let verify = try workspace.jobctl(["replay", "--verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(FileManager.default.fileExists(atPath: workspace.directory.file("var/demo/hello.txt")))
    }

    /// Its downloads, reads and changes did not wait for the uploads they read (a download-file ran before
    /// its object existed: objectNotFound), and its delete named an object nothing wrote, so it could
    /// never end well.
    @Test("jobs/gcs-example.yaml runs to success against the emulator, every job in a safe order")
    func gcsExampleRunsOnTheEmulator() throws {
        let server = try EmulatorServer.start(bucket: "my-bucket")
        defer { server.stop() }
        let (workspace, manifest) = try Self.workspaceWithJobs("gcsexample", manifest: "gcs-example.yaml")
        defer { workspace.directory.remove() }
        let environment = ["STORAGE_EMULATOR_HOST": server.baseURL, "HOME": workspace.directory.path]
        let submit = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(submit.status == 0, "\(submit.stderr)")
        let (worker, states) = try Self.drain(workspace, environment: environment)
        #expect(worker.status == 0, "worker --drain exited \(worker.status): \(worker.stderr)")
        #expect(states.count == 8 && states.values.allSatisfy { $0 == "succeeded" }, "\(states)")
        #expect(FileManager.default.fileExists(atPath: workspace.directory.file("var/gcs-example/pixel.png")))
    }
    /// README's *Manifests* example, every field in use, is a manifest jobctl takes: with its upload
    /// sources in place and an object under its prefix on the emulator, `submit --dry-run` accepts all of it.
    @Test("README's manifest example is valid: submit --dry-run takes every job of it")
    func readmeManifestExampleIsValid() throws {
        let server = try EmulatorServer.start(bucket: "my-bucket")
        defer { server.stop() }
        let workspace = try CLIWorkspace("readmemanifest")
        defer { workspace.directory.remove() }
        let readme = try String(contentsOfFile: PackagePaths.root + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "\n## Manifests\n").dropFirst().first)
        let example = try #require(section.components(separatedBy: "```yaml\n").dropFirst().first?.components(separatedBy: "```").first)
        let manifest = try workspace.write("example.yaml", example)
        try workspace.write("photos/cat.jpg", "a cat")
        try workspace.write("photos/2024/dog.jpg", "a dog")
        let environment = ["STORAGE_EMULATOR_HOST": server.baseURL, "HOME": workspace.directory.path]
        // The prefix the example restores from must hold an object.
        let seed = try workspace.write("seed.yaml", "jobs:\n  - kind: upload-data\n    data: x\n    destination: gs://my-bucket/backup/cat.jpg\n")
        #expect(try workspace.jobctl(["submit", seed], environment: environment).status == 0)
        let (worker, _) = try Self.drain(workspace, environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")

        let dryRun = try workspace.jobctl(["submit", "--dry-run", manifest], environment: environment)
        #expect(dryRun.status == 0, "README's manifest example: \(dryRun.stderr)")
        let jobs = try #require(dryRun.stdout.split(separator: "\n").last)
        // Nine jobs written out, the folder's two files and the prefix's one object.
        #expect(jobs == "12 jobs valid; nothing submitted (--dry-run)", "\(dryRun.stdout)")
    }
}
