import Checksums
import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

private func contents(_ path: String) -> String? {
    FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
}

private func inode(_ path: String) throws -> UInt64 {
    try #require(try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? UInt64)
}

/// `if_exists: skip-identical` for download-file and `if_generation:` on delete and update-metadata,
/// against `file://` buckets: the real effect on disk.
@Suite(.onTestThreads) final class SkipIdenticalAndGenerationLocalTests: Sendable {
    private let directory: TemporaryDirectory
    private let backend: LocalBackend

    deinit { directory.remove() }

    init() throws {
        directory = try TemporaryDirectory("jobctl-identical")
        try FileManager.default.createDirectory(atPath: directory.file("buckets/b"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory.file("out"), withIntermediateDirectories: true)
        backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")))
    }

    private func upload(_ text: String, to name: String = "x.txt") async throws -> JobResult {
        try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/\(name)", data: Data(text.utf8))))
    }

    @Test func downloadSkipsOnlyTheSameSizeAndCRC32C() async throws {
        _ = try await upload("object")
        let destination = directory.file("out/x.txt")
        func download() async throws -> JobResult {
            try finished(await run(backend, JobSpec(kind: .downloadFile, source: "file://b/x.txt", destination: destination,
                                                    ifExists: .skipIdentical)))
        }
        // Nothing there: downloaded.
        #expect(try await download().skipped == nil && contents(destination) == "object")
        // The same bytes: kept as they are (the same file, not a replaced one).
        let kept = try inode(destination)
        let skipped = try await download()
        #expect(skipped.skipped == true && skipped.path == destination && skipped.crc32c == CRC32CBase64.of("object"))
        #expect(try inode(destination) == kept)
        // The same size, other bytes (another CRC32C): downloaded again.
        try Data("objecT".utf8).write(to: URL(fileURLWithPath: destination))
        #expect(try await download().skipped == nil && contents(destination) == "object")
        // Another size: downloaded again.
        try Data("obj".utf8).write(to: URL(fileURLWithPath: destination))
        #expect(try await download().skipped == nil && contents(destination) == "object")
    }

    @Test func generationGuardsUpdateMetadataAndDelete() async throws {
        let stored = try await upload("v1")
        let generation = try #require(stored.object?.generation.flatMap { Int64($0) })
        let objectPath = directory.file("buckets/b/x.txt")

        var update = JobSpec(kind: .updateMetadata, destination: "file://b/x.txt", metadata: UploadMetadata(contentType: "text/x-one"))
        update.ifGeneration = generation + 1
        let refused = try failure(await run(backend, update))
        #expect(refused.code == .invalidArgument && !refused.retryable, "\(refused)")
        #expect(refused.message.contains("precondition failed") && refused.message.contains("is generation \(generation), not \(generation + 1)"),
                "\(refused.message)")
        let unchanged = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "file://b/x.txt")))
        #expect(unchanged.object?.contentType != "text/x-one" && unchanged.object?.metageneration == stored.object?.metageneration)
        update.ifGeneration = generation
        #expect(try finished(await run(backend, update)).object?.contentType == "text/x-one")

        var delete = JobSpec(kind: .delete, destination: "file://b/x.txt")
        delete.ifGeneration = generation - 1
        let kept = try failure(await run(backend, delete))
        #expect(kept.code == .invalidArgument && kept.message.contains("precondition failed"), "\(kept)")
        #expect(FileManager.default.fileExists(atPath: objectPath))
        delete.ifGeneration = generation
        #expect(try finished(await run(backend, delete)).deleted == "file://b/x.txt")
        #expect(!FileManager.default.fileExists(atPath: objectPath))
    }
}

