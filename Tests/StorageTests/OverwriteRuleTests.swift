import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

/// `if_exists:` against `file://` buckets and local download destinations: the real effect on disk.
@Suite(.onTestThreads) final class OverwriteRuleLocalTests: Sendable {
    private let directory: TemporaryDirectory
    private let backend: LocalBackend

    deinit { directory.remove() }

    init() throws {
        directory = try TemporaryDirectory("jobctl-ifexists")
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")))
    }

    private var objectPath: String { directory.file("buckets/b/x.txt") }

    private func upload(_ text: String, _ rule: IfExists?) async -> Result<TransferOutcome, StorageError> {
        await run(backend, JobSpec(kind: .uploadData, destination: "file://b/x.txt", data: Data(text.utf8), ifExists: rule))
    }

    private func contents(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    @Test func uploadRulesOnAnExistingObject() async throws {
        _ = try finished(await upload("first", nil))
        let skipped = try finished(await upload("second", .skip))
        #expect(skipped.skipped == true && contents(objectPath) == "first")

        let error = try failure(await upload("third", .fail))
        #expect(error.code == .invalidArgument && !error.retryable && error.message.contains("if_exists: fail"), "\(error)")
        #expect(contents(objectPath) == "first")
        // Nothing of the refused upload is left behind in the bucket.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("buckets/b")).filter { $0.contains("jobctl-upload") }.isEmpty)

        let identical = try finished(await upload("first", .skipIdentical))
        #expect(identical.skipped == true)
        let different = try finished(await upload("fifth", .skipIdentical))
        #expect(different.skipped == nil && contents(objectPath) == "fifth")

        let overwritten = try finished(await upload("sixth", .overwrite))
        #expect(overwritten.skipped == nil && contents(objectPath) == "sixth")
    }

    @Test func uploadRulesOnAMissingObjectWrite() async throws {
        for rule in [IfExists.skip, .fail, .skipIdentical] {
            try? FileManager.default.removeItem(atPath: objectPath)
            let result = try finished(await upload("new \(rule)", rule))
            #expect(result.skipped == nil && contents(objectPath) == "new \(rule)")
        }
    }

    @Test func downloadRulesOnAnExistingFile() async throws {
        _ = try finished(await upload("object", nil))
        let destination = directory.file("out/x.txt")
        try FileManager.default.createDirectory(atPath: directory.file("out"), withIntermediateDirectories: true)
        try Data("local".utf8).write(to: URL(fileURLWithPath: destination))
        func download(_ rule: IfExists?) async -> Result<TransferOutcome, StorageError> {
            await run(backend, JobSpec(kind: .downloadFile, source: "file://b/x.txt", destination: destination, ifExists: rule))
        }
        let skipped = try finished(await download(.skip))
        #expect(skipped.skipped == true && skipped.path == destination && contents(destination) == "local")
        let error = try failure(await download(.fail))
        #expect(error.code == .invalidArgument && !error.retryable && contents(destination) == "local", "\(error)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("out")) == ["x.txt"])
        _ = try finished(await download(nil))
        #expect(contents(destination) == "object")
        try FileManager.default.removeItem(atPath: destination)
        let fresh = try finished(await download(.fail))
        #expect(fresh.skipped == nil && contents(destination) == "object")
    }

    /// The write itself refuses to replace a file that appears after the up-front check: `linkat`.
    @Test func failCommitNeverReplacesAFileThatAppearedMeanwhile() throws {
        let destination = directory.file("race.txt")
        let partial = try PartialFile(destination: destination, jobID: "j1", resumeFrom: nil)
        try partial.write(Data("downloaded".utf8))
        try Data("someone else".utf8).write(to: URL(fileURLWithPath: destination))
        #expect(throws: StorageError.self) { try partial.commit(replacing: false) }
        #expect(contents(destination) == "someone else")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix(".race") }.isEmpty)
    }
}

/// `if_exists:` against the GCS emulator. The emulator ignores preconditions, so `fail` is proven by the
/// request it sends (`ifGenerationMatch=0` on the session start, seen in the proxy's log) and by how a
/// 412 answer (synthesized by the proxy, as real GCS answers) ends the job.
@Suite(.onTestThreads) struct OverwriteRuleGCSTests {
    @Test func uploadRulesAgainstTheEmulator() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: proxy.baseURL, usesEmulator: true,
                                                                     firebaseEndpoint: proxy.baseURL, stallTimeout: 30, connectTimeout: 5))
        let reference = "gs://\(server.bucket)/rules/x.txt"
        func upload(_ text: String, _ rule: IfExists?) async -> Result<TransferOutcome, StorageError> {
            await run(backend, JobSpec(kind: .uploadData, destination: reference, data: Data(text.utf8), ifExists: rule))
        }
        func sessionStarts() -> [String] {
            proxy.exchanges.filter { $0.request.method == "POST" && $0.request.target.contains("uploadType=resumable") }.map(\.request.target)
        }
        /// Uploads sent in one request (small objects whose rule replaces: no precondition to keep).
        func oneRequestUploads() -> [String] {
            proxy.exchanges.filter { $0.request.method == "POST" && $0.request.target.contains("uploadType=multipart") }.map(\.request.target)
        }

        // Nothing there yet: `fail` uploads, carrying the precondition.
        let first = try finished(await upload("first", .fail))
        #expect(first.skipped == nil && first.object?.size == 5)
        // In a session even though it is small: a lost answer resent in one request would meet its own object.
        #expect(sessionStarts().count == 1 && sessionStarts().allSatisfy { $0.contains("ifGenerationMatch=0") }, "\(sessionStarts())")
        #expect(oneRequestUploads().isEmpty)

        // `skip` looks first and sends no upload.
        let skipped = try finished(await upload("second", .skip))
        #expect(skipped.skipped == true && skipped.object?.size == 5)
        #expect(sessionStarts().count == 1)

        // `skip-identical`: same bytes skip, other bytes upload (without the precondition). The source is
        // read for the comparison off the cooperative pool.
        let journal = FileIO.Journal()
        #expect(try finished(await FileIO.$journal.withValue(journal) { await upload("first", .skipIdentical) }).skipped == true)
        #expect(journal.recorded == [.compare])
        #expect(try finished(await upload("other", .skipIdentical)).skipped == nil)
        #expect(sessionStarts().count == 1)
        #expect(oneRequestUploads().count == 1 && !oneRequestUploads()[0].contains("ifGenerationMatch"), "\(oneRequestUploads())")

        // A 412 (what real GCS answers when the object exists) is a clear, final error.
        proxy.add(FaultRule(RequestMatch(method: "POST", pathContains: "ifGenerationMatch=0"),
                            .respond(ProxyMessage(startLine: "HTTP/1.1 412 Precondition Failed",
                                                  headers: [ProxyHeader("Content-Length", "0")]))))
        let error = try failure(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/rules/new.txt",
                                                           data: Data("x".utf8), ifExists: .fail)))
        #expect(error.code == .invalidArgument && !error.retryable && error.httpStatus == 412, "\(error)")
        #expect(error.message.contains("if_exists: fail"))
    }
}

