import Foundation
import JobModel
@testable import Storage
import Synchronization
import TestSupport
import Testing

/// `if_exists: skip` against a destination that appears while the transfer runs: the write itself
/// refuses to replace it (as under `fail`), and the job ends skipped with the newcomer untouched. `skip`
/// used to commit with a replacing rename: the user's file was replaced and the job reported it moved.
///
/// The newcomer is written from the transfer's own progress report (after the up-front look, before
/// the final write), so the race is the same on every run.
@Suite("if_exists: skip keeps a destination that appears mid-transfer", .onTestThreads)
struct AppearedDestinationTests {
    private let payload = patternData(600_000, seed: 77)
    private let theirs = Data("the user's own file".utf8)

    /// A recorder that writes `theirs` at `path` at the first progress report.
    private func writing(_ data: Data, at path: String) -> EventRecorder {
        let written = Atomic<Bool>(false)
        return EventRecorder { event in
            guard case .progress = event, !written.exchange(true, ordering: .relaxed) else { return }
            _ = FileManager.default.createFile(atPath: path, contents: data)
        }
    }

    /// Names in `folder` that are a transfer's leftovers (partial files, upload sessions, sidecar temporaries).
    private func leftovers(in folder: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.contains("jobctl-") && !$0.hasSuffix("jobctl-meta.json") }
    }

    /// download-file with `skip`, then `fail`, into `folder` while a file appears at the destination.
    private func checkDownload(_ backend: any StorageBackend, from source: String, into folder: String) async throws {
        let destination = folder + "/got.bin"
        let skipped = try finished(await run(backend, JobSpec(kind: .downloadFile, source: source, destination: destination, ifExists: .skip),
                                             recorder: writing(theirs, at: destination)))
        #expect(skipped.skipped == true && skipped.path == destination, "\(skipped)")
        #expect(FileManager.default.contents(atPath: destination) == theirs, "skip replaced the file that appeared")
        let left = try leftovers(in: folder)
        #expect(left.isEmpty, "\(left)")

        try FileManager.default.removeItem(atPath: destination)
        let error = try failure(await run(backend, JobSpec(kind: .downloadFile, source: source, destination: destination, ifExists: .fail),
                                          recorder: writing(theirs, at: destination)))
        #expect(error.code == .invalidArgument && !error.retryable, "\(error)")
        #expect(FileManager.default.contents(atPath: destination) == theirs)
        let leftAfterFail = try leftovers(in: folder)
        #expect(leftAfterFail.isEmpty, "\(leftAfterFail)")
    }

    @Test func fileDownloadAndUpload() async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-appeared")
        defer { directory.remove() }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/object.bin", data: payload)))
        try FileManager.default.createDirectory(atPath: directory.file("out"), withIntermediateDirectories: true)
        try await checkDownload(backend, from: "file://b/object.bin", into: directory.file("out"))

        // upload-data and upload-file alike: an object written at the name mid-upload stays, skipped.
        let source = directory.file("source.bin")
        try payload.write(to: URL(fileURLWithPath: source))
        for (name, spec) in [("data.bin", JobSpec(kind: .uploadData, destination: "file://b/data.bin", data: payload, ifExists: .skip)),
                             ("file.bin", JobSpec(kind: .uploadFile, source: source, destination: "file://b/file.bin", ifExists: .skip))] {
            let object = buckets + "/b/" + name
            let result = try finished(await run(backend, spec, recorder: writing(theirs, at: object)))
            #expect(result.skipped == true && result.object?.name == name && result.object?.size == Int64(theirs.count), "\(result)")
            #expect(FileManager.default.contents(atPath: object) == theirs, "skip replaced the object that appeared")
        }
        let left = try leftovers(in: buckets + "/b")
        #expect(left.isEmpty, "\(left)")
    }

    @Test func httpDownloadAndUpload() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-appeared-http")
        defer { directory.remove() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/object.bin"))
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        try await checkDownload(backend, from: "\(server.baseURL)/object.bin", into: directory.path)

        // nginx stores a PUT whatever its `If-None-Match: *` says, so the 412 a server that honours the
        // header gives for a file written meanwhile comes from the proxy: `skip` sends the header and
        // reads that answer as skipped; `fail` as its refusal.
        proxy.add(FaultRule(RequestMatch(method: "PUT", headerContains: ProxyHeader("If-None-Match", "*")),
                            .respond(ProxyMessage(startLine: "HTTP/1.1 412 Precondition Failed", headers: [ProxyHeader("Content-Length", "0")])),
                            times: 2))
        let url = "\(proxy.baseURL)/put/x.bin"
        let skipped = try finished(await run(backend, JobSpec(kind: .uploadData, destination: url, data: payload, ifExists: .skip)))
        #expect(skipped.skipped == true && skipped.object?.name == "put/x.bin", "\(skipped)")
        #expect(proxy.exchanges.filter { $0.request.method == "PUT" }.map { $0.request.header("If-None-Match") } == ["*"])
        let error = try failure(await run(backend, JobSpec(kind: .uploadData, destination: url, data: payload, ifExists: .fail)))
        #expect(error.code == .invalidArgument && error.httpStatus == 412, "\(error)")
        #expect(!FileManager.default.fileExists(atPath: server.root + "/put/x.bin"))
    }

    @Test func gcsDownloadAndUpload() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-appeared-gcs")
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let object = "gs://\(server.bucket)/appeared/object.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: object, data: payload)))
        try await checkDownload(backend, from: object, into: directory.path)

        // The emulator ignores preconditions: the 412 real GCS answers `ifGenerationMatch=0` for an object
        // written after the look comes from the proxy. `skip` carries the precondition as `fail` does (a
        // small upload too: in a session, not one unconditional request) and ends skipped on the 412.
        proxy.add(FaultRule(RequestMatch(method: "POST", pathContains: "ifGenerationMatch=0"),
                            .respond(ProxyMessage(startLine: "HTTP/1.1 412 Precondition Failed", headers: [ProxyHeader("Content-Length", "0")])),
                            times: 2))
        let fresh = "gs://\(server.bucket)/appeared/new.bin"
        let skipped = try finished(await run(backend, JobSpec(kind: .uploadData, destination: fresh, data: Data("other".utf8), ifExists: .skip)))
        #expect(skipped.skipped == true && skipped.object?.name == "appeared/new.bin", "\(skipped)")
        let error = try failure(await run(backend, JobSpec(kind: .uploadData, destination: fresh, data: Data("other".utf8), ifExists: .fail)))
        #expect(error.code == .invalidArgument && error.httpStatus == 412, "\(error)")
        let starts = proxy.exchanges.filter { $0.request.method == "POST" && $0.request.target.contains("ifGenerationMatch=0") }
        #expect(starts.count == 2, "\(proxy.exchanges.map(\.request.target))")
    }

    /// A paused download whose destination appeared before it resumed ends skipped with its partial file
    /// gone: it used to stay until the leftover sweep came by.
    @Test func pausedDownloadResumingIntoSkippedLeavesNoPartialFile() async throws {
        let (directory, _, local) = try localBuckets("jobctl-appeared-paused")
        defer { directory.remove() }
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")),
                                   checkpointInterval: 256 * 1024)
        _ = try finished(await run(local, JobSpec(kind: .uploadData, destination: "file://b/object.bin", data: patternData(3_000_000))))
        try FileManager.default.createDirectory(atPath: directory.file("out"), withIntermediateDirectories: true)
        let destination = directory.file("out/got.bin")
        let spec = JobSpec(kind: .downloadFile, source: "file://b/object.bin", destination: destination, ifExists: .skip)
        let control = TransferControl(jobID: "01APPEAREDPAUSED")
        let recorder = EventRecorder { event in
            if case .progress(let done, _) = event, done >= 1_000_000 { control.stop(.pause) }
        }
        let paused = try await run(backend, spec, control: control, recorder: recorder).get()
        guard case .stopped(.pause, let point?) = paused else { throw TestServerError("expected a paused download, got \(paused)") }
        let partial = try #require(OverwriteRule.fileWritten(by: point), "\(point)")
        #expect(FileManager.default.fileExists(atPath: partial.path))

        #expect(FileManager.default.createFile(atPath: destination, contents: theirs))
        let skipped = try finished(await run(backend, spec, resume: point, control: TransferControl(jobID: "01APPEAREDPAUSED")))
        #expect(skipped.skipped == true && FileManager.default.contents(atPath: destination) == theirs)
        #expect(!FileManager.default.fileExists(atPath: partial.path), "the paused attempt's partial file was left")
    }
}