/// The same against the GCS emulator, seen through the proxy's request log. The emulator ignores
/// preconditions, so a stale generation is refused by the look before the request; the request itself
/// still carries `ifGenerationMatch`, and a 412 (synthesized by the proxy, as real GCS answers a
/// concurrent change) ends the job with the same error.
@Suite(.onTestThreads) struct SkipIdenticalAndGenerationGCSTests {
    @Test func downloadSkipIdenticalAndGenerationPreconditions() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: StorageConfiguration(gcsEndpoint: proxy.baseURL, usesEmulator: true,
                                                                     firebaseEndpoint: proxy.baseURL, stallTimeout: 30, connectTimeout: 5))
        let directory = try TemporaryDirectory("jobctl-identical-gcs")
        defer { directory.remove() }
        let reference = "gs://\(server.bucket)/same/x.txt"
        let stored = try finished(await run(backend, JobSpec(kind: .uploadData, destination: reference, data: Data("gcs object".utf8))))
        let generation = try #require(stored.object?.generation.flatMap { Int64($0) })
        func mediaGets() -> Int { proxy.exchanges.filter { $0.request.method == "GET" && $0.request.target.contains("alt=media") }.count }

        let destination = directory.file("x.txt")
        let download = JobSpec(kind: .downloadFile, source: reference, destination: destination, ifExists: .skipIdentical)
        #expect(try finished(await run(backend, download)).skipped == nil && mediaGets() == 1)
        // The local copy is read for the comparison off the cooperative pool.
        let journal = FileIO.Journal()
        let skipped = try finished(await FileIO.$journal.withValue(journal) { await run(backend, download) })
        #expect(skipped.skipped == true && skipped.verified == [.crc32c] && mediaGets() == 1)
        #expect(journal.recorded == [.compare])
        try Data("gcs objecT".utf8).write(to: URL(fileURLWithPath: destination))
        #expect(try finished(await run(backend, download)).skipped == nil && mediaGets() == 2)
        #expect(contents(destination) == "gcs object")

        var update = JobSpec(kind: .updateMetadata, destination: reference, metadata: UploadMetadata(cacheControl: "no-cache"))
        update.ifGeneration = generation + 7
        let stale = try failure(await run(backend, update))
        #expect(stale.code == .invalidArgument && !stale.retryable && stale.message.contains("precondition failed"), "\(stale)")
        #expect(proxy.exchanges.filter { $0.request.method == "PATCH" }.isEmpty)
        update.ifGeneration = generation
        #expect(try finished(await run(backend, update)).object?.cacheControl == "no-cache")
        let patches = proxy.exchanges.filter { $0.request.method == "PATCH" }.map(\.request.target)
        #expect(patches.count == 1 && patches.allSatisfy { $0.contains("ifGenerationMatch=\(generation)") }, "\(patches)")

        var delete = JobSpec(kind: .delete, destination: reference)
        delete.ifGeneration = generation + 7
        #expect(try failure(await run(backend, delete)).message.contains("precondition failed"))
        #expect(proxy.exchanges.filter { $0.request.method == "DELETE" }.isEmpty)

        // The object changes between the look and the DELETE: GCS answers 412.
        proxy.add(FaultRule(RequestMatch(method: "DELETE", pathContains: "ifGenerationMatch=\(generation)"),
                            .respond(ProxyMessage(startLine: "HTTP/1.1 412 Precondition Failed",
                                                  headers: [ProxyHeader("Content-Length", "0")]))))
        delete.ifGeneration = generation
        let raced = try failure(await run(backend, delete))
        #expect(raced.httpStatus == 412 && !raced.retryable && raced.message.contains("precondition failed"), "\(raced)")
        #expect(try finished(await run(backend, delete)).deleted == reference)
        let deletes = proxy.exchanges.filter { $0.request.method == "DELETE" }.map(\.request.target)
        #expect(deletes.count == 2 && deletes.allSatisfy { $0.contains("ifGenerationMatch=\(generation)") }, "\(deletes)")
    }
}

/// skip-identical downloads over plain HTTP: nginx reports no hash, so the file is fetched again; a
/// server that reports a CRC32C to the HEAD (synthesized by the proxy, as GCS's XML API sends
/// `x-goog-hash`) lets an identical file be kept.
@Suite(.onTestThreads) struct SkipIdenticalHTTPTests {
    @Test func downloadsAgainUnlessTheServerReportsTheSameCRC32C() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        try FileManager.default.createDirectory(atPath: server.root + "/same", withIntermediateDirectories: true)
        try Data("served bytes".utf8).write(to: URL(fileURLWithPath: server.root + "/same/x.txt"))
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let directory = try TemporaryDirectory("jobctl-identical-http")
        defer { directory.remove() }
        let destination = directory.file("x.txt")
        let download = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/same/x.txt", destination: destination, ifExists: .skipIdentical)
        func gets() -> Int { proxy.exchanges.filter { $0.request.method == "GET" }.count }

