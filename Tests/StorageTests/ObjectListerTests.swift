import Foundation
import JobModel
import Synchronization
import Storage
import TestSupport
import Testing

/// Listing a prefix at submit: the GCS list API page by page, and a `file://` bucket walk.
@Suite(.onTestThreads) struct ObjectListerTests {
    /// Puts small objects into the emulator's bucket.
    private func put(_ names: [String], into server: EmulatorServer) async throws {
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        for name in names {
            _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/\(name)", data: Data(name.utf8))))
        }
    }

    /// The emulator answers a list in one page, whatever `maxResults` says; real GCS pages. This proxy
    /// turns the emulator's complete answer into the page that `maxResults` and `pageToken` (here: the
    /// offset) select, with `nextPageToken` while more remain, as GCS does.
    /// The list requests the proxy paged, recorded before each answer is sent (the proxy's own exchange
    /// log is written after the answer, so a client can be done before the last entry is there).
    final class ListRequests: Sendable {
        let targets = Mutex<[String]>([])
    }

    private static func paging(_ seen: ListRequests) -> FaultRule {
        FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("/o?") }), .rewriteResponse { request, response in
            seen.targets.withLock { $0.append(request.target) }
            guard let query = URLComponents(string: "http://h" + request.target)?.queryItems,
                  var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
            let items = json["items"] as? [[String: Any]] ?? []
            let size = query.first { $0.name == "maxResults" }?.value.flatMap(Int.init) ?? 1_000
            let start = query.first { $0.name == "pageToken" }?.value.flatMap(Int.init) ?? 0
            let end = min(items.count, start + size)
            json["items"] = Array(items[min(start, items.count)..<end])
            json["nextPageToken"] = end < items.count ? String(end) : nil
            response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? Data()
            response.setHeader("Content-Length", String(response.body.count))
        }, times: 1_000)
    }

    @Test func aGCSPrefixIsListedPageByPage() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        try await put(["photos/a.jpg", "photos/2024/b.jpg", "photos/2024/05/c.jpg", "photos/d e.jpg", "photos/x.tmp",
                       "photosX/no.jpg", "other/no.jpg"], into: server)
        let seen = ListRequests()
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [Self.paging(seen)])
        defer { proxy.stop() }
        var configuration = emulatorConfiguration(server)
        configuration.gcsEndpoint = "http://127.0.0.1:\(proxy.port)"
        let lister = ObjectLister(configuration: configuration, pageSize: 2)
        let names = try await lister.objectNames(under: try StorageReference(parsing: "gs://\(server.bucket)/photos/"), limit: 100)
        #expect(names.sorted() == ["photos/2024/05/c.jpg", "photos/2024/b.jpg", "photos/a.jpg", "photos/d e.jpg", "photos/x.tmp"])
        let lists = seen.targets.withLock { $0 }
        #expect(lists.count == 3, "five objects, two a page: \(lists)")
        #expect(lists.allSatisfy { $0.contains("prefix=photos%2F") && $0.contains("maxResults=2") })
        #expect(lists.dropFirst().map { $0.contains("pageToken=") } == [true, true] && !lists[0].contains("pageToken"))
        // The limit stops the listing once it is passed.
        let limited = try await lister.objectNames(under: try StorageReference(parsing: "gs://\(server.bucket)/photos/"), limit: 1)
        #expect(limited.count == 2)
        // The whole bucket from its root.
        let all = try await ObjectLister(configuration: emulatorConfiguration(server)).objectNames(
            under: try StorageReference(parsing: "gs://\(server.bucket)/"), limit: 100)
        #expect(all.count == 7)
    }

    /// A server whose pages go round (the same `nextPageToken` every time) was followed for 100,000
    /// pages: ~3.5 minutes on loopback, hours at a real server's pace. A token given before stops it.
    @Test func aPageTokenGivenBeforeStopsTheListing() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        try await put(["pre/f1", "pre/f2"], into: server)
        let seen = ListRequests()
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [
            FaultRule(RequestMatch(method: "GET", predicate: { $0.target.contains("/o?") }), .rewriteResponse { request, response in
                seen.targets.withLock { $0.append(request.target) }
                guard var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
                json["nextPageToken"] = "SAME"
                response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? Data()
                response.setHeader("Content-Length", String(response.body.count))
            }, times: 1_000),
        ])
        defer { proxy.stop() }
        var configuration = emulatorConfiguration(server)
        configuration.gcsEndpoint = "http://127.0.0.1:\(proxy.port)"
        do {
            _ = try await ObjectLister(configuration: configuration).objectNames(under: try StorageReference(parsing: "gs://\(server.bucket)/pre/"),
                                                                               limit: 100)
            Issue.record("the listing went round without end and was taken")
        } catch {
            #expect(error.retryable && error.message.contains("page token it had given before"), "\(error)")
        }
        #expect(seen.targets.withLock { $0.count } == 2, "the first page and the one its token led back to")
    }

    @Test func aMissingBucketIsBucketNotFound() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let lister = ObjectLister(configuration: emulatorConfiguration(server))
        await #expect(throws: StorageError.self) {
            _ = try await lister.objectNames(under: try StorageReference(parsing: "gs://no-such-bucket/photos/"), limit: 10)
        }
        do {
            _ = try await lister.objectNames(under: try StorageReference(parsing: "gs://no-such-bucket/photos/"), limit: 10)
        } catch {
            #expect(error.code == .bucketNotFound, "\(error)")
        }
    }

    @Test func aFileBucketIsWalkedWithoutLinksOrJobctlsOwnFiles() async throws {
        let directory = try TemporaryDirectory("lister")
        defer { directory.remove() }
        let files = FileManager.default
        let bucket = directory.file("buckets/demo")
        try files.createDirectory(atPath: bucket + "/photos/2024", withIntermediateDirectories: true)
        for name in ["photos/a.jpg", "photos/2024/b.jpg", "photos/.a.jpg.jobctl-meta.json", "photos/.b.jpg.01ABC.jobctl-upload", "top.txt"] {
            try "x".write(toFile: bucket + "/" + name, atomically: true, encoding: .utf8)
        }
        try files.createSymbolicLink(atPath: bucket + "/photos/link.jpg", withDestinationPath: "/etc/hostname")
        try files.createSymbolicLink(atPath: bucket + "/photos/outside", withDestinationPath: directory.path)
        let lister = ObjectLister(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")))
        let names = try await lister.objectNames(under: try StorageReference(parsing: "file://demo/photos/"), limit: 100)
        #expect(names.sorted() == ["photos/2024/b.jpg", "photos/a.jpg"])
        let root = try await lister.objectNames(under: try StorageReference(parsing: "file://demo/"), limit: 100)
        #expect(root.sorted() == ["photos/2024/b.jpg", "photos/a.jpg", "top.txt"])
        // What is left out is said: the links and a FIFO, each with what it is (jobctl's own files are not).
        #expect(mkfifo(bucket + "/photos/2024/pipe", 0o600) == 0)
        let listing = try await lister.listing(under: try StorageReference(parsing: "file://demo/photos/"), limit: 100)
        #expect(listing.names.sorted() == ["photos/2024/b.jpg", "photos/a.jpg"])
        #expect(listing.skipped.map { "\($0.path): \($0.what)" }.sorted() == [
            "photos/2024/pipe: a FIFO", "photos/link.jpg: a symbolic link",
            "photos/outside: a symbolic link",
        ])
        #expect(try await lister.objectNames(under: try StorageReference(parsing: "file://demo/nothing/"), limit: 100).isEmpty)
        #expect(try await lister.objectNames(under: try StorageReference(parsing: "file://demo/top.txt/"), limit: 100).isEmpty)
        do {
            _ = try await lister.objectNames(under: try StorageReference(parsing: "file://absent/photos/"), limit: 100)
            Issue.record("a missing local bucket was listed")
        } catch {
            #expect(error.code == .bucketNotFound)
        }
    }

    /// A folder whose path reached PATH_MAX could not be looked up by its path (ENAMETOOLONG) and was
    /// left out as "not a regular file: a FIFO, or gone while listed", with every object in it. Walked
    /// from each folder's descriptor, it is found; what is in it is too deep for any file:// reference
    /// to name, and the listing says so, with the length and the limit. A folder in a bucket that cannot
    /// be searched is an error too, not a folder gone.
    @Test func aFolderTooDeepToNameRefusesTheListing() async throws {
        let directory = try TemporaryDirectory("lister-deep")
        defer { directory.remove() }
        let bucket = directory.file("buckets/demo/deep")
        try FileManager.default.createDirectory(atPath: bucket, withIntermediateDirectories: true)
        try "s".write(toFile: bucket + "/shallow.txt", atomically: true, encoding: .utf8)
        let deep = try DeepFolder(in: bucket)
        defer { deep.remove() }
        let lister = ObjectLister(configuration: StorageConfiguration(localBucketsDirectory: directory.file("buckets")))
        do {
            let names = try await lister.objectNames(under: try StorageReference(parsing: "file://demo/deep/"), limit: 100)
            Issue.record("listed \(names.count) names: \(names.map { $0.prefix(20) })")
        } catch {
            #expect(error.code == .invalidArgument, "\(error)")
            // demo/deep/00…/…/20…/x: 4 + 1 + 4 + 21 × 201 + 2 bytes.
            #expect(error.message.hasPrefix("the folder 'deep/00ddd"), "\(error.message)")
            #expect(error.message.contains("in file://demo/deep is too deep for what is in it to be named: a file:// reference to a file "
                                           + "there is 4232 bytes or more as a path (with the bucket's name), and Linux takes paths of at "
                                           + "most 4095 bytes (PATH_MAX)"), "\(error.message)")
        }
    }
}
