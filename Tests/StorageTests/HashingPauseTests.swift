import Checksums
import Foundation
import JobModel
@testable import Storage
import TestSupport
import Testing

/// A stream whose MD5 falls behind pauses its own exchange instead of holding the curl thread: the
/// engine asks the body's hashing first (`PipelinedChecksums.reserve(forNext:)`) and returns PAUSE when
/// the bytes would have to wait, then lets them through once the hashing queue has room.
@Suite("hashing that falls behind pauses its exchange, not the curl thread", .onTestThreads)
struct HashingPauseTests {
    @Test("blocks are set aside only when free, and the hashes are the same however the bytes came")
    func reservingSetsFreeBlocksAside() throws {
        let data = patternData((3 << 20) + 5, seed: 9)
        let expected = hashes(data)
        #expect(PipelinedChecksums(md5: false).reserve(forNext: 1 << 30), "CRC32C alone never waits")
        let inline = PipelinedChecksums(md5: true)
        #expect(inline.reserve(forNext: PipelinedChecksums.defaultInlineBytes), "the first MiB is hashed inline")

        let stream = PipelinedChecksums(md5: true, backlogBytes: PipelinedChecksums.blockSize, inlineBytes: 0)
        #expect(stream.reserve(forNext: PipelinedChecksums.blockSize), "one block free")
        #expect(stream.reserve(forNext: 2 * PipelinedChecksums.blockSize), "more blocks than the backlog holds: yes, and update waits as before")
        // Fed in 256 KiB pieces, each asked for first as the engine does; a refusal waits and asks again.
        var offset = 0
        var refusals = 0
        while offset < data.count {
            let count = min(256 << 10, data.count - offset)
            guard stream.reserve(forNext: count) else {
                refusals += 1
                try #require(refusals < 100_000, "the hashing queue never freed its block")
                usleep(100)
                continue
            }
            data.withUnsafeBytes { stream.update(UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + count)])) }
            offset += count
        }
        let result = stream.finish()
        #expect(result.md5Base64 == expected.md5 && result.crc32cBase64 == expected.crc32c)
    }

    /// With a backlog of one block, a block being filled holds the only permit: bytes that do not fit in
    /// it are refused, and the block is handed to the queue as it is, so that asking again succeeds once
    /// the queue has hashed it (a stream whose pieces do not fill blocks exactly paused for good before:
    /// a 30 s stall in CI).
    @Test("a half-filled block is handed over when more is asked than it holds, so asking again succeeds")
    func aHalfFilledBlockIsHandedOver() throws {
        let data = patternData((1 << 20) + (768 << 10), seed: 4)
        let expected = hashes(data)
        let stream = PipelinedChecksums(md5: true, backlogBytes: PipelinedChecksums.blockSize, inlineBytes: 0)
        let half = 512 << 10
        data.withUnsafeBytes { stream.update(UnsafeRawBufferPointer(rebasing: $0[0..<half])) }
        #expect(stream.reserve(forNext: half), "fits in the block being filled")
        #expect(!stream.reserve(forNext: half + 1), "one more byte needs a second block, and the only permit is held")
        var refusals = 0
        while !stream.reserve(forNext: data.count - half) {
            refusals += 1
            try #require(refusals < 100_000, "the half-filled block was never handed over: no permit came back")
            usleep(100)
        }
        data.withUnsafeBytes { stream.update(UnsafeRawBufferPointer(rebasing: $0[half...])) }
        let result = stream.finish()
        #expect(result.md5Base64 == expected.md5 && result.crc32cBase64 == expected.crc32c)
    }

    /// With a backlog of one block, a 32 MiB download and upload through nginx that ask for MD5 are
    /// paused for their hashing (each try counts the pauses; the loopback delivers faster than MD5
    /// hashes) and still end with the right bytes and hashes.
    @Test("an MD5 download and upload whose hashing falls behind are paused and end whole")
    func anExchangeWhoseHashingFallsBehindIsPaused() async throws {
        let fixture = try BigFileFixture("md5.bin", size: 32 << 20)
        defer { fixture.stop() }
        let (server, directory, backend, total) = (fixture.server, fixture.directory, fixture.backend, fixture.size)
        let expectedMD5 = try fileMD5(fixture.servedPath)
        var download = JobSpec(kind: .downloadFile, source: fixture.url, destination: directory.file("md5.bin"))
        download.checksums = [.md5, .crc32c]
        var upload = JobSpec(kind: .uploadFile, source: fixture.servedPath, destination: "\(server.baseURL)/up/md5.bin")
        upload.checksums = [.md5, .crc32c]

        for spec in [download, upload] {
            var paused = false
            for _ in 0..<3 where !paused {
                let before = CurlEngine.hashingPauses.load(ordering: .relaxed)
                let result = try await StreamChecksums.$backlogBytes.withValue(PipelinedChecksums.blockSize) {
                    try finished(await run(backend, spec))
                }
                #expect(result.size == total && result.md5 == expectedMD5, "\(spec.kind): \(result)")
                paused = CurlEngine.hashingPauses.load(ordering: .relaxed) > before
            }
            #expect(paused, "\(spec.kind): never paused for its hashing in three tries")
        }
        #expect(try fileMD5(directory.file("md5.bin")) == expectedMD5)
        #expect(try fileMD5(server.root + "/up/md5.bin") == expectedMD5)
    }
}
