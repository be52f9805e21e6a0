import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// An object stored with `Content-Encoding: gzip` (`gsutil cp -Z`, web assets): GCS serves it
/// decompressed to a client that does not send `Accept-Encoding: gzip` (decompressive transcoding) —
/// another size than the metadata's, no Range, and hashes (`x-goog-hash`, the metadata's) of the stored
/// bytes, not of the body — so such a download could never be verified. jobctl asks for the stored bytes
/// and gets them verified. The emulator neither keeps `contentEncoding` nor transcodes, so the fault
/// proxy plays GCS: it adds the encoding to the metadata and transcodes a media GET that does not ask
/// for gzip.
@Suite("GCS objects stored gzip-encoded", .onTestThreads)
struct GzipEncodedObjectTests {
    @Test("download-file and download-memory get the stored bytes, verified, without transcoding")
    func storedBytes() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory("jobctl-gzip-object")
        defer { directory.remove() }
        let plain = Data(String(repeating: "a line of text that compresses well\n", count: 6_000).utf8)
        let plainPath = directory.file("plain.txt")
        try plain.write(to: URL(fileURLWithPath: plainPath))
        let gzipped = try runProcess("/bin/gzip", ["-k", "-n", "-f", plainPath])
        try #require(gzipped.status == 0, "\(gzipped.stderr)")
        let stored = try Data(contentsOf: URL(fileURLWithPath: plainPath + ".gz"))
        try #require(stored.count < plain.count / 10 && stored.starts(with: [0x1F, 0x8B]))

        let direct = GCSBackend(configuration: emulatorConfiguration(server))
        _ = try finished(await run(direct, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/g.txt", data: stored)))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("/o/g.txt") && !$0.target.contains("alt=media") }),
                      .rewriteResponse { _, response in
                          guard var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
                          json["contentEncoding"] = "gzip"
                          response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? Data()
                          response.setHeader("Content-Length", String(response.body.count))
                      }, times: 100),
            FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("g.txt") && $0.target.contains("alt=media") }),
                      .rewriteResponse { request, response in
                          if request.header("Accept-Encoding")?.lowercased().contains("gzip") == true {
                              response.setHeader("Content-Encoding", "gzip")
                          } else {
                              // Decompressive transcoding: the whole object decompressed, Range ignored.
                              response.startLine = "HTTP/1.1 200 OK"
                              response.setHeader("Content-Range", nil)
                              response.setHeader("X-Goog-Stored-Content-Encoding", "gzip")
                              response.body = plain
                              response.setHeader("Content-Length", String(plain.count))
                          }
                      }, times: 100),
        ])
        defer { proxy.stop() }
        var configuration = emulatorConfiguration(server, through: proxy)
        let backend = GCSBackend(configuration: configuration)

        let destination = directory.file("g.txt")
        let file = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/g.txt", destination: destination)))
        #expect(file.verified == [.crc32c] && file.size == Int64(stored.count), "\(file)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == stored)
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/g.txt", maxSize: 1 << 20)))
        #expect(memory.data == stored && memory.verified == [.crc32c], "\(memory)")
        // Sliced: each slice's Range is honoured once GCS does not transcode.
        configuration.slicedThreshold = 64
        configuration.sliceCount = 4
        let sliced = directory.file("g-sliced.txt")
        let slices = try finished(await run(GCSBackend(configuration: configuration),
                                            JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/g.txt", destination: sliced)))
        #expect(slices.verified == [.crc32c], "\(slices)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: sliced)) == stored)
        let media = proxy.exchanges.filter { $0.request.target.contains("alt=media") }
        #expect(media.count == 6 && media.allSatisfy { $0.request.header("Accept-Encoding") == "gzip" },
                "\(stored.count) bytes: \(media.map { "\($0.request.header("Accept-Encoding") ?? "none") \($0.request.header("Range") ?? "")" })")
    }

    /// A HEAD of an object's public URL (`get-metadata` of an http(s) source) that does not accept gzip is
    /// answered as GCS would serve the object, decompressed: no Content-Length, and `x-goog-hash` of the
    /// stored bytes. The metadata describes the stored object as GCS's own does: its length and encoding
    /// go with the hashes. The proxy answers the HEAD as GCS documents it; nginx never transcodes.
    @Test("get-metadata of an http(s) URL GCS would transcode describes the stored object: length, encoding and hashes together")
    func transcodedHead() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        let stored = Data("stored gzip bytes, 24 B.".utf8)
        let digests = hashes(stored)
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "HEAD", pathContains: "/site/app.js"),
                      .respond(ProxyMessage(startLine: "HTTP/1.1 200 OK", headers: [
                          ProxyHeader("Content-Type", "text/javascript"),
                          ProxyHeader("x-goog-stored-content-encoding", "gzip"),
                          ProxyHeader("x-goog-stored-content-length", String(stored.count)),
                          ProxyHeader("x-goog-hash", "crc32c=\(digests.crc32c),md5=\(digests.md5)"),
                      ]))),
        ])
        defer { proxy.stop() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        let read = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "\(proxy.baseURL)/site/app.js")))
        let object = try #require(read.object)
        #expect(object.md5Hash == digests.md5 && object.crc32c == digests.crc32c)
        #expect(object.size == Int64(stored.count) && object.contentEncoding == "gzip", "\(object)")
    }
}

/// A plain-HTTP server sending `Content-Encoding: gzip` to a request that did not ask for it (no
/// `Accept-Encoding` is sent): the bytes are kept as sent, as curl without `--compressed` keeps them, and
/// verified against a digest of those bytes (RFC 9530's `Repr-Digest` covers the encoded representation).
/// Decoding them would make a file the server's digests and length do not describe.
@Suite("HTTP answers gzip-encoded unasked", .onTestThreads)
struct UnaskedGzipTests {
    @Test("the encoded bytes are the file, verified by the digest of what was sent")
    func encodedBytesKept() async throws {
        let sent = patternData(50_000, seed: 58)
        let server = try NginxServer.start(extraServerConfig: """
            location = /g.bin { add_header Content-Encoding gzip; add_header Repr-Digest "crc32c=:\(hashes(sent).crc32c):"; }
            """)
        defer { server.stop() }
        try sent.write(to: URL(fileURLWithPath: server.root + "/g.bin"))
        let directory = try TemporaryDirectory("jobctl-unasked-gzip")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 10, connectTimeout: 5))
        let file = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/g.bin",
                                                           destination: directory.file("g.bin"))))
        #expect(file.verified == [.crc32c])
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("g.bin"))) == sent)
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/g.bin", maxSize: 1 << 20)))
        #expect(memory.data == sent && memory.verified == [.crc32c])
        let metadata = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "\(server.baseURL)/g.bin")))
        #expect(metadata.object?.contentEncoding == "gzip" && metadata.object?.size == Int64(sent.count), "\(String(describing: metadata.object))")
    }
}