/// `if_exists:` for plain-HTTP PUT against nginx. nginx's WebDAV module ignores `If-None-Match: *` on
/// PUT (this test found so), so `fail` also looks with HEAD first; the header is still sent.
@Suite(.onTestThreads) struct OverwriteRuleHTTPTests {
    @Test func putRulesAgainstNginx() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let url = "\(proxy.baseURL)/rules/x.txt"
        let path = server.root + "/rules/x.txt"
        func upload(_ text: String, _ rule: IfExists?) async -> Result<TransferOutcome, StorageError> {
            await run(backend, JobSpec(kind: .uploadData, destination: url, data: Data(text.utf8), ifExists: rule))
        }
        func contents() -> String? { FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) } }

        #expect(try finished(await upload("first", .fail)).skipped == nil)
        #expect(contents() == "first")
        let puts = proxy.exchanges.filter { $0.request.method == "PUT" }
        #expect(puts.count == 1 && puts.first?.request.header("If-None-Match") == "*")
        let error = try failure(await upload("second", .fail))
        #expect(error.code == .invalidArgument && !error.retryable && error.message.contains("if_exists: fail"), "\(error)")
        #expect(proxy.exchanges.filter { $0.request.method == "PUT" }.count == 1)
        #expect(contents() == "first")
        #expect(try finished(await upload("third", .skip)).skipped == true)
        #expect(contents() == "first")
        // nginx reports no hash, so skip-identical cannot prove the bytes equal: it uploads.
        #expect(try finished(await upload("first", .skipIdentical)).skipped == nil)
        #expect(try finished(await upload("fourth", nil)).skipped == nil)
        #expect(contents() == "fourth")
    }
}
