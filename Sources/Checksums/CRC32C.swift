import CCRC32C
import Foundation

/// CRC-32C (Castagnoli), as GCS reports it, computed in a streaming fashion.
///
/// Uses the CPU's CRC32C instructions (SSE4.2 on x86-64, the CRC extension on ARMv8) when the CPU has
/// them — several GB/s, where the portable slicing-by-8 table path manages a few hundred MB/s — and the
/// table path otherwise. Both give the same values, so a checksum never depends on the machine.
public struct CRC32C: Sendable {
    /// How the CRC is computed; tests pick one to compare both.
    enum Implementation: Sendable {
        case hardware
        case table
    }

    /// Whether this CPU has CRC32C instructions (checked once, at first use).
    static let hardwareAvailable = jobctl_crc32c_hardware_available() != 0

    /// The implementation a plain `CRC32C()` uses.
    static let defaultImplementation: Implementation = hardwareAvailable ? .hardware : .table

    private static let tables: [[UInt32]] = {
        var tables = [[UInt32]](repeating: [UInt32](repeating: 0, count: 256), count: 8)
        for i in 0..<256 {
            var crc = UInt32(i)
            for _ in 0..<8 { crc = (crc & 1) != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[0][i] = crc
        }
        for i in 0..<256 {
            for t in 1..<8 { tables[t][i] = (tables[t - 1][i] >> 8) ^ tables[0][Int(tables[t - 1][i] & 0xFF)] }
        }
        return tables
    }()

    private var state: UInt32 = 0xFFFF_FFFF
    private let implementation: Implementation

    /// A CRC over no bytes yet, computed the fastest way this CPU allows.
    public init() {
        implementation = Self.defaultImplementation
    }

    /// A CRC computed one particular way; `.hardware` falls back to the table when the CPU lacks it.
    init(implementation: Implementation) {
        self.implementation = implementation == .hardware && Self.hardwareAvailable ? .hardware : .table
    }

    /// Continues the CRC over `bytes`.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.baseAddress != nil, bytes.count > 0 else { return }
        switch implementation {
        case .hardware: updateWithHardware(bytes)
        case .table: updateWithTables(bytes)
        }
    }

    /// The hardware path interleaves three parts of `smallestPart << k` bytes each, k in
    /// `0..<partSizes` (64 B to 8 KiB), the largest that fit three times into what is left: a buffer of
    /// 16 KiB (a typical piece libcurl hands a download's write callback) runs as 3 × 4 KiB, 3 × 1 KiB,
    /// 3 × 256 B and 3 × 64 B, and only the last < 192 bytes as one chain. With a single 8 KiB size such a
    /// buffer ran whole as one chain, at a third of the speed (11 % of a 512 MiB download's samples).
    static let smallestPart = 64
    /// How many part sizes there are (`smallestPart << (partSizes - 1)` is the largest: 8 KiB).
    static let partSizes = 8

