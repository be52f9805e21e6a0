import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// An `if_exists: fail` upload whose earlier attempts all ended without a word (their workers died:
/// `ResumePoint.unanswered`): one of them may have stored the object, so an object holding exactly the
/// source's bytes is the job's own (the attempt succeeds, uploading nothing: the job's upload, compared by
/// CRC32C, not a skip); another object is refused
/// and kept, as always; no object is simply uploaded. On each backend: nginx, the GCS emulator, file://.
@Suite("if_exists: fail after attempts that died", .onTestThreads)
struct UnansweredUploadTests {
    private let payload = patternData(150_000, seed: 41)

    /// The three cases against one backend; `put` stores bytes at a name, `read` reads them back (nil: none).
    private func check(_ backend: any StorageBackend, base: String, put: (String, Data) async throws -> Void,
                       read: (String) async throws -> Data?) async throws {
        // Ours: the same bytes are there.
        try await put("mine.bin", payload)
        let mine = JobSpec(kind: .uploadData, destination: "\(base)/mine.bin", data: payload, ifExists: .fail)
        let refusedWithoutWord = try failure(await run(backend, mine))
        #expect(refusedWithoutWord.code == .invalidArgument && refusedWithoutWord.message.contains("if_exists: fail"), "\(refusedWithoutWord)")
        let taken = try finished(await run(backend, mine, resume: .unanswered))
        #expect(taken.skipped == nil && taken.size == Int64(payload.count), "\(taken)")
        #expect(taken.crc32c == hashes(payload).crc32c && taken.verified == [.crc32c], "\(taken)")
        #expect(try await read("mine.bin") == payload)

        // Someone else's: other bytes of the same size, and a shorter file.
        for (name, content) in [("other.bin", patternData(150_000, seed: 42)), ("short.bin", payload.prefix(1_000))] {
            try await put(name, Data(content))
            let spec = JobSpec(kind: .uploadData, destination: "\(base)/\(name)", data: payload, ifExists: .fail)
            let refused = try failure(await run(backend, spec, resume: .unanswered))
            #expect(refused.code == .invalidArgument && refused.message.contains("if_exists: fail"), "\(name): \(refused)")
            #expect(try await read(name) == Data(content), "\(name) was replaced")
        }

        // Nothing there: uploaded.
        let fresh = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(base)/fresh.bin", data: payload, ifExists: .fail),
                                         resume: .unanswered))
        #expect(fresh.skipped == nil && fresh.crc32c == hashes(payload).crc32c)
        #expect(try await read("fresh.bin") == payload)
    }

    @Test("HTTP (nginx reports no hash: the file is read back to compare)")
    func http() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try await check(HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)), base: server.baseURL,
                        put: { name, data in try data.write(to: URL(fileURLWithPath: server.root + "/" + name)) },
                        read: { name in try? Data(contentsOf: URL(fileURLWithPath: server.root + "/" + name)) })
    }

    @Test("GCS (the object's CRC32C), and the object taken keeps its generation")
    func gcs() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let base = "gs://\(server.bucket)"
        try await check(backend, base: base,
                        put: { name, data in _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(base)/\(name)", data: data))) },
                        read: { name in try? finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(base)/\(name)", maxSize: 1 << 24))).data })
        let before = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "\(base)/mine.bin")))
        let again = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(base)/mine.bin", data: payload, ifExists: .fail),
                                           resume: .unanswered))
        #expect(again.object?.generation == before.object?.generation, "nothing was written")
    }

    @Test("file:// (the sidecar's CRC32C)")
    func local() async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-unanswered-upload")
        defer { directory.remove() }
        try await check(backend, base: "file://b",
                        put: { name, data in _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/\(name)", data: data))) },
                        read: { name in try? Data(contentsOf: URL(fileURLWithPath: buckets + "/b/" + name)) })
    }
}

/// download-file with `if_exists: fail` after attempts that died: a destination holding the object's bytes
/// is the job's own download; another file is refused and kept; no file is simply downloaded.
@Suite("if_exists: fail download after attempts that died", .onTestThreads)
struct UnansweredDownloadTests {
    private let payload = patternData(120_000, seed: 43)

    private func check(_ backend: any StorageBackend, object: String, in directory: TemporaryDirectory) async throws {
        let mine = directory.file("mine.bin")
        try payload.write(to: URL(fileURLWithPath: mine))
        let spec = JobSpec(kind: .downloadFile, source: object, destination: mine, ifExists: .fail)
        let refusedWithoutWord = try failure(await run(backend, spec))
        #expect(refusedWithoutWord.code == .invalidArgument && refusedWithoutWord.message.contains("if_exists: fail"), "\(refusedWithoutWord)")
        let taken = try finished(await run(backend, spec, resume: .unanswered))
        #expect(taken.skipped == nil && taken.verified == [.crc32c] && taken.size == Int64(payload.count), "\(taken)")

        let other = directory.file("other.bin")
        let otherBytes = patternData(120_000, seed: 44)
        try otherBytes.write(to: URL(fileURLWithPath: other))
        let refused = try failure(await run(backend, JobSpec(kind: .downloadFile, source: object, destination: other, ifExists: .fail),
                                            resume: .unanswered))
        #expect(refused.code == .invalidArgument && refused.message.contains("if_exists: fail"), "\(refused)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: other)) == otherBytes, "kept")

        let fresh = directory.file("fresh.bin")
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadFile, source: object, destination: fresh, ifExists: .fail),
                                                resume: .unanswered))
        #expect(downloaded.skipped == nil)
        #expect(try Data(contentsOf: URL(fileURLWithPath: fresh)) == payload)
    }

    @Test("GCS (the object's CRC32C)")
    func gcs() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let object = "gs://\(server.bucket)/d.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: object, data: payload)))
        let directory = try TemporaryDirectory("jobctl-unanswered-download")
        defer { directory.remove() }
        try await check(backend, object: object, in: directory)
    }

    @Test("file:// (the sidecar's CRC32C)")
    func local() async throws {
        let (directory, _, backend) = try localBuckets("jobctl-unanswered-download")
        defer { directory.remove() }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/d.bin", data: payload)))
        try await check(backend, object: "file://b/d.bin", in: directory)
    }

    @Test("HTTP without a served CRC32C (nginx): the object is read back to compare")
    func httpWithoutHash() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/d.bin"))
        let directory = try TemporaryDirectory("jobctl-unanswered-download")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        try await check(backend, object: "\(server.baseURL)/d.bin", in: directory)
        // Other bytes of the very same size: read back, compared, refused.
        let same = directory.file("same-size.bin")
        let sameSize = patternData(payload.count, seed: 45)
        try sameSize.write(to: URL(fileURLWithPath: same))
        let refused = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/d.bin", destination: same,
                                                             ifExists: .fail), resume: .unanswered))
        #expect(refused.code == .invalidArgument && refused.message.contains("if_exists: fail"), "\(refused)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: same)) == sameSize, "kept")
    }
}