        #expect(try finished(await run(backend, download)).skipped == nil && gets() == 1)
        // nginx offers no digest: nothing proves the copy equal, so it is downloaded again.
        #expect(try finished(await run(backend, download)).skipped == nil && gets() == 2)

        let crc32c = CRC32CBase64.of("served bytes")
        proxy.add(FaultRule(RequestMatch(method: "HEAD", pathContains: "/same/x.txt"),
                            .respond(ProxyMessage(startLine: "HTTP/1.1 200 OK",
                                                  headers: [ProxyHeader("Content-Length", "12"),
                                                            ProxyHeader("x-goog-hash", "crc32c=\(crc32c)")]))))
        let journal = FileIO.Journal()
        #expect(try finished(await FileIO.$journal.withValue(journal) { await run(backend, download) }).skipped == true && gets() == 2)
        #expect(journal.recorded == [.compare])
        #expect(contents(destination) == "served bytes")
    }

    /// A HEAD reporting two CRC32Cs (the one matching the local file last): the last was taken, and the
    /// file kept, whatever the other said. A server whose hashes disagree proves nothing equal.
    @Test func disagreeingCRC32CsProveNothing() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try Data("served bytes".utf8).write(to: URL(fileURLWithPath: server.root + "/x.txt"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "HEAD"), .respond(ProxyMessage(startLine: "HTTP/1.1 200 OK", headers: [
                ProxyHeader("Content-Length", "12"),
                ProxyHeader("x-goog-hash", "crc32c=\(CRC32CBase64.of("other  bytes"))"),
                ProxyHeader("x-goog-hash", "crc32c=\(CRC32CBase64.of("served bytes"))"),
            ])), times: .max),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let directory = try TemporaryDirectory("jobctl-identical-http")
        defer { directory.remove() }
        let destination = directory.file("x.txt")
        try Data("served bytes".utf8).write(to: URL(fileURLWithPath: destination))
        let download = JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/x.txt", destination: destination, ifExists: .skipIdentical)
        let result = try finished(await run(backend, download))
        #expect(result.skipped == nil, "kept on a hash the server contradicts")
        #expect(proxy.exchanges.filter { $0.request.method == "GET" }.count == 1)
    }
}

/// Base64 CRC32C of a text, as GCS writes it.
enum CRC32CBase64 {
    static func of(_ text: String) -> String {
        var crc = CRC32C()
        crc.update(Data(text.utf8))
        return crc.base64
    }
}

/// Write-back started while a download arrives (`sync_file_range`): the C library has the call, so the
/// speed-up is in effect here, and a partial file written past several write-back steps commits the
/// exact bytes.
@Suite(.onTestThreads) struct WriteBackTests {
    @Test func writeBackIsAvailableAndLeavesTheBytesIntact() throws {
        #expect(LocalFiles.syncFileRange != nil, "glibc exports sync_file_range: downloads start write-back as they go")
        let directory = try TemporaryDirectory("jobctl-writeback")
        defer { directory.remove() }
        let destination = directory.file("big.bin")
        let partial = try PartialFile(destination: destination, jobID: "01WRITEBACK", resumeFrom: nil)
        var expected = Data()
        var crc = CRC32C()
        for step in 0..<11 {
            // 11 pieces of 1 MiB + 7 bytes: write-back requests start at uneven offsets.
            let piece = Data(repeating: UInt8(step * 17 & 0xFF), count: (1 << 20) + 7)
            try partial.write(piece)
            expected.append(piece)
            crc.update(piece)
        }
        #expect(partial.bytesWritten == Int64(expected.count) && Int64(expected.count) > 2 * PartialFile.writeBackStep)
        let path = try partial.commit()
        let written = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(written.count == expected.count && CRC32C.checksum(written) == crc.value)
    }
}
