import Foundation
import Synchronization

/// Job identifiers: 26-character Crockford base32 ULIDs (48-bit millisecond time, 80 random bits),
/// so ids sort by submission time and never collide across processes.
///
/// Ids made by one process are **monotonic**: an id made in the same millisecond as the one before it
/// (or when the clock stepped back) keeps that id's time and takes its random part plus a random step of
/// 2^59 to 2^60, so ids sort in the order they were made. A manifest's jobs, all submitted at one `now`,
/// then sort in manifest order, and the log's indexes by job id take a batch's rows side by side instead
/// of at 10,000 random places (each a page written again at every commit of a drain). The step (the
/// ULID specification's monotonic mode steps by one) keeps ids apart within their first 15 characters,
/// so a short prefix still names one job of a batch. Another process starts from its own random value,
/// so ids of two processes in one millisecond interleave without colliding.
public enum JobID {
    private static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)

    /// An id's parts: its time in milliseconds (48 bits) and its random part (80 bits: `high` holds the
    /// top 16).
    struct Parts: Equatable {
        var time: UInt64
        var high: UInt16
        var low: UInt64

        /// The id after `previous` when the clock reads `time`: in a later millisecond, that time and a
        /// fresh random part; in the same millisecond or an earlier one (a clock stepped back), the
        /// previous id's time and its random part plus `step()`. Past the random part's last value (a
        /// fresh part has its top bit clear, so a step of at most 2^60 runs out after ~2^19 ids in one
        /// millisecond), the next millisecond's time and a fresh part.
        static func next(after previous: Parts?, time: UInt64, fresh: () -> (high: UInt16, low: UInt64),
                         step: () -> UInt64) -> Parts {
            let time = time & maxTime
            if let previous, previous.time >= time {
                let (low, carry) = previous.low.addingReportingOverflow(step())
                let (high, overflow) = carry ? previous.high.addingReportingOverflow(1) : (previous.high, false)
                if !overflow { return Parts(time: previous.time, high: high, low: low) }
                let random = fresh()
                return Parts(time: min(previous.time + 1, maxTime), high: random.high, low: random.low)
            }
            let random = fresh()
            return Parts(time: time, high: random.high, low: random.low)
        }

        /// The 26 characters: 10 of time, 16 of the random part, most significant first.
        var text: String {
            String(unsafeUninitializedCapacity: 26) { buffer in
                var time = time
                for index in stride(from: 9, through: 0, by: -1) {
                    buffer[index] = alphabet[Int(time & 31)]
                    time >>= 5
                }
                // 80 bits as 16 groups of 5, from the least significant: 12 groups of `low` (60 bits),
                // one of `low`'s top 4 bits under `high`'s lowest, then `high`'s other 15 bits.
                var low = low
                for index in stride(from: 25, through: 14, by: -1) {
                    buffer[index] = alphabet[Int(low & 31)]
                    low >>= 5
                }
                var high = UInt64(high)
                buffer[13] = alphabet[Int((low & 15) | ((high & 1) << 4))]
                high >>= 1
                for index in stride(from: 12, through: 10, by: -1) {
                    buffer[index] = alphabet[Int(high & 31)]
                    high >>= 5
                }
                return 26
            }
        }
    }

    static let maxTime: UInt64 = 0xFFFF_FFFF_FFFF

    /// A new id for the current time (or `atMs`), after every id this process made before it.
    public static func generate(atMs: Int64 = Clock.nowMs()) -> String {
        JobIDGenerator.shared.next(atMs: atMs)
    }

    /// A stable id of the same shape for `name`: the same name always gives the same id (FNV-1a, 130 bits
    /// from two seeds; not a secret, just a name). A keyed folder expansion takes its batch id from its
    /// key this way, so submitting the manifest again maps to the same jobs and the same batch.
    public static func derived(from name: String) -> String {
        func fnv(_ seed: UInt64) -> UInt64 {
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ seed
            for byte in name.utf8 {
                hash ^= UInt64(byte)
                hash &*= 0x0000_0100_0000_01B3
            }
            return hash
        }
        var high = fnv(0x9E37_79B9_7F4A_7C15), low = fnv(0xC2B2_AE3D_27D4_EB4F)
        var characters: [UInt8] = []
        for index in 0..<26 {
            let source = index < 13 ? high : low
            characters.append(alphabet[Int(source & 31)])
            if index < 13 { high >>= 5 } else { low >>= 5 }
        }
        // The first character of a ULID is at most 7 (48 bits of time in 50).
        characters[0] = alphabet[Int(high & 7)]
        return String(decoding: characters, as: UTF8.self)
    }

    /// Whether `text` has the shape of a job id (accepts lowercase).
    public static func isValid(_ text: String) -> Bool {
        text.utf8.count == 26 && text.uppercased().utf8.allSatisfy { alphabet.contains($0) }
    }
}

/// Wall-clock milliseconds. The only place the model reads the clock; state machines take time as an argument.
public enum Clock {
    public static func nowMs() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }

    /// Milliseconds on the monotonic clock (since an arbitrary start): for durations, which the wall
    /// clock's steps must not stretch or shrink. One `clock_gettime`, no 128-bit arithmetic (what
    /// `ContinuousClock`'s `Duration` costs a worker's every run and commit).
    public static func monotonicMs() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000 + Int64(now.tv_nsec) / 1_000_000
    }
}

/// Makes monotonic job ids (`JobID`): each after the one before it. `JobID.generate` uses the
/// process's one generator; a test makes its own to see times and order no other test disturbs.
public final class JobIDGenerator: Sendable {
    /// The process's generator.
    public static let shared = JobIDGenerator()

    /// Steps between ids of one millisecond are 2^59 to 2^60 - 1: each changes the random part at its
    /// bit 59 or above, which the id's first 15 characters hold.
    static let stepBase: UInt64 = 1 << 59

    /// The last id made.
    private let last = Mutex<JobID.Parts?>(nil)

    public init() {}

    /// A new id for `atMs`, after every id this generator made before it.
    public func next(atMs: Int64) -> String {
        last.withLock { (last) -> JobID.Parts in
            var generator = SystemRandomNumberGenerator()
            let parts = JobID.Parts.next(after: last, time: UInt64(max(0, atMs))) {
                (UInt16(truncatingIfNeeded: generator.next()) & 0x7FFF, generator.next())
            } step: {
                JobIDGenerator.stepBase | (generator.next() & (JobIDGenerator.stepBase - 1))
            }
            last = parts
            return parts
        }.text
    }
}
