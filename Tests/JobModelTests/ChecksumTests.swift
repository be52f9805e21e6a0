import Foundation
import Testing
@testable import Checksums
@testable import JobModel

@Suite struct ChecksumTests {
    @Test func crc32cKnownVectors() {
        // RFC 3720 B.4 test vectors.
        #expect(CRC32C.checksum(Data(repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum(Data(repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum(Data((0..<32).map { UInt8($0) })) == 0x46DD_794E)
        #expect(CRC32C.checksum(Data("123456789".utf8)) == 0xE306_9283)
    }

    /// CRCs of consecutive ranges combine into the CRC of the whole, for any split (sliced downloads).
    @Test func crc32cCombineMatchesTheWholeObject() {
        var generator = SystemRandomNumberGenerator()
        let bytes = Data((0..<300_007).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let whole = CRC32C.checksum(bytes)
        for cuts in [[0], [1], [299_999], [300_007], [65_536, 131_072, 196_608], [7, 8, 100_000, 250_001]] {
            var combined = CRC32C.checksum(Data())
            var start = 0
            for end in cuts + [bytes.count] {
                let slice = bytes.subdata(in: start..<end)
                combined = CRC32C.combine(combined, CRC32C.checksum(slice), secondLength: Int64(slice.count))
                start = end
            }
            #expect(combined == whole, "cuts \(cuts)")
        }
        // "123456789" in two parts against its RFC value; an empty second part changes nothing.
        #expect(CRC32C.combine(CRC32C.checksum(Data("1234".utf8)), CRC32C.checksum(Data("56789".utf8)), secondLength: 5) == 0xE306_9283)
        #expect(CRC32C.combine(0xE306_9283, 0, secondLength: 0) == 0xE306_9283)
    }

    /// The RFC 3720 vectors (plus the descending one) through each implementation explicitly.
    @Test(arguments: [CRC32C.Implementation.hardware, .table])
    func crc32cKnownVectorsPerImplementation(_ implementation: CRC32C.Implementation) {
        let vectors: [(Data, UInt32)] = [
            (Data(repeating: 0, count: 32), 0x8A91_36AA),
            (Data(repeating: 0xFF, count: 32), 0x62A8_AB43),
            (Data((0..<32).map { UInt8($0) }), 0x46DD_794E),
            (Data((0..<32).map { UInt8(31 - $0) }), 0x113F_DB5C),
            (Data("123456789".utf8), 0xE306_9283),
            (Data(), 0),
        ]
        for (data, expected) in vectors {
            var crc = CRC32C(implementation: implementation)
            crc.update(data)
            #expect(crc.value == expected, "\(implementation) over \(data.count) bytes")
        }
    }

    #if arch(x86_64)
    /// Every x86-64 CPU since 2008 has SSE4.2; without it the hardware comparisons below would compare
    /// the table with itself.
    @Test func crc32cHardwareIsDetectedOnX86() {
        #expect(CRC32C.hardwareAvailable)
        #expect(CRC32C.defaultImplementation == .hardware)
    }
    #endif

    /// Random bytes at every alignment and many lengths (tails of 0–7 bytes, the three-way interleaved
    /// hardware path at each of its part sizes, 3 × 64 B to 3 × 8 KiB, at and around each threshold,
    /// streaming splits): both implementations agree, one-shot and continued.
    @Test func crc32cHardwareMatchesTable() {
        var generator = SystemRandomNumberGenerator()
        let pool = (0..<70_000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let thresholds: [Int] = (0..<CRC32C.partSizes).map { 3 * (CRC32C.smallestPart << $0) }
        let aroundThresholds: [Int] = thresholds.flatMap { (threshold: Int) -> [Int] in
            [threshold - 1, threshold, threshold + 1, threshold + 7, 2 * threshold - 1]
        }
        let others: [Int] = [255, 256, 257, 1_000, 4_095, 4_096, 4_097, 16_384, 16_389, 24_575, 24_576, 24_577, 49_159, 65_535, 65_533]
        let lengths: [Int] = Array(0...80) + aroundThresholds + others
        pool.withUnsafeBytes { all in
            for alignment in 0..<8 {
                for length in lengths {
                    let bytes = UnsafeRawBufferPointer(rebasing: all[alignment..<(alignment + length)])
                    var hardware = CRC32C(implementation: .hardware)
                    var table = CRC32C(implementation: .table)
                    hardware.update(bytes)
                    table.update(bytes)
                    #expect(hardware.value == table.value, "length \(length), alignment \(alignment)")

                    // Streaming: split at an odd point, continue the hardware state with the table.
                    let split = min(length, length / 3 + (alignment & 1))
                    var mixed = CRC32C(implementation: .hardware)
                    mixed.update(UnsafeRawBufferPointer(rebasing: bytes[0..<split]))
                    var rest = CRC32C(implementation: .table)
                    rest.update(UnsafeRawBufferPointer(rebasing: bytes[0..<split]))
                    mixed.update(UnsafeRawBufferPointer(rebasing: bytes[split...]))
                    rest.update(UnsafeRawBufferPointer(rebasing: bytes[split...]))
                    #expect(mixed.value == table.value && rest.value == table.value, "split \(split) of \(length)")
                }
            }
        }
    }

    // MARK: - Pipelined

    /// `count` random bytes, drawn eight at a time (debug builds are slow byte by byte).
    private func randomData(_ count: Int) -> Data {
        var generator = SystemRandomNumberGenerator()
        var words = (0..<(count / 8 + 1)).map { _ in generator.next() }
        return words.withUnsafeMutableBytes { Data($0.prefix(count)) }
    }

    /// Reference hashes computed on this thread.
    private func expectedHashes(_ data: Data) -> (String, String) {
        var crc = CRC32C(implementation: .table)
        crc.update(data)
        return (Data(Digest.md5(data)).base64EncodedString(), crc.base64)
    }

    /// Streams of several sizes fed in uneven pieces: the pipelined hasher (inline prefix or none, a
    /// backlog of one block so the producer has to wait) gives exactly the hashes of the whole.
    @Test(arguments: [0, 1, 1_000_003, 3 << 20, (5 << 20) + 17])
    func pipelinedMatchesDirect(size: Int) {
        let data = randomData(size)
        let (md5, crc) = expectedHashes(data)
        for (backlog, inline) in [(1 << 20, 0), (4 << 20, 100_000), (PipelinedChecksums.defaultBacklogBytes, PipelinedChecksums.defaultInlineBytes)] {
            let hashes = PipelinedChecksums(md5: true, backlogBytes: backlog, inlineBytes: inline)
            // 1, 8, 57, 400, ... uneven, up to ~300 KB
            forEachPiece(of: data, next: { $0 * 7 % 300_007 + 1 }) { hashes.update($0) }
            let result = hashes.finish()
            #expect(result.md5Base64 == md5, "size \(size), backlog \(backlog), inline \(inline)")
            #expect(result.crc32cBase64 == crc, "size \(size), backlog \(backlog), inline \(inline)")
            #expect(hashes.finish() == result, "finish is idempotent")
        }
    }

    /// A hasher dropped mid-stream (a transfer that failed) frees its blocks without waiting or crashing.
    @Test func pipelinedAbandonedMidStream() {
        let data = Data(repeating: 0x5A, count: (3 << 20) + 5)
        for _ in 0..<3 {
            let hashes = PipelinedChecksums(backlogBytes: 2 << 20, inlineBytes: 0)
            data.withUnsafeBytes { hashes.update($0) }
        }
        let hashes = PipelinedChecksums(md5: true, backlogBytes: 2 << 20, inlineBytes: 0)
        data.withUnsafeBytes { hashes.update($0) }
        let result = hashes.finish()
        #expect(hashes.hashedOffThread)
        #expect(result.md5Base64 == expectedHashes(data).0)
        #expect(result.crc32cBase64 == expectedHashes(data).1)
    }

    /// By default only CRC32C is computed: MD5 costs a core per ~0.8 GB/s and is paid only when asked.
    @Test func pipelinedComputesMD5OnlyWhenAsked() {
        let data = randomData((2 << 20) + 3)
        let plain = PipelinedChecksums(inlineBytes: 1000)
        data.withUnsafeBytes { plain.update($0) }
        let result = plain.finish()
        #expect(!plain.computesMD5 && !plain.hashedOffThread, "a CRC-only stream is hashed inline, without copies")
        #expect(result.md5Base64 == nil)
        #expect(result.crc32cBase64 == expectedHashes(data).1)
    }

    @Test func crc32cStreamingMatchesOneShot() {
        let data = Data((0..<10_007).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        var crc = CRC32C()
        crc.update(data.prefix(13))
        crc.update(data.dropFirst(13).prefix(4096))
        crc.update(data.dropFirst(13 + 4096))
        #expect(crc.value == CRC32C.checksum(data))
    }

    @Test func md5AndSha256KnownVectors() {
        #expect(Data(Digest.md5(Data("hello".utf8))).base64EncodedString() == "XUFAKrxLKna5cZ2REBfFkg==")
        #expect(Digest.sha256Hex(Data("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func hexOfEveryByteIsWhatPrintfGives() {
        let bytes = (0...255).map { UInt8($0) }
        #expect(Digest.hex(bytes) == bytes.map { String(format: "%02x", $0) }.joined())
        #expect(Digest.hex([UInt8]()) == "")
        #expect(Digest.sha256Hex(Data()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }
}

@Suite struct JobSpecChecksumsTests {
    @Test("a spec and a result stored before `checksums`/`verified` existed decode, and re-encode byte for byte")
    func oldSpecsAndResults() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let oldSpec = #"{"kind":"download-file","maxAttempts":5,"priority":0,"queue":"default","source":"gs:\/\/b\/x","timeoutSeconds":60}"#
        let spec = try JSONDecoder().decode(JobSpec.self, from: Data(oldSpec.utf8))
        #expect(spec.checksums == nil && !spec.wantsMD5)
        #expect(String(decoding: try encoder.encode(spec), as: UTF8.self) == oldSpec)
        let oldResult = #"{"crc32c":"AAAAAA==","md5":"XUFAKrxLKna5cZ2REBfFkg==","size":5}"#
        let result = try JSONDecoder().decode(JobResult.self, from: Data(oldResult.utf8))
        #expect(result.verified == nil)
        #expect(String(decoding: try encoder.encode(result), as: UTF8.self) == oldResult)
    }

    @Test func roundTrip() throws {
        var spec = JobSpec(kind: .downloadMemory, source: "gs://b/x")
        spec.checksums = [.md5, .crc32c]
        let json = String(decoding: try JSONEncoder().encode(spec), as: UTF8.self)
        #expect(json.contains(#""checksums":["md5","crc32c"]"#), "\(json)")
        #expect(try JSONDecoder().decode(JobSpec.self, from: Data(json.utf8)) == spec)
        #expect(spec.wantsMD5)
        let result = JobResult(size: 1, crc32c: "AAAAAA==", verified: [.crc32c])
        #expect(try JSONDecoder().decode(JobResult.self, from: try JSONEncoder().encode(result)) == result)
    }

    /// SHA-256 and MD5 against known values (FIPS 180-2 / RFC 1321 vectors and Python's hashlib for the
    /// rest), through the one-call form and the streaming one, which share the algorithms fetched once.
    @Test func digestsMatchKnownValues() {
        let big = Data((0..<(1 << 20)).map { UInt8(($0 * 7 + 3) % 251) })
        let cases: [(Data, sha256: String, md5: String)] = [
            (Data(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "d41d8cd98f00b204e9800998ecf8427e"),
            (Data("abc".utf8), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "900150983cd24fb0d6963f7d28e17f72"),
            (Data(repeating: UInt8(ascii: "a"), count: 64), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb",
             Digest.hex(Digest.md5(Data(repeating: UInt8(ascii: "a"), count: 64)))),
            (big, "1ac437f476c488acba4000af7ae89ef53f7ffbeef2e937850985f5ceb8b5ae6f", "bac259e6f14c8b831c02f85042e13805"),
        ]
        for (data, sha256, md5) in cases {
            #expect(Digest.sha256Hex(data) == sha256)
            #expect(Digest.hex(Digest.md5(data)) == md5)
            let streamed = Digest(.sha256)
            // In uneven pieces, so the streaming form is checked across update calls.
            forEachPiece(of: data, next: { $0 * 3 + 1 }) { streamed.update($0) }
            #expect(Digest.hex(streamed.finalize()) == sha256)
        }
    }

    /// The fetched algorithms are shared by every thread: many hashes at once all come out right.
    @Test func digestsFromManyThreadsAtOnce() async {
        let expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        let results = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    (0..<200).allSatisfy { _ in Digest.sha256Hex(Data("abc".utf8)) == expected }
                        && Digest.hex(Digest.md5(Data("abc".utf8))) == "900150983cd24fb0d6963f7d28e17f72"
                }
            }
            var all: [Bool] = []
            for await ok in group { all.append(ok) }
            return all
        }
        #expect(results.count == 64 && results.allSatisfy { $0 })
    }
}

/// Hands `data` to `body` in consecutive pieces: the first of one byte, each next one `next(previous)`
/// bytes long (the last one cut short).
private func forEachPiece(of data: Data, next: (Int) -> Int, _ body: (UnsafeRawBufferPointer) -> Void) {
    data.withUnsafeBytes { all in
        var offset = 0
        var piece = 1
        while offset < all.count {
            let end = min(all.count, offset + piece)
            body(UnsafeRawBufferPointer(rebasing: all[offset..<end]))
            offset = end
            piece = next(piece)
        }
    }
}
