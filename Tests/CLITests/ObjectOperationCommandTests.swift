import Foundation
import Testing
import TestSupport

/// get-metadata, update-metadata and delete jobs submitted with a default bucket, run by a real worker
/// process, shown by `result`, `show` and `list`.
@Suite("Object operation jobs", .onTestThreads)
struct ObjectOperationCommandTests {
    private func jsonObject(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "not a JSON object: \(text)")
    }

    private func jsonArrayOfObjects(_ text: String) throws -> [[String: Any]] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]], "not a JSON array: \(text)")
    }

    @Test(arguments: StoreEngine.allCases)
    func aWorkerDrainsOneJobOfEachKind(engine: StoreEngine) throws {
        let workspace = try CLIWorkspace("objops", engine: engine)
        defer { workspace.directory.remove() }
        let environment = ["HOME": workspace.directory.path, "JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let seeded = try workspace.submit("""
        - {kind: upload-data, data: "read me\\n", destination: "file://demo/docs/a.txt"}
        - {kind: upload-data, data: "update me\\n", destination: "file://demo/docs/b.txt", metadata: {custom_metadata: {keep: "1", gone: "2"}}}
        - {kind: upload-data, data: "delete me\\n", destination: "file://demo/docs/c.txt"}
        """)
        #expect(seeded.count == 3)
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)

        let manifest = try workspace.write("ops.yaml", """
        defaults:
          bucket: file://demo
        jobs:
          - kind: get-metadata
            source: docs/a.txt
          - kind: update-metadata
            destination: docs/b.txt
            metadata:
              cache_control: no-store
              custom_metadata: {added: "3", gone: null}
          - kind: delete
            destination: docs/c.txt
          - kind: delete
            destination: docs/missing.txt
        """)
        let submitted = try workspace.jobctl(["submit", manifest], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        try #require(ids.count == 4, "\(submitted.stdout)")
        // The stored specs hold the full references the relative paths meant.
        let update = try jsonObject(try workspace.jobctl(["show", ids[1], "--json"]).stdout)
        let spec = try #require(update["spec"] as? [String: Any])
        #expect(spec["destination"] as? String == "file://demo/docs/b.txt")
        #expect(spec["remove_custom_metadata"] as? [String] == ["gone"])
        let shown = try workspace.jobctl(["show", ids[1]])
        #expect(shown.stdout.contains("changes:     cache_control=no-store, custom added=3, delete custom gone"), "\(shown.stdout)")

        // One job failed (the missing object), so the drain exits 2.
        let worker = try workspace.jobctl(["worker", "--drain", "--log-format", "json"], environment: environment)
        #expect(worker.status == 2, "\(worker.stderr)")
        // One log line per outcome; object operations report no bytes or rate (they move none).
        let lines = worker.stderr.split(separator: "\n").compactMap { try? jsonObject(String($0)) }
        let succeeded = lines.filter { $0["event"] as? String == "succeeded" }
        #expect(Set(succeeded.compactMap { $0["kind"] as? String }) == ["get-metadata", "update-metadata", "delete"], "\(worker.stderr)")
        for line in succeeded {
            let fields = try #require(line["fields"] as? [String: Any], "\(line)")
            #expect(fields["bytes"] == nil && fields["rate"] == nil && fields["duration_ms"] != nil, "\(line)")
        }
        let deletion = try #require(succeeded.first { $0["kind"] as? String == "delete" }?["fields"] as? [String: Any])
        #expect(deletion["deleted"] as? String == "file://demo/docs/c.txt")
        #expect(lines.contains { $0["event"] as? String == "failed" && $0["job"] as? String == ids[3] }, "\(worker.stderr)")

        let metadata = try workspace.jobctl(["result", ids[0]])
        #expect(metadata.status == 0, "\(metadata.stderr)")
        let object = try jsonObject(metadata.stdout)
        #expect(object["name"] as? String == "docs/a.txt" && object["size"] as? Int == 8, "\(object)")
        #expect(object["content_type"] as? String == "text/plain" && object["crc32c"] is String, "\(object)")

        let updated = try jsonObject(try workspace.jobctl(["result", ids[1]]).stdout)
        #expect(updated["cache_control"] as? String == "no-store", "\(updated)")
        #expect(updated["custom_metadata"] as? [String: String] == ["keep": "1", "added": "3"], "\(updated)")
        let sidecar = try String(contentsOfFile: workspace.directory.file("buckets/demo/docs/.b.txt.jobctl-meta.json"), encoding: .utf8)
        #expect(sidecar.contains("no-store") && !sidecar.contains("gone"), "\(sidecar)")

        let deleted = try workspace.jobctl(["result", ids[2]])
        #expect(deleted.stdout == "deleted file://demo/docs/c.txt\n", "\(deleted.stdout) \(deleted.stderr)")
        let deletedJSON = try jsonObject(try workspace.jobctl(["result", ids[2], "--json"]).stdout)
        #expect(deletedJSON["deleted"] as? String == "file://demo/docs/c.txt")
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("buckets/demo/docs/c.txt")))
        #expect(!FileManager.default.fileExists(atPath: workspace.directory.file("buckets/demo/docs/.c.txt.jobctl-meta.json")))

        // A missing object is not retried: one attempt, objectNotFound.
        let missing = try jsonObject(try workspace.jobctl(["show", ids[3], "--json"]).stdout)
        #expect(missing["state"] as? String == "failed" && missing["attempts"] as? Int == 1, "\(missing)")
        #expect((missing["error"] as? [String: Any])?["name"] as? String == "objectNotFound", "\(missing)")

        let list = try workspace.jobctl(["list", "--kind", "get-metadata,update-metadata,delete"])
        #expect(list.status == 0, "\(list.stderr)")
        for kind in ["get-metadata", "update-metadata", "delete"] {
            #expect(list.stdout.contains(kind), "\(list.stdout)")
        }
        let audit = try jsonArrayOfObjects(try workspace.jobctl(["audit", "--kind", "delete", "--json"]).stdout)
        #expect(audit.count == 2, "\(audit)")
        #expect(Set(audit.compactMap { $0["kind"] as? String }) == ["delete"], "\(audit)")
    }

    /// A plain HTTP server need not say how long an object is: a HEAD answered without a
    /// `Content-Length` (a dynamic handler, a proxy that drops it). get-metadata records the size as
    /// unknown (-1 inside), which `show` printed as "-1 bytes", `--json` as `"size": -1`, `list` and
    /// `audit` as a size of -1, and `stats` counted -1 bytes. Now "size unknown" and the field left out.
    @Test(arguments: StoreEngine.allCases)
    func anObjectWhoseSizeTheServerDidNotSayIsShownUnknown(engine: StoreEngine) throws {
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: nginx.root + "/page.txt"))
        let proxy = try FaultProxy(upstreamPort: nginx.port, rules: [FaultRule(RequestMatch(method: "HEAD"), .unframedResponse, times: 5)])
        defer { proxy.stop() }
        let workspace = try CLIWorkspace("objops-unknown-size", engine: engine)
        defer { workspace.directory.remove() }
        let ids = try workspace.submit("- {kind: get-metadata, source: \"\(proxy.baseURL)/page.txt\"}\n")
        let id = try #require(ids.first)
        let worker = try workspace.jobctl(["worker", "--drain"])
        #expect(worker.status == 0, "\(worker.stderr)")
        // "-1 bytes", "size=-1", "-1 B", ",-1," (dates hold "-1" too: "2026-12-05").
        let minusOne = { (text: String) in text.contains("-1 ") || text.contains("=-1") || text.contains(",-1,") || text.contains(": -1") }
        #expect(!minusOne(worker.stderr), "\(worker.stderr)")

        let shown = try workspace.jobctl(["show", id]).stdout
        #expect(shown.contains("page.txt (size unknown,"), "\(shown)")
        #expect(!minusOne(shown), "\(shown)")
        let job = try jsonObject(try workspace.jobctl(["show", id, "--json"]).stdout)
        let result = try #require(job["result"] as? [String: Any], "\(job)")
        let object = try #require(result["object"] as? [String: Any], "\(result)")
        #expect(object["size"] == nil && object["name"] as? String == "page.txt", "\(object)")
        #expect(job["bytes_done"] as? Int == 0, "\(job)")
        for arguments in [["list"], ["audit"], ["audit", "--csv"], ["history", id], ["stats"]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 0 && !minusOne(output.stdout), "\(arguments): \(output.stdout)")
        }
        let audit = try jsonArrayOfObjects(try workspace.jobctl(["audit", "--json"]).stdout)
        #expect(audit.count == 1 && audit.first?["size"] == nil, "\(audit)")
    }

    /// An upload with `if_exists: skip` to an http(s) URL whose HEAD has no `Content-Length`: the skipped
    /// job's result took the unknown size (-1) as its own, shown as "result size: -1 bytes" and counted
    /// by `stats`. Now it has no size.
    @Test func aSkippedUploadOverAnObjectOfUnknownSizeHasNoSize() throws {
        let nginx = try NginxServer.start()
        defer { nginx.stop() }
        try Data("there\n".utf8).write(to: URL(fileURLWithPath: nginx.root + "/up.txt"))
        let proxy = try FaultProxy(upstreamPort: nginx.port, rules: [FaultRule(RequestMatch(method: "HEAD"), .unframedResponse, times: 5)])
        defer { proxy.stop() }
        let workspace = try CLIWorkspace("objops-skip-unknown-size")
        defer { workspace.directory.remove() }
        let id = try #require(try workspace.submit("- {kind: upload-data, data: hi, destination: \"\(proxy.baseURL)/up.txt\", if_exists: skip}\n").first)
        let worker = try workspace.jobctl(["worker", "--drain"])
        #expect(worker.status == 0, "\(worker.stderr)")
        let minusOne = { (text: String) in text.contains("-1 ") || text.contains("=-1") || text.contains(",-1,") || text.contains(": -1") }
        for arguments in [["show", id], ["show", id, "--json"], ["audit", "--csv"], ["stats"]] {
            let output = try workspace.jobctl(arguments)
            #expect(output.status == 0 && !minusOne(output.stdout), "\(arguments): \(output.stdout)")
        }
        #expect(!minusOne(worker.stderr), "\(worker.stderr)")
    }

    /// update-metadata could not remove a field: `cache_control: null` was refused at submit ("has no
    /// value; expected a string"), and nothing sent GCS the JSON null that removes one (gsutil `setmeta -h Cache-Control`,
    /// gcloud `--clear-cache-control`, `--clear-custom-metadata`). Now `field: null` (or `~`) removes it:
    /// GCS is sent the field as null and, for `custom_metadata: null`, each key as null; a `file://`
    /// object's sidecar loses it. gcp-storage-emulator keeps a field PATCHed to null (real GCS removes it),
    /// so the GCS side is checked as the request the proxy in front of it saw.
    @Test func updateMetadataRemovesFieldsWrittenNull() throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let workspace = try CLIWorkspace("objops-clear")
        defer { workspace.directory.remove() }
        let environment = ["STORAGE_EMULATOR_HOST": proxy.baseURL, "HOME": workspace.directory.path,
                           "JOBCTL_BUCKETS": workspace.directory.file("buckets")]
        let gcs = "gs://\(server.bucket)/docs/a.txt", local = "file://demo/docs/a.txt"
        let seed = try workspace.write("seed.yaml", [gcs, local].map { destination in
            "- {kind: upload-data, data: hi, destination: \"\(destination)\", metadata: {content_type: text/markdown, cache_control: no-store, "
                + "content_language: en, custom_metadata: {k1: \"1\", k2: \"2\"}}}\n"
        }.joined())
        #expect(try workspace.jobctl(["submit", seed], environment: environment).status == 0)
        #expect(try workspace.jobctl(["worker", "--drain"], environment: environment).status == 0)

        let update = try workspace.write("update.yaml", [gcs, local].map { destination in
            "- {kind: update-metadata, destination: \"\(destination)\", metadata: {cache_control: null, content_language: ~, "
                + "custom_metadata: null, content_disposition: inline}}\n"
        }.joined())
        let submitted = try workspace.jobctl(["submit", update], environment: environment)
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 2)
        let worker = try workspace.jobctl(["worker", "--drain"], environment: environment)
        #expect(worker.status == 0, "\(worker.stderr)")

        let patches = proxy.exchanges.filter { $0.request.method == "PATCH" }
        #expect(patches.count == 1, "\(patches.map(\.request.startLine))")
        let body = try #require(try patches.first.flatMap { try JSONSerialization.jsonObject(with: $0.request.body) as? [String: Any] })
        #expect(body["cacheControl"] is NSNull && body["contentLanguage"] is NSNull, "\(body)")
        #expect(body["contentDisposition"] as? String == "inline" && body["contentType"] == nil, "\(body)")
        let custom = try #require(body["metadata"] as? [String: Any], "\(body)")
        #expect(Set(custom.keys) == ["k1", "k2"] && custom.values.allSatisfy { $0 is NSNull }, "\(custom)")

        let job = try jsonObject(try workspace.jobctl(["show", ids[1], "--json"]).stdout)
        let object = try #require((job["result"] as? [String: Any])?["object"] as? [String: Any], "\(job)")
        #expect(object["cache_control"] == nil && object["content_language"] == nil && object["custom_metadata"] == nil, "\(object)")
        #expect(object["content_type"] as? String == "text/markdown" && object["content_disposition"] as? String == "inline", "\(object)")
        #expect((job["spec"] as? [String: Any])?["clear_metadata"] as? [String] == ["cache_control", "content_language", "custom_metadata"],
                "\(job)")
        let shown = try workspace.jobctl(["show", ids[1]]).stdout
        #expect(shown.contains("changes:") && shown.contains("remove cache_control, remove content_language, delete every custom key"),
                "\(shown)")

        // Only update-metadata removes: an upload's null is refused where it was written.
        let upload = try workspace.write("upload.yaml", "- {kind: upload-data, data: x, destination: \"\(local)\", metadata: {cache_control: null}}\n")
        let refused = try workspace.jobctl(["submit", upload], environment: environment)
        #expect(refused.status == 65 && refused.stderr.contains("'cache_control' must be a string, not null"), "\(refused.stderr)")
    }
}
