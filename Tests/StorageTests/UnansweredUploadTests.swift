import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// An `if_exists: fail` (or `skip`) upload whose earlier attempts all ended without a word (their workers died:
/// `ResumePoint.unanswered`): one of them may have stored the object, so an object holding exactly the
/// source's bytes is the job's own (the attempt succeeds, uploading nothing: the job's upload, compared by
/// CRC32C, not a skip); another object is refused (`fail`) or skipped (`skip`)
/// and kept, as always; no object is simply uploaded. On each backend: nginx, the GCS emulator, file://.
@Suite("if_exists: fail or skip after attempts that died", .onTestThreads)
struct UnansweredUploadTests {
    private let payload = patternData(150_000, seed: 41)

    /// The three cases against one backend; `put` stores bytes at a name, `read` reads them back (nil: none).
    private func check(_ backend: any StorageBackend, base: String, _ mode: IfExists = .fail, put: (String, Data) async throws -> Void,
                       read: (String) async throws -> Data?) async throws {
        // Ours: the same bytes are there.
        try await put("mine.bin", payload)
        let mine = JobSpec(kind: .uploadData, destination: "\(base)/mine.bin", data: payload, ifExists: mode)
        try UnansweredDownloadTests.expectLeft(await run(backend, mine), mode, "without a word")
        let taken = try finished(await run(backend, mine, resume: .unanswered))
        #expect(taken.skipped == nil && taken.size == Int64(payload.count), "\(taken)")
        #expect(taken.crc32c == hashes(payload).crc32c && taken.verified == [.crc32c], "\(taken)")
        #expect(try await read("mine.bin") == payload)

        // Someone else's: other bytes of the same size, and a shorter file.
        for (name, content) in [("other.bin", patternData(150_000, seed: 42)), ("short.bin", payload.prefix(1_000))] {
            try await put(name, Data(content))
            let spec = JobSpec(kind: .uploadData, destination: "\(base)/\(name)", data: payload, ifExists: mode)
            try UnansweredDownloadTests.expectLeft(await run(backend, spec, resume: .unanswered), mode, name)
            #expect(try await read(name) == Data(content), "\(name) was replaced")
        }

        // Nothing there: uploaded.
        let fresh = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(base)/fresh.bin", data: payload, ifExists: mode),
                                         resume: .unanswered))
        #expect(fresh.skipped == nil && fresh.crc32c == hashes(payload).crc32c)
        #expect(try await read("fresh.bin") == payload)
    }

    @Test("HTTP (nginx reports no hash: the file is read back to compare)", arguments: [IfExists.fail, .skip])
    func http(_ mode: IfExists) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try await check(HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5)), base: server.baseURL, mode,
                        put: { name, data in try data.write(to: URL(fileURLWithPath: server.root + "/" + name)) },
                        read: { name in try? Data(contentsOf: URL(fileURLWithPath: server.root + "/" + name)) })
    }

    @Test("GCS (the object's CRC32C), and the object taken keeps its generation", arguments: [IfExists.fail, .skip])
    func gcs(_ mode: IfExists) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let base = "gs://\(server.bucket)"
        try await check(backend, base: base, mode,
                        put: { name, data in _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(base)/\(name)", data: data))) },
                        read: { name in try? finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(base)/\(name)", maxSize: 1 << 24))).data })
        let before = try finished(await run(backend, JobSpec(kind: .getMetadata, source: "\(base)/mine.bin")))
        let again = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "\(base)/mine.bin", data: payload, ifExists: mode),
                                           resume: .unanswered))
        #expect(again.object?.generation == before.object?.generation, "nothing was written")
    }

    @Test("file:// (the sidecar's CRC32C)", arguments: [IfExists.fail, .skip])
    func local(_ mode: IfExists) async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-unanswered-upload")
        defer { directory.remove() }
        try await check(backend, base: "file://b", mode,
                        put: { name, data in _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/\(name)", data: data))) },
                        read: { name in try? Data(contentsOf: URL(fileURLWithPath: buckets + "/b/" + name)) })
    }
}

/// download-file with `if_exists: fail` or `skip` after attempts that died: a destination holding the
/// object's bytes is the job's own download (`skip` used to report it skipped: an audit saying the job
/// moved nothing when its own attempt wrote the file); another file is refused (`fail`) or skipped
/// (`skip`) and kept; no file is simply downloaded.
@Suite("if_exists: fail or skip download after attempts that died", .onTestThreads)
struct UnansweredDownloadTests {
    private let payload = patternData(120_000, seed: 43)

    /// `fail` refuses a file that is not the job's, `skip` reports the job skipped; either keeps it.
    static func expectLeft(_ outcome: Result<TransferOutcome, StorageError>, _ mode: IfExists, _ what: String) throws {
        if mode == .fail {
            let refused = try failure(outcome)
            #expect(refused.code == .invalidArgument && refused.message.contains("if_exists: fail"), "\(what): \(refused)")
        } else {
            let skipped = try finished(outcome)
            #expect(skipped.skipped == true && skipped.verified == nil, "\(what): \(skipped)")
        }
    }

