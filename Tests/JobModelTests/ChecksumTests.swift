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
}
