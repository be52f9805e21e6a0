import Foundation
import Testing
import TestSupport

/// An emulator named only in a configuration file (`storage_emulator_host:`) is the one whose Firebase-form
/// URLs (`http://HOST/v0/b/BUCKET/o/PATH`) name `gs://` objects, as one named by `STORAGE_EMULATOR_HOST`
/// is. The hosts were read from the process's environment alone: with the file's emulator a submit stored
/// such a URL as a plain one, and the worker requested it as written (the emulator answered 404).
@Suite(.onTestThreads) struct EmulatorHostFromFileTests {
    @Test("a Firebase URL on the configuration file's emulator names the gs:// object, at submit and in the worker")
    func firebaseURLOnTheFilesEmulator() throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let workspace = try CLIWorkspace("emulator-from-file")
        defer { workspace.directory.remove() }
        let withEmulator = try workspace.write("emulator.yaml", "storage_emulator_host: \(server.baseURL)\n")
        let withoutEmulator = try workspace.write("plain.yaml", "concurrency: 1\n")
        func environment(_ config: String) -> [String: String] {
            ["JOBCTL_CONFIG": config, "STORAGE_EMULATOR_HOST": "", "HOME": workspace.directory.path]
        }
        func submit(_ manifest: String, config: String) throws -> String {
            let path = try workspace.write("manifest-\(UUID().uuidString.prefix(6)).yaml", manifest)
            let output = try workspace.jobctl(["submit", path], environment: environment(config))
            #expect(output.status == 0, "\(output.stderr)")
            return output.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func source(_ id: String) throws -> String? {
            let jobs = try #require(try workspace.json(["list", "--json"]) as? [[String: Any]])
            return jobs.first { $0["id"] as? String == id }?["source"] as? String
        }

        let payload = "read through a Firebase URL"
        _ = try submit("- {kind: upload-data, data: \(payload), destination: \"gs://\(server.bucket)/dir/a b.txt\"}\n", config: withEmulator)
        let uploaded = try workspace.jobctl(["worker", "--drain"], environment: environment(withEmulator))
        #expect(uploaded.status == 0, "\(uploaded.stderr)")

        let url = "\(server.baseURL)/v0/b/\(server.bucket)/o/dir%2Fa%20b.txt"
        let manifest = "- {kind: download-memory, source: \"\(url)\"}\n"
        // Submitted with the file's emulator: stored as the object it names.
        let named = try submit(manifest, config: withEmulator)
        #expect(try source(named) == "gs://\(server.bucket)/dir/a%20b.txt")
        // Submitted without it: a plain URL, stored as written; the worker with the file's emulator reads it as the object.
        let written = try submit(manifest, config: withoutEmulator)
        #expect(try source(written) == url)
        let downloaded = try workspace.jobctl(["worker", "--drain"], environment: environment(withEmulator))
        #expect(downloaded.status == 0, "\(downloaded.stderr)")
        for id in [named, written] {
            let output = workspace.directory.file("out-\(id).txt")
            let result = try workspace.jobctl(["result", id, "-o", output])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(FileManager.default.contents(atPath: output) == Data(payload.utf8), "job \(id)")
        }
    }
}