    /// For each part size k, four tables of 256 entries (one per byte of the register) whose XOR shifts
    /// a CRC register past `smallestPart << k` zero bytes: multiplying by x^(8·part) modulo the polynomial
    /// is linear, so it splits into the images of the register's four bytes. Built from the 32 images of
    /// single bits, so a process pays 32 × 8 multiplications for them, not 8,192.
    private static let shiftTables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: partSizes * 4 * 256)
        for k in 0..<partSizes {
            let power = powerOfX(bytes: UInt64(smallestPart << k))
            let images = (0..<32).map { bit in multiplyModP(power, UInt32(1) << bit) }
            for byte in 0..<4 {
                let table = (k * 4 + byte) * 256
                for value in 1..<256 {
                    // The image of `value` is the image of its lowest set bit XOR that of the rest.
                    let low = value & -value
                    tables[table + value] = images[8 * byte + low.trailingZeroBitCount] ^ tables[table + (value ^ low)]
                }
            }
        }
        return tables
    }()

    /// The register `crc` shifted past `smallestPart << k` zero bytes (`shiftTables`).
    @inline(__always)
    private static func shift(_ crc: UInt32, _ tables: UnsafeBufferPointer<UInt32>, _ k: Int) -> UInt32 {
        let table = k * 1024
        return tables[table + Int(crc & 0xFF)] ^ tables[table + 256 + Int((crc >> 8) & 0xFF)]
            ^ tables[table + 512 + Int((crc >> 16) & 0xFF)] ^ tables[table + 768 + Int(crc >> 24)]
    }

    /// Three chains of `crc32` instructions at once over three consecutive parts, joined by shifting
    /// (register form: R(r, A‖B) = R(r, A)·x^(8|B|) ⊕ R(0, B)); what is left (< 192 bytes) runs as one chain.
    private mutating func updateWithHardware(_ bytes: UnsafeRawBufferPointer) {
        guard var base = bytes.baseAddress else { return }
        var remaining = bytes.count
        var crc = state
        if remaining >= 3 * Self.smallestPart {
            Self.shiftTables.withUnsafeBufferPointer { tables in
                withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 3) { crcs in
                    var k = Self.partSizes - 1
                    while remaining >= 3 * Self.smallestPart {
                        while 3 * (Self.smallestPart << k) > remaining { k -= 1 }
                        let part = Self.smallestPart << k
                        crcs[0] = crc
                        crcs[1] = 0
                        crcs[2] = 0
                        jobctl_crc32c_update3(crcs.baseAddress, base, part)
                        crc = Self.shift(Self.shift(crcs[0], tables, k) ^ crcs[1], tables, k) ^ crcs[2]
                        base += 3 * part
                        remaining -= 3 * part
                    }
                }
            }
        }
        state = jobctl_crc32c_update(crc, base, remaining)
    }

    private mutating func updateWithTables(_ bytes: UnsafeRawBufferPointer) {
        var crc = state
        let tables = Self.tables
        let t0 = tables[0], t1 = tables[1], t2 = tables[2], t3 = tables[3]
        let t4 = tables[4], t5 = tables[5], t6 = tables[6], t7 = tables[7]
        var index = 0
        let count = bytes.count
        while count - index >= 8 {
            let low = UInt32(bytes[index]) | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2]) << 16 | UInt32(bytes[index + 3]) << 24
            let one = crc ^ low
            crc = t7[Int(one & 0xFF)] ^ t6[Int((one >> 8) & 0xFF)] ^ t5[Int((one >> 16) & 0xFF)] ^ t4[Int(one >> 24)]
                ^ t3[Int(bytes[index + 4])] ^ t2[Int(bytes[index + 5])] ^ t1[Int(bytes[index + 6])] ^ t0[Int(bytes[index + 7])]
            index += 8
        }
        while index < count {
            crc = (crc >> 8) ^ t0[Int((crc ^ UInt32(bytes[index])) & 0xFF)]
            index += 1
        }
        state = crc
    }

    /// Continues the CRC over `data`.
    public mutating func update(_ data: Data) {
        data.withUnsafeBytes { update($0) }
    }

    /// The CRC of every byte so far (the running state, inverted).
    public var value: UInt32 { state ^ 0xFFFF_FFFF }

    /// Base64 of the big-endian value, as in GCS's `crc32c` field and `x-goog-hash`.
    public var base64: String {
        let v = value
        return Data([UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]).base64EncodedString()
    }

    /// The CRC of `data` in one call.
    public static func checksum(_ data: Data) -> UInt32 {
        var crc = CRC32C()
        crc.update(data)
        return crc.value
    }

    // MARK: - Combining

    /// The reflected Castagnoli polynomial.
    private static let polynomial: UInt32 = 0x82F6_3B78

    /// The CRC of two byte ranges one after the other, from each range's CRC and the second's length:
    /// what a sliced download needs to check the whole object against GCS's CRC32C from the CRCs of
    /// slices fetched in parallel. As zlib's `crc32_combine`: the first CRC is multiplied by x^(8·length)
    /// modulo the polynomial (in GF(2)), which is what appending `secondLength` zero bytes does to it,
    /// then the second is added. O(log length); no data is read.
    public static func combine(_ first: UInt32, _ second: UInt32, secondLength: Int64) -> UInt32 {
        precondition(secondLength >= 0, "CRC32C.combine with a negative length")
        return multiplyModP(powerOfX(bytes: UInt64(secondLength)), first) ^ second
    }

    /// `a · b` modulo the polynomial, bit-reflected (bit 31 is x^0).
    private static func multiplyModP(_ a: UInt32, _ b: UInt32) -> UInt32 {
        var mask: UInt32 = 1 << 31
        var product: UInt32 = 0
        var b = b
        while mask != 0 {
            if a & mask != 0 {
                product ^= b
                if a & (mask - 1) == 0 { break }
            }
            mask >>= 1
            b = b & 1 != 0 ? (b >> 1) ^ polynomial : b >> 1
        }
        return product
    }

    /// x^(2^k) modulo the polynomial for k in 0..<64.
    private static let powersOfTwoExponents: [UInt32] = {
        var table: [UInt32] = []
        var power: UInt32 = 1 << 30   // x^1
        for _ in 0..<64 {
            table.append(power)
            power = multiplyModP(power, power)
        }
        return table
    }()

    /// x^(8·bytes) modulo the polynomial.
    private static func powerOfX(bytes: UInt64) -> UInt32 {
        var result: UInt32 = 1 << 31  // x^0
        var n = bytes
        var k = 3   // 8·bytes = bytes · 2^3
        while n != 0 {
            if n & 1 != 0 { result = multiplyModP(powersOfTwoExponents[k], result) }
            n >>= 1
            k += 1
        }
        return result
    }
}