    private func check(_ backend: any StorageBackend, object: String, in directory: TemporaryDirectory, _ mode: IfExists) async throws {
        let mine = directory.file("mine.bin")
        try payload.write(to: URL(fileURLWithPath: mine))
        let spec = JobSpec(kind: .downloadFile, source: object, destination: mine, ifExists: mode)
        try Self.expectLeft(await run(backend, spec), mode, "without a word")
        let taken = try finished(await run(backend, spec, resume: .unanswered))
        #expect(taken.skipped == nil && taken.verified == [.crc32c] && taken.size == Int64(payload.count), "\(taken)")

        let other = directory.file("other.bin")
        let otherBytes = patternData(120_000, seed: 44)
        try otherBytes.write(to: URL(fileURLWithPath: other))
        try Self.expectLeft(await run(backend, JobSpec(kind: .downloadFile, source: object, destination: other, ifExists: mode),
                                      resume: .unanswered), mode, "other bytes")
        #expect(try Data(contentsOf: URL(fileURLWithPath: other)) == otherBytes, "kept")

        let fresh = directory.file("fresh.bin")
        let downloaded = try finished(await run(backend, JobSpec(kind: .downloadFile, source: object, destination: fresh, ifExists: mode),
                                                resume: .unanswered))
        #expect(downloaded.skipped == nil)
        #expect(try Data(contentsOf: URL(fileURLWithPath: fresh)) == payload)
    }

    @Test("GCS (the object's CRC32C)", arguments: [IfExists.fail, .skip])
    func gcs(_ mode: IfExists) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let object = "gs://\(server.bucket)/d.bin"
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: object, data: payload)))
        let directory = try TemporaryDirectory("jobctl-unanswered-download")
        defer { directory.remove() }
        try await check(backend, object: object, in: directory, mode)
    }

    @Test("file:// (the sidecar's CRC32C)", arguments: [IfExists.fail, .skip])
    func local(_ mode: IfExists) async throws {
        let (directory, _, backend) = try localBuckets("jobctl-unanswered-download")
        defer { directory.remove() }
        _ = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/d.bin", data: payload)))
        try await check(backend, object: "file://b/d.bin", in: directory, mode)
        // `skip` with the object gone: nothing to compare with, the file stays and the job is skipped.
        if mode == .skip {
            let mine = directory.file("mine.bin")
            try Self.expectLeft(await run(backend, JobSpec(kind: .downloadFile, source: "file://b/gone.bin", destination: mine, ifExists: .skip),
                                          resume: .unanswered), .skip, "object gone")
            #expect(try Data(contentsOf: URL(fileURLWithPath: mine)) == payload)
        }
    }

    /// A `file://` object without its sidecar (placed by hand, or the sidecar lost) has no CRC32C to
    /// compare with: the job's own download, left by an attempt that died, was taken for someone's file —
    /// failed under `fail`, skipped under `skip`. The object is read, as HTTP reads a file no hash describes.
    @Test("file:// without a sidecar: the object is read to compare", arguments: [IfExists.fail, .skip])
    func localWithoutASidecar(_ mode: IfExists) async throws {
        let (directory, buckets, backend) = try localBuckets("jobctl-unanswered-download")
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: buckets + "/b", withIntermediateDirectories: true)
        try payload.write(to: URL(fileURLWithPath: buckets + "/b/d.bin"))
        try await check(backend, object: "file://b/d.bin", in: directory, mode)
        // Other bytes of the very same size: read, compared, refused or skipped.
        let same = directory.file("same-size.bin")
        let sameSize = patternData(payload.count, seed: 45)
        try sameSize.write(to: URL(fileURLWithPath: same))
        try Self.expectLeft(await run(backend, JobSpec(kind: .downloadFile, source: "file://b/d.bin", destination: same, ifExists: mode),
                                      resume: .unanswered), mode, "same size")
        #expect(try Data(contentsOf: URL(fileURLWithPath: same)) == sameSize, "kept")
    }

    @Test("HTTP without a served CRC32C (nginx): the object is read back to compare", arguments: [IfExists.fail, .skip])
    func httpWithoutHash(_ mode: IfExists) async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/d.bin"))
        let directory = try TemporaryDirectory("jobctl-unanswered-download")
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        try await check(backend, object: "\(server.baseURL)/d.bin", in: directory, mode)
        // Other bytes of the very same size: read back, compared, refused or skipped.
        let same = directory.file("same-size.bin")
        let sameSize = patternData(payload.count, seed: 45)
        try sameSize.write(to: URL(fileURLWithPath: same))
        try Self.expectLeft(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/d.bin", destination: same,
                                                       ifExists: mode), resume: .unanswered), mode, "same size")
        #expect(try Data(contentsOf: URL(fileURLWithPath: same)) == sameSize, "kept")
    }

    /// `skip`: when the look that would compare fails (the HEAD answered 500), the file is neither
    /// compared nor downloaded over: the job is skipped, as it was before the comparison existed.
    @Test("HTTP: skip keeps the file when the look at the object fails")
    func httpSkipWithoutALook() async throws {
        let server = try NginxServer.start()
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/d.bin"))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [FaultRule(RequestMatch(method: "HEAD"), .respond(.response(500)), times: .max)])
        defer { proxy.stop() }
        let directory = try TemporaryDirectory("jobctl-unanswered-download")
        defer { directory.remove() }
        let mine = directory.file("other.bin")
        let otherBytes = patternData(120_000, seed: 46)
        try otherBytes.write(to: URL(fileURLWithPath: mine))
        let backend = HTTPBackend(configuration: StorageConfiguration(stallTimeout: 30, connectTimeout: 5))
        try Self.expectLeft(await run(backend, JobSpec(kind: .downloadFile, source: "\(proxy.baseURL)/d.bin", destination: mine, ifExists: .skip),
                                      resume: .unanswered), .skip, "no look")
        #expect(try Data(contentsOf: URL(fileURLWithPath: mine)) == otherBytes, "kept")
        #expect(proxy.exchanges.map(\.request.method) == ["HEAD"], "no GET: \(proxy.exchanges.map(\.request.method))")
    }
}
