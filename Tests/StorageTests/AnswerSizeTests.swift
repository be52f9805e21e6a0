import Foundation
import JobModel
import Storage
import TestSupport
import Testing

/// Success answers read into memory (list pages, object resources): only their first 64 KiB were kept,
/// so a list page of more than ~100 full object resources (real GCS pages 1,000, ~1 KB each) was "not
/// JSON", and an answer that never ended was read for ever. Such an answer is whole up to 16 MiB, and a
/// larger one fails saying so.
@Suite(.onTestThreads) struct AnswerSizeTests {
    /// One object resource as real GCS lists it (`projection=noAcl`): ~900 bytes, ~1 MB for a full page.
    private static func resource(_ name: String, bucket: String) -> [String: Any] {
        let escaped = name.replacingOccurrences(of: "/", with: "%2F")
        return [
            "kind": "storage#object", "id": "\(bucket)/\(name)/1712345678901234", "name": name, "bucket": bucket,
            "selfLink": "https://www.googleapis.com/storage/v1/b/\(bucket)/o/\(escaped)",
            "mediaLink": "https://storage.googleapis.com/download/storage/v1/b/\(bucket)/o/\(escaped)?generation=1712345678901234&alt=media",
            "generation": "1712345678901234", "metageneration": "1", "contentType": "application/octet-stream",
            "storageClass": "STANDARD", "size": "1048576", "md5Hash": "1B2M2Y8AsgTpgAmY7PhCfg==", "crc32c": "AAAAAA==",
            "etag": "CPLq4r2Y0YQDEAE=", "timeCreated": "2024-04-05T12:34:56.789Z", "updated": "2024-04-05T12:34:56.789Z",
            "timeStorageClassUpdated": "2024-04-05T12:34:56.789Z",
            "metadata": ["firebaseStorageDownloadTokens": UUID().uuidString.lowercased(), "owner": String(repeating: "o", count: 300)],
        ]
    }

    @Test("a list page of 1,000 full object resources (~1 MB) is read whole")
    func aFullListPageIsReadWhole() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let bucket = server.bucket
        // The emulator answers with what it holds; the proxy answers as GCS does for a full page.
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("/o?") }), .rewriteResponse { _, response in
                let items = (0..<1_000).map { Self.resource(String(format: "dir/f%05d.bin", $0), bucket: bucket) }
                response.startLine = "HTTP/1.1 200 OK"
                response.body = (try? JSONSerialization.data(withJSONObject: ["kind": "storage#objects", "items": items])) ?? Data()
                response.setHeader("Content-Type", "application/json; charset=UTF-8")
                response.setHeader("Content-Length", String(response.body.count))
            }, times: 10),
        ])
        defer { proxy.stop() }
        let lister = ObjectLister(configuration: emulatorConfiguration(server, through: proxy))
        let names = try await lister.objectNames(under: try StorageReference(parsing: "gs://\(bucket)/dir/"), limit: 10_000)
        #expect(names.count == 1_000)
        #expect(names.sorted().last == "dir/f00999.bin")
        let page = try #require(proxy.exchanges.first?.response?.body.count)
        #expect(page > 800_000, "the page was \(page) bytes")
    }

    @Test("an answer that never ends fails as larger than 16 MiB, after reading no more than that")
    func anEndlessAnswerFailsSayingSo() async throws {
        let server = try TrickleServer(.endless)
        defer { server.stop() }
        let configuration = StorageConfiguration(gcsEndpoint: server.baseURL, usesEmulator: true, firebaseEndpoint: server.baseURL,
                                                 stallTimeout: 30, connectTimeout: 5)
        // The object's metadata: a timeout ends the test should the answer be read for ever.
        var spec = JobSpec(kind: .getMetadata, source: "gs://bkt/obj.bin")
        spec.timeoutSeconds = 30
        let error = try failure(await run(GCSBackend(configuration: configuration), spec))
        #expect(error.code == .unknown && error.retryable)
        #expect(error.message.contains("the server's answer was larger than 16 MiB"), "\(error)")
        // Read no further than the limit (and what the socket buffers held when it was reached).
        #expect(server.bodyBytesSent < 24 * 1024 * 1024, "the server sent \(server.bodyBytesSent) bytes")
        // A list page: the same, never "not JSON". A listing has no job timeout: cancelled after 30 s should
        // the answer be read for ever.
        let prefix = try StorageReference(parsing: "gs://bkt/dir/")
        let listing = Task { () -> Result<[String], StorageError> in
            do throws(StorageError) {
                return .success(try await ObjectLister(configuration: configuration).objectNames(under: prefix, limit: 10))
            } catch {
                return .failure(error)
            }
        }
        let watchdog = Task {
            try? await Task.sleep(for: .seconds(30))
            listing.cancel()
        }
        defer { watchdog.cancel() }
        switch await listing.value {
        case .success(let names): Issue.record("the listing of an endless answer gave \(names)")
        case .failure(let error): #expect(error.message.contains("the server's answer was larger than 16 MiB"), "\(error)")
        }
    }
}
