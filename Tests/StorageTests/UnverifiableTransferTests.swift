import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A GCS transfer is verified by a hash the server reports — CRC32C, which GCS gives for every object,
/// or MD5 — and one that no hash can verify fails (`internalError`, not retried) instead of succeeding
/// with `verified: []`: a server that stored or sent other bytes and reported no hash had uploads and
/// downloads succeed, and a download commit those bytes as the object. Here a proxy in front of the
/// emulator strips the hashes from every answer (the object resources' `crc32c` and `md5Hash`, the media
/// answers' `x-goog-hash`), or only the MD5s, as for a composite object.
@Suite("GCS transfers no hash can verify", .onTestThreads)
struct UnverifiableTransferTests {
    /// Strips `crc32c` and `md5Hash` (or only `md5Hash`) from every object resource the emulator answers,
    /// and the same hashes from every `x-goog-hash`.
    static func strippingHashes(onlyMD5: Bool = false) -> FaultRule {
        FaultRule(.any, .rewriteResponse { request, response in
            if let served = response.header("x-goog-hash") {
                let kept = served.split(separator: ",").filter { onlyMD5 && !$0.trimmingCharacters(in: .whitespaces).hasPrefix("md5=") }
                response.setHeader("x-goog-hash", kept.isEmpty ? nil : kept.joined(separator: ","))
            }
            guard !request.target.contains("alt=media"), (200..<300).contains(response.status),
                  var json = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] else { return }
            json["md5Hash"] = nil
            if !onlyMD5 { json["crc32c"] = nil }
            response.body = (try? JSONSerialization.data(withJSONObject: json)) ?? response.body
        }, times: .max)
    }

    /// Uploads in a session (three chunks), in one request, and in one request asking for MD5: the
    /// stored object reports no hash, in the final answer or in its metadata. Each succeeded with
    /// `verified: []`; now each fails for good, and the generation it stored is deleted.
    @Test("an upload whose stored object reports no hash fails and is deleted", arguments: [
        (700_000, 0, false), (3_000, 256 * 1024, false), (3_000, 256 * 1024, true),
    ])
    func uploadWithoutHashes(size: Int, singleRequestLimit: Int, md5: Bool) async throws {
        let setup = try UploadFaultTests.ProxiedEmulator([Self.strippingHashes()], singleRequestLimit: singleRequestLimit)
        defer { setup.stop() }
        let name = "nohash-\(size)-\(md5).bin"
        let spec = JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/\(name)", data: patternData(size, seed: 61),
                           checksums: md5 ? [.md5, .crc32c] : nil)
        let error = try failure(await run(setup.backend, spec))
        #expect(error.code == .internalError && !error.retryable, "\(error)")
        #expect(error.message.contains("no CRC32C or MD5") && error.message.contains("the object was deleted"), "\(error.message)")
        #expect(setup.proxy.exchanges.contains { $0.request.method == "DELETE" && $0.request.target.contains("ifGenerationMatch=") })
        #expect(await !setup.exists(name))
    }

    /// The MD5 alone missing (a composite object has none) still verifies by CRC32C: the job that asked
    /// for MD5 succeeds, and its result says MD5 was computed but not compared.
    @Test("an upload asking for MD5 of an object that reports only its CRC32C succeeds, MD5 unverified")
    func uploadWithoutMD5() async throws {
        let setup = try UploadFaultTests.ProxiedEmulator([Self.strippingHashes(onlyMD5: true)], singleRequestLimit: 256 * 1024)
        defer { setup.stop() }
        let payload = patternData(3_000, seed: 62)
        let result = try finished(await run(setup.backend, JobSpec(kind: .uploadData, destination: "gs://\(setup.server.bucket)/crc-only.bin",
                                                                   data: payload, checksums: [.md5, .crc32c])))
        #expect(result.verified == [.crc32c] && result.md5 == hashes(payload).md5, "\(result)")
        #expect(try await setup.storedBytes("crc-only.bin") == payload)
    }

    /// Downloads to a file and to memory of an object whose metadata and media answers report no hash
    /// (and of an empty one, whose answer has no body to check at its first byte): each was committed
    /// as `succeeded`, whatever bytes came; now each fails for good and nothing is kept.
    @Test("a download no hash can verify fails and keeps nothing", arguments: [100_000, 0])
    func downloadWithoutHashes(size: Int) async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let payload = patternData(size, seed: 63)
        _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                   JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/o.bin", data: payload)))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [Self.strippingHashes()])
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let directory = try TemporaryDirectory("jobctl-unverifiable")
        defer { directory.remove() }
        let destination = directory.file("o.bin")
        for md5 in [false, true] {
            let checksums: [ChecksumAlgorithm]? = md5 ? [.md5, .crc32c] : nil
            let error = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "gs://\(server.bucket)/o.bin",
                                                               destination: destination, checksums: checksums)))
            #expect(error.code == .internalError && !error.retryable, "\(error)")
            #expect(error.message.contains("no CRC32C or MD5") && error.message.contains("nothing could verify"), "\(error.message)")
            #expect(!FileManager.default.fileExists(atPath: destination))
            #expect(!FileManager.default.fileExists(atPath: PartialFile.tempPath(for: destination)))
            let memory = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/o.bin",
                                                                maxSize: 1 << 20, checksums: checksums)))
            #expect(memory.code == .internalError && !memory.retryable, "\(memory)")
            #expect(memory.message.contains("no CRC32C or MD5"), "\(memory.message)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    /// A download asking for MD5 of an object that reports only its CRC32C (composite) is verified by
    /// the CRC32C; its MD5 is computed and said not to be compared.
    @Test("a download asking for MD5 of an object that reports only its CRC32C succeeds, MD5 unverified")
    func downloadWithoutMD5() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let payload = patternData(100_000, seed: 64)
        _ = try finished(await run(GCSBackend(configuration: emulatorConfiguration(server)),
                                   JobSpec(kind: .uploadData, destination: "gs://\(server.bucket)/c.bin", data: payload)))
        let proxy = try FaultProxy(upstreamPort: server.port, rules: [Self.strippingHashes(onlyMD5: true)])
        defer { proxy.stop() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server, through: proxy))
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "gs://\(server.bucket)/c.bin", maxSize: 1 << 20,
                                                             checksums: [.md5, .crc32c])))
        #expect(memory.data == payload && memory.verified == [.crc32c] && memory.md5 == hashes(payload).md5, "\(memory)")
    }
}
