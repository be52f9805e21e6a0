import Checksums
import Foundation
import JobModel
@testable import Storage
import Testing
import TestSupport

/// Which hashes a transfer computes and compares: CRC32C by default wherever the server reports it,
/// MD5 only when the job asks (`checksums: [md5]`) or when it is the one hash offered; plain-HTTP
/// downloads checked against `Content-MD5`, `Digest`, `Repr-Digest` and `Content-Digest`.
@Suite("Checksum policy against the emulator and nginx", .onTestThreads)
struct ChecksumPolicyTests {
    private func httpConfiguration() -> StorageConfiguration {
        StorageConfiguration(stallTimeout: 30, connectTimeout: 5)
    }

    /// The 4 big-endian bytes of a CRC32C as 8 hex digits (a form RFC 3230 `Digest` values take).
    private func crc32cHex(_ data: Data) -> String {
        String(format: "%08x", CRC32C.checksum(data))
    }

    /// `data` with one byte changed in the middle.
    private func corrupted(_ data: Data) -> Data {
        var copy = data
        copy[copy.count / 2] ^= 0x01
        return copy
    }

    // MARK: - GCS

    @Test("a GCS download is verified by CRC32C alone: MD5 is not computed, the server's MD5 is still recorded")
    func gcsDefaultIsCRC32COnly() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let payload = patternData(300_000, seed: 91)
        let object = "gs://\(server.bucket)/policy/a.bin"
        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadData, destination: object, data: payload)))
        #expect(uploaded.md5 == nil && uploaded.verified == [.crc32c])
        #expect(uploaded.object?.md5Hash == hashes(payload).md5, "the object's own MD5 stays in the result")

        let destination = directory.file("a.bin")
        let file = try finished(await run(backend, JobSpec(kind: .downloadFile, source: object, destination: destination)))
        #expect(file.verified == [.crc32c])
        #expect(file.md5 == nil, "MD5 was not computed")
        #expect(file.crc32c == hashes(payload).crc32c)
        #expect(file.object?.md5Hash == hashes(payload).md5)
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination)) == payload)

        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: object)))
        #expect(memory.verified == [.crc32c] && memory.md5 == nil)
        #expect(memory.object?.md5Hash == hashes(payload).md5)
    }

    @Test("checksums: [md5] computes MD5 and compares it with the object's, on upload and download")
    func gcsMD5WhenAsked() async throws {
        let server = try EmulatorServer.start()
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = GCSBackend(configuration: emulatorConfiguration(server))
        let payload = patternData(300_000, seed: 92)
        let object = "gs://\(server.bucket)/policy/b.bin"
        let uploaded = try finished(await run(backend, JobSpec(kind: .uploadData, destination: object, data: payload,
                                                               checksums: [.md5])))
        #expect(uploaded.md5 == hashes(payload).md5 && uploaded.verified == [.md5, .crc32c])

        let destination = directory.file("b.bin")
        let file = try finished(await run(backend, JobSpec(kind: .downloadFile, source: object, destination: destination,
                                                           checksums: [.md5, .crc32c])))
        #expect(file.md5 == hashes(payload).md5)
        #expect(file.verified == [.md5, .crc32c])
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: object, checksums: [.md5])))
        #expect(memory.md5 == hashes(payload).md5 && memory.verified == [.md5, .crc32c])
    }

    // MARK: - Plain HTTP digests

    /// One way a server reports a digest: the header line for `data`, and what it lets us verify.
    struct DigestForm: CustomTestStringConvertible, Sendable {
        let name: String
        let header: @Sendable (Data) -> String
        let verified: [ChecksumAlgorithm]
        var testDescription: String { name }
    }

    static let forms: [DigestForm] = [
        DigestForm(name: "Content-MD5", header: { "Content-MD5 \"\(hashes($0).md5)\"" }, verified: [.md5]),
        DigestForm(name: "Digest md5", header: { "Digest \"MD5=\(hashes($0).md5)\"" }, verified: [.md5]),
        DigestForm(name: "Digest md5+crc32c (hex)", header: {
            "Digest \"md5=\(hashes($0).md5), CRC32c=\(String(format: "%08x", CRC32C.checksum($0)))\""
        }, verified: [.crc32c]),
        DigestForm(name: "Repr-Digest md5+crc32c", header: { "Repr-Digest \"md5=:\(hashes($0).md5):, crc32c=:\(hashes($0).crc32c):\"" },
                   verified: [.crc32c]),
        DigestForm(name: "Repr-Digest md5", header: { "Repr-Digest \"md5=:\(hashes($0).md5):\"" }, verified: [.md5]),
        DigestForm(name: "Content-Digest crc32c", header: { "Content-Digest \"crc32c=:\(hashes($0).crc32c):\"" }, verified: [.crc32c]),
    ]

    @Test("a digest header is verified; one corrupted byte is nonMatchingChecksum and no copy is left", arguments: forms)
    func httpDigestForms(form: DigestForm) async throws {
        let payload = patternData(200_000, seed: 93)
        let header = form.header(payload)
        let server = try NginxServer.start(extraServerConfig: """
            location = /good.bin { add_header \(header); }
            location = /bad.bin { add_header \(header); }
            """)
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/good.bin"))
        try corrupted(payload).write(to: URL(fileURLWithPath: server.root + "/bad.bin"))
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: httpConfiguration())

        let good = directory.file("good.bin")
        let file = try finished(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/good.bin", destination: good)))
        #expect(file.verified == form.verified)
        #expect((file.md5 != nil) == form.verified.contains(.md5), "MD5 computed only when it is the one hash offered")
        let memory = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/good.bin")))
        #expect(memory.verified == form.verified)
        let asked = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/good.bin",
                                                            checksums: [.md5])))
        #expect(asked.md5 == hashes(payload).md5)
        #expect(asked.verified == ChecksumAlgorithm.allCases.filter { algorithm in
            header.lowercased().contains("\(algorithm.rawValue)=") || (algorithm == .md5 && header.hasPrefix("Content-MD5"))
        })

        let bad = directory.file("bad.bin")
        let error = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/bad.bin", destination: bad)))
        #expect(error.code == .nonMatchingChecksum, "\(error)")
        #expect(!FileManager.default.fileExists(atPath: bad))
        #expect(!FileManager.default.fileExists(atPath: PartialFile.tempPath(for: bad)))
        #expect((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) == ["good.bin"])
        let memoryError = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/bad.bin")))
        #expect(memoryError.code == .nonMatchingChecksum)
    }

    /// A hash header sent twice with two values (a cache or proxy adding its own beside the origin's): the
    /// file cannot match both. `x-goog-hash`'s last CRC32C silently replaced the first, and two
    /// `Content-MD5` lines, joined, read as no digest at all: a download matching the one left, or none,
    /// succeeded as verified or unchecked. Every value is compared, as `Digest`'s and `Repr-Digest`'s were.
    @Test("a hash header repeated with another value fails the download: every value is compared",
          arguments: ["x-goog-hash crc32c", "x-amz-checksum-crc32c", "Content-MD5"])
    func repeatedHashHeaderWithAnotherValue(form: String) async throws {
        let payload = patternData(100_000, seed: 94)
        let other = corrupted(payload)
        let lines: String = switch form {
        case "x-goog-hash crc32c":
            "add_header x-goog-hash \"crc32c=\(hashes(other).crc32c)\"; add_header x-goog-hash \"crc32c=\(hashes(payload).crc32c)\";"
        case "x-amz-checksum-crc32c":
            "add_header x-amz-checksum-crc32c \"\(hashes(other).crc32c)\"; add_header x-goog-hash \"crc32c=\(hashes(payload).crc32c)\";"
        default:
            "add_header Content-MD5 \"\(hashes(payload).md5)\"; add_header Content-MD5 \"\(hashes(other).md5)\";"
        }
        let server = try NginxServer.start(extraServerConfig: "location = /twice.bin { \(lines) }")
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/twice.bin"))
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: httpConfiguration())
        let destination = directory.file("twice.bin")
        let error = try failure(await run(backend, JobSpec(kind: .downloadFile, source: "\(server.baseURL)/twice.bin", destination: destination)))
        #expect(error.code == .nonMatchingChecksum, "\(form): \(error)")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) == [], "no copy is left")
        let memoryError = try failure(await run(backend, JobSpec(kind: .downloadMemory, source: "\(server.baseURL)/twice.bin")))
        #expect(memoryError.code == .nonMatchingChecksum, "\(form): \(memoryError)")
    }

    @Test("a Range-resumed download (206) is verified against the whole-object digest, and a 206's Content-MD5 is not used")
    func rangeResumedDownloadVerifiedWhole() async throws {
        let total = 6 << 20
        let payload = patternData(total, seed: 94)
        // Content-MD5 on a 206 describes the part sent: a whole-file comparison with it would fail.
        let server = try NginxServer.start(extraServerConfig: """
            location = /big.bin {
                add_header Repr-Digest "md5=:\(hashes(payload).md5):";
                add_header Content-MD5 "AAAAAAAAAAAAAAAAAAAAAA==";
            }
            location = /bad.bin { add_header Digest "crc32c=\(crc32cHex(payload))"; }
            """)
        defer { server.stop() }
        try payload.write(to: URL(fileURLWithPath: server.root + "/big.bin"))
        try corrupted(payload).write(to: URL(fileURLWithPath: server.root + "/bad.bin"))
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let backend = HTTPBackend(configuration: httpConfiguration())

        /// Pauses after the first MiB and resumes; the resumed attempt's outcome.
        func pausedThenResumed(_ name: String) async throws -> Result<TransferOutcome, StorageError> {
            let spec = JobSpec(kind: .downloadFile, source: "\(server.baseURL)/\(name)", destination: directory.file(name))
            let control = TransferControl()
            let first = EventRecorder { event in
                if case .progress(let done, _) = event, done >= 1 << 20 { control.stop(.pause) }
            }
            let outcome = try await run(backend, spec, control: control, recorder: first).get()
            guard case .stopped(.pause, let point?) = outcome, point.bytesDone > 0, point.bytesDone < Int64(total) else {
                Issue.record("expected a paused download, got \(outcome)")
                throw TestServerError("no pause")
            }
            let result = await run(backend, spec, resume: point)
            // The ranged request's line (the paused request's own may be logged after it: nginx logs an
            // aborted response when it notices the abort).
            let ranged = server.accessLogLines(atLeast: 1) { $0.contains("GET /\(name)") && $0.contains("\"bytes=") }.last
            #expect(ranged?.split(separator: "\"")[2].split(separator: " ").first == "206", "the rest came as a 206: \(ranged ?? "")")
            return result
        }

        let result = try finished(await pausedThenResumed("big.bin"))
        #expect(result.verified == [.md5], "MD5 (the one hash offered) covers the resumed prefix too")
        #expect(result.md5 == hashes(payload).md5)
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("big.bin"))) == payload)

        let error = try failure(await pausedThenResumed("bad.bin"))
        #expect(error.code == .nonMatchingChecksum, "\(error)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("bad.bin")))
        #expect(!FileManager.default.fileExists(atPath: PartialFile.tempPath(for: directory.file("bad.bin"))))
    }

    // MARK: - Header parsing

    @Test func servedDigestSemantics() {
        let md5 = hashes(Data("x".utf8)).md5
        let headers = ["content-md5": md5, "content-digest": "md5=:\(md5):", "repr-digest": "md5=:\(md5):, sha-256=:AAAA:",
                       "digest": "crc32c=0a0b0c0d, md5=not-base64"]
        // A 200 carries the whole representation: every form counts.
        #expect(servedDigests(headers, status: 200).map(\.source) == ["Content-MD5", "Digest", "Repr-Digest", "Content-Digest"])
        // A 206's Content-MD5 and Content-Digest cover only the part sent: only the whole-representation ones count.
        #expect(servedDigests(headers, status: 206).map(\.source) == ["Digest", "Repr-Digest"])
        #expect(servedDigests(headers, status: 206).first?.value == Data([0x0A, 0x0B, 0x0C, 0x0D]).base64EncodedString())
        // x-goog-hash covers the whole stored object, also on a 206; not a body GCS decompressed for us.
        let goog = ["x-goog-hash": "crc32c=\(hashes(Data("x".utf8)).crc32c),md5=\(md5)"]
        #expect(servedDigests(goog, status: 206).map(\.algorithm) == [.md5, .crc32c])
        #expect(servedDigests(goog.merging(["x-goog-stored-content-encoding": "gzip"]) { a, _ in a }, status: 200).isEmpty)
        #expect(servedDigests(goog.merging(["x-goog-stored-content-encoding": "gzip", "content-encoding": "gzip"]) { a, _ in a },
                              status: 200).count == 2)
    }

    /// The error's URL is made only for a mismatch: every verified download used to redact its URL for
    /// nothing. A match must not evaluate it; a mismatch still carries it.
    @Test func verifyMakesTheURLOnlyForAMismatch() throws {
        let crc32c = hashes(Data("x".utf8)).crc32c
        let digests = servedDigests(["x-goog-hash": "crc32c=\(crc32c)"], status: 200)
        final class Counter: @unchecked Sendable { var made = 0 }
        let counter = Counter()
        func url() -> String {
            counter.made += 1
            return redactedURL("http://h/x?token=secret")
        }
        #expect(try digests.verify(md5: nil, crc32c: crc32c, what: "downloaded file", remedy: "r", url: url()) == [.crc32c])
        #expect(counter.made == 0)
        do {
            _ = try digests.verify(md5: nil, crc32c: hashes(Data("y".utf8)).crc32c, what: "downloaded file", remedy: "r", url: url())
            Issue.record("a different CRC32C verified")
        } catch {
            #expect(error.code == .nonMatchingChecksum)
            #expect(error.url == "http://h/x?token=REDACTED")
        }
        #expect(counter.made == 1)
    }

    // MARK: - file:// buckets

    @Test("file:// buckets: CRC32C from the sidecar by default; MD5 stored and compared when asked")
    func localBuckets() async throws {
        let directory = try TemporaryDirectory("jobctl-local")
        defer { directory.remove() }
        let buckets = directory.file("buckets")
        try FileManager.default.createDirectory(atPath: buckets, withIntermediateDirectories: true)
        let backend = LocalBackend(configuration: StorageConfiguration(localBucketsDirectory: buckets))
        let payload = patternData(100_000, seed: 95)
        let plain = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/plain.bin", data: payload)))
        #expect(plain.md5 == nil && plain.object?.md5Hash == nil && plain.object?.crc32c == hashes(payload).crc32c)
        let read = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "file://b/plain.bin")))
        #expect(read.verified == [.crc32c] && read.md5 == nil)

        let withMD5 = try finished(await run(backend, JobSpec(kind: .uploadData, destination: "file://b/md5.bin", data: payload,
                                                             checksums: [.md5])))
        #expect(withMD5.object?.md5Hash == hashes(payload).md5)
        let readDefault = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "file://b/md5.bin")))
        #expect(readDefault.verified == [.crc32c] && readDefault.md5 == nil)
        let readMD5 = try finished(await run(backend, JobSpec(kind: .downloadMemory, source: "file://b/md5.bin", checksums: [.md5])))
        #expect(readMD5.verified == [.md5, .crc32c] && readMD5.md5 == hashes(payload).md5)
    }
}
